//! Scenario S0 (pure SELECT) equals DataFusion batch at 1, 2 and 4 streams: over the generated
//! orders stream, over a Parquet file written by `freshet gen`, from the library and the CLI.

use datafusion::prelude::{CsvReadOptions, SessionContext};
use freshet::bench::scenario;
use freshet::testing::{Differential, TestSource, TestTable, compare_results};
use freshet::{GeneratorKind, GeneratorSpec};

use crate::support::{freshet_ok, gen_orders};

const S0: &str =
    "SELECT order_id, customer_id, order_date, total_amount FROM orders WHERE total_amount > 100";

fn orders(records: u64, amount_base: f64) -> GeneratorSpec {
    let mut spec = GeneratorSpec::new(GeneratorKind::Orders, Some(records));
    spec.batch_size = 1_000;
    spec.amount_base = amount_base;
    spec
}

#[tokio::test]
async fn s0_over_the_generated_orders_stream_matches_datafusion() {
    for amount_base in [150.0, 51.0] {
        Differential::same_sql(S0)
            .table(TestTable::new(
                "orders",
                TestSource::Generator(orders(25_000, amount_base)),
            ))
            .run()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn s0_half_filter_variant_really_drops_about_half() {
    let rows: usize = Differential::same_sql(S0)
        .table(TestTable::new(
            "orders",
            TestSource::Generator(orders(10_000, 51.0)),
        ))
        .streaming_result(2)
        .await
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(
        rows, 5_000,
        "51 + i % 100 > 100 holds for i % 100 in 50..100: half the orders"
    );
}

#[tokio::test]
async fn s0_over_a_parquet_file_written_by_freshet_gen_matches_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.parquet");
    gen_orders(
        &path,
        "30000",
        &["--set", "amount_base=51", "--set", "batch_size=4000"],
    );
    Differential::same_sql(S0)
        .table(TestTable::new("orders", TestSource::Parquet(path)))
        .run()
        .await
        .unwrap();
}

#[tokio::test]
async fn s0_from_the_cli_matches_datafusion_over_parquet_and_the_generator() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("orders.parquet");
    gen_orders(&parquet, "20000", &["--set", "amount_base=60"]);
    // The file holds exactly the generator's records, so both sources must give this result.
    let spec = orders(20_000, 60.0);
    let expected = Differential::same_sql(S0)
        .table(TestTable::new(
            "orders",
            TestSource::Generator(spec.clone()),
        ))
        .batch_result()
        .await
        .unwrap();
    let sources = [
        format!("orders={}", parquet.display()),
        "orders=generator:orders,records=20000,amount_base=60".to_string(),
    ];
    for source in &sources {
        for partitions in ["1", "2", "4"] {
            let out = dir.path().join(format!("out-{partitions}.csv"));
            let output = format!("csv={}", out.display());
            freshet_ok(&[
                "query",
                S0,
                "--table",
                source,
                "--partitions",
                partitions,
                "--output",
                &output,
            ]);
            let ctx = SessionContext::new();
            let actual = ctx
                .read_csv(
                    out.to_str().unwrap(),
                    CsvReadOptions::new().schema(&spec.schema()),
                )
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            compare_results(&expected, &actual, false)
                .unwrap_or_else(|e| panic!("{source} at {partitions} streams: {e}"));
        }
    }
}

#[tokio::test]
async fn the_bench_scenarios_run_the_s0_query() {
    let s0 = scenario("s0").unwrap();
    assert_eq!(s0.streaming_sql, S0);
    assert_eq!(s0.table(), "orders");
    assert!(scenario("S0-half").is_some());
    assert!(scenario("S9").is_none());
}
