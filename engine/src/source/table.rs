//! [`StreamTable`]: a stream registered in a DataFusion catalog.
//!
//! Registration checks the options against the schema once (an event-time column that
//! exists and is a timestamp or an integer, partition keys that exist), so that a query
//! fails at planning with a message naming the culprit, not in the middle of a run. A scan
//! builds DataFusion's reader for the source, split into the stream's source partitions,
//! and puts a [`StreamSourceExec`] on top of it.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, plan_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::memory::LazyMemoryExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::streaming::StreamingTableExec;

use super::deal::DealExec;
use super::exec::StreamSourceExec;
use super::file_split::FileSplit;
use super::generator::{GeneratorKind, GeneratorSpec};
use super::live::LiveBatches;
use crate::options::{Pacing, StreamOptions};
use crate::plan_util::machine_cores;

/// Where a stream's records come from.
#[derive(Clone)]
pub enum ReplaySource {
    /// Files read by DataFusion's `ListingTable` (see [`crate::open_file_source`]).
    Files {
        provider: Arc<dyn TableProvider>,
        location: String,
    },
    /// In-memory batches, replayed in order.
    Batches {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// In-memory batches already split into source partitions, each replayed in order.
    Partitioned {
        schema: SchemaRef,
        partitions: Vec<Vec<RecordBatch>>,
    },
    /// A built-in generator.
    Generator(Arc<GeneratorSpec>),
    /// Batches an application hands over as they come, read once by one source partition.
    Live(Arc<LiveBatches>),
}

impl ReplaySource {
    fn schema(&self) -> SchemaRef {
        match self {
            Self::Files { provider, .. } => provider.schema(),
            Self::Batches { schema, .. } | Self::Partitioned { schema, .. } => Arc::clone(schema),
            Self::Generator(spec) => spec.schema(),
            Self::Live(batches) => batches.schema(),
        }
    }

    fn ends(&self) -> bool {
        match self {
            Self::Generator(spec) => spec.records.is_some(),
            Self::Live(batches) => batches.ends(),
            Self::Files { .. } | Self::Batches { .. } | Self::Partitioned { .. } => true,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Files { location, .. } => format!("files {location}"),
            Self::Batches { batches, .. } => format!("{} in-memory batches", batches.len()),
            Self::Partitioned { partitions, .. } => {
                format!("in-memory batches in {} partitions", partitions.len())
            }
            Self::Generator(spec) => format!("generator {:?}", spec.kind),
            Self::Live(_) => "batches handed over by the application".to_string(),
        }
    }
}

impl fmt::Debug for ReplaySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A stream registered as a table.
#[derive(Debug)]
pub struct StreamTable {
    name: String,
    source: ReplaySource,
    /// The source's schema, with an integer event time of a declared unit as a timestamp.
    schema: SchemaRef,
    options: StreamOptions,
    bounded: bool,
}

impl StreamTable {
    /// Checks `options` against the source's schema and builds the table.
    pub fn try_new(name: &str, source: ReplaySource, mut options: StreamOptions) -> Result<Self> {
        let schema = source.schema();
        let batches: Vec<&RecordBatch> = match &source {
            ReplaySource::Batches { batches, .. } => batches.iter().collect(),
            ReplaySource::Partitioned { partitions, .. } => partitions.iter().flatten().collect(),
            _ => Vec::new(),
        };
        if let Some(batch) = batches.iter().find(|b| b.schema() != schema) {
            return plan_err!(
                "stream '{name}': a batch has schema {:?}, the stream's schema is {:?}",
                batch.schema(),
                schema
            );
        }
        if options.event_time.is_none()
            && let ReplaySource::Generator(spec) = &source
        {
            options.event_time = spec.event_time_column().map(str::to_string);
        }
        // A Nexmark stream's rate counts the events of the whole sequence, so that its three
        // streams paced at one rate keep together in event time.
        if let (ReplaySource::Generator(spec), Pacing::RecordsPerSecond(rate)) =
            (&source, options.pacing)
            && let GeneratorKind::Nexmark(table) = spec.kind
        {
            options.pacing = Pacing::RecordsPerSecond(rate * table.share());
        }
        if let Some(column) = &options.event_time {
            check_event_time_column(name, &schema, column)?;
        }
        let table_schema = match (&options.event_time, options.event_time_unit) {
            (_, None) => Arc::clone(&schema),
            (None, Some(_)) => {
                return plan_err!(
                    "stream '{name}': event_time_unit needs an event-time column (event_time=COLUMN)"
                );
            }
            (Some(column), Some(unit)) => with_time_unit(name, &schema, column, unit)?,
        };
        for column in &options.partitioned_by {
            if schema.field_with_name(column).is_err() {
                return plan_err!(
                    "stream '{name}': partitioned_by column '{column}' does not exist; {}",
                    column_list(&schema)
                );
            }
        }
        if let ReplaySource::Live(_) = &source
            && options.partitions.is_some_and(|partitions| partitions > 1)
        {
            return plan_err!(
                "stream '{name}': batches handed over by the application arrive in one order and are read by one source partition; leave out partitions (the query still runs on every stream)"
            );
        }
        let bounded = match options.bounded {
            Some(true) if matches!(source, ReplaySource::Live(_)) && !source.ends() => {
                return plan_err!(
                    "stream '{name}': say that the batches end where they are handed over (bounded=True), not in the stream's options"
                );
            }
            Some(true) if !source.ends() => {
                return plan_err!(
                    "stream '{name}' is endless and cannot be bounded: give the generator a record count (records=N)"
                );
            }
            Some(bounded) => bounded,
            None => source.ends(),
        };
        Ok(Self {
            name: name.to_string(),
            source,
            schema: table_schema,
            options,
            bounded,
        })
    }

    /// The stream's options, with defaults filled in.
    pub fn options(&self) -> &StreamOptions {
        &self.options
    }

    /// The source and the options as they were registered, which [`Self::try_new`] takes
    /// back: a Nexmark stream's rate counts the whole sequence's events again.
    pub fn registration(&self) -> (&ReplaySource, StreamOptions) {
        let mut options = self.options.clone();
        if let (ReplaySource::Generator(spec), Pacing::RecordsPerSecond(rate)) =
            (&self.source, options.pacing)
            && let GeneratorKind::Nexmark(table) = spec.kind
        {
            options.pacing = Pacing::RecordsPerSecond(rate / table.share());
        }
        (&self.source, options)
    }

    /// Whether the stream ends.
    pub fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// Where the records come from, e.g. `files data/md.parquet` or `generator MarketData`.
    pub fn source_description(&self) -> String {
        self.source.describe()
    }
}

#[async_trait]
impl TableProvider for StreamTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        match &self.source {
            // A volatile call (`hop`, `session`: no per-row value) must not reach the reader,
            // where row-group pruning would evaluate it; nor a filter on an event time the
            // reader has as an integer and the query as a timestamp.
            ReplaySource::Files { provider, .. } => {
                let mut support = provider.supports_filters_pushdown(filters)?;
                for (filter, support) in filters.iter().zip(&mut support) {
                    if filter.is_volatile() || self.reads_retyped_time(filter)? {
                        *support = TableProviderFilterPushDown::Unsupported;
                    }
                }
                Ok(support)
            }
            _ => Ok(vec![
                TableProviderFilterPushDown::Unsupported;
                filters.len()
            ]),
        }
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let paced = !matches!(self.options.pacing, Pacing::AsFastAsPossible);
        // A file's source partitions take turns by row group (or file) in event time: paced
        // by records, each would hold the others' rows back by a unit's worth of time before
        // a keyed operator's event-time merge let them through. A paced replay needs no
        // parallel decoding: one reader reads it, and partitions the user chose are dealt
        // its rows in turns, about 10 ms of records at a time (see `DealExec`). Files split
        // by declared keys are each paced on their own.
        let one_reader = matches!(self.source, ReplaySource::Files { .. })
            && paced
            && self.options.partitioned_by.is_empty();
        let partitions = match self.options.partitions {
            Some(partitions) => partitions,
            None if one_reader || matches!(self.source, ReplaySource::Live(_)) => 1,
            None => state.config().target_partitions(),
        }
        .max(1);
        let mut wider_split = None;
        let mut time_span = None;
        let input: Arc<dyn ExecutionPlan> = match &self.source {
            ReplaySource::Files { provider, .. } => {
                let plan = provider.scan(state, projection, filters, limit).await?;
                let whole_files = !self.options.partitioned_by.is_empty();
                let event_time = self.options.event_time.as_deref();
                let cores = machine_cores();
                // Decoding may be spread over every core when the query reads the source
                // with a step per source partition (see `StreamSourceExec::widened`); not
                // when the user chose the partitions, declared keys or paced the replay.
                if self.options.partitions.is_none() && !whole_files && !paced && cores > partitions
                {
                    wider_split = FileSplit::try_new(&plan, cores, false, event_time, state)
                        .await?
                        .map(|split| split.with_file_reads(self.options.file_reads));
                }
                let read_as = if one_reader { 1 } else { partitions };
                let read = match FileSplit::try_new(&plan, read_as, whole_files, event_time, state)
                    .await?
                {
                    Some(split) => {
                        time_span = split.time_span();
                        split
                            .with_file_reads(self.options.file_reads)
                            .apply(&plan)?
                    }
                    None => plan,
                };
                match self.options.pacing {
                    Pacing::RecordsPerSecond(rate) if one_reader && partitions > 1 => {
                        let slice_rows = (rate / 100.0).ceil() as usize;
                        Arc::new(DealExec::try_new(read, partitions, slice_rows)?)
                    }
                    _ => read,
                }
            }
            ReplaySource::Batches { schema, batches } => {
                // Batch k goes to partition k mod n: each partition replays in order.
                let mut split = vec![Vec::new(); partitions];
                for (index, batch) in batches.iter().enumerate() {
                    split[index % partitions].push(batch.clone());
                }
                MemorySourceConfig::try_new_exec(&split, Arc::clone(schema), projection.cloned())?
            }
            ReplaySource::Partitioned { schema, partitions } => MemorySourceConfig::try_new_exec(
                partitions,
                Arc::clone(schema),
                projection.cloned(),
            )?,
            ReplaySource::Generator(spec) => {
                time_span = spec.time_span();
                // Whole batches unless paced (see the generator's documentation).
                let block_records = match self.options.pacing {
                    Pacing::RecordsPerSecond(_) => 1,
                    _ => spec.batch_size,
                };
                // The generators build only the columns the query reads.
                let generators = spec.partition_generators(
                    partitions,
                    block_records,
                    projection.map(Vec::as_slice),
                );
                let schema = match projection {
                    Some(columns) => Arc::new(spec.schema().project(columns)?),
                    None => spec.schema(),
                };
                Arc::new(LazyMemoryExec::try_new(schema, generators)?)
            }
            ReplaySource::Live(batches) => Arc::new(StreamingTableExec::try_new(
                batches.schema(),
                vec![batches.partition(&self.name)],
                projection,
                [],
                !self.bounded,
                None,
            )?),
        };
        let input = self.retype_time(input)?;
        let source = StreamSourceExec::try_new(input, &self.name, &self.options, self.bounded)?
            .with_dealt_batches(matches!(self.source, ReplaySource::Batches { .. }));
        Ok(Arc::new(
            source
                .with_wider_split(wider_split)
                .with_time_span(time_span),
        ))
    }
}

impl StreamTable {
    /// Whether `filter` reads an integer event time that the table shows as a timestamp.
    fn reads_retyped_time(&self, filter: &Expr) -> Result<bool> {
        let (Some(column), Some(_)) = (&self.options.event_time, self.options.event_time_unit)
        else {
            return Ok(false);
        };
        Ok(filter.column_refs().iter().any(|c| &c.name == column))
    }

    /// `input` with an integer event time of a declared unit cast to that unit's timestamp
    /// (a reinterpretation: arrow casts an integer to a timestamp as a count of the unit).
    fn retype_time(&self, input: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let (Some(column), Some(unit)) = (&self.options.event_time, self.options.event_time_unit)
        else {
            return Ok(input);
        };
        let schema = input.schema();
        let expressions = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(index, field)| {
                let read: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), index));
                let expression = if field.name() == column {
                    Arc::new(CastExpr::new(read, DataType::Timestamp(unit, None), None))
                        as Arc<dyn PhysicalExpr>
                } else {
                    read
                };
                ProjectionExpr::new(expression, field.name().clone())
            })
            .collect::<Vec<_>>();
        Ok(Arc::new(ProjectionExec::try_new(expressions, input)?))
    }
}

/// `schema` with the integer column `column` as a timestamp of `unit`.
fn with_time_unit(
    table: &str,
    schema: &SchemaRef,
    column: &str,
    unit: TimeUnit,
) -> Result<SchemaRef> {
    let fields = schema
        .fields()
        .iter()
        .map(|field| {
            if field.name() != column {
                return Ok(Arc::clone(field));
            }
            match field.data_type() {
                DataType::Int64 => Ok(Arc::new(
                    field
                        .as_ref()
                        .clone()
                        .with_data_type(DataType::Timestamp(unit, None)),
                )),
                other => plan_err!(
                    "stream '{table}': event_time_unit applies to an integer event time, but '{column}' has type {other} (a timestamp carries its own unit)"
                ),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

fn check_event_time_column(table: &str, schema: &SchemaRef, column: &str) -> Result<()> {
    let Ok(field) = schema.field_with_name(column) else {
        return plan_err!(
            "stream '{table}': event-time column '{column}' does not exist; {}",
            column_list(schema)
        );
    };
    // What windows, window functions and watermarks take: nothing accepted here is refused
    // later by a query.
    match field.data_type() {
        DataType::Timestamp(_, _) | DataType::Int64 => Ok(()),
        other => plan_err!(
            "stream '{table}': event-time column '{column}' has type {other}; it must be a timestamp or an Int64 of epoch milliseconds (cast it in a view, or choose another column)"
        ),
    }
}

/// The stream's columns, for an error naming a missing one.
fn column_list(schema: &SchemaRef) -> String {
    if schema.fields().is_empty() {
        return "the stream has no columns (an empty file?)".to_string();
    }
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    format!("columns are {}", names.join(", "))
}
