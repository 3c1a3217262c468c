//! [`take_rows`]: arrow's `take`, with a faster path for short Utf8 strings.
//!
//! Emitting a window's groups gathers their key values — mostly a few short strings (a
//! trader, a symbol) per row — from a small column that holds each key once, so the same few
//! strings are gathered again and again. Arrow's `take` on Utf8 copies each string with a
//! copy of its exact length, a `memcpy` call per row. Here, when every string of the column
//! is at most 16 bytes long and the column is no longer than the output, each string is first
//! padded into a 16-byte word; the output's size is summed, its buffer allocated once with 16
//! bytes of slack, and each row then costs one fixed 16-byte move (the bytes past a string's
//! end are overwritten by the next string or cut off at the end) and one offset. Other
//! columns go to arrow's `take`.
//!
//! `bench/benches/kernels.rs` (`take_utf8_keys_*`) measures this against arrow's `take`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, UInt32Array};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, internal_err};

/// Bytes moved at once for a string, and the longest string the fast path takes.
const WORD: usize = 16;

/// A string of the column, zero-padded to a word, and its length.
#[derive(Debug, Clone, Copy, Default)]
struct PaddedString {
    bytes: [u8; WORD],
    length: usize,
}

/// Rows `rows` of `column` (indices without nulls), as arrow's `take` gives them.
pub fn take_rows(column: &dyn Array, rows: &UInt32Array) -> Result<ArrayRef> {
    if rows.null_count() == 0
        && column.len() <= rows.len()
        && let Some(strings) = PaddedStrings::of(column)
    {
        return strings.take(rows);
    }
    Ok(take(column, rows, None)?)
}

/// A Utf8 column's strings padded into words, for a column gathered many times (a lookup
/// table's): built once, each gather then takes the fast path.
#[derive(Debug, Default)]
pub struct PaddedStrings {
    strings: Vec<PaddedString>,
}

impl PaddedStrings {
    /// The strings of `column` as padded words, when the fast path applies: Utf8 without
    /// nulls, strings of at most 16 bytes. (Building the words costs about a gather of the
    /// column: a column gathered once must be no longer than the gather.)
    pub fn of(column: &dyn Array) -> Option<Self> {
        if column.data_type() != &DataType::Utf8 || column.null_count() > 0 {
            return None;
        }
        let strings = column.as_string::<i32>();
        let values = strings.values().as_slice();
        let mut padded = Vec::with_capacity(strings.len());
        for bounds in strings.value_offsets().windows(2) {
            let string = values.get(bounds[0] as usize..bounds[1] as usize)?;
            let mut word = PaddedString {
                length: string.len(),
                ..PaddedString::default()
            };
            word.bytes.get_mut(..string.len())?.copy_from_slice(string);
            padded.push(word);
        }
        Some(Self { strings: padded })
    }

    /// Rows `rows` (without nulls) of the column, as arrow's `take` gives them.
    pub fn take(&self, rows: &UInt32Array) -> Result<ArrayRef> {
        if rows.null_count() > 0 {
            return internal_err!("a gather of padded strings by row numbers with nulls");
        }
        take_padded(&self.strings, rows)
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.strings.capacity() * std::mem::size_of::<PaddedString>()
    }
}

/// Rows `rows` of the column whose strings are `strings`.
fn take_padded(strings: &[PaddedString], rows: &UInt32Array) -> Result<ArrayRef> {
    let mut total = 0usize;
    for &row in rows.values() {
        match strings.get(row as usize) {
            Some(string) => total += string.length,
            None => return internal_err!("row {row} is outside a {}-row column", strings.len()),
        }
    }
    if i32::try_from(total).is_err() {
        return internal_err!("{total} bytes of strings overflow a Utf8 column");
    }
    let mut bytes = vec![0u8; total + WORD];
    let mut offsets = vec![0i32; rows.len() + 1];
    let mut at = 0usize;
    for (&row, offset) in rows.values().iter().zip(&mut offsets[1..]) {
        // Every row was checked above.
        let string = strings.get(row as usize).copied().unwrap_or_default();
        if let Some(into) = bytes.get_mut(at..at + WORD) {
            into.copy_from_slice(&string.bytes);
        }
        at += string.length;
        // `at` ≤ `total`, which fits an i32.
        *offset = at as i32;
    }
    bytes.truncate(total);
    // SAFETY: the offsets start at 0, never decrease (each adds a length) and end at
    // `bytes.len()`, and each `[offsets[i], offsets[i + 1])` holds exactly one whole string
    // copied from a valid Utf8 array, so the bytes are valid UTF-8 at every boundary.
    // Validating offsets and UTF-8 again would cost more than the gather.
    Ok(Arc::new(unsafe {
        let offsets = OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets));
        StringArray::new_unchecked(offsets, Buffer::from_vec(bytes), None)
    }))
}

/// As [`compact_views`], but only when the buffers `column`'s views point into hold more
/// than twice the bytes its rows use: state that keeps most rows of a batch keeps the
/// batch's buffers rather than a copy of nearly all of them.
pub(crate) fn compact_sparse_views(column: &ArrayRef) -> ArrayRef {
    let (views, buffers) = match column.data_type() {
        DataType::Utf8View => {
            let strings = column.as_string_view();
            (strings.views(), strings.data_buffers())
        }
        DataType::BinaryView => {
            let binaries = column.as_binary_view();
            (binaries.views(), binaries.data_buffers())
        }
        _ => return Arc::clone(column),
    };
    let held: usize = buffers.iter().map(|buffer| buffer.len()).sum();
    // A view of at most 12 bytes holds them itself; a longer one's length is its low word.
    let used: usize = views
        .iter()
        .map(|view| *view as u32 as usize)
        .filter(|length| *length > 12)
        .sum();
    match held > 2 * used {
        true => compact_views(column),
        false => Arc::clone(column),
    }
}

/// `column` with its string or binary views' bytes copied out of the buffers they share
/// with the batch they were gathered or sliced from (which a view array keeps whole).
pub(crate) fn compact_views(column: &ArrayRef) -> ArrayRef {
    match column.data_type() {
        DataType::Utf8View => Arc::new(column.as_string_view().gc()),
        DataType::BinaryView => Arc::new(column.as_binary_view().gc()),
        _ => Arc::clone(column),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringViewArray};

    use super::*;

    fn check(column: &dyn Array, rows: &[u32]) {
        let rows = UInt32Array::from(rows.to_vec());
        let ours = take_rows(column, &rows).unwrap();
        let arrows = take(column, &rows, None).unwrap();
        ours.to_data().validate_full().unwrap();
        assert_eq!(ours.as_ref(), arrows.as_ref());
    }

    #[test]
    fn equals_arrows_take_for_short_long_empty_and_multibyte_strings() {
        let long = "a string well over sixteen bytes long";
        let strings =
            StringArray::from(vec!["SYM1", "", long, "TRADER17", "0123456789abcdef", "z"]);
        check(&strings, &[0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]);
        check(&strings, &[5, 5, 5]);
        check(&strings, &[]);
        // A slice: offsets that do not start at zero.
        check(&strings.slice(2, 3), &[2, 0, 1, 0]);
    }

    #[test]
    fn columns_with_nulls_and_other_types_go_to_arrow() {
        check(
            &StringArray::from(vec![Some("a"), None, Some("ccc")]),
            &[2, 1, 0],
        );
        check(&Int64Array::from(vec![1, 2, 3]), &[2, 2, 0]);
    }

    #[test]
    fn views_that_use_most_of_their_buffers_keep_them_and_others_are_copied() {
        let strings: Vec<String> = (0..100)
            .map(|i| format!("a string longer than twelve {i}"))
            .collect();
        let views: ArrayRef = Arc::new(StringViewArray::from_iter_values(&strings));
        let held = |column: &ArrayRef| -> usize {
            column
                .as_string_view()
                .data_buffers()
                .iter()
                .map(|b| b.len())
                .sum()
        };
        let most = take(&views, &UInt32Array::from_iter_values(0..60), None).unwrap();
        let kept = compact_sparse_views(&most);
        assert_eq!(held(&kept), held(&views), "60 of 100 rows keep the buffers");
        assert_eq!(kept.as_ref(), most.as_ref());
        let few = take(&views, &UInt32Array::from_iter_values(0..40), None).unwrap();
        let copied = compact_sparse_views(&few);
        assert!(
            held(&copied) < held(&views) / 2,
            "40 of 100 rows are copied out"
        );
        assert_eq!(copied.as_ref(), few.as_ref());
    }

    #[test]
    fn an_index_out_of_range_is_an_error() {
        let strings = StringArray::from(vec!["a", "b"]);
        assert!(take_rows(&strings, &UInt32Array::from(vec![0, 1, 2])).is_err());
    }
}
