//! Stream joins: [`IntervalJoinExec`], an equi-join of two streams within a bound on their
//! event times, whose state the watermarks bound; [`LookupJoinExec`], a stream's rows looked
//! up in a bounded table.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, StringArray, StringViewArray,
};
use datafusion::arrow::compute::{SortOptions, cast};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::{NullEquality, Result, internal_err};
use datafusion::physical_plan::joins::utils::JoinKeyComparator;

mod aligned_inputs;
mod interval_join;
mod interval_stream;
mod join_output;
mod key_index;
mod lookup_join;
mod lookup_table;
mod paged_slots;
mod side_state;

pub use interval_join::{INTERVAL_JOIN_TYPES, IntervalJoinExec, IntervalJoinSpec, TimeBound};
pub use lookup_join::{LookupJoinExec, LookupKind};
pub use lookup_table::LookupTable;

/// A key column as `i64` values, if it is an integer column whose values all fit: what a
/// dense index (an array over the key range) of the lookup table and of a join side's rows
/// reads.
fn integer_values(key: &ArrayRef) -> Result<Option<Int64Array>> {
    Ok(match is_integer_key(key.data_type()) {
        true => Some(cast(key, &DataType::Int64)?.as_primitive().clone()),
        false => None,
    })
}

/// How a join hashes its rows' keys. Both sides must hash alike: a probe looks its hash up
/// among the kept rows'.
pub(super) enum KeyHasher {
    /// One integer key: an invertible mix of its `i64` value ([`mix_integer`]), so that an
    /// equal hash is an equal value; a fraction of the cost of hashing the value's bytes.
    Integer,
    /// Any other keys: DataFusion's hashes of the columns.
    Columns(RandomState),
}

impl KeyHasher {
    /// The hasher for keys of types `left` on one side and `right` on the other.
    pub(super) fn for_key_types(left: &[DataType], right: &[DataType]) -> Self {
        match (left, right) {
            ([left], [right]) if is_integer_key(left) && is_integer_key(right) => Self::Integer,
            _ => Self::Columns(RandomState::with_seed(0x10_1e)),
        }
    }

    /// Whether equal hashes of keys that are not null mean equal keys.
    pub(super) fn hash_is_key(&self) -> bool {
        matches!(self, Self::Integer)
    }

    /// The hash of each of the `rows` rows' keys (of a null integer key, an arbitrary one:
    /// such rows match nothing).
    pub(super) fn hashes(&self, keys: &[ArrayRef], rows: usize) -> Result<Vec<u64>> {
        match self {
            Self::Integer => match keys {
                [key] => match integer_values(key)? {
                    Some(values) => Ok(values.values().iter().map(|&v| mix_integer(v)).collect()),
                    None => internal_err!("a join hashed a {} key as an integer", key.data_type()),
                },
                _ => internal_err!("a join hashed {} keys as one integer", keys.len()),
            },
            Self::Columns(random_state) => {
                let mut hashes = vec![0; rows];
                create_hashes(keys, random_state, &mut hashes)?;
                Ok(hashes)
            }
        }
    }
}

/// [`KeyHasher::Integer`]'s hash of `value`: a product with Fibonacci hashing's odd
/// multiplier, then its high half folded into its low half. Both steps are invertible, so no
/// two values share a hash; the fold matters because hash tables pick a bucket by the low
/// bits, which in the bare product depend only on the value's low bits (ids on a stride of
/// 2^k would crowd into 1/2^k of the buckets).
fn mix_integer(value: i64) -> u64 {
    let product = (value as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    product ^ (product >> 32)
}

/// Whether a key of this type has an exact `i64` view ([`integer_values`]).
fn is_integer_key(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
    )
}

/// Equality of rows of the key columns `left` with rows of `right`; null keys never match
/// (both joins keep them apart before comparing).
fn key_comparator(left: &[ArrayRef], right: &[ArrayRef]) -> Result<KeyEquality> {
    if let ([left], [right]) = (left, right)
        && left.null_count() == 0
        && right.null_count() == 0
    {
        if let (Some(left), Some(right)) = (left.as_string_view_opt(), right.as_string_view_opt()) {
            return Ok(KeyEquality::Views(left.clone(), right.clone()));
        }
        if let (Some(left), Some(right)) =
            (left.as_string_opt::<i32>(), right.as_string_opt::<i32>())
        {
            return Ok(KeyEquality::Strings(left.clone(), right.clone()));
        }
    }
    Ok(KeyEquality::Columns(JoinKeyComparator::new(
        left,
        right,
        &vec![SortOptions::default(); left.len()],
        NullEquality::NullEqualsNothing,
    )?))
}

/// See [`key_comparator`]. A single string key without nulls (the usual join key: a symbol, a
/// user id) is compared directly, not through the ordering comparator of each column type:
/// a string view of up to 12 bytes holds its length and the whole string, compared as one
/// word.
enum KeyEquality {
    Views(StringViewArray, StringViewArray),
    Strings(StringArray, StringArray),
    Columns(JoinKeyComparator),
}

impl KeyEquality {
    /// Whether row `left` of the left keys equals row `right` of the right keys.
    fn is_equal(&self, left: usize, right: usize) -> bool {
        match self {
            Self::Views(left_keys, right_keys) => {
                let (a, b) = (left_keys.views()[left], right_keys.views()[right]);
                let length = a as u32;
                if length <= 12 {
                    // The length and the inline bytes (whatever pads them).
                    let used = 32 + 8 * length;
                    let mask = if used == 128 {
                        u128::MAX
                    } else {
                        (1 << used) - 1
                    };
                    return (a ^ b) & mask == 0;
                }
                // Length and 4-byte prefix first; then the bytes, wherever each view points.
                a as u64 == b as u64 && left_keys.value(left) == right_keys.value(right)
            }
            Self::Strings(left_keys, right_keys) => same_bytes(
                left_keys.value(left).as_bytes(),
                right_keys.value(right).as_bytes(),
            ),
            Self::Columns(compare) => compare.is_equal(left, right),
        }
    }
}

/// Whether two byte strings are equal: a short one (up to 16 bytes, the usual key) as two
/// overlapping words, without a call to `memcmp`.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let length = a.len();
    if length != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let half = |bytes: &[u8], at: usize| {
        let mut half = [0u8; 4];
        half.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(half)
    };
    match length {
        0 => true,
        1..=3 => a[0] == b[0] && a[length / 2] == b[length / 2] && a[length - 1] == b[length - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, length - 4) == half(b, length - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, length - 8) == word(b, length - 8),
        _ => a == b,
    }
}

/// The rows of each group in CSR form (a counting sort): group `g`'s rows are
/// `rows[starts[g]..starts[g + 1]]`, in row order; a row of group `u32::MAX` is in none.
/// Returns `(starts, rows)`.
pub(super) fn rows_by_group(row_groups: &[u32], groups: usize) -> (Vec<u32>, Vec<u32>) {
    let mut starts = vec![0u32; groups + 1];
    for &group in row_groups.iter().filter(|g| **g != u32::MAX) {
        starts[group as usize + 1] += 1;
    }
    for g in 0..groups {
        starts[g + 1] += starts[g];
    }
    let mut filled = starts.clone();
    let mut rows = vec![0u32; starts[groups] as usize];
    for (row, &group) in row_groups.iter().enumerate() {
        if group != u32::MAX {
            rows[filled[group as usize] as usize] = row as u32;
            filled[group as usize] += 1;
        }
    }
    (starts, rows)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringViewBuilder};

    use super::*;

    #[test]
    fn integer_key_hashes_are_distinct_and_spread_strided_ids_over_low_bits() {
        let hasher = KeyHasher::for_key_types(&[DataType::Int64], &[DataType::Int32]);
        assert!(matches!(hasher, KeyHasher::Integer));
        // Ids on a stride of 4096: a table of 4096 buckets must still see most of them.
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values((0..4096).map(|i| i << 12)));
        let hashes = hasher.hashes(&[ids], 4096).unwrap();
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 4095).collect();
        assert!(
            buckets.len() > 2048,
            "{} of 4096 buckets used",
            buckets.len()
        );
        let distinct: std::collections::HashSet<u64> = hashes.iter().copied().collect();
        assert_eq!(distinct.len(), 4096);
        let mixed = KeyHasher::for_key_types(&[DataType::Int64], &[DataType::Utf8]);
        assert!(matches!(mixed, KeyHasher::Columns(_)));
    }

    /// Strings as views, the long ones in buffers of their own order (so equal strings sit
    /// at different offsets on the two sides).
    fn views(values: &[&str]) -> ArrayRef {
        let mut builder = StringViewBuilder::new().with_fixed_block_size(64);
        for value in values {
            builder.append_value(value);
        }
        Arc::new(builder.finish())
    }

    #[test]
    fn key_equality_matches_the_strings_whatever_their_form() {
        let left = [
            "a",
            "SYM1",
            "SYM12",
            "",
            "twelve bytes",
            "a longer string, out of line",
        ];
        let right = [
            "a longer string, out of line",
            "a longer string, out of LINE",
            "twelve bytes",
            "twelve byteZ",
            "",
            "SYM1",
            "SYM12",
            "b",
        ];
        let forms: [fn(&[&str]) -> ArrayRef; 2] = [views, |values| {
            Arc::new(StringArray::from(values.to_vec())) as ArrayRef
        }];
        for form in forms {
            let equality = key_comparator(&[form(&left)], &[form(&right)]).expect("comparator");
            for (i, l) in left.iter().enumerate() {
                for (j, r) in right.iter().enumerate() {
                    assert_eq!(equality.is_equal(i, j), l == r, "{l:?} against {r:?}");
                }
            }
        }
        // Every length up to past the short forms, differing at each position.
        for length in 0usize..20 {
            let base: Vec<u8> = (0..length as u8).map(|i| b'a' + i).collect();
            assert!(same_bytes(&base, &base.clone()));
            if length > 0 {
                assert!(!same_bytes(&base, &base[..length - 1]));
            }
            for at in 0..length {
                let mut other = base.clone();
                other[at] = b'Z';
                assert!(
                    !same_bytes(&base, &other),
                    "{length} bytes, differing at {at}"
                );
            }
        }
        // Two key columns go to DataFusion's comparator.
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5, 6]));
        let equality = key_comparator(
            &[views(&left), Arc::clone(&numbers)],
            &[views(&left), numbers],
        )
        .expect("comparator");
        assert!(matches!(equality, KeyEquality::Columns(_)));
        assert!(equality.is_equal(5, 5) && !equality.is_equal(4, 5));
    }
}
