//! The dialect's behaviour as sqllogictest files (`tests/sql/*.slt`, as DataFusion tests its
//! SQL): every accepted form and every refusal of docs/sql.md, with its result.
//!
//! Each file runs on a fresh two-stream context with these streams:
//! - `trades` (symbol, price, qty, ts): six trades, one batch each, read as one source
//!   partition, so that every result, changelogs included, is the same on every run;
//! - `endless`: the unbounded `market_data` generator, for the refusals on endless streams.
//!
//! `SET` statements act on the session; any other SQL is planned and run as a streaming
//! query, its cells written as arrow displays them (`NULL` for null).

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use datafusion::common::DataFusionError;
use freshet::testing::display_rows;
use freshet::{GeneratorKind, GeneratorSpec, StreamOptions, StreamingContext};
use futures::TryStreamExt;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};

struct Freshet {
    ctx: StreamingContext,
}

impl Freshet {
    fn new() -> Result<Self, DataFusionError> {
        let ctx = StreamingContext::with_partitions(2);
        let trades = [
            ("A", 10.0, 1, 0),
            ("B", 20.0, 2, 1),
            ("A", 11.0, 3, 2),
            ("A", 12.0, 4, 5),
            ("B", 21.0, 5, 6),
            ("A", 13.0, 6, 12),
        ];
        let batches = trades
            .iter()
            .map(|&(symbol, price, qty, seconds)| {
                RecordBatch::try_from_iter(vec![
                    (
                        "symbol",
                        Arc::new(StringArray::from(vec![symbol])) as ArrayRef,
                    ),
                    (
                        "price",
                        Arc::new(Float64Array::from(vec![price])) as ArrayRef,
                    ),
                    ("qty", Arc::new(Int64Array::from(vec![qty])) as ArrayRef),
                    (
                        "ts",
                        Arc::new(TimestampMillisecondArray::from(vec![seconds * 1_000]))
                            as ArrayRef,
                    ),
                ])
            })
            .collect::<Result<Vec<_>, _>>()?;
        let options = StreamOptions {
            event_time: Some("ts".into()),
            partitions: Some(1),
            ..StreamOptions::default()
        };
        ctx.register_batches("trades", batches[0].schema(), batches, options)?;
        ctx.register_generator(
            "endless",
            GeneratorSpec::new(GeneratorKind::MarketData, None),
            StreamOptions::default(),
        )?;
        Ok(Self { ctx })
    }
}

#[async_trait::async_trait]
impl AsyncDB for Freshet {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        if sql.trim_start().to_ascii_uppercase().starts_with("SET ") {
            self.ctx.session().sql(sql).await?.collect().await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let query = self.ctx.sql(sql).await?;
        let batches: Vec<RecordBatch> = query.execute_merged()?.try_collect().await?;
        let rows = display_rows(&batches)?;
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; query.schema().fields().len()],
            rows,
        })
    }

    async fn shutdown(&mut self) {}
}

#[tokio::test]
async fn the_dialect_behaves_as_its_fixtures_say() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    for file in files {
        let mut runner = Runner::new(|| async { Freshet::new() });
        runner
            .run_file_async(&file)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}
