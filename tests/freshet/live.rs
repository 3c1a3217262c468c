//! Endless, paced streams behave as a user watching them expects: rows leave as they come,
//! through filters too, and windows close as the source's event time passes them, even when
//! a filter or a lookup empties a source partition. Rows are judged by arrival times against each
//! record's due time, relative to the first row: 90% within half a second tells a stream that
//! passes rows on from one that holds them back (for seconds, or until a batch fills), with
//! room for a loaded machine. How low the latency is, is measured by `freshet bench
//! --latency`, not here.

use std::time::{Duration, Instant};

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::TimestampMillisecondType;
use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
use futures::StreamExt;

/// How late 90% of the rows may leave: far below the seconds a held-back row waits.
const MAX_P90_LATENESS: Duration = Duration::from_millis(500);

/// The generator's first event time (`trade_time` of record 0).
const START_MS: i64 = 1_700_000_000_000;

/// An endless market_data generator paced at `rate` records/s, one record per `step_ms`.
fn paced(ctx: &StreamingContext, rate: f64, step_ms: i64, batch_size: usize, partitions: usize) {
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, None);
    spec.step_ms = step_ms;
    spec.batch_size = batch_size;
    let options = StreamOptions {
        partitions: Some(partitions),
        pacing: freshet::Pacing::RecordsPerSecond(rate),
        bounded: Some(false),
        ..StreamOptions::default()
    };
    ctx.register_generator("market_data", spec, options)
        .unwrap();
}

/// The first `count` rows of `sql` with their arrival times; the query's first column must be
/// a millisecond timestamp.
async fn arrivals(ctx: &StreamingContext, sql: &str, count: usize) -> Vec<(i64, Instant)> {
    let mut stream = ctx.sql(sql).await.unwrap().execute_merged().unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < count {
        let batch: RecordBatch = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{sql}: only {} rows in 30 s", seen.len()))
            .expect("an endless stream")
            .unwrap();
        let now = Instant::now();
        let times = batch.column(0).as_primitive::<TimestampMillisecondType>();
        seen.extend(times.values().iter().map(|t| (*t, now)));
    }
    seen
}

/// How late each row arrived after it was due, relative to the first row: `due` gives a
/// row's due time after the first's from its event time.
fn lateness(rows: &[(i64, Instant)], due: impl Fn(i64) -> Duration) -> Vec<Duration> {
    let (first_time, first_arrival) = rows[0];
    let mut late: Vec<Duration> = rows
        .iter()
        .map(|(time, arrival)| {
            let expected = first_arrival + due(*time) - due(first_time);
            arrival.saturating_duration_since(expected)
        })
        .collect();
    late.sort();
    late
}

#[tokio::test]
async fn rows_that_pass_a_selective_filter_leave_when_they_are_due() {
    // 1 000 records/s, one source partition: record i is due i ms after record 0. One record
    // in a hundred passes (ten in a row every thousand).
    let ctx = StreamingContext::with_partitions(1);
    paced(&ctx, 1_000.0, 1_000, 8_192, 1);
    let rows = arrivals(
        &ctx,
        "SELECT trade_time, quantity FROM market_data WHERE quantity < 110",
        30,
    )
    .await;
    let record = |time: i64| (time - START_MS) / 1_000;
    assert_eq!(record(rows[29].0), 2_009, "the passing records, in order");
    let late = lateness(&rows, |time| Duration::from_millis(record(time) as u64));
    let p90 = late[late.len() * 9 / 10];
    assert!(
        p90 < MAX_P90_LATENESS,
        "90% of rows should leave within half a second of being due: {late:?}"
    );
}

#[tokio::test]
async fn windows_close_when_a_filter_empties_a_source_partition() {
    // 10 000 records/s, one per event-time millisecond, over two source partitions (even and
    // odd records): the filter passes partition 0's records only. Each 1-second window holds
    // 1 000 records and is due every 100 ms.
    let ctx = StreamingContext::with_partitions(2);
    paced(&ctx, 10_000.0, 1, 100, 2);
    let sql = "SELECT window_start, COUNT(*) AS n FROM market_data \
        WHERE quantity % 2 = 0 \
        GROUP BY tumble(trade_time, INTERVAL '1' SECOND)";
    let rows = arrivals(&ctx, sql, 10).await;
    let mut windows: Vec<i64> = rows.iter().map(|(start, _)| *start).collect();
    windows.sort();
    assert_eq!(windows[0], START_MS, "the first window closes");
    assert_eq!(
        windows[9] - windows[0],
        9_000,
        "then one per second of event time"
    );
    // A window is due when the record at its end is (10 records per ms of wall-clock time).
    let late = lateness(&rows, |start| {
        Duration::from_micros(((start + 1_000 - START_MS) * 100) as u64)
    });
    let p90 = late[late.len() * 9 / 10];
    assert!(
        p90 < MAX_P90_LATENESS,
        "90% of windows should leave within half a second of being due: {late:?}"
    );
}

#[tokio::test]
async fn windows_close_when_a_lookup_matches_nothing_of_a_source_partition() {
    // As above, with a lookup in place of the filter: the table holds two of the even
    // records' symbols, so partition 1 (odd records) matches nothing.
    let ctx = StreamingContext::with_partitions(2);
    paced(&ctx, 10_000.0, 1, 100, 2);
    ctx.session()
        .sql("CREATE TABLE symbols AS VALUES ('SYM0', 'zero'), ('SYM2', 'two')")
        .await
        .unwrap();
    let sql = "SELECT window_start, COUNT(*) AS n FROM \
        (SELECT m.trade_time FROM market_data m JOIN symbols s ON m.symbol = s.column1) \
        GROUP BY tumble(trade_time, INTERVAL '1' SECOND)";
    let plan = ctx.sql(sql).await.unwrap().explain();
    assert!(plan.contains("LookupJoinExec"), "{plan}");
    let rows = arrivals(&ctx, sql, 10).await;
    let mut windows: Vec<i64> = rows.iter().map(|(start, _)| *start).collect();
    windows.sort();
    assert_eq!(windows[9] - windows[0], 9_000, "one window per second");
    let late = lateness(&rows, |start| {
        Duration::from_micros(((start + 1_000 - START_MS) * 100) as u64)
    });
    let p90 = late[late.len() * 9 / 10];
    assert!(
        p90 < MAX_P90_LATENESS,
        "90% of windows should leave within half a second of being due: {late:?}"
    );
}

#[tokio::test]
async fn a_paced_stream_on_two_partitions_keeps_its_rate() {
    // 1 000 records/s over two source partitions: record i is due i ms after record 0,
    // whichever partition it is in.
    let ctx = StreamingContext::with_partitions(2);
    paced(&ctx, 1_000.0, 1_000, 8_192, 2);
    let rows = arrivals(&ctx, "SELECT trade_time FROM market_data", 1_500).await;
    let late = lateness(&rows, |time| {
        Duration::from_millis(((time - START_MS) / 1_000) as u64)
    });
    let p90 = late[late.len() * 9 / 10];
    assert!(
        p90 < MAX_P90_LATENESS,
        "90% of rows should leave within half a second of being due: {:?}",
        &late[late.len() * 9 / 10..]
    );
}

#[cfg(unix)]
#[tokio::test]
async fn sigint_stops_a_query_with_a_readable_output_file() {
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("live.parquet");
    let child = Command::new(env!("CARGO_BIN_EXE_freshet"))
        .args([
            "query",
            "SELECT window_start, symbol, COUNT(*) AS n FROM market_data \
             GROUP BY symbol, tumble(trade_time, INTERVAL '1' MINUTE)",
            "--table",
            "market_data=generator:market_data,records=unbounded,rate=5000",
            "--output",
        ])
        .arg(format!("parquet={}", output.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let finished = child.wait_with_output().unwrap();
    let summary = String::from_utf8_lossy(&finished.stderr).into_owned();
    assert_eq!(finished.status.code(), Some(130), "{summary}");
    let rows_out: u64 = summary
        .split(" rows out")
        .next()
        .and_then(|head| head.rsplit(['\r', '\n']).next())
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("a summary with the rows written: {summary}"));
    assert!(rows_out > 0, "{summary}");

    // The file is complete: every row the summary counts, and every record read in a window.
    let ctx = StreamingContext::with_partitions(1);
    ctx.register_parquet("t", output.to_str().unwrap(), StreamOptions::default())
        .await
        .unwrap();
    let cells =
        crate::support::result_cells(&ctx, "SELECT COUNT(*) AS c, SUM(n) AS s FROM t").await;
    assert_eq!(cells[0][0], rows_out.to_string(), "{summary}");
    let records_read = summary
        .split(" records read")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .unwrap_or_default()
        .to_string();
    assert_eq!(cells[0][1], records_read, "{summary}");
}
