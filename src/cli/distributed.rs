//! `freshet worker` and `freshet query --workers`: a query across workers (see
//! [`crate::distributed`]).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use datafusion::common::{DataFusionError, Result, plan_err};
use freshet_engine::machine_cores;
use freshet_engine::sink::SinkSpec;
use tokio::net::TcpListener;

use super::commands::{
    drain_in_task, first_keyword, interrupt, refuse_writing_onto_an_input, script, split_statements,
};
use super::{PlanArgs, QueryArgs, WorkerArgs};
use crate::distributed::{
    DistributedRun, QuerySpec, WorkerUrls, execute_distributed, explain_distributed, serve_worker,
};

/// Serves queries' stages until SIGINT or SIGTERM.
pub(super) async fn worker(args: WorkerArgs) -> Result<ExitCode> {
    let listener = TcpListener::bind(&args.listen).await.map_err(|e| {
        DataFusionError::Plan(format!(
            "--listen {}: cannot listen there: {e}",
            args.listen
        ))
    })?;
    eprintln!("freshet worker listening on {}", listener.local_addr()?);
    serve_worker(listener, interrupt()).await?;
    Ok(ExitCode::SUCCESS)
}

/// The query's spec across `urls`: `--partitions` streams in all, by default every worker's
/// cores (this machine's count).
fn spec_on(plan: &PlanArgs, urls: &WorkerUrls) -> Result<QuerySpec> {
    let session = &plan.session;
    let partitions = session
        .partitions
        .unwrap_or_else(|| urls.len() * machine_cores());
    QuerySpec::new(script(plan)?, session, partitions, urls.len())
}

/// Prints the plan of the query of `plan` as one process runs it on all the streams, then
/// the stages it runs in across `workers`.
pub(super) async fn explain_on_workers(plan: &PlanArgs, workers: &str) -> Result<ExitCode> {
    let urls = WorkerUrls::parse(workers)?;
    let spec = Arc::new(spec_on(plan, &urls)?);
    let query = spec.plan().await?;
    let stages = explain_distributed(Arc::clone(&spec), urls).await?;
    println!(
        "{}\nAcross {} workers, {} streams each:\n{stages}",
        query.explain(),
        spec.workers,
        spec.streams_per_worker()
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs the query of `args` on the workers `workers` and writes its results here.
pub(super) async fn query_on_workers(args: &QueryArgs, workers: &str) -> Result<ExitCode> {
    if let Some(explained) = explained_query(&args.plan)? {
        return explain_on_workers(&explained, workers).await;
    }
    if args.checkpoint_dir.is_some() || args.late_output.is_some() {
        return plan_err!(
            "--workers does not take --checkpoint-dir or --late-output yet: run the query in \
             one process for those"
        );
    }
    let sink: SinkSpec = args.output.parse()?;
    refuse_writing_onto_an_input(&sink, &args.plan.session.tables)?;
    let urls = WorkerUrls::parse(workers)?;
    let spec = spec_on(&args.plan, &urls)?;
    let partitions = spec.partitions;
    let started = Instant::now();
    let workers = urls.len();
    let DistributedRun { stream, report } = execute_distributed(Arc::new(spec), urls).await?;
    let writer = sink.open(&stream.schema(), Box::new(std::io::stdout()))?;
    let summary = drain_in_task(stream, writer).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let totals = report.totals().await?;
    eprintln!(
        "\r{} rows out; {} records read in {elapsed:.2}s ({:.0} records/s) on {workers} workers \
         ({partitions} streams); {} late records dropped; {} bytes crossed the network",
        summary.rows,
        totals.records_read,
        totals.records_read as f64 / elapsed,
        totals.late_records_dropped,
        totals.wire_bytes,
    );
    Ok(ExitCode::SUCCESS)
}

/// For a query whose last statement is `EXPLAIN <query>`, the same arguments with the query
/// alone: across workers EXPLAIN shows the plan and its stages, as `freshet explain
/// --workers` does. `None` for any other statement.
fn explained_query(plan: &PlanArgs) -> Result<Option<PlanArgs>> {
    let script = script(plan)?;
    let statements = split_statements(&script);
    let Some(last) = statements
        .last()
        .filter(|last| first_keyword(last) == "EXPLAIN")
    else {
        return Ok(None);
    };
    // The same characters `first_keyword` skips: the statement then begins with the keyword.
    let query = last.trim_start_matches(|c: char| c.is_whitespace() || c == '(')["EXPLAIN".len()..]
        .trim_start();
    let option = first_keyword(query);
    if matches!(option.as_str(), "ANALYZE" | "VERBOSE" | "FORMAT") {
        return plan_err!(
            "EXPLAIN {option} does not run across workers yet: EXPLAIN <query> with --workers \
             (or freshet explain --workers) shows the plan and the stages it runs in"
        );
    }
    let mut statements: Vec<&str> = statements[..statements.len() - 1].to_vec();
    statements.push(query);
    Ok(Some(PlanArgs {
        sql: Some(statements.join(";\n")),
        file: None,
        session: plan.session.clone(),
    }))
}
