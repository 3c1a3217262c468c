//! [`StreamingOverRule`]: puts Freshet's [`OverWindowExec`] in place of DataFusion's window
//! operators (`BoundedWindowAggExec`, `WindowAggExec`) over streams.
//!
//! DataFusion plans window functions as a sort by (PARTITION BY, ORDER BY) under one window
//! operator per distinct PARTITION BY / ORDER BY. On a stream the sort is neither possible
//! (unbounded) nor needed: the rule drops it and DataFusion's repartitioning, and feeds an
//! `OverWindowExec` from a [`StreamExchangeExec`] that routes by the PARTITION BY keys and
//! computes watermarks from the ORDER BY column, which must be a time (or integer) column
//! in ascending order. The window expressions DataFusion built are read back as
//! [`OverFunction`]s: the function, its argument, and the frame.
//!
//! Where the streaming operator cannot run a window (a frame reaching UNBOUNDED FOLLOWING,
//! ORDER BY on something else than a time column, …): on bounded input the rule leaves
//! DataFusion's operator in place, which gives the batch result at the end of the input; on
//! unbounded input it is a planning error that says what to change.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result, ScalarValue, plan_err};
use datafusion::logical_expr::{WindowFrame, WindowFrameBound, WindowFrameUnits};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::window::SlidingAggregateWindowExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::partial_sort::PartialSortExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::windows::{
    BoundedWindowAggExec, PlainAggregateWindowExpr, StandardWindowExpr, WindowAggExec, WindowExpr,
    WindowUDFExpr,
};
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};
use freshet_engine::kernels::BuiltinAggregate;
use freshet_engine::over::{
    FrameAggregateKind, FrameStart, OverFunction, OverFunctionKind, OverSpec, OverWindowExec,
    RankingKind,
};
use freshet_engine::window::{duration_in_unit, duration_text};
use freshet_engine::{StreamExchangeExec, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

use crate::options::FreshetOptions;
use crate::stream_inputs::{choose_strategy, event_time, reads_stream};

/// Frames longer than this are refused: per key the state holds a frame's rows.
const MAX_FRAME_ROWS: u64 = 100_000_000;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamingOverRule;

impl PhysicalOptimizerRule for StreamingOverRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = FreshetOptions::of(config);
        let mut fell_back = false;
        let streaming = Arc::clone(&plan)
            .transform_up(|node| match streaming_over(&node, &options, config)? {
                Over::Streamed(over) => Ok(Transformed::yes(over)),
                Over::FallBack => {
                    fell_back = true;
                    Ok(Transformed::no(node))
                }
                Over::NotAWindow => Ok(Transformed::no(node)),
            })?
            .data;
        // Windows feed each other: one left to DataFusion (sorted input, rows at the end)
        // next to streamed ones (time order per key, rows as they come) would see input out
        // of the order it needs. On bounded input all of them stay DataFusion's then.
        Ok(if fell_back { plan } else { streaming })
    }

    fn name(&self) -> &str {
        "FreshetStreamingOver"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What becomes of a plan node.
enum Over {
    /// A window operator over a stream, replaced by Freshet's.
    Streamed(Arc<dyn ExecutionPlan>),
    /// A window operator over a bounded stream that Freshet cannot stream: DataFusion's
    /// operator gives the batch result at the end of the input.
    FallBack,
    /// Not a window operator over a stream.
    NotAWindow,
}

/// The streaming replacement of `node`, if it is a window operator over a stream.
fn streaming_over(
    node: &Arc<dyn ExecutionPlan>,
    options: &FreshetOptions,
    config: &ConfigOptions,
) -> Result<Over> {
    let (window_exprs, input) = if let Some(window) = node.downcast_ref::<BoundedWindowAggExec>() {
        (window.window_expr(), window.input())
    } else if let Some(window) = node.downcast_ref::<WindowAggExec>() {
        (window.window_expr(), window.input())
    } else {
        return Ok(Over::NotAWindow);
    };
    let input = without_sorts(input)?;
    if !reads_stream(&input)? {
        return Ok(Over::NotAWindow);
    }
    match plan_over(window_exprs, &input, node.schema(), options, config) {
        Ok(over) => Ok(Over::Streamed(over)),
        Err(e) if !node.boundedness().is_unbounded() && matches!(e, DataFusionError::Plan(_)) => {
            Ok(Over::FallBack)
        }
        Err(e) => Err(e),
    }
}

fn plan_over(
    window_exprs: &[Arc<dyn WindowExpr>],
    input: &Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    options: &FreshetOptions,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(first) = window_exprs.first() else {
        return plan_err!("a window operator without window functions");
    };
    if reads_ahead_below(input)? {
        // Its rows leave late (when following rows arrive), behind rows of other keys, so a
        // watermark computed from its output would call them late here.
        return plan_err!(
            "{}: a window over the result of LEAD or a FOLLOWING frame with other PARTITION BY / ORDER BY cannot be streamed yet; compute it in a separate query",
            first.name()
        );
    }
    let input_schema = input.schema();
    let order_by = order_column(first.as_ref(), &input_schema)?;
    for expr in window_exprs {
        if !same_exprs(expr.partition_by(), first.partition_by())
            || order_column(expr.as_ref(), &input_schema)? != order_by
        {
            return plan_err!(
                "{}: window functions computed together must share PARTITION BY and ORDER BY",
                expr.name()
            );
        }
    }
    let functions = window_exprs
        .iter()
        .map(|expr| over_function(expr.as_ref(), input_schema.field(order_by).data_type()))
        .collect::<Result<Vec<_>>>()?;
    let reads_ahead = functions.iter().any(|f| f.lookahead() > 0);
    if reads_ahead && functions.iter().any(|f| f.peers) {
        return plan_err!(
            "LEAD or a FOLLOWING frame next to a RANGE frame (the default with ORDER BY) in one window cannot be streamed yet; give the aggregates ROWS frames"
        );
    }

    let order_time = Arc::new(Column::new(input_schema.field(order_by).name(), order_by))
        as Arc<dyn PhysicalExpr>;
    let event_time = event_time(input, &order_time)?;
    let keys = first.partition_by().to_vec();
    let partitions = config.execution.target_partitions;
    // Over the window functions below, this one reads its rows in their order only if
    // each of its keys stays on one of their streams (see `group_windows_below`).
    let input = &group_windows_below(input, &keys, partitions)?;
    let (strategy, reason) = if windows_below(input) {
        (
            RoutingStrategy::Sticky,
            "auto: the window functions below keep each key on one stream".to_string(),
        )
    } else {
        // A strategy the user chose that would give wrong results is refused, as for GROUP
        // BY: not a window Freshet cannot stream, so not left to DataFusion's operator either.
        partition_by_strategy(options, &keys, input)?
    };
    let exchange =
        StreamExchangeExec::try_new(Arc::clone(input), strategy, partitions, Some(event_time))?
            .with_reason(reason);
    let expire_after = match options.expire_after_ms.0 {
        0 => None,
        ms => Some(duration_in_unit(
            &ScalarValue::DurationMillisecond(Some(ms as i64)),
            input_schema.field(order_by).data_type(),
        )?),
    };
    let spec = OverSpec {
        partition_by: keys,
        order_by,
        functions,
        expire_after,
        schema,
    };
    Ok(Arc::new(OverWindowExec::try_new(Arc::new(exchange), spec)?))
}

/// The exchange strategy for a window's PARTITION BY `keys` over `input`. A strategy the
/// user chose that would give wrong results is a configuration error, not a reason to leave
/// the window to DataFusion's operator.
pub(crate) fn partition_by_strategy(
    options: &FreshetOptions,
    keys: &[Arc<dyn PhysicalExpr>],
    input: &Arc<dyn ExecutionPlan>,
) -> Result<(RoutingStrategy, String)> {
    choose_strategy(
        options.partitioning_strategy.as_str(),
        keys.to_vec(),
        input,
        "PARTITION BY",
    )
    .map_err(|error| match error {
        DataFusionError::Plan(message) => DataFusionError::Configuration(message),
        other => other,
    })
}

/// `input`, a chain of window operators (or anything else, returned as it is), with every
/// operator of the chain partitioned by keys among `keys`, the PARTITION BY of the window
/// above it.
///
/// A window function over another one's output reads that operator's streams. Hashed again
/// on other keys, a key's rows would come from several streams in the order they arrive,
/// and ties in the ORDER BY (ROW_NUMBER's numbers, a frame's rows) would depend on timing.
/// So each window below is hashed only on the keys it shares with every window above it
/// (on one stream if they share none: a window without PARTITION BY above one with), and the
/// windows above keep each stream's rows where they are (sticky), in the order the first
/// exchange gave them: the replay's.
fn group_windows_below(
    input: &Arc<dyn ExecutionPlan>,
    keys: &[Arc<dyn PhysicalExpr>],
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(projection) = input.downcast_ref::<ProjectionExec>() {
        // The keys as the projection's input has them; a key it computes is not shared.
        let below: Vec<Arc<dyn PhysicalExpr>> = keys
            .iter()
            .filter_map(|key| {
                let column = key.downcast_ref::<Column>()?;
                Some(Arc::clone(&projection.expr().get(column.index())?.expr))
            })
            .collect();
        let child = group_windows_below(projection.input(), &below, partitions)?;
        if Arc::ptr_eq(&child, projection.input()) {
            return Ok(Arc::clone(input));
        }
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        return Arc::clone(input).replace_children(vec![child], options);
    }
    let Some(over) = input.downcast_ref::<OverWindowExec>() else {
        return Ok(Arc::clone(input));
    };
    let own = &over.spec().partition_by;
    let shared: Vec<Arc<dyn PhysicalExpr>> = own
        .iter()
        .filter(|key| keys.iter().any(|k| k.eq(*key)))
        .cloned()
        .collect();
    let exchange = over.exchange();
    let below = group_windows_below(exchange.input(), &shared, partitions)?;
    let unchanged = shared.len() == own.len() && Arc::ptr_eq(&below, exchange.input());
    if unchanged {
        return Ok(Arc::clone(input));
    }
    let (strategy, reason) = match (windows_below(&below), shared.is_empty()) {
        (true, _) => (
            RoutingStrategy::Sticky,
            "auto: the window functions below keep each key on one stream".to_string(),
        ),
        (false, true) => (
            RoutingStrategy::FanIn,
            "auto: one stream, as a window above shares no PARTITION BY key".to_string(),
        ),
        (false, false) => (
            RoutingStrategy::Hash(shared),
            "auto: hash on the PARTITION BY keys shared with the windows above".to_string(),
        ),
    };
    let exchange = StreamExchangeExec::try_new(below, strategy, partitions, exchange.event_time())?
        .with_reason(reason);
    Ok(Arc::new(OverWindowExec::try_new(
        Arc::new(exchange),
        over.spec().clone(),
    )?))
}

/// Whether `plan` is a window operator, or projections over one.
fn windows_below(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut node = plan;
    while let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        node = projection.input();
    }
    node.downcast_ref::<OverWindowExec>().is_some()
}

/// The ORDER BY column of a window function: one ascending time or integer column.
fn order_column(expr: &dyn WindowExpr, schema: &SchemaRef) -> Result<usize> {
    let name = expr.name();
    let [order] = expr.order_by() else {
        return plan_err!(
            "{name}: a window over a stream needs ORDER BY on one event-time column (e.g. OVER (PARTITION BY k ORDER BY ts)); the stream is processed in that order"
        );
    };
    let Some(column) = order.expr.downcast_ref::<Column>() else {
        return plan_err!(
            "{name}: ORDER BY {} is not a column; a window over a stream is ordered by its event-time column",
            order.expr
        );
    };
    let data_type = schema.field(column.index()).data_type();
    let time_like = matches!(data_type, DataType::Timestamp(_, _) | DataType::Int64);
    if order.options.descending || !time_like {
        let direction = if order.options.descending {
            " DESC"
        } else {
            ""
        };
        return plan_err!(
            "{name}: ORDER BY {}{direction} ({data_type}) cannot be streamed: a window over a stream is ordered by its event time (a timestamp or Int64 column), ascending, as records come; a ranking by another column or in descending order is streamed only as a top-N, a query that keeps its first rows: SELECT … FROM (SELECT …, ROW_NUMBER() OVER (…) AS rn FROM stream) WHERE rn <= N",
            column.name()
        );
    }
    Ok(column.index())
}

/// The streaming function for one of DataFusion's window expressions.
fn over_function(expr: &dyn WindowExpr, order_type: &DataType) -> Result<OverFunction> {
    let name = expr.name().to_string();
    let field = expr.field()?;
    let frame = expr.get_window_frame();
    if let Some(standard) = expr.as_any().downcast_ref::<StandardWindowExpr>() {
        let Some(udf) = standard
            .get_standard_func_expr()
            .as_any()
            .downcast_ref::<WindowUDFExpr>()
        else {
            return plan_err!("{name}: this window function cannot be streamed");
        };
        let function = udf.fun().name().to_lowercase();
        let args = udf.args();
        let argument = args.first().cloned();
        let ranking = |kind| OverFunction {
            kind: OverFunctionKind::Ranking(kind),
            argument: None,
            frame: FrameStart::UnboundedPreceding,
            following: 0,
            peers: false,
            field: Arc::clone(&field),
        };
        return Ok(match function.as_str() {
            "row_number" => ranking(RankingKind::RowNumber),
            "rank" => ranking(RankingKind::Rank),
            "dense_rank" => ranking(RankingKind::DenseRank),
            "lag" | "lead" => {
                let offset = match args.get(1) {
                    Some(offset) => literal_integer(&name, offset, "offset")?,
                    None => 1,
                };
                if offset < 0 {
                    return plan_err!(
                        "{name}: a negative offset is not supported; use {} with a positive one",
                        if function == "lag" { "LEAD" } else { "LAG" }
                    );
                }
                let default = match args.get(2) {
                    Some(default) => literal(&name, default, "default")?,
                    None => ScalarValue::Null,
                };
                let offset = frame_length(&name, offset as u64)?;
                OverFunction {
                    kind: if function == "lag" {
                        OverFunctionKind::Lag { offset, default }
                    } else {
                        OverFunctionKind::Lead { offset, default }
                    },
                    argument,
                    frame: FrameStart::UnboundedPreceding,
                    following: 0,
                    peers: false,
                    field,
                }
            }
            "first_value" | "last_value" | "nth_value" => {
                let kind = match function.as_str() {
                    "first_value" => OverFunctionKind::FirstValue,
                    "last_value" => OverFunctionKind::LastValue,
                    _ => {
                        let n = match args.get(1) {
                            Some(n) => literal_integer(&name, n, "n")?,
                            None => return plan_err!("{name}: NTH_VALUE needs n"),
                        };
                        if n < 1 {
                            return plan_err!("{name}: NTH_VALUE's n must be at least 1, got {n}");
                        }
                        OverFunctionKind::NthValue(n as u64)
                    }
                };
                let (frame, following, peers) = frame_bounds(&name, frame, order_type)?;
                if matches!(frame, FrameStart::RangePreceding(_)) {
                    return plan_err!(
                        "{name}: FIRST_VALUE, LAST_VALUE and NTH_VALUE over a RANGE frame with an offset cannot be streamed yet; use a ROWS frame, or SUM, AVG, COUNT, MIN or MAX over the RANGE frame"
                    );
                }
                if following > 0 && kind != OverFunctionKind::FirstValue {
                    return plan_err!(
                        "{name}: LAST_VALUE and NTH_VALUE over a frame ending after the current row are not supported on unbounded streams yet; end the frame at CURRENT ROW"
                    );
                }
                OverFunction {
                    peers: peers && kind != OverFunctionKind::FirstValue,
                    kind,
                    argument,
                    frame,
                    following,
                    field,
                }
            }
            other => {
                return plan_err!(
                    "{name}: window function {other} is not supported on unbounded streams; supported: ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD, FIRST_VALUE, LAST_VALUE, NTH_VALUE, SUM, AVG, MIN, MAX, COUNT"
                );
            }
        });
    }
    let aggregate = if let Some(plain) = expr.as_any().downcast_ref::<PlainAggregateWindowExpr>() {
        plain.get_aggregate_expr()
    } else if let Some(sliding) = expr.as_any().downcast_ref::<SlidingAggregateWindowExpr>() {
        sliding.get_aggregate_expr()
    } else {
        return plan_err!("{name}: this window function cannot be streamed");
    };
    if aggregate.is_distinct() {
        return plan_err!("{name}: DISTINCT aggregates over a window cannot be streamed");
    }
    let kind = match BuiltinAggregate::of(aggregate) {
        Some(BuiltinAggregate::Sum) => FrameAggregateKind::Sum,
        Some(BuiltinAggregate::Avg) => FrameAggregateKind::Avg,
        Some(BuiltinAggregate::Count) => FrameAggregateKind::Count,
        Some(BuiltinAggregate::Min) => FrameAggregateKind::Min,
        Some(BuiltinAggregate::Max) => FrameAggregateKind::Max,
        None => {
            return plan_err!(
                "{name}: aggregate {} over a window is not supported on unbounded streams; supported: SUM, AVG, MIN, MAX, COUNT",
                aggregate.fun().name()
            );
        }
    };
    let arguments = aggregate.expressions();
    let [argument] = arguments.as_slice() else {
        return plan_err!("{name}: expected one argument");
    };
    let (frame, following, peers) = frame_bounds(&name, frame, order_type)?;
    Ok(OverFunction {
        kind: OverFunctionKind::Aggregate(kind),
        argument: Some(Arc::clone(argument)),
        frame,
        following,
        peers,
        field,
    })
}

/// Where a frame starts, how many rows after the current one it ends, and whether it takes
/// in the current row's peers (RANGE … CURRENT ROW); a RANGE offset is converted into the
/// unit of the ORDER BY column, of type `order_type`.
fn frame_bounds(
    name: &str,
    frame: &WindowFrame,
    order_type: &DataType,
) -> Result<(FrameStart, u64, bool)> {
    let peers = match frame.units {
        WindowFrameUnits::Rows => false,
        WindowFrameUnits::Range => true,
        WindowFrameUnits::Groups => {
            return plan_err!(
                "{name}: GROUPS frames cannot be streamed; use ROWS BETWEEN n PRECEDING AND CURRENT ROW"
            );
        }
    };
    let following = match &frame.end_bound {
        WindowFrameBound::CurrentRow => 0,
        WindowFrameBound::Following(value) if value.is_null() => {
            return plan_err!(
                "{name}: a frame ending at UNBOUNDED FOLLOWING needs the whole stream; end the frame at CURRENT ROW or n FOLLOWING"
            );
        }
        WindowFrameBound::Following(_) if peers => {
            return plan_err!(
                "{name}: RANGE frames ending after the current row cannot be streamed; use ROWS BETWEEN … AND n FOLLOWING"
            );
        }
        WindowFrameBound::Following(value) => frame_length(name, row_count(name, value)?)?,
        WindowFrameBound::Preceding(_) => {
            return plan_err!(
                "{name}: a frame ending before the current row cannot be streamed; end the frame at CURRENT ROW"
            );
        }
    };
    let start = match &frame.start_bound {
        WindowFrameBound::Preceding(value) if value.is_null() => FrameStart::UnboundedPreceding,
        WindowFrameBound::Preceding(value) if peers => {
            FrameStart::RangePreceding(range_offset(name, value, order_type)?)
        }
        WindowFrameBound::Preceding(value) => {
            FrameStart::Preceding(frame_length(name, row_count(name, value)?)?)
        }
        WindowFrameBound::CurrentRow if !peers => FrameStart::Preceding(0),
        other => {
            return plan_err!(
                "{name}: frame start {other} cannot be streamed; start the frame at n PRECEDING or UNBOUNDED PRECEDING"
            );
        }
    };
    Ok((start, following, peers))
}

/// A RANGE frame's offset (`INTERVAL '1' MINUTE`, or a number for an integer ORDER BY) in
/// the unit of the ORDER BY column.
fn range_offset(name: &str, value: &ScalarValue, order_type: &DataType) -> Result<i64> {
    let calendar = matches!(value, ScalarValue::IntervalMonthDayNano(Some(v)) if v.months != 0)
        || matches!(value, ScalarValue::IntervalYearMonth(Some(v)) if *v != 0);
    if calendar {
        return plan_err!(
            "{name}: a RANGE frame's offset {} varies with the calendar; write it in days or smaller units (INTERVAL '30' DAY)",
            duration_text(value)
        );
    }
    let offset = match value {
        ScalarValue::IntervalMonthDayNano(_)
        | ScalarValue::IntervalDayTime(_)
        | ScalarValue::DurationSecond(_)
        | ScalarValue::DurationMillisecond(_)
        | ScalarValue::DurationMicrosecond(_)
        | ScalarValue::DurationNanosecond(_) => duration_in_unit(value, order_type)?,
        other => match other.cast_to(&DataType::Int64) {
            Ok(ScalarValue::Int64(Some(offset))) => offset,
            _ => {
                return plan_err!(
                    "{name}: RANGE frame offset {value} must be an interval or a number"
                );
            }
        },
    };
    if offset < 0 {
        return plan_err!("{name}: RANGE frame offset {value} must not be negative");
    }
    Ok(offset)
}

/// A frame offset as a row count.
fn row_count(name: &str, value: &ScalarValue) -> Result<u64> {
    match value.cast_to(&DataType::UInt64) {
        Ok(ScalarValue::UInt64(Some(rows))) => Ok(rows),
        _ => plan_err!("{name}: frame offset {value} must be a non-negative row count"),
    }
}

/// A frame length (or LAG offset) the state can hold.
fn frame_length(name: &str, rows: u64) -> Result<u64> {
    if rows > MAX_FRAME_ROWS {
        return plan_err!(
            "{name}: a frame of {rows} rows is more than a key's state may hold ({MAX_FRAME_ROWS}); use UNBOUNDED PRECEDING for a running aggregate"
        );
    }
    Ok(rows)
}

fn literal(name: &str, expr: &Arc<dyn PhysicalExpr>, what: &str) -> Result<ScalarValue> {
    match expr.downcast_ref::<Literal>() {
        Some(literal) => Ok(literal.value().clone()),
        None => plan_err!("{name}: the {what} must be a constant, got {expr}"),
    }
}

fn literal_integer(name: &str, expr: &Arc<dyn PhysicalExpr>, what: &str) -> Result<i64> {
    match literal(name, expr, what)?.cast_to(&DataType::Int64) {
        Ok(ScalarValue::Int64(Some(value))) => Ok(value),
        _ => plan_err!("{name}: the {what} must be an integer constant, got {expr}"),
    }
}

fn same_exprs(a: &[Arc<dyn PhysicalExpr>], b: &[Arc<dyn PhysicalExpr>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.eq(b))
}

/// Whether `plan` holds a window operator that reads following rows.
fn reads_ahead_below(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| {
        Ok(node
            .downcast_ref::<OverWindowExec>()
            .is_some_and(|over| over.spec().functions.iter().any(|f| f.lookahead() > 0)))
    })
}

/// `plan` without the sorts and repartitions DataFusion put under a window operator, down to
/// the stream (a sort pushed below a stream's source goes too).
pub(crate) fn without_sorts(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let mut plan = Arc::clone(plan);
    loop {
        let next = if let Some(sort) = plan.downcast_ref::<SortExec>()
            && sort.fetch().is_none()
        {
            Arc::clone(sort.input())
        } else if let Some(sort) = plan.downcast_ref::<PartialSortExec>()
            && sort.fetch().is_none()
        {
            // Sorts the rows of each prefix run (what the window below emits) by time:
            // the stream's operators take rows in time order per key as they come.
            Arc::clone(sort.input())
        } else if let Some(repartition) = plan.downcast_ref::<RepartitionExec>() {
            Arc::clone(repartition.input())
        } else if let Some(coalesce) = plan.downcast_ref::<CoalescePartitionsExec>() {
            Arc::clone(coalesce.input())
        } else if let Some(merge) = plan.downcast_ref::<SortPreservingMergeExec>()
            && merge.fetch().is_none()
        {
            Arc::clone(merge.input())
        } else if plan.downcast_ref::<StreamSourceExec>().is_some()
            && let [child] = plan.children().as_slice()
            && let Some(sort) = child.downcast_ref::<SortExec>()
            && sort.fetch().is_none()
        {
            let unsorted = Arc::clone(sort.input());
            return Arc::clone(&plan).replace_children(
                vec![unsorted],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            );
        } else {
            return Ok(plan);
        };
        plan = next;
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{operators, plan, plan_over};

    #[test]
    fn a_window_function_runs_after_a_hash_exchange_on_its_partition_keys() {
        let plan = plan(
            "SELECT symbol, SUM(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM market_data",
            2,
            2,
        )
        .unwrap();
        let operators = operators(&plan);
        let over = operators.iter().position(|o| *o == "OverWindowExec");
        assert!(over.is_some(), "{plan}");
        assert_eq!(
            operators.get(over.unwrap() + 1),
            Some(&"StreamExchangeExec")
        );
        assert!(plan.contains("strategy=hash([symbol"), "{plan}");
    }

    #[test]
    fn a_descending_order_over_an_endless_stream_is_refused() {
        let error = plan_over(
            "SELECT ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time DESC) FROM market_data",
            None,
            1,
            1,
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("DESC (Timestamp(ms)) cannot be streamed"),
            "{error}"
        );
    }
}
