//! [`DistinctCounts`]: the `COUNT(DISTINCT x)` aggregates of a group table that count the
//! same Int64 column under different FILTERs, sharing one table of the (group, value) pairs
//! they have seen.
//!
//! DataFusion's `COUNT(DISTINCT x)` keeps a set of (group, value) pairs per aggregate and
//! looks every admitted row up in it. Nexmark q15 and q16 count the distinct bidders and
//! auctions of each day four times each — all of them, and those of each of three price
//! ranges —, so every row is looked up in six sets, mostly missing the cache. Here the
//! aggregates of one column share one set of pairs ([`SeenPairs`]: a byte per value of each
//! group's range while the values are dense, else a hash table) whose entries carry a bit per
//! aggregate: a row is looked up once, with the bits of the aggregates whose FILTER admits
//! it, and each bit the entry did not have yet counts the row's group for its aggregate. A
//! pair is stored once however many aggregates saw it.
//!
//! Results and partial states are DataFusion's (a count per group; the list of a group's
//! distinct values), so either side of a two-phase aggregation may be DataFusion's
//! accumulators. Emitting the first `n` groups takes each aggregate's counts as it is asked
//! for them; once every aggregate of the column has been, the pairs of those groups leave
//! the table and the others' groups shift down, as the group table's ids do.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, ListArray, UInt32Array,
};
use datafusion::arrow::buffer::{OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type};
use datafusion::common::{Result, internal_err};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::builtin::BuiltinAggregate;
use super::distinct_pairs::SeenPairs;
use super::shared::{Placement, SharedAggregates};

/// Aggregates one table's entry can carry a bit for.
const MOST_MEMBERS: usize = 8;

/// The shared DISTINCT counts of a group table, by argument column.
#[derive(Debug)]
pub(crate) struct DistinctCounts {
    columns: Vec<DistinctColumn>,
    placement: Placement,
}

/// The aggregates counting one column's distinct values, and the pairs they have seen.
#[derive(Debug)]
struct DistinctColumn {
    /// The aggregates counted here, in their table order; member `m` is bit `1 << m`.
    members: Vec<usize>,
    /// Each (group, value) pair seen, with the members that have counted it.
    seen: SeenPairs,
    /// Per member, its count of each group.
    counts: Vec<Vec<i64>>,
    /// The table's group count, as last given.
    groups: usize,
    /// The members whose first groups have been emitted in the current emission.
    emitted: u8,
}

impl DistinctCounts {
    /// The aggregates of `aggregates` to count here, or `None` where no column has
    /// `fewest` (a table whose values are only read at the end counts a lone aggregate in
    /// DataFusion's accumulator, the reference, as sharing gains it nothing; one read after
    /// every batch counts it here, as DataFusion's gives values only by handing out its
    /// whole state).
    pub fn plan(aggregates: &[Arc<AggregateFunctionExpr>], fewest: usize) -> Option<Self> {
        let mut columns: Vec<Vec<usize>> = Vec::new();
        for (index, aggregate) in aggregates.iter().enumerate() {
            if !counts_distinct_int64(aggregate) {
                continue;
            }
            let argument = &aggregate.expressions()[0];
            let same = columns.iter_mut().find(|members| {
                members.len() < MOST_MEMBERS
                    && aggregates[members[0]].expressions()[0].as_ref() == argument.as_ref()
            });
            match same {
                Some(members) => members.push(index),
                None => columns.push(vec![index]),
            }
        }
        columns.retain(|members| members.len() >= fewest.max(1));
        if columns.is_empty() {
            return None;
        }
        let placement = Placement::new(aggregates.len(), columns.iter().cloned());
        let columns = columns
            .into_iter()
            .map(|members| DistinctColumn {
                counts: vec![Vec::new(); members.len()],
                members,
                seen: SeenPairs::default(),
                groups: 0,
                emitted: 0,
            })
            .collect();
        Some(Self { columns, placement })
    }
}

impl SharedAggregates for DistinctCounts {
    fn holds(&self, index: usize) -> bool {
        self.placement.holds(index)
    }

    fn update(
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

    /// The partial states are a list of distinct values per row.
    fn merge(
        &mut self,
        index: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        let (column, member) = self.placement.of(index)?;
        let [lists] = states else {
            return internal_err!("COUNT(DISTINCT) has one state column");
        };
        self.columns[column].merge(member, lists.as_list::<i32>(), groups, total)
    }

    fn emit(&mut self, index: usize, n: usize) -> Result<ArrayRef> {
        let (column, member) = self.placement.of(index)?;
        let counts = self.columns[column].take_counts(member, n)?;
        Ok(Arc::new(Int64Array::from(counts)))
    }

    fn emit_states(&mut self, index: usize, n: usize) -> Result<Vec<ArrayRef>> {
        let (column, member) = self.placement.of(index)?;
        let column = &mut self.columns[column];
        let lists = column.values_of(member, n)?;
        column.take_counts(member, n)?;
        Ok(vec![lists])
    }

    fn results_of(&mut self, index: usize, total: usize, groups: &UInt32Array) -> Result<ArrayRef> {
        let (column, member) = self.placement.of(index)?;
        let counts = &mut self.columns[column].counts[member];
        counts.resize(counts.len().max(total), 0);
        let counts = &counts[..total];
        // Read where the groups are, in time proportional to them: this is asked after
        // every batch.
        let values = groups
            .values()
            .iter()
            .map(|&group| counts.get(group as usize).copied())
            .collect::<Option<Vec<i64>>>();
        match values {
            Some(values) => Ok(Arc::new(Int64Array::from(values))),
            None => internal_err!("COUNT(DISTINCT) of a group past the {total} held"),
        }
    }

    fn size(&self) -> usize {
        self.columns
            .iter()
            .map(|column| {
                column.seen.size()
                    + column
                        .counts
                        .iter()
                        .map(|c| c.capacity() * size_of::<i64>())
                        .sum::<usize>()
            })
            .sum()
    }
}

/// Whether `aggregate` is DataFusion's `COUNT(DISTINCT x)` of an Int64 `x` (its partial
/// state then is a list of Int64 values).
fn counts_distinct_int64(aggregate: &AggregateFunctionExpr) -> bool {
    let int64_list = DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)));
    aggregate.is_distinct()
        && aggregate.order_bys().is_empty()
        && aggregate.expressions().len() == 1
        && BuiltinAggregate::of(aggregate) == Some(BuiltinAggregate::Count)
        && aggregate.state_fields().is_ok_and(
            |fields| matches!(fields.as_slice(), [field] if field.data_type() == &int64_list),
        )
}

impl DistinctColumn {
    fn grow(&mut self, total: usize) -> Result<()> {
        if u32::try_from(total).is_err() {
            return internal_err!("COUNT(DISTINCT) of more than {} groups", u32::MAX);
        }
        self.groups = self.groups.max(total);
        for counts in &mut self.counts {
            if counts.len() < total {
                counts.resize(total, 0);
            }
        }
        Ok(())
    }

    fn update(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        self.grow(total)?;
        let Some(values) = arguments.get(self.members[0]).and_then(|a| a.first()) else {
            return internal_err!("COUNT(DISTINCT) without its argument");
        };
        let values = values.as_primitive::<Int64Type>();
        // Each row's members: those whose FILTER admits it, where its value is not null.
        let mut admitted = vec![0u8; values.len()];
        for (member, &aggregate) in self.members.iter().enumerate() {
            let bit = 1u8 << member;
            match filters.get(aggregate).and_then(Option::as_ref) {
                Some(filter) => {
                    for (row, passes) in filter.iter().enumerate() {
                        if passes == Some(true) {
                            admitted[row] |= bit;
                        }
                    }
                }
                None => admitted.iter_mut().for_each(|members| *members |= bit),
            }
        }
        if let Some(nulls) = values.nulls() {
            for row in nulls
                .iter()
                .enumerate()
                .filter_map(|(r, v)| (!v).then_some(r))
            {
                admitted[row] = 0;
            }
        }
        for ((&members, &group), &value) in admitted.iter().zip(groups).zip(values.values()) {
            if members != 0 {
                self.insert(group, value, members);
            }
        }
        Ok(())
    }

    /// Counts `value` for `group` in each of `members` that has not counted it yet.
    fn insert(&mut self, group: usize, value: i64, members: u8) {
        // `grow` bounds the groups to u32.
        let mut new = self.seen.add(group, value, members);
        while new != 0 {
            self.counts[new.trailing_zeros() as usize][group] += 1;
            new &= new - 1;
        }
    }

    fn merge(
        &mut self,
        member: usize,
        lists: &ListArray,
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        self.grow(total)?;
        let values = lists.values().as_primitive::<Int64Type>();
        let offsets = lists.offsets();
        for (row, &group) in groups.iter().enumerate() {
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            for index in start..end {
                if values.is_valid(index) {
                    self.insert(group, values.value(index), 1 << member);
                }
            }
        }
        Ok(())
    }

    /// Member `member`'s distinct values of each of the first `n` groups, as DataFusion's
    /// partial state: a list per group. A group's count is its number of values.
    fn values_of(&mut self, member: usize, n: usize) -> Result<ArrayRef> {
        self.grow(n)?;
        let counts = &self.counts[member][..n];
        let offsets = OffsetBuffer::<i32>::from_lengths(counts.iter().map(|&c| c as usize));
        let mut next: Vec<usize> = offsets[..n].iter().map(|&o| o as usize).collect();
        let mut values = vec![0i64; offsets[n] as usize];
        let bit = 1u8 << member;
        self.seen.for_each(|group, value, members| {
            if group < n && members & bit != 0 {
                values[next[group]] = value;
                next[group] += 1;
            }
        });
        Ok(Arc::new(ListArray::new(
            Arc::new(Field::new_list_field(DataType::Int64, true)),
            offsets,
            Arc::new(Int64Array::new(ScalarBuffer::from(values), None)),
            None,
        )))
    }

    /// Member `member`'s counts of the first `n` groups, which leave it; once every member
    /// has given them, the pairs of those groups leave the table.
    fn take_counts(&mut self, member: usize, n: usize) -> Result<Vec<i64>> {
        self.grow(n)?;
        let counts = self.counts[member].drain(..n).collect();
        self.emitted |= 1 << member;
        if self.emitted.count_ones() as usize == self.members.len() {
            self.emitted = 0;
            self.drop_first_groups(n);
        }
        Ok(counts)
    }

    fn drop_first_groups(&mut self, n: usize) {
        self.seen.drop_first_groups(n, self.groups);
        self.groups = self.groups.saturating_sub(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Schema, SchemaRef};
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("y", DataType::Int64, true),
        ]))
    }

    fn count_distinct(column: &str) -> Arc<AggregateFunctionExpr> {
        let schema = schema();
        Arc::new(
            AggregateExprBuilder::new(count_udaf(), vec![col(column, &schema).unwrap()])
                .schema(schema)
                .alias(format!("count(DISTINCT {column})"))
                .distinct()
                .build()
                .unwrap(),
        )
    }

    /// A batch of `rows` rows: groups, values of x with nulls, and three filters (one of
    /// them with nulls), drawn from `seed`.
    fn batch(seed: u64, rows: usize, groups: usize) -> (Vec<usize>, ArrayRef, Vec<BooleanArray>) {
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let group_ids = (0..rows).map(|_| next() as usize % groups).collect();
        let values: ArrayRef = Arc::new(Int64Array::from_iter(
            (0..rows).map(|_| (next() % 11 != 0).then(|| (next() % 40) as i64 - 20)),
        ));
        let filters = (0..3)
            .map(|f| {
                BooleanArray::from_iter(
                    (0..rows).map(|_| (f != 2 || next() % 9 != 0).then(|| next() % 3 != 0)),
                )
            })
            .collect();
        (group_ids, values, filters)
    }

    /// Four COUNT(DISTINCT x) (one without FILTER) and one of y, here and in DataFusion's
    /// accumulators, fed the same batches; compared after each emission of the first
    /// groups, and partial states sent through a fresh table and back.
    #[test]
    fn counts_as_datafusion_through_updates_merges_and_emissions() -> Result<()> {
        let aggregates: Vec<_> = ["x", "x", "x", "x", "y"]
            .into_iter()
            .map(count_distinct)
            .collect();
        let mut ours = DistinctCounts::plan(&aggregates, 2).expect("four counts of x");
        assert!((0..4).all(|i| ours.holds(i)));
        assert!(!ours.holds(4), "one count of y is DataFusion's");
        let mut theirs: Vec<Box<dyn GroupsAccumulator>> = aggregates[..4]
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect::<Result<_>>()?;
        let mut total = 0;
        for round in 0..6u64 {
            let groups = 7 + round as usize * 3;
            total = total.max(groups);
            let (group_ids, values, filters) = batch(round + 1, 500, groups);
            let arguments = vec![vec![Arc::clone(&values)]; 5];
            let filters: Vec<Option<BooleanArray>> = [None]
                .into_iter()
                .chain(filters.into_iter().map(Some))
                .chain([None])
                .collect();
            ours.update(&arguments, &filters, &group_ids, total)?;
            for (index, accumulator) in theirs.iter_mut().enumerate() {
                accumulator.update_batch(
                    &arguments[index],
                    &group_ids,
                    filters[index].as_ref(),
                    total,
                )?;
            }
            if round % 2 == 1 {
                // The first three groups leave, as a window's would.
                for (index, accumulator) in theirs.iter_mut().enumerate() {
                    let expected = accumulator.evaluate(EmitTo::First(3))?;
                    assert_eq!(ours.emit(index, 3)?.as_ref(), expected.as_ref(), "{round}");
                }
                total -= 3;
            }
            if round == 4 {
                // Partial states out and merged into a fresh table, as a checkpoint does.
                let states: Vec<_> = (0..4)
                    .map(|index| ours.emit_states(index, total))
                    .collect::<Result<_>>()?;
                let ids: Vec<usize> = (0..total).collect();
                for (index, state) in states.iter().enumerate() {
                    ours.merge(index, state, &ids, total)?;
                }
            }
        }
        let probe = UInt32Array::from_iter_values(0..total as u32);
        for (index, accumulator) in theirs.iter_mut().enumerate() {
            let current = ours.results_of(index, total, &probe)?;
            let expected = accumulator.evaluate(EmitTo::All)?;
            assert_eq!(current.as_ref(), expected.as_ref());
            assert_eq!(ours.emit(index, total)?.as_ref(), expected.as_ref());
        }
        assert!(ours.columns[0].seen.is_empty());
        Ok(())
    }

    #[test]
    fn partial_states_merge_into_datafusion_s_accumulator() -> Result<()> {
        let aggregates: Vec<_> = ["x", "x"].into_iter().map(count_distinct).collect();
        let mut ours = DistinctCounts::plan(&aggregates, 2).expect("two counts of x");
        let (group_ids, values, filters) = batch(99, 300, 5);
        let arguments = vec![vec![values]; 2];
        let filters = vec![None, Some(filters[0].clone())];
        ours.update(&arguments, &filters, &group_ids, 5)?;
        let mut direct = aggregates[1].create_groups_accumulator()?;
        direct.update_batch(&arguments[1], &group_ids, filters[1].as_ref(), 5)?;
        let states = ours.emit_states(1, 5)?;
        let mut merged = aggregates[1].create_groups_accumulator()?;
        merged.merge_batch(&states, &[0, 1, 2, 3, 4], 5)?;
        assert_eq!(
            merged.evaluate(EmitTo::All)?.as_ref(),
            direct.evaluate(EmitTo::All)?.as_ref()
        );
        Ok(())
    }
}
