//! [`DenseInt64GroupValues`]: a [`GroupValues`] for one Int64 key whose values lie in a
//! dense range (ids: a person, an auction), interned by an array over the range.
//!
//! Streams key their state by ids handed out in sequence, and the ids a stretch of the stream
//! names lie close together: Nexmark's bidders and auctions are drawn from the recent ones.
//! A hash table pays a hash, a probe and a comparison per row, and grows by rehashing; an
//! array over the range of values seen, `slots[value - base]` holding the value's group id,
//! pays one load. The range widens to take a batch's values (with room to spare in the
//! direction it grew, so that ids growing a batch at a time do not copy the array every
//! batch) while it stays dense: at most [`SLOTS_PER_KEY`] slots per key it may hold, or
//! [`MIN_SLOTS`]. A batch whose values would make it sparser moves every key, in id order, to
//! DataFusion's own interner for one primitive key, which interns from then on: the ids do
//! not change.
//!
//! Group ids are handed out in order of first appearance, and emitting the first `n` groups
//! shifts the others' ids down by `n`, as DataFusion's interners do. A null key has a group
//! of its own.
//!
//! `bench/benches/kernels.rs` (`intern_one_int64_key_*`, `intern_recent_int64_ids_*`)
//! measures this against DataFusion's `GroupValuesPrimitive`.

use std::mem::size_of;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, NullBufferBuilder};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::{self, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

use crate::watermark::time_range;

/// No group yet for this value.
pub(super) const EMPTY: u32 = u32::MAX;

/// Slots the range may span whatever the number of keys.
const MIN_SLOTS: usize = 1 << 16;

/// Slots the range may span per key it may hold, beyond [`MIN_SLOTS`]: one value in eight
/// (DataFusion's perfect hash join asks for 15 %).
const SLOTS_PER_KEY: usize = 8;

/// The interner's state: dense while its values are, else DataFusion's.
enum Interner {
    Dense(DenseSlots),
    Hashed(Box<dyn GroupValues>),
}

/// An array of `u32` slots over the values from `base` on, kept dense: the one place where
/// the range grows and is bounded, shared with [`super::dense_leading_keys`].
#[derive(Default)]
pub(super) struct DenseRange {
    pub(super) base: i64,
    /// `slots[value - base]`: what the value holds, or [`EMPTY`].
    pub(super) slots: Vec<u32>,
}

impl DenseRange {
    /// Widens the range to `lowest..=highest` if it stays dense for `keys` keys at most;
    /// `false` if it would not.
    pub(super) fn cover(&mut self, lowest: i64, highest: i64, keys: usize) -> bool {
        let end = self.base as i128 + self.slots.len() as i128;
        if !self.slots.is_empty() && self.base <= lowest && (highest as i128) < end {
            return true;
        }
        let limit = MIN_SLOTS.max(keys.saturating_mul(SLOTS_PER_KEY));
        let (low, high) = match self.slots.is_empty() {
            true => (lowest as i128, highest as i128 + 1),
            false => (
                (lowest as i128).min(self.base as i128),
                (highest as i128 + 1).max(end),
            ),
        };
        let needed = high - low;
        if needed > limit as i128 {
            return false;
        }
        // Room to spare on the side that grew, as much again as the range needs, within
        // the limit and the values an i64 holds.
        let spare = needed.min(limit as i128 - needed);
        let grew_down = !self.slots.is_empty() && low < self.base as i128;
        let (low, high) = match grew_down {
            true => ((low - spare).max(i64::MIN as i128), high),
            false => (low, (high + spare).min(i64::MAX as i128)),
        };
        let mut slots = vec![EMPTY; (high - low) as usize];
        if !self.slots.is_empty() {
            let offset = (self.base as i128 - low) as usize;
            slots[offset..offset + self.slots.len()].copy_from_slice(&self.slots);
        }
        self.slots = slots;
        self.base = low as i64;
        true
    }

    /// The slot of `value`, which the range covers.
    #[inline(always)]
    pub(super) fn slot(&self, value: i64) -> usize {
        value.wrapping_sub(self.base) as u64 as usize
    }
}

/// Group ids of the values in a dense range, and each group's value.
#[derive(Default)]
struct DenseSlots {
    range: DenseRange,
    /// Each group's value, by id (the null group's is 0).
    values: Vec<i64>,
    null_group: Option<usize>,
}

/// Groups of one Int64 key; see the module documentation.
pub struct DenseInt64GroupValues {
    schema: SchemaRef,
    interner: Interner,
}

impl DenseInt64GroupValues {
    /// `None` unless `schema` is one Int64 column.
    pub fn try_new(schema: &SchemaRef) -> Option<Self> {
        match schema.fields().as_ref() {
            [field] if field.data_type() == &DataType::Int64 => Some(Self {
                schema: Arc::clone(schema),
                interner: Interner::Dense(DenseSlots::default()),
            }),
            _ => None,
        }
    }

    /// Whether the keys are still interned by the array (for tests).
    #[cfg(test)]
    fn is_dense(&self) -> bool {
        matches!(self.interner, Interner::Dense(_))
    }

    /// Hands every key, in id order, to DataFusion's interner, which interns from now on
    /// (until `clear_shrink`, which starts a dense one: DataFusion 55's
    /// `GroupValuesPrimitive::clear_shrink` keeps the id it gave the null key, which it
    /// would then hand out again).
    fn hashed_interner(&mut self) -> Result<&mut Box<dyn GroupValues>> {
        if let Interner::Dense(dense) = &mut self.interner {
            let mut hashed =
                group_values::new_group_values(Arc::clone(&self.schema), &GroupOrdering::None)?;
            let values = dense.take(EmitTo::All);
            let mut ids = Vec::with_capacity(values.len());
            hashed.intern(&[Arc::new(values)], &mut ids)?;
            if ids.iter().enumerate().any(|(position, id)| position != *id) {
                return internal_err!("dense keys: the hashed interner renumbered the groups");
            }
            self.interner = Interner::Hashed(hashed);
        }
        match &mut self.interner {
            Interner::Hashed(hashed) => Ok(hashed),
            Interner::Dense(_) => internal_err!("dense keys: still dense"),
        }
    }
}

impl DenseSlots {
    /// The group id of each value, all within the range.
    fn intern_in_range(&mut self, keys: &Int64Array, groups: &mut Vec<usize>) {
        match keys.nulls().filter(|nulls| nulls.null_count() > 0) {
            None => groups.extend(keys.values().iter().map(|&value| self.id_of(value))),
            Some(nulls) => {
                for (row, &value) in keys.values().iter().enumerate() {
                    let id = match nulls.is_valid(row) {
                        true => self.id_of(value),
                        false => match self.null_group {
                            Some(group) => group,
                            None => {
                                self.values.push(0);
                                *self.null_group.insert(self.values.len() - 1)
                            }
                        },
                    };
                    groups.push(id);
                }
            }
        }
    }

    /// The group id of `value`, within the range, given one if new.
    #[inline(always)]
    fn id_of(&mut self, value: i64) -> usize {
        let at = self.range.slot(value);
        let slot = &mut self.range.slots[at];
        if *slot == EMPTY {
            *slot = self.values.len() as u32;
            self.values.push(value);
        }
        *slot as usize
    }

    /// The values of the groups `emit_to` names, which leave; the others' ids shift down.
    fn take(&mut self, emit_to: EmitTo) -> Int64Array {
        let n = match emit_to {
            EmitTo::All => self.values.len(),
            EmitTo::First(n) => n.min(self.values.len()),
        };
        let values: Vec<i64> = match n == self.values.len() {
            true => std::mem::take(&mut self.values),
            false => self.values.drain(..n).collect(),
        };
        let null_group = match self.null_group {
            Some(group) if group < n => self.null_group.take(),
            Some(group) => {
                self.null_group = Some(group - n);
                None
            }
            None => None,
        };
        let shift = n as u32;
        for slot in self.range.slots.iter_mut().filter(|slot| **slot != EMPTY) {
            *slot = match *slot < shift {
                true => EMPTY,
                false => *slot - shift,
            };
        }
        let nulls = null_group.map(|group| {
            let mut nulls = NullBufferBuilder::new(values.len());
            nulls.append_n_non_nulls(group);
            nulls.append_null();
            nulls.append_n_non_nulls(values.len() - group - 1);
            nulls.finish()
        });
        Int64Array::new(values.into(), nulls.flatten())
    }
}

impl GroupValues for DenseInt64GroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        let [column] = cols else {
            return internal_err!("dense keys: one key column expected, {} given", cols.len());
        };
        let Some(keys) = column.as_primitive_opt::<Int64Type>() else {
            return internal_err!("dense keys: an Int64 key expected, {}", column.data_type());
        };
        groups.clear();
        if let Interner::Dense(dense) = &mut self.interner {
            // The lowest and highest value, in the pass the event times' range takes.
            let range = time_range(keys);
            let fits = dense.values.len() + keys.len() < EMPTY as usize
                && range.is_none_or(|(low, high)| {
                    dense
                        .range
                        .cover(low, high, dense.values.len() + keys.len())
                });
            if fits {
                dense.intern_in_range(keys, groups);
                return Ok(());
            }
        }
        self.hashed_interner()?.intern(cols, groups)
    }

    fn size(&self) -> usize {
        match &self.interner {
            Interner::Dense(dense) => {
                dense.range.slots.capacity() * size_of::<u32>()
                    + dense.values.capacity() * size_of::<i64>()
            }
            Interner::Hashed(hashed) => hashed.size(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match &self.interner {
            Interner::Dense(dense) => dense.values.len(),
            Interner::Hashed(hashed) => hashed.len(),
        }
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        match &mut self.interner {
            Interner::Dense(dense) => Ok(vec![Arc::new(dense.take(emit_to))]),
            Interner::Hashed(hashed) => hashed.emit(emit_to),
        }
    }

    fn clear_shrink(&mut self, _num_rows: usize) {
        self.interner = Interner::Dense(DenseSlots::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]))
    }

    fn datafusion(schema: SchemaRef) -> Result<Box<dyn GroupValues>> {
        group_values::new_group_values(schema, &GroupOrdering::None)
    }

    fn dense() -> DenseInt64GroupValues {
        DenseInt64GroupValues::try_new(&schema()).unwrap()
    }

    fn column(values: &[Option<i64>]) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(values.to_vec()))]
    }

    /// Interns `batches` into the dense interner and DataFusion's, emitting the first `emit`
    /// groups of both after each batch, and checks they agree on every id and value.
    fn agrees_with_datafusion(batches: &[Vec<Option<i64>>], emit: usize) -> DenseInt64GroupValues {
        let mut ours = dense();
        let mut theirs = datafusion(schema()).unwrap();
        let (mut our_ids, mut their_ids) = (Vec::new(), Vec::new());
        for batch in batches {
            ours.intern(&column(batch), &mut our_ids).unwrap();
            theirs.intern(&column(batch), &mut their_ids).unwrap();
            assert_eq!(our_ids, their_ids, "ids of {batch:?}");
            assert_eq!(ours.len(), theirs.len());
            let (our_values, their_values) = (
                ours.emit(EmitTo::First(emit)).unwrap(),
                theirs.emit(EmitTo::First(emit)).unwrap(),
            );
            assert_eq!(our_values[0].as_ref(), their_values[0].as_ref());
        }
        let (our_values, their_values) = (
            ours.emit(EmitTo::All).unwrap(),
            theirs.emit(EmitTo::All).unwrap(),
        );
        assert_eq!(our_values[0].as_ref(), their_values[0].as_ref());
        ours
    }

    #[test]
    fn ids_growing_a_batch_at_a_time_stay_dense_and_agree_with_datafusion() {
        let batches: Vec<Vec<Option<i64>>> = (0..200i64)
            .map(|batch| {
                (0..500)
                    .map(|row| Some(1000 + batch * 300 + (row * 7919) % 700))
                    .collect()
            })
            .collect();
        let ours = agrees_with_datafusion(&batches, 0);
        assert!(ours.is_dense());
    }

    #[test]
    fn nulls_have_a_group_of_their_own_that_shifts_on_emit() {
        let batches = vec![
            vec![Some(5), None, Some(7), Some(5), None],
            vec![Some(3), None, Some(9)],
            vec![None, Some(4), Some(9)],
        ];
        agrees_with_datafusion(&batches, 2);
        agrees_with_datafusion(&batches, 0);
    }

    #[test]
    fn values_that_grow_down_and_emits_of_the_first_groups_agree_with_datafusion() {
        let batches: Vec<Vec<Option<i64>>> = (0..50i64)
            .map(|batch| (0..40).map(|row| Some(-batch * 30 - row % 45)).collect())
            .collect();
        let ours = agrees_with_datafusion(&batches, 7);
        assert!(ours.is_dense());
    }

    #[test]
    fn sparse_values_move_to_the_hashed_interner_keeping_their_ids() {
        let batches = vec![
            vec![Some(10), Some(11), Some(10)],
            vec![Some(i64::MAX), Some(12), Some(i64::MIN), None],
            vec![Some(11), Some(i64::MIN), Some(1 << 40)],
        ];
        let ours = agrees_with_datafusion(&batches, 0);
        assert!(!ours.is_dense());
        // The extremes of i64 alone are one batch: no range holds them.
        let mut extremes = dense();
        let mut ids = Vec::new();
        extremes
            .intern(&column(&[Some(i64::MIN), Some(i64::MAX)]), &mut ids)
            .unwrap();
        assert_eq!(ids, vec![0, 1]);
        assert!(!extremes.is_dense());
    }

    #[test]
    fn a_cleared_table_is_dense_and_empty_again() {
        let mut ours = dense();
        let mut ids = Vec::new();
        ours.intern(&column(&[Some(1), Some(1 << 50)]), &mut ids)
            .unwrap();
        assert!(!ours.is_dense());
        ours.clear_shrink(0);
        assert!(ours.is_dense() && ours.is_empty());
        ours.intern(&column(&[Some(8), Some(9), Some(8)]), &mut ids)
            .unwrap();
        assert_eq!(ids, vec![0, 1, 0]);
    }

    #[test]
    fn the_range_stays_within_its_bound_of_slots_per_key() {
        let mut ours = dense();
        let mut ids = Vec::new();
        // One key every 100 values: sparser than the bound once past the minimum span.
        for batch in 0..100i64 {
            let values: Vec<Option<i64>> = (0..100)
                .map(|row| Some((batch * 100 + row) * 100))
                .collect();
            ours.intern(&column(&values), &mut ids).unwrap();
            if let Interner::Dense(dense) = &ours.interner {
                assert!(
                    dense.range.slots.len()
                        <= MIN_SLOTS.max(dense.values.len() * 2 * SLOTS_PER_KEY)
                );
            }
        }
        assert!(!ours.is_dense());
    }
}
