//! Choosing how a keyed aggregation is fed: the user's `partitioning_strategy` when it gives
//! correct results, else the automatic choice; every valid strategy gives the batch result.
//! Stateless queries over a stream with fewer partitions than streams get Freshet's exchange too.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::expressions::col;
use datafusion::prelude::SessionContext;
use freshet::partitioner::{Router, RoutingStrategy};
use freshet::testing::{Differential, RandomStream, TestTable, compare_results};
use freshet::{ReplaySource, StreamOptions, StreamingContext};
use futures::TryStreamExt;

use crate::support::planning_error;

const WINDOWED: &str = "SELECT k1, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1 WINDOW TUMBLING (ts, INTERVAL '7' SECOND)";
const BATCH: &str = "SELECT k1, COUNT(*) AS n, SUM(q) AS total FROM t GROUP BY k1, date_bin(INTERVAL '7 seconds', ts)";

/// Random rows split over `partitions` source partitions by a hash of k1, in order.
fn keyed_partitions(partitions: usize) -> (Vec<RecordBatch>, Vec<Vec<RecordBatch>>) {
    split_by_k1(21, 3_000, partitions, 0)
}

/// `rows` random rows of seed `seed` split by a hash of k1 over `partitions` source
/// partitions, in order, the partition numbers turned by `turn`.
fn split_by_k1(
    seed: u64,
    rows: usize,
    partitions: usize,
    turn: usize,
) -> (Vec<RecordBatch>, Vec<Vec<RecordBatch>>) {
    let batches = RandomStream::new(seed)
        .rows(rows)
        .disorder_ms(1_000)
        .generate();
    let key = col("k1", &RandomStream::schema()).unwrap();
    let mut router = Router::try_new(&RoutingStrategy::Hash(vec![key]), 0, 1, partitions).unwrap();
    let mut split = vec![Vec::new(); partitions];
    for batch in &batches {
        for (partition, piece) in router.route(batch.clone()).unwrap() {
            split[(partition + turn) % partitions].push(piece);
        }
    }
    (batches, split)
}

fn context(partitions: usize, partitioned_by: &[&str]) -> (StreamingContext, Vec<RecordBatch>) {
    context_onto(partitions, partitions, partitioned_by)
}

/// `sources` source partitions read by `streams` streams.
fn context_onto(
    sources: usize,
    streams: usize,
    partitioned_by: &[&str],
) -> (StreamingContext, Vec<RecordBatch>) {
    let (batches, split) = keyed_partitions(sources);
    let ctx = StreamingContext::with_partitions(streams);
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_secs(1),
        partitioned_by: partitioned_by.iter().map(|c| c.to_string()).collect(),
        ..StreamOptions::default()
    };
    ctx.register_stream(
        "t",
        ReplaySource::Partitioned {
            schema: RandomStream::schema(),
            partitions: split,
        },
        options,
    )
    .unwrap();
    (ctx, batches)
}

/// Asserts that `query`'s result is `sql`'s on DataFusion batch over `batches` as `t`.
async fn equals_batch_sql(query: &freshet::StreamingQuery, batches: Vec<RecordBatch>, sql: &str) {
    let actual: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let batch = SessionContext::new();
    batch
        .register_batch(
            "t",
            datafusion::arrow::compute::concat_batches(&RandomStream::schema(), &batches).unwrap(),
        )
        .unwrap();
    let expected = batch.sql(sql).await.unwrap().collect().await.unwrap();
    compare_results(&expected, &actual, false).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn batch_result(batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
    let ctx = SessionContext::new();
    ctx.register_batch(
        "t",
        datafusion::arrow::compute::concat_batches(&RandomStream::schema(), &batches).unwrap(),
    )
    .unwrap();
    ctx.sql(BATCH).await.unwrap().collect().await.unwrap()
}

#[tokio::test]
async fn every_valid_strategy_gives_the_batch_result() {
    for partitions in [1, 2, 4] {
        for strategy in ["hash", "sticky", "fan_in"] {
            let (ctx, batches) = context(partitions, &["k1"]);
            let sql = format!("{WINDOWED} WITH ('partitioning_strategy' = '{strategy}')");
            let query = ctx.sql(&sql).await.unwrap();
            let plan = query.explain();
            assert!(
                plan.contains(&format!(
                    "strategy={}",
                    if strategy == "hash" {
                        "hash([k1@0])"
                    } else {
                        strategy
                    }
                )),
                "{plan}"
            );
            assert!(plan.contains("(user"), "{plan}");
            let actual: Vec<RecordBatch> =
                query.execute_merged().unwrap().try_collect().await.unwrap();
            compare_results(&batch_result(batches).await, &actual, false)
                .unwrap_or_else(|e| panic!("{strategy} at {partitions} streams: {e}"));
        }
    }
}

#[tokio::test]
async fn automatic_choice_keeps_a_source_partitioned_by_the_keys_sticky() {
    let (ctx, _) = context(2, &["k1"]);
    let plan = ctx.sql(WINDOWED).await.unwrap().explain();
    assert!(
        plan.contains(
            "strategy=sticky, partitions=2->2 (auto: the source is partitioned by the keys)"
        ),
        "{plan}"
    );
    let (ctx, _) = context(2, &[]);
    let plan = ctx.sql(WINDOWED).await.unwrap().explain();
    assert!(plan.contains("(auto: hash on the GROUP BY keys)"), "{plan}");
}

#[tokio::test]
async fn sticky_is_chosen_only_while_the_rows_stay_partitioned_by_the_keys() {
    // The source is partitioned by k1. An OVER by (k2, k1) over an OVER by k2 may keep the
    // partitions the inner one hashed; an OVER by k1 over one by k2 (or the reverse) shares
    // no key with it: hashed again, a key's rows would come from two streams in arrival
    // order, so both run on one stream and the outer keeps it.
    let over = |outer: &str, inner: &str| {
        format!(
            "SELECT k1, k2, q, ts, s, COUNT(*) OVER (PARTITION BY {outer} ORDER BY ts) AS n FROM \
             (SELECT k1, k2, q, ts, SUM(q) OVER (PARTITION BY {inner} ORDER BY ts) AS s FROM t)"
        )
    };
    for (outer, inner, strategy) in [
        ("k1", "k2", "strategy=sticky, partitions=1->1"),
        ("k2, k1", "k2", "strategy=sticky, partitions=2->2"),
        ("k2", "k1", "strategy=sticky, partitions=1->1"),
    ] {
        let sql = over(outer, inner);
        let (ctx, batches) = context(2, &["k1"]);
        let query = ctx.sql(&sql).await.unwrap();
        let plan = query.explain();
        let top = plan
            .lines()
            .find(|line| line.contains("StreamExchangeExec"))
            .unwrap_or_default();
        assert!(top.contains(strategy), "{sql}\n{plan}");
        equals_batch_sql(&query, batches, &sql).await;
    }
}

#[tokio::test]
async fn a_self_join_of_a_stream_partitioned_by_the_join_keys_keeps_its_partitions() {
    // Both reads of `t` hold each k1 in the source partition of the same number: no shuffle.
    // Joined on another key, the partitions would not line up: both sides hash.
    let join = |key: &str| {
        format!(
            "SELECT a.k1, a.q, b.q AS other FROM t a JOIN t b ON a.{key} = b.{key} \
             AND b.ts BETWEEN a.ts - INTERVAL '1' SECOND AND a.ts"
        )
    };
    for (key, strategy) in [
        (
            "k1",
            "strategy=sticky, partitions=2->2 (auto: both sides are already partitioned alike by the join keys)",
        ),
        ("k2", "strategy=hash([k2@"),
    ] {
        let sql = join(key);
        let (ctx, batches) = context(2, &["k1"]);
        let query = ctx.sql(&sql).await.unwrap();
        let plan = query.explain();
        assert!(plan.contains(strategy), "{sql}\n{plan}");
        equals_batch_sql(&query, batches, &sql).await;
    }
}

#[tokio::test]
async fn two_streams_declared_partitioned_by_the_join_keys_are_joined_without_a_shuffle() {
    // `t` and `u`, each declared partitioned by k1, put each k1 in partitions of one number:
    // each stream keeps its partitions. With `u`'s partitions turned, each declaration still
    // holds alone but the streams disagree: the run fails instead of missing matches. With
    // a different number of partitions, both sides hash.
    let sql = "SELECT t.k1, t.q, u.q AS other FROM t JOIN u ON t.k1 = u.k1 \
               AND u.ts BETWEEN t.ts - INTERVAL '2' SECOND AND t.ts";
    let register = |ctx: &StreamingContext, name: &str, split: Vec<Vec<RecordBatch>>| {
        let options = StreamOptions {
            event_time: Some("ts".to_string()),
            out_of_orderness: std::time::Duration::from_secs(1),
            partitioned_by: vec!["k1".to_string()],
            ..StreamOptions::default()
        };
        let source = ReplaySource::Partitioned {
            schema: RandomStream::schema(),
            partitions: split,
        };
        ctx.register_stream(name, source, options).unwrap();
    };
    for (u_partitions, turn, expected) in [
        (
            2,
            0,
            Ok(
                "strategy=sticky, partitions=2->2 (auto: both streams are declared partitioned by the join keys",
            ),
        ),
        (2, 1, Err("is in its source partition")),
        (4, 0, Ok("strategy=hash([k1@0]), partitions=4->2")),
    ] {
        let ctx = StreamingContext::with_partitions(2);
        let (t, t_split) = split_by_k1(3, 2_000, 2, 0);
        let (u, u_split) = split_by_k1(4, 2_000, u_partitions, turn);
        register(&ctx, "t", t_split);
        register(&ctx, "u", u_split);
        let query = ctx.sql(sql).await.unwrap();
        let plan = query.explain();
        match expected {
            Ok(exchange) => {
                assert!(plan.contains(exchange), "{plan}");
                let actual: Vec<RecordBatch> =
                    query.execute_merged().unwrap().try_collect().await.unwrap();
                let batch = SessionContext::new();
                for (name, batches) in [("t", &t), ("u", &u)] {
                    let table = datafusion::arrow::compute::concat_batches(
                        &RandomStream::schema(),
                        batches,
                    )
                    .unwrap();
                    batch.register_batch(name, table).unwrap();
                }
                let expected = batch.sql(sql).await.unwrap().collect().await.unwrap();
                compare_results(&expected, &actual, false).unwrap_or_else(|e| panic!("{e}"));
            }
            Err(message) => {
                assert!(plan.contains("strategy=sticky, partitions=2->2"), "{plan}");
                let error = crate::support::execution_error(&query).await;
                assert!(
                    error.contains(message)
                        && error.contains("which it is joined with on that key"),
                    "{error}"
                );
            }
        }
    }
}

#[tokio::test]
async fn sticky_maps_more_source_partitions_than_streams_onto_the_streams() {
    for (sources, streams) in [(4, 2), (3, 2), (5, 1)] {
        for setting in ["", " WITH ('partitioning_strategy' = 'sticky')"] {
            let (ctx, batches) = context_onto(sources, streams, &["k1"]);
            let query = ctx.sql(&format!("{WINDOWED}{setting}")).await.unwrap();
            let plan = query.explain();
            assert!(
                plan.contains(&format!("strategy=sticky, partitions={sources}->{streams}")),
                "{plan}"
            );
            let actual: Vec<RecordBatch> =
                query.execute_merged().unwrap().try_collect().await.unwrap();
            compare_results(&batch_result(batches).await, &actual, false)
                .unwrap_or_else(|e| panic!("{sources} sources onto {streams} streams: {e}"));
        }
    }
}

#[tokio::test]
async fn strategies_that_would_give_wrong_results_are_refused() {
    let (ctx, _) = context(2, &[]);
    let error = planning_error(
        &ctx,
        &format!("{WINDOWED} WITH ('partitioning_strategy' = 'sticky')"),
    )
    .await;
    assert!(
        error.contains("'sticky' would give wrong results") && error.contains("partitioned_by"),
        "{error}"
    );
    // A window function over the bounded stream is refused alike, not left to DataFusion's
    // operator (whose sort orders ties otherwise than the stream).
    let over = "SELECT k1, ROW_NUMBER() OVER (PARTITION BY k1 ORDER BY ts) AS n FROM t";
    let error = planning_error(
        &ctx,
        &format!("{over} WITH ('partitioning_strategy' = 'sticky')"),
    )
    .await;
    assert!(
        error.contains("'sticky' would give wrong results") && error.contains("PARTITION BY"),
        "{error}"
    );
    let error = planning_error(
        &ctx,
        &format!("{WINDOWED} WITH ('partitioning_strategy' = 'round_robin')"),
    )
    .await;
    assert!(
        error.contains("'round_robin' would give wrong results"),
        "{error}"
    );
    let error = planning_error(
        &ctx,
        &format!("{WINDOWED} WITH ('partitioning_strategy' = 'random')"),
    )
    .await;
    assert!(
        error.contains("partitioning_strategy = 'random' is not a valid value")
            && error.contains("'two_phase'"),
        "{error}"
    );
    let error = planning_error(&ctx, &format!("{WINDOWED} WITH ('parallelism' = '4')")).await;
    assert!(
        error.contains("unknown query option 'parallelism'"),
        "{error}"
    );
}

/// One source partition holds every key whole: sticky is right on it whatever the keys, and
/// gives the batch result, for a GROUP BY and a window function on an expression alike.
#[tokio::test]
async fn sticky_over_one_source_partition_is_accepted() {
    let (ctx, batches) = context_onto(1, 1, &[]);
    let query = ctx
        .sql(&format!(
            "{WINDOWED} WITH ('partitioning_strategy' = 'sticky')"
        ))
        .await
        .unwrap();
    assert!(
        query.explain().contains("strategy=sticky"),
        "{}",
        query.explain()
    );
    equals_batch_sql(&query, batches.clone(), BATCH).await;
    let over = "SELECT k1, ROW_NUMBER() OVER (PARTITION BY q % 3 ORDER BY ts) AS n FROM t";
    let query = ctx
        .sql(&format!("{over} WITH ('partitioning_strategy' = 'sticky')"))
        .await
        .unwrap();
    assert!(
        query.explain().contains("OverWindowExec"),
        "{}",
        query.explain()
    );
}

const STATELESS: &str = "SELECT k1, v, q FROM t WHERE q % 2 = 0 OR k1 IS NULL";

/// Random rows as one source partition: fewer than the streams, so the stage is fed by an
/// exchange.
fn one_partition_table() -> TestTable {
    let batches = RandomStream::new(5)
        .rows(3_000)
        .disorder_ms(1_000)
        .generate();
    TestTable::batches("t", RandomStream::schema(), batches).with_options(StreamOptions {
        partitions: Some(1),
        ..StreamOptions::default()
    })
}

#[tokio::test]
async fn stateless_queries_give_the_batch_result_under_every_strategy() {
    for strategy in ["", "round_robin", "sticky", "fan_in", "hash"] {
        let mut check = Differential::same_sql(STATELESS)
            .table(one_partition_table())
            .without_operator("RepartitionExec");
        if !strategy.is_empty() {
            check = check.setting("freshet.partitioning_strategy", strategy);
        }
        check
            .run()
            .await
            .unwrap_or_else(|e| panic!("strategy '{strategy}': {e}"));
    }
}

/// Freshet's plan of `STATELESS` at 2 streams under `strategy` ("" for automatic), over
/// `batches` in `source_partitions` partitions.
async fn stateless_plan(
    strategy: &str,
    source_partitions: usize,
    batches: Vec<RecordBatch>,
) -> String {
    let ctx = StreamingContext::with_partitions(2);
    if !strategy.is_empty() {
        ctx.session()
            .sql(&format!("SET freshet.partitioning_strategy = '{strategy}'"))
            .await
            .unwrap();
    }
    let options = StreamOptions {
        partitions: Some(source_partitions),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", RandomStream::schema(), batches, options)
        .unwrap();
    ctx.sql(STATELESS).await.unwrap().explain()
}

#[tokio::test]
async fn explain_names_the_stateless_exchange_strategy_and_why() {
    for (strategy, expected) in [
        (
            "",
            "strategy=round_robin, partitions=1->2 (auto: stateless, fewer source partitions than streams)",
        ),
        (
            "round_robin",
            "strategy=round_robin, partitions=1->2 (user)",
        ),
        (
            "fan_in",
            "strategy=fan_in, partitions=1->1 (user: one stream)",
        ),
        (
            "sticky",
            "strategy=sticky, partitions=1->1 (user: each stream keeps its source partition)",
        ),
        (
            "hash",
            "strategy=round_robin, partitions=1->2 (auto: the user's hash needs keys",
        ),
    ] {
        let plan = stateless_plan(strategy, 1, RandomStream::new(1).rows(10).generate()).await;
        assert!(
            plan.contains(&format!("StreamExchangeExec: {expected}")),
            "strategy '{strategy}': {plan}"
        );
        assert!(!plan.contains("RepartitionExec"), "{plan}");
    }
}

#[tokio::test]
async fn more_source_partitions_than_streams_are_mapped_onto_the_streams() {
    let batches = RandomStream::new(8).rows(2_000).generate();
    let plan = stateless_plan("", 5, batches.clone()).await;
    assert!(
        plan.contains("StreamExchangeExec: strategy=sticky, partitions=5->2 (auto: stateless, 5 source partitions onto 2 streams)"),
        "{plan}"
    );
    assert!(plan.contains("output_partitions=2"), "{plan}");
    let table =
        TestTable::batches("t", RandomStream::schema(), batches).with_options(StreamOptions {
            partitions: Some(5),
            ..StreamOptions::default()
        });
    Differential::same_sql(STATELESS)
        .table(table)
        .partitions(&[1, 2])
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn user_fan_in_and_round_robin_apply_to_sources_with_a_partition_per_stream() {
    let batches = RandomStream::new(6).rows(2_000).generate();
    for (strategy, expected) in [
        (
            "fan_in",
            "strategy=fan_in, partitions=2->1 (user: one stream)",
        ),
        (
            "round_robin",
            "strategy=round_robin, partitions=2->2 (user)",
        ),
    ] {
        let plan = stateless_plan(strategy, 2, batches.clone()).await;
        assert!(
            plan.contains(&format!("StreamExchangeExec: {expected}")),
            "strategy '{strategy}': {plan}"
        );
        let table = TestTable::batches("t", RandomStream::schema(), batches.clone()).with_options(
            StreamOptions {
                partitions: Some(2),
                ..StreamOptions::default()
            },
        );
        Differential::same_sql(STATELESS)
            .table(table)
            .setting("freshet.partitioning_strategy", strategy)
            .run()
            .await
            .unwrap_or_else(|e| panic!("strategy '{strategy}': {e}"));
    }
}

#[tokio::test]
async fn source_partitions_survive_datafusion_scan_repartitioning() {
    // Two source partitions of disordered rows read by four streams: DataFusion would split
    // the in-memory scan into four partitions by batch sizes, out of event-time order, and
    // the watermark would run ahead of most rows.
    let batches = RandomStream::new(11)
        .rows(40_000)
        .disorder_ms(1_000)
        .generate();
    let ctx = StreamingContext::with_partitions(4);
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_secs(1),
        partitions: Some(2),
        ..StreamOptions::default()
    };
    ctx.register_batches("t", RandomStream::schema(), batches.clone(), options)
        .unwrap();
    let query = ctx.sql(WINDOWED).await.unwrap();
    let plan = query.explain();
    assert!(plan.contains("source_partitions=2"), "{plan}");
    let result: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    assert_eq!(query.metric_total("late_records_dropped"), 0);
    compare_results(&batch_result(batches).await, &result, false).unwrap();
}
