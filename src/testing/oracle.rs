//! The differential oracle: Freshet's main test judge.
//!
//! [`Differential`] runs a streaming query on Freshet at several stream counts (1, 2 and 4
//! by default), each time with the test tables replayed from as many source partitions, and
//! runs the batch-equivalent SQL on plain DataFusion over the same data. Every streaming
//! result must equal the batch result as a multiset of rows (in order, when the query
//! orders), floats within [`FLOAT_TOLERANCE`](super::FLOAT_TOLERANCE) relative.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::datasource::MemTable;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use freshet_engine::changelog::without_op;
use freshet_engine::{GeneratorSpec, StreamOptions};
use freshet_planner::{StreamingContext, scalar_functions};
use futures::TryStreamExt;

use super::compare_results;

/// Where a test table's data comes from.
#[derive(Debug, Clone)]
pub enum TestSource {
    /// In-memory batches.
    Batches {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A built-in generator; DataFusion batch reads the same records materialized.
    Generator(GeneratorSpec),
    /// A Parquet file or directory.
    Parquet(PathBuf),
    /// In-memory batches registered as a bounded table, not a stream, in both engines (the
    /// table side of a lookup).
    Table {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
}

/// A table of a differential test.
#[derive(Debug, Clone)]
pub struct TestTable {
    pub name: String,
    pub source: TestSource,
    /// Stream options; `partitions` is set per run unless given here.
    pub options: StreamOptions,
}

impl TestTable {
    pub fn new(name: &str, source: TestSource) -> Self {
        Self {
            name: name.to_string(),
            source,
            options: StreamOptions::default(),
        }
    }

    pub fn batches(name: &str, schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self::new(name, TestSource::Batches { schema, batches })
    }

    pub fn with_options(mut self, options: StreamOptions) -> Self {
        self.options = options;
        self
    }
}

/// A streaming query, its batch equivalent and their data.
#[derive(Debug, Clone)]
pub struct Differential {
    streaming_sql: String,
    batch_sql: String,
    tables: Vec<TestTable>,
    partitions: Vec<usize>,
    ordered: bool,
    /// `SET` statements run on the streaming session first.
    settings: Vec<(String, String)>,
    /// Operators Freshet's plan must not hold (e.g. a DataFusion operator a rule replaces).
    absent_operators: Vec<String>,
    /// Text Freshet's plan must hold (e.g. the strategy an exchange must use).
    required_plan_text: Vec<String>,
}

impl Differential {
    /// Compares `streaming_sql` on Freshet with `batch_sql` on DataFusion.
    pub fn new(streaming_sql: &str, batch_sql: &str) -> Self {
        Self {
            streaming_sql: streaming_sql.to_string(),
            batch_sql: batch_sql.to_string(),
            tables: Vec::new(),
            partitions: vec![1, 2, 4],
            ordered: false,
            settings: Vec::new(),
            absent_operators: Vec::new(),
            required_plan_text: Vec::new(),
        }
    }

    /// The same SQL on both engines.
    pub fn same_sql(sql: &str) -> Self {
        Self::new(sql, sql)
    }

    pub fn table(mut self, table: TestTable) -> Self {
        self.tables.push(table);
        self
    }

    /// Stream counts to run Freshet at (default 1, 2, 4).
    pub fn partitions(mut self, partitions: &[usize]) -> Self {
        self.partitions = partitions.to_vec();
        self
    }

    /// The row order matters (the query orders its output).
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self
    }

    /// Runs `SET key = 'value'` on Freshet's session before the query.
    pub fn setting(mut self, key: &str, value: &str) -> Self {
        self.settings.push((key.to_string(), value.to_string()));
        self
    }

    /// Fails if Freshet's plan holds the operator `name` (e.g. `BoundedWindowAggExec`): the
    /// comparison is about Freshet's own operators, not a fallback to DataFusion's.
    pub fn without_operator(mut self, name: &str) -> Self {
        self.absent_operators.push(name.to_string());
        self
    }

    /// Fails unless Freshet's plan (EXPLAIN text) holds `text`: the comparison is about that
    /// plan.
    pub fn with_plan_text(mut self, text: &str) -> Self {
        self.required_plan_text.push(text.to_string());
        self
    }

    /// The batch result on plain DataFusion (with Freshet's scalar functions, such as
    /// `count_char` and `regexp_extract`, that plain SQL may call).
    pub async fn batch_result(&self) -> Result<Vec<RecordBatch>> {
        let ctx = SessionContext::new();
        for function in scalar_functions() {
            ctx.register_udf(function.as_ref().clone());
        }
        for table in &self.tables {
            match &table.source {
                TestSource::Batches { schema, batches } | TestSource::Table { schema, batches } => {
                    let memory = MemTable::try_new(Arc::clone(schema), vec![batches.clone()])?;
                    ctx.register_table(&table.name, Arc::new(memory))?;
                }
                TestSource::Generator(spec) => {
                    let memory = MemTable::try_new(spec.schema(), vec![spec.generate_all()?])?;
                    ctx.register_table(&table.name, Arc::new(memory))?;
                }
                TestSource::Parquet(path) => {
                    ctx.register_parquet(
                        &table.name,
                        &path.to_string_lossy(),
                        ParquetReadOptions::default(),
                    )
                    .await?
                }
            }
        }
        ctx.sql(&self.batch_sql).await?.collect().await
    }

    /// Freshet's result at `partitions` streams.
    pub async fn streaming_result(&self, partitions: usize) -> Result<Vec<RecordBatch>> {
        let ctx = StreamingContext::with_partitions(partitions);
        for (key, value) in &self.settings {
            ctx.session().sql(&format!("SET {key} = '{value}'")).await?;
        }
        for table in &self.tables {
            let mut options = table.options.clone();
            options.partitions = options.partitions.or(Some(partitions));
            match &table.source {
                TestSource::Batches { schema, batches } => {
                    ctx.register_batches(&table.name, Arc::clone(schema), batches.clone(), options)?
                }
                TestSource::Generator(spec) => {
                    ctx.register_generator(&table.name, spec.clone(), options)?
                }
                TestSource::Parquet(path) => {
                    ctx.register_parquet(&table.name, &path.to_string_lossy(), options)
                        .await?
                }
                TestSource::Table { schema, batches } => {
                    let memory = MemTable::try_new(Arc::clone(schema), vec![batches.clone()])?;
                    ctx.session()
                        .register_table(&table.name, Arc::new(memory))?;
                }
            }
        }
        let query = ctx.sql(&self.streaming_sql).await?;
        let plan = query.explain();
        if let Some(name) = self
            .absent_operators
            .iter()
            .find(|name| plan.contains(&format!("{name}:")))
        {
            return datafusion::common::plan_err!("the plan holds {name}:\n{plan}");
        }
        if let Some(text) = self
            .required_plan_text
            .iter()
            .find(|text| !plan.contains(text.as_str()))
        {
            return datafusion::common::plan_err!("the plan lacks '{text}':\n{plan}");
        }
        query.execute_merged()?.try_collect().await
    }

    /// Runs both engines; `Err` says at which stream count and how the results differ.
    pub async fn run(&self) -> std::result::Result<(), String> {
        let expected = self
            .batch_result()
            .await
            .map_err(|e| format!("DataFusion batch failed: {e}"))?;
        for &partitions in &self.partitions {
            let actual = self
                .streaming_result(partitions)
                .await
                .map_err(|e| format!("Freshet at {partitions} streams failed: {e}"))?;
            // A changelog's running rows are compared with their batch equivalent (running
            // window aggregates), which has no operation column.
            let actual = without_op_column(actual)
                .map_err(|e| format!("Freshet at {partitions} streams: {e}"))?;
            compare_results(&expected, &actual, self.ordered).map_err(|difference| {
                format!(
                    "Freshet at {partitions} streams differs from DataFusion batch for `{}`: {difference}",
                    self.streaming_sql
                )
            })?;
        }
        Ok(())
    }
}

/// `batches` without a changelog's operation column, if they have one.
pub fn without_op_column(batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    batches.iter().map(without_op).collect()
}
