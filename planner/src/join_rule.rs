//! [`StreamingJoinRule`]: puts Freshet's [`IntervalJoinExec`] in place of DataFusion's join
//! of two streams whose ON clause bounds their event times against each other.
//!
//! DataFusion plans `a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '5' SECOND AND
//! a.ts + INTERVAL '1' SECOND` as a hash join (a symmetric hash join over endless streams)
//! with equality keys and a filter. When both inputs read streams, the rule reads the
//! filter's conjuncts that compare the two sides' event-time columns (each the `event_time`
//! its stream declares), plus or minus constant intervals, in any of `BETWEEN`, `>=`, `<=`,
//! `>`, `<` and `=` on either side, into one bound `right.ts - left.ts in [lower, upper]`.
//! With a lower and an upper bound the join becomes an interval join: each side goes through
//! a [`StreamExchangeExec`] hashed on its keys (one stream without keys) that computes its
//! watermark, and the filter is kept whole. A join without such a bound stays DataFusion's:
//! over bounded replays it runs as a batch join; over endless streams the unbounded-input
//! check refuses it and suggests a bound.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinSide, JoinType, NullEquality, Result, ScalarValue, plan_err};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, SymmetricHashJoinExec};
use freshet_engine::join::{IntervalJoinExec, IntervalJoinSpec, TimeBound};
use freshet_engine::window::duration_in_unit;
use freshet_engine::{StreamExchangeExec, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

use crate::options::FreshetOptions;
use crate::stream_inputs::{below_exchanges, event_time, reads_stream};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamingJoinRule;

impl PhysicalOptimizerRule for StreamingJoinRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = FreshetOptions::of(config);
        Ok(plan
            .transform_up(|node| match interval_join(&node, &options, config)? {
                Some(join) => Ok(Transformed::yes(join)),
                None => Ok(Transformed::no(node)),
            })?
            .data)
    }

    fn name(&self) -> &str {
        "FreshetStreamingJoin"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What the rule reads of a DataFusion join.
struct JoinParts<'a> {
    left: &'a Arc<dyn ExecutionPlan>,
    right: &'a Arc<dyn ExecutionPlan>,
    on: Vec<(PhysicalExprRef, PhysicalExprRef)>,
    filter: Option<&'a JoinFilter>,
    join_type: JoinType,
    projection: Option<Vec<usize>>,
}

impl<'a> JoinParts<'a> {
    fn of(node: &'a Arc<dyn ExecutionPlan>) -> Option<Self> {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            return (join.null_equality() == NullEquality::NullEqualsNothing).then(|| Self {
                left: join.left(),
                right: join.right(),
                on: join.on().to_vec(),
                filter: join.filter(),
                join_type: *join.join_type(),
                projection: join.projection.as_ref().map(|p| p.to_vec()),
            });
        }
        if let Some(join) = node.downcast_ref::<SymmetricHashJoinExec>() {
            return (join.null_equality() == NullEquality::NullEqualsNothing).then(|| Self {
                left: join.left(),
                right: join.right(),
                on: join.on().to_vec(),
                filter: join.filter(),
                join_type: *join.join_type(),
                projection: None,
            });
        }
        if let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() {
            return Some(Self {
                left: join.left(),
                right: join.right(),
                on: Vec::new(),
                filter: join.filter(),
                join_type: *join.join_type(),
                projection: join.projection().as_ref().map(|p| p.to_vec()),
            });
        }
        None
    }
}

/// The interval join that replaces `node`, if it is a join of two streams bounded in event
/// time.
fn interval_join(
    node: &Arc<dyn ExecutionPlan>,
    options: &FreshetOptions,
    config: &ConfigOptions,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(parts) = JoinParts::of(node) else {
        return Ok(None);
    };
    if !matches!(
        parts.join_type,
        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
    ) {
        return Ok(None);
    }
    let left = below_exchanges(parts.left);
    let right = below_exchanges(parts.right);
    if !reads_stream(left)? || !reads_stream(right)? {
        return Ok(None);
    }
    let Some(filter) = parts.filter else {
        return Ok(None);
    };
    let time_columns = |plan: &Arc<dyn ExecutionPlan>| -> Vec<usize> {
        let declared = declared_event_times(plan);
        let schema = plan.schema();
        (0..schema.fields().len())
            .filter(|&i| declared.contains(schema.field(i).name()))
            .collect()
    };
    let Some(bound) = read_bound(
        filter,
        &time_columns(left),
        &time_columns(right),
        left,
        right,
    )?
    else {
        return Ok(None);
    };
    let left_time: Arc<dyn PhysicalExpr> = Arc::new(Column::new(
        left.schema().field(bound.left_time).name(),
        bound.left_time,
    ));
    let right_time: Arc<dyn PhysicalExpr> = Arc::new(Column::new(
        right.schema().field(bound.right_time).name(),
        bound.right_time,
    ));
    let time_type = left_time.data_type(&left.schema())?;
    let allowed_lateness = duration_in_unit(
        &ScalarValue::DurationMillisecond(Some(options.allowed_lateness_ms.0 as i64)),
        &time_type,
    )?;
    let streams = config.execution.target_partitions;
    let exchange = |input: &Arc<dyn ExecutionPlan>,
                    keys: Vec<PhysicalExprRef>,
                    time: &Arc<dyn PhysicalExpr>|
     -> Result<Arc<StreamExchangeExec>> {
        let (strategy, reason) = if keys.is_empty() {
            (
                RoutingStrategy::FanIn,
                "auto: no equality keys, one stream".to_string(),
            )
        } else {
            (
                RoutingStrategy::Hash(keys),
                "auto: hash on the join keys".to_string(),
            )
        };
        let event_time = event_time(input, time)?;
        Ok(Arc::new(
            StreamExchangeExec::try_new(Arc::clone(input), strategy, streams, Some(event_time))?
                .with_reason(reason),
        ))
    };
    let left_keys = parts.on.iter().map(|(l, _)| Arc::clone(l)).collect();
    let right_keys = parts.on.iter().map(|(_, r)| Arc::clone(r)).collect();
    let spec = IntervalJoinSpec {
        on: parts.on.clone(),
        filter: Some(filter.clone()),
        join_type: parts.join_type,
        bound,
        allowed_lateness,
        projection: parts.projection,
    };
    let join = IntervalJoinExec::try_new(
        exchange(left, left_keys, &left_time)?,
        exchange(right, right_keys, &right_time)?,
        spec,
    )?;
    Ok(Some(Arc::new(join)))
}

/// The event-time columns the streams under `plan` declare.
fn declared_event_times(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut names = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>()
            && let Some(name) = &source.options().event_time
        {
            names.push(name.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names
}

/// One side of a comparison: an event-time column plus a constant offset.
struct TimeTerm {
    side: JoinSide,
    column: usize,
    offset: i64,
}

/// The bound on `right.time - left.time` the filter's conjuncts set, if they set a lower and
/// an upper one between an event-time column of each side.
fn read_bound(
    filter: &JoinFilter,
    left_times: &[usize],
    right_times: &[usize],
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
) -> Result<Option<TimeBound>> {
    let is_time = |side: JoinSide, column: usize| match side {
        JoinSide::Left => left_times.contains(&column),
        JoinSide::Right => right_times.contains(&column),
        JoinSide::None => false,
    };
    let mut columns: Option<(usize, usize)> = None;
    let mut lower = i64::MIN;
    let mut upper = i64::MAX;
    for conjunct in split_conjunction(filter.expression()) {
        let Some(binary) = conjunct.downcast_ref::<BinaryExpr>() else {
            continue;
        };
        let (Some(a), Some(b)) = (
            time_term(binary.left(), filter, left, right)?,
            time_term(binary.right(), filter, left, right)?,
        ) else {
            continue;
        };
        if a.side == b.side || !is_time(a.side, a.column) || !is_time(b.side, b.column) {
            continue;
        }
        // `a op b` as `right - left op' constant`.
        let (op, constant, l, r) = match a.side {
            JoinSide::Right => (*binary.op(), b.offset.saturating_sub(a.offset), &b, &a),
            _ => match binary.op().swap() {
                Some(op) => (op, a.offset.saturating_sub(b.offset), &a, &b),
                None => continue,
            },
        };
        if columns.is_some_and(|c| c != (l.column, r.column)) {
            continue;
        }
        match op {
            Operator::GtEq => lower = lower.max(constant),
            Operator::Gt => lower = lower.max(constant.saturating_add(1)),
            Operator::LtEq => upper = upper.min(constant),
            Operator::Lt => upper = upper.min(constant.saturating_sub(1)),
            Operator::Eq => {
                lower = lower.max(constant);
                upper = upper.min(constant);
            }
            _ => continue,
        }
        columns = Some((l.column, r.column));
    }
    let Some((left_time, right_time)) = columns else {
        return Ok(None);
    };
    if lower == i64::MIN || upper == i64::MAX {
        return Ok(None);
    }
    let left_type = left.schema().field(left_time).data_type().clone();
    let right_type = right.schema().field(right_time).data_type().clone();
    if left_type != right_type {
        return plan_err!(
            "the join's time bound compares event times of different types ({left_type} and {right_type}); cast one to the other's type in the stream's definition"
        );
    }
    Ok(Some(TimeBound {
        left_time,
        right_time,
        lower,
        upper,
    }))
}

/// `expr` (over the filter's schema) as an event-time column of one side plus a constant.
fn time_term(
    expr: &Arc<dyn PhysicalExpr>,
    filter: &JoinFilter,
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
) -> Result<Option<TimeTerm>> {
    if let Some(column) = expr.downcast_ref::<Column>() {
        let Some(index) = filter.column_indices().get(column.index()) else {
            return Ok(None);
        };
        return Ok(Some(TimeTerm {
            side: index.side,
            column: index.index,
            offset: 0,
        }));
    }
    if let Some(cast) = expr.downcast_ref::<CastExpr>() {
        // A cast between time types of one unit keeps the values.
        if matches!(
            cast.cast_type(),
            DataType::Timestamp(_, _) | DataType::Int64
        ) {
            return time_term(cast.expr(), filter, left, right);
        }
        return Ok(None);
    }
    let Some(binary) = expr.downcast_ref::<BinaryExpr>() else {
        return Ok(None);
    };
    let sign = match binary.op() {
        Operator::Plus => 1,
        Operator::Minus => -1,
        _ => return Ok(None),
    };
    let Some(mut term) = time_term(binary.left(), filter, left, right)? else {
        // `constant + time`.
        if sign == 1
            && let Some(constant) = binary.left().downcast_ref::<Literal>()
            && let Some(mut term) = time_term(binary.right(), filter, left, right)?
            && let Some(offset) = offset_of(constant.value(), &term, left, right)
        {
            term.offset = term.offset.saturating_add(offset);
            return Ok(Some(term));
        }
        return Ok(None);
    };
    let Some(constant) = binary.right().downcast_ref::<Literal>() else {
        return Ok(None);
    };
    let Some(offset) = offset_of(constant.value(), &term, left, right) else {
        return Ok(None);
    };
    term.offset = term.offset.saturating_add(offset.saturating_mul(sign));
    Ok(Some(term))
}

/// A constant added to `term`'s column, in the column's unit.
fn offset_of(
    value: &ScalarValue,
    term: &TimeTerm,
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
) -> Option<i64> {
    let schema = match term.side {
        JoinSide::Left => left.schema(),
        _ => right.schema(),
    };
    let time_type = schema.field(term.column).data_type().clone();
    // Not a constant duration (a month, a fraction of the unit): no bound is read from it.
    match value {
        ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::Int32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int8(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt8(Some(v)) => Some(i64::from(*v)),
        other => duration_in_unit(other, &time_type).ok(),
    }
}
