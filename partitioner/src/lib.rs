//! Freshet's partitioner: how rows are routed between the parallel streams of a query and
//! which strategy an exchange uses.
//!
//! [`RoutingStrategy`] names the strategies (hash on key columns, sticky, round-robin,
//! fan-in); [`Router`] applies one to the batches of one input partition. Hash and
//! round-robin routing reuse DataFusion's `BatchPartitioner` (hashes of whole columns with
//! `create_hashes`, one counting pass, one grouped `take`), so a source declared
//! hash-partitioned by DataFusion's function and Freshet's exchange agree on where a key lives.

mod router;
mod strategy;

pub use router::Router;
pub use strategy::RoutingStrategy;
