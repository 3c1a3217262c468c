//! [`StreamFilterExec`]: a WHERE over a stream that passes every input batch on at once.
//!
//! DataFusion's `FilterExec` gathers its passing rows into batches of the session's batch
//! size before it hands any on: over an endless stream with a selective filter the first row
//! would wait minutes. This filter evaluates the predicate on each batch and passes the
//! passing rows on at once, as one batch per input batch, empty ones included: an operator
//! downstream (the exchange) then learns that the source moved on even when no row passed,
//! and can advance its watermark from the source's progress (see
//! [`crate::progress::PartitionProgress`]).
//!
//! With a projection (the columns a projection right above reads: see the planner's filter
//! projection rule), only the columns kept are filtered: the predicate reads the input
//! batch, the rows passing are taken from its kept columns.
//!
//! Over a changelog (an input with an `op` column, see [`crate::changelog`]) it filters the
//! changelog's meaning rather than its rows: an upsert that fails the predicate becomes a
//! deletion of its key, whose earlier row may have passed; deletions pass.

use std::fmt;
use std::sync::Arc;

use datafusion::common::cast::as_boolean_array;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::StreamExt;

use crate::changelog::{filter_rows, op_column};
use crate::plan_util::single_child;

/// See the module documentation.
#[derive(Debug)]
pub struct StreamFilterExec {
    input: Arc<dyn ExecutionPlan>,
    predicate: Arc<dyn PhysicalExpr>,
    /// The predicate as DataFusion planned it, before Freshet's kernels stood in for parts
    /// of it ([`Self::with_kernel_predicate`]): what the properties are derived from, as
    /// DataFusion reads which columns a predicate pins to a constant from its own
    /// expressions only.
    planned_predicate: Arc<dyn PhysicalExpr>,
    /// DataFusion's `FilterExec`'s: the input's, with the columns the predicate pins to a
    /// constant (an ORDER BY on them is then met).
    properties: Arc<PlanProperties>,
    /// The input's changelog operation column, if it is a changelog.
    changelog_op: Option<usize>,
    /// The input columns passed on, in order (`None`: every one).
    projection: Option<Vec<usize>>,
    metrics: ExecutionPlanMetricsSet,
}

impl StreamFilterExec {
    /// Keeps the rows of `input` for which `predicate` is true.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        predicate: Arc<dyn PhysicalExpr>,
    ) -> Result<Self> {
        let properties = Arc::clone(
            FilterExec::try_new(Arc::clone(&predicate), Arc::clone(&input))?.properties(),
        );
        let changelog_op = op_column(&input.schema());
        Ok(Self {
            input,
            planned_predicate: Arc::clone(&predicate),
            predicate,
            properties,
            changelog_op,
            projection: None,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The filter passing on only the input columns `projection` (in its order). Not over a
    /// changelog, whose filter rewrites rows by their operation column.
    pub fn with_projection(&self, projection: Option<Vec<usize>>) -> Result<Self> {
        if projection.is_some() && self.changelog_op.is_some() {
            return internal_err!("a filter over a changelog passes every column on");
        }
        let planned = Arc::clone(&self.planned_predicate);
        let filter = FilterExecBuilder::new(planned, Arc::clone(&self.input))
            .apply_projection(projection.clone())?
            .build()?;
        let properties = Arc::clone(filter.properties());
        Ok(Self {
            input: Arc::clone(&self.input),
            predicate: Arc::clone(&self.predicate),
            planned_predicate: Arc::clone(&self.planned_predicate),
            properties,
            changelog_op: self.changelog_op,
            projection,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The filter with `predicate`, which computes the same as its predicate (by Freshet's
    /// kernels), in its place; its properties stay those of the predicate planned.
    pub fn with_kernel_predicate(&self, predicate: Arc<dyn PhysicalExpr>) -> Self {
        Self {
            input: Arc::clone(&self.input),
            predicate,
            planned_predicate: Arc::clone(&self.planned_predicate),
            properties: Arc::clone(&self.properties),
            changelog_op: self.changelog_op,
            projection: self.projection.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The predicate as DataFusion planned it (see [`Self::with_kernel_predicate`]).
    pub fn planned_predicate(&self) -> &Arc<dyn PhysicalExpr> {
        &self.planned_predicate
    }

    /// The input columns passed on (`None`: every one).
    pub fn projection(&self) -> Option<&[usize]> {
        self.projection.as_deref()
    }

    /// Whether the input is a changelog (see the module documentation).
    pub fn over_changelog(&self) -> bool {
        self.changelog_op.is_some()
    }

    pub fn predicate(&self) -> &Arc<dyn PhysicalExpr> {
        &self.predicate
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

impl DisplayAs for StreamFilterExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let how = match self.changelog_op {
            Some(_) => "over a changelog: an upsert that fails deletes its key",
            None => "each batch passed on at once",
        };
        write!(f, "StreamFilterExec: {}", self.predicate)?;
        if let Some(projection) = &self.projection {
            let schema = self.input.schema();
            let columns: Vec<String> = projection
                .iter()
                .map(|&i| format!("{}@{i}", schema.field(i).name()))
                .collect();
            write!(f, ", projection=[{}]", columns.join(", "))?;
        }
        write!(f, " ({how})")
    }
}

impl ExecutionPlan for StreamFilterExec {
    fn name(&self) -> &str {
        "StreamFilterExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        f(&self.predicate)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("StreamFilterExec", children)?;
        let filter = Self::try_new(input, Arc::clone(&self.planned_predicate))?;
        let filter = match &self.projection {
            Some(_) => filter.with_projection(self.projection.clone())?,
            None => filter,
        };
        Ok(Arc::new(
            filter.with_kernel_predicate(Arc::clone(&self.predicate)),
        ))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let predicate = Arc::clone(&self.predicate);
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let changelog_op = self.changelog_op;
        let projection = self.projection.clone();
        let filtered = input.map(move |batch| {
            let batch = batch?;
            let timer = metrics.elapsed_compute().timer();
            let mask = predicate.evaluate(&batch)?.into_array(batch.num_rows())?;
            let Ok(mask) = as_boolean_array(&mask) else {
                return internal_err!("a filter predicate gave {}", mask.data_type());
            };
            let passed = match &projection {
                Some(columns) => filter_rows(&batch.project(columns)?, mask, changelog_op)?,
                None => filter_rows(&batch, mask, changelog_op)?,
            };
            timer.done();
            metrics.record_output(passed.num_rows());
            Ok(passed)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            filtered,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
