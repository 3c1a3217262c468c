//! [`SessionSafeSingleDistinct`]: DataFusion's `SingleDistinctToGroupBy`, except on
//! aggregations grouped by a `session(...)` window.
//!
//! That rewrite turns `COUNT(DISTINCT x) … GROUP BY k, session(ts, gap)` into an inner
//! aggregation grouped by `(k, session(ts, gap), x)` under an outer one. For tumbling and
//! hopping windows that is the same query, since a row's window does not depend on the other
//! rows; a session does: grouped by `(k, x)` the sessions are cut per distinct value, and
//! the result is wrong. Sessions therefore keep the plain DISTINCT aggregate.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::single_distinct_to_groupby::SingleDistinctToGroupBy;
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SessionSafeSingleDistinct {
    inner: SingleDistinctToGroupBy,
}

impl OptimizerRule for SessionSafeSingleDistinct {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.inner.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        match &plan {
            LogicalPlan::Aggregate(aggregate) if aggregate.group_expr.iter().any(is_session) => {
                Ok(Transformed::no(plan))
            }
            _ => self.inner.rewrite(plan, config),
        }
    }
}

/// Whether `expr` holds a `session(...)` call.
fn is_session(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        if let Expr::ScalarFunction(function) = e
            && function.name() == "session"
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `rules` with DataFusion's `SingleDistinctToGroupBy` replaced by the session-safe one.
pub(crate) fn session_safe(
    rules: Vec<Arc<dyn OptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    let name = SingleDistinctToGroupBy::new().name().to_string();
    rules
        .into_iter()
        .map(|rule| {
            if rule.name() == name {
                Arc::new(SessionSafeSingleDistinct::default())
                    as Arc<dyn OptimizerRule + Send + Sync>
            } else {
                rule
            }
        })
        .collect()
}
