//! [`unselected_key_columns`]: which columns of a changelog's key the query's output does not
//! carry, for EXPLAIN.
//!
//! An upsert changelog is applied by key; a query that selects only some of its key's columns
//! (Nexmark q6's window over its top-1 keeps the seller, not the auction) emits rows that can
//! be read one by one but not applied. The key is found where the changelog is made (the
//! aggregation, top-N or window over a changelog nearest the output) and followed up through
//! the projections, filters and exchanges above it, by column position, so a key column
//! renamed by an alias is still found.

use std::sync::Arc;

use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;
use freshet_engine::aggregate::{ChangelogAggregateExec, WindowAggregateExec};
use freshet_engine::changelog::op_column;
use freshet_engine::over::{ChangelogOverExec, TopNExec};

/// The names (as where the changelog is made) of the key columns `plan`'s output lacks;
/// empty if it carries them all, or if `plan` is not a changelog whose key can be followed.
pub fn unselected_key_columns(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let Some((names, positions)) = key_positions(plan) else {
        return Vec::new();
    };
    names
        .into_iter()
        .zip(positions)
        .filter(|(_, position)| position.is_none())
        .map(|(name, _)| name)
        .collect()
}

/// The key columns' names where the changelog is made, and each one's position in `plan`'s
/// output (`None`: dropped).
type KeyPositions = (Vec<String>, Vec<Option<usize>>);

fn key_positions(plan: &Arc<dyn ExecutionPlan>) -> Option<KeyPositions> {
    if let Some(key) = made_key(plan) {
        let schema = plan.schema();
        let names = key
            .iter()
            .map(|&k| schema.field(k).name().clone())
            .collect();
        // The window is a key column, named in the output as its start.
        let names = match plan.downcast_ref::<WindowAggregateExec>() {
            Some(aggregate) => window_start_named(names, aggregate),
            None => names,
        };
        return Some((names, key.into_iter().map(Some).collect()));
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let (names, below) = key_positions(projection.input())?;
        let positions = below
            .into_iter()
            .map(|position| {
                let position = position?;
                projection.expr().iter().position(|e| {
                    e.expr
                        .downcast_ref::<Column>()
                        .is_some_and(|c| c.index() == position)
                })
            })
            .collect();
        return Some((names, positions));
    }
    // Filters, exchanges, merges and limits pass every column on where it was.
    match plan.children().as_slice() {
        [input] if input.schema().fields() == plan.schema().fields() => key_positions(input),
        _ => None,
    }
}

/// `names` of an aggregation's key, its window's column called `window_start`.
fn window_start_named(mut names: Vec<String>, aggregate: &WindowAggregateExec) -> Vec<String> {
    if let Some(window) = aggregate.window()
        && let Some(name) = names.get_mut(window.position)
    {
        *name = "window_start".to_string();
    }
    names
}

/// The key of the changelog `plan` makes, as positions in its output.
fn made_key(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<usize>> {
    op_column(&plan.schema())?;
    if let Some(aggregate) = plan.downcast_ref::<WindowAggregateExec>() {
        return Some((0..aggregate.group_by().len()).collect());
    }
    if let Some(aggregate) = plan.downcast_ref::<ChangelogAggregateExec>() {
        return Some((0..aggregate.group_by().len()).collect());
    }
    if let Some(over) = plan.downcast_ref::<ChangelogOverExec>() {
        return Some(over.output_key());
    }
    if let Some(top) = plan.downcast_ref::<TopNExec>() {
        let mut key = top
            .spec()
            .partition_by
            .iter()
            .map(|expr| expr.downcast_ref::<Column>().map(Column::index))
            .collect::<Option<Vec<_>>>()?;
        if top.spec().limit > 1 {
            key.push(top.spec().schema.fields().len() - 1);
        }
        return Some(key);
    }
    None
}
