//! [`StreamingQuery`]: a planned streaming query, run as one stream of results per output
//! partition or as one merged stream.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, displayable, execute_stream,
};
use freshet_engine::aggregate::{AggregateEmit, ChangelogAggregateExec, WindowAggregateExec};
use freshet_engine::checkpoint::Checkpointing;
use freshet_engine::join::IntervalJoinExec;
use freshet_engine::late_records::{LateBatch, LateRecords, side_output_schema};
use freshet_engine::over::{ChangelogOverExec, OverWindowExec, TopNEmit, TopNExec};
use freshet_engine::{StreamExchangeExec, StreamSortExec, StreamSourceExec};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::changelog_key::unselected_key_columns;
use crate::execution_errors::explain_execution_error;
use crate::stream_sort_rule::stream_sorts_for_checkpoints;

/// A planned streaming query.
#[derive(Clone)]
pub struct StreamingQuery {
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
}

impl StreamingQuery {
    pub(crate) fn new(plan: Arc<dyn ExecutionPlan>, task_ctx: Arc<TaskContext>) -> Self {
        Self { plan, task_ctx }
    }

    /// This query taking part in `checkpointing`: each operator finds it in its task
    /// context when it runs.
    pub fn with_checkpointing(&self, checkpointing: Arc<Checkpointing>) -> Self {
        let ctx = &self.task_ctx;
        let config = ctx.session_config().clone().with_extension(checkpointing);
        let task_ctx = TaskContext::new(
            ctx.task_id(),
            ctx.session_id(),
            config,
            ctx.scalar_functions().clone(),
            ctx.higher_order_functions().clone(),
            ctx.aggregate_functions().clone(),
            ctx.window_functions().clone(),
            ctx.runtime_env(),
        );
        Self {
            plan: Arc::clone(&self.plan),
            task_ctx: Arc::new(task_ctx),
        }
    }

    /// This query as a checkpointed run runs it: an ORDER BY led by an event time sorts as
    /// the stream goes over bounded replays too (Freshet's stream sort, whose held rows a
    /// checkpoint keeps, where DataFusion's sort would hold every row to the end). Read a
    /// checkpointed run's metrics from the query this returns.
    pub fn for_checkpoints(&self) -> Result<Self> {
        Ok(Self {
            plan: stream_sorts_for_checkpoints(&self.plan)?,
            task_ctx: Arc::clone(&self.task_ctx),
        })
    }

    /// The schema of the results.
    pub fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    /// The physical plan.
    pub fn plan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.plan
    }

    /// Number of output partitions (parallel result streams).
    pub fn output_partitions(&self) -> usize {
        self.plan.output_partitioning().partition_count()
    }

    /// One result stream per output partition; drive each from its own task.
    pub fn execute_partitions(&self) -> Result<Vec<SendableRecordBatchStream>> {
        (0..self.output_partitions())
            .map(|partition| {
                self.plan
                    .execute(partition, Arc::clone(&self.task_ctx))
                    .map(|stream| self.explaining_errors(stream))
            })
            .collect()
    }

    /// `stream` with its errors put in the user's terms.
    fn explaining_errors(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let plan = Arc::clone(&self.plan);
        let schema = stream.schema();
        let batches = stream.map(move |batch| batch.map_err(|e| explain_execution_error(&plan, e)));
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }

    /// Stops every stream the query reads, as if their data had ended: the query flushes
    /// what its operators hold (open windows are emitted) and its result streams end.
    pub fn stop(&self) {
        let _ = self.plan.apply(|node| {
            if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
                source.stop();
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }

    /// All results as one stream (the partitions run in parallel tasks and are merged).
    pub fn execute_merged(&self) -> Result<SendableRecordBatchStream> {
        execute_stream(Arc::clone(&self.plan), Arc::clone(&self.task_ctx))
            .map(|stream| self.explaining_errors(stream))
    }

    /// The records the query's window aggregations, window functions, joins and sorts
    /// drop as late, as a stream of batches of the operators' input rows: one schema with
    /// every column of their inputs by name, null where a row's operator does not have it.
    /// Ask before executing the query; read it while the query runs (it ends when the
    /// query's operators are gone).
    pub fn late_records(&self) -> SendableRecordBatchStream {
        let (schema, receiver) = self.late_batches();
        let batches = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver
                .recv()
                .await
                .map(|(_, batch)| (Ok(batch), receiver))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }

    /// Whether an aggregation of the plan judges lateness from partial states (hopping
    /// windows over a replay of files, planned without `keep_late_records`): its late
    /// records never reach [`Self::late_records`], and asking for them fails when the query
    /// runs. Plan the query again with `keep_late_records = true` to have them.
    pub fn defers_lateness(&self) -> Result<bool> {
        let mut defers = false;
        self.plan.apply(|node| {
            if let Some(exchange) = node.downcast_ref::<StreamExchangeExec>() {
                defers |= exchange.defers_lateness()?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(defers)
    }

    /// The late records as [`Self::late_records`] gives them, each batch with the number of
    /// checkpoint barriers its operator partition had passed: the schema and the receiver.
    pub fn late_batches(&self) -> (SchemaRef, mpsc::UnboundedReceiver<LateBatch>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut outputs: Vec<(LateRecords, SchemaRef)> = Vec::new();
        let _ = self.plan.apply(|node| {
            if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() {
                outputs.push((
                    aggregate.late_records().clone(),
                    aggregate.late_records_schema(),
                ));
            } else if let Some(over) = node.downcast_ref::<OverWindowExec>() {
                outputs.push((over.late_records().clone(), node.children()[0].schema()));
            } else if let Some(sort) = node.downcast_ref::<StreamSortExec>() {
                outputs.push((sort.late_records().clone(), node.schema()));
            } else if let Some(join) = node.downcast_ref::<IntervalJoinExec>() {
                for (late_records, schema) in join.late_records() {
                    outputs.push((late_records.clone(), schema));
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let inputs: Vec<SchemaRef> = outputs
            .iter()
            .map(|(_, schema)| Arc::clone(schema))
            .collect();
        let schema = side_output_schema(&inputs);
        for (late_records, _) in &outputs {
            late_records.subscribe(sender.clone(), Arc::clone(&schema));
        }
        (schema, receiver)
    }

    /// The sum of the metric `name` (e.g. `late_records_dropped`) over the plan's operators
    /// and partitions, so far.
    pub fn metric_total(&self, name: &str) -> usize {
        let mut total = 0;
        let _ = self.plan.apply(|node| {
            if let Some(metrics) = node.metrics() {
                total += metrics.sum_by_name(name).map_or(0, |v| v.as_usize());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        total
    }

    /// Records the query's sources have handed out so far.
    pub fn records_read(&self) -> usize {
        let mut records = 0;
        let _ = self.plan.apply(|node| {
            if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
                records += source.records_read();
            }
            Ok(TreeNodeRecursion::Continue)
        });
        records
    }

    /// For EXPLAIN: the key columns of the query's changelog that its output lacks, if any:
    /// a consumer cannot apply its rows by key.
    fn unselected_key(&self) -> String {
        match unselected_key_columns(&self.plan).as_slice() {
            [] => String::new(),
            names => format!(
                "; {} not selected, so its rows cannot be applied by key",
                names.join(", ")
            ),
        }
    }

    /// The plan as `freshet explain` prints it: a summary line, then the operator tree with
    /// Freshet's sources, partitioning and exchanges.
    pub fn explain(&self) -> String {
        let mut aggregation = None;
        let mut changelog_key = String::new();
        let mut top_n = None;
        let mut over_changelog = None;
        let _ = self.plan.apply(|node| {
            if let Some(over) = node.downcast_ref::<ChangelogOverExec>() {
                over_changelog = Some(over.changelog_key());
                return Ok(TreeNodeRecursion::Stop);
            }
            if let Some(top) = node.downcast_ref::<TopNExec>() {
                top_n = Some((top.spec().emit, top.spec().limit, top.changelog_key()));
                return Ok(TreeNodeRecursion::Stop);
            }
            if let Some(aggregate) = node.downcast_ref::<ChangelogAggregateExec>() {
                aggregation = Some((AggregateEmit::ChangesPerBatch, false));
                let names: Vec<&str> = aggregate
                    .group_by()
                    .iter()
                    .map(|(_, n)| n.as_str())
                    .collect();
                changelog_key = names.join(", ");
                return Ok(TreeNodeRecursion::Stop);
            }
            if let Some(aggregate) = node.downcast_ref::<WindowAggregateExec>() {
                aggregation = Some((aggregate.emit(), aggregate.window().is_some()));
                let schema = aggregate.schema();
                let window = aggregate.window().map(|w| w.position);
                let names: Vec<&str> = (0..aggregate.group_by().len())
                    .map(|i| match window {
                        Some(position) if position == i => "window_start",
                        _ => schema.field(i).name().as_str(),
                    })
                    .collect();
                changelog_key = names.join(", ");
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let changes = |per: &str| {
            format!(
                "changes (an upsert changelog keyed by ({changelog_key}), its op column +I, +U or -D; a row per {per}{})",
                self.unselected_key()
            )
        };
        let emit = match (aggregation, self.plan.pipeline_behavior()) {
            _ if let Some(key) = &over_changelog => format!(
                "changes (an upsert changelog keyed by ({key}), its op column +I or +U; a row per changed row and input batch{})",
                self.unselected_key()
            ),
            _ if let Some((TopNEmit::Final, limit, _)) = &top_n => {
                format!("final (the first {limit} rows of each key at the end of the input)")
            }
            _ if let Some((TopNEmit::Changes, _, key)) = &top_n => format!(
                "changes (an upsert changelog keyed by ({key}), its op column +I or +U; a row per changed rank and input batch{})",
                self.unselected_key()
            ),
            (Some((AggregateEmit::Final, true)), _) => {
                "final (one row per group when its window closes)".to_string()
            }
            (Some((AggregateEmit::Final, false)), _) => {
                "final (one row per group at the end of the input)".to_string()
            }
            (Some((AggregateEmit::ChangesPerRecord, _)), _) => changes("input record"),
            (Some((AggregateEmit::ChangesPerBatch, _)), _) => {
                changes("changed group and input batch")
            }
            (None, EmissionType::Incremental) => {
                "append (rows leave as soon as they are computed)".to_string()
            }
            (None, EmissionType::Final) => "final (rows leave at the end of the input)".to_string(),
            (None, EmissionType::Both) => "incremental and final".to_string(),
        };
        let boundedness = if self.plan.boundedness().is_unbounded() {
            "unbounded"
        } else {
            "bounded"
        };
        format!(
            "Freshet plan: emit={emit}, input={boundedness}, output_partitions={}\n{}",
            self.output_partitions(),
            displayable(self.plan.as_ref()).indent(false)
        )
    }
}
