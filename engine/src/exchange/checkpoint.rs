//! An exchange output's part in checkpoints: it passes a barrier on once every input it
//! merges has reached the barrier's replay position (see [`crate::checkpoint`]), and
//! checkpoints its watermark there, which a resumed run starts from: the watermark of a
//! replay depends on every record before the cut, not only on those after it.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

use crate::checkpoint::{Barrier, Checkpointing, OperatorState};

const WATERMARK: &str = "watermark";

pub(super) struct OutputCheckpoint {
    checkpointing: Arc<Checkpointing>,
    /// The output's state file.
    name: String,
    /// The epoch of the last barrier passed on.
    passed: u64,
}

impl OutputCheckpoint {
    /// Output `output` of exchange `node` in the run's checkpoints, if it has any.
    pub fn of(
        checkpointing: Option<&Arc<Checkpointing>>,
        node: &dyn ExecutionPlan,
        output: usize,
    ) -> Result<Option<Self>> {
        let Some(checkpointing) = checkpointing else {
            return Ok(None);
        };
        Ok(Some(Self {
            name: checkpointing.state_name(node, output)?,
            checkpointing: Arc::clone(checkpointing),
            passed: 0,
        }))
    }

    /// The pending barrier, once every input is at replay position `low` or beyond; it is
    /// then passed.
    pub fn due(&mut self, low: i64) -> Option<Barrier> {
        self.due_if(|barrier| low >= barrier.position)
    }

    /// The pending barrier, once `passed` says the input has passed it; it is then passed.
    pub fn due_if(&mut self, passed: impl FnOnce(Barrier) -> bool) -> Option<Barrier> {
        let barrier = self.checkpointing.barriers().pending()?;
        (barrier.epoch > self.passed && passed(barrier)).then(|| {
            self.passed = barrier.epoch;
            barrier
        })
    }

    /// Checkpoints the output's watermark at barrier `epoch`.
    pub fn write(&self, epoch: u64, watermark: Option<i64>) -> Result<()> {
        let mut state = OperatorState::default();
        if let Some(watermark) = watermark {
            state.put_value(WATERMARK, watermark);
        }
        self.checkpointing.write_state(epoch, &self.name, state)
    }

    /// The watermark the output had at the checkpoint the run resumes.
    pub fn restored_watermark(&self) -> Result<Option<i64>> {
        Ok(match self.checkpointing.restored_state(&self.name)? {
            Some(state) => state.value(WATERMARK).ok(),
            None => None,
        })
    }
}
