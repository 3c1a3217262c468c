//! Watermarks: how far event time has certainly progressed.
//!
//! A stream's watermark is the largest event time seen so far minus its declared
//! out-of-orderness: no later record should be older. Event times are the raw `i64` of the
//! event-time column (the timestamp's unit, or epoch milliseconds for integers).
//! [`WatermarkTracker`] combines several inputs: the combined watermark is the minimum over
//! the inputs still running — a finished input no longer holds it back — and `i64::MAX` once
//! every input has finished.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, make_array};
use datafusion::arrow::compute::{cast, max, min};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

/// A batch or a watermark, in stream order: after `Watermark(w)`, no record with an event
/// time below `w` is expected (one that comes anyway is late).
#[derive(Debug, Clone)]
pub enum StreamMessage {
    Batch(RecordBatch),
    Watermark(i64),
}

/// The event-time column of a stream and its out-of-orderness, in the column's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventTime {
    /// Column index in the schema the watermark is computed on.
    pub column: usize,
    /// Declared out-of-orderness, in the event-time unit.
    pub delay: i64,
}

impl EventTime {
    /// The smallest and largest event times in `batch`, if it has any non-null one.
    pub fn range_in(&self, batch: &RecordBatch) -> Result<Option<(i64, i64)>> {
        let times = event_times(batch.column(self.column))?;
        let times = times.as_primitive::<Int64Type>();
        Ok(min(times).zip(max(times)))
    }
}

/// An event-time column as `Int64` values (timestamps are reinterpreted, not converted:
/// 64-bit time types share the buffers, without a copy).
pub fn event_times(column: &ArrayRef) -> Result<ArrayRef> {
    Ok(match column.data_type() {
        DataType::Int64 => column.clone(),
        DataType::Timestamp(_, _) | DataType::Date64 | DataType::Duration(_) => {
            let data = column.to_data().into_builder().data_type(DataType::Int64);
            make_array(data.build()?)
        }
        _ => cast(column, &DataType::Int64)?,
    })
}

/// The combined watermark of several inputs.
#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    /// Per input: its watermark, or `None` before its first record; `i64::MAX` when finished.
    inputs: Vec<Option<i64>>,
    delay: i64,
}

impl WatermarkTracker {
    pub fn new(inputs: usize, delay: i64) -> Self {
        Self {
            inputs: vec![None; inputs],
            delay,
        }
    }

    /// Input `input` saw event times up to `max_event_time`.
    pub fn observe(&mut self, input: usize, max_event_time: i64) {
        let watermark = max_event_time.saturating_sub(self.delay);
        let current = &mut self.inputs[input];
        *current = Some(current.map_or(watermark, |w| w.max(watermark)));
    }

    /// Input `input` has ended.
    pub fn finish(&mut self, input: usize) {
        self.inputs[input] = Some(i64::MAX);
    }

    /// Input `input`'s own watermark (`i64::MAX` once finished), if it has seen a record.
    pub fn input(&self, input: usize) -> Option<i64> {
        self.inputs.get(input).copied().flatten()
    }

    /// The combined watermark; `None` while some running input has seen no record.
    pub fn watermark(&self) -> Option<i64> {
        self.inputs
            .iter()
            .try_fold(i64::MAX, |low, w| w.map(|w| low.min(w)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::TimestampMillisecondArray;

    use super::*;

    #[test]
    fn event_times_reinterpret_timestamps() {
        let column: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![
            Some(5),
            None,
            Some(7),
        ]));
        let times = event_times(&column).unwrap();
        let times = times.as_primitive::<Int64Type>();
        assert_eq!(
            times.iter().collect::<Vec<_>>(),
            vec![Some(5), None, Some(7)]
        );
    }

    #[test]
    fn combined_watermark_is_the_minimum_of_running_inputs() {
        let mut tracker = WatermarkTracker::new(2, 5);
        assert_eq!(tracker.watermark(), None);
        tracker.observe(0, 100);
        assert_eq!(tracker.watermark(), None, "input 1 has seen nothing yet");
        tracker.observe(1, 50);
        assert_eq!(tracker.watermark(), Some(45));
        tracker.observe(1, 40);
        assert_eq!(tracker.watermark(), Some(45), "watermarks never go back");
        tracker.finish(1);
        assert_eq!(
            tracker.watermark(),
            Some(95),
            "a finished input no longer holds it back"
        );
        tracker.finish(0);
        assert_eq!(tracker.watermark(), Some(i64::MAX));
    }
}
