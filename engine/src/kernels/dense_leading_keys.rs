//! [`DenseLeadingKeyGroupValues`]: a [`GroupValues`] for keys of an Int64 id followed by up to
//! [`MAX_OTHER_COLUMNS`] 8-byte columns and at most one string column last (an auction's id
//! and its category, a person's id and name), interned by an array over the id's range.
//!
//! A hash table scatters keys over its slots: Nexmark q4 groups its join's rows by (auction,
//! category), 576 000 keys each met about a dozen times within a batch or two and never
//! again, so nearly every row's lookup misses the caches twice (the slot, then the key). The
//! ids a stretch of the stream names lie close together, and so do their groups, handed out
//! in order of first appearance: here `slots[id - base]` (a [`DenseRange`]) heads a chain of
//! the groups whose first column is `id`, usually one, since the other columns mostly depend
//! on the id. A row loads its id's slot, compares the other columns with those its chain's
//! groups keep (as 8-byte words, a group's beside its neighbours', and the string's bytes),
//! and adds a group at the head of the chain when none matches.
//!
//! The keys move, in group order and keeping their ids, to the interner
//! [`new_group_values`](super::new_group_values) would otherwise have chosen (the packed one),
//! which interns from then on, when: a key column holds a null, the ids are too sparse for a
//! dense range (the bound [`DenseRange`] sets), or a chain would outgrow [`MAX_CHAIN`]
//! groups (the first column is far from a key of its own: `(category, auction)`).
//!
//! Group ids are handed out in order of first appearance, and emitting the first `n` groups
//! shifts the others' ids down by `n`, as DataFusion's interners do.
//!
//! `bench/benches/kernels.rs` (`intern_two_int64_keys_*`, `intern_id_and_name_*`) measures
//! this against the packed interner and DataFusion's `GroupValuesColumn`.

use std::mem::size_of;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, GenericStringArray, Int64Array, LargeStringArray,
    OffsetSizeTrait, StringArray, StringViewArray, make_array,
};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::{self, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use super::dense_keys::{DenseRange, EMPTY};
use super::packed_encoding::has_bitwise_equality;
use super::packed_keys::PackedGroupValues;
use crate::watermark::time_range;

/// 8-byte columns after the id this interner keeps beside each group.
const MAX_OTHER_COLUMNS: usize = 3;

/// Groups one id's chain may hold before the keys move to the hashed interner.
const MAX_CHAIN: usize = 4;

/// The interner's state: dense while the keys allow, else the packed (or DataFusion's).
enum Interner {
    Dense(LeadingSlots),
    Hashed(Box<dyn GroupValues>),
}

/// The values of a key's trailing string column, row by row.
trait RowStrings {
    /// Whether the key has a string column (else every group's string is empty and none
    /// is kept).
    const PRESENT: bool;
    fn bytes(&self, row: usize) -> &[u8];
}

/// A key without a string column.
struct NoStrings;

impl RowStrings for NoStrings {
    const PRESENT: bool = false;
    fn bytes(&self, _row: usize) -> &[u8] {
        &[]
    }
}

impl RowStrings for StringViewArray {
    const PRESENT: bool = true;
    fn bytes(&self, row: usize) -> &[u8] {
        self.value(row).as_bytes()
    }
}

impl<O: OffsetSizeTrait> RowStrings for GenericStringArray<O> {
    const PRESENT: bool = true;
    fn bytes(&self, row: usize) -> &[u8] {
        self.value(row).as_bytes()
    }
}

/// Each group's string, one after another: group `g`'s bytes are
/// `bytes[offsets[g]..offsets[g + 1]]`.
struct GroupStrings {
    offsets: Vec<usize>,
    bytes: Vec<u8>,
}

impl Default for GroupStrings {
    fn default() -> Self {
        Self {
            offsets: vec![0],
            bytes: Vec::new(),
        }
    }
}

impl GroupStrings {
    fn get(&self, group: usize) -> &[u8] {
        &self.bytes[self.offsets[group]..self.offsets[group + 1]]
    }

    fn push(&mut self, value: &[u8]) {
        self.bytes.extend_from_slice(value);
        self.offsets.push(self.bytes.len());
    }

    /// Takes the first `n` strings out; the others move to the front.
    fn take(&mut self, n: usize) -> Self {
        let end = self.offsets[n];
        let bytes: Vec<u8> = self.bytes.drain(..end).collect();
        let offsets: Vec<usize> = self.offsets[..=n].to_vec();
        self.offsets.drain(..n);
        self.offsets.iter_mut().for_each(|offset| *offset -= end);
        Self { offsets, bytes }
    }

    /// The strings as a column of `data_type`.
    fn into_array(self, data_type: &DataType) -> Result<ArrayRef> {
        // The bytes were copied from string columns, whole values at a time.
        let array: ArrayRef = match i32::try_from(self.bytes.len()) {
            Ok(_) => {
                let offsets = self.offsets.iter().map(|offset| *offset as i32);
                let offsets = OffsetBuffer::new(ScalarBuffer::from_iter(offsets));
                Arc::new(StringArray::try_new(offsets, self.bytes.into(), None)?)
            }
            Err(_) => {
                let offsets = self.offsets.iter().map(|offset| *offset as i64);
                let offsets = OffsetBuffer::new(ScalarBuffer::from_iter(offsets));
                Arc::new(LargeStringArray::try_new(offsets, self.bytes.into(), None)?)
            }
        };
        if array.data_type() == data_type {
            return Ok(array);
        }
        Ok(cast(&array, data_type)?)
    }

    fn size(&self) -> usize {
        self.offsets.capacity() * size_of::<usize>() + self.bytes.capacity()
    }
}

/// The groups, chained by their first column's value.
struct LeadingSlots {
    /// Per id, the newest group of its chain.
    range: DenseRange,
    /// Each group's id.
    ids: Vec<i64>,
    /// Each group's 8-byte columns as words, `width` a group.
    others: Vec<u64>,
    width: usize,
    /// Each group's string, when the key ends with a string column.
    strings: GroupStrings,
    /// Each group's next group in its id's chain, or [`EMPTY`].
    next: Vec<u32>,
}

impl LeadingSlots {
    fn new(width: usize) -> Self {
        Self {
            range: DenseRange::default(),
            ids: Vec::new(),
            others: Vec::new(),
            width,
            strings: GroupStrings::default(),
            next: Vec::new(),
        }
    }

    /// Interns `rows` of `ids`, `others` (the 8-byte columns' words) and `strings`, appending
    /// their group ids; stops before the first row whose chain is full, returning its index.
    fn intern_rows<const WIDTH: usize, S: RowStrings>(
        &mut self,
        ids: &[i64],
        others: &[&[u64]],
        strings: &S,
        groups: &mut Vec<usize>,
    ) -> usize {
        let others: [&[u64]; WIDTH] = std::array::from_fn(|c| others[c]);
        for (row, &id) in ids.iter().enumerate() {
            let key: [u64; WIDTH] = std::array::from_fn(|c| others[c][row]);
            let string = strings.bytes(row);
            let slot = self.range.slot(id);
            let head = self.range.slots[slot];
            let mut group = head;
            let mut chain = 0;
            while group != EMPTY {
                let at = group as usize * WIDTH;
                if self.others[at..at + WIDTH] == key
                    && (!S::PRESENT || self.strings.get(group as usize) == string)
                {
                    break;
                }
                group = self.next[group as usize];
                chain += 1;
            }
            if group == EMPTY {
                if chain == MAX_CHAIN {
                    return row;
                }
                group = self.ids.len() as u32;
                self.ids.push(id);
                self.others.extend_from_slice(&key);
                if S::PRESENT {
                    self.strings.push(string);
                }
                self.next.push(head);
                self.range.slots[slot] = group;
            }
            groups.push(group as usize);
        }
        ids.len()
    }

    /// Interns as [`Self::intern_rows`] does, for this table's width.
    fn intern_rows_of_width<S: RowStrings>(
        &mut self,
        ids: &[i64],
        others: &[&[u64]],
        strings: &S,
        groups: &mut Vec<usize>,
    ) -> usize {
        match self.width {
            0 => self.intern_rows::<0, S>(ids, others, strings, groups),
            1 => self.intern_rows::<1, S>(ids, others, strings, groups),
            2 => self.intern_rows::<2, S>(ids, others, strings, groups),
            _ => self.intern_rows::<3, S>(ids, others, strings, groups),
        }
    }

    /// Takes the first `n` groups out, as their ids, 8-byte columns' words and strings; the
    /// others' ids shift down by `n` and their chains are linked again.
    fn take(&mut self, n: usize) -> TakenKeys {
        let n = n.min(self.ids.len());
        if n == self.ids.len() {
            let taken = TakenKeys {
                ids: std::mem::take(&mut self.ids),
                others: std::mem::take(&mut self.others),
                strings: std::mem::take(&mut self.strings),
            };
            *self = Self::new(self.width);
            return taken;
        }
        let taken = TakenKeys {
            ids: self.ids.drain(..n).collect(),
            others: self.others.drain(..n * self.width).collect(),
            strings: match self.strings.offsets.len() > 1 {
                true => self.strings.take(n),
                false => GroupStrings::default(),
            },
        };
        self.next.clear();
        self.range.slots.fill(EMPTY);
        for (group, &id) in self.ids.iter().enumerate() {
            let slot = self.range.slot(id);
            self.next.push(self.range.slots[slot]);
            self.range.slots[slot] = group as u32;
        }
        taken
    }
}

/// Groups taken out of the dense table, in group order.
struct TakenKeys {
    ids: Vec<i64>,
    others: Vec<u64>,
    strings: GroupStrings,
}

/// Groups of an Int64 id, 8-byte columns and a string; see the module documentation.
pub struct DenseLeadingKeyGroupValues {
    schema: SchemaRef,
    /// The type of the key's trailing string column, if it has one.
    string_type: Option<DataType>,
    interner: Interner,
}

/// Whether `data_type` is a string type whose values are equal exactly when their bytes are.
fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

impl DenseLeadingKeyGroupValues {
    /// `None` unless `schema` is an Int64 column followed by up to [`MAX_OTHER_COLUMNS`]
    /// columns of 8-byte values equal exactly when their bytes are, then at most one string
    /// column, and at least one column after the id.
    pub fn try_new(schema: &SchemaRef) -> Option<Self> {
        let [first, others @ ..] = schema.fields().as_ref() else {
            return None;
        };
        let string_type = others
            .last()
            .map(|field| field.data_type())
            .filter(|data_type| is_string(data_type))
            .cloned();
        let words = &others[..others.len() - usize::from(string_type.is_some())];
        let fits = first.data_type() == &DataType::Int64
            && !others.is_empty()
            && words.len() <= MAX_OTHER_COLUMNS
            && words.iter().all(|field| {
                let data_type = field.data_type();
                has_bitwise_equality(data_type) && data_type.primitive_width() == Some(8)
            });
        fits.then(|| Self {
            schema: Arc::clone(schema),
            interner: Interner::Dense(LeadingSlots::new(words.len())),
            string_type,
        })
    }

    /// Whether the keys are still interned by the array (for tests).
    #[cfg(test)]
    fn is_dense(&self) -> bool {
        matches!(self.interner, Interner::Dense(_))
    }

    /// Hands every key, in group order, to the hashed interner, which interns from now on
    /// (until `clear_shrink`).
    fn hashed_interner(&mut self) -> Result<&mut Box<dyn GroupValues>> {
        if let Interner::Dense(dense) = &mut self.interner {
            let mut hashed: Box<dyn GroupValues> = match PackedGroupValues::try_new(&self.schema) {
                Some(packed) => Box::new(packed),
                None => {
                    group_values::new_group_values(Arc::clone(&self.schema), &GroupOrdering::None)?
                }
            };
            let groups = dense.ids.len();
            let keys = key_arrays(&self.schema, dense.take(groups))?;
            let mut assigned = Vec::with_capacity(groups);
            hashed.intern(&keys, &mut assigned)?;
            if assigned.iter().enumerate().any(|(group, id)| group != *id) {
                return internal_err!("dense leading keys: the hashed interner renumbered groups");
            }
            self.interner = Interner::Hashed(hashed);
        }
        match &mut self.interner {
            Interner::Hashed(hashed) => Ok(hashed),
            Interner::Dense(_) => internal_err!("dense leading keys: still dense"),
        }
    }
}

/// The key columns of `schema` from groups taken out of the dense table.
fn key_arrays(schema: &SchemaRef, taken: TakenKeys) -> Result<Vec<ArrayRef>> {
    let fields = schema.fields();
    let string_field = fields
        .last()
        .filter(|f| fields.len() > 1 && is_string(f.data_type()));
    let width = fields.len() - 1 - usize::from(string_field.is_some());
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(taken.ids))];
    for (column, field) in fields.iter().skip(1).take(width).enumerate() {
        let words: Vec<u64> = taken
            .others
            .iter()
            .skip(column)
            .step_by(width)
            .copied()
            .collect();
        let data = ArrayData::builder(field.data_type().clone())
            .len(words.len())
            .add_buffer(Buffer::from_vec(words))
            .build()?;
        columns.push(make_array(data));
    }
    if let Some(field) = string_field {
        columns.push(taken.strings.into_array(field.data_type())?);
    }
    Ok(columns)
}

impl GroupValues for DenseLeadingKeyGroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        groups.clear();
        let [first, others @ ..] = cols else {
            return internal_err!("dense leading keys: no key column");
        };
        let Some(ids) = first.as_primitive_opt::<Int64Type>() else {
            return internal_err!(
                "dense leading keys: an Int64 id expected, {}",
                first.data_type()
            );
        };
        let rows = ids.len();
        let mut done = 0;
        if let Interner::Dense(dense) = &mut self.interner {
            let (words, strings) = match self.string_type {
                Some(_) => others.split_at(others.len().saturating_sub(1)),
                None => (others, &[][..]),
            };
            let no_nulls = cols.iter().all(|column| column.null_count() == 0);
            let fits = no_nulls
                && words.len() == dense.width
                && strings.len() == usize::from(self.string_type.is_some())
                && dense.ids.len() + rows < EMPTY as usize
                && time_range(ids)
                    .is_none_or(|(low, high)| dense.range.cover(low, high, dense.ids.len() + rows));
            if fits {
                let data: Vec<ArrayData> = words.iter().map(|column| column.to_data()).collect();
                let words: Vec<&[u64]> = data.iter().map(|data| data.buffer::<u64>(0)).collect();
                let ids = ids.values();
                done = match strings.first().map(|column| (column, column.data_type())) {
                    None => dense.intern_rows_of_width(ids, &words, &NoStrings, groups),
                    Some((column, DataType::Utf8View)) => {
                        dense.intern_rows_of_width(ids, &words, column.as_string_view(), groups)
                    }
                    Some((column, DataType::Utf8)) => {
                        dense.intern_rows_of_width(ids, &words, column.as_string::<i32>(), groups)
                    }
                    Some((column, DataType::LargeUtf8)) => {
                        dense.intern_rows_of_width(ids, &words, column.as_string::<i64>(), groups)
                    }
                    Some((_, other)) => {
                        return internal_err!("dense leading keys: a string expected, {other}");
                    }
                };
                if done == rows {
                    return Ok(());
                }
            }
        }
        // The rest of the batch, from the first row the dense chains could not take.
        let rest: Vec<ArrayRef> = cols.iter().map(|c| c.slice(done, rows - done)).collect();
        let mut rest_groups = Vec::with_capacity(rows - done);
        self.hashed_interner()?.intern(&rest, &mut rest_groups)?;
        groups.extend(rest_groups);
        Ok(())
    }

    fn size(&self) -> usize {
        match &self.interner {
            Interner::Dense(dense) => {
                dense.range.slots.capacity() * size_of::<u32>()
                    + dense.ids.capacity() * size_of::<i64>()
                    + dense.others.capacity() * size_of::<u64>()
                    + dense.strings.size()
                    + dense.next.capacity() * size_of::<u32>()
            }
            Interner::Hashed(hashed) => hashed.size(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match &self.interner {
            Interner::Dense(dense) => dense.ids.len(),
            Interner::Hashed(hashed) => hashed.len(),
        }
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        match &mut self.interner {
            Interner::Dense(dense) => {
                let n = match emit_to {
                    EmitTo::All => dense.ids.len(),
                    EmitTo::First(n) => n,
                };
                key_arrays(&self.schema, dense.take(n))
            }
            Interner::Hashed(hashed) => hashed.emit(emit_to),
        }
    }

    fn clear_shrink(&mut self, _num_rows: usize) {
        let width = self.schema.fields().len() - 1 - usize::from(self.string_type.is_some());
        self.interner = Interner::Dense(LeadingSlots::new(width));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampMillisecondArray;
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    fn schema(others: &[DataType]) -> SchemaRef {
        let mut fields = vec![Field::new("id", DataType::Int64, true)];
        for (i, data_type) in others.iter().enumerate() {
            fields.push(Field::new(format!("k{i}"), data_type.clone(), true));
        }
        Arc::new(Schema::new(fields))
    }

    fn int64_schema() -> SchemaRef {
        schema(&[DataType::Int64])
    }

    fn columns(rows: &[(Option<i64>, Option<i64>)]) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
        ]
    }

    /// Interns `batches` into this interner and DataFusion's, emitting the first `emit`
    /// groups of both after each batch, and checks they agree on every id and key.
    fn agrees_with_datafusion(
        schema: &SchemaRef,
        batches: &[Vec<ArrayRef>],
        emit: usize,
    ) -> DenseLeadingKeyGroupValues {
        let mut ours = DenseLeadingKeyGroupValues::try_new(schema).unwrap();
        let mut theirs =
            group_values::new_group_values(Arc::clone(schema), &GroupOrdering::None).unwrap();
        let (mut our_ids, mut their_ids) = (Vec::new(), Vec::new());
        for (index, batch) in batches.iter().enumerate() {
            ours.intern(batch, &mut our_ids).unwrap();
            theirs.intern(batch, &mut their_ids).unwrap();
            assert_eq!(our_ids, their_ids, "ids of batch {index}");
            assert_eq!(ours.len(), theirs.len());
            let (our_keys, their_keys) = (
                ours.emit(EmitTo::First(emit)).unwrap(),
                theirs.emit(EmitTo::First(emit)).unwrap(),
            );
            assert_eq!(our_keys, their_keys, "keys emitted after batch {index}");
        }
        let (our_keys, their_keys) = (
            ours.emit(EmitTo::All).unwrap(),
            theirs.emit(EmitTo::All).unwrap(),
        );
        assert_eq!(our_keys, their_keys);
        assert!(ours.is_empty());
        ours
    }

    /// Nexmark q4's keys: auctions in flight with their categories, a batch further on each.
    fn auctions_and_categories(batches: i64) -> Vec<Vec<ArrayRef>> {
        (0..batches)
            .map(|batch| {
                let rows: Vec<_> = (0..600)
                    .map(|row| {
                        let id = 1000 + batch * 200 + (row * 7919) % 700;
                        (Some(id), Some(10 + id % 5))
                    })
                    .collect();
                columns(&rows)
            })
            .collect()
    }

    #[test]
    fn ids_with_the_columns_they_determine_stay_dense_and_agree_with_datafusion() {
        let batches = auctions_and_categories(100);
        assert!(agrees_with_datafusion(&int64_schema(), &batches, 0).is_dense());
        assert!(agrees_with_datafusion(&int64_schema(), &batches, 37).is_dense());
    }

    #[test]
    fn an_id_of_several_keys_chains_them_and_agrees_with_datafusion() {
        // Three keys an id, met in every order, and emits that cut chains in two.
        let batches: Vec<Vec<ArrayRef>> = (0..30i64)
            .map(|batch| {
                let rows: Vec<_> = (0..90i64)
                    .map(|row| (Some(batch % 7 + row % 11), Some((row * batch) % 3)))
                    .collect();
                columns(&rows)
            })
            .collect();
        assert!(agrees_with_datafusion(&int64_schema(), &batches, 5).is_dense());
    }

    #[test]
    fn other_eight_byte_columns_come_back_in_their_types() {
        let schema = schema(&[
            DataType::Timestamp(TimeUnit::Millisecond, None),
            DataType::UInt64,
        ]);
        let batches: Vec<Vec<ArrayRef>> = (0..4i64)
            .map(|batch| {
                vec![
                    Arc::new(Int64Array::from_iter_values((0..50).map(|r| r % 9 + batch)))
                        as ArrayRef,
                    Arc::new(TimestampMillisecondArray::from_iter_values(
                        (0..50).map(|r| (r % 2) * 10_000),
                    )),
                    Arc::new(datafusion::arrow::array::UInt64Array::from_iter_values(
                        (0..50).map(|r| u64::MAX - (r % 9 + batch) as u64),
                    )),
                ]
            })
            .collect();
        assert!(agrees_with_datafusion(&schema, &batches, 3).is_dense());
    }

    #[test]
    fn a_full_chain_moves_the_keys_to_the_hashed_interner_mid_batch() {
        // (category, auction): five ids, each of a thousand keys.
        let rows: Vec<_> = (0..1000i64)
            .map(|id| (Some(10 + id % 5), Some(id)))
            .collect();
        let batches = vec![columns(&rows[..12]), columns(&rows), columns(&rows[500..])];
        assert!(!agrees_with_datafusion(&int64_schema(), &batches, 0).is_dense());
        assert!(!agrees_with_datafusion(&int64_schema(), &batches, 4).is_dense());
    }

    #[test]
    fn nulls_and_sparse_ids_move_the_keys_to_the_hashed_interner() {
        let with_null = vec![
            columns(&[(Some(1), Some(2)), (Some(3), Some(4))]),
            columns(&[(Some(1), None), (None, Some(4)), (Some(3), Some(4))]),
        ];
        assert!(!agrees_with_datafusion(&int64_schema(), &with_null, 0).is_dense());
        let sparse = vec![
            columns(&[(Some(1), Some(2)), (Some(3), Some(4))]),
            columns(&[
                (Some(i64::MAX), Some(2)),
                (Some(i64::MIN), Some(4)),
                (Some(3), Some(4)),
            ]),
        ];
        assert!(!agrees_with_datafusion(&int64_schema(), &sparse, 1).is_dense());
    }

    #[test]
    fn a_cleared_table_is_dense_and_empty_again() {
        let mut ours = DenseLeadingKeyGroupValues::try_new(&int64_schema()).unwrap();
        let mut ids = Vec::new();
        ours.intern(
            &columns(&[(Some(1), Some(1)), (Some(1 << 50), Some(1))]),
            &mut ids,
        )
        .unwrap();
        assert!(!ours.is_dense());
        ours.clear_shrink(0);
        assert!(ours.is_dense() && ours.is_empty());
        ours.intern(
            &columns(&[(Some(8), Some(1)), (Some(9), Some(1)), (Some(8), Some(1))]),
            &mut ids,
        )
        .unwrap();
        assert_eq!(ids, vec![0, 1, 0]);
    }

    /// People: ids with their names, each id's name in every batch it comes in, as `data_type`.
    fn ids_and_names(data_type: &DataType, batches: i64) -> Vec<Vec<ArrayRef>> {
        (0..batches)
            .map(|batch| {
                let ids: Vec<i64> = (0..300)
                    .map(|row| 1000 + batch * 100 + (row * 7919) % 400)
                    .collect();
                let names: Vec<String> = ids
                    .iter()
                    .map(|id| format!("person {} {}", id % 7, "x".repeat((id % 13) as usize)))
                    .collect();
                let names: ArrayRef = Arc::new(StringArray::from_iter_values(&names));
                vec![
                    Arc::new(Int64Array::from(ids)) as ArrayRef,
                    cast(&names, data_type).unwrap(),
                ]
            })
            .collect()
    }

    #[test]
    fn ids_with_their_names_stay_dense_and_agree_with_datafusion_in_every_string_type() {
        for data_type in [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View] {
            let schema = schema(std::slice::from_ref(&data_type));
            let batches = ids_and_names(&data_type, 40);
            assert!(agrees_with_datafusion(&schema, &batches, 0).is_dense());
            assert!(agrees_with_datafusion(&schema, &batches, 123).is_dense());
        }
    }

    #[test]
    fn an_id_of_several_names_chains_them_and_a_longer_chain_moves_to_the_hashed_interner() {
        // Up to four keys an id (two words, each with two names), emits cutting chains;
        // then six names for one id, which no chain holds.
        let schema = schema(&[DataType::Int64, DataType::Utf8View]);
        let batch = |rows: &[(i64, i64, &str)]| -> Vec<ArrayRef> {
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(StringViewArray::from_iter_values(rows.iter().map(|r| r.2))),
            ]
        };
        let names = ["", "a", "a name longer than twelve bytes", "b"];
        let chained: Vec<Vec<ArrayRef>> = (0..20i64)
            .map(|b| {
                let rows: Vec<_> = (0..60i64)
                    .map(|r| {
                        (
                            b % 5 + r % 9,
                            r % 2,
                            names[(r / 9 % 2 + r % 2 * 2) as usize],
                        )
                    })
                    .collect();
                batch(&rows)
            })
            .collect();
        assert!(agrees_with_datafusion(&schema, &chained, 7).is_dense());
        let mut overflowing = chained.clone();
        let six: Vec<String> = (0..6).map(|n| format!("name {n}")).collect();
        let rows: Vec<_> = six.iter().map(|name| (3, 1, name.as_str())).collect();
        overflowing.insert(5, batch(&rows));
        assert!(!agrees_with_datafusion(&schema, &overflowing, 7).is_dense());
    }

    #[test]
    fn only_an_int64_id_followed_by_eight_byte_columns_and_a_string_is_taken() {
        assert!(DenseLeadingKeyGroupValues::try_new(&schema(&[])).is_none());
        assert!(DenseLeadingKeyGroupValues::try_new(&schema(&[DataType::Int32])).is_none());
        assert!(DenseLeadingKeyGroupValues::try_new(&schema(&[DataType::Float64])).is_none());
        assert!(DenseLeadingKeyGroupValues::try_new(&schema(&[DataType::Utf8])).is_some());
        let string_then_id = schema(&[DataType::Utf8, DataType::Int64]);
        assert!(DenseLeadingKeyGroupValues::try_new(&string_then_id).is_none());
        let two_strings = schema(&[DataType::Utf8View, DataType::Utf8View]);
        assert!(DenseLeadingKeyGroupValues::try_new(&two_strings).is_none());
        let mut words_then_string = vec![DataType::Int64; 3];
        words_then_string.push(DataType::LargeUtf8);
        assert!(DenseLeadingKeyGroupValues::try_new(&schema(&words_then_string)).is_some());
        assert!(DenseLeadingKeyGroupValues::try_new(&schema(&vec![DataType::Int64; 4])).is_none());
        let utf8_first = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Int64, true),
        ]));
        assert!(DenseLeadingKeyGroupValues::try_new(&utf8_first).is_none());
    }
}
