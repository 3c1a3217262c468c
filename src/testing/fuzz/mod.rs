//! Freshet's SQL fuzzer: random streaming queries over random small tables, each checked
//! against plain DataFusion batch SQL over the same data.
//!
//! A case ([`FuzzCase`]) is a table ([`FuzzData`]: rows, event-time type, storage), a query
//! ([`FuzzQuery`]: Freshet SQL and its batch equivalent) and the stream and source-partition
//! counts to run it at; every case is reproducible from its seed. The judge:
//!
//! - EMIT FINAL results, stateless queries and window functions must equal the batch result
//!   as a multiset of rows.
//! - A changelog (EMIT CHANGES) must end in the batch result: its last row per key (keys and
//!   window start), deletions (`op` = `-D`) removed; with HAVING too. A per-record changelog read from one source partition
//!   must also be, row for row, the batch's running aggregates in stored order.
//! - Every record is accounted for: the query's `records_in` is the table's row count times
//!   the number of times the plan reads it (twice for a self-join).
//!
//! A refusal is a failure unless its message is one of the documented refusals
//! ([`DOCUMENTED_REFUSALS`]). A failing case is shrunk: rows and query parts are removed while
//! it still fails the same way, so the reproduction printed is small.

mod across_workers;
mod data;
mod query;
mod render;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::options::ArrowReadOptions;
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionConfig, SessionContext};
use freshet_engine::changelog::{ChangeOp, op_column};
use freshet_engine::{ReplaySource, StreamOptions, splitmix64};
use freshet_planner::StreamingContext;
use std::panic::AssertUnwindSafe;

use futures::{FutureExt, TryStreamExt};

pub use data::{FuzzData, FuzzRow, Storage, TimeType};
pub use query::{
    Above, Emit, Form, FuzzQuery, Item, JoinColumn, Window, WindowSyntax, Windowed, Wrap,
};

use super::TestRng;
use super::oracle::without_op_column;
use super::{compare_results, contains_results, display_rows};

/// Messages of the refusals docs/sql.md documents: such a refusal is not a failure.
pub const DOCUMENTED_REFUSALS: &[&str] = &[
    "partitioning_strategy 'sticky' would give wrong results",
    "partitioning_strategy 'round_robin' would give wrong results",
    "partitioning_strategy 'two_phase' applies to GROUP BY with EMIT FINAL",
    "EMIT CHANGES on SESSION windows supports",
    "two-phase aggregation does not apply to SESSION windows",
    "two-phase aggregation needs EMIT FINAL",
    // A window or OVER over a join's time column that can be null.
    "is not an event time of the join's output",
    // A false `partitioned_by` declaration, found as the records flow.
    "is declared partitioned_by=",
    // An aggregation, join or window function reading a changelog's rows as records.
    "over a changelog is not supported",
];

/// How long one streaming run of a case may take before it counts as a hang (the cases are
/// tens of rows; a run takes milliseconds).
/// Mixed into a case's seed for its LIMIT's draws.
const LIMIT_SEED: u64 = 0x4c49_4d49_5400_0001;
const HAVING_SEED: u64 = 0x4841_5649_4e47_0001;
const LATE_SEED: u64 = 0x4c41_5445_0000_0001;
const TOP_N_SEED: u64 = 0x544f_504e_0000_0001;

const STREAMING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// One fuzz case: data, query and where to run it.
#[derive(Debug, Clone)]
pub struct FuzzCase {
    pub seed: u64,
    pub data: FuzzData,
    /// The join's other table `u` (in-memory batches), when it is not `t` itself.
    pub other: Option<FuzzData>,
    pub query: FuzzQuery,
    /// Stream counts Freshet runs the query at.
    pub streams: Vec<usize>,
    /// Source partitions (`None`: as many as streams).
    pub source_partitions: Option<usize>,
    /// The key a keyed source declares it is partitioned by: `k` (true), sometimes `g`
    /// (false, which must fail or not matter).
    pub declared_key: String,
    /// For a table `u` in keyed partitions: how far its keys' partition numbers are turned
    /// from `t`'s (0: the two agree; else a join that relies on them must fail or not
    /// matter).
    pub other_turn: usize,
    /// A watermark delay shorter than the data's disorder: records arrive late, so the
    /// batch result does not apply; a replay of files must then give the same rows (late
    /// records the same) at every number of streams.
    pub late: bool,
}

/// How a case ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Match,
    /// A documented refusal.
    Refused(String),
    Mismatch(String),
    /// An error that is not a documented refusal.
    Error(String),
    /// DataFusion batch failed with an internal error of its own on the batch SQL: there is
    /// no answer to compare with (reported, not a failure of Freshet).
    OracleFailed(String),
}

impl Outcome {
    pub fn is_failure(&self) -> bool {
        matches!(self, Self::Mismatch(_) | Self::Error(_))
    }

    fn same_kind(&self, other: &Outcome) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl FuzzCase {
    /// The case of `seed`.
    pub fn generate(seed: u64) -> Self {
        let mut rng = TestRng::new(seed);
        let over = rng.chance(0.2);
        let source_partitions = match rng.below(4) {
            0 => Some(1),
            1 => Some(3),
            _ => None,
        };
        // Equal event times are ordered by arrival; arrival is stored order only within one
        // source partition, so ties are generated where a query's answer depends on them
        // only with one source partition.
        let ties = !over || source_partitions == Some(1);
        let mut data = FuzzData::random(&mut rng, ties);
        let query = if over {
            // Some become top-Ns, drawn apart so that the other cases stay the ones they were.
            let mut top_n_rng = TestRng::new(seed ^ TOP_N_SEED);
            if top_n_rng.chance(0.4) {
                // Equal event times, ranked by arrival, where arrival is stored order.
                if data.ties && top_n_rng.chance(0.7) {
                    data.repeat_times(&mut top_n_rng);
                }
                FuzzQuery::top_n(&mut top_n_rng, &data)
            } else {
                let mut rng2 = rng.clone();
                let mut query = FuzzQuery::random(&mut rng2, &data);
                while query.form != Form::Over {
                    query = FuzzQuery::random(&mut rng2, &data);
                }
                query
            }
        } else {
            let mut query = FuzzQuery::random(&mut rng, &data);
            while query.form == Form::Over {
                query = FuzzQuery::random(&mut rng, &data);
            }
            query
        };
        // In-memory partitions by key hold rows of every time: ties across them arrive in
        // partition order, not stored order.
        let keyed_apart = matches!(data.storage, Storage::KeyedPartitions(n) if n > 1);
        if over && (keyed_apart || !query.orders_ties_as_stored()) {
            data.separate_ties();
        }
        let declared_key = if rng.chance(0.1) { "g" } else { "k" }.to_string();
        // Half the joins join `t` with a table of their own: other keys, times and sizes
        // (an empty side among them).
        let mut query = query;
        let other = match &mut query.form {
            Form::Join {
                other_table,
                lookup,
                windowed,
                ..
            } if rng.chance(0.5) => {
                *other_table = true;
                // A lookup of a stream of rows into the table, on the keys.
                *lookup = *windowed == Windowed::No && rng.chance(0.3);
                let mut other = FuzzData::random(&mut rng, true);
                other.time_type = data.time_type;
                other.storage = Storage::Batches(1 + rng.below(20) as usize);
                Some(other)
            }
            _ => None,
        };
        if matches!(query.form, Form::Join { lookup: true, .. }) && query.keys.is_empty() {
            query.keys.push(("k".into(), "k".into()));
        }
        // A stream joined on `k` with `t`, both declared partitioned by it.
        let mut other = other;
        let mut other_turn = 0;
        if let (Storage::KeyedPartitions(n), Some(other), Form::Join { lookup: false, .. }) =
            (data.storage, &mut other, &query.form)
            && rng.chance(0.7)
        {
            let on_k = ("k".to_string(), "k".to_string());
            if !query.keys.contains(&on_k) {
                query.keys.push(on_k);
            }
            other.storage = Storage::KeyedPartitions(n);
            other_turn = usize::from(rng.chance(0.3));
        }
        // Drawn apart, so that a seed's case is otherwise the one it was before LIMITs were
        // drawn. EMIT CHANGES must end its query: a changelog takes no LIMIT.
        let mut limit_rng = TestRng::new(seed ^ LIMIT_SEED);
        if !query.is_changelog() && limit_rng.chance(0.1) {
            query.limit = Some(*limit_rng.pick(&[0, 1, 3, 10, 50]));
        }
        // HAVING under EMIT CHANGES, drawn apart likewise: the changelog, applied, must end
        // in the batch result with the HAVING (an upsert that fails it deletes its key).
        let mut having_rng = TestRng::new(seed ^ HAVING_SEED);
        let aggregation = matches!(query.form, Form::Aggregate { .. });
        if aggregation && query.is_changelog() && query.having.is_none() && having_rng.chance(0.3) {
            let having = [
                "COUNT(*) > 1",
                "COUNT(*) < 3",
                "SUM(i) > 0",
                "MAX(i) < 40 OR COUNT(*) = 1",
            ];
            query.having = Some(having_rng.pick(&having).to_string());
        }
        // A changelog read by another aggregation, which applies it. (Over a changelog
        // without keys DataFusion folds the count of its one row away.)
        let keyed = query.items.iter().any(|item| item.changelog_key);
        if aggregation && query.is_changelog() && keyed && having_rng.chance(0.05) {
            query.wrap = Wrap::Counted;
        }
        // Or joined to itself on a GROUP BY key: refused.
        let key_alias = query.keys.first().and_then(|(_, alias)| {
            query::KEY_CHOICES
                .iter()
                .find(|(_, choice)| choice == alias)
                .map(|(_, choice)| *choice)
        });
        if let Some(alias) = key_alias
            && aggregation
            && query.is_changelog()
            && query.wrap == Wrap::None
            && having_rng.chance(0.05)
        {
            query.wrap = Wrap::SelfJoined(alias);
        }
        let stored_in_files = !matches!(
            data.storage,
            Storage::Batches(_) | Storage::KeyedPartitions(_)
        );
        let late =
            stored_in_files && data.disorder_ms > 0 && TestRng::new(seed ^ LATE_SEED).chance(0.25);
        Self {
            seed,
            data,
            other,
            query,
            streams: vec![1, 2, 4],
            source_partitions,
            declared_key,
            other_turn,
            late,
        }
    }

    fn options(&self) -> StreamOptions {
        // Without a drawn count the partitions are left to Freshet, as a user leaves them:
        // the stream count, or one per core for a file read by a plain GROUP BY.
        let (partitions, partitioned_by) = match self.data.storage {
            Storage::KeyedPartitions(n) => (Some(n), vec![self.declared_key.clone()]),
            _ => (self.source_partitions, Vec::new()),
        };
        let delay = match self.late {
            true => self.data.disorder_ms / 4,
            false => self.data.disorder_ms,
        };
        StreamOptions {
            event_time: Some("ts".to_string()),
            out_of_orderness: std::time::Duration::from_millis(delay as u64),
            partitions,
            partitioned_by,
            bounded: Some(true),
            ..StreamOptions::default()
        }
    }

    /// Runs the case in a scratch directory of its own.
    pub async fn run(&self) -> Outcome {
        let dir = scratch_dir(self.seed);
        let written = std::fs::create_dir_all(&dir)
            .map_err(|e| datafusion::common::DataFusionError::External(Box::new(e)))
            .and_then(|()| self.data.write(&dir));
        let outcome = match written {
            // A panic (in DataFusion's planner or Freshet's) is a failure of this case, with
            // its reproduction, not the end of the run.
            Ok(path) => match AssertUnwindSafe(self.run_with(path)).catch_unwind().await {
                Ok(outcome) => outcome,
                Err(panic) => Outcome::Error(format!("panicked: {}", panic_message(&panic))),
            },
            Err(e) => Outcome::Error(format!("writing the data failed: {e}")),
        };
        let _ = std::fs::remove_dir_all(&dir);
        outcome
    }

    async fn run_with(&self, path: Option<PathBuf>) -> Outcome {
        let batch_sql = self.query.batch_sql();
        let expected = match self.batch(&path, &batch_sql).await {
            Ok(batches) => batches,
            Err(e) if e.to_string().contains("Internal error") => {
                return Outcome::OracleFailed(format!("{e}\n{batch_sql}"));
            }
            Err(e) => return Outcome::Error(format!("the batch oracle failed: {e}\n{batch_sql}")),
        };
        let running = match self.query.running_sql() {
            Some(sql) if self.single_source() => match self.batch(&path, &sql).await {
                Ok(batches) => Some(batches),
                Err(e) => return Outcome::Error(format!("the running oracle failed: {e}\n{sql}")),
            },
            _ => None,
        };
        let mut first_run: Option<(usize, Vec<RecordBatch>)> = None;
        for &streams in &self.streams {
            let run = tokio::time::timeout(STREAMING_TIMEOUT, self.streaming(&path, streams));
            let Ok(result) = run.await else {
                return Outcome::Error(format!(
                    "at {streams} streams: no result after {STREAMING_TIMEOUT:?} (a hang)"
                ));
            };
            let (actual, records_in, plan) = match result {
                Ok(result) => result,
                Err(e) => {
                    let message = e.to_string();
                    return if DOCUMENTED_REFUSALS.iter().any(|r| message.contains(r)) {
                        Outcome::Refused(message)
                    } else {
                        Outcome::Error(format!("at {streams} streams: {message}"))
                    };
                }
            };
            let (records_in, reads, other_reads) = records_in;
            let other_rows = self.other.as_ref().map_or(0, |other| other.rows.len());
            let table_rows = reads * self.data.rows.len() + other_reads * other_rows;
            // DataFusion's lookup into an empty table never reads the stream: nothing matches.
            let empty_lookup =
                matches!(self.query.form, Form::Join { lookup: true, .. }) && other_rows == 0;
            // DataFusion's hash join (a join without a time bound, on bounded input) whose
            // build side has no row with a non-null key ends without reading its probe side
            // when no output row could come from it; the result is then empty.
            let unread_probe = plan
                .lines()
                .any(|line| line.trim_start().starts_with("HashJoinExec:"))
                && actual.iter().all(|batch| batch.num_rows() == 0)
                && records_in.is_some_and(|n| n < table_rows);
            // A LIMIT ends the query, and its reading, once its rows have left.
            let limited = self.query.limit.is_some();
            if records_in.is_some_and(|n| n != table_rows)
                && !empty_lookup
                && !unread_probe
                && !limited
            {
                return Outcome::Mismatch(format!(
                    "at {streams} streams: {} records in, the table has {} (read {reads} times)",
                    records_in.unwrap_or(0),
                    self.data.rows.len()
                ));
            }
            if self.late {
                // Late records are dropped: only the first run is the reference.
            } else if let Err(difference) = self.judge(&expected, running.as_deref(), &actual) {
                return Outcome::Mismatch(format!(
                    "at {streams} streams: {difference}\n  plan:\n{plan}"
                ));
            }
            // A replay of files is applied in the file's order at any number of streams:
            // every order-dependent result (a changelog per record, late records, ties
            // among equal times) is the first run's, row for row. A changelog counted by
            // another aggregation is that aggregation's, a row per group and input batch:
            // its rows follow the batches, its final state (judged above) does not.
            let per_batch = self.query.wrap == Wrap::Counted;
            if self.replays_file_order(&path) && self.query.limit.is_none() && !per_batch {
                match &first_run {
                    None => first_run = Some((streams, actual)),
                    Some((first, rows)) => {
                        if let Err(difference) = compare_results(rows, &actual, false) {
                            return Outcome::Mismatch(format!(
                                "at {streams} streams the result differs from the one at \
                                 {first}: {difference}\n  plan:\n{plan}"
                            ));
                        }
                    }
                }
            }
        }
        Outcome::Match
    }

    /// Whether the table is a replay of files, whose order Freshet keeps at any split.
    fn replays_file_order(&self, path: &Option<PathBuf>) -> bool {
        path.is_some() && !matches!(self.data.storage, Storage::KeyedPartitions(_))
    }

    fn single_source(&self) -> bool {
        match self.data.storage {
            Storage::KeyedPartitions(n) => n == 1,
            _ => self.source_partitions == Some(1),
        }
    }

    fn judge(
        &self,
        expected: &[RecordBatch],
        running: Option<&[RecordBatch]>,
        actual: &[RecordBatch],
    ) -> std::result::Result<(), String> {
        if let Some(limit) = self.query.limit {
            return limited_results(expected, actual, limit);
        }
        if !self.query.is_changelog() {
            return compare_results(expected, actual, false);
        }
        if let Some(running) = running {
            let rows = without_op_column(actual.to_vec()).map_err(|e| e.to_string())?;
            compare_results(running, &rows, false)
                .map_err(|d| format!("the per-record changelog differs: {d}"))?;
        }
        let last = last_rows(&self.query, actual).map_err(|e| e.to_string())?;
        // A changelog without keys over no records is empty, where batch SQL gives one row.
        let no_keys = self.query.changelog_key_columns().is_empty();
        if no_keys && actual.iter().all(|b| b.num_rows() == 0) {
            return Ok(());
        }
        compare_results(expected, &last, false)
            .map_err(|d| format!("the changelog's final state differs: {d}"))
    }

    async fn batch(&self, path: &Option<PathBuf>, sql: &str) -> Result<Vec<RecordBatch>> {
        // Parquet statistics leave NaN out, so pruning row groups by them drops rows where
        // NaN compares greater than any number (DataFusion's own comparison): the oracle
        // reads every row group.
        let mut config = SessionConfig::new();
        config.options_mut().execution.parquet.pruning = false;
        config.options_mut().execution.parquet.enable_page_index = false;
        config.options_mut().execution.collect_statistics = false;
        let ctx = SessionContext::new_with_config(config);
        match (path, self.data.storage) {
            (None, _) => {
                let table = MemTable::try_new(self.data.schema(), vec![self.data.batches()?])?;
                ctx.register_table("t", Arc::new(table))?;
            }
            (Some(path), Storage::Csv) => {
                ctx.register_csv("t", &path.to_string_lossy(), CsvReadOptions::new())
                    .await?
            }
            (Some(path), Storage::Arrow) => {
                ctx.register_arrow("t", &path.to_string_lossy(), ArrowReadOptions::default())
                    .await?
            }
            (Some(path), _) => {
                ctx.register_parquet("t", &path.to_string_lossy(), ParquetReadOptions::default())
                    .await?
            }
        }
        if let Some(other) = &self.other {
            let table = MemTable::try_new(other.schema(), vec![other.batches()?])?;
            ctx.register_table("u", Arc::new(table))?;
        }
        ctx.sql(sql).await?.collect().await
    }

    /// A context on `streams` streams with the case's settings and tables: `t` from the
    /// file at `path`, or in memory.
    pub(crate) async fn context(
        &self,
        path: &Option<PathBuf>,
        streams: usize,
    ) -> Result<StreamingContext> {
        let ctx = StreamingContext::with_partitions(streams);
        for (key, value) in &self.query.settings {
            ctx.session().sql(&format!("SET {key} = '{value}'")).await?;
        }
        let options = self.options();
        match (path, self.data.storage) {
            (None, Storage::KeyedPartitions(n)) => ctx.register_stream(
                "t",
                ReplaySource::Partitioned {
                    schema: self.data.schema(),
                    partitions: self.data.keyed_partitions(n, 0)?,
                },
                options,
            )?,
            (None, _) => {
                ctx.register_batches("t", self.data.schema(), self.data.batches()?, options)?
            }
            (Some(path), _) => {
                ctx.register_files("t", &path.to_string_lossy(), None, options)
                    .await?
            }
        }
        let lookup = matches!(self.query.form, Form::Join { lookup: true, .. });
        if let (Some(other), true) = (&self.other, lookup) {
            let table = MemTable::try_new(other.schema(), vec![other.batches()?])?;
            ctx.session().register_table("u", Arc::new(table))?;
        } else if let Some(other) = &self.other {
            let options = StreamOptions {
                event_time: Some("ts".to_string()),
                out_of_orderness: std::time::Duration::from_millis(other.disorder_ms as u64),
                partitions: Some(self.source_partitions.unwrap_or(streams)),
                bounded: Some(true),
                ..StreamOptions::default()
            };
            if let Storage::KeyedPartitions(n) = other.storage {
                let options = StreamOptions {
                    partitions: Some(n),
                    partitioned_by: vec!["k".to_string()],
                    ..options
                };
                let source = ReplaySource::Partitioned {
                    schema: other.schema(),
                    partitions: other.keyed_partitions(n, self.other_turn)?,
                };
                ctx.register_stream("u", source, options)?;
            } else {
                ctx.register_batches("u", other.schema(), other.batches()?, options)?;
            }
        }
        Ok(ctx)
    }

    async fn streaming(
        &self,
        path: &Option<PathBuf>,
        streams: usize,
    ) -> Result<(Vec<RecordBatch>, (Option<usize>, usize, usize), String)> {
        let ctx = self.context(path, streams).await?;
        let lookup = matches!(self.query.form, Form::Join { lookup: true, .. });
        let query = ctx.sql(&self.query.streaming_sql()).await?;
        // Every join the grammar draws is bounded in event time: on bounded replays a batch
        // join would give the same answer, and hide that the streaming one was not used.
        // (DataFusion may remove a LEFT join whose other side is unique on the keys.)
        let plan = query.explain();
        if matches!(self.query.form, Form::Join { .. })
            && !lookup
            && !plan.contains("IntervalJoinExec")
            && plan.contains("JoinExec")
        {
            return Err(DataFusionError::Plan(format!(
                "the join did not become an interval join:\n{}",
                query.explain()
            )));
        }
        let batches: Vec<RecordBatch> = match query.execute_merged()?.try_collect().await {
            Ok(batches) => batches,
            Err(e) => {
                return Err(e.context(format!("plan:\n{}", query.explain())));
            }
        };
        // Records read by the sources, and how many times the plan reads `t` and `u` (a
        // self-join twice, unless DataFusion removed the join).
        let read = query.records_read();
        let reads = |table: &str| {
            plan.matches(&format!("StreamSourceExec: stream={table},"))
                .count()
        };
        Ok((batches, (Some(read), reads("t"), reads("u")), plan))
    }

    /// The case written out to reproduce it by hand.
    pub fn reproduction(&self) -> String {
        let settings: String = self
            .query
            .settings
            .iter()
            .map(|(k, v)| format!("SET {k} = '{v}'; "))
            .collect();
        format!(
            "seed {seed}: {streaming}\n  {settings}streams {streams:?}, source partitions {sources}, event time {time:?}, watermark {wm} ms, {storage}\n  rows (id, k, g, v, i, ts - start): {rows}\n  batch SQL: {batch}",
            seed = self.seed,
            streaming = self.query.streaming_sql(),
            streams = self.streams,
            sources = self
                .source_partitions
                .map_or("left to Freshet".to_string(), |n| n.to_string()),
            time = self.data.time_type,
            wm = match self.late {
                true => format!(
                    "{} (records late: disorder {})",
                    self.data.disorder_ms / 4,
                    self.data.disorder_ms
                ),
                false => self.data.disorder_ms.to_string(),
            },
            storage = match self.data.dictionary_keys {
                true => format!("{}, k a dictionary", self.data.storage),
                false => self.data.storage.to_string(),
            },
            rows = self.data.describe_rows(),
            batch = self.query.batch_sql(),
        ) + &self
            .other
            .as_ref()
            .map(|other| {
                format!(
                    "\n  table u (watermark {} ms, {}, partition numbers turned by {}) rows: {}",
                    other.disorder_ms,
                    other.storage,
                    self.other_turn,
                    other.describe_rows()
                )
            })
            .unwrap_or_default()
    }

    /// Smaller cases that might fail the same way: fewer rows, simpler queries, fewer
    /// stream counts.
    fn simpler(&self) -> Vec<FuzzCase> {
        let mut variants = Vec::new();
        let rows = &self.data.rows;
        if self.streams.len() > 1 {
            for &streams in &self.streams {
                variants.push(Self {
                    streams: vec![streams],
                    ..self.clone()
                });
            }
        }
        let mut chunk = rows.len() / 2;
        while chunk >= 1 {
            for start in (0..rows.len()).step_by(chunk) {
                let mut data = self.data.clone();
                data.rows = rows[..start]
                    .iter()
                    .chain(&rows[(start + chunk).min(rows.len())..])
                    .cloned()
                    .collect();
                variants.push(Self {
                    data,
                    ..self.clone()
                });
            }
            chunk /= 2;
        }
        for query in self.query.simpler() {
            variants.push(Self {
                query,
                ..self.clone()
            });
        }
        variants
    }

    /// Shrinks a failing case while it fails the same way (at most `budget` runs).
    pub async fn shrink(self, outcome: Outcome, budget: usize) -> (FuzzCase, Outcome) {
        let mut case = self;
        let mut outcome = outcome;
        let mut runs = 0;
        'outer: while runs < budget {
            for candidate in case.simpler() {
                runs += 1;
                if runs >= budget {
                    break 'outer;
                }
                let result = candidate.run().await;
                if result.is_failure() && result.same_kind(&outcome) {
                    case = candidate;
                    outcome = result;
                    continue 'outer;
                }
            }
            break;
        }
        (case, outcome)
    }
}

/// A changelog's state at its end: the last row of each key (the changelog keys' values),
/// without deletions.
/// A LIMIT's rows: as many as the limit (or every row, when fewer), all among the rows of
/// the query without it.
fn limited_results(
    expected: &[RecordBatch],
    actual: &[RecordBatch],
    limit: usize,
) -> std::result::Result<(), String> {
    let all: usize = expected.iter().map(RecordBatch::num_rows).sum();
    let got: usize = actual.iter().map(RecordBatch::num_rows).sum();
    if got != all.min(limit) {
        return Err(format!(
            "LIMIT {limit}: expected {} rows (the query has {all} without it), got {got}",
            all.min(limit)
        ));
    }
    contains_results(expected, actual)
        .map_err(|d| format!("LIMIT {limit}: a row is not in the query's result: {d}"))
}

fn last_rows(query: &FuzzQuery, batches: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let Some(first) = batches.first() else {
        return Ok(Vec::new());
    };
    let all = concat_batches(&first.schema(), batches)?;
    let keys = query.changelog_key_columns();
    let cells = display_rows(std::slice::from_ref(&all))?;
    let mut last: HashMap<Vec<String>, usize> = HashMap::new();
    let mut order = Vec::new();
    for (row, cells) in cells.iter().enumerate() {
        let key: Vec<String> = keys.iter().map(|&i| cells[i].clone()).collect();
        if last.insert(key.clone(), row).is_none() {
            order.push(key);
        }
    }
    let Some(op) = op_column(&all.schema()) else {
        return datafusion::common::plan_err!("a changelog without its op column");
    };
    let ops = all.column(op).as_string::<i32>();
    let deleted = |row: usize| ChangeOp::parse(ops.value(row)) == Some(ChangeOp::Delete);
    let rows: Vec<u32> = order
        .iter()
        .filter_map(|key| last.get(key).copied())
        .filter(|&row| !deleted(row))
        .map(|row| row as u32)
        .collect();
    let last = take_record_batch(&all, &UInt32Array::from(rows))?;
    without_op_column(vec![last])
}

/// The message a panic carried.
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|m| m.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// A directory of the case's own: unique in the process too, where two runs of one seed (two
/// tests) would otherwise delete each other's files.
fn scratch_dir(seed: u64) -> PathBuf {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "freshet-fuzz-{}-{seed}-{run}-{}",
        std::process::id(),
        splitmix64(seed ^ 0x5eed)
    ))
}

/// The totals of a fuzz run.
#[derive(Debug, Default, Clone)]
pub struct FuzzSummary {
    pub cases: usize,
    pub matches: usize,
    pub refused: usize,
    /// Cases whose batch oracle failed with an internal error of DataFusion's.
    pub oracle_failed: usize,
    pub mismatches: usize,
    pub errors: usize,
    /// Each failure's shrunk reproduction and what went wrong.
    pub failures: Vec<String>,
}

impl fmt::Display for FuzzSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fuzz: {} cases, {} matches, {} documented refusals, {} mismatches, {} errors",
            self.cases, self.matches, self.refused, self.mismatches, self.errors
        )?;
        if self.oracle_failed > 0 {
            write!(
                f,
                " ({} cases DataFusion batch could not answer: internal errors of its own)",
                self.oracle_failed
            )?;
        }
        Ok(())
    }
}

/// Runs `cases` cases from `seed` on, shrinking each failure (with `shrink_budget` runs);
/// `report` is called with each failure's text as it is found.
pub async fn fuzz(
    seed: u64,
    cases: usize,
    shrink_budget: usize,
    mut report: impl FnMut(&str),
) -> FuzzSummary {
    let mut summary = FuzzSummary::default();
    for index in 0..cases as u64 {
        let case = FuzzCase::generate(seed.wrapping_add(index));
        let outcome = case.run().await;
        summary.cases += 1;
        match &outcome {
            Outcome::Match => summary.matches += 1,
            Outcome::Refused(_) => summary.refused += 1,
            Outcome::Mismatch(_) => summary.mismatches += 1,
            Outcome::Error(_) => summary.errors += 1,
            Outcome::OracleFailed(message) => {
                summary.oracle_failed += 1;
                report(&format!(
                    "{}\n  => DataFusion batch failed: {message}",
                    case.reproduction()
                ));
            }
        }
        if outcome.is_failure() {
            let (small, small_outcome) = case.shrink(outcome, shrink_budget).await;
            let text = format!("{}\n  => {:?}", small.reproduction(), small_outcome);
            report(&text);
            summary.failures.push(text);
        }
    }
    summary
}
