//! [`JoinParts`]: a DataFusion join (hash, symmetric hash or nested loop) as Freshet's join
//! rules and its tracing of event times read it: inputs, keys, filter, type and projection.

use std::sync::Arc;

use datafusion::common::{JoinType, NullEquality};
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, SymmetricHashJoinExec};

/// What Freshet's join rules read of a DataFusion join.
pub(crate) struct JoinParts<'a> {
    pub left: &'a Arc<dyn ExecutionPlan>,
    pub right: &'a Arc<dyn ExecutionPlan>,
    pub on: Vec<(PhysicalExprRef, PhysicalExprRef)>,
    pub filter: Option<&'a JoinFilter>,
    pub join_type: JoinType,
    pub projection: Option<Vec<usize>>,
}

impl<'a> JoinParts<'a> {
    pub fn of(node: &'a Arc<dyn ExecutionPlan>) -> Option<Self> {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            // A null-aware anti join (NOT IN) has SQL's rule for NULLs, which a join of
            // pairs does not keep.
            let plain = join.null_equality() == NullEquality::NullEqualsNothing && !join.null_aware;
            return plain.then(|| Self {
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
