//! `freshet bench --suite nexmark`: the Nexmark queries over one event sequence, from memory,
//! Parquet files or the generator, at each stream count, beside DataFusion batch on the same
//! events.
//!
//! Throughput counts the events of the whole sequence (persons, auctions and bids), as
//! Nexmark reports do, whichever streams a query reads. As for the scenarios, both engines'
//! answers are fingerprinted and must agree before any time is taken (for q9, q18 and q19 on
//! the columns ties do not change, see [`NexmarkQuery::tie_free_columns`]); then both run
//! alternately. The streams carry `date_time` as their event time with the standard
//! watermark of 4 seconds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::MemTable;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use freshet_engine::sink::{SinkSpec, write_generated};
use freshet_engine::{GeneratorSpec, NexmarkTable, StreamOptions, nexmark_side_input};
use freshet_planner::{StreamingContext, scalar_functions};

use crate::compare::Fingerprint;
use crate::nexmark::NexmarkQuery;
use crate::runner::{
    BenchConfig, BenchSource, ScenarioResult, drain_all, round_robin, time_alternately,
};

/// The standard watermark of the Nexmark streams.
const WATERMARK: Duration = Duration::from_secs(4);

/// Runs `query` over `config.records` events from each source at each stream count.
pub async fn run_nexmark_query(
    query: &NexmarkQuery,
    config: &BenchConfig,
) -> Result<Vec<ScenarioResult>> {
    let events = config.records;
    let mut results = Vec::new();
    for &source in &config.sources {
        let input = match source {
            BenchSource::Parquet => NexmarkInput::Parquet(nexmark_files(&config.dir, events)?),
            BenchSource::Memory | BenchSource::Generator => {
                let batches = query
                    .reads
                    .iter()
                    .map(|table| GeneratorSpec::nexmark(*table, Some(events)).generate_all())
                    .collect::<Result<Vec<_>>>()?;
                match source {
                    BenchSource::Memory => NexmarkInput::Memory(batches),
                    _ => NexmarkInput::Generator(batches),
                }
            }
        };
        for &streams in &config.partitions {
            let run = NexmarkRun {
                query,
                events,
                streams,
                input: &input,
            };
            let label = format!("{} from {source} at {streams} streams", query.name);
            let timings = time_alternately(
                &label,
                config.runs,
                |check| run.run_freshet(check),
                |check| run.run_datafusion(check),
            )
            .await?;
            results.push(timings.result(query.name, source, events, streams));
        }
    }
    Ok(results)
}

/// The events of a run, as each source holds them.
enum NexmarkInput {
    /// The batches of each table the query reads (in `reads` order), replayed from memory.
    Memory(Vec<Vec<RecordBatch>>),
    /// The generator; DataFusion reads the same batches from memory.
    Generator(Vec<Vec<RecordBatch>>),
    /// The directory of `freshet gen nexmark`'s Parquet files.
    Parquet(PathBuf),
}

struct NexmarkRun<'a> {
    query: &'a NexmarkQuery,
    events: u64,
    streams: usize,
    input: &'a NexmarkInput,
}

impl NexmarkRun<'_> {
    /// The query, or for the check of a query with ties, its tie-free columns.
    fn sql(&self, check: bool, batch: bool) -> String {
        let sql = if batch {
            self.query.batch_sql
        } else {
            self.query.sql
        };
        match self.query.tie_free_columns {
            Some(columns) if check => format!("SELECT {} FROM ({sql})", columns.join(", ")),
            _ => sql.to_string(),
        }
    }

    async fn run_freshet(&self, check: bool) -> Result<(Duration, Fingerprint)> {
        let start = Instant::now();
        let ctx = StreamingContext::with_partitions(self.streams);
        for (index, table) in self.query.reads.iter().enumerate() {
            let options = StreamOptions {
                event_time: Some("date_time".to_string()),
                out_of_orderness: WATERMARK,
                ..StreamOptions::default()
            };
            match self.input {
                NexmarkInput::Memory(batches) => ctx.register_batches(
                    table.name(),
                    table.schema(),
                    batches[index].clone(),
                    options,
                )?,
                NexmarkInput::Generator(_) => ctx.register_generator(
                    table.name(),
                    GeneratorSpec::nexmark(*table, Some(self.events)),
                    options,
                )?,
                NexmarkInput::Parquet(dir) => {
                    let path = dir.join(format!("{table}.parquet"));
                    ctx.register_files(table.name(), &path.to_string_lossy(), None, options)
                        .await?
                }
            }
        }
        if self.query.side_input {
            let side_input = nexmark_side_input();
            let options = StreamOptions {
                bounded: Some(true),
                ..StreamOptions::default()
            };
            ctx.register_batches("side_input", side_input.schema(), vec![side_input], options)?;
        }
        let query = ctx.sql(&self.sql(check, false)).await?;
        let print = drain_all(query.execute_partitions()?, check).await?;
        Ok((start.elapsed(), print))
    }

    async fn run_datafusion(&self, check: bool) -> Result<(Duration, Fingerprint)> {
        let start = Instant::now();
        let ctx = SessionContext::new_with_config(
            SessionConfig::new().with_target_partitions(self.streams),
        );
        for function in scalar_functions() {
            ctx.register_udf(function.as_ref().clone());
        }
        for (index, table) in self.query.reads.iter().enumerate() {
            match self.input {
                NexmarkInput::Memory(batches) | NexmarkInput::Generator(batches) => {
                    let split = round_robin(&batches[index], self.streams);
                    let memory = MemTable::try_new(table.schema(), split)?;
                    ctx.register_table(table.name(), Arc::new(memory))?;
                }
                NexmarkInput::Parquet(dir) => {
                    let path = dir.join(format!("{table}.parquet"));
                    ctx.register_parquet(
                        table.name(),
                        path.to_string_lossy(),
                        ParquetReadOptions::default(),
                    )
                    .await?
                }
            }
        }
        if self.query.side_input {
            let side_input = nexmark_side_input();
            let memory = MemTable::try_new(side_input.schema(), vec![vec![side_input]])?;
            ctx.register_table("side_input", Arc::new(memory))?;
        }
        let frame = ctx.sql(&self.sql(check, true)).await?;
        let task_ctx = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let streams = (0..plan.output_partitioning().partition_count())
            .map(|partition| plan.execute(partition, Arc::clone(&task_ctx)))
            .collect::<Result<Vec<_>>>()?;
        let print = drain_all(streams, check).await?;
        Ok((start.elapsed(), print))
    }
}

/// The directory of the Parquet files of `events` events in `dir`, written if missing (each
/// file under a temporary name first, so that an interrupted run leaves no short file).
pub fn nexmark_files(dir: &Path, events: u64) -> Result<PathBuf> {
    let files = dir.join(format!("nexmark_{events}"));
    std::fs::create_dir_all(&files)
        .map_err(|e| DataFusionError::Execution(format!("{}: {e}", files.display())))?;
    for table in NexmarkTable::ALL {
        let path = files.join(format!("{table}.parquet"));
        if path.exists() {
            continue;
        }
        let partial = files.join(format!(".{table}.parquet.partial"));
        write_generated(
            &GeneratorSpec::nexmark(table, Some(events)),
            &SinkSpec::Parquet(partial.clone()),
        )?;
        std::fs::rename(&partial, &path)
            .map_err(|e| DataFusionError::Execution(format!("{}: {e}", path.display())))?;
    }
    Ok(files)
}
