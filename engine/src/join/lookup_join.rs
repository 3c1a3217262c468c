//! [`LookupJoinExec`]: a stream joined to a bounded table by equal keys — each stream row
//! looks its key up in the table, loaded once and shared by every stream partition.
//!
//! The table (the first input, one partition) is read whole before the first stream batch,
//! into a [`LookupTable`] indexed by its keys. Then every stream batch is probed as it comes:
//! its keys are evaluated and each row finds its key's group of table rows. The output is one
//! batch per stream batch, in the stream's row order — an empty one when no row matched, so
//! that the operators downstream learn that the stream moved on:
//!
//! - with keys unique in the table (the usual reference table), each row meets at most one
//!   table row: the stream's columns pass on untouched when every row matched (an INNER
//!   lookup that keeps all rows, or a LEFT one), or filtered once otherwise, and each table
//!   column is one gather;
//! - with repeated keys, each stream row is repeated once per matching table row.
//!
//! Join types, with the table as the first input: INNER, RIGHT (the stream's rows kept, with
//! nulls where nothing matched), RIGHT SEMI and RIGHT ANTI (the stream's rows that do or do
//! not match). Null keys never match. There is no state per stream row: memory is the table.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, filter_record_batch, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{JoinType, NullEquality, Result, internal_err};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, Distribution, ExecutionPlan,
    PlanProperties, ReplaceChildrenOptions,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OnceCell;

use super::lookup_table::{LookupTable, NO_MATCH};
use crate::plan_util::{evaluate, visit_expressions};

/// Which rows a lookup emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupKind {
    /// Stream rows with their matching table rows.
    Inner,
    /// Every stream row: with its matching table rows, or once with nulls.
    KeepStream,
    /// The stream rows that match (their columns only).
    Semi,
    /// The stream rows that do not match (their columns only).
    Anti,
}

impl LookupKind {
    /// The kind of a DataFusion join with the table on the left, if it is a lookup.
    pub fn of(join_type: JoinType) -> Option<Self> {
        match join_type {
            JoinType::Inner => Some(Self::Inner),
            JoinType::Right => Some(Self::KeepStream),
            JoinType::RightSemi => Some(Self::Semi),
            JoinType::RightAnti => Some(Self::Anti),
            _ => None,
        }
    }

    fn join_type(self) -> JoinType {
        match self {
            Self::Inner => JoinType::Inner,
            Self::KeepStream => JoinType::Right,
            Self::Semi => JoinType::RightSemi,
            Self::Anti => JoinType::RightAnti,
        }
    }
}

/// See the module documentation.
pub struct LookupJoinExec {
    table: Arc<dyn ExecutionPlan>,
    stream: Arc<dyn ExecutionPlan>,
    /// Equal keys: (over the table, over the stream).
    on: Vec<(PhysicalExprRef, PhysicalExprRef)>,
    kind: LookupKind,
    /// Columns of `[table columns, stream columns]` (or the stream's alone for a semi or anti
    /// lookup) kept, as DataFusion's `HashJoinExec` projects them.
    projection: Option<Vec<usize>>,
    /// DataFusion's `HashJoinExec`'s for the same join, whose output this one equals (rows in
    /// the stream's order).
    properties: Arc<PlanProperties>,
    loaded: Arc<OnceCell<Arc<LoadedTable>>>,
    metrics: ExecutionPlanMetricsSet,
}

/// The table, and its memory reserved for as long as it is held.
struct LoadedTable {
    table: LookupTable,
    _reservation: datafusion::execution::memory_pool::MemoryReservation,
}

impl fmt::Debug for LookupJoinExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LookupJoinExec")
            .field("on", &self.on)
            .field("kind", &self.kind)
            .field("projection", &self.projection)
            .finish()
    }
}

impl LookupJoinExec {
    /// A lookup of `stream` rows in `table` (one partition) by the equal keys `on`.
    pub fn try_new(
        table: Arc<dyn ExecutionPlan>,
        stream: Arc<dyn ExecutionPlan>,
        on: Vec<(PhysicalExprRef, PhysicalExprRef)>,
        kind: LookupKind,
        projection: Option<Vec<usize>>,
    ) -> Result<Self> {
        let equal = HashJoinExec::try_new(
            Arc::clone(&table),
            Arc::clone(&stream),
            on.clone(),
            None,
            &kind.join_type(),
            projection.clone(),
            PartitionMode::CollectLeft,
            NullEquality::NullEqualsNothing,
            false,
        )?;
        Ok(Self {
            table,
            stream,
            on,
            kind,
            projection,
            properties: Arc::clone(equal.properties()),
            loaded: Arc::new(OnceCell::new()),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// `join` as a lookup, if it is a plain one: a hash join of a table (its first input, one
    /// partition) and a stream by equal keys, with no other condition, no limit, null keys
    /// matching nothing, and only the stream's rows kept unmatched.
    pub fn of_hash_join(join: &HashJoinExec) -> Result<Option<Self>> {
        let Some(kind) = LookupKind::of(join.join_type) else {
            return Ok(None);
        };
        if join.mode != PartitionMode::CollectLeft
            || join.filter.is_some()
            || join.null_equality != NullEquality::NullEqualsNothing
            || join.null_aware
            || join.fetch().is_some()
        {
            return Ok(None);
        }
        Self::try_new(
            Arc::clone(&join.left),
            Arc::clone(&join.right),
            join.on.clone(),
            kind,
            join.projection.as_deref().map(<[usize]>::to_vec),
        )
        .map(Some)
    }

    pub fn table(&self) -> &Arc<dyn ExecutionPlan> {
        &self.table
    }

    pub fn stream(&self) -> &Arc<dyn ExecutionPlan> {
        &self.stream
    }

    /// The stream's column that output column `column` passes on, if it is one (every output
    /// row carries its stream row's values).
    pub fn stream_column(&self, column: usize) -> Option<usize> {
        let column = match &self.projection {
            Some(kept) => *kept.get(column)?,
            None => column,
        };
        match self.kind {
            LookupKind::Semi | LookupKind::Anti => Some(column),
            LookupKind::Inner | LookupKind::KeepStream => {
                column.checked_sub(self.table.schema().fields().len())
            }
        }
    }
}

impl DisplayAs for LookupJoinExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let on: Vec<String> = self
            .on
            .iter()
            .map(|(table, stream)| format!("({table}, {stream})"))
            .collect();
        write!(
            f,
            "LookupJoinExec: kind={:?}, on=[{}] (the first input is the table, loaded once; each stream batch probes it)",
            self.kind,
            on.join(", ")
        )?;
        if let Some(projection) = &self.projection {
            write!(f, ", projection={projection:?}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for LookupJoinExec {
    fn name(&self) -> &str {
        "LookupJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.table, &self.stream]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![
            Distribution::SinglePartition,
            Distribution::UnspecifiedDistribution,
        ]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false, true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false, false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let expressions: Vec<Arc<dyn PhysicalExpr>> = self
            .on
            .iter()
            .flat_map(|(table, stream)| [Arc::clone(table), Arc::clone(stream)])
            .collect();
        visit_expressions(&expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [table, stream] = <[_; 2]>::try_from(children)
            .or_else(|c| internal_err!("LookupJoinExec takes two children, got {}", c.len()))?;
        Ok(Arc::new(Self::try_new(
            table,
            stream,
            self.on.clone(),
            self.kind,
            self.projection.clone(),
        )?))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let stream = self.stream.execute(partition, Arc::clone(&context))?;
        let loaded = Arc::clone(&self.loaded);
        let table = Arc::clone(&self.table);
        let table_keys: Vec<_> = self.on.iter().map(|(t, _)| Arc::clone(t)).collect();
        let mut probe = Probe {
            stream_keys: self.on.iter().map(|(_, s)| Arc::clone(s)).collect(),
            kind: self.kind,
            columns: output_columns(
                self.kind,
                self.table.schema().fields().len(),
                self.stream.schema().fields().len(),
                self.projection.as_deref(),
            ),
            schema: self.schema(),
            groups: Vec::new(),
            metrics: BaselineMetrics::new(&self.metrics, partition),
        };
        let schema = self.schema();
        let output = futures::stream::once(async move {
            let loaded = loaded
                .get_or_try_init(|| load(table, table_keys, context))
                .await?;
            let loaded = Arc::clone(loaded);
            Ok::<_, datafusion::error::DataFusionError>(
                stream.map(move |batch| probe.batch(&batch?, &loaded.table)),
            )
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, output)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Reads the whole table and indexes it, its memory reserved in the pool.
async fn load(
    table: Arc<dyn ExecutionPlan>,
    keys: Vec<PhysicalExprRef>,
    context: Arc<TaskContext>,
) -> Result<Arc<LoadedTable>> {
    let schema = table.schema();
    let batches: Vec<RecordBatch> = table
        .execute(0, Arc::clone(&context))?
        .try_collect()
        .await?;
    let batch = concat_batches(&schema, &batches)?;
    drop(batches);
    let table = LookupTable::try_new(batch, &keys)?;
    let reservation =
        MemoryConsumer::new("LookupJoinExec (its table)").register(context.memory_pool());
    reservation.try_grow(table.size())?;
    Ok(Arc::new(LoadedTable {
        table,
        _reservation: reservation,
    }))
}

/// Where an output column comes from.
#[derive(Debug, Clone, Copy)]
enum OutputColumn {
    Table(usize),
    Stream(usize),
}

/// The output's columns, from the join's `[table columns, stream columns]` (the stream's
/// alone for a semi or anti lookup) as `projection` keeps them.
fn output_columns(
    kind: LookupKind,
    table_columns: usize,
    stream_columns: usize,
    projection: Option<&[usize]>,
) -> Vec<OutputColumn> {
    let joined = match kind {
        LookupKind::Semi | LookupKind::Anti => 0..stream_columns,
        LookupKind::Inner | LookupKind::KeepStream => 0..table_columns + stream_columns,
    };
    let of = |column: usize| match kind {
        LookupKind::Semi | LookupKind::Anti => OutputColumn::Stream(column),
        LookupKind::Inner | LookupKind::KeepStream => match column.checked_sub(table_columns) {
            Some(stream) => OutputColumn::Stream(stream),
            None => OutputColumn::Table(column),
        },
    };
    match projection {
        Some(kept) => kept.iter().map(|&c| of(c)).collect(),
        None => joined.map(of).collect(),
    }
}

/// One stream partition's probing.
struct Probe {
    stream_keys: Vec<PhysicalExprRef>,
    kind: LookupKind,
    columns: Vec<OutputColumn>,
    schema: SchemaRef,
    /// Each row's group in the table, reused across batches.
    groups: Vec<u32>,
    metrics: BaselineMetrics,
}

/// The rows of one output batch: the stream's rows (all, or those kept), and the table row
/// each meets (`None`: nulls).
enum OutputRows {
    /// Every stream row, in order, beside table rows.
    AllStream(UInt32Array),
    /// The stream rows of `stream` (a filter or a gather) beside table rows.
    Stream(RecordBatch, UInt32Array),
}

impl Probe {
    fn batch(&mut self, batch: &RecordBatch, table: &LookupTable) -> Result<RecordBatch> {
        let timer = self.metrics.elapsed_compute().timer();
        let keys = evaluate(&self.stream_keys, batch)?;
        table.find(&keys, &mut self.groups)?;
        let output = match self.kind {
            LookupKind::Semi | LookupKind::Anti => {
                let wanted = self.kind == LookupKind::Semi;
                let mask: BooleanArray = self
                    .groups
                    .iter()
                    .map(|g| Some((*g != NO_MATCH) == wanted))
                    .collect();
                let kept = filter_record_batch(batch, &mask)?;
                self.assemble(&kept, None, table)?
            }
            LookupKind::Inner | LookupKind::KeepStream => {
                let rows = if table.unique() {
                    self.one_match_each(batch, table)?
                } else {
                    self.every_match(batch, table)?
                };
                match &rows {
                    OutputRows::AllStream(table_rows) => {
                        self.assemble(batch, Some(table_rows), table)?
                    }
                    OutputRows::Stream(kept, table_rows) => {
                        self.assemble(kept, Some(table_rows), table)?
                    }
                }
            }
        };
        timer.done();
        self.metrics.record_output(output.num_rows());
        Ok(output)
    }

    /// The output batch of the stream rows `stream` beside the table rows `table_rows` (one
    /// per stream row; none for a semi or anti lookup).
    fn assemble(
        &self,
        stream: &RecordBatch,
        table_rows: Option<&UInt32Array>,
        table: &LookupTable,
    ) -> Result<RecordBatch> {
        let columns = self
            .columns
            .iter()
            .map(|column| match (column, table_rows) {
                (OutputColumn::Stream(c), _) => Ok(Arc::clone(stream.column(*c))),
                (OutputColumn::Table(c), Some(rows)) => table.take(*c, rows),
                (OutputColumn::Table(_), None) => {
                    internal_err!("a semi or anti lookup has no table columns")
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(stream.num_rows())),
        )?)
    }

    /// The rows where each key is on at most one table row.
    fn one_match_each(&self, batch: &RecordBatch, table: &LookupTable) -> Result<OutputRows> {
        let all_matched = self.groups.iter().all(|g| *g != NO_MATCH);
        if all_matched || self.kind == LookupKind::KeepStream {
            let rows: UInt32Array = self
                .groups
                .iter()
                .map(|&g| (g != NO_MATCH).then(|| table.first_row_of(g)))
                .collect();
            return Ok(OutputRows::AllStream(rows));
        }
        let mask: BooleanArray = self.groups.iter().map(|g| Some(*g != NO_MATCH)).collect();
        let kept = filter_record_batch(batch, &mask)?;
        let rows: UInt32Array = self
            .groups
            .iter()
            .filter(|g| **g != NO_MATCH)
            .map(|&g| table.first_row_of(g))
            .collect();
        Ok(OutputRows::Stream(kept, rows))
    }

    /// The rows where a key may be on several table rows: a stream row once per match.
    fn every_match(&self, batch: &RecordBatch, table: &LookupTable) -> Result<OutputRows> {
        let mut stream_rows = Vec::with_capacity(batch.num_rows());
        let mut table_rows = Vec::with_capacity(batch.num_rows());
        for (row, &group) in self.groups.iter().enumerate() {
            if group == NO_MATCH {
                if self.kind == LookupKind::KeepStream {
                    stream_rows.push(row as u32);
                    table_rows.push(None);
                }
                continue;
            }
            for &table_row in table.rows_of(group) {
                stream_rows.push(row as u32);
                table_rows.push(Some(table_row));
            }
        }
        let stream_rows = UInt32Array::from(stream_rows);
        let gathered = batch
            .columns()
            .iter()
            .map(|c| Ok(take(c.as_ref(), &stream_rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        let gathered = RecordBatch::try_new_with_options(
            batch.schema(),
            gathered,
            &RecordBatchOptions::new().with_row_count(Some(stream_rows.len())),
        )?;
        Ok(OutputRows::Stream(gathered, UInt32Array::from(table_rows)))
    }
}
