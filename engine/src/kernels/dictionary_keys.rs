//! [`DictionaryGroupValues`]: a [`GroupValues`] for keys with dictionary-encoded columns,
//! which interns each dictionary value once, not each row.
//!
//! A dictionary column (a Parquet string column read as it is stored, or a pandas category)
//! carries each distinct value once and a small integer per row. Interning its rows as
//! strings would look at every row's bytes; here each dictionary column has a value table
//! that interns the dictionary's values, once per dictionary (the batches of a row group
//! share theirs, and a batch with the dictionary of the batch before reuses its mapping), so
//! a row's value is its dictionary key mapped to a value id. The rows' keys, with each
//! dictionary column replaced by its value ids, then go to an inner table for fixed-width
//! keys ([`new_group_values`]).
//!
//! When every key column is a dictionary and the dictionaries are small, a row's key is
//! first a position in a dense array of the combinations of dictionary keys
//! (`key₁ × (len₂ + 1) + key₂ …`, the `+ 1` for null): only the first row of each
//! combination in a batch reaches the inner table, and every other row costs one array
//! access.
//!
//! Emission gives dictionary columns again: the emitted groups' value ids, as keys of the
//! column's type, over every value the column has seen. A null value of a dictionary and a
//! null key are the same null key. Only dictionaries with 32- or 64-bit keys are taken (an
//! emitted column's keys index all the values seen, which a narrower key may not reach).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, UInt32Array, make_array, new_empty_array,
};
use datafusion::arrow::compute::{CastOptions, cast_with_options, concat, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::GroupValues;

use super::packed_keys::new_group_values;

/// The id of a null value.
const NULL_ID: u32 = u32::MAX;

/// A combination not seen yet in this batch (dense path).
const ABSENT: u32 = u32::MAX;

/// The most combinations of dictionary keys the dense path takes.
const MAX_DENSE_COMBINATIONS: usize = 1 << 16;

/// Whether `data_type` is a dictionary this table takes.
pub fn is_interned_dictionary(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Dictionary(key, _)
            if matches!(key.as_ref(), DataType::Int32 | DataType::UInt32 | DataType::Int64 | DataType::UInt64)
    )
}

/// One dictionary column: its values' ids.
struct DictionaryColumn {
    /// The column's type, which emitted columns have.
    data_type: DataType,
    /// Interns the column's values: a value's id is its group id here.
    values: Box<dyn GroupValues>,
    /// The values by id, in chunks as they came.
    seen: Vec<ArrayRef>,
    /// The dictionary last mapped and the id of each of its values (`NULL_ID` for null).
    last_dictionary: Option<ArrayRef>,
    ids: Vec<u32>,
    scratch: Vec<usize>,
}

impl DictionaryColumn {
    fn try_new(data_type: &DataType) -> Result<Self> {
        let DataType::Dictionary(_, value_type) = data_type else {
            return internal_err!("{data_type} is not a dictionary");
        };
        let value_schema = Arc::new(Schema::new(vec![Field::new(
            "value",
            value_type.as_ref().clone(),
            true,
        )]));
        Ok(Self {
            data_type: data_type.clone(),
            values: new_group_values(value_schema)?,
            seen: Vec::new(),
            last_dictionary: None,
            ids: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Maps `dictionary`'s values to ids, interning those not seen, unless it is the
    /// dictionary mapped last.
    fn map_dictionary(&mut self, dictionary: &ArrayRef) -> Result<()> {
        if let Some(last) = &self.last_dictionary
            && (Arc::ptr_eq(last, dictionary) || last.to_data().ptr_eq(&dictionary.to_data()))
        {
            return Ok(());
        }
        let known = self.values.len();
        self.values
            .intern(std::slice::from_ref(dictionary), &mut self.scratch)?;
        // New ids are handed out in order of first appearance: their first positions, in
        // order, are the new values in id order.
        let mut next = known;
        let mut first_positions = Vec::new();
        for (position, id) in self.scratch.iter().enumerate() {
            if *id == next {
                first_positions.push(position as u32);
                next += 1;
            }
        }
        if next != self.values.len() {
            return internal_err!("dictionary values interned out of order");
        }
        if !first_positions.is_empty() {
            let positions = UInt32Array::from(first_positions);
            self.seen.push(take(dictionary.as_ref(), &positions, None)?);
        }
        let nulls = dictionary.logical_nulls();
        self.ids.clear();
        self.ids.extend(
            self.scratch
                .iter()
                .enumerate()
                .map(|(position, id)| match &nulls {
                    Some(nulls) if nulls.is_null(position) => NULL_ID,
                    _ => *id as u32,
                }),
        );
        self.last_dictionary = Some(Arc::clone(dictionary));
        Ok(())
    }

    /// Each row's dictionary key (`dictionary length` for a null key), with the column's
    /// dictionary mapped.
    fn row_keys(&mut self, column: &ArrayRef) -> Result<Vec<usize>> {
        let Some(dictionary) = column.as_any_dictionary_opt() else {
            return internal_err!("expected a dictionary column, got {}", column.data_type());
        };
        let values = dictionary.values();
        let null_key = values.len();
        if values.is_empty() {
            // Every key is null: no value may be mapped for it.
            self.ids.clear();
            self.last_dictionary = None;
            return Ok(vec![null_key; column.len()]);
        }
        self.map_dictionary(values)?;
        let mut keys = dictionary.normalized_keys();
        if let Some(nulls) = dictionary.keys().nulls() {
            for (key, valid) in keys.iter_mut().zip(nulls.iter()) {
                if !valid {
                    *key = null_key;
                }
            }
        }
        Ok(keys)
    }

    /// The value id of dictionary key `key` of the dictionary mapped last.
    fn id_of(&self, key: usize) -> u32 {
        self.ids.get(key).copied().unwrap_or(NULL_ID)
    }

    /// Value ids as a column for the inner table.
    fn id_column(&self, keys: impl Iterator<Item = usize>) -> ArrayRef {
        Arc::new(UInt32Array::from_iter(keys.map(|key| {
            let id = self.id_of(key);
            (id != NULL_ID).then_some(id)
        })))
    }

    /// Emitted value ids as a column of this dictionary's type.
    fn dictionary_of(&mut self, ids: &ArrayRef) -> Result<ArrayRef> {
        let DataType::Dictionary(key_type, value_type) = &self.data_type else {
            return internal_err!("{} is not a dictionary", self.data_type);
        };
        if self.seen.len() > 1 {
            let chunks: Vec<&dyn Array> = self.seen.iter().map(|c| c.as_ref()).collect();
            self.seen = vec![concat(&chunks)?];
        }
        let values = match self.seen.first() {
            Some(values) => Arc::clone(values),
            None => new_empty_array(value_type),
        };
        let options = CastOptions {
            safe: false,
            ..Default::default()
        };
        let keys = cast_with_options(ids, key_type, &options)?.to_data();
        let data = ArrayData::builder(self.data_type.clone())
            .len(keys.len())
            .nulls(keys.nulls().cloned())
            .add_buffer(keys.buffers()[0].clone())
            .add_child_data(values.to_data())
            .build()?;
        Ok(make_array(data))
    }

    fn size(&self) -> usize {
        self.values.size()
            + self
                .seen
                .iter()
                .map(|c| c.get_array_memory_size())
                .sum::<usize>()
            + self.ids.capacity() * size_of::<u32>()
            + self.scratch.capacity() * size_of::<usize>()
    }
}

/// A key column: a dictionary, or another column interned as it is.
enum KeyColumn {
    Dictionary(Box<DictionaryColumn>),
    Plain,
}

/// Groups of keys with dictionary columns; see the module documentation.
pub struct DictionaryGroupValues {
    columns: Vec<KeyColumn>,
    inner: Box<dyn GroupValues>,
    /// Dense path: group (or `ABSENT`) per combination of dictionary keys.
    dense: Vec<u32>,
    inner_groups: Vec<usize>,
}

impl DictionaryGroupValues {
    /// Groups over `schema`; `None` when no column is a dictionary this table takes.
    pub fn try_new(schema: &SchemaRef) -> Result<Option<Self>> {
        if !schema
            .fields()
            .iter()
            .any(|f| is_interned_dictionary(f.data_type()))
        {
            return Ok(None);
        }
        let mut columns = Vec::with_capacity(schema.fields().len());
        let mut inner_fields = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            if is_interned_dictionary(field.data_type()) {
                columns.push(KeyColumn::Dictionary(Box::new(DictionaryColumn::try_new(
                    field.data_type(),
                )?)));
                inner_fields.push(Field::new(field.name(), DataType::UInt32, true));
            } else {
                columns.push(KeyColumn::Plain);
                inner_fields.push(field.as_ref().clone());
            }
        }
        Ok(Some(Self {
            columns,
            inner: new_group_values(Arc::new(Schema::new(inner_fields)))?,
            dense: Vec::new(),
            inner_groups: Vec::new(),
        }))
    }

    /// Interns through the dense array of key combinations: `keys` per column, each in
    /// `0..=lengths[c]`.
    fn intern_dense(
        &mut self,
        keys: &[Vec<usize>],
        lengths: &[usize],
        rows: usize,
        groups: &mut Vec<usize>,
    ) -> Result<()> {
        let combinations: usize = lengths.iter().map(|l| l + 1).product();
        if self.dense.len() < combinations {
            self.dense.resize(combinations, ABSENT);
        }
        let mut codes = vec![0usize; rows];
        for (column, length) in keys.iter().zip(lengths) {
            for (code, key) in codes.iter_mut().zip(column) {
                *code = *code * (length + 1) + key;
            }
        }
        // The first row of each combination, in row order.
        let mut first_rows: Vec<usize> = Vec::new();
        for (row, code) in codes.iter().enumerate() {
            let slot = &mut self.dense[*code];
            if *slot == ABSENT {
                *slot = first_rows.len() as u32;
                first_rows.push(row);
            }
        }
        let id_columns: Vec<ArrayRef> = self
            .columns
            .iter()
            .zip(keys)
            .map(|(column, keys)| match column {
                KeyColumn::Dictionary(column) => {
                    Ok(column.id_column(first_rows.iter().map(|row| keys[*row])))
                }
                KeyColumn::Plain => internal_err!("dense path with a plain column"),
            })
            .collect::<Result<_>>()?;
        self.inner.intern(&id_columns, &mut self.inner_groups)?;
        groups.clear();
        groups.extend(
            codes
                .iter()
                .map(|code| self.inner_groups[self.dense[*code] as usize]),
        );
        for row in &first_rows {
            self.dense[codes[*row]] = ABSENT;
        }
        Ok(())
    }
}

impl GroupValues for DictionaryGroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        if cols.len() != self.columns.len() {
            return internal_err!(
                "{} key columns for a table of {}",
                cols.len(),
                self.columns.len()
            );
        }
        let rows = cols.first().map_or(0, |c| c.len());
        let mut keys: Vec<Vec<usize>> = Vec::with_capacity(cols.len());
        let mut lengths: Vec<usize> = Vec::with_capacity(cols.len());
        for (column, values) in self.columns.iter_mut().zip(cols) {
            if let KeyColumn::Dictionary(column) = column {
                keys.push(column.row_keys(values)?);
                lengths.push(values.as_any_dictionary().values().len());
            }
        }
        let dense = keys.len() == cols.len()
            && lengths
                .iter()
                .try_fold(1usize, |product, l| product.checked_mul(l + 1))
                .is_some_and(|c| c <= MAX_DENSE_COMBINATIONS);
        if dense {
            return self.intern_dense(&keys, &lengths, rows, groups);
        }
        let mut dictionary_keys = keys.iter();
        let inner_columns: Vec<ArrayRef> = self
            .columns
            .iter()
            .zip(cols)
            .map(|(column, values)| match column {
                KeyColumn::Dictionary(column) => match dictionary_keys.next() {
                    Some(keys) => Ok(column.id_column(keys.iter().copied())),
                    None => internal_err!("a dictionary column without keys"),
                },
                KeyColumn::Plain => Ok(Arc::clone(values)),
            })
            .collect::<Result<_>>()?;
        self.inner.intern(&inner_columns, groups)
    }

    fn size(&self) -> usize {
        self.inner.size()
            + self
                .columns
                .iter()
                .map(|c| match c {
                    KeyColumn::Dictionary(column) => column.size(),
                    KeyColumn::Plain => 0,
                })
                .sum::<usize>()
            + self.dense.capacity() * size_of::<u32>()
            + self.inner_groups.capacity() * size_of::<usize>()
    }

    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let emitted = self.inner.emit(emit_to)?;
        let columns = self
            .columns
            .iter_mut()
            .zip(emitted)
            .map(|(column, values)| match column {
                KeyColumn::Dictionary(column) => column.dictionary_of(&values),
                KeyColumn::Plain => Ok(values),
            })
            .collect::<Result<Vec<_>>>()?;
        if matches!(emit_to, EmitTo::All) {
            self.clear_shrink(0);
        }
        Ok(columns)
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        self.inner.clear_shrink(num_rows);
        for column in &mut self.columns {
            if let KeyColumn::Dictionary(column) = column
                && let Ok(fresh) = DictionaryColumn::try_new(&column.data_type)
            {
                **column = fresh;
            }
        }
        self.dense = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{DictionaryArray, Int32Array, Int64Array, StringArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::Int32Type;
    use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
    use std::collections::HashMap;

    use super::*;
    use crate::splitmix64;

    fn dictionary_type() -> DataType {
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
    }

    /// A dictionary of `size` values (some repeated, one null when `null_value`) and `rows`
    /// random keys over it, a tenth of them null.
    fn random_dictionary(seed: u64, rows: usize, values: &ArrayRef) -> ArrayRef {
        let size = values.len() as u64;
        let keys: Int32Array = (0..rows as u64)
            .map(|i| {
                let draw = splitmix64(seed ^ i.wrapping_mul(0x9E37_79B9));
                (!draw.is_multiple_of(10)).then(|| ((draw >> 8) % size) as i32)
            })
            .collect();
        Arc::new(DictionaryArray::<Int32Type>::try_new(keys, Arc::clone(values)).unwrap())
    }

    fn values(seed: u64, size: usize, null_value: bool) -> ArrayRef {
        Arc::new(StringArray::from_iter((0..size as u64).map(|i| {
            if null_value && i == 1 {
                return None;
            }
            // Values repeat within a dictionary: 7 names over `size` slots.
            Some(format!("V{}", splitmix64(seed ^ i) % 7))
        })))
    }

    fn decoded(columns: &[ArrayRef]) -> Vec<ArrayRef> {
        columns
            .iter()
            .map(|c| match c.data_type() {
                DataType::Dictionary(_, value) => cast(c, value).unwrap(),
                _ => Arc::clone(c),
            })
            .collect()
    }

    /// Group ids by key in order of first appearance, over the decoded values: what
    /// DataFusion's tables hand out.
    #[derive(Default)]
    struct Reference {
        ids: HashMap<OwnedRow, usize>,
        keys: Vec<OwnedRow>,
    }

    impl Reference {
        fn intern(&mut self, converter: &RowConverter, columns: &[ArrayRef]) -> Vec<usize> {
            let rows = converter.convert_columns(&decoded(columns)).unwrap();
            rows.iter()
                .map(|row| {
                    *self.ids.entry(row.owned()).or_insert_with(|| {
                        self.keys.push(row.owned());
                        self.keys.len() - 1
                    })
                })
                .collect()
        }

        fn emit_first(&mut self, n: usize) -> Vec<OwnedRow> {
            let emitted: Vec<OwnedRow> = self.keys.drain(..n).collect();
            self.ids = self.keys.iter().cloned().zip(0..).collect();
            emitted
        }
    }

    fn emitted_rows(converter: &RowConverter, columns: &[ArrayRef]) -> Vec<OwnedRow> {
        let rows = converter.convert_columns(&decoded(columns)).unwrap();
        rows.iter().map(|row| row.owned()).collect()
    }

    /// Interns `batches`, emitting the first `first` groups after batch 2, and checks
    /// group ids and emitted keys against the ids the decoded values get.
    fn check_against_values(schema: SchemaRef, batches: Vec<Vec<ArrayRef>>, first: usize) {
        let converter = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Dictionary(_, value) => SortField::new(value.as_ref().clone()),
                    other => SortField::new(other.clone()),
                })
                .collect(),
        )
        .unwrap();
        let mut ours = DictionaryGroupValues::try_new(&schema).unwrap().unwrap();
        let mut reference = Reference::default();
        let mut groups = Vec::new();
        for (index, batch) in batches.iter().enumerate() {
            ours.intern(batch, &mut groups).unwrap();
            assert_eq!(groups, reference.intern(&converter, batch), "batch {index}");
            assert_eq!(ours.len(), reference.keys.len());
            if index == 2 {
                let emitted = ours.emit(EmitTo::First(first)).unwrap();
                assert_eq!(emitted[0].data_type(), schema.field(0).data_type());
                assert_eq!(
                    emitted_rows(&converter, &emitted),
                    reference.emit_first(first)
                );
            }
        }
        let emitted = ours.emit(EmitTo::All).unwrap();
        let all = reference.keys.len();
        assert_eq!(
            emitted_rows(&converter, &emitted),
            reference.emit_first(all)
        );
        assert!(ours.is_empty());
        // A table emptied by `EmitTo::All` starts again from id 0.
        ours.intern(&batches[0], &mut groups).unwrap();
        assert_eq!(groups, Reference::default().intern(&converter, &batches[0]));
    }

    #[test]
    fn two_dictionary_columns_intern_as_their_values_do() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("trader", dictionary_type(), true),
            Field::new("symbol", dictionary_type(), true),
        ]));
        let shared = (values(1, 12, true), values(2, 9, false));
        let batches = (0..6u64)
            .map(|b| {
                // Batches 0, 1, 4 share dictionaries (a row group's); the others bring new
                // ones that repeat some of the values.
                let (traders, symbols) = if b % 3 == 2 || b == 3 {
                    (
                        values(10 + b, 5 + b as usize, b == 3),
                        values(20 + b, 4, false),
                    )
                } else {
                    shared.clone()
                };
                vec![
                    random_dictionary(100 + b, 300, &traders),
                    random_dictionary(200 + b, 300, &symbols),
                ]
            })
            .collect();
        check_against_values(schema, batches, 5);
    }

    #[test]
    fn a_dictionary_beside_a_plain_column_interns_as_its_values_do() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("symbol", dictionary_type(), true),
            Field::new("venue", DataType::Int64, true),
        ]));
        let batches = (0..5u64)
            .map(|b| {
                let venues: Int64Array = (0..200u64)
                    .map(|i| (i % 11 != 0).then(|| (splitmix64(b ^ i) % 3) as i64))
                    .collect();
                vec![
                    random_dictionary(300 + b, 200, &values(b % 2, 6, true)),
                    Arc::new(venues) as ArrayRef,
                ]
            })
            .collect();
        check_against_values(schema, batches, 4);
    }

    #[test]
    fn large_dictionaries_intern_as_their_values_do() {
        // 400 × 300 combinations: too many for the dense array.
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", dictionary_type(), true),
            Field::new("b", dictionary_type(), true),
        ]));
        let many = |seed: u64, size: u64| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(
                (0..size).map(|i| format!("K{}", splitmix64(seed ^ i) % 500)),
            ))
        };
        let batches = (0..4u64)
            .map(|b| {
                vec![
                    random_dictionary(400 + b, 1000, &many(b, 400)),
                    random_dictionary(500 + b, 1000, &many(b + 7, 300)),
                ]
            })
            .collect();
        check_against_values(schema, batches, 100);
    }

    #[test]
    fn a_batch_of_null_keys_after_another_dictionary_stays_null() {
        // An all-null column has an empty dictionary: its keys must not reach the values of
        // the dictionary mapped before it.
        let schema = Arc::new(Schema::new(vec![Field::new("k", dictionary_type(), true)]));
        let no_values: ArrayRef = Arc::new(StringArray::from(Vec::<Option<&str>>::new()));
        let all_null: ArrayRef = Arc::new(
            DictionaryArray::<Int32Type>::try_new(Int32Array::from(vec![None, None]), no_values)
                .unwrap(),
        );
        let batches = vec![
            vec![random_dictionary(1, 50, &values(3, 4, false))],
            vec![all_null],
            vec![random_dictionary(2, 50, &values(4, 4, true))],
        ];
        check_against_values(Arc::clone(&schema), batches.clone(), 1);
        // The same beside a plain column (the path without the dense array).
        let two = Arc::new(Schema::new(vec![
            Field::new("k", dictionary_type(), true),
            Field::new("g", DataType::Int64, true),
        ]));
        let with_plain = batches
            .into_iter()
            .map(|mut batch| {
                let rows = batch[0].len() as i64;
                batch.push(Arc::new(Int64Array::from_iter_values(
                    (0..rows).map(|i| i % 2),
                )));
                batch
            })
            .collect();
        check_against_values(two, with_plain, 1);
    }

    #[test]
    fn narrow_dictionary_keys_are_left_to_other_tables() {
        assert!(!is_interned_dictionary(&DataType::Dictionary(
            Box::new(DataType::Int8),
            Box::new(DataType::Utf8)
        )));
        assert!(is_interned_dictionary(&dictionary_type()));
    }
}
