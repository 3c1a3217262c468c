//! Checkpoints and exactly-once recovery: a query killed at any moment (SIGKILL, or at a
//! named fail point) and run again until it finishes commits exactly the output of a run
//! that never stopped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{freshet, freshet_ok};

const S3A: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
const S3B: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";
const S2: &str = "SELECT symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, MIN(price) AS min_price, MAX(price) AS max_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY symbol";
const TOP_3: &str = "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY price DESC) AS rn FROM market_data) WHERE rn <= 3";
const SESSIONS: &str = "SELECT trader_id, COUNT(*) AS n, SUM(quantity) AS q FROM market_data GROUP BY trader_id WINDOW SESSION (trade_time, INTERVAL '21' SECOND) EMIT CHANGES";
const INTERVAL_JOIN: &str = "SELECT a.symbol, a.trade_time, a.price, b.price AS prior_price FROM market_data a JOIN market_data b ON a.symbol = b.symbol AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND AND a.trade_time";
/// Rows of the left side that find no match go out with nulls once the watermark frees them.
const LEFT_JOIN: &str = "SELECT a.symbol, a.trade_time, a.price, b.price AS later_price FROM market_data a LEFT JOIN market_data b ON a.symbol = b.symbol AND b.trade_time BETWEEN a.trade_time + INTERVAL '1' SECOND AND a.trade_time + INTERVAL '30' SECOND AND b.quantity > 1050";
const S1: &str = "SELECT symbol, price, LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg FROM market_data";
/// Window functions that read following rows, keep strings, rank and take a frame's maximum.
const OVER_AHEAD: &str = "SELECT symbol, trader_id, price, LEAD(price, 2) OVER (PARTITION BY symbol ORDER BY trade_time) AS next_2, FIRST_VALUE(trader_id) OVER (PARTITION BY symbol ORDER BY trade_time) AS first_trader, RANK() OVER (PARTITION BY symbol ORDER BY trade_time) AS rank, MAX(quantity) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 5 PRECEDING AND 1 FOLLOWING) AS max_q FROM market_data";
const OVER_RANGE: &str = "SELECT trader_id, quantity, SUM(quantity) OVER (PARTITION BY trader_id ORDER BY trade_time RANGE BETWEEN INTERVAL '90' SECOND PRECEDING AND CURRENT ROW) AS q_90s, MIN(price) OVER (PARTITION BY trader_id ORDER BY trade_time RANGE BETWEEN INTERVAL '90' SECOND PRECEDING AND CURRENT ROW) AS low_90s FROM market_data";
/// Groups leave the changelog with a delete, and come back, as their count passes and fails.
const CHANGELOG_HAVING: &str = "SELECT trader_id, COUNT(*) AS n, SUM(quantity) AS q FROM market_data GROUP BY trader_id HAVING COUNT(*) % 7 <> 0 EMIT CHANGES";
/// Traders' running counts, sums and averages, aggregated again per symbol: each upsert moves
/// a trader's row, retracting the one it replaces.
const CHANGELOG_AGGREGATION: &str = "SELECT symbol, COUNT(*) AS traders, SUM(q) AS q, MAX(n) AS most, MIN(n) AS least, AVG(p) AS p FROM (SELECT trader_id, symbol, COUNT(*) AS n, SUM(quantity) AS q, AVG(price) AS p FROM market_data GROUP BY trader_id, symbol EMIT CHANGES) GROUP BY symbol";
const S0: &str = "SELECT symbol, price, quantity, trade_time FROM market_data WHERE quantity > 500";

/// A replay of 12 disordered files of 4 000 records each, one after another in time.
fn replay(dir: &Path) -> String {
    replay_of(dir, 4_000)
}

/// A replay of 12 disordered files of `records` records each, one after another in time.
fn replay_of(dir: &Path, records: u64) -> String {
    let data = dir.join("market_data");
    std::fs::create_dir_all(&data).unwrap();
    for file in 0..12u64 {
        let start = format!("start_ms={}", 1_700_000_000_000 + file * records * 1_000);
        let seed = format!("seed={file}");
        let out = data.join(format!("f{file:02}.parquet"));
        let records = records.to_string();
        freshet_ok(&[
            "gen",
            "market_data",
            "--records",
            &records,
            "--set",
            &start,
            "--set",
            "disorder_ms=3000",
            "--set",
            &seed,
            "--out",
            out.to_str().unwrap(),
        ]);
    }
    format!(
        "market_data={},event_time=trade_time,watermark=5s",
        data.display()
    )
}

fn checkpointed_args<'a>(
    sql: &'a str,
    table: &'a str,
    partitions: &'a str,
    out: &'a str,
    checkpoints: &'a str,
) -> Vec<&'a str> {
    vec![
        "query",
        sql,
        "--table",
        table,
        "--partitions",
        partitions,
        "-o",
        out,
        "--checkpoint-dir",
        checkpoints,
        "--checkpoint-interval",
        "4k",
    ]
}

/// The rows of a run that never stopped, sorted.
fn uninterrupted(dir: &Path, sql: &str, table: &str, partitions: &str) -> Vec<String> {
    let mut lines = uninterrupted_in_order(dir, sql, table, partitions);
    lines.sort();
    lines
}

/// The rows of a run that never stopped, in the order it wrote them.
fn uninterrupted_in_order(dir: &Path, sql: &str, table: &str, partitions: &str) -> Vec<String> {
    let out = dir.join(format!("reference-{partitions}.csv"));
    let output = format!("csv={}", out.display());
    freshet_ok(&[
        "query",
        sql,
        "--table",
        table,
        "--partitions",
        partitions,
        "--strategy",
        "hash",
        "-o",
        &output,
    ]);
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The committed rows of a directory of part files, sorted.
fn committed(dir: &Path, parts: &Path) -> Vec<String> {
    let out = dir.join("committed.csv");
    let table = format!("o={}", parts.display());
    let output = format!("csv={}", out.display());
    freshet_ok(&["query", "SELECT * FROM o", "--table", &table, "-o", &output]);
    sorted_lines(&std::fs::read_to_string(out).unwrap())
}

/// The committed output of a run in the order it was committed (part by part, each in the
/// order its rows came): what applying a changelog needs.
fn committed_in_order(dir: &Path, parts: &Path) -> Vec<String> {
    let out = dir.join("committed-in-order.csv");
    let table = format!("o={}", parts.display());
    let output = format!("csv={}", out.display());
    freshet_ok(&[
        "query",
        "SELECT * FROM o",
        "--table",
        &table,
        "--partitions",
        "1",
        "-o",
        &output,
    ]);
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// Runs `args` until it succeeds, killing it (SIGKILL) after each of `delays` first; returns
/// how many runs were killed.
fn run_killing(args: &[&str], delays: &[u64]) -> usize {
    let mut killed = 0;
    for delay in delays {
        let mut child = Command::new(env!("CARGO_BIN_EXE_freshet"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(*delay));
        match child.try_wait().unwrap() {
            Some(status) => assert!(status.success(), "freshet {args:?} failed"),
            None => {
                child.kill().unwrap();
                child.wait().unwrap();
                killed += 1;
            }
        }
    }
    let output = freshet(args);
    assert!(
        output.status.success(),
        "freshet {args:?} failed after {killed} kills: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    killed
}

/// Pseudo-random delays in milliseconds, from a fixed seed.
fn delays(seed: u64, count: usize) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            40 + (state >> 33) % 260
        })
        .collect()
}

/// A run of `sql` at 2 streams over a replay of 12 files of 40 000 records (long enough to
/// be stopped in the middle): its uninterrupted answer, and where it writes.
struct LongRun {
    dir: tempfile::TempDir,
    table: String,
    expected: Vec<String>,
    parts: PathBuf,
    out: String,
    checkpoints: String,
}

impl LongRun {
    fn new(name: &str, sql: &str) -> Self {
        let dir = temporary(name);
        let table = replay_of(dir.path(), 40_000);
        let expected = uninterrupted(dir.path(), sql, &table, "2");
        let parts = dir.path().join("out");
        let out = format!("parquet={}", parts.display());
        let checkpoints = dir.path().join("checkpoints").display().to_string();
        Self {
            dir,
            table,
            expected,
            parts,
            out,
            checkpoints,
        }
    }

    /// The command line of the run, checkpointing every `interval`.
    fn args<'a>(&'a self, sql: &'a str, interval: &'a str) -> Vec<&'a str> {
        let mut args = checkpointed_args(sql, &self.table, "2", &self.out, &self.checkpoints);
        let last = args.len() - 1;
        args[last] = interval;
        args
    }

    fn assert_committed_output_is_uninterrupted(&self) {
        assert_eq!(committed(self.dir.path(), &self.parts), self.expected);
    }
}

/// Runs `args` until fail point `point` makes the process die; whether it died there.
fn dies_at(args: &[&str], point: &str) -> bool {
    dies_at_pausing(args, point, None)
}

/// [`dies_at`], the run waiting at the pause point `pause` (`NAME:MS`) if given.
fn dies_at_pausing(args: &[&str], point: &str, pause: Option<&str>) -> bool {
    let mut command = Command::new(env!("CARGO_BIN_EXE_freshet"));
    command.args(args).env("FRESHET_FAIL_POINT", point);
    if let Some(pause) = pause {
        command.env("FRESHET_PAUSE_POINT", pause);
    }
    !command.stderr(Stdio::null()).status().unwrap().success()
}

/// Removes `dirs` (a case's checkpoint and output directories) to start it afresh.
fn remove_dirs(dirs: &[&Path]) {
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Kills the run of `args` at the fail point `point`, then runs it to the end and expects it
/// to resume from a checkpoint and write rows (the run it resumes died with input left to
/// read). A checkpoint is cut where the sources stand when the coordinator asks for it (it
/// looks every 5 ms), so on a loaded machine a short replay may be read whole before the
/// checkpoint `point` names; the case then starts afresh (`fresh`: its checkpoint and
/// output directories, removed), a few times.
fn dies_then_resumes_writing_rows(args: &[&str], point: &str, fresh: &[&Path]) {
    for _ in 0..4 {
        remove_dirs(fresh);
        assert!(
            dies_at(args, point),
            "the run passed the fail point {point}"
        );
        let resumed = freshet(args);
        let said = String::from_utf8_lossy(&resumed.stderr);
        assert!(
            resumed.status.success() && said.contains("restored"),
            "{said}"
        );
        if !said.contains("\r0 rows out") {
            return;
        }
    }
    panic!("in four runs, the checkpoint at {point} came only at the end of the input");
}

/// Runs `args` to the end, and expects it to succeed saying `said` on stderr.
fn resumes_saying(args: &[&str], said: &str) {
    let resumed = freshet(args);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains(said), "{stderr}");
}

/// A run of `sql` over `table` at `streams` streams.
type Case<'a> = (&'a str, &'a str, &'a str);

/// Runs `case`, dying at each of the fail `points` and resuming (each in directories of its
/// own under `dir`, named after `name`): the committed output (sorted, or in commit order
/// if `in_order`) must be `expected`.
fn resumes_after_each_fail_point(
    dir: &Path,
    name: &str,
    (sql, table, streams): Case,
    points: &[&str],
    in_order: bool,
    expected: &[String],
) {
    for point in points {
        let name = format!("{name}-{}", point.replace(':', "-"));
        let parts = dir.join(format!("out-{name}"));
        let out = format!("parquet={}", parts.display());
        let checkpoints = dir.join(format!("checkpoints-{name}"));
        let checkpoints = checkpoints.to_str().unwrap();
        let args = checkpointed_args(sql, table, streams, &out, checkpoints);
        assert!(dies_at(&args, point), "{sql} passed fail point {point}");
        resumes_saying(&args, "restored");
        let got = match in_order {
            true => committed_in_order(dir, &parts),
            false => committed(dir, &parts),
        };
        assert_eq!(
            got, expected,
            "{sql} over {table} at {streams} streams: fail point {point}"
        );
    }
}

fn temporary(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(name).tempdir().unwrap()
}

#[test]
fn a_query_killed_at_random_moments_commits_the_output_of_one_that_never_stopped() {
    let dir = temporary("killed");
    let table = replay(dir.path());
    let mut kills = 0;
    for (case, (sql, partitions)) in [
        (S3A, "1"),
        (S3A, "2"),
        (S3B, "2"),
        (S0, "2"),
        (S2, "1"),
        (TOP_3, "2"),
        (SESSIONS, "2"),
        (INTERVAL_JOIN, "1"),
        (LEFT_JOIN, "2"),
        (S1, "2"),
    ]
    .into_iter()
    .enumerate()
    {
        let parts = dir.path().join(format!("out-{case}"));
        let out = format!("parquet={}", parts.display());
        let checkpoints = dir.path().join(format!("checkpoints-{case}"));
        let args = checkpointed_args(sql, &table, partitions, &out, checkpoints.to_str().unwrap());
        kills += run_killing(&args, &delays(case as u64 + 7, 6));
        assert_eq!(
            committed(dir.path(), &parts),
            uninterrupted(dir.path(), sql, &table, partitions),
            "case {case}: {sql} at {partitions} streams"
        );
    }
    assert!(kills > 0, "no run was killed: the test proves nothing");
}

/// A window function over a top-1's changelog (Nexmark q6's form, the changelog asked for
/// with `emit=changes`) that dies at a fail point or is killed at random moments commits a
/// changelog that applies to the uninterrupted run's: its rows of each key by place and
/// arrival are in its state. (Which intermediate rows a changelog holds follows the batches
/// its input arrives in, so the changelog applied in the order it was committed is
/// compared.)
#[test]
fn a_window_over_a_changelog_killed_and_resumed_commits_the_same_result() {
    let dir = temporary("changelog-over");
    let table = replay_of(dir.path(), 40_000);
    // The highest price of each symbol and hour, and the average of each symbol's last four
    // hours: keys close as hours pass, so the rows before a checkpoint are needed after it.
    let sql = "SELECT symbol, hr, AVG(price) OVER (PARTITION BY symbol ORDER BY hr \
               ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS recent FROM (SELECT * FROM (SELECT *, \
               ROW_NUMBER() OVER (PARTITION BY symbol, hr ORDER BY price DESC) AS rn FROM \
               (SELECT symbol, price, trade_time, date_trunc('hour', trade_time) AS hr \
               FROM market_data)) WHERE rn = 1)";
    // Applied by its key (symbol, hr): each key's last upsert, unless deleted.
    let applied = |lines: Vec<String>| -> BTreeMap<String, String> {
        let mut state = BTreeMap::new();
        for line in lines.into_iter().filter(|l| l.starts_with("SYM")) {
            let fields: Vec<&str> = line.split(',').collect();
            let key = format!("{},{}", fields[0], fields[1]);
            match fields[3] {
                "-D" => state.remove(&key),
                _ => state.insert(key, fields[2].to_string()),
            };
        }
        state
    };
    let reference = dir.path().join("reference.csv");
    let reference_out = format!("csv={}", reference.display());
    let changes = ["--set", "emit=changes"];
    let mut plain = vec!["query", sql, "--table", &table, "--partitions", "2"];
    plain.extend(changes);
    plain.extend(["-o", &reference_out]);
    freshet_ok(&plain);
    let reference_rows = std::fs::read_to_string(&reference).unwrap();
    let expected = applied(reference_rows.lines().map(str::to_string).collect());
    assert!(expected.len() > 1_000, "{} keys", expected.len());
    let parts = dir.path().join("out");
    let out = format!("parquet={}", parts.display());
    let checkpoints = dir.path().join("checkpoints");
    let mut args = checkpointed_args(sql, &table, "2", &out, checkpoints.to_str().unwrap());
    args.extend(changes);
    let mut restored = 0;
    for point in ["after_commit:1", "after_state_write:1", "before_manifest:2"] {
        remove_dirs(&[&checkpoints, &parts]);
        assert!(
            dies_at(&args, point),
            "the run passed the fail point {point}"
        );
        let resumed = freshet(&args);
        let said = String::from_utf8_lossy(&resumed.stderr);
        assert!(resumed.status.success(), "{said}");
        restored += said.contains("restored") as usize;
        let committed = committed_in_order(dir.path(), &parts);
        assert_eq!(applied(committed), expected, "{point}");
    }
    assert!(
        restored > 0,
        "no run resumed from a checkpoint: the test proves nothing"
    );
    remove_dirs(&[&checkpoints, &parts]);
    run_killing(&args, &delays(31, 4));
    let committed = committed_in_order(dir.path(), &parts);
    assert_eq!(applied(committed), expected, "after kills");
}

#[test]
fn a_query_that_dies_at_each_fail_point_resumes_to_the_same_output() {
    let dir = temporary("fail-points");
    let table = replay(dir.path());
    let expected = uninterrupted(dir.path(), S3B, &table, "2");
    for point in [
        "after_state_write:3",
        "before_manifest:2",
        "after_manifest:2",
        "after_commit:2",
    ] {
        let name = point.replace(':', "-");
        let parts = dir.path().join(format!("out-{name}"));
        let out = format!("parquet={}", parts.display());
        let checkpoints = dir.path().join(format!("checkpoints-{name}"));
        let args = checkpointed_args(S3B, &table, "2", &out, checkpoints.to_str().unwrap());
        // On a loaded machine the replay may be read whole before the checkpoint the point
        // names is cut (see `dies_then_resumes_writing_rows`): a few fresh tries.
        let died = (0..4).any(|_| {
            remove_dirs(&[&checkpoints, &parts]);
            dies_at(&args, point)
        });
        assert!(died, "the run passed fail point {point} without dying");
        freshet_ok(&args);
        assert_eq!(
            committed(dir.path(), &parts),
            expected,
            "fail point {point}"
        );
    }
}

#[test]
fn a_join_or_over_window_or_what_reads_them_that_dies_after_a_checkpoint_resumes_with_its_state() {
    let dir = temporary("joins-and-over");
    let table = replay(dir.path());
    let windows_over_a_join = format!(
        "SELECT symbol, window_start, COUNT(*) AS n, SUM(prior_price) AS s FROM ({INTERVAL_JOIN}) GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)"
    );
    // An aggregation over a changelog emits per input batch: its rows are the same at one
    // stream, where the batches are.
    for (case, (sql, partitions)) in [
        (INTERVAL_JOIN, "2"),
        (LEFT_JOIN, "2"),
        (S1, "2"),
        (OVER_AHEAD, "2"),
        (OVER_RANGE, "2"),
        (&windows_over_a_join, "2"),
        (CHANGELOG_HAVING, "2"),
        (CHANGELOG_AGGREGATION, "1"),
    ]
    .into_iter()
    .enumerate()
    {
        let expected = uninterrupted(dir.path(), sql, &table, partitions);
        resumes_after_each_fail_point(
            dir.path(),
            &case.to_string(),
            (sql, &table, partitions),
            &["before_manifest:2", "after_commit:1"],
            false,
            &expected,
        );
    }
}

/// An ORDER BY led by an event time (over a stream, or over windows by their start) sorts as
/// the stream goes in a checkpointed run, its held rows kept by each checkpoint: the
/// committed output is the uninterrupted run's, in its order. A session window over an
/// aggregate without a per-record kernel (COUNT(DISTINCT …)) keeps its accumulators' states.
#[test]
fn a_sort_or_a_session_over_any_aggregate_that_dies_after_a_checkpoint_resumes_with_its_state() {
    let dir = temporary("sorts-and-sessions");
    let table = replay(dir.path());
    let sorted_stream = "SELECT trade_time, symbol, trader_id, price FROM market_data WHERE quantity > 900 ORDER BY trade_time, symbol, trader_id, price";
    let sorted_windows = "SELECT window_start, symbol, COUNT(*) AS n FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) ORDER BY window_start, symbol";
    let distinct_sessions = "SELECT trader_id, COUNT(DISTINCT symbol) AS symbols, SUM(quantity) AS q FROM market_data GROUP BY trader_id WINDOW SESSION (trade_time, INTERVAL '21' SECOND)";
    for (case, (sql, in_order)) in [
        (sorted_stream, true),
        (sorted_windows, true),
        (distinct_sessions, false),
    ]
    .into_iter()
    .enumerate()
    {
        let expected = match in_order {
            true => uninterrupted_in_order(dir.path(), sql, &table, "2"),
            false => uninterrupted(dir.path(), sql, &table, "2"),
        };
        resumes_after_each_fail_point(
            dir.path(),
            &case.to_string(),
            (sql, &table, "2"),
            &["before_manifest:2", "after_commit:1"],
            in_order,
            &expected,
        );
    }
}

/// A paced replay resumes at its checkpoint: read by one partition (whose units the pacing
/// hands out in slices, each with its unit's position) into one or two streams, or dealt to
/// two partitions in numbered slices; and a replay read as one source partition into two
/// streams.
#[test]
fn a_paced_replay_or_one_source_partition_that_dies_after_a_checkpoint_resumes_at_it() {
    let dir = temporary("paced");
    let table = replay(dir.path());
    let expected = uninterrupted(dir.path(), S3A, &table, "2");
    for (case, (options, streams)) in [
        (",rate=60000", "1"),
        (",rate=60000", "2"),
        (",rate=60000,partitions=2", "2"),
        (",partitions=1", "2"),
    ]
    .into_iter()
    .enumerate()
    {
        let replay = format!("{table}{options}");
        resumes_after_each_fail_point(
            dir.path(),
            &case.to_string(),
            (S3A, &replay, streams),
            &["after_commit:1", "before_manifest:2"],
            false,
            &expected,
        );
    }
}

#[test]
fn a_generated_stream_resumes_at_its_block() {
    let dir = temporary("generated");
    // Disordered, so that the order the two partitions are merged in shows in the changelog.
    let table = "market_data=generator:market_data,records=1000000,disorder_ms=3000,watermark=2s";
    // Paced, its partitions deal whole batches in a checkpointed run: the same records in
    // the same order as the generator read as fast as it goes.
    let paced = "market_data=generator:market_data,records=300000,disorder_ms=3000,watermark=2s,rate=600000";
    let as_fast = "market_data=generator:market_data,records=300000,disorder_ms=3000,watermark=2s";
    for (case, (sql, table, reference)) in [
        (S3B, table, table),
        (S1, table, table),
        (S3B, paced, as_fast),
    ]
    .into_iter()
    .enumerate()
    {
        let expected = uninterrupted(dir.path(), sql, reference, "2");
        let parts = dir.path().join(format!("out-{case}"));
        let out = format!("parquet={}", parts.display());
        let checkpoints = dir.path().join(format!("checkpoints-{case}"));
        let mut args = checkpointed_args(sql, table, "2", &out, checkpoints.to_str().unwrap());
        let last = args.len() - 1;
        args[last] = "20k";
        dies_then_resumes_writing_rows(&args, "after_commit:2", &[&checkpoints, &parts]);
        assert_eq!(committed(dir.path(), &parts), expected, "{sql}");
    }
}

/// A replay of `records` records a file (see [`replay_of`]) with a last file as old as the
/// first: its 4 000 records are late.
fn replay_with_late_records(dir: &Path, records: u64) -> String {
    let table = replay_of(dir, records);
    let stale = dir.join("market_data").join("f00b.parquet");
    freshet_ok(&[
        "gen",
        "market_data",
        "--records",
        "4000",
        "--set",
        "start_ms=1700000000000",
        "--out",
        stale.to_str().unwrap(),
    ]);
    table
}

/// The late records a run's summary line says it dropped.
fn late_dropped(stderr: &str) -> u64 {
    let before = stderr
        .split(" late records dropped")
        .next()
        .and_then(|text| text.rsplit(' ').next())
        .unwrap_or_default();
    before
        .parse()
        .unwrap_or_else(|_| panic!("no late count in: {stderr}"))
}

/// The late records an uninterrupted two-stream run of S3a over `table` drops.
fn late_records_of_a_whole_run(dir: &Path, table: &str) -> u64 {
    let reference = dir.join("reference.csv");
    let reference_out = format!("csv={}", reference.display());
    let plain = freshet(&[
        "query",
        S3A,
        "--table",
        table,
        "--partitions",
        "2",
        "-o",
        &reference_out,
    ]);
    assert!(plain.status.success());
    let expected = late_dropped(&String::from_utf8_lossy(&plain.stderr));
    assert!(
        expected > 0,
        "the replay has no late records: the test proves nothing"
    );
    expected
}

#[test]
fn a_resumed_run_counts_the_late_records_dropped_before_it() {
    let dir = temporary("late");
    let table = replay_with_late_records(dir.path(), 40_000);
    let expected = late_records_of_a_whole_run(dir.path(), &table);
    let parts = dir.path().join("out");
    let out = format!("parquet={}", parts.display());
    let checkpoints = dir.path().join("checkpoints");
    let args = checkpointed_args(S3A, &table, "2", &out, checkpoints.to_str().unwrap());
    // On a loaded machine the first checkpoint may come only at the end of the input; the
    // resumed run then reads nothing, which is the next test's case: run again.
    for _ in 0..4 {
        remove_dirs(&[&checkpoints, &parts]);
        assert!(dies_at(&args, "after_commit:1"));
        let resumed = freshet(&args);
        let said = String::from_utf8_lossy(&resumed.stderr);
        assert!(
            resumed.status.success() && said.contains("restored"),
            "{said}"
        );
        if said.contains("; 0 records read") {
            continue;
        }
        assert_eq!(late_dropped(&said), expected, "{said}");
        return;
    }
    panic!("in four runs, the first checkpoint came only at the end of the input");
}

/// A replay of 12 files of 10 000 disordered records, and after the 4th and the 8th a file
/// of 500 records from the start of the file before it: each is late as a whole.
fn replay_with_late_files(dir: &Path) -> String {
    let records = 10_000;
    let table = replay_of(dir, records);
    for file in [3u64, 7] {
        let start = format!("start_ms={}", 1_700_000_000_001 + file * records * 1_000);
        let out = dir.join("market_data").join(format!("f{file:02}b.parquet"));
        freshet_ok(&[
            "gen",
            "market_data",
            "--records",
            "500",
            "--set",
            &start,
            "--out",
            out.to_str().unwrap(),
        ]);
    }
    table
}

/// The late output of a run that dies at fail points or is killed at random moments, and is
/// resumed, holds each record the uninterrupted run drops as late once: it is committed
/// with the checkpoints, each late record in the part of the checkpoint whose barrier came
/// after it. A window aggregation, an OVER window and an interval join drop them.
#[test]
fn the_late_output_of_a_query_killed_and_resumed_holds_every_late_record_once() {
    let dir = temporary("late-output");
    let table = replay_with_late_files(dir.path());
    for (case, sql) in [S3A, S1, INTERVAL_JOIN].into_iter().enumerate() {
        let reference = dir.path().join(format!("reference-late-{case}.csv"));
        let reference_late = format!("csv={}", reference.display());
        freshet_ok(&[
            "query",
            sql,
            "--table",
            &table,
            "--partitions",
            "2",
            "--strategy",
            "hash",
            "-o",
            "null",
            "--late-output",
            &reference_late,
        ]);
        let expected_late = sorted_lines(&std::fs::read_to_string(&reference).unwrap());
        assert!(
            expected_late.len() > 500,
            "case {case} drops too few records"
        );
        let expected = uninterrupted(dir.path(), sql, &table, "2");
        let interrupted = ["after_state_write:3", "before_manifest:2", "after_commit:1"]
            .into_iter()
            .map(Some)
            .chain([None]);
        for (run, point) in interrupted.enumerate() {
            let parts = dir.path().join(format!("out-{case}-{run}"));
            let late_parts = dir.path().join(format!("late-{case}-{run}"));
            let out = format!("parquet={}", parts.display());
            let late = format!("parquet={}", late_parts.display());
            let checkpoints = dir.path().join(format!("checkpoints-{case}-{run}"));
            let mut args = checkpointed_args(sql, &table, "2", &out, checkpoints.to_str().unwrap());
            args.extend(["--late-output", &late]);
            match point {
                Some(point) => {
                    // On a loaded machine the replay may be read whole before the
                    // checkpoint the fail point names: start afresh, a few times.
                    let died = (0..3).any(|_| {
                        remove_dirs(&[&parts, &late_parts, &checkpoints]);
                        dies_at(&args, point)
                    });
                    assert!(died, "{sql} passed fail point {point}");
                    freshet_ok(&args);
                }
                None => {
                    run_killing(&args, &delays(case as u64 + 31, 4));
                }
            }
            assert_eq!(committed(dir.path(), &parts), expected, "{sql}: {point:?}");
            let late_committed = committed(dir.path(), &late_parts);
            assert!(
                late_committed == expected_late,
                "the late records of {sql}, {point:?}: {} committed, {} expected",
                late_committed.len(),
                expected_late.len()
            );
        }
    }
    // An ORDER BY led by the event time sorts as the stream goes in a checkpointed run, and
    // drops late records as windows do: they reach the late output too.
    let sorted =
        "SELECT trade_time, symbol, price FROM market_data ORDER BY trade_time, symbol, price";
    let late_parts = dir.path().join("late-sorted");
    let late = format!("parquet={}", late_parts.display());
    let out = format!("parquet={}", dir.path().join("out-sorted").display());
    let checkpoints = dir.path().join("checkpoints-sorted");
    let mut args = checkpointed_args(sorted, &table, "2", &out, checkpoints.to_str().unwrap());
    args.extend(["--late-output", &late]);
    let said = freshet(&args);
    let said = String::from_utf8_lossy(&said.stderr);
    let dropped = late_dropped(&said);
    assert!(dropped >= 1_000, "{said}");
    assert!(
        said.contains(&format!("({dropped} written to the late output)")),
        "{said}"
    );
    assert_eq!(committed(dir.path(), &late_parts).len() as u64, dropped + 1);
}

#[test]
fn a_checkpoint_taken_as_the_input_ends_keeps_the_late_count() {
    let dir = temporary("late-at-end");
    let table = replay_with_late_records(dir.path(), 300);
    let expected = late_records_of_a_whole_run(dir.path(), &table);
    let parts = dir.path().join("out");
    let out = format!("parquet={}", parts.display());
    let checkpoints = dir.path().join("checkpoints");
    let mut args = checkpointed_args(S3A, &table, "2", &out, checkpoints.to_str().unwrap());
    // The first barrier is due once every record was read, and each operator partition
    // waits a moment after its input ended: the barrier is placed then, past what the
    // ended partitions read, and the run dies once that checkpoint is committed.
    let every_record = (12 * 300 + 4000).to_string();
    *args.last_mut().unwrap() = &every_record;
    // (On a machine so loaded that the coordinator did not look during the wait, the only
    // checkpoint marks the run finished, with nothing to resume: run again.)
    for _ in 0..3 {
        remove_dirs(&[&checkpoints, &parts]);
        assert!(
            dies_at_pausing(&args, "after_commit:1", Some("operator_end:1000")),
            "the run passed its first commit"
        );
        let resumed = freshet(&args);
        let said = String::from_utf8_lossy(&resumed.stderr);
        assert!(resumed.status.success(), "{said}");
        if said.contains("nothing to resume") {
            continue;
        }
        assert!(said.contains("; 0 records read"), "{said}");
        assert_eq!(late_dropped(&said), expected, "{said}");
        return;
    }
    panic!("in three runs, no barrier was placed while the operators ended");
}

#[test]
fn a_resumed_lookup_reads_its_table_whole() {
    let dir = temporary("lookups");
    // Long enough that the run dies with most of the replay still to read.
    let table = replay_of(dir.path(), 40_000);
    let symbols_file = dir.path().join("symbols.csv");
    std::fs::write(
        &symbols_file,
        "symbol,name\nSYM0,zero\nSYM1,one\nSYM2,two\nSYM3,three\nSYM5,five\n",
    )
    .unwrap();
    let symbols = format!("symbols={}", symbols_file.display());
    let lookup = "SELECT m.symbol, s.name, m.price, m.trade_time FROM market_data m JOIN symbols s ON m.symbol = s.symbol";
    let windows_over_a_lookup = "SELECT name, window_start, COUNT(*) AS n, SUM(quantity) AS q FROM (SELECT s.name, m.quantity, m.trade_time FROM market_data m JOIN symbols s ON m.symbol = s.symbol) GROUP BY name WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
    for (case, sql) in [lookup, windows_over_a_lookup].into_iter().enumerate() {
        let reference = dir.path().join(format!("reference-{case}.csv"));
        let reference_out = format!("csv={}", reference.display());
        freshet_ok(&[
            "query",
            sql,
            "--table",
            &table,
            "--table",
            &symbols,
            "--partitions",
            "2",
            "--strategy",
            "hash",
            "-o",
            &reference_out,
        ]);
        let expected = sorted_lines(&std::fs::read_to_string(reference).unwrap());
        let parts = dir.path().join(format!("out-{case}"));
        let out = format!("parquet={}", parts.display());
        let checkpoints = dir.path().join(format!("checkpoints-{case}"));
        let mut args = checkpointed_args(sql, &table, "2", &out, checkpoints.to_str().unwrap());
        args.extend(["--table", &symbols]);
        dies_then_resumes_writing_rows(&args, "after_commit:1", &[&checkpoints, &parts]);
        assert_eq!(committed(dir.path(), &parts), expected, "{sql}");
    }
}

#[test]
fn a_resume_that_differs_from_the_checkpointed_run_is_refused_with_what_differs() {
    let dir = temporary("refusals");
    let table = replay(dir.path());
    let parts = dir.path().join("out");
    let out = format!("parquet={}", parts.display());
    let checkpoints: PathBuf = dir.path().join("checkpoints");
    let checkpoints = checkpoints.to_str().unwrap();
    assert!(dies_at(
        &checkpointed_args(S3A, &table, "2", &out, checkpoints),
        "after_commit:2"
    ));
    let refused = |args: Vec<&str>, expected: &str| {
        let output = freshet(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} should be refused");
        assert!(stderr.contains(expected), "{stderr}");
    };
    refused(
        checkpointed_args(S3B, &table, "2", &out, checkpoints),
        "the query differs",
    );
    refused(
        checkpointed_args(S3A, &table, "1", &out, checkpoints),
        "it was written at 2 streams, this run has 1",
    );
    let other_table = table.replace("watermark=5s", "watermark=6s");
    refused(
        checkpointed_args(S3A, &other_table, "2", &out, checkpoints),
        "registrations or the session's settings differ",
    );
    // The run it was resumes and finishes; once finished, a run again has nothing to do.
    freshet_ok(&checkpointed_args(S3A, &table, "2", &out, checkpoints));
    let again = freshet(&checkpointed_args(S3A, &table, "2", &out, checkpoints));
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to resume"));
    // Another run's output directory with no checkpoint to resume.
    let fresh = dir.path().join("fresh-checkpoints");
    refused(
        checkpointed_args(S3A, &table, "2", &out, fresh.to_str().unwrap()),
        "holds part files of another run",
    );
}

#[test]
fn what_a_checkpoint_cannot_cut_is_refused_with_a_message() {
    let dir = temporary("unsupported");
    let table = replay(dir.path());
    let out = format!("parquet={}", dir.path().join("out").display());
    let checkpoints = dir.path().join("checkpoints");
    let checkpoints = checkpoints.to_str().unwrap();
    let refused = |args: Vec<&str>, expected: &str| {
        let output = freshet(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} should be refused");
        assert!(stderr.contains(expected), "{stderr}");
    };
    for (sql, expected) in [
        (
            "SELECT symbol, price FROM market_data LIMIT 10",
            "checkpoints do not support LIMIT yet (the count of rows handed out is not kept)",
        ),
        (
            "SELECT symbol, price FROM market_data ORDER BY price",
            "checkpoints do not support ORDER BY yet unless led by an event time, ascending",
        ),
        (
            "SELECT symbol, price, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY price) AS r FROM market_data",
            "checkpoints do not support window functions (OVER) yet where they wait for the end of a bounded input",
        ),
        (
            "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
            "checkpoints do not support two-phase aggregation yet",
        ),
    ] {
        let mut args = checkpointed_args(sql, &table, "2", &out, checkpoints);
        if sql.contains("WINDOW TUMBLING") {
            args.extend(["--strategy", "two_phase"]);
        }
        refused(args, expected);
    }
    let mut round_robin = checkpointed_args(S0, &table, "2", &out, checkpoints);
    round_robin.extend(["--strategy", "round_robin"]);
    refused(
        round_robin,
        "checkpoints need every exchange to read its replay in file order",
    );
    let mut late_output = checkpointed_args(S3A, &table, "2", &out, checkpoints);
    let late = format!("csv={}", dir.path().join("out").join("late").display());
    late_output.extend(["--late-output", &late]);
    refused(
        late_output,
        "overlap: write them to different places (with a checkpoint directory each is a directory of its own part files)",
    );
    let mut same_file = vec!["query", S3A, "--table", &table, "-o", &late];
    same_file.extend(["--late-output", &late]);
    refused(same_file, "overlap: write them to different places");
    let mut args = checkpointed_args(S3A, &table, "1", &out, checkpoints);
    let last = args.len() - 1;
    args[last] = "soon";
    let output = freshet(&args);
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("checkpoint interval 'soon'"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn ctrl_c_stops_at_a_checkpoint_and_the_same_command_resumes() {
    let run = LongRun::new("interrupted", S3B);
    let args = run.args(S3B, "1M");
    let child = Command::new(env!("CARGO_BIN_EXE_freshet"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the run has opened its checkpoint directory its Ctrl-C handler is about to be
    // in place; a moment later it is reading the replay.
    while !Path::new(&run.checkpoints).exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    let signalled = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let stopped = child.wait_with_output().unwrap();
    let summary = String::from_utf8_lossy(&stopped.stderr).into_owned();
    assert_eq!(stopped.status.code(), Some(130), "{summary}");
    assert!(summary.contains("stopped at the last one"), "{summary}");
    resumes_saying(&args, "resuming from checkpoint");
    run.assert_committed_output_is_uninterrupted();
}

#[test]
fn a_corrupt_latest_checkpoint_is_passed_over_for_the_one_before_it() {
    // A checkpoint after every record read, so that the run takes one at every unit.
    let run = LongRun::new("corrupt", S3A);
    let args = run.args(S3A, "1");
    assert!(
        dies_at(&args, "after_commit:2"),
        "the run finished before its second checkpoint"
    );
    // The latest checkpoint (perhaps the one of the end) is torn: one byte of its manifest
    // changed, and its state files, if it has any, are not Arrow files.
    let checkpoints = Path::new(&run.checkpoints);
    let latest = std::fs::read_to_string(checkpoints.join("LATEST")).unwrap();
    let latest = checkpoints.join(latest.trim());
    for entry in std::fs::read_dir(&latest).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "arrow") {
            std::fs::write(&path, b"not an Arrow file").unwrap();
        }
    }
    let manifest = latest.join("MANIFEST");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replacen("epoch=", "epoch=0", 1)).unwrap();
    resumes_saying(&args, "falling back to the one before it");
    run.assert_committed_output_is_uninterrupted();
}
