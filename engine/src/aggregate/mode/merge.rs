//! [`MergePartials`]: the final step of two-phase aggregation. Its input is partial states
//! (see [`crate::aggregate::partial_states`]), which it merges per (window, keys) into a
//! [`WindowGroups`] with `merge_batch`; windows then close and emit as in single-phase
//! EMIT FINAL.
//!
//! The partial step judged lateness at this operator's watermark (the exchange serialises
//! the two), so no state of a closed window should arrive; if one does, its records are
//! dropped and counted rather than reopening the window.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

use super::context::ModeContext;
use super::windows::WindowGroups;
use crate::aggregate::partial::PartialAggregate;
use crate::aggregate::partial_states::{PartialStateFormat, PartialStates};
use crate::aggregate::spec::AggregateSpec;

/// See the module documentation.
pub(crate) struct MergePartials {
    groups: WindowGroups,
    format: PartialStateFormat,
}

impl MergePartials {
    pub fn try_new(
        spec: &AggregateSpec,
        partial: &Arc<PartialAggregate>,
        context: ModeContext,
    ) -> Result<Self> {
        let format = partial.format().clone();
        Ok(Self {
            groups: WindowGroups::try_new(spec, &format.schema(), context)?,
            format,
        })
    }

    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let states = self.format.split(batch)?;
        self.merge(states)?;
        self.groups.report_state()?;
        Ok(None)
    }

    pub fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.groups.advance(watermark)
    }

    fn merge(&mut self, states: PartialStates) -> Result<()> {
        let context = &self.groups.context;
        if context.window.is_none() {
            // Without a window, every state is of the one endless window.
            context
                .metrics
                .records_in
                .add(states.record_count() as usize);
            let rows = states.starts.len();
            return self.groups.merge(None, &states.keys, &states.states, rows);
        }
        let closed_through = context.closed_through();
        let open: BooleanArray = states
            .starts
            .iter()
            .map(|s| Some(s.is_some_and(|s| s > closed_through)))
            .collect();
        let records = states.record_count();
        let states = if open.true_count() == open.len() {
            states
        } else {
            let closed = open.len() - open.true_count();
            let late: u64 = states
                .records
                .iter()
                .zip(open.iter())
                .filter(|(_, open)| *open == Some(false))
                .map(|(n, _)| n.unwrap_or(0))
                .sum();
            context.metrics.late_dropped.add(late as usize);
            if closed == open.len() {
                return Ok(());
            }
            states.filter(&open)?
        };
        context.metrics.records_in.add(records as usize);
        let rows = states.starts.len();
        let mut table_keys = vec![context.window_column(&states.starts)?];
        table_keys.extend(states.keys);
        self.groups
            .merge(Some(&states.starts), &table_keys, &states.states, rows)
    }
}
