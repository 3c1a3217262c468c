//! [`RangeFrameAggregate`]: SUM, AVG, COUNT, MIN and MAX over a RANGE frame that reaches a
//! fixed distance back in ORDER BY value (`RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND
//! CURRENT ROW`), per key, with O(1) amortized work per row whatever the frame holds.
//!
//! A key's rows come in ORDER BY order. Each key keeps the rows of its frame in a two-stack
//! queue: rows enter the back stack, whose running aggregate is kept; when the oldest row must
//! leave and the front stack is empty, the back stack is moved onto the front one, each entry
//! taking the aggregate of itself and every newer entry moved before it. The frame's aggregate
//! is then the front top's combined with the back's: every operation is a combination of
//! whole values, never a subtraction, so float sums carry no drift and MIN and MAX need no
//! other structure. A row whose ORDER BY value is below the current row's minus the offset
//! leaves the frame. Nulls are skipped, as SQL does; an aggregate over no non-null value is
//! NULL (COUNT: 0). The current row's peers (equal ORDER BY values) are in its frame: the
//! caller gives each row the result computed at its last peer.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, PrimitiveArray,
};
use datafusion::common::Result;

use super::frame_aggregate::{FrameAggregateKind, FrameNumber};
use crate::checkpoint::{Persist, StateReader, StateWriter};

/// The aggregate of some rows' values.
#[derive(Debug, Clone, Copy)]
struct Partial<T> {
    sum: T,
    count: u64,
    min: Option<T>,
    max: Option<T>,
}

impl<T: FrameNumber> Partial<T> {
    fn empty() -> Self {
        Self {
            sum: T::default(),
            count: 0,
            min: None,
            max: None,
        }
    }

    fn of(value: Option<T>) -> Self {
        match value {
            Some(value) => Self {
                sum: value,
                count: 1,
                min: Some(value),
                max: Some(value),
            },
            None => Self::empty(),
        }
    }

    fn combine(self, other: Self) -> Self {
        let pick = |a: Option<T>, b: Option<T>, keep_first: std::cmp::Ordering| match (a, b) {
            (Some(a), Some(b)) => Some(if a.total_cmp(&b) == keep_first { a } else { b }),
            (a, None) => a,
            (None, b) => b,
        };
        Self {
            sum: T::sum_of(self.sum, other.sum),
            count: self.count + other.count,
            min: pick(self.min, other.min, std::cmp::Ordering::Less),
            max: pick(self.max, other.max, std::cmp::Ordering::Greater),
        }
    }
}

impl<T: FrameNumber> Persist for Partial<T> {
    fn persist(&self, out: &mut StateWriter) {
        out.put(&self.sum);
        out.put(&self.count);
        out.put(&self.min);
        out.put(&self.max);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(Self {
            sum: input.get()?,
            count: input.get()?,
            min: input.get()?,
            max: input.get()?,
        })
    }
}

impl<T: FrameNumber> Persist for KeyRange<T> {
    fn persist(&self, out: &mut StateWriter) {
        out.put(&self.front);
        out.put(&self.back);
        out.put(&self.back_total);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(Self {
            front: input.get()?,
            back: input.get()?,
            back_total: input.get()?,
        })
    }
}

/// One key's frame as a two-stack queue (see the module documentation).
#[derive(Debug, Clone, Default)]
struct KeyRange<T> {
    /// Oldest on top: each entry's ORDER BY value and the aggregate of itself and every entry
    /// below it.
    front: Vec<(i64, Partial<T>)>,
    /// Newest last: each entry's ORDER BY value and value.
    back: Vec<(i64, Option<T>)>,
    back_total: Option<Partial<T>>,
}

impl<T: FrameNumber> KeyRange<T> {
    fn push(&mut self, time: i64, value: Option<T>) {
        self.back.push((time, value));
        let total = self.back_total.unwrap_or_else(Partial::empty);
        self.back_total = Some(total.combine(Partial::of(value)));
    }

    /// Drops the rows whose ORDER BY value is below `start`.
    fn evict_before(&mut self, start: i64) {
        loop {
            if self.front.is_empty() {
                if self.back.first().is_none_or(|(time, _)| *time >= start) {
                    return;
                }
                let mut below = Partial::empty();
                for &(time, value) in self.back.iter().rev() {
                    below = Partial::of(value).combine(below);
                    self.front.push((time, below));
                }
                self.back.clear();
                self.back_total = None;
            }
            match self.front.last() {
                Some((time, _)) if *time < start => {
                    self.front.pop();
                }
                _ => return,
            }
        }
    }

    fn total(&self) -> Partial<T> {
        let front = self.front.last().map_or_else(Partial::empty, |(_, p)| *p);
        front.combine(self.back_total.unwrap_or_else(Partial::empty))
    }

    fn len(&self) -> usize {
        self.front.len() + self.back.len()
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct RangeFrameAggregate<T: FrameNumber> {
    kind: FrameAggregateKind,
    /// How far back in ORDER BY value the frame reaches.
    preceding: i64,
    keys: Vec<KeyRange<T>>,
}

/// The two instantiations.
pub type IntegerRangeAggregate = RangeFrameAggregate<i64>;
pub type FloatRangeAggregate = RangeFrameAggregate<f64>;

impl<T: FrameNumber> RangeFrameAggregate<T> {
    pub fn new(kind: FrameAggregateKind, preceding: i64) -> Self {
        Self {
            kind,
            preceding,
            keys: Vec::new(),
        }
    }

    /// The aggregate over each row's frame: `values` (of `T`'s Arrow type) in processing
    /// order, row `r` of key `groups[r]` with ORDER BY value `times[r]`. SUM, MIN and MAX give
    /// `T`, AVG `Float64`, COUNT `Int64`.
    pub fn evaluate(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        times: &[i64],
    ) -> Result<ArrayRef> {
        let values: &PrimitiveArray<T::Arrow> = values.as_primitive();
        let mut totals = Vec::with_capacity(groups.len());
        for (row, (&group, &time)) in groups.iter().zip(times).enumerate() {
            if group >= self.keys.len() {
                self.keys.resize_with(group + 1, KeyRange::default);
            }
            let key = &mut self.keys[group];
            key.push(time, values.is_valid(row).then(|| values.value(row)));
            key.evict_before(time.saturating_sub(self.preceding));
            totals.push(key.total());
        }
        let nonempty = |p: &Partial<T>| p.count > 0;
        Ok(match self.kind {
            FrameAggregateKind::Count => Arc::new(Int64Array::from_iter_values(
                totals.iter().map(|p| p.count as i64),
            )),
            FrameAggregateKind::Avg => Arc::new(Float64Array::from_iter(
                totals
                    .iter()
                    .map(|p| nonempty(p).then(|| p.sum.as_f64() / p.count as f64)),
            )),
            FrameAggregateKind::Sum => Arc::new(PrimitiveArray::<T::Arrow>::from_iter(
                totals.iter().map(|p| nonempty(p).then_some(p.sum)),
            )),
            FrameAggregateKind::Min => Arc::new(PrimitiveArray::<T::Arrow>::from_iter(
                totals.iter().map(|p| p.min),
            )),
            FrameAggregateKind::Max => Arc::new(PrimitiveArray::<T::Arrow>::from_iter(
                totals.iter().map(|p| p.max),
            )),
        })
    }

    /// Writes every key's frame, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        out.put(&self.keys);
    }

    /// Takes back what [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        self.keys = input.get()?;
        Ok(())
    }

    /// Forgets the keys `expired` marks, renumbering the others in order.
    pub fn retain_keys(&mut self, expired: &[bool]) {
        let mut expired = expired.iter();
        self.keys
            .retain(|_| !expired.next().copied().unwrap_or(false));
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        let entry = std::mem::size_of::<(i64, Partial<T>)>();
        self.keys.capacity() * std::mem::size_of::<KeyRange<T>>()
            + self.keys.iter().map(|k| k.len() * entry).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        kind: FrameAggregateKind,
        preceding: i64,
        rows: &[(usize, i64, Option<f64>)],
    ) -> Vec<Option<f64>> {
        let mut aggregate = FloatRangeAggregate::new(kind, preceding);
        let values: ArrayRef = Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2)));
        let groups: Vec<usize> = rows.iter().map(|r| r.0).collect();
        let times: Vec<i64> = rows.iter().map(|r| r.1).collect();
        let out = aggregate.evaluate(&values, &groups, &times).unwrap();
        let out = datafusion::arrow::compute::cast(
            &out,
            &datafusion::arrow::datatypes::DataType::Float64,
        )
        .unwrap();
        out.as_primitive::<datafusion::arrow::datatypes::Float64Type>()
            .iter()
            .collect()
    }

    #[test]
    fn a_frame_holds_the_rows_within_the_offset_of_the_current_one() {
        let rows = [
            (0, 0, Some(1.0)),
            (0, 5, Some(2.0)),
            (1, 5, Some(100.0)),
            (0, 10, Some(4.0)),
            (0, 16, None),
            (0, 30, Some(8.0)),
        ];
        // Frame [t - 10, t]: at 10 it holds 0, 5 and 10; at 16 only 10 and 16.
        assert_eq!(
            run(FrameAggregateKind::Sum, 10, &rows),
            [
                Some(1.0),
                Some(3.0),
                Some(100.0),
                Some(7.0),
                Some(4.0),
                Some(8.0)
            ]
        );
        assert_eq!(
            run(FrameAggregateKind::Count, 10, &rows),
            [
                Some(1.0),
                Some(2.0),
                Some(1.0),
                Some(3.0),
                Some(1.0),
                Some(1.0)
            ]
        );
        assert_eq!(
            run(FrameAggregateKind::Max, 10, &rows),
            [
                Some(1.0),
                Some(2.0),
                Some(100.0),
                Some(4.0),
                Some(4.0),
                Some(8.0)
            ]
        );
        assert_eq!(
            run(FrameAggregateKind::Min, 5, &rows),
            [
                Some(1.0),
                Some(1.0),
                Some(100.0),
                Some(2.0),
                None,
                Some(8.0)
            ]
        );
    }

    #[test]
    fn a_long_frame_moves_through_many_rows_without_drift() {
        // Values that cancel exactly: a running sum that subtracted would drift.
        let rows: Vec<(usize, i64, Option<f64>)> = (0..10_000)
            .map(|i| (0, i, Some(if i % 2 == 0 { 1e16 } else { 1.0 })))
            .collect();
        let out = run(FrameAggregateKind::Sum, 1, &rows);
        assert_eq!(out[9_999], Some(1e16 + 1.0));
    }
}
