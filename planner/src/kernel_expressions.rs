//! [`KernelExpressionRule`]: the expressions Freshet has a faster kernel for are computed by
//! it, in the projections and the stream filters (where DataFusion computes a query's
//! expressions, join keys included).
//!
//! The rule runs on the physical plan after every other of Freshet's rules, bottom up over
//! each expression:
//! - an Int64 or Int32 expression divided by (or taken modulo) a literal of its type other
//!   than 0, 1 and -1 becomes a [`ConstantDivisorExpr`] (a multiplication);
//! - a Utf8View, Int64 or Int32 expression equal to a literal, in an `IN` list of them, or
//!   an `OR` of those over the same expression, becomes a [`LiteralSetExpr`] (one pass
//!   over the column, string views compared as such).

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use freshet_engine::StreamFilterExec;

use crate::constant_divisor::ConstantDivisorExpr;
use crate::literal_set::LiteralSetExpr;

/// `node` computed by one of Freshet's kernels, if one computes it over `schema`.
fn kernel_expression(
    node: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    if let Some(binary) = node.downcast_ref::<BinaryExpr>()
        && let Some(divided) = ConstantDivisorExpr::of(binary)
        && binary.left().data_type(schema)? == binary.right().data_type(schema)?
    {
        return Ok(Some(Arc::new(divided)));
    }
    Ok(LiteralSetExpr::of(node, schema)?.map(|set| Arc::new(set) as Arc<dyn PhysicalExpr>))
}

/// `expr` with every part a kernel computes over `schema` computed by it.
fn with_kernel_expressions(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    Arc::clone(expr).transform_up(|node| {
        Ok(match kernel_expression(&node, schema)? {
            Some(kernel) => Transformed::yes(kernel),
            None => Transformed::no(node),
        })
    })
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct KernelExpressionRule;

impl PhysicalOptimizerRule for KernelExpressionRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                let schema = projection.input().schema();
                let mut transformed = false;
                let exprs = projection
                    .expr()
                    .iter()
                    .map(|projected| {
                        let expr = with_kernel_expressions(&projected.expr, &schema)?;
                        transformed |= expr.transformed;
                        Ok(ProjectionExpr::new(expr.data, projected.alias.clone()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                if transformed {
                    let input = Arc::clone(projection.input());
                    return Ok(Transformed::yes(Arc::new(ProjectionExec::try_new(
                        exprs, input,
                    )?)));
                }
            } else if let Some(filter) = node.downcast_ref::<StreamFilterExec>() {
                let schema = filter.input().schema();
                let predicate = with_kernel_expressions(filter.predicate(), &schema)?;
                if predicate.transformed {
                    let filter = filter.with_kernel_predicate(predicate.data);
                    return Ok(Transformed::yes(Arc::new(filter)));
                }
            }
            Ok(Transformed::no(node))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetKernelExpressions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{col, lit};
    use datafusion::physical_plan::empty::EmptyExec;

    #[test]
    fn projections_and_stream_filters_get_the_kernels_of_matching_types() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int32, false),
            Field::new("s", DataType::Utf8View, true),
            Field::new("u", DataType::Utf8, true),
        ]));
        let input = Arc::new(EmptyExec::new(Arc::clone(&schema)));
        let binary = |column: &str, op, value: ScalarValue| -> Arc<dyn PhysicalExpr> {
            Arc::new(BinaryExpr::new(
                col(column, &schema).unwrap(),
                op,
                lit(value),
            ))
        };
        let text = |value: &str| ScalarValue::Utf8View(Some(value.to_string()));
        let exprs = vec![
            ProjectionExpr::new(
                binary("a", Operator::Modulo, ScalarValue::Int64(Some(10))),
                "a10".to_string(),
            ),
            // An Int32 dividend of an Int64 literal is left to DataFusion.
            ProjectionExpr::new(
                binary("b", Operator::Modulo, ScalarValue::Int64(Some(10))),
                "b10".to_string(),
            ),
            ProjectionExpr::new(binary("s", Operator::Eq, text("x")), "sx".to_string()),
            // A Utf8 column is left to DataFusion.
            ProjectionExpr::new(
                binary("u", Operator::Eq, ScalarValue::Utf8(Some("x".into()))),
                "ux".to_string(),
            ),
        ];
        let predicate = binary("s", Operator::Eq, text("y"));
        let filter = Arc::new(StreamFilterExec::try_new(input, predicate).unwrap());
        let plan = Arc::new(ProjectionExec::try_new(exprs, filter).unwrap());
        let optimized = KernelExpressionRule
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        let projection = optimized.downcast_ref::<ProjectionExec>().unwrap();
        let filter = projection
            .input()
            .downcast_ref::<StreamFilterExec>()
            .unwrap();
        assert!(
            filter
                .predicate()
                .downcast_ref::<LiteralSetExpr>()
                .is_some()
        );
        let kinds: Vec<&str> = projection
            .expr()
            .iter()
            .map(|e| match &e.expr {
                e if e.downcast_ref::<ConstantDivisorExpr>().is_some() => "divisor",
                e if e.downcast_ref::<LiteralSetExpr>().is_some() => "set",
                _ => "datafusion",
            })
            .collect();
        assert_eq!(kinds, vec!["divisor", "datafusion", "set", "datafusion"]);
    }

    #[test]
    fn a_filter_keeps_the_columns_its_planned_predicate_pins() {
        // `s = 'y'` pins `s`: an ORDER BY or PARTITION BY on it is met below the filter, and
        // DataFusion's sort requirements count on that after the kernel stands in.
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8View, true)]));
        let input = Arc::new(EmptyExec::new(Arc::clone(&schema)));
        let predicate: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            col("s", &schema).unwrap(),
            Operator::Eq,
            lit(ScalarValue::Utf8View(Some("y".to_string()))),
        ));
        let plan = Arc::new(StreamFilterExec::try_new(input, predicate).unwrap());
        let pinned = |plan: &Arc<dyn ExecutionPlan>| {
            plan.properties().equivalence_properties().constants().len()
        };
        let planned = pinned(&(Arc::clone(&plan) as Arc<dyn ExecutionPlan>));
        assert!(planned > 0);
        let optimized = KernelExpressionRule
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        let filter = optimized.downcast_ref::<StreamFilterExec>().unwrap();
        assert!(
            filter
                .predicate()
                .downcast_ref::<LiteralSetExpr>()
                .is_some()
        );
        assert_eq!(pinned(&optimized), planned);
    }
}
