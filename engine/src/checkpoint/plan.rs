//! Which plans a checkpoint can cut, and where the sink learns that an output partition has
//! passed a barrier.
//!
//! Barriers are replay positions, so every source must be a replay of files read as fast as
//! it goes, every exchange must read it in replay order, and every stateful operator must be
//! able to write its state. The sink reads each output partition's progress from the
//! operator at its top (through stateless projections and filters): a stateful operator's
//! passed barriers, or the positions of the source partition that output partition reads.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, plan_err};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use super::{Barrier, PassedBarriers};
use crate::aggregate::{ChangelogAggregateExec, WindowAggregateExec};
use crate::exchange::StreamExchangeExec;
use crate::filter::StreamFilterExec;
use crate::join::{IntervalJoinExec, LookupJoinExec};
use crate::over::{ChangelogOverExec, OverWindowExec, TopNExec};
use crate::progress::PartitionProgress;
use crate::sort::StreamSortExec;
use crate::source::StreamSourceExec;

/// How far an output partition has carried barriers (see the module documentation).
#[derive(Debug, Clone)]
pub enum BarrierProbe {
    /// A stateful operator's record of the barriers it passed on.
    Operator(Arc<PassedBarriers>),
    /// The replay positions of the source partition each output partition reads.
    Source(Arc<PartitionProgress>),
}

impl BarrierProbe {
    /// Whether output partition `partition` has passed `barrier`, as of the batch it last
    /// handed out.
    pub fn passed(&self, partition: usize, barrier: Barrier) -> bool {
        match self {
            Self::Operator(passed) => passed.passed(partition) >= barrier.epoch,
            Self::Source(positions) => positions
                .newest(partition)
                .is_some_and(|position| position >= barrier.position),
        }
    }
}

/// Where the sink of `plan` reads its barriers; an error naming what a checkpoint cannot cut.
pub fn barrier_probe(plan: &Arc<dyn ExecutionPlan>) -> Result<BarrierProbe> {
    // Sources first (no other change helps a query whose streams cannot be cut), then the
    // operators, then the exchanges (an operator that cannot be cut often also reads an
    // exchange that cannot: the operator is the news).
    let mut refusal = None;
    let passes: [NodeKind; 3] = [is_source, is_operator, is_exchange];
    let tables: Vec<usize> = lookup_tables(plan).iter().map(address).collect();
    for pass in passes {
        plan.apply(|node| {
            if refusal.is_none() && pass(node) && !tables.contains(&address(node)) {
                refusal = refusal_of(node)?;
            }
            // Below a source is its reader, which the source seeks.
            Ok(if is_source(node) {
                TreeNodeRecursion::Jump
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
    }
    if let Some(refusal) = refusal {
        return plan_err!("checkpoints {refusal}");
    }
    probe_below(plan).or_else(|node| {
        plan_err!(
            "checkpoints do not support a query whose output is read from {} yet",
            user_term(node.name())
        )
    })
}

/// Where the barriers passed by the partitions of `node` are recorded: at the stateful
/// operator or source partitions it reads through filters and projections, as many as its
/// own. Otherwise the node where the search stopped.
pub fn probe_below(
    node: &Arc<dyn ExecutionPlan>,
) -> std::result::Result<BarrierProbe, &Arc<dyn ExecutionPlan>> {
    let outputs = node.output_partitioning().partition_count();
    let mut node = node;
    loop {
        if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(
                aggregate.passed_barriers(),
            )));
        }
        if let Some(top_n) = node.downcast_ref::<TopNExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(top_n.passed_barriers())));
        }
        if let Some(join) = node.downcast_ref::<IntervalJoinExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(join.passed_barriers())));
        }
        if let Some(over) = node.downcast_ref::<OverWindowExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(over.passed_barriers())));
        }
        if let Some(aggregate) = node.downcast_ref::<ChangelogAggregateExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(
                aggregate.passed_barriers(),
            )));
        }
        if let Some(over) = node.downcast_ref::<ChangelogOverExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(over.passed_barriers())));
        }
        if let Some(sort) = node.downcast_ref::<StreamSortExec>() {
            return Ok(BarrierProbe::Operator(Arc::clone(sort.passed_barriers())));
        }
        if let Some(source) = node.downcast_ref::<StreamSourceExec>()
            && let Some(positions) = source.positions()
            && positions.partitions() == outputs
        {
            return Ok(BarrierProbe::Source(Arc::clone(positions)));
        }
        node = if let Some(filter) = node.downcast_ref::<StreamFilterExec>() {
            filter.input()
        } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            projection.input()
        } else if let Some(lookup) = node.downcast_ref::<LookupJoinExec>() {
            lookup.stream()
        } else {
            return Err(node);
        };
    }
}

/// Every node of the tables that lookups in `plan` read: each run reads them whole, so they
/// need no barriers, positions or state.
pub fn lookup_tables(plan: &Arc<dyn ExecutionPlan>) -> Vec<Arc<dyn ExecutionPlan>> {
    let mut tables = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(lookup) = node.downcast_ref::<LookupJoinExec>() {
            let _ = lookup.table().apply(|table_node| {
                tables.push(Arc::clone(table_node));
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    tables
}

fn address(node: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(node) as *const () as usize
}

/// A test of which kind of node a plan node is.
type NodeKind = fn(&Arc<dyn ExecutionPlan>) -> bool;

/// What a user calls the operator `name`: its kind, and one of them.
fn user_terms(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "OverWindowExec" | "ChangelogOverExec" | "BoundedWindowAggExec" | "WindowAggExec" => {
            ("window functions (OVER)", "a window function (OVER)")
        }
        "IntervalJoinExec" | "HashJoinExec" | "SymmetricHashJoinExec" | "NestedLoopJoinExec" => {
            ("joins", "a join")
        }
        "LookupJoinExec" => ("lookups into tables", "a lookup into a table"),
        "ChangelogAggregateExec" => (
            "an aggregation over another aggregation's changelog",
            "an aggregation over a changelog",
        ),
        "WindowAggregateExec" | "AggregateExec" => ("aggregations", "an aggregation"),
        "TopNExec" => ("top-N and de-duplication", "a top-N or de-duplication"),
        "StreamSortExec" | "SortExec" | "SortPreservingMergeExec" => ("ORDER BY", "an ORDER BY"),
        "LocalLimitExec" | "GlobalLimitExec" => ("LIMIT", "a LIMIT"),
        "UnionExec" | "InterleaveExec" => ("UNION", "a UNION"),
        _ => return None,
    })
}

/// The kind of operator `name`, as a user calls it.
fn user_term(name: &str) -> String {
    user_terms(name).map_or_else(
        || format!("{name} (a part of this query's plan)"),
        |(kind, _)| kind.to_string(),
    )
}

/// One operator `name`, as a user calls it.
fn operator_term(name: &str) -> String {
    user_terms(name).map_or_else(
        || format!("{name} (a part of this query's plan)"),
        |(_, one)| one.to_string(),
    )
}

/// The stateful operator an exchange reads, through filters and projections, if it reads
/// one rather than a source.
fn operator_below(exchange: &StreamExchangeExec) -> Option<&Arc<dyn ExecutionPlan>> {
    let mut node = exchange.children().into_iter().next()?;
    loop {
        if is_source(node) || is_exchange(node) {
            return None;
        }
        node = if let Some(filter) = node.downcast_ref::<StreamFilterExec>() {
            filter.input()
        } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            projection.input()
        } else {
            return Some(node);
        };
    }
}

fn is_source(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<StreamSourceExec>().is_some()
}

fn is_exchange(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<StreamExchangeExec>().is_some()
}

fn is_operator(node: &Arc<dyn ExecutionPlan>) -> bool {
    !is_source(node) && !is_exchange(node)
}

/// Why a checkpoint cannot cut through `node`, if it cannot.
fn refusal_of(node: &Arc<dyn ExecutionPlan>) -> Result<Option<String>> {
    if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
        // Replays of files, generators and dealt in-memory batches, paced or not, have
        // positions; live streams and partitions a user gave have none.
        return Ok(source.positions().is_none().then(|| {
            format!(
                "need every stream to be a replay of files (Parquet, CSV, Arrow or JSON lines), of in-memory batches or of a generator, paced or not: stream '{}' is not (a live stream, or in-memory partitions with no order across them)",
                source.table()
            )
        }));
    }
    if let Some(exchange) = node.downcast_ref::<StreamExchangeExec>() {
        if exchange.carries_barriers()? {
            return Ok(None);
        }
        return Ok(Some(match operator_below(exchange) {
            Some(operator) => format!(
                "do not support an operator over the output of {} yet",
                operator_term(operator.name())
            ),
            None => "need every exchange to read its replay in file order (the hash strategy; not two_phase, round_robin, sticky or fan_in)".to_string(),
        }));
    }
    if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() {
        return Ok((!aggregate.checkpointable()).then(|| {
            "do not support two-phase aggregation yet (`--strategy two_phase`; the automatic strategy does not choose it for a checkpointed run)"
                .to_string()
        }));
    }
    if let Some(top_n) = node.downcast_ref::<TopNExec>() {
        return Ok(
            (top_n.input().downcast_ref::<StreamExchangeExec>().is_none())
                .then(|| "need a top-N to read an exchange".to_string()),
        );
    }
    if node.downcast_ref::<IntervalJoinExec>().is_some()
        || node.downcast_ref::<OverWindowExec>().is_some()
        || node.downcast_ref::<LookupJoinExec>().is_some()
        || node.downcast_ref::<ChangelogAggregateExec>().is_some()
        || node.downcast_ref::<ChangelogOverExec>().is_some()
        || node.downcast_ref::<StreamSortExec>().is_some()
        || node.downcast_ref::<StreamFilterExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some()
    {
        return Ok(None);
    }
    let hint = match node.name() {
        "BoundedWindowAggExec" | "WindowAggExec" => {
            " where they wait for the end of a bounded input (ordered by something other than an event time, or over an aggregation's or a top-N's final rows): over an aggregation or a top-N, `--set emit=changes` (SET freshet.emit = 'changes') has them read its changelog, which checkpoints keep"
        }
        "SortExec" | "SortPreservingMergeExec" => {
            " unless led by an event time, ascending (the sort holds every row to the end of the input): lead the ORDER BY with the event time, or sort the committed output when reading it"
        }
        "LocalLimitExec" | "GlobalLimitExec" => {
            " (the count of rows handed out is not kept): write the whole output and limit it when reading it"
        }
        _ => "",
    };
    Ok(Some(format!(
        "do not support {} yet{hint}",
        user_term(node.name())
    )))
}
