//! [`ReadPlacementRule`]: where each stream's partitions decode their files or generate their
//! records.
//!
//! A source partition that decodes or generates does so in a task of its own, a few batches
//! ahead of its consumer ([`StreamSourceExec`]), so that decoding overlaps with the query's
//! work on another core. When the stream has a source partition per core, every core decodes
//! already; if the consumer then does little per row, the extra task only adds a hop per
//! batch, and the partition is read where it is consumed instead. A light consumer is what
//! reaches the source through filters and projections from:
//! - the query's output (a stateless query), also through an exchange that forwards whole
//!   batches (sticky, round-robin or fan-in routing) to it;
//! - an exchange's input task that runs a partial aggregation step.
//!
//! A hash exchange (routing every row by its keys) and every other operator keep the read
//! ahead: the keyed work that follows gains from decoding on the side.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::{StreamExchangeExec, StreamFilterExec, StreamSourceExec, machine_cores};
use freshet_partitioner::RoutingStrategy;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ReadPlacementRule;

impl PhysicalOptimizerRule for ReadPlacementRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        place_reads(&plan, true, machine_cores());
        Ok(plan)
    }

    fn name(&self) -> &str {
        "FreshetReadPlacement"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Marks the sources under `node` that are read where consumed; `light` tells whether what
/// consumes `node`'s output does little per row.
fn place_reads(node: &Arc<dyn ExecutionPlan>, light: bool, cores: usize) {
    if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
        if light && node.output_partitioning().partition_count() >= cores {
            source.read_where_consumed();
        }
        return;
    }
    let row_wise = node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<StreamFilterExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some();
    let light_below = match node.downcast_ref::<StreamExchangeExec>() {
        // The input tasks run the partial step, or forward whole batches to a light consumer.
        Some(exchange) => {
            exchange.input_step().is_some()
                || (light && !matches!(exchange.strategy(), RoutingStrategy::Hash(_)))
        }
        None => light && row_wise,
    };
    for child in node.children() {
        place_reads(child, light_below, cores);
    }
}
