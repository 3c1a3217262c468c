//! [`ValueHistory`]: the values of each key's latest rows, of any Arrow type, for the window
//! functions that return an earlier row's value (LAG, FIRST_VALUE, NTH_VALUE);
//! [`PrimitiveHistory`] does the same for one primitive type with the values themselves in a
//! [`Ring`] per key, which is several times cheaper than gathering by ids.
//!
//! Values stay in the arrays they arrived in (segments); each key keeps the ids
//! (segment, row) of its last `depth + 1` rows, and of the row at one fixed position (the
//! first row for FIRST_VALUE, the n-th for NTH_VALUE) when asked to. A batch's
//! results are gathered in one `interleave` over the segments, the batch itself and a default
//! value. Segments are never copied row by row: when they hold more than twice the rows still
//! referenced, the referenced rows are compacted into one new segment, so memory follows the
//! live rows (keys × depth), not the input.

use std::collections::VecDeque;

use datafusion::arrow::array::{Array, ArrayRef, PrimitiveArray};
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::ArrowPrimitiveType;
use datafusion::common::Result;

use super::ring::Ring;
use super::sparse_nulls::SparseNulls;
use crate::checkpoint::{Persist, StateReader, StateWriter};

/// A row's value: `(segment, row)`; segment `segments.len()` is the batch being processed.
type RowId = (u32, u32);

/// Rows below which compaction is not worth its cost.
const COMPACT_MIN_ROWS: usize = 16 * 1024;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ValueHistory {
    /// Rows kept per key before the current one.
    depth: usize,
    /// The position whose row each key keeps for good.
    fixed: Option<u64>,
    segments: Vec<ArrayRef>,
    segment_rows: usize,
    recent: Vec<VecDeque<RowId>>,
    fixed_rows: Vec<Option<RowId>>,
    /// Ids held in `recent` and `fixed_rows`.
    live: usize,
}

impl ValueHistory {
    /// Keeps each key's last `depth` rows before the current one, and its row at position
    /// `fixed`.
    pub fn new(depth: usize, fixed: Option<u64>) -> Self {
        Self {
            depth,
            fixed,
            ..Default::default()
        }
    }

    /// Rows kept per key before the current one.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// For each row of `values` (row `r` is position `positions[r]` of key `groups[r]`), the
    /// value at the position `target(position)` of the same key, or `default` (a one-row
    /// array) when there is none. `target` never looks further back than `depth` rows, or it
    /// names the `fixed` position.
    pub fn gather(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        positions: &[u64],
        default: &ArrayRef,
        target: impl Fn(u64) -> Option<u64>,
    ) -> Result<ArrayRef> {
        let current = self.segments.len() as u32;
        let default_source = (current + 1) as usize;
        let mut indices = Vec::with_capacity(groups.len());
        for (row, (&group, &position)) in groups.iter().zip(positions).enumerate() {
            if group >= self.recent.len() {
                self.recent.resize_with(group + 1, VecDeque::new);
                self.fixed_rows.resize(group + 1, None);
            }
            let id = (current, row as u32);
            let recent = &mut self.recent[group];
            recent.push_back(id);
            self.live += 1;
            if recent.len() > self.depth + 1 {
                recent.pop_front();
                self.live -= 1;
            }
            if self.fixed == Some(position) {
                self.fixed_rows[group] = Some(id);
                self.live += 1;
            }
            let source = target(position).and_then(|wanted| {
                let back = (position - wanted) as usize;
                if back < recent.len() {
                    Some(recent[recent.len() - 1 - back])
                } else if self.fixed == Some(wanted) {
                    self.fixed_rows[group]
                } else {
                    None
                }
            });
            indices.push(match source {
                Some((segment, row)) => (segment as usize, row as usize),
                None => (default_source, 0),
            });
        }
        let mut sources: Vec<&dyn Array> = self.segments.iter().map(|s| s.as_ref()).collect();
        sources.push(values.as_ref());
        sources.push(default.as_ref());
        let gathered = interleave(&sources, &indices)?;
        self.segments.push(values.clone());
        self.segment_rows += values.len();
        if self.segment_rows > COMPACT_MIN_ROWS.max(2 * self.live) {
            self.compact()?;
        }
        Ok(gathered)
    }

    /// Copies the referenced rows into one segment and renumbers the ids.
    fn compact(&mut self) -> Result<()> {
        let referenced: Vec<(usize, usize)> = self
            .recent
            .iter()
            .flatten()
            .chain(self.fixed_rows.iter().flatten())
            .map(|&(segment, row)| (segment as usize, row as usize))
            .collect();
        let sources: Vec<&dyn Array> = self.segments.iter().map(|s| s.as_ref()).collect();
        let compacted = interleave(&sources, &referenced)?;
        for (next, id) in self
            .recent
            .iter_mut()
            .flatten()
            .chain(self.fixed_rows.iter_mut().flatten())
            .enumerate()
        {
            *id = (0, next as u32);
        }
        self.segment_rows = compacted.len();
        self.segments = vec![compacted];
        Ok(())
    }

    /// Writes the kept rows and every key's ids, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        out.put(&self.segments);
        out.put(&self.segment_rows);
        out.put(&self.recent);
        out.put(&self.fixed_rows);
        out.put(&self.live);
    }

    /// Takes back what [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        self.segments = input.get()?;
        self.segment_rows = input.get()?;
        self.recent = input.get()?;
        self.fixed_rows = input.get()?;
        self.live = input.get()?;
        Ok(())
    }

    /// Forgets the keys `expired` marks, renumbering the others in order (`expired.len()` is
    /// the number of keys before).
    pub fn retain_keys(&mut self, expired: &[bool]) {
        let mut keep = expired.iter().map(|e| !e);
        self.recent.retain(|_| keep.next().unwrap_or(true));
        let mut keep = expired.iter().map(|e| !e);
        self.fixed_rows.retain(|_| keep.next().unwrap_or(true));
        self.live = self.recent.iter().map(VecDeque::len).sum::<usize>()
            + self.fixed_rows.iter().flatten().count();
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.segments
            .iter()
            .map(|s| s.get_array_memory_size())
            .sum::<usize>()
            + self.live * std::mem::size_of::<RowId>()
            + self.recent.capacity() * std::mem::size_of::<VecDeque<RowId>>()
    }
}

/// [`ValueHistory`] for one primitive type: see the module documentation.
#[derive(Debug)]
pub struct PrimitiveHistory<T: ArrowPrimitiveType> {
    depth: usize,
    fixed: Option<u64>,
    recent: Vec<Ring<Option<T::Native>>>,
    /// Per key, its value at the `fixed` position once seen.
    fixed_values: Vec<Option<Option<T::Native>>>,
    /// [`Self::gather_back`] with a depth of 1 (`LAG(x)`): per key, its latest value once
    /// seen, in place of a one-value ring.
    latest: Vec<Option<Option<T::Native>>>,
}

impl<T: ArrowPrimitiveType> PrimitiveHistory<T> {
    /// As [`ValueHistory::new`].
    pub fn new(depth: usize, fixed: Option<u64>) -> Self {
        Self {
            depth,
            fixed,
            recent: Vec::new(),
            fixed_values: Vec::new(),
            latest: Vec::new(),
        }
    }

    /// As [`ValueHistory::gather`], with the default as a value (`None`: null).
    pub fn gather(
        &mut self,
        values: &PrimitiveArray<T>,
        groups: &[usize],
        positions: &[u64],
        default: Option<T::Native>,
        target: impl Fn(u64) -> Option<u64>,
    ) -> PrimitiveArray<T> {
        if let Some(largest) = groups.iter().max()
            && *largest >= self.recent.len()
        {
            self.recent.resize_with(largest + 1, Ring::default);
            self.fixed_values.resize(largest + 1, None);
        }
        let has_nulls = values.null_count() > 0;
        let raw = values.values();
        let capacity = self.depth + 1;
        let mut out = Vec::with_capacity(groups.len());
        let mut nulls = SparseNulls::default();
        for (row, (&group, &position)) in groups.iter().zip(positions).enumerate() {
            let value = (!has_nulls || values.is_valid(row)).then(|| raw[row]);
            let recent = &mut self.recent[group];
            recent.push(value, capacity);
            if self.fixed == Some(position) {
                self.fixed_values[group] = Some(value);
            }
            let source = match target(position) {
                Some(wanted) if self.fixed == Some(wanted) => self.fixed_values[group],
                Some(wanted) => recent.back((position - wanted) as usize),
                None => None,
            };
            match source.unwrap_or(default) {
                Some(result) => out.push(result),
                None => {
                    nulls.push(row);
                    out.push(T::Native::default());
                }
            }
        }
        let len = out.len();
        PrimitiveArray::new(out.into(), nulls.finish(len))
    }

    /// Each row's value `depth` rows back in its key, or `default`: LAG, and the shifts a
    /// lookahead makes. Each key's ring then holds just the `depth` latest values, so the
    /// value a row pushes out is its result, with no position arithmetic. A history is read
    /// through this method only or through [`Self::gather`] only.
    pub fn gather_back(
        &mut self,
        values: &PrimitiveArray<T>,
        groups: &[usize],
        default: Option<T::Native>,
    ) -> PrimitiveArray<T> {
        if self.depth == 0 {
            return values.clone();
        }
        if self.depth == 1 {
            // LAG(x): each row swaps its value for its key's latest, an array access
            // instead of a ring's.
            return gather_keyed(
                &mut self.latest,
                values,
                groups,
                default,
                |latest, value| latest.replace(value),
                |latest, value| match latest {
                    Some(Some(previous)) => Some(std::mem::replace(previous, value)),
                    _ => None,
                },
            );
        }
        let depth = self.depth;
        gather_keyed(
            &mut self.recent,
            values,
            groups,
            default,
            |ring, value| ring.push(value, depth),
            |ring, value| match ring.oldest_when_full(depth) {
                Some(Some(_)) => ring.push_full(Some(value), depth).flatten(),
                _ => None,
            },
        )
    }

    /// Forgets the keys `expired` marks, renumbering the others in order.
    pub fn retain_keys(&mut self, expired: &[bool]) {
        for per_key in [&mut self.fixed_values, &mut self.latest] {
            let mut keep = expired.iter().map(|e| !e);
            per_key.retain(|_| keep.next().unwrap_or(true));
        }
        let mut keep = expired.iter().map(|e| !e);
        self.recent.retain(|_| keep.next().unwrap_or(true));
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.recent.iter().map(Ring::size).sum::<usize>()
            + self.recent.capacity() * std::mem::size_of::<Ring<Option<T::Native>>>()
            + (self.fixed_values.capacity() + self.latest.capacity())
                * std::mem::size_of::<Option<Option<T::Native>>>()
    }
}

impl<T: ArrowPrimitiveType> PrimitiveHistory<T>
where
    T::Native: Persist,
{
    /// Writes every key's values, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        out.put(&self.recent);
        out.put(&self.fixed_values);
        out.put(&self.latest);
    }

    /// Takes back what [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        self.recent = input.get()?;
        self.fixed_values = input.get()?;
        self.latest = input.get()?;
        Ok(())
    }
}

/// Each row's result from its key's state in `states` (grown as keys are met): `step`
/// takes the state and the row's value (`None`: null) and gives the result, `None` while the
/// key has none yet (then `default`, and null without one). `steady` is `step` for the
/// common case of a non-null value with a non-null result, or `None` with nothing done: it
/// calls nothing, so the loop of such rows keeps its state in registers.
fn gather_keyed<T: ArrowPrimitiveType, S: Default>(
    states: &mut Vec<S>,
    values: &PrimitiveArray<T>,
    groups: &[usize],
    default: Option<T::Native>,
    mut step: impl FnMut(&mut S, Option<T::Native>) -> Option<Option<T::Native>>,
    steady: impl Fn(&mut S, T::Native) -> Option<T::Native>,
) -> PrimitiveArray<T> {
    let has_nulls = values.null_count() > 0;
    let raw = values.values();
    let rows = raw.len().min(groups.len());
    let mut out = vec![T::Native::default(); rows];
    let mut nulls = SparseNulls::default();
    let mut row = 0;
    while row < rows {
        // Keys grow as they are met, here out of the steady loop.
        let group = groups[row];
        if group >= states.len() {
            states.resize_with(group + 1, S::default);
        }
        // A slice, not a `&mut Vec`: its pointer stays in a register across the stores.
        let states = states.as_mut_slice();
        let value = (!has_nulls || values.is_valid(row)).then_some(raw[row]);
        match step(&mut states[group], value).unwrap_or(default) {
            Some(result) => out[row] = result,
            None => nulls.push(row),
        }
        row += 1;
        if has_nulls {
            continue;
        }
        let rest = out[row..].iter_mut().zip(&groups[row..]).zip(&raw[row..]);
        for ((result, &group), &value) in rest {
            // A key not seen yet is not steady either.
            match states.get_mut(group).and_then(|state| steady(state, value)) {
                Some(steady_result) => *result = steady_result,
                None => break,
            }
            row += 1;
        }
    }
    PrimitiveArray::new(out.into(), nulls.finish(rows))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, Int64Array, StringArray};
    use datafusion::arrow::datatypes::Int64Type;

    use super::*;

    fn strings(values: &ArrayRef) -> Vec<Option<String>> {
        values
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    #[test]
    fn lag_reaches_into_earlier_batches_per_key() {
        let mut history = ValueHistory::new(2, None);
        let default: ArrayRef = Arc::new(StringArray::from(vec![Some("-")]));
        let lag2 = |p: u64| p.checked_sub(2);
        let first: ArrayRef = Arc::new(StringArray::from(vec!["a0", "b0", "a1"]));
        let out = history
            .gather(&first, &[0, 1, 0], &[0, 0, 1], &default, lag2)
            .unwrap();
        assert_eq!(strings(&out), vec![Some("-".into()); 3]);
        let second: ArrayRef = Arc::new(StringArray::from(vec![Some("a2"), None, Some("b1")]));
        let out = history
            .gather(&second, &[0, 0, 1], &[2, 3, 1], &default, lag2)
            .unwrap();
        assert_eq!(
            strings(&out),
            vec![Some("a0".into()), Some("a1".into()), Some("-".into())]
        );
    }

    #[test]
    fn primitive_history_equals_the_generic_one() {
        use datafusion::arrow::array::Float64Array;
        use datafusion::arrow::datatypes::Float64Type;
        let values: Vec<Option<f64>> = (0..500).map(|i| (i % 7 != 0).then_some(i as f64)).collect();
        let groups: Vec<usize> = (0..500).map(|i| (i * 7919) % 3).collect();
        let mut counts = [0u64; 3];
        let positions: Vec<u64> = groups
            .iter()
            .map(|g| {
                counts[*g] += 1;
                counts[*g] - 1
            })
            .collect();
        let array = Float64Array::from(values);
        let any: ArrayRef = Arc::new(array.clone());
        let default: ArrayRef = Arc::new(Float64Array::from(vec![-1.0]));
        for (depth, fixed, target) in [
            (
                2,
                None,
                &(|p: u64| p.checked_sub(2)) as &dyn Fn(u64) -> Option<u64>,
            ),
            (0, Some(3), &(|p: u64| Some(3).filter(|t| *t <= p))),
        ] {
            let mut generic = ValueHistory::new(depth, fixed);
            let mut typed = PrimitiveHistory::<Float64Type>::new(depth, fixed);
            for range in [0..200, 200..500] {
                let slice = any.slice(range.start, range.len());
                let expected = generic
                    .gather(
                        &slice,
                        &groups[range.clone()],
                        &positions[range.clone()],
                        &default,
                        target,
                    )
                    .unwrap();
                let got = typed.gather(
                    slice.as_primitive::<Float64Type>(),
                    &groups[range.clone()],
                    &positions[range.clone()],
                    Some(-1.0),
                    target,
                );
                assert_eq!(expected.as_primitive::<Float64Type>(), &got);
            }
        }
    }

    #[test]
    fn compaction_keeps_values_and_first_rows() {
        let mut history = ValueHistory::new(1, Some(0));
        let default: ArrayRef = Arc::new(Int64Array::from(vec![None::<i64>]));
        let mut position = 0u64;
        // One key, many batches: compaction must run and keep both the previous row and the
        // first one.
        for batch in 0..10i64 {
            let values: ArrayRef = Arc::new(Int64Array::from_iter_values(
                (0..5_000).map(|i| batch * 5_000 + i),
            ));
            let positions: Vec<u64> = (position..position + 5_000).collect();
            position += 5_000;
            let groups = vec![0; 5_000];
            let previous = history
                .gather(&values, &groups, &positions, &default, |p| p.checked_sub(1))
                .unwrap();
            let previous = previous.as_primitive::<Int64Type>();
            assert_eq!(previous.value(1), batch * 5_000);
            if batch > 0 {
                assert_eq!(
                    previous.value(0),
                    -(batch - 1),
                    "the extra row of the last round"
                );
            }
            let first = history
                .gather(
                    &(Arc::new(Int64Array::from(vec![-batch])) as ArrayRef),
                    &[0],
                    &[position],
                    &default,
                    |_| Some(0),
                )
                .unwrap();
            assert_eq!(first.as_primitive::<Int64Type>().value(0), 0);
            position += 1;
        }
        assert!(history.segment_rows < 2 * COMPACT_MIN_ROWS);
    }
}
