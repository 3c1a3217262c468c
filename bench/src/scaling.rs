//! The scaling mode of `freshet bench`: queries whose state lives as long as the input —
//! sessions that never close, one window spanning the whole input, OVER partitions of millions
//! of rows with large frames, an interval join with wide bounds, a changelog per record over a
//! long window — each run over `market_data` replays of growing size, with the wall time, the
//! process's CPU time (`getrusage`) and the peak memory of each run. A streaming operator's
//! work must grow with its records: four times the records should cost about four times the
//! time, not sixteen. S3a is among the cases, for its memory: it must follow the open windows,
//! not the input.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datafusion::common::{Result, plan_err};
use freshet_engine::sink::{SinkSpec, write_generated};
use freshet_engine::{GeneratorKind, GeneratorSpec, StreamOptions};
use freshet_planner::StreamingContext;
use futures::StreamExt;

use crate::runner::{cpu_time, peak_rss, reset_peak_rss};
use crate::scenarios::S3A_SQL;

/// One query of the scaling run.
#[derive(Debug, Clone, Copy)]
pub struct ScalingCase {
    /// Short name, as `--scenario` takes it.
    pub id: &'static str,
    /// The state that lives long.
    pub state: &'static str,
    pub sql: &'static str,
    /// The generator's distinct symbols (its default: 10).
    pub symbols: u64,
}

/// Every case: 20 traders and one record per second of event time, so a trader's sessions
/// with a one-minute gap never close and 4 M records span 46 days.
pub const SCALING_CASES: &[ScalingCase] = &[
    ScalingCase {
        id: "session-final",
        state: "20 sessions that never close, EMIT FINAL (COUNT)",
        sql: "SELECT trader_id, window_start, COUNT(*) AS n FROM market_data \
              GROUP BY trader_id WINDOW SESSION (trade_time, INTERVAL '1' MINUTE)",
        symbols: 10,
    },
    ScalingCase {
        id: "session-final-any",
        state: "20 sessions that never close, EMIT FINAL (COUNT DISTINCT, MEDIAN)",
        sql: "SELECT trader_id, window_start, COUNT(DISTINCT quantity) AS kinds, \
              MEDIAN(price) AS middle FROM market_data \
              GROUP BY trader_id WINDOW SESSION (trade_time, INTERVAL '1' MINUTE)",
        symbols: 10,
    },
    ScalingCase {
        id: "session-changes",
        state: "20 sessions that never close, EMIT CHANGES",
        sql: "SELECT trader_id, window_start, COUNT(*) AS n, AVG(price) AS p FROM market_data \
              GROUP BY trader_id WINDOW SESSION (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES",
        symbols: 10,
    },
    ScalingCase {
        id: "whole-input-window",
        state: "one 60-day window over the whole input, EMIT FINAL",
        sql: "SELECT symbol, window_start, COUNT(*) AS n, AVG(price) AS p, \
              COUNT(DISTINCT quantity) AS kinds FROM market_data \
              GROUP BY symbol WINDOW TUMBLING (INTERVAL '60' DAY)",
        symbols: 10,
    },
    ScalingCase {
        id: "long-window-changes",
        state: "one 60-day window, EMIT CHANGES (a row per record)",
        sql: "SELECT symbol, window_start, COUNT(*) AS n, AVG(price) AS p FROM market_data \
              GROUP BY symbol WINDOW TUMBLING (INTERVAL '60' DAY) EMIT CHANGES",
        symbols: 10,
    },
    ScalingCase {
        id: "over-rows-100k",
        state: "2 OVER partitions, frames of 100 000 rows (SUM, MIN)",
        sql: "SELECT symbol, trade_time, \
              SUM(price) OVER (PARTITION BY symbol ORDER BY trade_time \
                ROWS BETWEEN 100000 PRECEDING AND CURRENT ROW) AS total, \
              MIN(price) OVER (PARTITION BY symbol ORDER BY trade_time \
                ROWS BETWEEN 100000 PRECEDING AND CURRENT ROW) AS low FROM market_data",
        symbols: 2,
    },
    ScalingCase {
        id: "over-range-1d",
        state: "2 OVER partitions, RANGE frames of one day (MIN, SUM)",
        sql: "SELECT symbol, trade_time, \
              MIN(price) OVER (PARTITION BY symbol ORDER BY trade_time \
                RANGE BETWEEN INTERVAL '1' DAY PRECEDING AND CURRENT ROW) AS low, \
              SUM(quantity) OVER (PARTITION BY symbol ORDER BY trade_time \
                RANGE BETWEEN INTERVAL '1' DAY PRECEDING AND CURRENT ROW) AS total \
              FROM market_data",
        symbols: 2,
    },
    ScalingCase {
        id: "over-following-100k",
        state: "2 OVER partitions, frames of the next 100 000 rows",
        sql: "SELECT symbol, trade_time, \
              SUM(price) OVER (PARTITION BY symbol ORDER BY trade_time \
                ROWS BETWEEN CURRENT ROW AND 100000 FOLLOWING) AS ahead FROM market_data",
        symbols: 2,
    },
    ScalingCase {
        id: "interval-join-6h",
        state: "an interval self-join keeping 6 hours of each side",
        sql: "SELECT a.quantity, a.trade_time, b.trade_time AS earlier FROM market_data a \
              JOIN market_data b ON a.quantity = b.quantity \
              AND b.trade_time BETWEEN a.trade_time - INTERVAL '6' HOUR AND a.trade_time",
        symbols: 10,
    },
    ScalingCase {
        id: "S3a",
        state: "tumbling minutes per trader and symbol (memory follows the open windows)",
        sql: S3A_SQL,
        symbols: 10,
    },
];

/// Where the scaling run's records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingSource {
    /// The `generator:market_data` table.
    Generator,
    /// A Parquet file per size (written once into the bench directory), as `freshet query
    /// --table NAME=FILE` reads it.
    Parquet,
}

/// One case at one size.
#[derive(Debug, Clone)]
pub struct ScalingResult {
    pub case: &'static str,
    pub records: u64,
    pub elapsed: Duration,
    /// User plus system CPU time of the process during the run.
    pub cpu: Duration,
    pub output_rows: u64,
    pub peak_rss_bytes: Option<u64>,
    /// Wall and CPU time of each round, in round order.
    pub rounds: Vec<(Duration, Duration)>,
}

impl ScalingResult {
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
}

/// The cases `ids` names (every case if none), or an error naming the valid ones.
pub fn scaling_cases(ids: &[String]) -> Result<Vec<ScalingCase>> {
    if ids.is_empty() {
        return Ok(SCALING_CASES.to_vec());
    }
    ids.iter()
        .map(|id| match SCALING_CASES.iter().find(|c| c.id == id) {
            Some(case) => Ok(*case),
            None => plan_err!(
                "unknown scaling case '{id}'; the cases are {}",
                SCALING_CASES
                    .iter()
                    .map(|c| c.id)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
        .collect()
}

/// The Parquet file of `records` market_data records over `symbols` symbols in `dir`,
/// written if missing.
pub fn market_data_file(dir: &Path, records: u64, symbols: u64) -> Result<PathBuf> {
    let name = format!("market_data_{records}_{symbols}sym.parquet");
    let path = dir.join(&name);
    if !path.exists() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return plan_err!("cannot create {}: {e}", dir.display());
        }
        let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
        spec.symbols = symbols;
        // Written under a temporary name, so that an interrupted run leaves no short file.
        let partial = dir.join(format!("{name}.partial"));
        write_generated(&spec, &SinkSpec::Parquet(partial.clone()))?;
        if let Err(e) = std::fs::rename(&partial, &path) {
            return plan_err!("cannot rename {}: {e}", partial.display());
        }
    }
    Ok(path)
}

/// Each case at each of `sizes` records on `partitions` streams, in `runs` rounds that run
/// every size once (so a slow phase of the machine slows every size of a round): the median
/// wall and CPU times (and the largest peak memory) are kept, with each round's times.
pub async fn run_scaling(
    cases: &[ScalingCase],
    sizes: &[u64],
    source: ScalingSource,
    dir: &Path,
    partitions: usize,
    runs: usize,
) -> Result<Vec<ScalingResult>> {
    let mut results = Vec::new();
    for case in cases {
        eprintln!("running {} over {sizes:?} records …", case.id);
        let mut by_size: Vec<Vec<ScalingResult>> = vec![Vec::new(); sizes.len()];
        for _ in 0..runs.max(1) {
            for (timed, &records) in by_size.iter_mut().zip(sizes) {
                timed.push(run_once(case, records, source, dir, partitions).await?);
            }
        }
        for timed in by_size {
            let median = |mut times: Vec<Duration>| {
                times.sort();
                times[times.len() / 2]
            };
            let Some(first) = timed.first() else {
                continue;
            };
            results.push(ScalingResult {
                elapsed: median(timed.iter().map(|r| r.elapsed).collect()),
                cpu: median(timed.iter().map(|r| r.cpu).collect()),
                peak_rss_bytes: timed.iter().filter_map(|r| r.peak_rss_bytes).max(),
                rounds: timed.iter().map(|r| (r.elapsed, r.cpu)).collect(),
                ..first.clone()
            });
        }
    }
    Ok(results)
}

async fn run_once(
    case: &ScalingCase,
    records: u64,
    source: ScalingSource,
    dir: &Path,
    partitions: usize,
) -> Result<ScalingResult> {
    let ctx = StreamingContext::with_partitions(partitions);
    let options = StreamOptions {
        event_time: Some("trade_time".to_string()),
        ..StreamOptions::default()
    };
    match source {
        ScalingSource::Generator => {
            let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
            spec.symbols = case.symbols;
            ctx.register_generator("market_data", spec, options)?;
        }
        ScalingSource::Parquet => {
            let path = market_data_file(dir, records, case.symbols)?;
            ctx.register_parquet("market_data", &path.to_string_lossy(), options)
                .await?;
        }
    }
    reset_peak_rss();
    let (start, cpu_start) = (Instant::now(), cpu_time());
    let query = ctx.sql(case.sql).await?;
    let mut output_rows = 0u64;
    let mut stream = query.execute_merged()?;
    while let Some(batch) = stream.next().await {
        output_rows += batch?.num_rows() as u64;
    }
    Ok(ScalingResult {
        case: case.id,
        records,
        elapsed: start.elapsed(),
        cpu: cpu_time().saturating_sub(cpu_start),
        output_rows,
        peak_rss_bytes: peak_rss(),
        rounds: Vec::new(),
    })
}

/// The results as Markdown: every run, then per case the growth from the smallest size to
/// the largest (the median over rounds of the time ratio within a round; over the records
/// ratio, 1.0 is linear).
pub fn scaling_table(results: &[ScalingResult]) -> String {
    let mut out = String::from(
        "| case | records | wall time | CPU time | Freshet rec/s | output rows | peak RSS |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for result in results {
        out.push_str(&format!(
            "| {} | {} | {:.3} s | {:.3} s | {:.1} M | {} | {} |\n",
            result.case,
            result.records,
            result.elapsed.as_secs_f64(),
            result.cpu.as_secs_f64(),
            result.records_per_second() / 1e6,
            result.output_rows,
            result
                .peak_rss_bytes
                .map_or("n/a".to_string(), |b| format!("{} MiB", b / (1024 * 1024))),
        ));
    }
    out.push_str(
        "\n| case | records ratio | wall-time ratio | CPU-time ratio | wall ratio per record |\n\
         |---|---:|---:|---:|---:|\n",
    );
    let mut cases: Vec<&str> = results.iter().map(|r| r.case).collect();
    cases.dedup();
    for case in cases {
        let runs: Vec<&ScalingResult> = results.iter().filter(|r| r.case == case).collect();
        let (Some(small), Some(large)) = (
            runs.iter().min_by_key(|r| r.records),
            runs.iter().max_by_key(|r| r.records),
        ) else {
            continue;
        };
        if small.records == large.records {
            continue;
        }
        let records = large.records as f64 / small.records as f64;
        // The median over rounds of the ratio within a round.
        let growth = |time: fn(&(Duration, Duration)) -> Duration| {
            let mut ratios: Vec<f64> = small
                .rounds
                .iter()
                .zip(&large.rounds)
                .map(|(s, l)| time(l).as_secs_f64() / time(s).as_secs_f64().max(1e-9))
                .collect();
            ratios.sort_by(f64::total_cmp);
            ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN)
        };
        let wall = growth(|r| r.0);
        let cpu = growth(|r| r.1);
        out.push_str(&format!(
            "| {case} | {records:.1}x | {wall:.2}x | {cpu:.2}x | {:.2} |\n",
            wall / records
        ));
    }
    out
}
