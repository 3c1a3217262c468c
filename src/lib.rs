//! Freshet: a columnar, vectorized streaming SQL engine on Apache DataFusion and Arrow.
//!
//! Register streams (Parquet, CSV, JSON-lines or Arrow files, in-memory batches, or the built-in
//! generators) on a [`StreamingContext`], run streaming SQL over them, and read the results
//! as Arrow record batches, one stream per output partition:
//!
//! ```no_run
//! # async fn example() -> datafusion::common::Result<()> {
//! use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
//! use futures::StreamExt;
//!
//! let ctx = StreamingContext::with_partitions(2);
//! ctx.register_generator(
//!     "orders",
//!     GeneratorSpec::new(GeneratorKind::Orders, Some(1_000_000)),
//!     StreamOptions::default(),
//! )?;
//! let query = ctx.sql("SELECT order_id, total_amount FROM orders WHERE total_amount > 100").await?;
//! let mut results = query.execute_merged()?;
//! while let Some(batch) = results.next().await {
//!     println!("{} rows", batch?.num_rows());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! To add Freshet to a DataFusion session of your own, pass its builder through [`install`].

pub mod cli;
pub mod distributed;
pub mod memory;
pub mod testing;

pub use freshet_bench as bench;
pub use freshet_engine as engine;
pub use freshet_engine::sink;
pub use freshet_engine::{
    FileFormatKind, GeneratorKind, GeneratorSpec, LiveBatches, NexmarkTable, Pacing, ReplaySource,
    StreamOptions,
};
pub use freshet_partitioner as partitioner;
pub use freshet_planner as planner;
pub use freshet_planner::{CheckpointConfig, StreamingContext, StreamingQuery, install};
