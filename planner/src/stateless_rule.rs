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
//! their own exchanges before this rule runs.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
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
        let setting = FreshetOptions::of(config).partitioning_strategy;
        Ok(plan
            .transform_up(|node| {
                let Some(repartition) = node.downcast_ref::<RepartitionExec>() else {
                    return Ok(Transformed::no(node));
                };
                let Partitioning::RoundRobinBatch(outputs) = repartition.partitioning() else {
                    return Ok(Transformed::no(node));
                };
                if !reads_stream(repartition.input()) {
                    return Ok(Transformed::no(node));
                }
                let (strategy, reason) = stateless_strategy(&setting);
                let exchange = StreamExchangeExec::try_new(
                    Arc::clone(repartition.input()),
                    strategy,
                    *outputs,
                    None,
                )?
                .with_reason(reason);
                Ok(Transformed::yes(
                    Arc::new(exchange) as Arc<dyn ExecutionPlan>
                ))
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

/// The strategy of a stateless stage's exchange and why (see the module documentation).
fn stateless_strategy(setting: &str) -> (RoutingStrategy, String) {
    match setting {
        "round_robin" => (RoutingStrategy::RoundRobin, "user".to_string()),
        "sticky" => (
            RoutingStrategy::Sticky,
            "user: each stream keeps its source partition".to_string(),
        ),
        "fan_in" => (RoutingStrategy::FanIn, "user: one stream".to_string()),
        "hash" => (
            RoutingStrategy::RoundRobin,
            "auto: the user's hash needs keys, a stateless stage has none; fewer source partitions than streams"
                .to_string(),
        ),
        _ => (
            RoutingStrategy::RoundRobin,
            "auto: stateless, fewer source partitions than streams".to_string(),
        ),
    }
}

/// Whether a Freshet stream is read under `plan`.
fn reads_stream(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut stream = false;
    let _ = plan.apply(|node| {
        stream |= node.downcast_ref::<StreamSourceExec>().is_some();
        Ok(if stream {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    stream
}
