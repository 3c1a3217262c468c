//! Watermarks: how far event time has certainly progressed.
//!
//! A stream's watermark is the largest event time seen so far minus its declared
//! out-of-orderness: no later record should be older. Event times are the raw `i64` of the
//! event-time column (the timestamp's unit, or epoch milliseconds for integers).
//! [`WatermarkTracker`] combines several inputs: the combined watermark is the minimum over
//! the inputs still running — a finished input no longer holds it back — and `i64::MAX` once
//! every input has finished.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, make_array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};

use crate::window::duration_in_unit;

/// A batch or a watermark, in stream order: after `Watermark(w)`, no record with an event
/// time below `w` is expected (one that comes anyway is late).
#[derive(Debug, Clone)]
pub enum StreamMessage {
    Batch(RecordBatch),
    Watermark(i64),
    /// A checkpoint's barrier (its epoch): every row before it precedes the checkpoint's
    /// cut, every row after it follows (see [`crate::checkpoint`]).
    Barrier(u64),
}

/// The event-time column of a stream and its out-of-orderness, in the column's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventTime {
    /// Column index in the schema the watermark is computed on.
    pub column: usize,
    /// Declared out-of-orderness, in the event-time unit (`i64::MAX`: no watermark before the
    /// end of the input).
    pub delay: i64,
    /// A running source partition silent this long (wall-clock) no longer holds the
    /// watermark back.
    pub idle_timeout: Option<Duration>,
}

impl EventTime {
    /// The largest event time in `batch`, if it has any non-null one.
    pub fn newest_in(&self, batch: &RecordBatch) -> Result<Option<i64>> {
        let times = event_times(batch.column(self.column))?;
        Ok(newest_time(times.as_primitive::<Int64Type>()))
    }

    /// The smallest and largest event times in `batch`, if it has any non-null one.
    pub fn range_in(&self, batch: &RecordBatch) -> Result<Option<(i64, i64)>> {
        let times = event_times(batch.column(self.column))?;
        Ok(time_range(times.as_primitive::<Int64Type>()))
    }
}

/// The smallest and largest non-null value of `times`, in one pass, and the largest; they
/// live with the partitioner, whose time runs read every batch's range too.
pub use freshet_partitioner::{newest_time, time_range};

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

/// `expr`, an event-time column of a projection's output, as a column of the projection's
/// input plus a constant in the column's unit (`ts`, `window_start + INTERVAL '10' SECOND`,
/// `ts - 5`), if it is one.
pub fn time_plus_constant(expr: &Arc<dyn PhysicalExpr>, input: &Schema) -> Option<(usize, i64)> {
    let resolve = |column: &Column| Some(column.index());
    let time_type = |column: &usize| Some(input.fields().get(*column)?.data_type().clone());
    linear_time_term(expr, &resolve, &time_type)
}

/// `expr` as a column plus a constant (`ts`, `ts - INTERVAL '5' SECOND`, `1000 + ts`, through
/// casts that keep the values: between `Int64` and a timestamp, or timestamps of one unit): `resolve` names the column a
/// reference stands for, `time_type` the type a constant is converted into.
pub fn linear_time_term<C>(
    expr: &Arc<dyn PhysicalExpr>,
    resolve: &dyn Fn(&Column) -> Option<C>,
    time_type: &dyn Fn(&C) -> Option<DataType>,
) -> Option<(C, i64)> {
    if let Some(column) = expr.downcast_ref::<Column>() {
        return Some((resolve(column)?, 0));
    }
    if let Some(cast) = expr.downcast_ref::<CastExpr>() {
        let (column, offset) = linear_time_term(cast.expr(), resolve, time_type)?;
        let keeps_values = match (cast.cast_type(), time_type(&column)?) {
            (DataType::Int64, DataType::Timestamp(_, _) | DataType::Int64) => true,
            (DataType::Timestamp(to, _), DataType::Timestamp(from, _)) => to == &from,
            (DataType::Timestamp(_, _), DataType::Int64) => true,
            _ => false,
        };
        return keeps_values.then_some((column, offset));
    }
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    let sign = match binary.op() {
        Operator::Plus => 1,
        Operator::Minus => -1,
        _ => return None,
    };
    let constant = |column: &C, literal: &Arc<dyn PhysicalExpr>| {
        constant_in_unit(
            literal.downcast_ref::<Literal>()?.value(),
            &time_type(column)?,
        )
    };
    if let Some((column, offset)) = linear_time_term(binary.left(), resolve, time_type) {
        let added = constant(&column, binary.right())?.checked_mul(sign)?;
        return Some((column, offset.checked_add(added)?));
    }
    // `constant + time`.
    if sign == 1 {
        let (column, offset) = linear_time_term(binary.right(), resolve, time_type)?;
        let added = constant(&column, binary.left())?;
        return Some((column, offset.checked_add(added)?));
    }
    None
}

/// A constant added to a time column of type `time_type`, in the column's unit; `None` when
/// it is not a constant duration (a month, a fraction of the unit).
pub fn constant_in_unit(value: &ScalarValue, time_type: &DataType) -> Option<i64> {
    match value {
        ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::Int32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int8(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt8(Some(v)) => Some(i64::from(*v)),
        other => duration_in_unit(other, time_type).ok(),
    }
}

/// The combined watermark of several inputs: the minimum over the inputs still running. With
/// an idle timeout, a running input that has sent no record for that long (wall-clock) is left
/// out until it sends one again, so a silent source partition does not hold every window open;
/// its records may then be late.
#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    /// Per input: its watermark, or `None` before its first record; `i64::MAX` when finished.
    inputs: Vec<Option<i64>>,
    /// Per input: when it last sent a record (or when tracking started).
    last_active: Vec<Instant>,
    delay: i64,
    idle_timeout: Option<Duration>,
}

impl WatermarkTracker {
    pub fn new(inputs: usize, delay: i64) -> Self {
        Self {
            inputs: vec![None; inputs],
            last_active: vec![Instant::now(); inputs],
            delay,
            idle_timeout: None,
        }
    }

    /// Leaves out of the combined watermark the running inputs silent for `timeout`.
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The idle timeout, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// Input `input` saw event times up to `max_event_time`, at `now`.
    pub fn observe(&mut self, input: usize, max_event_time: i64, now: Instant) {
        let watermark = max_event_time.saturating_sub(self.delay);
        let current = &mut self.inputs[input];
        *current = Some(current.map_or(watermark, |w| w.max(watermark)));
        self.last_active[input] = now;
    }

    /// Input `input` has ended.
    /// Sets `input`'s watermark to `watermark`, as a checkpoint held it.
    pub fn restore(&mut self, input: usize, watermark: i64) {
        self.inputs[input] = Some(watermark);
    }

    pub fn finish(&mut self, input: usize) {
        self.inputs[input] = Some(i64::MAX);
    }

    /// Input `input`'s own watermark (`i64::MAX` once finished), if it has seen a record.
    pub fn input(&self, input: usize) -> Option<i64> {
        self.inputs.get(input).copied().flatten()
    }

    /// The combined watermark at `now`: the minimum over the running inputs that are not
    /// idle, `None` while one of them has seen no record. When every running input is idle,
    /// the minimum over those that have seen a record (`None` if none has).
    pub fn watermark(&self, now: Instant) -> Option<i64> {
        let idle = |input: usize| {
            self.idle_timeout
                .is_some_and(|t| now.saturating_duration_since(self.last_active[input]) >= t)
        };
        let running = || {
            self.inputs
                .iter()
                .enumerate()
                .filter(|(_, w)| **w != Some(i64::MAX))
        };
        if running().next().is_none() {
            return Some(i64::MAX);
        }
        if running().all(|(input, _)| idle(input)) {
            return running().filter_map(|(_, w)| *w).min();
        }
        running()
            .filter(|(input, _)| !idle(*input))
            .try_fold(i64::MAX, |low, (_, w)| w.map(|w| low.min(w)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, TimestampMillisecondArray};
    use datafusion::arrow::compute::{max, min};

    use super::*;

    #[test]
    fn time_range_and_newest_time_equal_arrow_min_and_max() {
        let cases: Vec<Int64Array> = vec![
            Int64Array::from(Vec::<i64>::new()),
            Int64Array::from(vec![None, None]),
            Int64Array::from(vec![5]),
            Int64Array::from(vec![3, -7, 12, i64::MIN, 0]),
            Int64Array::from(vec![None, Some(4), None, Some(-2), Some(9), None]),
            Int64Array::from(
                (0..1000)
                    .map(|i| (i * 7919) % 1013 - 500)
                    .collect::<Vec<i64>>(),
            ),
        ];
        for times in cases {
            assert_eq!(
                time_range(&times),
                min(&times).zip(max(&times)),
                "{times:?}"
            );
            assert_eq!(newest_time(&times), max(&times), "{times:?}");
            let sliced = times.slice(times.len().min(1), times.len().saturating_sub(1));
            assert_eq!(time_range(&sliced), min(&sliced).zip(max(&sliced)));
            assert_eq!(newest_time(&sliced), max(&sliced));
        }
    }

    #[test]
    fn idle_inputs_are_left_out_until_they_send_again() {
        let start = Instant::now();
        let later = start + Duration::from_secs(10);
        let mut tracker =
            WatermarkTracker::new(3, 0).with_idle_timeout(Some(Duration::from_secs(5)));
        tracker.observe(0, 100, start);
        tracker.observe(1, 50, start);
        assert_eq!(
            tracker.watermark(start),
            None,
            "input 2 has seen nothing, not idle yet"
        );
        tracker.observe(0, 200, later);
        assert_eq!(
            tracker.watermark(later),
            Some(200),
            "inputs 1 and 2 have been silent for 10 s"
        );
        tracker.observe(1, 60, later);
        assert_eq!(tracker.watermark(later), Some(60), "input 1 is back");
        let much_later = later + Duration::from_secs(10);
        assert_eq!(
            tracker.watermark(much_later),
            Some(60),
            "every input idle: the ones that have seen records decide"
        );
        tracker.finish(0);
        tracker.finish(1);
        assert_eq!(
            tracker.watermark(much_later),
            None,
            "the only running input is idle and has seen nothing"
        );
        tracker.finish(2);
        assert_eq!(tracker.watermark(much_later), Some(i64::MAX));
    }

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
        let now = Instant::now();
        let mut tracker = WatermarkTracker::new(2, 5);
        assert_eq!(tracker.watermark(now), None);
        tracker.observe(0, 100, now);
        assert_eq!(tracker.watermark(now), None, "input 1 has seen nothing yet");
        tracker.observe(1, 50, now);
        assert_eq!(tracker.watermark(now), Some(45));
        tracker.observe(1, 40, now);
        assert_eq!(tracker.watermark(now), Some(45), "watermarks never go back");
        tracker.finish(1);
        assert_eq!(
            tracker.watermark(now),
            Some(95),
            "a finished input no longer holds it back"
        );
        tracker.finish(0);
        assert_eq!(tracker.watermark(now), Some(i64::MAX));
    }
}
