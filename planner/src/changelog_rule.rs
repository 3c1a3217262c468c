//! [`ChangelogRule`]: carries a changelog's `op` column from the EMIT CHANGES aggregation
//! that makes it up to the query's output, and refuses the operators that would read its rows
//! as plain records.
//!
//! An EMIT CHANGES aggregation is given its `op` column here (until then its output is
//! DataFusion's aggregate schema, so the rules before this one trace it as usual; see
//! `freshet_engine::changelog`). Above it, walking up:
//! - a projection (the SELECT list) gets `op` appended, so the output keeps it;
//! - a HAVING right above a tumbling, hopping or whole-stream changelog aggregation moves
//!   into it: the aggregation knows which groups' rows are out, so a group that stops passing
//!   is deleted once and one that never passed is never mentioned;
//! - any other filter (a WHERE over the changelog, a session changelog's HAVING) becomes
//!   Freshet's stream filter, which over a changelog turns an upsert that fails the
//!   predicate into a deletion of its key;
//! - operators that pass rows on unchanged in content and order (gathers, limits, fan-in
//!   exchanges; hash exchanges, which keep each key's order, for the keyed operator above
//!   them to be judged) pass the changelog on; a round-robin repartition is taken out, since
//!   rows dealt to several streams would reach the reader out of the changelog's order;
//! - anything else — an aggregation, a join, a window function, a sort, a union — would read
//!   updates and deletions as new records, so the query is refused with a message that says
//!   what to write instead.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, plan_err};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use freshet_engine::aggregate::WindowAggregateExec;
use freshet_engine::changelog::{OP_COLUMN, op_column};
use freshet_engine::over::TopNExec;
use freshet_engine::{StreamExchangeExec, StreamFilterExec};
use freshet_partitioner::RoutingStrategy;

use crate::stream_filter_rule::with_filter_projection;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ChangelogRule;

impl PhysicalOptimizerRule for ChangelogRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let reads_changelog = node
                .children()
                .iter()
                .any(|child| op_column(&child.schema()).is_some());
            if reads_changelog {
                return carry_changelog(node);
            }
            // A changelog aggregation: its output gains the op column the nodes above read.
            if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>()
                && let Some(with_op) = aggregate.with_op_column()?
            {
                let with_op: Arc<dyn ExecutionPlan> = Arc::new(with_op);
                return Ok(Transformed::yes(with_op));
            }
            // So is a top-N that emits changes.
            if let Some(top) = node.downcast_ref::<TopNExec>()
                && let Some(with_op) = top.with_op_column()?
            {
                let with_op: Arc<dyn ExecutionPlan> = Arc::new(with_op);
                return Ok(Transformed::yes(with_op));
            }
            Ok(Transformed::no(node))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "FreshetChangelog"
    }

    /// Projections and filters over a changelog gain its `op` column.
    fn schema_check(&self) -> bool {
        false
    }
}

/// `node`, one of whose inputs is a changelog, made to pass the changelog on; an error for
/// an operator that cannot.
fn carry_changelog(node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        return with_op(projection).map(Transformed::yes);
    }
    if let Some(filter) = node.downcast_ref::<FilterExec>() {
        let input = Arc::clone(filter.input());
        // A HAVING right above its aggregation is applied by it, group by group; any other
        // filter by the stream filter, key by key.
        let having = match input.downcast_ref::<WindowAggregateExec>() {
            Some(aggregate) => aggregate.with_having(Arc::clone(filter.predicate()))?,
            None => None,
        };
        let filtered: Arc<dyn ExecutionPlan> = match having {
            Some(aggregate) => Arc::new(aggregate),
            None => Arc::new(StreamFilterExec::try_new(
                Arc::clone(&input),
                Arc::clone(filter.predicate()),
            )?),
        };
        let projected = with_filter_projection(filter, filtered)?;
        return match projected.downcast_ref::<ProjectionExec>() {
            Some(projection) => with_op(projection).map(Transformed::yes),
            None => Ok(Transformed::yes(projected)),
        };
    }
    // Batches dealt round-robin to several streams would reach the reader out of the order
    // the changelog is applied in: the changelog stays on its streams.
    if let Some(repartition) = node.downcast_ref::<RepartitionExec>()
        && matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_))
    {
        return Ok(Transformed::yes(Arc::clone(repartition.input())));
    }
    if passes_rows_on(&node) {
        return Ok(Transformed::no(node));
    }
    let what = if node.is::<WindowAggregateExec>() || node.name().contains("Aggregate") {
        "an aggregation"
    } else if node.name().contains("Join") {
        "a join"
    } else if node.name().contains("Window") || node.name().contains("Over") {
        "a window function"
    } else if node.name().contains("Sort") {
        "ORDER BY"
    } else if node.name().contains("Union") {
        "UNION"
    } else {
        "this operation"
    };
    plan_err!(
        "{what} over a changelog is not supported ({} reads the rows of an EMIT CHANGES \
         aggregation): a changelog's rows update and delete earlier rows rather than add new \
         ones, and EMIT CHANGES applies to every aggregation of the query. Without EMIT \
         CHANGES the inner aggregation emits final rows, which {what} reads as records \
         (a window over an inner window's window_start, for example)",
        node.name()
    )
}

/// Whether `node` passes every input row on as it is, in order, so the changelog keeps its
/// meaning.
fn passes_rows_on(node: &Arc<dyn ExecutionPlan>) -> bool {
    // A hash exchange keeps each key's rows in order; it feeds a keyed operator, which is
    // judged in turn.
    if let Some(repartition) = node.downcast_ref::<RepartitionExec>() {
        return !matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_));
    }
    if let Some(exchange) = node.downcast_ref::<StreamExchangeExec>() {
        return !matches!(exchange.strategy(), RoutingStrategy::RoundRobin);
    }
    node.is::<CoalescePartitionsExec>()
        || node.is::<GlobalLimitExec>()
        || node.is::<LocalLimitExec>()
        || node.is::<StreamFilterExec>()
}

/// `projection` with the `op` column of its input appended (as it is if it has one).
fn with_op(projection: &ProjectionExec) -> Result<Arc<dyn ExecutionPlan>> {
    let input = projection.input();
    let schema = projection.schema();
    if op_column(&schema).is_some() {
        return Ok(Arc::new(projection.clone()));
    }
    let Some(op) = op_column(&input.schema()) else {
        return Ok(Arc::new(projection.clone()));
    };
    // A top-N of more than one row per key is keyed by its rank as well.
    if let Some((_, limit)) = top_n_rank(input)
        && limit > 1
        && top_n_rank(&(Arc::new(projection.clone()) as Arc<dyn ExecutionPlan>)).is_none()
    {
        return plan_err!(
            "a top-{limit} over a stream emits an upsert changelog keyed by the PARTITION BY keys and the ROW_NUMBER: select the ROW_NUMBER column too, so that each row's key is in the output"
        );
    }
    if schema.field_with_name(OP_COLUMN).is_ok() {
        return plan_err!(
            "a changelog (EMIT CHANGES) has a column named '{OP_COLUMN}' for each row's operation; \
             the query names another column '{OP_COLUMN}': rename it (… AS another_name)"
        );
    }
    let mut expressions = projection.expr().to_vec();
    expressions.push(ProjectionExpr::new(
        Arc::new(Column::new(OP_COLUMN, op)),
        OP_COLUMN.to_string(),
    ));
    Ok(Arc::new(ProjectionExec::try_new(
        expressions,
        Arc::clone(input),
    )?))
}

/// Where the rank column of the top-N that `plan` passes on is, with the top-N's N: the
/// top-N's last column, followed through the projections above it.
fn top_n_rank(plan: &Arc<dyn ExecutionPlan>) -> Option<(usize, usize)> {
    if let Some(top) = plan.downcast_ref::<TopNExec>() {
        return Some((top.spec().schema.fields().len() - 1, top.spec().limit));
    }
    let projection = plan.downcast_ref::<ProjectionExec>()?;
    let (rank, limit) = top_n_rank(projection.input())?;
    let position = projection.expr().iter().position(|projected| {
        projected
            .expr
            .downcast_ref::<Column>()
            .is_some_and(|column| column.index() == rank)
    })?;
    Some((position, limit))
}
