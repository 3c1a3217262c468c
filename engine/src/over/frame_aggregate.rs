//! [`FrameAggregate`]: SUM, AVG, COUNT, MIN and MAX over a ROWS frame that ends at the current
//! row, per key, with O(1) amortized work per row whatever the frame length.
//!
//! SUM, AVG and COUNT keep each key's frame in a [`FrameSum`]: a ring and an exact running
//! sum for integers, block sums for a bounded float frame (no subtraction, so a value leaving
//! the frame takes its effect with it and long streams stay within rounding of a fresh
//! computation), a compensated running sum for an unbounded float frame. MIN and MAX keep a
//! monotonic deque of (position, value): the front is the extreme of the frame. Nulls are
//! skipped, as SQL does; an aggregate over no non-null value is NULL (COUNT: 0). Integers are
//! summed as `i64` (wrapping), floats as `f64`; NaN counts as larger than every number for
//! MIN and MAX. While neither the batch nor any frame holds a null, SUM, AVG and COUNT take a
//! dense path without null bookkeeping.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, PrimitiveArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{ArrowPrimitiveType, Float64Type, Int64Type};
use datafusion::common::Result;

use super::frame_sum::{FloatFrameSum, FrameSum, IntegerFrameSum};
use super::sparse_nulls::SparseNulls;
use crate::checkpoint::{Persist, StateReader, StateWriter};

/// Which aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameAggregateKind {
    Sum,
    Avg,
    Count,
    Min,
    Max,
}

/// A number the kernels work on: `i64` or `f64`.
pub trait FrameNumber:
    datafusion::arrow::datatypes::ArrowNativeType + Copy + Default + Send + Sync + Persist + 'static
{
    type Arrow: ArrowPrimitiveType<Native = Self>;
    /// The frame state of one key.
    type Frame: FrameSum<Self>;
    fn total_cmp(&self, other: &Self) -> Ordering;
    fn as_f64(self) -> f64;
    /// `a + b`, wrapping for integers as their SUM does.
    fn sum_of(a: Self, b: Self) -> Self;
}

impl FrameNumber for i64 {
    type Arrow = Int64Type;
    type Frame = IntegerFrameSum;
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn sum_of(a: Self, b: Self) -> Self {
        a.wrapping_add(b)
    }
    fn total_cmp(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

impl FrameNumber for f64 {
    type Arrow = Float64Type;
    type Frame = FloatFrameSum;
    fn as_f64(self) -> f64 {
        self
    }
    fn sum_of(a: Self, b: Self) -> Self {
        a + b
    }
    fn total_cmp(&self, other: &Self) -> Ordering {
        // NaN above everything, as DataFusion's MIN/MAX over floats.
        match (self.is_nan(), other.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => f64::total_cmp(self, other),
        }
    }
}

/// One key's state.
#[derive(Debug, Default, Clone)]
struct KeyFrame<T: FrameNumber> {
    /// The frame's values and their sum (SUM/AVG/COUNT); a null enters as a default value,
    /// and over a bounded frame its position is listed in `null_positions`.
    frame: T::Frame,
    null_positions: VecDeque<u64>,
    /// Non-null values in the frame (SUM/AVG/COUNT).
    non_null: u64,
    /// MIN/MAX: (position, value), values strictly improving from back to front.
    extremes: VecDeque<(u64, T)>,
}

/// Each row's frame sum over a bounded frame without nulls, and the frame's length: `steady`
/// (the frame's capacity) but for the `short` rows, listed with theirs.
struct DenseSums<T> {
    sums: Vec<T>,
    steady: u64,
    short: Vec<(usize, u64)>,
}

impl<T: Copy> DenseSums<T> {
    /// Each row's result: `steady` of its sum, `short` of its sum and count for short frames.
    fn read<R>(&self, steady: impl Fn(T) -> R, short: impl Fn(T, u64) -> R) -> Vec<R> {
        let mut out: Vec<R> = self.sums.iter().map(|&sum| steady(sum)).collect();
        for &(row, count) in &self.short {
            if let (Some(result), Some(&sum)) = (out.get_mut(row), self.sums.get(row)) {
                *result = short(sum, count);
            }
        }
        out
    }
}

impl<T: FrameNumber> Persist for KeyFrame<T> {
    fn persist(&self, out: &mut StateWriter) {
        out.put(&self.frame);
        out.put(&self.null_positions);
        out.put(&self.non_null);
        out.put(&self.extremes);
    }
    fn restore(input: &mut StateReader) -> Result<Self> {
        Ok(Self {
            frame: input.get()?,
            null_positions: input.get()?,
            non_null: input.get()?,
            extremes: input.get()?,
        })
    }
}

impl<T: FrameNumber> KeyFrame<T> {
    fn sum(&self, preceding: Option<u64>) -> T {
        match preceding {
            Some(_) => self.frame.bounded_sum(),
            None => self.frame.unbounded_sum(),
        }
    }
}

/// The validity of an output column, pushed row by row.
struct Validity {
    nulls: SparseNulls,
    rows: usize,
}

impl Validity {
    fn new() -> Self {
        Self {
            nulls: SparseNulls::default(),
            rows: 0,
        }
    }

    #[inline]
    fn push(&mut self, valid: bool) {
        if !valid {
            self.nulls.push(self.rows);
        }
        self.rows += 1;
    }

    fn finish(self) -> Option<NullBuffer> {
        self.nulls.finish(self.rows)
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct FrameAggregate<T: FrameNumber> {
    kind: FrameAggregateKind,
    /// Rows before the current one in the frame; `None`: unbounded.
    preceding: Option<u64>,
    keys: Vec<KeyFrame<T>>,
    /// Null positions listed over all keys: while none is, a frame's non-null count is
    /// its ring's length.
    nulls_held: usize,
}

/// The two instantiations.
pub type IntegerFrameAggregate = FrameAggregate<i64>;
pub type FloatFrameAggregate = FrameAggregate<f64>;

impl<T: FrameNumber> FrameAggregate<T> {
    pub fn new(kind: FrameAggregateKind, preceding: Option<u64>) -> Self {
        Self {
            kind,
            preceding,
            keys: Vec::new(),
            nulls_held: 0,
        }
    }

    /// The aggregate over each row's frame: `values` (of `T`'s Arrow type) in processing
    /// order, row `r` at position `positions[r]` of key `groups[r]`. SUM, MIN and MAX give
    /// `T`, AVG `Float64`, COUNT `Int64`.
    pub fn evaluate(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        positions: &[u64],
    ) -> Result<ArrayRef> {
        let values = values.as_primitive::<T::Arrow>();
        let rows = values.len();
        let mut validity = Validity::new();
        let dense = values.null_count() == 0 && self.nulls_held == 0;
        Ok(match self.kind {
            // The current row is in its frame: a frame without a value needs a null input.
            FrameAggregateKind::Sum if dense => {
                let out = match self.preceding {
                    Some(preceding) => {
                        self.dense_bounded_sums(values.values(), groups, preceding)
                            .sums
                    }
                    None => self.fold_dense_unbounded(values.values(), groups, |sum, _| sum),
                };
                Arc::new(PrimitiveArray::<T::Arrow>::new(out.into(), None))
            }
            FrameAggregateKind::Avg if dense => {
                // Sums and counts first, divided in a second, vectorizable pass: a division
                // in the per-row loop stalls it.
                let out: Vec<f64> = match self.preceding {
                    Some(preceding) => {
                        let sums = self.dense_bounded_sums(values.values(), groups, preceding);
                        // Through `i64`: a signed conversion is one instruction.
                        let steady = sums.steady as i64 as f64;
                        sums.read(
                            |sum| sum.as_f64() / steady,
                            |sum, count| sum.as_f64() / count as i64 as f64,
                        )
                    }
                    None => self
                        .fold_dense_unbounded(values.values(), groups, |sum, count| {
                            (sum.as_f64(), count as i64 as f64)
                        })
                        .iter()
                        .map(|(sum, count)| sum / count)
                        .collect(),
                };
                Arc::new(Float64Array::new(out.into(), None))
            }
            FrameAggregateKind::Count if dense => {
                let out = match self.preceding {
                    Some(preceding) => {
                        let sums = self.dense_bounded_sums(values.values(), groups, preceding);
                        let steady = sums.steady as i64;
                        sums.read(|_| steady, |_, count| count as i64)
                    }
                    None => {
                        self.fold_dense_unbounded(values.values(), groups, |_, count| count as i64)
                    }
                };
                Arc::new(Int64Array::from(out))
            }
            FrameAggregateKind::Sum => {
                let preceding = self.preceding;
                let mut out = Vec::with_capacity(rows);
                self.fold_sums(values, groups, positions, |key| {
                    validity.push(key.non_null > 0);
                    out.push(key.sum(preceding));
                });
                Arc::new(PrimitiveArray::<T::Arrow>::new(
                    out.into(),
                    validity.finish(),
                ))
            }
            FrameAggregateKind::Avg => {
                let preceding = self.preceding;
                let mut out = Vec::with_capacity(rows);
                self.fold_sums(values, groups, positions, |key| {
                    validity.push(key.non_null > 0);
                    out.push(key.sum(preceding).as_f64() / key.non_null as f64);
                });
                Arc::new(Float64Array::new(out.into(), validity.finish()))
            }
            FrameAggregateKind::Count => {
                let mut out = Vec::with_capacity(rows);
                self.fold_sums(values, groups, positions, |key| {
                    out.push(key.non_null as i64)
                });
                Arc::new(Int64Array::from(out))
            }
            FrameAggregateKind::Min | FrameAggregateKind::Max => {
                let better = if self.kind == FrameAggregateKind::Min {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
                let out = self.fold_extremes(values, groups, positions, better, &mut validity);
                Arc::new(PrimitiveArray::<T::Arrow>::new(
                    out.into(),
                    validity.finish(),
                ))
            }
        })
    }

    /// Grows the per-key state to every key of `groups`, for the paths that index it
    /// directly (the dense bounded path grows it as it meets keys instead).
    fn grow_keys_for(&mut self, groups: &[usize]) {
        if let Some(largest) = groups.iter().max()
            && *largest >= self.keys.len()
        {
            self.keys.resize_with(largest + 1, KeyFrame::default);
        }
    }

    /// The frame sums of SUM, AVG and COUNT over a bounded frame when neither the batch nor
    /// any frame holds a null, the common case: no null bookkeeping, and a frame's count is
    /// its length.
    fn dense_bounded_sums(&mut self, raw: &[T], groups: &[usize], preceding: u64) -> DenseSums<T> {
        let capacity = preceding as usize + 1;
        let rows = raw.len().min(groups.len());
        let mut sums = DenseSums {
            sums: vec![T::default(); rows],
            steady: capacity as u64,
            short: Vec::new(),
        };
        // Most rows find their key's frame full and its block open: the inner loop takes
        // those and calls nothing, so its state stays in registers; it stops at any other
        // row, which the outer loop takes with a full push.
        let mut row = 0;
        while row < rows {
            let group = groups[row];
            if group >= self.keys.len() {
                self.keys.resize_with(group + 1, KeyFrame::default);
            }
            // A slice, not a `&mut Vec`: its pointer stays in a register across the stores.
            let keys = self.keys.as_mut_slice();
            let frame = &mut keys[group].frame;
            frame.push_bounded(raw[row], capacity);
            sums.sums[row] = frame.bounded_sum();
            if frame.len() < capacity {
                sums.short.push((row, frame.len() as u64));
            }
            row += 1;
            let steady = sums.sums[row..]
                .iter_mut()
                .zip(&groups[row..])
                .zip(&raw[row..]);
            for ((sum, &group), &value) in steady {
                // A key not seen yet is not steady either.
                match keys
                    .get_mut(group)
                    .and_then(|k| k.frame.push_steady(value, capacity))
                {
                    Some(frame_sum) => *sum = frame_sum,
                    None => break,
                }
                row += 1;
            }
        }
        sums
    }

    /// [`Self::dense_bounded_sums`] for an unbounded frame, whose count is its key's rows:
    /// `read` makes each row's result from its sum and count.
    fn fold_dense_unbounded<R>(
        &mut self,
        raw: &[T],
        groups: &[usize],
        read: impl Fn(T, u64) -> R,
    ) -> Vec<R> {
        self.grow_keys_for(groups);
        let keys = self.keys.as_mut_slice();
        // Collected from a map over the rows: no per-row capacity check or zeroing first.
        groups
            .iter()
            .zip(raw)
            .map(|(&group, &value)| {
                let key = &mut keys[group];
                key.frame.push_unbounded(value);
                key.non_null += 1;
                read(key.frame.unbounded_sum(), key.non_null)
            })
            .collect()
    }

    /// SUM, AVG and COUNT: each row enters its key's frame (a null as the default value,
    /// its position listed) and the oldest leaves a full bounded frame; `emit` reads the
    /// key's state after each row.
    fn fold_sums(
        &mut self,
        values: &PrimitiveArray<T::Arrow>,
        groups: &[usize],
        positions: &[u64],
        mut emit: impl FnMut(&KeyFrame<T>),
    ) {
        self.grow_keys_for(groups);
        if self.preceding.is_some() && self.nulls_held == 0 {
            // The dense path leaves the counts of bounded frames to their lengths.
            for key in &mut self.keys {
                key.non_null = key.frame.len() as u64;
            }
        }
        let has_nulls = values.null_count() > 0;
        let raw = values.values();
        for (row, (&group, &position)) in groups.iter().zip(positions).enumerate() {
            let key = &mut self.keys[group];
            let valid = !has_nulls || values.is_valid(row);
            let value = if valid { raw[row] } else { T::default() };
            key.non_null += u64::from(valid);
            match self.preceding {
                None => key.frame.push_unbounded(value),
                Some(preceding) => {
                    if !valid {
                        key.null_positions.push_back(position);
                        self.nulls_held += 1;
                    }
                    if key.frame.push_bounded(value, preceding as usize + 1) {
                        // The value at `position - preceding - 1` left: null ones are listed.
                        let leaving_position = position - preceding - 1;
                        if key.null_positions.front() == Some(&leaving_position) {
                            key.null_positions.pop_front();
                            self.nulls_held -= 1;
                        } else {
                            key.non_null -= 1;
                        }
                    }
                }
            }
            emit(key);
        }
    }

    /// MIN and MAX: a monotonic deque per key whose front is the frame's extreme.
    fn fold_extremes(
        &mut self,
        values: &PrimitiveArray<T::Arrow>,
        groups: &[usize],
        positions: &[u64],
        better: Ordering,
        validity: &mut Validity,
    ) -> Vec<T> {
        self.grow_keys_for(groups);
        let has_nulls = values.null_count() > 0;
        let raw = values.values();
        let mut out = Vec::with_capacity(groups.len());
        for (row, (&group, &position)) in groups.iter().zip(positions).enumerate() {
            let key = &mut self.keys[group];
            if !has_nulls || values.is_valid(row) {
                let v = raw[row];
                // Drop the values the new one beats: they can never be the extreme again.
                while key
                    .extremes
                    .back()
                    .is_some_and(|(_, last)| v.total_cmp(last) != better.reverse())
                {
                    key.extremes.pop_back();
                }
                key.extremes.push_back((position, v));
            }
            if let Some(preceding) = self.preceding {
                let oldest = position.saturating_sub(preceding);
                while key.extremes.front().is_some_and(|(p, _)| *p < oldest) {
                    key.extremes.pop_front();
                }
            }
            match key.extremes.front() {
                Some((_, extreme)) => {
                    validity.push(true);
                    out.push(*extreme);
                }
                None => {
                    validity.push(false);
                    out.push(T::default());
                }
            }
        }
        out
    }

    /// Forgets the keys `expired` marks, renumbering the others in order.
    pub fn retain_keys(&mut self, expired: &[bool]) {
        let mut keep = expired.iter().map(|e| !e);
        self.keys.retain(|_| keep.next().unwrap_or(true));
        self.nulls_held = self.keys.iter().map(|k| k.null_positions.len()).sum();
    }

    /// Writes every key's frame, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        out.put(&self.keys);
    }

    /// Takes back the frames [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        self.keys = input.get()?;
        self.nulls_held = self.keys.iter().map(|k| k.null_positions.len()).sum();
        Ok(())
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<KeyFrame<T>>()
            + self
                .keys
                .iter()
                .map(|k| {
                    k.frame.size()
                        + k.null_positions.capacity() * std::mem::size_of::<u64>()
                        + k.extremes.capacity() * std::mem::size_of::<(u64, T)>()
                })
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The aggregate of each row's frame computed afresh, for one key.
    fn fresh(
        kind: FrameAggregateKind,
        values: &[Option<f64>],
        preceding: usize,
    ) -> Vec<Option<f64>> {
        (0..values.len())
            .map(|i| {
                let frame: Vec<f64> = values[i.saturating_sub(preceding)..=i]
                    .iter()
                    .flatten()
                    .copied()
                    .collect();
                if frame.is_empty() {
                    return (kind == FrameAggregateKind::Count).then_some(0.0);
                }
                Some(match kind {
                    FrameAggregateKind::Sum => frame.iter().sum(),
                    FrameAggregateKind::Avg => frame.iter().sum::<f64>() / frame.len() as f64,
                    FrameAggregateKind::Count => frame.len() as f64,
                    FrameAggregateKind::Min => frame
                        .iter()
                        .copied()
                        .min_by(FrameNumber::total_cmp)
                        .unwrap_or_default(),
                    FrameAggregateKind::Max => frame
                        .iter()
                        .copied()
                        .max_by(FrameNumber::total_cmp)
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    fn same(a: Option<f64>, b: Option<f64>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => {
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(1.0)
            }
            (None, None) => true,
            _ => false,
        }
    }

    #[test]
    fn sliding_float_aggregates_equal_a_fresh_computation() {
        // NaN and infinities enter and leave the frame; a huge value leaves without a trace.
        let mut values: Vec<Option<f64>> = (0..2_000)
            .map(|i| match i % 97 {
                0 => None,
                13 => Some(f64::NAN),
                29 => Some(f64::INFINITY),
                31 => Some(f64::NEG_INFINITY),
                _ => Some(((i * 7919) % 1000) as f64 / 7.0 - 50.0),
            })
            .collect();
        values[500] = Some(1e300);
        for preceding in [0usize, 1, 9, 99] {
            for kind in [
                FrameAggregateKind::Sum,
                FrameAggregateKind::Avg,
                FrameAggregateKind::Count,
                FrameAggregateKind::Min,
                FrameAggregateKind::Max,
            ] {
                let mut aggregate = FloatFrameAggregate::new(kind, Some(preceding as u64));
                let expected = fresh(kind, &values, preceding);
                // Two batches, to cross a batch boundary.
                let mut got = Vec::new();
                for range in [0..700, 700..values.len()] {
                    let batch: ArrayRef =
                        Arc::new(Float64Array::from(values[range.clone()].to_vec()));
                    let positions: Vec<u64> = range.clone().map(|p| p as u64).collect();
                    let out = aggregate
                        .evaluate(&batch, &vec![0; positions.len()], &positions)
                        .unwrap();
                    for i in 0..out.len() {
                        got.push(out.is_valid(i).then(|| match kind {
                            FrameAggregateKind::Count => {
                                out.as_primitive::<Int64Type>().value(i) as f64
                            }
                            _ => out.as_primitive::<Float64Type>().value(i),
                        }));
                    }
                }
                for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                    assert!(
                        same(*g, *e),
                        "{kind:?} preceding {preceding} row {i}: {g:?} vs {e:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn integer_running_sum_and_min_per_key() {
        let values: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(5),
            Some(3),
            None,
            Some(4),
            Some(1),
        ]));
        let groups = [0, 1, 0, 0, 1];
        let positions = [0, 0, 1, 2, 1];
        let mut sum = IntegerFrameAggregate::new(FrameAggregateKind::Sum, None);
        let out = sum.evaluate(&values, &groups, &positions).unwrap();
        assert_eq!(
            out.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            vec![Some(5), Some(3), Some(5), Some(9), Some(4)]
        );
        let mut min = IntegerFrameAggregate::new(FrameAggregateKind::Min, Some(1));
        let out = min.evaluate(&values, &groups, &positions).unwrap();
        assert_eq!(
            out.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            vec![Some(5), Some(3), Some(5), Some(4), Some(1)]
        );
    }

    #[test]
    fn dense_frames_of_several_keys_equal_a_fresh_computation() {
        // No nulls: the dense path, whose steady rows skip the full push. Three keys in an
        // irregular order cross batch boundaries, first blocks, and block ends.
        let rows = 1_000;
        let groups: Vec<usize> = (0..rows).map(|i| (i * 7 + i / 5) % 3).collect();
        let values: Vec<i64> = (0..rows as i64).map(|i| (i * 7919) % 1000 - 500).collect();
        for preceding in [0usize, 1, 9, 99] {
            for kind in [
                FrameAggregateKind::Sum,
                FrameAggregateKind::Avg,
                FrameAggregateKind::Count,
            ] {
                let mut floats = FloatFrameAggregate::new(kind, Some(preceding as u64));
                let mut integers = IntegerFrameAggregate::new(kind, Some(preceding as u64));
                let mut expected = Vec::new();
                let mut seen: Vec<Vec<f64>> = vec![Vec::new(); 3];
                for (&group, &value) in groups.iter().zip(&values) {
                    seen[group].push(value as f64);
                    let key = &seen[group];
                    let frame: Vec<Option<f64>> = key.iter().map(|v| Some(*v)).collect();
                    expected.push(*fresh(kind, &frame, preceding).last().unwrap());
                }
                let mut positions = [0u64; 3];
                let mut got_floats = Vec::new();
                let mut got_integers = Vec::new();
                for range in [0..5, 5..300, 300..rows] {
                    let batch_groups = &groups[range.clone()];
                    let batch_positions: Vec<u64> = batch_groups
                        .iter()
                        .map(|&g| {
                            positions[g] += 1;
                            positions[g] - 1
                        })
                        .collect();
                    let as_floats: ArrayRef = Arc::new(Float64Array::from_iter_values(
                        values[range.clone()].iter().map(|v| *v as f64),
                    ));
                    let as_integers: ArrayRef =
                        Arc::new(Int64Array::from(values[range.clone()].to_vec()));
                    for (aggregate_out, got) in [
                        (
                            floats.evaluate(&as_floats, batch_groups, &batch_positions),
                            &mut got_floats,
                        ),
                        (
                            integers.evaluate(&as_integers, batch_groups, &batch_positions),
                            &mut got_integers,
                        ),
                    ] {
                        let out = aggregate_out.unwrap();
                        let out = datafusion::arrow::compute::cast(
                            &out,
                            &datafusion::arrow::datatypes::DataType::Float64,
                        )
                        .unwrap();
                        got.extend(out.as_primitive::<Float64Type>().iter());
                    }
                }
                assert_eq!(
                    got_floats, expected,
                    "floats {kind:?} preceding {preceding}"
                );
                assert_eq!(
                    got_integers, expected,
                    "integers {kind:?} preceding {preceding}"
                );
            }
        }
    }
}
