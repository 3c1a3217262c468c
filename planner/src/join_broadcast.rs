//! Which side of a stream join, if any, is sent whole to every stream while the other stays
//! where it is: a broadcast join of a small side.
//!
//! An interval join hashes both sides on its keys so that equal keys meet. When the keys
//! are a window's bounds and one side holds one row per window (a windowed aggregation
//! whose keys are all functions of its window: Nexmark q5's maximum count per window), that
//! side is small, and hashing the other side — every row of a windowed aggregation by
//! auction, say — is most of the join's routing. Sending the small side to every stream
//! and leaving the other side in its streams meets every pair once: each row of the large
//! side lives in one stream and sees every row of the small side there.
//!
//! The large side keeps its streams (sticky), so each stream judges it against that
//! stream's own watermark. That is safe only where no row of it can be late: its join time
//! is a time its operator publishes its progress in (a window aggregation's window start,
//! a join's event time), behind which that operator emits nothing. A side read from a
//! source is never left in place: its rows are judged against the merged watermark of
//! every source partition at any number of streams. And the small side's rows may go out
//! only in pairs — an inner join, an outer or semi or anti join that preserves or keeps the
//! large side — or every stream would emit them.

use std::sync::Arc;

use datafusion::common::{JoinSide, JoinType};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::aggregate::{AggregateEmit, WindowAggregateExec};

use crate::aggregate_rule::one_group_per_window;
use crate::stream_inputs::{TimeOrigin, event_time_columns};

/// The side to broadcast, with the other side left in its streams, for a join of type
/// `join_type` on `streams` streams whose time columns are `left_time` and `right_time`.
pub(crate) fn broadcast_side(
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
    (left_time, right_time): (usize, usize),
    join_type: JoinType,
    streams: usize,
) -> Option<JoinSide> {
    if streams <= 1 {
        return None;
    }
    let stays = |plan: &Arc<dyn ExecutionPlan>, time: usize| {
        plan.output_partitioning().partition_count() == streams
            && event_time_columns(plan)
                .iter()
                .any(|(column, origin)| *column == time && *origin == TimeOrigin::Published)
    };
    let right_broadcastable = matches!(
        join_type,
        JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
    );
    let left_broadcastable = matches!(
        join_type,
        JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
    );
    if right_broadcastable && one_row_per_window(right) && stays(left, left_time) {
        return Some(JoinSide::Right);
    }
    if left_broadcastable && one_row_per_window(left) && stays(right, right_time) {
        return Some(JoinSide::Left);
    }
    None
}

/// Whether `plan`, through projections, is a windowed aggregation emitting final rows
/// whose keys are all functions of its window (or that has no keys): one row per window.
fn one_row_per_window(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut node = plan;
    while let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        node = projection.input();
    }
    let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() else {
        return false;
    };
    let spec = aggregate.spec();
    let Some(window) = &spec.window else {
        return false;
    };
    let keys = spec.key_exprs();
    aggregate.emit() == AggregateEmit::Final
        && (keys.is_empty() || one_group_per_window(aggregate.exchange().input(), &keys, window))
}
