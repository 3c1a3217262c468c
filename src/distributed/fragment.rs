//! [`FragmentExec`]: the part of a query one worker runs above the exchanges — the
//! operators that read the exchanges' outputs, up to the plan's last partitioned node — as
//! one node of a stage of datafusion-distributed, whose children are the network shuffles
//! the exchanges' outputs arrive on.
//!
//! On worker `t` of a query on `S` streams per worker, partition `p` is partition `t*S + p`
//! of that part of the plan. The worker plans the query from its [`QuerySpec`] when the
//! first partition runs and makes each exchange read its outputs from the child in the
//! same place (see `freshet_engine::exchange`'s `remote` module).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::DistributedTaskContext;
use futures::TryStreamExt;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::placement::{split_head, with_remote_exchanges};
use super::spec::QuerySpec;
use super::totals::metrics_of;

/// One task's part of the plan, planned when its first partition runs.
type PlannedPart = OnceCell<Arc<dyn ExecutionPlan>>;

/// See the module documentation.
#[derive(Debug)]
pub struct FragmentExec {
    spec: Arc<QuerySpec>,
    /// The network shuffles, one per exchange, in the order of the plan's exchanges.
    inputs: Vec<Arc<dyn ExecutionPlan>>,
    properties: Arc<PlanProperties>,
    /// Per task: its part of the plan, once planned.
    planned: Mutex<HashMap<usize, Arc<PlannedPart>>>,
}

impl FragmentExec {
    /// The workers' part of the query of `spec`, of schema `schema`, reading its exchanges'
    /// outputs from `inputs`.
    pub fn new(
        spec: Arc<QuerySpec>,
        schema: SchemaRef,
        inputs: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(spec.streams_per_worker()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            spec,
            inputs,
            properties: Arc::new(properties),
            planned: Mutex::new(HashMap::new()),
        }
    }

    pub fn spec(&self) -> &Arc<QuerySpec> {
        &self.spec
    }

    /// Plans task `task`'s part.
    async fn plan(
        spec: Arc<QuerySpec>,
        inputs: Vec<Arc<dyn ExecutionPlan>>,
        task: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let query = spec.plan_on_worker().await?;
        let part = split_head(query.plan(), spec.partitions)?.part;
        with_remote_exchanges(&part, &inputs, task * spec.streams_per_worker())
    }
}

impl DisplayAs for FragmentExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "FragmentExec: streams_per_worker={}, exchanges={}",
            self.spec.streams_per_worker(),
            self.inputs.len()
        )
    }
}

impl ExecutionPlan for FragmentExec {
    fn name(&self) -> &str {
        "FragmentExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.inputs.iter().collect()
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
        Ok(Arc::new(Self::new(
            Arc::clone(&self.spec),
            self.schema(),
            children,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let planned: Vec<(usize, Arc<dyn ExecutionPlan>)> = self
            .planned
            .lock()
            .iter()
            .filter_map(|(task, cell)| Some((*task, cell.get()?.clone())))
            .collect();
        Some(metrics_of(
            planned.iter().map(|(task, plan)| (*task, plan)),
            0,
        ))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let task = DistributedTaskContext::from_ctx(&context).task_index;
        let cell = Arc::clone(self.planned.lock().entry(task).or_default());
        let (spec, inputs) = (Arc::clone(&self.spec), self.inputs.clone());
        let first = task * spec.streams_per_worker();
        let stream = futures::stream::once(async move {
            let part = cell
                .get_or_try_init(|| Self::plan(spec, inputs, task))
                .await?;
            part.execute(first + partition, context)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }
}
