//! The latency mode of `freshet bench`: a scenario over a generated replay paced at a fixed
//! rate on one stream, with the latency of every output row from the moment the record that
//! makes it due enters the source to the moment the row leaves the query.
//!
//! The paced source hands out each batch when its first record is due (`records before it /
//! rate` after the start), so record `j` enters at `(j - j mod batch) / rate`. Which record
//! makes a row due depends on the query:
//! - S0 (a filter and a projection, over orders whose amounts let 1 % of the records pass):
//!   the row's own record, named by its `order_id`;
//! - S3b (one changelog row per record): on one stream the rows come out in input order, so
//!   the `j`-th row is record `j`'s;
//! - S3a (EMIT FINAL one-minute windows, with `window_end` added to its output): the first
//!   record whose event time reaches the window's end, which moves the watermark past it (or
//!   the last record, whose end of input closes the last windows).

use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Int64Type, TimestampMillisecondType};
use datafusion::common::{Result, plan_err};
use freshet_engine::{GeneratorKind, Pacing, StreamOptions};
use freshet_planner::StreamingContext;
use futures::StreamExt;

use crate::scenarios::scenario;

/// Records per source batch: small, so that batching adds at most a millisecond at 1 M/s.
pub const LATENCY_BATCH: usize = 1_000;

/// The scenarios the latency mode runs, in the order it runs them.
pub const LATENCY_SCENARIOS: &[&str] = &["S0", "S3a", "S3b"];

/// S3a with its window's end in the output, which tells each row's due time.
const S3A_WITH_WINDOW_END: &str = "SELECT window_end, trader_id, symbol, COUNT(*) AS trade_count, \
AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM market_data \
GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";

/// Latency percentiles of one paced run.
#[derive(Debug, Clone)]
pub struct LatencyResult {
    pub scenario: &'static str,
    pub records: u64,
    pub rows: u64,
    pub rate: f64,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// How an output row's due record is found.
#[derive(Debug, Clone, Copy)]
enum DueRecord {
    /// The row's `order_id` column.
    OrderId,
    /// The row's position in the output.
    Position,
    /// The first record whose event time reaches the row's `window_end`.
    WindowEnd { start_ms: i64, step_ms: i64 },
}

impl DueRecord {
    /// The record number each row of `batch` is due at; `seen` rows came before it.
    fn records(&self, batch: &RecordBatch, seen: u64, last: u64) -> Result<Vec<u64>> {
        let rows = batch.num_rows() as u64;
        match *self {
            DueRecord::Position => Ok((seen..seen + rows).collect()),
            DueRecord::OrderId => {
                let Some(ids) = batch
                    .column_by_name("order_id")
                    .and_then(|c| c.as_primitive_opt::<Int64Type>())
                else {
                    return plan_err!("the latency query must return order_id as Int64");
                };
                Ok(ids.values().iter().map(|id| *id as u64).collect())
            }
            DueRecord::WindowEnd { start_ms, step_ms } => {
                let Some(ends) = batch
                    .column_by_name("window_end")
                    .and_then(|c| c.as_primitive_opt::<TimestampMillisecondType>())
                else {
                    return plan_err!("the latency query must return window_end in milliseconds");
                };
                if ends.null_count() > 0 {
                    return plan_err!("window_end has nulls");
                }
                Ok(ends
                    .values()
                    .iter()
                    .map(|end| {
                        let record =
                            ((end - start_ms).max(0) as u64).div_ceil(step_ms.max(1) as u64);
                        record.min(last)
                    })
                    .collect())
            }
        }
    }
}

/// Runs `scenario_id` (one of [`LATENCY_SCENARIOS`]) over `records` records paced at `rate`
/// records/s.
pub async fn run_latency(scenario_id: &str, records: u64, rate: f64) -> Result<LatencyResult> {
    if !(rate.is_finite() && rate > 0.0) {
        return plan_err!("--rate must be a positive number of records per second");
    }
    let Some(id) = LATENCY_SCENARIOS
        .iter()
        .find(|id| id.eq_ignore_ascii_case(scenario_id))
    else {
        return plan_err!(
            "the latency mode runs {}, not '{scenario_id}'",
            LATENCY_SCENARIOS.join(", ")
        );
    };
    let Some(bench_scenario) = scenario(id) else {
        return plan_err!("scenario {id} is missing");
    };
    let mut spec = bench_scenario.data_spec(records);
    spec.batch_size = LATENCY_BATCH;
    let (sql, due) = match *id {
        "S0" => (bench_scenario.streaming_sql, DueRecord::OrderId),
        "S3a" => (
            S3A_WITH_WINDOW_END,
            DueRecord::WindowEnd {
                start_ms: spec.start_ms,
                step_ms: spec.step_ms,
            },
        ),
        _ => (bench_scenario.streaming_sql, DueRecord::Position),
    };
    if spec.kind == GeneratorKind::Orders {
        // `total_amount = amount_base + i % 100 > 100` holds for one record in a hundred.
        spec.amount_base = 2.0;
    }
    let ctx = StreamingContext::with_partitions(1);
    let options = StreamOptions {
        partitions: Some(1),
        pacing: Pacing::RecordsPerSecond(rate),
        ..StreamOptions::default()
    };
    ctx.register_generator(bench_scenario.table(), spec, options)?;
    let query = ctx.sql(sql).await?;
    let mut results = query.execute_merged()?;
    let start = Instant::now();
    let mut latencies: Vec<f64> = Vec::new();
    let mut seen = 0u64;
    while let Some(batch) = results.next().await {
        let now = start.elapsed().as_secs_f64();
        let batch = batch?;
        for record in due.records(&batch, seen, records - 1)? {
            let entered = (record - record % LATENCY_BATCH as u64) as f64 / rate;
            latencies.push((now - entered).max(0.0));
        }
        seen += batch.num_rows() as u64;
    }
    let elapsed = start.elapsed();
    if matches!(due, DueRecord::Position) && seen != records {
        return plan_err!("{id} gave {seen} changelog rows for {records} records");
    }
    if latencies.is_empty() {
        return plan_err!("{id} gave no row over {records} records");
    }
    latencies.sort_by(f64::total_cmp);
    let at = |share: f64| {
        let index = ((latencies.len() as f64 * share).ceil() as usize).clamp(1, latencies.len());
        Duration::from_secs_f64(latencies[index - 1])
    };
    Ok(LatencyResult {
        scenario: id,
        records,
        rows: seen,
        rate,
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
        max: at(1.0),
    })
}

/// The results as a Markdown table.
pub fn latency_table(results: &[LatencyResult]) -> String {
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let mut table = String::from(
        "| scenario | records | rows out | target rate | achieved rate | p50 | p99 | max |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for result in results {
        table.push_str(&format!(
            "| {} | {} | {} | {:.2} M/s | {:.2} M/s | {} | {} | {} |\n",
            result.scenario,
            result.records,
            result.rows,
            result.rate / 1e6,
            result.records as f64 / result.elapsed.as_secs_f64() / 1e6,
            ms(result.p50),
            ms(result.p99),
            ms(result.max),
        ));
    }
    table
}
