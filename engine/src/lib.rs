//! Freshet's execution engine: the streaming operators, their state, the sources that replay
//! or generate streams, and the sinks that write results.
//!
//! The engine is plain DataFusion physical-plan code: every operator is an
//! [`ExecutionPlan`](datafusion::physical_plan::ExecutionPlan) that takes Arrow
//! `RecordBatch`es in and gives `RecordBatch`es out. It never depends on the planner, so the
//! same operators can be driven by any plan that DataFusion (or a distributed runner) builds.

pub mod aggregate;
pub mod changelog;
pub mod checkpoint;
pub mod duration;
pub mod exchange;
pub mod filter;
pub mod join;
pub mod kernels;
pub mod late_records;
mod message_loop;
mod operator_metrics;
pub mod options;
pub mod over;
mod plan_util;
pub mod progress;
mod row_format;
pub mod sink;
pub mod sort;
pub mod source;
pub mod watermark;
pub mod window;

pub use duration::parse_duration;
pub use exchange::StreamExchangeExec;
pub use filter::StreamFilterExec;
pub use options::{FileReads, MAX_PARTITIONS, Pacing, StreamOptions};
pub use plan_util::{machine_cores, panic_becomes_error, unless_panicked};
pub use progress::PartitionProgress;
pub use sort::StreamSortExec;
pub use source::{
    CoPartitionedSide, FileFormatKind, GeneratorKind, GeneratorSpec, LiveBatches, NexmarkTable,
    PartitionKeyCheck, ReplaySource, StreamSourceExec, StreamTable, nexmark_side_input,
    open_file_source, splitmix64,
};
pub use watermark::{EventTime, StreamMessage, WatermarkTracker};
pub use window::WindowSpec;
