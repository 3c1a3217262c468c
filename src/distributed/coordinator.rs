//! The coordinator's side of a query across workers: the plan with its network boundaries
//! handed to datafusion-distributed, which sends each stage to the workers and runs the
//! head (the merge of every output) here.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, DataFusionError, Result, plan_err};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SendableRecordBatchStream, SessionState, SessionStateBuilder};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion_distributed::{
    DistributedExt, DistributedMetricsFormat, SessionStateBuilderExt, WorkerResolver,
    display_plan_ascii, rewrite_distributed_plan_with_metrics,
};
use freshet_engine::unless_panicked;
use freshet_planner::StreamingContext;
use futures::{Stream, StreamExt};
use url::Url;

use super::codec::FreshetCodec;
use super::placement::distribute;
use super::spec::QuerySpec;
use super::totals::{DROPPED, RECORDS_READ, WIRE_BYTES, total};

/// The workers a query runs on.
#[derive(Debug, Clone)]
pub struct WorkerUrls(Vec<Url>);

impl WorkerUrls {
    /// `HOST:PORT,HOST:PORT,…` (or full `http://` URLs).
    pub fn parse(list: &str) -> Result<Self> {
        let urls = list
            .split(',')
            .map(str::trim)
            .filter(|worker| !worker.is_empty())
            .map(|worker| {
                let url = match worker.contains("://") {
                    true => worker.to_string(),
                    false => format!("http://{worker}"),
                };
                Url::parse(&url)
                    .or_else(|e| plan_err!("--workers: '{worker}' is not HOST:PORT ({e})"))
            })
            .collect::<Result<Vec<_>>>()?;
        if urls.is_empty() {
            return plan_err!("--workers: expected HOST:PORT,… with at least one worker");
        }
        Ok(Self(urls))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl WorkerResolver for WorkerUrls {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.clone())
    }
}

/// Hands datafusion-distributed a physical plan made beforehand, whatever the logical plan.
#[derive(Debug)]
struct PlannedBefore(Arc<dyn ExecutionPlan>);

#[async_trait]
impl QueryPlanner for PlannedBefore {
    async fn create_physical_plan(
        &self,
        _logical_plan: &LogicalPlan,
        _session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::clone(&self.0))
    }
}

/// A query running across workers.
pub struct DistributedRun {
    /// The merged output of every stream.
    pub stream: SendableRecordBatchStream,
    /// What the workers counted, once the output has been read.
    pub report: RunReport,
}

/// Queries of a [`StreamingContext`] across workers.
pub trait ContextAcrossWorkers {
    /// Runs `sql` over this context's streams and Freshet settings across `workers`, its
    /// streams (the context's partitions) spread evenly over them (see
    /// [`QuerySpec::of_context`]).
    fn sql_across_workers(
        &self,
        sql: &str,
        workers: WorkerUrls,
    ) -> impl Future<Output = Result<DistributedRun>> + Send;
}

impl ContextAcrossWorkers for StreamingContext {
    async fn sql_across_workers(&self, sql: &str, workers: WorkerUrls) -> Result<DistributedRun> {
        let spec = QuerySpec::of_context(self, sql, workers.len()).await?;
        execute_distributed(Arc::new(spec), workers).await
    }
}

/// The executed plan, whose nodes hold what the workers counted.
#[derive(Clone)]
pub struct RunReport {
    plan: Arc<dyn ExecutionPlan>,
}

/// What the workers of a run counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunTotals {
    pub records_read: usize,
    pub late_records_dropped: usize,
    pub null_event_time_dropped: usize,
    /// The Arrow bytes of the batches the exchanges sent over the network.
    pub wire_bytes: usize,
}

impl RunReport {
    /// What the workers counted, once the output has been read to its end (waits for every
    /// task's report).
    pub async fn totals(&self) -> Result<RunTotals> {
        let plan = rewrite_distributed_plan_with_metrics(
            Arc::clone(&self.plan),
            DistributedMetricsFormat::Aggregated,
        )
        .await?;
        Ok(RunTotals {
            records_read: total(&plan, RECORDS_READ),
            late_records_dropped: total(&plan, DROPPED[0]),
            null_event_time_dropped: total(&plan, DROPPED[1]),
            wire_bytes: total(&plan, WIRE_BYTES),
        })
    }
}

/// Runs the query of `spec` on `workers` (one task per worker in each stage).
pub async fn execute_distributed(
    spec: Arc<QuerySpec>,
    workers: WorkerUrls,
) -> Result<DistributedRun> {
    if spec.workers != workers.len() {
        return plan_err!(
            "the query is spread over {} workers, but {} are given",
            spec.workers,
            workers.len()
        );
    }
    let builder = SessionStateBuilder::new().with_distributed_worker_resolver(workers);
    execute_distributed_in(spec, builder).await
}

/// Runs the query of `spec` in a session made from `builder`, which names the workers
/// (datafusion-distributed's worker resolver, and a channel resolver for workers that are
/// not at network addresses, such as an in-memory cluster).
pub async fn execute_distributed_in(
    spec: Arc<QuerySpec>,
    builder: SessionStateBuilder,
) -> Result<DistributedRun> {
    let (state, plan) = distributed_plan(&spec, builder).await?;
    let stream = plan.execute(0, state.task_ctx()).map_err(lost_worker)?;
    let schema = stream.schema();
    Ok(DistributedRun {
        stream: Box::pin(RecordBatchStreamAdapter::new(
            schema,
            without_panics(stream),
        )),
        report: RunReport { plan },
    })
}

/// The stages the query of `spec` runs in across `workers`, as text (the workers are not
/// contacted).
pub async fn explain_distributed(spec: Arc<QuerySpec>, workers: WorkerUrls) -> Result<String> {
    let builder = SessionStateBuilder::new().with_distributed_worker_resolver(workers);
    let (_, plan) = distributed_plan(&spec, builder).await?;
    Ok(display_plan_ascii(plan.as_ref(), false))
}

/// The session and the distributed plan of the query of `spec`, in a session made from
/// `builder`.
async fn distributed_plan(
    spec: &Arc<QuerySpec>,
    builder: SessionStateBuilder,
) -> Result<(SessionState, Arc<dyn ExecutionPlan>)> {
    let query = spec.plan().await?;
    let plan = distribute(query.plan(), spec)?;
    let state = builder
        .with_default_features()
        .with_query_planner(Arc::new(PlannedBefore(plan)))
        .with_distributed_planner()
        .with_distributed_user_codec(FreshetCodec)
        .with_distributed_metrics_collection(true)?
        .build();
    let nothing = LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: false,
        schema: Arc::new(DFSchema::empty()),
    });
    let plan = state.create_physical_plan(&nothing).await?;
    Ok((state, plan))
}

/// `stream`, with a panic of datafusion-distributed's coordinator task (which it passes on
/// to the reader) as the stream's last item, an error. datafusion-distributed 4 panics
/// (`task N was cancelled`) when it drains its pending tasks after a worker died.
fn without_panics(
    stream: SendableRecordBatchStream,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    futures::stream::unfold(Some(stream), |stream| async move {
        let mut stream = stream?;
        let next = unless_panicked("datafusion-distributed's coordinator", async {
            Ok(stream.next().await)
        })
        .await;
        match next {
            Ok(Some(item)) => Some((item.map_err(lost_worker), Some(stream))),
            Ok(None) => None,
            Err(error) => Some((Err(lost_worker(error)), None)),
        }
    })
}

/// Whether `info` is datafusion-distributed's coordinator panicking on a task cancelled
/// after a worker died (see [`without_panics`]): the query's error reports it, so a panic
/// hook need not print it.
pub fn is_cancelled_task_panic(info: &std::panic::PanicHookInfo) -> bool {
    let message = info
        .payload()
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| info.payload().downcast_ref::<&str>().copied())
        .unwrap_or("");
    message.starts_with("task ")
        && message.ends_with(" was cancelled")
        && info
            .location()
            .is_some_and(|location| location.file().ends_with("join_set.rs"))
}

/// An error of the network between the coordinator and a worker, said as what it means.
fn lost_worker(error: DataFusionError) -> DataFusionError {
    let message = error.to_string();
    let network = [
        "h2 protocol error",
        "transport error",
        "Connection refused",
        "broken pipe",
        "connection reset",
        "Connection reset",
        "was cancelled",
    ];
    if network.iter().any(|sign| message.contains(sign)) {
        DataFusionError::Execution(format!(
            "a worker stopped or cannot be reached, so the query cannot finish: {message}"
        ))
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;

    /// datafusion-distributed's coordinator panicking after a worker died ends the output
    /// with an error that says so, not a panic in the reader.
    #[tokio::test]
    async fn a_panic_of_the_coordinator_ends_the_output_with_an_error() {
        let panicking =
            futures::stream::poll_fn(|_| -> std::task::Poll<Option<Result<RecordBatch>>> {
                std::panic::panic_any("task 10 was cancelled".to_string())
            });
        let stream: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
            Arc::new(Schema::empty()),
            panicking,
        ));
        let items: Vec<Result<RecordBatch>> = without_panics(stream).collect().await;
        assert_eq!(items.len(), 1);
        let error = items[0].as_ref().unwrap_err().to_string();
        assert!(
            error.contains("a worker stopped or cannot be reached")
                && error.contains("task 10 was cancelled"),
            "{error}"
        );
    }
}
