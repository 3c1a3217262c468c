//! Queries across workers on datafusion-distributed: workers on loopback ports in this
//! process, each query's answer against the same query in one process on as many streams.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use freshet::cli::SessionArgs;
use freshet::distributed::{
    ContextAcrossWorkers, DistributedRun, QuerySpec, RunTotals, WorkerUrls, execute_distributed,
    serve_worker,
};
use freshet::testing::compare_results;
use freshet_engine::{GeneratorKind, GeneratorSpec, LiveBatches, ReplaySource, StreamOptions};
use freshet_planner::StreamingContext;
use futures::TryStreamExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::support::{freshet_ok, write_parquet};

/// Workers serving on loopback ports until dropped.
struct Workers {
    urls: String,
    _stops: Vec<oneshot::Sender<()>>,
}

async fn start_workers(count: usize) -> Workers {
    let mut urls = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..count {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        urls.push(listener.local_addr().unwrap().to_string());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve_worker(listener, async move {
            let _ = stopped.await;
        }));
        stops.push(stop);
    }
    Workers {
        urls: urls.join(","),
        _stops: stops,
    }
}

fn session(tables: &[String]) -> SessionArgs {
    SessionArgs {
        settings: Vec::new(),
        tables: tables.to_vec(),
        partitions: None,
        event_time: None,
        watermark: None,
        strategy: None,
    }
}

/// Asserts that `distributed` holds the rows of `local` (floats within the comparison's
/// tolerance: partial sums may add in another order).
fn assert_same_rows(distributed: &[RecordBatch], local: &[RecordBatch], what: &str) {
    if let Err(difference) = compare_results(local, distributed, false) {
        panic!("{what}: {difference}");
    }
}

fn row_count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// The query's rows across `workers` workers with `partitions` streams in all, and in one
/// process on as many streams.
async fn both_ways(
    sql: &str,
    tables: &[String],
    partitions: usize,
    workers: usize,
) -> (Vec<RecordBatch>, Vec<RecordBatch>) {
    let cluster = start_workers(workers).await;
    let spec =
        Arc::new(QuerySpec::new(sql.to_string(), &session(tables), partitions, workers).unwrap());
    let run = execute_distributed(Arc::clone(&spec), WorkerUrls::parse(&cluster.urls).unwrap())
        .await
        .unwrap();
    with_one_process(sql, &spec, run).await
}

/// The rows of `run` (the query of `spec`, text `sql`) and of one process on as many
/// streams; the workers' counts must be one process's.
async fn with_one_process(
    sql: &str,
    spec: &QuerySpec,
    run: DistributedRun,
) -> (Vec<RecordBatch>, Vec<RecordBatch>) {
    let distributed: Vec<RecordBatch> = run.stream.try_collect().await.unwrap();
    let totals = run.report.totals().await.unwrap();
    let query = spec.plan().await.unwrap();
    let local: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    assert_eq!(
        totals,
        RunTotals {
            records_read: query.records_read(),
            late_records_dropped: query.metric_total("late_records_dropped"),
            null_event_time_dropped: query.metric_total("null_event_time_dropped"),
            wire_bytes: totals.wire_bytes,
        },
        "{sql}"
    );
    // Rows cross the network where the plan has an exchange.
    assert_eq!(
        totals.wire_bytes > 0,
        query.explain().contains("StreamExchangeExec"),
        "{sql}"
    );
    (distributed, local)
}

/// Rewrites the Parquet file at `path` in row groups of 2 000 rows, so that every worker
/// reads some of them.
fn in_small_row_groups(path: &Path) {
    rewrite(path, false, 2_000);
}

/// Rewrites the Parquet file at `path` in row groups of 2 000 rows, with each run of 100
/// rows across a row-group boundary reversed: the watermark moves after each row group, so
/// that the older half of a run, in the next row group, holds late records.
fn disordered_in_small_row_groups(path: &Path) {
    rewrite(path, true, 2_000);
}

fn rewrite(path: &Path, reverse_runs: bool, group_rows: usize) {
    let file = std::fs::File::open(path).unwrap();
    let batches: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut batch = concat_batches(&batches[0].schema(), &batches).unwrap();
    if reverse_runs {
        let rows = batch.num_rows() as u32;
        let order = UInt32Array::from_iter_values((0..rows).map(|row| match (row + 50) % 2_000 {
            offset if offset < 100 && row >= 50 && row + 50 < rows => row - offset + 99 - offset,
            _ => row,
        }));
        batch = take_record_batch(&batch, &order).unwrap();
    }
    write_parquet(path, &batch, group_rows.min(batch.num_rows()));
}

fn market_data(dir: &Path, records: &str, disorder_ms: &str) -> String {
    let path = dir.join("md.parquet");
    freshet_ok(&[
        "gen",
        "market_data",
        "--records",
        records,
        "--set",
        &format!("disorder_ms={disorder_ms}"),
        "--out",
        path.to_str().unwrap(),
    ]);
    in_small_row_groups(&path);
    path.to_str().unwrap().to_string()
}

fn orders(dir: &Path) -> String {
    let path = dir.join("orders.parquet");
    crate::support::gen_orders(&path, "100k", &[]);
    in_small_row_groups(&path);
    path.to_str().unwrap().to_string()
}

/// Each query equals its one-process answer at 2 and 3 workers (two streams each).
async fn equal_at_2_and_3_workers(sql: &str, tables: &[String]) {
    for workers in [2, 3] {
        let (distributed, local) = both_ways(sql, tables, 2 * workers, workers).await;
        assert!(row_count(&local) > 0, "{sql}: no rows");
        assert_same_rows(&distributed, &local, &format!("{sql} at {workers} workers"));
    }
}

const S1: &str = "SELECT symbol, price, \
    LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, \
    ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, \
    AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time \
                     ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg \
    FROM market_data";
const S2: &str = "SELECT symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
    MIN(price) AS min_price, MAX(price) AS max_price, SUM(quantity) AS total_quantity \
    FROM market_data GROUP BY symbol";
const S3A: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
    SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol \
    WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
const S3B: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price \
    FROM market_data GROUP BY trader_id, symbol \
    WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scenarios_across_workers_equal_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let orders = [format!("orders={}", orders(dir.path()))];
    equal_at_2_and_3_workers(
        "SELECT order_id, customer_id, order_date, total_amount FROM orders WHERE total_amount > 100",
        &orders,
    )
    .await;
    let path = market_data(dir.path(), "100k", "0");
    let tables = [format!("market_data={path},event_time=trade_time")];
    for sql in [S1, S2, S3A, S3B] {
        equal_at_2_and_3_workers(sql, &tables).await;
    }
    // Aggregations without keys gather every stream on the coordinator: partial states of
    // a plain aggregation, the rows of a window in the replay's order.
    for sql in [
        "SELECT COUNT(*) AS n, SUM(quantity) AS q, MAX(price) AS top FROM market_data",
        "SELECT window_start, COUNT(*) AS n, MAX(price) AS top FROM market_data \
         WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
        "SELECT window_start, COUNT(*) AS n FROM market_data \
         WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES",
    ] {
        equal_at_2_and_3_workers(sql, &tables).await;
    }
    // A merge, a sort and a limit over the streams stay on the coordinator.
    equal_at_2_and_3_workers(
        &format!("SELECT * FROM ({S3A}) ORDER BY trade_count DESC, trader_id, symbol, total_quantity, avg_price LIMIT 25"),
        &tables,
    )
    .await;
}

/// A file of one row group is one source partition: one worker reads it, and the windows
/// and the aggregation without keys above it still run on every worker's streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_of_one_row_group_is_read_by_one_worker() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "20k", "0");
    rewrite(Path::new(&path), false, usize::MAX);
    let tables = [format!(
        "market_data={path},event_time=trade_time,partitions=1"
    )];
    for sql in [
        S3A,
        S3B,
        "SELECT COUNT(*) AS n, SUM(quantity) AS q FROM market_data",
    ] {
        equal_at_2_and_3_workers(sql, &tables).await;
    }
}

/// A GROUP BY without a window runs its partial step where the rows are read: a few state
/// rows per group cross the network instead of every row, and the answer is one process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_group_by_sends_partial_states_across_workers() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "100k", "0");
    let tables = [format!("market_data={path},event_time=trade_time")];
    let cluster = start_workers(2).await;
    let mut wire_bytes = Vec::new();
    for strategy in [None, Some("hash")] {
        let mut session = session(&tables);
        session.strategy = strategy.map(str::to_string);
        let spec = Arc::new(QuerySpec::new(S2.to_string(), &session, 4, 2).unwrap());
        let run = execute_distributed(Arc::clone(&spec), WorkerUrls::parse(&cluster.urls).unwrap())
            .await
            .unwrap();
        let report = run.report.clone();
        let (distributed, local) = with_one_process(S2, &spec, run).await;
        assert_same_rows(&distributed, &local, &format!("{strategy:?}"));
        wire_bytes.push(report.totals().await.unwrap().wire_bytes);
    }
    let (partial, hashed) = (wire_bytes[0], wire_bytes[1]);
    assert!(
        partial > 0 && partial * 100 < hashed,
        "{partial} vs {hashed} bytes"
    );
}

/// A library user's context — a Parquet replay, a generator, in-memory batches, in
/// partitions or dealt by Freshet, and a session setting (every aggregation a changelog) — runs across workers with the
/// answer it gives in one process; what workers cannot read is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_streaming_context_runs_across_workers() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "50k", "0");
    let timed = |watermark_ms: u64| StreamOptions {
        event_time: Some("trade_time".into()),
        out_of_orderness: Duration::from_millis(watermark_ms),
        ..StreamOptions::default()
    };
    let batches: Vec<RecordBatch> =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .with_batch_size(3_000)
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let schema = batches[0].schema();
    let ctx = StreamingContext::with_partitions(4);
    ctx.register_files("md", &path, None, timed(2_000))
        .await
        .unwrap();
    ctx.register_generator(
        "generated",
        GeneratorSpec::new(GeneratorKind::MarketData, Some(30_000)),
        StreamOptions::default(),
    )
    .unwrap();
    ctx.register_batches("dealt", Arc::clone(&schema), batches.clone(), timed(0))
        .unwrap();
    let partitions = batches
        .chunks(batches.len().div_ceil(2))
        .map(<[_]>::to_vec)
        .collect();
    ctx.register_stream(
        "split",
        ReplaySource::Partitioned {
            schema: Arc::clone(&schema),
            partitions,
        },
        timed(0),
    )
    .unwrap();
    ctx.session()
        .sql("SET freshet.emit = 'changes'")
        .await
        .unwrap();
    let cluster = start_workers(2).await;
    // Without keys, a window over in-memory batches or a generator would take a partial
    // step per source partition in one process; across workers it gathers the rows.
    let keyless = "SELECT window_start, COUNT(*) AS n, SUM(quantity) AS q FROM market_data \
                   WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)";
    for table in ["md", "generated", "dealt", "split"] {
        for sql in [S2, S3A, S3B, keyless] {
            let sql = sql.replace("FROM market_data", &format!("FROM {table}"));
            let spec = QuerySpec::of_context(&ctx, &sql, 2).await.unwrap();
            assert_eq!(spec.settings, ["emit=changes"]);
            let run = ctx
                .sql_across_workers(&sql, WorkerUrls::parse(&cluster.urls).unwrap())
                .await
                .unwrap();
            let distributed: Vec<RecordBatch> = run.stream.try_collect().await.unwrap();
            let local: Vec<RecordBatch> = ctx
                .sql(&sql)
                .await
                .unwrap()
                .execute_merged()
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            assert!(row_count(&local) > 0, "{sql}");
            assert_same_rows(&distributed, &local, &sql);
        }
    }
    let nothing = RecordBatchStreamAdapter::new(schema, futures::stream::empty());
    let live = LiveBatches::new(Box::pin(nothing), true);
    ctx.register_stream(
        "live",
        ReplaySource::Live(Arc::new(live)),
        StreamOptions::default(),
    )
    .unwrap();
    let refused = QuerySpec::of_context(&ctx, "SELECT * FROM md", 2)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("stream 'live' is read from batches the application hands over"),
        "{refused}"
    );
}

/// Over disordered records with a watermark shorter than their disorder, which records are
/// late depends on the order they are applied in: the changelog, the windows and the
/// records the late ones left out equal one process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_records_across_workers_are_the_ones_one_process_drops() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "100k", "0");
    disordered_in_small_row_groups(Path::new(&path));
    let tables = [format!(
        "market_data={path},event_time=trade_time,watermark=10s"
    )];
    let keyless = "SELECT window_start, COUNT(*) AS n, SUM(quantity) AS q FROM market_data \
                   WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)";
    // Hopping windows cross as pane states, which the final step adds to their windows.
    let hopping = "SELECT trader_id, symbol, COUNT(*) AS n, SUM(quantity) AS q FROM market_data \
                   GROUP BY trader_id, symbol \
                   WINDOW HOPPING (trade_time, INTERVAL '30' SECOND, INTERVAL '10' SECOND)";
    for sql in [S3A, S3B, S1, keyless, hopping] {
        equal_at_2_and_3_workers(sql, &tables).await;
    }
    // The counts compared hold some late records.
    let spec = QuerySpec::new(S3A.to_string(), &session(&tables), 4, 2).unwrap();
    let query = spec.plan().await.unwrap();
    let _: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    assert!(query.metric_total("late_records_dropped") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interval_join_across_workers_equals_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "100k", "3000");
    let tables = [
        format!("bids={path},event_time=trade_time,watermark=4s"),
        format!("asks={path},event_time=trade_time,watermark=4s"),
    ];
    equal_at_2_and_3_workers(
        "SELECT b.symbol, b.trade_time AS bt, a.trade_time AS at, b.quantity, a.price \
         FROM bids b JOIN asks a ON b.symbol = a.symbol AND b.trader_id = a.trader_id \
         AND a.trade_time BETWEEN b.trade_time - INTERVAL '5' SECOND AND b.trade_time + INTERVAL '2' SECOND",
        &tables,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nexmark_queries_across_workers_equal_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nexmark");
    freshet_ok(&[
        "gen",
        "nexmark",
        "--events",
        "100k",
        "--out",
        out.to_str().unwrap(),
    ]);
    for table in ["bid", "auction", "person"] {
        in_small_row_groups(&out.join(format!("{table}.parquet")));
    }
    let mut tables: Vec<String> = ["bid", "auction", "person"]
        .iter()
        .map(|table| {
            format!(
                "{table}={}/{table}.parquet,event_time=date_time,watermark=4s",
                out.display()
            )
        })
        .collect();
    tables.push(format!("side_input={}/side_input.csv", out.display()));
    let query = |n: u32| {
        std::fs::read_to_string(format!(
            "{}/bench/nexmark/q{n}.sql",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    // q7 gathers every stream into one (a window without keys) below a join that runs on
    // every stream again: one worker runs the window, between two shuffles. q13 looks each
    // bid up in a table every worker loads whole.
    for n in [1, 2, 5, 7, 8, 11, 12, 13, 14] {
        equal_at_2_and_3_workers(&query(n), &tables).await;
    }
    // A lookup join below an aggregation's shuffle, keeping the bids without a match.
    equal_at_2_and_3_workers(
        "SELECT s.value, COUNT(*) AS n, SUM(b.price) AS total FROM bid b \
         LEFT JOIN side_input s ON b.auction % 20000 = s.key GROUP BY s.value",
        &tables,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tumbling_window_across_workers_equals_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "300k", "0");
    let tables = [format!("market_data={path},event_time=trade_time")];
    let sql = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
               SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol \
               WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
    for workers in [2, 3] {
        let (distributed, local) = both_ways(sql, &tables, 2 * workers, workers).await;
        assert!(row_count(&local) > 1000, "{}", row_count(&local));
        assert_same_rows(&distributed, &local, &format!("{workers} workers"));
    }
}

/// Per symbol and window (20 s sliding by 5 s) its count, joined on the window to the
/// largest count of the window (`JOIN` is replaced by the join's kind), as Nexmark q5.
const TOP_COUNTS: &str = "SELECT a.symbol, a.n, a.ws, b.m FROM (
    SELECT symbol, COUNT(*) AS n, window_start AS ws, window_end AS we
    FROM HOP(TABLE market_data, DESCRIPTOR(trade_time), INTERVAL '5' SECOND, INTERVAL '20' SECOND)
    GROUP BY symbol, window_start, window_end) a
  JOIN (SELECT MAX(n) AS m, ws, we FROM (
    SELECT symbol, COUNT(*) AS n, window_start AS ws, window_end AS we
    FROM HOP(TABLE market_data, DESCRIPTOR(trade_time), INTERVAL '5' SECOND, INTERVAL '20' SECOND)
    GROUP BY symbol, window_start, window_end) GROUP BY ws, we) b
  ON a.ws = b.ws AND a.we = b.we AND a.n + 2 >= b.m";

/// A join whose one side holds one row per window broadcasts that side and leaves the
/// other on its workers, with late records in the replay: the same rows as one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_to_one_row_per_window_across_workers_equals_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "100k", "20000");
    let tables = [format!(
        "market_data={path},event_time=trade_time,watermark=2s"
    )];
    for join in ["JOIN", "LEFT JOIN"] {
        equal_at_2_and_3_workers(&TOP_COUNTS.replace("JOIN", join), &tables).await;
    }
}

/// A `freshet worker` process on a loopback port, killed when dropped.
struct WorkerProcess {
    child: std::process::Child,
    address: String,
}

impl WorkerProcess {
    fn start() -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_freshet"))
            .args(["worker", "--listen", "127.0.0.1:0"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line.trim().rsplit(' ').next().unwrap().to_string();
        Self { child, address }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `freshet query --workers` against worker processes: the answer of one process, and a
/// worker killed in the middle of a query fails it with a clear error within 10 seconds —
/// never a hang, never a short answer.
#[test]
fn localhost_worker_processes_answer_and_a_killed_one_fails_the_query() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "100k", "0");
    let table = format!("market_data={path},event_time=trade_time");
    let mut workers = vec![WorkerProcess::start(), WorkerProcess::start()];
    let addresses: Vec<String> = workers.iter().map(|w| w.address.clone()).collect();
    let list = addresses.join(",");
    let args = |workers: Option<&str>| {
        // Integers only: across workers the windows add partial sums, in another order.
        let sql = "SELECT trader_id, symbol, COUNT(*) AS n, SUM(quantity) AS q \
                   FROM market_data GROUP BY trader_id, symbol \
                   WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
        let mut args = vec!["query", "-t", &table, "--partitions", "4", "-o", "csv", sql];
        if let Some(workers) = workers {
            args.extend(["--workers", workers]);
        }
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut lines: Vec<String> = freshet_ok(&args).lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(run(args(Some(&list))), run(args(None)));

    // A paced stream of about 20 seconds; one worker is killed after 3.
    let paced = "market_data=generator:market_data,records=2M,rate=100000";
    let mut query = std::process::Command::new(env!("CARGO_BIN_EXE_freshet"))
        .args([
            "query",
            "-t",
            paced,
            "--partitions",
            "4",
            "-o",
            "null",
            S3A,
            "--workers",
            &list,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(query.try_wait().unwrap().is_none(), "the query ended early");
    drop(workers.pop());
    let killed = std::time::Instant::now();
    let status = loop {
        if let Some(status) = query.try_wait().unwrap() {
            break status;
        }
        if killed.elapsed() > std::time::Duration::from_secs(10) {
            let _ = query.kill();
            panic!("the query went on for 10 s after a worker was killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut query.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        !status.success(),
        "a query that lost a worker succeeded: {stderr}"
    );
    assert!(
        stderr.starts_with("error: a worker stopped or cannot be reached"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// What cannot run across workers yet is refused before any worker is asked, with the
/// reason: no worker needs to listen at the addresses given.
#[test]
fn what_cannot_cross_workers_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "10k", "0");
    let table = format!("market_data={path},event_time=trade_time");
    let nowhere = "127.0.0.1:9,127.0.0.1:10";
    let refusal = |extra: &[&str], sql: &str| {
        let mut args = vec!["query", "-t", &table, "--workers", nowhere, "-o", "null"];
        args.extend(extra);
        args.push(sql);
        crate::support::freshet_error(&args)
    };
    let endless = crate::support::freshet_error(&[
        "query",
        "-t",
        "market_data=generator:market_data,records=unbounded",
        "--workers",
        nowhere,
        "--partitions",
        "2",
        S3A,
    ]);
    assert!(
        endless.contains("an endless stream cannot run across workers yet"),
        "{endless}"
    );
    // Over a source without file order (a generator) the partial steps of windows must
    // judge lateness, at a watermark workers do not share.
    let two_phase = crate::support::freshet_error(&[
        "query",
        "-t",
        "market_data=generator:market_data,records=10k",
        "--workers",
        nowhere,
        "-o",
        "null",
        "--strategy",
        "two_phase",
        "--partitions",
        "2",
        "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol \
         WINDOW HOPPING (trade_time, INTERVAL '1' MINUTE, INTERVAL '30' SECOND)",
    ]);
    assert!(
        two_phase.contains("a two-phase aggregation over windows cannot cross workers"),
        "{two_phase}"
    );
    let uneven = refusal(&["--partitions", "3"], S3A);
    assert!(
        uneven.contains("3 streams cannot be spread evenly over 2 workers"),
        "{uneven}"
    );
    let checkpoints = refusal(&["--checkpoint-dir", dir.path().to_str().unwrap()], S3A);
    assert!(
        checkpoints.contains("--workers does not take --checkpoint-dir"),
        "{checkpoints}"
    );
}

/// Random queries over random file replays (the fuzzer's): across 2 workers at 2 and 4
/// streams, the rows of one process on as many streams — changelogs and late records
/// included — and every record read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_queries_across_workers_equal_one_process() {
    use freshet::testing::fuzz::{FuzzCase, Outcome};
    let cluster = start_workers(2).await;
    let (mut matched, mut refused) = (0, Vec::new());
    let mut failures = Vec::new();
    let seeds: Vec<u64> = std::env::var("FRESHET_SEEDS")
        .map(|s| s.split(',').map(|s| s.parse().unwrap()).collect())
        .unwrap_or_else(|_| (48_000..48_200).collect());
    for seed in seeds {
        let case = FuzzCase::generate(seed);
        match case.run_across_workers(&cluster.urls, 2).await {
            Outcome::Match => matched += 1,
            Outcome::Refused(reason) | Outcome::OracleFailed(reason) => refused.push(reason),
            failure => failures.push(format!("seed {seed}: {failure:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{matched} matched, {} refused", refused.len());
    if std::env::var("FRESHET_SHOW_REFUSALS").is_ok() {
        for r in &refused {
            eprintln!("REFUSED {}", r.lines().next().unwrap_or(""));
        }
    }
    assert!(matched >= 30, "{matched} matched; refused: {refused:#?}");
}

/// datafusion-distributed's in-memory cluster: gRPC over an in-process duplex stream to one
/// worker that serves every task of every stage (as `workers` workers would, all at one
/// address).
mod in_memory {
    use async_trait::async_trait;
    use datafusion::common::DataFusionError;
    use datafusion_distributed::{
        ChannelResolver, DistributedExt, Worker, WorkerChannel, WorkerQueryContext, WorkerResolver,
        grpc,
    };
    use freshet::distributed::FreshetCodec;
    use hyper_util::rt::TokioIo;
    use tonic::transport::{Endpoint, Server};

    const URL: &str = "http://in-memory-worker:50051";

    #[derive(Clone)]
    pub struct Channels {
        channel: grpc::BoxCloneSyncChannel,
    }

    impl Channels {
        pub fn start() -> Self {
            let (client, server) = tokio::io::duplex(1024 * 1024);
            let mut client = Some(client);
            let channel = Endpoint::try_from(URL)
                .unwrap()
                .connect_with_connector_lazy(tower::service_fn(move |_| {
                    let client = client.take().expect("one connection");
                    async move { Ok::<_, std::io::Error>(TokioIo::new(client)) }
                }));
            let this = Self {
                channel: grpc::BoxCloneSyncChannel::new(channel),
            };
            let for_worker = this.clone();
            let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
                let channels = for_worker.clone();
                async move {
                    Ok(ctx
                        .builder
                        .with_distributed_user_codec(FreshetCodec)
                        .with_distributed_channel_resolver(channels)
                        .build())
                }
            });
            tokio::spawn(async move {
                Server::builder()
                    .add_service(worker.into_worker_server())
                    .serve_with_incoming(futures::stream::once(async move {
                        Ok::<_, std::io::Error>(server)
                    }))
                    .await
            });
            this
        }
    }

    #[async_trait]
    impl ChannelResolver for Channels {
        async fn get_worker_client_for_url(
            &self,
            _: &url::Url,
        ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
            Ok(grpc::create_worker_client(self.channel.clone()))
        }
    }

    pub struct Workers(pub usize);

    impl WorkerResolver for Workers {
        fn get_urls(&self) -> Result<Vec<url::Url>, DataFusionError> {
            Ok(vec![url::Url::parse(URL).unwrap(); self.0])
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_in_memory_cluster_equals_one_process() {
    use datafusion::execution::SessionStateBuilder;
    use datafusion_distributed::DistributedExt;
    use freshet::distributed::execute_distributed_in;
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "100k", "0");
    disordered_in_small_row_groups(Path::new(&path));
    let tables = [format!(
        "market_data={path},event_time=trade_time,watermark=10s"
    )];
    for (sql, workers) in [(S3A, 2), (S3B, 3), (S1, 2)] {
        let spec = Arc::new(
            QuerySpec::new(sql.to_string(), &session(&tables), 2 * workers, workers).unwrap(),
        );
        let builder = SessionStateBuilder::new()
            .with_distributed_worker_resolver(in_memory::Workers(workers))
            .with_distributed_channel_resolver(in_memory::Channels::start());
        let run = execute_distributed_in(Arc::clone(&spec), builder)
            .await
            .unwrap();
        let (distributed, local) = with_one_process(sql, &spec, run).await;
        assert_same_rows(&distributed, &local, sql);
    }
}

/// `freshet COMMAND` of `sql` over `table` on 4 streams across two workers (not contacted).
fn across_two_workers(command: &str, table: &str, sql: &str) -> Vec<String> {
    let workers = "127.0.0.1:9,127.0.0.1:10";
    [
        command,
        "-t",
        table,
        "--partitions",
        "4",
        "--workers",
        workers,
        sql,
    ]
    .map(str::to_string)
    .to_vec()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// `freshet explain` of `sql` over 10 000 market_data records on 4 streams across two
/// workers (not contacted).
fn explain_across_two_workers(sql: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "10k", "0");
    let table = format!("market_data={path},event_time=trade_time");
    freshet_ok(&strs(&across_two_workers("explain", &table, sql)))
}

/// `freshet explain --workers` prints the one-process plan on all the streams, then the
/// stages across the workers, without contacting them.
#[test]
fn explain_shows_the_stages_across_workers() {
    let explained = explain_across_two_workers(S3A);
    let stages = explained
        .split_once("Across 2 workers, 2 streams each:")
        .unwrap_or_else(|| panic!("{explained}"))
        .1;
    for node in [
        "FragmentExec",
        "NetworkShuffleExec",
        "ExchangeSendExec",
        "NetworkCoalesceExec",
    ] {
        assert!(stages.contains(node), "{explained}");
    }
    assert!(explained.contains("WindowAggregateExec"), "{explained}");
}

/// `freshet query "EXPLAIN …" --workers` answers as `freshet explain --workers` does, the
/// plan and its stages (the workers are not contacted); EXPLAIN ANALYZE, which would run
/// the query, is refused with the reason.
#[test]
fn explain_in_a_query_across_workers_shows_the_stages() {
    let dir = tempfile::tempdir().unwrap();
    let path = market_data(dir.path(), "10k", "0");
    let table = format!("market_data={path},event_time=trade_time");
    let run = |command: &str, sql: &str| across_two_workers(command, &table, sql);
    let explained = freshet_ok(&strs(&run("explain", S3A)));
    let script = format!("SET datafusion.execution.batch_size = 8192;\n  explain {S3A}");
    let queried = freshet_ok(&strs(&run("query", &script)));
    assert_eq!(queried, explained);
    assert!(
        explained.contains("Across 2 workers, 2 streams each:"),
        "{explained}"
    );
    let analyze = format!("EXPLAIN ANALYZE {S3A}");
    let refused = crate::support::freshet_error(&strs(&run("query", &analyze)));
    assert!(
        refused.contains("EXPLAIN ANALYZE does not run across workers yet"),
        "{refused}"
    );
}

/// Across workers, a GROUP BY over hopping windows of a replay runs in two phases
/// automatically, and its partial step sends a state per pane (one slide), not per window.
#[test]
fn hopping_windows_across_workers_send_pane_states() {
    let explained = explain_across_two_workers(
        "SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol \
         WINDOW HOPPING (trade_time, INTERVAL '30' SECOND, INTERVAL '10' SECOND)",
    );
    assert!(
        explained.contains("auto: across workers, tumbling or hopping windows over a replay"),
        "{explained}"
    );
    assert!(
        explained.contains("per input partition in panes of 10000"),
        "{explained}"
    );
}

/// Across workers, an aggregation over an inner window's results grouped by that window (as
/// Nexmark q5's largest count per window) runs in two phases: none of its rows is late, so
/// its partial step needs no watermark.
#[test]
fn a_window_over_a_window_sends_partial_states_across_workers() {
    let explained = explain_across_two_workers(
        "SELECT MAX(n) AS most, starttime, endtime FROM (
            SELECT symbol, COUNT(*) AS n, window_start AS starttime, window_end AS endtime
            FROM HOP(TABLE market_data, DESCRIPTOR(trade_time), INTERVAL '10' SECOND, INTERVAL '30' SECOND)
            GROUP BY symbol, window_start, window_end
        ) GROUP BY starttime, endtime",
    );
    assert!(
        explained.contains("partial_aggregate=[max(n)] per input partition, no input row late"),
        "{explained}"
    );
}

/// Across workers, the side a join leaves in its streams (Nexmark q5's counts per auction,
/// joined to each window's largest) stays on its workers: only the largest counts, one row
/// per window, cross to every worker.
#[test]
fn a_join_to_one_row_per_window_leaves_the_other_side_on_its_workers() {
    let explained = explain_across_two_workers(TOP_COUNTS);
    assert!(explained.contains("strategy=broadcast"), "{explained}");
    let stages = explained
        .split_once("Across 2 workers")
        .unwrap_or_else(|| panic!("{explained}"))
        .1;
    // The counts of each side (partial states hashed on the symbol), the largest per window
    // (partial states hashed on the window) and their broadcast; not the counts joined.
    assert_eq!(stages.matches("ExchangeSendExec").count(), 4, "{explained}");
}
