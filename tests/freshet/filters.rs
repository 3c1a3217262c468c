//! Filters and projections on random streams (null keys, NaN, disorder, empty and one-row
//! inputs, few and many keys) equal DataFusion batch at 1, 2 and 4 streams.

use freshet::testing::{Differential, RandomStream, TestTable};

const QUERIES: &[&str] = &[
    "SELECT k1, v, q FROM t WHERE v > 0",
    "SELECT k1, k2, v * 2 AS doubled, q + 1 AS q1 FROM t WHERE k1 IS NOT NULL AND q % 3 = 0",
    "SELECT * FROM t WHERE v IS NULL OR isnan(v)",
    "SELECT upper(k1) AS k, ts FROM t WHERE k2 IS NULL OR k2 < 2",
    "SELECT ts, v FROM t WHERE ts >= TIMESTAMP '2023-11-14 22:13:40' AND v <> 'NaN'::double",
    "SELECT coalesce(k1, 'none') AS k, CASE WHEN v > 100 THEN 'big' ELSE 'small' END AS size FROM t",
];

async fn check(stream: RandomStream) {
    let batches = stream.generate();
    for sql in QUERIES {
        Differential::same_sql(sql)
            .table(TestTable::batches(
                "t",
                RandomStream::schema(),
                batches.clone(),
            ))
            .run()
            .await
            .unwrap_or_else(|e| panic!("seed {}, {} rows: {e}", stream.seed, stream.rows));
    }
}

#[tokio::test]
async fn random_streams_match_datafusion() {
    for seed in 0..4 {
        check(RandomStream::new(seed).rows(2_000).disorder_ms(5_000)).await;
    }
}

#[tokio::test]
async fn many_keys_and_large_batches_match_datafusion() {
    check(
        RandomStream::new(11)
            .rows(20_000)
            .keys(5_000)
            .max_batch_rows(4_096),
    )
    .await;
}

#[tokio::test]
async fn empty_and_one_row_streams_match_datafusion() {
    check(RandomStream::new(7).rows(0)).await;
    check(RandomStream::new(8).rows(1)).await;
}

#[tokio::test]
async fn random_streams_really_hold_nulls_nans_and_disorder() {
    let batches = RandomStream::new(3)
        .rows(5_000)
        .disorder_ms(1_000)
        .generate();
    assert!(
        batches.iter().any(|b| b.num_rows() == 0),
        "some batch should be empty"
    );
    let nulls: usize = batches.iter().map(|b| b.column(0).null_count()).sum();
    assert!(nulls > 50, "k1 should hold nulls: {nulls}");
    let values: Vec<f64> = batches
        .iter()
        .flat_map(|b| {
            let v = b
                .column(2)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                .unwrap();
            v.iter().flatten().collect::<Vec<_>>()
        })
        .collect();
    assert!(values.iter().any(|v| v.is_nan()), "v should hold NaN");
    let times: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let ts = b
                .column(4)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::TimestampMillisecondArray>()
                .unwrap();
            ts.values().to_vec()
        })
        .collect();
    let mut max_seen = i64::MIN / 2;
    let mut out_of_order = 0;
    for t in times {
        assert!(t >= max_seen - 1_000, "disorder beyond its bound");
        out_of_order += usize::from(t < max_seen);
        max_seen = max_seen.max(t);
    }
    assert!(
        out_of_order > 100,
        "records should arrive out of order: {out_of_order}"
    );
}

/// A LIMIT that DataFusion folds into the operator below it (a filter, a join) stays a
/// LIMIT when Freshet replaces that operator: `n` rows that satisfy the query, at 1, 2 and 4
/// streams, and an endless stream's query ends after them.
#[tokio::test]
async fn a_limit_gives_its_rows_and_ends_the_query() {
    use datafusion::arrow::array::{Array, AsArray, RecordBatch};
    use datafusion::arrow::datatypes::Float64Type;
    use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
    use futures::TryStreamExt;

    let queries = [
        ("SELECT price FROM market_data WHERE price > 100 LIMIT 7", 7),
        (
            "SELECT price FROM market_data WHERE price > 100 LIMIT 7 OFFSET 3",
            7,
        ),
        (
            "SELECT price FROM (SELECT * FROM market_data WHERE price > 100 LIMIT 5) WHERE quantity > 0",
            5,
        ),
        (
            "SELECT a.price FROM market_data a JOIN market_data b ON a.symbol = b.symbol \
             AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND AND a.trade_time \
             WHERE a.price > 100 LIMIT 6",
            6,
        ),
    ];
    for records in [Some(20_000), None] {
        for partitions in [1, 2, 4] {
            let ctx = StreamingContext::with_partitions(partitions);
            ctx.register_generator(
                "market_data",
                GeneratorSpec::new(GeneratorKind::MarketData, records),
                StreamOptions::default(),
            )
            .unwrap();
            for (sql, rows) in queries {
                let query = ctx.sql(sql).await.unwrap();
                let batches: Vec<RecordBatch> =
                    query.execute_merged().unwrap().try_collect().await.unwrap();
                let prices: Vec<f64> = batches
                    .iter()
                    .flat_map(|b| b.column(0).as_primitive::<Float64Type>().values().to_vec())
                    .collect();
                assert_eq!(
                    prices.len(),
                    rows,
                    "{sql} at {partitions} streams over {records:?} records"
                );
                assert!(prices.iter().all(|p| *p > 100.0), "{sql}: {prices:?}");
                assert!(batches.iter().all(|b| b.column(0).null_count() == 0));
            }
        }
    }
}
