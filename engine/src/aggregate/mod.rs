//! Streaming aggregation: GROUP BY over event-time windows (or over the whole stream) with
//! results emitted when windows close or as a changelog.
//!
//! - [`spec`]: the vocabulary — what a GROUP BY computes, its window, when it emits.
//! - [`WindowAggregateExec`] (`window_aggregate.rs`): the operator; each output partition
//!   runs one of the modes in `mode/` (windows, final sessions, session changelog, merge of
//!   partial states).
//! - [`ChangelogAggregateExec`] (`changelog_aggregate.rs`): a GROUP BY over another
//!   aggregation's changelog, retracting the rows each upsert replaces.
//! - [`PartialAggregate`] (`partial.rs`): the partial step of two-phase aggregation, which
//!   the exchange runs on each input partition; `partial_states.rs` is the format of the
//!   states it sends.
//! - `assignment.rs` (rows to windows), `inputs.rs` (evaluating keys, arguments and
//!   filters), `open_sessions.rs` (each key's open sessions), `session_states.rs` (their
//!   aggregate states, for EMIT FINAL) and `session_changes.rs` (their changelog).
//!
//! The group tables and accumulators they use are in [`crate::kernels`].

mod assignment;
mod changelog_aggregate;
mod inputs;
mod mode;
mod open_sessions;
mod partial;
pub mod partial_states;
mod session_changes;
mod session_states;
pub mod spec;
mod window_aggregate;

pub use changelog_aggregate::{ChangelogAggregateExec, RetractableExtremum};
pub use partial::PartialAggregate;
pub use partial_states::{PartialStateFormat, PartialStates};
pub use spec::{AggregateEmit, AggregateSpec, GroupExpr, WindowKey};
pub use window_aggregate::WindowAggregateExec;
