//! Stream joins: [`IntervalJoinExec`], an equi-join of two streams within a bound on their
//! event times, whose state the watermarks bound.

mod interval_join;
mod side_state;

pub use interval_join::{INTERVAL_JOIN_TYPES, IntervalJoinExec, IntervalJoinSpec, TimeBound};
