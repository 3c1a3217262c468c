//! [`SharedFilterExpressionRule`]: a function call that a stream's WHERE and the SELECT
//! above it both compute is computed once.
//!
//! `SELECT …, regexp_extract(url, p, 2) … FROM bid WHERE regexp_extract(url, p, 2) IS NOT NULL`
//! (Nexmark q21) plans as projections over a [`StreamFilterExec`], each of which evaluates
//! the call for itself: the filter for every row, the projection again for every row that
//! passed. DataFusion's common-subexpression elimination works within one plan node, and
//! its filter push-down would undo a shared column above the filter. This rule, run on the
//! physical plan after the filters over streams are Freshet's, finds a call that the
//! filter's predicate evaluates for every row and that a projection above it (through a
//! chain of projections) computes from the same columns, and rewrites the three:
//!
//! - below the filter, a projection passes the filter's input on with the call's value as
//!   one more column;
//! - the predicate and the projections read that column instead of calling again (the
//!   projections between pass it on).
//!
//! The output schema stays the same. Only calls the predicate evaluates for every row of
//! every batch are shared: not those under the right side of AND or OR (evaluated only
//! where the left side leaves the answer open) or under a CASE or a function that
//! short-circuits, whose call for every row could fail where the query would not have.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Operator, Volatility};
use datafusion::physical_expr::expressions::{
    BinaryExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, NotExpr, TryCastExpr,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use freshet_engine::StreamFilterExec;

/// Rewrites an expression of the top projection in terms of the filter's columns.
type InFilterTerms<'a> = dyn Fn(&Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> + 'a;

/// The name of the shared column (the index keeps names apart if a query shares several).
const SHARED_COLUMN: &str = "__freshet_shared_";

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SharedFilterExpressionRule;

impl PhysicalOptimizerRule for SharedFilterExpressionRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            Ok(match share_with_filter(&node)? {
                Some(rewritten) => Transformed::yes(rewritten),
                None => Transformed::no(node),
            })
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetSharedFilterExpression"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `top` (a projection over projections over a stream filter) with the first call it shares
/// with the filter's predicate computed once, or `None`.
fn share_with_filter(top: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // The projections from `top` down, and the filter under them.
    let mut projections: Vec<&ProjectionExec> = Vec::new();
    let mut node = top;
    while let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        projections.push(projection);
        node = projection.input();
    }
    let (Some(_), Some(filter)) = (projections.first(), node.downcast_ref::<StreamFilterExec>())
    else {
        return Ok(None);
    };
    let mut candidates = Vec::new();
    evaluated_for_every_row(filter.predicate(), &mut candidates);
    // The top projection's expressions in terms of the filter's columns.
    let in_filter_terms = |expr: &Arc<dyn PhysicalExpr>| -> Result<Arc<dyn PhysicalExpr>> {
        projections[1..]
            .iter()
            .try_fold(Arc::clone(expr), |expr, below| {
                substitute_columns(&expr, below.expr())
            })
    };
    for candidate in candidates {
        let mut found = false;
        for projected in projections[0].expr() {
            projected.expr.apply(|e| {
                if in_filter_terms(e)?.as_ref() == candidate.as_ref() {
                    found = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        if found {
            return rewrite(&projections, filter, &candidate, &in_filter_terms).map(Some);
        }
    }
    Ok(None)
}

/// The rewritten plan: `candidate` computed below `filter` as one more column, read by the
/// predicate and by `projections[0]` (where its value is used), passed on by the others.
fn rewrite(
    projections: &[&ProjectionExec],
    filter: &StreamFilterExec,
    candidate: &Arc<dyn PhysicalExpr>,
    in_filter_terms: &InFilterTerms<'_>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let input = filter.input();
    let width = input.schema().fields().len();
    let name = format!("{SHARED_COLUMN}{width}");
    let mut below: Vec<ProjectionExpr> = input
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), index));
            ProjectionExpr::new(column, field.name().clone())
        })
        .collect();
    below.push(ProjectionExpr::new(Arc::clone(candidate), name.clone()));
    let shared_input: Arc<dyn ExecutionPlan> =
        Arc::new(ProjectionExec::try_new(below, Arc::clone(input))?);
    let shared_column =
        |index: usize| -> Arc<dyn PhysicalExpr> { Arc::new(Column::new(&name, index)) };
    let predicate = Arc::clone(filter.predicate())
        .transform_down(|e| {
            Ok(if e.as_ref() == candidate.as_ref() {
                Transformed::yes(shared_column(width))
            } else {
                Transformed::no(e)
            })
        })?
        .data;
    let mut plan: Arc<dyn ExecutionPlan> =
        Arc::new(StreamFilterExec::try_new(shared_input, predicate)?);
    // The projections between the top one and the filter pass the column on, last.
    for between in projections[1..].iter().rev() {
        let at = plan.schema().fields().len() - 1;
        let mut exprs = between.expr().to_vec();
        exprs.push(ProjectionExpr::new(shared_column(at), name.clone()));
        plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
    }
    let at = plan.schema().fields().len() - 1;
    let top = projections[0]
        .expr()
        .iter()
        .map(|projected| {
            let expr = Arc::clone(&projected.expr)
                .transform_down(|e| {
                    Ok(if in_filter_terms(&e)?.as_ref() == candidate.as_ref() {
                        Transformed::new(shared_column(at), true, TreeNodeRecursion::Jump)
                    } else {
                        Transformed::no(e)
                    })
                })?
                .data;
            Ok(ProjectionExpr::new(expr, projected.alias.clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ProjectionExec::try_new(top, plan)?))
}

/// `expr` with each column replaced by the expression `projection` computes it with.
fn substitute_columns(
    expr: &Arc<dyn PhysicalExpr>,
    projection: &[ProjectionExpr],
) -> Result<Arc<dyn PhysicalExpr>> {
    Ok(Arc::clone(expr)
        .transform_down(|e| {
            Ok(match e.downcast_ref::<Column>() {
                Some(column) => Transformed::new(
                    Arc::clone(&projection[column.index()].expr),
                    true,
                    TreeNodeRecursion::Jump,
                ),
                None => Transformed::no(e),
            })
        })?
        .data)
}

/// Appends to `out` the function calls of `expr` that its evaluation computes for every row
/// (see the module documentation), outermost first.
fn evaluated_for_every_row(expr: &Arc<dyn PhysicalExpr>, out: &mut Vec<Arc<dyn PhysicalExpr>>) {
    if let Some(call) = expr.downcast_ref::<ScalarFunctionExpr>() {
        // A volatile call (random()) has another value at each place it is written.
        if call.fun().short_circuits() || call.fun().signature().volatility == Volatility::Volatile
        {
            return;
        }
        if !call.args().is_empty() {
            out.push(Arc::clone(expr));
        }
        for arg in call.args() {
            evaluated_for_every_row(arg, out);
        }
    } else if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        evaluated_for_every_row(binary.left(), out);
        if !matches!(binary.op(), Operator::And | Operator::Or) {
            evaluated_for_every_row(binary.right(), out);
        }
    } else if let Some(in_list) = expr.downcast_ref::<InListExpr>() {
        evaluated_for_every_row(in_list.expr(), out);
    } else if expr.downcast_ref::<IsNullExpr>().is_some()
        || expr.downcast_ref::<IsNotNullExpr>().is_some()
        || expr.downcast_ref::<NotExpr>().is_some()
        || expr.downcast_ref::<CastExpr>().is_some()
        || expr.downcast_ref::<TryCastExpr>().is_some()
    {
        for child in expr.children() {
            evaluated_for_every_row(child, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::plan;

    const SYMBOL_DIGIT: &str = "regexp_extract(symbol, 'SYM(.)', 1)";

    #[test]
    fn a_call_of_the_where_and_the_select_is_computed_once_below_the_filter() {
        let sql = format!(
            "SELECT quantity, CASE WHEN quantity > 500 THEN 'big' ELSE {SYMBOL_DIGIT} END AS m \
             FROM market_data WHERE {SYMBOL_DIGIT} IS NOT NULL OR price > 120"
        );
        let plan = plan(&sql, 1, 1).unwrap();
        assert_eq!(plan.matches("regexp_extract").count(), 1, "{plan}");
        assert!(plan.contains("__freshet_shared_"), "{plan}");
    }

    #[test]
    fn calls_evaluated_only_for_some_rows_stay_where_they_are() {
        // The call on the right of AND is evaluated only where the left side is true.
        let sql = format!(
            "SELECT {SYMBOL_DIGIT} AS m FROM market_data WHERE price > 120 AND {SYMBOL_DIGIT} IS NOT NULL"
        );
        let planned = plan(&sql, 1, 1).unwrap();
        assert_eq!(planned.matches("regexp_extract").count(), 2, "{planned}");
        // A volatile call has its own value at each place.
        let sql = "SELECT random() AS r FROM market_data WHERE random() > 0.5";
        let planned = plan(sql, 1, 1).unwrap();
        assert_eq!(planned.matches("random()").count(), 2, "{planned}");
    }
}
