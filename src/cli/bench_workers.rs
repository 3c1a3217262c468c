//! `freshet bench --workers N`: a scenario (or, with `--suite nexmark`, a Nexmark query)
//! over a Parquet replay in one process and across 1 to N local worker processes, on as
//! many streams in all, in alternating rounds: records (Nexmark: events of the sequence) per
//! second, CPU seconds per million records (every process: coordinator and workers) and the
//! Arrow bytes per record the exchanges sent over the network.
//!
//! As in a cluster, the workers run before the query comes: they are started once per worker
//! count, and a run is timed from starting the coordinator (`freshet query … --workers`) to
//! its exit, as the one-process run is timed from starting `freshet query` to its exit. The
//! workers' CPU is what they used during the run (`/proc/PID/stat`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::common::{Result, plan_err};
use freshet_bench::nexmark::nexmark_query;
use freshet_bench::nexmark_runner::nexmark_files;
use freshet_bench::runner::{children_cpu_time, process_cpu_time, scenario_file};
use freshet_bench::scenarios::scenario;
use freshet_engine::options::parse_count;

use super::BenchArgs;

/// One timed run of the `freshet` binary: wall time, CPU of every process it started, and
/// its summary line.
struct Timed {
    elapsed: Duration,
    cpu: Duration,
    summary: String,
}

/// A `freshet worker` on a free loopback port.
struct LocalWorker {
    child: Child,
    address: String,
}

impl LocalWorker {
    fn start() -> Result<Self> {
        use std::io::BufRead;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["worker", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        if let Some(stderr) = child.stderr.take() {
            std::io::BufReader::new(stderr).read_line(&mut line)?;
        }
        match line.trim().rsplit(' ').next() {
            Some(address) if address.contains(':') => Ok(Self {
                child,
                address: address.to_string(),
            }),
            _ => plan_err!("a local worker did not start: {line}"),
        }
    }
}

/// A local worker stops with the bench, on an error too: a worker left running would hold
/// the bench's output open for whoever reads it to its end.
impl Drop for LocalWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `freshet query` with `args`, across `workers` if any (started before).
fn run(args: &[String], workers: &[LocalWorker]) -> Result<Timed> {
    let workers_cpu = || -> Result<Duration> {
        workers
            .iter()
            .map(|worker| match process_cpu_time(worker.child.id()) {
                Some(cpu) => Ok(cpu),
                None => plan_err!("cannot read a worker's CPU time from /proc (Linux only)"),
            })
            .sum()
    };
    let (cpu_before, workers_before) = (children_cpu_time(), workers_cpu()?);
    let started = Instant::now();
    let mut command = Command::new(std::env::current_exe()?);
    command.args(args);
    if !workers.is_empty() {
        let list: Vec<&str> = workers.iter().map(|w| w.address.as_str()).collect();
        command.args(["--workers", &list.join(",")]);
    }
    let output = command.output()?;
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if !output.status.success() {
        return plan_err!("freshet {} failed: {stderr}", args.join(" "));
    }
    let workers_used = workers_cpu()?.saturating_sub(workers_before);
    Ok(Timed {
        elapsed,
        cpu: children_cpu_time().saturating_sub(cpu_before) + workers_used,
        summary: stderr,
    })
}

/// The number before `label` in a summary line.
fn number_before(summary: &str, label: &str) -> Option<f64> {
    let before = &summary[..summary.find(label)?];
    before.split_whitespace().last()?.parse().ok()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// See the module documentation.
pub(super) async fn bench_workers(
    args: &BenchArgs,
    max_workers: usize,
    dir: &std::path::Path,
) -> Result<()> {
    if max_workers == 0 {
        return plan_err!("--workers: at least 1 worker");
    }
    let runs = if args.quick { 1 } else { args.runs.max(1) };
    let per_worker = args.partitions.first().copied().unwrap_or(1).max(1);
    let jobs = match args.suite.as_str() {
        "nexmark" => nexmark_jobs(args, dir)?,
        _ => scenario_jobs(args, dir)?,
    };
    println!(
        "| scenario | workers | streams | one process (records/s) | workers (records/s) | speed ratio | CPU s per M records, one process | CPU s per M records, workers | CPU ratio | network bytes per record |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for job in &jobs {
        let records = job.records;
        for workers in 1..=max_workers {
            let streams = workers * per_worker;
            let mut args = job.args.clone();
            args.extend(["--partitions".to_string(), streams.to_string()]);
            args.extend(["-o".to_string(), "null".to_string()]);
            eprintln!(
                "running {} on {workers} workers ({streams} streams) …",
                job.id
            );
            let local: Vec<LocalWorker> = (0..workers)
                .map(|_| LocalWorker::start())
                .collect::<Result<_>>()?;
            let (mut alone, mut spread) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                alone.push(run(&args, &[])?);
                spread.push(run(&args, &local)?);
            }
            drop(local);
            let rate = |timed: &[Timed]| {
                median(
                    timed
                        .iter()
                        .map(|t| records as f64 / t.elapsed.as_secs_f64())
                        .collect(),
                )
            };
            let cpu = |timed: &[Timed]| {
                median(
                    timed
                        .iter()
                        .map(|t| t.cpu.as_secs_f64() * 1e6 / records as f64)
                        .collect(),
                )
            };
            let wire: Vec<f64> = spread
                .iter()
                .filter_map(|t| number_before(&t.summary, "bytes crossed the network"))
                .collect();
            if wire.len() != spread.len() {
                return plan_err!("a run across workers did not say what crossed the network");
            }
            let wire = median(wire);
            let (alone_rate, spread_rate) = (rate(&alone), rate(&spread));
            let (alone_cpu, spread_cpu) = (cpu(&alone), cpu(&spread));
            println!(
                "| {} | {workers} | {streams} | {alone_rate:.0} | {spread_rate:.0} | {:.2}x | {alone_cpu:.2} | {spread_cpu:.2} | {:.2}x | {:.1} |",
                job.id,
                spread_rate / alone_rate,
                spread_cpu / alone_cpu,
                wire / records as f64,
            );
        }
    }
    Ok(())
}

/// One query of the bench: its `freshet query` arguments (without streams and output) and
/// the records a run reads.
struct Job {
    id: String,
    args: Vec<String>,
    records: u64,
}

/// The `--scenario` ones (S3a by default), each over its Parquet file.
fn scenario_jobs(args: &BenchArgs, dir: &std::path::Path) -> Result<Vec<Job>> {
    let records = if args.quick {
        200_000
    } else {
        parse_count("records", &args.records)? as u64
    };
    let ids: Vec<String> = match args.scenario.as_slice() {
        [] => vec!["S3a".to_string()],
        ids => ids.to_vec(),
    };
    ids.iter()
        .map(|id| {
            let scenario = match scenario(id) {
                Some(scenario) if scenario.lookup_symbols.is_none() => scenario,
                _ => return plan_err!("--workers runs S0, S0-half, S1, S2, S3a or S3b, not {id}"),
            };
            let path = scenario_file(dir, &scenario, records)?;
            let mut table = format!("{}={}", scenario.table(), path.display());
            if let Some(event_time) = scenario.event_time() {
                table.push_str(&format!(",event_time={event_time}"));
            }
            Ok(Job {
                id: scenario.id.to_string(),
                args: ["query", "-t", &table, scenario.streaming_sql]
                    .iter()
                    .map(|a| a.to_string())
                    .collect(),
                records,
            })
        })
        .collect()
}

/// The `--query` ones (q5 by default) over the Parquet files of `--events` events (10 M by
/// default), each stream with its event time `date_time` and the standard 4-second watermark.
fn nexmark_jobs(args: &BenchArgs, dir: &std::path::Path) -> Result<Vec<Job>> {
    let events = match (&args.events, args.quick) {
        (_, true) => 200_000,
        (Some(events), false) => parse_count("events", events)? as u64,
        (None, false) => 10_000_000,
    };
    let files = nexmark_files(dir, events)?;
    let names: Vec<String> = match args.query.as_slice() {
        [] => vec!["q5".to_string()],
        names => names.to_vec(),
    };
    names
        .iter()
        .map(|name| {
            let Some(query) = nexmark_query(name) else {
                return plan_err!("--query: no Nexmark query {name}");
            };
            if query.side_input {
                return plan_err!(
                    "--workers runs the Nexmark queries over the generated streams, not {} (its side input is a table of the bench's process)",
                    query.name
                );
            }
            // From a file: the query's text starts with a comment, which the command line
            // would take for an option.
            let sql = files.join(format!("{}.sql", query.name));
            std::fs::write(&sql, query.sql)?;
            let mut args = vec![
                "query".to_string(),
                "-f".to_string(),
                sql.display().to_string(),
            ];
            for table in query.reads {
                args.push("-t".to_string());
                args.push(format!(
                    "{table}={},event_time=date_time,watermark=4s",
                    files.join(format!("{table}.parquet")).display()
                ));
            }
            Ok(Job {
                id: query.name.to_string(),
                args,
                records: events,
            })
        })
        .collect()
}
