//! [`Lookahead`]: completing rows that read following rows (LEAD, frames ending
//! `m FOLLOWING`).
//!
//! With a lookahead of `L` rows, the row at position `p` of a key is complete when the row at
//! `q = p + L` arrives, or when the input ends. The kernels run at `q` for `p` (see
//! `functions`), and this module supplies what belongs to `p`: its input columns (a history
//! of whole rows, `L` deep per key), its ORDER BY value, its position, and the choice of the
//! rows that complete something (`q ≥ L`). At the end of the input each key gets `L` virtual
//! rows without values, which complete its last rows: frames are cut at the key's last real
//! row, and a LEAD past it takes its default. A key that expires for idleness is completed
//! the same way.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, Scalar, StructArray, UInt32Array,
    new_null_array,
};
use datafusion::arrow::compute::kernels::zip::zip;
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::common::Result;

use super::functions::{OverFunction, OverFunctionKind, OverKernel};
use super::history::{PrimitiveHistory, ValueHistory};
use crate::checkpoint::{StateReader, StateWriter};

/// See the module documentation.
#[derive(Debug)]
pub struct Lookahead {
    rows: u64,
    row_delay: ValueHistory,
    time_delay: PrimitiveHistory<Int64Type>,
    /// The input rows as one struct column.
    row_type: DataType,
}

/// Rows processed together: their input rows (a struct column), the functions' arguments,
/// keys, positions and ORDER BY values.
pub struct CompletingRows<'a> {
    pub rows: ArrayRef,
    pub arguments: Vec<Option<ArrayRef>>,
    pub groups: &'a [usize],
    pub positions: &'a [u64],
    pub times: &'a Int64Array,
}

impl Lookahead {
    pub fn new(rows: u64, input_schema: &SchemaRef) -> Self {
        Self {
            rows,
            row_delay: ValueHistory::new(rows as usize, None),
            time_delay: PrimitiveHistory::new(rows as usize, None),
            row_type: DataType::Struct(input_schema.fields().clone()),
        }
    }

    /// Rows of lookahead.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The input rows of `batch_columns` as one struct column.
    pub fn rows_of(&self, columns: &[ArrayRef], len: usize) -> Result<ArrayRef> {
        let DataType::Struct(fields) = &self.row_type else {
            return Ok(new_null_array(&self.row_type, len));
        };
        Ok(Arc::new(StructArray::try_new(
            fields.clone(),
            columns.to_vec(),
            None,
        )?))
    }

    /// `len` rows without values, for the end of the input.
    pub fn virtual_rows(&self, len: usize) -> ArrayRef {
        new_null_array(&self.row_type, len)
    }

    /// The output columns for the rows that `rows` complete: their input columns, then one
    /// column per function. `tail` (at the end of the input: each key's real row count)
    /// marks LEADs that reach past a key's last row.
    pub fn complete(
        &mut self,
        functions: &[OverFunction],
        kernels: &mut [OverKernel],
        rows: CompletingRows<'_>,
        tail: Option<&[u64]>,
    ) -> Result<Vec<ArrayRef>> {
        let lookahead = self.rows;
        let back = move |q: u64| q.checked_sub(lookahead);
        let none = None;
        let completed_rows = self.row_delay.gather(
            &rows.rows,
            rows.groups,
            rows.positions,
            &new_null_array(&self.row_type, 1),
            back,
        )?;
        let completed_times =
            self.time_delay
                .gather(rows.times, rows.groups, rows.positions, none, back);
        let emitted: Vec<u32> = rows
            .positions
            .iter()
            .enumerate()
            .filter(|(_, q)| **q >= lookahead)
            .map(|(row, _)| row as u32)
            .collect();
        let emitted_groups: Vec<usize> = emitted.iter().map(|r| rows.groups[*r as usize]).collect();
        let completed_positions: Vec<u64> = emitted
            .iter()
            .map(|r| rows.positions[*r as usize] - lookahead)
            .collect();
        let emitted = UInt32Array::from(emitted);
        let completed_times = take(&completed_times, &emitted, None)?;
        let completed_times = completed_times.as_primitive::<Int64Type>();
        let completed_rows = take(completed_rows.as_ref(), &emitted, None)?;
        let mut columns: Vec<ArrayRef> = completed_rows.as_struct().columns().to_vec();
        for ((function, kernel), argument) in functions
            .iter()
            .zip(kernels.iter_mut())
            .zip(&rows.arguments)
        {
            let column = if function.is_ranking() {
                kernel.evaluate(
                    function,
                    lookahead,
                    None,
                    &emitted_groups,
                    &completed_positions,
                    completed_times.values(),
                )?
            } else {
                let all = kernel.evaluate(
                    function,
                    lookahead,
                    argument.as_ref(),
                    rows.groups,
                    rows.positions,
                    rows.times.values(),
                )?;
                take(all.as_ref(), &emitted, None)?
            };
            let column = match (tail, &function.kind) {
                (Some(counts), OverFunctionKind::Lead { offset, default })
                    if !default.is_null() =>
                {
                    // Past the key's last row: the default, not the virtual row's null.
                    let past_end: BooleanArray = emitted_groups
                        .iter()
                        .zip(&completed_positions)
                        .map(|(group, p)| Some(p + offset >= counts[*group]))
                        .collect();
                    let default = default.cast_to(column.data_type())?.to_array()?;
                    zip(&past_end, &Scalar::new(default), &column)?
                }
                _ => column,
            };
            columns.push(column);
        }
        Ok(columns)
    }

    /// Writes the rows waiting for their following rows, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        self.row_delay.persist_keys(out);
        self.time_delay.persist_keys(out);
    }

    /// Takes back what [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        self.row_delay.restore_keys(input)?;
        self.time_delay.restore_keys(input)
    }

    /// Forgets the keys `expired` marks, renumbering the others in order.
    pub fn retain_keys(&mut self, expired: &[bool]) {
        self.row_delay.retain_keys(expired);
        self.time_delay.retain_keys(expired);
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.row_delay.size() + self.time_delay.size()
    }
}
