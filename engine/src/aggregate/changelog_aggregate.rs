//! [`ChangelogAggregateExec`]: a GROUP BY over a changelog — an aggregation that reads the
//! upsert changelog of another one (`SELECT category, AVG(final) FROM (SELECT id, category,
//! MAX(price) AS final … GROUP BY id, category) GROUP BY category` over an endless stream).
//!
//! Its input's rows are upserts and deletions keyed by the changelog's key (the inner
//! aggregation's GROUP BY keys): a row replaces the key's earlier row. So the operator keeps,
//! per input key, the row it counts now (its group and its aggregate arguments, row-encoded),
//! and a retractable accumulator per aggregate and group. An upsert retracts the key's
//! earlier row from its group, if it had one, and adds the new row to its group; a deletion
//! retracts it. Within a batch, each group's additions are applied before its retractions
//! (a row added and replaced in one batch is then retracted after it was added).
//!
//! After each input batch, every group it touched goes out as a changelog row of its own,
//! keyed by the outer GROUP BY keys: `+I` the first time, `+U` after, and `-D` when its
//! last counted row is retracted (its accumulators then start afresh). An aggregation
//! without GROUP BY keys keeps its one row, updated to the empty aggregates (COUNT 0)
//! rather than deleted.
//!
//! The aggregates are those whose accumulators can retract: DataFusion's sliding
//! accumulators where they support `retract_batch` (COUNT, SUM, AVG, variance and standard
//! deviation, …), and MIN and MAX through [`RetractableExtremum`], a count of each value
//! ordered by its row encoding. DISTINCT and FILTER are refused at planning.
//!
//! One input key's rows must reach one output partition in order: the input exchange hashes
//! on the outer keys when they are all columns of the changelog's key (a key's group never
//! changes), and otherwise feeds one stream.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, UInt32Array, UInt64Array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, Rows};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{HashMap, Result, ScalarValue, internal_err, plan_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};

use super::spec::GroupExpr;
use crate::changelog::{ChangeOp, OP_COLUMN, op_array, op_column, op_field};
use crate::checkpoint::{OperatorState, PassedBarriers};
use crate::exchange::StreamExchangeExec;
use crate::message_loop::{MessageHandler, OperatorCheckpoint, drive_checkpointed};
use crate::plan_util::{evaluate, stateful_properties, visit_expressions};
use crate::row_format::TypedRowConverter;

/// See the module documentation.
#[derive(Debug)]
pub struct ChangelogAggregateExec {
    input: Arc<dyn ExecutionPlan>,
    exchange: Arc<StreamExchangeExec>,
    /// The checkpoint barriers each output partition has passed.
    passed: Arc<PassedBarriers>,
    /// The input's columns that key its changelog.
    input_key: Vec<usize>,
    group_by: Vec<GroupExpr>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl ChangelogAggregateExec {
    /// Aggregates the changelog `exchange` brings, keyed by its columns `input_key`, by
    /// `group_by`; `aggregate_schema` is DataFusion's aggregate schema (the output without
    /// `op`).
    pub fn try_new(
        exchange: Arc<StreamExchangeExec>,
        input_key: Vec<usize>,
        group_by: Vec<GroupExpr>,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        aggregate_schema: &SchemaRef,
    ) -> Result<Self> {
        let input: Arc<dyn ExecutionPlan> = Arc::clone(&exchange) as _;
        if op_column(&input.schema()).is_none() {
            return internal_err!("ChangelogAggregateExec reads a changelog");
        }
        for aggregate in &aggregates {
            if aggregate.is_distinct() {
                return plan_err!(
                    "{}(DISTINCT …) over a changelog is not supported: an aggregation over a changelog retracts the rows it replaces, and DISTINCT cannot",
                    aggregate.fun().name()
                );
            }
            retractable_accumulator(aggregate)?;
        }
        let mut fields: Vec<Field> = aggregate_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(op_field());
        let schema = Arc::new(Schema::new(fields));
        let properties = stateful_properties(&input, &schema);
        let partitions = properties.partitioning.partition_count();
        Ok(Self {
            input,
            exchange,
            passed: Arc::new(PassedBarriers::new(partitions)),
            input_key,
            group_by,
            aggregates,
            schema,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    pub fn group_by(&self) -> &[GroupExpr] {
        &self.group_by
    }

    /// The checkpoint barriers each output partition has passed on.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }
}

/// Whether `aggregate` runs on a [`RetractableExtremum`], whose state a checkpoint rebuilds
/// from the rows counted rather than keeps.
fn is_extremum(aggregate: &AggregateFunctionExpr) -> bool {
    matches!(
        aggregate.fun().name().to_ascii_lowercase().as_str(),
        "min" | "max"
    )
}

/// An accumulator of `aggregate` that can retract rows in any order.
fn retractable_accumulator(aggregate: &AggregateFunctionExpr) -> Result<Box<dyn Accumulator>> {
    if is_extremum(aggregate) {
        let max = aggregate.fun().name().eq_ignore_ascii_case("max");
        let data_type = aggregate.field().data_type().clone();
        return Ok(Box::new(RetractableExtremum::try_new(data_type, max)?));
    }
    let accumulator = aggregate.create_sliding_accumulator()?;
    if !accumulator.supports_retract_batch() {
        return plan_err!(
            "{} over a changelog is not supported: an aggregation over a changelog retracts the rows it replaces; COUNT, SUM, AVG, MIN, MAX, STDDEV and VAR can",
            aggregate.fun().name()
        );
    }
    Ok(accumulator)
}

impl DisplayAs for ChangelogAggregateExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let input_schema = self.input.schema();
        let key: Vec<&str> = self
            .input_key
            .iter()
            .map(|&c| input_schema.field(c).name().as_str())
            .collect();
        let group_by: Vec<&str> = self.group_by.iter().map(|(_, n)| n.as_str()).collect();
        let aggregates: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "ChangelogAggregateExec: gby=[{}], aggr=[{}], reads a changelog keyed by ({}): each row replaces its key's earlier one, retracted from its group",
            group_by.join(", "),
            aggregates.join(", "),
            key.join(", ")
        )
    }
}

impl ExecutionPlan for ChangelogAggregateExec {
    fn name(&self) -> &str {
        "ChangelogAggregateExec"
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
        let expressions: Vec<Arc<dyn PhysicalExpr>> = self
            .group_by
            .iter()
            .map(|(e, _)| Arc::clone(e))
            .chain(self.aggregates.iter().flat_map(|a| a.expressions()))
            .collect();
        visit_expressions(&expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Ok([input]) = <[_; 1]>::try_from(children) else {
            return internal_err!("ChangelogAggregateExec takes one child");
        };
        let exchange = StreamExchangeExec::from_plan(input, "ChangelogAggregateExec")?;
        let aggregate_schema = Arc::new(Schema::new(
            self.schema.fields()[..self.schema.fields().len() - 1].to_vec(),
        ));
        Ok(Arc::new(Self::try_new(
            exchange,
            self.input_key.clone(),
            self.group_by.clone(),
            self.aggregates.clone(),
            &aggregate_schema,
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
        let reservation = MemoryConsumer::new(format!("ChangelogAggregateExec[{partition}]"))
            .register(context.memory_pool());
        let messages = self
            .exchange
            .execute_messages(partition, Arc::clone(&context))?;
        let state = ChangelogGroups::try_new(self, partition, reservation)?;
        let checkpoint = OperatorCheckpoint::of(
            &context,
            self,
            partition,
            &self.passed,
            Arc::clone(&self.schema),
        )?;
        let outputs = drive_checkpointed(messages, state, checkpoint);
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            outputs,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The row an input key counts now: its group and its aggregate arguments.
struct Counted {
    group: usize,
    arguments: OwnedRow,
}

/// One output group.
struct Group {
    key: OwnedRow,
    accumulators: Vec<Box<dyn Accumulator>>,
    /// Input keys whose row it counts.
    rows: usize,
    /// Whether its row is out (and not deleted since).
    emitted: bool,
}

/// One output partition's state.
struct ChangelogGroups {
    input_key: Vec<usize>,
    group_by: Vec<Arc<dyn PhysicalExpr>>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Per aggregate, its arguments' positions among all the aggregates' arguments.
    argument_ranges: Vec<std::ops::Range<usize>>,
    key_rows: TypedRowConverter,
    group_rows: TypedRowConverter,
    argument_rows: TypedRowConverter,
    /// Per input key (row-encoded), the row it counts now.
    counted: HashMap<Box<[u8]>, Counted>,
    group_index: HashMap<Box<[u8]>, usize>,
    groups: Vec<Group>,
    schema: SchemaRef,
    op: usize,
    reservation: MemoryReservation,
    bytes: usize,
    name: String,
    baseline: BaselineMetrics,
}

impl ChangelogGroups {
    fn try_new(
        exec: &ChangelogAggregateExec,
        partition: usize,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        let input_schema = exec.input.schema();
        let Some(op) = op_column(&input_schema) else {
            return internal_err!("ChangelogAggregateExec reads a changelog");
        };
        // No columns (a whole-stream aggregation's key, COUNT(*)'s arguments) are encoded
        // as one constant column, so that each row has its row.
        let rows_of = |types: Vec<DataType>| {
            TypedRowConverter::try_new(match types.is_empty() {
                true => vec![DataType::Boolean],
                false => types,
            })
        };
        let key_types = exec
            .input_key
            .iter()
            .map(|&c| input_schema.field(c).data_type().clone())
            .collect();
        let group_types = exec
            .group_by
            .iter()
            .map(|(e, _)| e.data_type(&input_schema))
            .collect::<Result<Vec<_>>>()?;
        let mut argument_types = Vec::new();
        let mut argument_ranges = Vec::new();
        for aggregate in &exec.aggregates {
            let start = argument_types.len();
            for argument in aggregate.expressions() {
                argument_types.push(argument.data_type(&input_schema)?);
            }
            argument_ranges.push(start..argument_types.len());
        }
        Ok(Self {
            input_key: exec.input_key.clone(),
            group_by: exec.group_by.iter().map(|(e, _)| Arc::clone(e)).collect(),
            aggregates: exec.aggregates.clone(),
            argument_ranges,
            key_rows: rows_of(key_types)?,
            group_rows: rows_of(group_types)?,
            argument_rows: rows_of(argument_types)?,
            counted: HashMap::default(),
            group_index: HashMap::default(),
            groups: Vec::new(),
            schema: Arc::clone(&exec.schema),
            op,
            reservation,
            bytes: 0,
            name: format!("ChangelogAggregateExec[{partition}]"),
            baseline: BaselineMetrics::new(&exec.metrics, partition),
        })
    }

    fn fresh_accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        self.aggregates
            .iter()
            .map(|a| retractable_accumulator(a))
            .collect()
    }

    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(None);
        }
        let ops = batch.column(self.op).as_string_opt::<i32>().map(|ops| {
            (0..rows)
                .map(|row| ChangeOp::parse(ops.value(row)))
                .collect::<Vec<_>>()
        });
        let Some(ops) = ops else {
            return internal_err!("a changelog's {OP_COLUMN} column is not a string");
        };
        let keys: Vec<ArrayRef> = self
            .input_key
            .iter()
            .map(|&c| Arc::clone(batch.column(c)))
            .collect();
        let keys = encode(&self.key_rows, keys, rows)?;
        let group_values = evaluate(&self.group_by, batch)?;
        let group_values = encode(&self.group_rows, group_values, rows)?;
        let mut arguments = Vec::new();
        for aggregate in &self.aggregates {
            arguments.extend(evaluate(&aggregate.expressions(), batch)?);
        }
        let argument_values = encode(&self.argument_rows, arguments.clone(), rows)?;
        // Per group touched, in the order first touched: the batch's rows it adds, and the
        // arguments of the rows it retracts.
        let mut touched: Vec<usize> = Vec::new();
        let mut changes: HashMap<usize, (Vec<u32>, Vec<OwnedRow>)> = HashMap::default();
        for (row, op) in ops.into_iter().enumerate() {
            let Some(op) = op else {
                return plan_err!("a changelog row's op is not +I, +U or -D");
            };
            let key = keys.row(row);
            if let Some(earlier) = self.counted.remove(key.as_ref()) {
                let group = earlier.group;
                self.groups[group].rows -= 1;
                self.bytes -= key.as_ref().len() + 64 + row_bytes(&earlier.arguments);
                changes
                    .entry(group)
                    .or_insert_with(|| {
                        touched.push(group);
                        Default::default()
                    })
                    .1
                    .push(earlier.arguments);
            }
            if op == ChangeOp::Delete {
                continue;
            }
            let group = self.group_of(&group_values, row)?;
            self.groups[group].rows += 1;
            changes
                .entry(group)
                .or_insert_with(|| {
                    touched.push(group);
                    Default::default()
                })
                .0
                .push(row as u32);
            let arguments = argument_values.row(row).owned();
            let key: Box<[u8]> = key.as_ref().into();
            self.bytes += key.len() + 64 + row_bytes(&arguments);
            self.counted.insert(key, Counted { group, arguments });
        }
        let mut output_ops = Vec::with_capacity(touched.len());
        let mut output_groups = Vec::with_capacity(touched.len());
        let mut output_values: Vec<Vec<ScalarValue>> = vec![Vec::new(); self.aggregates.len()];
        for group in touched {
            let Some((added, retracted)) = changes.remove(&group) else {
                continue;
            };
            self.apply(group, &arguments, &added, &retracted)?;
            if self.groups[group].rows == 0 {
                // Start afresh, not from the sums of what was added and retracted.
                self.groups[group].accumulators = self.fresh_accumulators()?;
            }
            // An aggregate over the whole input has its one row even when nothing is
            // counted (COUNT 0), as in SQL: it is updated, never deleted.
            let whole_input = self.group_by.is_empty();
            let op = match (self.groups[group].rows, self.groups[group].emitted) {
                (0, false) if !whole_input => continue,
                (0, true) if !whole_input => ChangeOp::Delete,
                (_, emitted) => ChangeOp::of_upsert(!emitted),
            };
            let entry = &mut self.groups[group];
            entry.emitted = op != ChangeOp::Delete;
            for (values, accumulator) in output_values.iter_mut().zip(&mut entry.accumulators) {
                values.push(accumulator.evaluate()?);
            }
            output_ops.push(op);
            output_groups.push(group);
        }
        self.account()?;
        if output_ops.is_empty() {
            return Ok(None);
        }
        let mut columns = match self.group_by.is_empty() {
            true => Vec::new(),
            false => self
                .group_rows
                .convert_rows(output_groups.iter().map(|&g| self.groups[g].key.row()))?,
        };
        for (values, field) in output_values
            .into_iter()
            .zip(&self.schema.fields()[self.group_by.len()..])
        {
            let array = ScalarValue::iter_to_array(values)?;
            columns.push(match array.data_type() == field.data_type() {
                true => array,
                false => datafusion::arrow::compute::cast(&array, field.data_type())?,
            });
        }
        columns.push(op_array(output_ops));
        let output = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        self.baseline.record_output(output.num_rows());
        Ok(Some(output))
    }

    /// The group of `values`' row `row`, created if new.
    fn group_of(&mut self, values: &Rows, row: usize) -> Result<usize> {
        let value = values.row(row);
        if let Some(&group) = self.group_index.get(value.as_ref()) {
            return Ok(group);
        }
        let group = self.groups.len();
        let key = value.owned();
        self.bytes += 2 * row_bytes(&key);
        self.group_index.insert(value.as_ref().into(), group);
        self.groups.push(Group {
            key,
            accumulators: self.fresh_accumulators()?,
            rows: 0,
            emitted: false,
        });
        Ok(group)
    }

    /// Adds the batch's rows `added` to `group`, then retracts the rows `retracted`.
    fn apply(
        &mut self,
        group: usize,
        arguments: &[ArrayRef],
        added: &[u32],
        retracted: &[OwnedRow],
    ) -> Result<()> {
        let added = UInt32Array::from(added.to_vec());
        let retracted = match retracted.is_empty() {
            true => Vec::new(),
            false => self
                .argument_rows
                .convert_rows(retracted.iter().map(|r| r.row()))?,
        };
        let entry = &mut self.groups[group];
        for (accumulator, range) in entry.accumulators.iter_mut().zip(&self.argument_ranges) {
            if !added.is_empty() {
                let values = arguments[range.clone()]
                    .iter()
                    .map(|a| Ok(take(a.as_ref(), &added, None)?))
                    .collect::<Result<Vec<_>>>()?;
                accumulator.update_batch(&values)?;
            }
            if !retracted.is_empty() {
                accumulator.retract_batch(&retracted[range.clone()])?;
            }
        }
        Ok(())
    }

    /// What a checkpoint keeps: each group's key, row count, whether its row is out and
    /// its accumulators' states (MIN and MAX are rebuilt from the rows counted), and each
    /// input key's counted row.
    fn snapshot_state(&mut self) -> Result<OperatorState> {
        let mut state = OperatorState::default();
        let keys = self.groups.iter().map(|g| g.key.as_ref());
        state.put_array("group_key", Arc::new(BinaryArray::from_iter_values(keys)));
        let rows = self.groups.iter().map(|g| g.rows as u64);
        state.put_array("group_rows", Arc::new(UInt64Array::from_iter_values(rows)));
        let emitted: BooleanArray = self.groups.iter().map(|g| Some(g.emitted)).collect();
        state.put_array("group_emitted", Arc::new(emitted));
        let mut states = Vec::with_capacity(self.aggregates.len());
        for (index, aggregate) in self.aggregates.iter().enumerate() {
            if is_extremum(aggregate) {
                states.push(Vec::new());
                continue;
            }
            let mut rows: Vec<Vec<ScalarValue>> = Vec::with_capacity(self.groups.len());
            for group in &mut self.groups {
                rows.push(group.accumulators[index].state()?);
            }
            // A sliding accumulator's state may be wider than the aggregate's state fields
            // (SUM keeps its count to retract to NULL).
            let width = rows.first().map_or(0, Vec::len);
            let columns = (0..width)
                .map(|column| {
                    ScalarValue::iter_to_array(rows.iter().map(|row| row[column].clone()))
                })
                .collect::<Result<Vec<_>>>()?;
            states.push(columns);
        }
        state.put_aggregate_states("accumulator", states);
        let (mut keys, mut groups, mut arguments) = (Vec::new(), Vec::new(), Vec::new());
        for (key, counted) in &self.counted {
            keys.push(key.as_ref());
            groups.push(counted.group as u64);
            arguments.push(counted.arguments.as_ref());
        }
        state.put_array("counted_key", Arc::new(BinaryArray::from_iter_values(keys)));
        state.put_array("counted_group", Arc::new(UInt64Array::from(groups)));
        state.put_array(
            "counted_arguments",
            Arc::new(BinaryArray::from_iter_values(arguments)),
        );
        Ok(state)
    }

    /// Takes back what [`Self::snapshot_state`] kept.
    fn restore_state(&mut self, state: &OperatorState) -> Result<()> {
        let keys = state.array("group_key")?.as_binary::<i32>().clone();
        let rows = state
            .array("group_rows")?
            .as_primitive::<UInt64Type>()
            .clone();
        let emitted = state.array("group_emitted")?.as_boolean().clone();
        let states = state.aggregate_states("accumulator")?;
        let group_parser = self.group_rows.parser();
        for group in 0..keys.len() {
            let mut accumulators = self.fresh_accumulators()?;
            for (accumulator, columns) in accumulators.iter_mut().zip(&states) {
                if !columns.is_empty() {
                    let row: Vec<ArrayRef> = columns.iter().map(|c| c.slice(group, 1)).collect();
                    accumulator.merge_batch(&row)?;
                }
            }
            let key = group_parser.parse(keys.value(group)).owned();
            self.bytes += 2 * row_bytes(&key);
            self.group_index.insert(keys.value(group).into(), group);
            self.groups.push(Group {
                key,
                accumulators,
                rows: rows.value(group) as usize,
                emitted: emitted.value(group),
            });
        }
        let counted_keys = state.array("counted_key")?.as_binary::<i32>().clone();
        let counted_groups = state
            .array("counted_group")?
            .as_primitive::<UInt64Type>()
            .clone();
        let counted_arguments = state.array("counted_arguments")?.as_binary::<i32>().clone();
        let argument_parser = self.argument_rows.parser();
        let mut per_group: HashMap<usize, Vec<OwnedRow>> = HashMap::default();
        for row in 0..counted_keys.len() {
            let group = counted_groups.value(row) as usize;
            let arguments = argument_parser.parse(counted_arguments.value(row)).owned();
            per_group.entry(group).or_default().push(arguments.clone());
            let key: Box<[u8]> = counted_keys.value(row).into();
            self.bytes += key.len() + 64 + row_bytes(&arguments);
            self.counted.insert(key, Counted { group, arguments });
        }
        // MIN and MAX count each value they hold: the rows counted give them back.
        let extrema: Vec<usize> = (0..self.aggregates.len())
            .filter(|&index| is_extremum(&self.aggregates[index]))
            .collect();
        if !extrema.is_empty() {
            for (group, arguments) in per_group {
                let values = self
                    .argument_rows
                    .convert_rows(arguments.iter().map(|row| row.row()))?;
                let Some(entry) = self.groups.get_mut(group) else {
                    return internal_err!("checkpoint: a counted row of group {group}, not kept");
                };
                for &index in &extrema {
                    let range = self.argument_ranges[index].clone();
                    entry.accumulators[index].update_batch(&values[range])?;
                }
            }
        }
        self.account()
    }

    fn account(&mut self) -> Result<()> {
        if let Err(e) = self.reservation.try_resize(self.bytes) {
            return plan_err!(
                "{} keeps more rows than the memory limit allows ({} bytes): raise the limit ({e})",
                self.name,
                self.bytes
            );
        }
        Ok(())
    }
}

impl MessageHandler for ChangelogGroups {
    fn on_batch(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        ChangelogGroups::on_batch(self, batch)
    }

    /// A changelog is applied as it comes: watermarks change nothing.
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

/// `columns`' `rows` rows, encoded by `converter` (one constant column for none).
fn encode(converter: &RowConverter, columns: Vec<ArrayRef>, rows: usize) -> Result<Rows> {
    let columns = match columns.is_empty() {
        true => vec![Arc::new(BooleanArray::from(vec![true; rows])) as ArrayRef],
        false => columns,
    };
    Ok(converter.convert_columns(&columns)?)
}

/// Bytes an owned row holds, with its map entry's share.
fn row_bytes(row: &OwnedRow) -> usize {
    row.as_ref().len() + 64
}

/// MIN or MAX that can retract any value it holds: a count per distinct value, ordered by
/// the value's row encoding (which orders as the values do).
#[derive(Debug)]
pub struct RetractableExtremum {
    rows: TypedRowConverter,
    counts: BTreeMap<Vec<u8>, usize>,
    /// What the held values cost, kept as they come and go: `size` is asked after updates,
    /// and a sum over every held value made a group of many values quadratic.
    held_bytes: usize,
    data_type: DataType,
    max: bool,
}

impl RetractableExtremum {
    pub fn try_new(data_type: DataType, max: bool) -> Result<Self> {
        Ok(Self {
            rows: TypedRowConverter::try_new(vec![data_type.clone()])?,
            counts: BTreeMap::new(),
            held_bytes: 0,
            data_type,
            max,
        })
    }
}

impl RetractableExtremum {
    /// The row encodings of `values`' first column, without its nulls.
    fn encoded(&self, values: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        let Some(values) = values.first() else {
            return Ok(Vec::new());
        };
        let rows = self.rows.convert_columns(&[Arc::clone(values)])?;
        let nulls = values.logical_nulls();
        Ok(rows
            .iter()
            .enumerate()
            .filter(|(i, _)| nulls.as_ref().is_none_or(|n| n.is_valid(*i)))
            .map(|(_, row)| row.as_ref().to_vec())
            .collect())
    }
}

impl RetractableExtremum {
    /// What a held value costs: its bytes and the map's entry.
    fn entry_bytes(value: &[u8]) -> usize {
        value.len() + 48
    }
}

impl Accumulator for RetractableExtremum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for value in self.encoded(values)? {
            let bytes = Self::entry_bytes(&value);
            let count = self.counts.entry(value).or_default();
            if *count == 0 {
                self.held_bytes += bytes;
            }
            *count += 1;
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for value in self.encoded(values)? {
            match self.counts.get_mut(&value) {
                Some(count) if *count > 1 => *count -= 1,
                Some(_) => {
                    self.counts.remove(&value);
                    self.held_bytes -= Self::entry_bytes(&value);
                }
                None => return internal_err!("MIN/MAX retracted a value it does not hold"),
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let extreme = match self.max {
            true => self.counts.keys().next_back(),
            false => self.counts.keys().next(),
        };
        let Some(bytes) = extreme else {
            return ScalarValue::try_from(&self.data_type);
        };
        let parser = self.rows.parser();
        let row = parser.parse(bytes);
        let arrays = self.rows.convert_rows([row])?;
        ScalarValue::try_from_array(&arrays[0], 0)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.held_bytes
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    /// The size follows the distinct values held as they are added and retracted, and the
    /// extremum follows them too.
    #[test]
    fn a_retractable_extremum_s_size_follows_its_distinct_values() -> Result<()> {
        let mut max = RetractableExtremum::try_new(DataType::Int64, true)?;
        let empty = max.size();
        let values = |v: &[i64]| -> Vec<ArrayRef> { vec![Arc::new(Int64Array::from(v.to_vec()))] };
        max.update_batch(&values(&[5, 9, 5, 7]))?;
        let three = max.size() - empty;
        assert_eq!(max.evaluate()?, ScalarValue::Int64(Some(9)));
        max.retract_batch(&values(&[9, 5]))?;
        assert_eq!(max.size() - empty, three * 2 / 3, "5 and 7 held");
        assert_eq!(max.evaluate()?, ScalarValue::Int64(Some(7)));
        max.retract_batch(&values(&[5, 7]))?;
        assert_eq!(max.size(), empty);
        assert_eq!(max.evaluate()?, ScalarValue::Int64(None));
        Ok(())
    }
}
