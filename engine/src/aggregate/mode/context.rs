//! [`ModeContext`]: what every mode of the aggregation shares — the output schema, the
//! window, the watermark, the counters, the memory reservation — and the building of output
//! rows from a group table's keys and aggregate values.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::compute::{cast, concat_batches, filter, filter_record_batch};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{Result, internal_err};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, Gauge};

use crate::aggregate::partial::PartialAggregate;
use crate::aggregate::spec::{AggregateSpec, WindowKey};
use crate::changelog::{ChangeOp, op_array, op_column};
use crate::checkpoint::OperatorState;
use crate::late_records::LateRecords;
use crate::operator_metrics::{StatefulMetrics, counter, gauge};
use crate::watermark::event_times;

/// What one output partition is built from.
pub(crate) struct ModeInputs<'a> {
    pub spec: &'a AggregateSpec,
    pub input_schema: datafusion::arrow::datatypes::SchemaRef,
    /// Two-phase aggregation: the partial step whose states the input holds.
    pub partial: Option<&'a Arc<PartialAggregate>>,
    pub late_records: LateRecords,
    pub metrics: &'a ExecutionPlanMetricsSet,
    pub partition: usize,
    pub reservation: MemoryReservation,
}

/// Counters of one output partition.
pub(crate) struct AggregateMetrics {
    pub stateful: StatefulMetrics,
    pub windows_opened: Count,
    pub windows_emitted: Count,
    groups: Gauge,
}

impl AggregateMetrics {
    fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            stateful: StatefulMetrics::new(metrics, partition),
            windows_opened: counter(metrics, "windows_opened", partition),
            windows_emitted: counter(metrics, "windows_emitted", partition),
            groups: gauge(metrics, "groups", partition),
        }
    }
}

/// See the module documentation.
pub(crate) struct ModeContext {
    pub schema: SchemaRef,
    pub window: Option<WindowKey>,
    pub allowed_lateness: i64,
    /// The highest watermark seen (`i64::MAX`: the input has ended).
    pub watermark: i64,
    pub late_records: LateRecords,
    pub metrics: AggregateMetrics,
    /// The state's bytes, accounted in the session's memory pool.
    reservation: MemoryReservation,
}

impl ModeContext {
    pub fn new(inputs: ModeInputs<'_>) -> Self {
        Self {
            schema: Arc::clone(&inputs.spec.schema),
            window: inputs.spec.window.clone(),
            allowed_lateness: inputs.spec.allowed_lateness,
            watermark: i64::MIN,
            late_records: inputs.late_records,
            metrics: AggregateMetrics::new(inputs.metrics, inputs.partition),
            reservation: inputs.reservation,
        }
    }

    /// Counts `records` input records.
    pub fn count_records(&self, records: usize) {
        self.metrics.stateful.records_in.add(records);
    }

    /// Puts the watermark and the records dropped into a checkpoint's `state`.
    pub fn snapshot_into(&self, state: &mut OperatorState) {
        state.put_value("watermark", self.watermark);
        self.metrics.stateful.snapshot_into(state);
    }

    /// Takes back what [`Self::snapshot_into`] kept.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<()> {
        self.raise_watermark(state.value("watermark")?);
        self.metrics.stateful.restore_from(state)
    }

    /// Moves the watermark up to `watermark` (it never moves back).
    pub fn raise_watermark(&mut self, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }

    /// Windows starting at or before this are closed at the current watermark (none without
    /// a window; every one at the end of input).
    pub fn closed_through(&self) -> i64 {
        match &self.window {
            Some(window) => window.closed_through(self.allowed_lateness, self.watermark),
            None => i64::MIN,
        }
    }

    /// For session windows: whether a session whose last event time is given has closed at
    /// the current watermark — the watermark has passed that time plus the gap (and the
    /// allowed lateness), or the input has ended. `None` without a window.
    pub fn session_closed(&self) -> Option<impl Fn(i64) -> bool + use<>> {
        let window = self.window.as_ref()?;
        let length = window.spec.size().saturating_add(self.allowed_lateness);
        let watermark = self.watermark;
        Some(move |last: i64| watermark == i64::MAX || last.saturating_add(length) <= watermark)
    }

    /// Window starts as the output's window column type.
    pub fn window_column(&self, starts: &Int64Array) -> Result<ArrayRef> {
        let position = self.window.as_ref().map_or(0, |w| w.position);
        Ok(cast(starts, self.schema.field(position).data_type())?)
    }

    /// A batch of the output schema from a group table's key columns (the window start
    /// first, if windowed) and the aggregate `values` (EMIT FINAL).
    pub fn output_batch(
        &self,
        table_keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        rows: usize,
    ) -> Result<RecordBatch> {
        self.build_batch(table_keys, values, None, rows)
    }

    /// A changelog batch: [`Self::output_batch`]'s columns and each row's operation.
    pub fn changelog_batch(
        &self,
        table_keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        ops: &[ChangeOp],
    ) -> Result<RecordBatch> {
        self.build_batch(
            table_keys,
            values,
            Some(op_array(ops.iter().copied())),
            ops.len(),
        )
    }

    fn build_batch(
        &self,
        table_keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        ops: Option<ArrayRef>,
        rows: usize,
    ) -> Result<RecordBatch> {
        // Before the plan above reads the changelog's op column, the schema has none.
        let ops = match (ops, op_column(&self.schema)) {
            (ops, Some(_)) if ops.is_none() => {
                return internal_err!("a changelog row without its operation");
            }
            (ops, Some(_)) => ops,
            (_, None) => None,
        };
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        let mut keys = table_keys.into_iter();
        let mut window_column = match &self.window {
            Some(_) => keys.next(),
            None => None,
        };
        let groups = self.schema.fields().len() - values.len() - usize::from(ops.is_some());
        for position in 0..groups {
            let column = if self.window.as_ref().map(|w| w.position) == Some(position) {
                window_column.take()
            } else {
                keys.next()
            };
            match column {
                Some(column) => columns.push(column),
                None => return internal_err!("missing group column {position}"),
            }
        }
        for (value, field) in values
            .into_iter()
            .zip(self.schema.fields().iter().skip(groups))
        {
            columns.push(if value.data_type() == field.data_type() {
                value
            } else {
                cast(&value, field.data_type())?
            });
        }
        columns.extend(ops);
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &options,
        )?)
    }

    /// The outputs as one batch (none if there are none), counted as the operator's output.
    pub fn combine(&self, outputs: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
        let batch = match outputs.len() {
            0 => return Ok(None),
            1 => outputs.into_iter().next(),
            _ => Some(concat_batches(&self.schema, &outputs)?),
        };
        if let Some(batch) = &batch {
            self.metrics
                .stateful
                .baseline
                .record_output(batch.num_rows());
        }
        Ok(batch)
    }

    /// Publishes the state's size and group count and accounts the size in the memory
    /// pool: past the pool's limit this fails, naming the operator and partition.
    pub fn account(&mut self, bytes: usize, groups: usize) -> Result<()> {
        self.metrics.stateful.state_bytes.set(bytes);
        self.metrics.groups.set(groups);
        self.reservation.try_resize(bytes)
    }

    /// The rows of `batch` that can still join an open session, and their event times;
    /// drops and counts rows without an event time and rows whose session would already have
    /// closed, and sends the latter to the side output.
    pub fn open_session_rows(
        &self,
        batch: &RecordBatch,
    ) -> Result<Option<(RecordBatch, Int64Array)>> {
        let (Some(window), Some(closed)) = (&self.window, self.session_closed()) else {
            return Ok(None);
        };
        let time = window.time.evaluate(batch)?.into_array(batch.num_rows())?;
        let times = event_times(&time)?;
        let times = times.as_primitive::<Int64Type>();
        // A row whose session would already have closed is late.
        if times.null_count() == 0 && !times.values().iter().any(|&t| closed(t)) {
            return Ok(Some((batch.clone(), times.clone())));
        }
        let keep: BooleanArray = times
            .iter()
            .map(|t| Some(t.is_some_and(|t| !closed(t))))
            .collect();
        let late: BooleanArray = times.iter().map(|t| Some(t.is_some_and(&closed))).collect();
        let late_rows = late.true_count();
        self.metrics
            .stateful
            .null_time_dropped
            .add(times.null_count());
        self.metrics.stateful.late_dropped.add(late_rows);
        if late_rows > 0 {
            self.late_records.send(batch, &late)?;
        }
        let kept = filter(times, &keep)?;
        Ok(Some((
            filter_record_batch(batch, &keep)?,
            kept.as_primitive::<Int64Type>().clone(),
        )))
    }
}
