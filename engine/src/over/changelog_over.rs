//! [`ChangelogOverExec`]: window functions (`f(x) OVER (PARTITION BY k ORDER BY t ROWS …)`)
//! over a changelog — the upserts and deletions of a top-N or an EMIT CHANGES aggregation —
//! emitting a changelog in turn (Nexmark q6: the average of each seller's last 10 auctions'
//! top bids, over the top-1 of each auction).
//!
//! The input is an upsert stream keyed by its changelog key (see [`crate::changelog`]); a
//! key's current row is the one its last upsert gave, until a deletion. The output is the
//! window query over the current rows, as an upsert stream keyed by the same key: each current
//! row with its functions' values.
//!
//! State: per PARTITION BY value, the current rows ordered by (ORDER BY values, arrival), as
//! arrow rows in a B-tree; per changelog key, where its row stands. Rows of equal ORDER BY
//! values are in the order their upserts arrived (an updated row arrives anew). Per input
//! batch:
//!
//! 1. each change removes its key's earlier row and places the new one (a deletion only
//!    removes), remembering both places as change points of their partition;
//! 2. the rows whose values a change point can alter are those whose frame covers it: for a
//!    frame of `p` rows before and `f` after the current row, from `f` rows before the point
//!    to `p` rows after. Partitions of frames reaching the partition's edge (UNBOUNDED,
//!    RANGE frames, ranking functions) are recomputed whole;
//! 3. each run of those rows, with the `p` rows before and `f` after it that their frames
//!    read, is decoded into one batch and given to DataFusion's own window expressions, which
//!    compute every function over a sorted partition (a sliding aggregate row by row over
//!    its own frame, so that its value does not depend on where the run began);
//! 4. the run's rows leave as upserts (`+I` for a key first seen in the batch, `+U` else), and
//!    each key deleted and not placed again as `-D` (with its last row's values and NULL
//!    functions).
//!
//! A change costs its frame's length in recomputed rows (its whole partition for frames
//! reaching an edge). The state holds every current row: it is not freed by the watermark,
//! as the top-N's is not.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, UInt64Array, new_null_array,
};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef, UInt64Type};
use datafusion::arrow::row::{Row, RowConverter, Rows, SortField};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, ScalarValue, internal_err, plan_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::window::{
    PlainAggregateWindowExpr, SlidingAggregateWindowExpr, WindowExpr,
};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::StreamExt;

use crate::changelog::{ChangeOp, op_array, op_column};
use crate::checkpoint::{OperatorState, PassedBarriers};
use crate::message_loop::{MessageHandler, OperatorCheckpoint, drive_checkpointed, input_messages};
use crate::plan_util::{evaluate, single_child, stateful_properties, visit_expressions};
use crate::row_format::TypedRowConverter;

/// What a [`ChangelogOverExec`] computes.
#[derive(Debug, Clone)]
pub struct ChangelogOverSpec {
    /// DataFusion's window expressions over the input, all with the same PARTITION BY and
    /// ORDER BY.
    pub window_exprs: Vec<Arc<dyn WindowExpr>>,
    /// The input columns of the changelog's key.
    pub key: Vec<usize>,
    /// The input columns the output starts with, before the functions' columns; the input's
    /// other columns but `op` (key columns carried for the changelog) follow them.
    pub leading: usize,
}

/// How many rows on one side of the current row a frame reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Rows(usize),
    /// Up to the partition's edge.
    Edge,
}

impl Reach {
    fn max(self, other: Self) -> Self {
        match (self, other) {
            (Self::Rows(a), Self::Rows(b)) => Self::Rows(a.max(b)),
            _ => Self::Edge,
        }
    }
}

/// The rows before and after the current row that any of `exprs` reads.
fn reaches(exprs: &[Arc<dyn WindowExpr>]) -> (Reach, Reach) {
    let rows = |bound: &WindowFrameBound, before: bool| match bound {
        WindowFrameBound::CurrentRow => Reach::Rows(0),
        WindowFrameBound::Preceding(n) | WindowFrameBound::Following(n) if n.is_null() => {
            Reach::Edge
        }
        WindowFrameBound::Preceding(ScalarValue::UInt64(Some(n))) if before => {
            Reach::Rows(*n as usize)
        }
        WindowFrameBound::Following(ScalarValue::UInt64(Some(n))) if !before => {
            Reach::Rows(*n as usize)
        }
        // A frame starting after the row reads nothing before it, and one ending before
        // it nothing after it.
        WindowFrameBound::Following(ScalarValue::UInt64(Some(_))) if before => Reach::Rows(0),
        WindowFrameBound::Preceding(ScalarValue::UInt64(Some(_))) if !before => Reach::Rows(0),
        _ => Reach::Edge,
    };
    exprs
        .iter()
        .fold((Reach::Rows(0), Reach::Rows(0)), |(before, after), expr| {
            let any = expr.as_any();
            let aggregate =
                any.is::<PlainAggregateWindowExpr>() || any.is::<SlidingAggregateWindowExpr>();
            let frame = expr.get_window_frame();
            let (b, a) = match aggregate && frame.units == WindowFrameUnits::Rows {
                true => (
                    rows(&frame.start_bound, true),
                    rows(&frame.end_bound, false),
                ),
                // Ranking, LAG / LEAD and RANGE or GROUPS frames depend on the rows' places
                // in the whole partition or on their values.
                false => (Reach::Edge, Reach::Edge),
            };
            (before.max(b), after.max(a))
        })
}

/// See the module documentation.
#[derive(Debug)]
pub struct ChangelogOverExec {
    input: Arc<dyn ExecutionPlan>,
    spec: ChangelogOverSpec,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    passed: Arc<PassedBarriers>,
}

impl ChangelogOverExec {
    pub fn try_new(input: Arc<dyn ExecutionPlan>, spec: ChangelogOverSpec) -> Result<Self> {
        let input_schema = input.schema();
        let Some(op) = op_column(&input_schema) else {
            return internal_err!("ChangelogOverExec: the input is not a changelog");
        };
        let Some(first) = spec.window_exprs.first() else {
            return internal_err!("ChangelogOverExec: no window expression");
        };
        let same_window = spec.window_exprs.iter().all(|e| {
            e.partition_by().len() == first.partition_by().len()
                && e.partition_by()
                    .iter()
                    .zip(first.partition_by())
                    .all(|(a, b)| a.eq(b))
                && e.order_by() == first.order_by()
        });
        if !same_window {
            return internal_err!(
                "ChangelogOverExec: the windows differ in PARTITION BY or ORDER BY"
            );
        }
        if first.order_by().is_empty() {
            return plan_err!(
                "a window function over a changelog needs an ORDER BY: the rows of a changelog have no order of their own"
            );
        }
        // The op column is last, so the window expressions' columns are a row's columns.
        if op + 1 != input_schema.fields().len()
            || spec.leading > op
            || spec.key.iter().any(|&k| k >= op)
        {
            return internal_err!("ChangelogOverExec: the key or leading columns are out of range");
        }
        let mut fields: Vec<Field> = input_schema.fields()[..spec.leading]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for expr in &spec.window_exprs {
            // A deletion's functions are NULL.
            fields.push(expr.field()?.as_ref().clone().with_nullable(true));
        }
        fields.extend(
            input_schema.fields()[spec.leading..]
                .iter()
                .enumerate()
                .filter(|(at, _)| spec.leading + at != op)
                .map(|(_, f)| f.as_ref().clone()),
        );
        fields.push(input_schema.field(op).clone());
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            input_schema.metadata().clone(),
        ));
        let properties = Arc::new(stateful_properties(&input, &schema));
        let partitions = properties.output_partitioning().partition_count();
        Ok(Self {
            input,
            spec,
            schema,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
            passed: Arc::new(PassedBarriers::new(partitions)),
        })
    }

    pub fn spec(&self) -> &ChangelogOverSpec {
        &self.spec
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The checkpoint barriers each partition has passed on.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }

    /// The output columns of the changelog's key.
    pub fn output_key(&self) -> Vec<usize> {
        let functions = self.spec.window_exprs.len();
        self.spec
            .key
            .iter()
            .map(|&k| match k < self.spec.leading {
                true => k,
                false => k + functions,
            })
            .collect()
    }

    /// The changelog's key as EXPLAIN names it.
    pub fn changelog_key(&self) -> String {
        let schema = self.input.schema();
        let names: Vec<&str> = self
            .spec
            .key
            .iter()
            .map(|&k| schema.field(k).name().as_str())
            .collect();
        names.join(", ")
    }
}

impl DisplayAs for ChangelogOverExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let functions: Vec<&str> = self.spec.window_exprs.iter().map(|e| e.name()).collect();
        let (before, after) = reaches(&self.spec.window_exprs);
        let reach = |r: Reach| match r {
            Reach::Rows(n) => n.to_string(),
            Reach::Edge => "the partition's edge".to_string(),
        };
        write!(
            f,
            "ChangelogOverExec: wdw=[{}], reads a changelog keyed by ({key}), emits upserts keyed \
             by ({key}); a change recomputes the rows whose frames cover it ({} before, {} after)",
            functions.join(", "),
            reach(before),
            reach(after),
            key = self.changelog_key(),
        )
    }
}

impl ExecutionPlan for ChangelogOverExec {
    fn name(&self) -> &str {
        "ChangelogOverExec"
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
        let mut expressions = Vec::new();
        for expr in &self.spec.window_exprs {
            expressions.extend(expr.expressions());
            expressions.extend(expr.partition_by().iter().cloned());
            expressions.extend(expr.order_by().iter().map(|s| Arc::clone(&s.expr)));
        }
        visit_expressions(expressions.iter(), f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = single_child("ChangelogOverExec", children)?;
        Ok(Arc::new(Self::try_new(input, self.spec.clone())?))
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
        let messages = input_messages(&self.input, partition, Arc::clone(&context))?;
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let state = ChangelogOverState::try_new(&self.spec, &self.input.schema(), &self.schema)?;
        let checkpoint =
            OperatorCheckpoint::of(&context, self, partition, &self.passed, self.schema())?;
        let output = drive_checkpointed(messages, state, checkpoint).map(move |batch| {
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

/// The values of a sliding window `expr` for rows `first..first + count` of `slice`, each
/// computed over its own frame (`frame`: its reach before and after the row) alone. A
/// sliding aggregate adds and retracts rows as its frame moves, so over a float its value
/// would depend, in the last digits, on where the evaluation started; computed row by row
/// it depends only on the frame, whichever rows a change recomputed.
fn evaluate_row_by_row(
    expr: &Arc<dyn WindowExpr>,
    slice: &RecordBatch,
    first: usize,
    count: usize,
    (before, after): (Reach, Reach),
) -> Result<ArrayRef> {
    let mut values = Vec::with_capacity(count);
    for row in first..first + count {
        let start = match before {
            Reach::Rows(n) => row.saturating_sub(n),
            Reach::Edge => 0,
        };
        let end = match after {
            Reach::Rows(n) => (row + n + 1).min(slice.num_rows()),
            Reach::Edge => slice.num_rows(),
        };
        let frame = slice.slice(start, end - start);
        values.push(expr.evaluate(&frame)?.slice(row - start, 1));
    }
    let values: Vec<&dyn Array> = values.iter().map(|v| v.as_ref()).collect();
    Ok(concat(&values)?)
}

/// A row's place in its partition: its ORDER BY values (as an arrow row) and its arrival.
type Place = (Box<[u8]>, u64);

/// Where a key's current row is.
#[derive(Debug)]
struct Placed {
    partition: usize,
    place: Place,
}

/// A current row: its changelog key and its columns (the input's but `op`), encoded.
#[derive(Debug)]
struct Stored {
    key: Box<[u8]>,
    row: Box<[u8]>,
}

/// A key an input batch changed.
struct Touched {
    /// Whether it had a row before the batch.
    existed: bool,
    /// The last row the batch took from it.
    lost: Option<Box<[u8]>>,
}

/// The current rows of one partition of one stream.
struct ChangelogOverState {
    spec: ChangelogOverSpec,
    schema: SchemaRef,
    /// The input's schema without `op`: what a row holds.
    row_schema: SchemaRef,
    op: usize,
    before: Reach,
    after: Reach,
    /// Per window expression, the frame's reach before and after the row if it slides
    /// (see [`evaluate_row_by_row`]).
    sliding: Vec<Option<(Reach, Reach)>>,
    keys: RowConverter,
    partitions: RowConverter,
    order: RowConverter,
    rows: TypedRowConverter,
    /// PARTITION BY value (encoded) to its index in `ordered`.
    partition_index: HashMap<Box<[u8]>, usize>,
    /// Per partition, its current rows by place.
    ordered: Vec<BTreeMap<Place, Stored>>,
    /// Changelog key (encoded) to its current row's place.
    placed: HashMap<Box<[u8]>, Placed>,
    /// The next arrival number.
    arrivals: u64,
}

impl ChangelogOverState {
    fn try_new(spec: &ChangelogOverSpec, input: &SchemaRef, schema: &SchemaRef) -> Result<Self> {
        let Some(op) = op_column(input) else {
            return internal_err!("ChangelogOverExec: the input is not a changelog");
        };
        let row_fields: Vec<Field> = input
            .fields()
            .iter()
            .enumerate()
            .filter(|(at, _)| *at != op)
            .map(|(_, f)| f.as_ref().clone())
            .collect();
        let row_schema = Arc::new(Schema::new(row_fields));
        let window = &spec.window_exprs[0];
        let key_fields = spec
            .key
            .iter()
            .map(|&k| SortField::new(input.field(k).data_type().clone()))
            .collect();
        let partition_fields = window
            .partition_by()
            .iter()
            .map(|e| Ok(SortField::new(e.data_type(input)?)))
            .collect::<Result<Vec<_>>>()?;
        let order_fields = window
            .order_by()
            .iter()
            .map(|s| {
                Ok(SortField::new_with_options(
                    s.expr.data_type(input)?,
                    s.options,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let row_types = row_schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let (before, after) = reaches(&spec.window_exprs);
        let sliding = spec
            .window_exprs
            .iter()
            .map(|expr| {
                expr.as_any()
                    .is::<SlidingAggregateWindowExpr>()
                    .then(|| reaches(std::slice::from_ref(expr)))
            })
            .collect();
        Ok(Self {
            spec: spec.clone(),
            schema: Arc::clone(schema),
            row_schema,
            op,
            before,
            after,
            sliding,
            keys: RowConverter::new(key_fields)?,
            partitions: RowConverter::new(partition_fields)?,
            order: RowConverter::new(order_fields)?,
            rows: TypedRowConverter::try_new(row_types)?,
            partition_index: HashMap::new(),
            ordered: Vec::new(),
            placed: HashMap::new(),
            arrivals: 0,
        })
    }

    /// The partition of PARTITION BY value `value`, created if new.
    fn partition_of(&mut self, value: &[u8]) -> usize {
        match self.partition_index.get(value) {
            Some(&partition) => partition,
            None => {
                self.partition_index
                    .insert(value.into(), self.ordered.len());
                self.ordered.push(BTreeMap::new());
                self.ordered.len() - 1
            }
        }
    }

    /// The changelog keys, PARTITION BY values (`None` without PARTITION BY) and ORDER BY
    /// values of the rows of `batch` (the input's columns), encoded as arrow rows.
    fn encode(&self, batch: &RecordBatch) -> Result<(Rows, Option<Rows>, Rows)> {
        let key_columns: Vec<ArrayRef> = self
            .spec
            .key
            .iter()
            .map(|&k| Arc::clone(batch.column(k)))
            .collect();
        let keys = self.keys.convert_columns(&key_columns)?;
        let window = &self.spec.window_exprs[0];
        let partitions = match window.partition_by().is_empty() {
            true => None,
            false => Some(
                self.partitions
                    .convert_columns(&evaluate(window.partition_by(), batch)?)?,
            ),
        };
        let order_exprs: Vec<Arc<dyn PhysicalExpr>> = window
            .order_by()
            .iter()
            .map(|s| Arc::clone(&s.expr))
            .collect();
        let order = self
            .order
            .convert_columns(&evaluate(&order_exprs, batch)?)?;
        Ok((keys, partitions, order))
    }

    /// Applies the changes of `batch`; the changelog rows they give.
    fn push(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(None);
        }
        let Some(ops) = batch.column(self.op).as_string_opt::<i32>() else {
            return internal_err!("a changelog's op column is not a string");
        };
        let (keys, partitions, order) = self.encode(batch)?;
        let encoded = self.rows.convert_columns(&batch.columns()[..self.op])?;

        // Per partition touched, its change points; per key touched, whether it had a row
        // before the batch and the last row it lost.
        let mut points: HashMap<usize, Vec<Place>> = HashMap::new();
        let mut touched: HashMap<Box<[u8]>, Touched> = HashMap::new();
        for row in 0..rows {
            let Some(op) = ChangeOp::parse(ops.value(row)) else {
                return plan_err!("a changelog row's op is not +I, +U or -D");
            };
            let key = keys.row(row);
            let earlier = self.placed.remove(key.as_ref());
            let touch = touched
                .entry(key.as_ref().into())
                .or_insert_with(|| Touched {
                    existed: earlier.is_some(),
                    lost: None,
                });
            if let Some(earlier) = earlier {
                touch.lost = self.ordered[earlier.partition]
                    .remove(&earlier.place)
                    .map(|stored| stored.row);
                points
                    .entry(earlier.partition)
                    .or_default()
                    .push(earlier.place);
            }
            if op == ChangeOp::Delete {
                continue;
            }
            let value = partitions.as_ref().map_or(&[][..], |p| p.row(row).data());
            let partition = self.partition_of(value);
            let place: Place = (order.row(row).data().into(), self.arrivals);
            self.arrivals += 1;
            let stored = Stored {
                key: key.as_ref().into(),
                row: encoded.row(row).data().into(),
            };
            self.ordered[partition].insert(place.clone(), stored);
            points.entry(partition).or_default().push(place.clone());
            self.placed
                .insert(key.as_ref().into(), Placed { partition, place });
        }
        self.changes(points, &touched)
    }

    /// The changelog rows of the change `points` of each partition and of the keys
    /// `touched` by the batch.
    fn changes(
        &self,
        points: HashMap<usize, Vec<Place>>,
        touched: &HashMap<Box<[u8]>, Touched>,
    ) -> Result<Option<RecordBatch>> {
        let parser = self.rows.parser();
        let mut output: Vec<(Row, ChangeOp)> = Vec::new();
        let mut values: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.spec.window_exprs.len()];
        let mut points: Vec<(usize, Vec<Place>)> = points.into_iter().collect();
        points.sort_unstable_by_key(|(partition, _)| *partition);
        for (partition, mut partition_points) in points {
            partition_points.sort_unstable();
            let rows = &self.ordered[partition];
            for run in self.runs(rows, &partition_points) {
                let (read, first, count) = self.read_span(rows, &run);
                if count == 0 {
                    continue;
                }
                let decoded = self
                    .rows
                    .convert_rows(read.iter().map(|(_, stored)| parser.parse(&stored.row)))?;
                let slice = RecordBatch::try_new(Arc::clone(&self.row_schema), decoded)?;
                for ((expr, frame), out) in self
                    .spec
                    .window_exprs
                    .iter()
                    .zip(&self.sliding)
                    .zip(values.iter_mut())
                {
                    out.push(match frame {
                        Some(frame) => evaluate_row_by_row(expr, &slice, first, count, *frame)?,
                        None => expr.evaluate(&slice)?.slice(first, count),
                    });
                }
                for (_, stored) in &read[first..first + count] {
                    // A key without a row before the batch is inserted.
                    let op = match touched.get(&stored.key) {
                        Some(touch) if !touch.existed => ChangeOp::Insert,
                        _ => ChangeOp::Update,
                    };
                    output.push((parser.parse(&stored.row), op));
                }
            }
        }
        let upserts = output.len();
        // Keys that had a row before the batch and have none now are deleted.
        let mut deletions: Vec<(&[u8], &[u8])> = touched
            .iter()
            .filter(|(key, touch)| touch.existed && !self.placed.contains_key(*key))
            .filter_map(|(key, touch)| touch.lost.as_deref().map(|row| (key.as_ref(), row)))
            .collect();
        deletions.sort_unstable();
        output.extend(
            deletions
                .into_iter()
                .map(|(_, row)| (parser.parse(row), ChangeOp::Delete)),
        );
        if output.is_empty() {
            return Ok(None);
        }
        let deletions = output.len() - upserts;
        let mut columns = self.rows.convert_rows(output.iter().map(|(row, _)| *row))?;
        let trailing = columns.split_off(self.spec.leading);
        for (expr, mut pieces) in self.spec.window_exprs.iter().zip(values) {
            pieces.push(new_null_array(expr.field()?.data_type(), deletions));
            let pieces: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
            columns.push(concat(&pieces)?);
        }
        columns.extend(trailing);
        columns.push(op_array(output.iter().map(|(_, op)| *op)));
        Ok(Some(RecordBatch::try_new(
            Arc::clone(&self.schema),
            columns,
        )?))
    }

    /// The runs of rows of one partition whose values the change `points` (sorted) alter:
    /// each run's first and last place, runs that touch merged.
    fn runs(&self, rows: &BTreeMap<Place, Stored>, points: &[Place]) -> Vec<(Place, Place)> {
        let (Some((first, _)), Some((last, _))) = (rows.first_key_value(), rows.last_key_value())
        else {
            return Vec::new();
        };
        // A point alters the rows from `after` rows before it to `before` rows after it
        // (itself included when it holds a row).
        let start_of = |point: &Place| match self.after {
            Reach::Edge => first.clone(),
            Reach::Rows(n) => rows
                .range(..point.clone())
                .rev()
                .take(n)
                .last()
                .map_or_else(|| point.clone(), |(place, _)| place.clone()),
        };
        let end_of = |point: &Place| match self.before {
            Reach::Edge => Some(last.clone()),
            Reach::Rows(n) => rows
                .range(point.clone()..)
                .take(n + 1)
                .last()
                .map(|(place, _)| place.clone()),
        };
        let mut runs: Vec<(Place, Place)> = Vec::new();
        for point in points {
            let start = start_of(point);
            // A point after the partition's last row alters only rows before it.
            let end = end_of(point).unwrap_or_else(|| last.clone());
            if start > end {
                continue;
            }
            match runs.last_mut() {
                Some((_, run_end)) if start <= *run_end => {
                    if end > *run_end {
                        *run_end = end;
                    }
                }
                _ => runs.push((start, end)),
            }
        }
        runs
    }

    /// The rows a run's frames read — the run with `before` rows before it and `after` after
    /// it — and where the run's own rows are among them (first, count).
    fn read_span<'a>(
        &self,
        rows: &'a BTreeMap<Place, Stored>,
        (start, end): &(Place, Place),
    ) -> (Vec<(&'a Place, &'a Stored)>, usize, usize) {
        let mut read: Vec<(&Place, &Stored)> = match self.before {
            Reach::Edge => rows.range(..start.clone()).collect(),
            Reach::Rows(n) => {
                let mut before: Vec<_> = rows.range(..start.clone()).rev().take(n).collect();
                before.reverse();
                before
            }
        };
        let first = read.len();
        read.extend(rows.range((Bound::Included(start.clone()), Bound::Included(end.clone()))));
        let count = read.len() - first;
        let after = rows.range((Bound::Excluded(end.clone()), Bound::Unbounded));
        match self.after {
            Reach::Edge => read.extend(after),
            Reach::Rows(n) => read.extend(after.take(n)),
        }
        (read, first, count)
    }

    /// Every current row (its input columns but `op`) and its arrival: what a checkpoint
    /// keeps.
    fn snapshot_state(&self) -> Result<OperatorState> {
        let parser = self.rows.parser();
        let mut arrivals = Vec::new();
        let mut rows = Vec::new();
        for partition in &self.ordered {
            for ((_, arrival), stored) in partition {
                arrivals.push(*arrival);
                rows.push(parser.parse(&stored.row));
            }
        }
        let mut state = OperatorState::default();
        state.put_value("arrivals", self.arrivals as i64);
        state.put_array("arrival", Arc::new(UInt64Array::from(arrivals)));
        for (index, column) in self.rows.convert_rows(rows)?.into_iter().enumerate() {
            state.put_array(format!("column_{index:03}"), column);
        }
        Ok(state)
    }

    /// Takes back the rows [`Self::snapshot_state`] kept.
    fn restore_state(&mut self, state: &OperatorState) -> Result<()> {
        let kept = RecordBatch::try_new(
            Arc::clone(&self.row_schema),
            state.arrays_with_prefix("column_"),
        )?;
        let arrivals = state.array("arrival")?.as_primitive::<UInt64Type>().clone();
        self.arrivals = state.value("arrivals")? as u64;
        self.partition_index.clear();
        self.ordered.clear();
        self.placed.clear();
        // The kept rows as an all-upsert changelog batch, to evaluate the expressions over
        // the input's columns.
        let mut columns = kept.columns().to_vec();
        columns.insert(
            self.op,
            op_array((0..kept.num_rows()).map(|_| ChangeOp::Insert)),
        );
        let mut input_fields: Vec<Field> = self
            .row_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        input_fields.insert(self.op, crate::changelog::op_field());
        let input = RecordBatch::try_new(Arc::new(Schema::new(input_fields)), columns)?;
        let (keys, partitions, order) = self.encode(&input)?;
        let encoded = self.rows.convert_columns(kept.columns())?;
        for row in 0..kept.num_rows() {
            let value = partitions.as_ref().map_or(&[][..], |p| p.row(row).data());
            let partition = self.partition_of(value);
            let place: Place = (order.row(row).data().into(), arrivals.value(row));
            let key: Box<[u8]> = keys.row(row).data().into();
            let stored = Stored {
                key: key.clone(),
                row: encoded.row(row).data().into(),
            };
            self.ordered[partition].insert(place.clone(), stored);
            self.placed.insert(key, Placed { partition, place });
        }
        Ok(())
    }
}

impl MessageHandler for ChangelogOverState {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        self.push(batch)
    }

    fn on_watermark(&mut self, _watermark: i64) -> Result<Option<RecordBatch>> {
        Ok(None)
    }

    fn snapshot(&mut self) -> Result<Option<OperatorState>> {
        self.snapshot_state().map(Some)
    }

    fn restore(&mut self, state: &OperatorState) -> Result<()> {
        self.restore_state(state)
    }
}
