//! Streaming aggregation: GROUP BY over event-time windows (or over the whole stream) with
//! results emitted when windows close or as a changelog.
//!
//! - [`spec`]: the vocabulary — what a GROUP BY computes, its window, when it emits.
//! - [`WindowAggregateExec`] (`window_aggregate.rs`): the operator; each output partition
//!   runs one of the modes in `mode/` (windows, session rows, session changelog, merge of
//!   partial states).
//! - [`PartialAggregate`] (`partial.rs`): the partial step of two-phase aggregation, which
//!   the exchange runs on each input partition; `partial_states.rs` is the format of the
//!   states it sends.
//! - `assignment.rs` (rows to windows), `inputs.rs` (evaluating keys, arguments and
//!   filters), `session_buffer.rs` and `session_changes.rs` (the state of open sessions).
//!
//! The group tables and accumulators they use are in [`crate::kernels`].

mod assignment;
mod inputs;
mod mode;
mod partial;
pub mod partial_states;
mod session_buffer;
mod session_changes;
pub mod spec;
mod window_aggregate;

pub use partial::PartialAggregate;
pub use partial_states::{PartialStateFormat, PartialStates};
pub use spec::{AggregateEmit, AggregateSpec, GroupExpr, WindowKey};
pub use window_aggregate::WindowAggregateExec;
