//! The rows an [`IntervalJoinExec`](super::IntervalJoinExec) puts out: pairs gathered from a
//! probing batch and the other side's kept rows (only the columns the output keeps), rows
//! of one side padded with nulls or alone, the join's filter applied to candidate pairs.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatchOptions, UInt32Array, new_null_array,
};
use datafusion::arrow::compute::{concat_batches, interleave, interleave_record_batch, take};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{JoinSide, Result, internal_err};
use datafusion::physical_plan::joins::utils::JoinFilter;

use super::KeyHasher;
use super::interval_join::TimeBound;
use super::interval_stream::SideRole;
use super::side_state::{Position, SideState};
use crate::operator_metrics::StatefulMetrics;

/// What both sides of a running join read.
pub(super) struct Common {
    pub(super) bound: TimeBound,
    pub(super) allowed_lateness: i64,
    pub(super) filter: Option<JoinFilter>,
    pub(super) join_schema: SchemaRef,
    pub(super) left_schema: SchemaRef,
    pub(super) right_schema: SchemaRef,
    pub(super) projection: Option<Vec<usize>>,
    pub(super) key_hasher: KeyHasher,
    pub(super) metrics: StatefulMetrics,
    pub(super) name: String,
    pub(super) output_schema: SchemaRef,
}

/// The pairs one probe found: rows of the probing batch and positions in the other side.
#[derive(Default)]
pub(super) struct Pairs {
    pub(super) probe: Vec<u32>,
    pub(super) kept: Vec<Position>,
}

impl Common {
    /// The last event time of a row of `side` the other side's watermark `watermark` no
    /// longer keeps: later rows of the other side, not late, are all beyond its reach.
    pub(super) fn freed_through(&self, side: JoinSide, watermark: i64) -> i64 {
        if watermark == i64::MAX {
            return i64::MAX;
        }
        watermark
            .saturating_sub(self.allowed_lateness)
            .saturating_sub(self.bound.reach(side))
            .saturating_sub(1)
    }

    /// Rows of side `which` (in `role`) that never matched, as output rows: alone in an anti
    /// join, with nulls for the other side's columns in an outer one.
    pub(super) fn unmatched(
        &self,
        which: JoinSide,
        role: SideRole,
        rows: RecordBatch,
    ) -> Result<RecordBatch> {
        match role {
            SideRole::Anti => Ok(rows.with_schema(Arc::clone(&self.join_schema))?),
            _ => self.null_padded(which, rows),
        }
    }

    /// Rows of side `which` with nulls for the other side's columns.
    pub(super) fn null_padded(&self, which: JoinSide, rows: RecordBatch) -> Result<RecordBatch> {
        let count = rows.num_rows();
        let nulls = |schema: &Schema| -> Vec<ArrayRef> {
            schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), count))
                .collect()
        };
        let columns = match which {
            JoinSide::Left => [rows.columns().to_vec(), nulls(&self.right_schema)].concat(),
            _ => [nulls(&self.left_schema), rows.columns().to_vec()].concat(),
        };
        Ok(RecordBatch::try_new(
            Arc::clone(&self.join_schema),
            columns,
        )?)
    }

    /// The pairs' rows, `batch`'s rows `pairs.probe` beside the other side's kept rows
    /// `pairs.kept`, as output rows: only the columns the output keeps are built.
    pub(super) fn paired(
        &self,
        which: JoinSide,
        batch: &RecordBatch,
        kept: &SideState,
        pairs: Pairs,
    ) -> Result<RecordBatch> {
        let left_width = self.left_schema.fields().len();
        let (probe_first, kept_first) = match which {
            JoinSide::Left => (0, left_width),
            _ => (left_width, 0),
        };
        let probe_columns = probe_first..probe_first + batch.num_columns();
        let probe_rows = UInt32Array::from(pairs.probe);
        let (kept_batches, kept_rows) = chunk_indices(kept, &pairs.kept)?;
        // Pairs that all met one kept chunk (the usual case) gather from it with `take`.
        let one_chunk_rows = match kept_batches.as_slice() {
            [_] => Some(UInt32Array::from_iter_values(
                kept_rows.iter().map(|&(_, row)| row as u32),
            )),
            _ => None,
        };
        let column = |c: usize| -> Result<ArrayRef> {
            if probe_columns.contains(&c) {
                return Ok(take(batch.column(c - probe_first), &probe_rows, None)?);
            }
            if let (Some(rows), [kept]) = (&one_chunk_rows, kept_batches.as_slice()) {
                return Ok(take(kept.column(c - kept_first), rows, None)?);
            }
            let arrays: Vec<&dyn Array> = kept_batches
                .iter()
                .map(|kept| kept.column(c - kept_first).as_ref())
                .collect();
            Ok(interleave(&arrays, &kept_rows)?)
        };
        let columns: Result<Vec<ArrayRef>> = match &self.projection {
            Some(columns) => columns.iter().map(|&c| column(c)).collect(),
            None => (0..self.join_schema.fields().len()).map(column).collect(),
        };
        let options = RecordBatchOptions::new().with_row_count(Some(probe_rows.len()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.output_schema),
            columns?,
            &options,
        )?)
    }

    /// `batch`, in the join's schema, as the output keeps it.
    pub(super) fn project(&self, batch: RecordBatch) -> Result<RecordBatch> {
        Ok(match &self.projection {
            Some(columns) => batch.project(columns)?,
            None => batch,
        })
    }

    /// The output pieces (each as the output keeps it) as one batch.
    pub(super) fn output(&self, pieces: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
        let mut pieces: Vec<RecordBatch> =
            pieces.into_iter().filter(|b| b.num_rows() > 0).collect();
        let batch = match (pieces.pop(), pieces.is_empty()) {
            (None, _) => return Ok(None),
            (Some(only), true) => only,
            (Some(last), false) => {
                pieces.push(last);
                concat_batches(&self.output_schema, &pieces)?
            }
        };
        self.metrics.baseline.record_output(batch.num_rows());
        Ok(Some(batch))
    }
}

/// `batch`'s columns at `rows`.
pub(super) fn take_columns(batch: &RecordBatch, rows: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), rows, None))
        .collect::<std::result::Result<_, _>>()?)
}

pub(super) fn take_record(batch: &RecordBatch, rows: &UInt32Array) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        batch.schema(),
        take_columns(batch, rows)?,
    )?)
}

/// The kept rows at `positions`, in that order.
pub(super) fn gather(state: &SideState, positions: &[Position]) -> Result<RecordBatch> {
    let (batches, indices) = chunk_indices(state, positions)?;
    Ok(interleave_record_batch(&batches, &indices)?)
}

/// The chunks `positions` name, and each position as `(chunk in that list, row)`.
#[allow(clippy::type_complexity)]
pub(super) fn chunk_indices<'a>(
    state: &'a SideState,
    positions: &[Position],
) -> Result<(Vec<&'a RecordBatch>, Vec<(usize, usize)>)> {
    // Per kept chunk (by sequence number from the oldest held), its place in `batches`.
    const ABSENT: usize = usize::MAX;
    let first = state.first_sequence();
    let mut slots: Vec<usize> = Vec::new();
    let mut batches = Vec::new();
    let mut indices = Vec::with_capacity(positions.len());
    for position in positions {
        let Some(offset) = position.chunk.checked_sub(first).map(|o| o as usize) else {
            return internal_err!("interval join: a freed chunk was referenced");
        };
        if slots.len() <= offset {
            slots.resize(offset + 1, ABSENT);
        }
        if slots[offset] == ABSENT {
            let Some(chunk) = state.chunk(position.chunk) else {
                return internal_err!("interval join: a freed chunk was referenced");
            };
            batches.push(&chunk.batch);
            slots[offset] = batches.len() - 1;
        }
        indices.push((slots[offset], position.row as usize));
    }
    Ok((batches, indices))
}

/// The pairs for which the join's filter is true. The filter reads columns of both sides,
/// gathered per pair into its own schema.
pub(super) fn apply_filter(
    filter: &JoinFilter,
    probing: JoinSide,
    batch: &RecordBatch,
    state: &SideState,
    pairs: Pairs,
) -> Result<Pairs> {
    let probe_rows = UInt32Array::from(pairs.probe.clone());
    let (batches, indices) = chunk_indices(state, &pairs.kept)?;
    let columns = filter
        .column_indices()
        .iter()
        .map(|column| {
            if column.side == probing {
                Ok(take(
                    batch.column(column.index).as_ref(),
                    &probe_rows,
                    None,
                )?)
            } else {
                let arrays: Vec<&dyn Array> = batches
                    .iter()
                    .map(|b| b.column(column.index).as_ref())
                    .collect();
                Ok(interleave(&arrays, &indices)?)
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let intermediate = RecordBatch::try_new(Arc::clone(filter.schema()), columns)?;
    let verdict = filter
        .expression()
        .evaluate(&intermediate)?
        .into_array(intermediate.num_rows())?;
    let Some(verdict) = verdict.as_any().downcast_ref::<BooleanArray>() else {
        return internal_err!("a join filter gave {}", verdict.data_type());
    };
    let mut kept = Pairs::default();
    for (index, pass) in verdict.iter().enumerate() {
        if pass == Some(true) {
            kept.probe.push(pairs.probe[index]);
            kept.kept.push(pairs.kept[index]);
        }
    }
    Ok(kept)
}
