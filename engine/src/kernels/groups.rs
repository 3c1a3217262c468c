//! [`GroupTable`]: interned group keys (a `GroupValues`, packed where the keys allow) and one
//! `GroupsAccumulator` per aggregate, updated a batch at a time; groups are emitted whole or as
//! a prefix of the table (`EmitTo::First`).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::aggregates::group_values::GroupValues;

use super::dense_leading_keys::DenseLeadingKeyGroupValues;
use super::distinct_counts::DistinctCounts;
use super::fused::FusedAggregates;
use super::packed_keys::{PackedGroupValues, new_group_values};
use super::row_accumulators::RowAccumulators;
use super::shared::SharedAggregates;
use super::windowed_keys::WindowedGroupValues;
use crate::checkpoint::OperatorState;

/// The key interner of a [`GroupTable`].
enum Keys {
    /// Window start and keys, interned per window.
    Windowed(Box<WindowedGroupValues>),
    /// Keys packed into fixed-width words (most keys of streams).
    Packed(Box<PackedGroupValues>),
    Other(Box<dyn GroupValues>),
}

impl Keys {
    /// The interner for keys of `schema`: an id's dense chains or packed where they fit.
    fn for_schema(schema: SchemaRef) -> Result<Self> {
        if let Some(dense) = DenseLeadingKeyGroupValues::try_new(&schema) {
            return Ok(Keys::Other(Box::new(dense)));
        }
        Ok(match PackedGroupValues::try_new(&schema) {
            Some(packed) => Keys::Packed(Box::new(packed)),
            None => Keys::Other(new_group_values(schema)?),
        })
    }

    fn values(&mut self) -> &mut dyn GroupValues {
        match self {
            Keys::Windowed(values) => values.as_mut(),
            Keys::Packed(values) => values.as_mut(),
            Keys::Other(values) => values.as_mut(),
        }
    }

    fn size(&self) -> usize {
        match self {
            Keys::Windowed(values) => values.size(),
            Keys::Packed(values) => values.size(),
            Keys::Other(values) => values.size(),
        }
    }
}

/// A table of groups and their aggregates.
pub struct GroupTable {
    /// `None` without key columns: every row is in group 0.
    keys: Option<Keys>,
    groups: usize,
    /// Kernels that hold several aggregates together: COUNT/SUM/AVG/MIN/MAX folded a column
    /// at a time, and COUNT(DISTINCT x) of one column under several FILTERs sharing one
    /// table of the pairs seen. The other aggregates are in `accumulators` (which has one
    /// per aggregate: a shared aggregate's is left empty and only turns rows into states).
    shared: Vec<Box<dyn SharedAggregates>>,
    accumulators: Vec<TableAccumulator>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    group_ids: Vec<usize>,
    changed: ChangedGroups,
}

impl GroupTable {
    /// Empty state for keys of `key_schema` and the aggregates `aggregates`.
    pub fn try_new(
        key_schema: &SchemaRef,
        aggregates: &[Arc<AggregateFunctionExpr>],
    ) -> Result<Self> {
        let keys = if key_schema.fields().is_empty() {
            None
        } else {
            Some(Keys::for_schema(Arc::clone(key_schema))?)
        };
        Self::with_keys(keys, aggregates)
    }

    /// As [`Self::try_new`] for keys whose first column is a window start (an integer or
    /// timestamp) followed by at least one key column: the keys are interned once for all
    /// windows ([`WindowedGroupValues`]).
    pub fn try_new_windowed(
        key_schema: &SchemaRef,
        aggregates: &[Arc<AggregateFunctionExpr>],
    ) -> Result<Self> {
        if key_schema.fields().len() < 2 {
            return Self::try_new(key_schema, aggregates);
        }
        let keys = Keys::Windowed(Box::new(WindowedGroupValues::try_new(key_schema)?));
        Self::with_keys(Some(keys), aggregates)
    }

    fn with_keys(keys: Option<Keys>, aggregates: &[Arc<AggregateFunctionExpr>]) -> Result<Self> {
        let accumulators = aggregates
            .iter()
            .map(create_accumulator)
            .collect::<Result<_>>()?;
        Ok(Self {
            keys,
            groups: 0,
            shared: shared_kernels(aggregates, 2),
            accumulators,
            aggregates: aggregates.to_vec(),
            group_ids: Vec::new(),
            changed: ChangedGroups::default(),
        })
    }

    /// This table, made for its current values to be read after every batch (EMIT CHANGES
    /// per batch, [`Self::current_values`]): each `COUNT(DISTINCT)` of an Int64 column is
    /// counted by Freshet's kernel, which reads a group's count where it is kept, even where
    /// it is its column's only one. Call before the first update.
    /// The other aggregates are held one row accumulator per group ([`RowAccumulators`]),
    /// whose changed groups are evaluated alone.
    pub fn read_while_updating(mut self) -> Self {
        self.shared = shared_kernels(&self.aggregates, 1);
        for (accumulator, aggregate) in self.accumulators.iter_mut().zip(&self.aggregates) {
            if let TableAccumulator::Groups(_) = accumulator {
                *accumulator = TableAccumulator::Rows(RowAccumulators::new(Arc::clone(aggregate)));
            }
        }
        self
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups
    }

    pub fn is_empty(&self) -> bool {
        self.groups == 0
    }

    /// Interns `keys` (one array per key column, `rows` rows) and returns each row's group.
    pub fn intern(&mut self, keys: &[ArrayRef], rows: usize) -> Result<&[usize]> {
        match &mut self.keys {
            Some(values) => {
                let values = values.values();
                values.intern(keys, &mut self.group_ids)?;
                self.groups = values.len();
            }
            None => {
                self.group_ids.clear();
                self.group_ids.resize(rows, 0);
                if rows > 0 {
                    self.groups = 1;
                }
            }
        }
        Ok(&self.group_ids)
    }

    /// The aggregates of a group no row reached, one value each (`COUNT(*)` 0, `SUM(x)`
    /// NULL): a global aggregate over empty input still gives its one row, as SQL does.
    /// (Row accumulators, as a group accumulator given no rows may take its group as seen.)
    pub fn empty_group_values(&self) -> Result<Vec<ArrayRef>> {
        self.aggregates
            .iter()
            .map(|aggregate| aggregate.create_accumulator()?.evaluate()?.to_array())
            .collect()
    }

    /// Each input row as partial states of its own (no grouping): `states[i]` are aggregate
    /// `i`'s state columns, one row per input row.
    pub fn row_states(
        &self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<Vec<Vec<ArrayRef>>> {
        self.accumulators
            .iter()
            .zip(arguments)
            .zip(filters)
            .map(|((accumulator, arguments), filter)| {
                accumulator.convert_to_state(arguments, filter.as_ref())
            })
            .collect()
    }

    /// Interns `keys` and folds the rows into the aggregates: `arguments[i]` and `filters[i]`
    /// belong to aggregate `i`.
    pub fn update(
        &mut self,
        keys: &[ArrayRef],
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        rows: usize,
    ) -> Result<()> {
        self.intern(keys, rows)?;
        self.accumulate(arguments, filters)
    }

    /// Folds the rows of the last [`Self::intern`] into the aggregates: `arguments[i]` and
    /// `filters[i]` belong to aggregate `i`.
    pub fn accumulate(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        let group_ids = std::mem::take(&mut self.group_ids);
        let folded = self.fold(&group_ids, arguments, filters);
        self.group_ids = group_ids;
        folded
    }

    /// For a table without keys whose groups the caller numbers: folds rows into the groups
    /// `group_ids` names, `groups` groups in all.
    pub fn accumulate_groups(
        &mut self,
        group_ids: &[usize],
        groups: usize,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        self.groups = self.groups.max(groups);
        self.fold(group_ids, arguments, filters)
    }

    fn fold(
        &mut self,
        group_ids: &[usize],
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        for kernel in &mut self.shared {
            kernel.update(arguments, filters, group_ids, self.groups)?;
        }
        for (index, ((accumulator, arguments), filter)) in self
            .accumulators
            .iter_mut()
            .zip(arguments)
            .zip(filters)
            .enumerate()
        {
            if shared_at(&mut self.shared, index).is_none() {
                accumulator.update_batch(arguments, group_ids, filter.as_ref(), self.groups)?;
            }
        }
        Ok(())
    }

    /// Interns `keys` and merges partial aggregate states into the aggregates: `states[i]`
    /// are the state columns of aggregate `i` (as [`Self::emit_states`] gives them).
    pub fn merge(
        &mut self,
        keys: &[ArrayRef],
        states: &[Vec<ArrayRef>],
        rows: usize,
    ) -> Result<()> {
        self.intern(keys, rows)?;
        let group_ids = std::mem::take(&mut self.group_ids);
        let merged = self.merge_into(&group_ids, states);
        self.group_ids = group_ids;
        merged
    }

    /// For a table without keys whose groups the caller numbers: merges partial states into
    /// the groups `group_ids` names, `groups` groups in all.
    pub fn merge_groups(
        &mut self,
        group_ids: &[usize],
        groups: usize,
        states: &[Vec<ArrayRef>],
    ) -> Result<()> {
        self.groups = self.groups.max(groups);
        self.merge_into(group_ids, states)
    }

    fn merge_into(&mut self, group_ids: &[usize], states: &[Vec<ArrayRef>]) -> Result<()> {
        for (index, (accumulator, states)) in self.accumulators.iter_mut().zip(states).enumerate() {
            match shared_at(&mut self.shared, index) {
                Some(shared) => shared.merge(index, states, group_ids, self.groups)?,
                None => accumulator.merge_batch(states, group_ids, self.groups)?,
            }
        }
        Ok(())
    }

    /// Puts the table into a checkpoint's `state` without taking its keys out, when its keys
    /// are packed (or absent): the keys as held, and every aggregate's partial states (taken
    /// out and merged straight back into groups of the same ids). `false`: another key table,
    /// which the caller keeps by [`Self::emit_states`] and [`Self::merge`].
    pub fn snapshot_in_place(&mut self, state: &mut OperatorState) -> Result<bool> {
        match &self.keys {
            Some(Keys::Packed(packed)) if packed.is_packed() => packed.export(state),
            None => {}
            Some(_) => return Ok(false),
        }
        let groups = self.groups;
        let ids: Vec<usize> = (0..groups).collect();
        let states = self.take_states(groups)?;
        self.merge_into(&ids, &states)?;
        state.put_value("table_groups", groups as i64);
        state.put_aggregate_states("table_state", states);
        Ok(true)
    }

    /// Takes back a table [`Self::snapshot_in_place`] kept; `false` if `state` holds none.
    pub fn restore_in_place(&mut self, state: &OperatorState) -> Result<bool> {
        let Ok(groups) = state.value("table_groups") else {
            return Ok(false);
        };
        let groups = groups as usize;
        if let Some(keys) = &mut self.keys {
            let Keys::Packed(packed) = keys else {
                return internal_err!("checkpoint: packed keys for another key table");
            };
            packed.import(state)?;
        }
        self.groups = groups;
        let states = state.aggregate_states("table_state")?;
        let ids: Vec<usize> = (0..groups).collect();
        self.merge_into(&ids, &states)?;
        Ok(true)
    }

    /// Every aggregate's partial states of the first `n` groups, which leave the
    /// aggregates (not the keys).
    fn take_states(&mut self, n: usize) -> Result<Vec<Vec<ArrayRef>>> {
        let emit_to = if n == self.groups {
            EmitTo::All
        } else {
            EmitTo::First(n)
        };
        self.accumulators
            .iter_mut()
            .enumerate()
            .map(
                |(index, accumulator)| match shared_at(&mut self.shared, index) {
                    Some(shared) => shared.emit_states(index, n),
                    None => accumulator.state(emit_to),
                },
            )
            .collect()
    }

    /// The key columns and the aggregates' partial states (columns per aggregate) of the
    /// groups `emit_to` names, which leave the table.
    pub fn emit_states(&mut self, emit_to: EmitTo) -> Result<(Vec<ArrayRef>, Vec<Vec<ArrayRef>>)> {
        let states = self.take_states(self.emitted(emit_to))?;
        let keys = self.emit_keys(emit_to)?;
        Ok((keys, states))
    }

    /// The key columns and aggregate results of the groups `emit_to` names, which leave the
    /// table (the remaining groups' ids shift down).
    pub fn emit(&mut self, emit_to: EmitTo) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let n = self.emitted(emit_to);
        let results = self
            .accumulators
            .iter_mut()
            .enumerate()
            .map(
                |(index, accumulator)| match shared_at(&mut self.shared, index) {
                    Some(shared) => shared.emit(index, n),
                    None => accumulator.evaluate(emit_to),
                },
            )
            .collect::<Result<_>>()?;
        let keys = self.emit_keys(emit_to)?;
        Ok((keys, results))
    }

    /// How many groups `emit_to` names.
    fn emitted(&self, emit_to: EmitTo) -> usize {
        match emit_to {
            EmitTo::All => self.groups,
            EmitTo::First(n) => n.min(self.groups),
        }
    }

    /// Only the key columns of the groups `emit_to` names, for a table whose aggregates are
    /// kept elsewhere (only interned, never updated).
    pub fn emit_keys(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let keys = match &mut self.keys {
            Some(values) => {
                let values = values.values();
                let keys = values.emit(emit_to)?;
                if emit_to == EmitTo::All {
                    // Emitting all leaves some key tables with stale internals; clearing
                    // resets them fully.
                    values.clear_shrink(self.groups);
                }
                keys
            }
            None => Vec::new(),
        };
        self.count_out(emit_to);
        Ok(keys)
    }

    /// Lowers the group count after the groups `emit_to` names left.
    fn count_out(&mut self, emit_to: EmitTo) {
        self.groups = match emit_to {
            EmitTo::All => 0,
            EmitTo::First(n) => self.groups.saturating_sub(n),
        };
    }

    /// Drops the groups `emit_to` names from a table whose aggregates are kept elsewhere,
    /// without building their key columns where the interner can avoid it.
    pub fn discard(&mut self, emit_to: EmitTo) -> Result<()> {
        match &mut self.keys {
            Some(Keys::Windowed(values)) => {
                values.discard(emit_to)?;
                if emit_to == EmitTo::All {
                    values.clear_shrink(self.groups);
                }
                self.count_out(emit_to);
                Ok(())
            }
            _ => self.emit_keys(emit_to).map(|_| ()),
        }
    }

    /// With windowed keys: how many leading groups belong to windows starting at or before
    /// `closed_through`, and how many windows they span; `None` for other keys.
    pub fn closed_prefix(&self, closed_through: i64) -> Option<(usize, usize)> {
        match &self.keys {
            Some(Keys::Windowed(values)) => Some(values.closed_prefix(closed_through)),
            _ => None,
        }
    }

    /// With windowed keys: the smallest start among the windows that still hold groups
    /// (`Some(None)` when none does); `None` for other keys.
    pub fn oldest_open_window(&self) -> Option<Option<i64>> {
        match &self.keys {
            Some(Keys::Windowed(values)) => Some(values.oldest_open_window()),
            _ => None,
        }
    }

    /// With windowed keys: the windows opened so far; `None` for other keys.
    pub fn windows_opened(&self) -> Option<usize> {
        match &self.keys {
            Some(Keys::Windowed(values)) => Some(values.windows_opened()),
            _ => None,
        }
    }

    /// The group ids of the rows of the last [`Self::intern`] or [`Self::update`].
    pub fn last_group_ids(&self, rows: usize) -> &[usize] {
        &self.group_ids[..rows.min(self.group_ids.len())]
    }

    /// The current aggregates of `groups`, leaving the state as it is. Kernels and row
    /// accumulators read the groups asked; a group accumulator only evaluates by consuming,
    /// so its state is taken out, merged back, and merged into a fresh accumulator that is
    /// evaluated: O(groups) (a table made by [`Self::read_while_updating`] has none).
    pub fn current_values(&mut self, groups: &UInt32Array) -> Result<Vec<ArrayRef>> {
        let all: Vec<usize> = (0..self.groups).collect();
        let total = self.groups;
        self.accumulators
            .iter_mut()
            .zip(&self.aggregates)
            .enumerate()
            .map(|(index, (accumulator, aggregate))| {
                if let Some(shared) = shared_at(&mut self.shared, index) {
                    return shared.results_of(index, total, groups);
                }
                if let TableAccumulator::Rows(rows) = accumulator {
                    return rows.values_of(groups);
                }
                let state = accumulator.state(EmitTo::All)?;
                accumulator.merge_batch(&state, &all, self.groups)?;
                let mut fresh = create_accumulator(aggregate)?;
                fresh.merge_batch(&state, &all, self.groups)?;
                let values = fresh.evaluate(EmitTo::All)?;
                Ok(take(values.as_ref(), groups, None)?)
            })
            .collect()
    }

    /// After an update or interning of `rows` rows: the last row of each group they
    /// touched, in row order.
    pub fn changed_rows(&mut self, rows: usize) -> UInt32Array {
        let ids = &self.group_ids[..rows.min(self.group_ids.len())];
        self.changed.last_rows(ids)
    }

    /// For per-batch changes after an update of `rows` rows: the last row of each group the
    /// update touched (to take its keys from), and those groups' current aggregates.
    pub fn snapshot_changed(&mut self, rows: usize) -> Result<(UInt32Array, Vec<ArrayRef>)> {
        let last_rows = self.changed_rows(rows);
        let groups: UInt32Array = last_rows
            .values()
            .iter()
            .map(|&row| self.group_ids[row as usize] as u32)
            .collect();
        let values = self.current_values(&groups)?;
        Ok((last_rows, values))
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.keys.as_ref().map_or(0, Keys::size)
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
            + self.shared.iter().map(|k| k.size()).sum::<usize>()
            + self.group_ids.capacity() * std::mem::size_of::<usize>()
    }
}

/// Finds the groups a batch changed in time proportional to its rows, not to the table's
/// groups (a pass over every group after each batch made per-batch changes quadratic in
/// the groups): each group is marked with the last batch that touched it.
#[derive(Debug, Default)]
struct ChangedGroups {
    marks: Vec<u64>,
    batch: u64,
}

impl ChangedGroups {
    /// The last row of each group among `ids` (each row's group), in row order.
    fn last_rows(&mut self, ids: &[usize]) -> UInt32Array {
        self.batch += 1;
        if let Some(&largest) = ids.iter().max()
            && largest >= self.marks.len()
        {
            self.marks.resize(largest + 1, 0);
        }
        // Marks left by groups since renumbered are of earlier batches, so never this one's.
        let mut rows: Vec<u32> = Vec::new();
        for (row, &group) in ids.iter().enumerate().rev() {
            if self.marks[group] != self.batch {
                self.marks[group] = self.batch;
                rows.push(row as u32);
            }
        }
        rows.reverse();
        UInt32Array::from(rows)
    }
}

/// The kernels that hold aggregates of `aggregates` together.
/// `fewest_distinct`: the fewest COUNT(DISTINCT)s of a column counted together (see
/// [`DistinctCounts::plan`]).
fn shared_kernels(
    aggregates: &[Arc<AggregateFunctionExpr>],
    fewest_distinct: usize,
) -> Vec<Box<dyn SharedAggregates>> {
    let fused = FusedAggregates::plan(aggregates).map(|k| Box::new(k) as Box<dyn SharedAggregates>);
    let distinct = DistinctCounts::plan(aggregates, fewest_distinct)
        .map(|k| Box::new(k) as Box<dyn SharedAggregates>);
    fused.into_iter().chain(distinct).collect()
}

/// The kernel that holds aggregate `index`, if one does (else its accumulator does).
fn shared_at(
    shared: &mut [Box<dyn SharedAggregates>],
    index: usize,
) -> Option<&mut Box<dyn SharedAggregates>> {
    shared.iter_mut().find(|kernel| kernel.holds(index))
}

/// One aggregate's state in a table: DataFusion's group accumulator, or a row accumulator
/// per group (aggregates without a group accumulator, and tables read after every batch).
enum TableAccumulator {
    Groups(Box<dyn GroupsAccumulator>),
    Rows(RowAccumulators),
}

impl Deref for TableAccumulator {
    type Target = dyn GroupsAccumulator;

    fn deref(&self) -> &Self::Target {
        match self {
            TableAccumulator::Groups(groups) => groups.as_ref(),
            TableAccumulator::Rows(rows) => rows,
        }
    }
}

impl DerefMut for TableAccumulator {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            TableAccumulator::Groups(groups) => groups.as_mut(),
            TableAccumulator::Rows(rows) => rows,
        }
    }
}

/// DataFusion's group accumulator for `aggregate`, or row accumulators where it has none
/// (DataFusion's own adapter walks every group of the table per batch).
fn create_accumulator(aggregate: &Arc<AggregateFunctionExpr>) -> Result<TableAccumulator> {
    Ok(if aggregate.groups_accumulator_supported() {
        TableAccumulator::Groups(aggregate.create_groups_accumulator()?)
    } else {
        TableAccumulator::Rows(RowAccumulators::new(Arc::clone(aggregate)))
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::max_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;

    /// A table read after every batch counts a lone COUNT(DISTINCT x) in Freshet's kernel,
    /// and its current values of the changed groups are those DataFusion's accumulator
    /// gives, batch after batch.
    #[test]
    fn a_table_read_while_updating_counts_a_lone_distinct_as_datafusion() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let count_distinct = Arc::new(
            AggregateExprBuilder::new(count_udaf(), vec![col("x", &schema).unwrap()])
                .schema(Arc::clone(&schema))
                .alias("count(DISTINCT x)")
                .distinct()
                .build()
                .unwrap(),
        );
        let keys = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let aggregates = [count_distinct];
        let mut ours = GroupTable::try_new(&keys, &aggregates)
            .unwrap()
            .read_while_updating();
        let mut theirs = GroupTable::try_new(&keys, &aggregates).unwrap();
        assert_eq!((ours.shared.len(), theirs.shared.len()), (1, 0));
        for round in 0..8i64 {
            let key: ArrayRef = Arc::new(Int64Array::from_iter_values(
                (0..200).map(|i| (i * 7 + round * 13) % (20 + round * 10)),
            ));
            let x: ArrayRef = Arc::new(Int64Array::from_iter(
                (0..200).map(|i| (i % 9 != 0).then_some((i * round) % 37)),
            ));
            let arguments = [vec![x]];
            ours.update(&[Arc::clone(&key)], &arguments, &[None], 200)
                .unwrap();
            theirs.update(&[key], &arguments, &[None], 200).unwrap();
            let (rows, got) = ours.snapshot_changed(200).unwrap();
            let (same_rows, want) = theirs.snapshot_changed(200).unwrap();
            assert_eq!(rows, same_rows);
            assert_eq!(got[0].as_ref(), want[0].as_ref(), "round {round}");
        }
    }

    /// A table read after every batch holds an aggregate only DataFusion has (MAX of a
    /// string, under a FILTER) one row accumulator per group: the changed groups' values,
    /// batch after batch, and its partial states taken out and merged into another table,
    /// equal those of DataFusion's group accumulator.
    #[test]
    fn a_table_read_while_updating_reads_row_accumulators_as_datafusion() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        let max = Arc::new(
            AggregateExprBuilder::new(max_udaf(), vec![col("s", &schema).unwrap()])
                .schema(Arc::clone(&schema))
                .alias("max(s)")
                .build()
                .unwrap(),
        );
        let count = Arc::new(
            AggregateExprBuilder::new(count_udaf(), vec![col("s", &schema).unwrap()])
                .schema(Arc::clone(&schema))
                .alias("count(s)")
                .build()
                .unwrap(),
        );
        let keys = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let aggregates = [max, count];
        let mut ours = GroupTable::try_new(&keys, &aggregates)
            .unwrap()
            .read_while_updating();
        let mut theirs = GroupTable::try_new(&keys, &aggregates).unwrap();
        assert!(matches!(ours.accumulators[0], TableAccumulator::Rows(_)));
        assert!(matches!(
            theirs.accumulators[0],
            TableAccumulator::Groups(_)
        ));
        for round in 0..8i64 {
            let key: ArrayRef = Arc::new(Int64Array::from_iter_values(
                (0..200).map(|i| (i * 7 + round * 13) % (20 + round * 10)),
            ));
            let s: ArrayRef =
                Arc::new(StringArray::from_iter((0..200).map(|i| {
                    (i % 11 != 0).then(|| format!("v{}", (i * 31 + round * 17) % 97))
                })));
            let filter = BooleanArray::from_iter((0..200).map(|i| match i % 5 {
                0 => None,
                1 => Some(false),
                _ => Some(true),
            }));
            let arguments = [vec![Arc::clone(&s)], vec![s]];
            let filters = [Some(filter), None];
            ours.update(&[Arc::clone(&key)], &arguments, &filters, 200)
                .unwrap();
            theirs.update(&[key], &arguments, &filters, 200).unwrap();
            let (rows, got) = ours.snapshot_changed(200).unwrap();
            let (same_rows, want) = theirs.snapshot_changed(200).unwrap();
            assert_eq!(rows, same_rows);
            assert_eq!(got, want, "round {round}");
        }
        let (keys_out, states) = ours.emit_states(EmitTo::All).unwrap();
        let mut restored = GroupTable::try_new(&keys, &aggregates)
            .unwrap()
            .read_while_updating();
        restored
            .merge(&keys_out, &states, keys_out[0].len())
            .unwrap();
        let got = restored.emit(EmitTo::All).unwrap();
        let want = theirs.emit(EmitTo::All).unwrap();
        assert_eq!(got, want);
        assert_eq!(ours.size() > 0, restored.size() > 0);
    }

    /// Each group's last row, in row order; a group of an earlier batch (or one renumbered
    /// since, whose id another group now has) counts again in the next.
    #[test]
    fn changed_groups_are_each_group_s_last_row_in_row_order() {
        let mut changed = ChangedGroups::default();
        let rows = |array: UInt32Array| array.values().to_vec();
        assert_eq!(rows(changed.last_rows(&[3, 1, 3, 0, 1])), [2, 3, 4]);
        assert_eq!(rows(changed.last_rows(&[0, 0, 9])), [1, 2]);
        // Groups 0..2 left and the others moved down: id 0 is another group now.
        assert_eq!(rows(changed.last_rows(&[0, 7, 1, 7])), [0, 2, 3]);
        assert_eq!(rows(changed.last_rows(&[])), Vec::<u32>::new());
    }
}
