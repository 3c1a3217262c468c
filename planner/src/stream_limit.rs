//! [`StreamSafePushDownLimit`]: DataFusion's `PushDownLimit`, except into the inputs of a
//! join that reads a stream.
//!
//! Under `LIMIT n`, that rule also limits the side of an outer join whose every row appears
//! in the output (the left of a LEFT JOIN) to `n` rows. Over a stream the limited side is no
//! longer a stream Freshet's join can read: a limit over several source partitions merges
//! them out of event-time order (so rows look late to the join's watermark, and a LEFT
//! JOIN at two streams returned 1 row of 10), and a windowed aggregation under a limit does
//! not become a window join (the query failed). Over a stream the LIMIT stays above the
//! join, which ends the query once its rows have left; everywhere else DataFusion's rule
//! applies as usual.

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::push_down_limit::PushDownLimit;
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

use crate::stream_distinct::reads_stream;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamSafePushDownLimit {
    inner: PushDownLimit,
}

impl OptimizerRule for StreamSafePushDownLimit {
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
        if let LogicalPlan::Limit(limit) = &plan
            && matches!(limit.input.as_ref(), LogicalPlan::Join(_))
            && reads_stream(&limit.input)
        {
            return Ok(Transformed::no(plan));
        }
        self.inner.rewrite(plan, config)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::plan;

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
