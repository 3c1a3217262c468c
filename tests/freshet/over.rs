//! Window functions over streams (OVER with ROWS frames) equal DataFusion's batch window
//! functions at 1, 2 and 4 streams: S1, random queries with several functions and frames,
//! one and two PARTITION BY keys, null keys and values, ties, disorder within the watermark,
//! empty input; late rows are dropped and counted.

use datafusion::arrow::array::{AsArray, RecordBatch, TimestampMillisecondArray};
use datafusion::arrow::compute::{filter_record_batch, kernels::cmp::gt_eq};
use datafusion::arrow::datatypes::TimestampMillisecondType;
use freshet::testing::{Differential, RandomStream, TestSource, TestTable};
use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
use futures::TryStreamExt;

use crate::support::{endless_market_data, execution_error, memory_limited_context};

const S1: &str = "SELECT symbol, price, \
LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, \
ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, \
AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg \
FROM market_data";

fn market_data(records: u64, batch_size: usize) -> TestTable {
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
    spec.batch_size = batch_size;
    TestTable::new("market_data", TestSource::Generator(spec))
}

/// A differential check of `sql` that fails if any window runs on DataFusion's operators.
fn streaming(sql: &str) -> Differential {
    Differential::same_sql(sql)
        .without_operator("BoundedWindowAggExec")
        .without_operator("WindowAggExec")
}

fn random_table(stream: &RandomStream) -> TestTable {
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_millis(stream.disorder_ms as u64),
        ..StreamOptions::default()
    };
    TestTable::batches("t", RandomStream::schema(), stream.generate()).with_options(options)
}

#[tokio::test]
async fn s1_equals_datafusion_window_functions() {
    streaming(S1)
        .table(market_data(30_000, 1_000))
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn s1_plans_freshet_operator_without_a_sort() {
    let ctx = endless_market_data();
    let plan = ctx.sql(S1).await.unwrap().explain();
    assert!(plan.contains("OverWindowExec"), "{plan}");
    assert!(
        plan.contains("StreamExchangeExec: strategy=hash([symbol@0])"),
        "{plan}"
    );
    assert!(!plan.contains("SortExec"), "{plan}");
    assert!(plan.contains("input=unbounded"), "{plan}");
}

/// Functions whose result depends on the order of rows with equal times, over streams where
/// every record has its own time.
#[tokio::test]
async fn random_order_dependent_functions_match_datafusion() {
    let queries = [
        "SELECT k1, ts, q, v, \
            ROW_NUMBER() OVER w AS n, LAG(v, 2, -1.5) OVER w AS before, LAG(k2) OVER w AS prev_k2, \
            FIRST_VALUE(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS first3, \
            LAST_VALUE(v) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS last3, \
            NTH_VALUE(q, 2) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) AS second, \
            FIRST_VALUE(v) OVER (PARTITION BY k1 ORDER BY ts ROWS UNBOUNDED PRECEDING) AS first_ever, \
            NTH_VALUE(k2, 3) OVER (PARTITION BY k1 ORDER BY ts ROWS UNBOUNDED PRECEDING) AS third_ever \
         FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts)",
        "SELECT k1, k2, ts, \
            SUM(q) OVER (PARTITION BY k1, k2 ORDER BY ts ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS s, \
            COUNT(v) OVER (PARTITION BY k1, k2 ORDER BY ts ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS c, \
            MIN(q) OVER (PARTITION BY k1, k2 ORDER BY ts ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS lo, \
            MAX(q) OVER (PARTITION BY k1, k2 ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS hi, \
            AVG(q) OVER (PARTITION BY k1, k2 ORDER BY ts ROWS UNBOUNDED PRECEDING) AS mean \
         FROM t",
        // Two PARTITION BYs: two operators, the second fed from the first.
        "SELECT k1, k2, ts, q, \
            ROW_NUMBER() OVER (PARTITION BY k1 ORDER BY ts) AS n1, \
            SUM(q) OVER (PARTITION BY k2 ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s2 \
         FROM t",
    ];
    for seed in 1..=3 {
        let stream = RandomStream::new(seed)
            .rows(2_500)
            .disorder_ms(1_000)
            .distinct_times();
        for sql in queries {
            streaming(sql)
                .table(random_table(&stream))
                .run()
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}

/// Frames from 1 to 10 000 rows over a float column (without NaN: DataFusion's sliding float
/// sums keep a NaN after it has left the frame).
#[tokio::test]
async fn frame_sizes_from_one_to_ten_thousand_rows() {
    let mut stream = RandomStream::new(11)
        .rows(12_000)
        .keys(2)
        .max_batch_rows(700)
        .distinct_times();
    stream.nan_fraction = 0.0;
    for preceding in [0, 1, 99, 9_999] {
        let sql = format!(
            "SELECT k1, ts, \
                SUM(v) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN {preceding} PRECEDING AND CURRENT ROW) AS s, \
                AVG(v) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN {preceding} PRECEDING AND CURRENT ROW) AS a, \
                MAX(v) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN {preceding} PRECEDING AND CURRENT ROW) AS m \
             FROM t"
        );
        streaming(&sql)
            .table(random_table(&stream))
            .partitions(&[1, 2])
            .run()
            .await
            .unwrap_or_else(|e| panic!("{preceding} PRECEDING: {e}"));
    }
}

/// Functions that treat rows with equal times alike (RANK, RANGE frames), over streams with
/// many equal times, in and out of order.
#[tokio::test]
async fn ties_follow_sql_for_ranks_and_range_frames() {
    let sql = "SELECT k1, ts, q, \
        RANK() OVER w AS r, DENSE_RANK() OVER w AS d, \
        COUNT(*) OVER w AS peers_and_before, SUM(q) OVER w AS running, MAX(q) OVER w AS top, \
        SUM(v) OVER w AS running_v \
        FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts)";
    // (step, disorder): equal times out of order, and one time for every record.
    for (step, disorder) in [(10, 30), (10, 700), (0, 0)] {
        let mut stream = RandomStream::new(21).rows(3_000).disorder_ms(disorder);
        stream.step_ms = step;
        streaming(sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("disorder {disorder}: {e}"));
    }
}

/// RANGE frames reaching a fixed distance back in time, over streams with equal times, in
/// and out of order, with nulls and NaN: SQL's frame (the rows within the distance, the
/// current row's peers included) at every stream count.
#[tokio::test]
async fn range_frames_with_an_offset_follow_sql() {
    let sql = "SELECT k1, ts, q, \
        SUM(q) OVER w AS s, COUNT(*) OVER w AS n, COUNT(v) OVER w AS nv, AVG(q) OVER w AS a, \
        MIN(v) OVER w AS low, MAX(q) OVER w AS high, SUM(v) OVER w AS sv \
        FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts RANGE BETWEEN INTERVAL '150' MILLISECOND PRECEDING AND CURRENT ROW)";
    for (step, disorder) in [(10, 30), (10, 700), (0, 0), (50, 0)] {
        let mut stream = RandomStream::new(23).rows(3_000).disorder_ms(disorder);
        stream.step_ms = step;
        // DataFusion's float MIN and SUM around NaN depend on its order of rows.
        stream.nan_fraction = 0.0;
        streaming(sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("step {step}, disorder {disorder}: {e}"));
    }
    // Over an endless stream it runs too (a RANGE frame with an offset was refused there).
    let ctx = endless_market_data();
    let query = ctx
        .sql("SELECT symbol, SUM(quantity) OVER (PARTITION BY symbol ORDER BY trade_time RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW) AS s FROM market_data")
        .await
        .unwrap();
    assert!(
        query.explain().contains("OverWindowExec"),
        "{}",
        query.explain()
    );
}

#[tokio::test]
async fn window_results_in_expressions_and_filters() {
    let sql = "SELECT k1, ts, q - LAG(q) OVER w AS delta, \
        CASE WHEN ROW_NUMBER() OVER w > 3 THEN 'steady' ELSE 'warmup' END AS phase \
        FROM t WHERE q > 10 WINDOW w AS (PARTITION BY k1 ORDER BY ts)";
    let outer = format!("SELECT * FROM ({sql}) WHERE delta IS NOT NULL AND delta > 0");
    let stream = RandomStream::new(31).rows(2_000).distinct_times();
    for sql in [sql.to_string(), outer] {
        streaming(&sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn empty_and_one_row_streams() {
    let sql = "SELECT k1, ROW_NUMBER() OVER w AS n, LAG(q) OVER w AS p, AVG(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS a FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts)";
    for rows in [0, 1] {
        let stream = RandomStream::new(41).rows(rows);
        streaming(sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("{rows} rows: {e}"));
    }
}

/// Records behind the watermark are dropped and counted; the rest equal the batch result
/// over the records that were in time. One stream from one source partition, so the
/// watermark is simply the largest time of the batches before, minus the bound.
#[tokio::test]
async fn late_rows_are_dropped_counted_and_the_rest_is_exact() {
    let stream = RandomStream::new(51)
        .rows(3_000)
        .disorder_ms(2_000)
        .max_batch_rows(50)
        .distinct_times();
    let batches = stream.generate();
    let declared_ms = 500;
    let mut in_time = Vec::new();
    let mut expected_late = 0;
    let mut watermark = i64::MIN;
    for batch in &batches {
        let times = batch.column(4).as_primitive::<TimestampMillisecondType>();
        let bound = TimestampMillisecondArray::new_scalar(watermark);
        let keep = gt_eq(times, &bound).unwrap();
        expected_late += batch.num_rows() - keep.true_count();
        in_time.push(filter_record_batch(batch, &keep).unwrap());
        if let Some(max) = times.iter().flatten().max() {
            watermark = watermark.max(max - declared_ms);
        }
    }
    assert!(
        expected_late > 100,
        "the data should have late rows: {expected_late}"
    );
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_millis(declared_ms as u64),
        partitions: Some(1),
        ..StreamOptions::default()
    };
    let sql = "SELECT k1, ts, ROW_NUMBER() OVER w AS n, SUM(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) AS s FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts)";
    let ctx = StreamingContext::with_partitions(1);
    ctx.register_batches("t", RandomStream::schema(), batches.clone(), options)
        .unwrap();
    let query = ctx.sql(sql).await.unwrap();
    let late = query.late_records();
    let actual: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    assert_eq!(
        query.metric_total("late_records_dropped"),
        expected_late,
        "late counter"
    );
    drop(query);
    let late: Vec<RecordBatch> = late.try_collect().await.unwrap();
    let late_rows: usize = late.iter().map(|b| b.num_rows()).sum();
    assert_eq!(late_rows, expected_late, "late side output");
    let expected = streaming(sql)
        .table(TestTable::batches("t", RandomStream::schema(), in_time))
        .batch_result()
        .await
        .unwrap();
    freshet::bench::compare::compare_results(&expected, &actual, false).unwrap();
    let rows: usize = actual.iter().map(|b| b.num_rows()).sum();
    assert_eq!(
        rows + late_rows,
        stream.rows,
        "every record is accounted for"
    );
}

#[tokio::test]
async fn predecessor_window_buffer_and_extended_named_windows() {
    let stream = RandomStream::new(61).rows(2_000).distinct_times();
    let batch = "SELECT k1, ts, AVG(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS a, \
        SUM(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s FROM t";
    let streaming_sql = "SELECT k1, ts, AVG(q) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY k1 ORDER BY ts) AS a, \
        SUM(q) OVER (w ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts)";
    Differential::new(streaming_sql, batch)
        .without_operator("BoundedWindowAggExec")
        .table(random_table(&stream))
        .run()
        .await
        .unwrap();
}

/// `EXPIRE AFTER … INACTIVITY` forgets a key that saw no row for that long: its next row
/// starts afresh.
#[tokio::test]
async fn idle_keys_expire() {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("q", DataType::Int64, false),
    ]));
    let batch = |rows: &[(&str, i64, i64)]| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                std::sync::Arc::new(TimestampMillisecondArray::from_iter_values(
                    rows.iter().map(|r| r.1),
                )),
                std::sync::Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    };
    let batches = vec![
        batch(&[("a", 0, 1), ("b", 0, 2)]),
        batch(&[("a", 1_000, 3)]),
        batch(&[("b", 100_000, 4)]),
        batch(&[("a", 200_000, 5), ("b", 200_500, 6)]),
    ];
    let run = |sql: &'static str| {
        let batches = batches.clone();
        let schema = schema.clone();
        async move {
            let ctx = StreamingContext::with_partitions(1);
            let options = StreamOptions {
                event_time: Some("ts".to_string()),
                partitions: Some(1),
                ..StreamOptions::default()
            };
            ctx.register_batches("t", schema, batches, options).unwrap();
            let query = ctx.sql(sql).await.unwrap();
            let rows: Vec<RecordBatch> =
                query.execute_merged().unwrap().try_collect().await.unwrap();
            // The table with one space between cells, whatever the column widths.
            let table = datafusion::arrow::util::pretty::pretty_format_batches(&rows)
                .unwrap()
                .to_string()
                .lines()
                .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("\n");
            (table, query.metric_total("keys_expired"))
        }
    };
    let (forgetting, expired) = run(
        "SELECT k, q, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts EXPIRE AFTER INTERVAL '1' MINUTE INACTIVITY) AS n FROM t",
    )
    .await;
    assert!(
        forgetting.contains("| a | 5 | 1 |"),
        "a restarts after 199 s idle:\n{forgetting}"
    );
    assert!(
        forgetting.contains("| b | 4 | 1 |"),
        "b restarts after 100 s idle:\n{forgetting}"
    );
    assert!(
        forgetting.contains("| b | 6 | 1 |"),
        "and again:\n{forgetting}"
    );
    assert_eq!(expired, 3);
    let (remembering, expired) =
        run("SELECT k, q, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS n FROM t").await;
    assert!(remembering.contains("| a | 5 | 3 |"), "{remembering}");
    assert!(remembering.contains("| b | 6 | 3 |"), "{remembering}");
    assert_eq!(expired, 0);
    // Rows waiting for a following row leave when their key expires, as at the end of input.
    let (leading, expired) = run(
        "SELECT k, q, LEAD(q, 1, -1) OVER (PARTITION BY k ORDER BY ts EXPIRE AFTER INTERVAL '1' MINUTE INACTIVITY) AS next FROM t",
    )
    .await;
    assert!(leading.contains("| a | 1 | 3 |"), "{leading}");
    assert!(
        leading.contains("| a | 3 | -1 |"),
        "a's tail closes at expiry:\n{leading}"
    );
    assert!(leading.contains("| a | 5 | -1 |"), "{leading}");
    assert!(leading.contains("| b | 2 | -1 |"), "{leading}");
    assert_eq!(expired, 3);
    let (leading, _) =
        run("SELECT k, q, LEAD(q, 1, -1) OVER (PARTITION BY k ORDER BY ts) AS next FROM t").await;
    assert!(leading.contains("| a | 3 | 5 |"), "{leading}");
}

/// LEAD and frames ending after the current row: each row leaves when its key has enough
/// following rows, the last rows of each key at the end of the input.
#[tokio::test]
async fn lead_and_following_frames_match_datafusion() {
    let sql = "SELECT k1, ts, q, \
        LEAD(v) OVER w AS next_v, LEAD(q, 3, -1) OVER w AS third_next, LAG(q) OVER w AS prev, \
        ROW_NUMBER() OVER w AS n, RANK() OVER w AS r, \
        SUM(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 2 PRECEDING AND 2 FOLLOWING) AS centred, \
        AVG(v) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN CURRENT ROW AND 5 FOLLOWING) AS ahead, \
        MAX(q) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING) AS top, \
        COUNT(v) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 3 PRECEDING AND 3 FOLLOWING) AS c, \
        FIRST_VALUE(k2) OVER (PARTITION BY k1 ORDER BY ts ROWS BETWEEN 2 PRECEDING AND 4 FOLLOWING) AS f \
        FROM t WINDOW w AS (PARTITION BY k1 ORDER BY ts)";
    for (seed, rows) in [(71, 2_500), (72, 3), (73, 0)] {
        let mut stream = RandomStream::new(seed)
            .rows(rows)
            .disorder_ms(800)
            .distinct_times();
        stream.nan_fraction = 0.0;
        streaming(sql)
            .table(random_table(&stream))
            .run()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}, {rows} rows: {e}"));
    }
}

#[tokio::test]
async fn lead_runs_on_an_endless_stream() {
    let ctx = endless_market_data();
    let query = ctx
        .sql("SELECT symbol, price, LEAD(price) OVER (PARTITION BY symbol ORDER BY trade_time) AS next_price FROM market_data LIMIT 5000")
        .await
        .unwrap();
    assert!(
        query.explain().contains("OverWindowExec"),
        "{}",
        query.explain()
    );
    let rows: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let rows: usize = rows.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 5_000);
}

#[tokio::test]
async fn window_state_beyond_the_memory_limit_is_a_clean_error() {
    let ctx = memory_limited_context(256 * 1024);
    // 200 000 keys, each holding a frame: far more state than 256 KiB.
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(200_000));
    spec.symbols = 200_000;
    ctx.register_generator("market_data", spec, StreamOptions::default())
        .unwrap();
    let query = ctx
        .sql("SELECT symbol, SUM(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS s FROM market_data")
        .await
        .unwrap();
    assert!(
        query.explain().contains("OverWindowExec"),
        "{}",
        query.explain()
    );
    let error = execution_error(&query).await;
    assert!(error.contains("OverWindowExec[0]"), "{error}");
}

#[tokio::test]
async fn a_long_lookahead_over_many_keys_holds_what_its_rows_need() {
    // 5 000 keys of one row each, LEAD 1 000 rows ahead: completing every key's last
    // rows at the end of the input once held 1 000 virtual rows per key (about 80 MB of
    // histories); a round of keys at a time fits in 16 MiB.
    let ctx = memory_limited_context(16 * 1024 * 1024);
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(5_000));
    spec.symbols = 5_000;
    ctx.register_generator("market_data", spec, StreamOptions::default())
        .unwrap();
    let query = ctx
        .sql("SELECT symbol, LEAD(quantity, 1000) OVER (PARTITION BY symbol ORDER BY trade_time) AS later FROM market_data")
        .await
        .unwrap();
    assert!(
        query.explain().contains("OverWindowExec"),
        "{}",
        query.explain()
    );
    let rows: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let rows: usize = rows.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 5_000);
}

/// A window over LEAD's output would see LEAD's delayed rows as late: on a bounded stream the
/// outer window runs on DataFusion's operator (correct at the end), on an endless one it is
/// refused.
#[tokio::test]
async fn windows_over_lead_output() {
    let sql = "SELECT k1, k2, ts, LEAD(q) OVER (PARTITION BY k1 ORDER BY ts) AS next_q, \
        ROW_NUMBER() OVER (PARTITION BY k2 ORDER BY ts) AS n2 FROM t";
    let stream = RandomStream::new(81).rows(2_000).distinct_times();
    Differential::same_sql(sql)
        .table(random_table(&stream))
        .run()
        .await
        .unwrap();
    let ctx = endless_market_data();
    let error = match ctx
        .sql("SELECT LEAD(price) OVER (PARTITION BY symbol ORDER BY trade_time) AS next_price, ROW_NUMBER() OVER (PARTITION BY trader_id ORDER BY trade_time) AS n FROM market_data")
        .await
    {
        Ok(_) => panic!("should not plan"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("separate query"), "{error}");
}
