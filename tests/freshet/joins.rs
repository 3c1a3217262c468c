//! Interval joins of two streams equal DataFusion batch SQL at 1, 2 and 4 streams, in every
//! join type and spelling of the time bound, with disorder within the watermark; their state
//! stays bounded on endless streams; and joins Freshet cannot bound are refused with advice.

use freshet::testing::{Differential, TestSource, TestTable};
use freshet::{GeneratorKind, GeneratorSpec, NexmarkTable, StreamOptions, StreamingContext};
use futures::StreamExt;

use crate::support::{endless_market_data, planning_error};

/// `market_data` as stream `name`: `records` records one `step_ms` apart from `start_ms`,
/// `symbols` symbols, out of order by up to `disorder_ms` (the declared watermark delay).
fn market_data(
    name: &str,
    records: u64,
    start_ms: i64,
    step_ms: i64,
    symbols: u64,
    disorder_ms: i64,
) -> TestTable {
    let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(records));
    spec.start_ms = start_ms;
    spec.step_ms = step_ms;
    spec.symbols = symbols;
    spec.disorder_ms = disorder_ms;
    spec.seed = start_ms as u64;
    spec.batch_size = 700;
    let options = StreamOptions {
        event_time: Some("trade_time".to_string()),
        out_of_orderness: std::time::Duration::from_millis(disorder_ms as u64),
        ..StreamOptions::default()
    };
    TestTable::new(name, TestSource::Generator(spec)).with_options(options)
}

/// 3 000 bids over 50 minutes, 7 symbols, out of order by up to 4 seconds.
fn bids() -> TestTable {
    market_data("bids", 3_000, 1_700_000_000_000, 1_000, 7, 4_000)
}

/// 2 000 asks over the same time, 5 symbols, out of order by up to 2.5 seconds.
fn asks() -> TestTable {
    market_data("asks", 2_000, 1_700_000_000_500, 1_500, 5, 2_500)
}

/// `sql` over `bids` and `asks` equals the same SQL on DataFusion batch, with an interval join.
async fn two_streams_equal_batch(sql: &str) {
    two_streams(Differential::same_sql(sql))
        .run()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn two_streams(differential: Differential) -> Differential {
    differential
        .table(bids())
        .table(asks())
        .with_plan_text("IntervalJoinExec")
}

#[tokio::test]
async fn every_join_type_equals_batch() {
    for join in ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"] {
        let sql = format!(
            "SELECT b.symbol, b.trade_time AS bt, a.trade_time AS at, b.quantity, a.price \
             FROM bids b {join} asks a ON b.symbol = a.symbol \
             AND a.trade_time BETWEEN b.trade_time - INTERVAL '5' SECOND AND b.trade_time + INTERVAL '2' SECOND"
        );
        two_streams_equal_batch(&sql).await;
    }
}

/// EXISTS and NOT EXISTS with a time bound are semi and anti interval joins: a row goes out
/// once, at its first match, or, never matched, once the other side's watermark passes its
/// reach. Both ways round, since DataFusion picks the side it keeps.
#[tokio::test]
async fn exists_and_not_exists_are_semi_and_anti_joins() {
    for (outer, inner) in [("bids", "asks"), ("asks", "bids")] {
        for exists in ["EXISTS", "NOT EXISTS"] {
            let sql = format!(
                "SELECT b.symbol, b.trade_time, b.price FROM {outer} b WHERE {exists} \
                 (SELECT 1 FROM {inner} a WHERE a.symbol = b.symbol \
                 AND a.trade_time BETWEEN b.trade_time - INTERVAL '3' SECOND AND b.trade_time)"
            );
            two_streams_equal_batch(&sql).await;
        }
    }
}

#[tokio::test]
async fn every_spelling_of_the_bound_equals_batch() {
    for bound in [
        "a.trade_time >= b.trade_time - INTERVAL '3' SECOND AND a.trade_time <= b.trade_time",
        "b.trade_time <= a.trade_time + INTERVAL '3' SECOND AND b.trade_time >= a.trade_time",
        "a.trade_time > b.trade_time - INTERVAL '3' SECOND AND a.trade_time < b.trade_time + INTERVAL '1' SECOND",
        "a.trade_time = b.trade_time",
        "a.trade_time - INTERVAL '1' SECOND BETWEEN b.trade_time - INTERVAL '4' SECOND AND b.trade_time",
    ] {
        let sql = format!(
            "SELECT b.symbol, COUNT(*) AS pairs, SUM(a.quantity) AS q \
             FROM bids b JOIN asks a ON b.symbol = a.symbol AND {bound} \
             AND a.price > b.price - 5 GROUP BY b.symbol"
        );
        two_streams_equal_batch(&sql).await;
    }
}

/// Nexmark's `table` over 20 000 events, 40 seconds of event time, out of order by up to
/// two seconds (the declared watermark delay).
fn nexmark(table: NexmarkTable) -> TestTable {
    let mut spec = GeneratorSpec::nexmark(table, Some(20_000));
    spec.set("event_rate", "500").unwrap();
    spec.set("disorder_ms", "2000").unwrap();
    let options = StreamOptions {
        event_time: Some("date_time".to_string()),
        out_of_orderness: std::time::Duration::from_secs(2),
        ..StreamOptions::default()
    };
    TestTable::new(table.name(), TestSource::Generator(spec)).with_options(options)
}

/// A bound ended by a column of one side (a bid during its auction's life, `b.date_time
/// BETWEEN a.date_time AND a.expires`) is an interval join whose auctions are kept until
/// the bids' watermark passes their own `expires`: with the auction on either side, in
/// every join type.
#[tokio::test]
async fn a_bound_ended_by_a_column_of_one_side_equals_batch() {
    let during = "a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires";
    let mut queries = Vec::new();
    for join in ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"] {
        for (from, ended_by) in [
            (format!("auction a {join} bid b"), "left.expires"),
            (format!("bid b {join} auction a"), "right.expires"),
        ] {
            queries.push((
                format!(
                    "SELECT a.id, a.expires, b.bidder, b.price, b.date_time AS bt \
                     FROM {from} ON {during}"
                ),
                ended_by,
            ));
        }
    }
    for exists in ["EXISTS", "NOT EXISTS"] {
        queries.push((
            format!(
                "SELECT a.id, a.seller FROM auction a WHERE {exists} \
                 (SELECT 1 FROM bid b WHERE {during})"
            ),
            "expires",
        ));
    }
    for (sql, ended_by) in queries {
        Differential::same_sql(&sql)
            .table(nexmark(NexmarkTable::Auction))
            .table(nexmark(NexmarkTable::Bid))
            .with_plan_text("IntervalJoinExec")
            .with_plan_text(ended_by)
            .run()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// A join of two streams on keys alone (a regular join, Nexmark q3 and q20) runs as it
/// goes, every row kept to the end of the other input, in every join type: with both event
/// times in the join's input, and with one that DataFusion did not read from its stream.
/// No row is late, even one behind its stream's watermark (here the streams declare no
/// delay for their disorder of up to two seconds): nothing it could match has been freed.
#[tokio::test]
async fn a_regular_join_of_bounded_streams_equals_batch() {
    let nexmark = |table| {
        let mut stream = nexmark(table);
        stream.options.out_of_orderness = std::time::Duration::ZERO;
        stream
    };
    for join in ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"] {
        for sql in [
            format!(
                "SELECT a.id, a.date_time AS at, b.price, b.date_time AS bt \
                 FROM auction a {join} bid b ON a.id = b.auction"
            ),
            format!(
                "SELECT a.seller, b.bidder FROM auction a {join} bid b \
                 ON a.id = b.auction AND b.price > a.reserve / 100"
            ),
        ] {
            Differential::same_sql(&sql)
                .table(nexmark(NexmarkTable::Auction))
                .table(nexmark(NexmarkTable::Bid))
                .with_plan_text("a regular join")
                .run()
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}

/// Over endless streams a regular join needs a state time-to-live: rows then match within
/// that much event time of each other. A TTL longer than the streams' whole span gives the
/// regular join's answer, whether the query selects the streams' event times or not; without
/// one the join is refused with the TTL in the advice.
#[tokio::test]
async fn a_regular_join_of_endless_streams_runs_with_a_state_ttl() {
    let endless = |table| {
        let mut stream = nexmark(table);
        stream.options.bounded = Some(false);
        stream
    };
    let sql = "SELECT a.id, a.date_time AS at, b.bidder, b.date_time AS bt \
               FROM auction a JOIN bid b ON a.id = b.auction";
    Differential::same_sql(sql)
        .table(endless(NexmarkTable::Auction))
        .table(endless(NexmarkTable::Bid))
        .setting("freshet.state_ttl_ms", "3600000")
        .with_plan_text("in [-3600000, 3600000]")
        .run()
        .await
        .unwrap();
    let ctx = StreamingContext::with_partitions(2);
    for table in [NexmarkTable::Auction, NexmarkTable::Bid] {
        ctx.register_generator(
            table.name(),
            GeneratorSpec::nexmark(table, None),
            StreamOptions::default(),
        )
        .unwrap();
    }
    let error = planning_error(&ctx, sql).await;
    assert!(error.contains("freshet.state_ttl_ms"), "{error}");
    // The TTL is kept by event time, which the join reads even where the query selects
    // none (Nexmark q3).
    let timeless = "SELECT a.id, b.bidder FROM auction a JOIN bid b ON a.id = b.auction \
                    WHERE a.category = 10";
    Differential::same_sql(timeless)
        .table(endless(NexmarkTable::Auction))
        .table(endless(NexmarkTable::Bid))
        .setting("freshet.state_ttl_ms", "3600000")
        .with_plan_text("in [-3600000, 3600000]")
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_join_without_keys_runs_on_one_stream() {
    let sql = "SELECT b.trade_time AS bt, a.trade_time AS at FROM bids b LEFT JOIN asks a \
               ON a.trade_time BETWEEN b.trade_time AND b.trade_time + INTERVAL '1' SECOND";
    two_streams(Differential::same_sql(sql))
        .with_plan_text("no equality keys: one stream")
        .run()
        .await
        .unwrap();
}

/// Over endless streams the join answers as the records flow, and its state stays a few
/// batches: rows are freed once the other side's watermark passes their bound.
#[tokio::test]
async fn an_interval_join_of_endless_streams_keeps_bounded_state() {
    let ctx = endless_timed_market_data();
    let query = ctx
        .sql(
            "SELECT m.symbol, m.trade_time, o.trade_time AS other FROM market_data m \
             JOIN market_data o ON m.symbol = o.symbol \
             AND o.trade_time BETWEEN m.trade_time - INTERVAL '10' SECOND AND m.trade_time",
        )
        .await
        .unwrap();
    answers_in_bounded_state(query, 2_000_000).await;
}

/// A join of two windowed aggregations of endless replays read as fast as they go (the J3
/// form) keeps bounded state at two streams: the two sides' sources are aligned in event
/// time, so one side cannot run ahead and pile its windows up in the join (its state grew
/// by about 100 MB a second when they were not).
#[tokio::test]
async fn a_window_join_of_endless_replays_keeps_its_sides_together() {
    let ctx = endless_timed_market_data();
    let side = |aggregate: &str| {
        format!(
            "SELECT symbol, window_start, {aggregate} AS v FROM market_data \
             GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)"
        )
    };
    let query = ctx
        .sql(&format!(
            "SELECT x.symbol, x.window_start, x.v, y.v AS other FROM ({}) x JOIN ({}) y \
             ON x.symbol = y.symbol AND x.window_start = y.window_start",
            side("COUNT(*)"),
            side("SUM(quantity)")
        ))
        .await
        .unwrap();
    let plan = query.explain();
    assert_eq!(
        plan.matches("aligned with the join's other sources")
            .count(),
        2,
        "{plan}"
    );
    answers_in_bounded_state(query, 2_000_000).await;
}

/// A context of two streams with `market_data` an endless generator, in event time, replayed
/// as fast as it goes.
fn endless_timed_market_data() -> StreamingContext {
    let ctx = StreamingContext::with_partitions(2);
    let options = StreamOptions {
        event_time: Some("trade_time".to_string()),
        ..StreamOptions::default()
    };
    ctx.register_generator(
        "market_data",
        GeneratorSpec::new(GeneratorKind::MarketData, None),
        options,
    )
    .unwrap();
    ctx
}

/// Reads `rows` rows of `query`, an interval join of endless streams, within two minutes
/// (a plan that never answers fails rather than hangs), and checks that its state stayed
/// under 64 MiB.
async fn answers_in_bounded_state(query: freshet::StreamingQuery, rows: usize) {
    let plan = query.explain();
    assert!(plan.contains("IntervalJoinExec"), "{plan}");
    let mut stream = query.execute_merged().unwrap();
    let reading = async {
        let mut read = 0;
        while read < rows {
            let batch = stream.next().await.expect("an endless join").unwrap();
            read += batch.num_rows();
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), reading)
        .await
        .unwrap_or_else(|_| panic!("fewer than {rows} rows in two minutes:\n{plan}"));
    let state = query.metric_total("state_bytes");
    assert!(state < 64 << 20, "join state grew to {state} bytes");
}

#[tokio::test]
async fn joins_freshet_cannot_bound_are_refused_with_advice() {
    let ctx = endless_market_data();
    for (sql, expected) in [
        (
            "SELECT m.symbol FROM market_data m JOIN market_data o ON m.symbol = o.symbol",
            "a join of two unbounded streams",
        ),
        (
            "SELECT m.symbol FROM market_data m JOIN market_data o ON m.symbol = o.symbol \
             AND o.quantity BETWEEN m.quantity - 5 AND m.quantity + 5",
            "a join of two unbounded streams",
        ),
        (
            "SELECT m.symbol FROM market_data m JOIN market_data o ON m.symbol = o.symbol \
             AND o.trade_time BETWEEN m.trade_time + INTERVAL '5' SECOND AND m.trade_time",
            "the join's time bound is empty",
        ),
    ]
    .into_iter()
    .map(|(sql, expected)| (sql.to_string(), expected))
    .chain(
        // Event time read from a join's output must be one the output carries on every row.
        [
            ("FULL JOIN", "mt"),
            ("LEFT JOIN", "ot"),
            ("RIGHT JOIN", "mt"),
        ]
        .map(|(join, time)| {
            (
                format!(
                    "SELECT COUNT(*) AS n FROM (SELECT m.trade_time AS mt, o.trade_time AS ot \
                     FROM market_data m {join} market_data o ON m.symbol = o.symbol \
                     AND o.trade_time BETWEEN m.trade_time - INTERVAL '5' SECOND AND m.trade_time) \
                     GROUP BY WINDOW TUMBLING ({time}, INTERVAL '1' MINUTE)"
                ),
                "is not an event time of the join's output",
            )
        }),
    ) {
        let error = planning_error(&ctx, &sql).await;
        assert!(error.contains(expected), "{sql}: {error}");
    }
    let error = planning_error(
        &ctx,
        "SELECT m.symbol FROM market_data m JOIN market_data o ON m.symbol = o.symbol",
    )
    .await;
    assert!(
        error.contains("BETWEEN"),
        "the advice names a time bound: {error}"
    );
}

/// A lookup of a stream into a bounded table is Freshet's lookup join with the table as its
/// first input, whichever side the query names first: every stream probes the one table as
/// its batches come, and no record of the stream is kept.
#[tokio::test]
async fn a_stream_looks_up_a_bounded_table() {
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_generator(
        "market_data",
        GeneratorSpec::new(GeneratorKind::MarketData, Some(10_000)),
        StreamOptions::default(),
    )
    .unwrap();
    ctx.session()
        .sql("CREATE TABLE symbols AS VALUES ('SYM1', 'one'), ('SYM2', 'two')")
        .await
        .unwrap();
    for (sql, expected) in [
        (
            "SELECT s.column2 AS name, COUNT(*) AS n FROM market_data m \
             JOIN symbols s ON m.symbol = s.column1 GROUP BY s.column2 ORDER BY name",
            vec![
                vec!["one".to_string(), "1000".into()],
                vec!["two".into(), "1000".into()],
            ],
        ),
        (
            "SELECT s.column2 AS name, COUNT(*) AS n FROM market_data m \
             LEFT JOIN symbols s ON m.symbol = s.column1 GROUP BY s.column2 ORDER BY name",
            vec![
                vec!["one".to_string(), "1000".into()],
                vec!["two".into(), "1000".into()],
                vec!["NULL".into(), "8000".into()],
            ],
        ),
    ] {
        let plan = ctx.sql(sql).await.unwrap().explain();
        assert!(
            plan.contains("LookupJoinExec: kind=") && plan.contains("MemoryExec"),
            "the table is the build side: {plan}"
        );
        let cells = crate::support::result_cells(&ctx, sql).await;
        assert_eq!(cells, expected, "{sql}");
    }
}

/// Per symbol and 10-second window of `table`, the records' count, as Freshet SQL.
fn windowed_count(table: &str) -> String {
    format!(
        "SELECT symbol, window_start, COUNT(*) AS n FROM {table} \
         GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)"
    )
}

/// [`windowed_count`] as batch SQL.
fn batch_windowed_count(table: &str) -> String {
    format!(
        "SELECT symbol, date_bin(INTERVAL '10 seconds', trade_time) AS window_start, \
         COUNT(*) AS n FROM {table} GROUP BY symbol, date_bin(INTERVAL '10 seconds', trade_time)"
    )
}

/// `left` and `right`, windowed counts, joined on their keys and windows (a window join).
fn window_join(left: String, right: String) -> String {
    format!(
        "SELECT x.symbol, x.window_start, x.n, y.n AS other FROM ({left}) x \
         JOIN ({right}) y ON x.symbol = y.symbol AND x.window_start = y.window_start"
    )
}

/// Two windowed aggregations of bounded replays joined on their keys and windows (a window
/// join) run as an interval join over Freshet's aggregations. (Each aggregation routes its
/// rows in time runs of its own stream's length, so their windows lie apart and the join
/// hashes them on its keys.)
#[tokio::test]
async fn a_window_join_of_bounded_replays_equals_batch() {
    Differential::new(
        &window_join(windowed_count("bids"), windowed_count("asks")),
        &window_join(batch_windowed_count("bids"), batch_windowed_count("asks")),
    )
    .table(bids())
    .table(asks())
    .with_plan_text("IntervalJoinExec")
    .run()
    .await
    .unwrap();
}

/// Two windowed aggregations of one stream joined on their windows (the scenario J3) route
/// their rows in the same time runs: a window is in a partition of the same number on both
/// sides, so the join keeps their partitions (sticky) and equals batch.
#[tokio::test]
async fn a_window_self_join_keeps_the_time_runs_of_its_aggregations() {
    Differential::new(
        &window_join(windowed_count("bids"), windowed_count("bids")),
        &window_join(batch_windowed_count("bids"), batch_windowed_count("bids")),
    )
    .table(bids())
    .partitions(&[2, 4])
    .with_plan_text("strategy=time_runs")
    .with_plan_text("strategy=sticky")
    .run()
    .await
    .unwrap();
}

/// Each record joined with the largest price of its 10-second window (the Nexmark q7 form):
/// the windowed aggregation's `window_end` has a watermark, so the join is an interval join
/// between the stream's event time and the window's end.
#[tokio::test]
async fn a_windowed_aggregate_joined_back_to_its_stream_equals_batch() {
    let sql = |window_end: &str, group_by: &str| {
        format!(
            "SELECT b.symbol, b.price, b.trade_time, w.window_end FROM bids b \
             JOIN (SELECT symbol, MAX(price) AS top, {window_end} AS window_end FROM bids {group_by}) w \
             ON b.symbol = w.symbol AND b.price = w.top \
             AND b.trade_time BETWEEN w.window_end - INTERVAL '10' SECOND AND w.window_end"
        )
    };
    Differential::new(
        &sql(
            "window_end",
            "GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)",
        ),
        &sql(
            "date_bin(INTERVAL '10 seconds', trade_time) + INTERVAL '10 seconds'",
            "GROUP BY symbol, date_bin(INTERVAL '10 seconds', trade_time)",
        ),
    )
    .table(bids())
    .with_plan_text("IntervalJoinExec")
    .run()
    .await
    .unwrap();
}

/// Over endless streams a window join answers window by window: each windowed aggregation
/// publishes how far its windows have closed, so the join's watermarks move with them and
/// its state stays small.
#[tokio::test]
async fn a_window_join_of_endless_streams_answers_as_windows_close() {
    let ctx = endless_two_streams();
    let query = ctx
        .sql(
            "SELECT x.symbol, x.window_start, x.n, y.n AS other \
             FROM (SELECT symbol, window_start, COUNT(*) AS n FROM bids \
                   GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)) x \
             JOIN (SELECT symbol, window_start, COUNT(*) AS n FROM asks \
                   GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)) y \
             ON x.symbol = y.symbol AND x.window_start = y.window_start",
        )
        .await
        .unwrap();
    answers_in_bounded_state(query, 20_000).await;
}

/// `bids` and `asks`, endless generated streams with event time `trade_time`, at two streams.
fn endless_two_streams() -> StreamingContext {
    let ctx = StreamingContext::with_partitions(2);
    for (name, seed) in [("bids", 1), ("asks", 2)] {
        let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, None);
        spec.seed = seed;
        spec.symbols = 50;
        let options = StreamOptions {
            event_time: Some("trade_time".to_string()),
            ..StreamOptions::default()
        };
        ctx.register_generator(name, spec, options).unwrap();
    }
    ctx
}

/// Joins compose: a join's output has the event times of the sides every output row
/// carries, with a watermark the join publishes, so windows, OVER windows and further joins
/// read them.
#[tokio::test]
async fn a_window_over_an_interval_join_equals_batch() {
    let join = "SELECT b.symbol, b.trade_time AS bt, a.trade_time AS at, b.quantity AS q \
                FROM bids b JOIN asks a ON b.symbol = a.symbol \
                AND a.trade_time BETWEEN b.trade_time - INTERVAL '5' SECOND AND b.trade_time";
    for (time, join) in [
        ("bt", join.to_string()),
        ("at", join.to_string()),
        ("bt", join.replace(" JOIN ", " LEFT JOIN ")),
        ("at", join.replace(" JOIN ", " RIGHT JOIN ")),
    ] {
        let streaming = format!(
            "SELECT symbol, window_start, COUNT(*) AS pairs, SUM(q) AS total FROM ({join}) \
             GROUP BY symbol WINDOW TUMBLING ({time}, INTERVAL '1' MINUTE)"
        );
        let batch = format!(
            "SELECT symbol, date_bin(INTERVAL '1 minute', {time}) AS window_start, \
             COUNT(*) AS pairs, SUM(q) AS total FROM ({join}) \
             GROUP BY symbol, date_bin(INTERVAL '1 minute', {time})"
        );
        two_streams(Differential::new(&streaming, &batch))
            .run()
            .await
            .unwrap_or_else(|e| panic!("{streaming}: {e}"));
    }
}

#[tokio::test]
async fn an_over_window_and_a_join_over_an_interval_join_equal_batch() {
    let join = "SELECT b.symbol, b.trade_time AS bt, a.trade_time AS at, b.quantity AS q \
                FROM bids b JOIN asks a ON b.symbol = a.symbol \
                AND a.trade_time BETWEEN b.trade_time - INTERVAL '5' SECOND AND b.trade_time";
    let over = format!(
        "SELECT symbol, bt, at, SUM(q) OVER (PARTITION BY symbol ORDER BY bt) AS running FROM ({join})"
    );
    two_streams_equal_batch(&over).await;
    let join_of_join = format!(
        "SELECT j.symbol, j.bt, j.at, c.trade_time AS ct FROM ({join}) j JOIN bids c \
         ON j.symbol = c.symbol AND c.trade_time BETWEEN j.at AND j.at + INTERVAL '3' SECOND"
    );
    two_streams_equal_batch(&join_of_join).await;
}

/// Per minute, the windows in which a symbol both traded on `bids` and `asks` (a window
/// over a window join).
#[tokio::test]
async fn a_window_over_a_window_join_equals_batch() {
    let join = |bids: String, asks: String| {
        format!(
            "SELECT x.symbol, x.window_start AS ws, x.n FROM ({bids}) x JOIN ({asks}) y \
             ON x.symbol = y.symbol AND x.window_start = y.window_start"
        )
    };
    let streaming = format!(
        "SELECT window_start, COUNT(*) AS windows, SUM(n) AS n FROM ({}) \
         GROUP BY WINDOW TUMBLING (ws, INTERVAL '1' MINUTE)",
        join(windowed_count("bids"), windowed_count("asks"))
    );
    let expected = format!(
        "SELECT date_bin(INTERVAL '1 minute', ws) AS window_start, COUNT(*) AS windows, \
         SUM(n) AS n FROM ({}) GROUP BY date_bin(INTERVAL '1 minute', ws)",
        join(batch_windowed_count("bids"), batch_windowed_count("asks"))
    );
    two_streams(Differential::new(&streaming, &expected))
        .run()
        .await
        .unwrap();
}

/// Over endless streams a window over an interval join closes its windows as both inputs'
/// watermarks pass them, through the join's published progress.
#[tokio::test]
async fn a_window_over_a_join_of_endless_streams_answers_as_windows_close() {
    let ctx = endless_two_streams();
    let query = ctx
        .sql(
            "SELECT symbol, window_start, COUNT(*) AS pairs FROM \
             (SELECT b.symbol, b.trade_time AS bt FROM bids b JOIN asks a ON b.symbol = a.symbol \
              AND a.trade_time BETWEEN b.trade_time - INTERVAL '1' SECOND AND b.trade_time) \
             GROUP BY symbol WINDOW TUMBLING (bt, INTERVAL '10' SECOND)",
        )
        .await
        .unwrap();
    answers_in_bounded_state(query, 20_000).await;
}

/// A row later than its side's watermark may have lost its partners: the join drops it,
/// counts it and sends it to the side output of late records, in one schema with the other
/// side's columns (null).
#[tokio::test]
async fn late_join_rows_are_dropped_counted_and_sent_to_the_side_output() {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::arrow::record_batch::RecordBatch;
    use futures::TryStreamExt;

    let ctx = StreamingContext::with_partitions(1);
    let stream = |name: &str, id: &str, ts: &str, batches: Vec<(Vec<i64>, Vec<Option<i64>>)>| {
        let (schema, batches) = crate::support::id_time_batches_named(id, ts, batches);
        let options = StreamOptions {
            event_time: Some(ts.to_string()),
            partitions: Some(1),
            ..StreamOptions::default()
        };
        ctx.register_batches(name, schema, batches, options)
            .unwrap();
    };
    // `l`'s watermark is at 65 s when 3 (at 2 s) comes: it is late.
    stream(
        "l",
        "lid",
        "lts",
        vec![
            (vec![1, 2], vec![Some(1_000), Some(65_000)]),
            (vec![3], vec![Some(2_000)]),
        ],
    );
    stream(
        "r",
        "rid",
        "rts",
        vec![(
            vec![10, 11, 12],
            vec![Some(1_500), Some(2_500), Some(64_500)],
        )],
    );
    let query = ctx
        .sql(
            "SELECT l.lid, r.rid FROM l JOIN r \
             ON r.rts BETWEEN l.lts - INTERVAL '1' SECOND AND l.lts + INTERVAL '1' SECOND",
        )
        .await
        .unwrap();
    let late_stream = query.late_records();
    let rows: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let mut pairs: Vec<(i64, i64)> = rows
        .iter()
        .flat_map(|b| {
            let l = b.column(0).as_primitive::<Int64Type>().clone();
            let r = b.column(1).as_primitive::<Int64Type>().clone();
            (0..b.num_rows())
                .map(|i| (l.value(i), r.value(i)))
                .collect::<Vec<_>>()
        })
        .collect();
    pairs.sort_unstable();
    assert_eq!(
        pairs,
        vec![(1, 10), (2, 12)],
        "3 would have matched 10 and 11"
    );
    assert_eq!(query.metric_total("late_records_dropped"), 1);
    drop(query);
    let late: Vec<RecordBatch> = late_stream.try_collect().await.unwrap();
    let late = datafusion::arrow::compute::concat_batches(&late[0].schema(), &late).unwrap();
    let names: Vec<String> = late
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["lid", "lts", "rid", "rts"]);
    assert_eq!(late.num_rows(), 1);
    assert_eq!(late.column(0).as_primitive::<Int64Type>().value(0), 3);
    assert!(
        late.column(2).is_null(0),
        "the other side's columns are null"
    );
}

/// A late row with a null key is late, not unmatchable: an outer join that passed it on as
/// unmatched would hand on a row behind its own progress, which an operator above then finds
/// late at one number of streams and not at another.
#[tokio::test]
async fn a_late_row_of_an_outer_join_is_dropped_whatever_its_keys() {
    use datafusion::arrow::array::{
        ArrayRef, AsArray, Int64Array, StringArray, TimestampMillisecondArray,
    };
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::arrow::record_batch::RecordBatch;
    use futures::TryStreamExt;
    use std::sync::Arc;

    let ctx = StreamingContext::with_partitions(1);
    let batch = |ids: Vec<i64>, keys: Vec<Option<&str>>, times: Vec<i64>| {
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("k", Arc::new(StringArray::from(keys))),
            ("ts", Arc::new(TimestampMillisecondArray::from(times))),
        ])
        .unwrap()
    };
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        partitions: Some(1),
        ..StreamOptions::default()
    };
    // `l`'s watermark is at 65 s when 3 (at 2 s, no key) comes.
    let l = vec![
        batch(vec![1, 2], vec![Some("x"), None], vec![1_000, 65_000]),
        batch(vec![3], vec![None], vec![2_000]),
    ];
    let r = vec![batch(vec![10], vec![Some("x")], vec![1_000])];
    ctx.register_batches("l", l[0].schema(), l, options.clone())
        .unwrap();
    ctx.register_batches("r", r[0].schema(), r, options)
        .unwrap();
    let query = ctx
        .sql(
            "SELECT l.id, r.id AS rid FROM l LEFT JOIN r ON l.k = r.k \
             AND r.ts BETWEEN l.ts - INTERVAL '1' SECOND AND l.ts",
        )
        .await
        .unwrap();
    let rows: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    let mut ids: Vec<i64> = rows
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2], "3 is late");
    assert_eq!(query.metric_total("late_records_dropped"), 1);
}

/// A regular join matches rows whatever their event times, null ones included: a batch of
/// kept rows whose times are all null is found by a few probing rows and by many.
#[tokio::test]
async fn a_regular_join_finds_kept_rows_whose_times_are_all_null() {
    use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::arrow::record_batch::RecordBatch;
    use futures::TryStreamExt;
    use std::sync::Arc;

    let batch = |keys: Vec<i64>, times: Vec<Option<i64>>| {
        RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
            ("ts", Arc::new(TimestampMillisecondArray::from(times))),
        ])
        .unwrap()
    };
    for probing_rows in [3_i64, 200] {
        let ctx = StreamingContext::with_partitions(1);
        let options = StreamOptions {
            event_time: Some("ts".to_string()),
            partitions: Some(1),
            ..StreamOptions::default()
        };
        let l = vec![batch(vec![0, 1, 2], vec![None; 3])];
        let r = vec![
            batch(vec![9], vec![Some(1_000)]),
            batch(
                (0..probing_rows).map(|k| k % 3).collect(),
                (0..probing_rows).map(|k| Some(2_000 + k)).collect(),
            ),
        ];
        ctx.register_batches("l", l[0].schema(), l, options.clone())
            .unwrap();
        ctx.register_batches("r", r[0].schema(), r, options)
            .unwrap();
        let query = ctx
            .sql("SELECT l.k FROM l JOIN r ON l.k = r.k")
            .await
            .unwrap();
        let rows: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
        let matched: usize = rows
            .iter()
            .map(|b| b.column(0).as_primitive::<Int64Type>().len())
            .sum();
        assert_eq!(
            matched, probing_rows as usize,
            "{probing_rows} probing rows"
        );
    }
}

/// A lookup passes the stream's rows on in order, so a window over its output reads the
/// stream's event time; a lookup that also keeps the table's unmatched rows (their stream
/// time is null) has none, and the table's columns are no event time.
#[tokio::test]
async fn a_window_over_a_lookup_reads_the_streams_event_time() {
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_generator(
        "market_data",
        GeneratorSpec::new(GeneratorKind::MarketData, Some(10_000)),
        StreamOptions {
            event_time: Some("trade_time".to_string()),
            ..StreamOptions::default()
        },
    )
    .unwrap();
    ctx.session()
        .sql("CREATE TABLE symbols AS VALUES ('SYM1', 'one', TIMESTAMP '2020-01-01 00:00:00')")
        .await
        .unwrap();
    let window = |join: &str, time: &str| {
        format!(
            "SELECT SUM(n) AS n FROM (SELECT COUNT(*) AS n FROM \
             (SELECT m.trade_time, s.column3 AS listed FROM {join} ON m.symbol = s.column1) \
             GROUP BY WINDOW TUMBLING ({time}, INTERVAL '1' MINUTE))"
        )
    };
    let sql = window("market_data m JOIN symbols s", "trade_time");
    assert!(
        ctx.sql(&sql)
            .await
            .unwrap()
            .explain()
            .contains("WindowAggregateExec")
    );
    let cells = crate::support::result_cells(&ctx, &sql).await;
    assert_eq!(cells, vec![vec!["1000".to_string()]], "{sql}");
    // Over a bounded stream such times have no watermark before the end of the input, where
    // every window closes: the batch answer (the LEFT join's unmatched table row has a NULL
    // time, which DataFusion's aggregation groups apart).
    for (join, time, expected) in [
        ("symbols s LEFT JOIN market_data m", "trade_time", "1000"),
        ("market_data m JOIN symbols s", "listed", "1000"),
    ] {
        let cells = crate::support::result_cells(&ctx, &window(join, time)).await;
        assert_eq!(cells, vec![vec![expected.to_string()]], "{join}");
    }
    // Over an endless stream they are refused.
    let ctx = crate::support::endless_market_data();
    ctx.session()
        .sql("CREATE TABLE symbols AS VALUES ('SYM1', 'one', TIMESTAMP '2020-01-01 00:00:00')")
        .await
        .unwrap();
    for (join, time) in [
        ("symbols s LEFT JOIN market_data m", "trade_time"),
        ("market_data m JOIN symbols s", "listed"),
    ] {
        let error = planning_error(&ctx, &window(join, time)).await;
        assert!(
            error.contains("is not an event time of the join's output"),
            "{join}: {error}"
        );
    }
}
