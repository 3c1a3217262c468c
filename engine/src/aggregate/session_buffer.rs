//! [`SessionBuffer`]: the rows of open session windows.
//!
//! A session is a key's run of records with less than `gap` between consecutive event times;
//! where it ends depends on records still to come, so its rows are kept until the watermark
//! passes the session's last event time plus the gap (and the allowed lateness). Then the
//! buffer is sorted by key and event time (`lexsort_to_indices`), keys are split into runs of
//! equal values (`partition`), runs are cut where the gap is reached, and the rows of the
//! closed sessions leave with each row's session start; the rest stay buffered.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{
    SortColumn, SortOptions, concat_batches, lexsort_to_indices, partition, take, take_record_batch,
};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;

use crate::watermark::event_times;

/// Rows of sessions that closed, sorted by key and time, and each row's session start.
pub struct ClosedSessions {
    pub rows: RecordBatch,
    pub starts: Int64Array,
}

/// Buffered input rows of open sessions.
pub struct SessionBuffer {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl SessionBuffer {
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            batches: Vec::new(),
        }
    }

    pub fn push(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.batches.push(batch);
        }
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.batches.iter().map(|b| b.get_array_memory_size()).sum()
    }

    /// Takes out the sessions `closed(last_event_time)` says are closed.
    pub fn take_closed(
        &mut self,
        time: &Arc<dyn PhysicalExpr>,
        keys: &[Arc<dyn PhysicalExpr>],
        gap: i64,
        closed: impl Fn(i64) -> bool,
    ) -> Result<Option<ClosedSessions>> {
        if self.batches.is_empty() {
            return Ok(None);
        }
        let all = concat_batches(&self.schema, &self.batches)?;
        self.batches.clear();
        let rows = all.num_rows();
        let times = event_times(&time.evaluate(&all)?.into_array(rows)?)?;
        let mut sort_columns: Vec<SortColumn> = keys
            .iter()
            .map(|key| {
                Ok(SortColumn {
                    values: key.evaluate(&all)?.into_array(rows)?,
                    options: Some(SortOptions::default()),
                })
            })
            .collect::<Result<_>>()?;
        sort_columns.push(SortColumn {
            values: Arc::clone(&times),
            options: Some(SortOptions::default()),
        });
        let order = lexsort_to_indices(&sort_columns, None)?;
        let sorted_keys: Vec<ArrayRef> = sort_columns[..keys.len()]
            .iter()
            .map(|c| Ok(take(c.values.as_ref(), &order, None)?))
            .collect::<Result<_>>()?;
        let sorted_times = take(times.as_ref(), &order, None)?;
        let sorted_times = sorted_times.as_primitive::<Int64Type>().values();
        let key_runs: Vec<std::ops::Range<usize>> = if keys.is_empty() {
            std::iter::once(0..rows).collect()
        } else {
            partition(&sorted_keys)?.ranges()
        };
        let (mut closed_rows, mut closed_starts, mut open_rows) =
            (Vec::new(), Vec::new(), Vec::new());
        for run in key_runs {
            let mut first = run.start;
            for row in run.clone() {
                let ends_session =
                    row + 1 == run.end || sorted_times[row + 1] - sorted_times[row] >= gap;
                if !ends_session {
                    continue;
                }
                let session = first..row + 1;
                if closed(sorted_times[row]) {
                    closed_rows.extend(session.clone().map(|r| order.value(r)));
                    closed_starts.extend(session.map(|_| sorted_times[first]));
                } else {
                    open_rows.extend(session.map(|r| order.value(r)));
                }
                first = row + 1;
            }
        }
        if !open_rows.is_empty() {
            self.batches
                .push(take_record_batch(&all, &UInt32Array::from(open_rows))?);
        }
        if closed_rows.is_empty() {
            return Ok(None);
        }
        Ok(Some(ClosedSessions {
            rows: take_record_batch(&all, &UInt32Array::from(closed_rows))?,
            starts: Int64Array::from(closed_starts),
        }))
    }
}
