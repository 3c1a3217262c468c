//! Stream joins: [`IntervalJoinExec`], an equi-join of two streams within a bound on their
//! event times, whose state the watermarks bound; [`LookupJoinExec`], a stream's rows looked
//! up in a bounded table.

mod interval_join;
mod lookup_join;
mod lookup_table;
mod side_state;

pub use interval_join::{INTERVAL_JOIN_TYPES, IntervalJoinExec, IntervalJoinSpec, TimeBound};
pub use lookup_join::{LookupJoinExec, LookupKind};
pub use lookup_table::LookupTable;
