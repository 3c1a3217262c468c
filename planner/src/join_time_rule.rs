//! [`KeepJoinEventTimes`]: a join of streams kept by a state time-to-live reads each side's
//! event time, even where the query selects none.
//!
//! A regular join over endless streams keeps each row for `state_ttl_ms` of event time, so
//! it needs both sides' event times. DataFusion's projection pushdown reads only the columns
//! a query names (Nexmark q3 names no time), so where `state_ttl_ms` is set this rule widens
//! the scan of a stream below a join to read its declared event-time column too, and carries
//! it up that side to a projection right below the join that gives the side's own columns.
//! The streaming join rule carries a time that projection drops through it (see
//! `join_rule.rs`). The rule runs after
//! DataFusion's logical rules in each optimizer pass, so the pruning those do again is
//! undone again.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::datasource::TableProvider;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, LogicalPlan, Projection, TableScan, TableScanBuilder};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use freshet_engine::StreamTable;

use crate::options::FreshetOptions;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct KeepJoinEventTimes;

impl OptimizerRule for KeepJoinEventTimes {
    fn name(&self) -> &str {
        "freshet_keep_join_event_times"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if FreshetOptions::of(config.options().as_ref()).state_ttl_ms.0 == 0 {
            return Ok(Transformed::no(plan));
        }
        plan.transform_up(|node| {
            let LogicalPlan::Join(join) = &node else {
                return Ok(Transformed::no(node));
            };
            if join.on.is_empty() {
                return Ok(Transformed::no(node));
            }
            let left = with_event_time(&join.left)?;
            let right = with_event_time(&join.right)?;
            if left.is_none() && right.is_none() {
                return Ok(Transformed::no(node));
            }
            let inputs = vec![
                left.unwrap_or_else(|| join.left.as_ref().clone()),
                right.unwrap_or_else(|| join.right.as_ref().clone()),
            ];
            let rebuilt = node.with_new_exprs(node.expressions(), inputs)?;
            Ok(Transformed::yes(rebuilt))
        })
    }
}

/// `plan` (a stream read through projections, filters and aliases) reading its stream's
/// event time too, carried up to a projection at its top that gives `plan`'s own columns
/// (where the streaming join rule finds it); `None` if it reads no stream that way or
/// already reads the time.
fn with_event_time(plan: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let Some((widened, _)) = carrying_event_time(plan)? else {
        return Ok(None);
    };
    let own: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let narrowed = Projection::try_new(own, Arc::new(widened))?;
    Ok(Some(LogicalPlan::Projection(narrowed)))
}

/// `plan` with its stream's event time as one more output column, and that column.
fn carrying_event_time(plan: &LogicalPlan) -> Result<Option<(LogicalPlan, Column)>> {
    match plan {
        LogicalPlan::TableScan(scan) => widened_scan(scan),
        LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) | LogicalPlan::Projection(_) => {
            let [input] = plan.inputs()[..] else {
                return Ok(None);
            };
            let Some((widened, time)) = carrying_event_time(input)? else {
                return Ok(None);
            };
            let mut expressions = plan.expressions();
            if let LogicalPlan::Projection(projection) = plan {
                // A projection that already names a column so keeps the plan as it is.
                if projection
                    .schema
                    .field_with_unqualified_name(&time.name)
                    .is_ok()
                {
                    return Ok(None);
                }
                expressions.push(Expr::Column(time.clone()));
            }
            let rebuilt = plan.with_new_exprs(expressions, vec![widened])?;
            let time = match &rebuilt {
                LogicalPlan::SubqueryAlias(alias) => {
                    Column::new(Some(alias.alias.clone()), time.name)
                }
                _ => time,
            };
            Ok(Some((rebuilt, time)))
        }
        _ => Ok(None),
    }
}

/// `scan`, of a stream whose declared event time it does not read, reading it too, and the
/// time's column.
fn widened_scan(scan: &TableScan) -> Result<Option<(LogicalPlan, Column)>> {
    let Ok(provider) = source_as_provider(&scan.source) else {
        return Ok(None);
    };
    let Some(stream) = provider.downcast_ref::<StreamTable>() else {
        return Ok(None);
    };
    let Some(name) = &stream.options().event_time else {
        return Ok(None);
    };
    let Ok(time) = stream.schema().index_of(name) else {
        return Ok(None);
    };
    let Some(projection) = &scan.projection else {
        return Ok(None);
    };
    if projection.contains(&time) {
        return Ok(None);
    }
    let mut widened = projection.clone();
    widened.push(time);
    let wide = TableScanBuilder::from(scan.clone())
        .with_projection(Some(widened))
        .build()?;
    let column = Column::new(Some(scan.table_name.clone()), name);
    Ok(Some((LogicalPlan::TableScan(wide), column)))
}
