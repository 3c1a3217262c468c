//! The scaling mode of `freshet bench`: S3a over `market_data` Parquet files of growing size,
//! replayed as streams, with the throughput and the peak memory of each run. A streaming
//! engine's memory must follow its state (the open windows), not its input: a file ten times
//! larger should cost about the same memory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datafusion::common::{Result, plan_err};
use freshet_engine::sink::{SinkSpec, write_generated};
use freshet_engine::{GeneratorKind, GeneratorSpec, StreamOptions};
use freshet_planner::StreamingContext;
use futures::StreamExt;

use crate::runner::{peak_rss, reset_peak_rss};
use crate::scenarios::scenario;

/// One size of the scaling run.
#[derive(Debug, Clone)]
pub struct ScalingResult {
    pub records: u64,
    pub elapsed: Duration,
    pub output_rows: u64,
    pub peak_rss_bytes: Option<u64>,
}

impl ScalingResult {
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
}

/// The Parquet file of `records` market_data records in `dir`, written if missing.
pub fn market_data_file(dir: &Path, records: u64) -> Result<PathBuf> {
    let path = dir.join(format!("market_data_{records}.parquet"));
    if !path.exists() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return plan_err!("cannot create {}: {e}", dir.display());
        }
        let spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
        // Written under a temporary name, so that an interrupted run leaves no short file.
        let partial = dir.join(format!("market_data_{records}.parquet.partial"));
        write_generated(&spec, &SinkSpec::Parquet(partial.clone()))?;
        if let Err(e) = std::fs::rename(&partial, &path) {
            return plan_err!("cannot rename {}: {e}", partial.display());
        }
    }
    Ok(path)
}

/// S3a over a Parquet replay of each of `sizes` records on `partitions` streams.
pub async fn run_scaling(
    sizes: &[u64],
    dir: &Path,
    partitions: usize,
) -> Result<Vec<ScalingResult>> {
    let Some(s3a) = scenario("S3a") else {
        return plan_err!("scenario S3a is missing");
    };
    let mut results = Vec::new();
    for &records in sizes {
        let path = market_data_file(dir, records)?;
        eprintln!("running S3a over {} …", path.display());
        reset_peak_rss();
        let start = Instant::now();
        let ctx = StreamingContext::with_partitions(partitions);
        let options = StreamOptions {
            event_time: Some("trade_time".to_string()),
            ..StreamOptions::default()
        };
        ctx.register_parquet("market_data", &path.to_string_lossy(), options)
            .await?;
        let query = ctx.sql(s3a.streaming_sql).await?;
        let mut output_rows = 0u64;
        let mut results_stream = query.execute_merged()?;
        while let Some(batch) = results_stream.next().await {
            output_rows += batch?.num_rows() as u64;
        }
        results.push(ScalingResult {
            records,
            elapsed: start.elapsed(),
            output_rows,
            peak_rss_bytes: peak_rss(),
        });
    }
    Ok(results)
}

/// The results as a Markdown table.
pub fn scaling_table(results: &[ScalingResult]) -> String {
    let mut out = String::from(
        "| records | wall time | Freshet rec/s | output rows | peak RSS |\n|---:|---:|---:|---:|---:|\n",
    );
    for result in results {
        out.push_str(&format!(
            "| {} | {:.2} s | {:.1} M | {} | {} |\n",
            result.records,
            result.elapsed.as_secs_f64(),
            result.records_per_second() / 1e6,
            result.output_rows,
            result
                .peak_rss_bytes
                .map_or("n/a".to_string(), |b| format!("{} MiB", b / (1024 * 1024))),
        ));
    }
    out
}
