//! The scenario runner behind `freshet bench`.
//!
//! For each scenario and stream count it generates the data once into memory, then runs
//! Freshet's streaming plan (a replay of those batches, results to a counting sink) and
//! DataFusion batch (a `MemTable` of the same batches split the same way, the batch-equivalent
//! SQL). A first run of each fingerprints both results; they must agree before any speed is
//! reported. Then both run alternately, after a warm-up, and the median time of each is
//! reported as records per second. The ratio is the median over the rounds of DataFusion's
//! time over Freshet's in the same round: a slow phase of the machine, which lasts seconds
//! to minutes, then slows both sides of a ratio alike instead of whichever engine it hits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, exec_err};
use datafusion::datasource::MemTable;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::{SessionConfig, SessionContext};
use freshet_engine::{ReplaySource, StreamOptions};
use freshet_planner::StreamingContext;
use futures::StreamExt;

use crate::compare::Fingerprint;
use crate::scenarios::Scenario;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Input records per scenario.
    pub records: u64,
    /// Stream counts to run each scenario at.
    pub partitions: Vec<usize>,
    /// Timed runs per engine (the median is reported), after one warm-up run.
    pub runs: usize,
}

/// One scenario's measurements at one stream count.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    pub scenario: String,
    pub records: u64,
    pub partitions: usize,
    /// Median wall time of Freshet and of DataFusion batch.
    pub freshet: Duration,
    pub datafusion: Duration,
    pub output_rows: u64,
    /// Peak resident memory of the process during the scenario, if the OS tells.
    pub peak_rss_bytes: Option<u64>,
    /// The median over the timed rounds of DataFusion's time over Freshet's in the round.
    pub paired_ratio: f64,
}

impl ScenarioResult {
    pub fn freshet_records_per_second(&self) -> f64 {
        self.records as f64 / self.freshet.as_secs_f64()
    }

    pub fn datafusion_records_per_second(&self) -> f64 {
        self.records as f64 / self.datafusion.as_secs_f64()
    }

    /// Freshet's throughput over DataFusion's: the median of the rounds' ratios.
    pub fn ratio(&self) -> f64 {
        self.paired_ratio
    }
}

/// Runs `scenario` at each of `config.partitions`.
pub async fn run_scenario(
    scenario: &Scenario,
    config: &BenchConfig,
) -> Result<Vec<ScenarioResult>> {
    let spec = scenario.data_spec(config.records);
    let schema = spec.schema();
    let batches = spec.generate_all()?;
    let mut results = Vec::new();
    for &partitions in &config.partitions {
        reset_peak_rss();
        let split = split_batches(scenario, &batches, partitions)?;
        let engines = ScenarioRun {
            scenario,
            schema: &schema,
            partitions: &split,
        };
        let (freshet_print, datafusion_print) = (
            engines.run_freshet(true).await?.1,
            engines.run_datafusion(true).await?.1,
        );
        if !freshet_print.matches(&datafusion_print) {
            return exec_err!(
                "{} at {partitions} streams: Freshet's result differs from DataFusion batch ({freshet_print:?} vs {datafusion_print:?}); no speed reported",
                scenario.id
            );
        }
        let mut freshet_times = Vec::new();
        let mut datafusion_times = Vec::new();
        for run in 0..=config.runs {
            let (freshet, _) = engines.run_freshet(false).await?;
            let (datafusion, _) = engines.run_datafusion(false).await?;
            if run > 0 {
                freshet_times.push(freshet);
                datafusion_times.push(datafusion);
            }
        }
        results.push(ScenarioResult {
            scenario: scenario.id.to_string(),
            records: config.records,
            partitions,
            paired_ratio: median_ratio(&freshet_times, &datafusion_times),
            freshet: median(freshet_times),
            datafusion: median(datafusion_times),
            output_rows: freshet_print.rows,
            peak_rss_bytes: peak_rss(),
        });
    }
    Ok(results)
}

/// One scenario's data at one stream count, runnable on either engine (also used by the
/// criterion benches).
pub struct ScenarioRun<'a> {
    pub scenario: &'a Scenario,
    pub schema: &'a SchemaRef,
    /// The batches of each source partition.
    pub partitions: &'a [Vec<RecordBatch>],
}

/// `batches` over `partitions` source partitions: whole batches round-robin, or, for a
/// scenario keyed by columns, each row to its key's partition (in order). Keys go to the
/// partitions in turn as they first appear, so that the few keys of the scenario data (10
/// symbols, 20 trader-symbol pairs) split evenly, as the many keys of a real keyed topic do
/// under hashing; a hash of 20 keys splits them 13 to 7.
pub fn split_batches(
    scenario: &Scenario,
    batches: &[RecordBatch],
    partitions: usize,
) -> Result<Vec<Vec<RecordBatch>>> {
    let mut split = vec![Vec::new(); partitions];
    let Some(keys) = scenario.keyed_by.filter(|_| partitions > 1) else {
        for (index, batch) in batches.iter().enumerate() {
            split[index % partitions].push(batch.clone());
        }
        return Ok(split);
    };
    let Some(first) = batches.first() else {
        return Ok(split);
    };
    let schema = first.schema();
    let key_columns = keys
        .iter()
        .map(|key| Ok(schema.index_of(key)?))
        .collect::<Result<Vec<_>>>()?;
    let converter = RowConverter::new(
        key_columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect(),
    )?;
    let mut homes: HashMap<Vec<u8>, usize> = HashMap::new();
    for batch in batches {
        let columns: Vec<_> = key_columns
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let rows = converter.convert_columns(&columns)?;
        let targets: Vec<usize> = rows
            .iter()
            .map(|row| {
                let next = homes.len() % partitions;
                *homes.entry(row.as_ref().to_vec()).or_insert(next)
            })
            .collect();
        for (partition, pieces) in split.iter_mut().enumerate() {
            let mask: BooleanArray = targets.iter().map(|t| Some(*t == partition)).collect();
            let piece = filter_record_batch(batch, &mask)?;
            if piece.num_rows() > 0 {
                pieces.push(piece);
            }
        }
    }
    Ok(split)
}

impl ScenarioRun<'_> {
    /// Freshet's streaming plan over a replay of the batches; the wall time and the result's
    /// row count (and fingerprint, if asked).
    pub async fn run_freshet(&self, fingerprint: bool) -> Result<(Duration, Fingerprint)> {
        let start = Instant::now();
        let partitions = self.partitions.len();
        let ctx = StreamingContext::with_partitions(partitions);
        // Data split by key (see `split_batches`) is declared so: keyed operators over it
        // need no shuffle.
        let options = StreamOptions {
            partitioned_by: match self.scenario.keyed_by {
                Some(keys) if partitions > 1 => keys.iter().map(|k| k.to_string()).collect(),
                _ => Vec::new(),
            },
            ..StreamOptions::default()
        };
        ctx.register_stream(
            self.scenario.table(),
            ReplaySource::Partitioned {
                schema: Arc::clone(self.schema),
                partitions: self.partitions.to_vec(),
            },
            options,
        )?;
        let query = ctx.sql(self.scenario.streaming_sql).await?;
        let print = drain_all(query.execute_partitions()?, fingerprint).await?;
        Ok((start.elapsed(), print))
    }

    /// DataFusion batch over a `MemTable` of the same batches.
    pub async fn run_datafusion(&self, fingerprint: bool) -> Result<(Duration, Fingerprint)> {
        let start = Instant::now();
        let ctx = SessionContext::new_with_config(
            SessionConfig::new().with_target_partitions(self.partitions.len()),
        );
        let table = MemTable::try_new(Arc::clone(self.schema), self.partitions.to_vec())?;
        ctx.register_table(self.scenario.table(), Arc::new(table))?;
        let frame = ctx.sql(self.scenario.batch_sql).await?;
        let task_ctx = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let streams = (0..plan.properties().output_partitioning().partition_count())
            .map(|partition| plan.execute(partition, Arc::clone(&task_ctx)))
            .collect::<Result<Vec<_>>>()?;
        let print = drain_all(streams, fingerprint).await?;
        Ok((start.elapsed(), print))
    }
}

/// Drains every stream in its own task; counts rows, and fingerprints them if asked.
async fn drain_all(
    streams: Vec<SendableRecordBatchStream>,
    fingerprint: bool,
) -> Result<Fingerprint> {
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut print = Fingerprint::default();
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    if fingerprint {
                        print.add(&batch)?;
                    } else {
                        print.rows += batch.num_rows() as u64;
                    }
                }
                Ok::<_, datafusion::error::DataFusionError>(print)
            })
        })
        .collect();
    let mut total = Fingerprint::default();
    for task in tasks {
        let print = match task.await {
            Ok(print) => print?,
            Err(e) => return exec_err!("a benchmark task failed: {e}"),
        };
        total.rows += print.rows;
        total.row_hash_sum = total.row_hash_sum.wrapping_add(print.row_hash_sum);
        total
            .float_sums
            .resize(print.float_sums.len().max(total.float_sums.len()), 0.0);
        for (sum, add) in total.float_sums.iter_mut().zip(&print.float_sums) {
            *sum += add;
        }
    }
    Ok(total)
}

/// The median over rounds of `datafusion[r] / freshet[r]`.
fn median_ratio(freshet: &[Duration], datafusion: &[Duration]) -> f64 {
    let mut ratios: Vec<f64> = freshet
        .iter()
        .zip(datafusion)
        .map(|(f, d)| d.as_secs_f64() / f.as_secs_f64().max(1e-9))
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied().unwrap_or_default()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// Resets the kernel's peak-RSS mark of this process (Linux), so that the next reading is the
/// peak of what follows.
/// Starts a new peak-memory measurement (Linux; elsewhere nothing happens).
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident memory, from `/proc/self/status` (Linux).
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::arrow::array::AsArray;

    use super::*;
    use crate::scenarios::scenario;
    use freshet_engine::{GeneratorKind, GeneratorSpec};

    #[test]
    fn the_ratio_pairs_each_round_so_a_slow_phase_slows_both_sides() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        // DataFusion runs slowly in rounds 2 and 3, and Freshet too in round 3: each side's
        // median gives 4x, the rounds' ratios 2x, 4x and 2x.
        let (freshet, datafusion) = (ms(&[100, 100, 200]), ms(&[200, 400, 400]));
        assert_eq!(median(datafusion.clone()).as_millis(), 400);
        assert_eq!(median(freshet.clone()).as_millis(), 100);
        assert_eq!(median_ratio(&freshet, &datafusion), 2.0);
    }

    #[test]
    fn a_keyed_split_keeps_each_key_in_one_partition_and_balances_the_keys() {
        let batches: Vec<RecordBatch> = (0..3)
            .map(|b| {
                GeneratorSpec::new(GeneratorKind::MarketData, Some(3_000))
                    .batch(b * 1_000, 1_000)
                    .unwrap()
            })
            .collect();
        let s3b = scenario("S3b").unwrap();
        let split = split_batches(&s3b, &batches, 2).unwrap();
        let mut pairs_per_partition = Vec::new();
        for pieces in &split {
            let mut pairs = HashSet::new();
            for piece in pieces {
                let traders = piece
                    .column_by_name("trader_id")
                    .unwrap()
                    .as_string::<i32>();
                let symbols = piece.column_by_name("symbol").unwrap().as_string::<i32>();
                for row in 0..piece.num_rows() {
                    pairs.insert((
                        traders.value(row).to_string(),
                        symbols.value(row).to_string(),
                    ));
                }
            }
            pairs_per_partition.push(pairs);
        }
        assert_eq!(pairs_per_partition[0].len(), 10);
        assert_eq!(pairs_per_partition[1].len(), 10);
        assert!(pairs_per_partition[0].is_disjoint(&pairs_per_partition[1]));
        let rows: usize = split.iter().flatten().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 3_000);
    }
}
