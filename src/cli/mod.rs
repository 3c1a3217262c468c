//! The `freshet` command line: `query`, `explain`, `shell`, `gen`, `bench`, `fuzz` and
//! `worker`.
//!
//! Every failure ends in one line on stderr (`error: …`) and a non-zero exit code.

mod bench_workers;
mod checkpointed;
mod commands;
mod distributed;
mod shell;
mod tables;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

pub(crate) use commands::plan as plan_query;
pub use commands::{apply_settings, session, session_statement};
pub use tables::{TableSource, TableSpec, register_table, register_tables, with_absolute_path};

/// Freshet: streaming SQL on Apache DataFusion and Arrow.
#[derive(Debug, Parser)]
#[command(name = "freshet", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a streaming query and write its results.
    Query(QueryArgs),
    /// Print the physical plan of a streaming query: Freshet's operators, emit mode,
    /// watermarks and partitioning.
    Explain(ExplainArgs),
    /// Write a generated stream (market_data or orders) to a file.
    Gen(GenArgs),
    /// Run the benchmark scenarios on Freshet and on DataFusion batch over the same data.
    Bench(BenchArgs),
    /// Run random streaming queries over random tables against DataFusion batch SQL.
    Fuzz(FuzzArgs),
    /// An interactive session: queries, EXPLAIN, SET and CREATE VIEW statements ending with
    /// `;`, and commands (\d lists the streams, \? the commands, \q quits).
    Shell(SessionArgs),
    /// Serve the stages of queries that coordinators run with `query --workers`.
    Worker(WorkerArgs),
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Address to listen on, e.g. 127.0.0.1:7001.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
}

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// Number of cases.
    #[arg(long, default_value_t = 1_000)]
    pub cases: usize,
    /// First case's seed; case i runs seed + i.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Runs spent shrinking each failure to a small reproduction.
    #[arg(long, default_value_t = 200)]
    pub shrink: usize,
}

/// A query and the streams it reads.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The SQL query (or give --file).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub sql: Option<String>,
    /// Read the SQL from this file (`-`: standard input): statements separated by `;`, each
    /// but the last one a session statement (SET, CREATE VIEW …), the last one the query.
    #[arg(long, short = 'f', value_name = "PATH")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub session: SessionArgs,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Also print the stages the query would run in across these workers (HOST:PORT,…), as
    /// `query --workers` runs it, on --partitions streams in all; the workers are not
    /// contacted.
    #[arg(long, value_name = "HOST:PORT,...")]
    pub workers: Option<String>,
}

/// The session a query runs in: its streams, stream count, strategy and settings.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// A session setting, as `SET KEY = 'VALUE'` would make it, e.g. --set
    /// freshet.allowed_lateness_ms=5s --set freshet.changes_per=batch (a key without a dot is a
    /// freshet.* setting).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// A stream: NAME=PATH (Parquet, CSV, JSON-lines or Arrow file or directory) or
    /// NAME=generator:market_data|orders, followed by ,key=value options: event_time, event_time_unit (s, ms, us or ns, for an integer event time),
    /// watermark, bounded, partitions, partitioned_by (a+b), rate, idle_timeout, memory_map (false:
    /// copy local Parquet files out rather than map them); for generators also
    /// records (a count or unbounded), batch_size, step_ms, disorder_ms, seed, and symbols,
    /// traders (market_data) or customers, amount_base (orders). A path holding a comma is
    /// quoted: 't="a,b.csv",event_time=ts'. The tables market_data and orders exist by
    /// default as generators of 1M records.
    #[arg(long = "table", short = 't', value_name = "NAME=SOURCE[,KEY=VALUE...]")]
    pub tables: Vec<String>,
    /// Parallel streams to run the query on (default: the number of cores).
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Event-time column of every --table that does not name its own.
    #[arg(long, value_name = "COLUMN")]
    pub event_time: Option<String>,
    /// Watermark delay (out-of-orderness) of every --table that does not set its own, e.g. 5s.
    #[arg(long, value_name = "DURATION")]
    pub watermark: Option<String>,
    /// How keyed operators are fed: hash, sticky, round_robin, fan_in or two_phase (default: chosen
    /// from the plan; a query's WITH ('partitioning_strategy' = …) overrides it).
    #[arg(long, value_name = "STRATEGY")]
    pub strategy: Option<String>,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Where results go: table[=ROWS], csv[=PATH], jsonl[=PATH], parquet=PATH, arrow=PATH or null.
    #[arg(long, short = 'o', default_value = "table")]
    pub output: String,
    /// Also write the records that window aggregations drop as late, e.g. csv=late.csv.
    #[arg(long, value_name = "FORMAT=PATH")]
    pub late_output: Option<String>,
    /// Checkpoint the query's state into DIR, and resume from its latest checkpoint; a file
    /// output (parquet=PATH, …) then becomes a directory of committed part files.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Time (10s, 500ms) or records read (1M, 250k) between checkpoints.
    #[arg(long, default_value = "10s", value_name = "INTERVAL")]
    pub checkpoint_interval: String,
    /// Complete checkpoints kept in the checkpoint directory.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub checkpoints_kept: usize,
    /// Run the query across these workers (`freshet worker`), HOST:PORT,…: each reads its
    /// share of the sources and runs its share of the streams (--partitions in all, a
    /// multiple of the workers; default: workers × cores); the results come here. The
    /// workers must see the tables' files at the same paths.
    #[arg(long, value_name = "HOST:PORT,...")]
    pub workers: Option<String>,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// The generator: market_data, orders or nexmark (its three streams person, auction and
    /// bid, written as DIR/person.parquet, DIR/auction.parquet and DIR/bid.parquet).
    pub kind: String,
    /// Number of records (10000, 10k, 10M): market_data and orders.
    #[arg(long)]
    pub records: Option<String>,
    /// Number of events (10000, 10k, 10M): nexmark.
    #[arg(long)]
    pub events: Option<String>,
    /// A generator parameter, e.g. --set symbols=5 --set disorder_ms=2000.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Output file: .parquet, .csv, .arrow or .jsonl; for nexmark a directory.
    #[arg(long)]
    pub out: PathBuf,
    /// nexmark: the files' format, parquet (the default), csv, arrow or jsonl.
    #[arg(long, default_value = "parquet")]
    pub format: String,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to run: the reference scenarios (scenarios, the default) or the Nexmark queries
    /// (nexmark: q0–q22 of bench/nexmark over one event sequence, or the --query ones).
    #[arg(long, default_value = "scenarios")]
    pub suite: String,
    /// Input records per scenario (10M, 1M, 100000, …).
    #[arg(long, default_value = "10M")]
    pub records: String,
    /// Nexmark: events in the sequence (all three streams together; default 10M).
    #[arg(long)]
    pub events: Option<String>,
    /// Nexmark: the queries to run (q5 or 5), separated by commas or given again (default:
    /// every query).
    #[arg(long, value_delimiter = ',')]
    pub query: Vec<String>,
    /// Scenarios to run, separated by commas or given again (default: S0, S0-half, S1, S2,
    /// S3a, S3b); also the variants S1-frame10 and S1-frame10k; in the scaling mode, its cases.
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// Stream counts to run each scenario at.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub partitions: Vec<usize>,
    /// Timed runs per engine; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// A small, fast run (200k records, one timed run): a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Where each scenario's records come from: memory (batches prepared in memory, split by
    /// key where the scenario is keyed; the default), parquet (a Parquet file written once per
    /// size into --dir and read as `freshet query --table NAME=FILE` reads it, automatic
    /// strategy) or generator (the `generator:` table); several separated by commas. The
    /// scaling mode reads generator (its default) or parquet.
    #[arg(long, value_delimiter = ',')]
    pub source: Vec<String>,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Also draw the results as an SVG chart into this file.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
    /// Latency mode instead: S0 (1 % of the records pass its filter), S3a and S3b (or the
    /// --scenario ones among them) over a generated replay paced at --rate on one stream,
    /// with the p50 / p99 / max latency from the record that makes a row due entering the
    /// source to the row leaving the query (--records records).
    #[arg(long)]
    pub latency: bool,
    /// Latency mode: the replay's rate in records per second (1M, 500k, …).
    #[arg(long, default_value = "1M")]
    pub rate: String,
    /// Scaling mode instead: queries whose state lives as long as the input (sessions that
    /// never close, a window over the whole input, large OVER frames, a wide interval join,
    /// a changelog over a long window; S3a for memory), or the --scenario ones among them,
    /// over market_data replays of each of --sizes records, with wall time, CPU time, peak
    /// memory and the growth from the smallest size to the largest (at the first --partitions
    /// count).
    #[arg(long)]
    pub scaling: bool,
    /// Workers mode instead: the --scenario ones (default S3a) over a Parquet replay of
    /// --records records, or with --suite nexmark the --query ones (default q5) over the
    /// Parquet files of --events events, in one process and across 1 to N local `freshet
    /// worker` processes (--partitions streams per worker), alternating: records per second,
    /// CPU seconds per million records of every process, and network bytes per record.
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Scaling mode: the input sizes, in records.
    #[arg(long, value_delimiter = ',', default_value = "1M,4M")]
    pub sizes: Vec<String>,
    /// Where the Parquet files of the parquet source and of the scaling mode are written (and
    /// reused from); default: the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Runs the command line; the binary's `main`.
pub fn main() -> ExitCode {
    // A reader's panic (the Parquet decoder on a corrupt page) fails the query with an error
    // that names the stream and carries the panic's message: printing the panic as well
    // would show a crash where there is a clean error.
    let print_panic = std::panic::take_hook();
    // datafusion-distributed's coordinator panics on a task cancelled after a worker died;
    // the query fails with an error that says so.
    std::panic::set_hook(Box::new(move |info| {
        if !freshet_engine::panic_becomes_error()
            && !crate::distributed::is_cancelled_task_panic(info)
        {
            print_panic(info);
        }
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        // No command: the list of commands, as `freshet --help` shows it.
        Err(e)
            if e.kind() == clap::error::ErrorKind::MissingSubcommand
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let _ = Cli::command().print_help();
            return ExitCode::from(2);
        }
        Err(e) => {
            // clap's message without its usage and tips, on one line.
            let message = e.to_string();
            let lines: Vec<&str> = message
                .lines()
                .take_while(|line| !line.starts_with("Usage:") && !line.trim().starts_with("tip:"))
                .collect();
            eprintln!("{} (see freshet --help)", one_line(&lines.join("\n")));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Planning walks expression trees recursively (a 4 000-term sum is 4 000 levels deep);
    // DataFusion grows the stack where it recurses, the rest runs on a large one.
    let planner = std::thread::Builder::new()
        .name("freshet".into())
        .stack_size(STACK_BYTES)
        .spawn(move || runtime.block_on(commands::run(cli.command)));
    let outcome = match planner.map(std::thread::JoinHandle::join) {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => return ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: cannot start the main thread: {e}");
            return ExitCode::FAILURE;
        }
    };
    match outcome {
        Ok(code) => code,
        // The reader of the output went away (`freshet … | head`): nothing more to do.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line(e));
            ExitCode::FAILURE
        }
    }
}

/// An error as the one line the user reads: without planning rule names, on one line, with
/// DataFusion's signature lists reduced to the type that was wrong.
fn error_line(error: datafusion::common::DataFusionError) -> String {
    without_categories(&readable(&one_line(&without_rule_names(error).to_string())))
}

/// DataFusion's and arrow's category prefixes ("Error during planning: ", "Arrow error: Cast
/// error: ", …) say where in the engine an error arose, which is nothing to the user; a
/// parser error reads as a syntax error.
fn without_categories(message: &str) -> String {
    const CATEGORIES: [&str; 10] = [
        "Error during planning: ",
        "Invalid or Unsupported Configuration: ",
        "Execution error: ",
        "Schema error: ",
        "External error: ",
        "Arrow error: ",
        "Cast error: ",
        "Compute error: ",
        "Invalid argument error: ",
        "Parser error: ",
    ];
    let mut message = message.trim_start();
    while let Some(rest) = CATEGORIES
        .iter()
        .find_map(|category| message.strip_prefix(category))
    {
        message = rest;
    }
    if let Some(parser) = message
        .strip_prefix("SQL error: ParserError(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
    {
        return format!("syntax error: {}", parser.replace("\\\"", "\""));
    }
    message.to_string()
}

/// `error` without the names of the planning rules that wrapped it ("FreshetUnboundedInputCheck
/// caused by …"): they mean nothing to the user.
fn without_rule_names(
    mut error: datafusion::common::DataFusionError,
) -> datafusion::common::DataFusionError {
    use datafusion::common::DataFusionError;
    while let DataFusionError::Context(context, inner) = error {
        if context.contains(char::is_whitespace) {
            return DataFusionError::Context(context, inner);
        }
        error = *inner;
    }
    error
}

/// DataFusion's long "failed to match any signature" message (one line per signature, called
/// an internal error) as the one thing the user got wrong: the argument's type.
fn readable(message: &str) -> String {
    let Some(at) = message.find("failed to match any signature") else {
        return message.to_string();
    };
    let function = message[..at]
        .rsplit("Function '")
        .next()
        .and_then(|rest| rest.split('\'').next());
    let received = message[at..]
        .split("but received ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next());
    match (function, received) {
        (Some(function), Some(received)) => format!(
            "{function}() does not take an argument of type {received}: cast it, or use another function"
        ),
        _ => message.to_string(),
    }
}

/// Whether `error` comes from writing to a closed pipe.
fn is_broken_pipe(error: &datafusion::common::DataFusionError) -> bool {
    use std::error::Error;
    let mut source: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::BrokenPipe
        {
            return true;
        }
        source = error.source();
    }
    // arrow's writers keep only the message of an I/O error.
    error.to_string().contains("Broken pipe")
}

/// The stack of the threads that plan and run queries (reserved, used only as deep as
/// needed).
const STACK_BYTES: usize = 256 << 20;

/// A message folded onto one line.
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

impl SessionArgs {
    /// These arguments without the stream count, which a checkpoint compares apart.
    pub fn without_partitions(&self) -> Self {
        Self {
            partitions: None,
            ..self.clone()
        }
    }
}
