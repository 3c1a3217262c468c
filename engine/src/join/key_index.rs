//! [`KeyIndex`]: where an interval join's kept rows are, by key.
//!
//! Each key's entries (a kept row's time and position) are kept in event-time order, so that
//! a probe reads only the entries within its time bound (see [`super::side_state`]). Most
//! keys of a join on an id hold one row: its entry sits in the key's own slot, with no
//! vector to allocate or follow.
//!
//! A join on one integer key (an id) indexes its rows by value in slots over the key range,
//! `slots[value - smallest]`, kept in pages ([`PagedSlots`]: growing the range or cutting
//! its start moves no slot), instead of by hash: no hash table to grow, and ids
//! drawn from a recent range (the bids of auctions in flight) stay in nearby slots. A slot
//! is 16 bytes, four to a cache line: empty, the one entry of a key of one row (its time and
//! position packed), or the number of the key's entries in a side list of keys of many rows.
//! The range widens upward while it stays dense (at most [`DENSE_SLOTS_PER_KEY`] slots a
//! key held, or [`DENSE_MIN_SLOTS`]), and narrows from below as freed keys empty its first
//! slots; a value below it, or above it once it could no longer widen, is indexed by hash.
//! The rows a probe finds in its value's slot hold its key: they need no key comparison.

use super::paged_slots::PagedSlots;
use super::side_state::Position;
use crate::kernels::PrehashedMap;

/// Slots a dense index may span whatever its entries.
const DENSE_MIN_SLOTS: usize = 1 << 16;

/// Slots a dense index may span per key it holds, beyond [`DENSE_MIN_SLOTS`]: keys of one
/// value in eight (DataFusion's perfect hash join asks for 15 %).
const DENSE_SLOTS_PER_KEY: usize = 8;

/// An index entry: a kept row and its event time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub time: i64,
    pub position: Position,
}

/// A key's entries: most keys of a join on an id (a person, an auction) have one row, kept
/// in the index's own slot, so that a probe reads it without following a pointer and a
/// kept row costs no allocation.
pub(super) enum EntryList {
    One(Entry),
    Many(Vec<Entry>),
}

impl Default for EntryList {
    fn default() -> Self {
        Self::Many(Vec::new())
    }
}

impl std::ops::Deref for EntryList {
    type Target = [Entry];

    fn deref(&self) -> &[Entry] {
        match self {
            Self::One(entry) => std::slice::from_ref(entry),
            Self::Many(entries) => entries,
        }
    }
}

impl EntryList {
    fn insert(&mut self, at: usize, entry: Entry) {
        match self {
            Self::Many(entries) if entries.is_empty() => *self = Self::One(entry),
            Self::Many(entries) => entries.insert(at, entry),
            Self::One(only) => {
                // The capacity a vector's first push gives it: a key of many rows still
                // allocates once for its first four.
                let mut entries = Vec::with_capacity(4);
                entries.push(*only);
                entries.insert(at, entry);
                *self = Self::Many(entries);
            }
        }
    }

    /// Drops the first `count` entries.
    fn drain_front(&mut self, count: usize) {
        match self {
            _ if count == 0 => {}
            Self::One(_) => *self = Self::default(),
            Self::Many(entries) => {
                entries.drain(..count);
            }
        }
    }
}

/// One key's entries in time order; those before `head` are freed.
#[derive(Default)]
pub(super) struct KeyEntries {
    pub entries: EntryList,
    pub head: usize,
    /// Where the last probe's entries began: a hint only (checked before use), from which
    /// the next probe, usually of a slightly later time, steps forward.
    cursor: usize,
}

impl KeyEntries {
    pub fn live(&self) -> &[Entry] {
        &self.entries[self.head..]
    }

    /// The index in `entries` of the first live entry at or after `from`.
    pub fn seek(&mut self, from: i64) -> usize {
        /// Entries stepped over one by one before a binary search takes over.
        const STEPS: usize = 8;
        let entries = &self.entries;
        let cursor = self.cursor.clamp(self.head, entries.len());
        let found = if cursor > self.head && entries[cursor - 1].time >= from {
            self.head + entries[self.head..cursor].partition_point(|e| e.time < from)
        } else {
            // Every entry before the cursor is earlier than `from` (time order).
            let limit = (cursor + STEPS).min(entries.len());
            let mut at = cursor;
            while at < limit && entries[at].time < from {
                at += 1;
            }
            if at == limit {
                at += entries[at..].partition_point(|e| e.time < from);
            }
            at
        };
        self.cursor = found;
        found
    }

    /// The key's entry when it has one and none freed before it (read without the cursor).
    pub fn only_entry(&self) -> Option<Entry> {
        match (&self.entries, self.head) {
            (EntryList::One(entry), 0) => Some(*entry),
            _ => None,
        }
    }

    /// Adds `entry` in time order: rows come nearly in time order, so it moves back past
    /// the few later ones.
    fn insert(&mut self, entry: Entry) {
        let entries = &self.entries;
        let at = entries.len()
            - entries
                .iter()
                .rev()
                .take_while(|e| e.time > entry.time)
                .count();
        self.entries.insert(at, entry);
    }

    /// Marks the entries at or before `freed_through` freed; how many. Inlined: a probe
    /// asks it of every key it reads, and most have nothing to free.
    #[inline(always)]
    pub fn free_through(&mut self, freed_through: i64) -> usize {
        match self.live().first() {
            Some(first) if first.time <= freed_through => self.free_entries(freed_through),
            _ => 0,
        }
    }

    #[inline(never)]
    fn free_entries(&mut self, freed_through: i64) -> usize {
        let freed = self.live().partition_point(|e| e.time <= freed_through);
        self.head += freed;
        // Moves the live entries down once the freed ones are as many.
        if self.head * 2 >= self.entries.len() {
            self.compact();
        }
        freed
    }

    fn compact(&mut self) {
        self.entries.drain_front(self.head);
        self.cursor = self.cursor.saturating_sub(self.head);
        self.head = 0;
    }
}

/// Where each key's entries are: by hash, and for one integer key by value in a dense range.
#[derive(Default)]
pub(super) struct KeyIndex {
    by_hash: PrehashedMap<KeyEntries>,
    dense: Option<DenseSlots>,
}

/// A key's entries as a probe finds them.
pub(super) enum Probed<'a> {
    /// The only entry of a key of one row in a dense slot (possibly freed: the next sweep
    /// empties the slot).
    One(Entry),
    Many(&'a mut KeyEntries),
}

impl KeyIndex {
    /// An index by hash, and for one integer key by value where the values are dense.
    pub fn new(integer_key: bool) -> Self {
        Self {
            by_hash: PrehashedMap::default(),
            dense: integer_key.then(DenseSlots::default),
        }
    }

    /// Whether probes and inserts should give their key's integer value.
    pub fn by_value(&self) -> bool {
        self.dense.is_some()
    }

    /// Whether entries go to dense slots by value (the key is one integer and its range has
    /// not frozen): an insert is an array write, not a hash table's.
    pub fn dense_open(&self) -> bool {
        self.dense.as_ref().is_some_and(|dense| !dense.frozen)
    }

    /// The entries of the key hashing to `hash` whose value (for a dense index) is `value`,
    /// and whether they are that value's own (found by value, not by a hash that another key
    /// may share).
    #[inline(always)]
    pub fn probe(&mut self, hash: u64, value: Option<i64>) -> Option<(Probed<'_>, bool)> {
        if let (Some(dense), Some(value)) = (&mut self.dense, value)
            && let Some(slot) = dense.slot(value)
        {
            return match dense.slots.get(slot).content() {
                SlotContent::Empty => None,
                SlotContent::One(entry) => Some((Probed::One(entry), true)),
                SlotContent::Many(at) => Some((Probed::Many(&mut dense.many[at]), true)),
            };
        }
        let entries = self.by_hash.get_mut(&hash)?;
        Some((Probed::Many(entries), false))
    }

    /// Adds `entry` to the entries of the key hashing to `hash` whose value (for a dense
    /// index) is `value`, in time order.
    pub fn insert(&mut self, hash: u64, value: Option<i64>, entry: Entry) {
        if let (Some(dense), Some(value)) = (&mut self.dense, value)
            && let Some(slot) = dense.slot_to_insert(value)
        {
            dense.insert(slot, entry);
            return;
        }
        self.by_hash.entry(hash).or_default().insert(entry);
    }

    /// Every live entry (a dense slot's only one may be freed until the next sweep).
    pub fn entries(&self) -> impl Iterator<Item = Entry> {
        let dense = self.dense.iter().flat_map(|dense| {
            let ones = dense.slots.iter().filter_map(|slot| match slot.content() {
                SlotContent::One(entry) => Some(entry),
                _ => None,
            });
            ones.chain(dense.many.iter().flat_map(|key| key.live().iter().copied()))
        });
        let hashed = self
            .by_hash
            .values()
            .flat_map(|key| key.live().iter().copied());
        hashed.chain(dense)
    }

    /// Frees and compacts every key's entries through `freed_through`, dropping keys left
    /// without live ones; the live entries.
    pub fn sweep(&mut self, freed_through: i64) -> usize {
        for key in self.by_hash.values_mut() {
            key.free_through(freed_through);
            key.compact();
        }
        self.by_hash.retain(|_, key| !key.live().is_empty());
        if let Some(dense) = &mut self.dense {
            dense.sweep(freed_through);
        }
        self.entries().count()
    }

    /// Drops every key: with no entries left anywhere, a dense range starts afresh.
    pub fn clear(&mut self) {
        *self = Self::new(self.dense.is_some());
    }

    /// Bytes of the dense slots and of their side list (the hashed keys are counted by
    /// entry).
    pub fn dense_size(&self) -> usize {
        self.dense.as_ref().map_or(0, |dense| {
            dense.slots.size() + dense.many.capacity() * size_of::<KeyEntries>()
        })
    }

    /// Whether the dense range froze (for tests).
    #[cfg(test)]
    pub fn dense_frozen(&self) -> bool {
        self.dense.as_ref().is_some_and(|dense| dense.frozen)
    }
}

/// Bits of a packed position's row: a slot holds the one entry itself when its chunk
/// sequence number is below 2^39 and its row below 2^24 (any other goes to the side list).
const ROW_BITS: u32 = 24;

/// A dense slot's `packed` word when it holds no entry; with [`MANY`] set, the rest is the
/// key's place in the side list of keys of many rows; otherwise a position, chunk above
/// [`ROW_BITS`] bits of row.
const EMPTY: u64 = u64::MAX;
const MANY: u64 = 1 << 63;

/// One value's entries in 16 bytes (see the module documentation).
#[derive(Clone, Copy)]
struct DenseSlot {
    /// The one entry's time.
    time: i64,
    packed: u64,
}

enum SlotContent {
    Empty,
    One(Entry),
    Many(usize),
}

impl DenseSlot {
    const EMPTY: Self = Self {
        time: 0,
        packed: EMPTY,
    };

    /// The slot holding `entry` alone, if its position packs.
    fn one(entry: Entry) -> Option<Self> {
        let Position { chunk, row } = entry.position;
        (chunk < 1 << (63 - ROW_BITS) && row < 1 << ROW_BITS).then_some(Self {
            time: entry.time,
            packed: chunk << ROW_BITS | u64::from(row),
        })
    }

    fn many(at: usize) -> Self {
        Self {
            time: 0,
            packed: MANY | at as u64,
        }
    }

    #[inline(always)]
    fn content(self) -> SlotContent {
        match self.packed {
            EMPTY => SlotContent::Empty,
            packed if packed & MANY != 0 => SlotContent::Many((packed & !MANY) as usize),
            packed => SlotContent::One(Entry {
                time: self.time,
                position: Position {
                    chunk: packed >> ROW_BITS,
                    row: (packed & ((1 << ROW_BITS) - 1)) as u32,
                },
            }),
        }
    }

    fn is_empty(self) -> bool {
        self.packed == EMPTY
    }
}

/// Key entries by value: `slots[value - smallest]`.
struct DenseSlots {
    smallest: i64,
    slots: PagedSlots<DenseSlot>,
    /// The entries of the keys of more than one row (or of a position that does not pack);
    /// a place freed by a key is reused.
    many: Vec<KeyEntries>,
    free_many: Vec<usize>,
    /// Slots holding entries (counted as they fill, recounted when freed rows are swept).
    used: usize,
    /// Whether a value has been indexed (and `smallest` set by the first).
    started: bool,
    /// Set once a value above the range was too far to widen it to: that value's entries
    /// went by hash, where a wider range would no longer look for them.
    frozen: bool,
}

impl Default for DenseSlots {
    fn default() -> Self {
        Self {
            smallest: 0,
            slots: PagedSlots::new(DenseSlot::EMPTY),
            many: Vec::new(),
            free_many: Vec::new(),
            used: 0,
            started: false,
            frozen: false,
        }
    }
}

impl DenseSlots {
    fn slot(&self, value: i64) -> Option<usize> {
        let offset = usize::try_from(value.checked_sub(self.smallest)?).ok()?;
        (offset < self.slots.len()).then_some(offset)
    }

    /// The slot `value`'s entries go to, widening the range up to it while it stays dense;
    /// `None`: by hash.
    fn slot_to_insert(&mut self, value: i64) -> Option<usize> {
        if !self.started {
            self.started = true;
            self.smallest = value;
        }
        let slot = match self.slot(value) {
            Some(slot) => slot,
            None if self.frozen || value < self.smallest => return None,
            None => {
                let wanted = (value as i128 - self.smallest as i128 + 1) as u128;
                let limit = DENSE_MIN_SLOTS.max((self.used + 1) * DENSE_SLOTS_PER_KEY);
                if wanted > limit as u128 {
                    self.frozen = true;
                    return None;
                }
                self.slots.grow_to(wanted as usize);
                wanted as usize - 1
            }
        };
        self.used += usize::from(self.slots.get(slot).is_empty());
        Some(slot)
    }

    /// Adds `entry` to the slot's entries: alone in the slot if it was empty, in the side
    /// list otherwise.
    fn insert(&mut self, slot: usize, entry: Entry) {
        let at = match self.slots.get(slot).content() {
            SlotContent::Empty => {
                if let Some(one) = DenseSlot::one(entry) {
                    self.slots.set(slot, one);
                    return;
                }
                self.new_many()
            }
            SlotContent::One(only) => {
                let at = self.new_many();
                self.many[at].insert(only);
                at
            }
            SlotContent::Many(at) => at,
        };
        self.slots.set(slot, DenseSlot::many(at));
        self.many[at].insert(entry);
    }

    /// A place in the side list for a key's entries.
    fn new_many(&mut self) -> usize {
        self.free_many.pop().unwrap_or_else(|| {
            self.many.push(KeyEntries::default());
            self.many.len() - 1
        })
    }

    /// Frees every slot's entries through `freed_through`: a slot left without live ones
    /// empties (its place in the side list freed), and the leading empty slots are dropped
    /// (their values, should they come again, go by hash).
    fn sweep(&mut self, freed_through: i64) {
        for slot in self.slots.iter_mut() {
            match slot.content() {
                SlotContent::Empty => {}
                SlotContent::One(entry) => {
                    if entry.time <= freed_through {
                        *slot = DenseSlot::EMPTY;
                    }
                }
                SlotContent::Many(at) => {
                    let key = &mut self.many[at];
                    key.free_through(freed_through);
                    key.compact();
                    if key.live().is_empty() {
                        self.many[at] = KeyEntries::default();
                        self.free_many.push(at);
                        *slot = DenseSlot::EMPTY;
                    }
                }
            }
        }
        let empty = self.slots.iter().take_while(|slot| slot.is_empty()).count();
        self.slots.cut_front(empty);
        self.smallest = self.smallest.saturating_add(empty as i64);
        self.used = self.slots.iter().filter(|slot| !slot.is_empty()).count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_entries(times: &[i64]) -> KeyEntries {
        KeyEntries {
            entries: EntryList::Many(
                times
                    .iter()
                    .enumerate()
                    .map(|(row, &time)| Entry {
                        time,
                        position: Position {
                            chunk: 0,
                            row: row as u32,
                        },
                    })
                    .collect(),
            ),
            head: 0,
            cursor: 0,
        }
    }

    #[test]
    fn a_key_of_one_row_keeps_it_in_place_and_more_rows_keep_their_order() {
        let entry = |time| Entry {
            time,
            position: Position { chunk: 0, row: 0 },
        };
        let times = |list: &EntryList| list.iter().map(|e| e.time).collect::<Vec<_>>();
        let mut list = EntryList::default();
        list.insert(0, entry(5));
        assert!(matches!(list, EntryList::One(_)));
        list.insert(0, entry(3));
        list.insert(2, entry(9));
        list.insert(2, entry(7));
        assert_eq!(times(&list), vec![3, 5, 7, 9]);
        list.drain_front(3);
        assert_eq!(times(&list), vec![9]);
        let mut one = EntryList::default();
        one.insert(0, entry(1));
        one.drain_front(0);
        assert_eq!(times(&one), vec![1]);
        one.drain_front(1);
        assert!(one.is_empty());
        one.insert(0, entry(2));
        assert_eq!(times(&one), vec![2]);
    }

    #[test]
    fn seek_finds_the_first_entry_at_or_after_a_time_from_any_cursor() {
        // Times with repeats and gaps; probes forward, backward, far and near.
        let times: Vec<i64> = (0..100).map(|i| (i / 3) * 5).collect();
        let mut key = key_entries(&times);
        let probes = [
            0, 1, 5, 6, 7, 60, 59, 3, 200, 140, 141, 165, 0, -4, 10, 11, 12, 100,
        ];
        for head in [0, 7, 40] {
            key.head = head;
            for &from in &probes {
                let expected = head + times[head..].partition_point(|&t| t < from);
                assert_eq!(key.seek(from), expected, "from {from}, head {head}");
            }
        }
        // A cursor left past the end (entries compacted since) is only a hint.
        key.cursor = 10_000;
        assert_eq!(key.seek(6), 40);
    }

    #[test]
    fn dense_slots_hold_one_entry_in_place_and_more_in_the_side_list() {
        let entry = |time: i64, chunk: u64, row: u32| Entry {
            time,
            position: Position { chunk, row },
        };
        let found = |index: &mut KeyIndex, value: i64| -> Vec<(i64, u64, u32)> {
            let list = match index.probe(0, Some(value)) {
                None => vec![],
                Some((Probed::One(entry), true)) => vec![entry],
                Some((Probed::Many(key), true)) => key.live().to_vec(),
                Some((_, false)) => panic!("{value} found by hash"),
            };
            list.iter()
                .map(|e| (e.time, e.position.chunk, e.position.row))
                .collect()
        };
        let mut index = KeyIndex::new(true);
        index.insert(0, Some(10), entry(5, 3, 7));
        assert!(matches!(
            index.probe(0, Some(10)),
            Some((Probed::One(_), true))
        ));
        assert_eq!(found(&mut index, 10), vec![(5, 3, 7)]);
        // A second row of the key moves both to the side list, in time order.
        index.insert(0, Some(10), entry(4, 4, 1));
        assert_eq!(found(&mut index, 10), vec![(4, 4, 1), (5, 3, 7)]);
        // Positions too large to pack go to the side list alone.
        let far = entry(6, 1 << 40, (1 << 24) + 5);
        index.insert(0, Some(12), far);
        assert_eq!(found(&mut index, 12), vec![(6, 1 << 40, (1 << 24) + 5)]);
        index.insert(0, Some(11), entry(9, (1 << 39) - 1, (1 << 24) - 1));
        assert_eq!(
            found(&mut index, 11),
            vec![(9, (1 << 39) - 1, (1 << 24) - 1)]
        );
        assert!(found(&mut index, 13).is_empty());
        assert_eq!(index.entries().count(), 4);
        // A sweep empties the freed slots and frees their side list places for reuse;
        // the leading empty slots go.
        assert_eq!(index.sweep(5), 2);
        assert!(found(&mut index, 10).is_empty());
        let dense = index.dense.as_ref().unwrap();
        assert_eq!((dense.smallest, dense.free_many.len()), (11, 1));
        index.insert(0, Some(13), entry(20, 0, 0));
        index.insert(0, Some(13), entry(21, 0, 1));
        let dense = index.dense.as_ref().unwrap();
        assert_eq!((dense.many.len(), dense.free_many.len()), (2, 0));
        assert_eq!(found(&mut index, 13), vec![(20, 0, 0), (21, 0, 1)]);
        assert_eq!(found(&mut index, 12), vec![(6, 1 << 40, (1 << 24) + 5)]);
    }
}
