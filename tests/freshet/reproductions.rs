//! Defects found by trying Freshet as a user would (random queries against a batch engine, the
//! command line over real files), each as its minimal reproduction: the answer must be the
//! batch answer, in the order the dialect promises.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use datafusion::parquet::arrow::ArrowWriter;
use freshet::testing::{display_rows, without_op_column};
use freshet::{StreamOptions, StreamingContext};
use futures::TryStreamExt;

use crate::support::{execution_error, freshet_error};

/// Writes `columns` to a Parquet file with one row group per row.
fn parquet_row_per_group(dir: &Path, columns: Vec<(&str, ArrayRef)>) -> PathBuf {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let path = dir.join("t.parquet");
    crate::support::write_parquet(&path, &batch, 1);
    path
}

fn seconds(values: &[i64]) -> ArrayRef {
    Arc::new(TimestampMillisecondArray::from_iter_values(
        values.iter().map(|s| s * 1_000),
    ))
}

fn ints(values: &[i64]) -> ArrayRef {
    Arc::new(Int64Array::from(values.to_vec()))
}

fn strings(values: &[&str]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// A context of `streams` streams with `t` read from `path` (event time `ts`).
async fn context(path: &Path, streams: usize, options: StreamOptions) -> StreamingContext {
    let ctx = StreamingContext::with_partitions(streams);
    let options = StreamOptions {
        event_time: Some("ts".into()),
        ..options
    };
    ctx.register_parquet("t", path.to_str().unwrap(), options)
        .await
        .unwrap();
    ctx
}

/// The query's rows in output order, each as `a|b|c`.
async fn rows(ctx: &StreamingContext, sql: &str) -> Vec<String> {
    let query = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let run = query.execute_merged().unwrap().try_collect::<Vec<_>>();
    let batches = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap_or_else(|_| panic!("{sql}: no result in 30 s"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    // A changelog's rows by their values (the operations are checked where they matter).
    display_rows(&without_op_column(batches).unwrap())
        .unwrap()
        .into_iter()
        .map(|cells| cells.join("|"))
        .collect()
}

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

#[tokio::test]
async fn count_distinct_changes_count_each_value_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("ts", seconds(&[1, 2, 3])),
            ("k", ints(&[1, 1, 1])),
            ("v", strings(&["a", "a", "b"])),
        ],
    );
    let ctx = context(&path, 1, StreamOptions::default()).await;
    let changes = rows(
        &ctx,
        "SELECT k, COUNT(DISTINCT v) AS n, SUM(k) AS s FROM t GROUP BY k EMIT CHANGES",
    )
    .await;
    assert_eq!(changes, ["1|1|1", "1|1|2", "1|2|3"]);
    // Windowed, the one aggregation closes its window on time (not at the end of input).
    let ctx = context(&path, 2, StreamOptions::default()).await;
    let plan = ctx
        .sql("SELECT window_start, COUNT(DISTINCT v) AS n FROM t GROUP BY tumble(ts, INTERVAL '1' MINUTE)")
        .await
        .unwrap()
        .explain();
    assert!(!plan.contains("window=none"), "{plan}");
}

#[tokio::test]
async fn window_bounds_work_inside_expressions() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![("ts", seconds(&[1, 61, 62])), ("k", ints(&[1, 1, 2]))],
    );
    let ctx = context(&path, 2, StreamOptions::default()).await;
    let result = rows(
        &ctx,
        "SELECT CAST(window_start AS BIGINT) AS w, date_trunc('hour', window_start) AS h, COUNT(*) AS n FROM t GROUP BY tumble(ts, INTERVAL '1' MINUTE) HAVING (window_end > TIMESTAMP '1970-01-01 00:01:30')",
    )
    .await;
    assert_eq!(result, ["60000|1970-01-01T00:00:00|2"]);
}

#[tokio::test]
async fn session_window_end_over_an_integer_event_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("ts", ints(&[1_000, 2_000, 9_000])),
            ("k", ints(&[1, 1, 1])),
        ],
    );
    let ctx = context(&path, 1, StreamOptions::default()).await;
    let result = rows(
        &ctx,
        "SELECT k, window_start, window_end, COUNT(*) AS n FROM t GROUP BY k WINDOW SESSION (ts, INTERVAL '3' SECOND) HAVING window_end > TIMESTAMP '1970-01-01 00:00:06'",
    )
    .await;
    assert_eq!(result, ["1|1970-01-01T00:00:09|1970-01-01T00:00:12|1"]);
}

#[tokio::test]
async fn having_on_hopping_window_bounds_filters_the_windows() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![("ts", seconds(&[1, 7, 12])), ("k", ints(&[1, 1, 1]))],
    );
    let ctx = context(&path, 2, StreamOptions::default()).await;
    let result = rows(
        &ctx,
        "SELECT window_start, COUNT(*) AS n FROM t GROUP BY hop(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) HAVING window_start > TIMESTAMP '1970-01-01 00:00:00'",
    )
    .await;
    assert_eq!(
        sorted(result),
        ["1970-01-01T00:00:05|2", "1970-01-01T00:00:10|1"]
    );
}

#[tokio::test]
async fn the_scan_keeps_row_groups_in_stored_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("k", strings(&["b", "a"])),
            ("ts", seconds(&[1, 2])),
            ("v", ints(&[1, 2])),
        ],
    );
    let ctx = context(&path, 1, StreamOptions::default()).await;
    let sql = "SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM t";
    assert_eq!(sorted(rows(&ctx, sql).await), ["a|2|1", "b|1|1"]);
    let plan = ctx.sql(sql).await.unwrap().explain();
    assert!(!plan.contains("sort_order_for_reorder"), "{plan}");
}

#[tokio::test]
async fn a_filter_under_a_keyed_exchange_keeps_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let v: Vec<i64> = (0..8).map(|i| 10i64.pow(i)).collect();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("k", strings(&["a"; 8])),
            ("ts", seconds(&[1, 2, 3, 4, 5, 6, 7, 8])),
            ("v", ints(&v)),
        ],
    );
    for (streams, source_partitions) in [(2, 1), (2, 2), (1, 2), (2, 4), (4, 4), (2, 2)] {
        let options = StreamOptions {
            partitions: Some(source_partitions),
            ..StreamOptions::default()
        };
        let ctx = context(&path, streams, options).await;
        // Split the small file into byte ranges as a large one would be.
        ctx.session()
            .sql("SET datafusion.optimizer.repartition_file_min_size = 0")
            .await
            .unwrap();
        let sums = rows(
            &ctx,
            "SELECT k, SUM(v) AS s FROM t WHERE v > 0 GROUP BY k EMIT CHANGES",
        )
        .await;
        assert_eq!(
            sums,
            [
                "a|1",
                "a|11",
                "a|111",
                "a|1111",
                "a|11111",
                "a|111111",
                "a|1111111",
                "a|11111111"
            ]
        );
    }
}

#[tokio::test]
async fn sticky_routing_under_a_filter_gives_one_row_per_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("k", strings(&["a"; 4])),
            ("ts", seconds(&[1, 2, 3, 4])),
            ("v", ints(&[1, 2, 3, 4])),
        ],
    );
    let options = StreamOptions {
        partitioned_by: vec!["k".into()],
        ..StreamOptions::default()
    };
    let ctx = context(&path, 2, options).await;
    let result = rows(
        &ctx,
        "SELECT k, window_start, COUNT(*) AS n, SUM(v) AS s FROM t WHERE v > 0 GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
    )
    .await;
    assert_eq!(result, ["a|1970-01-01T00:00:00|4|10"]);
}

#[tokio::test]
async fn window_functions_with_two_partitionings_finish() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("id", ints(&[0, 1, 2])),
            ("a", ints(&[2, 0, 0])),
            ("ts", seconds(&[0, 1, 2])),
        ],
    );
    for streams in [1, 2, 3, 4] {
        let ctx = context(&path, streams, StreamOptions::default()).await;
        let result = rows(
            &ctx,
            "SELECT id, ROW_NUMBER() OVER (PARTITION BY a ORDER BY ts) AS w0, ROW_NUMBER() OVER (ORDER BY ts) AS w1 FROM t",
        )
        .await;
        assert_eq!(
            sorted(result),
            ["0|1|1", "1|1|2", "2|2|3"],
            "{streams} streams"
        );
    }
}

#[tokio::test]
async fn hopping_changes_apply_a_batch_record_by_record() {
    let ctx = StreamingContext::with_partitions(1);
    let batch = RecordBatch::try_from_iter(vec![
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from(vec![560, 559])) as ArrayRef,
        ),
        (
            "f",
            Arc::new(Float64Array::from(vec![Some(-2.09), None])) as ArrayRef,
        ),
    ])
    .unwrap();
    let options = StreamOptions {
        event_time: Some("ts".into()),
        out_of_orderness: Duration::from_millis(10),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", batch.schema(), vec![batch], options)
        .unwrap();
    let result = rows(
        &ctx,
        "SELECT window_start, COUNT(*) AS n, COUNT(f) AS nf FROM t GROUP BY hop(ts, INTERVAL '7 milliseconds', INTERVAL '21 milliseconds') EMIT CHANGES",
    )
    .await;
    // 560 ms opens a window of its own (its latest); the two windows the records share see
    // the record at 560 ms first, then the one at 559 ms.
    for window in ["1970-01-01T00:00:00.546", "1970-01-01T00:00:00.553"] {
        let of_window: Vec<&String> = result.iter().filter(|r| r.starts_with(window)).collect();
        assert_eq!(
            of_window,
            [&format!("{window}|1|1"), &format!("{window}|2|1")],
            "{result:?}"
        );
    }
}

#[tokio::test]
async fn a_window_left_to_datafusion_does_not_feed_a_streamed_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = parquet_row_per_group(
        dir.path(),
        vec![
            ("id", ints(&[0, 1])),
            ("k1", ints(&[1, 1])),
            ("k2", ints(&[2, 1])),
            ("ts", seconds(&[1, 4])),
            ("i1", ints(&[10, 20])),
        ],
    );
    let ctx = context(&path, 1, StreamOptions::default()).await;
    let result = rows(
        &ctx,
        "SELECT id, LEAD(i1, 10) OVER (PARTITION BY k2 ORDER BY ts) AS w0, LAST_VALUE(k1) OVER (PARTITION BY k2 ORDER BY ts) AS w1, DENSE_RANK() OVER (ORDER BY ts) AS w2 FROM t",
    )
    .await;
    assert_eq!(sorted(result), ["0|NULL|1|1", "1|NULL|1|2"]);
}

#[tokio::test]
async fn a_false_partitioned_by_declaration_is_an_error() {
    // Three source partitions take every third record: a symbol (record mod 10) is in all.
    let ctx = StreamingContext::with_partitions(3);
    ctx.register_generator(
        "market_data",
        freshet::GeneratorSpec::new(freshet::GeneratorKind::MarketData, Some(100_000)),
        StreamOptions {
            partitioned_by: vec!["symbol".into()],
            ..StreamOptions::default()
        },
    )
    .unwrap();
    let query = ctx
        .sql("SELECT symbol, window_start, COUNT(*) AS n FROM market_data GROUP BY symbol WINDOW TUMBLING (1m)")
        .await
        .unwrap();
    let error = execution_error(&query).await;
    assert!(
        error.contains("stream 'market_data' is declared partitioned_by=symbol")
            && error.contains("source partitions"),
        "{error}"
    );
    let line = freshet_error(&[
        "query",
        "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol",
        "--table",
        "market_data=generator:market_data,records=100k,partitioned_by=symbol",
        "--partitions",
        "3",
        "--output",
        "null",
    ]);
    assert!(line.contains("partitioned_by=symbol"), "{line}");
}

#[tokio::test]
async fn nan_next_to_one_other_value_is_read_as_nan() {
    // Parquet statistics leave NaN out: min = max = 1.5 must not make the column a constant.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    let batch = RecordBatch::try_from_iter(vec![
        ("ts", seconds(&[1, 2])),
        (
            "v",
            Arc::new(Float64Array::from(vec![f64::NAN, 1.5])) as ArrayRef,
        ),
    ])
    .unwrap();
    // One row group holding both rows.
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let ctx = context(&path, 1, StreamOptions::default()).await;
    assert_eq!(
        rows(&ctx, "SELECT v, isnan(v) AS nan FROM t").await,
        ["NaN|true", "1.5|false"]
    );
}

/// DataFusion lets an idle partition's reader take files queued for another: a source
/// partition would then replay another's rows, its progress would run ahead, and rows
/// would be dropped as late (one run in a few, on timing).
#[tokio::test]
async fn each_source_partition_reads_only_its_own_units() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir_all(&root).unwrap();
    let files: [&[(i64, i64, f64, i64)]; 3] = [
        &[
            (3, 8.25, 551),
            (2, 41.625, 910),
            (0, -96.125, 1442),
            (3, 78.625, 1554),
        ]
        .map(|(g, v, t)| (0, g, v, t)),
        &[
            (3, -61.625, 1713),
            (0, 1.25, 1732),
            (3, -70.0, 2547),
            (0, -8.125, 2712),
        ]
        .map(|(g, v, t)| (0, g, v, t)),
        &[(2, 82.75, 2827), (0, 44.375, 2909)].map(|(g, v, t)| (0, g, v, t)),
    ];
    for (index, rows) in files.iter().enumerate() {
        let column = |f: fn(&(i64, i64, f64, i64)) -> i64| rows.iter().map(f).collect::<Vec<_>>();
        let batch = RecordBatch::try_from_iter(vec![
            ("g", ints(&column(|r| r.1))),
            (
                "v",
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.2))) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(column(|r| 60_000 + r.3))) as ArrayRef,
            ),
        ])
        .unwrap();
        crate::support::write_parquet(&root.join(format!("part-{index}.parquet")), &batch, 3);
    }
    let options = StreamOptions {
        partitions: Some(3),
        ..StreamOptions::default()
    };
    let ctx = context(&root, 1, options).await;
    let sql = "SELECT g, window_start, SUM(v) AS s FROM TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND) GROUP BY window_start, window_end, g";
    for _ in 0..20 {
        assert_eq!(
            sorted(rows(&ctx, sql).await),
            [
                "0|1970-01-01T00:01:01|-94.875",
                "0|1970-01-01T00:01:02|36.25",
                "2|1970-01-01T00:01:00|41.625",
                "2|1970-01-01T00:01:02|82.75",
                "3|1970-01-01T00:01:00|8.25",
                "3|1970-01-01T00:01:01|17.0",
                "3|1970-01-01T00:01:02|-70.0",
            ]
        );
    }
}
