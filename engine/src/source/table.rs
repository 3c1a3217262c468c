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
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, plan_err};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::memory::LazyMemoryExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use super::exec::StreamSourceExec;
use super::generator::GeneratorSpec;
use crate::options::StreamOptions;

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
}

impl ReplaySource {
    fn schema(&self) -> SchemaRef {
        match self {
            Self::Files { provider, .. } => provider.schema(),
            Self::Batches { schema, .. } | Self::Partitioned { schema, .. } => Arc::clone(schema),
            Self::Generator(spec) => spec.schema(),
        }
    }

    fn ends(&self) -> bool {
        match self {
            Self::Generator(spec) => spec.records.is_some(),
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
        if let Some(column) = &options.event_time {
            check_event_time_column(name, &schema, column)?;
        }
        for column in &options.partitioned_by {
            if schema.field_with_name(column).is_err() {
                return plan_err!(
                    "stream '{name}': partitioned_by column '{column}' does not exist; columns are {}",
                    column_list(&schema)
                );
            }
        }
        let bounded = match options.bounded {
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
            options,
            bounded,
        })
    }

    /// The stream's options, with defaults filled in.
    pub fn options(&self) -> &StreamOptions {
        &self.options
    }

    /// Whether the stream ends.
    pub fn is_bounded(&self) -> bool {
        self.bounded
    }
}

#[async_trait]
impl TableProvider for StreamTable {
    fn schema(&self) -> SchemaRef {
        self.source.schema()
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
            // where row-group pruning would evaluate it.
            ReplaySource::Files { provider, .. } => {
                let mut support = provider.supports_filters_pushdown(filters)?;
                for (filter, support) in filters.iter().zip(&mut support) {
                    if filter.is_volatile() {
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
        let partitions = self
            .options
            .partitions
            .unwrap_or_else(|| state.config().target_partitions())
            .max(1);
        let input: Arc<dyn ExecutionPlan> = match &self.source {
            ReplaySource::Files { provider, .. } => {
                let plan = provider.scan(state, projection, filters, limit).await?;
                let count = plan.output_partitioning().partition_count();
                if count == partitions {
                    plan
                } else if count > partitions {
                    // DataFusion made a group per file (up to its target partitions).
                    regroup_files(plan, partitions)?
                } else {
                    // DataFusion splits files by byte ranges; small files stay whole.
                    match plan.repartitioned(partitions, state.config_options())? {
                        Some(split) => split,
                        None => plan,
                    }
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
            ReplaySource::Generator(spec) => Arc::new(
                LazyMemoryExec::try_new(spec.schema(), spec.partition_generators(partitions))?
                    .with_projection(projection.cloned()),
            ),
        };
        StreamSourceExec::try_new(input, &self.name, &self.options, self.bounded)
            .map(|exec| Arc::new(exec) as Arc<dyn ExecutionPlan>)
    }
}

/// `plan`'s files in `partitions` groups of consecutive files in name order, so that each
/// source partition replays its files in stored order.
fn regroup_files(
    plan: Arc<dyn ExecutionPlan>,
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(config) = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|source| source.data_source().downcast_ref::<FileScanConfig>())
    else {
        return Ok(plan);
    };
    let mut files: Vec<PartitionedFile> = config
        .file_groups
        .iter()
        .flat_map(|group| group.files().iter().cloned())
        .collect();
    files.sort_by(|a, b| {
        (
            a.object_meta.location.as_ref(),
            a.range.as_ref().map(|r| r.start),
        )
            .cmp(&(
                b.object_meta.location.as_ref(),
                b.range.as_ref().map(|r| r.start),
            ))
    });
    let bound = |group: usize| group * files.len() / partitions;
    let groups: Vec<FileGroup> = (0..partitions)
        .map(|group| FileGroup::new(files[bound(group)..bound(group + 1)].to_vec()))
        .collect();
    let config = FileScanConfigBuilder::from(config.clone())
        .with_file_groups(groups)
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

fn check_event_time_column(table: &str, schema: &SchemaRef, column: &str) -> Result<()> {
    let Ok(field) = schema.field_with_name(column) else {
        return plan_err!(
            "stream '{table}': event-time column '{column}' does not exist; columns are {}",
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

fn column_list(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
