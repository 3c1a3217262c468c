//! [`UnboundedInputCheck`]: refuses, with advice, plans that wait for the end of an endless
//! stream.
//!
//! A physical operator that emits only at the end of its input (`EmissionType::Final`: a
//! plain GROUP BY, ORDER BY, a join's build side) or that needs unbounded memory can never
//! answer over an unbounded stream. DataFusion's sanity check rejects such plans in its own
//! words; this rule runs first and says which stream and operator are at fault and how to
//! rewrite the query. A join that would keep an endless stream's rows without bound (both
//! sides of a symmetric hash join, or the build side of any other) is refused too, and so is
//! event time read from a join's output where it is not one of the output's event times.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, Result, plan_err};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::SymmetricHashJoinExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use freshet_engine::aggregate::WindowAggregateExec;
use freshet_engine::{StreamExchangeExec, StreamSourceExec};

use crate::stream_inputs::refuse_time_over_join;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct UnboundedInputCheck;

impl PhysicalOptimizerRule for UnboundedInputCheck {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut failure = None;
        let mut join = None;
        // Event time over a join's output (a window over a window join, planned before the
        // join became Freshet's).
        plan.apply(|node| {
            // (A bounded input's exchange may read such a time with no watermark before the
            // end: `end_of_input_time`.)
            if let Some(exchange) = node.downcast_ref::<StreamExchangeExec>()
                && let Some(time) = exchange.event_time()
                && time.delay != i64::MAX
            {
                refuse_time_over_join(exchange.input(), time.column)?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        plan.apply(|node| {
            if let Some(streams) = unbounded_join_state(node) {
                join = Some((join_clause(node), streams));
                return Ok(TreeNodeRecursion::Stop);
            }
            // The operator that waits, not the ones above it that wait because it does.
            let waits = |plan: &Arc<dyn ExecutionPlan>| {
                plan.pipeline_behavior() == EmissionType::Final
                    || matches!(
                        plan.boundedness(),
                        Boundedness::Unbounded {
                            requires_infinite_memory: true
                        }
                    )
            };
            let waits_for_end = waits(node) && !node.children().into_iter().any(waits);
            let endless_child = node
                .children()
                .into_iter()
                .find(|child| child.boundedness().is_unbounded());
            if let (true, Some(child)) = (waits_for_end, endless_child) {
                failure = Some((clause_of(node), stream_names(child)));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if let Some((join, streams)) = join {
            return plan_err!(
                "{join} would keep every row of the unbounded stream {streams}: a join of two streams needs a bound on their event times, e.g. ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '5' SECOND AND a.ts + INTERVAL '1' SECOND (each side's declared event_time column), so that the watermarks can free its state. Otherwise give the join a state time-to-live (SET freshet.state_ttl_ms = '1h': rows then match within that much event time of each other and are kept that long), join bounded replays (bounded=true, or a generator with records=N), or look an unbounded stream up in a bounded table"
            );
        }
        match failure {
            None => Ok(plan),
            Some(((clause, advice), streams)) => plan_err!(
                "this query never produces a result on the unbounded stream {streams}: {clause} waits for the end of its input. To fix it, {advice}, or register the stream as bounded (bounded=true, or a generator with records=N)"
            ),
        }
    }

    fn name(&self) -> &str {
        "FreshetUnboundedInputCheck"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What the user wrote that `operator` runs, and what to write instead, in the words of an
/// error message.
fn clause_of(node: &Arc<dyn ExecutionPlan>) -> (&'static str, &'static str) {
    // An aggregation without aggregate functions removes duplicates.
    let distinct = match (
        node.downcast_ref::<AggregateExec>(),
        node.downcast_ref::<WindowAggregateExec>(),
    ) {
        (Some(aggregate), _) => aggregate.aggr_expr().is_empty(),
        (_, Some(aggregate)) => aggregate.aggregates().is_empty() && aggregate.window().is_none(),
        _ => false,
    };
    if distinct {
        return (
            "its SELECT DISTINCT or UNION (which removes duplicate rows)",
            "keep duplicates (UNION ALL), remove them per window (GROUP BY the columns WINDOW TUMBLING (ts, INTERVAL '1' MINUTE))",
        );
    }
    match node.name() {
        "WindowAggregateExec" | "AggregateExec" => (
            "its GROUP BY without a window (or an aggregate over the whole stream)",
            "aggregate over a window (GROUP BY ... WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)), emit its changes (EMIT CHANGES, or no EMIT clause)",
        ),
        "SortExec" | "SortPreservingMergeExec" | "PartialSortExec" => (
            "its ORDER BY",
            "order by the stream's event time (or a window's window_start) first, ascending (ORDER BY ts, …: rows leave sorted as the watermark passes them), drop the ORDER BY (rows leave as they come), order within a window function (OVER (PARTITION BY k ORDER BY ts))",
        ),
        window if window.contains("Window") => (
            "its window function (OVER)",
            "order the window by the event time with a frame that ends at most a bounded number of rows after the current one",
        ),
        _ => (
            "an operator of the query",
            "aggregate over a window, add EMIT CHANGES",
        ),
    }
}

/// The join `operator` runs, in the words of an error message: DataFusion plans an IN or
/// EXISTS subquery as a semi or anti join.
fn join_clause(operator: &Arc<dyn ExecutionPlan>) -> &'static str {
    let symmetric = operator.downcast_ref::<SymmetricHashJoinExec>();
    match symmetric.map(|join| join.join_type()) {
        Some(
            JoinType::LeftSemi
            | JoinType::RightSemi
            | JoinType::LeftAnti
            | JoinType::RightAnti
            | JoinType::LeftMark
            | JoinType::RightMark,
        ) => "an IN / EXISTS subquery over two unbounded streams",
        Some(_) => "a join of two unbounded streams",
        None => "a join (or an IN / EXISTS subquery)",
    }
}

/// The streams a join would keep without bound: a symmetric hash join keeps both sides, and
/// every other DataFusion join keeps (builds from or buffers) its first child; only a probe side may be
/// endless. An IN or EXISTS subquery is planned as such a join.
fn unbounded_join_state(node: &Arc<dyn ExecutionPlan>) -> Option<String> {
    // Freshet's interval join frees its state as the watermarks pass.
    if !node.name().ends_with("JoinExec") || node.name() == "IntervalJoinExec" {
        return None;
    }
    let children = node.children();
    let kept = if node.name() == "SymmetricHashJoinExec" {
        &children[..]
    } else {
        &children[..children.len().min(1)]
    };
    let endless: Vec<_> = kept
        .iter()
        .filter(|child| child.boundedness().is_unbounded())
        .map(|child| stream_names(child))
        .collect();
    (!endless.is_empty()).then(|| endless.join(", "))
}

/// The names of the unbounded streams under `plan`, for error messages.
pub(crate) fn stream_names(plan: &Arc<dyn ExecutionPlan>) -> String {
    let mut names = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>()
            && node.boundedness().is_unbounded()
        {
            names.push(format!("'{}'", source.table()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names.sort();
    names.dedup();
    if names.is_empty() {
        "input".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::plan_over;

    #[test]
    fn a_plain_group_by_with_emit_final_over_an_endless_stream_is_refused_with_advice() {
        let error = plan_over(
            "SELECT symbol, COUNT(*) FROM market_data GROUP BY symbol EMIT FINAL",
            None,
            1,
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("market_data"), "{error}");
        assert!(error.contains("no EMIT clause"), "{error}");
    }

    #[test]
    fn a_windowed_group_by_over_an_endless_stream_runs() {
        plan_over(
            "SELECT symbol, COUNT(*) FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' SECOND)",
            None,
            1,
            1,
        )
        .unwrap();
    }
}
