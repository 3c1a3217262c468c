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

use super::spec::{AggregateEmit, AggregateSpec, WindowKey};
use crate::checkpoint::OperatorState;
use crate::message_loop::MessageHandler;

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
            Self::SessionFinal(_) | Self::SessionChangelog(_) | Self::MergePartials(_) => Ok(None),
        }
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        match self {
            Self::Windows(mode) => mode.restore(state),
            _ => internal_err!("checkpoints do not restore this aggregation yet"),
        }
    }
}

impl AggregateMode {
    /// Whether a checkpoint can keep this mode's state.
    pub fn checkpointable(spec: &AggregateSpec, two_phase: bool) -> bool {
        !two_phase
            && (spec.having.is_none() || spec.emit == AggregateEmit::Final)
            && !spec.window.as_ref().is_some_and(WindowKey::is_session)
    }
}
