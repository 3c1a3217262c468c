//! [`StreamSafeSingleDistinct`]: DataFusion's `SingleDistinctToGroupBy`, except on
//! aggregations that read a stream.
//!
//! That rewrite turns `COUNT(DISTINCT x) … GROUP BY k` into an inner aggregation grouped by
//! `(k, x)` under an outer one grouped by `k`. On a stream both would become Freshet's
//! aggregation, and neither is the query: under EMIT CHANGES the outer one counts every change
//! of the inner one (a second `'a'` counted again), with a window the outer one has none and
//! emits only at the end of input, and a session grouped by `(k, x)` is cut per distinct
//! value. Over a stream the plain DISTINCT aggregate stays, in one aggregation; over plain
//! tables DataFusion's rewrite applies as usual.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::push_down_limit::PushDownLimit;
use datafusion::optimizer::single_distinct_to_groupby::SingleDistinctToGroupBy;
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use freshet_engine::StreamTable;

use crate::stream_limit::StreamSafePushDownLimit;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamSafeSingleDistinct {
    inner: SingleDistinctToGroupBy,
}

impl OptimizerRule for StreamSafeSingleDistinct {
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
        match &plan {
            LogicalPlan::Aggregate(aggregate) if reads_stream(&aggregate.input) => {
                Ok(Transformed::no(plan))
            }
            _ => self.inner.rewrite(plan, config),
        }
    }
}

/// Whether `plan` scans a Freshet stream.
pub(crate) fn reads_stream(plan: &LogicalPlan) -> bool {
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

/// `rules` with DataFusion's `SingleDistinctToGroupBy` and `PushDownLimit` replaced by the
/// stream-safe ones (this module's and [`StreamSafePushDownLimit`]).
pub(crate) fn stream_safe(
    rules: Vec<Arc<dyn OptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    let distinct = SingleDistinctToGroupBy::new().name().to_string();
    let limit = PushDownLimit::new().name().to_string();
    rules
        .into_iter()
        .map(|rule| -> Arc<dyn OptimizerRule + Send + Sync> {
            if rule.name() == distinct {
                Arc::new(StreamSafeSingleDistinct::default())
            } else if rule.name() == limit {
                Arc::new(StreamSafePushDownLimit::default())
            } else {
                rule
            }
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
}
