//! Two-phase aggregation: a partial step per source partition inside the exchange,
//! partial states shuffled to the final step. Results equal DataFusion batch SQL; late and
//! timeless records are counted and sent to the side output exactly as in one phase.

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use freshet::testing::{Differential, RandomStream, TestSource, TestTable};
use freshet::{StreamOptions, StreamingContext};
use futures::TryStreamExt;

use crate::aggregation::random_table;
use crate::support::{endless_market_data, planning_error};

const TWO_PHASE: &str = "partial_aggregate=[";

/// Keyed and keyless queries over tumbling windows, with the aggregates whose states are
/// more than one value (AVG, COUNT DISTINCT, STDDEV), FILTER, HAVING and a WHERE.
const QUERIES: [(&str, &str); 4] = [
    (
        "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '7' SECOND)",
        "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1, date_bin(INTERVAL '7 seconds', ts)",
    ),
    (
        "SELECT window_start, k1, k2, COUNT(v) AS n, COUNT(DISTINCT q) AS distinct_q, stddev(q) AS spread FROM t WHERE q > 10 GROUP BY k1, k2 WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
        "SELECT date_bin(INTERVAL '1 minute', ts) AS window_start, k1, k2, COUNT(v) AS n, COUNT(DISTINCT q) AS distinct_q, stddev(q) AS spread FROM t WHERE q > 10 GROUP BY k1, k2, date_bin(INTERVAL '1 minute', ts)",
    ),
    (
        "SELECT window_end, COUNT(*) AS n, SUM(q) FILTER (WHERE q > 50) AS big FROM t WINDOW TUMBLING (ts, INTERVAL '3' SECOND)",
        "SELECT date_bin(INTERVAL '3 seconds', ts) + INTERVAL '3 seconds' AS window_end, COUNT(*) AS n, SUM(q) FILTER (WHERE q > 50) AS big FROM t GROUP BY date_bin(INTERVAL '3 seconds', ts)",
    ),
    (
        "SELECT k2 % 3 AS bucket, MAX(q) AS top FROM t GROUP BY k2 % 3 WINDOW TUMBLING (ts, INTERVAL '20' SECOND) HAVING MAX(q) > 50",
        "SELECT k2 % 3 AS bucket, MAX(q) AS top FROM t GROUP BY k2 % 3, date_bin(INTERVAL '20 seconds', ts) HAVING MAX(q) > 50",
    ),
];

/// `stream` replayed from `sources` source partitions, or one per stream.
fn table(stream: &RandomStream, sources: Option<usize>) -> TestTable {
    let mut table = random_table(stream);
    table.options.partitions = sources;
    table
}

#[tokio::test]
async fn two_phase_window_aggregations_match_datafusion() {
    for seed in 0..2 {
        let stream = RandomStream::new(seed).rows(3_000).disorder_ms(2_000);
        for sources in [None, Some(1), Some(3)] {
            for (streaming, batch) in QUERIES {
                Differential::new(streaming, batch)
                    .table(table(&stream, sources))
                    .setting("freshet.partitioning_strategy", "two_phase")
                    .with_plan_text(TWO_PHASE)
                    .run()
                    .await
                    .unwrap_or_else(|e| panic!("seed {seed}, {sources:?} sources: {e}"));
            }
        }
    }
}

#[tokio::test]
async fn two_phase_hopping_windows_match_datafusion() {
    let stream = RandomStream::new(9).rows(2_000).disorder_ms(1_000);
    let batch = "SELECT k1, w AS window_start, COUNT(*) AS n, AVG(q) AS mean FROM (
            SELECT k1, q, date_bin(INTERVAL '5 seconds', ts) AS w FROM t
            UNION ALL SELECT k1, q, date_bin(INTERVAL '5 seconds', ts) - INTERVAL '5 seconds' AS w FROM t
            UNION ALL SELECT k1, q, date_bin(INTERVAL '5 seconds', ts) - INTERVAL '10 seconds' AS w FROM t
        ) GROUP BY k1, w";
    Differential::new(
        "SELECT k1, window_start, COUNT(*) AS n, AVG(q) AS mean FROM t GROUP BY k1 WINDOW HOPPING (ts, INTERVAL '15' SECOND, INTERVAL '5' SECOND) WITH ('partitioning_strategy' = 'two_phase')",
        batch,
    )
    .table(table(&stream, None))
    .with_plan_text(TWO_PHASE)
    .run()
    .await
    .unwrap();
}

/// Plain GROUP BYs (no window): keyed, with multi-value states, FILTER, HAVING, and global.
const PLAIN: [&str; 4] = [
    "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MIN(q) AS low, MAX(q) AS high FROM t GROUP BY k1",
    "SELECT k1, k2, COUNT(v) AS n, COUNT(DISTINCT q) AS distinct_q, stddev(q) AS spread FROM t WHERE q > 10 GROUP BY k1, k2 HAVING COUNT(*) > 1",
    "SELECT COUNT(*) AS n, SUM(q) FILTER (WHERE q > 50) AS big, AVG(v) AS mean FROM t",
    "SELECT k2 % 3 AS bucket, MAX(q) AS top FROM t GROUP BY k2 % 3",
];

#[tokio::test]
async fn plain_group_bys_match_datafusion_in_two_phases() {
    for seed in 0..2 {
        let stream = RandomStream::new(seed).rows(3_000).disorder_ms(2_000);
        for sources in [None, Some(1), Some(3)] {
            for sql in PLAIN {
                Differential::same_sql(sql)
                    .table(table(&stream, sources))
                    .setting("freshet.partitioning_strategy", "two_phase")
                    .with_plan_text(TWO_PHASE)
                    .run()
                    .await
                    .unwrap_or_else(|e| panic!("seed {seed}, {sources:?} sources: {sql}: {e}"));
            }
        }
    }
}

/// The rows the partial steps passed on without grouping, and the records the final step
/// counted in, running `sql` over `stream`.
async fn ungrouped_rows(stream: &RandomStream, sql: &str) -> (usize, usize) {
    let ctx = two_stream_context(stream);
    ctx.session()
        .sql("SET freshet.partitioning_strategy = 'two_phase'")
        .await
        .unwrap();
    let query = ctx.sql(sql).await.unwrap();
    let _: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    (
        query.metric_total("partial_ungrouped_rows"),
        query.metric_total("records_in"),
    )
}

#[tokio::test]
async fn a_partial_step_that_does_not_group_rows_passes_them_as_states() {
    // Keys drawn from a million: a batch's rows are nearly all different groups.
    let unique = RandomStream::new(11)
        .rows(40_000)
        .keys(1_000_000)
        .disorder_ms(1_000);
    let few = RandomStream::new(11).rows(40_000).disorder_ms(1_000);
    for (streaming, batch) in [
        (
            "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MAX(q) AS high FROM t GROUP BY k1",
            "SELECT k1, COUNT(*) AS n, SUM(q) AS total, AVG(v) AS mean, MAX(q) AS high FROM t GROUP BY k1",
        ),
        (
            "SELECT k2, COUNT(v) AS n, SUM(q) FILTER (WHERE q > 50) AS big FROM t GROUP BY k2 WINDOW TUMBLING (ts, INTERVAL '10' SECOND)",
            "SELECT k2, COUNT(v) AS n, SUM(q) FILTER (WHERE q > 50) AS big FROM t GROUP BY k2, date_bin(INTERVAL '10 seconds', ts)",
        ),
        (
            // Each row in two windows: two assignments per batch, one of them its latest.
            "SELECT k2, window_start, COUNT(*) AS n, AVG(q) AS mean FROM t GROUP BY k2 WINDOW HOPPING (ts, INTERVAL '10' SECOND, INTERVAL '5' SECOND)",
            "SELECT k2, w AS window_start, COUNT(*) AS n, AVG(q) AS mean FROM (
                SELECT k2, q, date_bin(INTERVAL '5 seconds', ts) AS w FROM t
                UNION ALL SELECT k2, q, date_bin(INTERVAL '5 seconds', ts) - INTERVAL '5 seconds' AS w FROM t
            ) GROUP BY k2, w",
        ),
    ] {
        let (ungrouped, records) = ungrouped_rows(&unique, streaming).await;
        assert!(ungrouped > 0, "{streaming}");
        assert_eq!(records, 40_000, "each record counted once: {streaming}");
        assert_eq!(ungrouped_rows(&few, streaming).await.0, 0, "{streaming}");
        Differential::new(streaming, batch)
            .table(table(&unique, Some(2)))
            .setting("freshet.partitioning_strategy", "two_phase")
            .with_plan_text(TWO_PHASE)
            .run()
            .await
            .unwrap_or_else(|e| panic!("{streaming}: {e}"));
    }
}

#[tokio::test]
async fn a_plain_group_by_on_several_streams_is_two_phase_by_default() {
    let ctx = two_stream_context(&RandomStream::new(3).rows(1_000));
    for (sql, exchange) in [
        (
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1",
            "strategy=hash([k1@1]), partitions=2->2 (auto: GROUP BY without a window; partial aggregates per source partition, states hashed on the GROUP BY keys), partial_aggregate=[count(Int64(1))]",
        ),
        (
            "SELECT COUNT(*) AS n FROM t",
            "strategy=fan_in, partitions=2->1 (auto: GROUP BY without a window; partial aggregates per source partition, one final stream), partial_aggregate=[count(Int64(1))]",
        ),
    ] {
        let plan = ctx.sql(sql).await.unwrap().explain();
        assert!(plan.contains(exchange), "{sql}: {plan}");
    }
    // One stream over one source partition: nothing runs in parallel, one phase is less work.
    let single = StreamingContext::with_partitions(1);
    single
        .register_batches(
            "t",
            RandomStream::schema(),
            RandomStream::new(3).rows(100).generate(),
            StreamOptions::default(),
        )
        .unwrap();
    let plan = single
        .sql("SELECT k1, COUNT(*) AS n FROM t GROUP BY k1")
        .await
        .unwrap()
        .explain();
    assert!(!plan.contains(TWO_PHASE), "{plan}");
}

#[tokio::test]
async fn empty_and_one_row_streams_aggregate_in_two_phases() {
    for rows in [0, 1] {
        let stream = RandomStream::new(5).rows(rows);
        Differential::new(
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '1' MINUTE) WITH ('partitioning_strategy' = 'two_phase')",
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1, date_bin(INTERVAL '1 minute', ts)",
        )
        .table(table(&stream, None))
        .with_plan_text(TWO_PHASE)
        .run()
        .await
        .unwrap();
        for sql in [
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1",
            "SELECT COUNT(*) AS n, SUM(q) AS total FROM t",
        ] {
            Differential::same_sql(sql)
                .table(table(&stream, None))
                .setting("freshet.partitioning_strategy", "two_phase")
                .with_plan_text(TWO_PHASE)
                .run()
                .await
                .unwrap_or_else(|e| panic!("{rows} rows: {sql}: {e}"));
        }
    }
}

/// The query's results, late-record count, timeless-record count and late records' `q`
/// values (sorted), from one source partition read by two streams.
async fn run_with_late_records(
    strategy: &str,
    stream: &RandomStream,
) -> (Vec<RecordBatch>, usize, usize, Vec<i64>) {
    let ctx = StreamingContext::with_partitions(2);
    // Declared out-of-orderness below the data's disorder: some records come late.
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_millis(300),
        partitions: Some(1),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", RandomStream::schema(), stream.generate(), options)
        .unwrap();
    let query = ctx
        .sql(&format!(
            "SELECT k1, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '2' SECOND) WITH ('partitioning_strategy' = '{strategy}')"
        ))
        .await
        .unwrap();
    let late_stream = query.late_records();
    let results: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let late = query.metric_total("late_records_dropped");
    let timeless = query.metric_total("null_event_time_dropped");
    drop(query);
    let late_rows: Vec<RecordBatch> = late_stream.try_collect().await.unwrap();
    let mut late_values: Vec<i64> = late_rows
        .iter()
        .flat_map(|b| {
            let q = b.column_by_name("q").unwrap().as_primitive::<Int64Type>();
            q.iter().map(|v| v.unwrap_or(i64::MIN)).collect::<Vec<_>>()
        })
        .collect();
    late_values.sort_unstable();
    (results, late, timeless, late_values)
}

#[tokio::test]
async fn late_and_timeless_records_are_counted_and_sent_as_in_one_phase() {
    let stream = RandomStream::new(17).rows(4_000).disorder_ms(3_000);
    let (one_phase, late, timeless, late_values) = run_with_late_records("hash", &stream).await;
    let (two_phase, late_2, timeless_2, late_values_2) =
        run_with_late_records("two_phase", &stream).await;
    assert!(late > 0, "the data must hold late records");
    assert_eq!((late_2, timeless_2), (late, timeless));
    assert_eq!(late_values_2.len(), late);
    assert_eq!(late_values_2, late_values);
    freshet::testing::compare_results(&one_phase, &two_phase, false).unwrap();
}

/// Two streams over `stream` as table `t`, one source partition per stream.
fn two_stream_context(stream: &RandomStream) -> StreamingContext {
    two_stream_context_over(stream, 2)
}

/// Two streams over `stream` as in-memory batches in `partitions` partitions.
fn two_stream_context_over(stream: &RandomStream, partitions: usize) -> StreamingContext {
    let ctx = StreamingContext::with_partitions(2);
    let table = table(stream, Some(partitions));
    let TestSource::Batches { schema, batches } = table.source else {
        unreachable!("random tables are batches");
    };
    ctx.register_batches("t", schema, batches, table.options)
        .unwrap();
    ctx
}

#[tokio::test]
async fn a_global_window_aggregate_is_two_phase_by_default() {
    let global = "SELECT COUNT(*) AS n FROM t WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)";
    let ctx = two_stream_context_over(&RandomStream::new(3).rows(1_000), 1);
    let plan = ctx.sql(global).await.unwrap().explain();
    assert!(
        plan.contains("strategy=fan_in, partitions=1->1 (auto: no keys; partial aggregates per source partition, one final stream), partial_aggregate=[count(Int64(1))]"),
        "{plan}"
    );
    // Over partitions merged in event time, partial steps taking turns in whatever order
    // they come would judge lateness differently from run to run.
    let ctx = two_stream_context(&RandomStream::new(3).rows(1_000));
    let merged = ctx.sql(global).await.unwrap().explain();
    assert!(!merged.contains(TWO_PHASE), "{merged}");
    let keyed = ctx
        .sql(
            "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
        )
        .await
        .unwrap()
        .explain();
    assert!(!keyed.contains(TWO_PHASE), "{keyed}");
}

#[tokio::test]
async fn two_phase_where_it_cannot_apply_is_a_clear_error() {
    let ctx = two_stream_context(&RandomStream::new(3).rows(100));
    let option = "WITH ('partitioning_strategy' = 'two_phase')";
    for (sql, expected) in [
        (
            format!(
                "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '1' MINUTE) EMIT CHANGES {option}"
            ),
            "two-phase aggregation needs EMIT FINAL",
        ),
        (
            format!(
                "SELECT k1, COUNT(*) AS n FROM t GROUP BY k1 WINDOW SESSION (ts, INTERVAL '1' SECOND) {option}"
            ),
            "does not apply to SESSION windows",
        ),
    ] {
        let error = planning_error(&ctx, &sql).await;
        assert!(error.contains(expected), "{sql}: {error}");
    }
    let sql = format!(
        "SELECT symbol, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS r FROM market_data {option}"
    );
    let error = planning_error(&endless_market_data(), &sql).await;
    assert!(
        error.contains(
            "'two_phase' applies to GROUP BY with EMIT FINAL over tumbling or hopping windows or without a window"
        ),
        "{error}"
    );
}

/// The results and late-record count of `sql` over the Parquet file at `path` (row groups
/// of disordered records, watermark below the disorder) on `streams` streams, and its plan.
async fn over_replay(path: &str, sql: &str, streams: usize) -> (Vec<RecordBatch>, usize, String) {
    let ctx = StreamingContext::with_partitions(streams);
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_millis(300),
        ..StreamOptions::default()
    };
    ctx.register_files("t", path, None, options).await.unwrap();
    let query = ctx.sql(sql).await.unwrap();
    let results: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let late = query.metric_total("late_records_dropped");
    (results, late, query.explain())
}

/// Over a replay of files, the partial steps of tumbling and hopping windows leave lateness
/// to the final step, which reads the states in the replay's order: the windows and the late
/// records are those of one phase at any number of streams (a hopping record loses its
/// closed windows alone, and is late once its latest one is closed).
#[tokio::test]
async fn over_a_replay_the_final_step_judges_late_records_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    let batches = RandomStream::new(23)
        .rows(20_000)
        .disorder_ms(3_000)
        .generate();
    let batch = datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    crate::support::write_parquet(&path, &batch, 1_500);
    let path = path.to_str().unwrap();
    for window in [
        "TUMBLING (ts, INTERVAL '2' SECOND)",
        "HOPPING (ts, INTERVAL '2' SECOND, INTERVAL '1' SECOND)",
    ] {
        let query = |strategy: &str| {
            format!(
                "SELECT k1, window_start, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 \
                 WINDOW {window} WITH ('partitioning_strategy' = '{strategy}')"
            )
        };
        for streams in [2, 4] {
            let (one_phase, late, _) = over_replay(path, &query("hash"), streams).await;
            let (two_phase, late_2, plan) = over_replay(path, &query("two_phase"), streams).await;
            assert!(plan.contains(TWO_PHASE), "{plan}");
            assert!(late > 0, "the data must hold late records");
            assert_eq!(late_2, late, "{window} at {streams} streams");
            freshet::testing::compare_results(&one_phase, &two_phase, false)
                .unwrap_or_else(|e| panic!("{window} at {streams} streams: {e}"));
        }
    }
}
