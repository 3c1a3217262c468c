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
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::partial_sort::PartialSortExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, Partitioning, ReplaceChildrenOptions,
};
use freshet_engine::aggregate::{ChangelogAggregateExec, WindowAggregateExec};
use freshet_engine::changelog::{OP_COLUMN, op_column};
use freshet_engine::over::{ChangelogOverExec, ChangelogOverSpec, TopNExec};
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
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let reads_changelog = node
                .children()
                .iter()
                .any(|child| op_column(&child.schema()).is_some());
            if reads_changelog {
                return carry_changelog(node, config);
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
        .and_then(
            |plan| match is_sort(&plan) && op_column(&plan.schema()).is_some() {
                true => refuse(&plan),
                false => Ok(plan),
            },
        )
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
fn carry_changelog(
    node: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    // DataFusion sorts a window's input; the window over a changelog is judged above its
    // sort, and any other sort of a changelog is an ORDER BY, refused by what reads it.
    if is_sort(&node) {
        return Ok(Transformed::no(node));
    }
    if let Some(over) = changelog_over(&node, config)? {
        return Ok(Transformed::yes(over));
    }
    if let Some(sort) = node.children().into_iter().find(|child| is_sort(child)) {
        return refuse(sort);
    }
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
    if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>()
        && let Some(over_changelog) = changelog_aggregate(aggregate, config)?
    {
        return Ok(Transformed::yes(over_changelog));
    }
    refuse(&node)
}

/// The error for `node`, which would read a changelog's rows as records.
fn refuse<T>(node: &Arc<dyn ExecutionPlan>) -> Result<T> {
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

/// A GROUP BY without a window over an aggregation's changelog, as Freshet's changelog
/// aggregation (which retracts the row each upsert replaces); `None` where the changelog's
/// key cannot be traced to it.
fn changelog_aggregate(
    aggregate: &WindowAggregateExec,
    config: &ConfigOptions,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let spec = aggregate.spec();
    if spec.window.is_some() {
        return Ok(None);
    }
    if spec.filters.iter().any(Option::is_some) {
        return plan_err!(
            "an aggregate with FILTER over a changelog is not supported: an aggregation over a changelog retracts the rows it replaces; filter in a WHERE instead"
        );
    }
    let Some((input, key)) = keyed_changelog(aggregate.exchange().input())? else {
        return Ok(None);
    };
    // A changelog key's rows meet in one stream, in order: hashed on the GROUP BY keys when
    // each is a column of the changelog's key (a key's group never changes), else one stream.
    let group_in_key = spec.group_by.iter().all(|(expr, _)| {
        expr.downcast_ref::<Column>()
            .is_some_and(|column| key.contains(&column.index()))
    });
    let (strategy, reason) = match group_in_key && !spec.group_by.is_empty() {
        true => (
            RoutingStrategy::Hash(spec.group_by.iter().map(|(e, _)| Arc::clone(e)).collect()),
            "auto: a GROUP BY over a changelog, hashed on its keys, which are the changelog's",
        ),
        false => (
            RoutingStrategy::FanIn,
            "auto: a GROUP BY over a changelog by other keys than the changelog's: one stream",
        ),
    };
    let exchange =
        StreamExchangeExec::try_new(input, strategy, config.execution.target_partitions, None)?
            .with_reason(reason);
    Ok(Some(Arc::new(ChangelogAggregateExec::try_new(
        Arc::new(exchange),
        key,
        spec.group_by.clone(),
        spec.aggregates.clone(),
        &spec.schema,
    )?)))
}

/// Whether `node` is one of DataFusion's sorts.
fn is_sort(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.is::<SortExec>() || node.is::<SortPreservingMergeExec>() || node.is::<PartialSortExec>()
}

/// DataFusion's window operator `node` over a changelog (through the sort and
/// repartitioning it planned below, which a changelog does not need), as Freshet's
/// [`ChangelogOverExec`]; `None` for another operator.
fn changelog_over(
    node: &Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let (window_exprs, input) = if let Some(window) = node.downcast_ref::<BoundedWindowAggExec>() {
        (window.window_expr().to_vec(), window.input())
    } else if let Some(window) = node.downcast_ref::<WindowAggExec>() {
        (window.window_expr().to_vec(), window.input())
    } else {
        return Ok(None);
    };
    // The window's input columns without `op`: the output's first columns.
    let leading = input.schema().fields().len() - 1;
    let mut below = input;
    while is_sort(below) || below.is::<RepartitionExec>() || below.is::<CoalescePartitionsExec>() {
        match below.children().first() {
            Some(child) => below = child,
            None => break,
        }
    }
    let Some((changelog, key)) = keyed_changelog(below)? else {
        return plan_err!(
            "a window function over this changelog is not supported: its rows cannot be traced to the changelog's key (the keys of an EMIT CHANGES aggregation or a top-N), which says which earlier row each row replaces"
        );
    };
    let first = &window_exprs[0];
    // A key's rows meet in one stream, in order: hashed on the PARTITION BY keys when they
    // read only columns of the changelog's key (a key's partition never changes), else one
    // stream.
    let partition_in_key = !first.partition_by().is_empty()
        && first.partition_by().iter().all(|expr| {
            collect_columns(expr)
                .iter()
                .all(|column| key.contains(&column.index()))
        });
    let (strategy, reason) = match partition_in_key {
        true => (
            RoutingStrategy::Hash(first.partition_by().to_vec()),
            "auto: a window over a changelog, hashed on its PARTITION BY keys, which depend on the changelog's only",
        ),
        false => (
            RoutingStrategy::FanIn,
            "auto: a window over a changelog partitioned by other keys than the changelog's: one stream",
        ),
    };
    let exchange = StreamExchangeExec::try_new(
        changelog,
        strategy,
        config.execution.target_partitions,
        None,
    )?
    .with_reason(reason);
    let spec = ChangelogOverSpec {
        window_exprs,
        key,
        leading,
    };
    Ok(Some(Arc::new(ChangelogOverExec::try_new(
        Arc::new(exchange),
        spec,
    )?)))
}

/// A changelog's plan and the columns of its key.
type KeyedChangelog = (Arc<dyn ExecutionPlan>, Vec<usize>);

/// `plan`, a changelog, with the columns of its key: `plan` itself, or with the key's
/// columns added to the projections that dropped them (under their names, or as
/// `__changelog_key_N` where the projection names another column so; before `op`); `None`
/// if the key cannot be traced through it.
fn keyed_changelog(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<KeyedChangelog>> {
    if let Some(aggregate) = plan.downcast_ref::<WindowAggregateExec>() {
        if op_column(&plan.schema()).is_none() {
            return Ok(None);
        }
        let key = (0..aggregate.group_by().len()).collect();
        // The aggregation above emits a row per changed group and batch: the rows of the
        // changes in between it would only apply and replace.
        return Ok(Some(match aggregate.with_changes_per_batch()? {
            Some(per_batch) => (Arc::new(per_batch), key),
            None => (Arc::clone(plan), key),
        }));
    }
    if let Some(top) = plan.downcast_ref::<TopNExec>() {
        if op_column(&plan.schema()).is_none() {
            return Ok(None);
        }
        // Keyed by the PARTITION BY keys and, above one row per key, the rank.
        let mut key = Vec::new();
        for expr in &top.spec().partition_by {
            match expr.downcast_ref::<Column>() {
                Some(column) => key.push(column.index()),
                None => return Ok(None),
            }
        }
        if top.spec().limit > 1 {
            key.push(top.spec().schema.fields().len() - 1);
        }
        return Ok(Some((Arc::clone(plan), key)));
    }
    if let Some(over) = plan.downcast_ref::<ChangelogOverExec>() {
        return Ok(Some((Arc::clone(plan), over.output_key())));
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let Some((input, key)) = keyed_changelog(projection.input())? else {
            return Ok(None);
        };
        let input_schema = input.schema();
        let mut expressions: Vec<ProjectionExpr> = projection
            .expr()
            .iter()
            .filter(|e| e.alias != OP_COLUMN)
            .cloned()
            .collect();
        let mut positions = Vec::with_capacity(key.len());
        for (n, &column) in key.iter().enumerate() {
            let passed = expressions.iter().position(|e| {
                e.expr
                    .downcast_ref::<Column>()
                    .is_some_and(|c| c.index() == column)
            });
            positions.push(passed.unwrap_or_else(|| {
                // Named as below, unless the projection names another column so.
                let name = input_schema.field(column).name();
                let alias = match expressions.iter().any(|e| &e.alias == name) {
                    true => format!("__changelog_key_{n}"),
                    false => name.clone(),
                };
                expressions.push(ProjectionExpr::new(
                    Arc::new(Column::new(name, column)),
                    alias,
                ));
                expressions.len() - 1
            }));
        }
        let Some(op) = op_column(&input_schema) else {
            return Ok(None);
        };
        expressions.push(ProjectionExpr::new(
            Arc::new(Column::new(OP_COLUMN, op)),
            OP_COLUMN.to_string(),
        ));
        let projected = ProjectionExec::try_new(expressions, input)?;
        return Ok(Some((Arc::new(projected), positions)));
    }
    if let Some(filter) = plan.downcast_ref::<StreamFilterExec>() {
        let Some((input, key)) = keyed_changelog(filter.input())? else {
            return Ok(None);
        };
        let filtered = StreamFilterExec::try_new(input, Arc::clone(filter.predicate()))?;
        return Ok(Some((Arc::new(filtered), key)));
    }
    if passes_rows_on(plan)
        && let [input] = plan.children().as_slice()
    {
        let Some((below, key)) = keyed_changelog(input)? else {
            return Ok(None);
        };
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        return Ok(Some((
            Arc::clone(plan).replace_children(vec![below], options)?,
            key,
        )));
    }
    Ok(None)
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
