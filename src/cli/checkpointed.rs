//! `freshet query --checkpoint-dir DIR`: the command line over
//! [`StreamingQuery::run_checkpointed`], with Ctrl-C stopping at the next checkpoint.

use std::process::ExitCode;
use std::time::Instant;

use datafusion::common::{Result, plan_err};
use freshet_engine::sink::SinkSpec;
use freshet_planner::{CheckpointConfig, StreamingQuery};
use tokio::sync::watch;

use super::QueryArgs;
use super::commands::{INTERRUPTED, interrupt};

/// Runs `query` (planned from `args`, whose text is `sql`) into `sink` with checkpoints in
/// `args.checkpoint_dir`.
pub(super) async fn run_checkpointed(
    query: StreamingQuery,
    sink: SinkSpec,
    args: &QueryArgs,
    sql: &str,
) -> Result<ExitCode> {
    let Some(dir) = &args.checkpoint_dir else {
        return plan_err!("no checkpoint directory");
    };
    if args.checkpoints_kept == 0 {
        return plan_err!(
            "--checkpoints-kept 0: at least the latest checkpoint is kept (1 or more)"
        );
    }
    let config = CheckpointConfig {
        dir: dir.clone(),
        interval: args.checkpoint_interval.parse()?,
        kept: args.checkpoints_kept,
        query_text: sql.to_string(),
        options_text: format!("{:?}", args.plan.session.without_partitions()),
        late_output: args.late_output.as_deref().map(str::parse).transpose()?,
    };
    let (stop_sender, stop) = watch::channel(false);
    let stopper = tokio::spawn(async move {
        interrupt().await;
        eprintln!("\rstopping at the next checkpoint (again to quit now)");
        let _ = stop_sender.send(true);
        interrupt().await;
        std::process::exit(INTERRUPTED.into());
    });
    let started = Instant::now();
    let report = query
        .run_checkpointed(&sink, &config, stop, &|note| eprintln!("{note}"))
        .await;
    stopper.abort();
    let report = report?;
    if report.already_finished {
        return Ok(ExitCode::SUCCESS);
    }
    if report.resumed_from.is_some() {
        eprintln!(
            "restored {} bytes of state in {:.2}s",
            report.restored_bytes,
            report.restore_time.as_secs_f64()
        );
    }
    let run = report.summary;
    eprintln!(
        "\r{} rows out; {} records read in {:.2}s; {} late records dropped{}; {} checkpoints (largest {} bytes of state, slowest {:.0} ms from barrier to commit, longest alignment {:.0} ms){}",
        run.sink.rows,
        query.records_read(),
        started.elapsed().as_secs_f64(),
        // Counted since the query started: a resumed run starts from its checkpoint's.
        query.metric_total("late_records_dropped"),
        match run.late_written {
            Some(written) => format!(" ({written} written to the late output)"),
            None => String::new(),
        },
        run.checkpoints,
        run.largest_bytes,
        run.slowest.as_secs_f64() * 1e3,
        run.slowest_alignment.as_secs_f64() * 1e3,
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
