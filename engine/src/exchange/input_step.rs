//! [`InputStep`]: work that an exchange runs on each of its input partitions before it routes
//! the result, so that less crosses the shuffle — the partial step of two-phase aggregation
//! is one. The exchange knows nothing of what a step computes; it keeps the contract below.
//!
//! - Per input partition, [`InputStep::start`] makes a fresh [`InputStepState`]; each input
//!   batch goes through [`InputStepState::process`] at the watermark the consumer holds
//!   now, and the exchange routes the step's output on the step's [`InputStep::schema`]
//!   instead of the rows.
//! - A step whose output depends on the exact watermark the consumer will hold when it reads
//!   it ([`InputStep::needs_exact_watermark`], e.g. which rows are late) makes the inputs
//!   take turns from reading the watermark to having sent their output and any new
//!   watermark, and the watermark is then combined over all inputs (one domain). An output
//!   that a watermark reached meanwhile invalidates ([`StepOutput::valid_below`]) is
//!   processed again at the new watermark before it is sent.
//! - A step that can leave lateness to its consumer ([`InputStep::lateness_deferrable`])
//!   over inputs the exchange merges by replay position runs at no watermark instead: the
//!   consumer, reading the outputs in replay order, holds exactly the watermark one stream
//!   would, and drops what arrives for what it has closed (a window's partial states, each
//!   counting the records whose latest window it is). No turns are taken.
//! - Once the output of a batch is final, [`InputStepState::commit`] lets the step act on it
//!   (count, send late rows to a side output) exactly once.
//! - At the end of the input, [`InputStepState::finish`] hands over what the step still
//!   holds.
//!
//! The consumer must combine a step's outputs in whatever order they arrive: the exchange
//! does not merge a step's outputs in event-time order.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;

/// See the module documentation.
pub trait InputStep: fmt::Debug + Send + Sync {
    /// The schema of the step's output, which the exchange routes and outputs.
    fn schema(&self) -> SchemaRef;

    /// Whether the output depends on the exact watermark the consumer holds when it reads it.
    fn needs_exact_watermark(&self) -> bool;

    /// Whether the consumer can judge lateness itself from the step's output (see the
    /// module documentation).
    fn lateness_deferrable(&self) -> bool {
        false
    }

    /// The step is about to leave lateness to its consumer: an error if that loses
    /// something asked for.
    fn check_lateness_deferred(&self) -> Result<()> {
        Ok(())
    }

    /// The step as EXPLAIN shows it on the exchange's line.
    fn fmt_as(&self, f: &mut fmt::Formatter) -> fmt::Result;

    /// Fresh state for input partition `input`, with its counters in `metrics`.
    fn start(
        self: Arc<Self>,
        input: usize,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn InputStepState>>;
}

/// The state of an [`InputStep`] on one input partition.
pub trait InputStepState: Send {
    /// The output of `batch` for a consumer at `watermark`. Only the output of the last call
    /// before [`Self::commit`] is sent.
    fn process(&mut self, batch: &RecordBatch, watermark: i64) -> Result<StepOutput>;

    /// The output of the last [`Self::process`] of `batch` is final.
    fn commit(&mut self, batch: &RecordBatch) -> Result<()>;

    /// What the step still holds once its input has ended.
    fn finish(&mut self) -> Result<Option<RecordBatch>>;
}

/// What [`InputStepState::process`] gave for one batch.
pub struct StepOutput {
    /// The rows to route, if any.
    pub batch: Option<RecordBatch>,
    /// The output holds while the consumer's watermark is below this (`i64::MAX`: always).
    pub valid_below: i64,
}
