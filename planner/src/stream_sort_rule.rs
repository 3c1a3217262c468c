//! [`StreamSortRule`]: an ORDER BY over an unbounded stream whose first key is an event time,
//! ascending, becomes Freshet's [`StreamSortExec`], which answers as the watermark moves.
//!
//! DataFusion sorts each partition and merges them (`SortPreservingMergeExec` over a
//! `SortExec`), or sorts one gathered partition; its `SortExec` waits for the end of its
//! input, so over an endless stream the unbounded-input check refuses it. Where the first ORDER BY key
//! is a column with a watermark — a stream's declared event time, or the window start of a
//! windowed EMIT FINAL aggregation, which publishes its progress — the rule puts a fan-in
//! [`StreamExchangeExec`] carrying that watermark under a [`StreamSortExec`] instead; a LIMIT
//! folded into the sort stays above it as a `GlobalLimitExec`. Sorts over bounded input stay
//! DataFusion's (the batch answer at the end), except in a checkpointed run
//! ([`stream_sorts_for_checkpoints`]): DataFusion's sort holds every row to the end, which
//! no checkpoint can keep, where the stream sort's held rows are its checkpointed state.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::limit::GlobalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::{StreamExchangeExec, StreamSortExec};
use freshet_partitioner::RoutingStrategy;

use crate::stream_inputs::{event_time, reads_stream};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamSortRule;

impl PhysicalOptimizerRule for StreamSortRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| match stream_sort(&node, false)? {
            Some(sorted) => Ok(Transformed::new(
                sorted,
                true,
                datafusion::common::tree_node::TreeNodeRecursion::Jump,
            )),
            None => Ok(Transformed::no(node)),
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetStreamSort"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with DataFusion's sorts of streams by an event time first, over bounded replays
/// too, as Freshet's stream sorts, and the merges of their one partition dropped: the plan a
/// checkpointed run runs. Like windows, the stream sort drops records that come after the
/// watermark passed their time.
pub fn stream_sorts_for_checkpoints(
    plan: &Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    Arc::clone(plan)
        .transform_up(|node| {
            if let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>()
                && sorted_by_stream_sort(merge.input())
            {
                let input = Arc::clone(merge.input());
                return Ok(Transformed::yes(match merge.fetch() {
                    Some(fetch) => Arc::new(GlobalLimitExec::new(input, 0, Some(fetch))),
                    None => input,
                }));
            }
            Ok(match stream_sort(&node, true)? {
                Some(sorted) => Transformed::yes(sorted),
                None => Transformed::no(node),
            })
        })
        .map(|transformed| transformed.data)
}

/// Whether `node` is a stream sort's one partition, through projections.
fn sorted_by_stream_sort(node: &Arc<dyn ExecutionPlan>) -> bool {
    let mut node = node;
    while let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        node = projection.input();
    }
    node.downcast_ref::<StreamSortExec>().is_some()
}

/// `node` as a streaming sort (one partition), if it is DataFusion's sort of an unbounded
/// stream (or of any stream, with `bounded_too`) by an event time first.
fn stream_sort(
    node: &Arc<dyn ExecutionPlan>,
    bounded_too: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // (A merge of sorted partitions above it then merges the one partition it leaves.)
    let Some(sort) = node.downcast_ref::<SortExec>() else {
        return Ok(None);
    };
    let mut input = Arc::clone(sort.input());
    if let Some(gather) = input.downcast_ref::<CoalescePartitionsExec>() {
        input = Arc::clone(gather.input());
    }
    if !(bounded_too || input.boundedness().is_unbounded()) || !reads_stream(&input)? {
        return Ok(None);
    }
    let ordering = sort.expr().clone();
    let first = ordering.first();
    let Some(column) = first.expr.downcast_ref::<Column>() else {
        return Ok(None);
    };
    if first.options.descending {
        return Ok(None);
    }
    let time = Arc::new(column.clone()) as Arc<dyn datafusion::physical_expr::PhysicalExpr>;
    // A column without a watermark keeps DataFusion's sort (and its refusal).
    let Ok(event_time) = event_time(&input, &time) else {
        return Ok(None);
    };
    let exchange = StreamExchangeExec::try_new(input, RoutingStrategy::FanIn, 1, Some(event_time))?
        .with_reason("an ORDER BY's partitions, merged in event-time order");
    let sorted: Arc<dyn ExecutionPlan> =
        Arc::new(StreamSortExec::try_new(Arc::new(exchange), ordering)?);
    Ok(Some(match sort.fetch() {
        Some(fetch) => Arc::new(GlobalLimitExec::new(sorted, 0, Some(fetch))),
        None => sorted,
    }))
}
