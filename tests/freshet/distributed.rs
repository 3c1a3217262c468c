//! Queries across workers on datafusion-distributed: workers on loopback ports in this
//! process, each query's answer against the same query in one process on as many streams.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use freshet::cli::SessionArgs;
use freshet::distributed::{QuerySpec, WorkerUrls, execute_distributed, serve_worker};
use futures::TryStreamExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::support::freshet_ok;

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

fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows: Vec<String> = pretty_format_batches(batches)
        .unwrap()
        .to_string()
        .lines()
        .filter(|line| line.starts_with("| "))
        .skip(1)
        .map(str::to_string)
        .collect();
    rows.sort();
    rows
}

/// The query's rows across `workers` workers with `partitions` streams in all, and in one
/// process on as many streams.
async fn both_ways(sql: &str, tables: &[String], partitions: usize, workers: usize) -> (Vec<String>, Vec<String>) {
    let cluster = start_workers(workers).await;
    let spec = Arc::new(QuerySpec::new(sql.to_string(), &session(tables), partitions, workers).unwrap());
    let stream = execute_distributed(Arc::clone(&spec), WorkerUrls::parse(&cluster.urls).unwrap())
        .await
        .unwrap();
    let distributed: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    let query = spec.plan().await.unwrap();
    let local: Vec<RecordBatch> = query.execute_merged().unwrap().try_collect().await.unwrap();
    (sorted_rows(&distributed), sorted_rows(&local))
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
    path.to_str().unwrap().to_string()
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
        assert!(local.len() > 1000, "{}", local.len());
        assert_eq!(distributed, local, "{workers} workers");
    }
}
