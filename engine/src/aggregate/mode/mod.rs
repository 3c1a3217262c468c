//! The modes of [`super::WindowAggregateExec`]: one state per way of aggregating, chosen once
//! per output partition from the spec, each in its own file.
//!
//! | mode | window | emit | state |
//! |---|---|---|---|
//! | [`WindowGroups`] | tumbling, hopping or none | FINAL, CHANGES per record or per batch | one group table over (window start, keys) |
//! | [`SessionFinal`] | session | FINAL | open sessions and their aggregate states, emitted when they close |
//! | [`SessionChangelog`] | session | CHANGES | open sessions and their running aggregates |
//! | [`MergePartials`] | tumbling, hopping or none | FINAL (two-phase) | [`WindowGroups`] fed partial states |
//!
//! Every mode takes batches and watermarks and may answer each with a batch of the output
//! schema; what they share (schema, window, watermark, counters, memory reservation, building
//! output rows) is [`ModeContext`].

mod context;
mod merge;
mod session_changelog;
mod session_final;
#[cfg(test)]
mod test_support;
mod windows;

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};

use super::spec::{AggregateEmit, WindowKey};
use crate::checkpoint::OperatorState;
use crate::message_loop::MessageHandler;
use crate::operator_metrics::StatefulMetrics;

pub(super) use context::{ModeContext, ModeInputs};
pub(super) use merge::MergePartials;
pub(super) use session_changelog::SessionChangelog;
pub(super) use session_final::SessionFinal;
pub(super) use windows::WindowGroups;

/// The state of one output partition of the aggregation, by mode.
pub(super) enum AggregateMode {
    Windows(WindowGroups),
    SessionFinal(SessionFinal),
    SessionChangelog(SessionChangelog),
    MergePartials(MergePartials),
}

impl AggregateMode {
    /// The mode `inputs.spec` calls for.
    pub fn try_new(inputs: ModeInputs<'_>) -> Result<Self> {
        let spec = inputs.spec;
        let session = spec.window.as_ref().is_some_and(WindowKey::is_session);
        let partial = inputs.partial.cloned();
        let input_schema = Arc::clone(&inputs.input_schema);
        let context = ModeContext::new(inputs);
        Ok(match (partial, session, spec.emit) {
            (Some(partial), _, _) => {
                Self::MergePartials(MergePartials::try_new(spec, &partial, context)?)
            }
            (None, true, AggregateEmit::Final) => {
                Self::SessionFinal(SessionFinal::try_new(spec, &input_schema, context)?)
            }
            (None, true, _) => {
                Self::SessionChangelog(SessionChangelog::try_new(spec, &input_schema, context)?)
            }
            (None, false, _) => Self::Windows(WindowGroups::try_new(spec, &input_schema, context)?),
        })
    }
}

impl AggregateMode {
    /// The smallest window start among the groups held, not emitted yet (tumbling and
    /// hopping windows; `None` when no group is held or the mode has no such windows).
    /// Windows usually close in order of their start, but in two-phase aggregation a
    /// window's first states may arrive after a later window's, and the group table emits
    /// its groups in order of creation.
    pub fn oldest_held_window(&self) -> Option<i64> {
        match self {
            Self::Windows(mode) => mode.oldest_held_window(),
            Self::MergePartials(mode) => mode.groups.oldest_held_window(),
            Self::SessionFinal(_) | Self::SessionChangelog(_) => None,
        }
    }
}

impl MessageHandler for AggregateMode {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        match self {
            Self::Windows(mode) => mode.process(batch),
            Self::SessionFinal(mode) => mode.process(batch),
            Self::SessionChangelog(mode) => mode.process(batch),
            Self::MergePartials(mode) => mode.process(batch),
        }
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        match self {
            Self::Windows(mode) => mode.advance(watermark),
            Self::SessionFinal(mode) => mode.advance(watermark),
            Self::SessionChangelog(mode) => mode.advance(watermark),
            Self::MergePartials(mode) => mode.advance(watermark),
        }
    }

    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        match self {
            Self::Windows(mode) => mode.snapshot(),
            Self::SessionFinal(mode) => mode.snapshot(),
            Self::SessionChangelog(mode) => mode.snapshot().map(Some),
            Self::MergePartials(_) => Ok(None),
        }
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        match self {
            Self::Windows(mode) => mode.restore(state),
            Self::SessionFinal(mode) => mode.restore(state),
            Self::SessionChangelog(mode) => mode.restore(state),
            Self::MergePartials(_) => {
                internal_err!("checkpoints do not restore two-phase aggregation yet")
            }
        }
    }

    fn dropped_counts(&self) -> Option<&StatefulMetrics> {
        Some(match self {
            Self::Windows(mode) => &mode.context.metrics.stateful,
            Self::SessionFinal(mode) => &mode.context.metrics.stateful,
            Self::SessionChangelog(mode) => &mode.context.metrics.stateful,
            Self::MergePartials(mode) => &mode.groups.context.metrics.stateful,
        })
    }
}

#[cfg(test)]
mod checkpoint_tests {
    use super::test_support::{TUMBLE_1S, assert_snapshot_continues, rows, spec};
    use crate::aggregate::spec::AggregateEmit;
    use crate::window::WindowSpec;

    const EMITS: [AggregateEmit; 3] = [
        AggregateEmit::Final,
        AggregateEmit::ChangesPerRecord,
        AggregateEmit::ChangesPerBatch,
    ];

    #[test]
    fn a_restored_window_aggregation_continues_every_open_group() {
        let before = rows(&[
            ("a", 1_100, 1),
            ("b", 200, 2),
            ("a", 300, 3),
            ("c", 1_900, 4),
        ]);
        let after = rows(&[("a", 1_200, 5), ("b", 700, 6), ("c", 2_100, 7)]);
        for emit in EMITS {
            assert_snapshot_continues(&spec(Some(TUMBLE_1S), emit), &before, &after);
        }
    }

    #[test]
    fn a_restored_group_by_without_a_window_continues_every_group() {
        // Packed keys, kept as held; one key too long to pack.
        let long = "a key much too long to be packed into the thirty-two bytes of a word";
        let before = rows(&[
            ("a", 1_100, 1),
            ("b", 200, 2),
            (long, 300, 3),
            ("a", 1_900, 4),
        ]);
        let after = rows(&[("a", 1_200, 5), (long, 700, 6), ("c", 2_100, 7)]);
        for emit in EMITS {
            assert_snapshot_continues(&spec(None, emit), &before, &after);
        }
    }

    #[test]
    fn a_restored_session_aggregation_continues_every_open_session() {
        let gap = WindowSpec::Session { gap: 1_000 };
        // a: a session to extend and one to bridge into it; b: one to extend; c: a new key.
        let before = rows(&[("a", 0, 1), ("a", 1_500, 2), ("b", 500, 4), ("a", 5_000, 8)]);
        let after = rows(&[
            ("a", 800, 16),
            ("b", 1_200, 32),
            ("c", 1_000, 64),
            ("a", 5_500, 1),
        ]);
        for emit in EMITS {
            assert_snapshot_continues(&spec(Some(gap), emit), &before, &after);
        }
    }

    #[test]
    fn a_restored_session_aggregation_over_accumulators_continues_every_open_session() {
        use std::sync::Arc;

        use datafusion::functions_aggregate::count::count_udaf;
        use datafusion::physical_expr::aggregate::AggregateExprBuilder;
        use datafusion::physical_expr::expressions::col;

        let gap = WindowSpec::Session { gap: 1_000 };
        let mut spec = spec(Some(gap), AggregateEmit::Final);
        // COUNT(DISTINCT q) has no per-record kernel: the sessions' states are accumulators'.
        let schema = super::test_support::input_schema();
        let distinct = AggregateExprBuilder::new(count_udaf(), vec![col("q", &schema).unwrap()])
            .schema(Arc::clone(&schema))
            .alias("n")
            .distinct()
            .build()
            .unwrap();
        spec.aggregates[0] = Arc::new(distinct);
        assert!(spec.running_kernels(&schema).is_none());
        let before = rows(&[("a", 0, 1), ("a", 1_500, 2), ("b", 500, 4), ("a", 5_000, 8)]);
        let after = rows(&[
            ("a", 800, 2),
            ("b", 1_200, 4),
            ("c", 1_000, 64),
            ("a", 5_500, 8),
        ]);
        assert_snapshot_continues(&spec, &before, &after);
    }
}
