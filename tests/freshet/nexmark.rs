//! Nexmark: every query q0–q22 over the generator's events equals its batch SQL on DataFusion
//! at 1, 2 and 4 streams.

use freshet::GeneratorSpec;
use freshet::NexmarkTable;
use freshet::testing::{Differential, TestSource, TestTable};
use freshet_bench::nexmark::{NEXMARK_QUERIES, NexmarkQuery};
use freshet_engine::nexmark_side_input;

/// 20 000 events at 500 a second of event time: 40 seconds, so that the 10-second windows,
/// hops and sessions of q5, q7, q8, q11 and q12 close several times.
fn events(table: NexmarkTable) -> GeneratorSpec {
    let mut spec = GeneratorSpec::nexmark(table, Some(20_000));
    spec.set("event_rate", "500").unwrap();
    spec
}

fn differential(query: &NexmarkQuery) -> Differential {
    let (sql, batch_sql) = match query.tie_free_columns {
        Some(columns) => (
            format!("SELECT {} FROM ({})", columns.join(", "), query.sql),
            format!("SELECT {} FROM ({})", columns.join(", "), query.batch_sql),
        ),
        None => (query.sql.to_string(), query.batch_sql.to_string()),
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
