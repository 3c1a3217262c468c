//! [`KeepLimitsRule`]: a LIMIT that DataFusion folded into an operator over a stream stays a
//! LIMIT when Freshet replaces that operator.
//!
//! DataFusion's `LimitPushdown` moves a LIMIT into the operator below it when that operator
//! can stop by itself (its `fetch`): a filter, a join, a merge of partitions. Freshet's rules
//! replace several of those with operators of their own that have no `fetch`, so the LIMIT
//! would be lost: `WHERE price > 100 LIMIT 5` at one stream returned every passing row.
//! Running before them, this rule takes each such fetch back out into a `LocalLimitExec`
//! right above its operator. The rows are the same: a fetch limits each output partition of
//! its operator, as a `LocalLimitExec` does; the fetch of an operator with one output
//! partition is the whole query's, and becomes a `GlobalLimitExec`.
//!
//! A LIMIT over a stream read as several source partitions gathers them with DataFusion's
//! `CoalescePartitionsExec`, in whatever order they come: a windowed aggregation above
//! would see records out of event-time order and drop some as late. Where the stream has an
//! event time, the gather becomes Freshet's fan-in exchange, which merges the partitions in
//! event-time order.
//!
//! A sort keeps its fetch (a top-k sort is DataFusion's, which Freshet does not replace), and
//! so does a scan below a stream's source.
//!
//! DataFusion's `LimitPushPastWindows` is kept off plans that read a stream
//! ([`StreamSafeLimitPastWindows`]): under `LIMIT n` above a window function it makes the sort
//! below the window keep only the first `n` rows (plus the frame's following rows) in the
//! window's order, which are the rows a batch plan returns first. A streaming plan returns
//! rows as they are computed, not in that order: its first rows were computed over a
//! partition cut short (an `AVG` over a frame with following rows came out wrong).

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::limit_pushdown_past_window::LimitPushPastWindows;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::sorts::sort::SortExec;
use freshet_engine::{StreamExchangeExec, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

use crate::stateless_rule::{any_node, is};
use crate::stream_inputs::stream_event_time;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct KeepLimitsRule;

impl PhysicalOptimizerRule for KeepLimitsRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(fetch) = node.fetch() else {
                return Ok(Transformed::no(node));
            };
            let keeps_its_fetch = is::<SortExec>(&node)
                || is::<LocalLimitExec>(&node)
                || is::<GlobalLimitExec>(&node)
                || !node
                    .children()
                    .iter()
                    .any(|child| any_node(child, is::<StreamSourceExec>));
            if keeps_its_fetch {
                return Ok(Transformed::no(node));
            }
            let Some(unlimited) = node.with_fetch(None) else {
                return Ok(Transformed::no(node));
            };
            // A fetch over one output partition limits the whole result: a global limit,
            // which stays one when a rule after this one spreads the operator over several
            // partitions (a lookup probing each source partition of its stream).
            if node.output_partitioning().partition_count() == 1 {
                return Ok(Transformed::yes(Arc::new(GlobalLimitExec::new(
                    unlimited,
                    0,
                    Some(fetch),
                ))));
            }
            Ok(Transformed::yes(Arc::new(LocalLimitExec::new(
                unlimited, fetch,
            ))))
        })?
        .data
        .transform_up(|node| {
            Ok(match gather_in_event_time_order(&node)? {
                Some(exchange) => Transformed::yes(exchange),
                None => Transformed::no(node),
            })
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetKeepLimits"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Freshet's fan-in exchange, merging in event-time order, in place of `node` when it is a
/// `CoalescePartitionsExec` gathering a limit's source partitions of a stream with an event
/// time (see the module documentation).
fn gather_in_event_time_order(
    node: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if !is::<CoalescePartitionsExec>(node) {
        return Ok(None);
    }
    let children = node.children();
    let [input] = children.as_slice() else {
        return Ok(None);
    };
    let Some(limit) = input.downcast_ref::<LocalLimitExec>() else {
        return Ok(None);
    };
    let stream = limit.input();
    if input.output_partitioning().partition_count() < 2
        || !any_node(stream, is::<StreamSourceExec>)
    {
        return Ok(None);
    }
    // A time the exchange cannot read its watermark from keeps DataFusion's gather.
    let Some(event_time) = stream_event_time(stream) else {
        return Ok(None);
    };
    let exchange = StreamExchangeExec::try_new(
        Arc::clone(*input),
        RoutingStrategy::FanIn,
        1,
        Some(event_time),
    )?
    .with_reason("a limit's source partitions, merged in event-time order");
    Ok(Some(Arc::new(exchange)))
}

/// DataFusion's `LimitPushPastWindows`, on plans that read no stream (see the module
/// documentation).
#[derive(Debug, Default)]
pub struct StreamSafeLimitPastWindows {
    inner: LimitPushPastWindows,
}

impl PhysicalOptimizerRule for StreamSafeLimitPastWindows {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if any_node(&plan, is::<StreamSourceExec>) {
            return Ok(plan);
        }
        self.inner.optimize(plan, config)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_check(&self) -> bool {
        self.inner.schema_check()
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{operators, plan};

    #[test]
    fn a_limit_folded_into_a_filter_stays_a_limit() {
        let plan = plan(
            "SELECT symbol FROM market_data WHERE price > 100 LIMIT 5",
            1,
            1,
        )
        .unwrap();
        let operators = operators(&plan);
        // One stream: the filter's one output partition is the whole result.
        assert!(
            operators.contains(&"GlobalLimitExec") && operators.contains(&"StreamFilterExec"),
            "{operators:?}"
        );
    }

    #[test]
    fn a_limit_above_window_functions_over_a_stream_cuts_no_partition() {
        let plan = plan(
            "SELECT symbol, AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time \
             ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS a FROM market_data LIMIT 10",
            2,
            1,
        )
        .unwrap();
        assert!(!plan.contains("TopK"), "{plan}");
    }
}
