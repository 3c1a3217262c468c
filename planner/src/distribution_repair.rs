//! [`DistributionRepair`]: DataFusion operators above Freshet's get the input distribution
//! they require.
//!
//! DataFusion places its repartitions and merges before Freshet's rules replace operators. A
//! hash join of two windowed aggregations relied on each aggregation's output being hashed on
//! its GROUP BY keys; Freshet's aggregation claims no such partitioning (its exchange hashes
//! input columns, not its output), and the join would read unmatched partitions. This rule,
//! after Freshet's and before DataFusion's sanity check, gives each operator whose child no
//! longer satisfies the distribution it requires a hash repartition of that child (or a merge,
//! where it needs a single partition). Freshet's own operators require nothing of the kind.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::PartitioningSatisfaction;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, Distribution, ExecutionPlan, ExecutionPlanProperties,
    ReplaceChildrenOptions,
};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct DistributionRepair;

impl PhysicalOptimizerRule for DistributionRepair {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let partitions = config.execution.target_partitions;
        Ok(plan
            .transform_up(|node| {
                let mut repaired = false;
                let children = node
                    .children()
                    .into_iter()
                    .zip(node.input_distribution_requirements().into_per_child())
                    .map(|(child, required)| {
                        let satisfaction = child.output_partitioning().satisfaction(
                            &required,
                            child.equivalence_properties(),
                            false,
                        );
                        if satisfaction == PartitioningSatisfaction::Exact {
                            return Ok(Arc::clone(child));
                        }
                        let fixed: Arc<dyn ExecutionPlan> = match required {
                            Distribution::UnspecifiedDistribution => return Ok(Arc::clone(child)),
                            Distribution::SinglePartition => {
                                Arc::new(CoalescePartitionsExec::new(Arc::clone(child)))
                            }
                            keyed => Arc::new(RepartitionExec::try_new(
                                Arc::clone(child),
                                keyed.create_partitioning(partitions),
                            )?),
                        };
                        repaired = true;
                        Ok(fixed)
                    })
                    .collect::<Result<Vec<_>>>()?;
                if !repaired {
                    return Ok(Transformed::no(node));
                }
                let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                Ok(Transformed::yes(node.replace_children(children, options)?))
            })?
            .data)
    }

    fn name(&self) -> &str {
        "FreshetDistributionRepair"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
