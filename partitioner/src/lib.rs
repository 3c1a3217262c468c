//! Freshet's partitioner: how rows are routed between the parallel streams of a query and
//! which strategy an exchange uses.
//!
//! [`RoutingStrategy`] names the strategies (hash on key columns, sticky, round-robin,
//! fan-in, broadcast, time runs) and answers what each implies for an exchange: its number of outputs, their
//! partitioning, which input feeds which output, and the watermark domains (the inputs whose
//! watermark is combined for an output). [`Router`] applies a strategy to the batches of one
//! input partition. The exchange (`freshet_engine::exchange`) moves batches and watermarks
//! and asks this crate every question about where they go. Hash routing sends a row where
//! DataFusion's hash repartition sends it (`create_hashes` of its keys with the
//! repartition's seed, modulo the outputs), so a source declared hash-partitioned by
//! DataFusion's function and Freshet's exchange agree on where a key lives: to two outputs
//! in two passes of its own (`hash_routing.rs`), to other counts, and round-robin, with
//! DataFusion's `BatchPartitioner` (one grouped `take` either way).
//! Time runs (runs of event time, each to one output) cut a batch in time order into slices
//! and gather only a batch whose rows return to an output.

mod hash_routing;
mod prefetch;
mod router;
mod strategy;
mod time_range;

pub use prefetch::{PREFETCH_AHEAD_BYTES, map_prefetched, prefetch};
pub use router::Router;
pub use strategy::{RoutingStrategy, TimeRuns, WatermarkDomain};
pub use time_range::{newest_time, time_range};
