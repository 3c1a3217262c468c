//! [`RowAccumulators`]: a `GroupsAccumulator` made of one DataFusion row `Accumulator` per
//! group, for aggregates without a group accumulator of their own and for tables read after
//! every batch (EMIT CHANGES per batch), whose changed groups' values are evaluated one group
//! at a time ([`RowAccumulators::values_of`]) while the others stay as they are.
//!
//! Per batch, the rows a group's filter admits are ordered by group with a counting sort over
//! the groups the batch reaches (a mark per group says which batch last reached it, so
//! nothing walks the groups the batch left alone), each argument column is gathered once in
//! that order, and each reached group's accumulator folds its slice. The bytes held are
//! adjusted by each touched accumulator's change in size, so reading them costs nothing.
//! (DataFusion's `GroupsAccumulatorAdapter` does the same work but walks every group of the
//! table per batch, and evaluates only by taking groups out: a pass over the table per batch.)

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array, new_empty_array};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::{Accumulator, EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::take_rows::take_rows;

/// See the module documentation.
pub(crate) struct RowAccumulators {
    aggregate: Arc<AggregateFunctionExpr>,
    /// One accumulator per group, by group id.
    groups: Vec<Box<dyn Accumulator>>,
    /// Bytes the accumulators hold, kept as they change.
    bytes: usize,
    order: BatchOrder,
}

impl std::fmt::Debug for RowAccumulators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowAccumulators")
            .field("aggregate", &self.aggregate.name())
            .field("groups", &self.groups.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl RowAccumulators {
    pub fn new(aggregate: Arc<AggregateFunctionExpr>) -> Self {
        Self {
            aggregate,
            groups: Vec::new(),
            bytes: 0,
            order: BatchOrder::default(),
        }
    }

    /// The current values of `groups` (which stay): each group's accumulator evaluated.
    pub fn values_of(&mut self, groups: &UInt32Array) -> Result<ArrayRef> {
        let mut values = Vec::with_capacity(groups.len());
        for &group in groups.values() {
            let group = group as usize;
            if group >= self.groups.len() {
                self.grow(group + 1)?;
            }
            values.push(self.groups[group].evaluate()?);
        }
        self.to_array(values)
    }

    fn grow(&mut self, total: usize) -> Result<()> {
        while self.groups.len() < total {
            let accumulator = self.aggregate.create_accumulator()?;
            self.bytes += accumulator.size();
            self.groups.push(accumulator);
        }
        Ok(())
    }

    fn to_array(&self, values: Vec<ScalarValue>) -> Result<ArrayRef> {
        if values.is_empty() {
            return Ok(new_empty_array(self.aggregate.field().data_type()));
        }
        ScalarValue::iter_to_array(values)
    }

    /// The state columns of the accumulators' `states`, one row each.
    fn state_columns(
        &self,
        states: impl Iterator<Item = Result<Vec<ScalarValue>>>,
    ) -> Result<Vec<ArrayRef>> {
        let fields = self.aggregate.state_fields()?;
        let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::new(); fields.len()];
        for state in states {
            let state = state?;
            if state.len() != columns.len() {
                return internal_err!(
                    "{} gave {} state values, its fields are {}",
                    self.aggregate.name(),
                    state.len(),
                    columns.len()
                );
            }
            for (column, value) in columns.iter_mut().zip(state) {
                column.push(value);
            }
        }
        columns
            .into_iter()
            .zip(&fields)
            .map(|(values, field)| match values.is_empty() {
                true => Ok(new_empty_array(field.data_type())),
                false => ScalarValue::iter_to_array(values),
            })
            .collect()
    }

    /// Folds `columns` into the groups of their rows (`group_ids`), the rows `filter`
    /// admits, by `fold`.
    fn fold(
        &mut self,
        columns: &[ArrayRef],
        group_ids: &[usize],
        filter: Option<&BooleanArray>,
        total: usize,
        fold: impl Fn(&mut dyn Accumulator, &[ArrayRef]) -> Result<()>,
    ) -> Result<()> {
        self.grow(total)?;
        let Some(rows) = self.order.arrange(group_ids, filter, total) else {
            return Ok(());
        };
        let gathered = columns
            .iter()
            .map(|column| take_rows(column.as_ref(), &rows))
            .collect::<Result<Vec<_>>>()?;
        let mut slices = Vec::with_capacity(gathered.len());
        for (group, start, end) in self.order.runs() {
            slices.clear();
            slices.extend(gathered.iter().map(|c| c.slice(start, end - start)));
            let accumulator = &mut self.groups[group];
            let before = accumulator.size();
            fold(accumulator.as_mut(), &slices)?;
            self.bytes = (self.bytes + accumulator.size()).saturating_sub(before);
        }
        Ok(())
    }

    /// The first groups `emit_to` names, which leave.
    fn take(&mut self, emit_to: EmitTo) -> Vec<Box<dyn Accumulator>> {
        let taken = emit_to.take_needed(&mut self.groups);
        let freed: usize = taken.iter().map(|a| a.size()).sum();
        self.bytes = self.bytes.saturating_sub(freed);
        taken
    }
}

impl GroupsAccumulator for RowAccumulators {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.fold(
            values,
            group_indices,
            opt_filter,
            total_num_groups,
            |accumulator, values| accumulator.update_batch(values),
        )
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let values = self
            .take(emit_to)
            .iter_mut()
            .map(|accumulator| accumulator.evaluate())
            .collect::<Result<Vec<_>>>()?;
        self.to_array(values)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let taken = self.take(emit_to);
        self.state_columns(taken.into_iter().map(|mut accumulator| accumulator.state()))
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.fold(
            values,
            group_indices,
            None,
            total_num_groups,
            |accumulator, states| accumulator.merge_batch(states),
        )
    }

    /// Each row's partial state, from an accumulator of its own.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = values.first().map_or(0, |v| v.len());
        self.state_columns((0..rows).map(|row| {
            let mut accumulator = self.aggregate.create_accumulator()?;
            if opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row)) {
                let row_values: Vec<ArrayRef> = values.iter().map(|v| v.slice(row, 1)).collect();
                accumulator.update_batch(&row_values)?;
            }
            accumulator.state()
        }))
    }

    fn size(&self) -> usize {
        self.bytes + self.groups.capacity() * size_of::<Box<dyn Accumulator>>() + self.order.size()
    }
}

/// A batch's admitted rows ordered by group: the groups it reaches, in order of their first
/// row, each with its run of rows.
#[derive(Debug, Default)]
struct BatchOrder {
    /// Per group id: the last batch that reached it, and its place among that batch's groups.
    marks: Vec<(u64, u32)>,
    batch: u64,
    /// This batch's groups, in order of first row, and each one's row count then end.
    reached: Vec<usize>,
    ends: Vec<u32>,
}

impl BatchOrder {
    /// The admitted rows, ordered by group (counting sort over the reached groups); `None`
    /// when no row is admitted.
    fn arrange(
        &mut self,
        group_ids: &[usize],
        filter: Option<&BooleanArray>,
        total: usize,
    ) -> Option<UInt32Array> {
        self.batch += 1;
        if self.marks.len() < total {
            self.marks.resize(total, (0, 0));
        }
        self.reached.clear();
        self.ends.clear();
        let admitted = |row: usize| filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        // Each row's place among the batch's groups, counted per group.
        let mut places = Vec::with_capacity(group_ids.len());
        for (row, &group) in group_ids.iter().enumerate() {
            if !admitted(row) {
                places.push(u32::MAX);
                continue;
            }
            let mark = &mut self.marks[group];
            if mark.0 != self.batch {
                *mark = (self.batch, self.reached.len() as u32);
                self.reached.push(group);
                self.ends.push(0);
            }
            self.ends[mark.1 as usize] += 1;
            places.push(mark.1);
        }
        if self.reached.is_empty() {
            return None;
        }
        // Counts become starts, rows are placed, and starts advance to ends.
        let mut start = 0;
        for end in &mut self.ends {
            let count = *end;
            *end = start;
            start += count;
        }
        let mut rows = vec![0u32; start as usize];
        for (row, &place) in places.iter().enumerate() {
            if place != u32::MAX {
                let next = &mut self.ends[place as usize];
                rows[*next as usize] = row as u32;
                *next += 1;
            }
        }
        Some(UInt32Array::from(rows))
    }

    /// The reached groups with their runs of the arranged rows: (group, start, end).
    fn runs(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|&e| e as usize));
        self.reached
            .iter()
            .zip(starts.zip(self.ends.iter()))
            .map(|(&group, (start, &end))| (group, start, end as usize))
    }

    fn size(&self) -> usize {
        self.marks.capacity() * size_of::<(u64, u32)>()
            + self.reached.capacity() * size_of::<usize>()
            + self.ends.capacity() * size_of::<u32>()
    }
}
