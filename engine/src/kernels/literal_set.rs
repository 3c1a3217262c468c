//! [`StringSet`] and [`IntegerSet`]: whether each value of a column is one of a few
//! literals (`state IN ('OR', 'ID', 'CA')`, `channel = 'apple'`, `category = 10`) in one
//! pass over the column that compares every literal a row and asks memory for the values
//! ahead.
//!
//! Filters are often the first to read a column (a source made the batch a while ago), and
//! a pass over a column that is not in the caches reads memory twice as fast when it asks
//! for the values a few kilobytes ahead (see `freshet_partitioner::prefetch`); arrow's
//! comparisons, which DataFusion makes one pass a literal before it ORs their masks, do
//! not.
//!
//! Strings are compared by their views, not their bytes. A string view is 16 bytes: the length, then a value of up to 12 bytes in place, or the
//! first 4 bytes and where the rest lies. A value equals a literal of up to 12 bytes
//! exactly when its view's length and first length bytes equal the literal's view's: one
//! masked 128-bit comparison, with no branch and no read of the strings' buffers. A longer
//! literal is compared the same way on its length and first 4 bytes, and only a value that
//! passes is compared byte by byte. (arrow checks that a short value's view holds zeros past it; the mask does not rely on
//! it.)

use datafusion::arrow::array::{Array, BooleanArray, PrimitiveArray, StringViewArray};
use datafusion::arrow::buffer::{BooleanBuffer, MutableBuffer};
use datafusion::arrow::datatypes::ArrowPrimitiveType;
use freshet_partitioner::{PREFETCH_AHEAD_BYTES, prefetch};

/// The longest value a view holds in place.
const INLINE_LEN: usize = 12;

/// See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StringSet {
    literals: Vec<String>,
    /// Per literal, its view under [`ViewPattern::mask`].
    patterns: Vec<ViewPattern>,
    /// Whether a literal is longer than [`INLINE_LEN`]: its matches are checked byte by byte.
    long_literals: bool,
}

/// What a value's view must hold, under `mask`, to equal a literal (or, for a literal longer
/// than [`INLINE_LEN`], to be worth comparing byte by byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ViewPattern {
    view: u128,
    mask: u128,
}

impl ViewPattern {
    fn of(literal: &str) -> Self {
        let bytes = literal.as_bytes();
        // The length, then the bytes in place (at most 12, at most 4 of a long literal's).
        let compared = match bytes.len() <= INLINE_LEN {
            true => bytes.len(),
            false => 4,
        };
        let mut view = [0u8; 16];
        view[..4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        view[4..4 + compared].copy_from_slice(&bytes[..compared]);
        let mask_bits = 32 + 8 * compared as u32;
        let mask = match mask_bits {
            128 => u128::MAX,
            bits => (1u128 << bits) - 1,
        };
        Self {
            view: u128::from_le_bytes(view),
            mask,
        }
    }

    #[inline(always)]
    fn admits(self, view: u128) -> bool {
        view & self.mask == self.view
    }
}

impl StringSet {
    /// The set of `literals` (repeats kept once, in order).
    pub fn new<S: AsRef<str>>(literals: impl IntoIterator<Item = S>) -> Self {
        let mut distinct: Vec<String> = Vec::new();
        for literal in literals {
            let literal = literal.as_ref();
            if !distinct.iter().any(|known| known == literal) {
                distinct.push(literal.to_string());
            }
        }
        Self {
            patterns: distinct.iter().map(|l| ViewPattern::of(l)).collect(),
            long_literals: distinct.iter().any(|l| l.len() > INLINE_LEN),
            literals: distinct,
        }
    }

    /// The literals, in the order first given.
    pub fn literals(&self) -> &[String] {
        &self.literals
    }

    /// Whether each value is one of the literals; null where the value is.
    pub fn contains_each(&self, values: &StringViewArray) -> BooleanArray {
        let views = values.views();
        let hits = match self.patterns.as_slice() {
            [one] => admitted(views, |view| one.admits(view)),
            [a, b] => admitted(views, |view| a.admits(view) | b.admits(view)),
            [a, b, c] => admitted(views, |v| a.admits(v) | b.admits(v) | c.admits(v)),
            patterns => admitted(views, |view| {
                patterns.iter().fold(false, |hit, p| hit | p.admits(view))
            }),
        };
        let hits = match self.long_literals {
            true => self.confirmed(values, hits),
            false => hits,
        };
        BooleanArray::new(hits, values.nulls().cloned())
    }

    /// `hits` with each row whose value is not one of the literals unset: the rows that only
    /// passed a long literal's length and first bytes.
    fn confirmed(&self, values: &StringViewArray, hits: BooleanBuffer) -> BooleanBuffer {
        BooleanBuffer::collect_bool(values.len(), |row| {
            hits.value(row) && {
                // SAFETY: `row` is below the array's length.
                let value = unsafe { values.value_unchecked(row) };
                self.literals.iter().any(|literal| literal == value)
            }
        })
    }
}

/// Whether each value of an integer column is one of a few literals.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntegerSet {
    literals: Vec<i64>,
}

impl IntegerSet {
    /// The set of `literals` (repeats kept once, in order).
    pub fn new(literals: impl IntoIterator<Item = i64>) -> Self {
        let mut distinct = Vec::new();
        for literal in literals {
            if !distinct.contains(&literal) {
                distinct.push(literal);
            }
        }
        Self { literals: distinct }
    }

    /// The literals, in the order first given.
    pub fn literals(&self) -> &[i64] {
        &self.literals
    }

    /// Whether each value is one of the literals; null where the value is. A literal out of
    /// the column type's range matches nothing.
    pub fn contains_each<T>(&self, values: &PrimitiveArray<T>) -> BooleanArray
    where
        T: ArrowPrimitiveType,
        T::Native: TryFrom<i64> + PartialEq,
    {
        let literals: Vec<T::Native> = self
            .literals
            .iter()
            .filter_map(|&literal| T::Native::try_from(literal).ok())
            .collect();
        let values_slice = values.values().as_ref();
        let hits = match literals.as_slice() {
            [] => BooleanBuffer::new_unset(values.len()),
            [one] => admitted(values_slice, |value| value == *one),
            [a, b] => admitted(values_slice, |value| (value == *a) | (value == *b)),
            literals => admitted(values_slice, |value| {
                literals.iter().fold(false, |hit, l| hit | (value == *l))
            }),
        };
        BooleanArray::new(hits, values.nulls().cloned())
    }
}

/// The bits of `admits` of each value, asking memory for the values
/// [`PREFETCH_AHEAD_BYTES`] ahead.
#[inline(always)]
fn admitted<T: Copy>(values: &[T], admits: impl Fn(T) -> bool) -> BooleanBuffer {
    let line_values = (64 / size_of::<T>()).max(1);
    let ahead_values = PREFETCH_AHEAD_BYTES / size_of::<T>().max(1);
    let mut words = MutableBuffer::new(values.len().div_ceil(64) * 8);
    let last = values.len().saturating_sub(1);
    for (index, chunk) in values.chunks(64).enumerate() {
        let start = index * 64;
        for line in (0..chunk.len()).step_by(line_values) {
            prefetch(&values[(start + line + ahead_values).min(last)]);
        }
        let mut word = 0u64;
        for (bit, &value) in chunk.iter().enumerate() {
            word |= u64::from(admits(value)) << bit;
        }
        words.push(word);
    }
    BooleanBuffer::new(words.into(), 0, values.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column() -> StringViewArray {
        StringViewArray::from(vec![
            Some("OR"),
            Some("ID"),
            None,
            Some(""),
            Some("CA"),
            Some("ORE"),
            Some("O"),
            Some("twelve bytes"),
            Some("twelve byteS"),
            Some("a value longer than twelve bytes"),
            Some("a value longer than twelve bytes!"),
            Some("a value longer than twelve byteZ"),
            Some("a vx"),
        ])
    }

    fn expected(values: &StringViewArray, literals: &[&str]) -> BooleanArray {
        values
            .iter()
            .map(|value| value.map(|value| literals.contains(&value)))
            .collect()
    }

    #[test]
    fn each_value_is_in_the_set_exactly_when_it_equals_a_literal() {
        let values = column();
        let sets: [&[&str]; 7] = [
            &["OR"],
            &["OR", "ID"],
            &["OR", "ID", "CA"],
            &["OR", "ID", "CA", "O", "nowhere"],
            &[""],
            &["twelve bytes", "a value longer than twelve bytes"],
            &["a value longer than twelve byteZ", "a vx"],
        ];
        for literals in sets {
            let set = StringSet::new(literals.iter().copied());
            assert_eq!(
                set.contains_each(&values),
                expected(&values, literals),
                "{literals:?}"
            );
        }
    }

    #[test]
    fn every_row_of_a_long_column_is_compared() {
        let states = ["OR", "ID", "CA", "WA", "AZ", "WY"];
        let values: StringViewArray = (0..1_000).map(|i| Some(states[i % 6])).collect();
        let set = StringSet::new(["WY", "OR"]);
        let hits = set.contains_each(&values);
        assert_eq!(hits.true_count(), 333);
        assert_eq!(hits, expected(&values, &["WY", "OR"]));
    }

    #[test]
    fn each_integer_is_in_the_set_exactly_when_it_equals_a_literal() {
        use datafusion::arrow::array::{Int32Array, Int64Array};
        let values = Int64Array::from(vec![Some(10), None, Some(11), Some(-3), Some(i64::MAX)]);
        let sets: [&[i64]; 4] = [&[10], &[10, -3], &[11, i64::MAX, 7], &[]];
        for literals in sets {
            let set = IntegerSet::new(literals.iter().copied());
            let expected: BooleanArray = values
                .iter()
                .map(|value| value.map(|value| literals.contains(&value)))
                .collect();
            assert_eq!(set.contains_each(&values), expected, "{literals:?}");
        }
        // A literal out of the 32-bit range matches nothing; the others still do.
        let values = Int32Array::from(vec![1, 2, 3]);
        let set = IntegerSet::new([1 << 40, 3]);
        let expected = BooleanArray::from(vec![false, false, true]);
        assert_eq!(set.contains_each(&values), expected);
        // Every row of a column longer than one word of bits.
        let values: Int64Array = (0..1_000).map(|i| Some(i % 5 + 10)).collect();
        assert_eq!(
            IntegerSet::new([10]).contains_each(&values).true_count(),
            200
        );
    }
}
