//! [`StreamFilterRule`]: Freshet's filter in place of DataFusion's over streams.
//!
//! DataFusion's `FilterExec` holds passing rows back until it has a full batch; over a stream
//! every WHERE and every HAVING lifted above a window aggregation becomes a
//! [`StreamFilterExec`], which passes each batch on at once (see its module), under a
//! projection when DataFusion had folded one into the filter. Filters over bounded tables
//! that are not streams keep DataFusion's operator.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use freshet_engine::{StreamFilterExec, StreamSourceExec};

use crate::stateless_rule::{any_node, is};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StreamFilterRule;

impl PhysicalOptimizerRule for StreamFilterRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(filter) = node.downcast_ref::<FilterExec>() else {
                return Ok(Transformed::no(node));
            };
            if !any_node(filter.input(), is::<StreamSourceExec>) {
                return Ok(Transformed::no(node));
            }
            let filtered: Arc<dyn ExecutionPlan> = Arc::new(StreamFilterExec::try_new(
                Arc::clone(filter.input()),
                Arc::clone(filter.predicate()),
            )?);
            Ok(Transformed::yes(with_filter_projection(filter, filtered)?))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetStreamFilter"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `filtered` (what replaces `filter`, with `filter`'s input schema) under the projection
/// DataFusion folded into `filter`, if it did.
pub(crate) fn with_filter_projection(
    filter: &FilterExec,
    filtered: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(projection) = filter.projection() else {
        return Ok(filtered);
    };
    let schema = filter.input().schema();
    let expressions = projection
        .iter()
        .map(|&index| {
            let name = schema.field(index).name();
            ProjectionExpr::new(Arc::new(Column::new(name, index)), name.clone())
        })
        .collect::<Vec<_>>();
    Ok(Arc::new(ProjectionExec::try_new(expressions, filtered)?))
}

#[cfg(test)]
mod tests {
    use crate::test_support::{operators, plan};

    #[test]
    fn a_filter_over_a_stream_becomes_a_stream_filter() {
        let plan = plan("SELECT symbol FROM market_data WHERE price > 100", 1, 1).unwrap();
        let operators = operators(&plan);
        assert!(operators.contains(&"StreamFilterExec"), "{plan}");
        assert!(!operators.contains(&"FilterExec"), "{plan}");
    }
}
