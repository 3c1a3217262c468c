//! [`StreamSortExec`]: ORDER BY over a stream whose first key is an event time, ascending —
//! `ORDER BY window_start` over a windowed aggregation, `ORDER BY ts, price DESC` over a
//! stream — as a sort that answers as the watermark moves rather than at the end of input.
//!
//! Its input is a fan-in [`StreamExchangeExec`] that merges every partition into one and
//! carries the watermark of the first key's column (a source's declared event time, or the
//! progress a windowed aggregation publishes for its window start). Rows wait in a
//! [`ReorderBuffer`] until the watermark passes their time; then the rows released are sorted
//! by every key of the ORDER BY and leave, so the output is in ORDER BY order across
//! releases: every row still to come has a time at or above the watermark, above every row
//! released. A row whose time is already below the watermark when it arrives (a late record)
//! cannot take its place: it is dropped, counted and sent to the late-record side output,
//! as windows do; a row without a time is dropped and counted. At the end of the input every
//! row leaves. The buffer's size is accounted in the memory pool.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::{
    SortColumn, concat_batches, lexsort_to_indices, take_record_batch,
};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};

use crate::checkpoint::{OperatorState, PassedBarriers};
use crate::exchange::StreamExchangeExec;
use crate::late_records::LateRecords;
use crate::message_loop::{MessageHandler, OperatorCheckpoint, drive_checkpointed};
use crate::operator_metrics::StatefulMetrics;
use crate::over::reorder::ReorderBuffer;
use crate::plan_util::{single_child, stateful_properties, visit_expressions};
use crate::watermark::event_times;

/// See the module documentation.
#[derive(Debug)]
pub struct StreamSortExec {
    /// The exchange below, as a plan (the same node as `exchange`).
    input: Arc<dyn ExecutionPlan>,
    exchange: Arc<StreamExchangeExec>,
    ordering: LexOrdering,
    /// The first key's column: the exchange's event time.
    time: usize,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    late_records: LateRecords,
    /// The checkpoint barriers each partition has passed.
    passed: Arc<PassedBarriers>,
}

impl StreamSortExec {
    /// Sorts the rows of `exchange` (one output partition, with an event time) by
    /// `ordering`, whose first key is the exchange's event-time column, ascending.
    pub fn try_new(exchange: Arc<StreamExchangeExec>, ordering: LexOrdering) -> Result<Self> {
        let input: Arc<dyn ExecutionPlan> = Arc::clone(&exchange) as _;
        let Some(event_time) = exchange.event_time() else {
            return internal_err!("StreamSortExec: its exchange carries no event time");
        };
        let first = ordering.first();
        let leads_with_time = first
            .expr
            .downcast_ref::<datafusion::physical_expr::expressions::Column>()
            .is_some_and(|c| c.index() == event_time.column)
            && !first.options.descending;
        if !leads_with_time {
            return internal_err!(
                "StreamSortExec: the ORDER BY must start with the event time, ascending"
            );
        }
        let schema = input.schema();
        let mut properties = stateful_properties(&input, &schema);
        properties = properties.with_eq_properties(
            datafusion::physical_expr::EquivalenceProperties::new_with_orderings(
                Arc::clone(&schema),
                [ordering.clone()],
            ),
        );
        let partitions = properties.output_partitioning().partition_count();
        Ok(Self {
            input,
            exchange,
            ordering,
            time: event_time.column,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            late_records: LateRecords::default(),
            passed: Arc::new(PassedBarriers::new(partitions)),
        })
    }

    /// The side output of late records.
    pub fn late_records(&self) -> &LateRecords {
        &self.late_records
    }

    pub fn ordering(&self) -> &LexOrdering {
        &self.ordering
    }

    /// The checkpoint barriers each partition has passed.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }
}

impl DisplayAs for StreamSortExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.ordering.iter().map(|e| e.to_string()).collect();
        write!(
            f,
            "StreamSortExec: [{}] (rows leave sorted as the watermark passes their time)",
            keys.join(", ")
        )
    }
}

impl ExecutionPlan for StreamSortExec {
    fn name(&self) -> &str {
        "StreamSortExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let expressions: Vec<Arc<dyn PhysicalExpr>> =
            self.ordering.iter().map(|e| Arc::clone(&e.expr)).collect();
        visit_expressions(&expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let child = single_child("StreamSortExec", children)?;
        let exchange = StreamExchangeExec::from_plan(child, "StreamSortExec")?;
        let mut exec = Self::try_new(exchange, self.ordering.clone())?;
        exec.late_records = self.late_records.clone();
        Ok(Arc::new(exec))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let reservation = MemoryConsumer::new(format!("StreamSortExec[{partition}]"))
            .register(context.memory_pool());
        let checkpoint =
            OperatorCheckpoint::of(&context, self, partition, &self.passed, self.schema())?;
        let messages = self.exchange.execute_messages(partition, context)?;
        let schema = self.schema();
        let state = SortState {
            buffer: ReorderBuffer::new(Arc::clone(&schema)),
            schema: Arc::clone(&schema),
            ordering: self.ordering.clone(),
            time: self.time,
            watermark: i64::MIN,
            late_records: self.late_records.of_partition(&self.passed, partition),
            metrics: StatefulMetrics::new(&self.metrics, partition),
            reservation,
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            drive_checkpointed(messages, state, checkpoint),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One output partition's rows waiting for the watermark.
struct SortState {
    buffer: ReorderBuffer,
    schema: SchemaRef,
    ordering: LexOrdering,
    time: usize,
    watermark: i64,
    late_records: LateRecords,
    metrics: StatefulMetrics,
    reservation: MemoryReservation,
}

impl SortState {
    fn account(&mut self) -> Result<()> {
        let bytes = self.buffer.size();
        self.metrics.state_bytes.set(bytes);
        self.reservation.try_resize(bytes)
    }

    /// `batch` sorted by the ORDER BY.
    fn sorted(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = self
            .ordering
            .iter()
            .map(|key| {
                Ok(SortColumn {
                    values: key.expr.evaluate(batch)?.into_array(batch.num_rows())?,
                    options: Some(key.options),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let indices = lexsort_to_indices(&columns, None)?;
        Ok(take_record_batch(batch, &indices)?)
    }
}

impl MessageHandler for SortState {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        self.metrics.records_in.add(batch.num_rows());
        let times = event_times(batch.column(self.time))?;
        let times = times.as_primitive::<Int64Type>();
        self.metrics.null_time_dropped.add(times.null_count());
        // A row below the watermark would leave after rows it sorts before: late.
        if let Some(late) = self.buffer.push_in_time(batch, times, self.watermark)? {
            self.metrics.late_dropped.add(late.true_count());
            if self.late_records.wanted() {
                self.late_records.send(batch, &late)?;
            }
        }
        self.account()?;
        Ok(None)
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        if watermark <= self.watermark {
            return Ok(None);
        }
        self.watermark = watermark;
        // Rows at the watermark's time may still come: only those below it leave.
        let released = self.buffer.release(watermark, true)?;
        self.account()?;
        if released.is_empty() {
            return Ok(None);
        }
        let batches: Vec<RecordBatch> = released.into_iter().map(|r| r.batch).collect();
        let all = concat_batches(&self.schema, &batches)?;
        let output = self.sorted(&all)?;
        self.metrics.baseline.record_output(output.num_rows());
        Ok(Some(output))
    }

    /// The rows waiting, the watermark and the counts of dropped records.
    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        let mut state = OperatorState::default();
        self.buffer.snapshot_into(&mut state)?;
        state.put_value("watermark", self.watermark);
        self.metrics.snapshot_into(&mut state);
        Ok(Some(state))
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.buffer.restore_from(state, self.time)?;
        self.watermark = state.value("watermark")?;
        self.metrics.restore_from(state)?;
        self.account()
    }

    fn dropped_counts(&self) -> Option<&StatefulMetrics> {
        Some(&self.metrics)
    }
}
