//! What a query across workers did, counted where it ran: the records each worker read and
//! the records its operators dropped, reported as metrics of the Freshet nodes of its
//! stages, which datafusion-distributed brings back to the coordinator.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use freshet_engine::StreamSourceExec;
use freshet_engine::join::LookupJoinExec;

/// The metric of the records the sources read.
pub const RECORDS_READ: &str = "records_read";
/// The metrics of the records operators dropped, as one process names them.
pub const DROPPED: [&str; 2] = ["late_records_dropped", "null_event_time_dropped"];

/// The metric of the Arrow bytes of the wire batches the exchanges sent.
pub const WIRE_BYTES: &str = "wire_bytes";

/// The counts of `plans` (one task's part each, with the task's number), and `wire_bytes`,
/// as a metrics set. A lookup join's table, which every worker reads whole, counts on task 0
/// only: the records a query read are those one process reads.
pub(super) fn metrics_of<'a>(
    plans: impl Iterator<Item = (usize, &'a Arc<dyn ExecutionPlan>)>,
    wire_bytes: usize,
) -> MetricsSet {
    let mut counts = [0usize; 1 + DROPPED.len()];
    for (task, plan) in plans {
        count(plan, task == 0, &mut counts);
    }
    let set = ExecutionPlanMetricsSet::new();
    for (name, count) in std::iter::once(RECORDS_READ).chain(DROPPED).zip(counts) {
        MetricBuilder::new(&set).global_counter(name).add(count);
    }
    MetricBuilder::new(&set)
        .global_counter(WIRE_BYTES)
        .add(wire_bytes);
    set.clone_inner()
}

/// Adds the records `node` and the nodes below it read and dropped to `counts`, a lookup
/// join's table only if `with_tables`.
fn count(node: &Arc<dyn ExecutionPlan>, with_tables: bool, counts: &mut [usize]) {
    if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
        counts[0] += source.records_read();
    }
    if let Some(metrics) = node.metrics() {
        for (count, name) in counts[1..].iter_mut().zip(DROPPED) {
            *count += metrics.sum_by_name(name).map_or(0, |v| v.as_usize());
        }
    }
    let children = match node.downcast_ref::<LookupJoinExec>() {
        Some(lookup) if !with_tables => vec![lookup.stream()],
        _ => node.children(),
    };
    for child in children {
        count(child, with_tables, counts);
    }
}

/// The sum of metric `name` over `plan`'s nodes, stages included.
pub(super) fn total(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let mut total = 0;
    let _ = plan.apply(|node| {
        if let Some(metrics) = node.metrics() {
            total += metrics.sum_by_name(name).map_or(0, |v| v.as_usize());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    total
}
