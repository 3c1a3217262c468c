//! [`KeepLimitsRule`]: a LIMIT that DataFusion folded into an operator over a stream stays a
//! LIMIT when Freshet replaces that operator.
//!
//! DataFusion's `LimitPushdown` moves a LIMIT into the operator below it when that operator
//! can stop by itself (its `fetch`): a filter, a join, a merge of partitions. Freshet's rules
//! replace several of those with operators of their own that have no `fetch`, so the LIMIT
//! would be lost: `WHERE price > 100 LIMIT 5` at one stream returned every passing row.
//! Running before them, this rule takes each such fetch back out into a `LocalLimitExec`
//! right above its operator. The rows are the same: a fetch limits each output partition of
//! its operator, as a `LocalLimitExec` does.
//!
//! A sort keeps its fetch (a top-k sort is DataFusion's, which Freshet does not replace), and
//! so does a scan below a stream's source.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::sorts::sort::SortExec;
use freshet_engine::StreamSourceExec;

use crate::stateless_rule::{any_node, is};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct KeepLimitsRule;

impl PhysicalOptimizerRule for KeepLimitsRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(fetch) = node.fetch() else {
                return Ok(Transformed::no(node));
            };
            let keeps_its_fetch = is::<SortExec>(&node)
                || is::<LocalLimitExec>(&node)
                || is::<GlobalLimitExec>(&node)
                || !node
                    .children()
                    .iter()
                    .any(|child| any_node(child, is::<StreamSourceExec>));
            if keeps_its_fetch {
                return Ok(Transformed::no(node));
            }
            let Some(unlimited) = node.with_fetch(None) else {
                return Ok(Transformed::no(node));
            };
            Ok(Transformed::yes(Arc::new(LocalLimitExec::new(
                unlimited, fetch,
            ))))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetKeepLimits"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{operators, plan};

    #[test]
    fn a_limit_folded_into_a_filter_stays_a_limit() {
        let plan = plan(
            "SELECT symbol FROM market_data WHERE price > 100 LIMIT 5",
            1,
            1,
        )
        .unwrap();
        let operators = operators(&plan);
        assert!(
            operators.contains(&"LocalLimitExec") && operators.contains(&"StreamFilterExec"),
            "{operators:?}"
        );
    }
}
