//! A fuzz case run across workers: the same random query over the same tables (a file
//! replay or in-memory batches), in one process and across workers on as many streams, must
//! give the same rows — changelog rows and late records included, since a replay applies its
//! records in the same order; a changelog per batch (whose batches are cut where they
//! arrive) the same final state.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use futures::TryStreamExt;

use datafusion::common::DataFusionError;

use super::query::Wrap;
use super::{FuzzCase, Outcome, last_rows, scratch_dir};
use crate::distributed::{QuerySpec, WorkerUrls, execute_distributed};
use crate::testing::compare_results;

/// What the refusals of plans and tables that cannot cross workers say.
const REFUSALS: [&str; 3] = [
    "workers yet",
    "cannot cross workers",
    "so workers cannot read it",
];

impl FuzzCase {
    /// Runs the case on `count` workers (at `workers`, `HOST:PORT,…`) at `count` and
    /// `2 * count` streams against one process on as many, its tables as in one process (a
    /// file replay, or in-memory batches sent with the query); a case that ends in a LIMIT
    /// (which rows a limit keeps depends on timing) or whose plan cannot cross workers is
    /// `Refused`.
    pub async fn run_across_workers(&self, workers: &str, count: usize) -> Outcome {
        if self.query.limit.is_some() {
            return Outcome::Refused("a LIMIT".to_string());
        }
        let dir = scratch_dir(self.seed);
        let outcome = match std::fs::create_dir_all(&dir).map(|()| self.data.write(&dir)) {
            Ok(Ok(path)) => self.compare_across_workers(&path, workers, count).await,
            Ok(Err(e)) => Outcome::Error(format!("writing the data failed: {e}")),
            Err(e) => Outcome::Error(format!("writing the data failed: {e}")),
        };
        let _ = std::fs::remove_dir_all(&dir);
        outcome
    }

    async fn compare_across_workers(
        &self,
        path: &Option<PathBuf>,
        workers: &str,
        count: usize,
    ) -> Outcome {
        let sql = self.query.streaming_sql();
        for streams in [count, 2 * count] {
            let spec = match self.context(path, streams).await {
                Ok(ctx) => QuerySpec::of_context(&ctx, &sql, count).await,
                Err(e) => return Outcome::Refused(e.to_string()),
            };
            let spec = match spec {
                Ok(spec) => Arc::new(spec),
                Err(e) if refused(&e) => return Outcome::Refused(e.to_string()),
                Err(e) => return Outcome::Error(e.to_string()),
            };
            let local = match spec.plan().await {
                Ok(query) => query,
                Err(e) => return Outcome::Refused(e.to_string()),
            };
            let expected: Vec<RecordBatch> = match local.execute_merged() {
                Ok(stream) => match stream.try_collect().await {
                    Ok(batches) => batches,
                    Err(e) => return Outcome::Refused(e.to_string()),
                },
                Err(e) => return Outcome::Refused(e.to_string()),
            };
            let urls = match WorkerUrls::parse(workers) {
                Ok(urls) => urls,
                Err(e) => return Outcome::Error(e.to_string()),
            };
            let run = match execute_distributed(Arc::clone(&spec), urls).await {
                Ok(run) => run,
                Err(e) if refused(&e) => return Outcome::Refused(e.to_string()),
                Err(e) => return Outcome::Error(format!("at {streams} streams: {e}")),
            };
            let actual: Vec<RecordBatch> = match run.stream.try_collect().await {
                Ok(batches) => batches,
                Err(e) => return Outcome::Error(format!("at {streams} streams: {e}")),
            };
            // A changelog per batch (asked for, a changelog counted by another aggregation,
            // or aggregates without per-record kernels, as the plan's first line says) holds
            // a row per group and batch, and batches are cut where they arrive: its final
            // state is what must be the same.
            let per_batch = self.query.wrap == Wrap::Counted
                || self
                    .query
                    .settings
                    .iter()
                    .any(|(key, value)| key == "freshet.changes_per" && value == "batch")
                || local
                    .explain()
                    .lines()
                    .next()
                    .is_some_and(|header| header.contains("and input batch"));
            let (expected, actual) = match per_batch {
                true => match (
                    last_rows(&self.query, &expected),
                    last_rows(&self.query, &actual),
                ) {
                    (Ok(expected), Ok(actual)) => (expected, actual),
                    (Err(e), _) | (_, Err(e)) => return Outcome::Error(e.to_string()),
                },
                false => (expected, actual),
            };
            if let Err(difference) = compare_results(&expected, &actual, false) {
                return Outcome::Mismatch(format!(
                    "at {streams} streams on {count} workers: {difference}\n  plan:\n{}",
                    local.explain()
                ));
            }
            match run.report.totals().await {
                Ok(totals) if totals.records_read == local.records_read() => {}
                Ok(totals) => {
                    return Outcome::Mismatch(format!(
                        "at {streams} streams the workers read {} records, one process {}\n  plan:\n{}",
                        totals.records_read,
                        local.records_read(),
                        local.explain()
                    ));
                }
                Err(e) => return Outcome::Error(e.to_string()),
            }
        }
        Outcome::Match
    }
}

/// Whether `error` is the refusal of a plan or a table that cannot cross workers.
fn refused(error: &DataFusionError) -> bool {
    let text = error.to_string();
    REFUSALS.iter().any(|refusal| text.contains(refusal))
}
