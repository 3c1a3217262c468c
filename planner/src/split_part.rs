//! `split_part(text, delimiter, n)`, DataFusion's function with the same answers, finding
//! the pieces of a one-byte delimiter eight bytes at a time.
//!
//! DataFusion's `split_part` finds the delimiter with a `memmem::Finder`, one search per
//! occurrence from the previous one: for a short text (a url, Nexmark q22's three
//! `split_part(url, '/', 4 | 5 | 6)`) each search's set-up costs more than the bytes it
//! reads, and the three calls were two thirds of the query. A one-byte delimiter is found
//! here by comparing eight bytes at once in a 64-bit word ([`nth_piece`]), every
//! occurrence of a word taken from one mask. The piece is returned as DataFusion returns
//! it: for a string view, a view into the text's own buffers (inline when at most 12
//! bytes), the nulls of the input; an empty string when the text has fewer than `n - 1`
//! delimiters. Everything else — a delimiter of several bytes or none, a position from
//! the end or per row, a delimiter per row, other string types — goes to DataFusion's
//! function as it is.

use std::sync::Arc;

use datafusion::arrow::array::BooleanBufferBuilder;
use datafusion::arrow::array::builder::make_view;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, ByteView, StringViewArray};
use datafusion::arrow::buffer::{NullBuffer, ScalarBuffer};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions::string::split_part::SplitPartFunc;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl};

use crate::functions::described_as_datafusion_s;

/// The function, for registration in a session in place of DataFusion's.
pub fn split_part_function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(SplitPart::default()))
}

#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct SplitPart {
    datafusion: SplitPartFunc,
}

impl ScalarUDFImpl for SplitPart {
    described_as_datafusion_s!();

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let [
            ColumnarValue::Array(texts),
            ColumnarValue::Scalar(delimiter),
            ColumnarValue::Scalar(ScalarValue::Int64(Some(position))),
        ] = args.args.as_slice()
            && let Some(texts) = texts.as_string_view_opt()
            && let Some(delimiter) = one_byte(delimiter)
            && let Some(index) = usize::try_from(*position)
                .ok()
                .and_then(|position| position.checked_sub(1))
        {
            return Ok(ColumnarValue::Array(pieces_of_views(
                texts,
                delimiter,
                index,
                MissingPiece::Empty,
            )));
        }
        self.datafusion.invoke_with_args(args)
    }
}

/// The delimiter's one byte, if it is a constant string of one byte.
fn one_byte(delimiter: &ScalarValue) -> Option<u8> {
    match delimiter {
        ScalarValue::Utf8(Some(text))
        | ScalarValue::Utf8View(Some(text))
        | ScalarValue::LargeUtf8(Some(text)) => match text.as_bytes() {
            [byte] => Some(*byte),
            _ => None,
        },
        _ => None,
    }
}

/// What a text with too few pieces gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingPiece {
    /// An empty string, as DataFusion's `split_part`.
    Empty,
    /// NULL, as Flink's `SPLIT_INDEX`.
    Null,
}

/// Piece `index` (from 0) of every text, as views into the texts' buffers.
pub(crate) fn pieces_of_views(
    texts: &StringViewArray,
    delimiter: u8,
    index: usize,
    missing: MissingPiece,
) -> ArrayRef {
    let views = texts.views();
    let empty = make_view(b"", 0, 0);
    let mut valid = match missing {
        MissingPiece::Null => Some(BooleanBufferBuilder::new(texts.len())),
        MissingPiece::Empty => None,
    };
    let pieces: Vec<u128> = (0..texts.len())
        .map(|row| {
            if texts.is_null(row) {
                if let Some(valid) = valid.as_mut() {
                    valid.append(false);
                }
                return 0;
            }
            // SAFETY: `row` is within the array.
            let text = unsafe { texts.value_unchecked(row) }.as_bytes();
            let piece = nth_piece(text, delimiter, index);
            if let Some(valid) = valid.as_mut() {
                valid.append(piece.is_some());
            }
            match piece {
                Some((start, end)) if end - start > 12 => {
                    let view = ByteView::from(views[row]);
                    make_view(
                        &text[start..end],
                        view.buffer_index,
                        view.offset + start as u32,
                    )
                }
                Some((start, end)) => make_view(&text[start..end], 0, 0),
                None => empty,
            }
        })
        .collect();
    // SAFETY: a piece lies between two ASCII delimiters (or the text's ends), so it is
    // UTF-8 at character boundaries; a piece of over 12 bytes is at its own place in the
    // buffer its text is in, and a shorter one is inline.
    Arc::new(unsafe {
        StringViewArray::new_unchecked(
            ScalarBuffer::from(pieces),
            texts.data_buffers().to_vec(),
            match valid {
                Some(mut valid) => Some(NullBuffer::new(valid.finish())),
                None => texts.nulls().cloned(),
            },
        )
    })
}

const LOW_SEVEN_BITS: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// A mask with the high bit of each byte of `word` that equals the byte `pattern` repeats.
#[inline(always)]
fn bytes_equal(word: u64, pattern: u64) -> u64 {
    let x = word ^ pattern;
    // A byte of `x` is zero exactly when adding 0x7f to its low seven bits leaves its high
    // bit clear and its own high bit is clear; no byte carries into the next.
    !(((x & LOW_SEVEN_BITS).wrapping_add(LOW_SEVEN_BITS)) | x | LOW_SEVEN_BITS)
}

/// The byte range of piece `index` (from 0) of `text` split at every `delimiter`, or
/// `None` when `text` has fewer than `index` delimiters.
pub(crate) fn nth_piece(text: &[u8], delimiter: u8, index: usize) -> Option<(usize, usize)> {
    let pattern = u64::from_ne_bytes([delimiter; 8]);
    let mut seen = 0;
    let mut start = 0;
    let mut word_start = 0;
    while word_start < text.len() {
        let word_end = (word_start + 8).min(text.len());
        let mut bytes = [0u8; 8];
        bytes[..word_end - word_start].copy_from_slice(&text[word_start..word_end]);
        let mut found = bytes_equal(u64::from_le_bytes(bytes), pattern);
        if word_end - word_start < 8 {
            // The padding past the text's end is not the text's.
            found &= (1u64 << ((word_end - word_start) * 8)) - 1;
        }
        while found != 0 {
            let at = word_start + found.trailing_zeros() as usize / 8;
            found &= found - 1;
            seen += 1;
            if seen == index {
                start = at + 1;
            } else if seen > index {
                return Some((start, at));
            }
        }
        word_start = word_end;
    }
    (seen >= index).then_some((start, text.len()))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::DataType;

    use super::*;
    use crate::test_support::invoke;

    fn call(function: &dyn ScalarUDFImpl, texts: &ArrayRef, args: &[ScalarValue]) -> ArrayRef {
        invoke(function, texts, args, texts.data_type().clone()).unwrap()
    }

    /// Texts of every length up to 40 over an alphabet of the delimiter, letters and a
    /// character of two bytes, some NULL.
    fn texts() -> StringViewArray {
        let alphabet = ["/", "a", "b", "é", "/", "x"];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..2_000)
            .map(|row| {
                let length = (next() % 41) as usize;
                (row % 17 != 0).then(|| {
                    (0..length)
                        .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                        .collect::<String>()
                })
            })
            .collect()
    }

    #[test]
    fn answers_as_datafusion_for_every_position() {
        let texts: ArrayRef = Arc::new(texts());
        for position in [1_i64, 2, 3, 4, 5, 6, 9, 30] {
            let args = [
                ScalarValue::Utf8(Some("/".to_string())),
                ScalarValue::Int64(Some(position)),
            ];
            let ours = call(&SplitPart::default(), &texts, &args);
            let theirs = call(&SplitPartFunc::new(), &texts, &args);
            assert_eq!(
                ours.as_string_view().iter().collect::<Vec<_>>(),
                theirs.as_string_view().iter().collect::<Vec<_>>(),
                "position {position}"
            );
            assert_eq!(ours.nulls(), theirs.nulls());
        }
    }

    #[test]
    fn the_pieces_are_found_at_every_place_in_a_word() {
        // Delimiters at each byte of the first and second words, and one at the last byte.
        for at in 0..17 {
            let mut text = [b'a'; 17];
            text[at] = b'/';
            let text = &text[..];
            assert_eq!(nth_piece(text, b'/', 0), Some((0, at)), "at {at}");
            assert_eq!(nth_piece(text, b'/', 1), Some((at + 1, 17)), "at {at}");
            assert_eq!(nth_piece(text, b'/', 2), None, "at {at}");
        }
        // A zero delimiter does not match the padding past a short text's end.
        assert_eq!(nth_piece(b"ab\0c", 0, 1), Some((3, 4)));
        assert_eq!(nth_piece(b"abc", 0, 1), None);
        assert_eq!(nth_piece(b"", b'/', 0), Some((0, 0)));
        assert_eq!(nth_piece(b"//", b'/', 2), Some((2, 2)));
    }

    #[test]
    fn other_delimiters_and_positions_are_datafusion_s() {
        let texts: ArrayRef = Arc::new(texts());
        for (delimiter, position) in [("/", -1_i64), ("/", -3), ("é", 2), ("a/", 2), ("", 1)] {
            let args = [
                ScalarValue::Utf8(Some(delimiter.to_string())),
                ScalarValue::Int64(Some(position)),
            ];
            assert_eq!(
                call(&SplitPart::default(), &texts, &args).as_ref(),
                call(&SplitPartFunc::new(), &texts, &args).as_ref(),
            );
        }
        let zero = [
            ScalarValue::Utf8(Some("/".to_string())),
            ScalarValue::Int64(Some(0)),
        ];
        let error = |function: &dyn ScalarUDFImpl| {
            invoke(function, &texts, &zero, DataType::Utf8View)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(error(&SplitPart::default()), error(&SplitPartFunc::new()));
    }
}
