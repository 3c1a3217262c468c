//! [`SparseNulls`]: the null rows of an output column being built row by row, kept as a list
//! of row numbers. Window results are rarely null (the first rows of a key, null inputs), and
//! setting a validity bit per row costs a read-modify-write of the same byte eight rows in a
//! row, which serializes the loop.

use datafusion::arrow::array::BooleanBufferBuilder;
use datafusion::arrow::buffer::NullBuffer;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SparseNulls {
    rows: Vec<usize>,
}

impl SparseNulls {
    /// Row `row` is null.
    #[inline]
    pub fn push(&mut self, row: usize) {
        self.rows.push(row);
    }

    /// The validity of a column of `len` rows: `None` when no row is null.
    pub fn finish(self, len: usize) -> Option<NullBuffer> {
        if self.rows.is_empty() {
            return None;
        }
        let mut bits = BooleanBufferBuilder::new(len);
        bits.append_n(len, true);
        for row in self.rows {
            bits.set_bit(row, false);
        }
        Some(NullBuffer::new(bits.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_only_the_null_rows() {
        assert!(SparseNulls::default().finish(10).is_none());
        let mut nulls = SparseNulls::default();
        nulls.push(1);
        nulls.push(9);
        let buffer = nulls.finish(10).unwrap();
        assert_eq!(buffer.null_count(), 2);
        assert!(buffer.is_null(1) && buffer.is_null(9) && buffer.is_valid(0));
    }
}
