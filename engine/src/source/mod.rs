//! Sources: a stream registered as a table ([`StreamTable`]) whose scan is DataFusion's own
//! reader (Parquet, CSV and Arrow files through `ListingTable`, in-memory batches, or a
//! built-in generator) under a [`StreamSourceExec`] that gives the plan the stream's
//! properties: boundedness, source partitioning, event time and watermark, and pacing.

mod alignment;
mod deal;
mod exec;
mod file_split;
mod files;
mod generator;
mod key_check;
mod live;
mod mapped_file;
mod nexmark;
mod prefetch;
mod replay_units;
mod table;
mod text_errors;

pub use alignment::SourceAlignment;
pub use exec::StreamSourceExec;
pub use file_split::TimeSpan;
pub use files::{FileFormatKind, open_file_source};
pub use generator::{GeneratorKind, GeneratorSpec, splitmix64};
pub use key_check::{CoPartitionedSide, PartitionKeyCheck, PartitionKeys};
pub use live::LiveBatches;
pub use nexmark::{NexmarkTable, nexmark_batch, nexmark_side_input};
pub use table::{ReplaySource, StreamTable};
