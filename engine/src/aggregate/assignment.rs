//! Assigning a batch's rows to tumbling or hopping windows, shared by the aggregation and
//! its partial step: each row's latest window start from the window kernel, one assignment
//! per overlapping window (a hop of size `s` and slide `d` gives `s / d`), and the rows left
//! out of each: rows without an event time, and windows already closed (their end plus the
//! allowed lateness at or below the watermark). A row is late when even its latest window is
//! closed.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};

use super::spec::WindowKey;
use crate::watermark::event_times;
use crate::window::{WindowSpec, window_starts_counting};

/// Rows of a batch assigned to windows: their window starts and, when not every row of the
/// batch takes part, which rows.
pub(crate) struct Assignment {
    pub starts: Option<Int64Array>,
    pub rows: Option<UInt32Array>,
    /// Whether this is each row's latest window (the one that counts it as a record).
    pub latest: bool,
}

impl Assignment {
    /// The assignments of one batch as one, in record order: each row's windows follow each
    /// other, latest first, so that a per-record changelog applies the records in arrival
    /// order in every window (assignment by assignment, a window that is one row's latest and
    /// an earlier row's second would see the later row first).
    pub fn in_record_order(assignments: Vec<Assignment>, batch_rows: usize) -> Result<Self> {
        if assignments.len() <= 1 {
            return Ok(assignments
                .into_iter()
                .next()
                .unwrap_or_else(Self::whole_batch));
        }
        let mut pairs: Vec<(u32, usize, i64)> = Vec::new();
        for (index, assignment) in assignments.iter().enumerate() {
            let Some(starts) = &assignment.starts else {
                return internal_err!("a window assignment without window starts");
            };
            for (position, start) in starts.values().iter().enumerate() {
                let row = match &assignment.rows {
                    Some(rows) => rows.value(position),
                    None => position as u32,
                };
                pairs.push((row, index, *start));
            }
        }
        pairs.sort_unstable_by_key(|&(row, index, _)| (row, index));
        debug_assert!(pairs.iter().all(|&(row, _, _)| (row as usize) < batch_rows));
        Ok(Self {
            starts: Some(pairs.iter().map(|&(_, _, start)| start).collect()),
            rows: Some(pairs.iter().map(|&(row, _, _)| row).collect()),
            latest: false,
        })
    }

    /// Every row, no window (a GROUP BY without one).
    pub fn whole_batch() -> Self {
        Self {
            starts: None,
            rows: None,
            latest: true,
        }
    }

    /// Number of rows taking part.
    pub fn len(&self, batch_rows: usize) -> usize {
        self.rows.as_ref().map_or(batch_rows, |r| r.len())
    }

    /// The taking-part rows of `arrays` (columns of the batch).
    pub fn pick(&self, arrays: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        match &self.rows {
            None => Ok(arrays.to_vec()),
            Some(rows) => arrays
                .iter()
                .map(|a| Ok(take(a.as_ref(), rows, None)?))
                .collect(),
        }
    }

    /// The taking-part rows of an optional filter column.
    pub fn pick_filter(&self, filter: &Option<ArrayRef>) -> Result<Option<BooleanArray>> {
        match filter {
            Some(f) => Ok(Some(
                self.pick(std::slice::from_ref(f))?[0].as_boolean().clone(),
            )),
            None => Ok(None),
        }
    }
}

/// A batch's window assignments and the rows left out of all of them.
pub(crate) struct Assigned {
    pub assignments: Vec<Assignment>,
    /// Rows whose latest window is closed, if there are any.
    pub late: Option<BooleanArray>,
    pub late_count: usize,
    pub null_times: usize,
}

impl Assigned {
    /// Every row, no window, none left out (a GROUP BY without a window).
    pub fn whole_batch() -> Self {
        Self {
            assignments: vec![Assignment::whole_batch()],
            late: None,
            late_count: 0,
            null_times: 0,
        }
    }
}

/// Assigns `batch`'s rows to `window`'s windows; windows starting at or before
/// `closed_through` are closed.
pub(crate) fn assign_windows(
    window: &WindowKey,
    closed_through: i64,
    batch: &RecordBatch,
) -> Result<Assigned> {
    let time = window.time.evaluate(batch)?.into_array(batch.num_rows())?;
    let times = event_times(&time)?;
    let times = times.as_primitive::<Int64Type>();
    let (slide, count, offset) = match window.spec {
        WindowSpec::Tumble { size, offset } => (size, 1, offset),
        WindowSpec::Hop { size, slide } => (slide, size / slide, 0),
        WindowSpec::Session { .. } => {
            return internal_err!("session windows are not assigned per row");
        }
    };
    let (latest, closed) = window_starts_counting(times, slide, offset, closed_through);
    let late_count = if latest.null_count() == 0 {
        // The usual case, counted while the starts were computed.
        closed
    } else {
        latest
            .iter()
            .filter(|start| start.is_some_and(|s| s <= closed_through))
            .count()
    };
    let late = (late_count > 0).then(|| {
        latest
            .iter()
            .map(|start| Some(start.is_some_and(|s| s <= closed_through)))
            .collect()
    });
    let assignments = (0..count)
        .map(|j| {
            let starts = if j == 0 {
                latest.clone()
            } else {
                latest.unary(|s| s.wrapping_sub(j * slide))
            };
            // The latest windows of rows with a time and none late are all open.
            let all_open = starts.null_count() == 0
                && ((j == 0 && late_count == 0)
                    || starts.values().iter().all(|s| *s > closed_through));
            if all_open {
                return Ok(Assignment {
                    starts: Some(starts),
                    rows: None,
                    latest: j == 0,
                });
            }
            let rows: UInt32Array = starts
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_some_and(|s| s > closed_through))
                .map(|(row, _)| row as u32)
                .collect();
            let starts = take(&starts, &rows, None)?
                .as_primitive::<Int64Type>()
                .clone();
            Ok(Assignment {
                starts: Some(starts),
                rows: Some(rows),
                latest: j == 0,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Assigned {
        assignments,
        late,
        late_count,
        null_times: latest.null_count(),
    })
}
