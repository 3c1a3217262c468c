//! [`SessionChangelog`]: session windows with EMIT CHANGES. Rows that can still join an open
//! session go to [`SessionChanges`], which keeps each key's open sessions with their running
//! aggregates and answers each record (or, per batch, each changed session) with an upsert
//! row, and a deletion when a session's start moves; sessions leave the state when the
//! watermark passes their last event time plus the gap (and the allowed lateness).

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};

use super::context::ModeContext;
use crate::aggregate::inputs::AggregateInputs;
use crate::aggregate::session_changes::SessionChanges;
use crate::aggregate::spec::{AggregateEmit, AggregateSpec};
use crate::checkpoint::OperatorState;
use crate::kernels::take_rows;

/// See the module documentation.
pub(crate) struct SessionChangelog {
    inputs: AggregateInputs,
    changes: SessionChanges,
    pub(super) context: ModeContext,
}

impl SessionChangelog {
    pub fn try_new(
        spec: &AggregateSpec,
        input_schema: &SchemaRef,
        context: ModeContext,
    ) -> Result<Self> {
        let (Some(window), Some(running)) = (&spec.window, spec.running_kernels(input_schema))
        else {
            return internal_err!(
                "EMIT CHANGES on session windows needs per-record kernels for every aggregate"
            );
        };
        // The key table holds the GROUP BY keys (the session start is tracked apart).
        let key_schema = Arc::new(Schema::new(spec.table_fields()[1..].to_vec()));
        Ok(Self {
            inputs: AggregateInputs::new(spec.key_exprs(), &spec.aggregates, &spec.filters),
            changes: SessionChanges::try_new(
                &key_schema,
                running,
                window.spec.size(),
                spec.emit == AggregateEmit::ChangesPerBatch,
            )?,
            context,
        })
    }

    /// The changelog rows of `batch` (see [`SessionChanges`]).
    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.context.count_records(batch.num_rows());
        let output = self.changelog(batch)?;
        self.report_state()?;
        self.context.combine(output.into_iter().collect())
    }

    fn changelog(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let Some((rows, times)) = self.context.open_session_rows(batch)? else {
            return Ok(None);
        };
        if rows.num_rows() == 0 {
            return Ok(None);
        }
        let columns = self.inputs.evaluate(&rows)?;
        let changelog = self
            .changes
            .update(&columns.keys, &times, &columns.arguments)?;
        let mut table_keys = vec![self.context.window_column(&changelog.starts)?];
        for key in &columns.keys {
            table_keys.push(take_rows(key.as_ref(), &changelog.key_rows)?);
        }
        Ok(Some(self.context.changelog_batch(
            table_keys,
            changelog.values,
            &changelog.ops,
        )?))
    }

    /// Forgets the sessions the watermark has closed (their rows were emitted as they came).
    pub fn advance(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        self.context.raise_watermark(watermark);
        let Some(closed) = self.context.session_closed() else {
            return Ok(None);
        };
        self.changes.close(closed)?;
        self.report_state()?;
        Ok(None)
    }

    /// The state a checkpoint keeps: the watermark, the open sessions and their aggregates.
    pub fn snapshot(&mut self) -> Result<OperatorState> {
        let mut state = OperatorState::default();
        self.context.snapshot_into(&mut state);
        self.changes.snapshot_into(&mut state)?;
        Ok(state)
    }

    /// Takes back what [`Self::snapshot`] kept.
    pub fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.context.restore_from(state)?;
        self.changes.restore_from(state)?;
        self.report_state()
    }

    fn report_state(&mut self) -> Result<()> {
        self.context.account(self.changes.size(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{batch, mode, rows, spec, watermark};
    use crate::aggregate::spec::AggregateEmit;
    use crate::window::WindowSpec;

    #[test]
    fn a_record_bridging_two_sessions_deletes_the_later_one() {
        let gap = WindowSpec::Session { gap: 1_000 };
        let mut mode = mode(&spec(Some(gap), AggregateEmit::ChangesPerRecord), None);
        assert_eq!(
            batch(&mut mode, &rows(&[("a", 0, 1), ("a", 1_500, 2)])),
            ["0,a,1,1,+I", "1500,a,1,2,+I"]
        );
        // 800 is within the gap of both: the session starting at 1 500 merges into 0's.
        assert_eq!(
            batch(&mut mode, &rows(&[("a", 800, 4)])),
            ["1500,a,null,null,-D", "0,a,3,7,+U"]
        );
        assert!(watermark(&mut mode, i64::MAX).is_empty());
    }
}
