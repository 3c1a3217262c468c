//! Freshet's hand-written kernels, shared by the aggregation and the OVER windows: the group
//! table and its key interners, the fused and running accumulators, the gather of rows by
//! index, maps keyed by precomputed hashes, the division of a column by a constant, and the classifier of the built-in aggregates those kernels stand in for.
//!
//! Each kernel exists because a benchmark in `bench/benches/kernels.rs` (the division by a
//! constant: `bench/benches/functions.rs`) shows it beats what
//! DataFusion provides for Freshet's work (docs/benchmarks.md gives the figures); anything
//! else uses DataFusion's own (`GroupValues`, `GroupsAccumulator`, arrow's kernels).

mod builtin;
mod constant_divisor;
mod dense_keys;
mod dense_leading_keys;
mod dictionary_keys;
mod distinct_counts;
mod distinct_pairs;
mod fused;
mod fused_column;
mod fused_member;
mod groups;
mod literal_set;
mod packed_encoding;
mod packed_keys;
mod prehashed;
mod row_accumulators;
mod running;
mod shared;
mod short_keys;
mod take_rows;
mod windowed_keys;

pub use builtin::BuiltinAggregate;
pub use constant_divisor::ConstantDivisor;
pub use groups::GroupTable;
pub use literal_set::{IntegerSet, StringSet};
pub(crate) use packed_encoding::{longest_string, max_length_i32};
pub use packed_keys::{PackedGroupValues, new_group_values};
pub(crate) use prehashed::{PrehashedMap, PrehashedSet};
pub use running::RunningAggregates;
pub(crate) use short_keys::{ShortColumns, ShortKeyIndex, StringColumn};
pub use take_rows::{PaddedStrings, take_rows};
pub(crate) use take_rows::{compact_sparse_views, compact_views};
pub use windowed_keys::WindowedGroupValues;
