//! [`ExchangeSendExec`]: the sending half of an exchange that crosses workers — its input
//! tasks, on the worker that reads their source partitions — as a leaf of a stage of
//! datafusion-distributed.
//!
//! On worker `t`, with `I` of the exchange's inputs per worker (the inputs over the workers,
//! rounded up), partition `p` is exchange input `t*I + p`, or nothing past the last input: the wire batches it routes to every output (see
//! `freshet_engine::exchange::wire`). The worker plans the query from its [`QuerySpec`] when
//! the first partition runs, finds the exchange by its place in the plan, makes the
//! exchanges below it (if its input is an operator that reads one, as a window aggregation
//! does) read their outputs from this node's children, the network shuffles, and starts the
//! input tasks of all its partitions at once.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, ReplaceChildrenOptions,
};
use datafusion_distributed::DistributedTaskContext;
use freshet_engine::StreamExchangeExec;
use futures::TryStreamExt;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::placement::{
    GATHERING_EXCHANGE, Head, exchange_over_remotes, route_values, split_head,
    with_remote_exchanges,
};
use super::spec::QuerySpec;
use super::totals::metrics_of;

/// One worker's sending input tasks: a stream per partition, each taken once, and the
/// plan they read.
struct Sending {
    streams: Mutex<Vec<Option<SendableRecordBatchStream>>>,
    input: Arc<dyn ExecutionPlan>,
    /// The Arrow bytes of the wire batches sent so far.
    wire_bytes: Arc<AtomicUsize>,
}

/// See the module documentation.
pub struct ExchangeSendExec {
    spec: Arc<QuerySpec>,
    /// The exchange's place among the plan's exchanges.
    exchange: usize,
    /// The network shuffles of the nearest exchanges below this one, in their order.
    inputs: Vec<Arc<dyn ExecutionPlan>>,
    /// The exchange's inputs each worker runs.
    inputs_per_worker: usize,
    properties: Arc<PlanProperties>,
    /// Per task: its input tasks, once started.
    running: Mutex<HashMap<usize, Arc<OnceCell<Arc<Sending>>>>>,
}

impl fmt::Debug for ExchangeSendExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeSendExec")
            .field("exchange", &self.exchange)
            .finish()
    }
}

impl ExchangeSendExec {
    /// Exchange number `exchange` of the query of `spec`, whose wire batches have schema
    /// `wire`, reading the exchanges below it from `inputs`, each worker running
    /// `inputs_per_worker` of its inputs.
    pub fn new(
        spec: Arc<QuerySpec>,
        exchange: usize,
        wire: SchemaRef,
        inputs: Vec<Arc<dyn ExecutionPlan>>,
        inputs_per_worker: usize,
    ) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(wire),
            Partitioning::UnknownPartitioning(inputs_per_worker),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            spec,
            exchange,
            inputs,
            inputs_per_worker,
            properties: Arc::new(properties),
            running: Mutex::new(HashMap::new()),
        }
    }

    pub fn spec(&self) -> &Arc<QuerySpec> {
        &self.spec
    }

    pub fn exchange(&self) -> usize {
        self.exchange
    }

    pub fn inputs_per_worker(&self) -> usize {
        self.inputs_per_worker
    }

    /// Plans the query and starts the input tasks of task `task`.
    async fn start(
        spec: Arc<QuerySpec>,
        exchange: usize,
        inputs: Vec<Arc<dyn ExecutionPlan>>,
        per_worker: usize,
        task: usize,
        context: Arc<TaskContext>,
    ) -> Result<Arc<Sending>> {
        let query = spec.plan_on_worker().await?;
        let split = split_head(query.plan(), spec.partitions)?;
        let first = task * per_worker;
        // An exchange below this one feeds this one's inputs (through an operator on as
        // many partitions): its outputs here are this worker's inputs.
        let exchange = match (exchange, split.head) {
            (GATHERING_EXCHANGE, Head::Gather(gathering)) => {
                let input = with_remote_exchanges(&split.part, &inputs, first)?;
                let gathering: Arc<dyn ExecutionPlan> = gathering;
                let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                StreamExchangeExec::from_plan(
                    gathering.replace_children(vec![input], options)?,
                    "a worker",
                )?
            }
            (GATHERING_EXCHANGE, Head::Merge(_)) => {
                return internal_err!("the worker's plan gathers no stream into one");
            }
            (exchange, _) => exchange_over_remotes(&split.part, exchange, &inputs, first)?,
        };
        let outputs = exchange.properties().partitioning.partition_count();
        // Inputs that do not spread evenly leave the last workers fewer (or none): their
        // partitions past the inputs send nothing.
        let total = exchange.input().output_partitioning().partition_count();
        let (start, end) = (first.min(total), (first + per_worker).min(total));
        let mut sending = exchange.send_inputs(start..end, route_values(outputs)?, context)?;
        let wire = exchange.wire_schema();
        sending.resize_with(per_worker, || {
            Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&wire),
                futures::stream::empty(),
            ))
        });
        let wire_bytes = Arc::new(AtomicUsize::new(0));
        let streams = sending
            .into_iter()
            .map(|stream| {
                let schema = stream.schema();
                let counted = Arc::clone(&wire_bytes);
                let stream = stream.inspect_ok(move |batch| {
                    counted.fetch_add(wire_size(batch), Ordering::Relaxed);
                });
                let stream: SendableRecordBatchStream =
                    Box::pin(RecordBatchStreamAdapter::new(schema, stream));
                Some(stream)
            })
            .collect();
        Ok(Arc::new(Sending {
            streams: Mutex::new(streams),
            input: Arc::clone(exchange.input()),
            wire_bytes,
        }))
    }
}

/// The Arrow bytes of `batch`'s rows: a piece sliced out of a larger batch counts only
/// what it covers. Fixed-width columns are counted from their length and width, without
/// the copy of their layout that `ArrayData` makes.
fn wire_size(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| match column.data_type().primitive_width() {
            Some(width) => {
                let validity = column
                    .nulls()
                    .filter(|nulls| nulls.null_count() > 0)
                    .map_or(0, |nulls| nulls.len().div_ceil(8));
                column.len() * width + validity
            }
            None => column.to_data().get_slice_memory_size().unwrap_or(0),
        })
        .sum()
}

impl DisplayAs for ExchangeSendExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match self.exchange {
            GATHERING_EXCHANGE => write!(f, "ExchangeSendExec: exchange=gathering")?,
            exchange => write!(f, "ExchangeSendExec: exchange={exchange}")?,
        }
        write!(f, ", inputs_per_worker={}", self.inputs_per_worker)
    }
}

impl ExecutionPlan for ExchangeSendExec {
    fn name(&self) -> &str {
        "ExchangeSendExec"
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
            self.exchange,
            self.schema(),
            children,
            self.inputs_per_worker,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let running: Vec<(usize, Arc<Sending>)> = self
            .running
            .lock()
            .iter()
            .filter_map(|(task, cell)| Some((*task, cell.get()?.clone())))
            .collect();
        let wire_bytes = running
            .iter()
            .map(|(_, sending)| sending.wire_bytes.load(Ordering::Relaxed))
            .sum();
        let inputs = running
            .iter()
            .map(|(task, sending)| (*task, &sending.input));
        Some(metrics_of(inputs, wire_bytes))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let task = DistributedTaskContext::from_ctx(&context).task_index;
        let cell = Arc::clone(self.running.lock().entry(task).or_default());
        let (spec, exchange, inputs) = (Arc::clone(&self.spec), self.exchange, self.inputs.clone());
        let per_worker = self.inputs_per_worker;
        let stream = futures::stream::once(async move {
            let sending = cell
                .get_or_try_init(|| Self::start(spec, exchange, inputs, per_worker, task, context))
                .await?;
            match sending
                .streams
                .lock()
                .get_mut(partition)
                .and_then(Option::take)
            {
                Some(stream) => Ok(stream),
                None => internal_err!("exchange input {partition} sent twice or out of range"),
            }
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int8Array, Int64Array, StringViewArray};

    #[test]
    fn the_wire_size_of_a_slice_counts_its_rows_as_arrow_lays_them_out() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(0..1000)),
            Arc::new(Int64Array::from_iter(
                (0..1000).map(|v| (v % 3 > 0).then_some(v)),
            )),
            Arc::new(Int8Array::from_iter(
                (0..1000).map(|v| (v % 5 > 0).then_some(v as i8)),
            )),
            Arc::new(StringViewArray::from_iter_values(
                (0..1000).map(|v| format!("a string longer than twelve bytes {v}")),
            )),
        ];
        let batch =
            RecordBatch::try_from_iter(["a", "b", "c", "d"].into_iter().zip(columns)).unwrap();
        for (offset, rows) in [(0, 1000), (3, 517), (999, 1), (8, 0)] {
            let slice = batch.slice(offset, rows);
            let laid_out: usize = slice
                .columns()
                .iter()
                .map(|column| column.to_data().get_slice_memory_size().unwrap())
                .sum();
            assert_eq!(wire_size(&slice), laid_out, "{rows} rows from {offset}");
        }
    }
}
