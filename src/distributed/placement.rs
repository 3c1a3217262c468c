//! Where each part of a query runs: the plan one process would run, cut at its exchanges.
//!
//! A query planned on `N` streams is spread over `W` workers, each running `S = N / W` of
//! them: worker `t` runs exchange outputs (and everything above them) `t*S .. (t+1)*S`, and
//! `I` of each exchange's inputs (its inputs over the workers, rounded up; as many workers
//! as inputs where there are fewer): inputs `t*I .. (t+1)*I`. Every exchange becomes an
//! [`ExchangeSendExec`] (its input tasks, on the workers that read the sources) under a
//! hash `RepartitionExec` on the wire batches' route column and a `NetworkShuffleExec`,
//! except a sticky exchange of as many inputs as outputs that its outputs read inline (the
//! side a broadcast join leaves in its streams): input `p` runs on the worker of output
//! `p`, so that exchange stays inside each worker's part;
//! what reads the exchanges, up to the plan's last partitioned node, is one
//! [`FragmentExec`] per worker; a `NetworkCoalesceExec` brings every output to the
//! coordinator, which merges them (with the plan's own single-partition head, such as an
//! ORDER BY's merge, if it has one).
//!
//! A lookup join's table is not cut: each worker that runs some of the join's streams reads
//! the whole table and loads it once for them, as one process does for all of its streams.
//!
//! An exchange into one stream (a fan-in, under an aggregation without keys) becomes a
//! `NetworkCoalesceExec` into one partition instead: at the top of the plan it is read by a
//! [`GatherExec`] on the coordinator, which runs the rest of the plan; below operators
//! that run on every stream again (a window without keys joined back to the rows, as in
//! Nexmark q7) by one worker, which runs the operators on that one partition as the input
//! task of the exchange above them.
//!
//! Workers plan the query from its [`QuerySpec`] and find the same exchanges and the same
//! fragment in their plan by their place in it (a pre-order walk that does not enter an
//! exchange), so that what each part holds is what the coordinator's plan held.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::common::hash_utils::create_hashes;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::physical_expr::Partitioning;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::{REPARTITION_RANDOM_STATE, RepartitionExec};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};
use datafusion_distributed::{NetworkCoalesceExec, NetworkShuffleExec};
use freshet_engine::StreamExchangeExec;
use freshet_engine::exchange::wire::ROUTE_COLUMN;
use freshet_engine::join::LookupJoinExec;

use super::exchange_send::ExchangeSendExec;
use super::fragment::FragmentExec;
use super::gather::GatherExec;
use super::spec::QuerySpec;

/// A plan split into what stays on the coordinator and the partitioned part the workers
/// run.
pub(super) struct Split {
    pub head: Head,
    pub part: Arc<dyn ExecutionPlan>,
}

/// What of a plan runs on the coordinator.
pub(super) enum Head {
    /// DataFusion's nodes above the merge of every stream (a limit, a projection), down to
    /// the merge, root first; none when the plan ends on the streams.
    Merge(Vec<Arc<dyn ExecutionPlan>>),
    /// An exchange that gathers every stream into one (a fan-in, as under an aggregation
    /// without keys) and everything above it: the coordinator receives the exchange's one
    /// output and runs the rest of the plan itself; the part is the exchange's input.
    Gather(Arc<StreamExchangeExec>),
}

/// The place of the gathering exchange among a plan's exchanges, for its sending half.
pub(super) const GATHERING_EXCHANGE: usize = usize::MAX;

/// `plan`, on `partitions` streams, split (see [`Split`]): the head is DataFusion's own
/// single-partition nodes down to a merge of every stream (`CoalescePartitionsExec`,
/// `SortPreservingMergeExec`), or a gathering exchange and what is above it; Freshet's
/// operators below run on the workers.
pub(super) fn split_head(plan: &Arc<dyn ExecutionPlan>, partitions: usize) -> Result<Split> {
    if let Some(exchange) = gathering_exchange(plan)? {
        return Ok(Split {
            part: Arc::clone(exchange.input()),
            head: Head::Gather(exchange),
        });
    }
    let mut head = Vec::new();
    let mut node = Arc::clone(plan);
    while node.output_partitioning().partition_count() != partitions {
        let coordinator_node = node.downcast_ref::<CoalescePartitionsExec>().is_some()
            || node.downcast_ref::<SortPreservingMergeExec>().is_some()
            || node.downcast_ref::<GlobalLimitExec>().is_some()
            || node.downcast_ref::<LocalLimitExec>().is_some()
            || node.downcast_ref::<ProjectionExec>().is_some()
            || node.downcast_ref::<SortExec>().is_some();
        let child = match node.children().as_slice() {
            [child] if coordinator_node => Arc::clone(child),
            _ => {
                return plan_err!(
                    "this query cannot run across workers yet: its plan gathers every stream \
                     into one in {} ({partitions} streams) below operators that run on many \
                     again; run it in one process",
                    node.name()
                );
            }
        };
        head.push(node);
        node = child;
    }
    Ok(Split {
        head: Head::Merge(head),
        part: node,
    })
}

/// The exchange into one stream that every node above it leads to, each on one partition
/// with one child, if the plan has one.
fn gathering_exchange(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<StreamExchangeExec>>> {
    let mut node = Arc::clone(plan);
    loop {
        if node.output_partitioning().partition_count() != 1 {
            return Ok(None);
        }
        if let Ok(exchange) = StreamExchangeExec::from_plan(Arc::clone(&node), "") {
            return Ok(Some(exchange));
        }
        node = match node.children().as_slice() {
            [child] => Arc::clone(child),
            _ => return Ok(None),
        };
    }
}

/// `head` (see [`Split`]) over `part`.
fn with_head(
    head: Vec<Arc<dyn ExecutionPlan>>,
    part: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    head.into_iter().rev().try_fold(part, |below, node| {
        node.replace_children(
            vec![below],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    })
}

/// The exchanges of `plan`, in pre-order; with `nearest`, only those with no exchange
/// between them and `plan`'s root (which may be one).
pub(super) fn exchanges(
    plan: &Arc<dyn ExecutionPlan>,
    nearest: bool,
) -> Result<Vec<Arc<StreamExchangeExec>>> {
    let mut found = Vec::new();
    plan.apply(|node| {
        Ok(match crossing_exchange(node) {
            Some(exchange) => {
                found.push(exchange);
                match nearest {
                    true => TreeNodeRecursion::Jump,
                    false => TreeNodeRecursion::Continue,
                }
            }
            None => TreeNodeRecursion::Continue,
        })
    })?;
    Ok(found)
}

/// `node` as an exchange that crosses workers: every exchange but one whose outputs each
/// read their one input where they run (a broadcast join's side left in its streams),
/// which stays inside each worker's part.
fn crossing_exchange(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<StreamExchangeExec>> {
    StreamExchangeExec::from_plan(Arc::clone(node), "")
        .ok()
        .filter(|exchange| !stays_in_worker(exchange))
}

/// Whether `exchange` runs inside each worker: a sticky exchange of as many inputs as
/// outputs, read inline, whose input `p` runs on the worker of output `p`.
fn stays_in_worker(exchange: &StreamExchangeExec) -> bool {
    let inputs = exchange.input().output_partitioning().partition_count();
    exchange.runs_inline()
        && inputs > 1
        && inputs == exchange.properties().partitioning.partition_count()
}

/// Exchange number `index` of `part` (in the order of [`exchanges`]), its input reading the
/// nearest exchanges below it from `remotes`, the first of their outputs `first_output`.
pub(super) fn exchange_over_remotes(
    part: &Arc<dyn ExecutionPlan>,
    index: usize,
    remotes: &[Arc<dyn ExecutionPlan>],
    first_output: usize,
) -> Result<Arc<StreamExchangeExec>> {
    let Some(exchange) = exchanges(part, false)?.into_iter().nth(index) else {
        return internal_err!("the worker's plan has no exchange number {index}");
    };
    let input = with_remote_exchanges(exchange.input(), remotes, first_output)?;
    let exchange: Arc<dyn ExecutionPlan> = exchange;
    let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    StreamExchangeExec::from_plan(exchange.replace_children(vec![input], options)?, "a worker")
}

/// `part` with its exchanges reading their outputs from `remotes` (in the order of
/// [`exchanges`]), the first of them output `first_output`.
pub(super) fn with_remote_exchanges(
    part: &Arc<dyn ExecutionPlan>,
    remotes: &[Arc<dyn ExecutionPlan>],
    first_output: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut next = 0;
    let replaced = Arc::clone(part).transform_down(|node| {
        let Some(exchange) = crossing_exchange(&node) else {
            return Ok(Transformed::no(node));
        };
        let Some(remote) = remotes.get(next) else {
            return internal_err!("the workers' plan has more exchanges than the coordinator's");
        };
        next += 1;
        let remote: Arc<dyn ExecutionPlan> =
            Arc::new(exchange.with_remote_input(Arc::clone(remote), first_output));
        Ok(Transformed::new(remote, true, TreeNodeRecursion::Jump))
    })?;
    Ok(replaced.data)
}

/// Checks that `part`, the workers' part of a plan on `spec.partitions` streams, can be
/// cut at its exchanges (see the module documentation): every node runs partition by
/// partition on as many partitions as the streams, or, below an exchange, as the exchange's
/// inputs, which spread evenly over the workers.
fn check_cuttable(part: &Arc<dyn ExecutionPlan>, spec: &QuerySpec) -> Result<()> {
    if part.boundedness().is_unbounded() {
        return plan_err!(
            "an endless stream cannot run across workers yet: datafusion-distributed treats \
             every network boundary as bounded; replay a bounded input instead"
        );
    }
    let partitions = part.output_partitioning().partition_count();
    check_partitionwise(part, partitions, spec.partitions)
}

fn check_partitionwise(
    node: &Arc<dyn ExecutionPlan>,
    expected: usize,
    streams: usize,
) -> Result<()> {
    let partitions = node.output_partitioning().partition_count();
    if let Some(exchange) = crossing_exchange(node) {
        exchange.check_distributable()?;
        let inputs = exchange.input().output_partitioning().partition_count();
        // An exchange into one stream feeds operators on one partition (a window without
        // keys), run by one worker up to the next exchange.
        if partitions != expected || (partitions != streams && partitions != 1) {
            return plan_err!(
                "an exchange into {partitions} streams feeds an operator on {expected}: it \
                 cannot cross workers yet"
            );
        }
        return check_partitionwise(exchange.input(), inputs, streams);
    }
    if partitions != expected {
        return plan_err!(
            "{} runs on {partitions} partitions where the query runs on {expected}: it cannot \
             run across workers yet",
            node.name()
        );
    }
    if node.downcast_ref::<RepartitionExec>().is_some() {
        return plan_err!(
            "DataFusion's RepartitionExec (a batch operator's shuffle) reads every stream: it \
             cannot run across workers yet"
        );
    }
    // A lookup join's table is loaded whole by each worker that runs a stream of the join.
    if let Some(lookup) = node.downcast_ref::<LookupJoinExec>() {
        check_read_whole(lookup.table())?;
        return check_partitionwise(lookup.stream(), expected, streams);
    }
    node.children()
        .into_iter()
        .try_for_each(|child| check_partitionwise(child, expected, streams))
}

/// Checks that `table`, a lookup join's table, can be read whole by every worker: bounded,
/// and without an exchange (which would spread it over the workers).
fn check_read_whole(table: &Arc<dyn ExecutionPlan>) -> Result<()> {
    if table.boundedness().is_unbounded() {
        return plan_err!("a lookup join's table must be bounded");
    }
    let mut shuffled = false;
    table.apply(|node| {
        shuffled |= crossing_exchange(node).is_some();
        Ok(TreeNodeRecursion::Continue)
    })?;
    match shuffled {
        true => plan_err!(
            "a lookup join whose table is shuffled between streams cannot run across workers \
             yet"
        ),
        false => Ok(()),
    }
}

/// The plan with network boundaries that runs `plan` (planned from `spec`) across
/// `spec.workers` workers (see the module documentation).
pub fn distribute(
    plan: &Arc<dyn ExecutionPlan>,
    spec: &Arc<QuerySpec>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Split { head, part } = split_head(plan, spec.partitions)?;
    check_cuttable(&part, spec)?;
    let all = exchanges(&part, false)?;
    let shuffles = shuffles_below(&part, &all, spec)?;
    match head {
        Head::Merge(head) => {
            let fragment = Arc::new(FragmentExec::new(Arc::clone(spec), part.schema(), shuffles));
            let gathered: Arc<dyn ExecutionPlan> =
                Arc::new(NetworkCoalesceExec::try_new(fragment, spec.workers, 1)?);
            match head.is_empty() {
                true => Ok(Arc::new(CoalescePartitionsExec::new(gathered))),
                false => with_head(head, gathered),
            }
        }
        Head::Gather(exchange) => {
            exchange.check_distributable()?;
            let gathered = network_boundary(spec, GATHERING_EXCHANGE, &exchange, shuffles)?;
            Ok(Arc::new(GatherExec::try_new(
                Arc::clone(plan),
                exchange,
                gathered,
            )?))
        }
    }
}

/// A network shuffle for each of the nearest exchanges of `plan`, fed by the exchange's
/// sending half, itself reading the shuffles of the nearest exchanges below it; `all` are
/// the part's exchanges, numbered as [`exchanges`] numbers them.
fn shuffles_below(
    plan: &Arc<dyn ExecutionPlan>,
    all: &[Arc<StreamExchangeExec>],
    spec: &Arc<QuerySpec>,
) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
    exchanges(plan, true)?
        .iter()
        .map(|exchange| {
            let Some(index) = all.iter().position(|e| Arc::ptr_eq(e, exchange)) else {
                return internal_err!("an exchange outside the workers' part");
            };
            let below = shuffles_below(exchange.input(), all, spec)?;
            network_boundary(spec, index, exchange, below)
        })
        .collect()
}

/// The network boundary that brings exchange number `index` to what reads it: its sending
/// half (reading the exchanges below it from `below`) on as many workers as it has inputs,
/// at most all, under a hash shuffle on the route column into the query's streams — or, for
/// an exchange into one stream, a coalesce of everything into one partition, read by one
/// task.
fn network_boundary(
    spec: &Arc<QuerySpec>,
    index: usize,
    exchange: &StreamExchangeExec,
    below: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let inputs = exchange.input().output_partitioning().partition_count();
    let tasks = inputs.clamp(1, spec.workers);
    let send: Arc<dyn ExecutionPlan> = Arc::new(ExchangeSendExec::new(
        Arc::clone(spec),
        index,
        exchange.wire_schema(),
        below,
        inputs.div_ceil(tasks),
    ));
    if exchange.properties().partitioning.partition_count() == 1 {
        return Ok(Arc::new(CoalescePartitionsExec::new(Arc::new(
            NetworkCoalesceExec::try_new(send, tasks, 1)?,
        ))));
    }
    let route = Column::new_with_schema(ROUTE_COLUMN, &send.schema())?;
    let partitioning = Partitioning::Hash(vec![Arc::new(route)], spec.streams_per_worker());
    let repartition = RepartitionExec::try_new(send, partitioning)?;
    Ok(Arc::new(NetworkShuffleExec::try_new(
        Arc::new(repartition),
        tasks,
    )?))
}

/// For each of `outputs` network partitions, a route value that the network's hash
/// partitioning (DataFusion's `RepartitionExec` with its fixed hash seed) sends there.
pub(super) fn route_values(outputs: usize) -> Result<Arc<[i64]>> {
    let mut routes = vec![None; outputs];
    let mut missing = outputs;
    let mut start = 0i64;
    const CHUNK: i64 = 1024;
    while missing > 0 {
        let values = Int64Array::from_iter_values(start..start + CHUNK);
        let mut hashes = vec![0u64; CHUNK as usize];
        create_hashes(
            [&values as &dyn datafusion::arrow::array::Array],
            REPARTITION_RANDOM_STATE.random_state(),
            &mut hashes,
        )?;
        for (value, hash) in (start..).zip(hashes) {
            let slot = &mut routes[(hash % outputs as u64) as usize];
            if slot.is_none() {
                *slot = Some(value);
                missing -= 1;
            }
        }
        start += CHUNK;
    }
    Ok(routes.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use futures::TryStreamExt;

    #[tokio::test]
    async fn each_route_value_reaches_its_partition() {
        let outputs = 6;
        let routes = route_values(outputs).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("r", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(routes.to_vec()))],
        )
        .unwrap();
        let input = MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap();
        let column = Arc::new(Column::new("r", 0));
        let repartition =
            RepartitionExec::try_new(input, Partitioning::Hash(vec![column], outputs)).unwrap();
        let context = Arc::new(datafusion::execution::TaskContext::default());
        for partition in 0..outputs {
            let batches: Vec<RecordBatch> = repartition
                .execute(partition, Arc::clone(&context))
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            let values: Vec<i64> = batches
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .collect();
            assert_eq!(values, [routes[partition]], "partition {partition}");
        }
    }
}
