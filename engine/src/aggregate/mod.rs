//! Streaming aggregation: GROUP BY over event-time windows (or over the whole stream) with
//! results emitted when windows close or as a changelog.

mod assignment;
mod fused;
mod groups;
mod inputs;
mod late;
mod packed_keys;
mod partial;
mod running;
mod session_changes;
mod sessions;
mod short_keys;
mod window_aggregate;
mod windowed_keys;

pub use groups::GroupTable;
pub use late::LateRecords;
pub use packed_keys::{PackedGroupValues, new_group_values};
pub use partial::{PartialAggregate, PartialAggregator, PartialOutcome, PartialStates};
pub use running::RunningAggregates;
pub use window_aggregate::{AggregateEmit, AggregateSpec, WindowAggregateExec, WindowKey};
pub use windowed_keys::WindowedGroupValues;
