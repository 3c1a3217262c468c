//! [`Column`]: the fused aggregates of one argument column, updated in passes
//! ([`fold_dense`]) that each fold at most one count, sum, minimum and maximum per row.

use std::fmt::Debug;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::datatypes::ArrowNativeTypeOp;
use datafusion::common::{Result, internal_err};

use super::fused_member::{Fold, Member, Numeric, replace_max, replace_min, typed};

/// Folds `values` into the groups with no row skipped: each row adds to its group's count
/// (`COUNT`), sum (`SUM`), minimum (`MIN`) and maximum (`MAX`), for those the pass updates.
#[inline(never)] // its own function keeps the slices' pointers in registers
pub(super) fn fold_dense<
    T: Numeric,
    const COUNT: bool,
    const SUM: bool,
    const MIN: bool,
    const MAX: bool,
>(
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
pub(super) fn groups_len<N>(
    counts: &[u64],
    sums: &[N],
    mins: &[N],
    maxes: &[N],
    used: [bool; 4],
) -> usize {
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
pub(super) struct Pass {
    pub(super) count: Option<usize>,
    pub(super) sum: Option<usize>,
    pub(super) min: Option<usize>,
    pub(super) max: Option<usize>,
}

impl Pass {
    /// Takes `member` (folding `fold`) if its slots are free.
    pub(super) fn take(&mut self, member: usize, fold: Fold) -> bool {
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
pub(super) struct Column<T: Numeric> {
    /// The aggregate whose argument array is this column.
    pub(super) argument_of: usize,
    pub(super) members: Vec<Member<T>>,
}

/// [`Column`] over any of the supported types.
pub(super) trait FusedColumn: Debug + Send {
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
    /// Member `member`'s results of `groups`, which stay.
    fn peek(&self, member: usize, groups: &UInt32Array) -> Result<ArrayRef>;
    fn cover(&mut self, groups: usize);
    fn size(&self) -> usize;
}

impl<T: Numeric> Column<T> {
    pub(super) fn dense_pass(&mut self, pass: Pass, groups: &[usize], values: &[T::Native]) {
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

    fn peek(&self, member: usize, groups: &UInt32Array) -> Result<ArrayRef> {
        let member = &self.members[member];
        member.results(member.gather(groups.values()))
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
pub(super) fn admitted_rows(
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
