//! [`StreamingContext`]: a `SessionContext` with Freshet installed and helpers to register
//! streams.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::config::ExtensionOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, plan_err};
use datafusion::execution::{SendableRecordBatchStream, SessionStateBuilder};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use freshet_engine::aggregate::WindowAggregateExec;
use freshet_engine::{
    FileFormatKind, GeneratorSpec, LiveBatches, ReplaySource, StreamOptions, StreamTable,
    open_file_source, unless_panicked,
};

use crate::dialect::{EmitMode, rewrite_with};
use crate::execution_errors::explain_planning_error;
use crate::install::install;
use crate::options::{EmitSetting, EventMillis, FreshetOptions};
use crate::query::StreamingQuery;

/// The context users embed: register streams, then run streaming SQL over them.
#[derive(Clone)]
pub struct StreamingContext {
    ctx: SessionContext,
    /// Each stream's declared event-time column, for the dialect's shorthand windows.
    event_times: Arc<RwLock<HashMap<String, String>>>,
}

impl Default for StreamingContext {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamingContext {
    /// A context whose queries run on as many streams as the machine has cores.
    pub fn new() -> Self {
        Self::with_config(SessionConfig::new())
    }

    /// A context whose queries run on `partitions` parallel streams.
    pub fn with_partitions(partitions: usize) -> Self {
        Self::with_config(SessionConfig::new().with_target_partitions(partitions.max(1)))
    }

    /// A context over a session built from `config`, with Freshet installed.
    pub fn with_config(config: SessionConfig) -> Self {
        Self::with_state_builder(
            SessionStateBuilder::new()
                .with_config(config)
                .with_default_features(),
        )
    }

    /// A context over the session `builder` builds (its runtime, memory limit, functions…),
    /// with Freshet installed.
    pub fn with_state_builder(builder: SessionStateBuilder) -> Self {
        let state = install(builder).build();
        Self {
            ctx: SessionContext::new_with_state(state),
            event_times: Arc::default(),
        }
    }

    /// A context over a copy of this one's session state: settings changed on the copy stay
    /// there, while the streams (the catalog) are the same.
    pub fn forked(&self) -> Self {
        Self {
            ctx: SessionContext::new_with_state(self.ctx.state()),
            event_times: Arc::clone(&self.event_times),
        }
    }

    /// The DataFusion session underneath.
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The tables of the session's default schema by name, in name order.
    pub async fn tables(&self) -> Result<Vec<(String, Arc<dyn TableProvider>)>> {
        let options = self.ctx.state().config().options().catalog.clone();
        let Some(schema) = self
            .ctx
            .catalog(&options.default_catalog)
            .and_then(|catalog| catalog.schema(&options.default_schema))
        else {
            return Ok(Vec::new());
        };
        let mut names = schema.table_names();
        names.sort();
        let mut tables = Vec::with_capacity(names.len());
        for name in names {
            if let Some(table) = schema.table(&name).await? {
                tables.push((name, table));
            }
        }
        Ok(tables)
    }

    /// Registers a stream `name` reading `source` with `options`.
    pub fn register_stream(
        &self,
        name: &str,
        source: ReplaySource,
        options: StreamOptions,
    ) -> Result<()> {
        let table = StreamTable::try_new(name, source, options)?;
        let mut event_times = self.event_times.write();
        match &table.options().event_time {
            Some(column) => event_times.insert(name.to_string(), column.clone()),
            None => event_times.remove(name),
        };
        self.ctx.register_table(name, Arc::new(table))?;
        Ok(())
    }

    /// Registers a replay of in-memory `batches` (all of `schema`).
    pub fn register_batches(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        options: StreamOptions,
    ) -> Result<()> {
        self.register_stream(name, ReplaySource::Batches { schema, batches }, options)
    }

    /// Registers a stream of batches the application hands over as they come (a reader it
    /// has, batches it produces): read once, in its order, by the first query that runs over
    /// it. `ends`: the stream ends, so that queries over it may be planned as bounded.
    pub fn register_live(
        &self,
        name: &str,
        batches: SendableRecordBatchStream,
        ends: bool,
        options: StreamOptions,
    ) -> Result<()> {
        let live = Arc::new(LiveBatches::new(batches, ends));
        self.register_stream(name, ReplaySource::Live(live), options)
    }

    /// Registers a built-in generator stream.
    pub fn register_generator(
        &self,
        name: &str,
        spec: GeneratorSpec,
        options: StreamOptions,
    ) -> Result<()> {
        self.register_stream(name, ReplaySource::Generator(Arc::new(spec)), options)
    }

    /// Registers a replay of a Parquet, CSV, JSON-lines or Arrow IPC file or directory, in `format`, or in
    /// the format its extension names when `format` is `None`.
    pub async fn register_files(
        &self,
        name: &str,
        path: &str,
        format: Option<FileFormatKind>,
        options: StreamOptions,
    ) -> Result<()> {
        let detected = match format {
            Some(format) => Some(format),
            None => FileFormatKind::detect(std::path::Path::new(path))?,
        };
        let format = match detected {
            Some(format) => format,
            None if !std::path::Path::new(path).exists() => {
                return plan_err!("file or directory not found: {path}");
            }
            None => {
                return plan_err!(
                    "cannot tell the format of {path}: name files .parquet, .csv, .arrow or .jsonl"
                );
            }
        };
        let event_time = options.event_time.as_deref();
        let provider = open_file_source(&self.ctx.state(), path, format, event_time).await?;
        self.register_stream(
            name,
            ReplaySource::Files {
                provider,
                location: path.to_string(),
            },
            options,
        )
    }

    /// Registers a Parquet file or directory.
    pub async fn register_parquet(
        &self,
        name: &str,
        path: &str,
        options: StreamOptions,
    ) -> Result<()> {
        self.register_files(name, path, Some(FileFormatKind::Parquet), options)
            .await
    }

    /// Registers a CSV file or directory (with a header line).
    pub async fn register_csv(&self, name: &str, path: &str, options: StreamOptions) -> Result<()> {
        self.register_files(name, path, Some(FileFormatKind::Csv), options)
            .await
    }

    /// Registers an Arrow IPC file or directory.
    pub async fn register_arrow(
        &self,
        name: &str,
        path: &str,
        options: StreamOptions,
    ) -> Result<()> {
        self.register_files(name, path, Some(FileFormatKind::Arrow), options)
            .await
    }

    /// Plans `sql`, in Freshet's streaming dialect (see `docs/sql.md`), as a streaming query.
    pub async fn sql(&self, sql: &str) -> Result<StreamingQuery> {
        // The parser's options only: the whole session state is copied for a query that
        // changes it (below), not for every query.
        let parser = self
            .ctx
            .state_ref()
            .read()
            .config()
            .options()
            .sql_parser
            .clone();
        // The parser's dialect is not Send: it lives only for the rewrite.
        let streaming = {
            let Some(dialect) = dialect_from_str(parser.dialect) else {
                return plan_err!("unsupported SQL dialect {}", parser.dialect);
            };
            rewrite_with(
                sql,
                &|table| self.event_times.read().get(table).cloned(),
                dialect.as_ref(),
                parser.recursion_limit.get(),
            )?
        };
        // An emit mode the query itself asks for (its EMIT clause, or `emit` in its WITH) needs
        // an aggregation to apply to; a session default applies only where there is one.
        let mut query_emit = EmitSetting::Default;
        let per_query = streaming.emit != EmitMode::Default
            || !streaming.options.is_empty()
            || streaming.expire_after.is_some();
        let mut state = None;
        if per_query {
            // EMIT, EXPIRE AFTER and WITH (…) apply to this query only: plan it on a copy of
            // the state.
            let state = state.insert(self.ctx.state());
            let extensions = &mut state.config_mut().options_mut().extensions;
            if extensions.get::<FreshetOptions>().is_none() {
                extensions.insert(FreshetOptions::default());
            }
            if let Some(options) = extensions.get_mut::<FreshetOptions>() {
                match streaming.emit {
                    EmitMode::Changes => options.emit = EmitSetting::Changes,
                    EmitMode::Final => options.emit = EmitSetting::Final,
                    EmitMode::Default => {}
                }
                if let Some(expire_after) = streaming.expire_after {
                    options.expire_after_ms = EventMillis(
                        u64::try_from(expire_after.as_millis())
                            .unwrap_or(u64::MAX)
                            .min(EventMillis::MAX),
                    );
                }
                // Every session option may be set for one query (`freshet.` optional).
                for (key, value) in &streaming.options {
                    let name = key.strip_prefix("freshet.").unwrap_or(key);
                    let valid: Vec<String> = ExtensionOptions::entries(options)
                        .into_iter()
                        .map(|entry| entry.key)
                        .collect();
                    if !valid.iter().any(|valid| valid == name) {
                        return plan_err!(
                            "unknown query option '{key}'; valid options: {}",
                            valid.join(", ")
                        );
                    }
                    ExtensionOptions::set(options, name, value)?;
                }
                if streaming.emit != EmitMode::Default
                    || streaming
                        .options
                        .iter()
                        .any(|(key, _)| key.strip_prefix("freshet.").unwrap_or(key) == "emit")
                {
                    query_emit = options.emit;
                }
            }
        }
        let context = match state {
            Some(state) => SessionContext::new_with_state(state),
            None => self.ctx.clone(),
        };
        // A panic in DataFusion's planner (a bug there) fails the query with its message.
        let (plan, task_ctx) = unless_panicked("planning the query", async {
            let frame = match streaming.statement {
                Some(statement) => {
                    let plan = context
                        .state()
                        .statement_to_plan(DFStatement::Statement(Box::new(statement)))
                        .await?;
                    context.execute_logical_plan(plan).await?
                }
                None => context.sql(sql).await?,
            };
            let task_ctx = Arc::new(frame.task_ctx());
            Ok((frame.create_physical_plan().await?, task_ctx))
        })
        .await
        .map_err(explain_planning_error)?;
        check_emit_applies(&plan, query_emit)?;
        Ok(StreamingQuery::new(plan, task_ctx))
    }
}

/// Refuses an EMIT clause that no streaming aggregation of `plan` applies to, rather than
/// ignoring it.
fn check_emit_applies(plan: &Arc<dyn ExecutionPlan>, emit: EmitSetting) -> Result<()> {
    let mut aggregates = false;
    // EXPLAIN's plan is text: the streaming plan it shows is read there.
    if let Some(explain) = plan.downcast_ref::<ExplainExec>() {
        aggregates = explain
            .stringified_plans()
            .iter()
            .any(|shown| shown.plan.contains("WindowAggregateExec"));
    }
    plan.apply(|node| {
        aggregates |= node.downcast_ref::<WindowAggregateExec>().is_some();
        Ok(if aggregates {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    match emit {
        _ if aggregates => Ok(()),
        EmitSetting::Changes => plan_err!(
            "EMIT CHANGES needs an aggregation: add GROUP BY or an aggregate function, or drop EMIT CHANGES (a query without aggregation already emits every row as it comes)"
        ),
        EmitSetting::Final => plan_err!(
            "EMIT FINAL needs an aggregation over a stream: add GROUP BY or an aggregate function, or drop EMIT FINAL (a query without aggregation emits every row as it comes)"
        ),
        EmitSetting::Default => Ok(()),
    }
}
