//! [`PackedGroupValues`]: a [`GroupValues`] for keys that fit in 32 bytes.
//!
//! Streaming keys are mostly a few short strings, integers and a window start, e.g.
//! `(window_start, trader_id, symbol)`. DataFusion's general multi-column interner compares
//! column by column through dynamic dispatch per row; here each row's whole key is instead
//! encoded into one 32-byte value, a column at a time over the batch, and interned in an
//! open-addressing table with one hash and one 32-byte comparison per row.
//!
//! Layout: one header byte per key column (validity for a fixed-width column, `length + 1`
//! or 0 for null for a string), then each column's slot at a fixed offset: a fixed-width
//! column's value bytes, a string's bytes zero-padded to the column's slot width (8 or 16).
//! Fixed offsets let a string be copied as one masked 16-byte load. A column whose strings
//! outgrow its slot gets a wider one when the key still fits (the stored keys are re-encoded,
//! keeping their ids); a row that still does not fit is encoded without the size limit and
//! interned in an ordinary hash map. Which encoding a key gets depends only on the key and
//! the layout, so the two never hold the same key. Group ids are handed out in order of
//! first appearance. Once an eighth of the rows (and at least [`LONG_ROWS_BEFORE_FALLBACK`])
//! have taken the long encoding, the keys are wider than this interner serves well: every
//! key held is handed, in group order, to DataFusion's interner, which then interns the rest
//! of the input (its `GroupValuesColumn` compares such keys column by column several times
//! as fast as the long encoding's allocated keys), the ids staying the same.
//!
//! Keys of one or two Utf8 columns whose strings are at most 8 bytes long (a symbol, a trader
//! and a symbol) are first looked up in a [`ShortKeyIndex`], which is cheaper still; only
//! its misses come here.
//!
//! Only types whose equality is bitwise are packed: integers, dates, times, timestamps,
//! durations, decimals and strings. Other keys (floats, booleans, nested types) use
//! DataFusion's own interner, and so does a key of a single primitive column, which
//! DataFusion's `GroupValuesPrimitive` interns faster; see [`new_group_values`].
//!
//! `bench/benches/kernels.rs` (`intern_*`) measures this against DataFusion's interner on the
//! scenario keys.

use std::mem::size_of;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, BinaryArray, Int64Array, NullBufferBuilder, StringArray,
    UInt8Array, UInt32Array, UInt64Array, make_array,
};
use datafusion::arrow::buffer::{Buffer, MutableBuffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, Int64Type, Schema, SchemaRef, UInt8Type, UInt32Type, UInt64Type,
};
use datafusion::common::hash_utils::RandomState;
use datafusion::common::{HashMap, Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::{self, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use super::dense_keys::DenseInt64GroupValues;
use super::dense_leading_keys::DenseLeadingKeyGroupValues;
use super::dictionary_keys::DictionaryGroupValues;
use super::packed_encoding::{
    PACKED_BYTES, Packed, build_fixed, build_string, fixed_bytes, has_bitwise_equality,
    longest_string, pack_fixed, pack_string, string_value,
};
use super::short_keys::{ShortColumns, ShortKeyIndex, StringColumn};
use crate::checkpoint::OperatorState;
use freshet_partitioner::prefetch;

/// An empty slot of the hash table.
const EMPTY: u32 = u32::MAX;

/// Rows packed and probed at a time: the packed keys stay in the first-level cache.
const CHUNK: usize = 256;

/// Tables of more slots than this outgrow the core's caches: a chunk's slots are
/// prefetched before its lookups.
const PREFETCHED_SLOTS: usize = 1 << 15;

/// Rows an empty short-key index interns one by one before its read-only pass.
const LEARNING_ROWS: usize = 256;

/// A row whose key the short-key index does not know yet.
const MISSING_GROUP: usize = usize::MAX;

/// Rows of the long encoding before the keys may move to DataFusion's interner.
const LONG_ROWS_BEFORE_FALLBACK: usize = 1024;

/// DataFusion's interner, holding keys too wide to pack. A prefix of the groups leaves by
/// taking every key out and interning the rest again in order: DataFusion 55's multi-column
/// interner can panic on the rows interned after an `EmitTo::First` (its lists of groups
/// sharing a hash are rewritten in place while still being read), and the rest is what the
/// open windows hold.
struct FallbackKeys {
    schema: SchemaRef,
    values: Box<dyn GroupValues>,
}

impl FallbackKeys {
    fn try_new(schema: SchemaRef) -> Result<Self> {
        let values = group_values::new_group_values(Arc::clone(&schema), &GroupOrdering::None)?;
        Ok(Self { schema, values })
    }

    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        self.values.intern(&to_fallback_types(cols)?, groups)
    }

    /// Interns distinct keys, which must take the next ids in order.
    fn intern_in_order(&mut self, keys: &[ArrayRef]) -> Result<()> {
        let first = self.values.len();
        let mut ids = Vec::new();
        self.intern(keys, &mut ids)?;
        if ids.iter().enumerate().any(|(i, &id)| id != first + i) {
            return internal_err!("keys handed to DataFusion's interner took other ids");
        }
        Ok(())
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let all = self.values.emit(EmitTo::All)?;
        self.values =
            group_values::new_group_values(Arc::clone(&self.schema), &GroupOrdering::None)?;
        let EmitTo::First(n) = emit_to else {
            return Ok(all);
        };
        let held = all.first().map_or(0, |c| c.len());
        let n = n.min(held);
        if n < held {
            let rest: Vec<ArrayRef> = all.iter().map(|c| c.slice(n, held - n)).collect();
            self.intern_in_order(&rest)?;
        }
        Ok(all.iter().map(|c| c.slice(0, n)).collect())
    }
}

/// A key column's type in DataFusion's interner: Utf8View columns as Utf8, whose multi-column
/// interner DataFusion's own tests exercise more.
fn fallback_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Utf8View => DataType::Utf8,
        other => other.clone(),
    }
}

/// `columns` in [`fallback_type`]s.
fn to_fallback_types(columns: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
    columns
        .iter()
        .map(|column| {
            let wanted = fallback_type(column.data_type());
            Ok(match column.data_type() == &wanted {
                true => Arc::clone(column),
                false => cast(column, &wanted)?,
            })
        })
        .collect()
}

/// The slot widths a string column can have.
const STRING_SLOTS: [usize; 3] = [8, 12, 16];

/// The interner for keys of `schema`: [`DictionaryGroupValues`] when a key column is a
/// dictionary, [`DenseInt64GroupValues`] for a single Int64 key (an id), DataFusion's for
/// another single primitive key (its `GroupValuesPrimitive` interns an Int64 key 1.4x as
/// fast as a packed key: `intern_one_int64_key_*` in `bench/benches/kernels.rs`),
/// [`DenseLeadingKeyGroupValues`] for an Int64 id followed by a few 8-byte columns, else
/// [`PackedGroupValues`] when every key column has a bitwise equality and the columns fit,
/// else DataFusion's.
pub fn new_group_values(schema: SchemaRef) -> Result<Box<dyn GroupValues>> {
    if let Some(dictionary) = DictionaryGroupValues::try_new(&schema)? {
        return Ok(Box::new(dictionary));
    }
    if let Some(dense) = DenseInt64GroupValues::try_new(&schema) {
        return Ok(Box::new(dense));
    }
    if let [field] = schema.fields().as_ref()
        && field.data_type().is_primitive()
    {
        return Ok(Box::new(PrimitiveGroupValues::try_new(schema)?));
    }
    if let Some(dense) = DenseLeadingKeyGroupValues::try_new(&schema) {
        return Ok(Box::new(dense));
    }
    match PackedGroupValues::try_new(&schema) {
        Some(packed) => Ok(Box::new(packed)),
        None => group_values::new_group_values(schema, &GroupOrdering::None),
    }
}

/// DataFusion's interner of one primitive key, made anew by `clear_shrink`: DataFusion 55's
/// `GroupValuesPrimitive::clear_shrink` keeps the id it gave the null key, which a key table
/// refilled after a clear would then hand out again, out of range.
struct PrimitiveGroupValues {
    schema: SchemaRef,
    inner: Box<dyn GroupValues>,
}

impl PrimitiveGroupValues {
    fn try_new(schema: SchemaRef) -> Result<Self> {
        let inner = group_values::new_group_values(Arc::clone(&schema), &GroupOrdering::None)?;
        Ok(Self { schema, inner })
    }
}

impl GroupValues for PrimitiveGroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        self.inner.intern(cols, groups)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.emit(emit_to)
    }

    fn clear_shrink(&mut self, _num_rows: usize) {
        // A new interner cannot fail where the first one was made from the same schema.
        if let Ok(fresh) =
            group_values::new_group_values(Arc::clone(&self.schema), &GroupOrdering::None)
        {
            self.inner = fresh;
        }
    }
}

/// Where one key column lives in a packed key (its header byte is its column index).
#[derive(Debug, Clone, Copy, PartialEq)]
enum KeyColumn {
    /// A primitive value of `width` bytes at byte `offset`.
    Fixed { width: usize, offset: usize },
    /// Utf8, LargeUtf8 or Utf8View: up to `slot` bytes at byte `offset`.
    String { slot: usize, offset: usize },
}

/// Group keys packed into 32 bytes each.
pub struct PackedGroupValues {
    data_types: Vec<DataType>,
    columns: Vec<KeyColumn>,
    /// Each group's packed key (zero for a group with a long key).
    keys: Vec<Packed>,
    /// Open addressing with linear probing: group ids of packed keys, `EMPTY` where free.
    table: Vec<u32>,
    /// Keys that did not fit, in their long encoding, and a row's key being encoded.
    long: LongKeys,
    long_scratch: Vec<u8>,
    /// Per-chunk scratch: packed keys, the table slot each starts its probe at, and whether
    /// each row's key did not fit.
    scratch: Vec<Packed>,
    slots: Vec<u32>,
    long_rows: Vec<bool>,
    /// The group ids of keys of one or two short Utf8 strings, looked up first.
    short: ShortKeyIndex,
    /// Rows interned, and those of them that took the long encoding.
    rows_interned: usize,
    long_rows_interned: usize,
    /// DataFusion's interner, holding every key once too many took the long encoding.
    fallback: Option<FallbackKeys>,
}

impl PackedGroupValues {
    /// `None` when a key column's type is not packed or the columns do not fit.
    pub fn try_new(schema: &SchemaRef) -> Option<Self> {
        let data_types: Vec<DataType> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let slots = data_types
            .iter()
            .map(|t| match t {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(None),
                t if has_bitwise_equality(t) => t.primitive_width().map(Some),
                _ => None,
            })
            .collect::<Option<Vec<Option<usize>>>>()?;
        let columns = layout(&slots, &vec![STRING_SLOTS[0]; slots.len()])?;
        Some(Self {
            data_types,
            columns,
            keys: Vec::new(),
            table: vec![EMPTY; 64],
            long: LongKeys::default(),
            long_scratch: Vec::new(),
            scratch: Vec::new(),
            slots: Vec::new(),
            long_rows: Vec::new(),
            short: ShortKeyIndex::default(),
            rows_interned: 0,
            long_rows_interned: 0,
            fallback: None,
        })
    }

    /// Whether the keys are held packed (not yet handed to DataFusion's interner).
    pub fn is_packed(&self) -> bool {
        self.fallback.is_none()
    }

    /// Hands every key held to DataFusion's interner once too many rows took the long
    /// encoding; the ids stay the same (DataFusion's interner numbers new keys in order).
    fn fall_back_if_long(&mut self) -> Result<()> {
        let long = self.long_rows_interned;
        if long < LONG_ROWS_BEFORE_FALLBACK || long * 8 < self.rows_interned {
            return Ok(());
        }
        let fields: Vec<Field> = self
            .data_types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("k{i}"), fallback_type(t), true))
            .collect();
        let mut fallback = FallbackKeys::try_new(Arc::new(Schema::new(fields)))?;
        let held = self.keys.len();
        if held > 0 {
            fallback.intern_in_order(&self.decode(held)?)?;
        }
        self.clear_shrink(0);
        self.fallback = Some(fallback);
        Ok(())
    }

    /// Widens the slots of string columns whose longest value in a batch (`longest`) outgrows
    /// them, as far as the key still fits: to the slot that holds the longest string, or
    /// where the key would not fit so, to the widest slot that does (the longer strings then
    /// take the long encoding). The stored keys are re-encoded in the new layout with their
    /// ids.
    fn widen_for(&mut self, longest: &[usize]) -> Result<()> {
        let kinds: Vec<Option<usize>> = self
            .columns
            .iter()
            .map(|c| match c {
                KeyColumn::Fixed { width, .. } => Some(*width),
                KeyColumn::String { .. } => None,
            })
            .collect();
        let widest = |cap: usize| -> Vec<usize> {
            self.columns
                .iter()
                .zip(longest)
                .map(|(column, longest)| match *column {
                    KeyColumn::String { slot, .. } => {
                        let fitting = STRING_SLOTS.iter().copied().find(|s| s >= longest);
                        fitting.unwrap_or(cap).min(cap).max(slot)
                    }
                    KeyColumn::Fixed { .. } => 0,
                })
                .collect()
        };
        let current = widest(0);
        let wider = STRING_SLOTS.iter().rev().find_map(|&cap| {
            let wanted = widest(cap);
            (wanted != current)
                .then(|| layout(&kinds, &wanted))
                .flatten()
        });
        let Some(columns) = wider else {
            // No wider layout fits: the longer strings take the long encoding.
            return Ok(());
        };
        let stored = self.decode(self.keys.len())?;
        self.columns = columns;
        self.keys.clear();
        self.long.clear();
        self.rebuild_table(64);
        if !stored.is_empty() {
            let mut ids = Vec::new();
            self.intern_rows(&stored, &mut ids)?;
        }
        Ok(())
    }

    /// Interns every row of `cols` in the current layout.
    fn intern_rows(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        let rows = cols.first().map_or(0, |c| c.len());
        groups.clear();
        groups.resize(rows, 0);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut long_rows = std::mem::take(&mut self.long_rows);
        let mut slots = std::mem::take(&mut self.slots);
        let mut long_columns: Option<LongColumns<'_>> = None;
        for first in (0..rows).step_by(CHUNK) {
            let chunk = CHUNK.min(rows - first);
            self.pack(cols, first, chunk, &mut scratch, &mut long_rows)?;
            let mut table_len = self.table.len();
            start_slots(&self.table, &scratch, &mut slots);
            let mut row = 0;
            while row < chunk {
                // Rows whose keys are known, with the table borrowed once.
                row += find_known(
                    &self.table,
                    &self.keys,
                    &scratch[row..],
                    &slots[row..],
                    &long_rows[row..],
                    &mut groups[first + row..first + chunk],
                );
                if row < chunk {
                    groups[first + row] = if long_rows[row] {
                        let columns = match long_columns {
                            Some(ref columns) => columns,
                            None => long_columns.insert(LongColumns::new(&self.columns, cols)?),
                        };
                        self.intern_long(columns, first + row)?
                    } else {
                        self.intern_packed(&scratch[row])
                    };
                    row += 1;
                    if self.table.len() != table_len {
                        // The table grew: the rest of the chunk's keys start elsewhere.
                        table_len = self.table.len();
                        start_slots(&self.table, &scratch, &mut slots);
                    }
                }
            }
        }
        self.slots = slots;
        self.scratch = scratch;
        self.long_rows = long_rows;
        Ok(())
    }

    /// Interns every row of one or two Utf8 (or Utf8View) columns without nulls through the
    /// [`ShortKeyIndex`]; `None` (nothing done) for other columns.
    fn intern_short(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Option<Result<()>> {
        if !(1..=2).contains(&cols.len()) || cols.iter().any(|array| array.null_count() > 0) {
            return None;
        }
        let rows = cols[0].len();
        let utf8 = || {
            cols.iter()
                .map(|array| {
                    let strings = array.as_string_opt::<i32>()?;
                    StringColumn::new(strings.value_offsets(), strings.values(), rows)
                })
                .collect::<Option<Vec<_>>>()
        };
        let views = || {
            cols.iter()
                .map(|array| Some(array.as_string_view_opt()?.views().as_ref()))
                .collect::<Option<Vec<_>>>()
        };
        Some(if let Some(columns) = utf8() {
            match columns.as_slice() {
                [first] => self.intern_short_keys(cols, ShortColumns::Utf8([*first]), rows, groups),
                [first, second] => self.intern_short_keys(
                    cols,
                    ShortColumns::Utf8([*first, *second]),
                    rows,
                    groups,
                ),
                _ => return None,
            }
        } else {
            match views()?.as_slice() {
                [first] => {
                    self.intern_short_keys(cols, ShortColumns::Views([*first]), rows, groups)
                }
                [first, second] => self.intern_short_keys(
                    cols,
                    ShortColumns::Views([*first, *second]),
                    rows,
                    groups,
                ),
                _ => return None,
            }
        })
    }

    /// Sets `groups` to the groups of the `rows` rows of `columns` (those of `cols`). A first
    /// pass only reads the short-key index, so it runs without calls or writes besides the
    /// group ids; the rare misses then go through the packed table and are remembered in the
    /// index. An empty index (the first batch, or after an emit) would miss every row, so
    /// its first rows go to the slow path alone and teach it the batch's common keys. The
    /// strings' lengths are looked at only when a row goes to the slow path: a string longer
    /// than the index's keys never matches one of them, and a batch with one goes through
    /// the packed table whole.
    fn intern_short_keys<const COLUMNS: usize>(
        &mut self,
        cols: &[ArrayRef],
        columns: ShortColumns<'_, COLUMNS>,
        rows: usize,
        groups: &mut Vec<usize>,
    ) -> Result<()> {
        groups.clear();
        groups.resize(rows, MISSING_GROUP);
        let mut lengths_checked = false;
        let learned = if self.short.is_empty() {
            if !self.widen_for_batch(cols)? {
                return self.intern_rows(cols, groups);
            }
            lengths_checked = true;
            let learned = rows.min(LEARNING_ROWS);
            self.intern_missing(cols, &columns, 0, &mut groups[..learned])?;
            learned
        } else {
            0
        };
        let rest = columns.starting_at(learned);
        let misses = self
            .short
            .find_rows(&rest, &mut groups[learned..], MISSING_GROUP);
        if misses == 0 {
            return Ok(());
        }
        if !lengths_checked && !self.widen_for_batch(cols)? {
            return self.intern_rows(cols, groups);
        }
        self.intern_missing(cols, &columns, learned, &mut groups[learned..])
    }

    /// Widens the packed layout for the longest strings of `cols`; whether every string
    /// fits the short-key index (at most 8 bytes).
    fn widen_for_batch(&mut self, cols: &[ArrayRef]) -> Result<bool> {
        let longest = cols
            .iter()
            .zip(&self.columns)
            .map(|(array, column)| match column {
                KeyColumn::String { .. } => longest_string(array.as_ref()),
                KeyColumn::Fixed { .. } => Ok(0),
            })
            .collect::<Result<Vec<_>>>()?;
        self.widen_for(&longest)?;
        Ok(longest.iter().all(|longest| *longest <= 8))
    }

    /// The miss pass: interns the rows `first..` of `columns` whose entry in `groups` (from
    /// row `first` on) is still missing.
    fn intern_missing<const COLUMNS: usize>(
        &mut self,
        cols: &[ArrayRef],
        columns: &ShortColumns<'_, COLUMNS>,
        first: usize,
        groups: &mut [usize],
    ) -> Result<()> {
        for (row, group) in (first..).zip(groups.iter_mut()) {
            if *group != MISSING_GROUP {
                continue;
            }
            // An earlier miss of this batch may have added the key.
            let key = columns.key(row);
            *group = match self.short.find(&key) {
                Some(known) => known,
                None => {
                    let created = self.intern_row(cols, row)?;
                    self.short.insert(key, created);
                    created
                }
            };
        }
        Ok(())
    }

    /// The group of row `row` of `cols`, through the packed table.
    fn intern_row(&mut self, cols: &[ArrayRef], row: usize) -> Result<usize> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut long_rows = std::mem::take(&mut self.long_rows);
        let packed = self.pack(cols, row, 1, &mut scratch, &mut long_rows);
        let group = match packed {
            Ok(()) if long_rows[0] => LongColumns::new(&self.columns, cols)
                .and_then(|columns| self.intern_long(&columns, row)),
            Ok(()) => Ok(self.intern_packed(&scratch[0])),
            Err(error) => Err(error),
        };
        self.scratch = scratch;
        self.long_rows = long_rows;
        group
    }

    /// Encodes rows `first..first + rows` of `cols` into `keys`, flagging in `long_rows`
    /// those that do not fit.
    fn pack(
        &self,
        cols: &[ArrayRef],
        first: usize,
        rows: usize,
        keys: &mut Vec<Packed>,
        long_rows: &mut Vec<bool>,
    ) -> Result<()> {
        keys.clear();
        keys.resize(rows, Packed::ZERO);
        long_rows.clear();
        long_rows.resize(rows, false);
        for (header, (column, array)) in self.columns.iter().zip(cols).enumerate() {
            let array = array.slice(first, rows);
            match *column {
                KeyColumn::Fixed { width, offset } => {
                    pack_fixed(array.as_ref(), header, width, offset, keys)?
                }
                KeyColumn::String { slot, offset } => {
                    pack_string(array.as_ref(), header, slot, offset, keys, long_rows)?
                }
            }
        }
        Ok(())
    }

    /// The group of a packed key, creating it if new.
    #[inline]
    fn intern_packed(&mut self, key: &Packed) -> usize {
        let mask = self.table.len() - 1;
        let mut slot = key.slot(mask.count_ones());
        loop {
            let entry = self.table[slot];
            if entry == EMPTY {
                return self.insert(slot, key);
            }
            if self.keys[entry as usize] == *key {
                return entry as usize;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// A new group for `key`, at the free `slot`.
    #[cold]
    fn insert(&mut self, slot: usize, key: &Packed) -> usize {
        let group = self.keys.len();
        self.keys.push(*key);
        self.table[slot] = group as u32;
        if self.keys.len() * 2 > self.table.len() {
            self.rebuild_table(self.table.len() * 2);
        }
        group
    }

    /// The group of a row whose key did not fit, creating it if new.
    fn intern_long(&mut self, columns: &LongColumns<'_>, row: usize) -> Result<usize> {
        self.long_rows_interned += 1;
        // Encoded into a buffer kept between rows: most rows find their key.
        let mut key = std::mem::take(&mut self.long_scratch);
        key.clear();
        let encoded = columns.encode(row, &mut key);
        let group = encoded.map(|()| match self.long.group_of(&key) {
            Some(group) => group,
            None => {
                let group = self.keys.len();
                self.keys.push(Packed::ZERO);
                self.long.insert(group, key.clone());
                group
            }
        });
        self.long_scratch = key;
        group
    }

    /// Puts the table into a checkpoint's `state` as it is held — the layout, each group's
    /// packed key, the slots and the keys that did not fit — so that taking it back costs a
    /// copy, not an interning of every key.
    pub fn export(&self, state: &mut OperatorState) {
        let (mut kinds, mut widths, mut offsets) = (Vec::new(), Vec::new(), Vec::new());
        for column in &self.columns {
            let (kind, width, offset) = match *column {
                KeyColumn::Fixed { width, offset } => (0, width, offset),
                KeyColumn::String { slot, offset } => (1, slot, offset),
            };
            kinds.push(kind);
            widths.push(width as i64);
            offsets.push(offset as i64);
        }
        state.put_array("packed_kinds", Arc::new(Int64Array::from(kinds)));
        state.put_array("packed_widths", Arc::new(Int64Array::from(widths)));
        state.put_array("packed_offsets", Arc::new(Int64Array::from(offsets)));
        let mut bytes = Vec::with_capacity(self.keys.len() * PACKED_BYTES);
        for key in &self.keys {
            bytes.extend_from_slice(&key.0);
        }
        state.put_array("packed_keys", Arc::new(UInt8Array::from(bytes)));
        state.put_array(
            "packed_table",
            Arc::new(UInt32Array::from(self.table.clone())),
        );
        let (groups, long): (Vec<u64>, Vec<&[u8]>) = self
            .long
            .by_group
            .iter()
            .map(|(group, key)| (*group as u64, key.as_slice()))
            .unzip();
        state.put_array("packed_long_groups", Arc::new(UInt64Array::from(groups)));
        state.put_array("packed_long_keys", Arc::new(BinaryArray::from(long)));
    }

    /// Takes back the table [`Self::export`] kept.
    pub fn import(&mut self, state: &OperatorState) -> Result<()> {
        let ints = |name: &str| -> Result<Vec<i64>> {
            Ok(state
                .array(name)?
                .as_primitive::<Int64Type>()
                .values()
                .to_vec())
        };
        let (kinds, widths, offsets) = (
            ints("packed_kinds")?,
            ints("packed_widths")?,
            ints("packed_offsets")?,
        );
        self.columns = kinds
            .iter()
            .zip(widths.iter().zip(&offsets))
            .map(|(kind, (width, offset))| match kind {
                0 => KeyColumn::Fixed {
                    width: *width as usize,
                    offset: *offset as usize,
                },
                _ => KeyColumn::String {
                    slot: *width as usize,
                    offset: *offset as usize,
                },
            })
            .collect();
        let bytes = state.array("packed_keys")?.as_primitive::<UInt8Type>();
        self.keys = bytes
            .values()
            .chunks_exact(PACKED_BYTES)
            .map(|chunk| {
                let mut key = Packed::ZERO;
                key.0.copy_from_slice(chunk);
                key
            })
            .collect();
        self.table = state
            .array("packed_table")?
            .as_primitive::<UInt32Type>()
            .values()
            .to_vec();
        let groups = state
            .array("packed_long_groups")?
            .as_primitive::<UInt64Type>();
        let long = state.array("packed_long_keys")?.as_binary::<i32>();
        self.long.clear();
        for (group, key) in groups.values().iter().zip(long.iter()) {
            self.long
                .insert(*group as usize, key.unwrap_or_default().to_vec());
        }
        self.short.clear();
        if !self.table.len().is_power_of_two() {
            return internal_err!(
                "checkpoint: a packed key table of {} slots",
                self.table.len()
            );
        }
        Ok(())
    }

    fn rebuild_table(&mut self, slots: usize) {
        self.table.clear();
        self.table.resize(slots, EMPTY);
        let mask = slots - 1;
        for (group, key) in self.keys.iter().enumerate() {
            if self.long.by_group.contains_key(&group) {
                continue;
            }
            let mut slot = key.slot(mask.count_ones());
            while self.table[slot] != EMPTY {
                slot = (slot + 1) & mask;
            }
            self.table[slot] = group as u32;
        }
    }

    /// The key columns of groups `0..n`.
    fn decode(&self, n: usize) -> Result<Vec<ArrayRef>> {
        if self.long.by_group.keys().all(|group| *group >= n) {
            return self.decode_packed(&self.keys[..n]);
        }
        let mut fields: Vec<Vec<Option<&[u8]>>> = vec![Vec::with_capacity(n); self.columns.len()];
        for group in 0..n {
            match self.long.by_group.get(&group) {
                Some(long) => self.split_long(long, &mut fields)?,
                None => self.split_packed(&self.keys[group], &mut fields)?,
            }
        }
        fields
            .iter()
            .zip(&self.columns)
            .zip(&self.data_types)
            .map(|((values, column), data_type)| match column {
                KeyColumn::Fixed { width, .. } => build_fixed(values, *width, data_type),
                KeyColumn::String { .. } => build_string(values, data_type),
            })
            .collect()
    }

    /// The key columns of packed `keys`, built column by column.
    fn decode_packed(&self, keys: &[Packed]) -> Result<Vec<ArrayRef>> {
        self.columns
            .iter()
            .zip(&self.data_types)
            .enumerate()
            .map(|(header, (column, data_type))| {
                let mut nulls = NullBufferBuilder::new(keys.len());
                for key in keys {
                    nulls.append(key.0[header] > 0);
                }
                let nulls = nulls.finish();
                match *column {
                    KeyColumn::Fixed { width, offset } => {
                        let mut values = MutableBuffer::new(keys.len() * width);
                        for key in keys {
                            values.extend_from_slice(&key.0[offset..offset + width]);
                        }
                        let data = ArrayData::builder(data_type.clone())
                            .len(keys.len())
                            .add_buffer(Buffer::from(values))
                            .nulls(nulls)
                            .build()?;
                        Ok(make_array(data))
                    }
                    KeyColumn::String { slot, offset } => {
                        let mut offsets = Vec::with_capacity(keys.len() + 1);
                        let mut values = Vec::with_capacity(keys.len() * slot);
                        offsets.push(0i32);
                        for key in keys {
                            let length = (key.0[header] as usize).saturating_sub(1).min(slot);
                            values.extend_from_slice(&key.0[offset..offset + length]);
                            offsets.push(values.len() as i32);
                        }
                        let strings = StringArray::try_new(
                            OffsetBuffer::new(ScalarBuffer::from(offsets)),
                            Buffer::from_vec(values),
                            nulls,
                        )?;
                        Ok(match data_type {
                            DataType::Utf8 => Arc::new(strings) as ArrayRef,
                            other => cast(&strings, other)?,
                        })
                    }
                }
            })
            .collect()
    }

    fn split_packed<'a>(
        &self,
        key: &'a Packed,
        fields: &mut [Vec<Option<&'a [u8]>>],
    ) -> Result<()> {
        for (header, (column, values)) in self.columns.iter().zip(fields.iter_mut()).enumerate() {
            let flag = key.0[header] as usize;
            let (offset, length) = match *column {
                KeyColumn::Fixed { width, offset } => (offset, width),
                KeyColumn::String { offset, .. } => (offset, flag.saturating_sub(1)),
            };
            match key.0.get(offset..offset + length) {
                Some(bytes) => values.push((flag > 0).then_some(bytes)),
                None => return internal_err!("corrupt packed group key"),
            }
        }
        Ok(())
    }

    fn split_long<'a>(&self, key: &'a [u8], fields: &mut [Vec<Option<&'a [u8]>>]) -> Result<()> {
        let corrupt = || internal_err!("corrupt long group key");
        let mut position = 0;
        for (column, values) in self.columns.iter().zip(fields.iter_mut()) {
            match *column {
                KeyColumn::Fixed { width, .. } => {
                    let Some(bytes) = key.get(position..position + 1 + width) else {
                        return corrupt();
                    };
                    values.push((bytes[0] == 1).then(|| &bytes[1..]));
                    position += 1 + width;
                }
                KeyColumn::String { .. } => {
                    let Some(length) = key.get(position..position + 4) else {
                        return corrupt();
                    };
                    let mut length_bytes = [0u8; 4];
                    length_bytes.copy_from_slice(length);
                    let length = u32::from_le_bytes(length_bytes) as usize;
                    position += 4;
                    if length == 0 {
                        values.push(None);
                        continue;
                    }
                    let Some(bytes) = key.get(position..position + length - 1) else {
                        return corrupt();
                    };
                    values.push(Some(bytes));
                    position += length - 1;
                }
            }
        }
        Ok(())
    }
}

/// A batch's key columns as the long encoding reads them, each fixed-width column's value
/// bytes fetched once (fetching them is a copy of the array's description).
struct LongColumns<'a> {
    cols: &'a [ArrayRef],
    /// Per column, its value bytes and width where fixed-width.
    fixed: Vec<Option<(Buffer, usize)>>,
}

impl<'a> LongColumns<'a> {
    fn new(columns: &[KeyColumn], cols: &'a [ArrayRef]) -> Result<Self> {
        let fixed = columns
            .iter()
            .zip(cols)
            .map(|(column, array)| match *column {
                KeyColumn::Fixed { width, .. } => {
                    Ok(Some((fixed_bytes(array.as_ref(), width)?, width)))
                }
                KeyColumn::String { .. } => Ok(None),
            })
            .collect::<Result<_>>()?;
        Ok(Self { cols, fixed })
    }

    /// The unlimited encoding of row `row`, column by column: a validity byte and the value
    /// for a fixed-width column, a 4-byte `length + 1` (0 for null) and the bytes for a
    /// string.
    fn encode(&self, row: usize, key: &mut Vec<u8>) -> Result<()> {
        for (array, fixed) in self.cols.iter().zip(&self.fixed) {
            match fixed {
                Some((values, width)) => {
                    if array.is_valid(row) {
                        key.push(1);
                        key.extend_from_slice(&values[row * width..(row + 1) * width]);
                    } else {
                        key.push(0);
                        key.resize(key.len() + width, 0);
                    }
                }
                None => match string_value(array.as_ref(), row)? {
                    Some(bytes) => {
                        key.extend_from_slice(&(bytes.len() as u32 + 1).to_le_bytes());
                        key.extend_from_slice(bytes);
                    }
                    None => key.extend_from_slice(&0u32.to_le_bytes()),
                },
            }
        }
        Ok(())
    }
}

/// The keys of a [`PackedGroupValues`] that do not fit a packed key, in their long
/// encoding: by key to find a row's group, by group to emit them.
#[derive(Debug, Default)]
struct LongKeys {
    by_key: HashMap<Vec<u8>, usize, RandomState>,
    by_group: HashMap<usize, Vec<u8>, RandomState>,
    /// The bytes both maps hold, kept as keys come and go: summing them at every `size`
    /// call (once a batch) made a table of many long keys quadratic.
    bytes: usize,
}

impl LongKeys {
    /// Bytes an entry of both maps costs besides its key's two copies.
    const ENTRY_BYTES: usize = 48;

    fn group_of(&self, key: &[u8]) -> Option<usize> {
        self.by_key.get(key).copied()
    }

    fn insert(&mut self, group: usize, key: Vec<u8>) {
        self.bytes += 2 * key.capacity() + Self::ENTRY_BYTES;
        self.by_key.insert(key.clone(), group);
        self.by_group.insert(group, key);
    }

    fn clear(&mut self) {
        *self = Self::default();
    }

    /// Drops the keys of groups `0..n` and numbers the others' groups from 0.
    fn drop_first_groups(&mut self, n: usize) {
        if self.by_group.is_empty() {
            return;
        }
        let kept = std::mem::take(&mut self.by_group);
        self.clear();
        for (group, key) in kept {
            if group >= n {
                self.insert(group - n, key);
            }
        }
    }
}

/// The row count of key columns that are all fixed-width, without nulls, and hold one value
/// each over at least two rows; `None` otherwise.
fn one_fixed_width_key(cols: &[ArrayRef]) -> Option<usize> {
    let rows = cols.first()?.len();
    let constant = |array: &ArrayRef| {
        if array.null_count() > 0 {
            return false;
        }
        let Some(width) = array.data_type().primitive_width() else {
            return false;
        };
        let data = array.to_data();
        let Some(values) = data.buffers().first() else {
            return false;
        };
        let values = &values.as_slice()[data.offset() * width..(data.offset() + rows) * width];
        match width {
            8 => same_values::<8>(values),
            4 => same_values::<4>(values),
            _ => values.chunks_exact(width).all(|v| v == &values[..width]),
        }
    };
    (rows > 1 && cols.iter().all(constant)).then_some(rows)
}

/// Whether every `WIDTH`-byte value of `values` equals the first.
fn same_values<const WIDTH: usize>(values: &[u8]) -> bool {
    let (values, _) = values.as_chunks::<WIDTH>();
    values.iter().all(|v| v == &values[0])
}

/// Sets `slots` to the slot of `table` at which each of `keys` starts its probe. In a table
/// larger than the caches, each slot is also prefetched, so that the lookups of
/// [`find_known`] wait for memory together rather than in turn (a new key's slot is a miss
/// wherever the table is).
fn start_slots(table: &[u32], keys: &[Packed], slots: &mut Vec<u32>) {
    let bits = (table.len() - 1).count_ones();
    slots.clear();
    if table.len() > PREFETCHED_SLOTS {
        slots.extend(keys.iter().map(|key| {
            let slot = key.slot(bits);
            prefetch(&table[slot]);
            slot as u32
        }));
    } else {
        slots.extend(keys.iter().map(|key| key.slot(bits) as u32));
    }
}

/// Writes to `groups` the groups of the leading `keys` that are in `table`, each probed from
/// its start slot in `slots`; returns how many, stopping at the first new or long key.
fn find_known(
    table: &[u32],
    known: &[Packed],
    keys: &[Packed],
    slots: &[u32],
    long_rows: &[bool],
    groups: &mut [usize],
) -> usize {
    let mask = table.len() - 1;
    let rows = keys.iter().zip(slots).zip(long_rows).zip(groups);
    for (row, (((key, &slot), long), group)) in rows.enumerate() {
        if *long {
            return row;
        }
        let mut slot = slot as usize;
        loop {
            let entry = table[slot];
            if entry == EMPTY {
                return row;
            }
            if known.get(entry as usize) == Some(key) {
                *group = entry as usize;
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    keys.len()
}

/// Header bytes first, then each column's slot: `kinds` gives each column's fixed width
/// (`None` for a string), `string_slots` each string column's slot width. `None` when the
/// columns do not fit.
fn layout(kinds: &[Option<usize>], string_slots: &[usize]) -> Option<Vec<KeyColumn>> {
    let mut offset = kinds.len();
    let columns: Vec<KeyColumn> = kinds
        .iter()
        .zip(string_slots)
        .map(|(kind, slot)| {
            let column = match kind {
                Some(width) => KeyColumn::Fixed {
                    width: *width,
                    offset,
                },
                None => KeyColumn::String {
                    slot: *slot,
                    offset,
                },
            };
            offset += kind.unwrap_or(*slot);
            column
        })
        .collect();
    (!columns.is_empty() && offset <= PACKED_BYTES).then_some(columns)
}

impl GroupValues for PackedGroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        if let Some(fallback) = &mut self.fallback {
            return fallback.intern(cols, groups);
        }
        if cols.len() != self.columns.len() {
            return internal_err!(
                "expected {} key columns, got {}",
                self.columns.len(),
                cols.len()
            );
        }
        if let Some(rows) = one_fixed_width_key(cols) {
            // A batch of one key (a window's start over time-ordered rows) interns one row.
            let one: Vec<ArrayRef> = cols.iter().map(|c| c.slice(0, 1)).collect();
            self.intern_rows(&one, groups)?;
            let group = groups[0];
            groups.clear();
            groups.resize(rows, group);
            return Ok(());
        }
        match self.intern_short(cols, groups) {
            Some(interned) => interned,
            None => {
                self.widen_for_batch(cols)?;
                self.intern_rows(cols, groups)?;
                self.rows_interned += groups.len();
                self.fall_back_if_long()
            }
        }
    }

    fn size(&self) -> usize {
        if let Some(fallback) = &self.fallback {
            return size_of::<Self>() + fallback.values.size();
        }
        size_of::<Self>()
            + self.keys.capacity() * size_of::<Packed>()
            + self.table.capacity() * size_of::<u32>()
            + self.scratch.capacity() * size_of::<Packed>()
            + self.long_rows.capacity()
            + self.short.size()
            + self.long.bytes
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match &self.fallback {
            Some(fallback) => fallback.values.len(),
            None => self.keys.len(),
        }
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        if let Some(fallback) = &mut self.fallback {
            let keys = fallback.emit(emit_to)?;
            return keys
                .iter()
                .zip(&self.data_types)
                .map(|(key, data_type)| match key.data_type() == data_type {
                    true => Ok(Arc::clone(key)),
                    false => Ok(cast(key, data_type)?),
                })
                .collect();
        }
        let n = match emit_to {
            EmitTo::All => self.keys.len(),
            EmitTo::First(n) => n.min(self.keys.len()),
        };
        let arrays = self.decode(n)?;
        self.keys.drain(..n);
        self.short.clear();
        self.long.drop_first_groups(n);
        let slots = (self.keys.len() * 2).next_power_of_two().max(64);
        self.rebuild_table(slots);
        Ok(arrays)
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        if let Some(fallback) = &mut self.fallback {
            return fallback.values.clear_shrink(num_rows);
        }
        self.short.clear();
        self.keys.clear();
        self.keys.shrink_to(num_rows);
        self.long.clear();
        self.rebuild_table(64);
        self.table.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int64Array, TimestampMillisecondArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;
    use crate::splitmix64;

    /// Random keys: short and long strings (some empty), nulls, few distinct values.
    fn random_columns(seed: u64, rows: usize, string_type: &DataType) -> Vec<ArrayRef> {
        let draw = |i: usize, salt: u64| splitmix64(seed ^ (i as u64) ^ salt.wrapping_mul(0x9E37));
        let strings: Vec<Option<String>> = (0..rows)
            .map(|i| match draw(i, 1) % 12 {
                0 => None,
                1 => Some(String::new()),
                2 => Some(format!(
                    "a-rather-long-key-that-does-not-fit-{}",
                    draw(i, 2) % 3
                )),
                n => Some(format!("SYM{}", n + draw(i, 3) % 4)),
            })
            .collect();
        let strings: ArrayRef = Arc::new(StringArray::from(strings));
        let ints: Int64Array = (0..rows)
            .map(|i| (draw(i, 4) % 9 != 0).then(|| (draw(i, 5) % 5) as i64 - 2))
            .collect();
        let times: TimestampMillisecondArray = (0..rows)
            .map(|i| Some(60_000 * (draw(i, 6) % 3) as i64))
            .collect();
        vec![
            Arc::new(times),
            cast(&strings, string_type).unwrap(),
            Arc::new(ints),
            Arc::new(Int32Array::from_iter(
                (0..rows).map(|i| (draw(i, 7) % 2) as i32),
            )),
        ]
    }

    fn schema(columns: &[ArrayRef]) -> SchemaRef {
        Arc::new(Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("k{i}"), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    fn reference(schema: &SchemaRef) -> Box<dyn GroupValues> {
        group_values::new_group_values(Arc::clone(schema), &GroupOrdering::None).unwrap()
    }

    /// Both interners give every row the same group id and emit the same keys.
    fn assert_same_as_datafusion(string_type: DataType) {
        let batches: Vec<Vec<ArrayRef>> = (0..4)
            .map(|b| random_columns(b, 500 + 300 * b as usize, &string_type))
            .collect();
        let schema = schema(&batches[0]);
        let mut packed = PackedGroupValues::try_new(&schema).unwrap();
        // DataFusion's multi-column interner numbers Utf8View groups in its own order, so the
        // reference sees the same strings as Utf8.
        let as_utf8 = |columns: &[ArrayRef]| -> Vec<ArrayRef> {
            columns
                .iter()
                .map(|c| match c.data_type() {
                    DataType::Utf8View => cast(c, &DataType::Utf8).unwrap(),
                    _ => Arc::clone(c),
                })
                .collect()
        };
        let mut expected = reference(&self::schema(&as_utf8(&batches[0])));
        let (mut got_ids, mut want_ids) = (Vec::new(), Vec::new());
        for (b, columns) in batches.iter().enumerate() {
            // Sliced inputs exercise array offsets.
            let columns: Vec<ArrayRef> = columns.iter().map(|c| c.slice(3, c.len() - 3)).collect();
            packed.intern(&columns, &mut got_ids).unwrap();
            expected.intern(&as_utf8(&columns), &mut want_ids).unwrap();
            assert_eq!(got_ids, want_ids, "group ids of batch {b}");
            assert_eq!(packed.len(), expected.len());
            let emit = if b == 1 {
                EmitTo::First(7)
            } else if b == 3 {
                EmitTo::All
            } else {
                continue;
            };
            let got = packed.emit(emit).unwrap();
            let want = expected.emit(emit).unwrap();
            for (g, w) in as_utf8(&got).iter().zip(&want) {
                assert_eq!(g.as_ref(), w.as_ref(), "emitted keys after batch {b}");
            }
            assert_eq!(got[1].data_type(), &string_type);
            assert_eq!(packed.len(), expected.len());
        }
        assert!(packed.is_empty());
    }

    /// Keys most of whose rows take the long encoding move to DataFusion's interner after
    /// the first batches, and every row keeps the group id of first appearance, before the
    /// move and after, through emits of a prefix and of everything (checked against a map
    /// of the keys' values, as DataFusion's interner panics after a prefix was emitted).
    #[test]
    fn keys_too_wide_to_pack_move_to_datafusion_with_their_ids() {
        type Key = (Option<String>, String, i64);
        for string_type in [DataType::Utf8View, DataType::Utf8] {
            let batch = |b: u64| -> Vec<Key> {
                let draw = |i: usize, salt: u64| splitmix64((b << 32) ^ (i as u64) ^ salt);
                (0..2000)
                    .map(|i| {
                        let channel =
                            (draw(i, 1) % 50 != 0).then(|| format!("channel-{}", draw(i, 2) % 300));
                        let day = format!("2015-07-{:02}", draw(i, 3) % 3);
                        (channel, day, (draw(i, 4) % 40) as i64)
                    })
                    .collect()
            };
            let columns = |keys: &[Key]| -> Vec<ArrayRef> {
                let channel: ArrayRef =
                    Arc::new(StringArray::from_iter(keys.iter().map(|k| k.0.clone())));
                let day: ArrayRef =
                    Arc::new(StringArray::from_iter_values(keys.iter().map(|k| &k.1)));
                vec![
                    cast(&channel, &string_type).unwrap(),
                    cast(&day, &string_type).unwrap(),
                    Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k.2))),
                ]
            };
            let mut packed = PackedGroupValues::try_new(&schema(&columns(&batch(0)))).unwrap();
            let mut held: Vec<Key> = Vec::new();
            let mut got_ids = Vec::new();
            for b in 0..6 {
                let keys = batch(b);
                packed.intern(&columns(&keys), &mut got_ids).unwrap();
                let want_ids: Vec<usize> = keys
                    .iter()
                    .map(|key| match held.iter().position(|k| k == key) {
                        Some(id) => id,
                        None => {
                            held.push(key.clone());
                            held.len() - 1
                        }
                    })
                    .collect();
                assert_eq!(got_ids, want_ids, "group ids of batch {b} ({string_type})");
                assert_eq!(packed.len(), held.len());
                let n = match b {
                    2 => 100,
                    4 => held.len(),
                    _ => continue,
                };
                let emit = if n == held.len() {
                    EmitTo::All
                } else {
                    EmitTo::First(n)
                };
                let got = packed.emit(emit).unwrap();
                let want: Vec<Key> = held.drain(..n).collect();
                assert_eq!(got, columns(&want), "keys emitted after batch {b}");
            }
            assert!(!packed.is_packed(), "{string_type}");
        }
    }

    /// One or two Utf8 columns of short strings take the short-key index; a batch with a
    /// null or a long string between them takes the packed path, with the same ids.
    /// Batch 3 comes after an emit, which empties the index.
    #[test]
    fn short_string_keys_match_datafusion_across_paths() {
        for (columns, string_type) in [1usize, 2]
            .into_iter()
            .flat_map(|c| [(c, DataType::Utf8), (c, DataType::Utf8View)])
        {
            let batch = |b: u64, rows: usize| -> Vec<ArrayRef> {
                (0..columns as u64)
                    .map(|c| {
                        let strings: Vec<Option<String>> = (0..rows)
                            .map(|i| {
                                let n = splitmix64(b * 7919 + c * 104_729 + i as u64);
                                match (b, n % 40) {
                                    (1, 0) => None,
                                    (2, 1) => Some("a key longer than eight".to_string()),
                                    // The first 8 bytes of a known key: a lookup that kept
                                    // only 8 bytes would take it for that key (batch 2), also
                                    // while a cleared index relearns keys (batch 3).
                                    (2 | 3, 5) => Some("TRADER19 and more".to_string()),
                                    (_, 2) => Some(String::new()),
                                    (_, 3) => Some("SYM\0".to_string()),
                                    (_, 4) => Some("TRADER19".to_string()),
                                    _ => Some(format!("SYM{}", n % (5 + 3 * c))),
                                }
                            })
                            .collect();
                        cast(&StringArray::from(strings), &string_type).unwrap()
                    })
                    .collect()
            };
            let as_utf8 = |columns: &[ArrayRef]| -> Vec<ArrayRef> {
                columns
                    .iter()
                    .map(|c| cast(c, &DataType::Utf8).unwrap())
                    .collect()
            };
            let first = batch(0, 10);
            let mut packed = PackedGroupValues::try_new(&schema(&first)).unwrap();
            let mut expected = reference(&schema(&as_utf8(&first)));
            let (mut got_ids, mut want_ids) = (Vec::new(), Vec::new());
            for b in 0..5u64 {
                let columns: Vec<ArrayRef> = batch(b % 4, 2_600)
                    .iter()
                    .map(|c| c.slice(5, 2_500))
                    .collect();
                packed.intern(&columns, &mut got_ids).unwrap();
                expected.intern(&as_utf8(&columns), &mut want_ids).unwrap();
                assert_eq!(got_ids, want_ids, "{string_type} columns, batch {b}");
                if b == 2 {
                    let got = packed.emit(EmitTo::First(3)).unwrap();
                    let want = expected.emit(EmitTo::First(3)).unwrap();
                    assert_eq!(as_utf8(&got), want, "emitted keys");
                }
            }
        }
    }

    /// A batch whose keys the short-key index knows, but for one string longer than 8
    /// bytes that begins with a known key: the index is looked up before the strings'
    /// lengths are, so the long string must miss it and get a group of its own.
    #[test]
    fn a_long_string_does_not_match_the_known_key_it_begins_with() {
        for string_type in [DataType::Utf8, DataType::Utf8View] {
            let column = |strings: &[&str]| -> Vec<ArrayRef> {
                vec![cast(&StringArray::from(strings.to_vec()), &string_type).unwrap()]
            };
            let known = column(&["TRADER19", "SYM1", "TRADER19"]);
            let mut packed = PackedGroupValues::try_new(&schema(&known)).unwrap();
            let mut ids = Vec::new();
            packed.intern(&known, &mut ids).unwrap();
            assert_eq!(ids, [0, 1, 0]);
            let later = column(&["SYM1", "TRADER19 and more", "TRADER19", "TRADER19 and more"]);
            packed.intern(&later, &mut ids).unwrap();
            assert_eq!(ids, [1, 2, 0, 2], "{string_type}");
        }
    }

    #[test]
    fn a_batch_of_one_fixed_width_key_takes_its_group_as_datafusion_does() {
        let columns = |times: Vec<i64>, ints: Vec<Option<i32>>| -> Vec<ArrayRef> {
            vec![
                Arc::new(TimestampMillisecondArray::from(times)),
                Arc::new(Int32Array::from(ints)),
            ]
        };
        let batches = [
            // One key, a known one, a new one, a null in one column, a one-row batch,
            // two keys differing only in their last row.
            columns(vec![5; 6], vec![Some(1); 6]),
            columns(vec![5, 5, 6, 6], vec![Some(1), Some(2), Some(2), Some(1)]),
            columns(vec![5; 3], vec![Some(1); 3]),
            columns(vec![7; 4], vec![Some(3); 4]),
            columns(vec![7; 3], vec![Some(3), None, Some(3)]),
            columns(vec![8], vec![Some(3)]),
            columns(vec![9, 9, 9, 9, 10], vec![Some(4); 5]),
            columns(vec![11; 3], vec![Some(1), Some(1), Some(2)]),
        ];
        let schema = schema(&batches[0]);
        let mut packed = PackedGroupValues::try_new(&schema).unwrap();
        let mut expected = reference(&schema);
        let (mut got_ids, mut want_ids) = (Vec::new(), Vec::new());
        for (b, columns) in batches.iter().enumerate() {
            // A slice past the first row checks the values' offset.
            let columns: Vec<ArrayRef> = match columns[0].len() {
                1 => columns.clone(),
                n => columns.iter().map(|c| c.slice(1, n - 1)).collect(),
            };
            packed.intern(&columns, &mut got_ids).unwrap();
            expected.intern(&columns, &mut want_ids).unwrap();
            assert_eq!(got_ids, want_ids, "group ids of batch {b}");
        }
        assert_eq!(packed.len(), expected.len());
    }

    #[test]
    fn matches_datafusion_on_utf8_keys() {
        assert_same_as_datafusion(DataType::Utf8);
    }

    #[test]
    fn matches_datafusion_on_large_utf8_keys() {
        assert_same_as_datafusion(DataType::LargeUtf8);
    }

    #[test]
    fn matches_datafusion_on_utf8_view_keys() {
        assert_same_as_datafusion(DataType::Utf8View);
    }

    /// Strings of 9 to 12 bytes take 12-byte slots, so that two such columns fit a packed
    /// key beside their headers (16-byte slots would not); a Utf8View column is read from
    /// its views, a Utf8 column a word at a time up to its buffer's end. Longer strings take
    /// the long encoding. Group ids and emitted keys are DataFusion's.
    #[test]
    fn strings_of_up_to_twelve_bytes_are_packed_as_datafusion_interns_them() {
        let texts = |seed: u64, rows: usize, salt: u64| -> ArrayRef {
            let draw = |i: usize| splitmix64(seed ^ (i as u64) ^ salt);
            Arc::new(StringArray::from_iter((0..rows).map(|i| {
                let d = draw(i);
                match d % 10 {
                    0 => None,
                    1 => Some(String::new()),
                    2 => Some(format!("longer-than-12-{}", d % 3)),
                    3 => Some("Facebook".to_string()),
                    n => Some(format!("channel-{}", d % 10u64.pow(n as u32 % 4 + 1))),
                }
            })))
        };
        let columns = |seed: u64, rows: usize| -> Vec<ArrayRef> {
            vec![
                cast(&texts(seed, rows, 11), &DataType::Utf8View).unwrap(),
                texts(seed, rows, 12),
            ]
        };
        let as_utf8 = |columns: &[ArrayRef]| -> Vec<ArrayRef> {
            columns
                .iter()
                .map(|c| cast(c, &DataType::Utf8).unwrap())
                .collect()
        };
        let mut packed = PackedGroupValues::try_new(&schema(&columns(0, 2))).unwrap();
        let mut expected = reference(&schema(&as_utf8(&columns(0, 2))));
        let (mut got_ids, mut want_ids) = (Vec::new(), Vec::new());
        for b in 0..4u64 {
            let batch = columns(b, 700);
            packed.intern(&batch, &mut got_ids).unwrap();
            expected.intern(&as_utf8(&batch), &mut want_ids).unwrap();
            assert_eq!(got_ids, want_ids, "group ids of batch {b}");
            assert!(
                matches!(
                    packed.columns[..],
                    [
                        KeyColumn::String { slot: 12, .. },
                        KeyColumn::String { slot: 12, .. }
                    ]
                ),
                "{:?}",
                packed.columns
            );
            // Only keys with a string of over 12 bytes take the long encoding.
            let long = packed.long.by_group.len();
            assert!(
                long > 0 && long * 4 < packed.len(),
                "{long} of {}",
                packed.len()
            );
        }
        let got = packed.emit(EmitTo::All).unwrap();
        let want = expected.emit(EmitTo::All).unwrap();
        assert_eq!(got[0].data_type(), &DataType::Utf8View);
        for (g, w) in as_utf8(&got).iter().zip(&want) {
            assert_eq!(g.as_ref(), w.as_ref());
        }
    }

    /// The size counts the long keys held, as they are added and as emitted groups leave.
    #[test]
    fn the_size_follows_the_long_keys_held() {
        let texts = |first: usize| -> Vec<ArrayRef> {
            vec![Arc::new(StringArray::from_iter_values(
                (first..first + 100).map(|i| format!("a key of more than sixteen bytes {i:04}")),
            ))]
        };
        let mut packed = PackedGroupValues::try_new(&schema(&texts(0))).unwrap();
        let mut ids = Vec::new();
        let empty = packed.size();
        packed.intern(&texts(0), &mut ids).unwrap();
        let hundred = packed.long.bytes;
        assert!(hundred >= 100 * 2 * 37, "{hundred}");
        assert!(packed.size() >= empty + hundred);
        packed.intern(&texts(100), &mut ids).unwrap();
        assert_eq!(packed.long.bytes, 2 * hundred);
        packed.emit(EmitTo::First(150)).unwrap();
        assert_eq!(packed.long.bytes * 2, hundred, "50 of 200 long keys left");
        packed.emit(EmitTo::All).unwrap();
        assert_eq!(packed.long.bytes, 0);
    }

    /// A table past the prefetched size, growing in the middle of a chunk, still gives every
    /// row DataFusion's group id: a key probed from the slot it had before the table grew
    /// is found again.
    #[test]
    fn a_table_that_outgrows_the_caches_matches_datafusion() {
        let columns = |first: i64, rows: i64| -> Vec<ArrayRef> {
            let id = |i: i64| first + (i * 7919) % (rows / 2);
            vec![
                Arc::new(Int64Array::from_iter_values((0..rows).map(id))),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| id(i) % 5))),
            ]
        };
        let schema = schema(&columns(0, 2));
        let mut packed = PackedGroupValues::try_new(&schema).unwrap();
        let mut expected = reference(&schema);
        let (mut got_ids, mut want_ids) = (Vec::new(), Vec::new());
        // Each batch repeats half of its keys and meets some of the batch before's again.
        for (b, first) in [0, 30_000, 50_000, 90_000, 100_000].into_iter().enumerate() {
            let columns = columns(first, 60_000);
            packed.intern(&columns, &mut got_ids).unwrap();
            expected.intern(&columns, &mut want_ids).unwrap();
            assert_eq!(got_ids, want_ids, "group ids of batch {b}");
        }
        assert!(
            packed.table.len() > 4 * PREFETCHED_SLOTS,
            "{}",
            packed.table.len()
        );
        assert_eq!(packed.len(), expected.len());
    }

    #[test]
    fn a_single_primitive_key_hands_out_ids_in_range_after_clear_shrink() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut values = new_group_values(schema).unwrap();
        let mut ids = Vec::new();
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), None, Some(8)]));
        values.intern(&[keys], &mut ids).unwrap();
        assert_eq!(ids, vec![0, 1, 2]);
        values.clear_shrink(0);
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![Some(9), None]));
        values.intern(&[keys], &mut ids).unwrap();
        assert_eq!(ids, vec![0, 1]);
        assert_eq!(values.len(), 2);
    }

    #[test]
    fn reuses_the_table_after_clear_shrink() {
        let columns = random_columns(9, 1000, &DataType::Utf8);
        let schema = schema(&columns);
        let mut packed = PackedGroupValues::try_new(&schema).unwrap();
        let mut first = Vec::new();
        packed.intern(&columns, &mut first).unwrap();
        packed.clear_shrink(10);
        assert!(packed.is_empty());
        let mut second = Vec::new();
        packed.intern(&columns, &mut second).unwrap();
        assert_eq!(first, second, "numbering starts over after clearing");
    }

    #[test]
    fn leaves_other_key_types_to_datafusion() {
        let floats = Schema::new(vec![Field::new("f", DataType::Float64, true)]);
        assert!(PackedGroupValues::try_new(&Arc::new(floats)).is_none());
        let wide = Schema::new(
            (0..4)
                .map(|i| {
                    Field::new(
                        format!("t{i}"),
                        DataType::Timestamp(TimeUnit::Nanosecond, None),
                        true,
                    )
                })
                .chain([Field::new("s", DataType::Utf8, true)])
                .collect::<Vec<_>>(),
        );
        assert!(
            PackedGroupValues::try_new(&Arc::new(wide)).is_none(),
            "36 fixed bytes do not fit in 32"
        );
    }
}
