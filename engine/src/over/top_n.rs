//! [`TopNExec`]: the top N rows of each key by an ORDER BY, kept as the rows come
//! (`… ROW_NUMBER() OVER (PARTITION BY k ORDER BY s) AS rn … WHERE rn <= N`), with keep-last
//! de-duplication (`ORDER BY ts DESC`, `rn = 1`) as its N = 1 case.
//!
//! Each key holds a list of at most N rows sorted by the ORDER BY. The PARTITION BY keys are
//! interned a batch at a time ([`new_group_values`]): a key's group id is its list's index.
//! Rows of equal ORDER BY
//! values are in the order they arrived, the earlier one ranked first, except in keep-last
//! de-duplication (one row per key, ordered by the stream's event time descending), where the
//! later arrival replaces the row of an equal time, as Flink's de-duplication does. A row is
//! placed by a binary search over the ORDER BY values encoded as arrow rows (their bytes
//! compare in the ORDER BY's order, directions and nulls included); a row that cannot enter a
//! full list is dropped after one comparison with its last row. A kept row's columns stay
//! columnar: once a batch is placed, the rows of it still kept are gathered into a batch of
//! their own (a chunk, its string views' bytes copied out of the input's buffers) and each
//! list entry names its chunk and row. Rows pushed out later stay in their chunks until more
//! than half of the chunks' rows are such; then the kept rows are gathered into new chunks.
//! Rows leave by one gather (`interleave`) from the chunks they are in.
//!
//! What leaves depends on [`TopNEmit`]:
//! - `Final` (a bounded input): at the end of the input, each key's list with its ranks, the
//!   batch answer.
//! - `Changes` (an endless input, or EMIT CHANGES): an upsert changelog keyed by the PARTITION
//!   BY keys and the rank (see [`crate::changelog`]). After each input batch, every rank of a
//!   key whose row changed gives a row: `+I` for a rank filled the first time, `+U` for a rank
//!   that now holds another row. Over append-only input a key's list only grows or changes
//!   rows, so no rank is ever deleted. Applied in order by (keys, rank), the changelog holds
//!   each key's top N so far, and at the end of a bounded input the `Final` answer.
//!
//! The state grows with the number of keys (N rows each); it is not freed by the watermark.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{interleave_record_batch, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::hash_utils::RandomState;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::aggregates::group_values::GroupValues;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::StreamExt;

use crate::changelog::{ChangeOp, op_array, with_op_column};
use crate::checkpoint::{OperatorState, PassedBarriers};
use crate::kernels::{compact_sparse_views, new_group_values};
use crate::message_loop::{MessageHandler, OperatorCheckpoint, drive_checkpointed, input_messages};
use crate::plan_util::{single_child, stateful_properties, visit_expressions};

/// When a [`TopNExec`]'s rows leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopNEmit {
    /// Each key's top N at the end of the input.
    Final,
    /// An upsert changelog keyed by (keys, rank), after each input batch.
    Changes,
}

/// Which of two rows with equal ORDER BY values ranks first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TieOrder {
    /// The earlier arrival (top-N).
    EarlierFirst,
    /// The later arrival (keep-last de-duplication).
    LaterFirst,
}

/// What a [`TopNExec`] computes.
#[derive(Debug, Clone)]
pub struct TopNSpec {
    /// The PARTITION BY expressions, over the input.
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    /// The ORDER BY, over the input.
    pub order_by: Vec<PhysicalSortExpr>,
    /// N: the rows kept per key (at least 1).
    pub limit: usize,
    pub ties: TieOrder,
    pub emit: TopNEmit,
    /// The output: the input's columns, then the rank (UInt64), without the op column.
    pub schema: SchemaRef,
}

/// See the module documentation.
#[derive(Debug)]
pub struct TopNExec {
    input: Arc<dyn ExecutionPlan>,
    spec: TopNSpec,
    /// Whether the output carries the changelog's op column (set by the planner's changelog
    /// rule, as for an EMIT CHANGES aggregation).
    with_op: bool,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// The checkpoint barriers each partition has passed on.
    passed: Arc<PassedBarriers>,
}

impl TopNExec {
    pub fn try_new(input: Arc<dyn ExecutionPlan>, spec: TopNSpec) -> Result<Self> {
        if spec.limit == 0 {
            return internal_err!("TopNExec: N must be at least 1");
        }
        if spec.schema.fields().len() != input.schema().fields().len() + 1 {
            return internal_err!("TopNExec: the schema must be the input's and the rank");
        }
        Self::build(input, spec, false)
    }

    fn build(input: Arc<dyn ExecutionPlan>, spec: TopNSpec, with_op: bool) -> Result<Self> {
        let schema = match with_op {
            true => with_op_column(&spec.schema),
            false => Arc::clone(&spec.schema),
        };
        let properties = Arc::new(stateful_properties(&input, &schema));
        let partitions = properties.output_partitioning().partition_count();
        Ok(Self {
            input,
            spec,
            with_op,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
            passed: Arc::new(PassedBarriers::new(partitions)),
        })
    }

    pub fn spec(&self) -> &TopNSpec {
        &self.spec
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The checkpoint barriers each partition has passed on.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }

    /// This operator with the changelog's op column, if it emits changes.
    pub fn with_op_column(&self) -> Result<Option<Self>> {
        if self.spec.emit != TopNEmit::Changes || self.with_op {
            return Ok(None);
        }
        Self::build(Arc::clone(&self.input), self.spec.clone(), true).map(Some)
    }

    /// The changelog's key as EXPLAIN names it: the PARTITION BY keys and the rank.
    pub fn changelog_key(&self) -> String {
        let keys = self
            .spec
            .partition_by
            .iter()
            .map(|key| match key.downcast_ref::<Column>() {
                Some(column) => column.name().to_string(),
                None => key.to_string(),
            });
        keys.chain(["the ROW_NUMBER".to_string()])
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl DisplayAs for TopNExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self
            .spec
            .partition_by
            .iter()
            .map(|k| k.to_string())
            .collect();
        let order: Vec<String> = self.spec.order_by.iter().map(|s| s.to_string()).collect();
        let ties = match self.spec.ties {
            TieOrder::EarlierFirst => "the earlier arrival first",
            TieOrder::LaterFirst => "the later arrival first (keep last)",
        };
        let emit = match self.spec.emit {
            TopNEmit::Final => "final (each key's rows at the end of the input)",
            TopNEmit::Changes => "changes (upserts keyed by the keys and the rank, per batch)",
        };
        write!(
            f,
            "TopNExec: n={}, partition_by=[{}], order_by=[{}], ties: {ties}, emit={emit}",
            self.spec.limit,
            keys.join(", "),
            order.join(", ")
        )
    }
}

impl ExecutionPlan for TopNExec {
    fn name(&self) -> &str {
        "TopNExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let sorts = self.spec.order_by.iter().map(|s| &s.expr);
        visit_expressions(self.spec.partition_by.iter().chain(sorts), f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("TopNExec", children)?;
        Ok(Arc::new(Self::build(
            input,
            self.spec.clone(),
            self.with_op,
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
        let batch_size = context.session_config().batch_size();
        let messages = input_messages(&self.input, partition, Arc::clone(&context))?;
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let mut ranked = TopNState::try_new(&self.spec, &self.input.schema(), self.with_op)?;
        ranked.batch_size = batch_size;
        let checkpoint =
            OperatorCheckpoint::of(&context, self, partition, &self.passed, self.schema())?;
        let output = drive_checkpointed(messages, ranked, checkpoint).map(move |batch| {
            if let Ok(batch) = &batch {
                metrics.record_output(batch.num_rows());
            }
            batch
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            output,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One kept row: its ORDER BY values, and where its columns are.
#[derive(Debug)]
struct Ranked {
    order: OrderKey,
    row: Stored,
}

/// Lists of at most this many rows are allocated at their full length when their key
/// first comes (a vector's first push would allocate four: 2.9 M keys of one row each in
/// Nexmark q18).
const SHORT_LIST: usize = 16;

/// The most bytes of an arrow row an [`OrderKey`] holds inline.
const INLINE_ORDER_BYTES: usize = 24;

/// A row's ORDER BY values as the bytes of an arrow row, which compare as the values do.
/// Values of fixed width (numbers, times) encode to rows of one length, so up to
/// [`INLINE_ORDER_BYTES`] of them are held as big-endian words, zero padded: the words
/// compare as the bytes do, without a call to `memcmp` or an allocation per kept row (both
/// a few percent of Nexmark q19). Other rows are kept as bare bytes (an `OwnedRow` would
/// also hold its converter's configuration, a reference count touched per row).
#[derive(Debug)]
enum OrderKey {
    Words([u64; INLINE_ORDER_BYTES / 8]),
    Bytes(Box<[u8]>),
}

/// A row's ORDER BY values being placed: compared with kept [`OrderKey`]s, and made one only
/// if the row is kept.
#[derive(Clone, Copy)]
enum OrderProbe<'a> {
    Words([u64; INLINE_ORDER_BYTES / 8]),
    Bytes(&'a [u8]),
}

impl<'a> OrderProbe<'a> {
    /// The probe of `row`: in words when `inline` (every row of the converter has one
    /// length of at most [`INLINE_ORDER_BYTES`]), else as bytes.
    fn new(row: &'a [u8], inline: bool) -> Result<Self> {
        if !inline {
            return Ok(Self::Bytes(row));
        }
        if row.len() > INLINE_ORDER_BYTES {
            return internal_err!("TopNExec: an ORDER BY row of {} bytes", row.len());
        }
        let mut padded = [0u8; INLINE_ORDER_BYTES];
        padded[..row.len()].copy_from_slice(row);
        let mut words = [0u64; INLINE_ORDER_BYTES / 8];
        for (word, bytes) in words.iter_mut().zip(padded.as_chunks::<8>().0) {
            *word = u64::from_be_bytes(*bytes);
        }
        Ok(Self::Words(words))
    }

    fn to_key(self) -> OrderKey {
        match self {
            Self::Words(words) => OrderKey::Words(words),
            Self::Bytes(bytes) => OrderKey::Bytes(bytes.into()),
        }
    }
}

impl OrderKey {
    /// How this key orders against `probe` (both made with the same `inline`).
    fn cmp_probe(&self, probe: &OrderProbe) -> Ordering {
        match (self, probe) {
            (Self::Words(kept), OrderProbe::Words(new)) => kept.cmp(new),
            (Self::Bytes(kept), OrderProbe::Bytes(new)) => (**kept).cmp(*new),
            // One state makes every key one way (`inline_order`).
            (Self::Words(_), OrderProbe::Bytes(_)) => Ordering::Less,
            (Self::Bytes(_), OrderProbe::Words(_)) => Ordering::Greater,
        }
    }

    /// Whether the rows of ORDER BY values of `types` all have one length of at most
    /// [`INLINE_ORDER_BYTES`]: each value of fixed width is a null byte and its bytes.
    fn fits_inline(types: &[DataType]) -> bool {
        let widths: Option<Vec<usize>> = types
            .iter()
            .map(|t| match t {
                DataType::Boolean => Some(1),
                t => t.primitive_width(),
            })
            .collect();
        widths.is_some_and(|w| w.iter().map(|w| w + 1).sum::<usize>() <= INLINE_ORDER_BYTES)
    }
}

/// Where a kept row's columns are.
#[derive(Debug, Clone, Copy)]
enum Stored {
    /// Row `row` of chunk `chunk`.
    Kept { chunk: u32, row: u32 },
    /// Row `n` of the batch being placed: gathered into a chunk once the batch is placed, if
    /// the row is still kept then (most rows that enter a top N early leave it within their
    /// batch).
    Pending(usize),
}

impl Stored {
    /// The chunk and row of a kept row.
    fn at(self) -> Result<(usize, usize)> {
        match self {
            Self::Kept { chunk, row } => Ok((chunk as usize, row as usize)),
            Self::Pending(_) => internal_err!("TopNExec: a row was not kept"),
        }
    }
}

/// The top N of each key of one partition.
struct TopNState {
    spec: TopNSpec,
    schema: SchemaRef,
    input_schema: SchemaRef,
    with_op: bool,
    /// The PARTITION BY keys' types, and their interner: a key's group id is the index of
    /// its list (none without PARTITION BY: every row is in list 0).
    key_schema: SchemaRef,
    key_groups: Option<Box<dyn GroupValues>>,
    /// Each row's group id, for the batch being placed.
    group_ids: Vec<usize>,
    order: RowConverter,
    /// Whether the ORDER BY rows are held in words ([`OrderKey`]).
    inline_order: bool,
    /// The kept rows' columns (see the module documentation).
    chunks: Vec<RecordBatch>,
    /// Rows in `chunks`, and how many of them are still kept.
    chunk_rows: usize,
    kept_rows: usize,
    lists: Vec<Vec<Ranked>>,
    /// Per key changed by the current batch: its list's length before the batch and the
    /// first rank that changed.
    changed: HashMap<usize, (usize, usize), RandomState>,
    /// Rows per batch of the final answer.
    batch_size: usize,
    /// At the end of the input (`Final` mode): the first list whose rows have not gone out
    /// yet. The final answer is built a batch at a time as it is handed out, so that it is
    /// never all in memory beside the state.
    flushing_from: Option<usize>,
    /// Whether the end of the input has come.
    finished: bool,
}

impl TopNState {
    fn try_new(spec: &TopNSpec, input: &SchemaRef, with_op: bool) -> Result<Self> {
        let key_fields = spec
            .partition_by
            .iter()
            .enumerate()
            .map(|(i, k)| {
                Ok(Field::new(
                    format!("k{i}"),
                    k.data_type(input)?,
                    k.nullable(input)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let key_schema = Arc::new(Schema::new(key_fields));
        let order_types = spec
            .order_by
            .iter()
            .map(|s| s.expr.data_type(input))
            .collect::<Result<Vec<_>>>()?;
        let order_fields = order_types
            .iter()
            .zip(&spec.order_by)
            .map(|(t, s)| SortField::new_with_options(t.clone(), s.options))
            .collect();
        Ok(Self {
            spec: spec.clone(),
            schema: match with_op {
                true => with_op_column(&spec.schema),
                false => Arc::clone(&spec.schema),
            },
            with_op,
            input_schema: Arc::clone(input),
            key_groups: Self::key_groups(&key_schema)?,
            key_schema,
            group_ids: Vec::new(),
            order: RowConverter::new(order_fields)?,
            inline_order: OrderKey::fits_inline(&order_types),
            chunks: Vec::new(),
            chunk_rows: 0,
            kept_rows: 0,
            lists: Vec::new(),
            changed: HashMap::default(),
            batch_size: 8192,
            flushing_from: None,
            finished: false,
        })
    }

    /// An empty interner of keys of `key_schema` (none for no keys).
    fn key_groups(key_schema: &SchemaRef) -> Result<Option<Box<dyn GroupValues>>> {
        match key_schema.fields().is_empty() {
            true => Ok(None),
            false => new_group_values(Arc::clone(key_schema)).map(Some),
        }
    }

    /// Each row's list index into `self.group_ids`, with a list for every new key.
    fn intern_keys(&mut self, key_columns: &[ArrayRef], rows: usize) -> Result<()> {
        let lists = match &mut self.key_groups {
            Some(groups) => {
                groups.intern(key_columns, &mut self.group_ids)?;
                groups.len()
            }
            None => {
                self.group_ids.clear();
                self.group_ids.resize(rows, 0);
                1
            }
        };
        if self.lists.len() < lists {
            self.lists.resize_with(lists, Vec::new);
        }
        Ok(())
    }

    /// Places the rows of `batch`; in `Changes` mode, the changelog rows they give.
    fn push(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let evaluate = |exprs: &mut dyn Iterator<Item = &Arc<dyn PhysicalExpr>>| {
            exprs
                .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
                .collect::<Result<Vec<ArrayRef>>>()
        };
        let key_columns = evaluate(&mut self.spec.partition_by.iter())?;
        self.intern_keys(&key_columns, batch.num_rows())?;
        let order = self
            .order
            .convert_columns(&evaluate(&mut self.spec.order_by.iter().map(|s| &s.expr))?)?;
        let limit = self.spec.limit;
        for i in 0..batch.num_rows() {
            let list = self.group_ids[i];
            let ranked = &mut self.lists[list];
            let value = OrderProbe::new(order.row(i).data(), self.inline_order)?;
            let position = match self.spec.ties {
                TieOrder::EarlierFirst => {
                    ranked.partition_point(|r| r.order.cmp_probe(&value).is_le())
                }
                TieOrder::LaterFirst => {
                    ranked.partition_point(|r| r.order.cmp_probe(&value).is_lt())
                }
            };
            if position >= limit {
                continue;
            }
            let before = ranked.len();
            // The last row of a full list leaves before the new one enters, so that a list
            // never holds more than N: a short list is allocated at its full length once.
            if ranked.len() == limit
                && let Some(Ranked {
                    row: Stored::Kept { .. },
                    ..
                }) = ranked.pop()
            {
                self.kept_rows -= 1;
            }
            if ranked.capacity() == 0 && limit <= SHORT_LIST {
                ranked.reserve_exact(limit);
            }
            ranked.insert(
                position,
                Ranked {
                    order: value.to_key(),
                    row: Stored::Pending(i),
                },
            );
            let change = self.changed.entry(list).or_insert((before, position));
            change.1 = change.1.min(position);
        }
        self.keep_pending(batch)?;
        self.compact_if_half_pushed_out()?;
        match self.spec.emit {
            TopNEmit::Final => {
                self.changed.clear();
                Ok(None)
            }
            TopNEmit::Changes => self.changes(),
        }
    }

    /// Gathers the rows of `batch` that its placing left in the lists (only changed keys
    /// can hold them) into a new chunk, with one gather.
    fn keep_pending(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut pending = Vec::new();
        for &list in self.changed.keys() {
            for (rank, ranked) in self.lists[list].iter().enumerate() {
                if let Stored::Pending(row) = ranked.row {
                    pending.push((list, rank, row as u32));
                }
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        let indices = UInt32Array::from_iter_values(pending.iter().map(|(_, _, row)| *row));
        let chunk = self.chunks.len() as u32;
        self.add_chunk(take_record_batch(batch, &indices)?)?;
        for (at, (list, rank, _)) in pending.into_iter().enumerate() {
            self.lists[list][rank].row = Stored::Kept {
                chunk,
                row: at as u32,
            };
        }
        Ok(())
    }

    /// Adds `rows`, all kept, as a chunk. A view array gathered from a batch shares that
    /// batch's buffers whole: the chunk's views get buffers of their own unless they use
    /// half of those bytes (the top-N of keys that meet few rows keeps nearly every row).
    fn add_chunk(&mut self, rows: RecordBatch) -> Result<()> {
        let columns = rows.columns().iter().map(compact_sparse_views).collect();
        let rows = RecordBatch::try_new(rows.schema(), columns)?;
        self.chunk_rows += rows.num_rows();
        self.kept_rows += rows.num_rows();
        self.chunks.push(rows);
        Ok(())
    }

    /// Once more than half of the chunks' rows (and at least a batch of them) were pushed
    /// out, gathers the kept rows into new chunks, list by list: the work is at most the
    /// rows pushed out since the last time.
    fn compact_if_half_pushed_out(&mut self) -> Result<()> {
        let pushed_out = self.chunk_rows - self.kept_rows;
        if pushed_out <= self.kept_rows || pushed_out < self.batch_size.max(1) {
            return Ok(());
        }
        let kept = self.kept_positions();
        let piece = self.batch_size.max(1);
        let chunks = kept
            .chunks(piece)
            .map(|positions| self.gather(positions.iter().copied()))
            .collect::<Result<Vec<_>>>()?;
        self.chunks.clear();
        (self.chunk_rows, self.kept_rows) = (0, 0);
        for rows in chunks {
            self.add_chunk(rows)?;
        }
        for (at, (list, rank)) in kept.into_iter().enumerate() {
            self.lists[list][rank].row = Stored::Kept {
                chunk: (at / piece) as u32,
                row: (at % piece) as u32,
            };
        }
        Ok(())
    }

    /// Every kept row's `(list, rank)`, list by list.
    fn kept_positions(&self) -> Vec<(usize, usize)> {
        (0..self.lists.len())
            .flat_map(|list| (0..self.lists[list].len()).map(move |rank| (list, rank)))
            .collect()
    }

    /// The input columns of the kept rows `(list, rank)`, in that order: one gather from
    /// the chunks they are in.
    fn gather(&self, picked: impl Iterator<Item = (usize, usize)>) -> Result<RecordBatch> {
        // Only the chunks the rows are in take part (a gather looks at each of its inputs).
        let mut slot_of_chunk = vec![usize::MAX; self.chunks.len()];
        let mut sources: Vec<&RecordBatch> = Vec::new();
        let mut indices = Vec::new();
        for (list, rank) in picked {
            let (chunk, row) = self.lists[list][rank].row.at()?;
            let Some(slot) = slot_of_chunk.get_mut(chunk) else {
                return internal_err!(
                    "TopNExec: a kept row names chunk {chunk} of {}",
                    self.chunks.len()
                );
            };
            if *slot == usize::MAX {
                sources.push(&self.chunks[chunk]);
                *slot = sources.len() - 1;
            }
            indices.push((*slot, row));
        }
        if sources.is_empty() {
            return Ok(RecordBatch::new_empty(Arc::clone(&self.input_schema)));
        }
        Ok(interleave_record_batch(&sources, &indices)?)
    }

    /// The changelog rows of the keys the last batch changed, and forgets the changes.
    fn changes(&mut self) -> Result<Option<RecordBatch>> {
        if self.changed.is_empty() {
            return Ok(None);
        }
        let mut changed: Vec<(usize, (usize, usize))> = self.changed.drain().collect();
        changed.sort_unstable_by_key(|(list, _)| *list);
        let mut out = Vec::new();
        for (list, (before, first)) in changed {
            for rank in first..self.lists[list].len() {
                let op = ChangeOp::of_upsert(rank >= before);
                out.push((list, rank, op));
            }
        }
        self.rows_of(&out).map(Some)
    }

    /// At the end of the input in `Final` mode: the next batch of every key's rows (the
    /// keys from `flushing_from` on, whole, until about `batch_size` rows), or `None` once
    /// all went out.
    fn next_final_batch(&mut self) -> Result<Option<RecordBatch>> {
        let Some(first) = self.flushing_from else {
            return Ok(None);
        };
        let mut picked = Vec::new();
        let mut list = first;
        while list < self.lists.len() && picked.len() < self.batch_size.max(1) {
            picked.extend((0..self.lists[list].len()).map(|rank| (list, rank, ChangeOp::Insert)));
            list += 1;
        }
        if picked.is_empty() {
            self.flushing_from = None;
            return Ok(None);
        }
        self.flushing_from = Some(list);
        self.rows_of(&picked).map(Some)
    }

    /// Every kept row's input columns (key by key, in rank order) and the index of its key's
    /// list: what a checkpoint keeps.
    fn snapshot_state(&self) -> Result<OperatorState> {
        let kept = self.kept_positions();
        let rows = self.gather(kept.iter().copied())?;
        let mut state = OperatorState::default();
        state.put_array(
            "list",
            Arc::new(UInt64Array::from_iter_values(
                kept.iter().map(|(list, _)| *list as u64),
            )),
        );
        for (index, column) in rows.columns().iter().enumerate() {
            state.put_array(format!("column_{index:03}"), Arc::clone(column));
        }
        Ok(state)
    }

    /// Takes back the lists [`Self::snapshot_state`] kept.
    fn restore_state(&mut self, state: &OperatorState) -> Result<()> {
        let columns = state.arrays_with_prefix("column_");
        let kept = RecordBatch::try_new(Arc::clone(&self.input_schema), columns)?;
        let list_of = state.array("list")?.as_primitive::<UInt64Type>().clone();
        self.lists.clear();
        self.key_groups = Self::key_groups(&self.key_schema)?;
        self.chunks.clear();
        (self.chunk_rows, self.kept_rows) = (0, 0);
        let evaluate = |exprs: &mut dyn Iterator<Item = &Arc<dyn PhysicalExpr>>| {
            exprs
                .map(|e| e.evaluate(&kept)?.into_array(kept.num_rows()))
                .collect::<Result<Vec<ArrayRef>>>()
        };
        let key_columns = evaluate(&mut self.spec.partition_by.iter())?;
        self.intern_keys(&key_columns, kept.num_rows())?;
        let order = self
            .order
            .convert_columns(&evaluate(&mut self.spec.order_by.iter().map(|s| &s.expr))?)?;
        let rows = kept.num_rows();
        self.add_chunk(kept)?;
        for row in 0..rows {
            // The rows come list by list, in the lists' order, so that a key's new group
            // id is its list's index before the checkpoint.
            let list = self.group_ids[row];
            if list != list_of.value(row) as usize {
                return internal_err!("TopNExec: a checkpoint's rows are not in key order");
            }
            self.lists[list].push(Ranked {
                order: OrderProbe::new(order.row(row).data(), self.inline_order)?.to_key(),
                row: Stored::Kept {
                    chunk: 0,
                    row: row as u32,
                },
            });
        }
        Ok(())
    }

    /// The output rows of (key, rank) pairs, with their ranks (and ops).
    fn rows_of(&self, picked: &[(usize, usize, ChangeOp)]) -> Result<RecordBatch> {
        let rows = self.gather(picked.iter().map(|(list, rank, _)| (*list, *rank)))?;
        let mut columns = rows.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from_iter_values(
            picked.iter().map(|(_, rank, _)| *rank as u64 + 1),
        )));
        if self.with_op {
            columns.push(op_array(picked.iter().map(|(_, _, op)| *op)));
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

impl MessageHandler for TopNState {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.push(batch)
    }

    /// The end of the input (the watermark reaching +inf, once) gives the final answer.
    fn on_watermark(&mut self, watermark: i64) -> Result<Option<RecordBatch>> {
        if watermark == i64::MAX && !self.finished {
            self.finished = true;
            if self.spec.emit == TopNEmit::Final {
                self.flushing_from = Some(0);
            }
        }
        self.next_final_batch()
    }

    fn queued_output(&mut self) -> Result<Option<RecordBatch>> {
        self.next_final_batch()
    }

    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        self.snapshot_state().map(Some)
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.restore_state(state)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt64Type};

    use super::*;

    fn input_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
            Field::new("seq", DataType::Int64, false),
        ]))
    }

    fn spec(limit: usize, ties: TieOrder, emit: TopNEmit) -> TopNSpec {
        let mut fields: Vec<Field> = input_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        TopNSpec {
            partition_by: vec![Arc::new(Column::new("k", 0))],
            order_by: vec![PhysicalSortExpr::new(
                Arc::new(Column::new("v", 1)),
                SortOptions::new(true, true),
            )],
            limit,
            ties,
            emit,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    fn batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
        let column = |f: fn(&(i64, i64, i64)) -> i64| -> ArrayRef {
            Arc::new(Int64Array::from_iter_values(rows.iter().map(f)))
        };
        RecordBatch::try_new(
            input_schema(),
            vec![column(|r| r.0), column(|r| r.1), column(|r| r.2)],
        )
        .unwrap()
    }

    /// (k, v, seq, rank, op) of a changelog batch.
    fn rows(batch: &RecordBatch) -> Vec<(i64, i64, i64, u64, String)> {
        let int = |c: usize| batch.column(c).as_primitive::<Int64Type>().clone();
        let (k, v, seq) = (int(0), int(1), int(2));
        let rank = batch.column(3).as_primitive::<UInt64Type>();
        let op = batch.column(4).as_string::<i32>();
        (0..batch.num_rows())
            .map(|i| {
                (
                    k.value(i),
                    v.value(i),
                    seq.value(i),
                    rank.value(i),
                    op.value(i).to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn keeps_the_largest_values_with_earlier_arrivals_first_among_ties() {
        let mut state = TopNState::try_new(
            &spec(2, TieOrder::EarlierFirst, TopNEmit::Changes),
            &input_schema(),
            true,
        )
        .unwrap();
        let first = state
            .push(&batch(&[(1, 5, 0), (1, 7, 1), (2, 1, 2)]))
            .unwrap()
            .unwrap();
        assert_eq!(
            rows(&first),
            [
                (1, 7, 1, 1, "+I".to_string()),
                (1, 5, 0, 2, "+I".to_string()),
                (2, 1, 2, 1, "+I".to_string()),
            ]
        );
        // A tie with the first row ranks after it; 6 pushes 5 out; 3 cannot enter.
        let second = state
            .push(&batch(&[(1, 7, 3), (1, 3, 4), (1, 6, 5)]))
            .unwrap()
            .unwrap();
        assert_eq!(rows(&second), [(1, 7, 3, 2, "+U".to_string())]);
        let third = state.push(&batch(&[(1, 6, 6)])).unwrap();
        assert!(third.is_none(), "a row below a full list changes nothing");
    }

    #[test]
    fn keep_last_replaces_the_row_of_an_equal_value() {
        let mut state = TopNState::try_new(
            &spec(1, TieOrder::LaterFirst, TopNEmit::Changes),
            &input_schema(),
            true,
        )
        .unwrap();
        state.push(&batch(&[(1, 5, 0)])).unwrap();
        let tie = state.push(&batch(&[(1, 5, 1)])).unwrap().unwrap();
        assert_eq!(rows(&tie), [(1, 5, 1, 1, "+U".to_string())]);
        let older = state.push(&batch(&[(1, 4, 2)])).unwrap();
        assert!(older.is_none());
    }

    #[test]
    fn final_mode_gives_every_keys_rows_at_the_end() {
        let mut state = TopNState::try_new(
            &spec(2, TieOrder::EarlierFirst, TopNEmit::Final),
            &input_schema(),
            false,
        )
        .unwrap();
        assert!(
            state
                .push(&batch(&[(1, 5, 0), (2, 9, 1), (1, 8, 2), (1, 6, 3)]))
                .unwrap()
                .is_none()
        );
        state.batch_size = 2;
        // The final answer comes at the end of the input, a batch at a time.
        let out = final_batches(&mut state);
        assert_eq!(out.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), [2, 1]);
        let v: Vec<i64> = out
            .iter()
            .flat_map(|b| b.column(1).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        assert_eq!(v, [8, 6, 9]);
    }

    /// Every batch of the final answer, until the state has no more.
    fn final_batches(state: &mut TopNState) -> Vec<RecordBatch> {
        let mut out: Vec<RecordBatch> = state.on_watermark(i64::MAX).unwrap().into_iter().collect();
        while let Some(batch) = state.queued_output().unwrap() {
            out.push(batch);
        }
        out
    }

    /// A top-N's output schema over `input`: its columns and the rank.
    fn with_rank(input: &Schema) -> SchemaRef {
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("rn", DataType::UInt64, false));
        Arc::new(Schema::new(fields))
    }

    /// (k, v, seq, rank) of every final batch, until the state has no more.
    fn final_rows(state: &mut TopNState) -> Vec<(i64, i64, i64, u64)> {
        let out = final_batches(state);
        out.iter()
            .flat_map(|b| {
                let int = |c: usize| b.column(c).as_primitive::<Int64Type>().clone();
                let (k, v, seq) = (int(0), int(1), int(2));
                let rank = b.column(3).as_primitive::<UInt64Type>().clone();
                (0..b.num_rows())
                    .map(move |i| (k.value(i), v.value(i), seq.value(i), rank.value(i)))
            })
            .collect()
    }

    #[test]
    fn rows_pushed_out_are_let_go_and_the_answer_and_a_snapshot_stay_whole() {
        let spec = spec(3, TieOrder::EarlierFirst, TopNEmit::Final);
        let mut state = TopNState::try_new(&spec, &input_schema(), false).unwrap();
        state.batch_size = 4;
        let rows: Vec<(i64, i64, i64)> = (0..500)
            .map(|i| (i % 5, (crate::splitmix64(i as u64) % 40) as i64, i))
            .collect();
        for piece in rows.chunks(10) {
            assert!(state.push(&batch(piece)).unwrap().is_none());
            assert!(
                state.chunk_rows - state.kept_rows <= state.kept_rows.max(state.batch_size),
                "rows pushed out are kept: {} of {}",
                state.chunk_rows - state.kept_rows,
                state.chunk_rows
            );
        }
        assert_eq!(state.kept_rows, 15);
        // Each key's three largest values, the earlier arrival first among ties, keys in
        // the order they came.
        let mut expected = Vec::new();
        for k in 0..5 {
            let mut of_key: Vec<_> = rows.iter().filter(|r| r.0 == k).collect();
            of_key.sort_by_key(|r| (-r.1, r.2));
            expected.extend(
                of_key
                    .iter()
                    .take(3)
                    .enumerate()
                    .map(|(rank, r)| (r.0, r.1, r.2, rank as u64 + 1)),
            );
        }
        let snapshot = state.snapshot_state().unwrap();
        let mut restored = TopNState::try_new(&spec, &input_schema(), false).unwrap();
        restored.restore_state(&snapshot).unwrap();
        assert_eq!(final_rows(&mut state), expected);
        assert_eq!(final_rows(&mut restored), expected);
    }

    /// Keys of a nullable string and an integer: NULL is one key of its own, each key's
    /// rows go to its own list before and after a checkpoint, and keys leave in the order
    /// they first came.
    #[test]
    fn keys_of_several_columns_with_nulls_keep_their_lists_across_a_checkpoint() {
        use datafusion::arrow::array::{Array, StringArray};

        let input = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let spec = TopNSpec {
            partition_by: vec![Arc::new(Column::new("s", 0)), Arc::new(Column::new("k", 1))],
            order_by: vec![PhysicalSortExpr::new(
                Arc::new(Column::new("v", 2)),
                SortOptions::new(true, true),
            )],
            limit: 1,
            ties: TieOrder::EarlierFirst,
            emit: TopNEmit::Final,
            schema: with_rank(&input),
        };
        let strings = [Some("a"), None, Some("bb"), Some("a long string value")];
        let rows: Vec<(Option<&str>, i64, i64)> = (0..400u64)
            .map(|i| {
                let s = strings[(crate::splitmix64(i) % 4) as usize];
                (
                    s,
                    (crate::splitmix64(i + 1000) % 3) as i64,
                    i as i64 * 7 % 101,
                )
            })
            .collect();
        let batch = |piece: &[(Option<&str>, i64, i64)]| {
            RecordBatch::try_new(
                Arc::clone(&input),
                vec![
                    Arc::new(StringArray::from_iter(piece.iter().map(|r| r.0))),
                    Arc::new(Int64Array::from_iter_values(piece.iter().map(|r| r.1))),
                    Arc::new(Int64Array::from_iter_values(piece.iter().map(|r| r.2))),
                ],
            )
            .unwrap()
        };
        let mut state = TopNState::try_new(&spec, &input, false).unwrap();
        for piece in rows[..200].chunks(16) {
            state.push(&batch(piece)).unwrap();
        }
        let mut restored = TopNState::try_new(&spec, &input, false).unwrap();
        restored
            .restore_state(&state.snapshot_state().unwrap())
            .unwrap();
        for piece in rows[200..].chunks(16) {
            state.push(&batch(piece)).unwrap();
            restored.push(&batch(piece)).unwrap();
        }
        // Each key's largest value (the earlier of equal ones), keys in order of arrival.
        let mut expected: Vec<((Option<&str>, i64), i64)> = Vec::new();
        for &(s, k, v) in &rows {
            match expected.iter_mut().find(|(key, _)| *key == (s, k)) {
                Some((_, best)) => *best = (*best).max(v),
                None => expected.push(((s, k), v)),
            }
        }
        assert_eq!(expected.len(), 12);
        for state in [&mut state, &mut restored] {
            let out = final_batches(state);
            let got: Vec<((Option<String>, i64), i64)> = out
                .iter()
                .flat_map(|b| {
                    let s = b.column(0).as_string::<i32>().clone();
                    let k = b.column(1).as_primitive::<Int64Type>().clone();
                    let v = b.column(2).as_primitive::<Int64Type>().clone();
                    (0..b.num_rows()).map(move |i| {
                        let key = (s.is_valid(i).then(|| s.value(i).to_string()), k.value(i));
                        (key, v.value(i))
                    })
                })
                .collect();
            let expected: Vec<((Option<String>, i64), i64)> = expected
                .iter()
                .map(|((s, k), v)| ((s.map(str::to_string), *k), *v))
                .collect();
            assert_eq!(got, expected);
        }
    }

    /// The top 3 of each key by (v DESC, w ASC) over values of the whole Int64 range, and
    /// by a string: rows of ORDER BY values held in words and as bytes rank as a sort does.
    #[test]
    fn ranks_as_a_sort_over_wide_values_and_strings() {
        use datafusion::arrow::array::StringArray;

        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
            Field::new("w", DataType::Float64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let rows: Vec<(i64, i64, f64, String)> = (0..2000u64)
            .map(|i| {
                let r = crate::splitmix64(i);
                let v = match r % 3 {
                    0 => r as i64,
                    1 => (r % 7) as i64 - 3,
                    _ => -(r as i64 >> 3),
                };
                let w = (crate::splitmix64(i + 7) % 9) as f64 - 4.5;
                (i as i64 % 8, v, w, format!("{:x}", r % 5000))
            })
            .collect();
        let batch = |piece: &[(i64, i64, f64, String)]| {
            RecordBatch::try_new(
                Arc::clone(&input),
                vec![
                    Arc::new(Int64Array::from_iter_values(piece.iter().map(|r| r.0))),
                    Arc::new(Int64Array::from_iter_values(piece.iter().map(|r| r.1))),
                    Arc::new(datafusion::arrow::array::Float64Array::from_iter_values(
                        piece.iter().map(|r| r.2),
                    )),
                    Arc::new(StringArray::from_iter_values(piece.iter().map(|r| &r.3))),
                ],
            )
            .unwrap()
        };
        let column = |name: &str, index: usize| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new(name, index))
        };
        let orders: [(Vec<PhysicalSortExpr>, bool); 2] = [
            (
                vec![
                    PhysicalSortExpr::new(column("v", 1), SortOptions::new(true, true)),
                    PhysicalSortExpr::new(column("w", 2), SortOptions::new(false, true)),
                ],
                true,
            ),
            (
                vec![PhysicalSortExpr::new(
                    column("s", 3),
                    SortOptions::new(true, true),
                )],
                false,
            ),
        ];
        for (order_by, inline) in orders {
            let by_string = !inline;
            let spec = TopNSpec {
                partition_by: vec![column("k", 0)],
                order_by,
                limit: 3,
                ties: TieOrder::EarlierFirst,
                emit: TopNEmit::Final,
                schema: with_rank(&input),
            };
            let mut state = TopNState::try_new(&spec, &input, false).unwrap();
            assert_eq!(state.inline_order, inline);
            for piece in rows.chunks(64) {
                state.push(&batch(piece)).unwrap();
            }
            let out = final_batches(&mut state);
            let got: Vec<(i64, i64)> = out
                .iter()
                .flat_map(|b| {
                    let k = b.column(0).as_primitive::<Int64Type>().clone();
                    let v = b.column(1).as_primitive::<Int64Type>().clone();
                    (0..b.num_rows()).map(move |i| (k.value(i), v.value(i)))
                })
                .collect();
            let mut expected = Vec::new();
            for k in 0..8 {
                let mut of_key: Vec<_> =
                    rows.iter().enumerate().filter(|(_, r)| r.0 == k).collect();
                if by_string {
                    of_key.sort_by(|(a, x), (b, y)| y.3.cmp(&x.3).then(a.cmp(b)));
                } else {
                    of_key.sort_by(|(a, x), (b, y)| {
                        y.1.cmp(&x.1).then(x.2.total_cmp(&y.2)).then(a.cmp(b))
                    });
                }
                expected.extend(of_key.iter().take(3).map(|(_, r)| (r.0, r.1)));
            }
            assert_eq!(got, expected, "inline: {inline}");
        }
    }
}
