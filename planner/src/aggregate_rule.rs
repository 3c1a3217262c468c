//! [`StreamingAggregateRule`]: puts Freshet's window aggregation in place of DataFusion's
//! aggregation where a GROUP BY is keyed by a window function or the query says EMIT CHANGES.
//!
//! DataFusion plans the aggregation as usual (one `AggregateExec`, or a partial and a final
//! one around a hash repartition), which lowers every aggregate function, DISTINCT, FILTER
//! and ORDER BY for us. The rule keeps those lowered expressions and replaces the
//! aggregation with a [`StreamExchangeExec`] (hash on the non-window keys, fan-in without
//! keys; it computes watermarks from the window's time column and the stream's declared
//! out-of-orderness) under a [`WindowAggregateExec`]. A plain GROUP BY without EMIT CHANGES
//! stays DataFusion's: on bounded input it is the batch result.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use freshet_engine::aggregate::{AggregateEmit, AggregateSpec, WindowAggregateExec, WindowKey};
use freshet_engine::window::{WindowSpec, duration_in_unit};
use freshet_engine::{EventTime, StreamExchangeExec, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

use crate::options::FreshetOptions;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamingAggregateRule;

impl PhysicalOptimizerRule for StreamingAggregateRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = config
            .extensions
            .get::<FreshetOptions>()
            .cloned()
            .unwrap_or_default();
        let mut replaced = false;
        let plan = plan
            .transform_up(|node| match streaming_aggregate(&node, &options, config)? {
                Some(aggregate) => {
                    replaced = true;
                    Ok(Transformed::yes(aggregate))
                }
                None => Ok(Transformed::no(node)),
            })?
            .data;
        if options.emit == "changes" && !replaced {
            return plan_err!(
                "EMIT CHANGES needs an aggregation: add GROUP BY or an aggregate function, or drop EMIT CHANGES (a query without aggregation already emits every row as it comes)"
            );
        }
        Ok(plan)
    }

    fn name(&self) -> &str {
        "FreshetStreamingAggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The streaming replacement of `node`, if it is an aggregation Freshet runs.
fn streaming_aggregate(
    node: &Arc<dyn ExecutionPlan>,
    options: &FreshetOptions,
    config: &ConfigOptions,
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
        .filter(|(_, (e, _))| window_function(e).is_some())
        .map(|(i, _)| i)
        .collect();
    let changes = options.emit == "changes";
    if windows.is_empty() && !changes {
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
    let input = Arc::clone(below_exchanges(raw.input()));
    let input_schema = input.schema();
    let window = match windows.first() {
        None => None,
        Some(&position) => {
            let (expr, _) = &group_by.expr()[position];
            let Some((name, arguments)) = window_function(expr) else {
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
            if let (WindowSpec::Session { .. }, true) = (spec, changes) {
                return plan_err!(
                    "EMIT CHANGES is not supported on SESSION windows yet (sessions merge as records arrive); use EMIT FINAL"
                );
            }
            Some(WindowKey {
                position,
                spec,
                time,
            })
        }
    };
    let event_time = match &window {
        Some(window) => Some(event_time(&input, &window.time)?),
        None => None,
    };
    let keys: Vec<Arc<dyn PhysicalExpr>> = group_by
        .expr()
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != window.as_ref().map(|w| w.position))
        .map(|(_, (e, _))| Arc::clone(e))
        .collect();
    let (strategy, reason) = choose_strategy(&options.partitioning_strategy, keys, &input)?;
    let exchange = StreamExchangeExec::try_new(
        input,
        strategy,
        config.execution.target_partitions,
        event_time,
    )?
    .with_reason(reason);
    let allowed_lateness = match &window {
        Some(window) => duration_in_unit(
            &ScalarValue::DurationMillisecond(Some(options.allowed_lateness_ms as i64)),
            &window.time.data_type(&input_schema)?,
        )?,
        None => 0,
    };
    let emit = match (changes, options.changes_per.as_str()) {
        (false, _) => AggregateEmit::Final,
        (true, "batch") => AggregateEmit::ChangesPerBatch,
        (true, "record") => AggregateEmit::ChangesPerRecord,
        (true, other) => {
            return plan_err!("freshet.changes_per = '{other}': expected 'record' or 'batch'");
        }
    };
    let spec = AggregateSpec {
        group_by: group_by.expr().to_vec(),
        aggregates: raw.aggr_expr().to_vec(),
        filters: raw.filter_expr().to_vec(),
        window,
        emit,
        allowed_lateness,
        schema: aggregate.schema(),
    };
    let streaming = WindowAggregateExec::try_new(Arc::new(exchange), spec)?;
    Ok(Some(Arc::new(streaming)))
}

/// The exchange strategy feeding a keyed aggregation, and why: the user's choice (query
/// option or session setting) when it gives correct results, else the automatic one.
fn choose_strategy(
    setting: &str,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    input: &Arc<dyn ExecutionPlan>,
) -> Result<(RoutingStrategy, String)> {
    let key_names: Vec<&str> = keys
        .iter()
        .filter_map(|k| k.downcast_ref::<Column>().map(|c| c.name()))
        .collect();
    let mut sources: Vec<(String, Vec<String>)> = Vec::new();
    input.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
            sources.push((
                source.table().to_string(),
                source.options().partitioned_by.clone(),
            ));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    // Sticky keeps each source partition whole: right only when every source is already
    // partitioned by (a subset of) the keys.
    let unpartitioned: Vec<&str> = sources
        .iter()
        .filter(|(_, by)| by.is_empty() || !by.iter().all(|c| key_names.contains(&c.as_str())))
        .map(|(table, _)| table.as_str())
        .collect();
    let sticky_valid = !keys.is_empty()
        && key_names.len() == keys.len()
        && !sources.is_empty()
        && unpartitioned.is_empty();
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
            "auto: keyed aggregation".to_string(),
        ),
        "hash" if keys.is_empty() => (
            RoutingStrategy::FanIn,
            "user chose hash; without keys everything goes to one stream".to_string(),
        ),
        "hash" => (RoutingStrategy::Hash(keys), "user".to_string()),
        "fan_in" => (RoutingStrategy::FanIn, "user".to_string()),
        "sticky" if sticky_valid => (RoutingStrategy::Sticky, "user".to_string()),
        "sticky" => {
            return plan_err!(
                "partitioning_strategy 'sticky' would give wrong results: stream {} is not declared partitioned by the GROUP BY keys ({keys_text}); register it with partitioned_by=<keys> or use 'hash'",
                unpartitioned
                    .first()
                    .map_or("input".to_string(), |t| format!("'{t}'"))
            );
        }
        "round_robin" => {
            return plan_err!(
                "partitioning_strategy 'round_robin' would give wrong results: it sends one key's rows to several streams; a GROUP BY needs 'hash' (or 'sticky' on a source partitioned by its keys)"
            );
        }
        other => {
            return plan_err!(
                "unknown partitioning_strategy '{other}': expected hash, sticky, round_robin or fan_in"
            );
        }
    })
}

/// `plan` with DataFusion's repartitioning and coalescing taken off the top: Freshet's
/// exchange replaces them, and per-partition order must survive up to it.
fn below_exchanges(plan: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
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

/// `(name, arguments)` of a `tumble` / `hop` / `session` call.
fn window_function(expr: &Arc<dyn PhysicalExpr>) -> Option<(&str, &[Arc<dyn PhysicalExpr>])> {
    let function = expr.downcast_ref::<ScalarFunctionExpr>()?;
    matches!(function.name(), "tumble" | "hop" | "session")
        .then(|| (function.name(), function.args()))
}

/// Where the exchange reads event times from, and the declared out-of-orderness of the
/// stream that has `time` as its event-time column (0 if none declares it).
fn event_time(input: &Arc<dyn ExecutionPlan>, time: &Arc<dyn PhysicalExpr>) -> Result<EventTime> {
    let Some(column) = time.downcast_ref::<Column>() else {
        return plan_err!("a window's time must be a column of the stream, got {time}");
    };
    let time_type = time.data_type(&input.schema())?;
    let mut delay = None;
    input.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>()
            && source.options().event_time.as_deref() == Some(column.name())
        {
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
    if !matches!(time_type, DataType::Timestamp(_, _) | DataType::Int64) {
        return plan_err!(
            "a window's time column must be a timestamp or Int64, '{}' is {time_type}",
            column.name()
        );
    }
    Ok(EventTime {
        column: column.index(),
        delay,
    })
}
