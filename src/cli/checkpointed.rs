//! `freshet query --checkpoint-dir DIR`: a query run that checkpoints its state and commits
//! its file output with each checkpoint, and resumes from the latest checkpoint when run
//! again (see `freshet_engine::checkpoint` and `freshet_engine::sink::exactly_once`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use datafusion::common::{Result, plan_err};
use freshet_engine::checkpoint::{
    CheckpointStore, Checkpointing, Fingerprint, barrier_probe, checksum,
};
use freshet_engine::sink::SinkSpec;
use freshet_engine::sink::exactly_once::{CheckpointInterval, CheckpointedRun, PartOutput};
use freshet_planner::StreamingQuery;
use tokio::sync::watch;

use super::QueryArgs;
use super::commands::{INTERRUPTED, interrupt};

/// Runs `query` (planned from `args`) into `sink` with checkpoints in `args.checkpoint_dir`.
pub(super) async fn run_checkpointed(
    query: StreamingQuery,
    sink: SinkSpec,
    args: &QueryArgs,
    sql: &str,
) -> Result<ExitCode> {
    let Some(dir) = &args.checkpoint_dir else {
        return plan_err!("no checkpoint directory");
    };
    if args.late_output.is_some() {
        return plan_err!("--late-output cannot be used with --checkpoint-dir yet");
    }
    let interval: CheckpointInterval = args.checkpoint_interval.parse()?;
    if args.checkpoints_kept == 0 {
        return plan_err!(
            "--checkpoints-kept 0: at least the latest checkpoint is kept (1 or more)"
        );
    }
    let started = Instant::now();
    let store = CheckpointStore::open(dir, args.checkpoints_kept)?;
    let (restored, warnings) = store.latest()?;
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    let fingerprint = Fingerprint {
        query: checksum(sql.trim().as_bytes()),
        options: checksum(format!("{:?}", args.plan.session.without_partitions()).as_bytes()),
        streams: query.output_partitions(),
    };
    if let Some(manifest) = &restored {
        if let Some(difference) = manifest.fingerprint.difference(&fingerprint) {
            return plan_err!(
                "cannot resume the checkpoint in {}: {difference}; use another --checkpoint-dir to start afresh",
                dir.display()
            );
        }
        if manifest.finished {
            eprintln!(
                "the query had finished at checkpoint {} in {}: nothing to resume",
                manifest.epoch,
                dir.display()
            );
            PartOutput::of(&sink, || plan_err!("no direct output"))
                .and_then(|o| o.recover(Some(manifest)))
                .ok();
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!(
            "resuming from checkpoint {} in {}",
            manifest.epoch,
            dir.display()
        );
    }
    let probe = barrier_probe(query.plan())?;
    let schema = query.schema();
    let output = PartOutput::of(&sink, || sink.open(&schema, Box::new(std::io::stdout())))?;
    output.recover(restored.as_ref())?;
    if !output.is_exactly_once() {
        eprintln!(
            "note: this output is at-least-once (rows after the last checkpoint are written again on resume); a file output (parquet=PATH, csv=PATH, …) is committed exactly once"
        );
    }
    let checkpointing = Arc::new(Checkpointing::new(store, restored, query.plan()));
    let query = query.with_checkpointing(Arc::clone(&checkpointing));
    let (stop_sender, stop) = watch::channel(false);
    let stopper = tokio::spawn(async move {
        interrupt().await;
        eprintln!("\rstopping at the next checkpoint (again to quit now)");
        let _ = stop_sender.send(true);
        interrupt().await;
        std::process::exit(INTERRUPTED.into());
    });
    let records = {
        let query = query.clone();
        Box::new(move || query.records_read() as u64)
    };
    // Operators restore their state as their streams are made (the time counts from the
    // opening of the checkpoint directory, whose files were read back and checked).
    let streams = query.execute_partitions()?;
    if let Some(manifest) = checkpointing.restored() {
        let bytes: u64 = manifest.states.iter().map(|s| s.bytes).sum();
        eprintln!(
            "restored {} state files ({bytes} bytes) in {:.2}s",
            manifest.states.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let run = CheckpointedRun {
        streams,
        probe,
        checkpointing: Arc::clone(&checkpointing),
        fingerprint,
        interval,
        records_read: records,
        stop,
    }
    .run(output, schema)
    .await;
    stopper.abort();
    let run = run?;
    eprintln!(
        "\r{} rows out; {} records read in {:.2}s; {} checkpoints (largest {} bytes of state, slowest {:.0} ms from barrier to commit){}",
        run.sink.rows,
        query.records_read(),
        started.elapsed().as_secs_f64(),
        run.checkpoints,
        run.largest_bytes,
        run.slowest.as_secs_f64() * 1e3,
        if run.stopped {
            " (stopped at the last one: run again to resume)"
        } else {
            ""
        }
    );
    Ok(if run.stopped {
        ExitCode::from(INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}
