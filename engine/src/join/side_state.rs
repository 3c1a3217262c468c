//! [`SideState`]: the rows one side of an interval join keeps for the other side to match.
//!
//! Rows are kept as the batches they came in ("chunks", each with its event times, its key
//! columns and, for a side whose unmatched rows are emitted, a matched flag per
//! row) in arrival order. A hash index maps each key's hash to its rows as `(chunk, row)`
//! positions. A watermark of the other side frees rows whose time bound it has passed: whole
//! chunks go once every row of theirs is free.
//!
//! Each key's index entries are kept in event-time order (arrival order, with the few rows
//! that arrive out of order moved into place), so that a probe reads only the entries within
//! its time bound: a search for the first (stepping on from where the key's last probe began,
//! as probes come nearly in time order), then a scan to the last. Keys with few
//! distinct values and many rows per key (ten symbols of a market feed) would otherwise
//! compare every kept row of the key; a key of one live row or none (most keys of a join on
//! an id) is read without the cursor. Freed rows' entries are cut from the front of a key's
//! entries when the key is probed, and from every key when they outnumber the live rows.
//!
//! A join on one integer key (an id) indexes its rows by value in an array over the key
//! range instead of by hash ([`KeyIndex`]): the rows a probe finds in its value's slot hold
//! its key and need no key comparison.
//!
//! A chunk enters the index only once probing rows have reached it often enough to pay for
//! it; until then the probes scan it. Indexing costs a hash table insert per kept row once;
//! a scan by one probing row a comparison per kept row, and a scan by a whole batch one
//! lookup per kept row in a table of the batch's key hashes (as dear as about
//! [`BATCH_SCAN_ROWS`] single-row scans). A chunk is indexed once its scans have cost more
//! than [`SCANS_BEFORE_INDEX`] single-row scans: a side probed by a few rows at a time
//! (Nexmark q7: one maximum per window against every bid of the window) never pays for an
//! index of rows that meet one probe, and a side that batch after batch reaches is indexed
//! after a few. A probing batch reaches a chunk whose time range meets the batch's, and for
//! one integer key whose key range (the smallest and largest value) holds some of the
//! batch's values: a join on an id whose rows name recent ids (the bids of the auctions in
//! flight) reaches only the recent chunks of the other side, and the chunks no probe reaches
//! are never indexed. The two sides of a join usually take turns, each a batch ahead of the
//! other side's watermark: the rows of the side that comes second are kept for later probes,
//! but those probes come from later times (or later ids), and the rows are freed by the next
//! watermark (or stay to the end) without ever being indexed.

use std::collections::VecDeque;

use datafusion::arrow::array::{Array, ArrayRef, BooleanBufferBuilder, Int64Array};
use datafusion::arrow::record_batch::RecordBatch;

use super::key_index::{Entry, KeyIndex, Probed};
use super::{integer_values, rows_by_group};
use crate::kernels::PrehashedMap;
use crate::watermark::time_range;

/// Single-row scans of a kept chunk before it enters the index. A scan costs about a
/// nanosecond a kept row, an index entry about a hundred (its share of q7's time when every
/// bid was indexed), so a chunk is scanned by at most about as many rows as pay for its
/// index.
const SCANS_BEFORE_INDEX: usize = 64;

/// Single-row scans of a kept chunk before it enters a dense index ([`KeyIndex`] by value),
/// whose entry is an array write: a few nanoseconds, about as much as a few single-row
/// scans, or a batch scan's lookup of the row.
const SCANS_BEFORE_DENSE_INDEX: usize = BATCH_SCAN_ROWS;

/// Probing rows from which a batch scans a chunk once, looking each kept row's hash up in a
/// table of the batch's, instead of row by row; what such a scan counts toward
/// [`SCANS_BEFORE_INDEX`] (a lookup costs a few single-row comparisons).
const BATCH_SCAN_ROWS: usize = 8;

/// Probing rows whose values [`SideState::prepare_probes`] may read per chunk it counts them
/// for, in proportion to the batch: beyond, a chunk whose key range holds part of the
/// batch's counts every row.
const KEY_COUNTS_PER_BATCH: usize = 4;

/// One batch of kept rows.
pub(super) struct Chunk {
    pub batch: RecordBatch,
    /// Where each row's reach ends (its event time, or the side's until column): the time
    /// by which rows are ordered, probed and freed.
    pub times: Int64Array,
    /// The join key columns (none without equality keys).
    pub keys: Vec<ArrayRef>,
    /// Whether each row has found a match (or was emitted unmatched already); only for a
    /// side whose unmatched rows are emitted.
    pub matched: Option<BooleanBufferBuilder>,
    /// The largest event time of the chunk: once it is free, the whole chunk is.
    pub max_time: i64,
    pub min_time: i64,
    /// The smallest event time of the chunk's rows (its `min_time` without an until column).
    pub earliest_event_time: i64,
    /// The largest event time of the chunk's rows: a kept row's own time, checked against
    /// a probing row's limit, is within it for every row of a chunk whose latest is.
    pub latest_event_time: i64,
    /// Each row's event time, for a side with an until column (where `times` are the until
    /// values): a probe checks the other end of the bound against them.
    pub event_times: Option<Int64Array>,
}

/// A row of the state: chunk sequence number and row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    pub chunk: u64,
    pub row: u32,
}

/// See the module documentation.
pub(super) struct SideState {
    /// Chunk `first + i` is `chunks[i]`; `None` once freed.
    chunks: VecDeque<Option<Chunk>>,
    first: u64,
    /// Per key, the entries in event-time order.
    index: KeyIndex,
    /// The chunks not in the index yet, oldest first.
    unindexed: VecDeque<Unindexed>,
    /// The rows of the batch being probed by hash, where it scans chunks as a whole.
    probe_table: Option<ProbeTable>,
    /// Rows at or before this event time are freed.
    freed_through: i64,
    /// Index entries, live or not; rows held by live chunks.
    entries: usize,
    live_rows: usize,
    bytes: usize,
}

impl Default for SideState {
    fn default() -> Self {
        Self {
            chunks: VecDeque::new(),
            first: 0,
            index: KeyIndex::default(),
            unindexed: VecDeque::new(),
            probe_table: None,
            freed_through: i64::MIN,
            entries: 0,
            live_rows: 0,
            bytes: 0,
        }
    }
}

impl SideState {
    /// State for rows of one integer key column, indexed by value where the values are dense
    /// (see the module documentation).
    pub fn with_integer_key() -> Self {
        Self {
            index: KeyIndex::new(true),
            ..Self::default()
        }
    }

    /// Whether probes should give their key's integer value ([`Self::probe`]).
    pub fn wants_key_values(&self) -> bool {
        self.index.by_value()
    }

    /// Keeps `chunk`, whose rows have key hashes `hashes`; it enters the index once enough
    /// probing rows reach its times ([`Self::prepare_probes`]).
    pub fn insert(&mut self, chunk: Chunk, hashes: Vec<u64>) {
        let sequence = self.first + self.chunks.len() as u64;
        let key_range = match chunk.keys.as_slice() {
            [key] if self.index.by_value() => integer_values(key)
                .ok()
                .flatten()
                .map(|values| time_range(&values).unwrap_or(EMPTY_RANGE)),
            _ => None,
        };
        self.unindexed.push_back(Unindexed {
            sequence,
            min_time: chunk.min_time,
            max_time: chunk.max_time,
            key_range,
            hashes,
            scan_cost: 0,
            reaching: 0,
        });
        self.live_rows += chunk.batch.num_rows();
        self.bytes += chunk.batch.get_array_memory_size() + keys_size(&chunk.keys);
        self.chunks.push_back(Some(chunk));
    }

    /// Readies the state for a batch of probes of times in `[from, to]`: finds the unindexed
    /// chunks the batch reaches and how many of its rows reach each, and indexes those whose
    /// scans would have cost more than [`SCANS_BEFORE_INDEX`] single-row scans.
    /// [`Self::probe_batch`] scans the others for the same batch.
    pub fn prepare_probes(&mut self, from: i64, to: i64, probing: &ProbingRows) {
        let probe_rows = probing.rows.len();
        let values = probing.values;
        let probe_range = values.map(|values| time_range(values).unwrap_or(EMPTY_RANGE));
        let mut counts_left = values.map_or(0, |v| v.len() * KEY_COUNTS_PER_BATCH);
        for chunk in self.unindexed.iter_mut() {
            chunk.reaching = 0;
            if chunk.max_time < from || chunk.min_time > to {
                continue;
            }
            chunk.reaching = match (chunk.key_range, probe_range, values) {
                (Some((low, high)), Some((first, last)), Some(values)) => {
                    if high < first || low > last {
                        0
                    } else if low <= first && last <= high {
                        probe_rows
                    } else if counts_left >= values.len() {
                        counts_left -= values.len();
                        let within = |v: &i64| (low..=high).contains(v);
                        values.iter().flatten().filter(within).count()
                    } else {
                        probe_rows
                    }
                }
                _ => probe_rows,
            };
        }
        // A batch scan looks each kept row up among the batch's hashes; where the batch's
        // rows share few hashes (ten symbols), each lookup finds many rows to check, and the
        // batch costs as many single-row scans as it has rows. A dense index costs no more
        // than that table: a chunk that a batch scan would read enters it instead.
        self.probe_table = None;
        let dense = self.index.dense_open();
        if !dense && self.unindexed.iter().any(|c| c.reaching > BATCH_SCAN_ROWS) {
            let table = ProbeTable::new(probing);
            if table.heads.len() * 2 >= probe_rows {
                self.probe_table = Some(table);
            }
        }
        let batch_scans = self.probe_table.is_some();
        let scans_before_index = match dense {
            true => SCANS_BEFORE_DENSE_INDEX,
            false => SCANS_BEFORE_INDEX,
        };
        let mut to_index = false;
        for chunk in self.unindexed.iter_mut().filter(|c| c.reaching > 0) {
            chunk.scan_cost += match batch_scans {
                true => chunk.reaching.min(BATCH_SCAN_ROWS),
                false => chunk.reaching,
            };
            to_index |= chunk.scan_cost > scans_before_index;
        }
        if !to_index {
            return;
        }
        let (reached, kept): (Vec<Unindexed>, Vec<Unindexed>) = self
            .unindexed
            .drain(..)
            .partition(|chunk| chunk.reaching > 0 && chunk.scan_cost > scans_before_index);
        self.unindexed = kept.into();
        for chunk in reached {
            self.index_chunk(chunk);
        }
    }

    /// Appends to `out` the rows of the unindexed chunks the last [`Self::prepare_probes`]
    /// (for the same `probing` rows) found reached whose key hashes to the hash of a probing
    /// row and whose time lies within that row's `reach`, as `(probing row, kept row)` in the
    /// order of the probing rows, and for each in arrival order. A few probing rows scan a
    /// chunk row by row, more once, with a table of their hashes.
    fn scan_unindexed(
        &self,
        probing: &ProbingRows,
        reach: impl Fn(usize) -> (i64, i64),
        out: &mut Vec<(u32, Position)>,
    ) {
        let freed_through = self.freed_through;
        let appended_from = out.len();
        let ProbingRows {
            rows,
            hashes,
            values,
        } = *probing;
        for chunk in self.unindexed.iter().filter(|chunk| chunk.reaching > 0) {
            let Some(kept) = self.chunk(chunk.sequence) else {
                continue;
            };
            let times = kept.times.values();
            let table = match &self.probe_table {
                Some(table) if chunk.reaching > BATCH_SCAN_ROWS => table,
                _ => {
                    for &row in rows {
                        let row_index = row as usize;
                        if let (Some((low, high)), Some(values)) = (chunk.key_range, values)
                            && (values.is_null(row_index)
                                || !(low..=high).contains(&values.value(row_index)))
                        {
                            continue;
                        }
                        let (from, to) = reach(row_index);
                        let from = from.max(freed_through.saturating_add(1));
                        if chunk.max_time < from || chunk.min_time > to {
                            continue;
                        }
                        let hash = hashes[row_index];
                        let kept_rows = chunk.hashes.iter().zip(times).enumerate();
                        for (at, (&kept_hash, &time)) in kept_rows {
                            if kept_hash == hash && time >= from && time <= to {
                                out.push((row, position(chunk.sequence, at)));
                            }
                        }
                    }
                    continue;
                }
            };
            for (at, (&kept_hash, &time)) in chunk.hashes.iter().zip(times).enumerate() {
                if time <= freed_through {
                    continue;
                }
                let Some(&head) = table.heads.get(&kept_hash) else {
                    continue;
                };
                let mut probing = head;
                while probing != u32::MAX {
                    let row = rows[probing as usize];
                    let (from, to) = reach(row as usize);
                    if time >= from && time <= to {
                        out.push((row, position(chunk.sequence, at)));
                    }
                    probing = table.next[probing as usize];
                }
            }
        }
        order_by_probing_row(&mut out[appended_from..]);
    }

    fn index_chunk(&mut self, chunk: Unindexed) {
        let slot = chunk.sequence.checked_sub(self.first);
        let Some(Some(kept)) = slot.and_then(|slot| self.chunks.get(slot as usize)) else {
            return;
        };
        let times = kept.times.values();
        // A dense index reads each row's value (none for a null key, which goes by hash and
        // matches nothing).
        let values = match kept.keys.as_slice() {
            [key] if self.index.by_value() => integer_values(key).ok().flatten(),
            _ => None,
        };
        let value = |row: usize| {
            values
                .as_ref()
                .and_then(|v| v.is_valid(row).then(|| v.value(row)))
        };
        for (row, (&hash, &time)) in chunk.hashes.iter().zip(times).enumerate() {
            let position = position(chunk.sequence, row);
            self.index
                .insert(hash, value(row), Entry { time, position });
        }
        self.entries += chunk.hashes.len();
    }

    /// Finds the kept rows each probing row reaches: the indexed rows whose key is the
    /// row's (by value, in a dense index) or hashes to the row's hash, with a time within
    /// its `reach` (first cutting the freed rows' entries from the front of the key's), and
    /// the rows the last [`Self::prepare_probes`] (for the same `probing` rows) left to scan.
    /// Appends them to `found` per probing row in order: its indexed rows in time order,
    /// then its scanned ones in arrival order.
    pub fn probe_batch(
        &mut self,
        probing: &ProbingRows,
        reach: impl Fn(usize) -> (i64, i64),
        found: &mut Found,
    ) {
        let mut scanned = Vec::new();
        self.scan_unindexed(probing, &reach, &mut scanned);
        let mut scanned = scanned.into_iter().peekable();
        let freed_through = self.freed_through;
        let ProbingRows {
            rows,
            hashes,
            values,
        } = *probing;
        for &row in rows {
            let row_index = row as usize;
            let (from, to) = reach(row_index);
            let value = values.and_then(|v| v.is_valid(row_index).then(|| v.value(row_index)));
            if let Some((key, by_value)) = self.index.probe(hashes[row_index], value) {
                // Most keys of a join on an id hold one live row or none: no cursor to step.
                let one = match &key {
                    Probed::One(entry) => Some(*entry),
                    Probed::Many(key) => key.only_entry(),
                };
                match (one, key) {
                    (Some(entry), _) if entry.time > freed_through => {
                        if entry.time >= from && entry.time <= to {
                            found.push(row, entry.position, !by_value);
                        }
                    }
                    (_, Probed::One(_)) => {}
                    (_, Probed::Many(key)) if key.entries.is_empty() => {}
                    (_, Probed::Many(key)) => {
                        self.entries -= key.free_through(freed_through);
                        let start = key.seek(from);
                        for entry in key.entries[start..].iter().take_while(|e| e.time <= to) {
                            found.push(row, entry.position, !by_value);
                        }
                    }
                }
            }
            while let Some((_, position)) = scanned.next_if(|(probing, _)| *probing == row) {
                found.push(row, position, true);
            }
        }
    }

    /// Whether a live row may have a time in `[from, to]`: what [`Self::probe_batch`] can find is
    /// within the held chunks' time ranges.
    pub fn holds_rows_within(&self, from: i64, to: i64) -> bool {
        let from = from.max(self.freed_through.saturating_add(1));
        self.chunks
            .iter()
            .flatten()
            .any(|chunk| chunk.max_time >= from && chunk.min_time <= to)
    }

    /// The sequence number of the oldest chunk still held (or of the next one).
    pub fn first_sequence(&self) -> u64 {
        self.first
    }

    pub fn chunk(&self, sequence: u64) -> Option<&Chunk> {
        let slot = sequence.checked_sub(self.first)?;
        self.chunks.get(slot as usize)?.as_ref()
    }

    pub fn chunk_mut(&mut self, sequence: u64) -> Option<&mut Chunk> {
        let slot = sequence.checked_sub(self.first)?;
        self.chunks.get_mut(slot as usize)?.as_mut()
    }

    /// The live chunks with their sequence numbers.
    pub fn live_chunks(&mut self) -> impl Iterator<Item = (u64, &mut Chunk)> {
        let first = self.first;
        self.chunks
            .iter_mut()
            .enumerate()
            .filter_map(move |(slot, chunk)| Some((first + slot as u64, chunk.as_mut()?)))
    }

    /// The live chunks, oldest first: what a checkpoint keeps.
    pub fn held_chunks(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.iter().flatten()
    }

    /// Rows at or before this time are freed (though their chunks may still be held).
    pub fn freed_through(&self) -> i64 {
        self.freed_through
    }

    /// Takes back what a checkpoint kept: the chunks [`Self::held_chunks`] listed, with their
    /// rows' key hashes, and the time rows were freed through.
    pub fn restore(&mut self, chunks: Vec<(Chunk, Vec<u64>)>, freed_through: i64) {
        *self = match self.index.by_value() {
            true => Self::with_integer_key(),
            false => Self::default(),
        };
        for (chunk, hashes) in chunks {
            self.insert(chunk, hashes);
        }
        self.freed_through = freed_through;
    }

    /// The smallest event time of the rows held (`i64::MAX` when none).
    pub fn earliest_event_time(&self) -> i64 {
        self.chunks
            .iter()
            .flatten()
            .map(|chunk| chunk.earliest_event_time)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Frees the rows at or below `free_through` in event time: whole chunks once all their
    /// rows are.
    pub fn free_through(&mut self, free_through: i64) {
        self.freed_through = self.freed_through.max(free_through);
        for slot in self.chunks.iter_mut() {
            if let Some(chunk) = slot.take_if(|c| c.max_time <= free_through) {
                self.live_rows -= chunk.batch.num_rows();
                self.bytes -= chunk.batch.get_array_memory_size() + keys_size(&chunk.keys);
            }
        }
        self.unindexed.retain(|chunk| chunk.max_time > free_through);
        while matches!(self.chunks.front(), Some(None)) {
            self.chunks.pop_front();
            self.first += 1;
        }
        if self.live_rows == 0 {
            // Everything freed (an input's end): no key's entries need reading.
            self.index.clear();
            self.entries = 0;
        } else if self.entries > 1024 && self.entries > 2 * self.live_rows {
            self.sweep_index();
        }
    }

    /// Drops the entries of freed rows from every key.
    fn sweep_index(&mut self) {
        self.entries = self.index.sweep(self.freed_through);
    }

    /// Bytes held (batches and keys; the index is counted by entry, and by hash for the
    /// rows not in it yet).
    pub fn size(&self) -> usize {
        let unindexed: usize = self.unindexed.iter().map(|c| c.hashes.len()).sum();
        self.bytes
            + self.index.dense_size()
            + self.entries * std::mem::size_of::<Entry>()
            + unindexed * std::mem::size_of::<u64>()
    }
}

/// A batch's probing rows: their row numbers, every row's key hash and, where the state
/// [`SideState::wants_key_values`], every row's integer key value.
#[derive(Clone, Copy)]
pub(super) struct ProbingRows<'a> {
    pub rows: &'a [u32],
    pub hashes: &'a [u64],
    pub values: Option<&'a Int64Array>,
}

/// The pairs a probing batch found: probing rows beside the kept rows they reach.
#[derive(Default)]
pub(super) struct Found {
    pub probe: Vec<u32>,
    pub kept: Vec<Position>,
    /// The pairs (positions in `probe` and `kept`, ascending) whose keys may differ: found
    /// by a hash that another key may share, not by value.
    pub unsure: Vec<u32>,
}

impl Found {
    /// Room for `rows` pairs: a join on an id finds about one kept row per probing row.
    pub fn with_capacity(rows: usize) -> Self {
        Self {
            probe: Vec::with_capacity(rows),
            kept: Vec::with_capacity(rows),
            unsure: Vec::new(),
        }
    }

    fn push(&mut self, row: u32, position: Position, unsure: bool) {
        if unsure {
            self.unsure.push(self.kept.len() as u32);
        }
        self.probe.push(row);
        self.kept.push(position);
    }
}

/// A batch's probing rows by key hash: the first of each hash's, and after each the next
/// (as positions in [`ProbingRows::rows`], `u32::MAX` after the last).
struct ProbeTable {
    heads: PrehashedMap<u32>,
    next: Vec<u32>,
}

impl ProbeTable {
    fn new(probing: &ProbingRows) -> Self {
        // Sized for every row up front: grown as it fills, the table rehashed several
        // times a batch.
        let mut heads =
            PrehashedMap::with_capacity_and_hasher(probing.rows.len(), Default::default());
        let mut next = vec![u32::MAX; probing.rows.len()];
        // Chained backwards so that each hash's rows are read in their order.
        for (at, &row) in probing.rows.iter().enumerate().rev() {
            if let Some(head) = heads.insert(probing.hashes[row as usize], at as u32) {
                next[at] = head;
            }
        }
        Self { heads, next }
    }
}

/// A kept chunk not in the index yet: its rows' key hashes, its time range and for one
/// integer key its key range.
struct Unindexed {
    sequence: u64,
    min_time: i64,
    max_time: i64,
    /// The smallest and largest key value ([`EMPTY_RANGE`] for keys all null).
    key_range: Option<(i64, i64)>,
    hashes: Vec<u64>,
    /// What the scans of the chunk have cost so far, in single-row scans.
    scan_cost: usize,
    /// Probing rows of the batch being probed that reach the chunk.
    reaching: usize,
}

/// Orders `pairs` by probing row, each row's pairs kept in their order.
fn order_by_probing_row(pairs: &mut [(u32, Position)]) {
    if pairs.is_sorted_by_key(|(row, _)| *row) {
        return;
    }
    let rows: Vec<u32> = pairs.iter().map(|(row, _)| *row).collect();
    let groups = rows.iter().max().map_or(0, |&last| last as usize + 1);
    let (_, order) = rows_by_group(&rows, groups);
    let ordered: Vec<(u32, Position)> = order.iter().map(|&at| pairs[at as usize]).collect();
    pairs.copy_from_slice(&ordered);
}

/// A key range that holds no value.
const EMPTY_RANGE: (i64, i64) = (i64::MAX, i64::MIN);

fn position(chunk: u64, row: usize) -> Position {
    Position {
        chunk,
        row: row as u32,
    }
}

/// Bytes held by key columns.
fn keys_size(keys: &[ArrayRef]) -> usize {
    keys.iter().map(|key| key.get_array_memory_size()).sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::AsArray;

    use super::*;

    fn chunk(times: std::ops::Range<i64>) -> (Chunk, Vec<u64>) {
        let times = Int64Array::from_iter_values(times);
        let batch = RecordBatch::try_from_iter([("t", Arc::new(times.clone()) as ArrayRef)])
            .expect("one column");
        let hashes = vec![7; times.len()];
        let chunk = Chunk {
            batch,
            max_time: times.values().iter().copied().max().unwrap_or(i64::MIN),
            min_time: times.values().iter().copied().min().unwrap_or(i64::MAX),
            times,
            keys: Vec::new(),
            matched: None,
            earliest_event_time: i64::MIN,
            latest_event_time: i64::MAX,
            event_times: None,
        };
        (chunk, hashes)
    }

    /// What one probing row of hash 7 finds in `[from, to]`, indexed or not, in position
    /// order.
    fn probed(state: &mut SideState, from: i64, to: i64) -> Vec<(u64, u32)> {
        found(state, 7, None, from, to)
    }

    /// What one probing row of `hash` (and `value`) finds in `[from, to]`: the state readied
    /// for it, its index probed and its unindexed chunks scanned, in position order.
    fn found(
        state: &mut SideState,
        hash: u64,
        value: Option<i64>,
        from: i64,
        to: i64,
    ) -> Vec<(u64, u32)> {
        let values = value.map(|value| Int64Array::from(vec![value]));
        let probing = ProbingRows {
            rows: &[0],
            hashes: &[hash],
            values: values.as_ref(),
        };
        state.prepare_probes(from, to, &probing);
        let mut out = Found::default();
        state.probe_batch(&probing, |_| (from, to), &mut out);
        let mut found: Vec<(u64, u32)> = out.kept.iter().map(|p| (p.chunk, p.row)).collect();
        found.sort_unstable();
        found
    }

    /// Readies `state` for `rows` probing rows of distinct hashes (none of them 7) in
    /// `[from, to]`.
    fn prepare(state: &mut SideState, from: i64, to: i64, rows: usize) {
        prepare_hashed(
            state,
            from,
            to,
            (0..rows as u64).map(|row| 100 + row).collect(),
        );
    }

    fn prepare_hashed(state: &mut SideState, from: i64, to: i64, hashes: Vec<u64>) {
        let rows: Vec<u32> = (0..hashes.len() as u32).collect();
        let probing = ProbingRows {
            rows: &rows,
            hashes: &hashes,
            values: None,
        };
        state.prepare_probes(from, to, &probing);
    }

    fn indexed_rows(state: &SideState) -> usize {
        state.index.entries().count()
    }

    /// A chunk of rows at times `first..` with integer keys `keys`, hashed so that every
    /// value collides with another (the probe's equality check is not this state's).
    fn keyed_chunk(first: i64, keys: Vec<Option<i32>>) -> (Chunk, Vec<u64>) {
        let rows = keys.len() as i64;
        let (mut chunk, _) = chunk(first..first + rows);
        let hashes = keys
            .iter()
            .map(|key| key.map_or(0, |k| (k as u64) / 2))
            .collect();
        chunk.keys = vec![Arc::new(datafusion::arrow::array::Int32Array::from(keys))];
        (chunk, hashes)
    }

    #[test]
    fn an_integer_key_indexed_by_value_finds_what_the_hashed_index_finds() {
        let draw = |i: u64| crate::splitmix64(i);
        let mut hashed = SideState::default();
        let mut dense = SideState::with_integer_key();
        // Ids rising in a dense run, some below the start, nulls; a value too far above
        // the range for its keys (70 000) freezes the range, and comes again once as many
        // keys would allow the range to reach it; values above it after that.
        for batch in 0..40u64 {
            let keys: Vec<Option<i32>> = (0..500u64)
                .map(|i| {
                    let d = draw(batch * 1000 + i);
                    Some(match (batch, d % 20) {
                        (_, 0) => return None,
                        (_, 1) => -(((d >> 8) % 100) as i32),
                        (5 | 39, 2) => 70_000,
                        (30, 3) => 2_000_000_000,
                        (31.., 4) => 1_000_000 + ((d >> 8) % 50) as i32,
                        _ => (batch * 300 + (d >> 8) % 300) as i32,
                    })
                })
                .collect();
            let time = batch as i64 * 300;
            for state in [&mut hashed, &mut dense] {
                let (chunk, hashes) = keyed_chunk(time, keys.clone());
                state.insert(chunk, hashes);
                // Batch scans enough to index what they reach.
                for _ in 0..=SCANS_BEFORE_INDEX / BATCH_SCAN_ROWS {
                    prepare(state, time, time + 500, SCANS_BEFORE_INDEX + 1);
                }
                if batch == 38 {
                    state.free_through(600);
                }
            }
        }
        assert!(indexed_rows(&dense) > 0);
        assert!(dense.index.dense_frozen());
        let probe = |state: &mut SideState, key: i32| {
            let hash = (key as u64) / 2;
            let value = state.wants_key_values().then_some(i64::from(key));
            let values = value.map(|value| Int64Array::from(vec![value]));
            let probing = ProbingRows {
                rows: &[0],
                hashes: &[hash],
                values: values.as_ref(),
            };
            state.prepare_probes(i64::MIN, i64::MAX, &probing);
            let mut out = Found::default();
            state.probe_batch(&probing, |_| (i64::MIN, i64::MAX), &mut out);
            let mut rows = found(state, hash, value, i64::MIN, i64::MAX);
            let holds_key = |&(chunk, row): &(u64, u32)| {
                let keys = state.chunk(chunk).unwrap().keys[0]
                    .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
                    .clone();
                keys.is_valid(row as usize) && keys.value(row as usize) == key
            };
            // The rows found by value are the key's own; the hashed index also finds the keys
            // sharing a hash.
            let by_value = (0..out.kept.len() as u32).filter(|at| !out.unsure.contains(at));
            assert!(
                by_value
                    .map(|at| out.kept[at as usize])
                    .all(|p| holds_key(&(p.chunk, p.row))),
                "key {key}"
            );
            rows.retain(holds_key);
            rows
        };
        let mut found = 0;
        let keys = (-120..12_400)
            .chain(999_990..1_000_060)
            .chain([70_000, 2_000_000_000]);
        for key in keys {
            let want = probe(&mut hashed, key);
            let got = probe(&mut dense, key);
            assert_eq!(got, want, "key {key}");
            found += got.len();
        }
        assert!(found > 8_000, "{found} rows found");
    }

    #[test]
    fn chunks_enter_the_index_once_their_scans_cost_more_than_the_index() {
        let mut state = SideState::default();
        for times in [0..3, 100..103, 200..203] {
            let (chunk, hashes) = chunk(times);
            state.insert(chunk, hashes);
        }
        // Unindexed rows are found by scanning them.
        assert_eq!(probed(&mut state, 0, 300).len(), 9);
        assert_eq!(probed(&mut state, 101, 102), vec![(1, 1), (1, 2)]);
        // A few probing rows leave the chunks they reach unindexed.
        prepare(&mut state, 101, 150, 3);
        assert_eq!(indexed_rows(&state), 0);
        // A whole batch scans a chunk once, for the price of a few single-row scans: only
        // enough such batches index the chunk they reach, not the others.
        for _ in 0..SCANS_BEFORE_INDEX / BATCH_SCAN_ROWS - 1 {
            prepare(&mut state, 101, 150, SCANS_BEFORE_INDEX);
        }
        assert_eq!(indexed_rows(&state), 0);
        prepare(&mut state, 101, 150, SCANS_BEFORE_INDEX);
        assert_eq!(indexed_rows(&state), 3);
        assert_eq!(probed(&mut state, 0, 300).len(), 9);
        assert_eq!(probed(&mut state, 101, 102), vec![(1, 1), (1, 2)]);
        assert_eq!(
            probed(&mut state, 2, 200),
            vec![(0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]
        );
        // Freed rows are found neither in the index nor by a scan.
        state.free_through(201);
        assert_eq!(probed(&mut state, 0, 300), vec![(2, 2)]);
        // Freed before enough probes reached it, the third chunk never enters the index.
        state.free_through(250);
        prepare(&mut state, 200, 300, 1000);
        assert!(probed(&mut state, 0, 300).is_empty());
        let (kept, hashes) = chunk(300..303);
        state.insert(kept, hashes);
        for _ in 0..=SCANS_BEFORE_INDEX / BATCH_SCAN_ROWS {
            prepare(&mut state, 302, 302, 1000);
        }
        assert_eq!(probed(&mut state, 0, 400), vec![(3, 0), (3, 1), (3, 2)]);
        assert_eq!(state.size(), state.bytes + 3 * std::mem::size_of::<Entry>());
        // A batch whose rows share few hashes would find many rows per lookup: it costs
        // as many single-row scans as it has rows, and indexes what it reaches at once.
        let (kept, hashes) = chunk(400..403);
        state.insert(kept, hashes);
        prepare_hashed(&mut state, 401, 401, vec![5; SCANS_BEFORE_INDEX + 1]);
        assert_eq!(indexed_rows(&state), 6);
    }

    #[test]
    fn batches_whose_keys_miss_a_chunks_key_range_leave_it_unindexed() {
        // Chunks of ids 0..100, 100..200, …, as the bids of auctions in flight name.
        let mut state = SideState::with_integer_key();
        for first in 0..10 {
            let keys = (first * 100..first * 100 + 100).map(Some).collect();
            let (chunk, hashes) = keyed_chunk(i64::from(first), keys);
            state.insert(chunk, hashes);
        }
        // Batch after batch of ids 950..1050: only the last chunk's range holds any of them.
        let batch = Int64Array::from_iter_values(950..1050);
        let hashes: Vec<u64> = batch.values().iter().map(|&v| (v as u64) / 2).collect();
        let rows: Vec<u32> = (0..batch.len() as u32).collect();
        let probing = ProbingRows {
            rows: &rows,
            hashes: &hashes,
            values: Some(&batch),
        };
        for _ in 0..SCANS_BEFORE_INDEX {
            state.prepare_probes(i64::MIN, i64::MAX, &probing);
        }
        let indexed: Vec<u64> = state.index.entries().map(|e| e.position.chunk).collect();
        assert_eq!(indexed.len(), 100);
        assert!(indexed.iter().all(|&chunk| chunk == 9));
        // A few ids of a chunk's range scan it, unindexed, row by row; more than a batch
        // scan's worth enter it into the dense index instead.
        let probe_chunk_0 = |state: &mut SideState, rows: usize| {
            let values = Int64Array::from_iter_values((0..rows as i64).map(|row| 10 + row * 3));
            let hashes: Vec<u64> = values.values().iter().map(|&v| (v as u64) / 2).collect();
            let rows: Vec<u32> = (0..rows as u32).collect();
            let probing = ProbingRows {
                rows: &rows,
                hashes: &hashes,
                values: Some(&values),
            };
            state.prepare_probes(i64::MIN, i64::MAX, &probing);
            let mut scanned = Vec::new();
            state.scan_unindexed(&probing, |_| (i64::MIN, i64::MAX), &mut scanned);
            // Every probing row finds its own id and the one sharing its hash, in order.
            let want: Vec<(u32, Position)> = rows
                .iter()
                .flat_map(|&row| {
                    let id = 10 + row as usize * 3;
                    let pair = id - id % 2;
                    [(row, position(0, pair)), (row, position(0, pair + 1))]
                })
                .collect();
            (scanned, want)
        };
        let (scanned, want) = probe_chunk_0(&mut state, 2);
        assert_eq!(scanned, want);
        assert_eq!(state.unindexed.len(), 9);
        let (scanned, _) = probe_chunk_0(&mut state, SCANS_BEFORE_DENSE_INDEX + 1);
        assert_eq!(scanned, Vec::new());
        assert_eq!(state.unindexed.len(), 8);
        assert_eq!(indexed_rows(&state), 200);
    }

    #[test]
    fn pairs_are_ordered_by_probing_row_as_a_stable_sort_orders_them() {
        for seed in 0..20u64 {
            let mut pairs: Vec<(u32, Position)> = (0..(seed * 37 % 300))
                .map(|i| {
                    let draw = crate::splitmix64(seed * 1000 + i);
                    ((draw % 50) as u32, position(draw >> 40, i as usize))
                })
                .collect();
            let mut want = pairs.clone();
            want.sort_by_key(|(row, _)| *row);
            order_by_probing_row(&mut pairs);
            assert_eq!(pairs, want, "seed {seed}");
        }
    }
}
