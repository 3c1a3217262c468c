//! [`ShortKeyIndex`]: a lookaside table from keys of one or two short strings (at most 8
//! bytes each) to the group ids a [`PackedGroupValues`] gave them.
//!
//! The packed interner encodes each row into a 32-byte key, hashes four words and compares
//! through the group's stored key. The commonest streaming keys — a symbol, or a trader and
//! a symbol — fit two machine words, so here a row is read straight from the string
//! columns' offsets and values into two words and a length word, hashed with two multiplies
//! and compared inside the table entry itself: about half the instructions per row. Only a
//! miss goes through the packed interner, which hands out (or finds) the group id; the index
//! then remembers it. Group ids are the packed interner's, so the two never disagree, and the
//! index is dropped whenever those ids are renumbered.
//!
//! `bench/benches/kernels.rs` (`intern_*_packed`) measures the interner with it.
//!
//! [`PackedGroupValues`]: super::PackedGroupValues

use std::mem::size_of;

/// A free entry.
const FREE: u32 = u32::MAX;

/// `BYTE_MASKS[n]` keeps the low `n` bytes of a word.
pub(super) const BYTE_MASKS: [u64; 9] = [
    0,
    0xff,
    0xffff,
    0xff_ffff,
    0xffff_ffff,
    0xff_ffff_ffff,
    0xffff_ffff_ffff,
    0xff_ffff_ffff_ffff,
    u64::MAX,
];

/// The length a key gives a string longer than 8 bytes: no key in an index has it (only
/// strings of at most 8 bytes are put in one), so such a string never matches a key there.
const TOO_LONG: u32 = 9;

/// A key of up to two short strings: their bytes as little-endian words (zero-padded) and
/// their `length + 1`s, one byte each, so that "" and a missing second column differ; a
/// string longer than 8 bytes has its first 8 and the length [`TOO_LONG`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShortKey {
    words: [u64; 2],
    lengths: u32,
}

impl ShortKey {
    /// The key of strings `[from, to)` of `values`, one per column (at most two; see
    /// [`ShortKey`] for longer strings).
    #[cfg(test)]
    pub fn of<const N: usize>(values: [&[u8]; N], bounds: [(usize, usize); N]) -> Self {
        let offsets: Vec<[i32; 2]> = bounds
            .iter()
            .map(|(from, to)| [*from as i32, *to as i32])
            .collect();
        let mut columns = Vec::new();
        for (values, offsets) in values.iter().zip(&offsets) {
            columns.extend(StringColumn::new(offsets, values, 1));
        }
        match columns.as_slice() {
            [first] => Self::of_row(&[*first], 0),
            [first, second] => Self::of_row(&[*first, *second], 0),
            _ => Self::default(),
        }
    }

    /// The key of row `row` of `COLUMNS` (1 or 2) Utf8 columns; strings are at most 8 bytes
    /// long (longer ones are cut, so callers check lengths first).
    #[inline(always)]
    pub fn of_row<const COLUMNS: usize>(columns: &[StringColumn<'_>; COLUMNS], row: usize) -> Self {
        let bounds = columns.map(|strings| {
            let start = strings.offsets.get(row).copied().unwrap_or_default();
            (
                start,
                strings.offsets.get(row + 1).copied().unwrap_or(start),
            )
        });
        Self::of_strings(columns, bounds)
    }

    /// The key of the strings `[start, end)` (offsets) of `COLUMNS` (1 or 2) Utf8 columns.
    #[inline(always)]
    fn of_strings<const COLUMNS: usize>(
        columns: &[StringColumn<'_>; COLUMNS],
        bounds: [(i32, i32); COLUMNS],
    ) -> Self {
        let mut key = ShortKey::default();
        for (column, (strings, (start, end))) in columns.iter().zip(bounds).enumerate() {
            // Valid offsets never decrease; a corrupt pair only gives a wrong key.
            let length = end.wrapping_sub(start) as u32;
            key.words[column] = strings.word(start as u32 as usize, length.min(8) as usize);
            key.lengths |= (length.min(TOO_LONG) + 1) << (8 * column);
        }
        key
    }

    /// The key of one view per column of `COLUMNS` (1 or 2) Utf8View columns; strings are at
    /// most 8 bytes long (longer ones are cut, so callers check lengths first).
    #[inline(always)]
    fn of_views<const COLUMNS: usize>(views: [u128; COLUMNS]) -> Self {
        let mut key = ShortKey::default();
        for (column, view) in views.into_iter().enumerate() {
            // A view starts with the length, then (up to 12 bytes) the string itself.
            let length = view as u32;
            key.words[column] = (view >> 32) as u64 & BYTE_MASKS[length.min(8) as usize];
            key.lengths |= (length.min(TOO_LONG) + 1) << (8 * column);
        }
        key
    }

    /// `self == other`, computed in scalar registers: a derived comparison may load the
    /// key as one 16-byte vector, which stalls when the key was just written as words.
    #[inline(always)]
    fn same_as(&self, other: &ShortKey) -> bool {
        ((self.words[0] ^ other.words[0])
            | (self.words[1] ^ other.words[1])
            | u64::from(self.lengths ^ other.lengths))
            == 0
    }

    /// The key's first slot in a table of `2^(64 - shift)` entries: the top bits of a
    /// multiplicative hash. A multiply carries bits only upwards, so only its top bits
    /// depend on every byte of the key (bits from the middle of the product lose the last
    /// bytes: `SYM1230` … `SYM1239` would share a slot).
    #[inline]
    fn slot(&self, shift: u32) -> usize {
        let mixed = (self.words[0] ^ u64::from(self.lengths)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ self.words[1];
        (mixed.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> shift) as usize
    }
}

/// A Utf8 column's offsets and bytes, read a word at a time.
#[derive(Clone, Copy)]
pub struct StringColumn<'a> {
    offsets: &'a [i32],
    values: &'a [u8],
}

impl<'a> StringColumn<'a> {
    /// The column of `rows` strings with these offsets and bytes; `None` when there are
    /// fewer offsets.
    pub fn new(offsets: &'a [i32], values: &'a [u8], rows: usize) -> Option<Self> {
        Some(Self {
            offsets: offsets.get(..rows + 1)?,
            values,
        })
    }

    /// The same column from row `first` on (row `first` becomes row 0).
    pub fn starting_at(&self, first: usize) -> Self {
        Self {
            offsets: self.offsets.get(first..).unwrap_or_default(),
            values: self.values,
        }
    }

    /// The `length` (≤ 8) bytes from `from` as a zero-padded little-endian word: one masked
    /// 8-byte load except for the buffer's last few strings.
    #[inline(always)]
    fn word(&self, from: usize, length: usize) -> u64 {
        let length = length.min(8);
        // `from` comes from an `i32` offset, so the sum cannot overflow.
        if from + 8 <= self.values.len() {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&self.values[from..from + 8]);
            return u64::from_le_bytes(bytes) & BYTE_MASKS[length];
        }
        self.last_word(from, length)
    }

    /// [`Self::word`] for a string less than 8 bytes from the buffer's end: out of line, so
    /// that its copy does not cost the common case its registers.
    #[cold]
    #[inline(never)]
    fn last_word(&self, from: usize, length: usize) -> u64 {
        let mut buffer = [0u8; 8];
        let bytes = self.values.get(from..from + length).unwrap_or_default();
        buffer[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(buffer)
    }
}

/// One or two string key columns of the same kind, as the index reads them.
#[derive(Clone, Copy)]
pub enum ShortColumns<'a, const COLUMNS: usize> {
    Utf8([StringColumn<'a>; COLUMNS]),
    /// Utf8View columns' views.
    Views([&'a [u128]; COLUMNS]),
}

impl<const COLUMNS: usize> ShortColumns<'_, COLUMNS> {
    /// The key of row `row`.
    #[inline]
    pub fn key(&self, row: usize) -> ShortKey {
        match self {
            Self::Utf8(columns) => ShortKey::of_row(columns, row),
            Self::Views(columns) => {
                ShortKey::of_views(columns.map(|views| views.get(row).copied().unwrap_or(0)))
            }
        }
    }

    /// The same columns from row `first` on.
    pub fn starting_at(&self, first: usize) -> Self {
        match self {
            Self::Utf8(columns) => Self::Utf8(columns.map(|c| c.starting_at(first))),
            Self::Views(columns) => {
                Self::Views(columns.map(|views| views.get(first..).unwrap_or_default()))
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: ShortKey,
    group: u32,
}

const EMPTY_ENTRY: Entry = Entry {
    key: ShortKey {
        words: [0; 2],
        lengths: 0,
    },
    group: FREE,
};

/// See the module documentation.
#[derive(Debug)]
pub struct ShortKeyIndex {
    /// Open addressing with linear probing, at most half full; a power of two long.
    entries: Vec<Entry>,
    len: usize,
}

impl Default for ShortKeyIndex {
    fn default() -> Self {
        Self {
            entries: vec![EMPTY_ENTRY; 64],
            len: 0,
        }
    }
}

impl ShortKeyIndex {
    /// The shift that makes a hash a slot ([`ShortKey::slot`]).
    #[inline]
    fn shift(&self) -> u32 {
        64 - self.entries.len().trailing_zeros()
    }

    /// The group of `key`, if known.
    #[inline]
    pub fn find(&self, key: &ShortKey) -> Option<usize> {
        let mask = self.entries.len() - 1;
        let mut slot = key.slot(self.shift());
        loop {
            let entry = &self.entries[slot];
            if entry.group == FREE {
                return None;
            }
            if entry.key.same_as(key) {
                return Some(entry.group as usize);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Writes the group of each of the `out.len()` rows of `columns` to `out`, or `missing`
    /// for a key the index does not know; returns how many it did not know. The loops only
    /// read: the columns and the table stay in registers.
    pub fn find_rows<const COLUMNS: usize>(
        &self,
        columns: &ShortColumns<'_, COLUMNS>,
        out: &mut [usize],
        missing: usize,
    ) -> usize {
        match columns {
            ShortColumns::Utf8(columns) => self.find_string_rows(columns, out, missing),
            ShortColumns::Views(columns) => self.find_view_rows(columns, out, missing),
        }
    }

    #[inline(never)]
    fn find_view_rows<const COLUMNS: usize>(
        &self,
        columns: &[&[u128]; COLUMNS],
        out: &mut [usize],
        missing: usize,
    ) -> usize {
        if columns.iter().any(|views| views.len() != out.len()) {
            out.fill(missing);
            return out.len();
        }
        let mut misses = 0;
        let shift = self.shift();
        let mut group_of = |key: ShortKey| match self.entries.get(key.slot(shift)) {
            Some(entry) if entry.key.same_as(&key) => entry.group as usize,
            _ => self.find_further(key, &mut misses, missing),
        };
        match columns.as_slice() {
            [first] => {
                for (group, view) in out.iter_mut().zip(first.iter()) {
                    *group = group_of(ShortKey::of_views([*view]));
                }
            }
            [first, second] => {
                for (group, (a, b)) in out.iter_mut().zip(first.iter().zip(second.iter())) {
                    *group = group_of(ShortKey::of_views([*a, *b]));
                }
            }
            _ => {
                out.fill(missing);
                return out.len();
            }
        }
        misses
    }

    #[inline(never)]
    fn find_string_rows<const COLUMNS: usize>(
        &self,
        columns: &[StringColumn<'_>; COLUMNS],
        out: &mut [usize],
        missing: usize,
    ) -> usize {
        if columns.iter().any(|c| c.offsets.len() != out.len() + 1) {
            out.fill(missing);
            return out.len();
        }
        let mut misses = 0;
        let shift = self.shift();
        // Most keys sit in their first slot: that case is a load and a compare, and every
        // other (a later slot, an unknown key) goes out of line. A free entry never equals
        // a key (its lengths are 0, a key's at least 1).
        let mut group_of = |key: ShortKey| match self.entries.get(key.slot(shift)) {
            Some(entry) if entry.key.same_as(&key) => entry.group as usize,
            _ => self.find_further(key, &mut misses, missing),
        };
        // Offsets pairs from `windows(2)`: no bounds checks per row.
        match columns.as_slice() {
            [first] => {
                for (group, strings) in out.iter_mut().zip(first.offsets.windows(2)) {
                    *group = group_of(ShortKey::of_strings(&[*first], [(strings[0], strings[1])]));
                }
            }
            [first, second] => {
                let rows = first.offsets.windows(2).zip(second.offsets.windows(2));
                for (group, (a, b)) in out.iter_mut().zip(rows) {
                    *group = group_of(ShortKey::of_strings(
                        &[*first, *second],
                        [(a[0], a[1]), (b[0], b[1])],
                    ));
                }
            }
            _ => {
                out.fill(missing);
                return out.len();
            }
        }
        misses
    }

    /// [`Self::find`] for a key not in its first slot: the group, or `missing` with
    /// `misses` counted up.
    #[cold]
    #[inline(never)]
    fn find_further(&self, key: ShortKey, misses: &mut usize, missing: usize) -> usize {
        self.find(&key).unwrap_or_else(|| {
            *misses += 1;
            missing
        })
    }

    /// Remembers that `key` is group `group` (not yet in the index).
    pub fn insert(&mut self, key: ShortKey, group: usize) {
        if (self.len + 1) * 2 > self.entries.len() {
            self.grow();
        }
        self.place(Entry {
            key,
            group: group as u32,
        });
        self.len += 1;
    }

    fn place(&mut self, entry: Entry) {
        let mask = self.entries.len() - 1;
        let mut slot = entry.key.slot(self.shift());
        while self.entries[slot].group != FREE {
            slot = (slot + 1) & mask;
        }
        self.entries[slot] = entry;
    }

    fn grow(&mut self) {
        let doubled = vec![EMPTY_ENTRY; 2 * self.entries.len()];
        let old = std::mem::replace(&mut self.entries, doubled);
        for entry in old.into_iter().filter(|e| e.group != FREE) {
            self.place(entry);
        }
    }

    /// Whether the index knows no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every key (the group ids are about to change).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.entries.capacity() * size_of::<Entry>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_bytes_length_and_column() {
        let values = b"SYM1SYM1\0SYM10";
        let sym1 = ShortKey::of([values.as_slice()], [(0, 4)]);
        assert_eq!(sym1, ShortKey::of([values.as_slice()], [(4, 8)]));
        // A trailing NUL byte, a longer string and the near end of the buffer.
        assert_ne!(sym1, ShortKey::of([values.as_slice()], [(4, 9)]));
        assert_ne!(sym1, ShortKey::of([values.as_slice()], [(9, 14)]));
        assert_eq!(
            ShortKey::of([values.as_slice()], [(9, 14)]),
            ShortKey::of([b"SYM10".as_slice()], [(0, 5)])
        );
        let empty = ShortKey::of([values.as_slice(), values.as_slice()], [(0, 4), (0, 0)]);
        assert_ne!(
            empty,
            ShortKey::of([values.as_slice()], [(0, 4)]),
            "an empty second string is not a missing column"
        );
    }

    #[test]
    fn keys_that_differ_only_in_their_last_bytes_spread_over_slots() {
        for (prefix, column) in [("SYM123", 0), ("TRADER1", 0), ("SYM123", 1)] {
            let slots: std::collections::HashSet<usize> = (0..10)
                .map(|digit| {
                    let name = format!("{prefix}{digit}");
                    let bounds = (0, name.len());
                    let key = match column {
                        0 => ShortKey::of([name.as_bytes()], [bounds]),
                        _ => ShortKey::of([b"AB".as_slice(), name.as_bytes()], [(0, 2), bounds]),
                    };
                    key.slot(54)
                })
                .collect();
            assert!(slots.len() >= 8, "{prefix}* in column {column}: {slots:?}");
        }
    }

    #[test]
    fn finds_what_it_was_given_across_growth() {
        let mut index = ShortKeyIndex::default();
        let names: Vec<String> = (0..1_000).map(|i| format!("K{i}")).collect();
        for (group, name) in names.iter().enumerate() {
            let key = ShortKey::of([name.as_bytes()], [(0, name.len())]);
            assert_eq!(index.find(&key), None);
            index.insert(key, group);
        }
        for (group, name) in names.iter().enumerate() {
            let key = ShortKey::of([name.as_bytes()], [(0, name.len())]);
            assert_eq!(index.find(&key), Some(group));
        }
        index.clear();
        assert_eq!(
            index.find(&ShortKey::of([b"K1".as_slice()], [(0, 2)])),
            None
        );
    }

    #[test]
    fn a_view_gives_the_key_of_the_same_string() {
        use datafusion::arrow::array::StringViewArray;
        let texts = ["", "A", "SYM1", "TRADER19", "SYM10"];
        let views = StringViewArray::from_iter_values(texts);
        for (row, text) in texts.iter().enumerate() {
            let from_bytes = ShortKey::of([text.as_bytes()], [(0, text.len())]);
            let from_view = ShortColumns::Views([views.views().as_ref()]).key(row);
            assert_eq!(from_view, from_bytes, "{text:?}");
        }
    }
}
