//! [`WindowGroups`]: GROUP BY over tumbling or hopping windows, or over the whole stream.
//!
//! Per batch, each row's window comes from the window kernel (a hop: one assignment per
//! overlapping window); rows without an event time and rows whose window has already closed
//! (its end plus the allowed lateness at or below the watermark) are dropped, counted and
//! sent to the late side output; the rest are folded into one group table keyed by the
//! window start followed by the GROUP BY keys, so a batch is interned and folded in with one
//! call whatever the number of windows it touches.
//!
//! Groups are numbered in order of creation and windows are created in event-time order, so
//! the groups of the windows a watermark closes are a prefix of the table, emitted with
//! `EmitTo::First`. (A group that disordered input created ahead of an older window's groups
//! holds those back until its own window closes, by at most one window length.)
//!
//! - EMIT FINAL: when the watermark closes a window, its groups are emitted whole, one row
//!   per group, and leave the table; at the end of bounded input every window is emitted (a
//!   GROUP BY without keys gives its one row even over no input).
//! - EMIT CHANGES per record: for each input row (in arrival order, a hop's windows latest
//!   first), one output row with its group's aggregates including that row
//!   ([`RunningAggregates`]); closed windows' groups leave without output.
//! - EMIT CHANGES per batch: one row per group a batch changed, with its current aggregates
//!   (any aggregate function): where the running kernels have the aggregates, those of the
//!   group's last row in the batch; else the table's, which DataFusion's accumulators give
//!   only for every group at once. The changed groups are found in time proportional to
//!   the batch.
//! - A changelog's HAVING is applied here ([`GroupHaving`]), by group id: a group's rows go
//!   out while they pass, and it is deleted once when they stop.

use std::collections::VecDeque;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;

use super::context::ModeContext;
use crate::aggregate::assignment::{Assignment, assign_windows};
use crate::aggregate::inputs::AggregateInputs;
use crate::aggregate::spec::{AggregateEmit, AggregateSpec};
use crate::changelog::{ChangeOp, GroupHaving};
use crate::checkpoint::OperatorState;
use crate::kernels::{GroupTable, RunningAggregates, take_rows};
use crate::window::WindowSpec;

/// See the module documentation.
pub(crate) struct WindowGroups {
    inputs: AggregateInputs,
    table: GroupTable,
    /// EMIT CHANGES: the running aggregates of every group, by group id, where the kernels
    /// have the aggregates.
    running: Option<RunningAggregates>,
    emit: AggregateEmit,
    /// The window start of each group, by group id (unless the table knows them).
    group_windows: VecDeque<i64>,
    /// Windows opened that the metrics already count, for a windowed key table that counts
    /// them itself.
    windows_counted: usize,
    /// Whether the end of input has come (the watermark reached +inf).
    end_reached: bool,
    /// A changelog's HAVING, with which groups' rows are out.
    having: Option<GroupHaving>,
    pub(super) context: ModeContext,
}

impl WindowGroups {
    pub fn try_new(
        spec: &AggregateSpec,
        input_schema: &SchemaRef,
        context: ModeContext,
    ) -> Result<Self> {
        let running = match spec.emit {
            AggregateEmit::ChangesPerRecord | AggregateEmit::ChangesPerBatch => {
                spec.running_kernels(input_schema)
            }
            AggregateEmit::Final => None,
        };
        let table_schema = Arc::new(Schema::new(spec.table_fields()));
        let table = match spec.window.as_ref().map(|w| w.spec) {
            Some(WindowSpec::Tumble { .. } | WindowSpec::Hop { .. }) => {
                GroupTable::try_new_windowed(&table_schema, &spec.aggregates)?
            }
            _ => GroupTable::try_new(&table_schema, &spec.aggregates)?,
        };
        let table = match spec.emit {
            AggregateEmit::ChangesPerBatch => table.read_while_updating(),
            _ => table,
        };
        Ok(Self {
            inputs: AggregateInputs::new(spec.key_exprs(), &spec.aggregates, &spec.filters),
            table,
            running,
            emit: spec.emit,
            group_windows: VecDeque::new(),
            windows_counted: 0,
            end_reached: false,
            having: match spec.emit {
                AggregateEmit::Final => None,
                _ => spec.having.clone().map(GroupHaving::new),
            },
            context,
        })
    }

    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.context.count_records(batch.num_rows());
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
                Some(starts) => Some(self.context.window_column(starts)?),
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
        self.context.combine(outputs)
    }

    /// The windows of `batch`'s rows (one assignment per overlapping window of a hop);
    /// counts, and sends to the side output, rows with no event time or only closed windows.
    fn assign(&self, batch: &RecordBatch) -> Result<Vec<Assignment>> {
        let context = &self.context;
        let Some(window) = &context.window else {
            return Ok(vec![Assignment::whole_batch()]);
        };
        let assigned = assign_windows(window, context.closed_through(), batch)?;
        context
            .metrics
            .stateful
            .null_time_dropped
            .add(assigned.null_times);
        context
            .metrics
            .stateful
            .late_dropped
            .add(assigned.late_count);
        if let Some(late) = &assigned.late
            && context.late_records.wanted()
        {
            context.late_records.send(batch, late)?;
        }
        Ok(assigned.assignments)
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
        let known = self.table.len();
        let output = match (self.emit, &mut self.running) {
            (AggregateEmit::ChangesPerRecord, Some(running)) => {
                self.table.intern(&table_keys, rows)?;
                let groups = self.table.len();
                let ids = self.table.last_group_ids(rows);
                let values = running.update(ids, groups, arguments)?;
                let ops = first_rows_insert(ids, known, groups);
                let batch = self.context.changelog_batch(table_keys, values, &ops)?;
                match &mut self.having {
                    Some(having) => having.apply(&batch, ids)?,
                    None => Some(batch),
                }
            }
            (AggregateEmit::ChangesPerBatch, running) => {
                let (last_rows, values) = match running {
                    Some(running) => {
                        // Each changed group's row is its last row's running aggregates.
                        self.table.intern(&table_keys, rows)?;
                        let groups = self.table.len();
                        let values =
                            running.update(self.table.last_group_ids(rows), groups, arguments)?;
                        let last_rows = self.table.changed_rows(rows);
                        let values = values
                            .iter()
                            .map(|v| take_rows(v.as_ref(), &last_rows))
                            .collect::<Result<Vec<_>>>()?;
                        (last_rows, values)
                    }
                    None => {
                        self.table.update(&table_keys, arguments, filters, rows)?;
                        self.table.snapshot_changed(rows)?
                    }
                };
                let ids = self.table.last_group_ids(rows);
                let ops: Vec<ChangeOp> = last_rows
                    .values()
                    .iter()
                    .map(|&row| ChangeOp::of_upsert(ids[row as usize] >= known))
                    .collect();
                let changed_keys = table_keys
                    .iter()
                    .map(|k| take_rows(k.as_ref(), &last_rows))
                    .collect::<Result<Vec<_>>>()?;
                let batch = self.context.changelog_batch(changed_keys, values, &ops)?;
                match &mut self.having {
                    Some(having) => {
                        let changed: Vec<usize> = last_rows
                            .values()
                            .iter()
                            .map(|&row| ids[row as usize])
                            .collect();
                        having.apply(&batch, &changed)?
                    }
                    None => Some(batch),
                }
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

    /// Merges `rows` rows of partial `states` of windows `starts` (two-phase aggregation;
    /// the table's keys are `table_keys`).
    pub fn merge(
        &mut self,
        starts: Option<&Int64Array>,
        table_keys: &[ArrayRef],
        states: &[Vec<ArrayRef>],
        rows: usize,
    ) -> Result<()> {
        self.table.merge(table_keys, states, rows)?;
        match starts {
            Some(starts) => self.track_new_groups(starts, rows),
            None => Ok(()),
        }
    }

    /// After an update or merge of `rows` rows with window `starts`: counts windows opening
    /// and records the window of each group it created (unless the table knows them).
    fn track_new_groups(&mut self, starts: &Int64Array, rows: usize) -> Result<()> {
        let metrics = &self.context.metrics;
        if let Some(opened) = self.table.windows_opened() {
            // A windowed key table knows its groups' windows and counts their opening.
            metrics
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
        metrics.windows_opened.add(created);
        self.group_windows.extend(windows);
        Ok(())
    }

    /// Moves the watermark; emits (EMIT FINAL) or forgets the groups of the windows it closes.
    pub fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.context.raise_watermark(watermark);
        let end_of_input = self.context.watermark == i64::MAX && !self.end_reached;
        if end_of_input && self.context.window.is_none() && self.emit == AggregateEmit::Final {
            self.end_reached = true;
            if self.inputs.keys.is_empty() && self.table.is_empty() {
                // A GROUP BY without keys gives one row even over no input.
                let values = self.table.empty_group_values()?;
                let output = self.context.output_batch(Vec::new(), values, 1)?;
                return self.context.combine(vec![output]);
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
        self.context.metrics.windows_emitted.add(closed_windows);
        if let Some(having) = &mut self.having {
            having.forget_first(closing);
        }
        let output = match (&mut self.running, self.emit) {
            (Some(running), _) => {
                // The per-record changelog already holds these groups' rows.
                running.drop_first(closing);
                self.table.discard(emit_to)?;
                Vec::new()
            }
            (None, AggregateEmit::Final) => {
                let (keys, values) = self.table.emit(emit_to)?;
                vec![self.context.output_batch(keys, values, closing)?]
            }
            (None, _) => {
                // Per-batch changes emitted these groups' rows already; their state leaves.
                self.table.emit(emit_to)?;
                Vec::new()
            }
        };
        self.report_state()?;
        self.context.combine(output)
    }

    /// The smallest window start among the groups not emitted yet.
    pub fn oldest_held_window(&self) -> Option<i64> {
        match self.table.oldest_open_window() {
            Some(oldest) => oldest,
            None => self.group_windows.iter().copied().min(),
        }
    }

    /// How many leading groups the watermark closes, and how many windows they span; the
    /// closing groups' windows are forgotten from `group_windows`.
    fn closing_groups(&mut self) -> (usize, usize) {
        let watermark = self.context.watermark;
        if self.context.window.is_none() {
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
            self.context.closed_through()
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

    /// The state a checkpoint keeps: the watermark, every group's keys and accumulator
    /// states, the window of each group, and under EMIT CHANGES per record the running
    /// aggregates. `None` with a changelog's HAVING, whose state is not kept yet.
    pub fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        let mut state = OperatorState::default();
        if let Some(having) = &self.having {
            state.put_array("having_out", Arc::new(having.snapshot()));
        }
        self.context.snapshot_into(&mut state);
        state.put_value("end_reached", i64::from(self.end_reached));
        // Packed keys are kept as they are held; other key tables are taken out and
        // interned straight back (the ids stay: groups are interned in order).
        if !self.table.snapshot_in_place(&mut state)? {
            let groups = self.table.len();
            let (keys, states) = self.table.emit_states(EmitTo::All)?;
            self.table.merge(&keys, &states, groups)?;
            self.windows_counted = self.table.windows_opened().unwrap_or(0);
            state.put_value("groups", groups as i64);
            for (index, key) in keys.iter().enumerate() {
                state.put_array(format!("key_{index:03}"), Arc::clone(key));
            }
            state.put_aggregate_states("state", states);
        }
        state.put_array(
            "group_windows",
            Arc::new(Int64Array::from_iter_values(
                self.group_windows.iter().copied(),
            )),
        );
        if let Some(running) = &self.running {
            running.snapshot_into(&mut state);
        }
        Ok(Some(state))
    }

    /// Takes back the state [`Self::snapshot`] kept.
    pub fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.context.restore_from(state)?;
        self.end_reached = state.value("end_reached")? != 0;
        if !self.table.restore_in_place(state)? {
            let groups = state.value("groups")? as usize;
            let keys = state.arrays_with_prefix("key_");
            let states = state.aggregate_states("state")?;
            self.table.merge(&keys, &states, groups)?;
            self.windows_counted = self.table.windows_opened().unwrap_or(0);
        }
        let windows = state.array("group_windows")?;
        let Some(windows) = windows.as_any().downcast_ref::<Int64Array>() else {
            return internal_err!("checkpoint: group windows are not Int64");
        };
        self.group_windows = windows.values().iter().copied().collect();
        if let Some(running) = &mut self.running {
            running.restore_from(state)?;
        }
        if let Some(having) = &mut self.having {
            having.restore(state.array("having_out")?.as_boolean());
        }
        self.report_state()
    }

    /// Publishes the state's size and accounts it in the memory pool.
    pub fn report_state(&mut self) -> Result<()> {
        let bytes = self.table.size()
            + self.running.as_ref().map_or(0, |r| r.size())
            + self.having.as_ref().map_or(0, GroupHaving::size)
            + self.group_windows.capacity() * std::mem::size_of::<i64>();
        self.context.account(bytes, self.table.len())
    }
}

/// The operation of each per-record changelog row whose group is `ids[row]`: the first row
/// of a group created by this batch (numbered from `known` up to `groups`) inserts it, every
/// other row updates it.
fn first_rows_insert(ids: &[usize], known: usize, groups: usize) -> Vec<ChangeOp> {
    let mut seen = vec![false; groups.saturating_sub(known)];
    ids.iter()
        .map(|&id| {
            let first = id
                .checked_sub(known)
                .and_then(|new| seen.get_mut(new))
                .is_some_and(|seen| !std::mem::replace(seen, true));
            ChangeOp::of_upsert(first)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{TUMBLE_1S, batch, context, mode, rows, spec, watermark};
    use crate::aggregate::mode::AggregateMode;
    use crate::aggregate::spec::AggregateEmit;
    use crate::window::WindowSpec;

    #[test]
    fn emit_final_emits_a_window_when_the_watermark_passes_its_end() {
        let mut mode = mode(&spec(Some(TUMBLE_1S), AggregateEmit::Final), None);
        let input = rows(&[("a", 100, 1), ("b", 200, 2), ("a", 900, 3), ("a", 1_100, 4)]);
        assert!(batch(&mut mode, &input).is_empty());
        assert!(
            watermark(&mut mode, 999).is_empty(),
            "window [0, 1000) not yet closed"
        );
        assert_eq!(watermark(&mut mode, 1_000), ["0,a,2,4", "0,b,1,2"]);
        assert_eq!(watermark(&mut mode, i64::MAX), ["1000,a,1,4"]);
    }

    #[test]
    fn a_row_of_a_closed_window_is_late_counted_and_dropped() {
        let mut mode = mode(&spec(Some(TUMBLE_1S), AggregateEmit::Final), None);
        watermark(&mut mode, 2_000);
        assert!(batch(&mut mode, &rows(&[("a", 1_500, 1), ("a", 2_500, 2)])).is_empty());
        assert_eq!(context(&mode).metrics.stateful.late_dropped.value(), 1);
        assert_eq!(watermark(&mut mode, i64::MAX), ["2000,a,1,2"]);
    }

    #[test]
    fn a_hopping_record_is_in_every_window_that_covers_it() {
        let hop = WindowSpec::Hop {
            size: 2_000,
            slide: 1_000,
        };
        let mut mode = mode(&spec(Some(hop), AggregateEmit::Final), None);
        batch(&mut mode, &rows(&[("a", 1_500, 5)]));
        let mut windows = watermark(&mut mode, i64::MAX);
        windows.sort();
        assert_eq!(windows, ["0,a,1,5", "1000,a,1,5"]);
    }

    #[test]
    fn changes_per_record_answer_each_row_with_its_group_so_far() {
        let mut mode = mode(
            &spec(Some(TUMBLE_1S), AggregateEmit::ChangesPerRecord),
            None,
        );
        let input = rows(&[("a", 100, 1), ("b", 200, 2), ("a", 300, 3)]);
        assert_eq!(
            batch(&mut mode, &input),
            ["0,a,1,1,+I", "0,b,1,2,+I", "0,a,2,4,+U"]
        );
        assert!(
            watermark(&mut mode, i64::MAX).is_empty(),
            "rows already emitted"
        );
    }

    #[test]
    fn changes_per_batch_answer_each_changed_group_once() {
        let mut mode = mode(&spec(Some(TUMBLE_1S), AggregateEmit::ChangesPerBatch), None);
        let input = rows(&[("a", 100, 1), ("b", 200, 2), ("a", 300, 3)]);
        let mut changed = batch(&mut mode, &input);
        changed.sort();
        assert_eq!(changed, ["0,a,2,4,+I", "0,b,1,2,+I"]);
        assert_eq!(batch(&mut mode, &rows(&[("b", 400, 1)])), ["0,b,2,3,+U"]);
    }

    /// Per-batch changes from the running kernels (the spec's SUM and COUNT have them) are
    /// the rows the table's accumulators give, batch after batch, across window closes.
    #[test]
    fn changes_per_batch_from_running_kernels_equal_the_table_s() {
        let changes = spec(Some(TUMBLE_1S), AggregateEmit::ChangesPerBatch);
        let mut running = mode(&changes, None);
        let mut table = mode(&changes, None);
        let (AggregateMode::Windows(with), AggregateMode::Windows(without)) =
            (&running, &mut table)
        else {
            panic!("a tumbling window's changes are WindowGroups'");
        };
        assert!(with.running.is_some(), "SUM and COUNT have running kernels");
        without.running = None;
        let keys = ["a", "b", "c", "d", "e"];
        for round in 0..20i64 {
            let input: Vec<(&str, i64, i64)> = (0..30)
                .map(|i| {
                    let n = round * 30 + i;
                    (keys[(n * 7 % 5) as usize], round * 400 + i * 10, n % 11 - 3)
                })
                .collect();
            let (mut got, mut want) = (
                batch(&mut running, &rows(&input)),
                batch(&mut table, &rows(&input)),
            );
            got.sort();
            want.sort();
            assert_eq!(got, want, "round {round}");
            assert!(!got.is_empty());
            let closing = round * 400 - 500;
            assert_eq!(
                watermark(&mut running, closing),
                watermark(&mut table, closing)
            );
        }
    }

    #[test]
    fn without_a_window_groups_are_emitted_at_the_end_of_input() {
        let mut mode = mode(&spec(None, AggregateEmit::Final), None);
        batch(&mut mode, &rows(&[("a", 100, 1), ("a", 5_000, 2)]));
        assert!(watermark(&mut mode, 10_000).is_empty());
        assert_eq!(watermark(&mut mode, i64::MAX), ["a,2,3"]);
    }
}
