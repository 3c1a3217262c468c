//! Bad input gives a clear error naming the culprit, never a panic: one test per case, through
//! the library and through the command line (one line on stderr, non-zero exit).

use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};

use crate::support::{
    endless_market_data, freshet, freshet_error, freshet_ok, gen_orders, planning_error,
};

fn orders_context() -> StreamingContext {
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_generator(
        "orders",
        GeneratorSpec::new(GeneratorKind::Orders, Some(1_000)),
        StreamOptions::default(),
    )
    .unwrap();
    ctx
}

#[tokio::test]
async fn unknown_table() {
    let error = planning_error(&orders_context(), "SELECT * FROM shipments").await;
    assert!(
        error.contains("shipments") && error.contains("not found"),
        "{error}"
    );
    let line = freshet_error(&["query", "SELECT * FROM shipments"]);
    assert!(line.contains("shipments"), "{line}");
}

#[tokio::test]
async fn unknown_column() {
    let error = planning_error(&orders_context(), "SELECT colour FROM orders").await;
    assert!(error.contains("colour"), "{error}");
    let line = freshet_error(&["query", "SELECT colour FROM orders"]);
    assert!(line.contains("colour"), "{line}");
}

#[tokio::test]
async fn missing_file() {
    let ctx = StreamingContext::new();
    let error = ctx
        .register_parquet("t", "/no/such/orders.parquet", StreamOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not found: /no/such/orders.parquet"),
        "{error}"
    );
    let line = freshet_error(&[
        "query",
        "SELECT * FROM t",
        "--table",
        "t=/no/such/orders.parquet",
    ]);
    assert!(line.contains("/no/such/orders.parquet"), "{line}");
}

#[tokio::test]
async fn corrupt_parquet_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.parquet");
    std::fs::write(&path, b"these bytes are not a parquet file at all").unwrap();
    let ctx = StreamingContext::new();
    let error = ctx
        .register_parquet("t", path.to_str().unwrap(), StreamOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("broken.parquet is not a readable Parquet file"),
        "{error}"
    );
    let table = format!("t={}", path.display());
    let line = freshet_error(&["query", "SELECT * FROM t", "--table", &table]);
    assert!(line.contains("broken.parquet"), "{line}");
}

/// A Parquet file whose pages are overwritten: the decoder fails or panics on them, and the
/// query fails with one line naming the stream, never a printed panic or a short answer.
#[test]
fn corrupt_pages_fail_the_query_with_one_line_naming_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pages.parquet");
    freshet_ok(&[
        "gen",
        "market_data",
        "--records",
        "300k",
        "--out",
        path.to_str().unwrap(),
    ]);
    let mut bytes = std::fs::read(&path).unwrap();
    let length = bytes.len();
    for start in (length / 10..length - length / 10).step_by(40_000) {
        bytes[start..start + 2_000].fill(0xff);
    }
    std::fs::write(&path, bytes).unwrap();
    let table = format!("t={},event_time=trade_time", path.display());
    for sql in [
        "SELECT symbol, COUNT(*) AS n FROM t GROUP BY symbol",
        "SELECT * FROM t",
        "SELECT symbol, LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) FROM t",
    ] {
        for partitions in ["1", "2"] {
            let line = freshet_error(&[
                "query",
                sql,
                "--table",
                &table,
                "--partitions",
                partitions,
                "-o",
                "null",
            ]);
            assert!(line.contains("reading stream 't' failed"), "{sql}: {line}");
        }
    }
}

#[tokio::test]
async fn directory_of_files_with_different_schemas() {
    let dir = tempfile::tempdir().unwrap();
    gen_orders(&dir.path().join("a.parquet"), "100", &[]);
    crate::support::freshet_ok(&[
        "gen",
        "market_data",
        "--records",
        "100",
        "--out",
        dir.path().join("b.parquet").to_str().unwrap(),
    ]);
    let ctx = StreamingContext::new();
    let error = ctx
        .register_parquet("t", dir.path().to_str().unwrap(), StreamOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("different schemas"), "{error}");
    assert!(
        error.contains("a.parquet") && error.contains("b.parquet"),
        "{error}"
    );
    let table = format!("t={}", dir.path().display());
    let line = freshet_error(&["query", "SELECT * FROM t", "--table", &table]);
    assert!(line.contains("different schemas"), "{line}");
}

#[test]
fn unknown_stream_option() {
    let line = freshet_error(&[
        "query",
        "SELECT * FROM orders",
        "--table",
        "orders=generator:orders,colour=blue",
    ]);
    assert!(line.contains("unknown option 'colour'"), "{line}");
    let line = freshet_error(&[
        "query",
        "SELECT * FROM orders",
        "--table",
        "orders=generator:orders,partitions=zero",
    ]);
    assert!(line.contains("partitions=zero"), "{line}");
}

#[test]
fn unknown_output_format() {
    let line = freshet_error(&["query", "SELECT * FROM orders", "--output", "xml"]);
    assert!(line.contains("unknown output format 'xml'"), "{line}");
}

#[tokio::test]
async fn event_time_column_that_is_not_a_time() {
    let ctx = StreamingContext::new();
    let options = StreamOptions {
        event_time: Some("order_date".to_string()),
        ..StreamOptions::default()
    };
    let error = ctx
        .register_generator(
            "orders",
            GeneratorSpec::new(GeneratorKind::Orders, Some(10)),
            options,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("'order_date' has type Utf8"), "{error}");
    assert!(error.contains("must be a timestamp or an Int64"), "{error}");
    let line = freshet_error(&[
        "query",
        "SELECT * FROM orders",
        "--table",
        "orders=generator:orders",
        "--event-time",
        "order_date",
    ]);
    assert!(line.contains("order_date"), "{line}");
    let line = freshet_error(&[
        "query",
        "SELECT * FROM orders",
        "--table",
        "orders=generator:orders,event_time=shipped_at",
    ]);
    assert!(line.contains("'shipped_at' does not exist"), "{line}");
}

/// Records without an event time are dropped by windows, and the run's summary says how
/// many; an empty file has no columns to name.
#[test]
fn records_without_an_event_time_are_counted_in_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.csv");
    std::fs::write(&file, "id,ts\n1,1000\n2,\n3,2500\n").unwrap();
    let table = format!("t={},event_time=ts,event_time_unit=ms", file.display());
    let output = freshet(&[
        "query",
        "SELECT window_start, COUNT(*) AS n FROM t GROUP BY WINDOW TUMBLING (ts, INTERVAL '1' SECOND)",
        "--table",
        &table,
        "-o",
        "csv",
    ]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("3 records read")
            && stderr.contains("1 records without an event time dropped"),
        "{stderr}"
    );
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    let line = freshet_error(&[
        "query",
        "SELECT * FROM t",
        "--table",
        &format!("t={},event_time=ts", empty.display()),
    ]);
    assert!(line.contains("the stream has no columns"), "{line}");
}

#[tokio::test]
async fn aggregate_without_window_on_an_unbounded_stream() {
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_generator(
        "orders",
        GeneratorSpec::new(GeneratorKind::Orders, None),
        StreamOptions::default(),
    )
    .unwrap();
    let error = planning_error(
        &ctx,
        "SELECT customer_id, count(*) FROM orders GROUP BY customer_id EMIT FINAL",
    )
    .await;
    assert!(error.contains("unbounded stream 'orders'"), "{error}");
    assert!(
        error.contains("WINDOW") && error.contains("EMIT CHANGES"),
        "{error}"
    );
}

#[test]
fn endless_generator_declared_bounded() {
    let line = freshet_error(&[
        "query",
        "SELECT * FROM orders",
        "--table",
        "orders=generator:orders,records=unbounded,bounded=true",
    ]);
    assert!(line.contains("endless"), "{line}");
}

#[test]
fn bad_command_line_arguments() {
    let line = freshet_error(&["query", "SELECT 1", "--no-such-flag"]);
    assert!(line.contains("--no-such-flag"), "{line}");
    let line = freshet_error(&[
        "gen",
        "weather",
        "--records",
        "10",
        "--out",
        "/tmp/x.parquet",
    ]);
    assert!(line.contains("unknown generator 'weather'"), "{line}");
    let line = freshet_error(&["bench", "--scenario", "S9", "--quick"]);
    assert!(line.contains("unknown scenario 'S9'"), "{line}");
    let line = freshet_error(&["query", "SELEC oops FROM orders"]);
    assert!(line.contains("SELEC"), "{line}");
}

async fn market_error(sql: &str) -> String {
    planning_error(&market_context(), sql).await
}

/// A session with the bounded `market_data` generator of 1 000 records on two streams.
fn market_context() -> StreamingContext {
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_generator(
        "market_data",
        GeneratorSpec::new(GeneratorKind::MarketData, Some(1_000)),
        StreamOptions::default(),
    )
    .unwrap();
    ctx
}

#[tokio::test]
async fn window_on_a_column_that_is_not_a_time() {
    let error = market_error(
        "SELECT COUNT(*) FROM market_data GROUP BY symbol WINDOW TUMBLING (symbol, INTERVAL '1' MINUTE)",
    )
    .await;
    assert!(
        error.contains("timestamp or integer") && error.contains("Utf8"),
        "{error}"
    );
}

#[tokio::test]
async fn zero_and_negative_window_sizes() {
    for size in ["INTERVAL '0' SECOND", "INTERVAL '-1' MINUTE"] {
        let error = market_error(&format!(
            "SELECT COUNT(*) FROM market_data WINDOW TUMBLING (trade_time, {size})"
        ))
        .await;
        assert!(error.contains("must be positive"), "{size}: {error}");
    }
    // A zero gap is named as written, not as DataFusion's normalised interval.
    for gap in ["INTERVAL '0' SECOND", "0s"] {
        let error = market_error(&format!(
            "SELECT trader_id, COUNT(*) FROM market_data GROUP BY trader_id WINDOW SESSION (trade_time, {gap})"
        ))
        .await;
        assert!(
            error.contains(&format!("a window's length must be positive, got {gap}")),
            "{gap}: {error}"
        );
    }
}

#[tokio::test]
async fn slide_larger_than_the_window() {
    let error = market_error(
        "SELECT COUNT(*) FROM market_data WINDOW SLIDING (trade_time, INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)",
    )
    .await;
    assert!(error.contains("larger than the window size"), "{error}");
}

#[tokio::test]
async fn emit_changes_without_aggregation() {
    let error = market_error("SELECT symbol, price FROM market_data EMIT CHANGES").await;
    assert!(
        error.contains("EMIT CHANGES needs an aggregation"),
        "{error}"
    );
}

/// A session's emit mode is a default for its aggregations: a query without one runs, where
/// the same mode asked for by the query's own EMIT clause is refused.
#[tokio::test]
async fn a_session_emit_mode_does_not_refuse_a_query_without_aggregation() {
    let ctx = market_context();
    ctx.session()
        .sql("SET freshet.emit = 'changes'")
        .await
        .unwrap();
    let query = ctx
        .sql("SELECT symbol, price FROM market_data WHERE price > 1")
        .await;
    assert!(query.is_ok(), "{:?}", query.err());
    let query = ctx
        .sql("SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol")
        .await;
    assert!(query.is_ok(), "{:?}", query.err());
}

#[tokio::test]
async fn unknown_aggregate_function() {
    let error = market_error(
        "SELECT symbol, median_of_medians(price) FROM market_data GROUP BY symbol WINDOW TUMBLING (1m)",
    )
    .await;
    assert!(error.contains("median_of_medians"), "{error}");
}

#[tokio::test]
async fn malformed_window_clause_says_where() {
    let error = market_error("SELECT COUNT(*) FROM market_data\nWINDOW TUMBLING trade_time").await;
    assert!(
        error.contains("malformed WINDOW TUMBLING clause at line 2, column 1"),
        "{error}"
    );
    let error =
        market_error("SELECT COUNT(*) FROM market_data WINDOW HOPPING (trade_time, 1m)").await;
    assert!(
        error.contains("expected WINDOW SLIDING ([ts_col,] size, advance)"),
        "{error}"
    );
}

#[tokio::test]
async fn session_changes_without_per_record_kernels_are_refused() {
    let error = market_error(
        "SELECT symbol, stddev(price) FROM market_data GROUP BY symbol WINDOW SESSION (trade_time, INTERVAL '30' SECOND) EMIT CHANGES",
    )
    .await;
    assert!(
        error.contains("EMIT CHANGES on SESSION windows supports COUNT, SUM, AVG, MIN and MAX"),
        "{error}"
    );
}

/// The planning error of a window query over an endless market_data stream.
async fn endless_market_error(sql: &str) -> String {
    let ctx = endless_market_data();
    planning_error(&ctx, sql).await
}

#[tokio::test]
async fn over_range_frame_on_a_non_numeric_order() {
    let error = endless_market_error(
        "SELECT SUM(price) OVER (PARTITION BY trader_id ORDER BY symbol RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) FROM market_data",
    )
    .await;
    assert!(
        error.contains("symbol") || error.contains("Utf8"),
        "{error}"
    );
    assert!(!error.contains("panicked"), "{error}");
}

#[tokio::test]
async fn over_unbounded_following_on_an_endless_stream() {
    let error = endless_market_error(
        "SELECT SUM(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) FROM market_data",
    )
    .await;
    assert!(error.contains("UNBOUNDED FOLLOWING"), "{error}");
    assert!(error.contains("n FOLLOWING"), "says what to use: {error}");
}

#[tokio::test]
async fn over_negative_frame_size() {
    let error = endless_market_error(
        "SELECT SUM(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN -3 PRECEDING AND CURRENT ROW) FROM market_data",
    )
    .await;
    assert!(error.contains("non negative"), "{error}");
}

#[tokio::test]
async fn over_absurd_frame_size() {
    let error = endless_market_error(
        "SELECT AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 1000000000000 PRECEDING AND CURRENT ROW) FROM market_data",
    )
    .await;
    assert!(error.contains("1000000000000 rows"), "{error}");
    assert!(
        error.contains("UNBOUNDED PRECEDING"),
        "suggests a fix: {error}"
    );
}

#[tokio::test]
async fn over_unsupported_window_functions() {
    for (function, named) in [
        ("NTILE(4)", "ntile"),
        ("PERCENT_RANK()", "percent_rank"),
        ("CUME_DIST()", "cume_dist"),
    ] {
        let error = endless_market_error(&format!(
            "SELECT {function} OVER (PARTITION BY symbol ORDER BY trade_time) FROM market_data"
        ))
        .await;
        assert!(error.contains(named), "{function}: {error}");
        assert!(
            error.contains("ROW_NUMBER") || error.contains("LAG"),
            "{function}: {error}"
        );
    }
}

#[tokio::test]
async fn over_descending_or_missing_order() {
    let error = endless_market_error(
        "SELECT ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time DESC) FROM market_data",
    )
    .await;
    assert!(error.contains("DESC"), "{error}");
    let error = endless_market_error(
        "SELECT ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY price) FROM market_data",
    )
    .await;
    assert!(
        error.contains("price") && error.contains("Float64"),
        "{error}"
    );
    let error =
        endless_market_error("SELECT ROW_NUMBER() OVER (PARTITION BY symbol) FROM market_data")
            .await;
    assert!(error.contains("needs ORDER BY"), "{error}");
}

#[tokio::test]
async fn settings_and_options_refuse_unknown_values() {
    let ctx = orders_context();
    for (key, value, valid) in [
        ("freshet.emit", "chnages", "'changes'"),
        ("freshet.changes_per", "row", "'record'"),
        ("freshet.partitioning_strategy", "random", "'two_phase'"),
        (
            "freshet.allowed_lateness_ms",
            "99999999999999999999",
            "milliseconds",
        ),
    ] {
        let error = ctx
            .session()
            .sql(&format!("SET {key} = '{value}'"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(value) && error.contains(valid),
            "{key}: {error}"
        );
    }
    let mut options = StreamOptions::default();
    let error = options.set("watermark", "5").unwrap_err().to_string();
    assert!(error.contains("5ms or 5s"), "{error}");
}

#[tokio::test]
async fn emit_final_without_an_aggregation_is_refused() {
    let error = planning_error(
        &orders_context(),
        "SELECT order_id FROM orders WHERE total_amount > 100 EMIT FINAL",
    )
    .await;
    assert!(error.contains("EMIT FINAL needs an aggregation"), "{error}");
}

#[tokio::test]
async fn an_event_time_windows_cannot_use_is_refused_at_registration() {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, RecordBatch};
    let batch = RecordBatch::try_from_iter(vec![(
        "ts",
        Arc::new(Int32Array::from(vec![1, 2])) as datafusion::arrow::array::ArrayRef,
    )])
    .unwrap();
    let options = StreamOptions {
        event_time: Some("ts".into()),
        ..StreamOptions::default()
    };
    let error = StreamingContext::new()
        .register_batches("t", batch.schema(), vec![batch], options)
        .unwrap_err()
        .to_string();
    assert!(error.contains("has type Int32"), "{error}");
}

#[test]
fn the_command_line_refuses_statements_that_would_have_no_effect() {
    for sql in [
        "CREATE TABLE x (a INT)",
        "DROP TABLE orders",
        "SET freshet.emit = 'changes'",
    ] {
        let line = freshet_error(&["query", sql]);
        assert!(line.contains("runs one query"), "{sql}: {line}");
    }
    let line = freshet_error(&["query", "SELECT 1", "--partitions", "30000"]);
    assert!(line.contains("expected 1 to 256 streams"), "{line}");
    let line = freshet_error(&["query", "SELECT 1", "--partitions", "257"]);
    assert!(line.contains("expected 1 to 256 streams"), "{line}");
}

/// Integer event times in seconds: with `event_time_unit=s` windows fall in the right year;
/// the unit is refused where it cannot apply.
#[tokio::test]
async fn integer_event_times_take_a_unit() {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::TimeUnit;

    let seconds = Arc::new(Int64Array::from(vec![
        1_700_000_000,
        1_700_000_030,
        1_700_000_070,
    ]));
    let batch = RecordBatch::try_from_iter([("ts", seconds as ArrayRef)]).unwrap();
    let options = StreamOptions {
        event_time: Some("ts".into()),
        event_time_unit: Some(TimeUnit::Second),
        ..StreamOptions::default()
    };
    let ctx = StreamingContext::with_partitions(1);
    ctx.register_batches("t", batch.schema(), vec![batch], options.clone())
        .unwrap();
    let sql = "SELECT window_start, COUNT(*) AS n FROM t \
        WHERE ts >= TIMESTAMP '2023-11-14 22:13:30' \
        GROUP BY tumble(ts, INTERVAL '1' MINUTE)";
    let rows: Vec<String> = crate::support::result_cells(&ctx, sql)
        .await
        .into_iter()
        .map(|cells| cells.join("|"))
        .collect();
    assert_eq!(rows, ["2023-11-14T22:13:00|1", "2023-11-14T22:14:00|1"]);

    let millis = Arc::new(TimestampMillisecondArray::from(vec![1_000]));
    let timestamps = RecordBatch::try_from_iter([("ts", millis as ArrayRef)]).unwrap();
    let error = StreamingContext::new()
        .register_batches("t", timestamps.schema(), vec![timestamps], options)
        .unwrap_err()
        .to_string();
    assert!(error.contains("carries its own unit"), "{error}");
}

/// A reader that goes away (`freshet query … | head -1`) ends the run quietly with success.
#[test]
fn a_closed_output_pipe_ends_the_run_with_success() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let mut child = crate::support::endless_csv_query()
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("symbol,"), "{first}");
    let finished = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&finished.stderr);
    assert!(finished.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A deeply nested expression is planned on a large stack, not a stack overflow (500 terms
/// overflowed the default stack; 4 000 work too, but DataFusion's planning of them is
/// quadratic and takes minutes in the dev profile).
#[test]
fn a_deeply_nested_expression_does_not_overflow_the_stack() {
    let sum = vec!["quantity"; 500].join(" + ");
    let sql = format!("SELECT {sum} AS s FROM market_data");
    let output = crate::support::freshet(&["explain", &sql]);
    assert!(
        output.status.code().is_some_and(|code| code <= 1),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Plans whose state an endless stream would grow without bound are refused with advice: a
/// join keeping an endless side, an IN subquery over one, a hop putting millions of windows
/// on every record. A lookup of an endless stream into a bounded table runs.
#[tokio::test]
async fn unbounded_state_is_refused_with_advice() {
    let ctx = endless_market_data();
    for (sql, clause) in [
        (
            "SELECT m.symbol, COUNT(*) AS n FROM market_data m JOIN market_data o \
             ON m.symbol = o.symbol GROUP BY m.symbol EMIT CHANGES",
            "a join of two unbounded streams",
        ),
        (
            "SELECT symbol FROM market_data \
             WHERE symbol IN (SELECT symbol FROM market_data WHERE quantity > 1000)",
            "an IN / EXISTS subquery",
        ),
    ] {
        let error = planning_error(&ctx, sql).await;
        assert!(
            error.contains(clause)
                && error.contains("unbounded stream 'market_data'")
                && error.contains("bounded replays"),
            "{sql}: {error}"
        );
    }
    let error = planning_error(
        &ctx,
        "SELECT window_start, COUNT(*) AS n FROM market_data \
         GROUP BY hop(trade_time, INTERVAL '1' MILLISECOND, INTERVAL '1' HOUR)",
    )
    .await;
    assert!(error.contains("3600000 windows"), "{error}");

    ctx.register_generator(
        "orders",
        freshet::GeneratorSpec::new(freshet::GeneratorKind::Orders, Some(1_000)),
        StreamOptions::default(),
    )
    .unwrap();
    let lookup = "SELECT m.symbol, o.order_id FROM orders o JOIN market_data m \
        ON m.quantity = o.customer_id";
    assert!(
        ctx.sql(lookup).await.is_ok(),
        "a lookup into a bounded table plans"
    );
}

/// An output file that is an input (or inside an input directory) is refused before anything
/// is written: the input stays as it was.
#[test]
fn writing_the_output_onto_an_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "a,b\n1,2\n").unwrap();
    let table = format!("t={}", input.display());
    for output in [
        format!("csv={}", input.display()),
        format!("parquet={}", dir.path().join("out.parquet").display()),
    ] {
        let directory = format!("d={}", dir.path().display());
        let line = freshet_error(&[
            "query",
            "SELECT * FROM t",
            "--table",
            &table,
            "--table",
            &directory,
            "-o",
            &output,
        ]);
        assert!(line.contains("is the input of stream"), "{line}");
    }
    assert_eq!(std::fs::read_to_string(&input).unwrap(), "a,b\n1,2\n");
}

/// An aggregate over a column of the wrong type names the function and the type, on one line.
#[test]
fn an_aggregate_over_the_wrong_type_says_so_in_one_line() {
    let line = freshet_error(&["query", "SELECT SUM(symbol) FROM market_data"]);
    assert!(
        line.contains("sum() does not take an argument of type String") && line.len() < 200,
        "{line}"
    );
}

/// A last statement that is not a query is refused with the way to say it; a misspelt query is
/// a syntax error with its position, without DataFusion's category prefixes.
#[test]
fn statements_that_are_not_queries_and_syntax_errors_are_told_apart() {
    let table = "--table=md=generator:market_data,records=10";
    let line = freshet_error(&["query", "SET freshet.emit = 'changes'", table]);
    assert!(line.contains("--set KEY=VALUE"), "{line}");
    let line = freshet_error(&["query", "CREATE TABLE t (a INT)", table]);
    assert!(line.contains("--table"), "{line}");
    let line = freshet_error(&["query", "SELEC symbol FROM md", table]);
    assert!(
        line.starts_with("error: syntax error: ") && line.contains("SELEC at Line: 1, Column: 1"),
        "{line}"
    );
    let line = freshet_error(&["query", "SELECT colour FROM md", table]);
    assert!(line.starts_with("error: No field named colour"), "{line}");
}

/// A bad record deep in a text file is named by its file and line (arrow's decoders number
/// lines from the start of the byte range each reads), and only the columns the query reads
/// are parsed.
#[test]
fn a_bad_record_deep_in_a_text_file_is_named_by_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("symbol,price,trade_time\n");
    let mut jsonl = String::new();
    for i in 0..40_000u64 {
        let time = 1_700_000_000_000 + i * 1_000;
        csv.push_str(&format!("S{},{}.5,{time}\n", i % 7, i % 100));
        jsonl.push_str(&format!(
            "{{\"symbol\":\"S{}\",\"price\":{}.5,\"trade_time\":{time}}}\n",
            i % 7,
            i % 100
        ));
    }
    csv.push_str("S1,not a price,1700040000000\nS2,1.5\n");
    jsonl.push_str("{\"symbol\":\"S1\",\"price\":\"not a price\",\"trade_time\":1}\n");
    let csv_file = dir.path().join("trades.csv");
    let jsonl_file = dir.path().join("trades.jsonl");
    std::fs::write(&csv_file, csv).unwrap();
    std::fs::write(&jsonl_file, jsonl).unwrap();
    let error = |file: &std::path::Path, sql: &str, partitions: &str| {
        freshet_error(&[
            "query",
            sql,
            "--table",
            &format!(
                "t={},event_time=trade_time,event_time_unit=ms",
                file.display()
            ),
            "--partitions",
            partitions,
            "-o",
            "null",
        ])
    };
    for partitions in ["1", "2"] {
        let line = error(
            &csv_file,
            "SELECT symbol, SUM(price) FROM t GROUP BY symbol",
            partitions,
        );
        assert!(
            line.contains("trades.csv, line 40002: ")
                && line.contains("'not a price' as type 'Float64' for column 1 ('price')"),
            "{line}"
        );
        // The price is not read: the first bad record is the short one.
        let line = error(
            &csv_file,
            "SELECT symbol, COUNT(*) FROM t GROUP BY symbol",
            partitions,
        );
        assert!(
            line.contains("trades.csv, line 40003: incorrect number of fields"),
            "{line}"
        );
        let line = error(&jsonl_file, "SELECT SUM(price) FROM t", partitions);
        assert!(
            line.contains("trades.jsonl, line 40001: ") && line.contains("'price'"),
            "{line}"
        );
    }
    let bad_json = dir.path().join("bad.jsonl");
    std::fs::write(&bad_json, "{\"a\":1}\n{\"a\":\n").unwrap();
    let line = freshet_error(&[
        "query",
        "SELECT * FROM t",
        "--table",
        &format!("t={}", bad_json.display()),
    ]);
    assert!(line.contains("bad.jsonl, line 2: Not valid JSON"), "{line}");
}

/// What a new user hit that was accepted without a word: each is now an error that says what
/// to do.
#[tokio::test]
async fn silent_acceptances_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A directory of mixed formats was read as its CSV files only.
    std::fs::write(dir.path().join("a.csv"), "id\n1\n").unwrap();
    gen_orders(&dir.path().join("part0.parquet"), "10", &[]);
    let table = format!("t={}", dir.path().display());
    let line = freshet_error(&["query", "SELECT * FROM t", "--table", &table]);
    assert!(line.contains(".csv and .parquet"), "{line}");
    // Another generator's option was ignored.
    let line = freshet_error(&[
        "query",
        "SELECT * FROM o",
        "--table",
        "o=generator:orders,symbols=3",
    ]);
    assert!(
        line.contains("a parameter of generator market_data"),
        "{line}"
    );
    // An empty partitioned_by declared nothing.
    let line = freshet_error(&[
        "query",
        "SELECT * FROM o",
        "--table",
        "o=generator:orders,partitioned_by=",
    ]);
    assert!(line.contains("partitioned_by"), "{line}");
    // A bench mode's output files were not written.
    let line = freshet_error(&["bench", "--latency", "--json", "/tmp/never.json"]);
    assert!(line.contains("not --json"), "{line}");
    // A timestamp out of range printed an ERROR cell and exited 0.
    let line = freshet_error(&[
        "query",
        "SELECT to_timestamp_seconds(9223372036854775) AS t",
    ]);
    assert!(line.contains("column 't' cannot be shown"), "{line}");
    // Output to a full disk named no file.
    let line = freshet_error(&["query", "SELECT 1 AS a", "-o", "csv=/dev/full"]);
    assert!(line.contains("writing /dev/full failed"), "{line}");
}

#[test]
fn a_query_before_the_last_statement_of_a_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.sql");
    std::fs::write(&file, "SELECT 1 AS a; SELECT 2 AS b").unwrap();
    let line = freshet_error(&["query", "-f", file.to_str().unwrap()]);
    assert!(line.contains("statement 1 of 2 is a query too"), "{line}");
}

#[tokio::test]
async fn unclear_errors_say_what_to_write() {
    let ctx = endless_market_data();
    for (sql, expected) in [
        (
            "SELECT DISTINCT symbol FROM market_data EMIT FINAL",
            "SELECT DISTINCT or UNION",
        ),
        (
            "SELECT symbol FROM market_data UNION SELECT symbol FROM market_data EMIT FINAL",
            "SELECT DISTINCT or UNION",
        ),
        (
            "SELECT COUNT(*) FROM market_data GROUP BY WINDOW TUMBLING (now(), INTERVAL '1' MINUTE)",
            "must be a column of the stream",
        ),
        (
            "SELECT COUNT(*) FROM market_data GROUP BY WINDOW TUMBLING (-1m)",
            "must be positive, got -1m",
        ),
        (
            "SELECT symbol, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY price) AS r FROM market_data",
            "a top-N",
        ),
        (
            "SELECT symbol FROM market_data LIMIT -1",
            "LIMIT must be >= 0",
        ),
        (
            "SELECT a.symbol FROM market_data a JOIN market_data b ON a.symbol = b.symbol AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' MONTH AND a.trade_time",
            "INTERVAL '1' MONTH, whose length varies with the calendar",
        ),
        (
            "SELECT *, COUNT(*) FROM market_data GROUP BY WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
            "list them rather than *",
        ),
    ] {
        let error = planning_error(&ctx, sql).await;
        assert!(error.contains(expected), "{sql}: {error}");
        assert!(
            !error.contains("Optimizer rule") && !error.contains("IntervalMonthDayNano"),
            "{sql}: {error}"
        );
    }
    // A declared event time in mixed case is found by the window shorthand.
    let ctx = StreamingContext::with_partitions(1);
    let (schema, batches) =
        crate::support::id_time_batches_named("id", "EventTime", vec![(vec![1], vec![Some(0)])]);
    let options = StreamOptions {
        event_time: Some("EventTime".to_string()),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", schema, batches, options).unwrap();
    let cells = crate::support::result_cells(
        &ctx,
        "SELECT COUNT(*) AS n FROM t GROUP BY WINDOW TUMBLING (1m)",
    )
    .await;
    assert_eq!(cells, vec![vec!["1".to_string()]]);
    // An unknown setting names the ones meant.
    let line = freshet_error(&["query", "SELECT 1", "--set", "freshet.allowed_lateness=5s"]);
    assert!(
        line.contains("did you mean freshet.allowed_lateness_ms"),
        "{line}"
    );
}

#[tokio::test]
async fn an_arrow_ipc_stream_file_is_read() {
    use datafusion::arrow::ipc::writer::StreamWriter;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.arrow");
    let (schema, batches) = crate::support::id_time_batches_named(
        "id",
        "ts",
        vec![
            (vec![1, 2], vec![Some(0), Some(1_000)]),
            (vec![3], vec![Some(2_000)]),
        ],
    );
    let mut writer = StreamWriter::try_new(std::fs::File::create(&path).unwrap(), &schema).unwrap();
    for batch in &batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_files("t", path.to_str().unwrap(), None, StreamOptions::default())
        .await
        .unwrap();
    let cells = crate::support::result_cells(&ctx, "SELECT SUM(id) AS s FROM t").await;
    assert_eq!(cells, vec![vec!["6".to_string()]]);
}

/// DataFusion 55's physical planner panics on some window queries (a RANGE frame with an
/// offset beside another window over the same PARTITION BY expression): the query fails
/// with the panic's message, and the process goes on.
#[tokio::test]
async fn a_panic_in_datafusions_planner_is_an_error() {
    let sql = "SELECT MIN(quantity) OVER (PARTITION BY quantity % 2 ORDER BY trade_time RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS w0, LAG(quantity, 1, -1) OVER (PARTITION BY quantity % 2 ORDER BY trade_time) AS w2 FROM market_data";
    match market_context().sql(sql).await {
        Ok(_) => {}
        Err(error) => assert!(
            error.to_string().contains("planning the query failed"),
            "{error}"
        ),
    }
}
