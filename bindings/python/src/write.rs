//! `Query.write`: a query run into one of the command line's outputs, optionally with
//! checkpoints, as `freshet query -o … [--late-output …] [--checkpoint-dir …]` runs it.

use std::path::PathBuf;
use std::time::Instant;

use datafusion::common::Result;
use freshet::cli::SessionArgs;
use freshet::sink::SinkSpec;
use freshet::{CheckpointConfig, StreamingContext, StreamingQuery};
use futures::{FutureExt, StreamExt};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::sync::watch;

use crate::errors::to_py;
use crate::runtime::wait_stopping;

/// Where a query came from: what a checkpointed run compares on resume, and what it plans
/// the query again with when it needs the hash strategy.
#[derive(Clone)]
pub struct Origin {
    pub ctx: StreamingContext,
    pub args: SessionArgs,
    pub sql: String,
}

/// How `write` is asked to run.
pub struct WriteOptions {
    pub output: String,
    pub late_output: Option<String>,
    pub checkpoint_dir: Option<PathBuf>,
    pub checkpoint_interval: String,
    pub checkpoints_kept: usize,
}

/// Runs `query` into `options.output`; returns what it did as a dict (rows, records,
/// seconds, late records; with checkpoints also their count and whether it stopped at one).
pub fn write<'py>(
    py: Python<'py>,
    query: &StreamingQuery,
    origin: &Origin,
    options: WriteOptions,
) -> PyResult<Bound<'py, PyDict>> {
    let sink: SinkSpec = options.output.parse().map_err(to_py)?;
    let summary = PyDict::new(py);
    let started = Instant::now();
    let late_sink: Option<SinkSpec> = options
        .late_output
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(to_py)?;
    if let Some(late_sink) = &late_sink {
        late_sink.refuse_overlap_with(&sink).map_err(to_py)?;
    }
    // The query that ran, whose metrics the summary reads.
    let ran = match &options.checkpoint_dir {
        None => {
            // A plan that judges lateness from partial states would lose the late records.
            let query = match &late_sink {
                Some(_) if query.defers_lateness().map_err(to_py)? => {
                    planned_again(py, origin, KEEP_LATE_RECORDS)?
                }
                _ => query.clone(),
            };
            let run = {
                let query = query.clone();
                async move { run_plain(query, sink, late_sink).await }
            };
            let stopping = query.clone();
            let (rows, late_written) =
                wait_stopping(py, run, move || stopping.stop())?.map_err(to_py)?;
            summary.set_item("rows", rows)?;
            summary.set_item("late_records_written", late_written)?;
            query.clone()
        }
        Some(dir) => {
            let config = CheckpointConfig {
                dir: dir.clone(),
                interval: options.checkpoint_interval.parse().map_err(to_py)?,
                kept: options.checkpoints_kept,
                query_text: origin.sql.clone(),
                options_text: format!("{:?}", origin.args.without_partitions()),
                late_output: late_sink,
            };
            let query = match origin.args.strategy {
                // Checkpoints cut replays in file order: keyed operators read it through
                // hashed exchanges, as the command line's default under checkpoints.
                Some(_) => query.clone(),
                None => planned_again(py, origin, "SET freshet.partitioning_strategy = 'hash'")?,
            }
            .for_checkpoints()
            .map_err(to_py)?;
            let (stop_sender, stop) = watch::channel(false);
            let run = {
                let query = query.clone();
                async move {
                    query
                        .run_checkpointed(&sink, &config, stop, &|note| eprintln!("{note}"))
                        .await
                }
            };
            let report = wait_stopping(py, run, move || {
                let _ = stop_sender.send(true);
            })?
            .map_err(to_py)?;
            summary.set_item("rows", report.summary.sink.rows)?;
            summary.set_item("already_finished", report.already_finished)?;
            summary.set_item("resumed_from", report.resumed_from)?;
            summary.set_item("checkpoints", report.summary.checkpoints)?;
            summary.set_item("stopped", report.summary.stopped)?;
            summary.set_item("largest_checkpoint_bytes", report.summary.largest_bytes)?;
            summary.set_item("late_records_written", report.summary.late_written)?;
            query
        }
    };
    summary.set_item("records", ran.records_read())?;
    summary.set_item(
        "late_records_dropped",
        ran.metric_total("late_records_dropped"),
    )?;
    summary.set_item("seconds", started.elapsed().as_secs_f64())?;
    Ok(summary)
}

/// The setting that keeps every late record whole for the late-record output.
pub const KEEP_LATE_RECORDS: &str = "SET freshet.keep_late_records = true";

/// The query planned again on a copy of its session after `setting`.
pub fn planned_again(py: Python<'_>, origin: &Origin, setting: &str) -> PyResult<StreamingQuery> {
    let ctx = origin.ctx.forked();
    let sql = origin.sql.clone();
    let setting = setting.to_string();
    crate::runtime::wait(py, async move {
        ctx.session().sql(&setting).await?;
        ctx.sql(&sql).await
    })?
    .map_err(to_py)
}

/// The query's results into `sink` and its late records into `late_sink`: rows written, and
/// late records written if asked for. The late records are written as they come; those
/// still queued when the results end (an operator drops them before it finishes) follow.
async fn run_plain(
    query: StreamingQuery,
    sink: SinkSpec,
    late_sink: Option<SinkSpec>,
) -> Result<(u64, Option<u64>)> {
    let mut late = match late_sink {
        Some(late_sink) => {
            let records = query.late_records();
            let writer = late_sink.open(&records.schema(), Box::new(std::io::stderr()))?;
            Some((records, writer, 0u64))
        }
        None => None,
    };
    let mut writer = sink.open(&query.schema(), Box::new(std::io::stdout()))?;
    let mut results = query.execute_merged()?;
    let mut rows = 0u64;
    loop {
        let late_batch = async {
            match late.as_mut() {
                Some((records, _, _)) => records.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            batch = results.next() => match batch {
                Some(batch) => {
                    let batch = batch?;
                    rows += batch.num_rows() as u64;
                    if batch.num_rows() > 0 {
                        writer.write(&batch)?;
                    }
                }
                None => break,
            },
            Some(batch) = late_batch => {
                if let Some((_, late_writer, written)) = late.as_mut() {
                    let batch = batch?;
                    *written += batch.num_rows() as u64;
                    late_writer.write(&batch)?;
                }
            }
        }
    }
    writer.finish()?;
    let late_written = match late {
        Some((mut records, mut late_writer, mut written)) => {
            while let Some(Some(batch)) = records.next().now_or_never() {
                let batch = batch?;
                written += batch.num_rows() as u64;
                late_writer.write(&batch)?;
            }
            late_writer.finish()?;
            Some(written)
        }
        None => None,
    };
    Ok((rows, late_written))
}
