//! [`FrameSum`]: the values of one key's ROWS frame and their sum, for SUM, AVG and COUNT.
//!
//! Integers keep a ring of the frame's values and a wrapping sum that values enter and leave,
//! which is exact. Floats cannot subtract a leaving value without keeping its rounding error,
//! so a bounded float frame is summed in blocks instead ([`BlockSum`]): a key's rows are cut
//! into blocks of `capacity` rows, and a frame is the tail of the previous block and the head
//! of the current one. Its sum is the previous block's suffix sum (computed once, when that
//! block filled, in place of its values) plus the current block's running prefix sum, in the
//! memory a ring of the frame's values would take. A row costs two additions, and one more
//! amortized for the suffix sums; nothing is ever subtracted, and each frame's sum is added
//! afresh from its own values: no error builds up along a stream, and a NaN, an infinity or a
//! huge value affects exactly the frames that hold it. An unbounded float frame keeps a
//! compensated running sum ([`FloatSum`]).

use datafusion::common::Result;

use super::ring::Ring;
use crate::checkpoint::{Persist, StateReader, StateWriter};

/// Implements [`Persist`] for a struct by its fields, in order.
macro_rules! persist_fields {
    ($type:ty { $($field:ident),* }) => {
        impl Persist for $type {
            fn persist(&self, out: &mut StateWriter) {
                $(out.put(&self.$field);)*
            }
            fn restore(input: &mut StateReader) -> Result<Self> {
                Ok(Self { $($field: input.get()?),* })
            }
        }
    };
}

persist_fields!(FloatSum {
    sum,
    compensation,
    nan,
    positive_infinity,
    negative_infinity
});
persist_fields!(IntegerFrameSum { values, sum });
persist_fields!(FloatFrameSum { block, running });
persist_fields!(BlockSum {
    slots,
    prefix,
    offset
});

impl Persist for IntegerSum {
    fn persist(&self, out: &mut StateWriter) {
        out.put(&self.0);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(Self(input.get()?))
    }
}

/// A wrapping `i64` sum: exact under removal.
#[derive(Debug, Default, Clone)]
pub struct IntegerSum(i64);

impl IntegerSum {
    #[inline]
    fn add(&mut self, value: i64) {
        self.0 = self.0.wrapping_add(value);
    }
    #[inline]
    fn remove(&mut self, value: i64) {
        self.0 = self.0.wrapping_sub(value);
    }
    #[inline]
    fn value(&self) -> i64 {
        self.0
    }
}

/// A compensated (TwoSum) `f64` sum of the finite values that enter it, with NaN and
/// infinities counted (an unbounded frame: nothing leaves).
#[derive(Debug, Default, Clone)]
pub struct FloatSum {
    sum: f64,
    compensation: f64,
    nan: u64,
    positive_infinity: u64,
    negative_infinity: u64,
}

impl FloatSum {
    #[inline]
    fn add(&mut self, value: f64) {
        if value.is_finite() {
            // Knuth's branch-free TwoSum: the exact rounding error of `sum + value`.
            let total = self.sum + value;
            let value_part = total - self.sum;
            let sum_part = total - value_part;
            self.compensation += (self.sum - sum_part) + (value - value_part);
            self.sum = total;
        } else if value.is_nan() {
            self.nan += 1;
        } else if value > 0.0 {
            self.positive_infinity += 1;
        } else {
            self.negative_infinity += 1;
        }
    }

    #[inline]
    fn value(&self) -> f64 {
        match (self.nan, self.positive_infinity, self.negative_infinity) {
            (0, 0, 0) => self.sum + self.compensation,
            (0, _, 0) => f64::INFINITY,
            (0, 0, _) => f64::NEG_INFINITY,
            _ => f64::NAN,
        }
    }
}

/// One key's frame values and their sum. A null enters as the default value (zero), so it
/// leaves the sum unchanged; the caller counts the non-null values.
pub trait FrameSum<T>: Default + Clone + std::fmt::Debug + Persist {
    /// Adds `value` to a frame of the last `capacity` rows; returns whether the oldest value
    /// left to make room.
    fn push_bounded(&mut self, value: T, capacity: usize) -> bool;
    /// [`Self::push_bounded`] for a full frame whose push needs no allocation and no
    /// end-of-block pass, the common case: the frame's new sum; `None`, with nothing done,
    /// otherwise. It calls nothing, so a loop of it keeps its state in registers.
    fn push_steady(&mut self, value: T, capacity: usize) -> Option<T>;
    /// The sum of a bounded frame.
    fn bounded_sum(&self) -> T;
    /// Values held in a bounded frame.
    fn len(&self) -> usize;
    /// Adds `value` to a frame that keeps every row.
    fn push_unbounded(&mut self, value: T);
    /// The sum of an unbounded frame.
    fn unbounded_sum(&self) -> T;
    /// Bytes held beside the struct itself.
    fn size(&self) -> usize;
}

/// Integers: a ring of the frame's values and an exact running sum.
#[derive(Debug, Default, Clone)]
pub struct IntegerFrameSum {
    values: Ring<i64>,
    sum: IntegerSum,
}

impl FrameSum<i64> for IntegerFrameSum {
    #[inline]
    fn push_bounded(&mut self, value: i64, capacity: usize) -> bool {
        self.sum.add(value);
        match self.values.push(value, capacity) {
            Some(leaving) => {
                self.sum.remove(leaving);
                true
            }
            None => false,
        }
    }
    #[inline]
    fn push_steady(&mut self, value: i64, capacity: usize) -> Option<i64> {
        let leaving = self.values.push_full(value, capacity)?;
        self.sum.add(value);
        self.sum.remove(leaving);
        Some(self.sum.value())
    }
    #[inline]
    fn bounded_sum(&self) -> i64 {
        self.sum.value()
    }
    #[inline]
    fn len(&self) -> usize {
        self.values.len()
    }
    #[inline]
    fn push_unbounded(&mut self, value: i64) {
        self.sum.add(value);
    }
    #[inline]
    fn unbounded_sum(&self) -> i64 {
        self.sum.value()
    }
    fn size(&self) -> usize {
        self.values.size()
    }
}

/// Floats: block sums for a bounded frame, a compensated running sum for an unbounded one.
#[derive(Debug, Default, Clone)]
pub struct FloatFrameSum {
    block: BlockSum,
    running: FloatSum,
}

impl FrameSum<f64> for FloatFrameSum {
    #[inline]
    fn push_bounded(&mut self, value: f64, capacity: usize) -> bool {
        self.block.push(value, capacity)
    }
    #[inline]
    fn push_steady(&mut self, value: f64, capacity: usize) -> Option<f64> {
        self.block.push_steady(value, capacity)
    }
    #[inline]
    fn bounded_sum(&self) -> f64 {
        self.block.sum()
    }
    #[inline]
    fn len(&self) -> usize {
        self.block.len()
    }
    #[inline]
    fn push_unbounded(&mut self, value: f64) {
        self.running.add(value);
    }
    #[inline]
    fn unbounded_sum(&self) -> f64 {
        self.running.value()
    }
    fn size(&self) -> usize {
        self.block.size()
    }
}

/// The sum of the last `capacity` values of a stream; see the module documentation.
#[derive(Debug, Default, Clone)]
pub struct BlockSum {
    /// One slot per offset in a block: the current block's value where it has one (offsets
    /// before `offset`), else the previous block's suffix sum from that offset on. A value
    /// replaces the suffix sum just as the frame stops needing it, so the two share one
    /// buffer. Grows to `capacity` during the first block, which has no suffix sums.
    slots: Vec<f64>,
    /// The sum of the current block's values.
    prefix: f64,
    /// Where the next value goes in the current block.
    offset: usize,
}

impl BlockSum {
    /// Adds `value`; returns whether the oldest value left the frame.
    #[inline]
    pub fn push(&mut self, value: f64, capacity: usize) -> bool {
        // Past the first block the frame is full, and every value takes a slot of the last.
        let full = self.offset < self.slots.len();
        if full {
            self.slots[self.offset] = value;
        } else {
            self.slots.push(value);
        }
        self.prefix += value;
        self.offset += 1;
        if self.offset == capacity {
            self.close_block();
        }
        full
    }

    /// [`Self::push`] past the first block when the current block does not fill: the new
    /// sum; `None`, with nothing done, otherwise.
    #[inline]
    pub fn push_steady(&mut self, value: f64, capacity: usize) -> Option<f64> {
        let offset = self.offset;
        let next = offset + 1;
        // Past the first block every slot exists, so `next` has the previous block's suffix.
        match self.slots.get_mut(offset..=next) {
            Some([slot, suffix]) if next < capacity => {
                *slot = value;
                self.prefix += value;
                self.offset = next;
                Some(self.prefix + *suffix)
            }
            _ => None,
        }
    }

    /// Values in the frame.
    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The current block is whole: its values become suffix sums, the previous block's.
    #[cold]
    fn close_block(&mut self) {
        let mut sum = 0.0;
        for slot in self.slots.iter_mut().rev() {
            sum += *slot;
            *slot = sum;
        }
        self.prefix = 0.0;
        self.offset = 0;
    }

    /// The sum of the frame.
    #[inline]
    pub fn sum(&self) -> f64 {
        match self.slots.get(self.offset) {
            // Past the first block: the rest of the frame is the previous block's suffix.
            Some(suffix) => self.prefix + suffix,
            None => self.prefix,
        }
    }

    fn size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sums_equal_the_sum_of_the_last_values() {
        let values: Vec<f64> = (0..50).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
        for capacity in [1usize, 2, 3, 7, 50, 64] {
            let mut block = BlockSum::default();
            for (i, &value) in values.iter().enumerate() {
                // Alternate the two ways in: a steady push must leave the same state.
                let left = if i % 2 == 0 {
                    block.push(value, capacity)
                } else {
                    match block.push_steady(value, capacity) {
                        Some(sum) => {
                            assert_eq!(sum, block.sum(), "capacity {capacity} row {i}");
                            true
                        }
                        None => block.push(value, capacity),
                    }
                };
                assert_eq!(left, i >= capacity, "capacity {capacity} row {i}");
                let frame = &values[(i + 1).saturating_sub(capacity)..=i];
                assert_eq!(block.len(), frame.len());
                assert_eq!(
                    block.sum(),
                    frame.iter().sum::<f64>(),
                    "capacity {capacity} row {i}"
                );
            }
        }
    }

    #[test]
    fn a_long_stream_stays_within_rounding_of_a_fresh_sum() {
        // Large values with small differences: a running sum that subtracts drifts here.
        let value = |i: u64| 1e9 + ((i * 7919) % 1000) as f64 * 0.001 - 0.5;
        let capacity = 100;
        let mut block = BlockSum::default();
        for i in 0..1_000_000 {
            block.push(value(i), capacity);
            if i % 99_991 == 0 || i == 999_999 {
                let first = (i + 1).saturating_sub(capacity as u64);
                let fresh: f64 = (first..=i).map(value).sum();
                assert!(
                    (block.sum() - fresh).abs() <= 1e-12 * fresh.abs(),
                    "row {i}: {} vs {fresh}",
                    block.sum()
                );
            }
        }
    }

    #[test]
    fn a_nan_or_huge_value_affects_only_the_frames_that_hold_it() {
        let mut block = BlockSum::default();
        let mut sums = Vec::new();
        for value in [1.0, f64::NAN, 2.0, 1e300, 3.0, 4.0, 5.0] {
            block.push(value, 2);
            sums.push(block.sum());
        }
        assert_eq!(sums[0], 1.0);
        assert!(sums[1].is_nan() && sums[2].is_nan());
        assert_eq!(sums[3], 1e300);
        assert_eq!(&sums[5..], &[7.0, 9.0]);
    }
}
