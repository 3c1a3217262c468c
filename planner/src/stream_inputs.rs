//! What Freshet's keyed streaming operators need to know about their input: how to feed
//! them (the exchange strategy and why) and where event time comes from.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use freshet_engine::join::IntervalJoinExec;
use freshet_engine::window::duration_in_unit;
use freshet_engine::{EventTime, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

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
            format!("auto: hash on the {role} keys"),
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
                "partitioning_strategy 'sticky' would give wrong results: stream {} is not declared partitioned by the {role} keys ({keys_text}); register it with partitioned_by=<keys> or use 'hash'",
                unpartitioned
                    .first()
                    .map_or("input".to_string(), |t| format!("'{t}'"))
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

/// Where the exchange reads event times from, and the declared out-of-orderness (0 if none
/// is declared) and idle timeout of the stream that has `time` as its event-time column.
pub(crate) fn event_time(
    input: &Arc<dyn ExecutionPlan>,
    time: &Arc<dyn PhysicalExpr>,
) -> Result<EventTime> {
    let Some(column) = time.downcast_ref::<Column>() else {
        return plan_err!("a window's time must be a column of the stream, got {time}");
    };
    // Watermarks come from sources: a join's output is in no bounded disorder of any one
    // event time, so a watermark computed from it would drop rows as late.
    if input.exists(|node| Ok(node.downcast_ref::<IntervalJoinExec>().is_some()))? {
        return plan_err!(
            "a window, OVER or join over the output of a stream join is not supported yet: the join's output carries no watermark of its own. Window or join each stream before joining, or aggregate the join's output without a window"
        );
    }
    let time_type = time.data_type(&input.schema())?;
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
    if !matches!(time_type, DataType::Timestamp(_, _) | DataType::Int64) {
        return plan_err!(
            "a window's time column must be a timestamp or Int64, '{}' is {time_type}",
            column.name()
        );
    }
    Ok(EventTime {
        column: column.index(),
        delay,
        idle_timeout,
    })
}

/// Whether `plan` reads one of Freshet's streams.
pub fn reads_stream(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| Ok(node.downcast_ref::<StreamSourceExec>().is_some()))
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
