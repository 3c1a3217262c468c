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
//! - an exchange's input task that runs a partial aggregation step;
//! - a hash or time-run exchange's input task over a replay of files: it routes each batch and hands the
//!   pieces to the streams on the other cores, and the file's bytes are read ahead already
//!   (the Parquet read ahead); a task between decoding and routing costs a hop per batch and
//!   gains nothing when every core decodes (3–10 % of the CPU of S3a and S3b over Parquet
//!   at 2 and 4 streams).
//!
//! Every other operator, and a hash exchange over a generator or in-memory batches, keeps
//! the read ahead: the keyed work that follows gains from decoding on the side.

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
        place_reads(&plan, Consumer::Light, machine_cores());
        Ok(plan)
    }

    fn name(&self) -> &str {
        "FreshetReadPlacement"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// How much what consumes a node's output does per row.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Consumer {
    /// Little: a source below is read where consumed.
    Light,
    /// A hash or time-run exchange's routing: light for a replay of files only.
    Routing,
    Heavy,
}

/// Marks the sources under `node` that are read where consumed, given what consumes
/// `node`'s output.
fn place_reads(node: &Arc<dyn ExecutionPlan>, consumer: Consumer, cores: usize) {
    if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
        let light = match consumer {
            Consumer::Light => true,
            Consumer::Routing => source.positions().is_some(),
            Consumer::Heavy => false,
        };
        if light && node.output_partitioning().partition_count() >= cores {
            source.read_where_consumed();
        }
        return;
    }
    let row_wise = node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<StreamFilterExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some();
    let below = match node.downcast_ref::<StreamExchangeExec>() {
        // The input tasks run the partial step, or forward whole batches to a light consumer.
        Some(exchange) if exchange.input_step().is_some() => Consumer::Light,
        Some(exchange)
            if matches!(
                exchange.strategy(),
                RoutingStrategy::Hash(_) | RoutingStrategy::TimeRuns(_)
            ) =>
        {
            Consumer::Routing
        }
        Some(_) if consumer == Consumer::Light => Consumer::Light,
        Some(_) => Consumer::Heavy,
        None if row_wise => consumer,
        None => Consumer::Heavy,
    };
    for child in node.children() {
        place_reads(child, below, cores);
    }
}
