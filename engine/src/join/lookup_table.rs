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
//! - any other keys are hashed with DataFusion's `create_hashes` and compared with its
//!   `JoinKeyComparator`.
//!
//! Table columns of short strings (at most 16 bytes, no nulls) are also kept padded into
//! 16-byte words ([`PaddedStrings`]), built once, so that the gather of the matched rows
//! moves one word per row instead of copying each string by its length.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::{HashMap, Result, internal_err};
use datafusion::physical_expr::PhysicalExpr;

use super::key_comparator;
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
    Hashed(HashedKeys),
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
            None => KeyIndex::Hashed(HashedKeys::try_new(
                keys.clone(),
                &valid,
                &mut row_groups,
                &mut groups,
            )?),
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

/// The group rows in CSR form: each group's rows together, in row order.
fn rows_by_group(row_groups: &[u32], groups: usize) -> (Vec<u32>, Vec<u32>) {
    let mut starts = vec![0u32; groups + 1];
    for &group in row_groups.iter().filter(|g| **g != NO_MATCH) {
        starts[group as usize + 1] += 1;
    }
    for g in 0..groups {
        starts[g + 1] += starts[g];
    }
    let mut filled = starts.clone();
    let mut rows = vec![0u32; starts[groups] as usize];
    for (row, &group) in row_groups.iter().enumerate() {
        if group != NO_MATCH {
            rows[filled[group as usize] as usize] = row as u32;
            filled[group as usize] += 1;
        }
    }
    (starts, rows)
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
