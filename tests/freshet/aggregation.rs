//! Streaming aggregation equals its DataFusion batch equivalent at 1, 2 and 4 streams:
//! tumbling and hopping windows (`date_bin` GROUP BY), EMIT CHANGES (running window
//! aggregates in arrival order), out-of-order input within the watermark, null keys, NaN.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::Schema;
use freshet::engine::changelog::{ChangeOp, op_column};
use freshet::testing::{Differential, RandomStream, TestSource, TestTable};
use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
use futures::TryStreamExt;

use crate::support::{
    endless_market_data, execution_error, memory_limited_context, planning_error,
};

const S3A: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
const S3A_BATCH: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol, date_bin(INTERVAL '1 minute', trade_time)";

fn market_data(records: u64, batch_size: usize, disorder_ms: i64) -> TestTable {
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
    // Start on a minute boundary, so that batches of 60 records are whole windows.
    spec.start_ms = 1_700_000_040_000;
    spec.batch_size = batch_size;
    spec.disorder_ms = disorder_ms;
    let options = StreamOptions {
        out_of_orderness: std::time::Duration::from_millis(disorder_ms as u64),
        ..StreamOptions::default()
    };
    TestTable::new("market_data", TestSource::Generator(spec)).with_options(options)
}

pub(crate) fn random_table(stream: &RandomStream) -> TestTable {
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_millis(stream.disorder_ms as u64),
        ..StreamOptions::default()
    };
    TestTable::batches("t", RandomStream::schema(), stream.generate()).with_options(options)
}

#[tokio::test]
async fn s3a_equals_a_date_bin_group_by() {
    Differential::new(S3A, S3A_BATCH)
        .table(market_data(20_000, 1_000, 0))
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn s3a_with_disorder_within_the_watermark_loses_nothing() {
    Differential::new(S3A, S3A_BATCH)
        .table(market_data(20_000, 700, 5_000))
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn window_bounds_are_selectable_in_every_form() {
    let batch = "SELECT date_bin(INTERVAL '1 minute', trade_time) AS window_start, date_bin(INTERVAL '1 minute', trade_time) + INTERVAL '1 minute' AS window_end, symbol, MAX(price) AS top FROM market_data GROUP BY symbol, date_bin(INTERVAL '1 minute', trade_time) HAVING COUNT(*) > 2";
    for streaming in [
        "SELECT window_start, window_end, symbol, MAX(price) AS top FROM market_data GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) HAVING COUNT(*) > 2",
        "SELECT _WINDOW_START AS window_start, _WINDOW_END AS window_end, symbol, MAX(price) AS top FROM market_data GROUP BY symbol WINDOW TUMBLING (1m) HAVING COUNT(*) > 2",
        "SELECT window_start, window_end, symbol, MAX(price) AS top FROM market_data GROUP BY tumble(trade_time, INTERVAL '1' MINUTE), symbol HAVING COUNT(*) > 2",
        "SELECT window_start, window_end, symbol, MAX(price) AS top FROM TUMBLE(TABLE market_data, DESCRIPTOR(trade_time), INTERVAL '1' MINUTE) GROUP BY window_start, window_end, symbol HAVING COUNT(*) > 2",
    ] {
        Differential::new(streaming, batch)
            .table(market_data(5_000, 512, 0))
            .run()
            .await
            .unwrap_or_else(|e| panic!("{streaming}: {e}"));
    }
}

#[tokio::test]
async fn random_windowed_aggregations_match_datafusion() {
    let queries = [
        (
            // MIN/MAX over q, not v: DataFusion's float MIN/MAX depend on row order when NaN
            // is present (a NaN compares as "None" and replaces the current value).
            "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '7' SECOND)",
            "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1, date_bin(INTERVAL '7 seconds', ts)",
        ),
        (
            "SELECT window_start, k1, k2, COUNT(v) AS n, COUNT(DISTINCT q) AS distinct_q, stddev(q) AS spread FROM t WHERE q > 10 GROUP BY k1, k2 WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
            "SELECT date_bin(INTERVAL '1 minute', ts) AS window_start, k1, k2, COUNT(v) AS n, COUNT(DISTINCT q) AS distinct_q, stddev(q) AS spread FROM t WHERE q > 10 GROUP BY k1, k2, date_bin(INTERVAL '1 minute', ts)",
        ),
        (
            "SELECT COUNT(*) AS n, SUM(q) * 2 AS doubled FROM t WINDOW TUMBLING (ts, INTERVAL '3' SECOND)",
            "SELECT COUNT(*) AS n, SUM(q) * 2 AS doubled FROM t GROUP BY date_bin(INTERVAL '3 seconds', ts)",
        ),
        (
            "SELECT k2 % 3 AS bucket, MAX(q) AS top FROM t GROUP BY k2 % 3 WINDOW TUMBLING (ts, INTERVAL '20' SECOND) HAVING MAX(q) > 50",
            "SELECT k2 % 3 AS bucket, MAX(q) AS top FROM t GROUP BY k2 % 3, date_bin(INTERVAL '20 seconds', ts) HAVING MAX(q) > 50",
        ),
    ];
    for seed in 0..3 {
        let stream = RandomStream::new(seed).rows(3_000).disorder_ms(2_000);
        for (streaming, batch) in queries {
            Differential::new(streaming, batch)
                .table(random_table(&stream))
                .run()
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}

#[tokio::test]
async fn empty_and_one_row_streams_aggregate_like_datafusion() {
    for rows in [0, 1] {
        let stream = RandomStream::new(5).rows(rows);
        Differential::new(
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1, date_bin(INTERVAL '1 minute', ts)",
        )
        .table(random_table(&stream))
        .run()
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn hopping_windows_equal_a_union_of_shifted_tumbling_windows() {
    let stream = RandomStream::new(9).rows(2_000).disorder_ms(1_000);
    let batch = "SELECT k1, w AS window_start, COUNT(*) AS n, SUM(q) AS total FROM (
            SELECT k1, q, date_bin(INTERVAL '5 seconds', ts) AS w FROM t
            UNION ALL SELECT k1, q, date_bin(INTERVAL '5 seconds', ts) - INTERVAL '5 seconds' AS w FROM t
            UNION ALL SELECT k1, q, date_bin(INTERVAL '5 seconds', ts) - INTERVAL '10 seconds' AS w FROM t
        ) GROUP BY k1, w";
    for streaming in [
        "SELECT k1, window_start, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW HOPPING (ts, INTERVAL '15' SECOND, INTERVAL '5' SECOND)",
        "SELECT k1, window_start, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY hop(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND), k1",
    ] {
        Differential::new(streaming, batch)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("{streaming}: {e}"));
    }
}

#[tokio::test]
async fn windows_opened_and_emitted_are_counted() {
    // 3 000 records, one per second from a minute boundary: 50 one-minute windows.
    for (sql, partitions) in [
        (S3A, 1),
        (S3A, 2),
        (
            "SELECT trader_id, COUNT(*) AS n FROM market_data GROUP BY trader_id WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) WITH ('partitioning_strategy' = 'hash')",
            2,
        ),
        (
            "SELECT COUNT(*) AS n FROM market_data WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
            1,
        ),
        (
            "SELECT trader_id, COUNT(*) AS n FROM market_data GROUP BY trader_id WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES",
            1,
        ),
    ] {
        let ctx = StreamingContext::with_partitions(partitions);
        let table = market_data(3_000, 500, 0);
        let TestSource::Generator(spec) = table.source else {
            unreachable!("market data is generated");
        };
        ctx.register_generator("market_data", spec, table.options)
            .unwrap();
        let query = ctx.sql(sql).await.unwrap();
        let _: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
        // Hashed on the keys, each stream opens and emits every window its keys fall in, also
        // when its source partitions are at different windows; routed in time runs (S3A over
        // a generator), each window is one stream's.
        let hashed = sql.contains("'hash'");
        let expected = if hashed { 100 } else { 50 };
        assert_eq!(query.metric_total("windows_opened"), expected, "{sql}");
        assert_eq!(query.metric_total("windows_emitted"), expected, "{sql}");
    }
}

const S2: &str = "SELECT symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, MIN(price) AS min_price, MAX(price) AS max_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY symbol";

#[tokio::test]
async fn s2_runs_as_a_streaming_group_by_and_equals_datafusion() {
    Differential::same_sql(S2)
        .table(market_data(20_000, 1_000, 0))
        .with_plan_text("window=none, emit=final (at the end of input)")
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn random_plain_group_bys_match_datafusion() {
    let queries = [
        // MIN/MAX over q, not v: DataFusion's float MIN/MAX depend on row order with NaN.
        "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1",
        "SELECT k1, k2, COUNT(v) AS n, COUNT(DISTINCT q) AS distinct_q, stddev(q) AS spread FROM t WHERE q > 10 GROUP BY k1, k2 HAVING COUNT(*) > 1",
        "SELECT COUNT(*) AS n, SUM(q) AS total, MAX(q) - MIN(q) AS range FROM t",
        "SELECT k2 % 3 AS bucket, SUM(q) FILTER (WHERE q > 50) AS big FROM t GROUP BY k2 % 3",
        "SELECT DISTINCT k1 FROM t",
    ];
    for seed in 0..3 {
        let stream = RandomStream::new(seed).rows(3_000).disorder_ms(2_000);
        for sql in queries {
            Differential::same_sql(sql)
                .table(random_table(&stream))
                .with_plan_text("WindowAggregateExec")
                .run()
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {sql}: {e}"));
        }
    }
}

#[tokio::test]
async fn grouping_sets_over_a_bounded_stream_match_datafusion() {
    let queries = [
        "SELECT k1, k2, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY ROLLUP (k1, k2)",
        "SELECT k1, k2 % 2 AS parity, MAX(q) AS top FROM t GROUP BY CUBE (k1, k2 % 2)",
        "SELECT k1, k2, COUNT(v) AS n FROM t WHERE q > 10 GROUP BY GROUPING SETS ((k1), (k2), ())",
    ];
    let stream = RandomStream::new(5).rows(3_000).disorder_ms(2_000);
    for sql in queries {
        Differential::same_sql(sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test]
async fn a_global_aggregate_over_empty_and_one_row_streams_gives_one_row() {
    for rows in [0, 1] {
        let stream = RandomStream::new(7).rows(rows);
        for sql in [
            "SELECT COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean FROM t",
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1",
        ] {
            let expected_rows = Differential::same_sql(sql)
                .table(random_table(&stream))
                .batch_result()
                .await
                .unwrap()
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>();
            assert!(sql.contains("GROUP BY") || expected_rows == 1, "{sql}");
            Differential::same_sql(sql)
                .table(random_table(&stream))
                .run()
                .await
                .unwrap_or_else(|e| panic!("{rows} rows: {sql}: {e}"));
        }
    }
}

const S3B: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";
const S3B_BATCH: &str = "SELECT trader_id, symbol, COUNT(*) OVER w AS trade_count, AVG(price) OVER w AS avg_price FROM market_data WINDOW w AS (PARTITION BY trader_id, symbol, date_bin(INTERVAL '1 minute', trade_time) ORDER BY trade_time ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)";

#[tokio::test]
async fn s3b_emits_one_running_row_per_record() {
    // One window per batch keeps each window's rows in one source partition, so arrival
    // order (which running values depend on) is the event-time order at every stream count.
    Differential::new(S3B, S3B_BATCH)
        .table(market_data(12_000, 60, 0))
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn random_windowed_changes_are_running_window_aggregates() {
    // Distinct, ordered times from one source partition: arrival order is time order, and
    // each key's rows keep it through the exchange at every stream count.
    for seed in 0..3 {
        let stream = RandomStream::new(seed).rows(3_000).distinct_times();
        let mut table = random_table(&stream);
        table.options.partitions = Some(1);
        Differential::new(
            "SELECT k1, COUNT(*) AS n, COUNT(v) AS nv, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '7' SECOND) EMIT CHANGES",
            "SELECT k1, COUNT(*) OVER w AS n, COUNT(v) OVER w AS nv, SUM(q) OVER w AS total, AVG(v) OVER w AS mean, MIN(q) OVER w AS low, MAX(q) OVER w AS high FROM t WINDOW w AS (PARTITION BY k1, date_bin(INTERVAL '7 seconds', ts) ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)",
        )
        .table(table)
        .run()
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[tokio::test]
async fn changes_without_a_window_are_a_running_aggregate() {
    Differential::new(
        "SELECT symbol, COUNT(*) AS n, SUM(quantity) AS total, MIN(price) AS low, MAX(quantity) AS high FROM market_data GROUP BY symbol EMIT CHANGES",
        "SELECT symbol, COUNT(*) OVER w AS n, SUM(quantity) OVER w AS total, MIN(price) OVER w AS low, MAX(quantity) OVER w AS high FROM market_data WINDOW w AS (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)",
    )
    .table(market_data(5_000, 500, 0))
    .partitions(&[1])
    .run()
    .await
    .unwrap();
}

#[tokio::test]
async fn changes_per_batch_end_at_the_final_aggregates() {
    // The last changelog row of each group carries its final values: compare those with
    // the batch GROUP BY, for an aggregate without a per-record kernel (stddev).
    let streaming = "SELECT symbol, n, spread FROM (
            SELECT symbol, COUNT(*) AS n, stddev(quantity) AS spread FROM market_data GROUP BY symbol EMIT CHANGES
        ) WHERE n >= 0";
    let ctx = StreamingContext::with_partitions(2);
    ctx.session()
        .sql("SET freshet.changes_per = 'batch'")
        .await
        .unwrap();
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(3_000));
    spec.batch_size = 250;
    // One source partition: the operators get its 12 batches as they are (several would be
    // merged by event time into batches of their own).
    let options = StreamOptions {
        partitions: Some(1),
        ..StreamOptions::default()
    };
    ctx.register_generator("market_data", spec, options)
        .unwrap();
    let query = ctx.sql(streaming).await.unwrap();
    let plan = query.explain();
    assert!(
        plan.contains("one row per changed group per batch"),
        "{plan}"
    );
    let rows: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let total: usize = rows.iter().map(|b| b.num_rows()).sum();
    assert_eq!(total, 12 * 10, "10 symbols change in each of 12 batches");
    let mut last = std::collections::HashMap::new();
    for batch in &rows {
        let symbols = batch
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        let counts = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for row in 0..batch.num_rows() {
            let entry = last.entry(symbols.value(row).to_string()).or_insert(0);
            *entry = (*entry).max(counts.value(row));
        }
    }
    assert_eq!(last.len(), 10);
    assert!(last.values().all(|n| *n == 300), "{last:?}");
}

/// Batches of `(id, ts)` rows: one batch per element of `batches`, times in milliseconds.
fn id_time_batches(batches: Vec<(Vec<i64>, Vec<Option<i64>>)>) -> (Arc<Schema>, Vec<RecordBatch>) {
    crate::support::id_time_batches_named("id", "ts", batches)
}

/// One stream over `(schema, batches)` as table `t`, one source partition, event time `ts`
/// with `out_of_orderness`.
fn id_time_context(
    (schema, batches): (Arc<Schema>, Vec<RecordBatch>),
    out_of_orderness: std::time::Duration,
) -> StreamingContext {
    let ctx = StreamingContext::with_partitions(1);
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness,
        partitions: Some(1),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", schema, batches, options).unwrap();
    ctx
}

/// The query's whole result, as a pretty-printed table.
async fn formatted_result(query: &freshet::StreamingQuery) -> String {
    let results: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    datafusion::arrow::util::pretty::pretty_format_batches(&results)
        .unwrap()
        .to_string()
}

fn late_data() -> (Arc<Schema>, Vec<RecordBatch>) {
    id_time_batches(vec![
        (vec![1, 2], vec![Some(1_000), Some(65_000)]),
        // the 0-60s window closed when 65s arrived (no out-of-orderness): 3 is late
        (vec![3, 4, 5], vec![Some(2_000), None, Some(70_000)]),
        (vec![6], vec![Some(125_000)]),
    ])
}

#[tokio::test]
async fn late_and_timeless_records_are_dropped_and_counted() {
    let ctx = id_time_context(late_data(), std::time::Duration::ZERO);
    let query = ctx
        .sql("SELECT window_start, COUNT(*) AS n, SUM(id) AS ids FROM t WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)")
        .await
        .unwrap();
    let late_stream = query.late_records();
    let formatted = formatted_result(&query).await;
    assert!(
        formatted.contains("| 1970-01-01T00:00:00 | 1 | 1   |"),
        "{formatted}"
    );
    assert!(
        formatted.contains("| 1970-01-01T00:01:00 | 2 | 7   |"),
        "{formatted}"
    );
    assert!(
        formatted.contains("| 1970-01-01T00:02:00 | 1 | 6   |"),
        "{formatted}"
    );
    let mut late = 0;
    let mut timeless = 0;
    let _ = datafusion::common::tree_node::TreeNode::apply(query.plan(), |node| {
        if let Some(metrics) = node.metrics() {
            late += metrics
                .sum_by_name("late_records_dropped")
                .map_or(0, |v| v.as_usize());
            timeless += metrics
                .sum_by_name("null_event_time_dropped")
                .map_or(0, |v| v.as_usize());
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    assert_eq!((late, timeless), (1, 1));
    drop(query);
    let late_rows: Vec<RecordBatch> = late_stream.try_collect().await.unwrap();
    let late_ids: Vec<i64> = late_rows
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(late_ids, vec![3], "the side output holds the late record");
}

#[tokio::test]
async fn allowed_lateness_keeps_late_records() {
    let ctx = id_time_context(late_data(), std::time::Duration::ZERO);
    ctx.session()
        .sql("SET freshet.allowed_lateness_ms = 10000")
        .await
        .unwrap();
    let query = ctx
        .sql("SELECT window_start, COUNT(*) AS n FROM t WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)")
        .await
        .unwrap();
    let formatted = formatted_result(&query).await;
    assert!(
        formatted.contains("| 1970-01-01T00:00:00 | 2 |"),
        "{formatted}"
    );
}

#[tokio::test]
async fn windows_close_on_the_watermark_of_an_endless_stream() {
    let ctx = endless_market_data();
    let query = ctx
        .sql("SELECT window_start, COUNT(*) AS n FROM market_data WINDOW TUMBLING (1m) LIMIT 3")
        .await
        .unwrap();
    let results: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let counts: Vec<i64> = results
        .iter()
        .flat_map(|b| {
            b.column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(counts.len(), 3);
    assert!(
        counts.iter().all(|n| *n == 60 || *n == 40 || *n == 20),
        "{counts:?}"
    );
}

/// A GROUP BY without a window over an endless stream has no end to wait for: without an
/// EMIT clause it emits its changelog as EMIT CHANGES does (an updating result, as Flink's),
/// and EMIT FINAL is refused with advice.
#[tokio::test]
async fn a_group_by_without_a_window_over_an_endless_stream_emits_its_changes() {
    let ctx = endless_market_data();
    let sql = "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol";
    let query = ctx.sql(&format!("{sql} LIMIT 50")).await.unwrap();
    let plan = query.explain();
    assert!(plan.contains("emit=changes"), "{plan}");
    let results: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let rows: usize = results.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 50);
    let schema = results[0].schema();
    assert_eq!(schema.fields().last().unwrap().name(), "op", "{schema:?}");
    let error = planning_error(&ctx, &format!("{sql} EMIT FINAL")).await;
    assert!(error.contains("never produces a result"), "{error}");
}

#[tokio::test]
async fn state_beyond_the_memory_limit_is_a_clean_error() {
    let ctx = memory_limited_context(256 * 1024);
    // 200 000 distinct keys in one changelog aggregation: far more state than 256 KiB.
    let mut spec = GeneratorSpec::new(GeneratorKind::Orders, Some(200_000));
    spec.customers = 200_000;
    ctx.register_generator("orders", spec, StreamOptions::default())
        .unwrap();
    let query = ctx
        .sql("SELECT order_id, COUNT(*) AS n FROM orders GROUP BY order_id EMIT CHANGES")
        .await
        .unwrap();
    let error = execution_error(&query).await;
    assert!(error.contains("WindowAggregateExec[0]"), "{error}");
}

/// The session tests' input: 2 000 records over 50 keys, none null, disordered by up to 1.5 s.
fn sessions_without_null_keys() -> RandomStream {
    let mut stream = RandomStream::new(4).rows(2_000).keys(50).disorder_ms(1_500);
    stream.null_key_fraction = 0.0;
    stream
}

/// Sessions in batch SQL: a new session where the gap to the key's previous record is
/// reached, numbered by a running sum.
const SESSIONS_BATCH: &str = "WITH marked AS (
        SELECT *, CASE WHEN ts - LAG(ts) OVER (PARTITION BY k1 ORDER BY ts) < INTERVAL '3 seconds' THEN 0 ELSE 1 END AS fresh
        FROM t),
    numbered AS (
        SELECT *, SUM(fresh) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session_id
        FROM marked)
    SELECT k1, MIN(ts) AS window_start, COUNT(*) AS n, SUM(q) AS total FROM numbered GROUP BY k1, session_id";

#[tokio::test]
async fn session_windows_equal_gap_splitting_in_batch_sql() {
    for seed in 0..3 {
        // Sparse keys: a key's records are ~5 s apart on average, so 3 s gaps split often.
        let mut stream = RandomStream::new(seed)
            .rows(2_000)
            .keys(50)
            .disorder_ms(1_500);
        stream.null_key_fraction = 0.0;
        for streaming in [
            "SELECT k1, window_start, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW SESSION (ts, INTERVAL '3' SECOND)",
            "SELECT k1, window_start, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY session(ts, INTERVAL '3' SECOND), k1",
            // Flink's session table function, a session per PARTITION BY key.
            "SELECT k1, window_start, COUNT(*) AS n, SUM(q) AS total FROM TABLE(SESSION(TABLE t PARTITION BY k1, DESCRIPTOR(ts), INTERVAL '3' SECOND)) GROUP BY k1, window_start, window_end",
        ] {
            Differential::new(streaming, SESSIONS_BATCH)
                .table(random_table(&stream))
                .run()
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}

/// Sessions keep each session's aggregate states as records arrive: per-group kernels for
/// COUNT, SUM, AVG, MIN and MAX, DataFusion's accumulators for the rest (here DISTINCT and
/// FILTER). Both equal batch SQL with few keys (long sessions, bridged by disordered records)
/// and with many (thousands of sessions closing while others stay open, so groups and keys
/// are renumbered mid-stream). Without NaNs: DataFusion 55's grouped MIN and MAX over floats
/// restart after a NaN (apache/datafusion#24432), so its batch answer depends on row order.
#[tokio::test]
async fn session_states_of_every_kind_equal_batch_sql_as_sessions_close() {
    let batch = |aggregates: &str| {
        SESSIONS_BATCH.replace(
            "SELECT k1, MIN(ts) AS window_start, COUNT(*) AS n, SUM(q) AS total",
            &format!("SELECT k1, MIN(ts) AS window_start, {aggregates}"),
        )
    };
    let kernels = "COUNT(*) AS n, SUM(q) AS total, MIN(v) AS low, MAX(q) AS high, AVG(q) AS mean";
    let accumulators =
        "COUNT(DISTINCT k2) AS kinds, SUM(q) FILTER (WHERE q > 0) AS gains, COUNT(*) AS n";
    for keys in [20, 6_000] {
        let mut stream = RandomStream::new(keys)
            .rows(20_000)
            .keys(keys)
            .disorder_ms(1_500);
        stream.null_key_fraction = 0.0;
        stream.nan_fraction = 0.0;
        for aggregates in [kernels, accumulators] {
            let streaming = format!(
                "SELECT k1, window_start, {aggregates} FROM t GROUP BY k1 WINDOW SESSION (ts, INTERVAL '3' SECOND)"
            );
            Differential::new(&streaming, &batch(aggregates))
                .table(random_table(&stream))
                .run()
                .await
                .unwrap_or_else(|e| panic!("{keys} keys, {aggregates}: {e}"));
        }
    }
}

#[tokio::test]
async fn session_window_end_is_the_last_event_time_plus_the_gap() {
    let batch_sql = SESSIONS_BATCH.replace(
        "SELECT k1, MIN(ts) AS window_start,",
        "SELECT k1, MIN(ts) AS window_start, MAX(ts) + INTERVAL '3 seconds' AS window_end,",
    );
    let stream = sessions_without_null_keys();
    for streaming in [
        "SELECT k1, window_start, window_end, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW SESSION (ts, INTERVAL '3' SECOND)",
        "SELECT k1, window_start, _WINDOW_END AS window_end, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY session(ts, INTERVAL '3' SECOND), k1",
        "SELECT k1, window_start, window_end, COUNT(*) AS n, SUM(q) AS total FROM SESSION(TABLE t PARTITION BY k1, DESCRIPTOR(ts), INTERVAL '3' SECOND) GROUP BY k1, window_start, window_end",
    ] {
        Differential::new(streaming, &batch_sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("{streaming}: {e}"));
    }
}

#[tokio::test]
async fn ordered_windowed_results_match_datafusion() {
    Differential::new(
        "SELECT window_start, symbol, COUNT(*) AS n, MAX(price) AS top FROM market_data GROUP BY symbol WINDOW TUMBLING (1m) ORDER BY window_start, symbol",
        "SELECT date_bin(INTERVAL '1 minute', trade_time) AS window_start, symbol, COUNT(*) AS n, MAX(price) AS top FROM market_data GROUP BY symbol, date_bin(INTERVAL '1 minute', trade_time) ORDER BY window_start, symbol",
    )
    .table(market_data(20_000, 1_000, 2_000))
    .ordered()
    .run()
    .await
    .unwrap();
}

/// A changelog applied as upserts keyed by its first two columns (keys and window start as
/// text); a row whose other columns are all NULL deletes its key. Also the number of rows
/// that were not deletions.
fn apply_changelog(batches: &[RecordBatch]) -> (BTreeMap<(String, String), Vec<String>>, usize) {
    use datafusion::arrow::util::display::array_value_to_string;
    let mut table = BTreeMap::new();
    let mut upserts = 0;
    for batch in batches {
        let op = op_column(&batch.schema());
        let columns = batch.num_columns() - usize::from(op.is_some());
        for row in 0..batch.num_rows() {
            let text = |c: usize| array_value_to_string(batch.column(c), row).unwrap();
            let key = (text(0), text(1));
            let values: Vec<String> = (2..columns).map(text).collect();
            if op.is_some_and(|op| text(op) == ChangeOp::Delete.code()) {
                assert!(
                    table.remove(&key).is_some(),
                    "deletion of an unknown {key:?}"
                );
            } else {
                upserts += 1;
                table.insert(key, values);
            }
        }
    }
    (table, upserts)
}

/// Session changes over random streams (disorder merging sessions), applied as upserts and
/// deletions, end at the EMIT FINAL sessions, at 1, 2 and 4 streams; `per_batch` sets
/// `freshet.changes_per = 'batch'`. A deletion of a session never emitted fails
/// `apply_changelog` ("deletion of an unknown").
async fn check_session_changes(per_batch: bool) {
    let batch_sql = SESSIONS_BATCH.replace(
        "SELECT k1, MIN(ts) AS window_start,",
        "SELECT k1, MIN(ts) AS window_start, MAX(ts) + INTERVAL '3 seconds' AS window_end, AVG(q) AS mean, MIN(q) AS low, MAX(v) AS high,",
    );
    let streaming = "SELECT k1, window_start, window_end, AVG(q) AS mean, MIN(q) AS low, MAX(v) AS high, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW SESSION (ts, INTERVAL '3' SECOND) EMIT CHANGES";
    for seed in 0..3 {
        let mut stream = RandomStream::new(seed)
            .rows(2_000)
            .keys(50)
            .disorder_ms(1_500);
        stream.null_key_fraction = 0.0;
        // DataFusion's float MAX depends on row order around NaN.
        stream.nan_fraction = 0.0;
        let mut differential =
            Differential::new(streaming, &batch_sql).table(random_table(&stream));
        if per_batch {
            differential = differential
                .setting("freshet.changes_per", "batch")
                .with_plan_text("a merged session an earlier batch emitted is deleted");
        }
        let (expected, _) = apply_changelog(&differential.batch_result().await.unwrap());
        for streams in [1, 2, 4] {
            let changelog = differential.streaming_result(streams).await.unwrap();
            let (actual, upserts) = apply_changelog(&changelog);
            let rows: usize = changelog.iter().map(RecordBatch::num_rows).sum();
            if per_batch {
                assert!(
                    upserts < 2_000,
                    "one row per changed session and batch, not per record: {upserts}, seed {seed}"
                );
            } else {
                assert_eq!(upserts, 2_000, "one row per record, seed {seed}");
                assert!(rows > upserts, "disorder merges some sessions, seed {seed}");
            }
            let differing: Vec<_> = expected
                .iter()
                .filter(|(key, row)| actual.get(*key) != Some(*row))
                .chain(
                    actual
                        .iter()
                        .filter(|(key, _)| !expected.contains_key(*key)),
                )
                .take(3)
                .collect();
            assert!(
                differing.is_empty() && actual.len() == expected.len(),
                "seed {seed} at {streams} streams: {} sessions, expected {}; first differences {differing:?}",
                actual.len(),
                expected.len()
            );
        }
    }
}

#[tokio::test]
async fn session_changes_end_at_the_final_sessions() {
    check_session_changes(false).await;
}

#[tokio::test]
async fn session_changes_per_batch_end_at_the_final_sessions() {
    check_session_changes(true).await;
}

/// The session changelog (count and sum of ids, gap 3 s) of `(id, ts)` batches, changes per
/// `record` or `batch`, as a table.
async fn session_changelog_of_ids(
    batches: (Arc<Schema>, Vec<RecordBatch>),
    changes_per: &str,
) -> String {
    let ctx = id_time_context(batches, std::time::Duration::from_secs(10));
    ctx.session()
        .sql(&format!("SET freshet.changes_per = '{changes_per}'"))
        .await
        .unwrap();
    let query = ctx
        .sql("SELECT window_start, COUNT(*) AS n, SUM(id) AS ids FROM t WINDOW SESSION (ts, INTERVAL '3' SECOND) EMIT CHANGES")
        .await
        .unwrap();
    formatted_result(&query).await
}

#[tokio::test]
async fn session_changes_per_batch_delete_only_sessions_emitted_before() {
    // As in the per-record test below, over two batches: 0 s opens a session in the first;
    // in the second, 4 s opens another, 2 s bridges the two and -1 s extends the merged one
    // backwards. The start the first batch emitted (1:40) is deleted; 1:44 was opened and
    // merged away within the second batch, never emitted, so it is not.
    let batches = id_time_batches(vec![
        (vec![1], vec![Some(100_000)]),
        (
            vec![2, 3, 4],
            vec![Some(104_000), Some(102_000), Some(99_000)],
        ),
    ]);
    let formatted = session_changelog_of_ids(batches, "batch").await;
    let expected = "\
+---------------------+---+-----+----+
| window_start        | n | ids | op |
+---------------------+---+-----+----+
| 1970-01-01T00:01:40 | 1 | 1   | +I |
| 1970-01-01T00:01:40 |   |     | -D |
| 1970-01-01T00:01:39 | 4 | 10  | +I |
+---------------------+---+-----+----+";
    assert_eq!(formatted, expected);
}

#[tokio::test]
async fn session_changes_delete_the_sessions_a_record_merges() {
    // Seconds after 100 s, in arrival order: 0 and 4 open two sessions (gap 3 s), 2 bridges
    // them, -1 extends the merged one backwards.
    let seconds = [0, 4, 2, -1];
    let batches = id_time_batches(vec![(
        vec![1, 2, 3, 4],
        seconds.iter().map(|s| Some(100_000 + s * 1_000)).collect(),
    )]);
    let formatted = session_changelog_of_ids(batches, "record").await;
    let expected = "\
+---------------------+---+-----+----+
| window_start        | n | ids | op |
+---------------------+---+-----+----+
| 1970-01-01T00:01:40 | 1 | 1   | +I |
| 1970-01-01T00:01:44 | 1 | 2   | +I |
| 1970-01-01T00:01:44 |   |     | -D |
| 1970-01-01T00:01:40 | 3 | 6   | +U |
| 1970-01-01T00:01:40 |   |     | -D |
| 1970-01-01T00:01:39 | 4 | 10  | +I |
+---------------------+---+-----+----+";
    assert_eq!(formatted, expected);
}

/// DataFusion rewrites a lone COUNT(DISTINCT x) into a GROUP BY on x, which would cut
/// sessions per value of x; sessions keep the DISTINCT aggregate.
#[tokio::test]
async fn session_windows_count_distinct_values_per_session() {
    let batch_sql = SESSIONS_BATCH.replace(
        "SELECT k1, MIN(ts) AS window_start, COUNT(*) AS n, SUM(q) AS total",
        "SELECT k1, MIN(ts) AS window_start, COUNT(DISTINCT k2) AS n",
    );
    let stream = sessions_without_null_keys();
    Differential::new(
        "SELECT k1, window_start, COUNT(DISTINCT k2) AS n FROM t GROUP BY k1 WINDOW SESSION (ts, INTERVAL '3' SECOND)",
        &batch_sql,
    )
    .table(random_table(&stream))
    .run()
    .await
    .unwrap();
}

/// A LIMIT below a window over a stream read as several source partitions gathers them in
/// event-time order: every record it lets through is counted, none dropped as late.
#[tokio::test]
async fn a_limit_below_a_window_drops_no_record_as_late() {
    for partitions in [1, 2, 4] {
        let ctx = StreamingContext::with_partitions(partitions);
        ctx.register_generator(
            "market_data",
            GeneratorSpec::new(GeneratorKind::MarketData, Some(200_000)),
            StreamOptions::default(),
        )
        .unwrap();
        let query = ctx
            .sql(
                "SELECT symbol, window_start, COUNT(*) AS n FROM (SELECT * FROM market_data LIMIT 50000) \
                 GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)",
            )
            .await
            .unwrap();
        let results: Vec<RecordBatch> =
            query.execute_merged().unwrap().try_collect().await.unwrap();
        let counted: i64 = results
            .iter()
            .map(|b| {
                b.column(2)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .iter()
                    .sum::<i64>()
            })
            .sum();
        assert_eq!(counted, 50_000, "at {partitions} streams");
    }
}

/// The changelog of `changes_sql`, applied by its first column (upserts and deletions), and
/// the result of `final_sql`, each as sorted `a|b|…` lines.
async fn applied_changelog_and_final(
    ctx: &StreamingContext,
    changes_sql: &str,
    final_sql: &str,
) -> (Vec<String>, Vec<String>) {
    let run = |sql: &str| {
        let sql = sql.to_string();
        async move {
            let query = ctx.sql(&sql).await.unwrap();
            let batches: Vec<RecordBatch> =
                query.execute_merged().unwrap().try_collect().await.unwrap();
            batches
        }
    };
    let mut table = BTreeMap::new();
    for batch in &run(changes_sql).await {
        let op = op_column(&batch.schema()).expect("a changelog has its op column");
        for row in freshet::testing::display_rows(std::slice::from_ref(batch)).unwrap() {
            match ChangeOp::parse(&row[op]) {
                Some(ChangeOp::Delete) => table.remove(&row[0]),
                Some(_) => table.insert(row[0].clone(), row[1..op].join("|")),
                None => panic!("an unknown operation {}", row[op]),
            };
        }
    }
    let applied = table
        .into_iter()
        .map(|(key, values)| format!("{key}|{values}"))
        .collect();
    let mut finals: Vec<String> = freshet::testing::display_rows(&run(final_sql).await)
        .unwrap()
        .into_iter()
        .map(|row| row.join("|"))
        .collect();
    finals.sort();
    (applied, finals)
}

/// An aggregation over another's changelog retracts the row each upsert replaces: applied
/// by its key, its own changelog ends at the final answer, at 1, 2 and 4 streams. Groups
/// among the changelog's keys (Nexmark q4's average of each auction's highest bid), groups
/// by an aggregate (a histogram of counts, whose groups empty and are deleted), MIN and MAX
/// over a changelog filtered by a WHERE (which deletes keys), and a projection that drops
/// the changelog's key.
#[tokio::test]
async fn an_aggregation_over_a_changelog_ends_at_the_final_answer() {
    let queries = [
        "SELECT q.category, AVG(q.final) AS final, COUNT(*) AS auctions FROM (\
         SELECT MAX(b.price) AS final, a.category FROM auction a, bid b \
         WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires \
         GROUP BY a.id, a.category) q GROUP BY q.category",
        "SELECT n, COUNT(*) AS bidders FROM (SELECT bidder, COUNT(*) AS n FROM bid GROUP BY bidder) \
         GROUP BY n",
        "SELECT c, MIN(top) AS low, MAX(top) AS high, SUM(top) AS total FROM (\
         SELECT auction % 7 AS c, auction, MAX(price) AS top FROM bid GROUP BY auction) \
         WHERE top < 5000000 GROUP BY c",
    ];
    for partitions in [1, 2, 4] {
        let ctx = StreamingContext::with_partitions(partitions);
        for table in [freshet::NexmarkTable::Auction, freshet::NexmarkTable::Bid] {
            let mut spec = GeneratorSpec::nexmark(table, Some(20_000));
            spec.set("event_rate", "500").unwrap();
            spec.batch_size = 500;
            ctx.register_generator(table.name(), spec, StreamOptions::default())
                .unwrap();
        }
        for query in queries {
            let changes = format!("{query} EMIT CHANGES");
            let plan = ctx.sql(&changes).await.unwrap().explain();
            assert!(plan.contains("ChangelogAggregateExec"), "{plan}");
            let (mut applied, finals) = applied_changelog_and_final(&ctx, &changes, query).await;
            applied.sort();
            assert!(finals.len() > 2, "{finals:?}");
            assert_eq!(applied, finals, "{query} at {partitions} streams");
        }
    }
}

#[tokio::test]
async fn having_under_emit_changes_deletes_the_windows_it_no_longer_holds() {
    // One record per batch, out of order within the watermark: windows 0 s and 10 s reach a
    // count of 2 after going out with 1, and must be withdrawn.
    let seconds = [0, 3, 10, 20, 5, 30, 12, 41];
    let batches = id_time_batches(
        seconds
            .iter()
            .enumerate()
            .map(|(i, s)| (vec![i as i64], vec![Some(s * 1_000)]))
            .collect(),
    );
    let ctx = id_time_context(batches, std::time::Duration::from_secs(30));
    let query = "SELECT window_start, COUNT(*) AS n FROM t WINDOW TUMBLING (ts, INTERVAL '10' SECOND) HAVING COUNT(*) < 2";
    let (applied, finals) =
        applied_changelog_and_final(&ctx, &format!("{query} EMIT CHANGES"), query).await;
    assert_eq!(finals.len(), 3, "{finals:?}");
    assert_eq!(applied, finals);
}

#[tokio::test]
async fn a_merged_sessions_deletion_passes_having() {
    // docs/sql.md's bridging example: 0 s and 40 s, then 20 s bridging them (gap 30 s).
    let batches = id_time_batches(vec![
        (vec![1], vec![Some(0)]),
        (vec![2], vec![Some(40_000)]),
        (vec![3], vec![Some(20_000)]),
    ]);
    let ctx = id_time_context(batches, std::time::Duration::from_secs(60));
    let query = "SELECT window_start, COUNT(*) AS n FROM t WINDOW SESSION (ts, INTERVAL '30' SECOND) HAVING COUNT(*) >= 1";
    let (applied, finals) =
        applied_changelog_and_final(&ctx, &format!("{query} EMIT CHANGES"), query).await;
    assert_eq!(applied, ["1970-01-01T00:00:00|3"]);
    assert_eq!(applied, finals);
}

/// `stream`'s table registered as endless (its rows end, but the plan must not rely on it).
fn endless_random_table(stream: &RandomStream) -> TestTable {
    let mut table = random_table(stream);
    table.options.bounded = Some(false);
    table
}

#[tokio::test]
async fn order_by_the_window_start_runs_on_an_endless_stream_in_window_order() {
    // Windows close on different streams at different moments: the sort releases each
    // window's rows once every stream has passed it.
    let streaming = "SELECT window_start, k1, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '2' SECOND) ORDER BY window_start, k1";
    let batch = "SELECT date_bin(INTERVAL '2 seconds', ts) AS window_start, k1, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1, date_bin(INTERVAL '2 seconds', ts) ORDER BY window_start, k1";
    let stream = RandomStream::new(41).rows(3_000).disorder_ms(500);
    Differential::new(streaming, batch)
        .table(endless_random_table(&stream))
        .ordered()
        .with_plan_text("StreamSortExec")
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn order_by_the_event_time_runs_on_an_endless_stream() {
    // Disorder within the watermark, equal times, a descending second key.
    let sql = "SELECT ts, q, k1, k2, v FROM t WHERE q > 5 ORDER BY ts, q DESC, k1, k2, v";
    for (step, disorder) in [(10, 700), (0, 0)] {
        let mut stream = RandomStream::new(43).rows(2_000).disorder_ms(disorder);
        stream.step_ms = step;
        Differential::same_sql(sql)
            .table(endless_random_table(&stream))
            .ordered()
            .with_plan_text("StreamSortExec")
            .run()
            .await
            .unwrap_or_else(|e| panic!("step {step}, disorder {disorder}: {e}"));
    }
    // With a LIMIT: the first rows in order.
    let stream = RandomStream::new(44).rows(2_000).disorder_ms(300);
    Differential::same_sql("SELECT ts, q FROM t ORDER BY ts, q LIMIT 25")
        .table(endless_random_table(&stream))
        .ordered()
        .with_plan_text("StreamSortExec")
        .run()
        .await
        .unwrap();
}
