//! [`Fold`]: what a fused aggregate folds, and [`Member`]: one fused aggregate's per-group state (counts, sums, minimums or maximums
//! and which groups a value reached), and how it emits, merges and converts its states the
//! way DataFusion's accumulators do.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, Float64Array, Int64Array, PrimitiveArray,
    UInt64Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    ArrowNativeTypeOp, DataType, Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type,
    UInt64Type,
};
use datafusion::common::{Result, internal_err};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;

use super::builtin::BuiltinAggregate;

/// What one fused aggregate folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fold {
    /// `COUNT(*)` (or of a non-null literal): every row.
    Rows,
    /// `COUNT(x)`: the rows where `x` is not null.
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl Fold {
    pub(super) fn of(aggregate: &AggregateFunctionExpr) -> Option<Self> {
        if aggregate.is_distinct() || !aggregate.order_bys().is_empty() {
            return None;
        }
        let arguments = aggregate.expressions();
        let fold = match (BuiltinAggregate::of(aggregate)?, arguments.as_slice()) {
            (BuiltinAggregate::Count, []) => Fold::Rows,
            (BuiltinAggregate::Count, [argument]) => match argument.downcast_ref::<Literal>() {
                Some(literal) if !literal.value().is_null() => Fold::Rows,
                Some(_) => return None,
                None => Fold::Count,
            },
            (BuiltinAggregate::Sum, [_]) => Fold::Sum,
            (BuiltinAggregate::Avg, [_]) => Fold::Avg,
            (BuiltinAggregate::Min, [_]) => Fold::Min,
            (BuiltinAggregate::Max, [_]) => Fold::Max,
            _ => return None,
        };
        Some(fold)
    }

    /// The argument column's type this fold implies (`COUNT` implies none), if supported.
    pub(super) fn column_type(self, output: &DataType) -> Option<Option<DataType>> {
        match self {
            Fold::Rows | Fold::Count => (output == &DataType::Int64).then_some(None),
            // DataFusion coerces SUM's argument to its result type, AVG's to Float64 for a
            // Float64 result, and MIN/MAX return their argument's type.
            Fold::Sum => matches!(
                output,
                DataType::Int64 | DataType::UInt64 | DataType::Float64
            )
            .then(|| Some(output.clone())),
            Fold::Avg => (output == &DataType::Float64).then_some(Some(DataType::Float64)),
            Fold::Min | Fold::Max => is_supported(output).then(|| Some(output.clone())),
        }
    }

    pub(super) fn uses_count(self) -> bool {
        matches!(self, Fold::Rows | Fold::Count | Fold::Avg)
    }

    pub(super) fn uses_sum(self) -> bool {
        matches!(self, Fold::Sum | Fold::Avg)
    }

    /// Whether the result is NULL for a group no value reached (tracked by `seen`).
    pub(super) fn tracks_seen(self) -> bool {
        matches!(self, Fold::Sum | Fold::Min | Fold::Max)
    }
}

pub(super) fn is_supported(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int32
            | DataType::Int64
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
    )
}

/// A value type the fused kernels fold.
pub(crate) trait Numeric:
    ArrowPrimitiveType<Native: ArrowNativeTypeOp + PartialOrd> + Debug
{
    /// MIN's starting value, as DataFusion's.
    const MIN_START: Self::Native;
    /// MAX's starting value, as DataFusion's.
    const MAX_START: Self::Native;
}

macro_rules! numeric {
    ($($arrow:ty => $native:ty),*) => {$(
        impl Numeric for $arrow {
            const MIN_START: $native = <$native>::MAX;
            const MAX_START: $native = <$native>::MIN;
        }
    )*};
}
numeric!(Int32Type => i32, Int64Type => i64, UInt32Type => u32, UInt64Type => u64,
    Float32Type => f32, Float64Type => f64);

/// One fused aggregate's per-group state.
#[derive(Debug)]
pub(super) struct Member<T: Numeric> {
    /// The aggregate's index in the table.
    pub(super) aggregate: usize,
    pub(super) fold: Fold,
    pub(super) output: DataType,
    /// Rows counted per group (`Rows`, `Count`, `Avg`).
    pub(super) counts: Vec<u64>,
    /// Sum, minimum or maximum per group.
    pub(super) values: Vec<T::Native>,
    /// Groups some value reached, once a group may have been reached by none; `None` while
    /// every group has been (the common case, kept free of per-row bookkeeping).
    pub(super) seen: Option<Vec<bool>>,
}

impl<T: Numeric> Member<T> {
    pub(super) fn new(aggregate: usize, fold: Fold, output: DataType) -> Self {
        Self {
            aggregate,
            fold,
            output,
            counts: Vec::new(),
            values: Vec::new(),
            seen: None,
        }
    }

    pub(super) fn start(&self) -> T::Native {
        match self.fold {
            Fold::Min => T::MIN_START,
            Fold::Max => T::MAX_START,
            _ => T::Native::default(),
        }
    }

    /// Grows the state to `groups` groups; `sparse`: some rows of the coming fold have no
    /// value, so groups are no longer all reached.
    pub(super) fn grow(&mut self, groups: usize, sparse: bool) {
        let known = self.groups();
        if self.fold.uses_count() {
            self.counts.resize(groups, 0);
        }
        if !matches!(self.fold, Fold::Rows | Fold::Count) {
            let start = self.start();
            self.values.resize(groups, start);
        }
        if self.fold.tracks_seen() {
            if sparse && self.seen.is_none() {
                self.seen = Some(vec![true; known]);
            }
            if let Some(seen) = &mut self.seen {
                seen.resize(groups, false);
            }
        }
    }

    /// Grows the state to `groups` groups if it has fewer: groups interned but never
    /// folded into have no value.
    pub(super) fn cover(&mut self, groups: usize) {
        if self.groups() < groups {
            self.grow(groups, true);
        }
    }

    pub(super) fn groups(&self) -> usize {
        if matches!(self.fold, Fold::Rows | Fold::Count) {
            self.counts.len()
        } else {
            self.values.len()
        }
    }

    /// Folds the rows `valid` admits (all when `None`), one at a time.
    pub(super) fn fold_sparse(
        &mut self,
        groups: &[usize],
        values: &[T::Native],
        valid: Option<&BooleanBuffer>,
    ) -> Result<()> {
        let admitted = |row: usize| valid.is_none_or(|v| v.value(row));
        for (row, &group) in groups.iter().enumerate() {
            if !admitted(row) {
                continue;
            }
            let Some(value) = values.get(row).copied() else {
                return internal_err!("fused aggregate: fewer values than group ids");
            };
            self.fold_one(group, value)?;
        }
        Ok(())
    }

    pub(super) fn fold_one(&mut self, group: usize, value: T::Native) -> Result<()> {
        if group >= self.groups() {
            return internal_err!("fused aggregate: group {group} beyond the state");
        }
        match self.fold {
            Fold::Rows | Fold::Count => self.counts[group] += 1,
            Fold::Sum => self.values[group] = self.values[group].add_wrapping(value),
            Fold::Avg => {
                self.counts[group] += 1;
                self.values[group] = self.values[group].add_wrapping(value);
            }
            Fold::Min => replace_min(&mut self.values[group], value),
            Fold::Max => replace_max(&mut self.values[group], value),
        }
        if let Some(seen) = &mut self.seen {
            seen[group] = true;
        }
        Ok(())
    }

    /// Moves the state of the first `n` groups out (they leave the table).
    pub(super) fn take(&mut self, n: usize) -> Taken<T> {
        Taken {
            counts: take_first(&mut self.counts, n),
            values: take_first(&mut self.values, n),
            seen: self.seen.as_mut().map(|seen| take_first(seen, n)),
        }
    }

    /// A copy of the state of `groups` (each covered by the state).
    pub(super) fn gather(&self, groups: &[u32]) -> Taken<T> {
        fn pick<V: Copy>(state: &[V], groups: &[u32]) -> Vec<V> {
            match state.is_empty() {
                true => Vec::new(),
                false => groups.iter().map(|&g| state[g as usize]).collect(),
            }
        }
        Taken {
            counts: pick(&self.counts, groups),
            values: pick(&self.values, groups),
            seen: self.seen.as_ref().map(|seen| pick(seen, groups)),
        }
    }

    /// The results of `taken` groups, as DataFusion's accumulator evaluates them.
    pub(super) fn results(&self, taken: Taken<T>) -> Result<ArrayRef> {
        Ok(match self.fold {
            Fold::Rows | Fold::Count => counts_array(taken.counts),
            Fold::Avg => {
                // AVG's column is Float64 (DataFusion coerces its argument), so this is no copy.
                let sums: ArrayRef = Arc::new(PrimitiveArray::<T>::new(taken.values.into(), None));
                let sums = cast(&sums, &DataType::Float64)?;
                let sums = sums.as_primitive::<Float64Type>().values();
                let averages = sums
                    .iter()
                    .zip(&taken.counts)
                    .map(|(sum, count)| sum / *count as f64);
                // NULL where no value came (0 / 0 gave NaN there).
                let nulls = nulls_of_counts(&taken.counts);
                Arc::new(Float64Array::new(averages.collect(), nulls))
            }
            Fold::Sum | Fold::Min | Fold::Max => {
                let nulls = taken.seen.as_deref().and_then(nulls_of);
                self.values_array(taken.values, nulls)
            }
        })
    }

    /// The partial states of `taken` groups, in DataFusion's layout.
    pub(super) fn states(&self, taken: Taken<T>) -> Result<Vec<ArrayRef>> {
        Ok(match self.fold {
            Fold::Avg => {
                let nulls = nulls_of_counts(&taken.counts);
                vec![
                    Arc::new(UInt64Array::new(taken.counts.into(), nulls.clone())),
                    self.values_array(taken.values, nulls),
                ]
            }
            _ => vec![self.results(taken)?],
        })
    }

    pub(super) fn values_array(
        &self,
        values: Vec<T::Native>,
        nulls: Option<NullBuffer>,
    ) -> ArrayRef {
        let data_type = if self.fold == Fold::Avg {
            T::DATA_TYPE
        } else {
            self.output.clone()
        };
        Arc::new(PrimitiveArray::<T>::new(values.into(), nulls).with_data_type(data_type))
    }

    /// Merges partial states (DataFusion's layout) of the rows' groups.
    pub(super) fn merge(
        &mut self,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        self.grow(total, true);
        match (self.fold, states) {
            (Fold::Rows | Fold::Count, [counts]) => {
                let Some(counts) = counts.as_primitive_opt::<Int64Type>() else {
                    return internal_err!("COUNT state is not Int64: {}", counts.data_type());
                };
                for (row, &group) in groups.iter().enumerate() {
                    if counts.is_valid(row) && group < self.counts.len() {
                        self.counts[group] += counts.value(row) as u64;
                    }
                }
            }
            (Fold::Avg, [counts, sums]) => {
                let (Some(counts), Ok(sums)) = (
                    counts.as_primitive_opt::<UInt64Type>(),
                    typed::<T>(sums, "AVG's sum state"),
                ) else {
                    return internal_err!("AVG state is not (UInt64, Float64)");
                };
                for (row, &group) in groups.iter().enumerate() {
                    if counts.is_valid(row) && sums.is_valid(row) && group < self.counts.len() {
                        self.counts[group] += counts.value(row);
                        self.values[group] = self.values[group].add_wrapping(sums.value(row));
                    }
                }
            }
            (Fold::Sum | Fold::Min | Fold::Max, [values]) => {
                let values = typed::<T>(values, "partial state")?;
                let valid = values.nulls().map(|n| n.inner().clone());
                self.fold_sparse(groups, values.values(), valid.as_ref())?;
            }
            (fold, states) => {
                return internal_err!("{fold:?} merges {} state columns", states.len());
            }
        }
        Ok(())
    }

    pub(super) fn size(&self) -> usize {
        self.counts.capacity() * size_of::<u64>()
            + self.values.capacity() * size_of::<T::Native>()
            + self.seen.as_ref().map_or(0, Vec::capacity)
    }
}

/// `array` as a `T` array, or an error naming `what` it is.
pub(super) fn typed<'a, T: Numeric>(
    array: &'a ArrayRef,
    what: &str,
) -> Result<&'a PrimitiveArray<T>> {
    match array.as_primitive_opt::<T>() {
        Some(typed) => Ok(typed),
        None => internal_err!(
            "fused aggregate: {what} is {}, expected {}",
            array.data_type(),
            T::DATA_TYPE
        ),
    }
}

#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub(super) fn replace_min<N: PartialOrd + Copy>(current: &mut N, value: N) {
    // DataFusion's MIN replaces when `value.partial_cmp(current)` is `Less` or `None` (NaN):
    // the same as "not greater or equal", which compiles to one compare (`partial_cmp` to
    // a dozen instructions).
    if !(value >= *current) {
        *current = value;
    }
}

#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub(super) fn replace_max<N: PartialOrd + Copy>(current: &mut N, value: N) {
    // `Greater` or `None`, as DataFusion's MAX.
    if !(value <= *current) {
        *current = value;
    }
}

/// The state of some groups, taken or copied out of a [`Member`].
pub(super) struct Taken<T: Numeric> {
    pub(super) counts: Vec<u64>,
    pub(super) values: Vec<T::Native>,
    pub(super) seen: Option<Vec<bool>>,
}

/// The first `n` items of `items`, moved out (only the rest is copied, as
/// `EmitTo::take_needed` does; nothing when all are taken).
pub(super) fn take_first<V>(items: &mut Vec<V>, n: usize) -> Vec<V> {
    let rest = items.split_off(n.min(items.len()));
    std::mem::replace(items, rest)
}

/// COUNT's results or states: the counts as Int64, without a copy.
pub(super) fn counts_array(counts: Vec<u64>) -> ArrayRef {
    let len = counts.len();
    Arc::new(Int64Array::new(
        ScalarBuffer::new(Buffer::from_vec(counts), 0, len),
        None,
    ))
}

/// Nulls for the groups no value reached (count 0), if there are any.
pub(super) fn nulls_of_counts(counts: &[u64]) -> Option<NullBuffer> {
    counts
        .contains(&0)
        .then(|| NullBuffer::from_iter(counts.iter().map(|c| *c > 0)))
}

/// Nulls for the groups not `seen`, if there are any.
pub(super) fn nulls_of(seen: &[bool]) -> Option<NullBuffer> {
    seen.contains(&false)
        .then(|| NullBuffer::from_iter(seen.iter().copied()))
}
