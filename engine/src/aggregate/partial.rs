//! [`PartialAggregate`]: the first step of two-phase aggregation, run by the exchange
//! on each source partition before the shuffle, so that partial states rather than raw rows
//! cross it.
//!
//! For each input batch, the rows are assigned to their tumbling windows, or to the panes of
//! their hopping windows (a pane is one slide: a hopping record lies in `size / slide`
//! windows but in one pane, so a state crosses the shuffle once per pane rather than once per
//! window, and the final step adds it to each window holding the pane), against
//! the watermark the final step will have when it reads the result (the exchange serialises
//! watermarks and partial results, so the two agree exactly); rows without an event time and
//! late rows are dropped, counted, and late rows go to the query's late-record side output,
//! as the single-phase aggregation does. The rest are folded into a [`GroupTable`] keyed by
//! (window start, GROUP BY keys), which is emitted whole as one batch of partial states. A
//! GROUP BY without a window has every row in one endless window (start 0, added to the
//! emitted states only) and no late rows.
//!
//! The states' layout is [`PartialStateFormat`]'s. The step plugs into the exchange as an
//! [`InputStep`]: the exchange runs it on each input partition and knows nothing of
//! aggregation.
//!
//! The final step ([`super::WindowAggregateExec`] in its merge mode) merges these states (`merge_batch`) per (window, keys) and emits windows as usual.
//!
//! Without a window, the final step emits only at the end of the input, so the partial step
//! holds its groups across batches and emits them when its input ends (or when the table
//! reaches [`HELD_GROUPS`] groups, which bounds its memory): a few state rows per source
//! partition cross the shuffle instead of a state batch per input batch, and the keys stay
//! interned. With a window, the states of each batch go out at once, so that windows close
//! on time.
//!
//! Grouping only pays when a batch holds several rows per group. As DataFusion's partial
//! aggregation does, the step watches its first [`PROBE_ROWS`] rows: if they gave more than
//! half as many state rows, it stops grouping and turns each row into states of its own
//! (`GroupsAccumulator::convert_to_state`), which the final step merges alike.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array, UInt64Array};
use datafusion::arrow::compute::{concat_batches, min};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};

use super::assignment::{Assigned, Assignment, assign_windows};
use super::inputs::AggregateInputs;
use super::partial_states::PartialStateFormat;
use super::spec::{AggregateEmit, AggregateSpec, WindowKey};
use crate::exchange::{InputStep, InputStepState, StepOutput};
use crate::kernels::GroupTable;
use crate::late_records::LateRecords;
use crate::window::WindowSpec;

/// Input rows a partial step groups before it judges whether grouping pays.
pub const PROBE_ROWS: usize = 16_384;

/// Groups a partial step without a window holds before it emits them early.
pub const HELD_GROUPS: usize = 65_536;

/// What the partial step computes; shared by the exchange's input tasks.
pub struct PartialAggregate {
    inputs: AggregateInputs,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `None` for a GROUP BY without a window.
    window: Option<WindowKey>,
    /// What rows are assigned to: the window, or over hopping windows their panes (tumbling
    /// windows one slide long, each the latest window of its records).
    assigned_to: Option<WindowKey>,
    allowed_lateness: i64,
    /// No input row can be late (see [`Self::with_input_never_late`]): the step judges
    /// none, at whatever watermark.
    input_never_late: bool,
    /// The group table's keys: window start (with a window) and the GROUP BY keys.
    table_schema: SchemaRef,
    format: PartialStateFormat,
    late_records: LateRecords,
}

impl fmt::Debug for PartialAggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialAggregate")
            .field("schema", &self.format.schema())
            .finish()
    }
}

impl PartialAggregate {
    /// The partial step of `spec`, an EMIT FINAL aggregation over tumbling or hopping windows
    /// or without a window.
    pub fn try_new(spec: &AggregateSpec) -> Result<Self> {
        if spec.window.as_ref().is_some_and(WindowKey::is_session) {
            return plan_err!(
                "two-phase aggregation does not apply to SESSION windows: a session's extent is only known from all of its rows; use 'hash'"
            );
        }
        if spec.emit != AggregateEmit::Final {
            return plan_err!(
                "two-phase aggregation needs EMIT FINAL: EMIT CHANGES emits per input record, so the raw records must reach the aggregation; use 'hash'"
            );
        }
        let format = PartialStateFormat::try_new(spec)?;
        // Without a window the table holds the keys alone (the one window start is added
        // when the states are emitted), which keeps its key interning the keys' own.
        let table_schema = Arc::new(Schema::new(
            spec.window
                .as_ref()
                .map(|_| PartialStateFormat::window_start_field())
                .into_iter()
                .chain(format.key_fields())
                .collect::<Vec<_>>(),
        ));
        let assigned_to = spec.window.clone().map(|window| match window.spec {
            WindowSpec::Hop { slide, .. } => WindowKey {
                spec: WindowSpec::Tumble {
                    size: slide,
                    offset: 0,
                },
                ..window
            },
            _ => window,
        });
        Ok(Self {
            inputs: AggregateInputs::new(spec.key_exprs(), &spec.aggregates, &spec.filters),
            aggregates: spec.aggregates.clone(),
            window: spec.window.clone(),
            assigned_to,
            allowed_lateness: spec.allowed_lateness,
            input_never_late: false,
            table_schema,
            format,
            late_records: LateRecords::default(),
        })
    }

    /// The step over an input none of whose rows can be late: rows that come behind the
    /// progress the watermark is made of (an inner window's results, grouped by its start).
    /// The step then needs no watermark, so its inputs need not take turns, and it can run
    /// where the final step's watermark is not known (on another worker). Were a row late
    /// all the same, the final step would drop and count its state.
    pub fn with_input_never_late(mut self) -> Self {
        self.input_never_late = true;
        self
    }

    /// The layout of the states this step sends.
    pub fn format(&self) -> &PartialStateFormat {
        &self.format
    }

    /// The slide and the slides a window spans when the states are panes of hopping windows
    /// (see the module documentation).
    pub fn panes(&self) -> Option<(i64, i64)> {
        match self.window.as_ref()?.spec {
            WindowSpec::Hop { size, slide } if size > slide => Some((slide, size / slide)),
            _ => None,
        }
    }

    /// The side output late records go to (the final step's).
    pub fn late_records(&self) -> &LateRecords {
        &self.late_records
    }

    /// Fresh per-partition state, counting nothing.
    pub fn aggregator(self: &Arc<Self>) -> Result<PartialAggregator> {
        self.aggregator_counting(Counters::default())
    }

    fn aggregator_counting(self: &Arc<Self>, counters: Counters) -> Result<PartialAggregator> {
        Ok(PartialAggregator {
            spec: Arc::clone(self),
            table: match self.window {
                // Keys interned once for all windows, as the final step does.
                Some(_) => GroupTable::try_new_windowed(&self.table_schema, &self.aggregates)?,
                None => GroupTable::try_new(&self.table_schema, &self.aggregates)?,
            },
            records: Vec::new(),
            probed_rows: 0,
            probed_states: 0,
            row_states: false,
            counters,
            pending: None,
        })
    }

    /// The window starts of `assignment`'s rows; `None` without a window.
    fn window_starts<'a>(&self, assignment: &'a Assignment) -> Result<Option<&'a Int64Array>> {
        match (&self.window, &assignment.starts) {
            (None, _) => Ok(None),
            (Some(_), Some(starts)) => Ok(Some(starts)),
            (Some(_), None) => internal_err!("a partial window assignment without window starts"),
        }
    }

    /// Windows starting at or before this are closed once the watermark is `watermark`
    /// (none without a window).
    fn closed_through(&self, watermark: i64) -> i64 {
        match &self.window {
            Some(window) if !self.input_never_late => {
                window.closed_through(self.allowed_lateness, watermark)
            }
            _ => i64::MIN,
        }
    }
}

/// The step the exchange runs (the final step keeps the same `Arc` to read the states'
/// format and share the late-record side output).
impl InputStep for PartialAggregate {
    fn schema(&self) -> SchemaRef {
        self.format.schema()
    }

    /// Which rows are late depends on the watermark; without a window, or over an input
    /// never late, none is.
    fn needs_exact_watermark(&self) -> bool {
        self.window.is_some() && !self.input_never_late
    }

    /// The final step drops a state of a window it has closed, and counts as late the
    /// records the state counts: those whose latest window it is (a hopping record's earlier
    /// windows count none), so a record is late exactly when its latest window is closed.
    fn lateness_deferrable(&self) -> bool {
        self.window.as_ref().is_some_and(|window| {
            matches!(
                window.spec,
                WindowSpec::Tumble { .. } | WindowSpec::Hop { .. }
            )
        })
    }

    fn check_lateness_deferred(&self) -> Result<()> {
        if self.late_records.wanted() {
            return plan_err!(
                "a two-phase aggregation over a replay judges late records after the shuffle, \
                 from partial states, so they cannot go to the late-record output: plan the \
                 query with keep_late_records = true (or partitioning_strategy = 'hash')"
            );
        }
        Ok(())
    }

    fn fmt_as(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "partial_aggregate=[{}] per input partition",
            names.join(", ")
        )?;
        if let Some((slide, _)) = self.panes() {
            write!(f, " in panes of {slide}")?;
        }
        if self.input_never_late {
            write!(f, ", no input row late")?;
        }
        Ok(())
    }

    fn start(
        self: Arc<Self>,
        input: usize,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn InputStepState>> {
        let counter = |name: &'static str| MetricBuilder::new(metrics).counter(name, input);
        let counters = Counters {
            late_dropped: counter("late_records_dropped"),
            null_time_dropped: counter("null_event_time_dropped"),
            ungrouped_rows: counter("partial_ungrouped_rows"),
        };
        Ok(Box::new(self.aggregator_counting(counters)?))
    }
}

/// The counters of one input partition's partial step.
#[derive(Default)]
struct Counters {
    late_dropped: Count,
    null_time_dropped: Count,
    /// Rows passed on as states of their own, once grouping did not reduce them.
    ungrouped_rows: Count,
}

/// What one input batch gave at a watermark: its partial states (if any row was on time) and
/// the rows left out.
pub struct PartialOutcome {
    pub states: Option<RecordBatch>,
    /// Which rows are late, if any is.
    pub late_rows: Option<BooleanArray>,
    pub late: usize,
    pub null_times: usize,
    /// The earliest window start among the states.
    earliest_window: Option<i64>,
    /// Whether the rows became states of their own (grouping did not pay).
    ungrouped: bool,
}

/// What an outcome leaves to do once it is final: its late rows to send and its counts.
struct Pending {
    late_rows: Option<BooleanArray>,
    late: usize,
    null_times: usize,
    ungrouped: bool,
}

/// The rows of one window assignment, as the partial step folds or converts them.
struct Rows<'a> {
    /// Their window starts; `None` without a window.
    starts: Option<&'a Int64Array>,
    keys: Vec<ArrayRef>,
    /// Whether this is each row's latest window (the one that counts its record).
    latest: bool,
    count: usize,
}

/// The partial step of one source partition.
pub struct PartialAggregator {
    spec: Arc<PartialAggregate>,
    table: GroupTable,
    /// Records counted per group (by group id) for the batch being aggregated.
    records: Vec<u64>,
    /// Input rows grouped and state rows they gave, until grouping is judged.
    probed_rows: usize,
    probed_states: usize,
    /// Whether rows become states without grouping (grouping did not reduce them).
    row_states: bool,
    counters: Counters,
    /// The last outcome's late rows and counts, until it is committed.
    pending: Option<Pending>,
}

impl PartialAggregator {
    /// The partial states of `batch` for a final step at `watermark`. Late rows are only
    /// marked: they are sent when the outcome is committed.
    pub fn aggregate(&mut self, batch: &RecordBatch, watermark: i64) -> Result<PartialOutcome> {
        let spec = Arc::clone(&self.spec);
        let ungrouped = self.row_states;
        // A pane's latest window starts where the pane does: the pane is late when that
        // window is closed.
        let assigned = match &spec.assigned_to {
            Some(window) => assign_windows(window, spec.closed_through(watermark), batch)?,
            None => Assigned::whole_batch(),
        };
        let columns = spec.inputs.evaluate(batch)?;
        let hold = self.holds_groups();
        if !hold {
            self.records.clear();
        }
        let mut earliest_window: Option<i64> = None;
        let mut row_states = Vec::new();
        for assignment in &assigned.assignments {
            let rows = assignment.len(batch.num_rows());
            if rows == 0 {
                continue;
            }
            let starts = spec.window_starts(assignment)?;
            if let Some(earliest) = starts.and_then(min) {
                earliest_window = Some(earliest_window.map_or(earliest, |e| e.min(earliest)));
            }
            let (keys, arguments, filters) = columns.pick(assignment)?;
            let rows = Rows {
                starts,
                keys,
                latest: assignment.latest,
                count: rows,
            };
            if self.row_states {
                row_states.push(self.states_of_rows(rows, &arguments, &filters)?);
            } else {
                self.group(rows, &arguments, &filters)?;
            }
        }
        let states = if self.row_states {
            match row_states.len() {
                0 => None,
                1 => row_states.pop(),
                _ => Some(concat_batches(&spec.format.schema(), &row_states)?),
            }
        } else if hold {
            // The held groups stand for the states this batch would have given.
            self.probe(batch.num_rows(), 0);
            if self.row_states || self.table.len() >= HELD_GROUPS {
                self.emit()?
            } else {
                None
            }
        } else {
            let states = self.emit()?;
            self.probe(
                batch.num_rows(),
                states.as_ref().map_or(0, RecordBatch::num_rows),
            );
            states
        };
        Ok(PartialOutcome {
            states,
            late_rows: assigned.late,
            late: assigned.late_count,
            null_times: assigned.null_times,
            earliest_window,
            ungrouped,
        })
    }

    /// Folds `rows` into the table and counts their records per group.
    fn group(
        &mut self,
        rows: Rows<'_>,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        let mut table_keys: Vec<ArrayRef> = Vec::with_capacity(rows.keys.len() + 1);
        table_keys.extend(rows.starts.map(|s| Arc::new(s.clone()) as ArrayRef));
        table_keys.extend(rows.keys);
        self.table
            .update(&table_keys, arguments, filters, rows.count)?;
        self.records.resize(self.table.len(), 0);
        match (rows.latest, rows.starts) {
            (false, _) => {}
            // Without windows no state is ever dropped as late, so only the total
            // matters: the first state row carries it.
            (true, None) => self.records[0] += rows.count as u64,
            (true, Some(_)) => {
                for group in self.table.last_group_ids(rows.count) {
                    self.records[*group] += 1;
                }
            }
        }
        Ok(())
    }

    /// Counts a grouped batch of `rows` input rows that gave `states` state rows (held
    /// groups count as states); once [`PROBE_ROWS`] rows are counted, decides whether
    /// grouping goes on.
    fn probe(&mut self, rows: usize, states: usize) {
        if self.probed_rows < PROBE_ROWS {
            self.probed_rows += rows;
            self.probed_states += states;
            let held = if self.holds_groups() {
                self.table.len()
            } else {
                0
            };
            let states = self.probed_states + held;
            self.row_states = self.probed_rows >= PROBE_ROWS && states * 2 > self.probed_rows;
        }
    }

    /// The watermark from which `outcome` no longer holds: one of its windows has closed, so
    /// a row may have changed from on time to late.
    pub fn valid_below(&self, outcome: &PartialOutcome) -> i64 {
        match (&self.spec.window, outcome.earliest_window) {
            (Some(window), Some(start)) => start
                .saturating_add(window.spec.size())
                .saturating_add(self.spec.allowed_lateness),
            _ => i64::MAX,
        }
    }

    /// Whether groups are held across batches until the input ends (without a window).
    fn holds_groups(&self) -> bool {
        self.spec.window.is_none()
    }

    /// `rows` as states of their own.
    fn states_of_rows(
        &self,
        rows: Rows<'_>,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<RecordBatch> {
        let starts = rows
            .starts
            .cloned()
            .unwrap_or_else(|| Int64Array::from_value(0, rows.count));
        let states = self
            .table
            .row_states(arguments, filters)?
            .into_iter()
            .flatten()
            .collect();
        // A hop's record counts in its latest window only.
        let counted = u64::from(rows.latest);
        self.spec.format.batch(
            Arc::new(starts),
            rows.keys,
            states,
            UInt64Array::from_value(counted, rows.count),
            rows.count,
        )
    }

    /// Every group's partial state as one batch; the table is left empty.
    fn emit(&mut self) -> Result<Option<RecordBatch>> {
        let groups = self.table.len();
        if groups == 0 {
            return Ok(None);
        }
        let (mut keys, states) = self.table.emit_states(EmitTo::All)?;
        let starts = if self.spec.window.is_none() {
            Arc::new(Int64Array::from_value(0, groups)) as ArrayRef
        } else {
            keys.remove(0)
        };
        let records = UInt64Array::from(std::mem::take(&mut self.records));
        let states = states.into_iter().flatten().collect();
        Ok(Some(
            self.spec
                .format
                .batch(starts, keys, states, records, groups)?,
        ))
    }
}

impl InputStepState for PartialAggregator {
    fn process(&mut self, batch: &RecordBatch, watermark: i64) -> Result<StepOutput> {
        let outcome = self.aggregate(batch, watermark)?;
        let valid_below = self.valid_below(&outcome);
        self.pending = Some(Pending {
            late_rows: outcome.late_rows,
            late: outcome.late,
            null_times: outcome.null_times,
            ungrouped: outcome.ungrouped,
        });
        Ok(StepOutput {
            batch: outcome.states,
            valid_below,
        })
    }

    /// Counts the committed outcome's rows left out and sends its late rows to the side
    /// output, if somebody reads it.
    fn commit(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(pending) = self.pending.take() else {
            return internal_err!("a partial step committed without an outcome");
        };
        self.counters.late_dropped.add(pending.late);
        self.counters.null_time_dropped.add(pending.null_times);
        if pending.ungrouped {
            self.counters.ungrouped_rows.add(batch.num_rows());
        }
        match &pending.late_rows {
            Some(late) if self.spec.late_records.wanted() => {
                self.spec.late_records.send(batch, late)
            }
            _ => Ok(()),
        }
    }

    /// The states still held at the end of the input (only without a window).
    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        self.emit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::partial_states::RECORDS_COLUMN;
    use crate::window::WindowSpec;
    use datafusion::arrow::array::{AsArray, StringArray, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, TimeUnit, UInt64Type};
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    fn input() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("q", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("a"),
                    None,
                    Some("b"),
                ])),
                Arc::new(TimestampMillisecondArray::from(vec![
                    Some(0),
                    Some(1_500),
                    Some(2_500),
                    None,
                ])),
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            ],
        )
        .unwrap()
    }

    /// COUNT(q) and SUM(q) by k over hopping windows of 3 s every 1 s.
    fn partial(schema: &SchemaRef) -> Arc<PartialAggregate> {
        partial_with_window(schema, true)
    }

    /// COUNT(q) and SUM(q) by k, over hopping windows of 3 s every 1 s or without a window.
    fn partial_with_window(schema: &SchemaRef, windowed: bool) -> Arc<PartialAggregate> {
        let q = col("q", schema).unwrap();
        let aggregate = |function, name: &str| {
            Arc::new(
                AggregateExprBuilder::new(function, vec![Arc::clone(&q)])
                    .schema(Arc::clone(schema))
                    .alias(name)
                    .build()
                    .unwrap(),
            )
        };
        let ts = col("ts", schema).unwrap();
        let key = (col("k", schema).unwrap(), "k".to_string());
        let key_field = Field::new("k", DataType::Utf8, true);
        let (group_by, window, mut fields) = if windowed {
            let window = WindowKey {
                position: 0,
                spec: WindowSpec::Hop {
                    size: 3_000,
                    slide: 1_000,
                },
                time: Arc::clone(&ts),
            };
            (
                vec![(ts, "window".to_string()), key],
                Some(window),
                vec![Field::new("window", DataType::Int64, false), key_field],
            )
        } else {
            (vec![key], None, vec![key_field])
        };
        fields.push(Field::new("n", DataType::Int64, false));
        fields.push(Field::new("total", DataType::Int64, true));
        let spec = AggregateSpec {
            group_by,
            aggregates: vec![aggregate(count_udaf(), "n"), aggregate(sum_udaf(), "total")],
            filters: vec![None, None],
            window,
            emit: AggregateEmit::Final,
            allowed_lateness: 0,
            schema: Arc::new(Schema::new(fields)),
            having: None,
            changelog_op: false,
        };
        Arc::new(PartialAggregate::try_new(&spec).unwrap())
    }

    fn column_sum(batch: &RecordBatch, name: &str) -> u64 {
        let column = batch.column_by_name(name).unwrap();
        match column.data_type() {
            DataType::UInt64 => column.as_primitive::<UInt64Type>().values().iter().sum(),
            _ => column
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .sum::<i64>() as u64,
        }
    }

    #[test]
    fn a_hopping_record_is_sent_once_in_its_pane() {
        let input = input();
        let partial = partial(&input.schema());
        let mut aggregator = partial.aggregator().unwrap();
        let outcome = aggregator.aggregate(&input, i64::MIN).unwrap();
        let states = outcome.states.unwrap();
        assert_eq!((outcome.late, outcome.null_times), (0, 1));
        // Three timed records, each in three windows but in one pane of 1 s.
        assert_eq!(column_sum(&states, RECORDS_COLUMN), 3);
        assert_eq!(column_sum(&states, "n[count]"), 3);
        let split = partial.format().split(&states).unwrap();
        let mut starts = split.starts.values().to_vec();
        starts.sort_unstable();
        assert_eq!(starts, [0, 1_000, 2_000]);
        assert_eq!(partial.panes(), Some((1_000, 3)));
    }

    #[test]
    fn without_a_window_the_states_are_held_until_the_input_ends() {
        let input = input();
        let partial = partial_with_window(&input.schema(), false);
        let mut aggregator = partial.aggregator().unwrap();
        for _ in 0..3 {
            let outcome = aggregator.aggregate(&input, i64::MIN).unwrap();
            assert!(outcome.states.is_none(), "states before the input ended");
        }
        let states = InputStepState::finish(&mut aggregator).unwrap().unwrap();
        // Groups "a", null and "b", each row of the three batches counted once.
        assert_eq!(states.num_rows(), 3);
        assert_eq!(column_sum(&states, RECORDS_COLUMN), 12);
        assert_eq!(column_sum(&states, "n[count]"), 12);
        assert_eq!(column_sum(&states, "total[sum]"), 30);
        assert!(
            InputStepState::finish(&mut aggregator).unwrap().is_none(),
            "states sent twice"
        );
    }

    #[test]
    fn an_outcome_holds_until_one_of_its_windows_closes() {
        let input = input();
        let partial = partial(&input.schema());
        let mut aggregator = partial.aggregator().unwrap();
        let outcome = aggregator.aggregate(&input, i64::MIN).unwrap();
        // The earliest pane starts at 0: its records are late once their latest window,
        // 0 to 3 000, closes.
        assert_eq!(aggregator.valid_below(&outcome), 3_000);
    }

    #[test]
    fn rows_whose_latest_window_closed_are_late() {
        let input = input();
        let partial = partial(&input.schema());
        let mut aggregator = partial.aggregator().unwrap();
        // At watermark 3 000 the windows starting at 0 and before are closed: the record at
        // 0 is late; the others' panes go out whole (the final step drops their closed
        // windows).
        let outcome = aggregator.aggregate(&input, 3_000).unwrap();
        let states = outcome.states.unwrap();
        assert_eq!((outcome.late, outcome.null_times), (1, 1));
        assert_eq!(column_sum(&states, RECORDS_COLUMN), 2);
        assert_eq!(column_sum(&states, "n[count]"), 2);
        let split = partial.format().split(&states).unwrap();
        assert!(split.starts.values().iter().all(|s| *s > 0));
    }

    #[test]
    fn over_an_input_never_late_no_row_is_judged_late() {
        let input = input();
        let partial = Arc::into_inner(partial(&input.schema())).unwrap();
        let partial = Arc::new(partial.with_input_never_late());
        assert!(!partial.needs_exact_watermark());
        let mut aggregator = partial.aggregator().unwrap();
        // The watermark that makes the record at 0 late above.
        let outcome = aggregator.aggregate(&input, 3_000).unwrap();
        assert_eq!((outcome.late, outcome.null_times), (0, 1));
        assert_eq!(column_sum(&outcome.states.unwrap(), RECORDS_COLUMN), 3);
    }
}
