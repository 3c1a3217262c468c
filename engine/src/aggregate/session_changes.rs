//! [`SessionChanges`]: EMIT CHANGES over session windows, one changelog row per record.
//!
//! The open sessions are [`OpenSessions`]: a batch's keys are interned at once; then its rows
//! are walked in arrival order and each opens, extends (perhaps backwards: an out-of-order
//! record before the session's start) or bridges sessions of its key. The rows'
//! aggregates come from the [`RunningAggregates`] kernels, run over stretches of the batch
//! between bridges; at a bridge, the later session's running state is merged into the
//! earlier one's.
//!
//! The output is an upsert changelog keyed by (GROUP BY keys, `window_start`): one row per
//! record with its session's aggregates including it, and, when a session's start changes
//! (it is bridged into an earlier one, or extended backwards), a row for the old
//! (keys, start) whose aggregates are all NULL: a deletion. A session leaves the state when
//! the watermark passes its last event time plus the gap (and the allowed lateness).
//!
//! Per batch (`freshet.changes_per = 'batch'`) the batch's per-record changelog is reduced to
//! its net effect: for each (keys, start) alive after the batch, its last row (which holds
//! the session's aggregates after the batch); for each (keys, start) that existed before the
//! batch and not after it, its deletion. A start set and given up within one batch was never
//! emitted, so it needs no deletion: each session remembers the batch in which its start
//! was set.

use datafusion::arrow::array::{ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Result, internal_err};

use super::open_sessions::OpenSessions;
use crate::changelog::ChangeOp;
use crate::checkpoint::OperatorState;
use crate::kernels::RunningAggregates;

/// The changelog of one batch: each output row's source row (for its keys), window start,
/// aggregate values (NULL for deletions) and operation.
pub struct SessionChangelog {
    pub key_rows: UInt32Array,
    pub starts: Int64Array,
    pub values: Vec<ArrayRef>,
    pub ops: Vec<ChangeOp>,
}

/// See the module documentation.
pub struct SessionChanges {
    open: OpenSessions,
    running: RunningAggregates,
    key_ids: Vec<usize>,
    /// Reduce each batch's changelog to one row per changed (keys, start).
    per_batch: bool,
    /// Batches folded so far.
    batches: u64,
}

/// Keeps the elements of `values` at `rows` (ascending), in order.
fn keep_rows<T: Copy>(values: &mut Vec<T>, rows: &[usize]) {
    *values = rows.iter().map(|&row| values[row]).collect();
}

impl SessionChanges {
    /// For keys of `key_schema` (no fields: no keys), sessions cut at `gap`; with
    /// `per_batch`, one changelog row per changed (keys, start) and batch.
    pub fn try_new(
        key_schema: &SchemaRef,
        running: RunningAggregates,
        gap: i64,
        per_batch: bool,
    ) -> Result<Self> {
        Ok(Self {
            open: OpenSessions::try_new(key_schema, gap, false)?,
            running,
            key_ids: Vec::new(),
            per_batch,
            batches: 0,
        })
    }

    /// Puts the open sessions and their running aggregates into a checkpoint's `state`.
    pub fn snapshot_into(&mut self, state: &mut OperatorState) -> Result<()> {
        self.open.snapshot_into(state)?;
        self.running.snapshot_into(state);
        state.put_value("batches", self.batches as i64);
        Ok(())
    }

    /// Takes back what [`Self::snapshot_into`] kept.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<()> {
        self.open.restore_from(state)?;
        self.running.restore_from(state)?;
        self.batches = state.value("batches")? as u64;
        Ok(())
    }

    /// Folds the records of a batch (its key columns, event times without nulls, and the
    /// aggregates' arguments) into their sessions; returns the changelog rows.
    pub fn update(
        &mut self,
        keys: &[ArrayRef],
        times: &Int64Array,
        arguments: &[Vec<ArrayRef>],
    ) -> Result<SessionChangelog> {
        let rows = times.len();
        self.batches += 1;
        let batch = self.batches;
        self.key_ids.clear();
        self.key_ids
            .extend_from_slice(self.open.intern(keys, rows)?);
        let mut row_groups = Vec::with_capacity(rows);
        let mut key_rows = Vec::with_capacity(rows);
        let mut starts = Vec::with_capacity(rows);
        // Per output row, the batch row whose values it shows (`None`: a deletion).
        let mut value_rows: Vec<Option<u32>> = Vec::with_capacity(rows);
        // Per output row: an upsert of a (keys, start) this row set (a new session, or a
        // start moved back), whose earlier rows were of another start.
        let mut inserted: Vec<bool> = Vec::with_capacity(rows);
        // Per batch, per output row: a deletion of a start emitted before this batch.
        let mut emitted_before: Vec<bool> = Vec::new();
        // (row, from, into): before `row`, fold group `from` into `into`.
        let mut bridges: Vec<(usize, usize, usize)> = Vec::new();
        for (row, (&key, &time)) in self.key_ids.iter().zip(times.values()).enumerate() {
            let placed = self.open.place(key, time, batch);
            if let Some(gone) = placed.gone {
                bridges.push((row, gone.group, placed.session.group));
            }
            for deleted in placed.gone.iter().chain(&placed.moved) {
                key_rows.push(row as u32);
                starts.push(deleted.start);
                value_rows.push(None);
                inserted.push(false);
                if self.per_batch {
                    emitted_before.push(deleted.started_in < batch);
                }
            }
            row_groups.push(placed.session.group);
            key_rows.push(row as u32);
            starts.push(placed.session.start);
            value_rows.push(Some(row as u32));
            inserted.push(placed.set_start());
            if self.per_batch {
                emitted_before.push(false);
            }
        }
        let values = self.running_values(&row_groups, arguments, &bridges)?;
        if self.per_batch {
            let net = self.net_rows(&key_rows, &starts, &value_rows, &emitted_before);
            keep_rows(&mut key_rows, &net);
            keep_rows(&mut starts, &net);
            keep_rows(&mut value_rows, &net);
            // A net upsert inserts its (keys, start) if the batch set that start.
            inserted = key_rows
                .iter()
                .zip(&starts)
                .map(|(&row, &start)| {
                    let sessions = self.open.of_key(self.key_ids[row as usize]);
                    sessions
                        .binary_search_by_key(&start, |s| s.start)
                        .is_ok_and(|at| sessions[at].started_in == batch)
                })
                .collect();
        }
        let ops = value_rows
            .iter()
            .zip(&inserted)
            .map(|(value, &inserted)| match value {
                Some(_) => ChangeOp::of_upsert(inserted),
                None => ChangeOp::Delete,
            })
            .collect();
        let value_rows = UInt32Array::from(value_rows);
        let values = values
            .iter()
            .map(|v| Ok(take(v.as_ref(), &value_rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(SessionChangelog {
            key_rows: UInt32Array::from(key_rows),
            starts: Int64Array::from(starts),
            values,
            ops,
        })
    }

    /// The rows of a batch's per-record changelog that make its net effect, in order: each
    /// alive (key, start)'s last upsert, and the deletions of starts emitted before.
    fn net_rows(
        &self,
        key_rows: &[u32],
        starts: &[i64],
        value_rows: &[Option<u32>],
        emitted_before: &[bool],
    ) -> Vec<usize> {
        let mut seen = datafusion::common::HashSet::<(usize, i64)>::default();
        let mut net: Vec<usize> = (0..starts.len())
            .rev()
            .filter(|&i| {
                if value_rows[i].is_none() {
                    return emitted_before[i];
                }
                let key = self.key_ids[key_rows[i] as usize];
                let start = starts[i];
                let alive = self
                    .open
                    .of_key(key)
                    .binary_search_by_key(&start, |s| s.start)
                    .is_ok();
                alive && seen.insert((key, start))
            })
            .collect();
        net.reverse();
        net
    }

    /// Each row's running aggregates, folding sessions together at the bridges.
    fn running_values(
        &mut self,
        row_groups: &[usize],
        arguments: &[Vec<ArrayRef>],
        bridges: &[(usize, usize, usize)],
    ) -> Result<Vec<ArrayRef>> {
        let mut pieces: Vec<Vec<ArrayRef>> = Vec::new();
        let mut from_row = 0;
        let stretch = |this: &mut Self, from: usize, to: usize| -> Result<Vec<ArrayRef>> {
            let arguments: Vec<Vec<ArrayRef>> = arguments
                .iter()
                .map(|a| a.iter().map(|c| c.slice(from, to - from)).collect())
                .collect();
            this.running
                .update(&row_groups[from..to], this.open.groups(), &arguments)
        };
        for &(row, from, into) in bridges {
            if row > from_row {
                pieces.push(stretch(self, from_row, row)?);
            }
            self.running.merge_group(from, into);
            from_row = row;
        }
        if row_groups.len() > from_row || pieces.is_empty() {
            pieces.push(stretch(self, from_row, row_groups.len())?);
        }
        if pieces.len() == 1 {
            return Ok(pieces.pop().unwrap_or_default());
        }
        let Some(first) = pieces.first() else {
            return internal_err!("no running values");
        };
        (0..first.len())
            .map(|i| {
                let columns: Vec<&dyn datafusion::arrow::array::Array> =
                    pieces.iter().map(|p| p[i].as_ref()).collect();
                Ok(datafusion::arrow::compute::concat(&columns)?)
            })
            .collect()
    }

    /// Forgets the sessions `closed(last_event_time)` says are closed (their rows were
    /// emitted as they came), renumbering groups and forgetting keys when most are idle.
    pub fn close(&mut self, closed: impl Fn(i64) -> bool) -> Result<()> {
        self.open.close(closed);
        if self.open.groups_are_sparse() {
            let keep = self.open.renumber_groups();
            self.running.retain(&keep);
        }
        self.open.forget_idle_keys()
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.open.size() + self.running.size()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;

    #[test]
    fn keys_without_open_sessions_are_forgotten_and_come_back_afresh() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let count = Arc::new(
            AggregateExprBuilder::new(count_udaf(), vec![col("k", &schema).unwrap()])
                .schema(Arc::clone(&schema))
                .alias("n")
                .build()
                .unwrap(),
        );
        let running = RunningAggregates::plan(&[count], &[None], &schema).unwrap();
        let mut changes = SessionChanges::try_new(&schema, running, 1_000, false).unwrap();
        // 10 000 keys, one record each, 10 ms apart.
        let keys = 10_000;
        let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..keys));
        let times = Int64Array::from_iter_values((0..keys).map(|k| k * 10));
        changes
            .update(&[Arc::clone(&column)], &times, &[vec![column]])
            .unwrap();
        assert_eq!(changes.open.open(), keys as usize);
        // Every session closes but the last key's: the key table keeps that key alone.
        let newest = (keys - 1) * 10;
        changes.close(|last| last < newest).unwrap();
        assert_eq!(changes.open.open(), 1);
        // Key 0 comes back in a new session counted afresh; the last key's session goes on.
        let again: ArrayRef = Arc::new(Int64Array::from(vec![0, keys - 1, 0]));
        let times = Int64Array::from(vec![newest + 10; 3]);
        let log = changes
            .update(&[Arc::clone(&again)], &times, &[vec![again]])
            .unwrap();
        let counts = log.values[0].as_primitive::<Int64Type>();
        assert_eq!(counts.null_count(), 0);
        assert_eq!(counts.values().to_vec(), vec![1, 2, 2]);
        assert_eq!(changes.open.open(), 2);
    }
}
