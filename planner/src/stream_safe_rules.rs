//! DataFusion's logical rewrites that are wrong over a stream, kept to plain tables
//! ([`stream_safe`]): each is wrapped in a [`StreamSafe`] rule that leaves the plans it
//! names alone and hands every other plan to DataFusion's rule.
//!
//! - `SingleDistinctToGroupBy` ([`distinct_over_a_stream`]) turns `COUNT(DISTINCT x) …
//!   GROUP BY k` into an inner aggregation grouped by `(k, x)` under an outer one grouped by
//!   `k`. On a stream both would become Freshet's aggregation, and neither is the query:
//!   under EMIT CHANGES the outer one counts every change of the inner one (a second `'a'`
//!   counted again), with a window the outer one has none and emits only at the end of
//!   input, and a session grouped by `(k, x)` is cut per distinct value. Over a stream the
//!   plain DISTINCT aggregate stays, in one aggregation.
//! - `PushDownLimit` ([`limit_over_a_join_of_a_stream`]), under `LIMIT n`, also limits the
//!   side of an outer join whose every row appears in the output (the left of a LEFT JOIN)
//!   to `n` rows. Over a stream the limited side is no longer a stream Freshet's join can
//!   read: a limit over several source partitions merges them out of event-time order (rows
//!   then look late to the join's watermark: a LEFT JOIN at two streams returned 1 row of
//!   10), and a windowed aggregation under a limit does not become a window join (the query
//!   failed). Over a stream the LIMIT stays above the join, which ends the query once its
//!   rows have left.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::push_down_limit::PushDownLimit;
use datafusion::optimizer::single_distinct_to_groupby::SingleDistinctToGroupBy;
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use freshet_engine::StreamTable;

type Rule = Arc<dyn OptimizerRule + Send + Sync>;

/// DataFusion's rule `inner`, except on the plans `leaves_alone` names.
#[derive(Debug)]
pub struct StreamSafe {
    inner: Rule,
    leaves_alone: fn(&LogicalPlan) -> bool,
}

impl OptimizerRule for StreamSafe {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.inner.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if (self.leaves_alone)(&plan) {
            return Ok(Transformed::no(plan));
        }
        self.inner.rewrite(plan, config)
    }
}

/// An aggregation that reads a stream.
fn distinct_over_a_stream(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Aggregate(aggregate) if reads_stream(&aggregate.input))
}

/// A LIMIT right above a join that reads a stream.
fn limit_over_a_join_of_a_stream(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Limit(limit)
        if matches!(limit.input.as_ref(), LogicalPlan::Join(_)) && reads_stream(&limit.input))
}

/// Whether `plan` scans a Freshet stream.
fn reads_stream(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && source_as_provider(&scan.source).is_ok_and(|p| p.is::<StreamTable>())
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `rules` with DataFusion's `SingleDistinctToGroupBy` and `PushDownLimit` kept off the
/// plans over streams they would get wrong (see the module documentation).
pub(crate) fn stream_safe(rules: Vec<Rule>) -> Vec<Rule> {
    let distinct = SingleDistinctToGroupBy::new().name().to_string();
    let limit = PushDownLimit::new().name().to_string();
    rules
        .into_iter()
        .map(|rule| -> Rule {
            let leaves_alone = if rule.name() == distinct {
                distinct_over_a_stream
            } else if rule.name() == limit {
                limit_over_a_join_of_a_stream
            } else {
                return rule;
            };
            Arc::new(StreamSafe {
                inner: rule,
                leaves_alone,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::test_support::plan;

    #[test]
    fn a_distinct_aggregate_over_a_stream_stays_one_aggregation() {
        let plan = plan(
            "SELECT symbol, COUNT(DISTINCT trader_id) FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' SECOND)",
            1,
            1,
        )
        .unwrap();
        assert_eq!(plan.matches("WindowAggregateExec").count(), 1, "{plan}");
        assert!(plan.contains("count(DISTINCT"), "{plan}");
    }

    #[test]
    fn a_limit_over_a_join_of_streams_stays_above_the_join() {
        let plan = plan(
            "SELECT a.symbol FROM market_data a LEFT JOIN market_data b ON a.symbol = b.symbol \
             AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND AND a.trade_time LIMIT 10",
            2,
            1,
        )
        .unwrap();
        let join = plan.find("IntervalJoinExec").expect("an interval join");
        assert!(!plan[join..].contains("LimitExec"), "{plan}");
    }
}
