//! A fuzz case run across workers: the same random query over the same file replay, in one
//! process and across workers on as many streams, must give the same rows — changelog rows
//! and late records included, since a replay applies its records in the same order.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use futures::TryStreamExt;

use super::{FuzzCase, Outcome, Storage, scratch_dir};
use crate::cli::SessionArgs;
use crate::distributed::{QuerySpec, WorkerUrls, execute_distributed};
use crate::testing::compare_results;

/// What the refusals of plans that cannot cross workers say.
const REFUSALS: [&str; 3] = [
    "workers yet",
    "cannot spread evenly over",
    "cannot cross workers",
];

impl FuzzCase {
    /// Runs the case on `count` workers (at `workers`, `HOST:PORT,…`) at `count` and
    /// `2 * count` streams against one process on as many; a case that does not read a file
    /// replay alone (in-memory tables cannot be sent to workers) or ends in a LIMIT (which
    /// rows a limit keeps depends on timing) is `Refused`.
    pub async fn run_across_workers(&self, workers: &str, count: usize) -> Outcome {
        let readable = self.other.is_none()
            && self.query.limit.is_none()
            && !matches!(
                self.data.storage,
                Storage::KeyedPartitions(_) | Storage::Batches(_)
            );
        if !readable {
            return Outcome::Refused("not a file replay read alone".to_string());
        }
        let dir = scratch_dir(self.seed);
        let outcome = match std::fs::create_dir_all(&dir).map(|()| self.data.write(&dir)) {
            Ok(Ok(Some(path))) => self.compare_across_workers(&path, workers, count).await,
            Ok(Ok(None)) => Outcome::Refused("no file".to_string()),
            Ok(Err(e)) => Outcome::Error(format!("writing the data failed: {e}")),
            Err(e) => Outcome::Error(format!("writing the data failed: {e}")),
        };
        let _ = std::fs::remove_dir_all(&dir);
        outcome
    }

    async fn compare_across_workers(&self, path: &Path, workers: &str, count: usize) -> Outcome {
        let options = self.options();
        let mut table = format!(
            "t={},event_time=ts,watermark={}ms,bounded=true",
            path.display(),
            options.out_of_orderness.as_millis()
        );
        if let Some(partitions) = options.partitions {
            table.push_str(&format!(",partitions={partitions}"));
        }
        let session = SessionArgs {
            settings: self
                .query
                .settings
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect(),
            tables: vec![table],
            partitions: None,
            event_time: None,
            watermark: None,
            strategy: None,
        };
        for streams in [count, 2 * count] {
            let spec = match QuerySpec::new(self.query.streaming_sql(), &session, streams, count) {
                Ok(spec) => Arc::new(spec),
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
                Err(e) if REFUSALS.iter().any(|r| e.to_string().contains(r)) => {
                    return Outcome::Refused(e.to_string());
                }
                Err(e) => return Outcome::Error(format!("at {streams} streams: {e}")),
            };
            let actual: Vec<RecordBatch> = match run.stream.try_collect().await {
                Ok(batches) => batches,
                Err(e) => return Outcome::Error(format!("at {streams} streams: {e}")),
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
