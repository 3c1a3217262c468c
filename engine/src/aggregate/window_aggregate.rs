//! [`WindowAggregateExec`]: GROUP BY over event-time windows, or over the whole stream, on a
//! stream of batches and watermarks.
//!
//! Its input is a [`StreamExchangeExec`] that routes each group's rows to one output
//! partition and forwards watermarks. Per batch, the operator computes every row's window
//! with the window kernel (hopping windows: one assignment per overlapping window), drops and
//! counts rows without an event time and rows whose window has already closed (its end plus
//! the allowed lateness is at or below the watermark), and folds the rest into per-window
//! state: interned keys and `GroupsAccumulator`s ([`WindowGroups`]), kept in a map ordered by
//! window start.
//!
//! - EMIT FINAL: when the watermark passes a window's end plus the allowed lateness, the
//!   window's groups are emitted whole, one row per group, and its state is dropped. At the
//!   end of bounded input every window is emitted.
//! - EMIT CHANGES per record: for each input row, one output row with its group's aggregates
//!   including that row ([`RunningAggregates`]); closed windows' state is dropped.
//! - EMIT CHANGES per batch: one row per group changed by a batch, with its current
//!   aggregates (any aggregate function; used when a per-record kernel is missing).
//!
//! The output has the schema of DataFusion's single-phase `AggregateExec` for the same
//! GROUP BY: the group columns in order (the window key holding the window start), then the
//! aggregates.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::compute::{cast, concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};

use super::assignment::{Assignment, assign_windows};
use super::groups::GroupTable;
use super::inputs::AggregateInputs;
use super::late::LateRecords;
use super::partial::PartialStates;
use super::running::RunningAggregates;
use super::session_changes::SessionChanges;
use super::sessions::SessionBuffer;
use crate::exchange::StreamExchangeExec;
use crate::message_loop::{MessageHandler, drive};
use crate::plan_util::{single_child, stateful_properties, visit_expressions};
use crate::take_rows::take_rows;
use crate::watermark::event_times;
use crate::window::WindowSpec;

/// A GROUP BY expression over the input and its output name.
pub type GroupExpr = (Arc<dyn PhysicalExpr>, String);

/// The window a GROUP BY is keyed by.
#[derive(Debug, Clone)]
pub struct WindowKey {
    /// Position of the window key among the GROUP BY expressions.
    pub position: usize,
    pub spec: WindowSpec,
    /// The event-time expression the window is computed from.
    pub time: Arc<dyn PhysicalExpr>,
}

/// When results leave the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateEmit {
    /// One row per group and window when the window closes (or at the end of input).
    Final,
    /// An upsert changelog row per input record.
    ChangesPerRecord,
    /// An upsert changelog row per group changed by an input batch.
    ChangesPerBatch,
}

/// What a streaming aggregation computes: DataFusion's lowered GROUP BY and aggregates, the
/// window, when it emits, and its output schema.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    /// GROUP BY expressions over the input, with their output names.
    pub group_by: Vec<GroupExpr>,
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    pub window: Option<WindowKey>,
    pub emit: AggregateEmit,
    /// How long after a window's end late records still update it, in event-time units.
    pub allowed_lateness: i64,
    /// The schema of DataFusion's single-phase aggregate for the same query.
    pub schema: SchemaRef,
}

/// See the module documentation.
#[derive(Debug)]
pub struct WindowAggregateExec {
    input: Arc<dyn ExecutionPlan>,
    spec: AggregateSpec,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    late_records: LateRecords,
}

impl WindowAggregateExec {
    /// The aggregation `spec` over `input` (a [`StreamExchangeExec`]).
    pub fn try_new(input: Arc<dyn ExecutionPlan>, mut spec: AggregateSpec) -> Result<Self> {
        if input.downcast_ref::<StreamExchangeExec>().is_none() {
            return internal_err!(
                "WindowAggregateExec reads a StreamExchangeExec, got {}",
                input.name()
            );
        }
        if spec.schema.fields().len() != spec.group_by.len() + spec.aggregates.len() {
            return internal_err!(
                "WindowAggregateExec: schema does not fit the GROUP BY and aggregates"
            );
        }
        if spec.emit == AggregateEmit::ChangesPerRecord
            && RunningAggregates::plan(&spec.aggregates, &spec.filters, &input.schema()).is_none()
        {
            spec.emit = AggregateEmit::ChangesPerBatch;
        }
        let deletions = spec.emit != AggregateEmit::Final
            && spec
                .window
                .as_ref()
                .is_some_and(|w| matches!(w.spec, WindowSpec::Session { .. }));
        if deletions {
            spec.schema = with_nullable_aggregates(&spec.schema, spec.aggregates.len());
        }
        let mut properties = stateful_properties(&input, &spec.schema);
        if spec.window.is_none() && spec.emit == AggregateEmit::Final {
            // A plain GROUP BY answers only at the end of its input.
            properties = properties.with_emission_type(EmissionType::Final);
        }
        // Two-phase: late records are found, and sent, by the partial step.
        let late_records = input
            .downcast_ref::<StreamExchangeExec>()
            .and_then(|e| e.partial_aggregate())
            .map_or_else(LateRecords::default, |p| p.late_records().clone());
        Ok(Self {
            input,
            spec,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            late_records,
        })
    }

    /// The side output of late records (the rows of the input that came after their
    /// windows closed).
    pub fn late_records(&self) -> &LateRecords {
        &self.late_records
    }

    /// The emit mode in effect (per-record changes fall back to per batch without kernels).
    pub fn emit(&self) -> AggregateEmit {
        self.spec.emit
    }

    /// Whether the changelog deletes rows (EMIT CHANGES on session windows: a merged
    /// session's old (keys, window start) with NULL aggregates).
    pub fn emits_deletions(&self) -> bool {
        self.spec.emit != AggregateEmit::Final
            && self
                .spec
                .window
                .as_ref()
                .is_some_and(|w| matches!(w.spec, WindowSpec::Session { .. }))
    }

    pub fn window(&self) -> Option<&WindowKey> {
        self.spec.window.as_ref()
    }

    fn exchange(&self) -> Result<&StreamExchangeExec> {
        match self.input.downcast_ref::<StreamExchangeExec>() {
            Some(exchange) => Ok(exchange),
            None => internal_err!("WindowAggregateExec lost its exchange input"),
        }
    }
}

impl DisplayAs for WindowAggregateExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<&str> = self
            .spec
            .group_by
            .iter()
            .map(|(_, name)| name.as_str())
            .collect();
        let aggregates: Vec<&str> = self.spec.aggregates.iter().map(|a| a.name()).collect();
        write!(f, "WindowAggregateExec: ")?;
        match &self.spec.window {
            Some(window) => write!(f, "window={:?}, ", window.spec)?,
            None => write!(f, "window=none, ")?,
        }
        let emit = match self.spec.emit {
            AggregateEmit::Final if self.spec.window.is_none() => "final (at the end of input)",
            AggregateEmit::Final => "final (when the window closes)",
            AggregateEmit::ChangesPerRecord => "changes (one row per input record)",
            // Per batch on sessions: always chosen (the planner refuses sessions without
            // per-record kernels).
            AggregateEmit::ChangesPerBatch if self.emits_deletions() => {
                "changes (one row per changed group per batch; a merged session an earlier batch emitted is deleted)"
            }
            AggregateEmit::ChangesPerBatch
                if RunningAggregates::plan(
                    &self.spec.aggregates,
                    &self.spec.filters,
                    &self.input.schema(),
                )
                .is_some() =>
            {
                "changes (one row per changed group per batch)"
            }
            AggregateEmit::ChangesPerBatch => {
                "changes (one row per changed group per batch; per-record changes need COUNT/SUM/AVG/MIN/MAX of Int64 or Float64)"
            }
        };
        write!(
            f,
            "emit={emit}, allowed_lateness={}, gby=[{}], aggr=[{}]",
            self.spec.allowed_lateness,
            keys.join(", "),
            aggregates.join(", ")
        )
    }
}

impl ExecutionPlan for WindowAggregateExec {
    fn name(&self) -> &str {
        "WindowAggregateExec"
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
        let expressions: Vec<Arc<dyn PhysicalExpr>> = self
            .spec
            .group_by
            .iter()
            .map(|(e, _)| Arc::clone(e))
            .chain(self.spec.aggregates.iter().flat_map(|a| a.expressions()))
            .chain(self.spec.filters.iter().flatten().cloned())
            .collect();
        visit_expressions(&expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let child = single_child("WindowAggregateExec", children)?;
        let mut exec = Self::try_new(child, self.spec.clone())?;
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
        let reservation = MemoryConsumer::new(format!("WindowAggregateExec[{partition}]"))
            .register(context.memory_pool());
        let messages = self.exchange()?.execute_messages(partition, context)?;
        let state = AggregateState::try_new(self, partition, reservation)?;
        let schema = Arc::clone(&self.spec.schema);
        let outputs = drive(messages, state);
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, outputs)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// `schema` with its last `aggregates` fields nullable: session changes delete merged
/// sessions with rows of NULL aggregates.
fn with_nullable_aggregates(schema: &SchemaRef, aggregates: usize) -> SchemaRef {
    let first = schema.fields().len().saturating_sub(aggregates);
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            f.as_ref()
                .clone()
                .with_nullable(f.is_nullable() || i >= first)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Counters of one output partition.
struct AggregateMetrics {
    baseline: BaselineMetrics,
    records_in: Count,
    late_dropped: Count,
    null_time_dropped: Count,
    windows_opened: Count,
    windows_emitted: Count,
    state_bytes: Gauge,
    groups: Gauge,
}

impl AggregateMetrics {
    fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let counter = |name: &'static str| MetricBuilder::new(metrics).counter(name, partition);
        let gauge = |name: &'static str| MetricBuilder::new(metrics).gauge(name, partition);
        Self {
            baseline: BaselineMetrics::new(metrics, partition),
            records_in: counter("records_in"),
            late_dropped: counter("late_records_dropped"),
            null_time_dropped: counter("null_event_time_dropped"),
            windows_opened: counter("windows_opened"),
            windows_emitted: counter("windows_emitted"),
            state_bytes: gauge("state_bytes"),
            groups: gauge("groups"),
        }
    }
}

/// The state of one output partition.
///
/// All open windows share one group table, keyed by the window start followed by the GROUP
/// BY keys: a batch is interned and folded in with one call whatever the number of windows
/// it touches. Groups are numbered in order of creation and windows are created in event-time
/// order, so the groups of the windows a watermark closes are a prefix of the table, emitted
/// with `EmitTo::First`. (A group that disordered input created ahead of an older window's
/// groups holds those back until its own window closes, by at most one window length.)
struct AggregateState {
    inputs: AggregateInputs,
    table: GroupTable,
    running: Option<RunningAggregates>,
    /// The window start of each group, by group id.
    group_windows: VecDeque<i64>,
    /// Windows opened that the metrics already count, for a windowed key table that counts
    /// them itself.
    windows_counted: usize,
    window: Option<WindowKey>,
    emit: AggregateEmit,
    allowed_lateness: i64,
    schema: SchemaRef,
    watermark: i64,
    late_records: LateRecords,
    metrics: AggregateMetrics,
    /// The state's bytes, accounted in the session's memory pool.
    reservation: MemoryReservation,
    /// Session windows with EMIT FINAL: the rows of open sessions.
    sessions: Option<SessionBuffer>,
    /// Session windows with EMIT CHANGES: the open sessions and their running aggregates.
    session_changes: Option<SessionChanges>,
    /// Two-phase aggregation: the input is partial states of this many key columns and of
    /// aggregates with these numbers of state columns.
    merge: Option<(usize, Vec<usize>)>,
    /// Whether the end of input has come (the watermark reached +inf).
    end_reached: bool,
}

impl AggregateState {
    fn try_new(
        exec: &WindowAggregateExec,
        partition: usize,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        let input_schema = exec.input.schema();
        let window_position = exec.spec.window.as_ref().map(|w| w.position);
        let keys: Vec<(usize, &GroupExpr)> = exec
            .spec
            .group_by
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != window_position)
            .collect();
        // The table's keys: the window start (as the output's window column), then the keys.
        let table_fields = window_position
            .iter()
            .chain(keys.iter().map(|(i, _)| i))
            .map(|i| exec.spec.schema.field(*i).clone())
            .collect::<Vec<Field>>();
        let session_window = exec.spec.window.as_ref().and_then(|w| match w.spec {
            WindowSpec::Session { gap } => Some(gap),
            _ => None,
        });
        // Sessions' changes, per record or per batch, come from the running kernels.
        let running = match exec.spec.emit {
            AggregateEmit::ChangesPerRecord => {
                RunningAggregates::plan(&exec.spec.aggregates, &exec.spec.filters, &input_schema)
            }
            AggregateEmit::ChangesPerBatch if session_window.is_some() => {
                RunningAggregates::plan(&exec.spec.aggregates, &exec.spec.filters, &input_schema)
            }
            _ => None,
        };
        let (running, session_changes) = match (session_window, running) {
            (Some(gap), Some(running)) => {
                let key_schema = Arc::new(Schema::new(table_fields[1..].to_vec()));
                (
                    None,
                    Some(SessionChanges::try_new(
                        &key_schema,
                        running,
                        gap,
                        exec.spec.emit == AggregateEmit::ChangesPerBatch,
                    )?),
                )
            }
            (Some(_), None) if exec.spec.emit != AggregateEmit::Final => {
                return internal_err!(
                    "EMIT CHANGES on session windows needs per-record kernels for every aggregate"
                );
            }
            (_, running) => (running, None),
        };
        Ok(Self {
            inputs: AggregateInputs::new(
                keys.iter().map(|(_, (e, _))| Arc::clone(e)).collect(),
                &exec.spec.aggregates,
                &exec.spec.filters,
            ),
            table: match exec.spec.window.as_ref().map(|w| w.spec) {
                Some(WindowSpec::Tumble { .. } | WindowSpec::Hop { .. }) => {
                    GroupTable::try_new_windowed(
                        &Arc::new(Schema::new(table_fields)),
                        &exec.spec.aggregates,
                    )?
                }
                _ => GroupTable::try_new(
                    &Arc::new(Schema::new(table_fields)),
                    &exec.spec.aggregates,
                )?,
            },
            running,
            group_windows: VecDeque::new(),
            windows_counted: 0,
            window: exec.spec.window.clone(),
            emit: exec.spec.emit,
            allowed_lateness: exec.spec.allowed_lateness,
            schema: Arc::clone(&exec.spec.schema),
            watermark: i64::MIN,
            late_records: exec.late_records.clone(),
            metrics: AggregateMetrics::new(&exec.metrics, partition),
            reservation,
            sessions: match (session_window, &session_changes) {
                (Some(_), None) => Some(SessionBuffer::new(input_schema)),
                _ => None,
            },
            session_changes,
            merge: exec
                .exchange()?
                .partial_aggregate()
                .map(|p| (p.key_count(), p.state_widths().to_vec())),
            end_reached: false,
        })
    }

    /// Windows starting at or before this are closed: their end plus the allowed lateness
    /// is at or below the watermark (none without a window).
    fn closed_through(&self) -> i64 {
        let length = match self.window.as_ref().map(|w| w.spec) {
            Some(WindowSpec::Tumble { size, .. } | WindowSpec::Hop { size, .. }) => size,
            Some(WindowSpec::Session { gap }) => gap,
            None => return i64::MIN,
        };
        length
            .saturating_add(self.allowed_lateness)
            .saturating_neg()
            .saturating_add(self.watermark)
    }

    /// The windows of `batch`'s rows (one assignment per overlapping window of a hop);
    /// counts, and sends to the side output, rows with no event time or only closed windows.
    fn assign(&self, batch: &RecordBatch) -> Result<Vec<Assignment>> {
        let Some(window) = &self.window else {
            return Ok(vec![Assignment::whole_batch()]);
        };
        let assigned = assign_windows(window, self.closed_through(), batch)?;
        self.metrics.null_time_dropped.add(assigned.null_times);
        self.metrics.late_dropped.add(assigned.late_count);
        if let Some(late) = &assigned.late
            && self.late_records.wanted()
        {
            self.late_records.send(batch, late)?;
        }
        Ok(assigned.assignments)
    }

    fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        if let Some((key_count, state_widths)) = &self.merge {
            let states = PartialStates::split(batch, *key_count, state_widths)?;
            self.merge_states(states)?;
            self.report_state()?;
            return Ok(None);
        }
        self.metrics.records_in.add(batch.num_rows());
        if self.sessions.is_some() {
            if let Some(rows) = self.open_session_rows(batch)?
                && let Some(sessions) = &mut self.sessions
            {
                sessions.push(rows);
            }
            self.report_state()?;
            return Ok(None);
        }
        if self.session_changes.is_some() {
            let output = self.session_changelog(batch)?;
            self.report_state()?;
            return self.combine(output.into_iter().collect());
        }
        let mut assignments = self.assign(batch)?;
        if self.emit == AggregateEmit::ChangesPerRecord {
            assignments = vec![Assignment::in_record_order(assignments, batch.num_rows())?];
        }
        let columns = self.inputs.evaluate(batch)?;
        let mut outputs = Vec::new();
        for assignment in assignments {
            let rows = assignment.len(batch.num_rows());
            if rows == 0 {
                continue;
            }
            let window_column = match &assignment.starts {
                Some(starts) => Some(self.window_column(starts)?),
                None => None,
            };
            let (keys, arguments, filters) = columns.pick(&assignment)?;
            let mut table_keys: Vec<ArrayRef> = window_column.iter().cloned().collect();
            table_keys.extend(keys);
            if let Some(output) = self.update(
                assignment.starts.as_ref(),
                table_keys,
                &arguments,
                &filters,
                rows,
            )? {
                outputs.push(output);
            }
        }
        self.report_state()?;
        self.combine(outputs)
    }

    /// Window starts as the output's window column type.
    fn window_column(&self, starts: &Int64Array) -> Result<ArrayRef> {
        let position = self.window.as_ref().map_or(0, |w| w.position);
        Ok(cast(starts, self.schema.field(position).data_type())?)
    }

    /// Folds one assignment's rows into the table; returns the changelog rows, if any.
    fn update(
        &mut self,
        starts: Option<&Int64Array>,
        table_keys: Vec<ArrayRef>,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        rows: usize,
    ) -> Result<Option<RecordBatch>> {
        let output = match (self.emit, &mut self.running) {
            (AggregateEmit::ChangesPerRecord, Some(running)) => {
                self.table.intern(&table_keys, rows)?;
                let groups = self.table.len();
                let values = running.update(self.table.last_group_ids(rows), groups, arguments)?;
                Some(self.output_batch(table_keys, values, rows)?)
            }
            (AggregateEmit::ChangesPerBatch, _) => {
                self.table.update(&table_keys, arguments, filters, rows)?;
                let (last_rows, values) = self.table.snapshot_changed(rows)?;
                let changed_keys = table_keys
                    .iter()
                    .map(|k| take_rows(k.as_ref(), &last_rows))
                    .collect::<Result<Vec<_>>>()?;
                let changed = last_rows.len();
                Some(self.output_batch(changed_keys, values, changed)?)
            }
            _ => {
                self.table.update(&table_keys, arguments, filters, rows)?;
                None
            }
        };
        if let Some(starts) = starts {
            self.track_new_groups(starts, rows)?;
        }
        Ok(output)
    }

    /// Two-phase aggregation: merges a batch of partial states into the table.
    fn merge_states(&mut self, states: PartialStates) -> Result<()> {
        if self.window.is_none() {
            // Without a window, every state is of the one endless window.
            self.metrics
                .records_in
                .add(states.records.values().iter().sum::<u64>() as usize);
            let rows = states.starts.len();
            return self.table.merge(&states.keys, &states.states, rows);
        }
        let closed_through = self.closed_through();
        let open: BooleanArray = states
            .starts
            .iter()
            .map(|s| Some(s.is_some_and(|s| s > closed_through)))
            .collect();
        let records: u64 = states.records.values().iter().sum();
        // The partial step judged lateness at this operator's watermark, so no state of a
        // closed window should come; if one does, its records are dropped and counted.
        let states = if open.true_count() == open.len() {
            states
        } else {
            let closed = open.len() - open.true_count();
            let late: u64 = states
                .records
                .iter()
                .zip(open.iter())
                .filter(|(_, open)| *open == Some(false))
                .map(|(n, _)| n.unwrap_or(0))
                .sum();
            self.metrics.late_dropped.add(late as usize);
            if closed == open.len() {
                return Ok(());
            }
            states.filter(&open)?
        };
        self.metrics.records_in.add(records as usize);
        let rows = states.starts.len();
        let mut table_keys = vec![self.window_column(&states.starts)?];
        table_keys.extend(states.keys);
        self.table.merge(&table_keys, &states.states, rows)?;
        self.track_new_groups(&states.starts, rows)
    }

    /// After an update or merge of `rows` rows with window `starts`: counts windows opening
    /// and records the window of each group it created (unless the table knows them).
    fn track_new_groups(&mut self, starts: &Int64Array, rows: usize) -> Result<()> {
        if let Some(opened) = self.table.windows_opened() {
            // A windowed key table knows its groups' windows and counts their opening.
            self.metrics
                .windows_opened
                .add(opened.saturating_sub(self.windows_counted));
            self.windows_counted = opened;
            return Ok(());
        }
        // The groups this update created are the ids from the old table length on (not
        // necessarily numbered in order of appearance).
        let known = self.group_windows.len();
        let created = self.table.len().saturating_sub(known);
        if created == 0 {
            return Ok(());
        }
        // Each new group takes its first row's window (the table's only key is the window:
        // keyed windows take the windowed key table above), so each is a window opening.
        let mut window_of_new = vec![None; created];
        let ids = self.table.last_group_ids(rows);
        for (id, start) in ids.iter().zip(starts.values().iter()) {
            if let Some(slot @ None) = id.checked_sub(known).and_then(|i| window_of_new.get_mut(i))
            {
                *slot = Some(*start);
            }
        }
        let Some(windows) = window_of_new.into_iter().collect::<Option<Vec<i64>>>() else {
            return internal_err!("a new group without a row");
        };
        self.metrics.windows_opened.add(created);
        self.group_windows.extend(windows);
        Ok(())
    }

    /// Moves the watermark; emits (EMIT FINAL) or forgets the groups of the windows it closes.
    fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.watermark = self.watermark.max(watermark);
        if self.sessions.is_some() {
            return self.close_sessions();
        }
        if let (Some(changes), Some(window)) = (&mut self.session_changes, &self.window) {
            let (watermark, length) = (
                self.watermark,
                window.spec.size().saturating_add(self.allowed_lateness),
            );
            changes
                .close(|last| watermark == i64::MAX || last.saturating_add(length) <= watermark)?;
            self.report_state()?;
            return Ok(None);
        }
        let end_of_input = self.watermark == i64::MAX && !self.end_reached;
        if end_of_input && self.window.is_none() && self.emit == AggregateEmit::Final {
            self.end_reached = true;
            if self.inputs.keys.is_empty() && self.table.is_empty() {
                // A GROUP BY without keys gives one row even over no input.
                let values = self.table.empty_group_values()?;
                let output = self.output_batch(Vec::new(), values, 1)?;
                return self.combine(vec![output]);
            }
        }
        let (closing, closed_windows) = self.closing_groups();
        if closing == 0 {
            return Ok(None);
        }
        let emit_to = if closing >= self.table.len() {
            EmitTo::All
        } else {
            EmitTo::First(closing)
        };
        self.metrics.windows_emitted.add(closed_windows);
        let output = match (&mut self.running, self.emit) {
            (Some(running), _) => {
                // The per-record changelog already holds these groups' rows.
                running.drop_first(closing);
                self.table.discard(emit_to)?;
                Vec::new()
            }
            (None, AggregateEmit::Final) => {
                let (keys, values) = self.table.emit(emit_to)?;
                vec![self.output_batch(keys, values, closing)?]
            }
            (None, _) => {
                // Per-batch changes emitted these groups' rows already; their state leaves.
                self.table.emit(emit_to)?;
                Vec::new()
            }
        };
        self.report_state()?;
        self.combine(output)
    }

    /// How many leading groups the watermark closes, and how many windows they span; the
    /// closing groups' windows are forgotten from `group_windows`.
    fn closing_groups(&mut self) -> (usize, usize) {
        let watermark = self.watermark;
        if self.window.is_none() {
            let all = if watermark == i64::MAX {
                self.table.len()
            } else {
                0
            };
            return (all, 0);
        }
        let closed_through = if watermark == i64::MAX {
            i64::MAX
        } else {
            self.closed_through()
        };
        if let Some(prefix) = self.table.closed_prefix(closed_through) {
            return prefix;
        }
        let closing = self
            .group_windows
            .iter()
            .take_while(|start| **start <= closed_through)
            .count();
        let mut closed_windows: Vec<i64> = self.group_windows.drain(..closing).collect();
        closed_windows.dedup();
        (closing, closed_windows.len())
    }

    /// The rows of `batch` that can still join an open session; drops and counts rows
    /// without an event time and rows whose session would already have closed.
    fn open_session_rows(&self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let Some(window) = &self.window else {
            return Ok(None);
        };
        let time = window.time.evaluate(batch)?.into_array(batch.num_rows())?;
        let times = event_times(&time)?;
        let times = times.as_primitive::<Int64Type>();
        let length = window.spec.size().saturating_add(self.allowed_lateness);
        let watermark = self.watermark;
        let keep: BooleanArray = times
            .iter()
            .map(|t| Some(t.is_some_and(|t| t.saturating_add(length) > watermark)))
            .collect();
        let late: BooleanArray = times
            .iter()
            .map(|t| Some(t.is_some_and(|t| t.saturating_add(length) <= watermark)))
            .collect();
        let late_rows = late.true_count();
        self.metrics.null_time_dropped.add(times.null_count());
        self.metrics.late_dropped.add(late_rows);
        if late_rows > 0 {
            self.late_records.send(batch, &late)?;
        }
        Ok(Some(filter_record_batch(batch, &keep)?))
    }

    /// EMIT CHANGES on session windows: the changelog rows of `batch` (see
    /// [`SessionChanges`]).
    fn session_changelog(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let (Some(rows), Some(window)) = (self.open_session_rows(batch)?, &self.window) else {
            return Ok(None);
        };
        if rows.num_rows() == 0 {
            return Ok(None);
        }
        let times = event_times(&window.time.evaluate(&rows)?.into_array(rows.num_rows())?)?;
        let times = times.as_primitive::<Int64Type>().clone();
        let columns = self.inputs.evaluate(&rows)?;
        let Some(changes) = &mut self.session_changes else {
            return Ok(None);
        };
        let changelog = changes.update(&columns.keys, &times, &columns.arguments)?;
        let mut table_keys = vec![self.window_column(&changelog.starts)?];
        for key in &columns.keys {
            table_keys.push(take_rows(key.as_ref(), &changelog.key_rows)?);
        }
        let count = changelog.key_rows.len();
        Ok(Some(self.output_batch(
            table_keys,
            changelog.values,
            count,
        )?))
    }

    /// Aggregates and emits the sessions the watermark has closed.
    fn close_sessions(&mut self) -> Result<Option<RecordBatch>> {
        let (Some(window), Some(sessions)) = (&self.window, &mut self.sessions) else {
            return Ok(None);
        };
        let gap = window.spec.size();
        let (watermark, lateness) = (self.watermark, self.allowed_lateness);
        let closed = sessions.take_closed(&window.time, &self.inputs.keys, gap, |last| {
            watermark == i64::MAX || last.saturating_add(gap).saturating_add(lateness) <= watermark
        })?;
        let Some(closed) = closed else {
            self.report_state()?;
            return Ok(None);
        };
        let rows = closed.rows.num_rows();
        let columns = self.inputs.evaluate(&closed.rows)?;
        let (keys, arguments, filters) = columns.pick(&Assignment::whole_batch())?;
        let mut table_keys = vec![self.window_column(&closed.starts)?];
        table_keys.extend(keys);
        self.table.update(&table_keys, &arguments, &filters, rows)?;
        let groups = self.table.len();
        let (keys, values) = self.table.emit(EmitTo::All)?;
        self.metrics.windows_emitted.add(groups);
        self.metrics.windows_opened.add(groups);
        let output = self.output_batch(keys, values, groups)?;
        self.report_state()?;
        self.combine(vec![output])
    }

    /// A batch of the output schema from the table's key columns (the window start first,
    /// if windowed) and the aggregate `values`.
    fn output_batch(
        &self,
        table_keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        rows: usize,
    ) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        let mut keys = table_keys.into_iter();
        let window_column = match &self.window {
            Some(_) => keys.next(),
            None => None,
        };
        let mut window_column = window_column;
        let groups = self.schema.fields().len() - values.len();
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
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &options,
        )?)
    }

    fn combine(&self, outputs: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
        let batch = match outputs.len() {
            0 => return Ok(None),
            1 => outputs.into_iter().next(),
            _ => Some(concat_batches(&self.schema, &outputs)?),
        };
        if let Some(batch) = &batch {
            self.metrics.baseline.record_output(batch.num_rows());
        }
        Ok(batch)
    }

    /// Publishes the state's size and accounts it in the memory pool: past the pool's limit
    /// this fails, naming the operator and partition.
    fn report_state(&mut self) -> Result<()> {
        let bytes = self.table.size()
            + self.sessions.as_ref().map_or(0, |s| s.size())
            + self.session_changes.as_ref().map_or(0, |s| s.size())
            + self.running.as_ref().map_or(0, |r| r.size())
            + self.group_windows.capacity() * std::mem::size_of::<i64>();
        self.metrics.state_bytes.set(bytes);
        self.metrics.groups.set(self.table.len());
        self.reservation.try_resize(bytes)
    }
}

impl MessageHandler for AggregateState {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.process(batch)
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.advance(watermark)
    }
}
