//! Assigning records to windows: `start = t - (t - offset) mod size` over a whole column in
//! one vectorized pass (`unary` keeps the null mask; null event times stay null).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
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
