//! Lookups of a stream into a bounded table equal DataFusion batch SQL at 1, 2 and 4 streams,
//! in every join type a lookup runs as, over the table shapes its probe treats apart: keys
//! unique or repeated in the table, null keys on either side, short string keys (and probe
//! strings longer than any table key that share its first bytes), long string keys, integer
//! keys, two-column keys, and an empty table. A table over the memory limit is an error that
//! names the lookup.

use std::sync::Arc;

use datafusion::arrow::array::TimestampMillisecondArray;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use freshet::StreamOptions;
use freshet::testing::{Differential, TestSource, TestTable};

/// Stream keys: short ones that tables hold, a probe string longer than 8 bytes whose first
/// 8 bytes are a table key, one longer than every table key, and nulls.
const STREAM_KEYS: [Option<&str>; 8] = [
    Some("a"),
    Some("bb"),
    Some("SYM1"),
    Some("abcdefgh"),
    Some("abcdefghX"),
    Some("longer-than-eight"),
    None,
    Some("nowhere"),
];

/// 2 000 stream rows in batches of 300: `k` from [`STREAM_KEYS`], `n` every 13th value
/// with nulls, `v` the row number, `ts` a second apart.
fn stream() -> TestTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let rows: Vec<i64> = (0..2_000).collect();
    let batches = rows
        .chunks(300)
        .map(|chunk| {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter(
                    chunk.iter().map(|i| STREAM_KEYS[*i as usize % 8]),
                )),
                Arc::new(Int64Array::from_iter(
                    chunk.iter().map(|i| (i % 17 != 0).then_some(i % 13)),
                )),
                Arc::new(Int64Array::from_iter_values(chunk.iter().copied())),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    chunk.iter().map(|i| 1_700_000_000_000 + i * 1_000),
                )),
            ];
            RecordBatch::try_new(Arc::clone(&schema), columns).expect("stream batch")
        })
        .collect();
    let options = StreamOptions {
        event_time: Some("ts".to_string()),
        ..StreamOptions::default()
    };
    TestTable::batches("s", schema, batches).with_options(options)
}

/// The bounded table `x(k, n, name)` of `rows`, in two batches.
fn table(rows: &[(Option<&str>, Option<i64>)]) -> TestTable {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("name", DataType::Utf8, false),
    ]));
    let batches = rows
        .chunks(rows.len().div_ceil(2).max(1))
        .enumerate()
        .map(|(chunk_index, chunk)| {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter(chunk.iter().map(|(k, _)| *k))),
                Arc::new(Int64Array::from_iter(chunk.iter().map(|(_, n)| *n))),
                Arc::new(StringArray::from_iter_values(
                    (0..chunk.len()).map(|row| format!("name{chunk_index}-{row}")),
                )),
            ];
            RecordBatch::try_new(Arc::clone(&schema), columns).expect("table batch")
        })
        .collect();
    TestTable::new("x", TestSource::Table { schema, batches })
}

/// The joins a lookup runs as, each over `x`.
const LOOKUPS: [&str; 9] = [
    "SELECT s.k, s.v, x.name FROM s JOIN x ON s.k = x.k",
    "SELECT s.k, s.v, x.name FROM x JOIN s ON x.k = s.k",
    "SELECT s.k, s.v, x.name, x.n FROM s LEFT JOIN x ON s.k = x.k",
    "SELECT s.k, s.v, x.name FROM x RIGHT JOIN s ON s.k = x.k",
    "SELECT s.v, x.name FROM s JOIN x ON s.n = x.n",
    "SELECT s.v, x.name FROM s LEFT JOIN x ON s.k = x.k AND s.n = x.n",
    "SELECT s.v, s.ts FROM s WHERE EXISTS (SELECT 1 FROM x WHERE x.k = s.k)",
    "SELECT s.v FROM s WHERE NOT EXISTS (SELECT 1 FROM x WHERE x.k = s.k)",
    "SELECT s.v FROM s WHERE s.k IN (SELECT k FROM x)",
];

async fn lookups_equal_batch(x: TestTable) {
    for sql in LOOKUPS {
        Differential::same_sql(sql)
            .table(stream())
            .table(x.clone())
            .with_plan_text("LookupJoinExec")
            .run()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test]
async fn lookups_into_a_table_of_unique_short_keys_equal_batch() {
    lookups_equal_batch(table(&[
        (Some("a"), Some(1)),
        (Some("bb"), Some(2)),
        (Some("abcdefgh"), Some(3)),
        (Some("SYM1"), Some(5)),
    ]))
    .await;
}

#[tokio::test]
async fn lookups_into_a_table_of_repeated_and_null_keys_equal_batch() {
    lookups_equal_batch(table(&[
        (Some("a"), Some(1)),
        (Some("a"), Some(1)),
        (Some("bb"), Some(2)),
        (None, Some(3)),
        (Some("abcdefgh"), None),
        (Some("zz"), Some(4)),
        (Some("a"), Some(7)),
    ]))
    .await;
}

#[tokio::test]
async fn lookups_into_a_table_of_long_keys_equal_batch() {
    lookups_equal_batch(table(&[
        (Some("longer-than-eight"), Some(1)),
        (Some("a"), Some(2)),
        (Some("abcdefghX"), Some(2)),
        (Some("longer-than-eight"), Some(3)),
    ]))
    .await;
}

#[tokio::test]
async fn lookups_into_an_empty_table_equal_batch() {
    lookups_equal_batch(table(&[])).await;
}

/// A table larger than the memory pool is refused with an error that names the lookup.
#[tokio::test]
async fn a_lookup_table_over_the_memory_limit_is_an_error_naming_the_lookup() {
    let ctx = crate::support::memory_limited_context(1024 * 1024);
    ctx.register_generator(
        "market_data",
        freshet::GeneratorSpec::new(freshet::GeneratorKind::MarketData, Some(1_000)),
        StreamOptions::default(),
    )
    .unwrap();
    // 100 000 rows of about 60 bytes: several MiB.
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("symbol", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            (0..100_000).map(|i| format!("SYM{i}")),
        )),
        Arc::new(StringArray::from_iter_values((0..100_000).map(|i| {
            format!("a listed company's long name, number {i:>10}")
        }))),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
    let table = datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]]).unwrap();
    ctx.session()
        .register_table("symbols", Arc::new(table))
        .unwrap();
    let query = ctx
        .sql("SELECT m.symbol, s.name FROM market_data m JOIN symbols s ON m.symbol = s.symbol")
        .await
        .unwrap();
    assert!(query.explain().contains("LookupJoinExec"));
    let error = crate::support::execution_error(&query).await;
    assert!(error.contains("LookupJoinExec"), "{error}");
}

/// `x` of `rows` registered as a bounded stream without an event time, as `--table
/// x=x.csv` registers a file.
fn table_as_stream(rows: &[(Option<&str>, Option<i64>)]) -> TestTable {
    let TestSource::Table { schema, batches } = table(rows).source else {
        unreachable!("table() gives a table");
    };
    TestTable::batches("x", schema, batches)
}

#[tokio::test]
async fn a_bounded_stream_without_event_time_is_a_table_the_stream_looks_up() {
    let x = table_as_stream(&[
        (Some("a"), Some(1)),
        (Some("bb"), Some(2)),
        (Some("SYM1"), Some(5)),
    ]);
    for sql in LOOKUPS {
        Differential::same_sql(sql)
            .table(stream())
            .table(x.clone())
            .with_plan_text("LookupJoinExec")
            .run()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // The lookup keeps the stream's event time: a window over it runs.
    Differential::new(
        "SELECT x.name, window_start, COUNT(*) AS n FROM s JOIN x ON s.k = x.k GROUP BY x.name WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)",
        "SELECT x.name, date_bin(INTERVAL '1 minute', ts) AS window_start, COUNT(*) AS n FROM s JOIN x ON s.k = x.k GROUP BY x.name, date_bin(INTERVAL '1 minute', ts)",
    )
    .table(stream())
    .table(x)
    .with_plan_text("LookupJoinExec")
    .run()
    .await
    .unwrap();
}

#[tokio::test]
async fn not_in_a_table_keeps_its_null_rule_on_a_bounded_stream() {
    // NOT IN keeps no row when the subquery has a NULL key, nor a row whose key is NULL.
    for rows in [
        vec![(Some("a"), Some(1)), (Some("bb"), Some(2))],
        vec![(Some("a"), Some(1)), (None, Some(2))],
        vec![],
    ] {
        for x in [table(&rows), table_as_stream(&rows)] {
            Differential::same_sql("SELECT s.v FROM s WHERE s.k NOT IN (SELECT k FROM x)")
                .table(stream())
                .table(x)
                .run()
                .await
                .unwrap_or_else(|e| panic!("{rows:?}: {e}"));
        }
    }
}

#[tokio::test]
async fn not_in_a_table_over_an_endless_stream_is_refused_with_what_to_write() {
    let ctx = freshet::StreamingContext::with_partitions(2);
    let s = stream();
    let TestSource::Batches { schema, batches } = s.source else {
        unreachable!("stream() gives batches");
    };
    let options = StreamOptions {
        bounded: Some(false),
        ..s.options
    };
    ctx.register_batches("s", schema, batches, options).unwrap();
    let TestSource::Table { schema, batches } = table(&[(Some("a"), Some(1))]).source else {
        unreachable!("table() gives a table");
    };
    let memory = datafusion::datasource::MemTable::try_new(schema, vec![batches]).unwrap();
    ctx.session().register_table("x", Arc::new(memory)).unwrap();
    let error = match ctx
        .sql("SELECT s.v FROM s WHERE s.k NOT IN (SELECT k FROM x)")
        .await
    {
        Ok(_) => panic!("NOT IN over an endless stream planned"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("write NOT EXISTS"), "{error}");
}

#[tokio::test]
async fn a_window_over_a_join_of_bounded_streams_gives_the_batch_answer() {
    // A join of two streams without a bound on their times: its output has no watermark, so
    // on bounded input its windows close at the end.
    let s = stream();
    let TestSource::Batches { schema, batches } = s.source.clone() else {
        unreachable!("stream() gives batches");
    };
    let other = TestTable::batches("s2", schema, batches).with_options(s.options.clone());
    Differential::new(
        "SELECT a.k, window_start, COUNT(*) AS n, SUM(b.v) AS total FROM s a JOIN s2 b ON a.k = b.k GROUP BY a.k WINDOW TUMBLING (a.ts, INTERVAL '5' MINUTE)",
        "SELECT a.k, date_bin(INTERVAL '5 minutes', a.ts) AS window_start, COUNT(*) AS n, SUM(b.v) AS total FROM s a JOIN s2 b ON a.k = b.k GROUP BY a.k, date_bin(INTERVAL '5 minutes', a.ts)",
    )
    .table(s)
    .table(other)
    .run()
    .await
    .unwrap();
}
