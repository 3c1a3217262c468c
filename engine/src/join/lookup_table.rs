//! [`LookupTable`]: a bounded table indexed by its join keys, built once and probed by every
//! stream partition of a [`super::LookupJoinExec`].
//!
//! The table's rows are concatenated into one batch. Each distinct key of the table becomes a
//! group, numbered in order of first appearance; the rows of each group are listed together
//! (`group_starts` / `group_rows`), so a probe row finds its group and then its rows. Rows
//! with a null key are in no group: null keys never match.
//!
//! Two key indexes:
//! - one or two string columns whose table values are all at most 8 bytes long (symbols,
//!   codes, short ids — the common lookup keys) use the aggregation's [`ShortKeyIndex`]: a
//!   probe row is read straight from the string column into two words and found with a load
//!   and a compare. A probe string longer than 8 bytes cannot equal a table key, so such rows
//!   are set to "no match" afterwards.
//! - one integer column whose table values span a small range (at most 1 024 values, or
//!   at least 15 % of the range taken: DataFusion's conditions for its perfect hash join) is
//!   an array of groups indexed by a value's offset from the smallest: a probe row is a
//!   subtraction, a compare and a load, without a hash or a key comparison.
//! - any other keys are hashed with DataFusion's `create_hashes` and compared with its
//!   `JoinKeyComparator`.
//!
//! Table columns of short strings (at most 16 bytes, no nulls) are also kept padded into
//! 16-byte words ([`PaddedStrings`]), built once, so that the gather of the matched rows
//! moves one word per row instead of copying each string by its length.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use datafusion::arrow::compute::{max, min, take};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::{HashMap, Result, internal_err};
use datafusion::physical_expr::PhysicalExpr;

use super::{integer_values, key_comparator, rows_by_group};
use crate::kernels::{
    PaddedStrings, ShortColumns, ShortKeyIndex, StringColumn, longest_string, max_length_i32,
};
use crate::plan_util::evaluate;

/// A probe row's group when its key is not in the table.
pub(super) const NO_MATCH: u32 = u32::MAX;

/// See the module documentation.
#[derive(Debug)]
pub struct LookupTable {
    batch: RecordBatch,
    index: KeyIndex,
    /// `group_rows[group_starts[g]..group_starts[g + 1]]` are group `g`'s rows.
    group_starts: Vec<u32>,
    group_rows: Vec<u32>,
    /// Whether every group has one row: a probe row then meets at most one row.
    unique: bool,
    /// Per column of `batch`, its strings padded for fast gathers, where they fit.
    padded: Vec<Option<PaddedStrings>>,
}

#[derive(Debug)]
enum KeyIndex {
    Short(ShortKeyIndex),
    Dense(DenseKeys),
    Hashed(HashedKeys),
}

/// Ranges of at most this many values are indexed densely whatever their density.
const DENSE_SMALL_RANGE: u64 = 1_024;

/// The least share of a larger range the table's distinct values must take to be indexed
/// densely.
const DENSE_MIN_DENSITY: f64 = 0.15;

/// One integer key column over a small range: `groups[v - smallest]` is value `v`'s group.
#[derive(Debug)]
struct DenseKeys {
    smallest: i64,
    groups: Vec<u32>,
}

/// The general key index: key hash → the first group of that hash; further groups of the
/// same hash (collisions) are chained in `next`.
#[derive(Debug)]
struct HashedKeys {
    /// The table's key columns.
    keys: Vec<ArrayRef>,
    first_group: HashMap<u64, u32>,
    next: Vec<u32>,
    random_state: RandomState,
}

impl LookupTable {
    /// The table of `batch`'s rows keyed by `on` (expressions over the table).
    pub fn try_new(batch: RecordBatch, on: &[Arc<dyn PhysicalExpr>]) -> Result<Self> {
        let keys = evaluate(on, &batch)?;
        let rows = batch.num_rows();
        let valid = |row: usize| keys.iter().all(|k| k.is_valid(row));
        let mut row_groups = vec![NO_MATCH; rows];
        let mut groups = 0u32;
        let index = match short_columns_of_table(&keys)? {
            Some(ShortTable::One(columns)) => {
                KeyIndex::Short(index_short(columns, &valid, &mut row_groups, &mut groups))
            }
            Some(ShortTable::Two(columns)) => {
                KeyIndex::Short(index_short(columns, &valid, &mut row_groups, &mut groups))
            }
            None => match DenseKeys::try_new(&keys, &mut row_groups, &mut groups)? {
                Some(dense) => KeyIndex::Dense(dense),
                None => KeyIndex::Hashed(HashedKeys::try_new(
                    keys.clone(),
                    &valid,
                    &mut row_groups,
                    &mut groups,
                )?),
            },
        };
        let (group_starts, group_rows) = rows_by_group(&row_groups, groups as usize);
        let unique = group_rows.len() == groups as usize;
        let padded = batch
            .columns()
            .iter()
            .map(|column| PaddedStrings::of(column.as_ref()))
            .collect();
        Ok(Self {
            batch,
            index,
            group_starts,
            group_rows,
            unique,
            padded,
        })
    }

    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// Rows `rows` of column `column` (a null row: a null).
    pub fn take(&self, column: usize, rows: &UInt32Array) -> Result<ArrayRef> {
        match self.padded.get(column) {
            Some(Some(padded)) if rows.null_count() == 0 => padded.take(rows),
            _ => Ok(take(self.batch.column(column).as_ref(), rows, None)?),
        }
    }

    /// Whether each key of the table is on one row.
    pub fn unique(&self) -> bool {
        self.unique
    }

    /// The rows of group `group`.
    pub fn rows_of(&self, group: u32) -> &[u32] {
        let (start, end) = (
            self.group_starts[group as usize] as usize,
            self.group_starts[group as usize + 1] as usize,
        );
        &self.group_rows[start..end]
    }

    /// The first (with unique keys: the only) row of group `group`.
    pub fn first_row_of(&self, group: u32) -> u32 {
        self.group_rows[self.group_starts[group as usize] as usize]
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        let index = match &self.index {
            KeyIndex::Short(index) => index.size(),
            KeyIndex::Dense(dense) => dense.groups.capacity() * 4,
            KeyIndex::Hashed(hashed) => {
                hashed.first_group.capacity() * 16 + hashed.next.capacity() * 4
            }
        };
        self.batch.get_array_memory_size()
            + self
                .padded
                .iter()
                .flatten()
                .map(PaddedStrings::size)
                .sum::<usize>()
            + index
            + (self.group_starts.capacity() + self.group_rows.capacity()) * 4
    }

    /// Sets `groups` to the group of each row of the probe keys `keys` (evaluated on a
    /// probe batch), [`NO_MATCH`] where the key is not in the table or is null.
    pub fn find(&self, keys: &[ArrayRef], groups: &mut Vec<u32>) -> Result<()> {
        let rows = keys.first().map_or(0, |k| k.len());
        groups.clear();
        match &self.index {
            KeyIndex::Short(index) => find_short(index, keys, rows, groups)?,
            KeyIndex::Dense(dense) => dense.find(keys, groups)?,
            KeyIndex::Hashed(hashed) => hashed.find(keys, rows, groups)?,
        }
        for key in keys {
            if let Some(nulls) = key.logical_nulls().filter(|n| n.null_count() > 0) {
                for row in nulls.iter().enumerate().filter(|(_, v)| !v).map(|(r, _)| r) {
                    groups[row] = NO_MATCH;
                }
            }
        }
        Ok(())
    }
}

/// A table's key columns that the short-key index takes.
enum ShortTable<'a> {
    One([StringColumn<'a>; 1]),
    Two([StringColumn<'a>; 2]),
}

/// `keys` as one or two Utf8 columns of strings at most 8 bytes long, if they are.
fn short_columns_of_table(keys: &[ArrayRef]) -> Result<Option<ShortTable<'_>>> {
    if !(1..=2).contains(&keys.len()) || keys.iter().any(|k| k.data_type() != &DataType::Utf8) {
        return Ok(None);
    }
    for key in keys {
        if longest_string(key.as_ref())? > 8 {
            return Ok(None);
        }
    }
    let columns: Option<Vec<StringColumn>> = keys
        .iter()
        .map(|key| {
            let strings = key.as_string::<i32>();
            StringColumn::new(strings.value_offsets(), strings.values(), strings.len())
        })
        .collect();
    Ok(match columns.as_deref() {
        Some([one]) => Some(ShortTable::One([*one])),
        Some([one, two]) => Some(ShortTable::Two([*one, *two])),
        _ => None,
    })
}

/// The short-key index of the table's key `columns`, each valid row's group in `row_groups`.
fn index_short<const COLUMNS: usize>(
    columns: [StringColumn<'_>; COLUMNS],
    valid: &dyn Fn(usize) -> bool,
    row_groups: &mut [u32],
    groups: &mut u32,
) -> ShortKeyIndex {
    let columns = ShortColumns::Utf8(columns);
    let mut index = ShortKeyIndex::default();
    for (row, row_group) in row_groups.iter_mut().enumerate() {
        if !valid(row) {
            continue;
        }
        let key = columns.key(row);
        *row_group = match index.find(&key) {
            Some(group) => group as u32,
            None => {
                index.insert(key, *groups as usize);
                *groups += 1;
                *groups - 1
            }
        };
    }
    index
}

/// The groups of the `rows` probe rows of `keys` through the short-key index. Keys of another
/// type than the table's, or strings longer than 8 bytes, match nothing.
fn find_short(
    index: &ShortKeyIndex,
    keys: &[ArrayRef],
    rows: usize,
    groups: &mut Vec<u32>,
) -> Result<()> {
    let missing = NO_MATCH as usize;
    let mut found = vec![missing; rows];
    let strings: Option<Vec<_>> = keys.iter().map(|k| k.as_string_opt::<i32>()).collect();
    let Some(strings) = strings else {
        let types: Vec<_> = keys.iter().map(|k| k.data_type()).collect();
        return internal_err!("lookup keys of types {types:?} probe a table of Utf8 keys");
    };
    let columns: Option<Vec<StringColumn>> = strings
        .iter()
        .map(|s| StringColumn::new(s.value_offsets(), s.values(), rows))
        .collect();
    match columns.as_deref() {
        Some([one]) => {
            index.find_rows(&ShortColumns::Utf8([*one]), &mut found, missing);
        }
        Some([one, two]) => {
            index.find_rows(&ShortColumns::Utf8([*one, *two]), &mut found, missing);
        }
        _ => {}
    }
    groups.extend(found.iter().map(|&g| g as u32));
    for strings in &strings {
        let offsets = strings.value_offsets();
        if max_length_i32(offsets) > 8 {
            for (group, bounds) in groups.iter_mut().zip(offsets.windows(2)) {
                if bounds[1] - bounds[0] > 8 {
                    *group = NO_MATCH;
                }
            }
        }
    }
    Ok(())
}

impl DenseKeys {
    /// The dense index of `keys`, numbering groups in order of first appearance, if the keys
    /// are one integer column over a range small or dense enough.
    fn try_new(
        keys: &[ArrayRef],
        row_groups: &mut [u32],
        groups: &mut u32,
    ) -> Result<Option<Self>> {
        let [key] = keys else { return Ok(None) };
        let Some(values) = integer_values(key)? else {
            return Ok(None);
        };
        let (Some(smallest), Some(largest)) = (min(&values), max(&values)) else {
            return Ok(None);
        };
        // Two i64 values differ by less than 2^64: the range fits in a u64 but for the one
        // that saturates, far past any density.
        let range = ((largest as i128 - smallest as i128) as u64).saturating_add(1);
        let distinct_at_most = values.len() - values.null_count();
        if range > DENSE_SMALL_RANGE && (distinct_at_most as f64) < DENSE_MIN_DENSITY * range as f64
        {
            return Ok(None);
        }
        let mut dense = vec![NO_MATCH; range as usize];
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            let slot = &mut dense[(value - smallest) as usize];
            if *slot == NO_MATCH {
                *slot = *groups;
                *groups += 1;
            }
            row_groups[row] = *slot;
        }
        // Fewer distinct values than rows: judged on the groups found.
        if range > DENSE_SMALL_RANGE && (*groups as f64) < DENSE_MIN_DENSITY * range as f64 {
            row_groups.fill(NO_MATCH);
            *groups = 0;
            return Ok(None);
        }
        Ok(Some(Self {
            smallest,
            groups: dense,
        }))
    }

    fn find(&self, keys: &[ArrayRef], groups: &mut Vec<u32>) -> Result<()> {
        let [key] = keys else {
            return internal_err!("{} lookup keys probe one dense key", keys.len());
        };
        let Some(values) = integer_values(key)? else {
            return internal_err!("lookup key of type {} probes integer keys", key.data_type());
        };
        let slots = self.groups.len() as u64;
        groups.extend(values.values().iter().map(|&value| {
            let slot = value.wrapping_sub(self.smallest) as u64;
            if slot < slots {
                self.groups[slot as usize]
            } else {
                NO_MATCH
            }
        }));
        Ok(())
    }
}

impl HashedKeys {
    fn try_new(
        keys: Vec<ArrayRef>,
        valid: &dyn Fn(usize) -> bool,
        row_groups: &mut [u32],
        groups: &mut u32,
    ) -> Result<Self> {
        let random_state = RandomState::with_seed(0x100c);
        let rows = row_groups.len();
        let mut hashes = vec![0u64; rows];
        create_hashes(&keys, &random_state, &mut hashes)?;
        let same = key_comparator(&keys, &keys)?;
        let mut first_group: HashMap<u64, u32> = HashMap::new();
        let mut next: Vec<u32> = Vec::new();
        // The first row of each group, to compare a new row with.
        let mut representative: Vec<u32> = Vec::new();
        for row in 0..rows {
            if !valid(row) {
                continue;
            }
            let mut candidate = first_group.get(&hashes[row]).copied();
            let mut last = None;
            while let Some(group) = candidate {
                if same.is_equal(representative[group as usize] as usize, row) {
                    break;
                }
                last = Some(group);
                candidate = Some(next[group as usize]).filter(|g| *g != NO_MATCH);
            }
            row_groups[row] = match candidate {
                Some(group) => group,
                None => {
                    let group = *groups;
                    *groups += 1;
                    representative.push(row as u32);
                    next.push(NO_MATCH);
                    match last {
                        Some(previous) => next[previous as usize] = group,
                        None => {
                            first_group.insert(hashes[row], group);
                        }
                    }
                    group
                }
            };
        }
        // Compare probe rows with each group's first row: keep those rows' keys only.
        let keys = keys
            .iter()
            .map(|k| {
                let indices = datafusion::arrow::array::UInt32Array::from(representative.clone());
                Ok(datafusion::arrow::compute::take(
                    k.as_ref(),
                    &indices,
                    None,
                )?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            keys,
            first_group,
            next,
            random_state,
        })
    }

    fn find(&self, keys: &[ArrayRef], rows: usize, groups: &mut Vec<u32>) -> Result<()> {
        let mut hashes = vec![0u64; rows];
        create_hashes(keys, &self.random_state, &mut hashes)?;
        let same = key_comparator(&self.keys, keys)?;
        groups.extend(hashes.iter().enumerate().map(|(row, hash)| {
            let mut candidate = self.first_group.get(hash).copied();
            while let Some(group) = candidate {
                if same.is_equal(group as usize, row) {
                    return group;
                }
                candidate = Some(self.next[group as usize]).filter(|g| *g != NO_MATCH);
            }
            NO_MATCH
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    fn table(keys: ArrayRef) -> LookupTable {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "k",
            keys.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![keys]).unwrap();
        LookupTable::try_new(batch, &[col("k", &schema).unwrap()]).unwrap()
    }

    /// The rows of `table` a probe value meets, by the table's own index.
    fn rows_met(table: &LookupTable, probes: ArrayRef) -> Vec<Vec<u32>> {
        let mut groups = Vec::new();
        table.find(&[probes], &mut groups).unwrap();
        groups
            .iter()
            .map(|&g| match g {
                NO_MATCH => vec![],
                g => table.rows_of(g).to_vec(),
            })
            .collect()
    }

    /// What a probe should meet: every table row with an equal, non-null key.
    fn expected(keys: &[Option<i64>], probes: &[Option<i64>]) -> Vec<Vec<u32>> {
        probes
            .iter()
            .map(|p| {
                (0..keys.len() as u32)
                    .filter(|&r| p.is_some() && keys[r as usize] == *p)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn integer_keys_over_a_small_range_meet_the_rows_with_equal_keys() {
        let mut seed = 7u64;
        let mut next = |bound: i64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % bound as u64) as i64
        };
        // Dense ranges (small, or taken densely, negative values, duplicates and nulls), and
        // a sparse one that goes to the hashed index; probes within and beyond the range.
        for (spread, rows) in [(1, 200), (3, 5_000), (1_000_003, 300)] {
            let keys: Vec<Option<i64>> = (0..rows)
                .map(|_| (next(10) > 0).then(|| (next(400) - 200) * spread))
                .collect();
            let probes: Vec<Option<i64>> = (0..3_000)
                .map(|_| (next(10) > 0).then(|| (next(600) - 300) * spread))
                .collect();
            let looked_up = table(Arc::new(Int64Array::from(keys.clone())));
            let dense = matches!(looked_up.index, KeyIndex::Dense(_));
            assert_eq!(dense, spread < 1_000, "spread {spread}");
            let met = rows_met(&looked_up, Arc::new(Int64Array::from(probes.clone())));
            assert_eq!(met, expected(&keys, &probes), "spread {spread}");
        }
    }

    #[test]
    fn narrower_integer_keys_are_indexed_densely_too() {
        let keys = vec![Some(5), None, Some(-3), Some(5), Some(7)];
        let looked_up = table(Arc::new(Int32Array::from(keys)));
        assert!(matches!(looked_up.index, KeyIndex::Dense(_)));
        let probes = Arc::new(Int32Array::from(vec![
            Some(5),
            Some(6),
            None,
            Some(-3),
            Some(100),
        ]));
        assert_eq!(
            rows_met(&looked_up, probes),
            vec![vec![0, 3], vec![], vec![], vec![2], vec![]]
        );
    }

    #[test]
    fn string_keys_are_not_indexed_densely() {
        let looked_up = table(Arc::new(StringArray::from(vec!["a", "bb"])));
        assert!(matches!(looked_up.index, KeyIndex::Short(_)));
    }
}
