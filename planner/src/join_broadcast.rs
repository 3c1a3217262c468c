//! Which side of a stream join, if any, is sent whole to every stream while the other stays
//! where it is: a broadcast join of a small side.
//!
//! An interval join hashes both sides on its keys so that equal keys meet. When the keys
//! are a window's bounds and one side holds one row per window (a windowed aggregation
//! whose keys are all functions of its window: Nexmark q5's maximum count per window), that
//! side is small, and hashing the other side — every row of a windowed aggregation by
//! auction, say — is most of the join's routing. Sending the small side to every stream
//! and leaving the other side in its streams meets every pair once: each row of the large
//! side lives in one stream and sees every row of the small side there.
//!
//! The large side keeps its streams (sticky), so each stream judges it against that
//! stream's own watermark. That is safe only where no row of it can be late: its join time
//! is a time its operator publishes its progress in (a window aggregation's window start,
//! a join's event time), behind which that operator emits nothing. A side read from a
//! source is never left in place: its rows are judged against the merged watermark of
//! every source partition at any number of streams. And the small side's rows may go out
//! only in pairs — an inner join, an outer or semi or anti join that preserves or keeps the
//! large side — or every stream would emit them.

use std::sync::Arc;

use datafusion::common::{JoinSide, JoinType};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::aggregate::{AggregateEmit, WindowAggregateExec};

use crate::aggregate_rule::one_group_per_window;
use crate::stream_inputs::{TimeOrigin, event_time_columns};

/// The side to broadcast, with the other side left in its streams, for a join of type
/// `join_type` on `streams` streams whose time columns are `left_time` and `right_time`.
pub(crate) fn broadcast_side(
    left: &Arc<dyn ExecutionPlan>,
    right: &Arc<dyn ExecutionPlan>,
    (left_time, right_time): (usize, usize),
    join_type: JoinType,
    streams: usize,
) -> Option<JoinSide> {
    if streams <= 1 {
        return None;
    }
    let stays = |plan: &Arc<dyn ExecutionPlan>, time: usize| {
        plan.output_partitioning().partition_count() == streams
            && event_time_columns(plan)
                .iter()
                .any(|(column, origin)| *column == time && *origin == TimeOrigin::Published)
    };
    let right_broadcastable = matches!(
        join_type,
        JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
    );
    let left_broadcastable = matches!(
        join_type,
        JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
    );
    if right_broadcastable && one_row_per_window(right) && stays(left, left_time) {
        return Some(JoinSide::Right);
    }
    if left_broadcastable && one_row_per_window(left) && stays(right, right_time) {
        return Some(JoinSide::Left);
    }
    None
}

/// Whether `plan`, through projections, is a windowed aggregation emitting final rows
/// whose keys are all functions of its window (or that has no keys): one row per window.
fn one_row_per_window(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut node = plan;
    while let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        node = projection.input();
    }
    let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() else {
        return false;
    };
    let spec = aggregate.spec();
    let Some(window) = &spec.window else {
        return false;
    };
    let keys = spec.key_exprs();
    aggregate.emit() == AggregateEmit::Final
        && (keys.is_empty() || one_group_per_window(aggregate.exchange().input(), &keys, window))
}

#[cfg(test)]
mod tests {
    use crate::test_support::plan;

    /// Per symbol and window of 20 s sliding by 5 s, the count; `per_window` is joined on
    /// the window to those counts, as `SQL_JOIN` spells it.
    const COUNTS: &str = "SELECT symbol, COUNT(*) AS n, window_start AS ws, window_end AS we \
        FROM HOP(TABLE market_data, DESCRIPTOR(trade_time), INTERVAL '5' SECOND, INTERVAL '20' SECOND) \
        GROUP BY symbol, window_start, window_end";

    /// The largest count of each window, joined back to the counts with `join`.
    fn top_counts(join: &str) -> String {
        let most = format!("SELECT MAX(n) AS m, ws, we FROM ({COUNTS}) GROUP BY ws, we");
        format!(
            "SELECT a.symbol, a.n, b.m FROM ({COUNTS}) a {join} ({most}) b \
             ON a.ws = b.ws AND a.we = b.we AND a.n >= b.m"
        )
    }

    /// The strategies of the join's two exchanges, left then right.
    fn join_strategies(plan: &str) -> (String, String) {
        let lines: Vec<&str> = plan.lines().collect();
        let join = lines
            .iter()
            .position(|line| line.contains("IntervalJoinExec"))
            .unwrap_or_else(|| panic!("no interval join: {plan}"));
        let indent = |line: &str| line.len() - line.trim_start().len();
        let children: Vec<&str> = lines[join + 1..]
            .iter()
            .copied()
            .filter(|line| indent(line) == indent(lines[join]) + 2)
            .collect();
        let strategy = |line: &str| {
            line.split("strategy=")
                .nth(1)
                .and_then(|rest| rest.split(',').next())
                .unwrap_or_else(|| panic!("not an exchange: {line}"))
                .to_string()
        };
        (strategy(children[0]), strategy(children[1]))
    }

    #[test]
    fn one_row_per_window_is_broadcast_and_the_other_side_stays() {
        let explained = plan(&top_counts("JOIN"), 2, 2).unwrap();
        assert_eq!(
            join_strategies(&explained),
            ("sticky".to_string(), "broadcast".to_string()),
            "{explained}"
        );
        // The side on the left is broadcast as well, and a LEFT join keeps the counts.
        let most = format!("SELECT MAX(n) AS m, ws, we FROM ({COUNTS}) GROUP BY ws, we");
        let swapped = format!(
            "SELECT a.symbol, b.m FROM ({most}) b JOIN ({COUNTS}) a ON a.ws = b.ws AND a.we = b.we"
        );
        let explained = plan(&swapped, 2, 2).unwrap();
        assert_eq!(join_strategies(&explained).0, "broadcast", "{explained}");
        let explained = plan(&top_counts("LEFT JOIN"), 2, 2).unwrap();
        assert_eq!(join_strategies(&explained).1, "broadcast", "{explained}");
    }

    #[test]
    fn a_preserved_small_side_or_one_stream_is_not_broadcast() {
        // A RIGHT join emits each unmatched maximum: every stream would.
        let explained = plan(&top_counts("RIGHT JOIN"), 2, 2).unwrap();
        assert!(
            join_strategies(&explained).0.starts_with("hash"),
            "{explained}"
        );
        let explained = plan(&top_counts("JOIN"), 1, 1).unwrap();
        assert!(!explained.contains("broadcast"), "{explained}");
    }

    #[test]
    fn rows_read_from_a_source_are_not_left_in_their_streams() {
        // The records themselves joined to each window's largest price: each stream would
        // judge them late against its own source partitions' watermark.
        let sql = "SELECT t.symbol, t.price FROM market_data t JOIN (SELECT MAX(price) AS m, \
            window_start AS ws, window_end AS we FROM HOP(TABLE market_data, DESCRIPTOR(trade_time), \
            INTERVAL '10' SECOND, INTERVAL '10' SECOND) GROUP BY window_start, window_end) b \
            ON t.price = b.m AND t.trade_time >= b.ws AND t.trade_time < b.we";
        let explained = plan(sql, 2, 2).unwrap();
        assert!(explained.contains("IntervalJoinExec"), "{explained}");
        assert!(!explained.contains("broadcast"), "{explained}");
    }
}
