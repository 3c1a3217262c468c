//! [`time_range`] and [`newest_time`]: the smallest and largest value of an event-time (or
//! integer key) column, and the largest alone, the kernels the time runs' router and the
//! engine's watermarks and joins share.
//!
//! Without nulls each is one fold over the values: on a CPU with AVX-512 a vectorized one,
//! eight values an instruction; elsewhere one in independent scalar lanes (the compares of
//! one lane do not wait on the others'), a cache line of values a step. Both ask memory for
//! the values [`PREFETCH_AHEAD`] on: these folds are often the first to read a batch a
//! source made a while ago (a source's watermark, a join's key range), from memory rather
//! than the caches. Several operators fold the same batch (its source's alignment and
//! watermark, an exchange, a join), and all but the first find it in the caches.

use datafusion::arrow::array::{Array, Int64Array};

use crate::prefetch::{PREFETCH_AHEAD_BYTES, prefetch};

/// Values between the line a fold reads and the one it asks memory for: criterion
/// `time_range_cold` and `newest_time_cold`, over a column four times the size of the last
/// level cache.
const PREFETCH_AHEAD: usize = PREFETCH_AHEAD_BYTES / size_of::<i64>();

/// Values in a cache line.
const LINE: usize = 8;

/// The smallest and largest non-null value of `times`, in one pass: several times faster
/// than arrow's `min` and `max` one after the other (criterion `time_range` against
/// `arrow_min_max`).
pub fn time_range(times: &Int64Array) -> Option<(i64, i64)> {
    if times.null_count() == 0 {
        let values = times.values();
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512.
            return unsafe { range_avx512(values) };
        }
        return range_in_lanes(values);
    }
    times.iter().flatten().fold(None, |range, t| match range {
        None => Some((t, t)),
        Some((lo, hi)) => Some((t.min(lo), t.max(hi))),
    })
}

/// The largest non-null value of `times`: [`time_range`]'s fold without the minimum, for
/// where only the newest time counts (a source's progress, a watermark); about twice as
/// fast (criterion `newest_time` against `time_range` and arrow's `max`).
pub fn newest_time(times: &Int64Array) -> Option<i64> {
    if times.null_count() == 0 {
        let values = times.values();
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512.
            return unsafe { newest_avx512(values) };
        }
        return newest_in_lanes(values);
    }
    times.iter().flatten().max()
}

/// The smallest and largest of `values`, folded in independent lanes (the compares of one
/// lane do not wait on the others'), a cache line of values a step.
fn range_in_lanes(values: &[i64]) -> Option<(i64, i64)> {
    let first = *values.first()?;
    let last = values.len() - 1;
    let mut lows = [first; 4];
    let mut highs = [first; 4];
    let lines = values.chunks_exact(LINE);
    let rest = lines.remainder();
    for (index, line) in lines.enumerate() {
        prefetch(&values[(index * LINE + PREFETCH_AHEAD).min(last)]);
        for lane in 0..4 {
            let (a, b) = (line[lane], line[lane + 4]);
            lows[lane] = lows[lane].min(a.min(b));
            highs[lane] = highs[lane].max(a.max(b));
        }
    }
    let low = lows.into_iter().chain(rest.iter().copied()).min()?;
    let high = highs.into_iter().chain(rest.iter().copied()).max()?;
    Some((low, high))
}

/// The largest of `values`: [`range_in_lanes`] without the minimum.
fn newest_in_lanes(values: &[i64]) -> Option<i64> {
    let first = *values.first()?;
    let last = values.len() - 1;
    let mut highs = [first; LINE];
    let lines = values.chunks_exact(LINE);
    let rest = lines.remainder();
    for (index, line) in lines.enumerate() {
        prefetch(&values[(index * LINE + PREFETCH_AHEAD).min(last)]);
        for lane in 0..LINE {
            highs[lane] = highs[lane].max(line[lane]);
        }
    }
    highs.into_iter().chain(rest.iter().copied()).max()
}

/// The smallest and largest of `values` on a CPU with AVX-512, whose 64-bit minimum and
/// maximum take eight values an instruction (the x86-64 baseline has no 64-bit compare of
/// vectors, AVX2 one that costs a blend besides): a plain fold a block at a time, which the
/// compiler vectorizes, each block asking memory for the next. About three times faster over
/// a batch in the caches (criterion `time_range`); one read from memory waits on memory
/// either way (`time_range_cold`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn range_avx512(values: &[i64]) -> Option<(i64, i64)> {
    let first = *values.first()?;
    let (mut low, mut high) = (first, first);
    for (index, block) in values.chunks(PREFETCH_AHEAD).enumerate() {
        prefetch_block(values, (index + 1) * PREFETCH_AHEAD);
        for &value in block {
            low = low.min(value);
            high = high.max(value);
        }
    }
    Some((low, high))
}

/// The largest of `values` on a CPU with AVX-512: [`range_avx512`] without the minimum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn newest_avx512(values: &[i64]) -> Option<i64> {
    let mut high = *values.first()?;
    for (index, block) in values.chunks(PREFETCH_AHEAD).enumerate() {
        prefetch_block(values, (index + 1) * PREFETCH_AHEAD);
        for &value in block {
            high = high.max(value);
        }
    }
    Some(high)
}

/// Asks memory for each cache line of the block of `values` that starts at `start`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_block(values: &[i64], start: usize) {
    for line in (start..(start + PREFETCH_AHEAD).min(values.len())).step_by(LINE) {
        prefetch(&values[line]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_equal_arrow_s_min_and_max() {
        use datafusion::arrow::compute::{max, min};
        for len in [0, 1, 7, 8, 9, 255, 256, 257, 300, 1_000, 5_000] {
            let values: Vec<i64> = (0..len as i64).map(|i| (i * 7_919) % 1_013 - 500).collect();
            let array = Int64Array::from(values);
            assert_eq!(time_range(&array), min(&array).zip(max(&array)), "{len}");
            assert_eq!(newest_time(&array), max(&array), "{len}");
            // The scalar folds too, on a CPU that takes the vectorized ones.
            assert_eq!(range_in_lanes(array.values()), time_range(&array), "{len}");
            assert_eq!(newest_in_lanes(array.values()), max(&array), "{len}");
            let with_nulls: Int64Array = array
                .iter()
                .enumerate()
                .map(|(i, v)| v.filter(|_| i % 3 != 0))
                .collect();
            assert_eq!(
                time_range(&with_nulls),
                min(&with_nulls).zip(max(&with_nulls))
            );
            assert_eq!(newest_time(&with_nulls), max(&with_nulls));
        }
    }
}
