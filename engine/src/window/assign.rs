//! Assigning records to windows: `start = t - (t - offset) mod size` over a whole column in
//! one vectorized pass (`unary` keeps the null mask; null event times stay null).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::Result;

use super::spec::time_unit_type;
use crate::watermark::event_times;

/// The start of the window of length `size` (aligned to `offset`) each event time falls in.
///
/// Consecutive records mostly share a window, so the last window is remembered and the
/// division only paid when a record leaves it.
pub fn window_starts(times: &Int64Array, size: i64, offset: i64) -> Int64Array {
    window_starts_counting(times, size, offset, i64::MIN).0
}

/// [`window_starts`], and in the same pass how many slots' starts are at or before
/// `closed_through` (null slots included, so the count is the closed rows' only without
/// nulls).
pub fn window_starts_counting(
    times: &Int64Array,
    size: i64,
    offset: i64,
    closed_through: i64,
) -> (Int64Array, usize) {
    let mut start = i64::MIN;
    let mut end = i64::MIN;
    let mut closed = 0;
    let mut starts = vec![0i64; times.len()];
    for (slot, &t) in starts.iter_mut().zip(times.values().iter()) {
        if t < start || t >= end {
            // Wrapping: absurd times (or null slots) must not panic.
            start = t.wrapping_sub(t.wrapping_sub(offset).rem_euclid(size));
            end = start.saturating_add(size);
        }
        closed += usize::from(start <= closed_through);
        *slot = start;
    }
    (
        Int64Array::new(starts.into(), times.nulls().cloned()),
        closed,
    )
}

/// [`window_starts`] over an event-time column of any supported type; the result has the
/// window bound type of that column (a timestamp of the same unit).
pub fn window_starts_array(column: &ArrayRef, size: i64, offset: i64) -> Result<ArrayRef> {
    let times = event_times(column)?;
    let starts = window_starts(times.as_primitive::<Int64Type>(), size, offset);
    let bound_type: DataType = time_unit_type(column.data_type())?;
    Ok(cast(&starts, &bound_type)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_windows_give_the_same_starts_as_dividing() {
        let times: Vec<i64> = (0..10_000i64)
            .map(|i| i * 997 - (i * 7_919) % 5_000 - 2_000_000)
            .collect();
        let starts = window_starts(&Int64Array::from(times.clone()), 60_000, 5);
        for (t, s) in times.iter().zip(starts.values()) {
            assert_eq!(*s, t - (t - 5).rem_euclid(60_000), "time {t}");
        }
    }

    #[test]
    fn counts_the_starts_at_or_before_the_closed_one() {
        let times = Int64Array::from(vec![0, 59_999, 60_000, 125_000, -1]);
        let (starts, closed) = window_starts_counting(&times, 60_000, 0, 0);
        assert_eq!(
            starts.values().to_vec(),
            vec![0, 0, 60_000, 120_000, -60_000]
        );
        assert_eq!(closed, 3);
        assert_eq!(window_starts_counting(&times, 60_000, 0, i64::MIN).1, 0);
    }

    #[test]
    fn starts_are_epoch_aligned_and_floor_negative_times() {
        let times = Int64Array::from(vec![Some(0), Some(59_999), Some(60_000), None, Some(-1)]);
        let starts = window_starts(&times, 60_000, 0);
        assert_eq!(
            starts.iter().collect::<Vec<_>>(),
            vec![Some(0), Some(0), Some(60_000), None, Some(-60_000)]
        );
        let shifted = window_starts(&Int64Array::from(vec![10, 14, 15]), 10, 5);
        assert_eq!(shifted.values().to_vec(), vec![5, 5, 15]);
    }
}
