//! Helpers shared by the integration tests.

use std::path::Path;
use std::process::{Command, Output};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use freshet::StreamingContext;

/// Writes `batch` to a Parquet file at `path` in row groups of at most `group_rows` rows.
pub fn write_parquet(path: &Path, batch: &RecordBatch, group_rows: usize) {
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// Runs the `freshet` binary with `args`.
pub fn freshet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_freshet"))
        .args(args)
        .output()
        .expect("the freshet binary runs")
}

/// Runs `freshet` and expects it to succeed; returns stdout.
pub fn freshet_ok(args: &[&str]) -> String {
    let output = freshet(args);
    assert!(
        output.status.success(),
        "freshet {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `freshet` and expects a failure with a one-line error; returns that line.
pub fn freshet_error(args: &[&str]) -> String {
    let output = freshet(args);
    assert!(!output.status.success(), "freshet {args:?} should fail");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "error is not one line: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "freshet panicked: {stderr}");
    stderr
}

/// `freshet query` writing every row of an endless `market_data` generator as CSV to a
/// pipe: a run that lasts until its reader goes away or it is killed.
pub fn endless_csv_query() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_freshet"));
    command
        .args([
            "query",
            "SELECT * FROM market_data",
            "--table",
            "market_data=generator:market_data,records=unbounded",
            "-o",
            "csv",
        ])
        .stdout(std::process::Stdio::piped());
    command
}

/// Writes the generated `orders` stream with `records` records to `path` with `freshet gen`.
pub fn gen_orders(path: &Path, records: &str, extra: &[&str]) {
    let mut args = vec![
        "gen",
        "orders",
        "--records",
        records,
        "--out",
        path.to_str().unwrap(),
    ];
    args.extend(extra);
    freshet_ok(&args);
}

/// The planning error of `sql` on `ctx`; fails the test if it plans.
pub async fn planning_error(ctx: &StreamingContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Ok(_) => panic!("`{sql}` should not plan"),
        Err(e) => e.to_string(),
    }
}

/// A one-stream context whose memory pool holds `bytes`.
pub fn memory_limited_context(bytes: usize) -> StreamingContext {
    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::SessionConfig;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(bytes, 1.0)
        .build_arc()
        .expect("a memory-limited runtime");
    StreamingContext::with_state_builder(
        SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_target_partitions(1))
            .with_runtime_env(runtime)
            .with_default_features(),
    )
}

/// A two-stream context with an endless `market_data` generator.
pub fn endless_market_data() -> StreamingContext {
    let ctx = StreamingContext::with_partitions(2);
    ctx.register_generator(
        "market_data",
        freshet::GeneratorSpec::new(freshet::GeneratorKind::MarketData, None),
        freshet::StreamOptions::default(),
    )
    .expect("the generator registers");
    ctx
}

/// The error `query` fails with when run to the end; fails the test if it succeeds.
pub async fn execution_error(query: &freshet::StreamingQuery) -> String {
    use futures::TryStreamExt;
    match query.execute_merged() {
        Ok(stream) => match stream.try_collect::<Vec<_>>().await {
            Ok(_) => panic!("the query should fail"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// The cells of every row `sql` gives on `ctx`, run to the end.
pub async fn result_cells(ctx: &StreamingContext, sql: &str) -> Vec<Vec<String>> {
    use futures::TryStreamExt;
    let query = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let batches: Vec<_> = query
        .execute_merged()
        .unwrap()
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    freshet::testing::display_rows(&batches).unwrap()
}

/// Batches of `(name_id Int64, name_ts Timestamp(ms))` rows, one per `(ids, times)` pair.
pub fn id_time_batches_named(
    id: &str,
    ts: &str,
    batches: Vec<(Vec<i64>, Vec<Option<i64>>)>,
) -> (
    std::sync::Arc<datafusion::arrow::datatypes::Schema>,
    Vec<datafusion::arrow::record_batch::RecordBatch>,
) {
    use datafusion::arrow::array::{Int64Array, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let schema = Arc::new(Schema::new(vec![
        Field::new(id, DataType::Int64, false),
        Field::new(ts, DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let batches = batches
        .into_iter()
        .map(|(ids, times)| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(TimestampMillisecondArray::from(times)),
                ],
            )
            .unwrap()
        })
        .collect();
    (schema, batches)
}
