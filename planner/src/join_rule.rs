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
use datafusion::common::{JoinSide, JoinType, Result, ScalarValue, plan_err};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::utils::{conjunction_opt, split_conjunction};
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};
use freshet_engine::join::{INTERVAL_JOIN_TYPES, IntervalJoinExec, IntervalJoinSpec, TimeBound};
use freshet_engine::watermark::linear_time_term;
use freshet_engine::window::{duration_in_unit, duration_text};
use freshet_engine::{StreamExchangeExec, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

use crate::join_broadcast::broadcast_side;
use crate::join_parts::JoinParts;
use crate::options::FreshetOptions;
use crate::stream_filter_rule::with_filter_projection;
use crate::stream_inputs::{
    SidesAlike, below_exchanges, event_time, event_time_columns, partitioned_alike, reads_stream,
    with_shared_key_check,
};

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
    if !INTERVAL_JOIN_TYPES.contains(&parts.join_type) {
        return Ok(None);
    }
    let mut left = unmerged(parts.left)?;
    let mut right = unmerged(parts.right)?;
    if !reads_stream(&left)? || !reads_stream(&right)? {
        return Ok(None);
    }
    let mut projection = parts.projection.clone();
    let time_columns = |plan: &Arc<dyn ExecutionPlan>| -> Vec<usize> {
        let declared = declared_event_times(plan);
        let schema = plan.schema();
        let mut columns: Vec<usize> = event_time_columns(plan).iter().map(|(c, _)| *c).collect();
        columns.extend(
            (0..schema.fields().len()).filter(|&i| declared.contains(schema.field(i).name())),
        );
        columns.sort_unstable();
        columns.dedup();
        columns
    };
    let mut left_times = time_columns(&left);
    let mut right_times = time_columns(&right);
    let bound_read = read_bound(
        &parts.on,
        parts.filter,
        &left_times,
        &right_times,
        &left,
        &right,
    )?;
    let endless = left.boundedness().is_unbounded() || right.boundedness().is_unbounded();
    let mut regular = false;
    let Some(BoundRead {
        bound,
        filter,
        keys_in_bound,
    }) = (match bound_read {
        Some(read) => Some(read),
        None => {
            // Over endless streams a bound of months is refused by name.
            if let Some(interval) = parts
                .filter
                .filter(|_| endless)
                .and_then(|f| calendar_interval(f.expression()))
            {
                return plan_err!(
                    "the join's time bound uses {interval}, whose length varies with the calendar: an interval join's bound is a fixed duration; write it in days or smaller units (INTERVAL '30' DAY)"
                );
            }
            // A regular join keys its state by each side's event time: one a projection
            // right above the stream dropped is carried through it, at its end.
            let constant = !endless && options.state_ttl_ms.0 == 0;
            if left_times.is_empty()
                && let Some((with_time, time)) = with_time_column(&left, constant)?
            {
                projection = Some(projection_past_left_column(
                    projection.as_deref(),
                    parts.join_type,
                    left.schema().fields().len(),
                    right.schema().fields().len(),
                ));
                (left, left_times) = (with_time, vec![time]);
            }
            if right_times.is_empty()
                && let Some((with_time, time)) = with_time_column(&right, constant)?
            {
                let join_width = match parts.join_type {
                    JoinType::LeftSemi | JoinType::LeftAnti => left.schema().fields().len(),
                    JoinType::RightSemi | JoinType::RightAnti => right.schema().fields().len(),
                    _ => left.schema().fields().len() + right.schema().fields().len(),
                };
                projection = Some(projection.unwrap_or_else(|| (0..join_width).collect()));
                (right, right_times) = (with_time, vec![time]);
            }
            let read = regular_join(&parts, &left_times, &right_times, &left, options, endless)?;
            regular = read.as_ref().is_some_and(|r| r.bound.is_unbounded());
            read
        }
    })
    else {
        return Ok(None);
    };
    let (left, right) = (&left, &right);
    let left_time: Arc<dyn PhysicalExpr> = Arc::new(Column::new(
        left.schema().field(bound.left_time).name(),
        bound.left_time,
    ));
    let right_time: Arc<dyn PhysicalExpr> = Arc::new(Column::new(
        right.schema().field(bound.right_time).name(),
        bound.right_time,
    ));
    let time_type = left_time.data_type(&left.schema())?;
    // A regular join's rows are never freed before the end, so none of its rows is late.
    let allowed_lateness = match regular {
        true => i64::MAX,
        false => duration_in_unit(
            &ScalarValue::DurationMillisecond(Some(options.allowed_lateness_ms.0 as i64)),
            &time_type,
        )?,
    };
    let streams = config.execution.target_partitions;
    // Every key routes (equal keys meet in one stream); the keys the bound stands for are
    // checked as the bound.
    let left_keys: Vec<PhysicalExprRef> = parts.on.iter().map(|(l, _)| Arc::clone(l)).collect();
    let right_keys: Vec<PhysicalExprRef> = parts.on.iter().map(|(_, r)| Arc::clone(r)).collect();
    let alike = match left_keys.is_empty() {
        true => SidesAlike::No,
        false => partitioned_alike(left, &left_keys, right, &right_keys),
    };
    let (left, right) = match &alike {
        SidesAlike::Declared(sides) => {
            let [left, right] = with_shared_key_check(left, right, sides)?;
            (left, right)
        }
        _ => (Arc::clone(left), Arc::clone(right)),
    };
    let (left, right) = (&left, &right);
    // A side of one row per window goes to every stream, the other stays in its streams.
    let broadcast = match alike {
        SidesAlike::No if !left_keys.is_empty() && !regular => broadcast_side(
            left,
            right,
            (bound.left_time, bound.right_time),
            parts.join_type,
            streams,
        ),
        _ => None,
    };
    let exchange = |input: &Arc<dyn ExecutionPlan>,
                    side: JoinSide,
                    keys: Vec<PhysicalExprRef>,
                    time: &Arc<dyn PhysicalExpr>|
     -> Result<Arc<StreamExchangeExec>> {
        let (strategy, reason) = if broadcast == Some(side) {
            (
                RoutingStrategy::Broadcast,
                "auto: one row per window, sent to every stream (the other side stays in its streams)".to_string(),
            )
        } else if broadcast.is_some() {
            (
                RoutingStrategy::Sticky,
                "auto: rows stay in their streams, none of them late (their operator publishes their time); the other side, one row per window, is broadcast".to_string(),
            )
        } else if keys.is_empty() {
            (
                RoutingStrategy::FanIn,
                "auto: no equality keys, one stream".to_string(),
            )
        } else if matches!(alike, SidesAlike::Yes) {
            (
                RoutingStrategy::Sticky,
                "auto: both sides are already partitioned alike by the join keys".to_string(),
            )
        } else if matches!(alike, SidesAlike::Declared(_)) {
            (
                RoutingStrategy::Sticky,
                "auto: both streams are declared partitioned by the join keys into as many partitions (checked as the records flow)".to_string(),
            )
        } else {
            (
                RoutingStrategy::Hash(keys),
                "auto: hash on the join keys".to_string(),
            )
        };
        // A regular join needs no watermark (its state lasts to the end): a side whose
        // time is a constant has none.
        let event_time = match regular {
            true => event_time(input, time).ok(),
            false => Some(event_time(input, time)?),
        };
        let exchange =
            StreamExchangeExec::try_new(Arc::clone(input), strategy, streams, event_time)?
                .with_reason(reason);
        // The side left in its streams runs where it is read: across workers, on its worker.
        Ok(Arc::new(match broadcast.is_some_and(|b| b != side) {
            true => exchange.reading_inputs_inline(),
            false => exchange,
        }))
    };
    let state_keys = parts
        .on
        .iter()
        .enumerate()
        .filter(|(key, _)| !keys_in_bound.contains(key))
        .map(|(_, pair)| pair.clone())
        .collect();
    let spec = IntervalJoinSpec {
        on: state_keys,
        filter,
        join_type: parts.join_type,
        bound,
        allowed_lateness,
        projection,
    };
    let join = IntervalJoinExec::try_new(
        exchange(left, JoinSide::Left, left_keys, &left_time)?,
        exchange(right, JoinSide::Right, right_keys, &right_time)?,
        spec,
    )?;
    Ok(Some(Arc::new(join)))
}

/// A join of two streams with equality keys but no time bound (a regular join), as an
/// interval join: with `state_ttl_ms`, rows match within that much event time of each other
/// and are kept that long; without it, over bounded streams only, every row is kept to the
/// end of the other input (`[i64::MIN, i64::MAX]`). `None` where neither applies (an endless
/// stream without a TTL is refused by the unbounded-input check) or a side has no event time.
fn regular_join(
    parts: &JoinParts,
    left_times: &[usize],
    right_times: &[usize],
    left: &Arc<dyn ExecutionPlan>,
    options: &FreshetOptions,
    endless: bool,
) -> Result<Option<BoundRead>> {
    // Only streams read as they are (filtered, projected): joins of aggregations' outputs
    // (window joins) and of tables keep their own plans.
    if parts.on.is_empty() || !reads_stream_alone(parts.left) || !reads_stream_alone(parts.right) {
        return Ok(None);
    }
    let (Some(&left_time), Some(&right_time)) = (left_times.first(), right_times.first()) else {
        if options.state_ttl_ms.0 > 0 {
            let unread: Vec<String> = [(left_times, parts.left), (right_times, parts.right)]
                .into_iter()
                .filter(|(times, _)| times.is_empty())
                .flat_map(|(_, plan)| declared_stream_times(plan))
                .collect();
            return plan_err!(
                "a join with state_ttl_ms keeps each row for that long in event time, but the query reads no event time of {}: select it too (for example in the SELECT list)",
                unread.join(" or ")
            );
        }
        return Ok(None);
    };
    let (lower, upper) = match options.state_ttl_ms.0 {
        0 if endless => return Ok(None),
        0 => (i64::MIN, i64::MAX),
        ttl => {
            let time_type = left.schema().field(left_time).data_type().clone();
            let ttl = duration_in_unit(
                &ScalarValue::DurationMillisecond(Some(ttl as i64)),
                &time_type,
            )?;
            (ttl.saturating_neg(), ttl)
        }
    };
    Ok(Some(BoundRead {
        bound: TimeBound::between_times(left_time, right_time, lower, upper),
        filter: parts.filter.cloned(),
        keys_in_bound: Vec::new(),
    }))
}

/// `plan` with a time column appended to its output, and the column's position: the
/// declared event time that a projection (or a filter's projection) right above the stream
/// or its filters dropped or, where
/// `constant` allows and there is none (DataFusion read no time from the stream), a
/// constant 0; `None` if neither.
fn with_time_column(
    plan: &Arc<dyn ExecutionPlan>,
    constant: bool,
) -> Result<Option<(Arc<dyn ExecutionPlan>, usize)>> {
    // A filter that also projects (DataFusion's projection pushdown) is a projection above
    // a filter.
    let plan = &match plan.downcast_ref::<FilterExec>() {
        Some(filter) if filter.projection().is_some() => {
            let unprojected =
                FilterExec::try_new(Arc::clone(filter.predicate()), Arc::clone(filter.input()))?;
            with_filter_projection(filter, Arc::new(unprojected))?
        }
        _ => Arc::clone(plan),
    };
    // A filter passes its input's columns: the time is carried from below it.
    if let Some(filter) = plan.downcast_ref::<FilterExec>()
        && filter.projection().is_none()
    {
        let Some((input, time)) = with_time_column(filter.input(), constant)? else {
            return Ok(None);
        };
        let filtered = FilterExec::try_new(Arc::clone(filter.predicate()), input)?;
        return Ok(Some((Arc::new(filtered), time)));
    }
    let (mut expressions, input): (Vec<ProjectionExpr>, Arc<dyn ExecutionPlan>) =
        match plan.downcast_ref::<ProjectionExec>() {
            Some(projection) => (projection.expr().to_vec(), Arc::clone(projection.input())),
            None => {
                let schema = plan.schema();
                let passed = (0..schema.fields().len())
                    .map(|i| {
                        let name = schema.field(i).name();
                        ProjectionExpr::new(Arc::new(Column::new(name, i)), name.clone())
                    })
                    .collect();
                (passed, Arc::clone(plan))
            }
        };
    let declared = declared_event_times(&input);
    let schema = input.schema();
    let time: Arc<dyn PhysicalExpr> =
        match (0..schema.fields().len()).find(|&i| declared.contains(schema.field(i).name())) {
            Some(time) if plan.is::<ProjectionExec>() => {
                Arc::new(Column::new(schema.field(time).name(), time))
            }
            _ if constant => Arc::new(Literal::new(ScalarValue::Int64(Some(0)))),
            _ => return Ok(None),
        };
    expressions.push(ProjectionExpr::new(time, "__event_time".to_string()));
    let position = expressions.len() - 1;
    let projected = ProjectionExec::try_new(expressions, input)?;
    Ok(Some((Arc::new(projected), position)))
}

/// A join's output projection (`None`: every column) once its left input gains a column at
/// its end (`left_width` columns before): the right side's columns move one on.
fn projection_past_left_column(
    projection: Option<&[usize]>,
    join_type: JoinType,
    left_width: usize,
    right_width: usize,
) -> Vec<usize> {
    let both_sides = !matches!(
        join_type,
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::RightSemi | JoinType::RightAnti
    );
    let width = match join_type {
        JoinType::LeftSemi | JoinType::LeftAnti => left_width,
        JoinType::RightSemi | JoinType::RightAnti => right_width,
        _ => left_width + right_width,
    };
    let columns: Vec<usize> = match projection {
        Some(columns) => columns.to_vec(),
        None => (0..width).collect(),
    };
    columns
        .into_iter()
        .map(|c| match both_sides && c >= left_width {
            true => c + 1,
            false => c,
        })
        .collect()
}

/// `plan` without the repartitions and merges DataFusion put above the streams for its own
/// join, also under projections and filters: Freshet's exchange takes their place, and each
/// source partition's order must reach it (a merge would interleave partitions out of
/// event-time order).
fn unmerged(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let mut plan = below_exchanges(plan);
    // A sort for an order the join's output was to keep: the interval join keeps none.
    while let Some(sort) = plan.downcast_ref::<SortExec>()
        && sort.fetch().is_none()
    {
        plan = below_exchanges(sort.input());
    }
    let passes_partitions = plan.downcast_ref::<ProjectionExec>().is_some()
        || plan.downcast_ref::<FilterExec>().is_some();
    if passes_partitions && let [input] = plan.children().as_slice() {
        let below = unmerged(input)?;
        if !Arc::ptr_eq(&below, input) {
            let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
            return Arc::clone(plan).replace_children(vec![below], options);
        }
    }
    Ok(Arc::clone(plan))
}

/// Whether `plan` reads one stream with a declared event time through filters, projections
/// and repartitions only.
fn reads_stream_alone(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut sources = 0;
    let mut other = false;
    let _ = plan.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
            sources += 1;
            other |= source.options().event_time.is_none();
            return Ok(TreeNodeRecursion::Jump);
        }
        let name = node.name();
        other |= [
            "Aggregate",
            "Join",
            "Window",
            "Sort",
            "TopN",
            "Union",
            "Over",
        ]
        .iter()
        .any(|operator| name.contains(operator));
        Ok(TreeNodeRecursion::Continue)
    });
    sources == 1 && !other
}

/// The streams under `plan` with their declared event-time columns, as `stream.column`.
fn declared_stream_times(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut names = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>()
            && let Some(name) = &source.options().event_time
        {
            names.push(format!("'{}' ({}.{name})", source.table(), source.table()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names
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
#[derive(Clone, Copy)]
struct TimeTerm {
    side: JoinSide,
    column: usize,
    offset: i64,
}

/// The two inputs of a join, and their event-time columns.
struct Inputs<'a> {
    left: &'a Arc<dyn ExecutionPlan>,
    right: &'a Arc<dyn ExecutionPlan>,
    left_times: &'a [usize],
    right_times: &'a [usize],
}

impl Inputs<'_> {
    fn plan(&self, side: JoinSide) -> &Arc<dyn ExecutionPlan> {
        match side {
            JoinSide::Left => self.left,
            _ => self.right,
        }
    }

    fn is_time(&self, side: JoinSide, column: usize) -> bool {
        match side {
            JoinSide::Left => self.left_times.contains(&column),
            JoinSide::Right => self.right_times.contains(&column),
            JoinSide::None => false,
        }
    }

    /// `term` on an event-time column of its side: as it is, or through a projection right
    /// below the join that computes `time ± constant` into a column of its own (DataFusion
    /// pushes such join-filter terms down).
    fn on_time_column(&self, term: TimeTerm) -> Option<TimeTerm> {
        // Through the projection first: a shifted time column (`window_end - 5 s`) is a time
        // column too, but every term must end on the same one.
        self.through_projection(term)
            .or_else(|| self.is_time(term.side, term.column).then_some(term))
    }

    /// `term` on the time column a projection right below the join passes on, when the
    /// projection computes the term's column from it plus a constant.
    fn through_projection(&self, term: TimeTerm) -> Option<TimeTerm> {
        let projection = self.plan(term.side).downcast_ref::<ProjectionExec>()?;
        let input = projection.input();
        let expr = &projection.expr().get(term.column)?.expr;
        let resolve = |column: &Column| Some((term.side, column.index()));
        let time_type = |_: JoinSide, column: usize| {
            input
                .schema()
                .fields()
                .get(column)
                .map(|f| f.data_type().clone())
        };
        let inner = linear_term(expr, &resolve, &time_type)?;
        // The projection's output column that passes the input time column through.
        let passed = projection.expr().iter().position(|e| {
            e.expr
                .downcast_ref::<Column>()
                .is_some_and(|c| c.index() == inner.column)
        })?;
        self.is_time(term.side, passed).then_some(TimeTerm {
            side: term.side,
            column: passed,
            offset: term.offset.saturating_add(inner.offset),
        })
    }

    fn time_type(&self, side: JoinSide, column: usize) -> Option<DataType> {
        let schema = self.plan(side).schema();
        schema.fields().get(column).map(|f| f.data_type().clone())
    }
}

/// The bound on `right.time - left.time` that the equality keys and the filter's conjuncts
/// set, if they set a lower and an upper one between an event-time column of each side, and
/// the filter without the conjuncts the bound stands for (the join checks the bound itself).
fn read_bound(
    on: &[(PhysicalExprRef, PhysicalExprRef)],
    filter: Option<&JoinFilter>,
    left_times: &[usize],
    right_times: &[usize],
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
) -> Result<Option<BoundRead>> {
    let inputs = Inputs {
        left,
        right,
        left_times,
        right_times,
    };
    let time_type = |side: JoinSide, column: usize| inputs.time_type(side, column);
    // Every comparison `a op b` of two time terms, with the filter conjunct or the equality
    // key it is.
    let mut comparisons: Vec<(TimeTerm, Operator, TimeTerm, Source)> = Vec::new();
    for (key, (l, r)) in on.iter().enumerate() {
        let left_column = |c: &Column| Some((JoinSide::Left, c.index()));
        let right_column = |c: &Column| Some((JoinSide::Right, c.index()));
        if let (Some(a), Some(b)) = (
            linear_term(l, &left_column, &time_type),
            linear_term(r, &right_column, &time_type),
        ) {
            comparisons.push((a, Operator::Eq, b, Source::Key(key)));
        }
    }
    if let Some(filter) = filter {
        let resolve = |c: &Column| {
            let index = filter.column_indices().get(c.index())?;
            Some((index.side, index.index))
        };
        for (index, conjunct) in split_conjunction(filter.expression()).iter().enumerate() {
            let Some(binary) = conjunct.downcast_ref::<BinaryExpr>() else {
                continue;
            };
            if let (Some(a), Some(b)) = (
                linear_term(binary.left(), &resolve, &time_type),
                linear_term(binary.right(), &resolve, &time_type),
            ) {
                comparisons.push((a, *binary.op(), b, Source::Conjunct(index)));
            }
        }
    }
    let mut columns: Option<(usize, usize)> = None;
    let mut lower = i64::MIN;
    let mut upper = i64::MAX;
    // The conjuncts and keys the bound stands for exactly.
    let mut in_bound = Vec::new();
    let mut keys_in_bound = Vec::new();
    // Comparisons of one side's event time with another column of the other side, as
    // `right - left op constant`: candidates for an until column.
    let mut until_candidates = Vec::new();
    for (a, op, b, source) in comparisons {
        if a.side == b.side {
            continue;
        }
        // Each term on its side's event time where it is one (through a projection that
        // shifts it, whose shift joins the term's offset).
        let (time_a, time_b) = (inputs.on_time_column(a), inputs.on_time_column(b));
        let both_times = time_a.is_some() && time_b.is_some();
        let (a, b) = (time_a.unwrap_or(a), time_b.unwrap_or(b));
        // `a op b` as `right - left op' constant`.
        let (op, constant, l, r) = match a.side {
            JoinSide::Right => (op, b.offset.saturating_sub(a.offset), b, a),
            _ => match op.swap() {
                Some(op) => (op, a.offset.saturating_sub(b.offset), a, b),
                None => continue,
            },
        };
        if !both_times {
            if time_a.is_some() != time_b.is_some() {
                until_candidates.push((l, op, constant, r, source));
            }
            continue;
        }
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
        match source {
            Source::Conjunct(index) => in_bound.push(index),
            Source::Key(key) => keys_in_bound.push(key),
        }
    }
    let Some((left_time, right_time)) = columns else {
        return Ok(None);
    };
    // A missing upper bound may come from a column of the left side that ends its rows'
    // reach (`right.time <= left.expires`), a missing lower one from such a column of the
    // right side (`right.expires >= left.time`).
    let mut bound = TimeBound::between_times(left_time, right_time, lower, upper);
    let time_type = left.schema().field(left_time).data_type().clone();
    // The conjuncts an until column was taken from.
    let mut until_sources = Vec::new();
    for (l, op, constant, r, source) in until_candidates {
        let same_type = |side: JoinSide, column: usize| {
            inputs.time_type(side, column).as_ref() == Some(&time_type)
        };
        if upper == i64::MAX
            && r.column == right_time
            && l.column != left_time
            && same_type(JoinSide::Left, l.column)
        {
            let limit = match op {
                Operator::LtEq => constant,
                Operator::Lt => constant.saturating_sub(1),
                _ => continue,
            };
            bound.upper = bound.upper.min(limit);
            bound.left_until = Some(l.column);
            until_sources.push(source);
        } else if lower == i64::MIN
            && l.column == left_time
            && r.column != right_time
            && same_type(JoinSide::Right, r.column)
        {
            let limit = match op {
                Operator::GtEq => constant,
                Operator::Gt => constant.saturating_add(1),
                _ => continue,
            };
            bound.lower = bound.lower.max(limit);
            bound.right_until = Some(r.column);
            until_sources.push(source);
        }
    }
    if bound.left_until.is_some() && bound.right_until.is_some() {
        return Ok(None);
    }
    if bound.lower == i64::MIN || bound.upper == i64::MAX {
        return Ok(None);
    }
    // The join checks the whole bound, an until column's end included, so the conjuncts it
    // stands for leave the filter: when one conjunct gave the until column. Several (two
    // columns, or two limits on one) leave the filter whole, to check what the bound does not.
    match until_sources.as_slice() {
        [] => {}
        [Source::Conjunct(index)] => in_bound.push(*index),
        _ => in_bound.clear(),
    }
    let left_type = left.schema().field(left_time).data_type().clone();
    let right_type = right.schema().field(right_time).data_type().clone();
    if left_type != right_type {
        return plan_err!(
            "the join's time bound compares event times of different types ({left_type} and {right_type}); cast one to the other's type in the stream's definition"
        );
    }
    // The filter without the conjuncts the bound checks already.
    let rest = filter.and_then(|filter| {
        let kept: Vec<Arc<dyn PhysicalExpr>> = split_conjunction(filter.expression())
            .into_iter()
            .enumerate()
            .filter(|(index, _)| !in_bound.contains(index))
            .map(|(_, conjunct)| Arc::clone(conjunct))
            .collect();
        conjunction_opt(kept).map(|expression| {
            JoinFilter::new(
                expression,
                filter.column_indices().to_vec(),
                Arc::clone(filter.schema()),
            )
        })
    });
    Ok(Some(BoundRead {
        bound,
        filter: rest,
        keys_in_bound,
    }))
}

/// Where a comparison of two time terms was found.
#[derive(Clone, Copy)]
enum Source {
    /// The equality key at this position of the join's ON keys.
    Key(usize),
    /// The conjunct at this position of the join's filter.
    Conjunct(usize),
}

/// The time bound a join's ON clause sets, and what of the clause it stands for.
struct BoundRead {
    bound: TimeBound,
    /// The filter without the conjuncts the bound checks.
    filter: Option<JoinFilter>,
    /// The equality keys that are the bound (`a.window_start = b.window_start`): the join
    /// checks them as the bound, by time within the other keys, rather than as keys of
    /// their own (a key per window would give every row a key of its own).
    keys_in_bound: Vec<usize>,
}

/// `expr` as a time column of a side plus a constant: `resolve` names the side and column of
/// a column reference, `time_type` the type a constant is converted into.
/// An interval of months or years in `expr`, as SQL, if it holds one.
fn calendar_interval(expr: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let mut found = None;
    let _ = expr.apply(|node| {
        if let Some(literal) = node.downcast_ref::<Literal>() {
            let months = match literal.value() {
                ScalarValue::IntervalMonthDayNano(Some(v)) => v.months != 0,
                ScalarValue::IntervalYearMonth(Some(v)) => *v != 0,
                _ => false,
            };
            if months {
                found = Some(duration_text(literal.value()));
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

fn linear_term(
    expr: &Arc<dyn PhysicalExpr>,
    resolve: &dyn Fn(&Column) -> Option<(JoinSide, usize)>,
    time_type: &dyn Fn(JoinSide, usize) -> Option<DataType>,
) -> Option<TimeTerm> {
    let time_type = |(side, column): &(JoinSide, usize)| time_type(*side, *column);
    let ((side, column), offset) = linear_time_term(expr, resolve, &time_type)?;
    Some(TimeTerm {
        side,
        column,
        offset,
    })
}
