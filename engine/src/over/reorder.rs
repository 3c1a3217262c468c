//! [`ReorderBuffer`]: holds rows until the watermark says no earlier row can still come,
//! then releases them in arrival order; [`sort_by_time`] puts released rows in ORDER BY
//! order, ties in arrival order, when the caller finds them out of order.
//!
//! Ordered input costs nothing: batches wholly released leave as they came, and the rows
//! released of a batch the watermark cuts are filtered out. Released batches stay apart
//! when their rows are in time order across them, so that a watermark that releases many
//! rows at once (one from a lagging source partition) is computed a batch at a time;
//! otherwise they are concatenated for [`sort_by_time`].

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, AsArray, BooleanArray, Int64Array, UInt32Array, UInt64Array,
};
use datafusion::arrow::compute::kernels::cmp::{lt, lt_eq};
use datafusion::arrow::compute::{
    concat, concat_batches, filter, filter_record_batch, take_record_batch,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

use crate::checkpoint::OperatorState;
use crate::watermark::{event_times, time_range};

/// Rows and their ORDER BY values.
pub struct Released {
    pub batch: RecordBatch,
    pub times: Int64Array,
}

/// See the module documentation.
#[derive(Debug)]
pub struct ReorderBuffer {
    schema: SchemaRef,
    /// Batches with their times and their newest time.
    pending: Vec<(RecordBatch, Int64Array, i64)>,
    rows: usize,
}

impl ReorderBuffer {
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            pending: Vec::new(),
            rows: 0,
        }
    }

    /// Holds `batch`, whose rows have the non-null ORDER BY values `times`, the newest
    /// `newest` (the caller has it from checking for late rows).
    pub fn push(&mut self, batch: RecordBatch, times: Int64Array, newest: i64) {
        if batch.num_rows() > 0 {
            self.rows += batch.num_rows();
            self.pending.push((batch, times, newest));
        }
    }

    /// Holds the rows of `batch` whose ORDER BY values `times` are not null and not below
    /// `watermark` (such a row would have to leave before rows already released); returns
    /// the mask of the late rows, when some are.
    pub fn push_in_time(
        &mut self,
        batch: &RecordBatch,
        times: &Int64Array,
        watermark: i64,
    ) -> Result<Option<BooleanArray>> {
        // One pass for the range: no row is late when the oldest is not (the usual case,
        // without building a mask), and the buffer releases by the newest.
        let Some((oldest, newest)) = time_range(times) else {
            return Ok(None);
        };
        let late = if oldest < watermark {
            Some(lt(times, &Int64Array::new_scalar(watermark))?)
        } else {
            None
        };
        let late = late.filter(|late| late.true_count() > 0);
        if times.null_count() == 0 && late.is_none() {
            self.push(batch.clone(), times.clone(), newest);
        } else {
            // Keep rows that have a time and are not late.
            let keep: BooleanArray = match &late {
                Some(late) => late.iter().map(|l| Some(l == Some(false))).collect(),
                None => times.iter().map(|t| Some(t.is_some())).collect(),
            };
            let kept_times = filtered(times, &keep)?;
            self.push(filter_record_batch(batch, &keep)?, kept_times, newest);
        }
        Ok(late)
    }

    /// The batches waiting, oldest first: what a checkpoint keeps.
    pub fn pending(&self) -> impl Iterator<Item = &RecordBatch> {
        self.pending.iter().map(|(batch, _, _)| batch)
    }

    /// Puts the rows waiting into `state`, batch by batch: what a checkpoint keeps.
    pub fn snapshot_into(&self, state: &mut OperatorState) -> Result<()> {
        let waiting = concat_batches(&self.schema, self.pending())?;
        for (index, column) in waiting.columns().iter().enumerate() {
            state.put_array(format!("waiting_column_{index:03}"), Arc::clone(column));
        }
        let lengths = self.pending().map(|batch| batch.num_rows() as u64);
        state.put_array(
            "waiting_batches",
            Arc::new(UInt64Array::from_iter_values(lengths)),
        );
        Ok(())
    }

    /// Takes back the rows [`Self::snapshot_into`] kept, whose times are column `time`.
    pub fn restore_from(&mut self, state: &OperatorState, time: usize) -> Result<()> {
        let waiting = RecordBatch::try_new(
            Arc::clone(&self.schema),
            state.arrays_with_prefix("waiting_column_"),
        )?;
        let lengths = state
            .array("waiting_batches")?
            .as_primitive::<UInt64Type>()
            .clone();
        let mut offset = 0;
        for length in lengths.values().iter().map(|&l| l as usize) {
            let batch = waiting.slice(offset, length);
            let times = event_times(batch.column(time))?
                .as_primitive::<Int64Type>()
                .clone();
            let newest = times.values().iter().copied().max().unwrap_or(i64::MIN);
            self.push(batch, times, newest);
            offset += length;
        }
        Ok(())
    }

    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Releases the rows with a time at or below `watermark` (below it when `strict`; every
    /// row when the watermark is `i64::MAX`), in arrival order: as the batches they came in
    /// when their rows are in time order across them, else as one batch.
    pub fn release(&mut self, watermark: i64, strict: bool) -> Result<Vec<Released>> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let everything = watermark == i64::MAX;
        let bound = Int64Array::new_scalar(watermark);
        let mut released = Vec::new();
        let mut kept = Vec::new();
        for (batch, times, newest) in self.pending.drain(..) {
            if everything || newest < watermark || (!strict && newest == watermark) {
                released.push((batch, times));
                continue;
            }
            let mask: BooleanArray = if strict {
                lt(&times, &bound)?
            } else {
                lt_eq(&times, &bound)?
            };
            let leaving = mask.true_count();
            if leaving == times.len() {
                released.push((batch, times));
            } else if leaving == 0 {
                kept.push((batch, times, newest));
            } else {
                let staying = datafusion::arrow::compute::not(&mask)?;
                released.push((
                    filter_record_batch(&batch, &mask)?,
                    filtered(&times, &mask)?,
                ));
                // The newest row stays: it is past the watermark.
                kept.push((
                    filter_record_batch(&batch, &staying)?,
                    filtered(&times, &staying)?,
                    newest,
                ));
            }
        }
        self.pending = kept;
        self.rows = self.pending.iter().map(|(b, _, _)| b.num_rows()).sum();
        if released.len() <= 1 || in_time_order(&released, strict) {
            return Ok(released
                .into_iter()
                .map(|(batch, times)| Released { batch, times })
                .collect());
        }
        let batches: Vec<&RecordBatch> = released.iter().map(|(b, _)| b).collect();
        let times: Vec<&dyn Array> = released.iter().map(|(_, t)| t as &dyn Array).collect();
        let times = concat(&times)?;
        Ok(vec![Released {
            batch: concat_batches(&self.schema, batches)?,
            times: times.as_primitive::<Int64Type>().clone(),
        }])
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.pending
            .iter()
            .map(|(b, t, _)| b.get_array_memory_size() + t.get_array_memory_size())
            .sum()
    }
}

/// Whether the rows of `released` are in time order, across the batches as well as
/// within each; with `peers` (a RANGE frame, computed over all rows of a time at once),
/// no time may span two batches.
fn in_time_order(released: &[(RecordBatch, Int64Array)], peers: bool) -> bool {
    let mut previous: Option<i64> = None;
    released.iter().all(|(_, times)| {
        let values = times.values();
        let follows = |first: &i64| previous.is_none_or(|p| *first > p || (*first == p && !peers));
        let ordered =
            values.first().is_none_or(follows) && values.windows(2).all(|pair| pair[0] <= pair[1]);
        previous = values.last().copied().or(previous);
        ordered
    })
}

/// `released` sorted by time, ties in their order, and the permutation applied (the
/// original row of each output row).
pub fn sort_by_time(released: Released) -> Result<(Released, UInt32Array)> {
    let Released { batch, times } = released;
    let mut order: Vec<(i64, u32)> = times
        .values()
        .iter()
        .enumerate()
        .map(|(row, time)| (*time, row as u32))
        .collect();
    order.sort_unstable();
    let indices = UInt32Array::from_iter_values(order.iter().map(|(_, row)| *row));
    let times = Int64Array::from_iter_values(order.iter().map(|(time, _)| *time));
    let batch = take_record_batch(&batch, &indices)?;
    Ok((Released { batch, times }, indices))
}

fn filtered(times: &Int64Array, mask: &BooleanArray) -> Result<Int64Array> {
    Ok(filter(times, mask)?.as_primitive::<Int64Type>().clone())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, Int32Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema};

    use super::*;

    fn batch(schema: &SchemaRef, rows: &[i32]) -> RecordBatch {
        RecordBatch::try_new(
            Arc::clone(schema),
            vec![Arc::new(Int32Array::from(rows.to_vec()))],
        )
        .unwrap()
    }

    fn one(mut released: Vec<Released>) -> Released {
        assert_eq!(released.len(), 1);
        released.remove(0)
    }

    #[test]
    fn releases_in_time_then_arrival_order_up_to_the_watermark() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        let mut buffer = ReorderBuffer::new(Arc::clone(&schema));
        buffer.push(
            batch(&schema, &[1, 2, 3]),
            Int64Array::from(vec![10, 30, 20]),
            30,
        );
        buffer.push(batch(&schema, &[4, 5]), Int64Array::from(vec![20, 5]), 20);
        let released = one(buffer.release(20, false).unwrap());
        let (released, _) = sort_by_time(released).unwrap();
        let ids: Vec<i32> = released
            .batch
            .column(0)
            .as_primitive::<Int32Type>()
            .values()
            .to_vec();
        assert_eq!(
            ids,
            vec![5, 1, 3, 4],
            "time order, ties (3 and 4) by arrival"
        );
        assert_eq!(released.times.values().to_vec(), vec![5, 10, 20, 20]);
        assert_eq!(buffer.len(), 1);
        assert!(buffer.release(29, true).unwrap().is_empty());
        let last = one(buffer.release(30, false).unwrap());
        assert_eq!(last.times.values().to_vec(), vec![30]);
        assert_eq!(buffer.len(), 0);
    }

    #[test]
    fn batches_in_time_order_leave_apart_unless_a_peer_time_spans_two() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        let fill = |buffer: &mut ReorderBuffer| {
            buffer.push(batch(&schema, &[1, 2]), Int64Array::from(vec![10, 20]), 20);
            buffer.push(batch(&schema, &[3, 4]), Int64Array::from(vec![20, 30]), 30);
        };
        let mut rows_only = ReorderBuffer::new(Arc::clone(&schema));
        fill(&mut rows_only);
        let pieces = rows_only.release(i64::MAX, false).unwrap();
        assert_eq!(pieces.len(), 2, "ordered batches are computed one by one");
        // Time 20 is in both batches: a RANGE frame needs its rows in one computation.
        let mut peers = ReorderBuffer::new(Arc::clone(&schema));
        fill(&mut peers);
        let whole = one(peers.release(i64::MAX, true).unwrap());
        assert_eq!(whole.times.values().to_vec(), vec![10, 20, 20, 30]);
        // Out of order across the batches: one batch, for sorting.
        let mut disordered = ReorderBuffer::new(Arc::clone(&schema));
        disordered.push(batch(&schema, &[1]), Int64Array::from(vec![30]), 30);
        disordered.push(batch(&schema, &[2]), Int64Array::from(vec![10]), 10);
        assert_eq!(disordered.release(i64::MAX, false).unwrap().len(), 1);
    }

    #[test]
    fn strict_release_keeps_rows_at_the_watermark() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        let mut buffer = ReorderBuffer::new(Arc::clone(&schema));
        buffer.push(batch(&schema, &[1, 2]), Int64Array::from(vec![10, 20]), 20);
        let released = one(buffer.release(20, true).unwrap());
        assert_eq!(released.times.values().to_vec(), vec![10]);
        let rest = one(buffer.release(i64::MAX, true).unwrap());
        assert_eq!(rest.times.values().to_vec(), vec![20]);
    }
}
