//! The command line: help everywhere, generation to every format, explain, query outputs and
//! the benchmark smoke run.

use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::support::{freshet, freshet_error, freshet_ok, gen_orders};

#[test]
fn every_subcommand_has_help() {
    for command in ["query", "explain", "shell", "gen", "bench", "fuzz"] {
        let help = freshet_ok(&[command, "--help"]);
        assert!(help.contains("Usage: freshet"), "{command}: {help}");
    }
}

#[tokio::test]
async fn gen_writes_the_requested_records_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("o.parquet");
    gen_orders(&parquet, "12345", &[]);
    let ctx = SessionContext::new();
    let rows: usize = ctx
        .read_parquet(parquet.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap()
        .count()
        .await
        .unwrap();
    assert_eq!(rows, 12_345);
    for name in ["o.csv", "o.arrow", "o.jsonl"] {
        let path = dir.path().join(name);
        gen_orders(&path, "100", &[]);
        assert!(
            std::fs::metadata(&path).unwrap().len() > 100,
            "{name} is too small"
        );
    }
    let csv = std::fs::read_to_string(dir.path().join("o.csv")).unwrap();
    assert_eq!(csv.lines().count(), 101, "header and 100 records");
    assert!(csv.starts_with("order_id,customer_id,order_date,total_amount"));
}

#[test]
fn explain_shows_sources_watermark_and_partitioning() {
    let plan = freshet_ok(&[
        "explain",
        "SELECT symbol, price FROM market_data WHERE price > 120",
        "--table",
        "market_data=generator:market_data,records=unbounded,partitioned_by=symbol",
        "--watermark",
        "5s",
        "--partitions",
        "2",
    ]);
    assert!(plan.contains("emit=append"), "{plan}");
    assert!(
        plan.contains("StreamSourceExec: stream=market_data, unbounded, source_partitions=2"),
        "{plan}"
    );
    assert!(plan.contains("watermark=max(trade_time) - 5s"), "{plan}");
    assert!(plan.contains("partitioned_by=[symbol]"), "{plan}");
}

/// `EXPLAIN` written in the query shows an EMIT clause's aggregation like `freshet explain`
/// does, and refuses an EMIT clause that no aggregation takes, as the query itself would.
#[test]
fn explain_in_sql_shows_an_emit_changes_aggregation() {
    let table = "market_data=generator:market_data,records=1000";
    let plan = freshet_ok(&[
        "query",
        "EXPLAIN SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol EMIT CHANGES",
        "--table",
        table,
    ]);
    assert!(plan.contains("emit=changes"), "{plan}");
    let error = freshet_error(&[
        "query",
        "EXPLAIN SELECT symbol FROM market_data EMIT CHANGES",
        "--table",
        table,
    ]);
    assert!(
        error.contains("EMIT CHANGES needs an aggregation"),
        "{error}"
    );
}

#[test]
fn explain_shows_the_idle_timeout_of_a_windowed_query() {
    let plan = freshet_ok(&[
        "explain",
        "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
        "--table",
        "market_data=generator:market_data,records=unbounded,idle_timeout=30s",
    ]);
    assert!(plan.contains("idle_timeout=30s"), "{plan}");
    // The window call as the user wrote it, not DataFusion's display of an interval literal.
    assert!(
        plan.contains("gby=[tumble(trade_time, INTERVAL '1' MINUTE), symbol]")
            && !plan.contains("IntervalMonthDayNano"),
        "{plan}"
    );
    let error = freshet_error(&[
        "explain",
        "SELECT symbol FROM market_data",
        "--table",
        "market_data=generator:market_data,idle_timeout=0s",
    ]);
    assert!(error.contains("idle_timeout=0s"), "{error}");
}

#[test]
fn query_writes_json_lines_and_a_bounded_table() {
    let jsonl = freshet_ok(&[
        "query",
        "SELECT order_id FROM orders WHERE order_id < 3",
        "--table",
        "orders=generator:orders,records=1000",
        "--output",
        "jsonl",
        "--partitions",
        "1",
    ]);
    let mut lines: Vec<&str> = jsonl.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            r#"{"order_id":0}"#,
            r#"{"order_id":1}"#,
            r#"{"order_id":2}"#
        ]
    );
    let table = freshet_ok(&[
        "query",
        "SELECT order_id FROM orders",
        "--table",
        "orders=generator:orders,records=1000",
        "--output",
        "table=10",
    ]);
    assert!(
        table.contains("990 more rows not shown (1000 rows in all)"),
        "{table}"
    );
}

/// A JSON-lines file has no timestamp type: its ISO 8601 event times (as `freshet gen`
/// writes them) are read as times, and the replay gives the CSV replay's windows; a value
/// that is not a time fails the read in one line naming the stream.
#[test]
fn json_lines_event_times_written_as_text_are_read_as_times() {
    let dir = tempfile::tempdir().unwrap();
    let query = "SELECT trader_id, symbol, window_start, COUNT(*) AS n, SUM(quantity) AS q \
        FROM md GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
    let mut results = Vec::new();
    for name in ["md.jsonl", "md.csv"] {
        let file = dir.path().join(name);
        let out = file.to_str().unwrap();
        freshet_ok(&["gen", "market_data", "--records", "3000", "--out", out]);
        let table = format!("md={out},event_time=trade_time");
        let csv = freshet_ok(&["query", query, "--table", &table, "-o", "csv"]);
        let mut rows: Vec<String> = csv.lines().skip(1).map(str::to_string).collect();
        rows.sort();
        results.push(rows);
    }
    // 3 000 records, one a second, over 51 minute windows of 20 (trader, symbol) pairs.
    assert_eq!(results[0].len(), 1_020);
    assert_eq!(results[0], results[1]);
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"ts\":\"2024-01-01T00:00:00Z\"}\n{\"ts\":\"noon\"}\n",
    )
    .unwrap();
    let table = format!("t={},event_time=ts", bad.display());
    let line = freshet_error(&["query", "SELECT * FROM t", "--table", &table]);
    assert!(
        line.contains("reading stream 't' failed") && line.contains("noon"),
        "{line}"
    );
}

#[test]
fn a_paced_replay_runs_at_its_rate() {
    // 2 000 records at 10 000 records/s take about 0.2 s; a pacing bug either runs
    // unpaced or hangs, and this checks the output is complete either way.
    let out = freshet_ok(&[
        "query",
        "SELECT count(*) AS n FROM orders",
        "--table",
        "orders=generator:orders,records=2000,rate=10000,batch_size=100",
        "--output",
        "csv",
    ]);
    assert_eq!(out.lines().nth(1), Some("2000"), "{out}");
}

#[test]
fn bench_quick_compares_freshet_with_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let table = freshet_ok(&[
        "bench",
        "--quick",
        "--scenario",
        "S0",
        "--partitions",
        "1,2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        table.contains("DataFusion rec/s") && table.contains("ratio"),
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.contains(" S0 |")).count(),
        2,
        "{table}"
    );
    // CPU time per record beside the wall-clock figures, and its growth with the streams.
    assert!(
        table.contains("Freshet CPU ns/rec") && table.contains("DataFusion CPU ns/rec"),
        "{table}"
    );
    assert!(table.contains("- S0 from memory: 2 streams "), "{table}");
    let json = std::fs::read_to_string(json).unwrap();
    assert!(json.contains("\"freshet_cpu_seconds\": "), "{json}");
    assert!(
        json.contains("\"scenario\": \"S0\"") && json.contains("\"output_rows\": 200000"),
        "{json}"
    );
}

#[test]
fn bench_scaling_runs_s3a_over_growing_parquet_files() {
    let dir = tempfile::tempdir().unwrap();
    let table = freshet_ok(&[
        "bench",
        "--scaling",
        "--scenario",
        "S3a",
        "--source",
        "parquet",
        "--sizes",
        "2000,6000",
        "--partitions",
        "1",
        "--runs",
        "1",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(table.contains("peak RSS"), "{table}");
    // One row per size; S3a gives one row per (trader, symbol, minute): 20 per 60 records.
    assert!(
        table.contains("| S3a | 2000 |") && table.contains("| S3a | 6000 |"),
        "{table}"
    );
    assert!(
        table.contains("| 680 |") && table.contains("| 2000 | "),
        "{table}"
    );
    // The growth from the smallest size to the largest.
    assert!(table.contains("| S3a | 3.0x |"), "{table}");
    assert!(dir.path().join("market_data_6000_10sym.parquet").exists());
}

/// Every case of the scaling sweep runs and gives its rows: a session that never closes
/// emits one row per trader at the end; a changelog, an OVER window and the join one row
/// per record or pair.
#[test]
fn bench_scaling_runs_every_long_lived_state_case() {
    let table = freshet_ok(&["bench", "--scaling", "--sizes", "3000", "--runs", "1"]);
    for case in [
        "| session-final | 3000 |",
        "| session-final-any | 3000 |",
        "| session-changes | 3000 |",
        "| whole-input-window | 3000 |",
        "| long-window-changes | 3000 |",
        "| over-rows-100k | 3000 |",
        "| over-range-1d | 3000 |",
        "| over-following-100k | 3000 |",
        "| interval-join-6h | 3000 |",
    ] {
        assert!(table.contains(case), "{case} missing: {table}");
    }
    let rows = |case: &str| -> String {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("| {case} |")))
            .unwrap();
        line.split('|').nth(6).unwrap().trim().to_string()
    };
    assert_eq!(rows("session-final"), "20", "{table}");
    assert_eq!(rows("session-changes"), "3000", "{table}");
    assert_eq!(rows("over-rows-100k"), "3000", "{table}");
    let error = freshet_error(&["bench", "--scaling", "--scenario", "S9"]);
    assert!(error.contains("unknown scaling case 'S9'"), "{error}");
    // Cases separated by commas, as --sizes and --partitions take theirs.
    let two = freshet_ok(&[
        "bench",
        "--scaling",
        "--scenario",
        "session-final,S3a",
        "--sizes",
        "3000",
        "--runs",
        "1",
    ]);
    assert!(
        two.contains("| session-final | 3000 |") && two.contains("| S3a | 3000 |"),
        "{two}"
    );
}

#[test]
fn bench_latency_reports_percentiles_of_s0_s3a_and_s3b() {
    let table = freshet_ok(&["bench", "--latency", "--records", "20000", "--rate", "400k"]);
    assert!(table.contains("| p50 | p99 | max |"), "{table}");
    // S0 passes one record in a hundred; S3b gives a row per record; S3a a row per trader,
    // symbol and minute (20 pairs, one record a second).
    assert!(table.contains("| S0 | 20000 | 200 | 0.40 M/s |"), "{table}");
    assert!(
        table.contains("| S3a | 20000 | 6680 | 0.40 M/s |"),
        "{table}"
    );
    assert!(
        table.contains("| S3b | 20000 | 20000 | 0.40 M/s |"),
        "{table}"
    );
}

#[test]
fn every_record_is_counted_or_written_as_late() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("windows.csv");
    let late = dir.path().join("late.csv");
    // Disorder of up to 5 s against a watermark that allows none: many records are late.
    freshet_ok(&[
        "query",
        "SELECT window_start, COUNT(*) AS n FROM market_data WINDOW TUMBLING (1m)",
        "--table",
        "market_data=generator:market_data,records=3000,disorder_ms=5000,batch_size=1,partitions=1",
        "--partitions",
        "2",
        "--output",
        &format!("csv={}", out.display()),
        "--late-output",
        &format!("csv={}", late.display()),
    ]);
    let counted: i64 = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| line.rsplit(',').next().unwrap().parse::<i64>().unwrap())
        .sum();
    let late_rows = std::fs::read_to_string(&late).unwrap().lines().count() as i64 - 1;
    assert!(late_rows > 0, "the data should have late records");
    assert_eq!(counted + late_rows, 3000);
}

#[test]
fn hopping_windows_over_a_file_write_every_late_record() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("market_data.parquet");
    let late = dir.path().join("late.csv");
    let file_arg = file.display().to_string();
    freshet_ok(&[
        "gen",
        "market_data",
        "--records",
        "20000",
        "--set",
        "disorder_ms=20000000",
        "--out",
        &file_arg,
    ]);
    let query = "SELECT symbol, window_start, COUNT(*) AS n FROM market_data GROUP BY symbol \
                 WINDOW HOPPING (trade_time, INTERVAL '4' SECOND, INTERVAL '2' SECOND)";
    let table = format!("market_data={file_arg},event_time=trade_time");
    let common = ["--table", table.as_str(), "--partitions", "2"];
    // Without a late output the final step judges lateness from pane states.
    let plan = freshet_ok(&[&["explain", query][..], &common].concat());
    assert!(plan.contains("in panes of 2000"), "{plan}");
    let late_arg = format!("csv={}", late.display());
    let output = freshet(
        &[
            &["query", query, "-o", "null", "--late-output", &late_arg][..],
            &common,
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let dropped: usize = stderr
        .split(" late records dropped")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no late count in {stderr}"));
    assert!(dropped > 0, "the data should have late records: {stderr}");
    assert!(
        stderr.contains(&format!("({dropped} written to the late output)")),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&late).unwrap().lines().count() - 1;
    assert_eq!(written, dropped);
}

#[test]
fn explain_names_the_exchange_strategy_and_why() {
    let plan = freshet_ok(&[
        "explain",
        "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol WINDOW TUMBLING (1m)",
        "--partitions",
        "2",
        "--strategy",
        "hash",
    ]);
    assert!(
        plan.contains("StreamExchangeExec: strategy=hash([symbol@0]), partitions=2->2 (user)"),
        "{plan}"
    );
    let line = crate::support::freshet_error(&["explain", "SELECT 1", "--strategy", "scatter"]);
    assert!(line.contains("--strategy scatter"), "{line}");
}

/// Settings reach the command line: as --set, or as SET statements in a file or on stdin
/// before the query (quotes and comments may hold `;`).
#[test]
fn settings_come_from_set_flags_and_sql_files() {
    let table = "market_data=generator:market_data,records=20000";
    let query = "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol EMIT CHANGES";
    let per_record = freshet_ok(&["query", query, "--table", table, "-o", "csv"]);
    assert_eq!(
        per_record.lines().count(),
        20_001,
        "a header and a row per record"
    );
    let per_batch = freshet_ok(&[
        "query",
        query,
        "--set",
        "changes_per=batch",
        "--table",
        table,
        "-o",
        "csv",
    ]);
    assert!(per_batch.lines().count() < 100, "{per_batch}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("query.sql");
    std::fs::write(
        &file,
        format!(
            "-- one row per changed group; per batch\nSET freshet.changes_per = 'batch';\n\
             /* the query; */ {query}; -- done\n"
        ),
    )
    .unwrap();
    let from_file = freshet_ok(&[
        "query",
        "-f",
        file.to_str().unwrap(),
        "--table",
        table,
        "-o",
        "csv",
    ]);
    assert_eq!(from_file.lines().count(), per_batch.lines().count());
    let quoted = freshet_ok(&["query", "SELECT 'a;b' AS s", "-o", "csv"]);
    assert_eq!(quoted.lines().nth(1), Some("a;b"));
}

/// JSON lines keep NaN and infinities apart from NULL: as strings, with a null a missing key.
#[test]
fn json_lines_keep_nan_and_infinities_apart_from_null() {
    let out = freshet_ok(&[
        "query",
        "SELECT CAST('NaN' AS DOUBLE) AS a, CAST('-inf' AS DOUBLE) AS b, \
         CAST(NULL AS DOUBLE) AS c, 1.5 AS d, CAST('inf' AS REAL) AS e",
        "-o",
        "jsonl",
    ]);
    assert_eq!(
        out.trim(),
        r#"{"a":"NaN","b":"-Infinity","d":1.5,"e":"Infinity"}"#
    );
}

/// A JSON-lines file is a stream like any other: `freshet gen … --out x.jsonl` reads back.
#[test]
fn json_lines_files_are_read_as_streams() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("orders.jsonl");
    gen_orders(&file, "1000", &[]);
    let table = format!("o={}", file.display());
    let out = freshet_ok(&[
        "query",
        "SELECT COUNT(*) AS n, SUM(order_id) AS s FROM o",
        "--table",
        &table,
        "--partitions",
        "2",
        "-o",
        "csv",
    ]);
    assert_eq!(out, "n,s\n1000,499500\n");
}

/// Arrow's "Timestamp out of range" becomes an error that names the column and the sum.
#[test]
fn a_timestamp_out_of_range_names_its_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ns.csv");
    std::fs::write(
        &file,
        "k,ts\nb,1700000000000000000\na,9223372036854000000\n",
    )
    .unwrap();
    let table = format!("t={},event_time=ts,event_time_unit=ns", file.display());
    let error = freshet_error(&[
        "query",
        "SELECT k, ts + INTERVAL '30' DAY AS later FROM t",
        "--table",
        &table,
        "-o",
        "csv=/dev/null",
    ]);
    assert!(
        error.contains("column later = `ts + INTERVAL '30' DAY` (a timestamp in nanoseconds)"),
        "{error}"
    );
    let error = freshet_error(&[
        "query",
        "SELECT k, window_end FROM t GROUP BY k, tumble(ts, INTERVAL '100' DAY)",
        "--table",
        &table,
        "-o",
        "null",
    ]);
    assert!(
        error.contains("column window_end = `window_start + INTERVAL '100' DAY`"),
        "{error}"
    );
}

/// The shell runs statements in one session: SET holds for the next query, `\d` lists the
/// streams, an error does not end the session, EXPLAIN prints the plan.
#[test]
fn the_shell_runs_statements_in_one_session() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut shell = Command::new(env!("CARGO_BIN_EXE_freshet"))
        .args(["shell", "--table", "md=generator:market_data,records=1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"\\d\nSELECT nope FROM md;\nEXPLAIN SELECT symbol FROM md WHERE price > 1;\n\
              SET freshet.emit = 'changes';\nSELECT symbol, COUNT(*) AS n\n  FROM md GROUP BY symbol;\n\
              DESCRIBE md;\n\\q\nSELECT 1;\n",
        )
        .unwrap();
    let output = shell.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let md = stdout
        .lines()
        .find(|l| l.starts_with("md "))
        .unwrap_or_default();
    let cells: Vec<&str> = md.split('|').map(str::trim).collect();
    assert_eq!(
        cells[..4],
        ["md", "generator MarketData", "true", "trade_time"],
        "{stdout}"
    );
    assert!(stderr.contains("error: No field named nope"), "{stderr}");
    // A changelog: a row per record (the terminal table shows 40 of them).
    assert!(
        stderr.contains("1000 rows out; 1000 records read"),
        "{stderr}"
    );
    assert!(
        stdout.contains("trade_time | Timestamp(ms) | false"),
        "{stdout}"
    );
    assert!(stdout.contains("StreamFilterExec"), "{stdout}");
    assert!(
        !stdout.contains("Int64(1)"),
        "the statement after \\q ran: {stdout}"
    );
}

/// `--event-time` names the event time of every given stream that has such a column: a
/// bounded side table without it (Nexmark q13's) is read as a table; a column no given stream
/// has is refused, naming the columns there are.
#[test]
fn a_global_event_time_applies_to_the_streams_that_have_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nexmark");
    freshet_ok(&[
        "gen",
        "nexmark",
        "--events",
        "20000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let bid = format!("bid={}", out.join("bid.parquet").display());
    let side_input = format!("side_input={}", out.join("side_input.csv").display());
    let joined = freshet_ok(&[
        "query",
        "SELECT COUNT(*) AS n FROM bid JOIN side_input ON bid.auction % 10000 = side_input.key",
        "--table",
        &bid,
        "--table",
        &side_input,
        "--event-time",
        "date_time",
        "-o",
        "csv",
    ]);
    assert_eq!(joined.lines().last(), Some("18400"), "{joined}");
    let refused = freshet_error(&[
        "query",
        "SELECT COUNT(*) AS n FROM side_input",
        "--table",
        &side_input,
        "--event-time",
        "date_time",
    ]);
    assert!(
        refused.contains("stream 'side_input': event-time column 'date_time' does not exist; columns are key, value"),
        "{refused}"
    );
}

/// EXPLAIN names a changelog's key, and which of its columns the query does not select (a
/// consumer could not apply such rows by key), following the key through aliases and
/// subqueries.
#[test]
fn explain_says_which_key_columns_of_a_changelog_are_not_selected() {
    let header = |sql: &str, extra: &[&str]| {
        let mut args = vec!["explain", sql];
        args.extend(extra);
        let plan = freshet_ok(&args);
        plan.lines().next().unwrap_or_default().to_string()
    };
    let windowed = "SELECT trader_id, symbol, COUNT(*) AS n FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";
    let line = header(windowed, &[]);
    assert!(
        line.contains("keyed by (window_start, trader_id, symbol)")
            && line.contains("window_start not selected, so its rows cannot be applied by key"),
        "{line}"
    );
    let renamed = "SELECT trader_id AS t, window_start AS w, symbol, COUNT(*) AS n FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";
    let line = header(renamed, &[]);
    assert!(!line.contains("not selected"), "{line}");
    let outer = "SELECT n FROM (SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol EMIT CHANGES) WHERE n > 3";
    let line = header(outer, &[]);
    assert!(line.contains("; symbol not selected"), "{line}");
    // Nexmark q6: a window over each auction's top bid, selecting the seller alone.
    let q6: Vec<&str> = include_str!("../../bench/nexmark/q6.sql")
        .lines()
        .filter(|line| !line.starts_with("--"))
        .collect();
    let line = header(&q6.join("\n"), &["--set", "emit=changes"]);
    assert!(
        line.contains("keyed by (id, seller)") && line.contains("; id not selected"),
        "{line}"
    );
}

/// The program runs in small pages (`src/memory.rs`), unless the user asks mimalloc for huge
/// ones (`MIMALLOC_ALLOW_THP`); read from the running process's `/proc` status.
#[cfg(target_os = "linux")]
#[test]
fn the_program_runs_without_transparent_huge_pages_unless_asked() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    for (asked, expected) in [(None, "0"), (Some("1"), "1")] {
        let mut command = crate::support::endless_csv_query();
        command.stderr(Stdio::null());
        if let Some(value) = asked {
            command.env("MIMALLOC_ALLOW_THP", value);
        } else {
            command.env_remove("MIMALLOC_ALLOW_THP");
        }
        let mut child = command.spawn().unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let thp_enabled = status
            .lines()
            .find_map(|line| line.strip_prefix("THP_enabled:"))
            .map(str::trim);
        assert_eq!(thp_enabled, Some(expected), "asked {asked:?}: {status}");
    }
}
