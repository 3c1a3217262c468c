//! A replay of stored data gives the same rows on every run and at any number of streams and
//! source partitions: records are applied in event-time order, ties in stored order, when
//! the source is in time order.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use freshet::testing::display_rows;
use freshet::{Pacing, StreamOptions, StreamingContext};
use futures::TryStreamExt;

const S1: &str = "SELECT symbol, price, \
    LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, \
    ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, \
    AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time \
                     ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg \
    FROM market_data";

const S3B: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price \
    FROM market_data GROUP BY trader_id, symbol \
    WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";

/// market_data in time order with two records per second (ties), in row groups of 333 rows,
/// so that source partitions split between two records of the same time.
fn time_ordered_file(dir: &Path, records: usize) -> PathBuf {
    time_ordered_file_in_groups(dir, records, 333, 2)
}

/// As [`time_ordered_file`], in row groups of `group_rows` rows, `per_second` records a
/// second.
fn time_ordered_file_in_groups(
    dir: &Path,
    records: usize,
    group_rows: usize,
    per_second: i64,
) -> PathBuf {
    let path = dir.join("market_data.parquet");
    write_market_data(&path, records, group_rows, per_second, 1_700_000_000_000);
    path
}

/// Writes market_data in time order from `start_ms` to `path`, as
/// [`time_ordered_file_in_groups`] describes.
fn write_market_data(
    path: &Path,
    records: usize,
    group_rows: usize,
    per_second: i64,
    start_ms: i64,
) {
    write_rows(
        path,
        records,
        group_rows,
        10,
        |i| 100.0 + (i % 50) as f64 + (i as f64 / 100.0).sin() * 10.0,
        |i| start_ms + (i as i64 / per_second) * 1_000,
    );
}

/// Writes `records` market_data rows over `symbols` symbols, with the prices and times
/// given per row, in row groups of `group_rows` rows.
fn write_rows(
    path: &Path,
    records: usize,
    group_rows: usize,
    symbols: usize,
    price: impl Fn(usize) -> f64,
    time: impl Fn(usize) -> i64,
) {
    let symbol: Vec<String> = (0..records)
        .map(|i| format!("SYM{}", i % symbols))
        .collect();
    let trader: Vec<String> = (0..records).map(|i| format!("TRADER{}", i % 20)).collect();
    let batch = RecordBatch::try_from_iter([
        ("symbol", Arc::new(StringArray::from(symbol)) as ArrayRef),
        ("trader_id", Arc::new(StringArray::from(trader))),
        (
            "price",
            Arc::new(Float64Array::from_iter_values((0..records).map(price))),
        ),
        (
            "trade_time",
            Arc::new(TimestampMillisecondArray::from_iter_values(
                (0..records).map(time),
            )),
        ),
    ])
    .unwrap();
    crate::support::write_parquet(path, &batch, group_rows);
}

/// The query's rows in output order, over `path` read as `source_partitions` partitions on
/// `streams` streams.
async fn run(path: &Path, sql: &str, source_partitions: usize, streams: usize) -> Vec<String> {
    run_planned(path, sql, Some(source_partitions), streams)
        .await
        .1
}

/// The query's plan and rows in output order, over `path` read as `source_partitions`
/// partitions (if given) on `streams` streams.
async fn run_planned(
    path: &Path,
    sql: &str,
    source_partitions: Option<usize>,
    streams: usize,
) -> (String, Vec<String>) {
    let options = StreamOptions {
        event_time: Some("trade_time".into()),
        partitions: source_partitions,
        ..StreamOptions::default()
    };
    run_with(path, sql, options, streams).await
}

/// The query's plan and rows in output order, over `path` registered with `options`, on
/// `streams` streams.
async fn run_with(
    path: &Path,
    sql: &str,
    options: StreamOptions,
    streams: usize,
) -> (String, Vec<String>) {
    let (plan, rows, _) = run_counting_late(path, sql, options, streams).await;
    (plan, rows)
}

/// As [`run_with`], also with the records the query dropped as late.
async fn run_counting_late(
    path: &Path,
    sql: &str,
    options: StreamOptions,
    streams: usize,
) -> (String, Vec<String>, usize) {
    run_counting_late_with(path, sql, options, streams, &[]).await
}

/// As [`run_counting_late`], after the `SET` statements `settings`.
async fn run_counting_late_with(
    path: &Path,
    sql: &str,
    options: StreamOptions,
    streams: usize,
    settings: &[&str],
) -> (String, Vec<String>, usize) {
    let ctx = StreamingContext::with_partitions(streams);
    // Split the small file into byte ranges as a large one would be.
    ctx.session()
        .sql("SET datafusion.optimizer.repartition_file_min_size = 0")
        .await
        .unwrap();
    for setting in settings {
        ctx.session().sql(setting).await.unwrap();
    }
    ctx.register_parquet("market_data", path.to_str().unwrap(), options)
        .await
        .unwrap();
    let query = ctx.sql(sql).await.unwrap();
    let collect = query.execute_merged().unwrap().try_collect::<Vec<_>>();
    let batches = tokio::time::timeout(Duration::from_secs(60), collect)
        .await
        .expect("a result within 60 s")
        .unwrap();
    let rows = display_rows(&batches)
        .unwrap()
        .into_iter()
        .map(|cells| cells.join("|"))
        .collect();
    let late = query.metric_total("late_records_dropped");
    (query.explain(), rows, late)
}

/// Runs `sql` at 1, 2 and 4 source partitions and streams: one stream gives the one-partition
/// changelog row for row, several give its rows (their interleaving across streams is free).
async fn assert_same_at_every_split(sql: &str) {
    assert_same_at_every_split_of(sql, 333, 2).await;
}

/// As [`assert_same_at_every_split`], over row groups of `group_rows` rows and
/// `per_second` records a second.
async fn assert_same_at_every_split_of(sql: &str, group_rows: usize, per_second: i64) {
    let dir = tempfile::tempdir().unwrap();
    let path = time_ordered_file_in_groups(dir.path(), 4_000, group_rows, per_second);
    let reference = run(&path, sql, 1, 1).await;
    assert_eq!(reference.len(), 4_000, "one row per record");
    let mut reference_rows = reference.clone();
    reference_rows.sort();
    for source_partitions in [1, 2, 4] {
        for streams in [1, 2, 4] {
            let rows = run(&path, sql, source_partitions, streams).await;
            if streams == 1 {
                assert!(
                    rows == reference,
                    "{source_partitions} source partitions on one stream differ"
                );
            } else {
                let mut rows = rows;
                rows.sort();
                assert!(
                    rows == reference_rows,
                    "{source_partitions} source partitions on {streams} streams differ"
                );
            }
        }
    }
}

#[tokio::test]
async fn window_changes_are_the_same_at_every_split() {
    assert_same_at_every_split(S3B).await;
}

#[tokio::test]
async fn over_windows_with_ties_are_the_same_at_every_split() {
    assert_same_at_every_split(S1).await;
}

/// An aggregation without a window needs no watermark, but its changelog depends on the
/// order its records come in: source partitions dealt for an event-time merge are merged in
/// event-time order for it too (merged by batch number, row groups came out of order where
/// a tie kept a row group on the partition of the one before). Both queries read the
/// event-time column, which the merge needs.
#[tokio::test]
async fn unwindowed_changes_are_the_same_at_every_split() {
    for (group_rows, per_second) in [(333, 2), (7, 3)] {
        assert_same_at_every_split_of(
            "SELECT COUNT(*) AS n, SUM(price) AS total, MAX(trade_time) AS newest \
             FROM market_data EMIT CHANGES",
            group_rows,
            per_second,
        )
        .await;
        assert_same_at_every_split_of(
            "SELECT symbol, COUNT(*) AS n, SUM(price) AS total, MAX(trade_time) AS newest \
             FROM market_data GROUP BY symbol EMIT CHANGES",
            group_rows,
            per_second,
        )
        .await;
    }
}

/// market_data out of event-time order: each record up to 12 s before the second it
/// would have in order, with ties, in row groups of 97 rows.
fn disordered_file(dir: &Path, records: usize) -> PathBuf {
    let path = dir.join("disordered.parquet");
    write_rows(
        &path,
        records,
        97,
        7,
        |i| (i % 13) as f64,
        |i| {
            let jitter = (i as i64 * 7_919) % 13;
            1_700_000_000_000 + (i as i64 / 3 - jitter) * 1_000
        },
    );
    path
}

/// A disordered file is applied in file order at any split, bounded or not: a changelog per
/// record (also of a query that does not read the event time), the records dropped as late,
/// and the windows they leave are those of one stream reading the file.
#[tokio::test]
async fn a_disordered_file_is_applied_in_file_order_at_every_split() {
    let dir = tempfile::tempdir().unwrap();
    let path = disordered_file(dir.path(), 3_000);
    let queries = [
        "SELECT SUM(price) AS total, COUNT(*) AS n FROM market_data EMIT CHANGES",
        "SELECT symbol, SUM(price) AS total, MAX(trade_time) AS newest \
         FROM market_data GROUP BY symbol EMIT CHANGES",
        "SELECT symbol, window_start, COUNT(*) AS n, SUM(price) AS total FROM market_data \
         GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '5' SECOND) EMIT CHANGES",
        // Without keys: not two-phase, whose steps would judge lateness per partition.
        "SELECT window_start, COUNT(*) AS n, SUM(price) AS total FROM market_data \
         WINDOW TUMBLING (trade_time, INTERVAL '5' SECOND)",
        // Filtered: DataFusion puts a repartition under the filter, which goes too.
        "SELECT window_start, COUNT(*) AS n FROM market_data WHERE price > 2 \
         WINDOW HOPPING (trade_time, INTERVAL '4' SECOND, INTERVAL '2' SECOND)",
    ];
    assert_file_order_at_every_split(&path, &queries).await;
}

/// A tumbling-window aggregation over a file routes rows in runs of event time (whole
/// windows, each run to one stream): with runs of about 40 records, a disordered file's
/// windows spread over the streams and its batches are cut at runs, yet every window,
/// changelog row and late record is the one stream's, at every split.
#[tokio::test]
async fn tumbling_windows_in_time_runs_are_the_same_at_every_split() {
    let dir = tempfile::tempdir().unwrap();
    let path = disordered_file(dir.path(), 3_000);
    let queries = [
        "SELECT trader_id, symbol, window_start, COUNT(*) AS n, SUM(price) AS total \
         FROM market_data GROUP BY trader_id, symbol \
         WINDOW TUMBLING (trade_time, INTERVAL '5' SECOND)",
        "SELECT symbol, window_end, COUNT(*) AS n, AVG(price) AS mean FROM market_data \
         GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '3' SECOND) EMIT CHANGES",
        "SELECT symbol, window_start, MAX(price) AS high FROM market_data WHERE price > 1 \
         GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '2' SECOND) \
         HAVING COUNT(*) > 1",
    ];
    let settings = ["SET freshet.time_run_records = 40"];
    assert_same_at_every_split_with(&path, &queries, &settings, |streams, plan| {
        assert_eq!(
            plan.contains("strategy=time_runs"),
            streams > 1,
            "{streams} streams: {plan}"
        );
    })
    .await;
}

/// Window functions over other window functions' output with other PARTITION BY keys number
/// ties in file order at any split: the windows below are hashed on the keys they share
/// with those above (none: one stream), and those above keep the rows where they are.
#[tokio::test]
async fn stacked_window_functions_number_ties_in_file_order_at_every_split() {
    let dir = tempfile::tempdir().unwrap();
    let path = disordered_file(dir.path(), 3_000);
    let queries = [
        "SELECT price, ROW_NUMBER() OVER (ORDER BY trade_time) AS everywhere, \
         ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS per_symbol \
         FROM market_data",
        "SELECT price, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS a, \
         SUM(price) OVER (PARTITION BY symbol, trader_id ORDER BY trade_time \
                          ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS b, \
         ROW_NUMBER() OVER (PARTITION BY trader_id ORDER BY trade_time) AS c \
         FROM market_data",
    ];
    assert_file_order_at_every_split(&path, &queries).await;
}

/// A paced replay read by one reader and dealt to several partitions in slices, a dealing
/// that depends on timing, is applied in the file's order all the same: the slices are
/// numbered and the exchange merges them by number.
#[tokio::test]
async fn a_paced_replay_is_applied_in_file_order_at_every_split() {
    let dir = tempfile::tempdir().unwrap();
    let path = disordered_file(dir.path(), 3_000);
    let queries = [
        "SELECT symbol, SUM(price) AS total, COUNT(*) AS n FROM market_data \
         GROUP BY symbol EMIT CHANGES",
        "SELECT symbol, window_start, COUNT(*) AS n FROM market_data \
         GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '5' SECOND)",
        "SELECT price, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS n \
         FROM market_data",
    ];
    for sql in queries {
        let mut reference: Option<(Vec<String>, usize)> = None;
        for partitions in [1, 2, 4] {
            let options = StreamOptions {
                event_time: Some("trade_time".into()),
                out_of_orderness: Duration::from_secs(4),
                partitions: Some(partitions),
                pacing: Pacing::RecordsPerSecond(50_000.0),
                ..StreamOptions::default()
            };
            let (plan, mut rows, late) = run_counting_late(&path, sql, options, partitions).await;
            if partitions > 1 {
                assert!(plan.contains("DealExec"), "{plan}");
            }
            rows.sort();
            match &reference {
                None => reference = Some((rows, late)),
                Some((expected, expected_late)) => {
                    assert_eq!(late, *expected_late, "late records at {partitions}: {sql}");
                    assert!(rows == *expected, "{partitions} partitions differ: {sql}");
                }
            }
        }
    }
}

/// Runs each query over the file at (source partitions, streams) = (1, 1), (2, 2), (4, 4),
/// (3, 2) and (2, 4), bounded and not: the rows and the late records are the first run's.
async fn assert_file_order_at_every_split(path: &Path, queries: &[&str]) {
    assert_same_at_every_split_with(path, queries, &[], |_, _| {}).await;
}

/// As [`assert_file_order_at_every_split`], after the `SET` statements `settings`, with
/// `check_plan` called on each run's stream count and plan.
async fn assert_same_at_every_split_with(
    path: &Path,
    queries: &[&str],
    settings: &[&str],
    check_plan: impl Fn(usize, &str),
) {
    for bounded in [true, false] {
        for &sql in queries {
            let mut reference: Option<(Vec<String>, usize)> = None;
            for (source_partitions, streams) in [(1, 1), (2, 2), (4, 4), (3, 2), (2, 4)] {
                let options = StreamOptions {
                    event_time: Some("trade_time".into()),
                    out_of_orderness: Duration::from_secs(4),
                    partitions: Some(source_partitions),
                    bounded: Some(bounded),
                    ..StreamOptions::default()
                };
                let (plan, mut rows, late) =
                    run_counting_late_with(path, sql, options, streams, settings).await;
                check_plan(streams, &plan);
                rows.sort();
                match &reference {
                    None => reference = Some((rows, late)),
                    Some((expected, expected_late)) => {
                        assert_eq!(
                            late, *expected_late,
                            "late records at {source_partitions} source partitions on \
                             {streams} streams, bounded={bounded}: {sql}"
                        );
                        assert!(
                            rows == *expected,
                            "{source_partitions} source partitions on {streams} streams, \
                             bounded={bounded}, differ: {sql}"
                        );
                    }
                }
            }
            if sql.contains("WINDOW") {
                let (_, late) = reference.as_ref().unwrap();
                assert!(*late > 0, "the file has late records for the window");
            }
        }
    }
}

/// A directory whose file names do not follow event time is replayed in event-time order
/// of its Parquet files (by their statistics): replayed by name, the later file would come
/// first and every record of the earlier one would be late.
#[tokio::test]
async fn a_directory_is_replayed_in_event_time_order_of_its_files() {
    let dir = tempfile::tempdir().unwrap();
    // "a" holds the second hour, "b" the first.
    write_market_data(
        &dir.path().join("a.parquet"),
        2_000,
        500,
        1,
        1_700_003_600_000,
    );
    write_market_data(
        &dir.path().join("b.parquet"),
        2_000,
        500,
        1,
        1_700_000_000_000,
    );
    let sql = "SELECT symbol, window_start, COUNT(*) AS n FROM market_data \
               GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' MINUTE)";
    for streams in [1, 2, 4] {
        let options = StreamOptions {
            event_time: Some("trade_time".into()),
            ..StreamOptions::default()
        };
        let (_, rows) = run_with(dir.path(), sql, options, streams).await;
        let counted: u64 = rows
            .iter()
            .map(|row| row.rsplit('|').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, 4_000, "{streams} streams: every record counted");
    }
}

/// A plain GROUP BY runs its partial step per source partition, so at one stream a file
/// whose partitions nobody chose is read on every core; a keyed window, whose one stream
/// would merge the partitions in event-time order, reads it as one partition.
#[tokio::test]
async fn a_plain_group_by_reads_its_file_on_every_core() {
    let dir = tempfile::tempdir().unwrap();
    let path = time_ordered_file(dir.path(), 4_000);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let group_by = "SELECT symbol, COUNT(*) AS n, MIN(price) AS low, MAX(trader_id) AS last \
        FROM market_data WHERE price > 95 GROUP BY symbol ORDER BY symbol";
    let (plan, rows) = run_planned(&path, group_by, None, 1).await;
    assert!(
        plan.contains(&format!("source_partitions={cores}")),
        "{plan}"
    );
    let (one_partition, reference) = run_planned(&path, group_by, Some(1), 1).await;
    assert!(
        one_partition.contains("source_partitions=1"),
        "{one_partition}"
    );
    assert_eq!(rows, reference);
    assert_eq!(rows.len(), 10);
    let (window_plan, _) = run_planned(&path, S3B, None, 1).await;
    assert!(window_plan.contains("source_partitions=1"), "{window_plan}");
}

/// A paced file replay is read by one reader: paced by records, partitions that take turns
/// by row group would each hold the others' rows back in a keyed operator's event-time
/// merge (the stream ran at half its rate). Unless the user chose partitions it is one
/// partition; chosen partitions are dealt its rows in turns. The rows are the unpaced
/// replay's.
#[tokio::test]
async fn a_paced_file_replay_is_read_by_one_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = time_ordered_file(dir.path(), 4_000);
    let paced = |partitions| StreamOptions {
        event_time: Some("trade_time".into()),
        partitions,
        pacing: Pacing::RecordsPerSecond(400_000.0),
        ..StreamOptions::default()
    };
    let (plan, mut rows) = run_with(&path, S1, paced(None), 2).await;
    assert!(plan.contains("source_partitions=1"), "{plan}");
    let mut reference = run(&path, S1, 2, 2).await;
    rows.sort();
    reference.sort();
    assert_eq!(rows, reference);
    // Partitions the user chose are dealt one reader's rows in turns, each partition
    // covering the whole time range.
    let (chosen, mut rows) = run_with(&path, S3B, paced(Some(2)), 2).await;
    assert!(chosen.contains("source_partitions=2"), "{chosen}");
    assert!(
        chosen.contains("DealExec: partitions=1->2, slices of 4000 rows"),
        "{chosen}"
    );
    let mut reference = run(&path, S3B, 2, 2).await;
    rows.sort();
    reference.sort();
    assert_eq!(rows, reference);
}

/// Once every core decodes (a source partition per core), a light consumer (a filter, a
/// partial aggregation) reads its source partitions in its own task; a keyed operator keeps
/// each partition's reader in a task of its own. Either way the rows are the same.
#[tokio::test]
async fn light_consumers_read_their_sources_where_they_consume_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = time_ordered_file(dir.path(), 4_000);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let filter = "SELECT symbol, price FROM market_data WHERE price > 104";
    let (plan, mut rows) = run_planned(&path, filter, Some(cores), cores).await;
    assert!(plan.contains("read where consumed"), "{plan}");
    let (plan, mut reference) = run_planned(&path, filter, Some(1), 1).await;
    assert_eq!(
        plan.contains("read where consumed"),
        cores == 1,
        "one partition on {cores} cores: {plan}"
    );
    rows.sort();
    reference.sort();
    assert_eq!(rows, reference);
    // A hash exchange's input task routes the rows it decodes: over a file, no task between.
    let (plan, _) = run_planned(&path, S3B, Some(cores), cores).await;
    assert!(plan.contains("read where consumed"), "{plan}");
    // Under an OVER window at one stream per source partition too, but not below one
    // stream reading one partition of a file on several cores: it reads ahead.
    let (plan, _) = run_planned(&path, S1, Some(1), 1).await;
    assert_eq!(plan.contains("read where consumed"), cores == 1, "{plan}");
}

/// A Parquet file replayed without an event time is dealt to its source partitions in turn,
/// unit by unit: each of two partitions reads half of the row groups (every unit after the
/// first once went to the last partition, leaving one stream idle).
#[test]
fn a_parquet_replay_without_event_time_is_split_evenly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("orders.parquet");
    // Row groups of 128 Ki rows: six of them.
    crate::support::gen_orders(&file, "700000", &[]);
    let table = format!("orders={}", file.display());
    let plan = crate::support::freshet_ok(&[
        "explain",
        "SELECT order_id FROM orders",
        "--table",
        &table,
        "--partitions",
        "2",
    ]);
    let groups = plan
        .split("file_groups={2 groups: [")
        .nth(1)
        .and_then(|rest| rest.split("]]").next())
        .unwrap_or_else(|| panic!("no two file groups in {plan}"));
    let units: Vec<usize> = groups
        .split("], [")
        .map(|group| group.matches("orders.parquet").count())
        .collect();
    assert_eq!(units, [3, 3], "{plan}");
}

/// A local Parquet file is read through a memory map unless `memory_map=false` copies it out
/// as other stores are read; both read the same records.
#[tokio::test]
async fn a_local_file_is_mapped_or_copied_as_its_stream_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = disordered_file(dir.path(), 3_000);
    let mut results = Vec::new();
    for memory_map in ["true", "false"] {
        let mut options = StreamOptions {
            event_time: Some("trade_time".into()),
            ..StreamOptions::default()
        };
        options.set("memory_map", memory_map).unwrap();
        let ctx = StreamingContext::with_partitions(2);
        ctx.register_parquet("market_data", path.to_str().unwrap(), options)
            .await
            .unwrap();
        let query = ctx.sql(S3B).await.unwrap();
        let batches = query
            .execute_merged()
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        let mut rows = display_rows(&batches).unwrap();
        rows.sort();
        let mapped = query.metric_total("reads_memory_mapped");
        assert_eq!(
            mapped > 0,
            memory_map == "true",
            "memory_map={memory_map}: {mapped} reads mapped"
        );
        results.push(rows);
    }
    assert!(!results[0].is_empty());
    assert_eq!(results[0], results[1]);
}
