//! [`WindowedGroupValues`]: a [`GroupValues`] for `(window start, key...)` groups that interns
//! the keys once, not once per window.
//!
//! A windowed aggregation's groups are the product of few open windows and keys that recur in
//! every window: S3a's 20 `(trader_id, symbol)` pairs in each 1-minute window. Interning the
//! whole `(window, keys)` tuple makes a table with every open window's groups, refilled as
//! windows close. Here the keys go through an inner [`GroupValues`] (packed where possible)
//! whose table stays as small as the key set, and each open window keeps a dense array from
//! key id to group id, over the range of key ids its rows brought (keys that come and go, as
//! auctions, or one key per window, as an aggregation over windows keyed by their end, use
//! a small range of a large key table): a row costs one key lookup and one array access.
//!
//! Group ids are handed out in order of creation and `EmitTo::First(n)` emits the first `n`,
//! as the window aggregation expects. Emitted key values come from the rows that first showed
//! each key, kept as small arrays (`interleave` gathers them); the inner table is rebuilt from
//! the live groups when three keys in four no longer belong to an open group, so an endless
//! stream of new keys does not grow it without bound.

use std::mem::size_of;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{cast, interleave};
use datafusion::arrow::datatypes::{DataType, Int64Type, Schema, SchemaRef};
use datafusion::common::{HashMap, Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::GroupValues;

use super::packed_keys::new_group_values;
use super::take_rows::take_rows;
use crate::watermark::event_times;

/// No group yet for this key in this window.
const ABSENT: usize = usize::MAX;

/// Key value chunks kept before they are concatenated.
const MAX_KEY_CHUNKS: usize = 64;

/// Slots (of all the closed windows' arrays together) kept for windows to come.
const MAX_SPARE_SLOTS: usize = 128 * 1024;

/// Key tables smaller than this are never compacted.
const COMPACT_MIN_KEYS: usize = 4_096;

/// A key table is compacted once its live keys are at most this share of it (one in
/// `COMPACT_LIVE_SHARE`): keys that never come back (q8's people, new in each window) are
/// interned again at each compaction while their window is open, so a table compacted at
/// half would intern every such key twice.
const COMPACT_LIVE_SHARE: usize = 4;

/// The row where each key id from `known` on (`created` of them) first shows in `key_ids`.
///
/// A `GroupValues` hands out the ids of new keys in the order of their first rows, so
/// those rows are where the ids step to the next new one: one branch-free pass (a row
/// that is not the next key's writes a slot the next row overwrites) in place of a search
/// per row. An interner that numbered its keys otherwise is served by the search.
fn first_rows_of_new_keys(key_ids: &[usize], known: usize, created: usize) -> Result<Vec<u32>> {
    let mut first_rows = vec![0_u32; created + 1];
    let mut found = 0;
    for (row, &key) in key_ids.iter().enumerate() {
        first_rows[found.min(created)] = row as u32;
        found += usize::from(key == known + found);
    }
    if found == created {
        first_rows.truncate(created);
        return Ok(first_rows);
    }
    let mut first_rows = vec![u32::MAX; created];
    for (row, key) in key_ids.iter().enumerate() {
        if let Some(slot) = key.checked_sub(known).and_then(|k| first_rows.get_mut(k))
            && *slot == u32::MAX
        {
            *slot = row as u32;
        }
    }
    if first_rows.contains(&u32::MAX) {
        return internal_err!("a new key without a row");
    }
    Ok(first_rows)
}

/// One open window: its start and, per key id from `base` on, the id of its group (`ABSENT`
/// if none).
struct WindowSlots {
    start: i64,
    base: usize,
    groups: Vec<usize>,
    /// The largest group id of this window, to drop it once emitted.
    newest_group: usize,
}

/// Groups of `(window start, keys)`; see the module documentation.
pub struct WindowedGroupValues {
    window_type: DataType,
    key_schema: SchemaRef,
    keys: Box<dyn GroupValues>,
    /// Key values: per key column, the chunks of first-seen rows; `key_rows[key]` is
    /// `(chunk, row)` of key id `key`.
    key_chunks: Vec<Vec<ArrayRef>>,
    key_rows: Vec<(usize, usize)>,
    /// Open windows, and where each start is in `windows`.
    windows: Vec<WindowSlots>,
    window_index: HashMap<i64, usize>,
    /// Per group (ids from `emitted` on): its window start and key id.
    groups: Vec<(i64, usize)>,
    /// Groups emitted so far: stored ids are `emitted + position in groups`.
    emitted: usize,
    /// Windows given state so far (a window opens only once: rows that come after it
    /// closed are late and never reach the table).
    windows_opened: usize,
    key_ids: Vec<usize>,
    /// The key columns `key_ids` was interned from: a hopping window's rows come once per
    /// window they are in, with the same key columns, which are interned once.
    interned_keys: Vec<ArrayRef>,
    /// Slot arrays of closed windows, for windows to come, and their slots together.
    spare_slots: Vec<Vec<usize>>,
    spare_capacity: usize,
}

impl WindowedGroupValues {
    /// The window starts of the groups from id `first` on (ids as the table hands them out:
    /// positions among the groups not emitted yet), in id order: what the tests check the
    /// table's knowledge of windows by.
    #[cfg(test)]
    pub fn window_starts_from(&self, first: usize) -> impl Iterator<Item = i64> + '_ {
        self.groups.iter().skip(first).map(|(start, _)| *start)
    }

    /// How many leading groups (in id order) belong to windows starting at or before
    /// `closed_through` (the closed ones), and how many windows they span (a window counted
    /// once per run of its groups).
    pub fn closed_prefix(&self, closed_through: i64) -> (usize, usize) {
        let closing = self
            .groups
            .iter()
            .position(|(start, _)| *start > closed_through)
            .unwrap_or(self.groups.len());
        let closed = &self.groups[..closing];
        let windows = closed.first().map_or(0, |_| {
            1 + closed
                .windows(2)
                .filter(|pair| pair[0].0 != pair[1].0)
                .count()
        });
        (closing, windows)
    }

    /// The smallest start among the windows that still hold groups.
    pub fn oldest_open_window(&self) -> Option<i64> {
        self.windows.iter().map(|window| window.start).min()
    }

    /// Windows opened so far.
    pub fn windows_opened(&self) -> usize {
        self.windows_opened
    }

    /// Drops the groups `emit_to` names without building their key columns (their rows were
    /// already emitted, as under EMIT CHANGES).
    pub fn discard(&mut self, emit_to: EmitTo) -> Result<()> {
        let n = self.emit_count(emit_to);
        self.groups.drain(..n);
        self.forget_emitted(n)
    }

    fn emit_count(&self, emit_to: EmitTo) -> usize {
        match emit_to {
            EmitTo::All => self.groups.len(),
            EmitTo::First(n) => n.min(self.groups.len()),
        }
    }

    /// After `n` more groups left: drops the windows left without groups, and compacts the
    /// key table when most keys are no longer used.
    fn forget_emitted(&mut self, n: usize) -> Result<()> {
        self.emitted += n;
        let emitted = self.emitted;
        // A closed window's slots are kept for the next window to open: a stream of small
        // windows (one row per key) would otherwise allocate a slot array per window.
        let (spare, spare_capacity) = (&mut self.spare_slots, &mut self.spare_capacity);
        self.windows.retain_mut(|window| {
            let open = window.newest_group >= emitted;
            if !open && *spare_capacity + window.groups.capacity() <= MAX_SPARE_SLOTS {
                *spare_capacity += window.groups.capacity();
                spare.push(std::mem::take(&mut window.groups));
            }
            open
        });
        self.window_index = self
            .windows
            .iter()
            .enumerate()
            .map(|(i, w)| (w.start, i))
            .collect();
        self.compact_keys()
    }

    /// Groups over `schema`: the window start column first, then the key columns.
    pub fn try_new(schema: &SchemaRef) -> Result<Self> {
        let Some((window, keys)) = schema.fields().split_first() else {
            return internal_err!("windowed groups need a window column");
        };
        let key_schema = Arc::new(Schema::new(keys.to_vec()));
        Ok(Self {
            window_type: window.data_type().clone(),
            keys: new_group_values(Arc::clone(&key_schema))?,
            key_chunks: vec![Vec::new(); key_schema.fields().len()],
            key_schema,
            key_rows: Vec::new(),
            windows: Vec::new(),
            window_index: HashMap::new(),
            groups: Vec::new(),
            emitted: 0,
            windows_opened: 0,
            key_ids: Vec::new(),
            interned_keys: Vec::new(),
            spare_slots: Vec::new(),
            spare_capacity: 0,
        })
    }

    /// The index in `windows` of the window starting at `start`, opened if new, with a
    /// slot for each key id in `lowest..=highest`.
    fn window_slots(&mut self, start: i64, (lowest, highest): (usize, usize)) -> usize {
        let index = match self.window_index.get(&start) {
            Some(index) => *index,
            None => {
                self.windows_opened += 1;
                let mut groups = self.spare_slots.pop().unwrap_or_default();
                self.spare_capacity -= groups.capacity();
                groups.clear();
                self.windows.push(WindowSlots {
                    start,
                    base: lowest,
                    groups,
                    newest_group: 0,
                });
                self.window_index.insert(start, self.windows.len() - 1);
                self.windows.len() - 1
            }
        };
        let window = &mut self.windows[index];
        if window.groups.is_empty() {
            window.base = lowest;
        }
        if lowest < window.base {
            let added = window.base - lowest;
            window
                .groups
                .splice(0..0, std::iter::repeat_n(ABSENT, added));
            window.base = lowest;
        }
        let needed = highest - window.base + 1;
        if window.groups.len() < needed {
            window.groups.resize(needed, ABSENT);
        }
        index
    }

    /// Keeps the key values of the keys `cols` created (ids from `known` on).
    fn remember_new_keys(&mut self, cols: &[ArrayRef], known: usize) -> Result<()> {
        let created = self.keys.len().saturating_sub(known);
        if created == 0 {
            return Ok(());
        }
        let first_rows = first_rows_of_new_keys(&self.key_ids, known, created)?;
        let chunk = self.key_chunks.first().map_or(0, Vec::len);
        let indices = UInt32Array::from(first_rows);
        for (chunks, column) in self.key_chunks.iter_mut().zip(cols) {
            chunks.push(take_rows(column.as_ref(), &indices)?);
        }
        self.key_rows.extend((0..created).map(|row| (chunk, row)));
        if chunk + 1 > MAX_KEY_CHUNKS {
            self.merge_key_chunks()?;
        }
        Ok(())
    }

    /// Concatenates the key chunks into one.
    fn merge_key_chunks(&mut self) -> Result<()> {
        let keys = self.key_rows.len();
        let values = self.key_values(0..keys)?;
        self.key_chunks = values.into_iter().map(|v| vec![v]).collect();
        self.key_rows = (0..keys).map(|row| (0, row)).collect();
        Ok(())
    }

    /// The key columns of key ids `keys`.
    fn key_values(&self, keys: impl ExactSizeIterator<Item = usize>) -> Result<Vec<ArrayRef>> {
        let unknown = |key: usize| internal_err!("unknown key id {key}");
        // Keys that all arrived in one chunk (the usual case: a stream's keys show up early)
        // are gathered with `take`, several times cheaper per row than `interleave`.
        if self.key_chunks.iter().all(|chunks| chunks.len() <= 1) {
            let mut rows = Vec::with_capacity(keys.len());
            for key in keys {
                match self.key_rows.get(key) {
                    Some((_, row)) => rows.push(*row as u32),
                    None => return unknown(key),
                }
            }
            let rows = UInt32Array::from(rows);
            return self
                .key_chunks
                .iter()
                .zip(self.key_schema.fields())
                .map(|(chunks, field)| match chunks.first() {
                    Some(chunk) => take_rows(chunk.as_ref(), &rows),
                    None => Ok(datafusion::arrow::array::new_empty_array(field.data_type())),
                })
                .collect();
        }
        let mut indices = Vec::with_capacity(keys.len());
        for key in keys {
            match self.key_rows.get(key) {
                Some(location) => indices.push(*location),
                None => return unknown(key),
            }
        }
        self.key_chunks
            .iter()
            .map(|chunks| {
                let chunks: Vec<&dyn Array> = chunks.iter().map(|c| c.as_ref()).collect();
                Ok(interleave(&chunks, &indices)?)
            })
            .collect()
    }

    /// Rebuilds the key table from the keys of live groups when most keys are dead.
    fn compact_keys(&mut self) -> Result<()> {
        let keys = self.keys.len();
        if keys < COMPACT_MIN_KEYS {
            return Ok(());
        }
        // This runs each time windows close: the live key ids, in order and each once, from
        // a mark per key rather than a sort of every open group's key.
        let mut marked = vec![false; keys];
        let mut live_count = 0;
        for (_, key) in &self.groups {
            let mark = &mut marked[*key];
            live_count += usize::from(!*mark);
            *mark = true;
        }
        if live_count * COMPACT_LIVE_SHARE > keys {
            return Ok(());
        }
        let live: Vec<usize> = (0..keys).filter(|key| marked[*key]).collect();
        let values = self.key_values(live.iter().copied())?;
        // The key ids change.
        self.interned_keys.clear();
        let mut renumbered = Vec::new();
        self.keys.clear_shrink(live.len());
        self.keys.intern(&values, &mut renumbered)?;
        let mut new_id = vec![ABSENT; keys];
        for (old, new) in live.iter().zip(&renumbered) {
            new_id[*old] = *new;
        }
        for (_, key) in &mut self.groups {
            *key = new_id[*key];
        }
        for window in &mut self.windows {
            let kept: Vec<(usize, usize)> = window
                .groups
                .iter()
                .enumerate()
                .filter_map(|(offset, &group)| {
                    let new = new_id[window.base + offset];
                    (group != ABSENT && group >= self.emitted && new != ABSENT)
                        .then_some((new, group))
                })
                .collect();
            let (lowest, slots) = match key_range(kept.iter().map(|(new, _)| *new)) {
                Some((lowest, highest)) => (lowest, highest - lowest + 1),
                None => (0, 0),
            };
            let mut groups = vec![ABSENT; slots];
            for (new, group) in kept {
                groups[new - lowest] = group;
            }
            window.base = lowest;
            window.groups = groups;
        }
        self.key_chunks = values.into_iter().map(|v| vec![v]).collect();
        self.key_rows = (0..live.len()).map(|row| (0, row)).collect();
        Ok(())
    }
}

/// The smallest and largest of `keys`, unless there are none.
fn key_range(keys: impl Iterator<Item = usize>) -> Option<(usize, usize)> {
    // One pass without a branch per key, so that it vectorizes.
    let (lowest, highest) = keys.fold((usize::MAX, 0), |(lowest, highest), key| {
        (lowest.min(key), highest.max(key))
    });
    (lowest <= highest).then_some((lowest, highest))
}

impl GroupValues for WindowedGroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        let Some((window, keys)) = cols.split_first() else {
            return internal_err!("windowed groups need a window column");
        };
        let interned = !keys.is_empty()
            && self.interned_keys.len() == keys.len()
            && self
                .interned_keys
                .iter()
                .zip(keys)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !interned {
            let known = self.keys.len();
            self.keys.intern(keys, &mut self.key_ids)?;
            self.remember_new_keys(keys, known)?;
            // Held, so that no other column can take these columns' place in memory.
            self.interned_keys = keys.to_vec();
        }
        let starts = event_times(window)?;
        let starts = starts.as_primitive::<Int64Type>();
        if starts.null_count() > 0 {
            return internal_err!("null window start");
        }
        let starts = starts.values();
        if starts.len() != self.key_ids.len() {
            return internal_err!("window and key columns differ in length");
        }
        groups.clear();
        groups.resize(starts.len(), 0);
        // Rows come in runs of one window (a tumbling window's rows arrive together): each
        // run looks its window up once, then costs a row one array access. The live groups
        // are a local for the loop, so their length stays in a register.
        let mut live = std::mem::take(&mut self.groups);
        let emitted = self.emitted;
        let mut first = 0;
        while let Some(&start) = starts.get(first) {
            let run = starts[first..]
                .iter()
                .position(|s| *s != start)
                .unwrap_or(starts.len() - first);
            let rows = first..first + run;
            let Some(range) = key_range(self.key_ids[rows.clone()].iter().copied()) else {
                self.groups = live;
                return internal_err!("an empty run of a window's rows");
            };
            let window = self.window_slots(start, range);
            let base = self.windows[window].base;
            let slots = self.windows[window].groups.as_mut_slice();
            let created_before = live.len();
            // The next new group's id, kept apart from `live` so it stays in a register.
            let mut next = created_before;
            let mut unknown_key = false;
            for (group, &key) in groups[rows.clone()].iter_mut().zip(&self.key_ids[rows]) {
                // `window_slots` gave the window a slot per key of the run.
                let Some(slot) = slots.get_mut(key.wrapping_sub(base)) else {
                    unknown_key = true;
                    continue;
                };
                // Absent, or a group of this window already emitted.
                let mut id = slot.wrapping_sub(emitted);
                if id >= next {
                    id = next;
                    next += 1;
                    *slot = emitted + id;
                    live.push((start, key));
                }
                *group = id;
            }
            if unknown_key {
                self.groups = live;
                return internal_err!("a key id without a window slot");
            }
            if live.len() > created_before {
                self.windows[window].newest_group = emitted + live.len() - 1;
            }
            first += run;
        }
        self.groups = live;
        Ok(())
    }

    fn size(&self) -> usize {
        let chunks: usize = self
            .key_chunks
            .iter()
            .flatten()
            .map(|c| c.get_array_memory_size())
            .sum();
        let windows: usize = self
            .windows
            .iter()
            .map(|w| w.groups.capacity() * size_of::<usize>() + size_of::<WindowSlots>())
            .sum();
        size_of::<Self>()
            + self.keys.size()
            + chunks
            + self.key_rows.capacity() * size_of::<(usize, usize)>()
            + windows
            + self.window_index.capacity() * 2 * size_of::<i64>()
            + self.groups.capacity() * size_of::<(i64, usize)>()
            + self.key_ids.capacity() * size_of::<usize>()
            + self.spare_capacity * size_of::<usize>()
    }

    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn len(&self) -> usize {
        self.groups.len()
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let n = self.emit_count(emit_to);
        let emitted = &self.groups[..n];
        let starts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            emitted.iter().map(|(start, _)| *start),
        ));
        let mut columns = vec![cast(&starts, &self.window_type)?];
        columns.extend(self.key_values(emitted.iter().map(|(_, key)| *key))?);
        self.groups.drain(..n);
        self.forget_emitted(n)?;
        Ok(columns)
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        self.keys.clear_shrink(num_rows);
        self.key_chunks.iter_mut().for_each(Vec::clear);
        self.key_rows.clear();
        self.windows.clear();
        self.window_index.clear();
        self.groups.clear();
        self.spare_slots.clear();
        self.spare_capacity = 0;
        self.emitted = 0;
        self.interned_keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{StringArray, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::{Field, TimeUnit};

    use super::*;

    #[test]
    fn first_rows_of_new_keys_in_either_numbering() {
        // Keys 5.. numbered in the order of their first rows.
        let ids = [0, 5, 1, 5, 6, 0, 7, 6, 7];
        assert_eq!(first_rows_of_new_keys(&ids, 5, 3).unwrap(), vec![1, 4, 6]);
        // Numbered otherwise (7 before 6): the search.
        let ids = [0, 5, 7, 5, 6, 6];
        assert_eq!(first_rows_of_new_keys(&ids, 5, 3).unwrap(), vec![1, 4, 2]);
        assert!(first_rows_of_new_keys(&[0, 5], 5, 2).is_err());
        assert_eq!(
            first_rows_of_new_keys(&[1, 2], 3, 0).unwrap(),
            Vec::<u32>::new()
        );
    }
    use crate::kernels::PackedGroupValues;
    use crate::splitmix64;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(
                "window_start",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
            Field::new("k", DataType::Utf8, true),
        ]))
    }

    /// `rows` rows over windows `first_window..first_window + windows` (in random order) and
    /// `keys` keys, some null, some too long to pack.
    fn batch(seed: u64, rows: usize, first_window: i64, windows: u64, keys: u64) -> Vec<ArrayRef> {
        let draw = |i: usize, salt: u64| splitmix64(seed ^ ((i as u64) << 8) ^ salt);
        let starts: TimestampMillisecondArray = (0..rows)
            .map(|i| Some(60_000 * (first_window + (draw(i, 1) % windows) as i64)))
            .collect();
        let keys: StringArray = (0..rows)
            .map(|i| match draw(i, 2) % (keys + 2) {
                0 => None,
                1 => Some("a key far too long to be packed in thirty-two bytes".to_string()),
                k => Some(format!("K{k}")),
            })
            .collect();
        vec![Arc::new(starts), Arc::new(keys)]
    }

    /// Interns `batches`, emitting `emit[i]` after batch `i`, in both tables: same ids, same
    /// emitted keys.
    fn assert_same_as_packed(batches: &[Vec<ArrayRef>], emit: &[EmitTo]) {
        let mut windowed = WindowedGroupValues::try_new(&schema()).unwrap();
        let mut packed = PackedGroupValues::try_new(&schema()).unwrap();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for (i, (columns, emit)) in batches.iter().zip(emit).enumerate() {
            windowed.intern(columns, &mut got).unwrap();
            packed.intern(columns, &mut want).unwrap();
            assert_eq!(got, want, "group ids of batch {i}");
            assert_eq!(windowed.len(), packed.len());
            let got = windowed.emit(*emit).unwrap();
            let want = packed.emit(*emit).unwrap();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.as_ref(), w.as_ref(), "emitted keys after batch {i}");
            }
        }
    }

    #[test]
    fn matches_interning_the_whole_tuple() {
        let batches: Vec<_> = (0..6).map(|b| batch(b, 700, b as i64 * 2, 4, 15)).collect();
        let emit = [
            EmitTo::First(0),
            EmitTo::First(10),
            EmitTo::First(1),
            EmitTo::First(0),
            EmitTo::First(40),
            EmitTo::All,
        ];
        assert_same_as_packed(&batches, &emit);
    }

    /// One key per window (an aggregation over windows keyed by their end), past the size at
    /// which the key table is compacted: each window's slots cover its own key, not every key
    /// of the table.
    #[test]
    fn a_key_per_window_takes_one_slot_per_window() {
        let window_batch = |windows: std::ops::Range<i64>| -> Vec<ArrayRef> {
            let starts: TimestampMillisecondArray =
                windows.clone().map(|w| Some(60_000 * w)).collect();
            let keys: StringArray = windows.map(|w| Some(format!("W{w}"))).collect();
            vec![Arc::new(starts), Arc::new(keys)]
        };
        let batches: Vec<_> = (0..6)
            .map(|b| window_batch(b * 1_000..(b + 1) * 1_000 + 10))
            .collect();
        let emit = vec![EmitTo::First(995); 5]
            .into_iter()
            .chain([EmitTo::All])
            .collect::<Vec<_>>();
        assert_same_as_packed(&batches, &emit);
        let mut windowed = WindowedGroupValues::try_new(&schema()).unwrap();
        let mut ids = Vec::new();
        for batch in &batches {
            windowed.intern(batch, &mut ids).unwrap();
            assert!(windowed.windows.iter().all(|w| w.groups.len() == 1));
            windowed.emit(EmitTo::First(995)).unwrap();
        }
    }

    /// New keys in every batch: emissions gather keys from the first chunk only (`take`) and
    /// from several chunks (`interleave`).
    #[test]
    fn emits_keys_from_one_or_several_chunks() {
        let batches: Vec<_> = (0..5)
            .map(|b| batch(b + 10, 400, b as i64, 2, 4 + 12 * b))
            .collect();
        let emit = [
            EmitTo::First(3),
            EmitTo::First(30),
            EmitTo::First(0),
            EmitTo::First(25),
            EmitTo::All,
        ];
        assert_same_as_packed(&batches, &emit);
    }

    #[test]
    fn discarding_groups_leaves_the_same_table_as_emitting_them() {
        let batches: Vec<_> = (0..5)
            .map(|b| batch(b + 30, 900, b as i64, 3, 40))
            .collect();
        let mut emitting = WindowedGroupValues::try_new(&schema()).unwrap();
        let mut discarding = WindowedGroupValues::try_new(&schema()).unwrap();
        let (mut emitted_ids, mut discarded_ids) = (Vec::new(), Vec::new());
        for batch in &batches {
            emitting.intern(batch, &mut emitted_ids).unwrap();
            discarding.intern(batch, &mut discarded_ids).unwrap();
            assert_eq!(emitted_ids, discarded_ids);
            let n = emitting.len() / 2;
            emitting.emit(EmitTo::First(n)).unwrap();
            discarding.discard(EmitTo::First(n)).unwrap();
            assert_eq!(emitting.len(), discarding.len());
        }
        let rest = emitting.emit(EmitTo::All).unwrap();
        assert_eq!(discarding.emit(EmitTo::All).unwrap(), rest);
    }

    #[test]
    fn knows_the_window_of_each_group_after_emissions() {
        let mut windowed = WindowedGroupValues::try_new(&schema()).unwrap();
        let mut ids = Vec::new();
        windowed
            .intern(&batch(40, 500, 0, 3, 10), &mut ids)
            .unwrap();
        windowed.emit(EmitTo::First(7)).unwrap();
        let known = windowed.len();
        windowed
            .intern(&batch(41, 500, 2, 3, 10), &mut ids)
            .unwrap();
        let starts: Vec<i64> = windowed.window_starts_from(known).collect();
        let all = windowed.emit(EmitTo::All).unwrap();
        let emitted = cast(&all[0], &DataType::Int64).unwrap();
        let emitted = emitted.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(starts, emitted.values()[known..]);
        assert!(!starts.is_empty());
    }

    /// A hopping window's rows come once per window they are in, with the same key
    /// columns: interned once, and again once the key table was rebuilt between two.
    #[test]
    fn the_same_key_columns_in_several_windows_match_interning_the_whole_tuple() {
        let mut batches = Vec::new();
        let mut emit = Vec::new();
        for b in 0..3 {
            let columns = batch(b + 50, 9_000, b as i64 * 10, 1, 6_000);
            let starts = cast(&columns[0], &DataType::Int64).unwrap();
            let starts = starts.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for shift in 0..3 {
                let shifted: TimestampMillisecondArray = starts
                    .values()
                    .iter()
                    .map(|s| Some(s + 60_000 * shift))
                    .collect();
                batches.push(vec![Arc::new(shifted) as ArrayRef, Arc::clone(&columns[1])]);
            }
            // Everything emitted after the second window: the third finds a rebuilt table.
            emit.extend([EmitTo::First(0), EmitTo::All, EmitTo::First(0)]);
        }
        assert_same_as_packed(&batches, &emit);
    }

    #[test]
    fn compacts_its_keys_and_stays_the_same() {
        // 6 000 distinct keys per batch, each batch in its own windows: emitting a batch's
        // groups leaves most keys dead, which rebuilds the key table.
        let batches: Vec<_> = (0..4)
            .map(|b| batch(b + 10, 9_000, b as i64 * 10, 2, 6_000))
            .collect();
        let mut windowed = WindowedGroupValues::try_new(&schema()).unwrap();
        let mut ids = Vec::new();
        windowed.intern(&batches[0], &mut ids).unwrap();
        let keys_before = windowed.keys.len();
        let groups = windowed.len();
        windowed.emit(EmitTo::First(groups)).unwrap();
        assert!(
            windowed.keys.len() < keys_before,
            "the key table was rebuilt ({keys_before} keys before)"
        );
        let emit: Vec<EmitTo> = (0..4)
            .map(|b| {
                if b == 3 {
                    EmitTo::All
                } else {
                    EmitTo::First(5_000)
                }
            })
            .collect();
        assert_same_as_packed(&batches, &emit);
    }
}
