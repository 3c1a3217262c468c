//! Stream joins: [`IntervalJoinExec`], an equi-join of two streams within a bound on their
//! event times, whose state the watermarks bound; [`LookupJoinExec`], a stream's rows looked
//! up in a bounded table.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::SortOptions;
use datafusion::common::{NullEquality, Result};
use datafusion::physical_plan::joins::utils::JoinKeyComparator;

mod interval_join;
mod lookup_join;
mod lookup_table;
mod side_state;

pub use interval_join::{INTERVAL_JOIN_TYPES, IntervalJoinExec, IntervalJoinSpec, TimeBound};
pub use lookup_join::{LookupJoinExec, LookupKind};
pub use lookup_table::LookupTable;

/// Equality of rows of the key columns `left` with rows of `right`; null keys never match
/// (both joins keep them apart before comparing).
fn key_comparator(left: &[ArrayRef], right: &[ArrayRef]) -> Result<JoinKeyComparator> {
    JoinKeyComparator::new(
        left,
        right,
        &vec![SortOptions::default(); left.len()],
        NullEquality::NullEqualsNothing,
    )
}
