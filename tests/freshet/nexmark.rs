//! Nexmark: every query q0–q22 over the generator's events equals its batch SQL on DataFusion
//! at 1, 2 and 4 streams.

use freshet::GeneratorSpec;
use freshet::NexmarkTable;
use freshet::testing::{Differential, TestSource, TestTable};
use freshet_bench::nexmark::{NEXMARK_QUERIES, NexmarkQuery};
use freshet_engine::nexmark_side_input;

use futures::TryStreamExt;

use crate::support::freshet_ok;

/// 20 000 events at 500 a second of event time: 40 seconds, so that the 10-second windows,
/// hops and sessions of q5, q7, q8, q11 and q12 close several times.
fn events(table: NexmarkTable) -> GeneratorSpec {
    let mut spec = GeneratorSpec::nexmark(table, Some(20_000));
    spec.set("event_rate", "500").unwrap();
    spec
}

fn differential(query: &NexmarkQuery) -> Differential {
    differential_of(query, query.sql)
}

/// `sql`, another spelling of `query`, against `query`'s batch SQL over its tables.
fn differential_of(query: &NexmarkQuery, sql: &str) -> Differential {
    let (sql, batch_sql) = match query.tie_free_columns {
        Some(columns) => (
            format!("SELECT {} FROM ({})", columns.join(", "), sql),
            format!("SELECT {} FROM ({})", columns.join(", "), query.batch_sql),
        ),
        None => (sql.to_string(), query.batch_sql.to_string()),
    };
    let mut differential = Differential::new(&sql, &batch_sql);
    for table in query.reads {
        differential = differential.table(TestTable::new(
            table.name(),
            TestSource::Generator(events(*table)),
        ));
    }
    if query.side_input {
        let side_input = nexmark_side_input();
        differential = differential.table(TestTable::new(
            "side_input",
            TestSource::Table {
                schema: side_input.schema(),
                batches: vec![side_input],
            },
        ));
    }
    differential
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_equals_batch_sql_at_1_2_and_4_streams() {
    let mut failures = Vec::new();
    for query in &NEXMARK_QUERIES {
        if let Err(error) = differential(query).run().await {
            failures.push(format!("{}: {error}", query.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The queries as nexmark/nexmark's Flink SQL spells them (`bench/nexmark/flink/`, also run
/// on Flink): window table functions wrapped in `TABLE(…)`, group windows with their
/// auxiliary functions, `MOD`, `HOUR`, `DATE_FORMAT` with a Java pattern, `SPLIT_INDEX`.
macro_rules! flink_spelling {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../bench/nexmark/flink/", $name, ".sql")),
        )
    };
}

const FLINK_SPELLINGS: [(&str, &str); 12] = [
    flink_spelling!("q0"),
    flink_spelling!("q1"),
    flink_spelling!("q2"),
    flink_spelling!("q3"),
    flink_spelling!("q5"),
    flink_spelling!("q7"),
    flink_spelling!("q8"),
    flink_spelling!("q10"),
    flink_spelling!("q11"),
    flink_spelling!("q14"),
    flink_spelling!("q17"),
    flink_spelling!("q22"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flink_spellings_of_the_queries_give_the_batch_answers() {
    for (name, sql) in FLINK_SPELLINGS {
        let query = NEXMARK_QUERIES
            .iter()
            .find(|query| query.name == name)
            .unwrap();
        differential_of(query, sql)
            .run()
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
    }
}

/// On streams declared endless (replays of the same events that end), q5's second
/// aggregation groups by the first one's window columns: each of its groups closes when the
/// watermark passes that window, so its rows carry an event time and the join of the two
/// aggregations is a join of streams bounded by it. The answer is still the batch one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q5_on_endless_streams_closes_its_windows_on_the_watermark() {
    let query = freshet_bench::nexmark::nexmark_query("q5").expect("q5");
    let mut spec = events(NexmarkTable::Bid);
    spec.set("disorder_ms", "1000").unwrap();
    let options = freshet::StreamOptions {
        bounded: Some(false),
        out_of_orderness: std::time::Duration::from_secs(1),
        ..freshet::StreamOptions::default()
    };
    Differential::new(query.sql, query.batch_sql)
        .table(TestTable::new("bid", TestSource::Generator(spec)).with_options(options))
        .with_plan_text("IntervalJoinExec")
        .with_plan_text("window=Tumble { size: 1,")
        .run()
        .await
        .unwrap();
}

/// Every query runs on endless streams (the generator's events declared endless, so that no
/// operator may wait for the end of the input) and emits rows: q3 and q20, regular joins,
/// with a state time-to-live, and q6 as the changelog of its window over the top-1 of each
/// auction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_runs_on_endless_streams() {
    let mut failures = Vec::new();
    for query in &NEXMARK_QUERIES {
        let ctx = freshet::StreamingContext::with_partitions(2);
        for table in query.reads {
            let options = freshet::StreamOptions {
                event_time: Some("date_time".to_string()),
                out_of_orderness: std::time::Duration::from_secs(4),
                bounded: Some(false),
                ..freshet::StreamOptions::default()
            };
            ctx.register_generator(table.name(), events(*table), options)
                .unwrap();
        }
        if query.side_input {
            let side_input = nexmark_side_input();
            let options = freshet::StreamOptions {
                bounded: Some(true),
                ..freshet::StreamOptions::default()
            };
            ctx.register_batches("side_input", side_input.schema(), vec![side_input], options)
                .unwrap();
        }
        ctx.sql("SET freshet.state_ttl_ms = 3600000").await.unwrap();
        let rows = match ctx.sql(query.sql).await {
            Ok(running) => match running.execute_merged() {
                Ok(stream) => stream
                    .try_fold(0, |rows, batch| async move { Ok(rows + batch.num_rows()) })
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(error.to_string()),
            },
            Err(error) => Err(error.to_string()),
        };
        match rows {
            Ok(0) => failures.push(format!("{}: no rows", query.name)),
            Ok(_) => {}
            Err(error) => failures.push(format!("{}: {error}", query.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `freshet gen nexmark` writes the events the generator makes, and a query file runs over
/// them as over the generator: q8 (a window join of two streams) and q13 (the side input),
/// from the command line, as a user would.
#[test]
fn the_files_gen_nexmark_writes_replay_the_generators_events() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    freshet_ok(&["gen", "nexmark", "--events", "20000", "--out", out]);
    for file in [
        "person.parquet",
        "auction.parquet",
        "bid.parquet",
        "side_input.csv",
    ] {
        assert!(dir.path().join(file).exists(), "{file} is missing");
    }
    for query in ["q8", "q13"] {
        let file = format!("bench/nexmark/{query}.sql");
        let generated = sorted_rows(&freshet_ok(&[
            "query",
            "-f",
            &file,
            "--table",
            "person=generator:nexmark,events=20000",
            "--table",
            "auction=generator:nexmark,events=20000",
            "--table",
            "bid=generator:nexmark,events=20000",
            "-o",
            "csv",
        ]));
        let table =
            |name: &str| format!("{name}={out}/{name}.parquet,event_time=date_time,watermark=4s");
        let replayed = sorted_rows(&freshet_ok(&[
            "query",
            "-f",
            &file,
            "--table",
            &table("person"),
            "--table",
            &table("auction"),
            "--table",
            &table("bid"),
            "--table",
            &format!("side_input={out}/side_input.csv,bounded=true"),
            "--partitions",
            "2",
            "-o",
            "csv",
        ]));
        assert!(generated.len() > 100, "{query}: {} rows", generated.len());
        assert_eq!(generated, replayed, "{query}");
    }
}

fn sorted_rows(csv: &str) -> Vec<String> {
    let mut rows: Vec<String> = csv.lines().skip(1).map(str::to_string).collect();
    rows.sort();
    rows
}
