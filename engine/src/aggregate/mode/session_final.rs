//! [`SessionFinal`]: session windows with EMIT FINAL. A session's extent is known only once no
//! record can extend it, so its row leaves when the watermark passes its last event time plus
//! the gap (and the allowed lateness). Until then the session is an entry of
//! [`OpenSessions`] and an aggregate group of [`SessionStates`]: each record is placed in its
//! key's sessions (opening, extending or bridging them) and folded into its session's group
//! as it arrives; a bridge merges the later session's group into the earlier one's. When the
//! watermark moves, the closed sessions are taken out, ordered by start and key, and emitted
//! with their keys and aggregates. Work grows with the records, not with a session's length.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

use super::context::ModeContext;
use crate::aggregate::assignment::Assignment;
use crate::aggregate::inputs::AggregateInputs;
use crate::aggregate::open_sessions::OpenSessions;
use crate::aggregate::session_states::SessionStates;
use crate::aggregate::spec::AggregateSpec;
use crate::checkpoint::OperatorState;

/// See the module documentation.
pub(crate) struct SessionFinal {
    inputs: AggregateInputs,
    open: OpenSessions,
    states: SessionStates,
    /// Each row's session group, reused across batches.
    row_groups: Vec<usize>,
    pub(super) context: ModeContext,
}

impl SessionFinal {
    pub fn try_new(
        spec: &AggregateSpec,
        input_schema: &SchemaRef,
        context: ModeContext,
    ) -> Result<Self> {
        // The key table holds the GROUP BY keys (the session start is tracked apart).
        let key_schema = Arc::new(Schema::new(spec.table_fields()[1..].to_vec()));
        let gap = context.window.as_ref().map_or(0, |w| w.spec.size());
        Ok(Self {
            inputs: AggregateInputs::new(spec.key_exprs(), &spec.aggregates, &spec.filters),
            open: OpenSessions::try_new(&key_schema, gap, true)?,
            states: SessionStates::try_new(spec.running_kernels(input_schema), &spec.aggregates)?,
            row_groups: Vec::new(),
            context,
        })
    }

    /// Folds the rows of `batch` that can still join an open session into their sessions.
    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.context.count_records(batch.num_rows());
        let Some((rows, times)) = self.context.open_session_rows(batch)? else {
            return Ok(None);
        };
        let count = rows.num_rows();
        if count > 0 {
            let columns = self.inputs.evaluate(&rows)?;
            let (keys, arguments, filters) = columns.pick(&Assignment::whole_batch())?;
            let key_ids = self.open.intern(&keys, count)?.to_vec();
            self.row_groups.clear();
            let mut bridges = Vec::new();
            let sessions_before = self.open.groups();
            for (&key, &time) in key_ids.iter().zip(times.values()) {
                let placed = self.open.place(key, time, 0);
                if let Some(gone) = placed.gone {
                    bridges.push((gone.group, placed.session.group));
                }
                self.row_groups.push(placed.session.group);
            }
            self.context
                .metrics
                .windows_opened
                .add(self.open.groups() - sessions_before);
            self.states
                .accumulate(&self.row_groups, self.open.groups(), &arguments, &filters)?;
            // A row placed before a bridge went to the group folded away: fold after the rows.
            for (from, into) in bridges {
                self.states.merge(from, into);
            }
        }
        self.report_state()?;
        Ok(None)
    }

    /// Emits the sessions the watermark has closed.
    pub fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.context.raise_watermark(watermark);
        let Some(session_closed) = self.context.session_closed() else {
            return Ok(None);
        };
        let mut closed = self.open.close(session_closed);
        if closed.is_empty() {
            self.report_state()?;
            return Ok(None);
        }
        closed.sort_unstable_by_key(|(key, session)| (session.start, *key));
        let key_ids: Vec<usize> = closed.iter().map(|(key, _)| *key).collect();
        let groups: Vec<usize> = closed.iter().map(|(_, s)| s.group).collect();
        let starts = Int64Array::from_iter_values(closed.iter().map(|(_, s)| s.start));
        let mut table_keys = vec![self.context.window_column(&starts)?];
        table_keys.extend(self.open.key_values(&key_ids)?);
        let renumbered = (self.states.renumbers_at_every_close() || self.open.groups_are_sparse())
            .then(|| self.open.renumber_groups());
        let values = self.states.take_closed(&groups, renumbered.as_deref())?;
        self.open.forget_idle_keys()?;
        self.context.metrics.windows_emitted.add(closed.len());
        let output = self
            .context
            .output_batch(table_keys, values, closed.len())?;
        self.report_state()?;
        self.context.combine(vec![output])
    }

    /// The state a checkpoint keeps: the watermark, the open sessions and their aggregates.
    pub fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        let mut state = OperatorState::default();
        self.context.snapshot_into(&mut state);
        self.states.snapshot_into(&mut state)?;
        self.open.snapshot_into(&mut state)?;
        Ok(Some(state))
    }

    /// Takes back what [`Self::snapshot`] kept.
    pub fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.context.restore_from(state)?;
        self.states.restore_from(state)?;
        self.open.restore_from(state)?;
        self.report_state()
    }

    fn report_state(&mut self) -> Result<()> {
        let bytes = self.open.size() + self.states.size();
        self.context.account(bytes, self.open.open())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{batch, mode, rows, spec, watermark};
    use crate::aggregate::spec::AggregateEmit;
    use crate::window::WindowSpec;

    #[test]
    fn a_session_closes_when_the_watermark_passes_its_last_record_plus_the_gap() {
        let gap = WindowSpec::Session { gap: 1_000 };
        let mut mode = mode(&spec(Some(gap), AggregateEmit::Final), None);
        // a: 0 and 800 share a session (800 < gap), 3 000 starts another; b: one session.
        let input = rows(&[("a", 0, 1), ("a", 800, 2), ("b", 500, 4), ("a", 3_000, 8)]);
        assert!(batch(&mut mode, &input).is_empty());
        assert!(watermark(&mut mode, 1_499).is_empty());
        assert_eq!(watermark(&mut mode, 1_800), ["0,a,2,3", "500,b,1,4"]);
        assert_eq!(watermark(&mut mode, i64::MAX), ["3000,a,1,8"]);
    }

    #[test]
    fn a_record_bridging_two_sessions_sums_both_into_one() {
        let gap = WindowSpec::Session { gap: 1_000 };
        let mut mode = mode(&spec(Some(gap), AggregateEmit::Final), None);
        assert!(batch(&mut mode, &rows(&[("a", 0, 1), ("a", 1_500, 2)])).is_empty());
        // 800 is within the gap of both: one session from 0 to 1 500.
        assert!(batch(&mut mode, &rows(&[("a", 800, 4), ("a", 2_000, 8)])).is_empty());
        assert_eq!(watermark(&mut mode, i64::MAX), ["0,a,4,15"]);
    }
}
