//! Dictionary-encoded string columns (a Parquet file written from Arrow dictionaries, as
//! pandas categories are): every keyed operator takes them as keys and gives them out with
//! their type, and each answer equals DataFusion batch's at 1, 2 and 4 streams.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, DictionaryArray, Int64Array, RecordBatch, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::Int32Type;
use freshet::StreamOptions;
use freshet::testing::{Differential, TestSource, TestTable};

/// Rows `(trader, symbol, v, seq, ts)`: `trader` and `symbol` dictionaries (a few nulls),
/// `v` with many ties, `ts` a row every 250 ms with a little disorder.
fn rows(count: i64) -> RecordBatch {
    let name = |prefix: &str, i: i64, modulus: i64| match i % 31 {
        0 => None,
        _ => Some(format!("{prefix}{}", (i * 7919) % modulus)),
    };
    let names: Vec<Option<String>> = (0..count).map(|i| name("T", i, 7)).collect();
    let traders: DictionaryArray<Int32Type> = names.iter().map(Option::as_deref).collect();
    let names: Vec<Option<String>> = (0..count).map(|i| name("SYM", i / 3, 5)).collect();
    let symbols: DictionaryArray<Int32Type> = names.iter().map(Option::as_deref).collect();
    RecordBatch::try_from_iter([
        ("trader", Arc::new(traders) as ArrayRef),
        ("symbol", Arc::new(symbols)),
        (
            "v",
            Arc::new(Int64Array::from_iter_values(
                (0..count).map(|i| (i * 104_729) % 13),
            )),
        ),
        ("seq", Arc::new(Int64Array::from_iter_values(0..count))),
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from_iter_values(
                (0..count).map(|i| 1_700_000_000_000 + i * 250 - (i % 3) * 100),
            )),
        ),
    ])
    .unwrap()
}

/// `rows(count)` as a Parquet file of row groups of 101 rows, each with its own dictionaries.
fn parquet(path: &Path, count: i64) {
    crate::support::write_parquet(path, &rows(count), 101);
}

fn table(path: &Path) -> TestTable {
    TestTable::new("t", TestSource::Parquet(path.to_path_buf())).with_options(StreamOptions {
        event_time: Some("ts".to_string()),
        out_of_orderness: std::time::Duration::from_secs(1),
        ..StreamOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dictionary_keys_group_rank_and_window_as_their_values_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    parquet(&path, 4_000);
    let cases = [
        // Windowed and plain groups of two dictionary keys, and of one beside an integer.
        (
            "SELECT trader, symbol, window_start, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY trader, symbol WINDOW TUMBLING (ts, INTERVAL '10' SECOND)",
            "SELECT trader, symbol, date_bin(INTERVAL '10 seconds', ts) AS window_start, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY trader, symbol, date_bin(INTERVAL '10 seconds', ts)",
        ),
        (
            "SELECT symbol, v, COUNT(*) AS n, MIN(trader) AS first_trader FROM t GROUP BY symbol, v",
            "SELECT symbol, v, COUNT(*) AS n, MIN(trader) AS first_trader FROM t GROUP BY symbol, v",
        ),
        // Sessions of a symbol: a new one where the gap to its previous record reaches 2 s.
        (
            "SELECT symbol, window_start, COUNT(*) AS n FROM t GROUP BY symbol WINDOW SESSION (ts, INTERVAL '2' SECOND)",
            "WITH marked AS (
                SELECT *, CASE WHEN ts - LAG(ts) OVER (PARTITION BY symbol ORDER BY ts) < INTERVAL '2 seconds' THEN 0 ELSE 1 END AS fresh FROM t),
            numbered AS (
                SELECT *, SUM(fresh) OVER (PARTITION BY symbol ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session_id FROM marked)
            SELECT symbol, MIN(ts) AS window_start, COUNT(*) AS n FROM numbered GROUP BY symbol, session_id",
        ),
    ];
    for (streaming, batch) in cases {
        Differential::new(streaming, batch)
            .table(table(&path))
            .partitions(&[1, 2, 4])
            .run()
            .await
            .unwrap_or_else(|e| panic!("{streaming}: {e}"));
    }
    // Top-N and keep-last rows carry their dictionary columns out.
    let top = |order: &str, n: usize| {
        format!(
            "SELECT trader, symbol, v, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY trader ORDER BY {order}) AS rn FROM t) WHERE rn <= {n}"
        )
    };
    Differential::new(&top("v DESC", 3), &top("v DESC, seq", 3))
        .table(table(&path))
        .partitions(&[1, 2, 4])
        .with_plan_text("TopNExec: n=3")
        .run()
        .await
        .unwrap();
    Differential::new(&top("ts DESC", 1), &top("ts DESC, seq DESC", 1))
        .table(table(&path))
        .partitions(&[1, 2, 4])
        .run()
        .await
        .unwrap();
}
