//! [`SessionChanges`]: EMIT CHANGES over session windows, one changelog row per record.
//!
//! Each key keeps its open sessions (first and last event time, and a running-aggregate
//! group), sorted by start. A batch's keys are interned at once; then its rows are walked in
//! arrival order: a record within the gap of no session opens one; within the gap of one it
//! extends it (perhaps backwards: an out-of-order record before the session's start); within
//! the gap of two (the one before and the one after) it bridges them into one. The rows'
//! aggregates come from the [`RunningAggregates`] kernels, run over stretches of the batch
//! between bridges; at a bridge, the later session's running state is merged into the
//! earlier one's.
//!
//! The output is an upsert changelog keyed by (GROUP BY keys, `window_start`): one row per
//! record with its session's aggregates including it, and, when a session's start changes
//! (it is bridged into an earlier one, or extended backwards), a row for the old
//! (keys, start) whose aggregates are all NULL: a deletion. A session leaves the state when
//! the watermark passes its last event time plus the gap (and the allowed lateness); when
//! most keys have no open session left, the key table is rebuilt from the keys that have one.
//!
//! Per batch (`freshet.changes_per = 'batch'`) the batch's per-record changelog is reduced to
//! its net effect: for each (keys, start) alive after the batch, its last row (which holds
//! the session's aggregates after the batch); for each (keys, start) that existed before the
//! batch and not after it, its deletion. A start set and given up within one batch was never
//! emitted, so it needs no deletion: each session remembers the batch in which its start
//! was set.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::GroupValues;

use crate::changelog::ChangeOp;
use crate::kernels::{RunningAggregates, new_group_values};

/// Open sessions kept before their groups are renumbered: past this many groups, and more
/// dead than live, the running state is compacted.
const COMPACT_AFTER: usize = 4_096;

#[derive(Debug, Clone, Copy)]
struct Session {
    start: i64,
    last: i64,
    group: usize,
    /// The batch in which `start` was set: a start set by an earlier batch was emitted.
    started_in: u64,
}

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
    /// Interned GROUP BY keys; `None` without keys (one key).
    keys: Option<Box<dyn GroupValues>>,
    /// Open sessions per key id, sorted by start.
    sessions: Vec<Vec<Session>>,
    running: RunningAggregates,
    /// Groups handed out (live and dead).
    groups: usize,
    gap: i64,
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
        let keys = if key_schema.fields().is_empty() {
            None
        } else {
            Some(new_group_values(Arc::clone(key_schema))?)
        };
        Ok(Self {
            keys,
            sessions: Vec::new(),
            running,
            groups: 0,
            gap,
            key_ids: Vec::new(),
            per_batch,
            batches: 0,
        })
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
        match &mut self.keys {
            Some(values) => values.intern(keys, &mut self.key_ids)?,
            None => {
                self.key_ids.clear();
                self.key_ids.resize(rows, 0);
            }
        }
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
            if key >= self.sessions.len() {
                self.sessions.resize(key + 1, Vec::new());
            }
            let sessions = &mut self.sessions[key];
            let gap = self.gap;
            let touching: Vec<usize> = sessions
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    time > s.start.saturating_sub(gap) && time < s.last.saturating_add(gap)
                })
                .map(|(i, _)| i)
                .collect();
            let mut deleted = Vec::new();
            let start_set = match touching.as_slice() {
                [] => true,
                [one] => time < sessions[*one].start,
                [earlier, ..] => time < sessions[*earlier].start,
            };
            let session = match touching.as_slice() {
                [] => {
                    let session = Session {
                        start: time,
                        last: time,
                        group: self.groups,
                        started_in: batch,
                    };
                    self.groups += 1;
                    let at = sessions.partition_point(|s| s.start < time);
                    sessions.insert(at, session);
                    session
                }
                [one] => {
                    let session = &mut sessions[*one];
                    if time < session.start {
                        deleted.push((session.start, session.started_in < batch));
                        session.start = time;
                        session.started_in = batch;
                    }
                    session.last = session.last.max(time);
                    *session
                }
                [earlier, later, ..] => {
                    let (earlier, later) = (*earlier, *later);
                    let gone = sessions.remove(later);
                    let kept = &mut sessions[earlier];
                    deleted.push((gone.start, gone.started_in < batch));
                    if time < kept.start {
                        deleted.push((kept.start, kept.started_in < batch));
                        kept.start = time;
                        kept.started_in = batch;
                    }
                    kept.last = kept.last.max(gone.last).max(time);
                    bridges.push((row, gone.group, kept.group));
                    *kept
                }
            };
            for (start, before) in deleted {
                key_rows.push(row as u32);
                starts.push(start);
                value_rows.push(None);
                inserted.push(false);
                if self.per_batch {
                    emitted_before.push(before);
                }
            }
            row_groups.push(session.group);
            key_rows.push(row as u32);
            starts.push(session.start);
            value_rows.push(Some(row as u32));
            inserted.push(start_set);
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
                    let sessions = &self.sessions[self.key_ids[row as usize]];
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
                let alive = self.sessions[key]
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
                .update(&row_groups[from..to], this.groups, &arguments)
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

    /// Forgets the sessions `closed(last_event_time)` says are closed, and the keys left
    /// without one when they are most of the keys.
    pub fn close(&mut self, closed: impl Fn(i64) -> bool) -> Result<()> {
        let (mut live, mut live_keys) = (0, 0);
        for sessions in &mut self.sessions {
            sessions.retain(|s| !closed(s.last));
            live += sessions.len();
            live_keys += usize::from(!sessions.is_empty());
        }
        if self.groups > COMPACT_AFTER && self.groups > 2 * live {
            self.compact();
        }
        if self.sessions.len() > COMPACT_AFTER && self.sessions.len() > 2 * live_keys {
            self.compact_keys()?;
        }
        Ok(())
    }

    /// Re-interns only the keys with an open session (ids `0..live` in their old order), so
    /// an endless stream of new keys does not grow the key table without bound.
    fn compact_keys(&mut self) -> Result<()> {
        let Some(keys) = &mut self.keys else {
            return Ok(());
        };
        let live: Vec<u32> = (0..self.sessions.len() as u32)
            .filter(|&key| {
                self.sessions
                    .get(key as usize)
                    .is_some_and(|s| !s.is_empty())
            })
            .collect();
        // Emitting every group gives the key values by id and empties the table.
        let values = keys.emit(EmitTo::All)?;
        let live = UInt32Array::from(live);
        let live_values = values
            .iter()
            .map(|column| Ok(take(column.as_ref(), &live, None)?))
            .collect::<Result<Vec<_>>>()?;
        let mut ids = Vec::new();
        keys.intern(&live_values, &mut ids)?;
        if !ids.iter().enumerate().all(|(row, &id)| row == id) {
            return internal_err!("re-interned session keys were not numbered in order");
        }
        let mut sessions = std::mem::take(&mut self.sessions);
        self.sessions = live
            .values()
            .iter()
            .map(|&key| {
                sessions
                    .get_mut(key as usize)
                    .map(std::mem::take)
                    .unwrap_or_default()
            })
            .collect();
        Ok(())
    }

    /// Renumbers the live sessions' groups `0..live`, dropping the dead ones' state.
    fn compact(&mut self) {
        let mut keep = Vec::new();
        for sessions in &mut self.sessions {
            for session in sessions.iter_mut() {
                keep.push(session.group);
                session.group = keep.len() - 1;
            }
        }
        self.running.retain(&keep);
        self.groups = keep.len();
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.size())
            + self.running.size()
            + self
                .sessions
                .iter()
                .map(|s| s.capacity() * std::mem::size_of::<Session>())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(changes.sessions.len(), keys as usize);
        // Every session closes but the last key's: the key table keeps that key alone.
        let newest = (keys - 1) * 10;
        changes.close(|last| last < newest).unwrap();
        assert_eq!(changes.sessions.len(), 1);
        // Key 0 comes back in a new session counted afresh; the last key's session goes on.
        let again: ArrayRef = Arc::new(Int64Array::from(vec![0, keys - 1, 0]));
        let times = Int64Array::from(vec![newest + 10; 3]);
        let log = changes
            .update(&[Arc::clone(&again)], &times, &[vec![again]])
            .unwrap();
        let counts = log.values[0].as_primitive::<Int64Type>();
        assert_eq!(counts.null_count(), 0);
        assert_eq!(counts.values().to_vec(), vec![1, 2, 2]);
        assert_eq!(changes.sessions.len(), 2);
    }
}
