//! The scenario runner behind `freshet bench`.
//!
//! Each scenario runs from one or more sources at each stream count:
//! - `memory`: the data generated once into memory and split into the stream's source
//!   partitions (by key where the scenario is keyed, declared so), against DataFusion batch
//!   over a `MemTable` of the same batches;
//! - `parquet`: the user's path — a Parquet file written once per size, registered as the
//!   command line registers `--table NAME=FILE,event_time=COLUMN` (automatic strategy, the
//!   file's read inside the time), against DataFusion batch over the same file;
//! - `generator`: the command line's `generator:` table, against DataFusion batch over the
//!   generated batches in memory.
//!
//! Freshet's results go to a counting sink. A first run of each fingerprints both results; they must agree before any speed is
//! reported. Then both run alternately, after a warm-up, and the median time of each is
//! reported as records per second. The ratio is the median over the rounds of DataFusion's
//! time over Freshet's in the same round: a slow phase of the machine, which lasts seconds
//! to minutes, then slows both sides of a ratio alike instead of whichever engine it hits.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::datasource::MemTable;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use freshet_engine::sink::{SinkSpec, write_generated};
use freshet_engine::{GeneratorSpec, ReplaySource, StreamOptions};
use freshet_planner::StreamingContext;
use futures::StreamExt;

use crate::compare::Fingerprint;
use crate::scenarios::Scenario;

/// Where a scenario's records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchSource {
    /// Batches prepared in memory.
    Memory,
    /// A Parquet file, read as the command line reads it.
    Parquet,
    /// The built-in generator, as the command line's `generator:` table.
    Generator,
}

impl BenchSource {
    pub const ALL: [BenchSource; 3] = [Self::Memory, Self::Parquet, Self::Generator];

    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Parquet => "parquet",
            Self::Generator => "generator",
        }
    }
}

impl fmt::Display for BenchSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BenchSource {
    type Err = datafusion::error::DataFusionError;

    fn from_str(text: &str) -> Result<Self> {
        match Self::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(text.trim()))
        {
            Some(source) => Ok(source),
            None => {
                plan_err!("unknown bench source '{text}'; sources are memory, parquet, generator")
            }
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Input records per scenario.
    pub records: u64,
    /// Stream counts to run each scenario at.
    pub partitions: Vec<usize>,
    /// Timed runs per engine (the median is reported), after one warm-up run.
    pub runs: usize,
    /// The sources to run each scenario from.
    pub sources: Vec<BenchSource>,
    /// Where the Parquet files are written once per scenario data and size, and reused from.
    pub dir: PathBuf,
}

/// One scenario's measurements at one stream count.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    pub scenario: String,
    pub source: BenchSource,
    pub records: u64,
    pub partitions: usize,
    /// Median wall time of Freshet and of DataFusion batch.
    pub freshet: Duration,
    pub datafusion: Duration,
    /// Median CPU time (user plus system, every thread of the process) of each engine's run.
    pub freshet_cpu: Duration,
    pub datafusion_cpu: Duration,
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

    /// Freshet's CPU time per input record, in nanoseconds.
    pub fn freshet_cpu_ns_per_record(&self) -> f64 {
        self.freshet_cpu.as_secs_f64() * 1e9 / self.records.max(1) as f64
    }

    /// DataFusion's CPU time per input record, in nanoseconds.
    pub fn datafusion_cpu_ns_per_record(&self) -> f64 {
        self.datafusion_cpu.as_secs_f64() * 1e9 / self.records.max(1) as f64
    }

    /// Freshet's throughput over DataFusion's: the median of the rounds' ratios.
    pub fn ratio(&self) -> f64 {
        self.paired_ratio
    }
}

/// Runs `scenario` from each of `config.sources` at each of `config.partitions`.
pub async fn run_scenario(
    scenario: &Scenario,
    config: &BenchConfig,
) -> Result<Vec<ScenarioResult>> {
    let spec = scenario.data_spec(config.records);
    let schema = spec.schema();
    let needs_batches = config
        .sources
        .iter()
        .any(|s| matches!(s, BenchSource::Memory | BenchSource::Generator));
    let batches = if needs_batches {
        spec.generate_all()?
    } else {
        Vec::new()
    };
    let mut results = Vec::new();
    for &source in &config.sources {
        let file = match source {
            BenchSource::Parquet => Some(scenario_file(&config.dir, scenario, config.records)?),
            _ => None,
        };
        for &streams in &config.partitions {
            let split = match source {
                BenchSource::Memory => split_batches(scenario, &batches, streams)?,
                BenchSource::Generator => round_robin(&batches, streams),
                BenchSource::Parquet => Vec::new(),
            };
            let input = match (&file, source) {
                (Some(path), _) => ScenarioInput::Parquet(path),
                (None, BenchSource::Generator) => ScenarioInput::Generator {
                    spec: &spec,
                    schema: &schema,
                    batches: &split,
                },
                (None, _) => ScenarioInput::Batches {
                    schema: &schema,
                    partitions: &split,
                },
            };
            let run = ScenarioRun {
                scenario,
                streams,
                input,
            };
            results.push(measure(&run, config).await?);
        }
    }
    Ok(results)
}

/// Checks that both engines agree on `run`, then times them alternately.
async fn measure(run: &ScenarioRun<'_>, config: &BenchConfig) -> Result<ScenarioResult> {
    let label = format!(
        "{} from {} at {} streams",
        run.scenario.id,
        run.input.source(),
        run.streams
    );
    let timings = time_alternately(
        &label,
        config.runs,
        |fingerprint| run.run_freshet(fingerprint),
        |fingerprint| run.run_datafusion(fingerprint),
    )
    .await?;
    Ok(timings.result(
        run.scenario.id,
        run.input.source(),
        config.records * run.scenario.reads,
        run.streams,
    ))
}

/// What [`time_alternately`] measured.
pub(crate) struct Timings {
    freshet: Vec<Duration>,
    datafusion: Vec<Duration>,
    freshet_cpu: Vec<Duration>,
    datafusion_cpu: Vec<Duration>,
    output_rows: u64,
    peak_rss_bytes: Option<u64>,
}

impl Timings {
    /// The medians, as the result of `scenario` over `records` input records.
    pub(crate) fn result(
        self,
        scenario: &str,
        source: BenchSource,
        records: u64,
        partitions: usize,
    ) -> ScenarioResult {
        ScenarioResult {
            scenario: scenario.to_string(),
            source,
            records,
            partitions,
            paired_ratio: median_ratio(&self.freshet, &self.datafusion),
            freshet: median(self.freshet),
            datafusion: median(self.datafusion),
            freshet_cpu: median(self.freshet_cpu),
            datafusion_cpu: median(self.datafusion_cpu),
            output_rows: self.output_rows,
            peak_rss_bytes: self.peak_rss_bytes,
        }
    }
}

/// Runs `freshet` and `datafusion` once each with fingerprints, which must agree, then `runs`
/// times each alternately after a warm-up round, taking wall and CPU time of each run.
pub(crate) async fn time_alternately<F, D, FF, DF>(
    label: &str,
    runs: usize,
    freshet: F,
    datafusion: D,
) -> Result<Timings>
where
    F: Fn(bool) -> FF,
    D: Fn(bool) -> DF,
    FF: Future<Output = Result<(Duration, Fingerprint)>>,
    DF: Future<Output = Result<(Duration, Fingerprint)>>,
{
    reset_peak_rss();
    let (freshet_print, datafusion_print) = (freshet(true).await?.1, datafusion(true).await?.1);
    if !freshet_print.matches(&datafusion_print) {
        return exec_err!(
            "{label}: Freshet's result differs from DataFusion batch ({freshet_print:?} vs {datafusion_print:?}); no speed reported"
        );
    }
    let mut timings = Timings {
        freshet: Vec::new(),
        datafusion: Vec::new(),
        freshet_cpu: Vec::new(),
        datafusion_cpu: Vec::new(),
        output_rows: freshet_print.rows,
        peak_rss_bytes: None,
    };
    for round in 0..=runs {
        let cpu = cpu_time();
        let (freshet_time, _) = freshet(false).await?;
        let between = cpu_time();
        let (datafusion_time, _) = datafusion(false).await?;
        if round > 0 {
            timings.freshet.push(freshet_time);
            timings.datafusion.push(datafusion_time);
            timings.freshet_cpu.push(between.saturating_sub(cpu));
            timings
                .datafusion_cpu
                .push(cpu_time().saturating_sub(between));
        }
    }
    timings.peak_rss_bytes = peak_rss();
    Ok(timings)
}

/// The Parquet file of `scenario`'s data with `records` records in `dir`, written if missing
/// (under a temporary name first, so that an interrupted run leaves no short file).
pub fn scenario_file(dir: &Path, scenario: &Scenario, records: u64) -> Result<PathBuf> {
    let symbols = match scenario.lookup_symbols {
        Some(symbols) => format!("_{symbols}symbols"),
        None => String::new(),
    };
    let path = dir.join(format!(
        "{}_{records}_{}{symbols}.parquet",
        scenario.table(),
        scenario.amount_base
    ));
    if !path.exists() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return plan_err!("cannot create {}: {e}", dir.display());
        }
        let partial = path.with_extension("parquet.partial");
        write_generated(
            &scenario.data_spec(records),
            &SinkSpec::Parquet(partial.clone()),
        )?;
        if let Err(e) = std::fs::rename(&partial, &path) {
            return plan_err!("cannot rename {}: {e}", partial.display());
        }
    }
    Ok(path)
}

/// Whole batches round-robin over `partitions`.
pub(crate) fn round_robin(batches: &[RecordBatch], partitions: usize) -> Vec<Vec<RecordBatch>> {
    let mut split = vec![Vec::new(); partitions];
    for (index, batch) in batches.iter().enumerate() {
        split[index % partitions].push(batch.clone());
    }
    split
}

/// One scenario's input at one stream count, runnable on either engine (also used by the
/// criterion benches).
pub struct ScenarioRun<'a> {
    pub scenario: &'a Scenario,
    /// Streams (source partitions, and DataFusion's target partitions).
    pub streams: usize,
    pub input: ScenarioInput<'a>,
}

/// Where a [`ScenarioRun`] reads from.
pub enum ScenarioInput<'a> {
    /// Batches in memory, one list per source partition; a keyed scenario's are split by key
    /// (see [`split_batches`]) and declared so.
    Batches {
        schema: &'a SchemaRef,
        partitions: &'a [Vec<RecordBatch>],
    },
    /// A Parquet file.
    Parquet(&'a Path),
    /// The generator `spec`; DataFusion reads `batches`, the same records in memory.
    Generator {
        spec: &'a GeneratorSpec,
        schema: &'a SchemaRef,
        batches: &'a [Vec<RecordBatch>],
    },
}

impl ScenarioInput<'_> {
    fn source(&self) -> BenchSource {
        match self {
            Self::Batches { .. } => BenchSource::Memory,
            Self::Parquet(_) => BenchSource::Parquet,
            Self::Generator { .. } => BenchSource::Generator,
        }
    }
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
    let Some(keys) = scenario.keyed_by.filter(|_| partitions > 1) else {
        return Ok(round_robin(batches, partitions));
    };
    let mut split = vec![Vec::new(); partitions];
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
    /// Freshet's streaming plan over the input; the wall time and the result's row count (and
    /// fingerprint, if asked).
    pub async fn run_freshet(&self, fingerprint: bool) -> Result<(Duration, Fingerprint)> {
        let start = Instant::now();
        let ctx = StreamingContext::with_partitions(self.streams);
        let table = self.scenario.table();
        match &self.input {
            ScenarioInput::Batches { schema, partitions } => {
                // Data split by key (see `split_batches`) is declared so: keyed operators over
                // it need no shuffle.
                let options = StreamOptions {
                    partitioned_by: match self.scenario.keyed_by {
                        Some(keys) if self.streams > 1 => {
                            keys.iter().map(|k| k.to_string()).collect()
                        }
                        _ => Vec::new(),
                    },
                    event_time: self.scenario.event_time().map(str::to_string),
                    ..StreamOptions::default()
                };
                let source = ReplaySource::Partitioned {
                    schema: Arc::clone(schema),
                    partitions: partitions.to_vec(),
                };
                ctx.register_stream(table, source, options)?;
            }
            ScenarioInput::Parquet(path) => {
                let options = StreamOptions {
                    event_time: self.scenario.event_time().map(str::to_string),
                    ..StreamOptions::default()
                };
                ctx.register_files(table, &path.to_string_lossy(), None, options)
                    .await?;
            }
            ScenarioInput::Generator { spec, .. } => {
                let options = StreamOptions {
                    event_time: self.scenario.event_time().map(str::to_string),
                    ..StreamOptions::default()
                };
                ctx.register_generator(table, (*spec).clone(), options)?;
            }
        }
        if let Some(lookup) = self.scenario.lookup_table()? {
            let table = MemTable::try_new(lookup.schema(), vec![vec![lookup]])?;
            ctx.session().register_table("symbols", Arc::new(table))?;
        }
        let query = ctx.sql(self.scenario.streaming_sql).await?;
        let print = drain_all(query.execute_partitions()?, fingerprint).await?;
        Ok((start.elapsed(), print))
    }

    /// DataFusion batch over the same records: a `MemTable` of the batches, or the file.
    pub async fn run_datafusion(&self, fingerprint: bool) -> Result<(Duration, Fingerprint)> {
        let start = Instant::now();
        let ctx = SessionContext::new_with_config(
            SessionConfig::new().with_target_partitions(self.streams),
        );
        let table = self.scenario.table();
        match &self.input {
            ScenarioInput::Batches { schema, partitions }
            | ScenarioInput::Generator {
                schema,
                batches: partitions,
                ..
            } => {
                let memory = MemTable::try_new(Arc::clone(schema), partitions.to_vec())?;
                ctx.register_table(table, Arc::new(memory))?;
            }
            ScenarioInput::Parquet(path) => {
                ctx.register_parquet(table, path.to_string_lossy(), ParquetReadOptions::default())
                    .await?;
            }
        }
        if let Some(lookup) = self.scenario.lookup_table()? {
            let table = MemTable::try_new(lookup.schema(), vec![vec![lookup]])?;
            ctx.register_table("symbols", Arc::new(table))?;
        }
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
pub(crate) async fn drain_all(
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

/// User plus system CPU time of the whole process so far (every thread, live or ended),
/// from `getrusage`.
pub fn cpu_time() -> Duration {
    usage_time(libc::RUSAGE_SELF)
}

/// User plus system CPU time of this process's child processes that have ended and been
/// waited for, from `getrusage`.
pub fn children_cpu_time() -> Duration {
    usage_time(libc::RUSAGE_CHILDREN)
}

/// User plus system CPU time of running process `pid` so far, from `/proc/PID/stat` (Linux);
/// `None` where that cannot be read.
pub fn process_cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // the first, utime and stime the 12th and 13th.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: `sysconf` reads a configuration value and has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

fn usage_time(who: libc::c_int) -> Duration {
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is plain data that
    // zeroed bytes initialise validly.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
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
