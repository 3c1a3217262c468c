//! [`WindowAggregateExec`]: GROUP BY over event-time windows, or over the whole stream, on a
//! stream of batches and watermarks.
//!
//! Its input is a [`StreamExchangeExec`] that routes each group's rows to one output
//! partition and forwards watermarks. Each output partition runs one mode of aggregation,
//! chosen from the window and the emit mode (see [`super::mode`]): windows and whole-stream
//! groups, session rows, session changelog, or the merge of partial states in two-phase
//! aggregation. Every mode drops and counts rows without an event time and rows whose window
//! has closed (its end plus the allowed lateness at or below the watermark), and sends the
//! latter to the late-record side output.
//!
//! - EMIT FINAL: when the watermark passes a window's end plus the allowed lateness, the
//!   window's groups are emitted whole, one row per group, and its state is dropped. At the
//!   end of bounded input every window is emitted.
//! - EMIT CHANGES per record: for each input row, one output row with its group's aggregates
//!   including that row; closed windows' state is dropped.
//! - EMIT CHANGES per batch: one row per group changed by a batch, with its current
//!   aggregates (any aggregate function; used when a per-record kernel is missing).
//!
//! The output has the schema of DataFusion's single-phase `AggregateExec` for the same
//! GROUP BY: the group columns in order (the window key holding the window start), then the
//! aggregates; under EMIT CHANGES then the changelog's `op` column (see
//! [`crate::changelog`]).
//!
//! Under EMIT FINAL over tumbling or hopping windows the output has an event time of its
//! own, the window start: windows close in event-time order, so once the watermark `w`
//! closed every window starting at or before `w - size - allowed_lateness`, no later row
//! starts there. Each output partition records that point as its [`PartitionProgress`] (and
//! passes on an empty batch when only it moved), so an exchange above computes watermarks
//! on the window start — a join of two windowed aggregations, or a window over one — even
//! while no window closes.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};

use super::mode::{AggregateMode, ModeInputs};
use super::partial::PartialAggregate;
use super::spec::{AggregateEmit, AggregateSpec, GroupExpr, WindowKey};
use crate::changelog::op_column;
use crate::checkpoint::{OperatorState, PassedBarriers};
use crate::exchange::{InputStep, StreamExchangeExec};
use crate::late_records::LateRecords;
use crate::message_loop::{MessageHandler, OperatorCheckpoint, drive_checkpointed};
use crate::operator_metrics::StatefulMetrics;
use crate::plan_util::{single_child, stateful_properties, visit_expressions};
use crate::progress::PartitionProgress;
use crate::window::duration_text;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::StreamExt;

/// See the module documentation.
#[derive(Debug)]
pub struct WindowAggregateExec {
    /// The exchange below, as a plan (the same node as `exchange`).
    input: Arc<dyn ExecutionPlan>,
    exchange: Arc<StreamExchangeExec>,
    spec: AggregateSpec,
    /// Two-phase aggregation: the partial step the exchange runs on each input partition,
    /// whose states this operator merges.
    partial: Option<Arc<PartialAggregate>>,
    /// Whether every aggregate has a per-record kernel (else per-record changes fall back
    /// to per batch).
    running_kernels: bool,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    late_records: LateRecords,
    /// Under EMIT FINAL over tumbling or hopping windows: per output partition, the
    /// smallest window start it may still emit.
    progress: Option<Arc<PartitionProgress>>,
    /// The checkpoint barriers each output partition has passed.
    passed: Arc<PassedBarriers>,
}

impl WindowAggregateExec {
    /// The aggregation `spec` over the rows of `exchange`.
    pub fn try_new(exchange: Arc<StreamExchangeExec>, spec: AggregateSpec) -> Result<Self> {
        Self::try_new_with(exchange, spec, None)
    }

    /// The final step of two-phase aggregation: `spec` over the states of `partial`, the
    /// step `exchange` runs on each input partition (see [`Self::two_phase`]).
    fn try_new_with(
        exchange: Arc<StreamExchangeExec>,
        mut spec: AggregateSpec,
        partial: Option<Arc<PartialAggregate>>,
    ) -> Result<Self> {
        let columns = spec.schema.fields().len() - usize::from(op_column(&spec.schema).is_some());
        if columns != spec.group_by.len() + spec.aggregates.len() {
            return internal_err!(
                "WindowAggregateExec: schema does not fit the GROUP BY and aggregates"
            );
        }
        let runs_partial = |step: &Arc<dyn InputStep>| {
            partial
                .as_ref()
                .is_some_and(|partial| std::ptr::addr_eq(Arc::as_ptr(step), Arc::as_ptr(partial)))
        };
        if partial.is_some() != exchange.input_step().is_some_and(runs_partial) {
            return internal_err!(
                "WindowAggregateExec: the exchange must run exactly the partial step whose states it merges"
            );
        }
        let input: Arc<dyn ExecutionPlan> = Arc::clone(&exchange) as _;
        let running_kernels = spec.running_kernels(&input.schema()).is_some();
        if spec.emit == AggregateEmit::ChangesPerRecord && !running_kernels {
            spec.emit = AggregateEmit::ChangesPerBatch;
        }
        spec.complete_schema();
        let mut properties = stateful_properties(&input, &spec.schema);
        if spec.window.is_none() && spec.emit == AggregateEmit::Final {
            // A plain GROUP BY answers only at the end of its input.
            properties = properties.with_emission_type(EmissionType::Final);
        }
        // Two-phase: late records are found, and sent, by the partial step.
        let late_records = partial
            .as_ref()
            .map_or_else(LateRecords::default, |p| p.late_records().clone());
        let progress = (spec.emit == AggregateEmit::Final
            && spec.window.as_ref().is_some_and(|w| !w.is_session()))
        .then(|| {
            let partitions = properties.output_partitioning().partition_count();
            Arc::new(PartitionProgress::new(partitions))
        });
        Ok(Self {
            input,
            exchange,
            spec,
            partial,
            running_kernels,
            passed: Arc::new(PassedBarriers::new(
                properties.output_partitioning().partition_count(),
            )),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            late_records,
            progress,
        })
    }

    /// Two-phase aggregation of `spec`: `exchange` (built without a step) runs `partial` on
    /// each input partition and routes its states, which this operator merges.
    pub fn two_phase(
        exchange: StreamExchangeExec,
        spec: AggregateSpec,
        partial: Arc<PartialAggregate>,
    ) -> Result<Self> {
        let exchange = exchange.with_input_step(Arc::clone(&partial) as Arc<dyn InputStep>);
        Self::try_new_with(Arc::new(exchange), spec, Some(partial))
    }

    /// The side output of late records (the rows of the input that came after their
    /// windows closed).
    pub fn late_records(&self) -> &LateRecords {
        &self.late_records
    }

    /// The schema of the late records: the input rows' (below the exchange, which routes
    /// partial states in two phases).
    pub fn late_records_schema(&self) -> SchemaRef {
        match self.partial {
            Some(_) => self.exchange.input().schema(),
            None => self.input.schema(),
        }
    }

    /// The emit mode in effect (per-record changes fall back to per batch without kernels).
    pub fn emit(&self) -> AggregateEmit {
        self.spec.emit
    }

    /// Whether the changelog deletes rows (EMIT CHANGES on session windows: a merged
    /// session's old (keys, window start) with NULL aggregates).
    pub fn emits_deletions(&self) -> bool {
        self.spec.emits_deletions()
    }

    pub fn window(&self) -> Option<&WindowKey> {
        self.spec.window.as_ref()
    }

    /// The exchange this operator reads.
    pub fn exchange(&self) -> &Arc<StreamExchangeExec> {
        &self.exchange
    }

    /// The GROUP BY expressions over the input: output column `i` holds the value of the
    /// `i`-th.
    pub fn group_by(&self) -> &[GroupExpr] {
        &self.spec.group_by
    }

    /// This changelog aggregation with its `op` column in its output (see
    /// [`AggregateSpec::changelog_op`]); `None` for EMIT FINAL, or when it has one already.
    pub fn with_op_column(&self) -> Result<Option<Self>> {
        if self.spec.emit == AggregateEmit::Final || self.spec.changelog_op {
            return Ok(None);
        }
        let mut spec = self.spec.clone();
        spec.changelog_op = true;
        let mut exec = Self::try_new_with(Arc::clone(&self.exchange), spec, self.partial.clone())?;
        exec.late_records = self.late_records.clone();
        Ok(Some(exec))
    }

    /// This changelog aggregation emitting a row per group changed by an input batch rather
    /// than per input record; `None` if it does so already or emits final rows.
    pub fn with_changes_per_batch(&self) -> Result<Option<Self>> {
        if self.spec.emit != AggregateEmit::ChangesPerRecord {
            return Ok(None);
        }
        let mut spec = self.spec.clone();
        spec.emit = AggregateEmit::ChangesPerBatch;
        let mut exec = Self::try_new_with(Arc::clone(&self.exchange), spec, self.partial.clone())?;
        exec.late_records = self.late_records.clone();
        Ok(Some(exec))
    }

    /// This changelog aggregation with `predicate` (over its output) as its HAVING, applied
    /// by group (see [`crate::changelog::GroupHaving`]); `None` where it cannot take one:
    /// EMIT FINAL, or session windows, whose changelog moves rows between sessions.
    pub fn with_having(&self, predicate: Arc<dyn PhysicalExpr>) -> Result<Option<Self>> {
        let sessions = self.spec.window.as_ref().is_some_and(WindowKey::is_session);
        if self.spec.emit == AggregateEmit::Final || sessions || self.spec.having.is_some() {
            return Ok(None);
        }
        let mut spec = self.spec.clone();
        spec.having = Some(predicate);
        let mut exec = Self::try_new_with(Arc::clone(&self.exchange), spec, self.partial.clone())?;
        exec.late_records = self.late_records.clone();
        Ok(Some(exec))
    }

    /// The aggregate functions (none for a DISTINCT).
    pub fn aggregates(&self) -> &[Arc<AggregateFunctionExpr>] {
        &self.spec.aggregates
    }

    /// Whether the exchange routes partial states rather than input rows.
    pub fn spec(&self) -> &AggregateSpec {
        &self.spec
    }

    pub fn is_two_phase(&self) -> bool {
        self.partial.is_some()
    }

    /// The checkpoint barriers each output partition has passed on.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }

    /// Whether a checkpoint can keep this aggregation's state.
    pub fn checkpointable(&self) -> bool {
        self.partial.is_none()
    }

    /// When the output has an event time (EMIT FINAL over tumbling or hopping windows): the
    /// smallest window start each output partition may still emit, and the output column
    /// that holds the window start.
    pub fn progress(&self) -> Option<(&Arc<PartitionProgress>, usize)> {
        let window = self.spec.window.as_ref()?;
        Some((self.progress.as_ref()?, window.position))
    }
}

/// Records, after each watermark, the smallest window start `inner` may still emit — that of
/// the oldest window it holds, or the first the watermark has not closed — and hands out an
/// empty batch when only that moved: the exchange above reads the progress when a batch
/// reaches it.
struct ReportProgress {
    inner: AggregateMode,
    progress: Arc<PartitionProgress>,
    partition: usize,
    window: WindowKey,
    allowed_lateness: i64,
    schema: SchemaRef,
    recorded: i64,
}

impl MessageHandler for ReportProgress {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.inner.on_batch(batch)
    }

    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        self.inner.snapshot()
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.inner.restore(state)
    }

    fn dropped_counts(&self) -> Option<&StatefulMetrics> {
        self.inner.dropped_counts()
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        let output = self.inner.on_watermark(watermark)?;
        let unclosed = match watermark {
            i64::MAX => i64::MAX,
            _ => self
                .window
                .closed_through(self.allowed_lateness, watermark)
                .saturating_add(1),
        };
        let next_start = match self.inner.oldest_held_window() {
            Some(held) => unclosed.min(held),
            None => unclosed,
        };
        if next_start <= self.recorded {
            return Ok(output);
        }
        self.recorded = next_start;
        self.progress.record(self.partition, next_start);
        Ok(Some(output.unwrap_or_else(|| {
            RecordBatch::new_empty(Arc::clone(&self.schema))
        })))
    }
}

impl DisplayAs for WindowAggregateExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let window_position = self.spec.window.as_ref().map(|window| window.position);
        let keys: Vec<String> = self
            .spec
            .group_by
            .iter()
            .enumerate()
            .map(|(position, (expr, name))| match window_position {
                Some(window) if window == position => window_call_text(expr, name),
                _ => name.clone(),
            })
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
            AggregateEmit::ChangesPerBatch if self.running_kernels => {
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
        )?;
        match &self.spec.having {
            Some(having) => write!(
                f,
                ", having={having} (a group that stops passing is deleted)"
            ),
            None => Ok(()),
        }
    }
}

/// A window call of the GROUP BY as the user wrote it (`tumble(trade_time, INTERVAL '1'
/// MINUTE)`), not with DataFusion's display of interval literals; `name` if it is no call.
fn window_call_text(expr: &Arc<dyn PhysicalExpr>, name: &str) -> String {
    let Some(call) = expr.downcast_ref::<ScalarFunctionExpr>() else {
        return name.to_string();
    };
    let args: Vec<String> = call
        .args()
        .iter()
        .map(|arg| {
            if let Some(literal) = arg.downcast_ref::<Literal>() {
                duration_text(literal.value())
            } else if let Some(column) = arg.downcast_ref::<Column>() {
                column.name().to_string()
            } else {
                arg.to_string()
            }
        })
        .collect();
    format!("{}({})", call.name(), args.join(", "))
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
            .chain(self.spec.having.iter().cloned())
            .collect();
        visit_expressions(&expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let child = single_child("WindowAggregateExec", children)?;
        let exchange = StreamExchangeExec::from_plan(child, "WindowAggregateExec")?;
        let mut exec = Self::try_new_with(exchange, self.spec.clone(), self.partial.clone())?;
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
        let messages = self
            .exchange
            .execute_messages(partition, Arc::clone(&context))?;
        let mode = AggregateMode::try_new(ModeInputs {
            spec: &self.spec,
            input_schema: self.input.schema(),
            partial: self.partial.as_ref(),
            late_records: self.late_records.of_partition(&self.passed, partition),
            metrics: &self.metrics,
            partition,
            reservation,
        })?;
        let schema = Arc::clone(&self.spec.schema);
        let checkpoint =
            OperatorCheckpoint::of(&context, self, partition, &self.passed, Arc::clone(&schema))?;
        let outputs = match (&self.progress, &self.spec.window) {
            (Some(progress), Some(window)) => drive_checkpointed(
                messages,
                ReportProgress {
                    inner: mode,
                    progress: Arc::clone(progress),
                    partition,
                    window: window.clone(),
                    allowed_lateness: self.spec.allowed_lateness,
                    schema: Arc::clone(&schema),
                    recorded: i64::MIN,
                },
                checkpoint,
            )
            .boxed(),
            _ => drive_checkpointed(messages, mode, checkpoint).boxed(),
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, outputs)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
