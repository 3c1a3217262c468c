//! [`GatherExec`]: the coordinator's end of a query whose plan gathers every stream into
//! one (an aggregation without keys): the exchange that gathers them receives its one
//! output from the network, and the operators above it run here.
//!
//! The node's child is the network boundary that brings the exchange's wire batches from
//! every worker, so that datafusion-distributed sees (and prepares) it; executing the node
//! runs the plan above the exchange, the exchange reading that child (see
//! `freshet_engine::exchange`'s `remote` module).

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use freshet_engine::StreamExchangeExec;

use super::totals::metrics_of;

/// See the module documentation.
#[derive(Debug)]
pub struct GatherExec {
    /// The query's plan as one process runs it, and its gathering exchange.
    plan: Arc<dyn ExecutionPlan>,
    exchange: Arc<StreamExchangeExec>,
    /// The network boundary the exchange's wire batches arrive on, on one partition.
    network: Arc<dyn ExecutionPlan>,
    /// `plan`, its exchange reading `network`.
    received: Arc<dyn ExecutionPlan>,
}

impl GatherExec {
    /// `plan`, whose `exchange` gathers every stream into one, with the exchange's output
    /// received from `network`.
    pub fn try_new(
        plan: Arc<dyn ExecutionPlan>,
        exchange: Arc<StreamExchangeExec>,
        network: Arc<dyn ExecutionPlan>,
    ) -> Result<Self> {
        let receiving: Arc<dyn ExecutionPlan> =
            Arc::new(exchange.with_remote_input(Arc::clone(&network), 0));
        let gathering: Arc<dyn ExecutionPlan> = Arc::clone(&exchange) as _;
        let mut found = false;
        let received = Arc::clone(&plan)
            .transform_down(|node| {
                Ok(match Arc::ptr_eq(&node, &gathering) {
                    true => {
                        found = true;
                        Transformed::new(Arc::clone(&receiving), true, TreeNodeRecursion::Jump)
                    }
                    false => Transformed::no(node),
                })
            })?
            .data;
        if !found {
            return internal_err!("the gathering exchange is not in the plan");
        }
        Ok(Self {
            plan,
            exchange,
            network,
            received,
        })
    }
}

impl DisplayAs for GatherExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "GatherExec: {}", self.plan.name())
    }
}

impl ExecutionPlan for GatherExec {
    fn name(&self) -> &str {
        "GatherExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.received.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.network]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [network] = <[_; 1]>::try_from(children)
            .or_else(|_| internal_err!("GatherExec takes one child"))?;
        Ok(Arc::new(Self::try_new(
            Arc::clone(&self.plan),
            Arc::clone(&self.exchange),
            network,
        )?))
    }

    /// What the operators here dropped (late records of the aggregation above the
    /// exchange).
    fn metrics(&self) -> Option<MetricsSet> {
        Some(metrics_of(std::iter::once((0, &self.received)), 0))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.received.execute(partition, context)
    }
}
