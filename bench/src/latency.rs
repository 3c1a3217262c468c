//! The latency mode of `freshet bench`: S3b (one changelog row per input record) over a
//! `market_data` replay paced at a fixed rate on one stream, with the latency of every record
//! from entering the source to its changelog row leaving the query.
//!
//! The paced source hands out each batch when its first record is due (`records before it /
//! rate` after the start), so record `j` enters at `(j - j mod batch) / rate`. On one stream
//! S3b's changelog rows come out in input order, so the `j`-th output row is record `j`'s; its
//! latency is the time its output batch arrives minus the time the record entered.

use std::time::{Duration, Instant};

use datafusion::common::{Result, plan_err};
use freshet_engine::{GeneratorKind, GeneratorSpec, Pacing, StreamOptions};
use freshet_planner::StreamingContext;
use futures::StreamExt;

use crate::scenarios::scenario;

/// Records per source batch: small, so that batching adds at most a millisecond at 1 M/s.
pub const LATENCY_BATCH: usize = 1_000;

/// Latency percentiles of one paced run.
#[derive(Debug, Clone)]
pub struct LatencyResult {
    pub records: u64,
    pub rate: f64,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// Runs S3b over `records` records paced at `rate` records/s.
pub async fn run_latency(records: u64, rate: f64) -> Result<LatencyResult> {
    let Some(s3b) = scenario("S3b") else {
        return plan_err!("scenario S3b is missing");
    };
    if !(rate.is_finite() && rate > 0.0) {
        return plan_err!("--rate must be a positive number of records per second");
    }
    let ctx = StreamingContext::with_partitions(1);
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
    spec.batch_size = LATENCY_BATCH;
    let options = StreamOptions {
        partitions: Some(1),
        pacing: Pacing::RecordsPerSecond(rate),
        ..StreamOptions::default()
    };
    ctx.register_generator("market_data", spec, options)?;
    let query = ctx.sql(s3b.streaming_sql).await?;
    let mut results = query.execute_merged()?;
    let start = Instant::now();
    let mut latencies: Vec<f64> = Vec::with_capacity(records as usize);
    let mut seen = 0u64;
    while let Some(batch) = results.next().await {
        let now = start.elapsed().as_secs_f64();
        let rows = batch?.num_rows() as u64;
        for record in seen..seen + rows {
            let entered = (record - record % LATENCY_BATCH as u64) as f64 / rate;
            latencies.push((now - entered).max(0.0));
        }
        seen += rows;
    }
    let elapsed = start.elapsed();
    if seen != records {
        return plan_err!("S3b gave {seen} changelog rows for {records} records");
    }
    latencies.sort_by(f64::total_cmp);
    let at = |share: f64| {
        let index = ((latencies.len() as f64 * share).ceil() as usize).clamp(1, latencies.len());
        Duration::from_secs_f64(latencies[index - 1])
    };
    Ok(LatencyResult {
        records,
        rate,
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
        max: at(1.0),
    })
}

/// The result as a Markdown table.
pub fn latency_table(result: &LatencyResult) -> String {
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    format!(
        "| records | target rate | achieved rate | p50 | p99 | max |\n|---:|---:|---:|---:|---:|---:|\n| {} | {:.1} M/s | {:.2} M/s | {} | {} | {} |\n",
        result.records,
        result.rate / 1e6,
        result.records as f64 / result.elapsed.as_secs_f64() / 1e6,
        ms(result.p50),
        ms(result.p99),
        ms(result.max),
    )
}
