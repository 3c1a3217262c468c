//! [`LookupJoinRule`]: a stream joined to a bounded table probes a hash table built once from
//! the table.
//!
//! A bounded table is a plain table, or a bounded stream without an event time however it
//! was registered (`--table dim=dim.csv`), joined to a stream of events (one with an event
//! time, or unbounded).
//!
//! DataFusion picks a hash join's build side from statistics, which a stream has none of: as
//! written, `stream JOIN table` builds from the stream — every record held in a hash table,
//! and the stream shuffled by key. The rule makes the table the build side, loaded once and
//! shared by every stream (`PartitionMode::CollectLeft`), and the stream the probe side,
//! read in its own partitions without a shuffle and without state per record. A join whose
//! table side must emit its unmatched rows (a RIGHT join of `stream RIGHT JOIN table` kind)
//! answers them when the stream ends.
//!
//! [`LookupProbeRule`], the last of Freshet's rules, then puts Freshet's [`LookupJoinExec`] in
//! place of such a hash join where it is a plain lookup (equal keys only, null keys matching
//! nothing, no other condition, only the stream's rows kept unmatched): it probes each stream
//! batch as it comes and passes the stream's columns on without copying them. It runs last
//! so that the rules before it trace event times and partitions through one kind of join.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, Result, plan_err};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::utils::{
    JoinFilter, reorder_output_after_swap, swap_join_projection,
};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use freshet_engine::join::LookupJoinExec;

use crate::stream_inputs::{below_exchanges, reads_event_stream};
use crate::unbounded_check::stream_names;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct LookupJoinRule;

impl PhysicalOptimizerRule for LookupJoinRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_each(plan, lookup_join)
    }

    fn name(&self) -> &str {
        "FreshetLookupJoin"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` as a lookup of a stream into a bounded table, if it is a hash join of the two that
/// is not one already.
fn lookup_join(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else {
        return Ok(None);
    };
    let (left, right) = (below_exchanges(join.left()), below_exchanges(join.right()));
    let (left_stream, right_stream) = (reads_event_stream(left)?, reads_event_stream(right)?);
    let table = match (left_stream, right_stream) {
        (true, false) => right,
        (false, true) => left,
        _ => return Ok(None),
    };
    if table.boundedness().is_unbounded() {
        return Ok(None);
    }
    if join.null_aware {
        // NOT IN (subquery): DataFusion's null-aware anti join keeps its first input (here
        // the stream) as the side it collects, and answers at the end of the input.
        let stream = if left_stream { left } else { right };
        if stream.boundedness().is_unbounded() {
            return plan_err!(
                "NOT IN (subquery) over the unbounded stream {} is not supported: write \
                 NOT EXISTS (SELECT 1 FROM … WHERE key = stream.key), which looks each record \
                 up as it comes (it differs from NOT IN only where a key is NULL: NOT IN keeps \
                 no row when the subquery has a NULL key, nor a row whose key is NULL)",
                stream_names(stream)
            );
        }
        return Ok(None);
    }
    let build = |table: &Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
        if table.output_partitioning().partition_count() > 1 {
            Arc::new(CoalescePartitionsExec::new(Arc::clone(table)))
        } else {
            Arc::clone(table)
        }
    };
    if right_stream {
        if *join.partition_mode() == PartitionMode::CollectLeft {
            return Ok(None);
        }
        let lookup = join
            .builder()
            .reset_state()
            .with_new_children(vec![build(left), Arc::clone(right)])?
            .with_partition_mode(PartitionMode::CollectLeft)
            .recompute_properties()
            .build_exec()?;
        return Ok(Some(lookup));
    }
    // The stream is the build side: swap the inputs, as DataFusion's `swap_inputs` does.
    let swapped = join
        .builder()
        .reset_state()
        .with_type(join.join_type().swap())
        .with_new_children(vec![build(right), Arc::clone(left)])?
        .with_on(
            join.on()
                .iter()
                .map(|(l, r)| (Arc::clone(r), Arc::clone(l)))
                .collect(),
        )
        .with_filter(join.filter().map(JoinFilter::swap))
        .with_projection(swap_join_projection(
            join.left().schema().fields().len(),
            join.right().schema().fields().len(),
            join.projection.as_deref(),
            join.join_type(),
        ))
        .with_partition_mode(PartitionMode::CollectLeft)
        .recompute_properties()
        .build_exec()?;
    let keeps_columns = matches!(
        join.join_type(),
        JoinType::LeftSemi
            | JoinType::RightSemi
            | JoinType::LeftAnti
            | JoinType::RightAnti
            | JoinType::LeftMark
            | JoinType::RightMark
    ) || join.projection.is_some();
    if keeps_columns {
        return Ok(Some(swapped));
    }
    Ok(Some(reorder_output_after_swap(
        swapped,
        &join.left().schema(),
        &join.right().schema(),
    )?))
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct LookupProbeRule;

impl PhysicalOptimizerRule for LookupProbeRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_each(plan, lookup_probe)
    }

    fn name(&self) -> &str {
        "FreshetLookupProbe"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` as Freshet's lookup, if it is a hash join of a bounded table (its first input) and
/// a stream that [`LookupJoinExec`] runs.
fn lookup_probe(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else {
        return Ok(None);
    };
    if !reads_event_stream(join.right())?
        || reads_event_stream(join.left())?
        || join.left().boundedness().is_unbounded()
    {
        return Ok(None);
    }
    Ok(LookupJoinExec::of_hash_join(join)?.map(|probe| Arc::new(probe) as Arc<dyn ExecutionPlan>))
}

/// A node's replacement, if it has one.
type Replacement = fn(&Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>>;

/// `plan` with each node that `replacement` gives a replacement for replaced, bottom up.
fn replace_each(
    plan: Arc<dyn ExecutionPlan>,
    replacement: Replacement,
) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| match replacement(&node)? {
            Some(replaced) => Ok(Transformed::yes(replaced)),
            None => Ok(Transformed::no(node)),
        })?
        .data)
}
