//! Assigning records to windows: `start = t - (t - offset) mod size` over a whole column in
//! one vectorized pass (`unary` keeps the null mask; null event times stay null).

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::Result;

use super::spec::time_unit_type;
use crate::watermark::event_times;

/// The start of the window of length `size` (aligned to `offset`) each event time falls in.
pub fn window_starts(times: &Int64Array, size: i64, offset: i64) -> Int64Array {
    times.unary(|t| t - (t - offset).rem_euclid(size))
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

/// Which rows of a batch one window gets.
#[derive(Debug, Clone, PartialEq)]
pub enum WindowRows {
    /// Every row of the batch.
    All,
    /// Rows `offset..offset + len`.
    Slice { offset: usize, len: usize },
    /// These rows, in order.
    Take(UInt32Array),
}

/// Splits a batch's rows by window start (`starts`; null: no event time), keeping only
/// windows that start after `closed_through` (the others are closed: their rows are late).
/// Returns each open window's start and rows, in order of start.
///
/// In-order input, the common case, has sorted starts: the windows are runs of the column,
/// found in one pass and handed out as zero-copy slices. Otherwise rows are bucketed by
/// start with a hash map, also in one pass.
pub fn split_by_window(starts: &Int64Array, closed_through: i64) -> Vec<(i64, WindowRows)> {
    let values = starts.values();
    let rows = values.len();
    if starts.null_count() == 0 && values.is_sorted() {
        let first_open = values.partition_point(|s| *s <= closed_through);
        let mut windows = Vec::new();
        let mut offset = first_open;
        while offset < rows {
            let start = values[offset];
            let len = values[offset..].partition_point(|s| *s == start);
            let rows_of_window = if len == rows {
                WindowRows::All
            } else {
                WindowRows::Slice { offset, len }
            };
            windows.push((start, rows_of_window));
            offset += len;
        }
        return windows;
    }
    let mut buckets: HashMap<i64, Vec<u32>> = HashMap::new();
    for (row, start) in starts.iter().enumerate() {
        if let Some(start) = start.filter(|s| *s > closed_through) {
            buckets.entry(start).or_default().push(row as u32);
        }
    }
    let mut windows: Vec<(i64, WindowRows)> = buckets
        .into_iter()
        .map(|(start, rows)| (start, WindowRows::Take(UInt32Array::from(rows))))
        .collect();
    windows.sort_unstable_by_key(|(start, _)| *start);
    windows
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn sorted_starts_become_slices_and_closed_windows_are_skipped() {
        let starts = Int64Array::from(vec![0, 0, 10, 10, 10, 20]);
        assert_eq!(
            split_by_window(&starts, 0),
            vec![
                (10, WindowRows::Slice { offset: 2, len: 3 }),
                (20, WindowRows::Slice { offset: 5, len: 1 })
            ]
        );
        assert_eq!(
            split_by_window(&Int64Array::from(vec![5, 5]), 0),
            vec![(5, WindowRows::All)]
        );
    }

    #[test]
    fn unsorted_starts_and_nulls_are_bucketed() {
        let starts = Int64Array::from(vec![Some(20), None, Some(10), Some(20), Some(0)]);
        assert_eq!(
            split_by_window(&starts, 5),
            vec![
                (10, WindowRows::Take(UInt32Array::from(vec![2]))),
                (20, WindowRows::Take(UInt32Array::from(vec![0, 3])))
            ]
        );
    }
}
