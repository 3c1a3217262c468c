//! [`OverWindowExec`]: window functions over ROWS frames (`f(x) OVER (PARTITION BY k ORDER
//! BY t ROWS BETWEEN n PRECEDING AND CURRENT ROW)`) on an unbounded stream, one output row per
//! input row: the input row followed by the functions' values.
//!
//! Its input is a [`StreamExchangeExec`] that routes each key's rows to one output partition
//! and computes watermarks from the ORDER BY column. Per batch, the operator drops and counts
//! rows without an ORDER BY value and late rows (older than the watermark, which already let
//! newer rows of their key through), and holds the rest in a [`ReorderBuffer`]. When the
//! watermark rises, the rows it passes leave the buffer and are computed as one batch:
//!
//! 1. intern the PARTITION BY keys with DataFusion's `GroupValues`;
//! 2. check that each key's rows are in ORDER BY order; if not, sort the batch by time
//!    (ties in arrival order). Ordered input passes without a copy;
//! 3. give each row its position in its key (the key's row count so far);
//! 4. compute each function's column in one pass with its per-key state ([`OverKernel`]):
//!    rankings from positions, LAG/FIRST_VALUE/NTH_VALUE from a history of each key's recent
//!    values, SUM/AVG/COUNT/MIN/MAX from running sums and monotonic deques.
//!
//! State is O(frame) per key, work O(1) amortized per row and function. Keys idle for longer
//! than `expire_after` (event time, by the watermark) are forgotten — their rows still
//! waiting for following rows leave first, as at the end of the input — and a later row of
//! the key starts afresh. State is accounted in the memory pool.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt64Array, new_null_array,
};
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, Gauge, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};

use super::functions::{OverFunction, OverKernel};
use super::lookahead::{CompletingRows, Lookahead};
use super::reorder::{Released, ReorderBuffer, sort_by_time};
use crate::checkpoint::{OperatorState, PassedBarriers, StateReader, StateWriter};
use crate::exchange::StreamExchangeExec;
use crate::kernels::GroupTable;
use crate::late_records::LateRecords;
use crate::message_loop::{MessageHandler, OperatorCheckpoint, drive_checkpointed};
use crate::operator_metrics::{StatefulMetrics, counter, gauge};
use crate::plan_util::{evaluate, single_child, stateful_properties, visit_expressions};
use crate::watermark::event_times;

/// Virtual rows per round when the end of the input completes every key's last rows.
const TAIL_ROWS_PER_ROUND: usize = 64 * 1024;

/// What an [`OverWindowExec`] computes.
#[derive(Debug, Clone)]
pub struct OverSpec {
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    /// The ORDER BY column (ascending), by index in the input.
    pub order_by: usize,
    pub functions: Vec<OverFunction>,
    /// Forget a key after this much event time without a row (ORDER BY units).
    pub expire_after: Option<i64>,
    /// The input's columns followed by one column per function.
    pub schema: SchemaRef,
}

/// See the module documentation.
#[derive(Debug)]
pub struct OverWindowExec {
    /// The exchange below, as a plan (the same node as `exchange`).
    input: Arc<dyn ExecutionPlan>,
    exchange: Arc<StreamExchangeExec>,
    spec: OverSpec,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    late_records: LateRecords,
    /// The checkpoint barriers each output partition has passed.
    passed: Arc<PassedBarriers>,
}

impl OverWindowExec {
    /// The window functions of `spec` over the rows of `exchange`.
    pub fn try_new(exchange: Arc<StreamExchangeExec>, spec: OverSpec) -> Result<Self> {
        let input: Arc<dyn ExecutionPlan> = Arc::clone(&exchange) as _;
        let input_schema = input.schema();
        if spec.schema.fields().len() != input_schema.fields().len() + spec.functions.len() {
            return internal_err!("OverWindowExec: schema does not fit the input and functions");
        }
        for function in &spec.functions {
            let argument_type = match &function.argument {
                Some(argument) => Some(argument.data_type(&input_schema)?),
                None => None,
            };
            function.validate(argument_type.as_ref())?;
        }
        let properties = stateful_properties(&input, &spec.schema);
        let partitions = properties.partitioning.partition_count();
        Ok(Self {
            input,
            exchange,
            spec,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            late_records: LateRecords::default(),
            passed: Arc::new(PassedBarriers::new(partitions)),
        })
    }

    /// The checkpoint barriers each output partition has passed on.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }

    pub fn spec(&self) -> &OverSpec {
        &self.spec
    }

    /// The side output of late records.
    pub fn late_records(&self) -> &LateRecords {
        &self.late_records
    }

    /// The exchange this operator reads.
    pub fn exchange(&self) -> &Arc<StreamExchangeExec> {
        &self.exchange
    }
}

impl DisplayAs for OverWindowExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let input_schema = self.input.schema();
        let keys: Vec<String> = self
            .spec
            .partition_by
            .iter()
            .map(|k| k.to_string())
            .collect();
        let functions: Vec<String> = self
            .spec
            .functions
            .iter()
            .map(|function| function.field.name().clone())
            .collect();
        write!(
            f,
            "OverWindowExec: partition_by=[{}], order_by={}, functions=[{}]",
            keys.join(", "),
            input_schema.field(self.spec.order_by).name(),
            functions.join(", ")
        )?;
        if let Some(expire_after) = self.spec.expire_after {
            write!(f, ", expire_after={expire_after}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for OverWindowExec {
    fn name(&self) -> &str {
        "OverWindowExec"
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
        let expressions = self.spec.partition_by.iter().chain(
            self.spec
                .functions
                .iter()
                .filter_map(|f| f.argument.as_ref()),
        );
        visit_expressions(expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let child = single_child("OverWindowExec", children)?;
        let exchange = StreamExchangeExec::from_plan(child, "OverWindowExec")?;
        let mut exec = Self::try_new(exchange, self.spec.clone())?;
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
        let reservation = MemoryConsumer::new(format!("OverWindowExec[{partition}]"))
            .register(context.memory_pool());
        let messages = self
            .exchange
            .execute_messages(partition, Arc::clone(&context))?;
        let state = OverState::try_new(self, partition, reservation)?;
        let checkpoint = OperatorCheckpoint::of(
            &context,
            self,
            partition,
            &self.passed,
            Arc::clone(&self.spec.schema),
        )?;
        let outputs = drive_checkpointed(messages, state, checkpoint);
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.spec.schema),
            outputs,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Counters of one output partition.
struct OverMetrics {
    stateful: StatefulMetrics,
    keys_expired: Count,
    keys: Gauge,
    rows_waiting: Gauge,
}

impl OverMetrics {
    fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            stateful: StatefulMetrics::new(metrics, partition),
            keys_expired: counter(metrics, "keys_expired", partition),
            keys: gauge(metrics, "keys", partition),
            rows_waiting: gauge(metrics, "rows_waiting", partition),
        }
    }
}

/// The state of one output partition.
struct OverState {
    spec: OverSpec,
    keys: GroupTable,
    kernels: Vec<OverKernel>,
    kernel_bytes: KernelBytes,
    /// Set when some function reads following rows.
    lookahead: Option<Lookahead>,
    tails_completed: bool,
    argument_types: Vec<Option<DataType>>,
    /// Per key: rows processed, and the ORDER BY value of the latest.
    counts: Vec<u64>,
    latest: Vec<i64>,
    buffer: ReorderBuffer,
    /// Output computed but not yet handed out: a watermark's batches after the first.
    queued: VecDeque<RecordBatch>,
    /// Release only rows strictly below the watermark: a RANGE frame needs all peers at once.
    strict: bool,
    watermark: i64,
    /// Watermark of the last sweep for idle keys.
    swept_at: i64,
    late_records: LateRecords,
    metrics: OverMetrics,
    reservation: MemoryReservation,
}

impl OverState {
    fn try_new(
        exec: &OverWindowExec,
        partition: usize,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        let input_schema = exec.input.schema();
        let key_fields = exec
            .spec
            .partition_by
            .iter()
            .enumerate()
            .map(|(i, key)| {
                Ok(Field::new(
                    format!("key{i}"),
                    key.data_type(&input_schema)?,
                    true,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let lookahead = exec
            .spec
            .functions
            .iter()
            .map(OverFunction::lookahead)
            .max()
            .unwrap_or(0);
        let argument_types = exec
            .spec
            .functions
            .iter()
            .map(|function| match &function.argument {
                Some(argument) => Ok(Some(argument.data_type(&input_schema)?)),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let kernels = exec
            .spec
            .functions
            .iter()
            .zip(&argument_types)
            .map(|(function, argument_type)| {
                OverKernel::try_new(function, argument_type.as_ref(), lookahead)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            spec: exec.spec.clone(),
            keys: GroupTable::try_new(&Arc::new(Schema::new(key_fields)), &[])?,
            kernels,
            kernel_bytes: KernelBytes::default(),
            lookahead: (lookahead > 0).then(|| Lookahead::new(lookahead, &input_schema)),
            tails_completed: false,
            argument_types,
            counts: Vec::new(),
            latest: Vec::new(),
            buffer: ReorderBuffer::new(input_schema),
            queued: VecDeque::new(),
            strict: exec.spec.functions.iter().any(|f| f.peers),
            watermark: i64::MIN,
            swept_at: i64::MIN,
            late_records: exec.late_records.of_partition(&exec.passed, partition),
            metrics: OverMetrics::new(&exec.metrics, partition),
            reservation,
        })
    }

    /// Drops and counts rows without an ORDER BY value and late rows; buffers the rest.
    fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        self.metrics.stateful.records_in.add(batch.num_rows());
        let times = event_times(batch.column(self.spec.order_by))?;
        let times = times.as_primitive::<Int64Type>();
        self.metrics
            .stateful
            .null_time_dropped
            .add(times.null_count());
        if let Some(late) = self.buffer.push_in_time(batch, times, self.watermark)? {
            self.metrics.stateful.late_dropped.add(late.true_count());
            if self.late_records.wanted() {
                self.late_records.send(batch, &late)?;
            }
        }
        self.report_state()?;
        Ok(None)
    }

    /// Moves the watermark and computes the rows it releases.
    fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.watermark = self.watermark.max(watermark);
        // Keys idle for too long go before the released rows are computed: a row that comes
        // after such a gap starts its key afresh.
        let mut outputs: Vec<RecordBatch> = self.expire_idle_keys()?.into_iter().collect();
        // Released batches in time order are computed one by one: a watermark that releases
        // many rows at once would otherwise make every step allocate for all of them.
        for released in self.buffer.release(self.watermark, self.strict)? {
            outputs.push(self.compute(released)?);
        }
        if self.watermark == i64::MAX && !self.tails_completed {
            outputs.extend(self.complete_every_tail()?);
            // The end of the input can be signalled twice (a last watermark, then the end).
            self.tails_completed = true;
        }
        self.report_state()?;
        for batch in &outputs {
            self.metrics
                .stateful
                .baseline
                .record_output(batch.num_rows());
        }
        self.queued
            .extend(outputs.into_iter().filter(|batch| batch.num_rows() > 0));
        Ok(self.queued.pop_front())
    }

    /// The output rows of released rows.
    fn compute(&mut self, released: Released) -> Result<RecordBatch> {
        let rows = released.batch.num_rows();
        self.kernel_bytes.computed(rows);
        let keys = evaluate(&self.spec.partition_by, &released.batch)?;
        self.keys.intern(&keys, rows)?;
        let key_count = self.keys.len();
        self.counts.resize(key_count, 0);
        self.latest.resize(key_count, i64::MIN);
        let arrived = self.keys.last_group_ids(rows);
        // Rows of one key must go in time order; released rows usually are already (each
        // source partition is in order), else they are sorted.
        let mut positions = Vec::with_capacity(rows);
        let in_order = assign_positions(
            arrived,
            released.times.values(),
            &mut self.counts,
            &mut self.latest,
            &mut positions,
            true,
        );
        let (Released { batch, times }, groups) = if in_order {
            (released, arrived.to_vec())
        } else {
            let (sorted, permutation) = sort_by_time(released)?;
            let groups: Vec<usize> = permutation
                .values()
                .iter()
                .map(|row| arrived[*row as usize])
                .collect();
            assign_positions(
                &groups,
                sorted.times.values(),
                &mut self.counts,
                &mut self.latest,
                &mut positions,
                false,
            );
            (sorted, groups)
        };
        let arguments = self
            .spec
            .functions
            .iter()
            .map(|function| match &function.argument {
                Some(argument) => Ok(Some(argument.evaluate(&batch)?.into_array(rows)?)),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some(lookahead) = &mut self.lookahead {
            let completing = CompletingRows {
                rows: lookahead.rows_of(batch.columns(), rows)?,
                arguments,
                groups: &groups,
                positions: &positions,
                times: &times,
            };
            let columns =
                lookahead.complete(&self.spec.functions, &mut self.kernels, completing, None)?;
            return self.output_batch(columns);
        }
        let times = times.values();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for ((function, kernel), argument) in self
            .spec
            .functions
            .iter()
            .zip(&mut self.kernels)
            .zip(&arguments)
        {
            columns.push(kernel.evaluate(
                function,
                0,
                argument.as_ref(),
                &groups,
                &positions,
                times,
            )?);
        }
        self.output_batch(columns)
    }

    /// Under a lookahead, at the end of the input or when keys expire: the last rows of the
    /// keys `closing` names, completed by virtual rows.
    fn complete_tails(&mut self, closing: impl Fn(usize) -> bool) -> Result<Option<RecordBatch>> {
        let Some(lookahead) = self.lookahead.as_mut().filter(|_| !self.tails_completed) else {
            return Ok(None);
        };
        let rows_per_key = lookahead.rows();
        let mut groups = Vec::new();
        let mut positions = Vec::new();
        // Histories count on consecutive positions: every key with rows gets all of them.
        for (group, count) in self
            .counts
            .iter()
            .enumerate()
            .filter(|(group, count)| **count > 0 && closing(*group))
        {
            for extra in 0..rows_per_key {
                groups.push(group);
                positions.push(count + extra);
            }
        }
        if groups.is_empty() {
            return Ok(None);
        }
        let len = groups.len();
        let arguments = self
            .argument_types
            .iter()
            .map(|data_type| data_type.as_ref().map(|t| new_null_array(t, len)))
            .collect();
        let times = Int64Array::from(vec![i64::MAX; len]);
        let completing = CompletingRows {
            rows: lookahead.virtual_rows(len),
            arguments,
            groups: &groups,
            positions: &positions,
            times: &times,
        };
        let columns = lookahead.complete(
            &self.spec.functions,
            &mut self.kernels,
            completing,
            Some(&self.counts),
        )?;
        Ok(Some(self.output_batch(columns)?))
    }

    fn output_batch(&self, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(
            Arc::clone(&self.spec.schema),
            columns,
        )?)
    }

    /// Forgets the keys whose latest row is more than `expire_after` behind the watermark,
    /// at most every half expiry interval (each sweep is O(keys)).
    /// Under a lookahead, the expiring keys' last rows leave first, completed as at the end
    /// of the input; they are returned.
    fn expire_idle_keys(&mut self) -> Result<Option<RecordBatch>> {
        let Some(expire_after) = self.spec.expire_after else {
            return Ok(None);
        };
        if self.watermark == i64::MAX
            || self.watermark.saturating_sub(self.swept_at) < expire_after / 2
        {
            return Ok(None);
        }
        self.swept_at = self.watermark;
        let cutoff = self.watermark.saturating_sub(expire_after);
        let expired: Vec<bool> = self.latest.iter().map(|t| *t < cutoff).collect();
        let expiring = expired.iter().filter(|e| **e).count();
        if expiring == 0 {
            return Ok(None);
        }
        self.metrics.keys_expired.add(expiring);
        let tails = self.complete_tails(|group| expired[group])?;
        self.forget_keys(&expired)?;
        Ok(tails)
    }

    /// At the end of the input under a lookahead: every key's last rows, completed by
    /// virtual rows a few keys at a time, each group of keys forgotten once completed. The
    /// virtual rows (the lookahead's length per key) and the histories they fill are then
    /// held for one group at a time, not for every key at once.
    fn complete_every_tail(&mut self) -> Result<Vec<RecordBatch>> {
        let Some(lookahead) = &self.lookahead else {
            return Ok(Vec::new());
        };
        let keys = self.counts.len();
        // At most 64 rounds (each renumbers the keys left), of about 64 Ki virtual rows
        // each when the keys are few.
        let per_round = (TAIL_ROWS_PER_ROUND / lookahead.rows().max(1) as usize)
            .max(keys.div_ceil(64))
            .max(1);
        let mut outputs = Vec::new();
        while !self.counts.is_empty() {
            let round = per_round.min(self.counts.len());
            outputs.extend(self.complete_tails(|group| group < round)?);
            // The round's histories are at their largest here: accounted before they go.
            self.report_state()?;
            let completed: Vec<bool> = (0..self.counts.len()).map(|g| g < round).collect();
            self.forget_keys(&completed)?;
        }
        Ok(outputs)
    }

    /// Forgets the keys `forgotten` marks, renumbering the others in order.
    fn forget_keys(&mut self, forgotten: &[bool]) -> Result<()> {
        if let Some(lookahead) = &mut self.lookahead {
            lookahead.retain_keys(forgotten);
        }
        // Rebuild the key table with the survivors, in order, so their ids stay dense.
        let rows = self.keys.len();
        let leaving = forgotten.iter().filter(|f| **f).count();
        let keys = self.keys.emit_keys(EmitTo::All)?;
        let keep = BooleanArray::from(forgotten.iter().map(|f| !f).collect::<Vec<_>>());
        let survivors = keys
            .iter()
            .map(|k| Ok(filter(k.as_ref(), &keep)?))
            .collect::<Result<Vec<_>>>()?;
        if !survivors.is_empty() && rows > leaving {
            self.keys.intern(&survivors, rows - leaving)?;
        }
        let mut keep_iter = forgotten.iter().map(|f| !f);
        self.counts.retain(|_| keep_iter.next().unwrap_or(true));
        let mut keep_iter = forgotten.iter().map(|f| !f);
        self.latest.retain(|_| keep_iter.next().unwrap_or(true));
        for kernel in &mut self.kernels {
            kernel.retain_keys(forgotten);
        }
        Ok(())
    }

    /// What a checkpoint keeps of this partition: the keys, each key's row count and latest
    /// time, every function's per-key state, the rows waiting for the watermark or for
    /// their following rows, and the watermark.
    fn snapshot_state(&mut self) -> Result<OperatorState> {
        if !self.queued.is_empty() {
            return internal_err!(
                "OverWindowExec: a barrier came before the output was handed out"
            );
        }
        let mut state = OperatorState::default();
        let groups = self.keys.len();
        // Taken out and interned straight back, in order: the ids stay the same.
        let keys = self.keys.emit_keys(EmitTo::All)?;
        self.keys.intern(&keys, groups)?;
        for (index, key) in keys.into_iter().enumerate() {
            state.put_array(format!("key_{index:03}"), key);
        }
        state.put_value("groups", groups as i64);
        state.put_array("counts", Arc::new(UInt64Array::from(self.counts.clone())));
        state.put_array("latest", Arc::new(Int64Array::from(self.latest.clone())));
        self.buffer.snapshot_into(&mut state)?;
        let mut kernels = StateWriter::default();
        for kernel in &self.kernels {
            kernel.persist_keys(&mut kernels);
        }
        if let Some(lookahead) = &self.lookahead {
            lookahead.persist_keys(&mut kernels);
        }
        kernels.finish(&mut state, "kernels");
        state.put_value("watermark", self.watermark);
        self.metrics.stateful.snapshot_into(&mut state);
        state.put_value("swept_at", self.swept_at);
        state.put_value("tails_completed", i64::from(self.tails_completed));
        Ok(state)
    }

    /// Takes back what [`Self::snapshot_state`] kept.
    fn restore_state(&mut self, state: &OperatorState) -> Result<()> {
        let groups = state.value("groups")? as usize;
        let keys = state.arrays_with_prefix("key_");
        if groups > 0 {
            self.keys.intern(&keys, groups)?;
        }
        self.counts = state
            .array("counts")?
            .as_primitive::<UInt64Type>()
            .values()
            .to_vec();
        self.latest = state
            .array("latest")?
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        self.buffer.restore_from(state, self.spec.order_by)?;
        let mut kernels = StateReader::of(state, "kernels")?;
        for kernel in &mut self.kernels {
            kernel.restore_keys(&mut kernels)?;
        }
        if let Some(lookahead) = &mut self.lookahead {
            lookahead.restore_keys(&mut kernels)?;
        }
        kernels.finish()?;
        self.watermark = state.value("watermark")?;
        self.metrics.stateful.restore_from(state)?;
        self.swept_at = state.value("swept_at")?;
        self.tails_completed = state.value("tails_completed")? != 0;
        self.kernel_bytes.stale();
        self.report_state()
    }

    /// Publishes the state's size and accounts it in the memory pool: past the pool's limit
    /// this fails, naming the operator and partition.
    fn report_state(&mut self) -> Result<()> {
        let bytes = self.keys.size()
            + self.buffer.size()
            + self
                .kernel_bytes
                .of(self.kernels.len(), self.keys.len(), || {
                    self.kernels.iter().map(OverKernel::size).sum()
                })
            + self.lookahead.as_ref().map_or(0, Lookahead::size)
            + (self.counts.capacity() + self.latest.capacity()) * 8;
        self.metrics.stateful.state_bytes.set(bytes);
        self.metrics.keys.set(self.keys.len());
        self.metrics.rows_waiting.set(self.buffer.len());
        self.reservation.try_resize(bytes)
    }
}

/// The bytes of the kernels' per-key state. Measuring them is a pass over every key, and the
/// state is reported after every batch: a pass each time made a stream of many keys
/// quadratic (Nexmark's bids framed per auction: four fifths of the time). So a pass is
/// repeated only once as many rows as there are keys have been computed since, and in
/// between each row counts [`KernelBytes::ROW_BYTES`] a kernel.
#[derive(Debug, Default)]
struct KernelBytes {
    measured: usize,
    rows_since: usize,
}

impl KernelBytes {
    /// What a row adds to a kernel's state at most, about: a frame slot and a MIN/MAX entry.
    const ROW_BYTES: usize = 32;

    fn computed(&mut self, rows: usize) {
        self.rows_since = self.rows_since.saturating_add(rows);
    }

    /// Measures at the next report (after state is taken back from a checkpoint).
    fn stale(&mut self) {
        self.rows_since = usize::MAX;
    }

    /// The bytes of `kernels` kernels over `keys` keys, `measure`d by a pass if due.
    fn of(&mut self, kernels: usize, keys: usize, measure: impl FnOnce() -> usize) -> usize {
        if self.rows_since >= keys {
            self.measured = measure();
            self.rows_since = 0;
        }
        self.measured + self.rows_since * Self::ROW_BYTES * kernels
    }
}

/// Gives each row its position in its key and moves the keys' row counts and latest times
/// on. With `check`, stops at the first row older than its key's latest time, undoes the
/// counts, and returns false (`latest` then needs the unchecked pass).
fn assign_positions(
    groups: &[usize],
    times: &[i64],
    counts: &mut [u64],
    latest: &mut [i64],
    positions: &mut Vec<u64>,
    check: bool,
) -> bool {
    positions.clear();
    // Sized first and written through an iterator: no capacity check per row.
    positions.resize(groups.len(), 0);
    for (row, ((&group, &time), position)) in groups
        .iter()
        .zip(times)
        .zip(positions.iter_mut())
        .enumerate()
    {
        if check && time < latest[group] {
            for &group in &groups[..row] {
                counts[group] -= 1;
            }
            return false;
        }
        *position = counts[group];
        counts[group] += 1;
        latest[group] = time;
    }
    true
}

impl MessageHandler for OverState {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.process(batch)
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.advance(watermark)
    }

    fn queued_output(&mut self) -> Result<Option<RecordBatch>> {
        Ok(self.queued.pop_front())
    }

    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        self.snapshot_state().map(Some)
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.restore_state(state)
    }

    fn dropped_counts(&self) -> Option<&StatefulMetrics> {
        Some(&self.metrics.stateful)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels are measured at first, then only once as many rows as keys have been
    /// computed, each row counted in between; and again after a checkpoint is taken back.
    #[test]
    fn kernel_bytes_are_measured_once_per_keys_worth_of_rows() {
        let mut bytes = KernelBytes::default();
        let mut passes = 0;
        let mut measure = |size: usize| {
            passes += 1;
            size
        };
        assert_eq!(bytes.of(2, 0, || measure(100)), 100);
        bytes.computed(10);
        assert_eq!(
            bytes.of(2, 1_000, || measure(500)),
            100 + 10 * 2 * KernelBytes::ROW_BYTES
        );
        bytes.computed(989);
        assert_eq!(
            bytes.of(2, 1_000, || measure(500)),
            100 + 999 * 2 * KernelBytes::ROW_BYTES
        );
        bytes.computed(1);
        assert_eq!(bytes.of(2, 1_000, || measure(700)), 700);
        assert_eq!(bytes.of(2, 1_000, || measure(900)), 700);
        bytes.stale();
        assert_eq!(bytes.of(2, 1_000, || measure(900)), 900);
        assert_eq!(passes, 3);
    }
}
