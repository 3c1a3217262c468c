//! [`SharedAggregates`]: a kernel that holds several aggregates of a group table together
//! (the fused COUNT/SUM/AVG/MIN/MAX of a column, the DISTINCT counts of a column sharing one
//! table of pairs), and [`Placement`]: which of its columns, and which member there, holds
//! each aggregate of the table. The group table hands every batch to each such kernel and
//! leaves the aggregates they hold out of its per-aggregate accumulators.

use std::fmt::Debug;

use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use datafusion::common::{Result, internal_err};

/// Aggregates of a group table held together by one kernel, addressed by their index in
/// the table. Results and partial states are DataFusion's for the same aggregates.
pub(crate) trait SharedAggregates: Debug + Send {
    /// Whether aggregate `index` is held here.
    fn holds(&self, index: usize) -> bool;

    /// Folds a batch: `arguments[i]` and `filters[i]` belong to aggregate `i`, `groups` are
    /// the rows' group ids and `total` the table's group count.
    fn update(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        groups: &[usize],
        total: usize,
    ) -> Result<()>;

    /// Merges aggregate `index`'s partial states.
    fn merge(
        &mut self,
        index: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()>;

    /// Aggregate `index`'s results of the first `n` groups, which leave it.
    fn emit(&mut self, index: usize, n: usize) -> Result<ArrayRef>;

    /// Aggregate `index`'s partial states of the first `n` groups, which leave it.
    fn emit_states(&mut self, index: usize, n: usize) -> Result<Vec<ArrayRef>>;

    /// Aggregate `index`'s current results of `groups`, of a table of `total` groups.
    fn results_of(&mut self, index: usize, total: usize, groups: &UInt32Array) -> Result<ArrayRef>;

    /// Bytes held.
    fn size(&self) -> usize;
}

/// Per aggregate of a table: the column and member index that hold it, if any.
#[derive(Debug)]
pub(crate) struct Placement(Vec<Option<(usize, usize)>>);

impl Placement {
    /// For a table of `aggregates` aggregates, of which column `c` holds those `columns`
    /// yields `c`-th, as its members in that order.
    pub fn new<C: IntoIterator<Item = usize>>(
        aggregates: usize,
        columns: impl IntoIterator<Item = C>,
    ) -> Self {
        let mut placement = vec![None; aggregates];
        for (column, members) in columns.into_iter().enumerate() {
            for (member, aggregate) in members.into_iter().enumerate() {
                placement[aggregate] = Some((column, member));
            }
        }
        Self(placement)
    }

    pub fn holds(&self, index: usize) -> bool {
        self.0.get(index).is_some_and(Option::is_some)
    }

    /// The column and member that hold aggregate `index`.
    pub fn of(&self, index: usize) -> Result<(usize, usize)> {
        match self.0.get(index).copied().flatten() {
            Some(place) => Ok(place),
            None => internal_err!("aggregate {index} is not held by this kernel"),
        }
    }
}
