//! [`TopNRule`]: a filter that keeps the first N of a ROW_NUMBER over a stream becomes
//! Freshet's [`TopNExec`].
//!
//! `SELECT … FROM (SELECT …, ROW_NUMBER() OVER (PARTITION BY k ORDER BY s) AS rn FROM stream)
//! WHERE rn <= N` (or `rn < N`, `rn = 1`, with the number on either side, and other
//! conditions ANDed to it, which filter the top-N's rows) is planned by
//! DataFusion as a filter over a window operator over a sort: an answer at the end of the
//! input, ties ranked as the sort leaves them. Over a stream this rule puts a `TopNExec` in
//! their place, fed by Freshet's exchange hashed on the PARTITION BY keys (one stream without
//! keys), which keeps each key's rows in the order they are applied in. Ties rank the earlier
//! arrival first; ordered by the stream's event time descending with N = 1 (keep-last
//! de-duplication), the later arrival wins. A bounded input gives the batch answer at its end;
//! an endless one (or EMIT CHANGES) an upsert changelog keyed by the keys and the rank.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::{PhysicalExpr, conjunction_opt, split_conjunction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::windows::{
    BoundedWindowAggExec, StandardWindowExpr, WindowAggExec, WindowExpr, WindowUDFExpr,
};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::StreamExchangeExec;
use freshet_engine::over::{TieOrder, TopNEmit, TopNExec, TopNSpec};
use freshet_partitioner::RoutingStrategy;

use crate::options::{EmitSetting, FreshetOptions};
use crate::over_rule::{partition_by_strategy, without_sorts};
use crate::stream_filter_rule::with_filter_projection;
use crate::stream_inputs::{reads_stream, stream_event_time};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct TopNRule;

impl PhysicalOptimizerRule for TopNRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = FreshetOptions::of(config);
        plan.transform_up(|node| {
            let Some(filter) = node.downcast_ref::<FilterExec>() else {
                return Ok(Transformed::no(node));
            };
            match top_n(filter, &options, config)? {
                Some(top) => Ok(Transformed::yes(top)),
                None => Ok(Transformed::no(node)),
            }
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetTopN"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The top-N operator `filter` is, if it keeps the first rows of a ROW_NUMBER over a stream.
fn top_n(
    filter: &FilterExec,
    options: &FreshetOptions,
    config: &ConfigOptions,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // DataFusion may put a repartition (to filter on every core) and a projection of the
    // columns used above between the two.
    let mut below_filter = filter.input();
    while let Some(repartition) = below_filter.downcast_ref::<RepartitionExec>() {
        below_filter = repartition.input();
    }
    let (window, between) = match below_filter.downcast_ref::<ProjectionExec>() {
        Some(projection) => (projection.input(), Some(projection)),
        None => (below_filter, None),
    };
    let (exprs, below) = if let Some(w) = window.downcast_ref::<BoundedWindowAggExec>() {
        (w.window_expr(), w.input())
    } else if let Some(w) = window.downcast_ref::<WindowAggExec>() {
        (w.window_expr(), w.input())
    } else {
        return Ok(None);
    };
    let [expr] = exprs else {
        return Ok(None);
    };
    if !is_row_number(expr.as_ref()) {
        return Ok(None);
    }
    // The rank's column where the filter reads it.
    let rank = window.schema().fields().len() - 1;
    let rank_column = match between {
        Some(projection) => {
            let Some(position) = projection.expr().iter().position(|projected| {
                projected
                    .expr
                    .downcast_ref::<Column>()
                    .is_some_and(|column| column.index() == rank)
            }) else {
                return Ok(None);
            };
            position
        }
        None => rank,
    };
    // `rn <= N AND other conditions`: the top-N, then a filter of the others over its rows.
    let conditions = split_conjunction(filter.predicate());
    let Some((limit, at)) = conditions
        .iter()
        .enumerate()
        .find_map(|(at, c)| rank_limit(c, rank_column).map(|limit| (limit, at)))
    else {
        return Ok(None);
    };
    let others = conjunction_opt(
        conditions
            .iter()
            .enumerate()
            .filter(|(other, _)| *other != at)
            .map(|(_, c)| Arc::clone(c)),
    );
    let input = without_sorts(below)?;
    if !reads_stream(&input)? {
        return Ok(None);
    }
    let keys = expr.partition_by().to_vec();
    let order_by = expr.order_by().to_vec();
    let event_time = stream_event_time(&input);
    // Keep-last de-duplication: the latest event time of each key, the later arrival of
    // equal times.
    let keeps_last = limit == 1
        && matches!(order_by.as_slice(), [sort] if sort.options.descending
            && event_time.as_ref().is_some_and(|time| sort
                .expr
                .downcast_ref::<Column>()
                .is_some_and(|c| c.index() == time.column)));
    let emit = if window.boundedness().is_unbounded() || options.emit == EmitSetting::Changes {
        TopNEmit::Changes
    } else {
        TopNEmit::Final
    };
    let partitions = config.execution.target_partitions;
    let (strategy, reason) = if keys.is_empty() {
        (
            RoutingStrategy::FanIn,
            "auto: no PARTITION BY keys: one stream".to_string(),
        )
    } else {
        partition_by_strategy(options, &keys, &input)?
    };
    let exchange =
        StreamExchangeExec::try_new(input, strategy, partitions, event_time)?.with_reason(reason);
    let spec = TopNSpec {
        partition_by: keys,
        order_by,
        limit,
        ties: match keeps_last {
            true => TieOrder::LaterFirst,
            false => TieOrder::EarlierFirst,
        },
        emit,
        schema: window.schema(),
    };
    let mut top: Arc<dyn ExecutionPlan> = Arc::new(TopNExec::try_new(Arc::new(exchange), spec)?);
    if let Some(projection) = between {
        top = Arc::new(ProjectionExec::try_new(projection.expr().to_vec(), top)?);
    }
    if let Some(others) = others {
        top = Arc::new(FilterExec::try_new(others, top)?);
    }
    // The columns the filter passed on (the changelog rule adds the op column to them).
    with_filter_projection(filter, top).map(Some)
}

fn is_row_number(expr: &dyn WindowExpr) -> bool {
    expr.as_any()
        .downcast_ref::<StandardWindowExpr>()
        .and_then(|standard| {
            standard
                .get_standard_func_expr()
                .as_any()
                .downcast_ref::<WindowUDFExpr>()
                .map(|udf| udf.fun().name().eq_ignore_ascii_case("row_number"))
        })
        .unwrap_or(false)
}

/// N, if `predicate` keeps the ranks 1 to N of column `rank`: `rank <= N`, `rank < N + 1`,
/// `rank = 1`, or the same with the number first.
fn rank_limit(predicate: &Arc<dyn PhysicalExpr>, rank: usize) -> Option<usize> {
    let binary = predicate.downcast_ref::<BinaryExpr>()?;
    let is_rank = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<Column>()
            .is_some_and(|c| c.index() == rank)
    };
    let number = |e: &Arc<dyn PhysicalExpr>| -> Option<i128> {
        match e.downcast_ref::<Literal>()?.value() {
            ScalarValue::Int8(Some(v)) => Some(*v as i128),
            ScalarValue::Int16(Some(v)) => Some(*v as i128),
            ScalarValue::Int32(Some(v)) => Some(*v as i128),
            ScalarValue::Int64(Some(v)) => Some(*v as i128),
            ScalarValue::UInt8(Some(v)) => Some(*v as i128),
            ScalarValue::UInt16(Some(v)) => Some(*v as i128),
            ScalarValue::UInt32(Some(v)) => Some(*v as i128),
            ScalarValue::UInt64(Some(v)) => Some(*v as i128),
            _ => None,
        }
    };
    // As `rank <op> n`.
    let (op, n) = if is_rank(binary.left()) {
        (*binary.op(), number(binary.right())?)
    } else if is_rank(binary.right()) {
        (binary.op().swap()?, number(binary.left())?)
    } else {
        return None;
    };
    let limit = match op {
        Operator::LtEq => n,
        Operator::Lt => n - 1,
        Operator::Eq if n == 1 => 1,
        _ => return None,
    };
    (1..=1_000_000).contains(&limit).then_some(limit as usize)
}
