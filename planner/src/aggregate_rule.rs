//! [`StreamingAggregateRule`]: puts Freshet's window aggregation in place of DataFusion's
//! aggregation where a GROUP BY is keyed by a window function, the query says EMIT CHANGES,
//! or the aggregation reads a stream (a plain GROUP BY: one endless window).
//!
//! DataFusion plans the aggregation as usual (one `AggregateExec`, or a partial and a final
//! one around a hash repartition), which lowers every aggregate function, DISTINCT, FILTER
//! and ORDER BY for us. The rule keeps those lowered expressions and replaces the
//! aggregation with a [`StreamExchangeExec`] (hash on the non-window keys, fan-in without
//! keys; it computes watermarks from the window's time column and the stream's declared
//! out-of-orderness) under a [`WindowAggregateExec`]. A plain GROUP BY over a stream emits
//! at the end of input (on bounded input, the batch result; on unbounded input the
//! unbounded-input check refuses it); over plain tables it stays DataFusion's.
//!
//! With two-phase aggregation (`two_phase`, or automatically for a keyless tumbling or
//! hopping EMIT FINAL aggregation that does not read a replay of files, for hopping windows
//! with EMIT FINAL (in panes of the slide), and for a plain GROUP BY with parallel work) the
//! exchange
//! also runs a [`PartialAggregate`] per source partition and routes its states. EMIT CHANGES
//! on session windows makes the aggregate columns nullable (deletions of merged sessions), so
//! the projections above are rebuilt.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::utils::{collect_columns, conjunction_opt, split_conjunction};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::StreamExchangeExec;
use freshet_engine::aggregate::{
    AggregateEmit, AggregateSpec, PartialAggregate, WindowAggregateExec, WindowKey,
};
use freshet_engine::window::{WindowSpec, duration_in_unit};
use freshet_partitioner::{RoutingStrategy, TimeRuns};

use crate::functions::window_function_call;
use crate::options::{ChangesPer, EmitSetting, FreshetOptions};
use crate::stream_inputs::{
    TimeOrigin, below_exchanges, choose_strategy, end_of_input_time, event_time,
    event_time_columns, holds_stream_join, read_on_every_core, reads_stream, replayed_source,
    replays_in_file_order, stream_event_time,
};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamingAggregateRule {
    /// Whether the join rule has run for the last time: before it, a windowed aggregation
    /// over a join of two streams waits for the join to become Freshet's, whose output has
    /// event times.
    after_joins: bool,
}

impl StreamingAggregateRule {
    /// The rule as it runs after the last join rule (see `after_joins`).
    pub fn after_joins() -> Self {
        Self { after_joins: true }
    }
}

impl PhysicalOptimizerRule for StreamingAggregateRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = FreshetOptions::of(config);
        let mut nullable_aggregates = false;
        let plan = plan
            .transform_up(|node| {
                // Projections keep their output schema when their input changes: those over
                // session changes (nullable aggregates) are built again.
                if nullable_aggregates
                    && let Some(projection) = node.downcast_ref::<ProjectionExec>()
                {
                    let rebuilt = ProjectionExec::try_new(
                        projection.expr().to_vec(),
                        Arc::clone(projection.input()),
                    )?;
                    return Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>));
                }
                match streaming_aggregate(&node, &options, config, self.after_joins)? {
                    Some(aggregate) => {
                        nullable_aggregates |= aggregate
                            .downcast_ref::<WindowAggregateExec>()
                            .is_some_and(WindowAggregateExec::emits_deletions);
                        Ok(Transformed::yes(aggregate))
                    }
                    None => Ok(Transformed::no(node)),
                }
            })?
            .data;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "FreshetStreamingAggregate"
    }

    /// EMIT CHANGES on session windows makes the aggregate columns nullable: a row whose
    /// aggregates are NULL deletes a merged session. No other change is made.
    fn schema_check(&self) -> bool {
        false
    }
}

/// A window one unit of time wide on the first GROUP BY key that is a time `input`
/// publishes its progress in, if any.
fn aligned_window(
    input: &Arc<dyn ExecutionPlan>,
    group_by: &[(Arc<dyn PhysicalExpr>, String)],
) -> Option<WindowKey> {
    let times = event_time_columns(input);
    let schema = input.schema();
    for (position, (expr, _)) in group_by.iter().enumerate() {
        let Some(column) = expr.downcast_ref::<Column>() else {
            continue;
        };
        let is_time = times
            .iter()
            .any(|(c, origin)| *c == column.index() && *origin == TimeOrigin::Published);
        let time_type = schema.field(column.index()).data_type();
        if is_time && matches!(time_type, DataType::Timestamp(_, _) | DataType::Int64) {
            return Some(WindowKey {
                position,
                spec: WindowSpec::Tumble { size: 1, offset: 0 },
                time: Arc::clone(expr),
            });
        }
    }
    None
}

/// Whether every GROUP BY key is a function of the time of an aligned window (one a unit
/// wide, on a time an operator below publishes, see [`aligned_window`]) through the
/// projection below: e.g. an inner window's end beside its start, as Nexmark q5 groups
/// its counts. Such an aggregation holds one group per window, as one without keys does.
pub(crate) fn one_group_per_window(
    input: &Arc<dyn ExecutionPlan>,
    keys: &[Arc<dyn PhysicalExpr>],
    window: &WindowKey,
) -> bool {
    let WindowSpec::Tumble { size: 1, offset: 0 } = window.spec else {
        return false;
    };
    let (Some(time), Some(projection)) = (
        window.time.downcast_ref::<Column>(),
        input.downcast_ref::<ProjectionExec>(),
    ) else {
        return false;
    };
    let projected = projection.expr();
    let time_columns = collect_columns(&projected[time.index()].expr);
    !time_columns.is_empty()
        && keys.iter().all(|key| {
            key.downcast_ref::<Column>().is_some_and(|key| {
                let expr = &projected[key.index()].expr;
                !is_volatile(expr) && collect_columns(expr).is_subset(&time_columns)
            })
        })
}

/// The streaming replacement of `node`, if it is an aggregation Freshet runs.
fn streaming_aggregate(
    node: &Arc<dyn ExecutionPlan>,
    options: &FreshetOptions,
    config: &ConfigOptions,
    after_joins: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    let raw = match aggregate.mode() {
        AggregateMode::Single | AggregateMode::SinglePartitioned => aggregate,
        AggregateMode::Final | AggregateMode::FinalPartitioned => {
            match below_exchanges(aggregate.input()).downcast_ref::<AggregateExec>() {
                Some(partial) if *partial.mode() == AggregateMode::Partial => partial,
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let group_by = raw.group_expr();
    let windows: Vec<usize> = group_by
        .expr()
        .iter()
        .enumerate()
        .filter(|(_, (e, _))| window_function_call(e).is_some())
        .map(|(i, _)| i)
        .collect();
    // A GROUP BY without a window over an endless stream has no end to wait for: unless the
    // query asks for final rows, it emits its changes as EMIT CHANGES does.
    let mut changes = match options.emit {
        EmitSetting::Changes => true,
        EmitSetting::Default => windows.is_empty() && raw.input().boundedness().is_unbounded(),
        EmitSetting::Final => false,
    };
    // A plain GROUP BY runs as Freshet's aggregation when it reads a stream (on bounded
    // input it gives the batch result at the end, on unbounded input its changes); over
    // plain tables DataFusion's stays.
    if windows.is_empty() && !changes && !reads_stream(raw.input())? {
        return Ok(None);
    }
    if !windows.is_empty() && !after_joins && holds_stream_join(raw.input())? {
        return Ok(None);
    }
    // Grouping sets on a bounded stream are DataFusion's: the result comes at the end of
    // the input (a window among the sets' keys included, as a plain key).
    if group_by.has_grouping_set() && !changes && !raw.input().boundedness().is_unbounded() {
        return Ok(None);
    }
    if group_by.has_grouping_set() {
        return plan_err!(
            "GROUPING SETS, CUBE and ROLLUP are not supported in streaming aggregations"
        );
    }
    if windows.len() > 1 {
        return plan_err!(
            "a streaming GROUP BY takes one window, this one has {}",
            windows.len()
        );
    }
    let (input, lifted) = lift_window_predicates(below_exchanges(raw.input()))?;
    let input_schema = input.schema();
    let window = match windows.first() {
        None => None,
        Some(&position) => {
            let (expr, _) = &group_by.expr()[position];
            let Some((name, arguments)) = window_function_call(expr) else {
                return Ok(None);
            };
            let time = Arc::clone(&arguments[0]);
            let time_type = time.data_type(&input_schema)?;
            let durations = arguments[1..]
                .iter()
                .map(|argument| match argument.downcast_ref::<Literal>() {
                    Some(literal) => Ok(literal.value().clone()),
                    None => plan_err!(
                        "{name}(): window lengths must be constant intervals, got {argument}"
                    ),
                })
                .collect::<Result<Vec<ScalarValue>>>()?;
            let spec = WindowSpec::from_call(name, &durations, &time_type)?;
            Some(WindowKey {
                position,
                spec,
                time,
            })
        }
    };
    // A GROUP BY without a window whose keys hold a time an operator below publishes its
    // progress in (an inner window's `window_start`, a join's time) closes each group when
    // the watermark passes that time: a tumbling window one unit wide on it (whose start is
    // the time itself), emitting final rows with an event time of their own, unless the
    // query asks for changes. No row is late (none comes behind that progress), so the
    // answer is the batch one, with state bounded on a bounded replay as on an endless one.
    // Whether the window is such an aligned one, over whose input no row is late.
    let mut aligned = false;
    let window = match window {
        None if options.emit == EmitSetting::Default => aligned_window(&input, group_by.expr())
            .inspect(|_| {
                changes = false;
                aligned = true;
            }),
        window => window,
    };
    let over_join_output = match &window {
        Some(window) => match window.time.downcast_ref::<Column>() {
            Some(time) => end_of_input_time(&input, time.index())?,
            None => None,
        },
        None => None,
    };
    if over_join_output.is_some()
        && window
            .as_ref()
            .is_some_and(|w| matches!(w.spec, WindowSpec::Tumble { .. }))
    {
        // A tumbling window over a bounded join's output, whose times have no watermark:
        // DataFusion's aggregation gives the batch answer (`tumble` is `date_bin`), NULL
        // times included.
        return Ok(None);
    }
    let event_time = match (&window, over_join_output) {
        (_, Some(end_of_input)) => Some(end_of_input),
        (Some(window), None) => Some(event_time(&input, &window.time)?),
        // No window needs a watermark, but the stream's partitions are still merged in
        // event-time order, the order its source partitions were dealt for, where the
        // event-time column reaches the aggregation.
        (None, None) => stream_event_time(&input),
    };
    let allowed_lateness = match &window {
        Some(window) => duration_in_unit(
            &ScalarValue::DurationMillisecond(Some(options.allowed_lateness_ms.0 as i64)),
            &window.time.data_type(&input_schema)?,
        )?,
        None => 0,
    };
    let emit = match (changes, options.changes_per) {
        (false, _) => AggregateEmit::Final,
        (true, ChangesPer::Batch) => AggregateEmit::ChangesPerBatch,
        (true, ChangesPer::Record) => AggregateEmit::ChangesPerRecord,
    };
    let spec = AggregateSpec {
        group_by: group_by.expr().to_vec(),
        aggregates: raw.aggr_expr().to_vec(),
        filters: raw.filter_expr().to_vec(),
        window,
        emit,
        allowed_lateness,
        schema: aggregate.schema(),
        having: None,
        changelog_op: false,
    };
    let sessions = spec.window.as_ref().is_some_and(WindowKey::is_session);
    // Sessions merge as records arrive: their changes (per record or per batch) need the
    // running kernels, which can merge two sessions' states.
    if sessions && emit != AggregateEmit::Final && spec.running_kernels(&input_schema).is_none() {
        return plan_err!(
            "EMIT CHANGES on SESSION windows supports COUNT, SUM, AVG, MIN and MAX of Int64 or Float64 columns, and MIN/MAX of timestamps (window_end), without DISTINCT or FILTER; use EMIT FINAL for other aggregates"
        );
    }
    let keys = spec.key_exprs();
    let setting = options.partitioning_strategy.as_str();
    // A plain GROUP BY's partial step runs per source partition, and decoding a file is
    // most of its work: its files are read on every core, whatever the streams.
    let input = match setting {
        "" | "two_phase" if spec.window.is_none() && spec.emit == AggregateEmit::Final => {
            read_on_every_core(&input)?.unwrap_or(input)
        }
        _ => input,
    };
    let partitions = input.output_partitioning().partition_count();
    let shape = InputShape {
        // More than one stream or source partition: the partial step runs in parallel.
        parallel: config.execution.target_partitions > 1 || partitions > 1,
        file_order: replays_in_file_order(&input),
        one_partition: partitions == 1,
    };
    let per_window = keys.is_empty()
        || spec
            .window
            .as_ref()
            .is_some_and(|window| one_group_per_window(&input, &keys, window));
    let (strategy, reason, partial) = match two_phase(options, per_window, aligned, &spec, &shape)?
    {
        Some((partial, reason)) => {
            let partial = Arc::new(if aligned {
                partial.with_input_never_late()
            } else {
                partial
            });
            let strategy = if keys.is_empty() {
                RoutingStrategy::FanIn
            } else {
                RoutingStrategy::Hash(partial.format().key_columns())
            };
            (strategy, reason, Some(partial))
        }
        None => {
            let (strategy, mut reason) = choose_strategy(setting, keys, &input, "GROUP BY")?;
            let time_runs = match &strategy {
                RoutingStrategy::Hash(_)
                    if setting.is_empty() && config.execution.target_partitions > 1 =>
                {
                    time_runs_of(&spec, &input, options.time_run_records)
                }
                _ => None,
            };
            match time_runs {
                Some((runs, runs_reason)) => (RoutingStrategy::TimeRuns(runs), runs_reason, None),
                None => {
                    if setting.is_empty() && has_distinct(&spec) {
                        reason.push_str(DISTINCT_NOT_PARTIAL);
                    }
                    (strategy, reason, None)
                }
            }
        }
    };
    let exchange = StreamExchangeExec::try_new(
        input,
        strategy,
        config.execution.target_partitions,
        event_time,
    )?
    .with_reason(reason);
    let window_position = spec.window.as_ref().map(|w| w.position);
    let streaming: Arc<dyn ExecutionPlan> = Arc::new(match partial {
        Some(partial) => WindowAggregateExec::two_phase(exchange, spec, partial)?,
        None => WindowAggregateExec::try_new(Arc::new(exchange), spec)?,
    });
    match (lifted, window_position) {
        (Some(predicate), Some(position)) => {
            // The predicate on the window bounds, now over the window column of the output.
            let name = streaming.schema().field(position).name().clone();
            let window_column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&name, position));
            let predicate = predicate
                .transform_up(|e| {
                    Ok(if window_function_call(&e).is_some() {
                        Transformed::yes(Arc::clone(&window_column))
                    } else {
                        Transformed::no(e)
                    })
                })?
                .data;
            Ok(Some(Arc::new(FilterExec::try_new(predicate, streaming)?)))
        }
        (Some(predicate), None) => {
            plan_err!("the predicate {predicate} uses a window bound without a window")
        }
        (None, _) => Ok(Some(streaming)),
    }
}

/// Time runs for a tumbling-window aggregation over a replay of files whose statistics give
/// its records' span in event time, or over a generator (whose rate is known): runs of whole windows holding about `records` records
/// (the option `time_run_records`; by default a Parquet unit's, so that a replay in time
/// order sends most units whole to one stream). Every row of a window goes to one stream,
/// as under a hash of the keys, but a replay in time order is cut into slices of its
/// batches rather than gathered row by row, and no key is hashed. Windows holding more
/// records than a run are hashed on their keys.
fn time_runs_of(
    spec: &AggregateSpec,
    input: &Arc<dyn ExecutionPlan>,
    records: u64,
) -> Option<(TimeRuns, String)> {
    if records == 0 {
        return None;
    }
    let window = spec.window.as_ref()?;
    let WindowSpec::Tumble { size, offset } = window.spec else {
        return None;
    };
    let span = replayed_source(input)?.time_span()?;
    let per_window = span.records_in(size).max(f64::MIN_POSITIVE);
    // A window larger than a run would keep one stream busy while the others wait for the
    // replay's order to reach their runs: hashing the keys lets them share each window.
    if per_window > records as f64 {
        return None;
    }
    let windows = (records as f64 / per_window).ceil().clamp(1.0, 1e12) as i64;
    let runs = TimeRuns {
        time: Arc::clone(&window.time),
        run: size.saturating_mul(windows),
        origin: offset,
    };
    let reason = format!(
        "auto: tumbling windows, {windows} to a run of about {} records by the source's event-time span, each run on one stream",
        (per_window * windows as f64).round()
    );
    Some((runs, reason))
}

/// The aggregation's input without the predicates on the window bounds, and those.
type Lifted = (Arc<dyn ExecutionPlan>, Option<Arc<dyn PhysicalExpr>>);

/// DataFusion pushes a HAVING predicate on the window bounds below the aggregation, where
/// `hop` and `session` have no per-row value: the conjuncts that call a window function are
/// taken out of a filter over the aggregation's input (through projections), to be applied
/// to its output.
fn lift_window_predicates(input: &Arc<dyn ExecutionPlan>) -> Result<Lifted> {
    if let Some(projection) = input.downcast_ref::<ProjectionExec>() {
        // A projection DataFusion put between (common subexpressions): look below it.
        let (below, lifted) = lift_window_predicates(projection.input())?;
        if lifted.is_none() {
            return Ok((Arc::clone(input), None));
        }
        let projection = ProjectionExec::try_new(projection.expr().to_vec(), below)?;
        return Ok((Arc::new(projection), lifted));
    }
    let Some(filter) = input.downcast_ref::<FilterExec>() else {
        return Ok((Arc::clone(input), None));
    };
    let calls_window = |e: &Arc<dyn PhysicalExpr>| {
        e.exists(|node| Ok(window_function_call(node).is_some()))
            .unwrap_or(false)
    };
    let (lifted, kept): (Vec<_>, Vec<_>) = split_conjunction(filter.predicate())
        .into_iter()
        .cloned()
        .partition(|e| calls_window(e));
    if lifted.is_empty() {
        return Ok((Arc::clone(input), None));
    }
    let input: Arc<dyn ExecutionPlan> = match (conjunction_opt(kept), filter.projection()) {
        (None, None) => Arc::clone(filter.input()),
        (kept, projection) => {
            let always: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::from(true)));
            let kept = FilterExecBuilder::new(kept.unwrap_or(always), Arc::clone(filter.input()))
                .apply_projection(projection.as_ref().map(|p| p.to_vec()))?
                .build()?;
            Arc::new(kept)
        }
    };
    Ok((input, conjunction_opt(lifted)))
}

/// Why an aggregation with a DISTINCT aggregate is not split automatically.
const DISTINCT_NOT_PARTIAL: &str =
    "; no partial step: a DISTINCT aggregate's partial state holds every distinct value";

fn has_distinct(spec: &AggregateSpec) -> bool {
    spec.aggregates
        .iter()
        .any(|aggregate| aggregate.is_distinct())
}

/// What the choice of two phases needs to know of the aggregation's input.
#[derive(Debug, Clone, Copy)]
struct InputShape {
    /// More than one stream or input partition: partial steps run in parallel.
    parallel: bool,
    /// A replay of files, whose partitions the exchange merges by replay position.
    file_order: bool,
    /// One input partition: a partial step at the exact watermark judges lateness as one
    /// step would (several, merged by event time, would judge it otherwise).
    one_partition: bool,
}

/// Whether the aggregation runs in two phases (a partial step per source partition in the
/// exchange, the final step after it), and why: when the user asks for `two_phase` (an error
/// where it does not apply); automatically
/// - for a GROUP BY without keys (or whose keys follow its window, `per_window`) over
///   tumbling or hopping windows with EMIT FINAL, whose single final stream would
///   otherwise receive every raw row: over an inner window's results (`aligned`) always,
///   even across workers, since none of their rows is late and the partial step needs no
///   watermark; over other inputs from one partition (partial steps over several, taking
///   turns at the final step's watermark in whatever order they come, would judge lateness
///   differently from run to run);
/// - for hopping windows with EMIT FINAL: the partial step adds each record to its pane
///   (one slide) once, where one step would add it to each of the `size / slide` windows
///   holding it, and the final step adds each pane's state to those windows (Nexmark q5 in
///   docs/benchmarks.md, "Hopping windows in panes"). Over a replay of files the final
///   step judges lateness from the states in the replay's order, so not when the query's
///   late records are wanted whole (`keep_late_records`); over other inputs only from one
///   partition, where the partial step judges the records late that one step would (from
///   several, merged by event time, it would judge others);
/// - for a plain GROUP BY (no window, EMIT FINAL) run by several streams or read from
///   several source partitions, which then shuffles a state row per group and batch instead
///   of every row (as DataFusion's partial and final aggregation do).
///
/// Not automatically for other windows over a replay of files: each source partition's step
/// would judge its records late at the watermark of all partitions, not at the one the
/// files' order gives (which one stream merging the partitions by unit keeps), and a
/// tumbling window's partial states (a record's only window) save the final step nothing.
/// Not automatically with a DISTINCT aggregate: its partial state is the set of distinct
/// values a source partition saw, about as large as its rows when most values are
/// distinct, and the final step inserts them all again (twice the work of one step after a
/// shuffle of the rows). Across workers, where a shuffle of rows costs more than the query:
/// for any GROUP BY over tumbling or hopping windows with EMIT FINAL over a replay of files,
/// whose final step reads the states in the replay's order and judges late records itself;
/// never for other windows (their partial steps would need the final step's watermark,
/// which workers do not share).
fn two_phase(
    options: &FreshetOptions,
    per_window: bool,
    aligned: bool,
    spec: &AggregateSpec,
    shape: &InputShape,
) -> Result<Option<(PartialAggregate, String)>> {
    let InputShape {
        parallel,
        file_order,
        one_partition,
    } = *shape;
    let setting = options.partitioning_strategy.as_str();
    let across_workers = options.across_workers;
    let final_rows = spec.emit == AggregateEmit::Final;
    let fixed_windows = spec
        .window
        .as_ref()
        .is_some_and(|w| matches!(w.spec, WindowSpec::Tumble { .. } | WindowSpec::Hop { .. }));
    let panes = spec
        .window
        .as_ref()
        .is_some_and(|w| matches!(w.spec, WindowSpec::Hop { size, slide } if size > slide));
    let destination = if spec.key_exprs().is_empty() {
        "one final stream"
    } else {
        "states hashed on the GROUP BY keys"
    };
    let partial = |reason: String| Ok(Some((PartialAggregate::try_new(spec)?, reason)));
    match setting {
        "two_phase" => partial(format!(
            "user: partial aggregates per source partition, {destination}"
        )),
        "" if has_distinct(spec) => Ok(None),
        "" if aligned && per_window && final_rows => partial(format!(
            "auto: keys that follow an inner window; partial aggregates per source partition, \
             none of whose rows is late (they come behind the inner window's progress), \
             {destination}"
        )),
        "" if across_workers && file_order && fixed_windows && final_rows => partial(format!(
            "auto: across workers, tumbling or hopping windows over a replay; partial \
             aggregates per source partition, late records judged by the final step in the \
             replay's order, {destination}"
        )),
        "" if !across_workers
            && panes
            && final_rows
            && if file_order {
                !options.keep_late_records
            } else {
                one_partition
            } =>
        {
            let lateness = if file_order {
                ", late records judged by the final step in the replay's order"
            } else {
                ""
            };
            partial(format!(
                "auto: hopping windows; partial aggregates per source partition and pane of \
                 the slide{lateness}, {destination}"
            ))
        }
        "" if per_window
            && !file_order
            && one_partition
            && !across_workers
            && final_rows
            && spec.window.as_ref().is_some_and(|w| !w.is_session()) =>
        {
            let groups = if spec.key_exprs().is_empty() {
                "no keys"
            } else {
                "keys that follow the window"
            };
            partial(format!(
                "auto: {groups}; partial aggregates per source partition, {destination}"
            ))
        }
        "" if spec.window.is_none() && final_rows && parallel => partial(format!(
            "auto: GROUP BY without a window; partial aggregates per source partition, {destination}"
        )),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{operators, plan};

    /// The plan of a per-symbol count of market_data over `window` at two streams, which
    /// must aggregate right after an exchange.
    fn windowed_count_plan(window: &str) -> String {
        windowed_count_plan_over(window, 2)
    }

    /// [`windowed_count_plan`] over a generator of `partitions` partitions.
    fn windowed_count_plan_over(window: &str, partitions: usize) -> String {
        let plan = plan(
            &format!("SELECT symbol, COUNT(*) FROM market_data GROUP BY symbol WINDOW {window}"),
            partitions,
            2,
        )
        .unwrap();
        assert!(
            operators(&plan)
                .windows(2)
                .any(|pair| pair == ["WindowAggregateExec", "StreamExchangeExec"]),
            "{plan}"
        );
        plan
    }

    #[test]
    fn a_keyed_tumbling_window_over_a_generator_routes_its_rows_in_time_runs() {
        let plan = windowed_count_plan("TUMBLING (trade_time, INTERVAL '1' SECOND)");
        // market_data makes a record a second: 131 072 one-second windows to a run.
        assert!(
            plan.contains("strategy=time_runs(trade_time@1, run=131072000)"),
            "{plan}"
        );
    }

    #[test]
    fn a_window_larger_than_a_time_run_hashes_its_keys() {
        // Two days of market_data hold 172 800 records, more than a run's 131 072.
        let plan = windowed_count_plan("TUMBLING (trade_time, INTERVAL '2' DAY)");
        assert!(plan.contains("strategy=hash([symbol"), "{plan}");
    }

    #[test]
    fn a_keyed_hopping_window_adds_each_record_to_its_pane_before_a_hash_exchange() {
        let plan = windowed_count_plan_over(
            "HOPPING (trade_time, INTERVAL '2' SECOND, INTERVAL '1' SECOND)",
            1,
        );
        assert!(plan.contains("strategy=hash([symbol"), "{plan}");
        assert!(
            plan.contains(
                "auto: hopping windows; partial aggregates per source partition and pane"
            ),
            "{plan}"
        );
        assert!(plan.contains("in panes of 1000"), "{plan}");
    }

    #[test]
    fn a_keyed_hopping_window_over_partitions_merged_in_event_time_hashes_its_rows() {
        // Partial steps would judge other records late than one step over the merge.
        let plan =
            windowed_count_plan("HOPPING (trade_time, INTERVAL '2' SECOND, INTERVAL '1' SECOND)");
        assert!(plan.contains("strategy=hash([symbol"), "{plan}");
        assert!(!plan.contains("partial_aggregate"), "{plan}");
    }

    #[test]
    fn a_hopping_window_as_wide_as_its_slide_is_not_split() {
        let plan =
            windowed_count_plan("HOPPING (trade_time, INTERVAL '1' SECOND, INTERVAL '1' SECOND)");
        assert!(plan.contains("strategy=hash([symbol"), "{plan}");
        assert!(!plan.contains("partial_aggregate"), "{plan}");
    }

    /// The plan of a GROUP BY `outer_keys` over per-symbol counts in hopping windows.
    fn window_over_window_plan(outer_keys: &str) -> String {
        plan(
            &format!(
                "SELECT MAX(num) AS most, {outer_keys} FROM (
                    SELECT symbol, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
                    FROM HOP(TABLE market_data, DESCRIPTOR(trade_time), INTERVAL '1' SECOND, INTERVAL '2' SECOND)
                    GROUP BY symbol, window_start, window_end
                ) GROUP BY {outer_keys}"
            ),
            1,
            2,
        )
        .unwrap()
    }

    #[test]
    fn a_group_by_of_an_inner_window_and_its_end_runs_in_two_phases() {
        let plan = window_over_window_plan("starttime, endtime");
        assert!(
            plan.contains("auto: keys that follow an inner window; partial aggregates"),
            "{plan}"
        );
        assert!(
            plan.contains("partial_aggregate=[max(num)] per input partition, no input row late"),
            "{plan}"
        );
    }

    #[test]
    fn a_group_by_of_an_inner_window_and_another_key_is_not_split() {
        let plan = window_over_window_plan("starttime, symbol");
        assert!(!plan.contains("partial_aggregate=[max(num)]"), "{plan}");
    }

    /// The plan of a keyless count per second over a generator of `partitions` partitions
    /// at two streams, which gathers to one stream.
    fn keyless_count_plan(partitions: usize) -> String {
        let sql =
            "SELECT COUNT(*) FROM market_data GROUP BY tumble(trade_time, INTERVAL '1' SECOND)";
        let plan = plan(sql, partitions, 2).unwrap();
        assert!(plan.contains("strategy=fan_in"), "{plan}");
        plan
    }

    #[test]
    fn a_window_without_keys_runs_in_two_phases() {
        let plan = keyless_count_plan(1);
        assert!(
            plan.contains("partial_aggregate=[count(Int64(1))]"),
            "{plan}"
        );
    }

    #[test]
    fn a_window_without_keys_over_partitions_merged_in_event_time_is_not_split() {
        // Partial steps taking turns in whatever order they come would judge lateness
        // differently from run to run.
        let plan = keyless_count_plan(2);
        assert!(!plan.contains("partial_aggregate"), "{plan}");
    }

    #[test]
    fn a_distinct_aggregate_shuffles_rows_rather_than_partial_sets() {
        let query = |aggregate: &str| {
            plan(
                &format!("SELECT symbol, {aggregate} FROM market_data GROUP BY symbol"),
                2,
                2,
            )
            .unwrap()
        };
        let counted = query("COUNT(trader_id)");
        assert!(counted.contains("partial_aggregate"), "{counted}");
        let distinct = query("COUNT(trader_id), COUNT(DISTINCT trader_id)");
        assert!(!distinct.contains("partial_aggregate"), "{distinct}");
        assert!(distinct.contains("strategy=hash([symbol"), "{distinct}");
        assert!(
            distinct.contains("no partial step: a DISTINCT aggregate's partial state"),
            "{distinct}"
        );
    }

    #[test]
    fn session_changes_without_running_kernels_are_refused() {
        let error = plan(
            "SELECT symbol, COUNT(DISTINCT trader_id) FROM market_data GROUP BY symbol WINDOW SESSION (trade_time, INTERVAL '1' SECOND) EMIT CHANGES",
            1,
            1,
        )
        .unwrap_err();
        assert!(error.to_string().contains("use EMIT FINAL"), "{error}");
    }
}
