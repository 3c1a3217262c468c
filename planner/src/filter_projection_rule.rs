//! [`FilterProjectionRule`]: a stream filter filters only the columns that go on.
//!
//! A filter takes the passing rows of every column of its input, and a projection right
//! above may then drop some (Nexmark q3 filters auctions on `category`, then keeps `id` and
//! `seller`). The rule runs on the physical plan after every other of Freshet's rules, bottom
//! up:
//! - a [`StreamFilterExec`] over a projection of columns and literals (a join's constant
//!   time column, renamed columns) moves below it, when its predicate reads only projected
//!   columns: the literals are then made for the passing rows only;
//! - a [`ProjectionExec`] over a stream filter has the filter pass on only the columns it
//!   reads ([`StreamFilterExec::with_projection`]), and goes away where it then only passes
//!   them on as they are.
//!
//! A filter over a changelog is left as it is (it rewrites rows by their operation column).

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use freshet_engine::StreamFilterExec;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct FilterProjectionRule;

impl PhysicalOptimizerRule for FilterProjectionRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let (node, swapped) = match filter_below_projection(&node)? {
                Some(swapped) => (swapped, true),
                None => (node, false),
            };
            Ok(match filter_projected(&node)? {
                Some(fused) => Transformed::yes(fused),
                None => Transformed::new_transformed(node, swapped),
            })
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetFilterProjection"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node`, a stream filter over a projection of columns and literals whose predicate reads
/// only projected columns, as the projection over the filter of the projection's input.
fn filter_below_projection(
    node: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(filter) = node.downcast_ref::<StreamFilterExec>() else {
        return Ok(None);
    };
    let Some(projection) = filter.input().downcast_ref::<ProjectionExec>() else {
        return Ok(None);
    };
    if filter.projection().is_some() || filter.over_changelog() {
        return Ok(None);
    }
    let exprs = projection.expr();
    let plain = exprs
        .iter()
        .all(|e| e.expr.downcast_ref::<Column>().is_some() || e.expr.is::<Literal>());
    if !plain {
        return Ok(None);
    }
    let reads_literal = collect_columns(filter.planned_predicate())
        .iter()
        .any(|column| exprs[column.index()].expr.is::<Literal>());
    if reads_literal {
        return Ok(None);
    }
    // The predicates' columns, as the projection's input numbers them.
    let below = |predicate: &Arc<dyn PhysicalExpr>| {
        columns_moved(predicate, |column| {
            exprs[column.index()].expr.downcast_ref::<Column>().cloned()
        })
    };
    let planned = below(filter.planned_predicate())?;
    let predicate = below(filter.predicate())?;
    let filtered = StreamFilterExec::try_new(Arc::clone(projection.input()), planned)?
        .with_kernel_predicate(predicate);
    let projected = ProjectionExec::try_new(exprs.to_vec(), Arc::new(filtered))?;
    Ok(Some(Arc::new(projected)))
}

/// `node`, a projection over a stream filter, with the filter passing on only the columns
/// the projection reads (and without the projection where it then passes them as they are).
fn filter_projected(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(projection) = node.downcast_ref::<ProjectionExec>() else {
        return Ok(None);
    };
    let Some(filter) = projection.input().downcast_ref::<StreamFilterExec>() else {
        return Ok(None);
    };
    if filter.projection().is_some() || filter.over_changelog() {
        return Ok(None);
    }
    let read: BTreeSet<usize> = projection
        .expr()
        .iter()
        .flat_map(|e| collect_columns(&e.expr))
        .map(|column| column.index())
        .collect();
    if read.len() == filter.input().schema().fields().len() {
        return Ok(None);
    }
    let kept: Vec<usize> = read.into_iter().collect();
    let filtered: Arc<dyn ExecutionPlan> = Arc::new(filter.with_projection(Some(kept.clone()))?);
    // Each input column's place among those the filter passes on.
    let mut place = vec![None; filter.input().schema().fields().len()];
    for (at, &column) in kept.iter().enumerate() {
        place[column] = Some(at);
    }
    let exprs = projection
        .expr()
        .iter()
        .map(|projected| {
            let expr = columns_moved(&projected.expr, |column| {
                place[column.index()].map(|at| Column::new(column.name(), at))
            })?;
            Ok(ProjectionExpr::new(expr, projected.alias.clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    let schema = filtered.schema();
    let passes_as_is = exprs.len() == schema.fields().len()
        && exprs.iter().enumerate().all(|(i, e)| {
            e.expr
                .downcast_ref::<Column>()
                .is_some_and(|c| c.index() == i && e.alias == *schema.field(i).name())
        });
    if passes_as_is {
        return Ok(Some(filtered));
    }
    Ok(Some(Arc::new(ProjectionExec::try_new(exprs, filtered)?)))
}

/// `expr` with each column that `moved` gives a new column for replaced by it.
fn columns_moved(
    expr: &Arc<dyn PhysicalExpr>,
    moved: impl Fn(&Column) -> Option<Column>,
) -> Result<Arc<dyn PhysicalExpr>> {
    Arc::clone(expr)
        .transform_up(|expr| {
            let Some(column) = expr.downcast_ref::<Column>().and_then(&moved) else {
                return Ok(Transformed::no(expr));
            };
            Ok(Transformed::yes(Arc::new(column) as Arc<dyn PhysicalExpr>))
        })
        .map(|transformed| transformed.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit};
    use datafusion::physical_plan::test::TestMemoryExec;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::SessionContext;

    fn input() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("category", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("c"),
                    Some("d"),
                ])),
                Arc::new(Int64Array::from(vec![10, 11, 10, 12])),
            ],
        )
        .unwrap();
        TestMemoryExec::try_new_exec(&[vec![batch]], schema, None).unwrap()
    }

    fn column(plan: &Arc<dyn ExecutionPlan>, name: &str) -> Arc<dyn PhysicalExpr> {
        col(name, &plan.schema()).unwrap()
    }

    async fn rows(plan: Arc<dyn ExecutionPlan>) -> Vec<RecordBatch> {
        collect(plan, SessionContext::new().task_ctx())
            .await
            .unwrap()
    }

    fn shape(plan: &Arc<dyn ExecutionPlan>) -> String {
        displayable(plan.as_ref()).indent(false).to_string()
    }

    #[tokio::test]
    async fn a_filter_passes_on_only_the_columns_the_projection_above_reads() {
        let input = input();
        let predicate = binary(
            column(&input, "category"),
            Operator::Eq,
            lit(10_i64),
            &input.schema(),
        )
        .unwrap();
        let filter: Arc<dyn ExecutionPlan> =
            Arc::new(StreamFilterExec::try_new(Arc::clone(&input), predicate).unwrap());
        let exprs = vec![
            ProjectionExpr::new(column(&input, "id"), "id".to_string()),
            ProjectionExpr::new(lit(ScalarValue::Int64(Some(0))), "t".to_string()),
        ];
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(ProjectionExec::try_new(exprs, filter).unwrap());
        let expected = rows(Arc::clone(&plan)).await;
        let optimized = FilterProjectionRule
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        assert!(
            shape(&optimized).contains("projection=[id@0]"),
            "{}",
            shape(&optimized)
        );
        assert_eq!(rows(optimized).await, expected);
    }

    #[tokio::test]
    async fn a_filter_above_a_projection_of_columns_and_literals_moves_below_it() {
        let input = input();
        let exprs = vec![
            ProjectionExpr::new(column(&input, "category"), "c".to_string()),
            ProjectionExpr::new(column(&input, "id"), "id".to_string()),
            ProjectionExpr::new(column(&input, "name"), "name".to_string()),
            ProjectionExpr::new(lit(ScalarValue::Int64(Some(0))), "t".to_string()),
        ];
        let projection: Arc<dyn ExecutionPlan> =
            Arc::new(ProjectionExec::try_new(exprs, Arc::clone(&input)).unwrap());
        let predicate = binary(
            column(&projection, "c"),
            Operator::Eq,
            lit(10_i64),
            &projection.schema(),
        )
        .unwrap();
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(StreamFilterExec::try_new(Arc::clone(&projection), predicate).unwrap());
        let expected = rows(Arc::clone(&plan)).await;
        let optimized = FilterProjectionRule
            .optimize(Arc::clone(&plan), &ConfigOptions::default())
            .unwrap();
        let top = optimized.downcast_ref::<ProjectionExec>();
        assert!(top.is_some(), "{}", shape(&optimized));
        assert_eq!(optimized.schema(), plan.schema());
        assert_eq!(rows(optimized).await, expected);
        // A predicate on the literal keeps the filter above it.
        let on_literal = binary(
            column(&projection, "t"),
            Operator::Eq,
            lit(0_i64),
            &projection.schema(),
        )
        .unwrap();
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(StreamFilterExec::try_new(projection, on_literal).unwrap());
        let optimized = FilterProjectionRule
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        assert!(optimized.is::<StreamFilterExec>(), "{}", shape(&optimized));
    }
}
