//! [`OpenSessions`]: each key's open session windows, the bookkeeping shared by session
//! windows with EMIT FINAL and with EMIT CHANGES.
//!
//! A session is a key's run of records less than the gap apart. Each key keeps its open
//! sessions sorted by start; consecutive ones are at least the gap apart (else they would be
//! one). A record at time `t` touches a session when `start - gap < t < last + gap`, so it
//! touches at most the last two sessions starting before `t + gap`, found by binary search (in
//! time order, the key's last session): touching none, it opens a session; one, it extends
//! it (perhaps backwards); two, it bridges them into the earlier one. Every session owns an
//! aggregate group id, handed out densely; when a bridge folds a session away, its group is
//! folded into the kept one's by the caller.
//!
//! A session closes when the watermark passes its last event time plus the gap (and the
//! allowed lateness). Sessions wait in a min-heap of deadlines, pushed when a session opens
//! and checked lazily: a popped session that was extended meanwhile goes back with its new
//! last time, one that was bridged away is dropped. Closing costs the closed sessions, not the
//! open ones, however many keys are held.
//!
//! Group ids of closed sessions are not reused; [`OpenSessions::renumber_groups`] numbers the
//! open sessions `0..open` again (the caller moves their states the same way). Keys without
//! an open session are forgotten once they are most of the keys, so an endless stream of new
//! keys keeps only the keys of open sessions.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{interleave, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::GroupValues;

use crate::checkpoint::OperatorState;
use crate::kernels::new_group_values;

/// Past this many keys (or groups), with more dead than live, they are renumbered.
const COMPACT_AFTER: usize = 4_096;

/// One open session of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    pub start: i64,
    pub last: i64,
    pub group: usize,
    /// The batch in which `start` was set (for EMIT CHANGES per batch).
    pub started_in: u64,
}

/// Where a record went: its session after it, whether it opened that session, the session a
/// bridge folded into it, and the session as it was before the record moved its start back.
#[derive(Debug, Clone, Copy)]
pub struct Placed {
    pub session: Session,
    pub opened: bool,
    pub gone: Option<Session>,
    pub moved: Option<Session>,
}

impl Placed {
    /// The record set its session's start (opened it or moved its start back).
    pub fn set_start(&self) -> bool {
        self.opened || self.moved.is_some()
    }
}

/// The key values by key id, kept in the chunks of new keys each batch brought.
#[derive(Default)]
struct KeyValues {
    /// (first key id, key columns) per chunk, ascending.
    chunks: Vec<(usize, Vec<ArrayRef>)>,
}

impl KeyValues {
    fn push(&mut self, first_id: usize, columns: Vec<ArrayRef>) {
        if columns.first().is_some_and(|c| !c.is_empty()) {
            self.chunks.push((first_id, columns));
        }
    }

    /// The key columns of `ids`, in order.
    fn of(&self, ids: &[usize], columns: usize) -> Result<Vec<ArrayRef>> {
        let mut indices = Vec::with_capacity(ids.len());
        for &id in ids {
            let chunk = self.chunks.partition_point(|(first, _)| *first <= id);
            let Some(chunk) = chunk.checked_sub(1) else {
                return internal_err!("no key values for key {id}");
            };
            indices.push((chunk, id - self.chunks[chunk].0));
        }
        (0..columns)
            .map(|column| {
                let arrays: Vec<&dyn Array> = self
                    .chunks
                    .iter()
                    .map(|(_, c)| c[column].as_ref())
                    .collect();
                Ok(interleave(&arrays, &indices)?)
            })
            .collect()
    }

    fn size(&self) -> usize {
        self.chunks
            .iter()
            .flat_map(|(_, c)| c.iter().map(|a| a.get_array_memory_size()))
            .sum()
    }
}

/// See the module documentation.
pub struct OpenSessions {
    /// Interned GROUP BY keys; `None` without keys (one key).
    keys: Option<Box<dyn GroupValues>>,
    /// The key columns by key id, kept when asked for (to emit closed sessions' keys).
    key_values: Option<KeyValues>,
    key_columns: usize,
    /// Open sessions per key id, sorted by start.
    sessions: Vec<Vec<Session>>,
    /// (last event time, key, group) of every open session, perhaps stale.
    deadlines: BinaryHeap<Reverse<(i64, usize, usize)>>,
    gap: i64,
    /// Groups handed out (open and closed).
    groups: usize,
    open_sessions: usize,
    open_keys: usize,
    key_ids: Vec<usize>,
}

impl OpenSessions {
    /// For keys of `key_schema` (no fields: no keys), sessions cut at `gap`; with
    /// `keep_key_values`, the key values are kept for [`Self::key_values`].
    pub fn try_new(key_schema: &SchemaRef, gap: i64, keep_key_values: bool) -> Result<Self> {
        let keys = if key_schema.fields().is_empty() {
            None
        } else {
            Some(new_group_values(Arc::clone(key_schema))?)
        };
        Ok(Self {
            keys,
            key_values: keep_key_values.then(KeyValues::default),
            key_columns: key_schema.fields().len(),
            sessions: Vec::new(),
            deadlines: BinaryHeap::new(),
            gap,
            groups: 0,
            open_sessions: 0,
            open_keys: 0,
            key_ids: Vec::new(),
        })
    }

    /// Interns a batch's key columns (`rows` rows); returns each row's key id.
    pub fn intern(&mut self, keys: &[ArrayRef], rows: usize) -> Result<&[usize]> {
        let Some(values) = &mut self.keys else {
            self.key_ids.clear();
            self.key_ids.resize(rows, 0);
            return Ok(&self.key_ids);
        };
        let known = values.len();
        values.intern(keys, &mut self.key_ids)?;
        if let Some(store) = &mut self.key_values
            && values.len() > known
        {
            // New ids are numbered in order of their first row.
            let mut next = known;
            let mut first_rows = Vec::with_capacity(values.len() - known);
            for (row, &id) in self.key_ids.iter().enumerate() {
                if id == next {
                    first_rows.push(row as u32);
                    next += 1;
                }
            }
            let first_rows = UInt32Array::from(first_rows);
            let columns = keys
                .iter()
                .map(|k| Ok(take(k.as_ref(), &first_rows, None)?))
                .collect::<Result<Vec<_>>>()?;
            store.push(known, columns);
        }
        Ok(&self.key_ids)
    }

    /// The key columns of the key ids `ids` (kept only when asked for at creation).
    pub fn key_values(&self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        match (&self.keys, &self.key_values) {
            (None, _) => Ok(Vec::new()),
            (Some(_), Some(store)) => store.of(ids, self.key_columns),
            (Some(_), None) => internal_err!("session key values were not kept"),
        }
    }

    /// The open sessions of key `key`, sorted by start.
    pub fn of_key(&self, key: usize) -> &[Session] {
        self.sessions.get(key).map_or(&[], Vec::as_slice)
    }

    /// Groups handed out so far (the bound of every session's group id).
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.open_sessions
    }

    /// Places a record of key `key` at `time`, arriving in batch `batch`.
    #[inline]
    pub fn place(&mut self, key: usize, time: i64, batch: u64) -> Placed {
        // The usual case first: a record within the key's last session, at or after its
        // start, touches no other (the earlier ones end the gap before that start).
        if let Some(last) = self.sessions.get_mut(key).and_then(|s| s.last_mut())
            && time >= last.start
            && time < last.last.saturating_add(self.gap)
        {
            last.last = last.last.max(time);
            return Placed {
                session: *last,
                opened: false,
                gone: None,
                moved: None,
            };
        }
        self.place_slowly(key, time, batch)
    }

    fn place_slowly(&mut self, key: usize, time: i64, batch: u64) -> Placed {
        if key >= self.sessions.len() {
            self.sessions.resize_with(key + 1, Vec::new);
        }
        let gap = self.gap;
        let sessions = &mut self.sessions[key];
        // Sessions starting before `time + gap`; only the last two of them can touch it.
        let before = if sessions
            .last()
            .is_none_or(|s| s.start.saturating_sub(gap) < time)
        {
            sessions.len()
        } else {
            sessions.partition_point(|s| s.start.saturating_sub(gap) < time)
        };
        let touches = |s: &Session| time < s.last.saturating_add(gap);
        let later = before.checked_sub(1).filter(|&i| touches(&sessions[i]));
        // The earlier one touches only if the later does (they are the gap apart).
        let earlier = later
            .and_then(|i| i.checked_sub(1))
            .filter(|&i| touches(&sessions[i]));
        match (earlier, later) {
            (_, None) => {
                let session = Session {
                    start: time,
                    last: time,
                    group: self.groups,
                    started_in: batch,
                };
                self.groups += 1;
                self.open_sessions += 1;
                self.open_keys += usize::from(sessions.is_empty());
                sessions.insert(before, session);
                self.deadlines.push(Reverse((time, key, session.group)));
                Placed {
                    session,
                    opened: true,
                    gone: None,
                    moved: None,
                }
            }
            (None, Some(one)) => {
                let (session, moved) = extend(&mut sessions[one], time, batch);
                Placed {
                    session,
                    opened: false,
                    gone: None,
                    moved,
                }
            }
            (Some(earlier), Some(later)) => {
                let gone = sessions.remove(later);
                self.open_sessions -= 1;
                let kept = &mut sessions[earlier];
                kept.last = kept.last.max(gone.last);
                let (session, moved) = extend(kept, time, batch);
                Placed {
                    session,
                    opened: false,
                    gone: Some(gone),
                    moved,
                }
            }
        }
    }

    /// Takes out the sessions `closed(last_event_time)` says are closed (`closed` must hold
    /// for every time below one it holds for), with their key ids.
    pub fn close(&mut self, closed: impl Fn(i64) -> bool) -> Vec<(usize, Session)> {
        let mut out = Vec::new();
        while let Some(&Reverse((last, key, group))) = self.deadlines.peek() {
            if !closed(last) {
                break;
            }
            self.deadlines.pop();
            let sessions = &mut self.sessions[key];
            // Bridged into another session: gone already.
            let Some(at) = sessions.iter().position(|s| s.group == group) else {
                continue;
            };
            let session = sessions[at];
            if !closed(session.last) {
                self.deadlines
                    .push(Reverse((session.last, key, session.group)));
                continue;
            }
            sessions.remove(at);
            self.open_sessions -= 1;
            self.open_keys -= usize::from(sessions.is_empty());
            out.push((key, session));
        }
        out
    }

    /// Whether most group ids handed out belong to closed sessions (past a floor), so
    /// renumbering would pay.
    pub fn groups_are_sparse(&self) -> bool {
        self.groups > COMPACT_AFTER && self.groups > 2 * self.open_sessions
    }

    /// Numbers the open sessions' groups `0..open` (by key, then start); returns the old id
    /// of each new one.
    pub fn renumber_groups(&mut self) -> Vec<usize> {
        let mut old = Vec::with_capacity(self.open_sessions);
        for sessions in &mut self.sessions {
            for session in sessions.iter_mut() {
                old.push(session.group);
                session.group = old.len() - 1;
            }
        }
        self.groups = old.len();
        self.rebuild_deadlines();
        old
    }

    /// Forgets the keys without an open session when they are most of the keys (past a
    /// floor): the live keys are interned again as ids `0..live`, in their old order.
    pub fn forget_idle_keys(&mut self) -> Result<()> {
        if self.sessions.len() <= COMPACT_AFTER || self.sessions.len() <= 2 * self.open_keys {
            return Ok(());
        }
        let Some(keys) = &mut self.keys else {
            return Ok(());
        };
        let live: Vec<u32> = (0..self.sessions.len() as u32)
            .filter(|&key| !self.sessions[key as usize].is_empty())
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
        if let Some(store) = &mut self.key_values {
            *store = KeyValues::default();
            store.push(0, live_values);
        }
        let mut sessions = std::mem::take(&mut self.sessions);
        self.sessions = live
            .values()
            .iter()
            .map(|&key| std::mem::take(&mut sessions[key as usize]))
            .collect();
        self.rebuild_deadlines();
        Ok(())
    }

    /// One deadline per open session, after their keys or groups were renumbered.
    /// Puts the open sessions into a checkpoint's `state`: the keys (taken out of the key
    /// table and interned back, so their ids stay), every open session, and the counters.
    pub fn snapshot_into(&mut self, state: &mut OperatorState) -> Result<()> {
        if let Some(values) = &mut self.keys {
            let count = values.len();
            let keys = values.emit(EmitTo::All)?;
            values.clear_shrink(count);
            if count > 0 {
                let mut ids = Vec::with_capacity(count);
                values.intern(&keys, &mut ids)?;
            }
            state.put_value("session_keys", count as i64);
            for (index, key) in keys.into_iter().enumerate() {
                state.put_array(format!("session_key_{index:03}"), key);
            }
        }
        let sessions = self
            .sessions
            .iter()
            .enumerate()
            .flat_map(|(key, sessions)| sessions.iter().map(move |s| (key, *s)));
        let (mut keys, mut starts, mut lasts, mut groups, mut batches) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (key, session) in sessions {
            keys.push(key as u64);
            starts.push(session.start);
            lasts.push(session.last);
            groups.push(session.group as u64);
            batches.push(session.started_in);
        }
        state.put_array("session_key_id", Arc::new(UInt64Array::from(keys)));
        state.put_array("session_start", Arc::new(Int64Array::from(starts)));
        state.put_array("session_last", Arc::new(Int64Array::from(lasts)));
        state.put_array("session_group", Arc::new(UInt64Array::from(groups)));
        state.put_array("session_started_in", Arc::new(UInt64Array::from(batches)));
        state.put_value("session_groups", self.groups as i64);
        state.put_value("session_key_count", self.sessions.len() as i64);
        Ok(())
    }

    /// Takes back the open sessions [`Self::snapshot_into`] kept.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<()> {
        if let Some(values) = &mut self.keys {
            let keys = state.arrays_with_prefix("session_key_0");
            let count = state.value("session_keys")? as usize;
            if count > 0 {
                let mut ids = Vec::with_capacity(count);
                values.intern(&keys, &mut ids)?;
                if let Some(store) = &mut self.key_values {
                    store.push(0, keys);
                }
            }
        }
        let column = |name: &str| -> Result<Vec<i64>> {
            let array = state.array(name)?;
            Ok(match array.data_type() {
                datafusion::arrow::datatypes::DataType::UInt64 => array
                    .as_primitive::<UInt64Type>()
                    .values()
                    .iter()
                    .map(|v| *v as i64)
                    .collect(),
                _ => array.as_primitive::<Int64Type>().values().to_vec(),
            })
        };
        let (keys, starts, lasts) = (
            column("session_key_id")?,
            column("session_start")?,
            column("session_last")?,
        );
        let (groups, batches) = (column("session_group")?, column("session_started_in")?);
        self.sessions = vec![Vec::new(); state.value("session_key_count")? as usize];
        for row in 0..keys.len() {
            let Some(sessions) = self.sessions.get_mut(keys[row] as usize) else {
                return internal_err!("checkpoint: a session of an unknown key");
            };
            sessions.push(Session {
                start: starts[row],
                last: lasts[row],
                group: groups[row] as usize,
                started_in: batches[row] as u64,
            });
        }
        self.groups = state.value("session_groups")? as usize;
        self.open_sessions = keys.len();
        self.open_keys = self.sessions.iter().filter(|s| !s.is_empty()).count();
        self.rebuild_deadlines();
        Ok(())
    }

    fn rebuild_deadlines(&mut self) {
        self.deadlines = self
            .sessions
            .iter()
            .enumerate()
            .flat_map(|(key, sessions)| {
                sessions
                    .iter()
                    .map(move |s| Reverse((s.last, key, s.group)))
            })
            .collect();
    }

    /// Bytes held. The open sessions are counted, not their keys' vectors measured: this is
    /// asked after every batch, and a pass over every key made a stream of many keys
    /// quadratic.
    pub fn size(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.size())
            + self.key_values.as_ref().map_or(0, KeyValues::size)
            + self.deadlines.capacity() * std::mem::size_of::<(i64, usize, usize)>()
            + self.key_ids.capacity() * std::mem::size_of::<usize>()
            + self.sessions.capacity() * std::mem::size_of::<Vec<Session>>()
            + self.open_sessions * std::mem::size_of::<Session>()
    }
}

/// Extends `session` to `time`; returns it after, and before if its start moved back.
fn extend(session: &mut Session, time: i64, batch: u64) -> (Session, Option<Session>) {
    let moved = (time < session.start).then_some(*session);
    if moved.is_some() {
        session.start = time;
        session.started_in = batch;
    }
    session.last = session.last.max(time);
    (*session, moved)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    fn sessions(keep_values: bool) -> OpenSessions {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        OpenSessions::try_new(&schema, 1_000, keep_values).unwrap()
    }

    #[test]
    fn a_record_touching_two_sessions_bridges_them_into_the_earlier() {
        let mut open = sessions(false);
        let first = open.place(0, 0, 1);
        let second = open.place(0, 1_500, 1);
        assert!(first.set_start() && second.set_start());
        assert_eq!(open.of_key(0).len(), 2);
        let bridge = open.place(0, 800, 2);
        assert_eq!(bridge.gone.map(|s| s.group), Some(second.session.group));
        assert_eq!((bridge.session.start, bridge.session.last), (0, 1_500));
        assert!(!bridge.set_start());
        // Before the start, within the gap: the start moves back.
        let back = open.place(0, -900, 3);
        assert_eq!(back.moved.map(|s| s.start), Some(0));
        assert_eq!(
            open.of_key(0),
            &[Session {
                start: -900,
                last: 1_500,
                group: 0,
                started_in: 3
            }]
        );
    }

    #[test]
    fn sessions_close_by_their_last_record_not_by_their_first() {
        let mut open = sessions(false);
        open.place(0, 0, 1);
        open.place(1, 100, 1);
        // Key 0's session goes on; its deadline entry (0) is stale.
        open.place(0, 900, 1);
        let closed = open.close(|last| last + 1_000 <= 1_200);
        assert_eq!(
            closed
                .iter()
                .map(|(k, s)| (*k, s.start))
                .collect::<Vec<_>>(),
            [(1, 100)]
        );
        let closed = open.close(|last| last + 1_000 <= 1_900);
        assert_eq!(
            closed
                .iter()
                .map(|(k, s)| (*k, s.start))
                .collect::<Vec<_>>(),
            [(0, 0)]
        );
        assert_eq!(open.open(), 0);
    }

    #[test]
    fn the_size_counts_the_open_sessions() {
        let mut open = sessions(false);
        let empty = open.size();
        for key in 0..100 {
            open.place(key, key as i64 * 5_000, 1);
            open.place(key, key as i64 * 5_000 + 2_000, 1);
        }
        let session = std::mem::size_of::<Session>();
        let two_hundred = open.size();
        assert!(two_hundred >= empty + 200 * session, "{two_hundred}");
        assert_eq!(open.close(|last| last < 250_000).len(), 100);
        assert_eq!(open.size(), two_hundred - 100 * session);
    }

    #[test]
    fn idle_keys_are_forgotten_and_the_key_values_follow() {
        let mut open = sessions(true);
        let keys = 10_000;
        let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..keys));
        let ids = open.intern(&[column], keys as usize).unwrap().to_vec();
        for (id, k) in ids.iter().zip(0..keys) {
            open.place(*id, k * 10, 1);
        }
        let newest = (keys - 1) * 10;
        assert_eq!(open.close(|last| last < newest).len(), keys as usize - 1);
        open.forget_idle_keys().unwrap();
        assert_eq!(open.sessions.len(), 1);
        let values = open.key_values(&[0]).unwrap();
        assert_eq!(values[0].as_primitive::<Int64Type>().value(0), keys - 1);
        assert_eq!(open.renumber_groups(), [keys as usize - 1]);
        let closed = open.close(|_| true);
        assert_eq!(
            closed,
            [(
                0,
                Session {
                    start: newest,
                    last: newest,
                    group: 0,
                    started_in: 1
                }
            )]
        );
    }
}
