//! Endless, paced streams behave as a user watching them expects: rows leave as they come,
//! through filters too, and windows close as the source's event time passes them, even when
//! a filter empties a source partition. Latency is judged by arrival times against each
//! record's due time, relative to the first row, not by the machine's speed.

use std::time::{Duration, Instant};

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::TimestampMillisecondType;
use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
use futures::StreamExt;

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
        p90 < Duration::from_millis(100),
        "90% of rows should leave within 100 ms of being due: {late:?}"
    );
}

#[tokio::test]
async fn windows_close_when_a_filter_empties_a_source_partition() {
    // 10 000 records/s, one per event-time millisecond, batches of 100 alternating between
    // two source partitions: the filter passes partition 0's batches only. Each 1-second
    // window holds 1 000 records and is due every 100 ms.
    let ctx = StreamingContext::with_partitions(2);
    paced(&ctx, 10_000.0, 1, 100, 2);
    let sql = "SELECT window_start, COUNT(*) AS n FROM market_data \
        WHERE (quantity - 100) % 200 < 100 \
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
}
