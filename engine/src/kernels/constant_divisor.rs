//! [`ConstantDivisor`]: the quotient and remainder of integers by a divisor fixed for a
//! whole column (`auction % 10000`, `id / 16`), by a multiplication instead of a division.
//!
//! A 64-bit division takes tens of cycles and cannot overlap the next one much; arrow's
//! kernels divide each value of a column by the same constant anyway (Nexmark q13's
//! `auction % 10000` was half of that query's time). For a divisor `d` of at least 2 in
//! magnitude, `c = ⌈2^128 / d⌉` gives `⌊n / d⌋ = ⌊n · c / 2^128⌋` for every 64-bit `n`
//! (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019: exact when
//! the fraction has at least as many bits as `n` and `d` together), two 64-bit
//! multiplications; the remainder is `n - ⌊n / d⌋ · d`. Signed values divide their
//! magnitudes and take SQL's (and Rust's) signs: the quotient truncates toward zero, the
//! remainder has the dividend's sign. Neither can overflow once `|d| ≥ 2`.

use datafusion::arrow::array::{Array, Int32Array, Int64Array, PrimitiveArray};
use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::arrow::datatypes::ArrowPrimitiveType;
use freshet_partitioner::map_prefetched;

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConstantDivisor {
    divisor: i64,
    magnitude: u64,
    /// `⌈2^128 / magnitude⌉`.
    reciprocal: u128,
}

impl ConstantDivisor {
    /// The divisor, or `None` for 0, 1 and -1 (a division by zero is an error, and by one
    /// needs no kernel; `i64::MIN / -1` overflows).
    pub fn new(divisor: i64) -> Option<Self> {
        let magnitude = divisor.unsigned_abs();
        (magnitude >= 2).then(|| Self {
            divisor,
            magnitude,
            reciprocal: u128::MAX / u128::from(magnitude) + 1,
        })
    }

    /// `⌊n / magnitude⌋`.
    #[inline(always)]
    fn unsigned_quotient(&self, n: u64) -> u64 {
        let n = u128::from(n);
        let high = (self.reciprocal >> 64) * n;
        let low = (u128::from(self.reciprocal as u64) * n) >> 64;
        ((high + low) >> 64) as u64
    }

    /// `value / divisor`, truncated toward zero.
    #[inline(always)]
    pub fn quotient(&self, value: i64) -> i64 {
        let quotient = self.unsigned_quotient(value.unsigned_abs()) as i64;
        match (value < 0) != (self.divisor < 0) {
            true => -quotient,
            false => quotient,
        }
    }

    /// `value % divisor`, with the sign of `value`.
    #[inline(always)]
    pub fn remainder(&self, value: i64) -> i64 {
        let magnitude = value.unsigned_abs();
        let remainder = (magnitude - self.unsigned_quotient(magnitude) * self.magnitude) as i64;
        match value < 0 {
            true => -remainder,
            false => remainder,
        }
    }

    /// The quotients of a column (its nulls kept).
    pub fn quotients_i64(&self, values: &Int64Array) -> Int64Array {
        map_column(values, |value| self.quotient(value))
    }

    /// The remainders of a column (its nulls kept).
    pub fn remainders_i64(&self, values: &Int64Array) -> Int64Array {
        map_column(values, |value| self.remainder(value))
    }

    /// The quotients of a 32-bit column, whose divisor fits 32 bits (its nulls kept).
    pub fn quotients_i32(&self, values: &Int32Array) -> Int32Array {
        map_column(values, |value| self.quotient(i64::from(value)) as i32)
    }

    /// The remainders of a 32-bit column, whose divisor fits 32 bits (its nulls kept).
    pub fn remainders_i32(&self, values: &Int32Array) -> Int32Array {
        map_column(values, |value| self.remainder(i64::from(value)) as i32)
    }
}

/// `f` of every value of `values` (nulls' values too: `f` cannot fail), its nulls kept. The
/// division is often the first to read the column (q13's bid auctions), so the pass asks
/// memory for the values ahead.
fn map_column<T: ArrowPrimitiveType>(
    values: &PrimitiveArray<T>,
    f: impl Fn(T::Native) -> T::Native,
) -> PrimitiveArray<T> {
    let mapped = map_prefetched(values.values(), f);
    PrimitiveArray::new(ScalarBuffer::from(mapped), values.nulls().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Vec<i64> {
        let mut values = vec![
            0,
            1,
            -1,
            2,
            -2,
            9_999,
            10_000,
            10_001,
            -10_000,
            -10_001,
            i64::MAX,
            i64::MAX - 1,
            i64::MIN,
            i64::MIN + 1,
            1 << 62,
            -(1 << 62),
        ];
        // A splitmix-like sweep over every magnitude.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for shift in 0..64 {
            for _ in 0..64 {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                values.push(((z ^ (z >> 31)) >> shift) as i64);
                values.push(-(((z ^ (z >> 31)) >> (shift + 1).min(63)) as i64));
            }
        }
        values
    }

    #[test]
    fn quotient_and_remainder_equal_division_for_every_magnitude() {
        let mut divisors = vec![
            2,
            3,
            7,
            10,
            16,
            10_000,
            1_000_003,
            (1 << 32) + 1,
            (1 << 62) + 3,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ];
        divisors.extend(divisors.clone().iter().filter(|d| **d > 0).map(|d| -d));
        for divisor in divisors {
            let by = ConstantDivisor::new(divisor).unwrap();
            for value in values() {
                assert_eq!(by.quotient(value), value / divisor, "{value} / {divisor}");
                assert_eq!(by.remainder(value), value % divisor, "{value} % {divisor}");
            }
        }
    }

    #[test]
    fn zero_and_one_are_not_constant_divisors() {
        for divisor in [0, 1, -1] {
            assert_eq!(ConstantDivisor::new(divisor), None);
        }
    }

    #[test]
    fn columns_keep_their_nulls() {
        let by = ConstantDivisor::new(-7).unwrap();
        let values = Int64Array::from(vec![Some(50), None, Some(-50)]);
        let expected = Int64Array::from(vec![Some(1), None, Some(-1)]);
        assert_eq!(by.remainders_i64(&values), expected);
        assert_eq!(
            by.quotients_i64(&values),
            Int64Array::from(vec![Some(-7), None, Some(7)])
        );
        let values = Int32Array::from(vec![Some(i32::MIN), None, Some(i32::MAX)]);
        assert_eq!(
            by.remainders_i32(&values),
            Int32Array::from(vec![Some(i32::MIN % -7), None, Some(i32::MAX % -7)])
        );
        assert_eq!(
            by.quotients_i32(&values),
            Int32Array::from(vec![Some(i32::MIN / -7), None, Some(i32::MAX / -7)])
        );
    }
}
