//! [`SourceAlignmentRule`]: the sources below each interval join move together in event
//! time.
//!
//! An interval join holds each side's rows until the other side's watermark passes them, so
//! a side whose sources run ahead of the other's grows the join's state for as long as they
//! do (see [`SourceAlignment`]). The rule gives the stream sources below an interval join's
//! two sides one alignment. It reaches them only through operators that read every input
//! as it comes (Freshet's streaming operators, projections and filters): a source below an
//! operator that reads one input to its end before another (a hash join's build side, a
//! sort) could wait for a source that operator does not read yet.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use freshet_engine::aggregate::WindowAggregateExec;
use freshet_engine::join::IntervalJoinExec;
use freshet_engine::over::OverWindowExec;
use freshet_engine::source::SourceAlignment;
use freshet_engine::{StreamExchangeExec, StreamFilterExec, StreamSourceExec};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SourceAlignmentRule;

impl PhysicalOptimizerRule for SourceAlignmentRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Top down: a join above another aligns the sources of both.
        plan.apply(|node| {
            if node.downcast_ref::<IntervalJoinExec>().is_some() {
                let mut sources = Vec::new();
                for child in node.children() {
                    streaming_sources(child, &mut sources);
                }
                if sources.len() > 1 {
                    let alignment = SourceAlignment::new();
                    for source in sources {
                        source.align_with(&alignment);
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "FreshetSourceAlignment"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The stream sources below `node` reached through operators that read every input as it
/// comes.
fn streaming_sources<'a>(node: &'a Arc<dyn ExecutionPlan>, found: &mut Vec<&'a StreamSourceExec>) {
    if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
        found.push(source);
        return;
    }
    let reads_as_it_comes = node.downcast_ref::<StreamExchangeExec>().is_some()
        || node.downcast_ref::<WindowAggregateExec>().is_some()
        || node.downcast_ref::<IntervalJoinExec>().is_some()
        || node.downcast_ref::<OverWindowExec>().is_some()
        || node.downcast_ref::<StreamFilterExec>().is_some()
        || node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<ProjectionExec>().is_some();
    if reads_as_it_comes {
        for child in node.children() {
            streaming_sources(child, found);
        }
    }
}
