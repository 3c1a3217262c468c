//! [`StatelessExchangeRule`]: Freshet's exchange in place of DataFusion's round-robin
//! repartitioning of a stream.
//!
//! Stateless work (filters, projections) needs no keys: DataFusion spreads a stream's batches
//! over the target partitions with a `RoundRobinBatch` `RepartitionExec` when the source has
//! fewer partitions than streams, and adds nothing when it has enough. The rule replaces each
//! such repartition over a Freshet stream with a [`StreamExchangeExec`] whose strategy follows
//! the user > automatic rule: the query's or session's `partitioning_strategy` when it is
//! `round_robin`, `sticky` or `fan_in`, else round-robin (the source has fewer partitions
//! than streams, or there would be no repartition). `hash` names keys a stateless stage does
//! not have, so it gets the automatic choice and EXPLAIN says so. Keyed operators were fed by
//! their own exchanges before this rule runs. When the sources already have a partition per
//! stream (no repartition), a user's `fan_in` or `round_robin` puts an exchange over each
//! source, and a source with more partitions than streams gets a sticky exchange onto the
//! streams (partition `p` to stream `p mod n`), unless a keyed exchange or an operator that
//! needs a certain input distribution is in the plan (either may rely on the source's
//! partitions).

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, Distribution, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    ReplaceChildrenOptions,
};
use freshet_engine::{StreamExchangeExec, StreamSourceExec};
use freshet_partitioner::RoutingStrategy;

use crate::options::FreshetOptions;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct StatelessExchangeRule;

impl PhysicalOptimizerRule for StatelessExchangeRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let setting = FreshetOptions::of(config).partitioning_strategy.as_str();
        let plan = without_round_robin_below_exchanges(plan)?;
        let replaced = plan.transform_up(|node| {
            let Some(repartition) = node.downcast_ref::<RepartitionExec>() else {
                return Ok(Transformed::no(node));
            };
            let Partitioning::RoundRobinBatch(outputs) = repartition.partitioning() else {
                return Ok(Transformed::no(node));
            };
            if !any_node(repartition.input(), is::<StreamSourceExec>) {
                return Ok(Transformed::no(node));
            }
            let input = Arc::clone(repartition.input());
            Ok(Transformed::yes(stateless_exchange(
                input, setting, *outputs,
            )?))
        })?;
        if replaced.transformed {
            return Ok(replaced.data);
        }
        // The sources have at least a partition per stream, so DataFusion added no exchange.
        // Where nothing relies on the sources' partitions, the user's fan-in or round-robin
        // still applies, and sources with more partitions than streams are mapped onto the
        // streams (sticky, partition p to stream p mod n), so that n streams run.
        let plan = replaced.data;
        if any_node(&plan, |node| {
            is::<StreamExchangeExec>(node) || requires_a_distribution(node)
        }) {
            return Ok(plan);
        }
        let outputs = config.execution.target_partitions;
        let spread = matches!(setting, "fan_in" | "round_robin");
        Ok(plan
            .transform_up(|node| {
                if !is::<StreamSourceExec>(&node) {
                    return Ok(Transformed::no(node));
                }
                let partitions = node.output_partitioning().partition_count();
                if spread {
                    Ok(Transformed::yes(stateless_exchange(
                        node, setting, outputs,
                    )?))
                } else if partitions > outputs {
                    let reason = format!(
                        "auto: stateless, {partitions} source partitions onto {outputs} streams"
                    );
                    let exchange =
                        StreamExchangeExec::try_new(node, RoutingStrategy::Sticky, outputs, None)?
                            .with_reason(reason);
                    Ok(Transformed::yes(
                        Arc::new(exchange) as Arc<dyn ExecutionPlan>
                    ))
                } else {
                    Ok(Transformed::no(node))
                }
            })?
            .data)
    }

    fn name(&self) -> &str {
        "FreshetStatelessExchange"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` without DataFusion's round-robin repartitions below Freshet's keyed exchanges: the
/// exchange reads each source partition in order (its watermarks, the order a key's records
/// are applied in and sticky routing all depend on it), and a round-robin split would deal
/// one partition's batches out to several inputs that run at their own pace. The filter or
/// projection in between runs in the exchange's input tasks instead.
fn without_round_robin_below_exchanges(
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let is_round_robin = |node: &Arc<dyn ExecutionPlan>| {
        node.downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)))
    };
    Ok(plan
        .transform_down(|node| {
            if !is::<StreamExchangeExec>(&node) {
                return Ok(Transformed::no(node));
            }
            let children: Vec<Arc<dyn ExecutionPlan>> =
                node.children().into_iter().cloned().collect();
            if !children.iter().any(|child| any_node(child, is_round_robin)) {
                return Ok(Transformed::no(node));
            }
            let stripped = children
                .into_iter()
                .map(|child| {
                    Ok(child
                        .transform_up(|n| {
                            Ok(match n.downcast_ref::<RepartitionExec>() {
                                Some(r) if is_round_robin(&n) => {
                                    Transformed::yes(Arc::clone(r.input()))
                                }
                                _ => Transformed::no(n),
                            })
                        })?
                        .data)
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Transformed::new(
                node.replace_children(
                    stripped,
                    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
                )?,
                true,
                TreeNodeRecursion::Jump,
            ))
        })?
        .data)
}

/// A [`StreamExchangeExec`] of `outputs` streams over `input` with the stateless strategy
/// for `setting`.
fn stateless_exchange(
    input: Arc<dyn ExecutionPlan>,
    setting: &str,
    outputs: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let (strategy, reason) = stateless_strategy(setting);
    let exchange = StreamExchangeExec::try_new(input, strategy, outputs, None)?;
    Ok(Arc::new(exchange.with_reason(reason)))
}

/// The strategy of a stateless stage's exchange and why (see the module documentation).
fn stateless_strategy(setting: &str) -> (RoutingStrategy, String) {
    match setting {
        "round_robin" => (RoutingStrategy::RoundRobin, "user".to_string()),
        "sticky" => (
            RoutingStrategy::Sticky,
            "user: each stream keeps its source partition".to_string(),
        ),
        "fan_in" => (RoutingStrategy::FanIn, "user: one stream".to_string()),
        "hash" | "two_phase" => (
            RoutingStrategy::RoundRobin,
            format!(
                "auto: the user's {setting} needs keys or an aggregation, a stateless stage has neither; fewer source partitions than streams"
            ),
        ),
        _ => (
            RoutingStrategy::RoundRobin,
            "auto: stateless, fewer source partitions than streams".to_string(),
        ),
    }
}

/// Whether `node` needs its input distributed in a certain way (an aggregation or join
/// relying on the sources' partitioning): an exchange under it would break that.
fn requires_a_distribution(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.input_distribution_requirements()
        .into_per_child()
        .iter()
        .any(|d| !matches!(d, Distribution::UnspecifiedDistribution))
}

/// Whether `node` is a `T`.
pub(crate) fn is<T: ExecutionPlan + 'static>(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<T>().is_some()
}

/// Whether some node of `plan` satisfies `predicate`.
pub(crate) fn any_node(
    plan: &Arc<dyn ExecutionPlan>,
    predicate: impl Fn(&Arc<dyn ExecutionPlan>) -> bool,
) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        found = predicate(node);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

#[cfg(test)]
mod tests {
    use crate::test_support::{operators, plan};

    #[test]
    fn fewer_source_partitions_than_streams_are_spread_round_robin_by_the_exchange() {
        let plan = plan("SELECT symbol FROM market_data WHERE price > 100", 1, 2).unwrap();
        assert!(
            plan.contains("StreamExchangeExec: strategy=round_robin, partitions=1->2"),
            "{plan}"
        );
        assert!(!operators(&plan).contains(&"RepartitionExec"), "{plan}");
    }

    #[test]
    fn as_many_source_partitions_as_streams_need_no_exchange() {
        let plan = plan("SELECT symbol FROM market_data WHERE price > 100", 2, 2).unwrap();
        assert!(!operators(&plan).contains(&"StreamExchangeExec"), "{plan}");
    }
}
