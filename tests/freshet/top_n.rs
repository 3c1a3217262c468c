//! Top-N and keep-last de-duplication over streams (`ROW_NUMBER() … <= N`): the batch answer
//! on bounded input with ties ranked by arrival, at 1, 2 and 4 streams; an upsert changelog
//! keyed by the keys and the rank on endless input, which applied in order gives the batch
//! answer.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, Int64Array, RecordBatch, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
use freshet::testing::{Differential, TestSource, TestTable};
use freshet::{StreamOptions, StreamingContext};
use futures::TryStreamExt;

/// Rows `(k, v, seq, ts)`: 23 keys, values 0–29 (many ties), `seq` the arrival order, `ts`
/// four rows to a millisecond (ties in time too).
fn rows(count: i64) -> RecordBatch {
    let k = (0..count).map(|i| (i * 7919) % 23);
    let v = (0..count).map(|i| (i * 104_729 + i / 5) % 30);
    RecordBatch::try_from_iter([
        ("k", Arc::new(Int64Array::from_iter_values(k)) as ArrayRef),
        ("v", Arc::new(Int64Array::from_iter_values(v))),
        ("seq", Arc::new(Int64Array::from_iter_values(0..count))),
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from_iter_values(
                (0..count).map(|i| 1_700_000_000_000 + i / 4),
            )),
        ),
    ])
    .unwrap()
}

/// `rows(count)` as a Parquet file of row groups of 97 rows (ties cross row groups).
fn parquet(path: &Path, count: i64) {
    crate::support::write_parquet(path, &rows(count), 97);
}

fn table(path: &Path) -> TestTable {
    TestTable::new("t", TestSource::Parquet(path.to_path_buf())).with_options(StreamOptions {
        event_time: Some("ts".to_string()),
        ..StreamOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_n_ranks_equal_values_by_arrival_at_every_stream_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    parquet(&path, 3_000);
    let top = |order: &str| {
        format!(
            "SELECT k, v, seq, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY {order}) AS rn FROM t) WHERE rn <= 3"
        )
    };
    Differential::new(&top("v DESC"), &top("v DESC, seq"))
        .table(table(&path))
        .with_plan_text("TopNExec: n=3")
        .run()
        .await
        .unwrap();
    // The same rows replayed from memory in batches of 100.
    let batch = rows(3_000);
    let batches = (0..30).map(|i| batch.slice(i * 100, 100)).collect();
    let memory = TestTable::batches("t", batch.schema(), batches).with_options(StreamOptions {
        event_time: Some("ts".to_string()),
        ..StreamOptions::default()
    });
    Differential::new(&top("v DESC"), &top("v DESC, seq"))
        .table(memory)
        .run()
        .await
        .unwrap();
    // Without keys, `rn < 6` and the number first.
    Differential::new(
        "SELECT v, seq FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY v) AS rn FROM t) WHERE 6 > rn",
        "SELECT v, seq FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY v, seq) AS rn FROM t) WHERE rn <= 5",
    )
    .table(table(&path))
    .with_plan_text("TopNExec: n=5")
    .run()
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_last_de_duplication_keeps_the_later_arrival_of_equal_times() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    parquet(&path, 3_000);
    Differential::new(
        "SELECT k, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn FROM t) WHERE rn = 1",
        "SELECT k, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, seq DESC) AS rn FROM t) WHERE rn = 1",
    )
    .table(table(&path))
    .with_plan_text("ties: the later arrival first (keep last)")
    .run()
    .await
    .unwrap();
}

/// On an endless stream the top-N is a changelog; applied by (k, rank) it is the batch answer
/// (a file replayed as endless, applied in the file's order at every stream count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_top_n_is_a_changelog_that_applies_to_the_batch_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    parquet(&path, 3_000);
    let batch = rows(3_000);
    for streams in [1, 2, 4] {
        let ctx = StreamingContext::with_partitions(streams);
        let options = StreamOptions {
            event_time: Some("ts".to_string()),
            bounded: Some(false),
            ..StreamOptions::default()
        };
        ctx.register_parquet("t", path.to_str().unwrap(), options)
            .await
            .unwrap();
        let query = ctx
            .sql("SELECT k, seq, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM t) WHERE rn <= 3")
            .await
            .unwrap();
        assert!(
            query.explain().contains("emit=changes"),
            "{}",
            query.explain()
        );
        let out: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
        let mut applied = BTreeMap::new();
        let mut updates = 0;
        for batch in &out {
            let k = batch.column(0).as_primitive::<Int64Type>();
            let seq = batch.column(1).as_primitive::<Int64Type>();
            let rank = batch.column(2).as_primitive::<UInt64Type>();
            let op = batch.column(3).as_string::<i32>();
            for i in 0..batch.num_rows() {
                assert!(["+I", "+U"].contains(&op.value(i)), "{}", op.value(i));
                updates += (op.value(i) == "+U") as usize;
                applied.insert((k.value(i), rank.value(i)), seq.value(i));
            }
        }
        assert!(updates > 0, "later rows replace earlier ones");
        // The batch answer, ties to the earlier arrival.
        let mut expected = BTreeMap::new();
        let (k, v) = (
            batch.column(0).as_primitive::<Int64Type>(),
            batch.column(1).as_primitive::<Int64Type>(),
        );
        let mut by_key: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
        for i in 0..batch.num_rows() {
            by_key
                .entry(k.value(i))
                .or_default()
                .push((-v.value(i), i as i64));
        }
        for (key, mut ranked) in by_key {
            ranked.sort();
            for (rank, (_, seq)) in ranked.into_iter().take(3).enumerate() {
                expected.insert((key, rank as u64 + 1), seq);
            }
        }
        assert_eq!(applied, expected, "at {streams} streams");
    }
}

#[tokio::test]
async fn an_endless_top_n_must_show_its_rank() {
    let batch = rows(100);
    let ctx = StreamingContext::with_partitions(2);
    let options = StreamOptions {
        bounded: Some(false),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", batch.schema(), vec![batch], options)
        .unwrap();
    let error = crate::support::planning_error(
        &ctx,
        "SELECT k, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM t) WHERE rn <= 3",
    )
    .await;
    assert!(error.contains("select the ROW_NUMBER column"), "{error}");
}

/// The current rows of a changelog whose first column is its key: `+I` and `+U` replace the
/// key's row, `-D` removes it. Each row's other columns but `op`, as text.
fn apply_changelog(out: &[RecordBatch]) -> BTreeMap<String, Vec<String>> {
    let mut applied = BTreeMap::new();
    for batch in out {
        let op_at = batch.num_columns() - 1;
        let op = batch.column(op_at).as_string::<i32>();
        let text: Vec<Vec<String>> = (0..op_at)
            .map(|c| {
                let column = batch.column(c);
                (0..batch.num_rows())
                    .map(|i| {
                        datafusion::arrow::util::display::array_value_to_string(column, i).unwrap()
                    })
                    .collect()
            })
            .collect();
        for i in 0..batch.num_rows() {
            let row: Vec<String> = text.iter().map(|column| column[i].clone()).collect();
            match op.value(i) {
                "-D" => {
                    applied.remove(&row[0]);
                }
                "+I" | "+U" => {
                    applied.insert(row[0].clone(), row[1..].to_vec());
                }
                other => panic!("op {other}"),
            }
        }
    }
    applied
}

/// The rows of `sql` run by DataFusion batch over `batch` as table `t`, keyed by their first
/// column, as text.
async fn batch_answer(sql: &str, batch: &RecordBatch) -> BTreeMap<String, Vec<String>> {
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_batch("t", batch.clone()).unwrap();
    let out = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows = BTreeMap::new();
    for batch in &out {
        for i in 0..batch.num_rows() {
            let row: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| datafusion::arrow::util::display::array_value_to_string(c, i).unwrap())
                .collect();
            assert!(
                rows.insert(row[0].clone(), row[1..].to_vec()).is_none(),
                "keys are unique"
            );
        }
    }
    rows
}

/// The output of `sql` over the file `path` replayed as an endless stream at `streams`
/// streams, after checking that its plan holds `operator`.
async fn endless_output(
    path: &Path,
    streams: usize,
    sql: &str,
    operator: &str,
) -> Vec<RecordBatch> {
    let ctx = StreamingContext::with_partitions(streams);
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        bounded: Some(false),
        ..StreamOptions::default()
    };
    ctx.register_parquet("t", path.to_str().unwrap(), options)
        .await
        .unwrap();
    let running = ctx.sql(sql).await.unwrap();
    assert!(
        running.explain().contains(operator),
        "{}",
        running.explain()
    );
    running
        .execute_merged()
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// A window function over an endless top-N (Nexmark q6's form) reads its changelog: it emits
/// an upsert changelog keyed by the top-N's key which, applied in order, is the batch answer,
/// at every stream count; PARTITION BY a column of the key or not, frames bounded or reaching
/// the partition's start, and keys a filter deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_over_an_endless_top_n_is_a_changelog_that_applies_to_the_batch_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    parquet(&path, 3_000);
    let batch = rows(3_000);
    // Each key's highest v (ties to the earlier arrival), then windows over those rows.
    let query = |tie: &str, filter: &str, partition: &str| {
        format!(
            "SELECT k, seq, v, \
               SUM(v) OVER (PARTITION BY {partition} ORDER BY seq ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS recent, \
               COUNT(*) OVER (PARTITION BY {partition} ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS so_far, \
               MIN(seq) OVER (PARTITION BY {partition} ORDER BY seq ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS around, SUM(seq) OVER (PARTITION BY {partition} ORDER BY seq ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS next_to \
             FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC{tie}) AS rn FROM t) \
                   WHERE rn = 1) WHERE {filter}"
        )
    };
    let cases = [
        ("k % 3", "true"),
        // Not a column of the key: one stream.
        ("v % 2", "true"),
        // A key whose new top row fails the filter is deleted.
        ("k % 3", "v % 4 <> 1"),
    ];
    for (partition, filter) in cases {
        let expected = batch_answer(&query(", seq", filter, partition), &batch).await;
        for streams in [1, 2, 4] {
            let out = endless_output(
                &path,
                streams,
                &query("", filter, partition),
                "ChangelogOverExec",
            )
            .await;
            let deletions = out
                .iter()
                .map(|b| {
                    let op = b.column(b.num_columns() - 1).as_string::<i32>();
                    op.iter().filter(|op| *op == Some("-D")).count()
                })
                .sum::<usize>();
            assert_eq!(
                deletions > 0,
                filter != "true",
                "{partition} / {filter} at {streams} streams"
            );
            assert_eq!(
                apply_changelog(&out),
                expected,
                "{partition} / {filter} at {streams} streams"
            );
        }
    }
}

/// An aggregation over an endless top-1 (or keep-last de-duplication) applies its
/// changelog: each key's replaced row is retracted from its group, and the aggregation's own
/// changelog, applied in order, is the batch answer at every stream count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregation_over_an_endless_top_1_applies_its_changelog() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    parquet(&path, 3_000);
    let batch = rows(3_000);
    let query = |tie: &str| {
        format!(
            "SELECT k % 3 AS g, COUNT(*) AS n, SUM(v) AS s, MAX(seq) AS last \
             FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC{tie}) AS rn FROM t) \
                   WHERE rn = 1) GROUP BY k % 3"
        )
    };
    let expected = batch_answer(&query(", seq"), &batch).await;
    for streams in [1, 2, 4] {
        let out = endless_output(&path, streams, &query(""), "ChangelogAggregateExec").await;
        assert_eq!(apply_changelog(&out), expected, "at {streams} streams");
    }
}
