//! [`FusedAggregates`]: a group table's COUNT, SUM, AVG, MIN and MAX, folded a batch at a time
//! with one pass over each argument column instead of one pass per aggregate.
//!
//! DataFusion's `GroupsAccumulator`s each make their own pass over a batch's group ids and
//! values. With few groups those passes are bound by the latency of updating the same few
//! slots again and again (load, add, store, then load the stored value for the next row of the
//! group); a pass that updates every aggregate of a column at once interleaves independent
//! updates, so their latencies overlap, and it reads the group ids and values once.
//!
//! The aggregates of one argument column (`AVG(price)`, `MIN(price)`, `MAX(price)`) are packed
//! into passes that each update at most one count, one sum, one minimum and one maximum per
//! row; [`fold_dense`] is specialised (const generics) for which of the four a pass updates.
//! `COUNT(*)` rides in the count slot of a pass whose column has no nulls in the batch, as it
//! then counts the same rows.
//!
//! The results are DataFusion's: sums in row order (wrapping for integers), MIN and MAX
//! starting from the type's extreme and replacing on NaN as DataFusion's kernels do, NULL for a
//! group no value reached. Partial states have DataFusion's layout, so either side of a
//! two-phase aggregation may be DataFusion's accumulators. Rows with a null value or outside
//! an aggregate's FILTER take a per-row path; state is plain vectors indexed by group id.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Float64Array, Int64Array,
    PrimitiveArray, UInt32Array, UInt64Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use datafusion::arrow::compute::{cast, take};
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
enum Fold {
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
    fn of(aggregate: &AggregateFunctionExpr) -> Option<Self> {
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
    fn column_type(self, output: &DataType) -> Option<Option<DataType>> {
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

    fn uses_count(self) -> bool {
        matches!(self, Fold::Rows | Fold::Count | Fold::Avg)
    }

    fn uses_sum(self) -> bool {
        matches!(self, Fold::Sum | Fold::Avg)
    }

    /// Whether the result is NULL for a group no value reached (tracked by `seen`).
    fn tracks_seen(self) -> bool {
        matches!(self, Fold::Sum | Fold::Min | Fold::Max)
    }
}

fn is_supported(data_type: &DataType) -> bool {
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
struct Member<T: Numeric> {
    /// The aggregate's index in the table.
    aggregate: usize,
    fold: Fold,
    output: DataType,
    /// Rows counted per group (`Rows`, `Count`, `Avg`).
    counts: Vec<u64>,
    /// Sum, minimum or maximum per group.
    values: Vec<T::Native>,
    /// Groups some value reached, once a group may have been reached by none; `None` while
    /// every group has been (the common case, kept free of per-row bookkeeping).
    seen: Option<Vec<bool>>,
}

impl<T: Numeric> Member<T> {
    fn new(aggregate: usize, fold: Fold, output: DataType) -> Self {
        Self {
            aggregate,
            fold,
            output,
            counts: Vec::new(),
            values: Vec::new(),
            seen: None,
        }
    }

    fn start(&self) -> T::Native {
        match self.fold {
            Fold::Min => T::MIN_START,
            Fold::Max => T::MAX_START,
            _ => T::Native::default(),
        }
    }

    /// Grows the state to `groups` groups; `sparse`: some rows of the coming fold have no
    /// value, so groups are no longer all reached.
    fn grow(&mut self, groups: usize, sparse: bool) {
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
    fn cover(&mut self, groups: usize) {
        if self.groups() < groups {
            self.grow(groups, true);
        }
    }

    fn groups(&self) -> usize {
        if matches!(self.fold, Fold::Rows | Fold::Count) {
            self.counts.len()
        } else {
            self.values.len()
        }
    }

    /// Folds the rows `valid` admits (all when `None`), one at a time.
    fn fold_sparse(
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

    fn fold_one(&mut self, group: usize, value: T::Native) -> Result<()> {
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
    fn take(&mut self, n: usize) -> Taken<T> {
        Taken {
            counts: take_first(&mut self.counts, n),
            values: take_first(&mut self.values, n),
            seen: self.seen.as_mut().map(|seen| take_first(seen, n)),
        }
    }

    /// A copy of the state of the first `n` groups.
    fn copy(&self, n: usize) -> Taken<T> {
        Taken {
            counts: self.counts[..n.min(self.counts.len())].to_vec(),
            values: self.values[..n.min(self.values.len())].to_vec(),
            seen: self
                .seen
                .as_ref()
                .map(|seen| seen[..n.min(seen.len())].to_vec()),
        }
    }

    /// The results of `taken` groups, as DataFusion's accumulator evaluates them.
    fn results(&self, taken: Taken<T>) -> Result<ArrayRef> {
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
    fn states(&self, taken: Taken<T>) -> Result<Vec<ArrayRef>> {
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

    fn values_array(&self, values: Vec<T::Native>, nulls: Option<NullBuffer>) -> ArrayRef {
        let data_type = if self.fold == Fold::Avg {
            T::DATA_TYPE
        } else {
            self.output.clone()
        };
        Arc::new(PrimitiveArray::<T>::new(values.into(), nulls).with_data_type(data_type))
    }

    /// Merges partial states (DataFusion's layout) of the rows' groups.
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
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

    fn size(&self) -> usize {
        self.counts.capacity() * size_of::<u64>()
            + self.values.capacity() * size_of::<T::Native>()
            + self.seen.as_ref().map_or(0, Vec::capacity)
    }
}

/// `array` as a `T` array, or an error naming `what` it is.
fn typed<'a, T: Numeric>(array: &'a ArrayRef, what: &str) -> Result<&'a PrimitiveArray<T>> {
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
fn replace_min<N: PartialOrd + Copy>(current: &mut N, value: N) {
    // DataFusion's MIN replaces when `value.partial_cmp(current)` is `Less` or `None` (NaN):
    // the same as "not greater or equal", which compiles to one compare (`partial_cmp` to
    // a dozen instructions).
    if !(value >= *current) {
        *current = value;
    }
}

#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn replace_max<N: PartialOrd + Copy>(current: &mut N, value: N) {
    // `Greater` or `None`, as DataFusion's MAX.
    if !(value <= *current) {
        *current = value;
    }
}

/// The state of some groups, taken or copied out of a [`Member`].
struct Taken<T: Numeric> {
    counts: Vec<u64>,
    values: Vec<T::Native>,
    seen: Option<Vec<bool>>,
}

/// The first `n` items of `items`, moved out (only the rest is copied, as
/// `EmitTo::take_needed` does; nothing when all are taken).
fn take_first<V>(items: &mut Vec<V>, n: usize) -> Vec<V> {
    let rest = items.split_off(n.min(items.len()));
    std::mem::replace(items, rest)
}

/// COUNT's results or states: the counts as Int64, without a copy.
fn counts_array(counts: Vec<u64>) -> ArrayRef {
    let len = counts.len();
    Arc::new(Int64Array::new(
        ScalarBuffer::new(Buffer::from_vec(counts), 0, len),
        None,
    ))
}

/// Nulls for the groups no value reached (count 0), if there are any.
fn nulls_of_counts(counts: &[u64]) -> Option<NullBuffer> {
    counts
        .contains(&0)
        .then(|| NullBuffer::from_iter(counts.iter().map(|c| *c > 0)))
}

/// Nulls for the groups not `seen`, if there are any.
fn nulls_of(seen: &[bool]) -> Option<NullBuffer> {
    seen.contains(&false)
        .then(|| NullBuffer::from_iter(seen.iter().copied()))
}

/// Folds `values` into the groups with no row skipped: each row adds to its group's count
/// (`COUNT`), sum (`SUM`), minimum (`MIN`) and maximum (`MAX`), for those the pass updates.
#[inline(never)] // its own function keeps the slices' pointers in registers
fn fold_dense<T: Numeric, const COUNT: bool, const SUM: bool, const MIN: bool, const MAX: bool>(
    groups: &[usize],
    values: &[T::Native],
    counts: &mut [u64],
    sums: &mut [T::Native],
    mins: &mut [T::Native],
    maxes: &mut [T::Native],
) {
    // Every slice is cut to the group count and each id clamped below it (a no-op for the
    // interner's ids), so the compiler drops the bounds checks of the updates.
    let n = groups_len(counts, sums, mins, maxes, [COUNT, SUM, MIN, MAX]);
    let Some(last) = n.checked_sub(1) else {
        return;
    };
    let counts = &mut counts[..if COUNT { n } else { 0 }];
    let sums = &mut sums[..if SUM { n } else { 0 }];
    let mins = &mut mins[..if MIN { n } else { 0 }];
    let maxes = &mut maxes[..if MAX { n } else { 0 }];
    for (&group, &value) in groups.iter().zip(values) {
        let group = group.min(last);
        if COUNT {
            counts[group] += 1;
        }
        if SUM {
            sums[group] = sums[group].add_wrapping(value);
        }
        if MIN {
            replace_min(&mut mins[group], value);
        }
        if MAX {
            replace_max(&mut maxes[group], value);
        }
    }
}

/// The group count of a pass: the shortest of the slices it updates (`used`: count, sum,
/// min, max).
fn groups_len<N>(counts: &[u64], sums: &[N], mins: &[N], maxes: &[N], used: [bool; 4]) -> usize {
    [counts.len(), sums.len(), mins.len(), maxes.len()]
        .into_iter()
        .zip(used)
        .filter(|(_, used)| *used)
        .map(|(len, _)| len)
        .min()
        .unwrap_or(0)
}

/// The members one dense pass updates: at most one per slot.
#[derive(Debug, Default, Clone, Copy)]
struct Pass {
    count: Option<usize>,
    sum: Option<usize>,
    min: Option<usize>,
    max: Option<usize>,
}

impl Pass {
    /// Takes `member` (folding `fold`) if its slots are free.
    fn take(&mut self, member: usize, fold: Fold) -> bool {
        let free = match fold {
            Fold::Rows | Fold::Count => self.count.is_none(),
            Fold::Sum => self.sum.is_none(),
            Fold::Avg => self.count.is_none() && self.sum.is_none(),
            Fold::Min => self.min.is_none(),
            Fold::Max => self.max.is_none(),
        };
        if free {
            if fold.uses_count() {
                self.count = Some(member);
            }
            if fold.uses_sum() {
                self.sum = Some(member);
            }
            match fold {
                Fold::Min => self.min = Some(member),
                Fold::Max => self.max = Some(member),
                _ => {}
            }
        }
        free
    }
}

/// The fused aggregates over one argument column of type `T`.
#[derive(Debug)]
struct Column<T: Numeric> {
    /// The aggregate whose argument array is this column.
    argument_of: usize,
    members: Vec<Member<T>>,
}

/// [`Column`] over any of the supported types.
trait FusedColumn: Debug + Send {
    fn update(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        groups: &[usize],
        total: usize,
    ) -> Result<()>;
    fn merge(
        &mut self,
        member: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()>;
    /// Member `member`'s results of the first `n` groups, which leave it.
    fn emit(&mut self, member: usize, n: usize) -> Result<ArrayRef>;
    /// Member `member`'s partial states of the first `n` groups, which leave it.
    fn emit_states(&mut self, member: usize, n: usize) -> Result<Vec<ArrayRef>>;
    /// Member `member`'s results of the first `n` groups, which stay.
    fn peek(&self, member: usize, n: usize) -> Result<ArrayRef>;
    fn cover(&mut self, groups: usize);
    fn size(&self) -> usize;
}

impl<T: Numeric> Column<T> {
    fn dense_pass(&mut self, pass: Pass, groups: &[usize], values: &[T::Native]) {
        // The pass's vectors are taken out of their members for it, and put back after.
        let mut take = |slot: Option<usize>| -> Vec<T::Native> {
            slot.map(|m| std::mem::take(&mut self.members[m].values))
                .unwrap_or_default()
        };
        let (mut sums, mut mins, mut maxes) = (take(pass.sum), take(pass.min), take(pass.max));
        let mut counts = pass
            .count
            .map(|m| std::mem::take(&mut self.members[m].counts))
            .unwrap_or_default();
        let (c, s, mn, mx) = (&mut counts, &mut sums, &mut mins, &mut maxes);
        match (
            pass.count.is_some(),
            pass.sum.is_some(),
            pass.min.is_some(),
            pass.max.is_some(),
        ) {
            (false, false, false, false) => {}
            (true, false, false, false) => {
                fold_dense::<T, true, false, false, false>(groups, values, c, s, mn, mx)
            }
            (false, true, false, false) => {
                fold_dense::<T, false, true, false, false>(groups, values, c, s, mn, mx)
            }
            (true, true, false, false) => {
                fold_dense::<T, true, true, false, false>(groups, values, c, s, mn, mx)
            }
            (false, false, true, false) => {
                fold_dense::<T, false, false, true, false>(groups, values, c, s, mn, mx)
            }
            (true, false, true, false) => {
                fold_dense::<T, true, false, true, false>(groups, values, c, s, mn, mx)
            }
            (false, true, true, false) => {
                fold_dense::<T, false, true, true, false>(groups, values, c, s, mn, mx)
            }
            (true, true, true, false) => {
                fold_dense::<T, true, true, true, false>(groups, values, c, s, mn, mx)
            }
            (false, false, false, true) => {
                fold_dense::<T, false, false, false, true>(groups, values, c, s, mn, mx)
            }
            (true, false, false, true) => {
                fold_dense::<T, true, false, false, true>(groups, values, c, s, mn, mx)
            }
            (false, true, false, true) => {
                fold_dense::<T, false, true, false, true>(groups, values, c, s, mn, mx)
            }
            (true, true, false, true) => {
                fold_dense::<T, true, true, false, true>(groups, values, c, s, mn, mx)
            }
            (false, false, true, true) => {
                fold_dense::<T, false, false, true, true>(groups, values, c, s, mn, mx)
            }
            (true, false, true, true) => {
                fold_dense::<T, true, false, true, true>(groups, values, c, s, mn, mx)
            }
            (false, true, true, true) => {
                fold_dense::<T, false, true, true, true>(groups, values, c, s, mn, mx)
            }
            (true, true, true, true) => {
                fold_dense::<T, true, true, true, true>(groups, values, c, s, mn, mx)
            }
        }
        if let Some(m) = pass.count {
            self.members[m].counts = counts;
        }
        for (slot, values) in [(pass.sum, sums), (pass.min, mins), (pass.max, maxes)] {
            if let Some(m) = slot {
                self.members[m].values = values;
            }
        }
    }
}

impl<T: Numeric> FusedColumn for Column<T> {
    fn update(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        let Some(column) = arguments.get(self.argument_of).and_then(|a| a.first()) else {
            return internal_err!(
                "fused aggregate: no argument for aggregate {}",
                self.argument_of
            );
        };
        let values = typed::<T>(column, "argument")?;
        if values.len() != groups.len() {
            return internal_err!(
                "fused aggregate: {} values for {} rows",
                values.len(),
                groups.len()
            );
        }
        debug_assert!(groups.iter().all(|g| *g < total), "group ids below {total}");
        let nulls = values
            .nulls()
            .filter(|n| n.null_count() > 0)
            .map(|n| n.inner());
        let mut passes: Vec<Pass> = Vec::new();
        for (index, member) in self.members.iter_mut().enumerate() {
            let filter = filters.get(member.aggregate).and_then(Option::as_ref);
            let valid = admitted_rows(member.fold, nulls, filter);
            member.grow(total, valid.is_some());
            if valid.is_some() || member.seen.is_some() {
                // Rows without a value, or groups no value reached before: one at a time.
                let values = values.values();
                match &valid {
                    Some(valid) => member.fold_sparse(groups, values, Some(valid))?,
                    None => member.fold_sparse(groups, values, None)?,
                }
                continue;
            }
            if !passes.iter_mut().any(|p| p.take(index, member.fold)) {
                let mut pass = Pass::default();
                pass.take(index, member.fold);
                passes.push(pass);
            }
        }
        for pass in passes {
            self.dense_pass(pass, groups, values.values());
        }
        Ok(())
    }

    fn merge(
        &mut self,
        member: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        self.members[member].merge(states, groups, total)
    }

    fn emit(&mut self, member: usize, n: usize) -> Result<ArrayRef> {
        let member = &mut self.members[member];
        let taken = member.take(n);
        member.results(taken)
    }

    fn emit_states(&mut self, member: usize, n: usize) -> Result<Vec<ArrayRef>> {
        let member = &mut self.members[member];
        let taken = member.take(n);
        member.states(taken)
    }

    fn peek(&self, member: usize, n: usize) -> Result<ArrayRef> {
        let member = &self.members[member];
        member.results(member.copy(n))
    }

    fn cover(&mut self, groups: usize) {
        for member in &mut self.members {
            member.cover(groups);
        }
    }

    fn size(&self) -> usize {
        self.members.iter().map(Member::size).sum()
    }
}

/// The rows `fold` takes from a batch: `None` for all of them; else those with a value
/// (`COUNT(*)` ignores the column's nulls) and inside the aggregate's FILTER.
fn admitted_rows(
    fold: Fold,
    nulls: Option<&BooleanBuffer>,
    filter: Option<&BooleanArray>,
) -> Option<BooleanBuffer> {
    let nulls = nulls.filter(|_| fold != Fold::Rows);
    let filter = filter.map(|f| match f.nulls() {
        Some(n) => f.values() & n.inner(),
        None => f.values().clone(),
    });
    match (nulls, filter) {
        (None, None) => None,
        (Some(n), None) => Some(n.clone()),
        (None, Some(f)) => Some(f),
        (Some(n), Some(f)) => Some(n & &f),
    }
}

/// A column while planning: its type (unknown while only COUNTs use it), the aggregate whose
/// argument it is, and its members as (aggregate, fold, result type).
type PlannedColumn = (Option<DataType>, usize, Vec<(usize, Fold, DataType)>);

/// The fused aggregates of a group table, by argument column.
#[derive(Debug)]
pub(crate) struct FusedAggregates {
    columns: Vec<Box<dyn FusedColumn>>,
    /// Per aggregate of the table: its column and member index, if fused.
    placement: Vec<Option<(usize, usize)>>,
}

impl FusedAggregates {
    /// The aggregates of `aggregates` to fuse, or `None` if fewer than two would be (one
    /// aggregate gains nothing from fusing, and DataFusion's accumulator is the reference).
    pub fn plan(aggregates: &[Arc<AggregateFunctionExpr>]) -> Option<Self> {
        let mut columns: Vec<PlannedColumn> = Vec::new();
        let mut rows = Vec::new();
        for (index, aggregate) in aggregates.iter().enumerate() {
            let Some(fold) = Fold::of(aggregate) else {
                continue;
            };
            let output = aggregate.field().data_type().clone();
            let Some(column_type) = fold.column_type(&output) else {
                continue;
            };
            if fold == Fold::Rows {
                rows.push((index, output));
                continue;
            }
            let argument = &aggregate.expressions()[0];
            let same = columns.iter_mut().find(|(data_type, of, _)| {
                let same_expr = aggregates[*of].expressions()[0].as_ref() == argument.as_ref();
                let same_type = match (data_type.as_ref(), column_type.as_ref()) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                same_expr && same_type
            });
            match same {
                Some((data_type, _, members)) => {
                    if data_type.is_none() {
                        *data_type = column_type;
                    }
                    members.push((index, fold, output));
                }
                None => columns.push((column_type, index, vec![(index, fold, output)])),
            }
        }
        // A COUNT alone says nothing of its column's type: DataFusion's accumulator keeps it.
        columns.retain(|(data_type, _, _)| data_type.is_some());
        // COUNT(*) joins a column whose count slot is free, where one is.
        for (index, output) in rows {
            let home = columns
                .iter()
                .position(|(_, _, m)| !m.iter().any(|(_, f, _)| f.uses_count()))
                .or(if columns.is_empty() { None } else { Some(0) });
            if let Some(home) = home {
                columns[home].2.push((index, Fold::Rows, output));
            }
        }
        let fused: usize = columns.iter().map(|(_, _, m)| m.len()).sum();
        if fused < 2 {
            return None;
        }
        let mut placement = vec![None; aggregates.len()];
        let columns = columns
            .into_iter()
            .enumerate()
            .map(|(position, (data_type, argument_of, members))| {
                for (member, (aggregate, _, _)) in members.iter().enumerate() {
                    placement[*aggregate] = Some((position, member));
                }
                let data_type = data_type.unwrap_or(DataType::Int64);
                new_column(&data_type, argument_of, members)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { columns, placement })
    }

    /// Whether aggregate `index` is fused.
    pub fn fuses(&self, index: usize) -> bool {
        self.placement.get(index).is_some_and(Option::is_some)
    }

    /// Folds a batch: `arguments[i]` and `filters[i]` belong to aggregate `i`, `groups` are
    /// the rows' group ids and `total` the table's group count.
    pub fn update(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        for column in &mut self.columns {
            column.update(arguments, filters, groups, total)?;
        }
        Ok(())
    }

    /// Merges aggregate `index`'s partial states.
    pub fn merge(
        &mut self,
        index: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        let (column, member) = self.place(index)?;
        self.columns[column].merge(member, states, groups, total)
    }

    /// Aggregate `index`'s results of the first `n` groups, which leave it.
    pub fn emit(&mut self, index: usize, n: usize) -> Result<ArrayRef> {
        let (column, member) = self.place(index)?;
        self.columns[column].cover(n);
        self.columns[column].emit(member, n)
    }

    /// Aggregate `index`'s partial states of the first `n` groups, which leave it.
    pub fn emit_states(&mut self, index: usize, n: usize) -> Result<Vec<ArrayRef>> {
        let (column, member) = self.place(index)?;
        self.columns[column].cover(n);
        self.columns[column].emit_states(member, n)
    }

    /// Aggregate `index`'s current results of `groups`, of a table of `total` groups.
    pub fn results_of(
        &mut self,
        index: usize,
        total: usize,
        groups: &UInt32Array,
    ) -> Result<ArrayRef> {
        let (column, member) = self.place(index)?;
        self.columns[column].cover(total);
        let results = self.columns[column].peek(member, total)?;
        Ok(take(results.as_ref(), groups, None)?)
    }

    pub fn size(&self) -> usize {
        self.columns.iter().map(|c| c.size()).sum()
    }

    fn place(&self, index: usize) -> Result<(usize, usize)> {
        match self.placement.get(index).copied().flatten() {
            Some(place) => Ok(place),
            None => internal_err!("aggregate {index} is not fused"),
        }
    }
}

fn new_column(
    data_type: &DataType,
    argument_of: usize,
    members: Vec<(usize, Fold, DataType)>,
) -> Option<Box<dyn FusedColumn>> {
    fn build<T: Numeric>(
        argument_of: usize,
        members: Vec<(usize, Fold, DataType)>,
    ) -> Box<dyn FusedColumn> {
        Box::new(Column::<T> {
            argument_of,
            members: members
                .into_iter()
                .map(|(aggregate, fold, output)| Member::new(aggregate, fold, output))
                .collect(),
        })
    }
    Some(match data_type {
        DataType::Int32 => build::<Int32Type>(argument_of, members),
        DataType::Int64 => build::<Int64Type>(argument_of, members),
        DataType::UInt32 => build::<UInt32Type>(argument_of, members),
        DataType::UInt64 => build::<UInt64Type>(argument_of, members),
        DataType::Float32 => build::<Float32Type>(argument_of, members),
        DataType::Float64 => build::<Float64Type>(argument_of, members),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Float64Array, Int32Array, Int64Array, UInt32Array};
    use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::common::ScalarValue;
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::logical_expr::{AggregateUDF, EmitTo, GroupsAccumulator};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{col, lit};

    use super::*;
    use crate::kernels::GroupTable;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("i", DataType::Int64, true),
            Field::new("s", DataType::Int32, true),
        ]))
    }

    fn aggregate(
        function: Arc<AggregateUDF>,
        argument: Arc<dyn PhysicalExpr>,
        name: &str,
    ) -> Arc<AggregateFunctionExpr> {
        Arc::new(
            AggregateExprBuilder::new(function, vec![argument])
                .schema(schema())
                .alias(name)
                .build()
                .unwrap(),
        )
    }

    /// Every fused fold over each column type, `COUNT(*)` twice (one rides a count slot).
    fn aggregates() -> Vec<Arc<AggregateFunctionExpr>> {
        let s = schema();
        let (x, i, small) = (
            col("x", &s).unwrap(),
            col("i", &s).unwrap(),
            col("s", &s).unwrap(),
        );
        vec![
            aggregate(count_udaf(), lit(1i64), "rows"),
            aggregate(avg_udaf(), Arc::clone(&x), "avg_x"),
            aggregate(min_udaf(), Arc::clone(&x), "min_x"),
            aggregate(max_udaf(), Arc::clone(&x), "max_x"),
            aggregate(sum_udaf(), Arc::clone(&x), "sum_x"),
            aggregate(count_udaf(), x, "count_x"),
            aggregate(sum_udaf(), Arc::clone(&i), "sum_i"),
            aggregate(min_udaf(), Arc::clone(&i), "min_i"),
            aggregate(max_udaf(), i, "max_i"),
            aggregate(count_udaf(), lit(1i64), "rows_again"),
            aggregate(max_udaf(), Arc::clone(&small), "max_s"),
            aggregate(min_udaf(), small, "min_s"),
        ]
    }

    /// A small deterministic generator.
    struct Random(u64);

    impl Random {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    /// A batch of `rows` rows over `keys` keys (one in eight null); `nulls`: one value in four
    /// is null. Floats include NaN, infinities and huge values.
    fn batch(random: &mut Random, rows: usize, keys: u64, nulls: bool) -> RecordBatch {
        let null = |r: &mut Random| nulls && r.next(4) == 0;
        let k: Int64Array = (0..rows)
            .map(|_| (random.next(8) != 0).then(|| random.next(keys) as i64))
            .collect();
        let x: Float64Array = (0..rows)
            .map(|_| {
                (!null(random)).then(|| match random.next(20) {
                    0 => f64::NAN,
                    1 => f64::INFINITY,
                    2 => f64::NEG_INFINITY,
                    3 => 1e300,
                    n => n as f64 * 0.1 - 1.0,
                })
            })
            .collect();
        let i: Int64Array = (0..rows)
            .map(|_| (!null(random)).then(|| random.next(1000) as i64 - 500))
            .collect();
        let small: Int32Array = (0..rows)
            .map(|_| (!null(random)).then(|| random.next(100) as i32 - 50))
            .collect();
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(k), Arc::new(x), Arc::new(i), Arc::new(small)],
        )
        .unwrap()
    }

    fn arguments(
        aggregates: &[Arc<AggregateFunctionExpr>],
        batch: &RecordBatch,
    ) -> Vec<Vec<ArrayRef>> {
        aggregates
            .iter()
            .map(|a| {
                a.expressions()
                    .iter()
                    .map(|e| {
                        e.evaluate(batch)
                            .unwrap()
                            .into_array(batch.num_rows())
                            .unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    fn datafusion_accumulators(
        aggregates: &[Arc<AggregateFunctionExpr>],
    ) -> Vec<Box<dyn GroupsAccumulator>> {
        aggregates
            .iter()
            .map(|a| a.create_groups_accumulator().unwrap())
            .collect()
    }

    fn shown(arrays: &[ArrayRef]) -> Vec<String> {
        arrays
            .iter()
            .map(|a| format!("{}: {a:?}", a.data_type()))
            .collect()
    }

    /// Filters for every other aggregate: rows whose `i` is even (null where `i` is).
    fn filters(batch: &RecordBatch, count: usize) -> Vec<Option<BooleanArray>> {
        let i = batch.column(2).as_primitive::<Int64Type>();
        let even: BooleanArray = i.iter().map(|v| v.map(|v| v % 2 == 0)).collect();
        (0..count)
            .map(|a| (a % 2 == 1).then(|| even.clone()))
            .collect()
    }

    /// Feeds the same batches to a group table (fused) and to DataFusion's accumulators;
    /// returns both sides' results (or states) of the first 7 groups, then of the rest.
    fn run(seed: u64, nulls: bool, filtered: bool, states: bool) -> (Vec<String>, Vec<String>) {
        let aggregates = aggregates();
        let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut table = GroupTable::try_new(&key_schema, &aggregates).unwrap();
        let mut reference = datafusion_accumulators(&aggregates);
        let mut random = Random(seed);
        for (round, rows) in [0usize, 1, 700, 3000, 64].into_iter().enumerate() {
            let batch = batch(&mut random, rows, 10 + 20 * round as u64, nulls);
            let arguments = arguments(&aggregates, &batch);
            let filters = if filtered {
                filters(&batch, aggregates.len())
            } else {
                vec![None; aggregates.len()]
            };
            let keys = [Arc::clone(batch.column(0))];
            table.update(&keys, &arguments, &filters, rows).unwrap();
            let groups = table.len();
            let ids = table.last_group_ids(rows).to_vec();
            for ((accumulator, arguments), filter) in
                reference.iter_mut().zip(&arguments).zip(&filters)
            {
                accumulator
                    .update_batch(arguments, &ids, filter.as_ref(), groups)
                    .unwrap();
            }
        }
        let mut fused = Vec::new();
        let mut expected = Vec::new();
        for emit_to in [EmitTo::First(7), EmitTo::All] {
            let mut reference_out = Vec::new();
            for accumulator in &mut reference {
                if states {
                    reference_out.extend(accumulator.state(emit_to).unwrap());
                } else {
                    reference_out.push(accumulator.evaluate(emit_to).unwrap());
                }
            }
            let table_out = if states {
                table.emit_states(emit_to).unwrap().1.concat()
            } else {
                table.emit(emit_to).unwrap().1
            };
            fused.extend(shown(&table_out));
            expected.extend(shown(&reference_out));
        }
        (fused, expected)
    }

    #[test]
    fn the_fused_aggregates_are_planned_for_count_sum_avg_min_max() {
        let aggregates = aggregates();
        let fused = FusedAggregates::plan(&aggregates).unwrap();
        assert!((0..aggregates.len()).all(|a| fused.fuses(a)));
        // x, i and s: three columns; both COUNT(*)s ride in them.
        assert_eq!(fused.columns.len(), 3);
    }

    #[test]
    fn other_aggregates_keep_datafusion_accumulators() {
        let s = schema();
        let x = col("x", &s).unwrap();
        let distinct = Arc::new(
            AggregateExprBuilder::new(sum_udaf(), vec![Arc::clone(&x)])
                .schema(schema())
                .alias("distinct_sum")
                .distinct()
                .build()
                .unwrap(),
        );
        let aggregates = vec![
            aggregate(count_udaf(), col("k", &s).unwrap(), "count_k"),
            distinct,
            aggregate(count_udaf(), lit(ScalarValue::Int64(None)), "count_null"),
            aggregate(sum_udaf(), Arc::clone(&x), "sum_x"),
            aggregate(max_udaf(), x, "max_x"),
        ];
        let fused = FusedAggregates::plan(&aggregates).unwrap();
        // COUNT(k) alone on its column, DISTINCT and COUNT(NULL) are DataFusion's.
        let fuses: Vec<bool> = (0..aggregates.len()).map(|a| fused.fuses(a)).collect();
        assert_eq!(fuses, [false, false, false, true, true]);
        // A single aggregate gains nothing from fusing.
        assert!(FusedAggregates::plan(&aggregates[3..4]).is_none());
    }

    #[test]
    fn results_equal_datafusion_accumulators_without_nulls() {
        for seed in 0..4 {
            let (fused, expected) = run(seed, false, false, false);
            assert_eq!(fused, expected, "seed {seed}");
        }
    }

    #[test]
    fn results_equal_datafusion_accumulators_with_nulls_nan_and_filters() {
        for (seed, filtered) in [(10, false), (11, true), (12, true)] {
            let (fused, expected) = run(seed, true, filtered, false);
            assert_eq!(fused, expected, "seed {seed}");
        }
    }

    #[test]
    fn partial_states_equal_datafusion_accumulators() {
        for (seed, nulls) in [(20, false), (21, true)] {
            let (fused, expected) = run(seed, nulls, nulls, true);
            assert_eq!(fused, expected, "seed {seed}");
        }
    }

    #[test]
    fn merged_states_equal_datafusion_merges() {
        let aggregates = aggregates();
        let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut random = Random(30);
        let mut table = GroupTable::try_new(&key_schema, &aggregates).unwrap();
        let mut reference = datafusion_accumulators(&aggregates);
        for nulls in [false, true, false] {
            // Partial states of one batch, from DataFusion's accumulators.
            let batch = batch(&mut random, 500, 30, nulls);
            let mut partial = GroupTable::try_new(&key_schema, &[]).unwrap();
            let ids = partial
                .intern(&[Arc::clone(batch.column(0))], 500)
                .unwrap()
                .to_vec();
            let mut producers = datafusion_accumulators(&aggregates);
            let arguments = arguments(&aggregates, &batch);
            for (producer, arguments) in producers.iter_mut().zip(&arguments) {
                producer
                    .update_batch(arguments, &ids, None, partial.len())
                    .unwrap();
            }
            let states: Vec<Vec<ArrayRef>> = producers
                .iter_mut()
                .map(|p| p.state(EmitTo::All).unwrap())
                .collect();
            let keys = partial.emit_keys(EmitTo::All).unwrap();
            let rows = keys[0].len();
            table.merge(&keys, &states, rows).unwrap();
            let merged_ids = table.last_group_ids(rows).to_vec();
            for (accumulator, states) in reference.iter_mut().zip(&states) {
                accumulator
                    .merge_batch(states, &merged_ids, table.len())
                    .unwrap();
            }
        }
        let fused = table.emit(EmitTo::All).unwrap().1;
        let expected: Vec<ArrayRef> = reference
            .iter_mut()
            .map(|a| a.evaluate(EmitTo::All).unwrap())
            .collect();
        assert_eq!(shown(&fused), shown(&expected));
    }

    #[test]
    fn current_values_leave_the_state_as_it_is() {
        let aggregates = aggregates();
        let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut table = GroupTable::try_new(&key_schema, &aggregates).unwrap();
        let batch = batch(&mut Random(40), 300, 5, true);
        let arguments = arguments(&aggregates, &batch);
        let filters = vec![None; aggregates.len()];
        let keys = [Arc::clone(batch.column(0))];
        table.update(&keys, &arguments, &filters, 300).unwrap();
        let groups = UInt32Array::from(vec![2, 0]);
        let peeked = table.current_values(&groups).unwrap();
        let all = table.emit(EmitTo::All).unwrap().1;
        let expected: Vec<ArrayRef> = all
            .iter()
            .map(|a| take(a.as_ref(), &groups, None).unwrap())
            .collect();
        assert_eq!(shown(&peeked), shown(&expected));
    }
}
