//! [`DistributionRepair`]: DataFusion operators above Freshet's get the input distribution
//! they require.
//!
//! DataFusion places its repartitions and merges before Freshet's rules replace operators. A
//! hash join of two windowed aggregations relied on each aggregation's output being hashed on
//! its GROUP BY keys; Freshet's aggregation claims no such partitioning (its exchange hashes
//! input columns, not its output), and the join would read unmatched partitions. This rule,
//! after Freshet's and before DataFusion's sanity check, gives each operator whose child no
//! longer satisfies the distribution it requires a hash repartition of that child (or a merge,
//! where it needs a single partition; a sorted child is merged in order), and a sort where it
//! requires an order its child no longer has. Freshet's own operators require nothing of the
//! kind.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::{LexOrdering, PartitioningSatisfaction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
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
                let orderings = node.required_input_ordering();
                let children = node
                    .children()
                    .into_iter()
                    .zip(node.input_distribution_requirements().into_per_child())
                    .zip(orderings)
                    .map(|((child, required), ordering)| {
                        let satisfaction = child.output_partitioning().satisfaction(
                            &required,
                            child.equivalence_properties(),
                            false,
                        );
                        let fixed: Arc<dyn ExecutionPlan> = match required {
                            _ if satisfaction == PartitioningSatisfaction::Exact => {
                                Arc::clone(child)
                            }
                            Distribution::UnspecifiedDistribution => Arc::clone(child),
                            Distribution::SinglePartition => match child.output_ordering() {
                                Some(order) => Arc::new(SortPreservingMergeExec::new(
                                    order.clone(),
                                    Arc::clone(child),
                                )),
                                None => Arc::new(CoalescePartitionsExec::new(Arc::clone(child))),
                            },
                            keyed => Arc::new(RepartitionExec::try_new(
                                Arc::clone(child),
                                keyed.create_partitioning(partitions),
                            )?),
                        };
                        // The order the operator requires, which a repartition, or Freshet's
                        // operator in place of an order-keeping one, lost: sort again.
                        let ordering = ordering.and_then(|required| {
                            LexOrdering::new(required.into_single().into_iter().map(Into::into))
                        });
                        let fixed: Arc<dyn ExecutionPlan> = match ordering {
                            Some(ordering)
                                if !fixed
                                    .equivalence_properties()
                                    .ordering_satisfy(ordering.clone())? =>
                            {
                                Arc::new(
                                    SortExec::new(ordering, fixed).with_preserve_partitioning(true),
                                )
                            }
                            _ => fixed,
                        };
                        repaired |= !Arc::ptr_eq(&fixed, child);
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
