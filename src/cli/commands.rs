//! What each subcommand does.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::common::config::ExtensionOptions;
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::physical_plan::{ExecutionPlanProperties, SendableRecordBatchStream};
use freshet_bench::chart::{scaling_svg, throughput_svg};
use freshet_bench::latency::{LATENCY_SCENARIOS, latency_table, run_latency};
use freshet_bench::nexmark::{NEXMARK_QUERIES, NexmarkQuery, nexmark_query};
use freshet_bench::nexmark_runner::run_nexmark_query;
use freshet_bench::runner::ScenarioResult;
use freshet_bench::scaling::{ScalingSource, run_scaling, scaling_cases, scaling_table};
use freshet_bench::{
    BenchConfig, BenchSource, report, run_scenario, scenario, scenarios, variants,
};
use freshet_engine::options::parse_count;
use freshet_engine::sink::{BatchWriter, SinkSpec, SinkSummary, drain, write_generated};
use freshet_engine::{
    GeneratorKind, GeneratorSpec, MAX_PARTITIONS, NexmarkTable, nexmark_side_input,
};
use freshet_planner::{FreshetOptions, StreamingContext, StreamingQuery};

use super::tables::{TableSource, TableSpec, register_tables};
use super::{BenchArgs, Command, FuzzArgs, GenArgs, PlanArgs, QueryArgs, SessionArgs};

/// Runs one subcommand; the exit code of a run that ends without an error.
pub async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Query(args) => query(args).await,
        Command::Explain(args) => match &args.workers {
            Some(workers) => super::distributed::explain_on_workers(&args.plan, workers).await,
            None => {
                let query = plan(&args.plan).await?;
                writeln!(std::io::stdout(), "{}", query.explain())?;
                Ok(ExitCode::SUCCESS)
            }
        },
        Command::Gen(args) => generate(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => bench(args).await.map(|()| ExitCode::SUCCESS),
        Command::Fuzz(args) => fuzz(args).await.map(|()| ExitCode::SUCCESS),
        Command::Shell(args) => super::shell::shell(args).await.map(|()| ExitCode::SUCCESS),
        Command::Worker(args) => super::distributed::worker(args).await,
    }
}

/// The exit code of a query stopped by SIGINT or SIGTERM (128 + SIGINT, as shells use).
pub(super) const INTERRUPTED: u8 = 130;

/// Waits for SIGINT (Ctrl-C) or SIGTERM.
pub(super) async fn interrupt() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut terminate) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs the fuzzer; prints each failure's reproduction as it is found and a summary line.
/// Failures make the command fail.
async fn fuzz(args: FuzzArgs) -> Result<()> {
    let summary = crate::testing::fuzz::fuzz(args.seed, args.cases, args.shrink, |failure| {
        println!("{failure}\n")
    })
    .await;
    println!("{summary}");
    if summary.failures.is_empty() {
        Ok(())
    } else {
        plan_err!(
            "{} of {} fuzz cases failed (reproductions above)",
            summary.failures.len(),
            summary.cases
        )
    }
}

/// The command line runs one query: a statement that only changes the session (CREATE,
/// DROP, SET, …) would have no effect beyond it, so it is refused rather than run for nothing.
/// Anything else goes to the parser, which reports a misspelt query as a syntax error.
fn check_is_a_query(sql: &str) -> Result<()> {
    let first = first_keyword(sql);
    match first.as_str() {
        "" => plan_err!("no SQL given: pass a query, e.g. \"SELECT * FROM market_data\""),
        "SET" | "RESET" => plan_err!(
            "the command line runs one query, so a last statement {first} would have no effect: pass settings with --set KEY=VALUE, or put the SET before the query in -f FILE"
        ),
        "CREATE" | "DROP" | "ALTER" | "INSERT" | "UPDATE" | "DELETE" | "COPY" | "TRUNCATE"
        | "USE" | "BEGIN" | "COMMIT" | "ROLLBACK" => plan_err!(
            "the command line runs one query (SELECT …, WITH …, VALUES …), so a last statement {first} would have no effect: register streams with --table, put session statements before the query in -f FILE, or use freshet shell"
        ),
        _ => Ok(()),
    }
}

/// Whether `statement` is one that answers with rows (a query, EXPLAIN, SHOW …) rather
/// than changing the session.
fn returns_rows(statement: &str) -> bool {
    matches!(
        first_keyword(statement).as_str(),
        "SELECT" | "WITH" | "VALUES" | "EXPLAIN" | "SHOW" | "DESCRIBE" | "DESC" | "TABLE" | "FROM"
    )
}

/// The first word of `statement` in upper case (`SELECT`, `SET`, …), past any opening
/// parentheses; empty when there is none.
pub(super) fn first_keyword(statement: &str) -> String {
    statement
        .trim_start_matches(|c: char| c.is_whitespace() || c == '(')
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("")
        .to_ascii_uppercase()
}

/// The statements of `script` (split at `;` outside quotes and comments), each from its
/// first word (leading comments left out), without empty or comment-only ones.
pub(super) fn split_statements(script: &str) -> Vec<&str> {
    let mut statements = Vec::new();
    let mut chars = script.char_indices().peekable();
    // Where the current statement's SQL starts, once it has any.
    let mut start = None;
    while let Some((at, c)) = chars.next() {
        if start.is_none() && !c.is_whitespace() && c != ';' && !starts_comment(c, chars.peek()) {
            start = Some(at);
        }
        match c {
            '\'' | '"' => {
                for (_, d) in chars.by_ref() {
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek().is_some_and(|(_, d)| *d == '-') => {
                for (_, d) in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek().is_some_and(|(_, d)| *d == '*') => {
                let mut previous = ' ';
                for (_, d) in chars.by_ref() {
                    if previous == '*' && d == '/' {
                        break;
                    }
                    previous = d;
                }
            }
            ';' => {
                if let Some(start) = start.take() {
                    statements.push(script[start..at].trim());
                }
            }
            _ => {}
        }
    }
    if let Some(start) = start {
        statements.push(script[start..].trim());
    }
    statements
}

fn starts_comment(c: char, next: Option<&(usize, char)>) -> bool {
    matches!((c, next), ('-', Some((_, '-'))) | ('/', Some((_, '*'))))
}

/// The SQL given on the command line, from `--file` or as the argument.
pub(crate) fn script(args: &PlanArgs) -> Result<String> {
    match (&args.sql, &args.file) {
        (Some(sql), _) => Ok(sql.clone()),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut sql = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut sql)?;
            Ok(sql)
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .or_else(|e| plan_err!("cannot read the SQL file {}: {e}", path.display())),
        (None, None) => plan_err!("no SQL given: pass a query, or --file PATH"),
    }
}

pub(crate) async fn plan(args: &PlanArgs) -> Result<StreamingQuery> {
    let script = script(args)?;
    let statements = split_statements(&script);
    let Some((query_sql, session_statements)) = statements.split_last() else {
        return plan_err!("no SQL given: pass a query, e.g. \"SELECT * FROM market_data\"");
    };
    check_is_a_query(query_sql)?;
    if let Some((position, _)) = session_statements
        .iter()
        .enumerate()
        .find(|(_, statement)| returns_rows(statement))
    {
        return plan_err!(
            "the command line runs one query, the last statement; statement {} of {} is a query too, whose rows would go nowhere: run one query at a time, or use freshet shell",
            position + 1,
            statements.len()
        );
    }
    let ctx = session(&args.session).await?;
    for statement in session_statements {
        session_statement(&ctx, statement).await?;
    }
    ctx.sql(query_sql).await
}

/// A session with the command line's stream count, strategy, settings and streams.
pub async fn session(args: &SessionArgs) -> Result<StreamingContext> {
    let ctx = match args.partitions {
        Some(0) => return plan_err!("--partitions must be at least 1"),
        Some(partitions) if partitions > MAX_PARTITIONS => {
            return plan_err!(
                "--partitions {partitions}: expected 1 to {MAX_PARTITIONS} streams (one per core is the most that helps; every exchange keeps a channel per pair of streams, so memory grows with the square)"
            );
        }
        Some(partitions) => StreamingContext::with_partitions(partitions),
        None => StreamingContext::new(),
    };
    if let Some(strategy) = &args.strategy {
        if !["hash", "sticky", "round_robin", "fan_in", "two_phase"].contains(&strategy.as_str()) {
            return plan_err!(
                "--strategy {strategy}: expected hash, sticky, round_robin, fan_in or two_phase"
            );
        }
        ctx.session()
            .sql(&format!("SET freshet.partitioning_strategy = '{strategy}'"))
            .await?;
    }
    apply_settings(&ctx, &args.settings).await?;
    register_tables(
        &ctx,
        &args.tables,
        args.event_time.as_deref(),
        args.watermark.as_deref(),
    )
    .await?;
    Ok(ctx)
}

/// Sets each `KEY=VALUE` of `settings` (a key without a dot is a `freshet.` setting).
pub async fn apply_settings(ctx: &StreamingContext, settings: &[String]) -> Result<()> {
    for setting in settings {
        let Some((key, value)) = setting.split_once('=') else {
            return plan_err!("--set {setting}: expected KEY=VALUE");
        };
        let key = key.trim();
        let key = if key.contains('.') {
            key.to_string()
        } else {
            format!("freshet.{key}")
        };
        let value = value.trim().replace('\'', "''");
        session_statement(ctx, &format!("SET {key} = '{value}'")).await?;
    }
    Ok(())
}

/// Runs a statement that changes the session (SET, CREATE …); a SET of a key the session
/// does not know names the keys it may have meant.
pub async fn session_statement(ctx: &StreamingContext, statement: &str) -> Result<()> {
    match ctx.session().sql(statement).await {
        Ok(_) => Ok(()),
        Err(error) if error.to_string().contains("not found on") => {
            let key = statement
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .trim_end_matches(['=', ';'])
                .to_string();
            plan_err!("{}", unknown_setting(ctx, &key))
        }
        Err(error) => Err(error),
    }
}

/// The message for a SET of `key`, which the session does not know: the keys of its section
/// whose names are close, or all of them.
fn unknown_setting(ctx: &StreamingContext, key: &str) -> String {
    let key = key.to_ascii_lowercase();
    let section = key.rsplit_once('.').map_or("", |(section, _)| section);
    let name = key.rsplit_once('.').map_or(key.as_str(), |(_, name)| name);
    let state = ctx.session().state();
    let options = state.config().options();
    let freshet = options
        .extensions
        .get::<FreshetOptions>()
        .map(|o| o.entries())
        .unwrap_or_default()
        .into_iter()
        .map(|entry| format!("freshet.{}", entry.key));
    let keys: Vec<String> = options
        .entries()
        .into_iter()
        .map(|entry| entry.key)
        .chain(freshet)
        .filter(|candidate| candidate.rsplit_once('.').map(|(s, _)| s) == Some(section))
        .collect();
    let close: Vec<&String> = keys
        .iter()
        .filter(|candidate| {
            let other = candidate.rsplit_once('.').map_or("", |(_, n)| n);
            other.contains(name) || name.contains(other) || shared_prefix(other, name) >= 5
        })
        .collect();
    match (close.as_slice(), keys.len()) {
        ([], 0) => format!("unknown setting '{key}': no settings start with '{section}.'"),
        ([], _) => format!(
            "unknown setting '{key}'; the settings of '{section}' are {}",
            keys.join(", ")
        ),
        (close, _) => format!(
            "unknown setting '{key}'; did you mean {}?",
            close
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

/// The length of the common start of `a` and `b`.
fn shared_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// Refuses an output file that is one of the input files, or inside an input directory: the
/// run would read what it writes (or truncate its input before reading it).
pub(super) fn refuse_writing_onto_an_input(sink: &SinkSpec, tables: &[String]) -> Result<()> {
    let Some(output) = sink.path() else {
        return Ok(());
    };
    let absolute = |path: &Path| -> Option<std::path::PathBuf> {
        match path.canonicalize() {
            Ok(path) => Some(path),
            // Not written yet: its directory's canonical path and its name.
            Err(_) => Some(
                path.parent()
                    .filter(|parent| !parent.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .canonicalize()
                    .ok()?
                    .join(path.file_name()?),
            ),
        }
    };
    let Some(output) = absolute(output) else {
        return Ok(());
    };
    for table in tables {
        let spec: TableSpec = table.parse()?;
        if let TableSource::Files(location) = &spec.source
            && let Some(input) = absolute(Path::new(location))
            && output.starts_with(&input)
        {
            return plan_err!(
                "the output {} is the input of stream '{}' (or inside it): write the results elsewhere",
                output.display(),
                spec.name
            );
        }
    }
    Ok(())
}

/// Runs the query into its sink and prints the summary (exit code 130 when interrupted).
async fn query(mut args: QueryArgs) -> Result<ExitCode> {
    if let Some(workers) = &args.workers {
        return super::distributed::query_on_workers(&args, workers).await;
    }
    let sink: SinkSpec = args.output.parse()?;
    let late_sink: Option<SinkSpec> = args.late_output.as_deref().map(str::parse).transpose()?;
    for output in [Some(&sink), late_sink.as_ref()].into_iter().flatten() {
        refuse_writing_onto_an_input(output, &args.plan.session.tables)?;
    }
    if let Some(late_sink) = &late_sink {
        late_sink.refuse_overlap_with(&sink)?;
        // Plans that judge lateness from partial states would lose the records.
        args.plan
            .session
            .settings
            .push("keep_late_records=true".to_string());
    }
    if args.checkpoint_dir.is_some() {
        // Checkpoints cut replays in file order: keyed operators read it through hashed
        // exchanges.
        if args.plan.session.strategy.is_none() {
            args.plan.session.strategy = Some("hash".to_string());
        }
        let sql = match (&args.plan.sql, &args.plan.file) {
            (Some(sql), _) => sql.clone(),
            (None, Some(path)) if path.as_os_str() != "-" => {
                std::fs::read_to_string(path).unwrap_or_default()
            }
            _ => return plan_err!("--checkpoint-dir needs the query as text or a file, not stdin"),
        };
        // The plan a checkpointed run runs, whose metrics the summary reads.
        let query = plan(&args.plan).await?.for_checkpoints()?;
        return super::checkpointed::run_checkpointed(query, sink, &args, &sql).await;
    }
    let query = plan(&args.plan).await?;
    let row_budget_asked = args.output != "table";
    let run = run_query(query, sink, row_budget_asked, late_sink).await?;
    eprintln!("\r{run}");
    Ok(if run.interrupted {
        ExitCode::from(INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// What a query run did.
pub(super) struct RunSummary {
    pub rows: u64,
    pub records: usize,
    pub elapsed: Duration,
    /// Records the window aggregations and window functions dropped as late.
    pub late_dropped: usize,
    /// Records they dropped for having no event time.
    pub null_time_dropped: usize,
    /// Late records written to the late output, if one was asked for.
    pub late_written: Option<u64>,
    /// SIGINT or SIGTERM stopped it.
    pub interrupted: bool,
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = self.elapsed.as_secs_f64();
        write!(
            f,
            "{} rows out; {} records read in {seconds:.2}s ({:.0} records/s); {} late records dropped",
            self.rows,
            self.records,
            self.records as f64 / seconds,
            self.late_dropped
        )?;
        if let Some(written) = self.late_written {
            write!(f, " ({written} written to the late output)")?;
        }
        if self.null_time_dropped > 0 {
            write!(
                f,
                ", {} records without an event time dropped",
                self.null_time_dropped
            )?;
        }
        Ok(())
    }
}

/// Runs `query` into `sink` (and its late records into `late_sink`). SIGINT or SIGTERM stops
/// its streams as if their data had ended, so that operators flush and the sink closes its
/// file properly; a second signal exits at once (code 130). On an endless stream the terminal
/// table shows every row as it comes, unless `row_budget_asked`.
pub(super) async fn run_query(
    query: StreamingQuery,
    mut sink: SinkSpec,
    row_budget_asked: bool,
    late_sink: Option<SinkSpec>,
) -> Result<RunSummary> {
    if query.plan().boundedness().is_unbounded()
        && !row_budget_asked
        && matches!(sink, SinkSpec::Table { .. })
    {
        sink = SinkSpec::Table {
            max_rows: usize::MAX,
        };
    }
    let writer = sink.open(&query.schema(), Box::new(std::io::stdout()))?;
    let late = match late_sink {
        Some(late_sink) => {
            let records = query.late_records();
            let writer = late_sink.open(&records.schema(), Box::new(std::io::stderr()))?;
            Some(tokio::spawn(drain(records, writer)))
        }
        None => None,
    };
    // A progress line, where it cannot mix with the rows.
    let show_progress = std::io::stdout().is_terminal() && !matches!(sink, SinkSpec::Table { .. });
    let started = Instant::now();
    let progress = show_progress.then(|| {
        let query = query.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let records = query.records_read();
                eprint!(
                    "\r{records} records read, {:.0} records/s   ",
                    records as f64 / started.elapsed().as_secs_f64()
                );
            }
        })
    });
    let interrupted = Arc::new(AtomicBool::new(false));
    let stopper = {
        let query = query.clone();
        let interrupted = Arc::clone(&interrupted);
        tokio::spawn(async move {
            interrupt().await;
            interrupted.store(true, Ordering::Relaxed);
            eprintln!(
                "\rstopping: flushing open windows and closing the output (again to quit now)"
            );
            query.stop();
            interrupt().await;
            std::process::exit(INTERRUPTED.into());
        })
    };
    let summary = drain_output(&query, writer).await;
    stopper.abort();
    if let Some(progress) = progress {
        progress.abort();
    }
    let summary = summary?;
    let records = query.records_read();
    let late_dropped = query.metric_total("late_records_dropped");
    let null_time_dropped = query.metric_total("null_event_time_dropped");
    // The late-record stream ends when the last operator holding its sender is gone.
    drop(query);
    let late_written = match late {
        Some(task) => match task.await {
            Ok(written) => Some(written?.rows),
            Err(e) => return plan_err!("writing late records failed: {e}"),
        },
        None => None,
    };
    Ok(RunSummary {
        rows: summary.rows,
        records,
        elapsed: started.elapsed(),
        late_dropped,
        null_time_dropped,
        late_written,
        interrupted: interrupted.load(Ordering::Relaxed),
    })
}

/// Drains the query's output into `writer` in a runtime task: each batch of merged output
/// partitions then wakes a task on a worker, not a parked thread of the command's (a futex
/// wake and a preemption of a busy core per batch).
async fn drain_output(query: &StreamingQuery, writer: Box<dyn BatchWriter>) -> Result<SinkSummary> {
    drain_in_task(query.execute_merged()?, writer).await
}

/// Drains `stream` into `writer` in a runtime task (see [`drain_output`]).
pub(super) async fn drain_in_task(
    stream: SendableRecordBatchStream,
    writer: Box<dyn BatchWriter>,
) -> Result<SinkSummary> {
    match tokio::spawn(drain(stream, writer)).await {
        Ok(summary) => summary,
        Err(e) => plan_err!("writing the results failed: {e}"),
    }
}

fn generate(args: GenArgs) -> Result<()> {
    if args.kind == "nexmark" {
        return generate_nexmark(&args);
    }
    let kind: GeneratorKind = args.kind.parse()?;
    let Some(records) = &args.records else {
        return plan_err!(
            "gen {}: give the number of records with --records",
            args.kind
        );
    };
    if args.events.is_some() {
        return plan_err!("gen {}: --events is nexmark's; give --records", args.kind);
    }
    let mut spec = GeneratorSpec::new(kind, Some(parse_count("records", records)? as u64));
    set_generator_params(&mut spec, &args.params)?;
    let sink = match output_kind(&args.out) {
        Some("parquet") => SinkSpec::Parquet(args.out.clone()),
        Some("csv") => SinkSpec::Csv(Some(args.out.clone())),
        Some("arrow" | "ipc" | "feather") => SinkSpec::Arrow(args.out.clone()),
        Some("jsonl" | "json") => SinkSpec::JsonLines(Some(args.out.clone())),
        _ => {
            return plan_err!(
                "--out {}: name the file .parquet, .csv, .arrow or .jsonl",
                args.out.display()
            );
        }
    };
    let records = write_generated(&spec, &sink)?;
    eprintln!(
        "wrote {records} {} records to {}",
        args.kind,
        args.out.display()
    );
    Ok(())
}

/// `gen nexmark`: the three streams of one event sequence, a file each in `--out`.
fn generate_nexmark(args: &GenArgs) -> Result<()> {
    let Some(events) = &args.events else {
        return plan_err!("gen nexmark: give the number of events with --events");
    };
    if args.records.is_some() {
        return plan_err!("gen nexmark: give --events (the records of each stream follow from it)");
    }
    let events = parse_count("events", events)? as u64;
    let sink_for = |path: PathBuf| -> Result<SinkSpec> {
        Ok(match args.format.as_str() {
            "parquet" => SinkSpec::Parquet(path),
            "csv" => SinkSpec::Csv(Some(path)),
            "arrow" => SinkSpec::Arrow(path),
            "jsonl" => SinkSpec::JsonLines(Some(path)),
            other => {
                return plan_err!("--format {other}: expected parquet, csv, arrow or jsonl");
            }
        })
    };
    // The format is checked before anything is written.
    sink_for(args.out.clone())?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| DataFusionError::Execution(format!("--out {}: {e}", args.out.display())))?;
    for table in NexmarkTable::ALL {
        let mut spec = GeneratorSpec::nexmark(table, Some(events));
        set_generator_params(&mut spec, &args.params)?;
        let path = args.out.join(format!("{table}.{}", args.format));
        let sink = sink_for(path.clone())?;
        let records = write_generated(&spec, &sink)?;
        eprintln!("wrote {records} {table} records to {}", path.display());
    }
    // q13's bounded side input, as a CSV file with a header.
    let path = args.out.join("side_input.csv");
    let side_input = nexmark_side_input();
    let mut writer =
        SinkSpec::Csv(Some(path.clone())).open(&side_input.schema(), Box::new(std::io::sink()))?;
    writer.write(&side_input)?;
    writer.finish()?;
    eprintln!(
        "wrote {} side_input records to {}",
        side_input.num_rows(),
        path.display()
    );
    Ok(())
}

/// Applies `--set KEY=VALUE` parameters to `spec`.
fn set_generator_params(spec: &mut GeneratorSpec, params: &[String]) -> Result<()> {
    for pair in params {
        let Some((key, value)) = pair.split_once('=') else {
            return plan_err!("--set {pair}: expected KEY=VALUE");
        };
        let key = key.trim();
        if matches!(key, "records" | "events") || !spec.set(key, value.trim())? {
            let valid: Vec<_> = spec
                .keys()
                .into_iter()
                .filter(|k| !matches!(*k, "records" | "events"))
                .collect();
            return plan_err!(
                "unknown generator parameter '{key}'; valid parameters are {}",
                valid.join(", ")
            );
        }
    }
    Ok(())
}

async fn bench_scaling(args: &BenchArgs) -> Result<()> {
    let sizes = args
        .sizes
        .iter()
        .map(|size| parse_count("sizes", size).map(|n| n as u64))
        .collect::<Result<Vec<_>>>()?;
    if sizes.contains(&0) {
        return plan_err!("--sizes: each size must be at least 1 record");
    }
    let partitions = args.partitions.first().copied().unwrap_or(1);
    if partitions == 0 {
        return plan_err!("--partitions: stream counts must be at least 1");
    }
    let source = match args.source.as_slice() {
        [] => ScalingSource::Generator,
        [one] if one == "generator" => ScalingSource::Generator,
        [one] if one == "parquet" => ScalingSource::Parquet,
        _ => {
            return plan_err!(
                "--scaling reads generator or parquet (one of them), not {}",
                args.source.join(",")
            );
        }
    };
    let cases = scaling_cases(&args.scenario)?;
    let runs = if args.quick { 1 } else { args.runs.max(1) };
    let results = run_scaling(&cases, &sizes, source, &bench_dir(args), partitions, runs).await?;
    print!("{}", scaling_table(&results));
    if let Some(path) = &args.svg {
        write_file(path, &scaling_svg(&results))?;
    }
    Ok(())
}

/// Where the benchmarks' Parquet files are written and reused from.
fn bench_dir(args: &BenchArgs) -> PathBuf {
    args.dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("freshet-bench"))
}

fn output_kind(path: &Path) -> Option<&str> {
    path.extension()?.to_str()
}

async fn bench(args: BenchArgs) -> Result<()> {
    // Options a mode does not write are refused rather than ignored.
    if args.scaling && args.json.is_some() {
        return plan_err!("--scaling writes its table and --svg, not --json");
    }
    if args.latency && (args.json.is_some() || args.svg.is_some()) {
        return plan_err!("--latency writes its table only, not --json or --svg");
    }
    if args.scaling && args.latency {
        return plan_err!("--scaling and --latency are two runs: give one");
    }
    if let Some(workers) = args.workers {
        if args.scaling || args.latency || args.json.is_some() || args.svg.is_some() {
            return plan_err!(
                "--workers is a run of its own: without --scaling, --latency, --json or --svg"
            );
        }
        return super::bench_workers::bench_workers(&args, workers, &bench_dir(&args)).await;
    }
    match args.suite.as_str() {
        "scenarios" => {}
        "nexmark" if args.scaling || args.latency => {
            return plan_err!(
                "--suite nexmark measures throughput: --scaling and --latency are the scenarios' modes"
            );
        }
        "nexmark" => return bench_nexmark(&args).await,
        other => return plan_err!("--suite {other}: expected scenarios or nexmark"),
    }
    if args.events.is_some() || !args.query.is_empty() {
        return plan_err!("--events and --query belong to --suite nexmark");
    }
    if args.scaling {
        return bench_scaling(&args).await;
    }
    if args.latency {
        let records = parse_count("records", &args.records)? as u64;
        let rate = parse_count("rate", &args.rate)? as f64;
        if records == 0 {
            return plan_err!("--records must be at least 1");
        }
        let selected: Vec<&str> = if args.scenario.is_empty() {
            LATENCY_SCENARIOS.to_vec()
        } else {
            args.scenario.iter().map(String::as_str).collect()
        };
        let mut results = Vec::new();
        for id in selected {
            eprintln!("running {id} paced at {rate} records/s on {records} records …");
            results.push(run_latency(id, records, rate).await?);
        }
        print!("{}", latency_table(&results));
        return Ok(());
    }
    let records = if args.quick {
        200_000
    } else {
        parse_count("records", &args.records)? as u64
    };
    if records == 0 {
        return plan_err!("--records must be at least 1");
    }
    if args.partitions.contains(&0) {
        return plan_err!("--partitions: stream counts must be at least 1");
    }
    let config = BenchConfig {
        records,
        partitions: args.partitions.clone(),
        runs: if args.quick { 1 } else { args.runs.max(1) },
        sources: if args.source.is_empty() {
            vec![BenchSource::Memory]
        } else {
            args.source
                .iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<BenchSource>>>()?
        },
        dir: bench_dir(&args),
    };
    let selected = if args.scenario.is_empty() {
        scenarios()
    } else {
        args.scenario
            .iter()
            .map(|id| match scenario(id) {
                Some(s) => Ok(s),
                None => plan_err!(
                    "unknown scenario '{id}'; available: {}",
                    scenarios()
                        .iter()
                        .chain(&variants())
                        .map(|s| s.id)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
            .collect::<Result<Vec<_>>>()?
    };
    let mut results = Vec::new();
    for scenario in &selected {
        eprintln!(
            "running {} ({}) on {records} records …",
            scenario.id, scenario.description
        );
        results.extend(run_scenario(scenario, &config).await?);
    }
    report_results(&args, &results)
}

/// `bench --suite nexmark`.
async fn bench_nexmark(args: &BenchArgs) -> Result<()> {
    if !args.scenario.is_empty() {
        return plan_err!("--suite nexmark runs queries: give --query, not --scenario");
    }
    let events = match (&args.events, args.quick) {
        (_, true) => 200_000,
        (Some(events), false) => parse_count("events", events)? as u64,
        (None, false) => 10_000_000,
    };
    if events == 0 {
        return plan_err!("--events must be at least 1");
    }
    if args.partitions.contains(&0) {
        return plan_err!("--partitions: stream counts must be at least 1");
    }
    let config = BenchConfig {
        records: events,
        partitions: args.partitions.clone(),
        runs: if args.quick { 1 } else { args.runs.max(1) },
        sources: if args.source.is_empty() {
            vec![BenchSource::Generator]
        } else {
            args.source
                .iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<BenchSource>>>()?
        },
        dir: bench_dir(args),
    };
    let selected: Vec<&NexmarkQuery> = if args.query.is_empty() {
        NEXMARK_QUERIES.iter().collect()
    } else {
        args.query
            .iter()
            .map(|name| match nexmark_query(name) {
                Some(query) => Ok(query),
                None => plan_err!("unknown Nexmark query '{name}'; the queries are q0 to q22"),
            })
            .collect::<Result<_>>()?
    };
    let mut results = Vec::new();
    for query in selected {
        eprintln!("running Nexmark {} on {events} events …", query.name);
        results.extend(run_nexmark_query(query, &config).await?);
    }
    report_results(args, &results)
}

/// Prints the throughput table of `results`, and writes `--json` and `--svg` if asked.
fn report_results(args: &BenchArgs, results: &[ScenarioResult]) -> Result<()> {
    print!("{}", report::table(results));
    if let Some(path) = &args.json {
        write_file(path, &report::json(results))?;
    }
    if let Some(path) = &args.svg {
        write_file(path, &throughput_svg(results))?;
    }
    Ok(())
}

fn write_file(path: &Path, contents: &str) -> Result<()> {
    match std::fs::write(path, contents) {
        Ok(()) => Ok(()),
        Err(e) => plan_err!("cannot write {}: {e}", path.display()),
    }
}
