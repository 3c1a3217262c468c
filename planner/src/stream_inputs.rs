//! What Freshet's keyed streaming operators need to know about their input: how to feed
//! them (the exchange strategy and why) and where event time comes from.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, Result, ScalarValue, internal_err, plan_err};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, SymmetricHashJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};
use freshet_engine::aggregate::WindowAggregateExec;
use freshet_engine::join::IntervalJoinExec;
use freshet_engine::over::OverWindowExec;
use freshet_engine::watermark::time_plus_constant;
use freshet_engine::window::duration_in_unit;
use freshet_engine::{
    CoPartitionedSide, EventTime, PartitionKeyCheck, StreamExchangeExec, StreamFilterExec,
    StreamSourceExec,
};
use freshet_partitioner::RoutingStrategy;

use crate::join_parts::JoinParts;

/// The exchange strategy feeding a keyed operator (`role` names its keys: "GROUP BY" or
/// "PARTITION BY"), and why: the user's choice (query option or session setting) when it
/// gives correct results, else the automatic one.
pub(crate) fn choose_strategy(
    setting: &str,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    input: &Arc<dyn ExecutionPlan>,
    role: &str,
) -> Result<(RoutingStrategy, String)> {
    let key_names: Vec<&str> = keys
        .iter()
        .filter_map(|k| k.downcast_ref::<Column>().map(|c| c.name()))
        .collect();
    let key_columns: Vec<usize> = keys
        .iter()
        .filter_map(|k| k.downcast_ref::<Column>().map(Column::index))
        .collect();
    // Sticky keeps each input partition whole: right only when every row of a key is
    // already in one partition of the input.
    let keyed = if keys.is_empty() || key_columns.len() != keys.len() {
        Err("the keys are not all columns".to_string())
    } else {
        partitioned_by_columns(input, &key_columns)
    };
    let sticky_valid = keyed.is_ok();
    let keys_text = key_names.join(", ");
    Ok(match setting {
        "" if sticky_valid => (
            RoutingStrategy::Sticky,
            "auto: the source is partitioned by the keys".to_string(),
        ),
        "" | "fan_in" if keys.is_empty() => (
            RoutingStrategy::FanIn,
            format!(
                "{}: no keys, one stream",
                if setting.is_empty() { "auto" } else { "user" }
            ),
        ),
        "" => (
            RoutingStrategy::Hash(keys),
            format!("auto: hash on the {role} keys"),
        ),
        "hash" if keys.is_empty() => (
            RoutingStrategy::FanIn,
            "user chose hash; without keys everything goes to one stream".to_string(),
        ),
        "hash" => (RoutingStrategy::Hash(keys), "user".to_string()),
        "fan_in" => (RoutingStrategy::FanIn, "user".to_string()),
        // One input partition holds every key whole, whatever the keys: sticky is right when
        // the user asks for it (the automatic choice hashes, to spread keys over the streams).
        "sticky" if sticky_valid || input.output_partitioning().partition_count() == 1 => {
            (RoutingStrategy::Sticky, "user".to_string())
        }
        "sticky" => {
            return plan_err!(
                "partitioning_strategy 'sticky' would give wrong results: the input is not partitioned by the {role} keys ({keys_text}): {}; register the stream with partitioned_by=<keys> or use 'hash'",
                keyed.err().unwrap_or_default()
            );
        }
        "two_phase" => {
            return plan_err!(
                "partitioning_strategy 'two_phase' applies to GROUP BY with EMIT FINAL over tumbling or hopping windows or without a window; a {role} needs 'hash' (or 'sticky' on a source partitioned by its keys)"
            );
        }
        "round_robin" => {
            return plan_err!(
                "partitioning_strategy 'round_robin' would give wrong results: it sends one key's rows to several streams; a {role} needs 'hash' (or 'sticky' on a source partitioned by its keys)"
            );
        }
        other => {
            return plan_err!(
                "unknown partitioning_strategy '{other}': expected hash, sticky, round_robin, fan_in or two_phase"
            );
        }
    })
}

/// Whether every row with the same values in the columns `keys` of `plan`'s output is in
/// the same output partition (see [`keyed_partitions`]); the error says why not.
fn partitioned_by_columns(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &[usize],
) -> std::result::Result<(), String> {
    let keys: Vec<Option<usize>> = keys.iter().copied().map(Some).collect();
    keyed_partitions(plan, &keys).map(|_| ())
}

/// How the rows of a plan's output lie over its partitions, in terms of a list of key
/// columns: every row with equal values in the keys at `positions` is in one partition.
#[derive(Debug, PartialEq)]
enum KeyedPartitions {
    /// Hashed by Freshet's exchange on the keys at `positions` (of these types) into
    /// `partitions` outputs.
    Hashed {
        positions: Vec<usize>,
        types: Vec<DataType>,
        partitions: usize,
    },
    /// The partitions of stream `table`, declared partitioned by its columns that the keys
    /// (at the same positions) are: `columns` per key, and `declared` the positions of the
    /// declared columns among the keys (ascending), with their types.
    Declared {
        table: String,
        columns: Vec<Option<usize>>,
        partitions: usize,
        declared: Vec<(usize, DataType)>,
    },
    /// Windows of a tumbling-window aggregation whose exchange routed its rows in time
    /// runs: every row with equal window starts (the key at `position`, of type `time`) is
    /// in the partition of its run (`run` long from `origin`) among `partitions`.
    TimeRuns {
        position: usize,
        time: DataType,
        run: i64,
        origin: i64,
        partitions: usize,
    },
}

/// How `plan`'s rows lie over its partitions in terms of `keys` (output columns, per
/// position; `None` where a key is not a plain column), traced structurally through
/// projections, filters, sticky exchanges, window functions and windowed aggregations to the
/// hash exchange or the declared source that placed them. The error says why nothing did,
/// naming the stream or the node that regroups the rows.
fn keyed_partitions(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &[Option<usize>],
) -> std::result::Result<KeyedPartitions, String> {
    if let Some(source) = plan.downcast_ref::<StreamSourceExec>() {
        let schema = plan.schema();
        let by = &source.options().partitioned_by;
        let covered = by.iter().all(|name| {
            schema
                .index_of(name)
                .is_ok_and(|column| keys.contains(&Some(column)))
        });
        return match !by.is_empty() && covered {
            true => Ok(KeyedPartitions::Declared {
                table: source.table().to_string(),
                columns: keys.to_vec(),
                partitions: plan.output_partitioning().partition_count(),
                declared: keys
                    .iter()
                    .enumerate()
                    .filter_map(|(position, key)| {
                        let field = schema.field((*key)?);
                        by.contains(field.name())
                            .then(|| (position, field.data_type().clone()))
                    })
                    .collect(),
            }),
            false => Err(format!(
                "stream '{}' is not declared partitioned by them",
                source.table()
            )),
        };
    }
    if let Some(exchange) = plan.downcast_ref::<StreamExchangeExec>() {
        let routing = exchange.strategy();
        let hashed = |by: &[Arc<dyn PhysicalExpr>]| -> Option<KeyedPartitions> {
            let schema = exchange.input().schema();
            let mut positions = Vec::new();
            let mut types = Vec::new();
            for expr in by {
                let column = expr.downcast_ref::<Column>()?.index();
                positions.push(keys.iter().position(|k| *k == Some(column))?);
                types.push(schema.field(column).data_type().clone());
            }
            Some(KeyedPartitions::Hashed {
                positions,
                types,
                partitions: plan.output_partitioning().partition_count(),
            })
        };
        let other = || format!("an exchange below routes its rows by {routing}");
        return match routing {
            RoutingStrategy::Sticky => keyed_partitions(exchange.input(), keys),
            RoutingStrategy::Hash(by) => hashed(by).ok_or_else(other),
            _ => Err(other()),
        };
    }
    if let Some(aggregate) = plan.downcast_ref::<WindowAggregateExec>() {
        if aggregate.is_two_phase() {
            return Err("a two-phase aggregation below routes partial states".to_string());
        }
        if let (RoutingStrategy::TimeRuns(runs), Some(window)) =
            (aggregate.exchange().strategy(), aggregate.window())
        {
            // A window's rows all went to the partition of its time run.
            let position = keys
                .iter()
                .position(|k| *k == Some(window.position))
                .ok_or("the keys leave out the window its rows were routed by")?;
            return Ok(KeyedPartitions::TimeRuns {
                position,
                time: plan.schema().field(window.position).data_type().clone(),
                run: runs.run,
                origin: runs.origin,
                partitions: plan.output_partitioning().partition_count(),
            });
        }
        // A group's rows all went to the partition its keys hashed to.
        let below: Vec<Option<usize>> = keys
            .iter()
            .map(|key| {
                let (expr, _) = aggregate.group_by().get((*key)?)?;
                expr.downcast_ref::<Column>().map(Column::index)
            })
            .collect();
        let exchange: Arc<dyn ExecutionPlan> = Arc::clone(aggregate.exchange()) as _;
        return keyed_partitions(&exchange, &below);
    }
    let below: Vec<Option<usize>> = if let Some(projection) = plan.downcast_ref::<ProjectionExec>()
    {
        keys.iter()
            .map(|key| {
                projection.expr()[(*key)?]
                    .expr
                    .downcast_ref::<Column>()
                    .map(Column::index)
            })
            .collect()
    } else if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        match filter.projection() {
            Some(projection) => keys.iter().map(|key| Some(projection[(*key)?])).collect(),
            None => keys.to_vec(),
        }
    } else if plan.downcast_ref::<StreamFilterExec>().is_some()
        || plan.downcast_ref::<OverWindowExec>().is_some()
    {
        // The input's columns come first, in their partitions.
        keys.to_vec()
    } else {
        return Err(format!("{} below may regroup the rows", plan.name()));
    };
    match plan.children().as_slice() {
        [input] => {
            let width = input.schema().fields().len();
            let below: Vec<Option<usize>> = below
                .into_iter()
                .map(|k| k.filter(|&k| k < width))
                .collect();
            keyed_partitions(input, &below)
        }
        _ => Err(format!("{} below may regroup the rows", plan.name())),
    }
}

/// How the rows of two join sides lie over their partitions by the join keys.
#[derive(Debug)]
pub(crate) enum SidesAlike {
    /// Not known to be alike: both sides are hashed on the keys.
    No,
    /// Equal keys are in partitions of the same number on both sides, so a sticky exchange
    /// keeps them together: two sides hashed by Freshet's exchange on the same keys (of the
    /// same types, into as many partitions), as windowed aggregations are, two tumbling-window
    /// aggregations routed in the same time runs and joined on their windows, or two reads
    /// of one stream declared partitioned by the keys (a self-join).
    Yes,
    /// Two different streams, each declared partitioned by the keys at the same positions
    /// (of the same types) into as many partitions. Each declaration alone does not say that
    /// the two put a key in partitions of one number: joined sticky, their sources check it
    /// as the records flow ([`with_shared_key_check`]).
    Declared([DeclaredSide; 2]),
}

/// A stream of [`SidesAlike::Declared`]: its name and the columns of its declared keys in
/// the join's key order.
#[derive(Debug)]
pub(crate) struct DeclaredSide {
    table: String,
    columns: Vec<usize>,
}

/// Whether the rows of `left` and `right` already lie alike over their partitions by the
/// join keys (`left_keys[i]` against `right_keys[i]`); see [`SidesAlike`].
pub(crate) fn partitioned_alike(
    left: &Arc<dyn ExecutionPlan>,
    left_keys: &[Arc<dyn PhysicalExpr>],
    right: &Arc<dyn ExecutionPlan>,
    right_keys: &[Arc<dyn PhysicalExpr>],
) -> SidesAlike {
    let columns = |keys: &[Arc<dyn PhysicalExpr>]| -> Vec<Option<usize>> {
        keys.iter()
            .map(|k| k.downcast_ref::<Column>().map(Column::index))
            .collect()
    };
    match (
        keyed_partitions(left, &columns(left_keys)),
        keyed_partitions(right, &columns(right_keys)),
    ) {
        (Ok(left), Ok(right)) if left == right => SidesAlike::Yes,
        (
            Ok(KeyedPartitions::Declared {
                table: left_table,
                columns: left_columns,
                partitions: left_partitions,
                declared: left_declared,
            }),
            Ok(KeyedPartitions::Declared {
                table: right_table,
                columns: right_columns,
                partitions: right_partitions,
                declared: right_declared,
            }),
        ) if left_table != right_table
            && left_partitions == right_partitions
            && left_declared == right_declared =>
        {
            let side = |table: String, columns: &[Option<usize>]| DeclaredSide {
                table,
                columns: left_declared
                    .iter()
                    .filter_map(|(position, _)| columns[*position])
                    .collect(),
            };
            SidesAlike::Declared([
                side(left_table, &left_columns),
                side(right_table, &right_columns),
            ])
        }
        _ => SidesAlike::No,
    }
}

/// `left` and `right` with their declared sources (see [`SidesAlike::Declared`]) sharing one
/// check of their key partitioning, so that a key in partitions of different numbers in the
/// two streams fails the run.
pub(crate) fn with_shared_key_check(
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
    sides: &[DeclaredSide; 2],
) -> Result<[Arc<dyn ExecutionPlan>; 2]> {
    let plans = [left, right];
    let mut found = Vec::with_capacity(2);
    for (plan, side) in plans.iter().zip(sides) {
        let Some(source) = declared_source(plan, &side.table) else {
            return internal_err!("no source of stream '{}' below the join", side.table);
        };
        found.push(source);
    }
    let checks = PartitionKeyCheck::co_partitioned([0, 1].map(|i| CoPartitionedSide {
        table: &sides[i].table,
        schema: &found[i].0,
        columns: sides[i].columns.clone(),
        declared: &found[i].1,
    }));
    let mut out = Vec::with_capacity(2);
    for ((plan, side), check) in plans.into_iter().zip(sides).zip(checks) {
        let rewritten = Arc::clone(plan).transform_up(|node| {
            match node.downcast_ref::<StreamSourceExec>() {
                Some(source) if source.table() == side.table => {
                    let shared: Arc<dyn ExecutionPlan> =
                        source.with_key_check(Arc::clone(&check))?;
                    Ok(Transformed::yes(shared))
                }
                _ => Ok(Transformed::no(node)),
            }
        })?;
        out.push(rewritten.data);
    }
    match <[Arc<dyn ExecutionPlan>; 2]>::try_from(out) {
        Ok(pair) => Ok(pair),
        Err(_) => internal_err!("a join has two sides"),
    }
}

/// The schema and declared keys (as written) of stream `table`'s source in `plan`.
fn declared_source(plan: &Arc<dyn ExecutionPlan>, table: &str) -> Option<(SchemaRef, String)> {
    let mut found = None;
    let _ = plan.apply(|node| match node.downcast_ref::<StreamSourceExec>() {
        Some(source) if source.table() == table => {
            found = Some((node.schema(), source.options().partitioned_by.join("+")));
            Ok(TreeNodeRecursion::Stop)
        }
        _ => Ok(TreeNodeRecursion::Continue),
    });
    found
}

/// Where the exchange reads event times from, and the declared out-of-orderness (0 if none
/// is declared) and idle timeout of the stream that has `time` as its event-time column.
pub(crate) fn event_time(
    input: &Arc<dyn ExecutionPlan>,
    time: &Arc<dyn PhysicalExpr>,
) -> Result<EventTime> {
    let Some(column) = time.downcast_ref::<Column>() else {
        return plan_err!("a window's time must be a column of the stream, got {time}");
    };
    refuse_time_over_join(input, column.index())?;
    let time_type = time.data_type(&input.schema())?;
    if !matches!(time_type, DataType::Timestamp(_, _) | DataType::Int64) {
        return plan_err!(
            "a window's time column must be a timestamp or Int64, '{}' is {time_type}",
            column.name()
        );
    }

    let origin = event_time_columns(input)
        .into_iter()
        .find(|(c, _)| *c == column.index());
    match origin {
        Some((_, TimeOrigin::Published)) => {
            return Ok(EventTime {
                column: column.index(),
                delay: 0,
                idle_timeout: None,
            });
        }
        Some((
            _,
            TimeOrigin::Source {
                delay,
                idle_timeout,
            },
        )) => {
            let nanos = delay.as_nanos() as i64;
            return Ok(EventTime {
                column: column.index(),
                delay: duration_in_unit(&ScalarValue::DurationNanosecond(Some(nanos)), &time_type)?,
                idle_timeout,
            });
        }
        None => {}
    }
    // Not traced to its origin: the stream that declares a column of this name.
    let mut delay = None;
    let mut idle_timeout = None;
    input.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>()
            && source.options().event_time.as_deref() == Some(column.name())
        {
            idle_timeout = source.options().idle_timeout;
            let nanos = source.options().out_of_orderness.as_nanos() as i64;
            delay = Some(duration_in_unit(
                &ScalarValue::DurationNanosecond(Some(nanos)),
                &time_type,
            ));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let delay = delay.transpose()?.unwrap_or(0);
    Ok(EventTime {
        column: column.index(),
        delay,
        idle_timeout,
    })
}

/// The event time of the stream `plan` reads, when its output carries a source's declared
/// event-time column: an exchange over it then merges its partitions in event-time order,
/// even for an operator that needs no watermark. `None` if there is none, or the exchange
/// could not read it.
pub(crate) fn stream_event_time(plan: &Arc<dyn ExecutionPlan>) -> Option<EventTime> {
    let column = event_time_columns(plan)
        .into_iter()
        .find_map(|(column, origin)| {
            matches!(origin, TimeOrigin::Source { .. }).then_some(column)
        })?;
    let schema = plan.schema();
    let time: Arc<dyn PhysicalExpr> = Arc::new(Column::new(schema.field(column).name(), column));
    event_time(plan, &time).ok()
}

/// Whether `plan` is a replay of files read unit by unit, through filters and projections
/// (and the repartitions DataFusion put between, which the streaming rules take out): an
/// exchange over it applies its records in the files' order, and makes watermarks as one
/// partition reading the whole replay would (see `StreamSourceExec::positions`).
pub(crate) fn replays_in_file_order(plan: &Arc<dyn ExecutionPlan>) -> bool {
    replayed_source(plan).is_some_and(|source| source.positions().is_some())
}

/// The stream source `plan` reads through filters and projections only, if it does.
pub(crate) fn replayed_source(plan: &Arc<dyn ExecutionPlan>) -> Option<&StreamSourceExec> {
    let mut node = plan;
    loop {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
            return Some(source);
        }
        let row_wise = node.downcast_ref::<ProjectionExec>().is_some()
            || node.downcast_ref::<FilterExec>().is_some()
            || node.downcast_ref::<StreamFilterExec>().is_some()
            || node.downcast_ref::<RepartitionExec>().is_some();
        match node.children().as_slice() {
            [child] if row_wise => node = child,
            _ => return None,
        }
    }
}

/// Where an event-time column's watermark comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TimeOrigin {
    /// A stream's declared event time: out of order by up to the declared delay.
    Source {
        delay: std::time::Duration,
        idle_timeout: Option<std::time::Duration>,
    },
    /// A time an operator computes and publishes its progress in: the window start of a
    /// windowed aggregation that emits final rows (plus a constant: `window_end`), or an
    /// event time of a stream join's output.
    Published,
}

/// The columns of `plan`'s output that carry an event time with a watermark: a source's
/// declared event time and the window start of a windowed aggregation that emits final
/// rows, passed on by projections (a window start also plus a constant, as `window_end`),
/// filters and exchanges.
pub(crate) fn event_time_columns(plan: &Arc<dyn ExecutionPlan>) -> Vec<(usize, TimeOrigin)> {
    if let Some(source) = plan.downcast_ref::<StreamSourceExec>() {
        let options = source.options();
        let origin = TimeOrigin::Source {
            delay: options.out_of_orderness,
            idle_timeout: options.idle_timeout,
        };
        return options
            .event_time
            .as_deref()
            .and_then(|name| plan.schema().index_of(name).ok())
            .map(|column| (column, origin))
            .into_iter()
            .collect();
    }
    if let Some(aggregate) = plan.downcast_ref::<WindowAggregateExec>() {
        return aggregate
            .progress()
            .map(|(_, column)| (column, TimeOrigin::Published))
            .into_iter()
            .collect();
    }
    if let Some(join) = plan.downcast_ref::<IntervalJoinExec>() {
        return join
            .progress()
            .map(|(_, column)| (column, TimeOrigin::Published))
            .collect();
    }
    if let Some(lookup) = JoinParts::of(plan) {
        return lookup_event_times(&lookup);
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let below = event_time_columns(projection.input());
        let input_schema = projection.input().schema();
        return projection
            .expr()
            .iter()
            .enumerate()
            .filter_map(|(position, e)| {
                let (column, offset) = time_plus_constant(&e.expr, &input_schema)?;
                let (_, origin) = below.iter().find(|(c, _)| *c == column)?;
                // A shifted source time would need the shift in its delay's accounting too.
                (offset == 0 || *origin == TimeOrigin::Published).then_some((position, *origin))
            })
            .collect();
    }
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let below = event_time_columns(filter.input());
        return match filter.projection() {
            Some(projection) => projection
                .iter()
                .enumerate()
                .filter_map(|(position, column)| {
                    let (_, origin) = below.iter().find(|(c, _)| c == column)?;
                    Some((position, *origin))
                })
                .collect(),
            None => below,
        };
    }
    let passes_columns = plan.downcast_ref::<StreamFilterExec>().is_some()
        || plan.downcast_ref::<StreamExchangeExec>().is_some()
        || plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some();
    match plan.children().as_slice() {
        [input] if passes_columns => event_time_columns(input),
        _ => Vec::new(),
    }
}

/// The event times of a lookup's output: the stream side's, where every output row carries
/// them (the join does not also emit the table's unmatched rows, whose stream columns are
/// null). A lookup passes the stream's rows on in their order, so the stream's watermark
/// holds for them. A join of two streams (not yet Freshet's) has none.
fn lookup_event_times(join: &JoinParts) -> Vec<(usize, TimeOrigin)> {
    let (left_stream, right_stream) = (
        reads_event_stream(join.left).unwrap_or(true),
        reads_event_stream(join.right).unwrap_or(true),
    );
    let left_width = join.left.schema().fields().len();
    let stream_columns: Vec<(usize, TimeOrigin)> = match (left_stream, right_stream, join.join_type)
    {
        (
            true,
            false,
            JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti,
        ) => event_time_columns(join.left),
        (false, true, JoinType::RightSemi | JoinType::RightAnti) => event_time_columns(join.right),
        (false, true, JoinType::Inner | JoinType::Right) => event_time_columns(join.right)
            .into_iter()
            .map(|(column, origin)| (left_width + column, origin))
            .collect(),
        _ => Vec::new(),
    };
    match &join.projection {
        Some(columns) => stream_columns
            .into_iter()
            .filter_map(|(column, origin)| {
                Some((columns.iter().position(|&c| c == column)?, origin))
            })
            .collect(),
        None => stream_columns,
    }
}

/// Refuses event time read from column `time` of `input` when `input` holds a join and
/// the column is not one of the join output's event times: a join's output is in no bounded
/// disorder of an input's event time, so only the join's own progress gives it a watermark.
pub(crate) fn refuse_time_over_join(input: &Arc<dyn ExecutionPlan>, time: usize) -> Result<()> {
    if untraced_time_over_join(input, time)? {
        let name = input.schema().field(time).name().clone();
        return plan_err!(
            "'{name}' is not an event time of the join's output, so a window, OVER or join over it has no watermark: use the time column of either side of an inner interval join, of the preserved side of a LEFT or RIGHT join, or of the kept side of a semi or anti join; a lookup's output has the stream's, unless it also keeps the table's unmatched rows (a FULL join's output has none, nor has a join of two streams without a time bound, nor a table's column)"
        );
    }
    Ok(())
}

/// Over bounded input, an event time for column `time` when it is read over a join and is not
/// one of the join output's event times: in no bounded disorder, it has no watermark before
/// the end of the input, where every window closes (the batch answer; rows whose time is
/// NULL, as a FULL join gives, are dropped and counted). `None` for any other time.
pub(crate) fn end_of_input_time(
    input: &Arc<dyn ExecutionPlan>,
    time: usize,
) -> Result<Option<EventTime>> {
    if input.boundedness().is_unbounded() || !untraced_time_over_join(input, time)? {
        return Ok(None);
    }
    Ok(Some(EventTime {
        column: time,
        delay: i64::MAX,
        idle_timeout: None,
    }))
}

/// Whether column `time` of `input` is read over a join and is not one of the join output's
/// event times.
fn untraced_time_over_join(input: &Arc<dyn ExecutionPlan>, time: usize) -> Result<bool> {
    let over_join = input.exists(|node| {
        Ok(node.downcast_ref::<IntervalJoinExec>().is_some() || is_datafusion_join(node))
    })?;
    let traced = event_time_columns(input)
        .iter()
        .any(|&(column, _)| column == time);
    Ok(over_join && !traced)
}

/// Whether `plan` holds one of DataFusion's joins of two streams (not yet Freshet's interval
/// join). A lookup (a stream probing a bounded table) is not one: it passes its stream's rows
/// on in order.
pub(crate) fn holds_stream_join(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| {
        if !is_datafusion_join(node) {
            return Ok(false);
        }
        for child in node.children() {
            if !reads_event_stream(child)? {
                return Ok(false);
            }
        }
        Ok(true)
    })
}

/// Whether `node` is one of DataFusion's joins (whatever its null equality).
fn is_datafusion_join(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<HashJoinExec>().is_some()
        || node.downcast_ref::<SymmetricHashJoinExec>().is_some()
        || node.downcast_ref::<NestedLoopJoinExec>().is_some()
}

/// Whether `plan` reads one of Freshet's streams.
pub fn reads_stream(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| Ok(node.downcast_ref::<StreamSourceExec>().is_some()))
}

/// Whether `plan` reads a stream of events: one with an event time, or an unbounded one. A
/// bounded stream without an event time (a dimension given as `--table dim=dim.csv`) is,
/// in a join with a stream of events, a table the stream looks up.
pub fn reads_event_stream(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| {
        let Some(source) = node.downcast_ref::<StreamSourceExec>() else {
            return Ok(false);
        };
        Ok(source.options().event_time.is_some() || node.boundedness().is_unbounded())
    })
}

/// `plan` reading its stream's files over one source partition per core, when it is the
/// source (under filters and projections, which run per partition) and the source has such
/// a split (see [`StreamSourceExec::widened`]); `None` otherwise.
pub(crate) fn read_on_every_core(
    plan: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(source) = plan.downcast_ref::<StreamSourceExec>() {
        return Ok(source
            .widened()?
            .map(|source| source as Arc<dyn ExecutionPlan>));
    }
    let row_wise = plan.downcast_ref::<FilterExec>().is_some()
        || plan.downcast_ref::<StreamFilterExec>().is_some()
        || plan.downcast_ref::<ProjectionExec>().is_some();
    match plan.children().as_slice() {
        [child] if row_wise => match read_on_every_core(child)? {
            Some(child) => {
                let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                Ok(Some(
                    Arc::clone(plan).replace_children(vec![child], options)?,
                ))
            }
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// `plan` with DataFusion's repartitioning and coalescing taken off the top: Freshet's
/// exchange replaces them, and per-partition order must survive up to it.
pub(crate) fn below_exchanges(plan: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    let mut plan = plan;
    loop {
        if let Some(repartition) = plan.downcast_ref::<RepartitionExec>() {
            plan = repartition.input();
        } else if let Some(coalesce) = plan.downcast_ref::<CoalescePartitionsExec>() {
            plan = coalesce.input();
        } else {
            return plan;
        }
    }
}
