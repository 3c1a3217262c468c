//! [`FusedAggregates`]: a group table's COUNT, SUM, AVG, MIN and MAX, folded a batch at a time
//! with one pass over each argument column instead of one pass per aggregate.
//!
//! DataFusion's `GroupsAccumulator`s each make their own pass over a batch's group ids and
//! values. With few groups those passes are bound by the latency of updating the same few
//! slots again and again (load, add, store, then load the stored value for the next row of the
//! group); a pass that updates every aggregate of a column at once interleaves independent
//! updates, so their latencies overlap, and it reads the group ids and values once.
//!
//! The aggregates of one argument column (`AVG(price)`, `MIN(price)`, `MAX(price)`) are packed
//! into passes that each update at most one count, one sum, one minimum and one maximum per
//! row; [`fold_dense`] is specialised (const generics) for which of the four a pass updates.
//! `COUNT(*)` rides in the count slot of a pass whose column has no nulls in the batch, as it
//! then counts the same rows.
//!
//! The results are DataFusion's: sums in row order (wrapping for integers), MIN and MAX
//! starting from the type's extreme and replacing on NaN as DataFusion's kernels do, NULL for a
//! group no value reached. Partial states have DataFusion's layout, so either side of a
//! two-phase aggregation may be DataFusion's accumulators. Rows with a null value or outside
//! an aggregate's FILTER take a per-row path; state is plain vectors indexed by group id.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type,
};
use datafusion::common::Result;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::fused_column::{Column, FusedColumn};
use super::fused_member::{Fold, Member, Numeric};
use super::shared::{Placement, SharedAggregates};

/// A column while planning: its type (unknown while only COUNTs use it), the aggregate whose
/// argument it is, and its members as (aggregate, fold, result type).
type PlannedColumn = (Option<DataType>, usize, Vec<(usize, Fold, DataType)>);

/// The fused aggregates of a group table, by argument column.
#[derive(Debug)]
pub(crate) struct FusedAggregates {
    columns: Vec<Box<dyn FusedColumn>>,
    placement: Placement,
}

impl FusedAggregates {
    /// The aggregates of `aggregates` to fuse, or `None` if fewer than two would be (one
    /// aggregate gains nothing from fusing, and DataFusion's accumulator is the reference).
    pub fn plan(aggregates: &[Arc<AggregateFunctionExpr>]) -> Option<Self> {
        let mut columns: Vec<PlannedColumn> = Vec::new();
        let mut rows = Vec::new();
        for (index, aggregate) in aggregates.iter().enumerate() {
            let Some(fold) = Fold::of(aggregate) else {
                continue;
            };
            let output = aggregate.field().data_type().clone();
            let Some(column_type) = fold.column_type(&output) else {
                continue;
            };
            if fold == Fold::Rows {
                rows.push((index, output));
                continue;
            }
            let argument = &aggregate.expressions()[0];
            let same = columns.iter_mut().find(|(data_type, of, _)| {
                let same_expr = aggregates[*of].expressions()[0].as_ref() == argument.as_ref();
                let same_type = match (data_type.as_ref(), column_type.as_ref()) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                same_expr && same_type
            });
            match same {
                Some((data_type, _, members)) => {
                    if data_type.is_none() {
                        *data_type = column_type;
                    }
                    members.push((index, fold, output));
                }
                None => columns.push((column_type, index, vec![(index, fold, output)])),
            }
        }
        // A COUNT alone says nothing of its column's type: DataFusion's accumulator keeps it.
        columns.retain(|(data_type, _, _)| data_type.is_some());
        // COUNT(*) joins a column whose count slot is free, where one is.
        for (index, output) in rows {
            let home = columns
                .iter()
                .position(|(_, _, m)| !m.iter().any(|(_, f, _)| f.uses_count()))
                .or(if columns.is_empty() { None } else { Some(0) });
            if let Some(home) = home {
                columns[home].2.push((index, Fold::Rows, output));
            }
        }
        let fused: usize = columns.iter().map(|(_, _, m)| m.len()).sum();
        if fused < 2 {
            return None;
        }
        let placement = Placement::new(
            aggregates.len(),
            columns
                .iter()
                .map(|(_, _, members)| members.iter().map(|(aggregate, _, _)| *aggregate)),
        );
        let columns = columns
            .into_iter()
            .map(|(data_type, argument_of, members)| {
                let data_type = data_type.unwrap_or(DataType::Int64);
                new_column(&data_type, argument_of, members)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { columns, placement })
    }
}

impl SharedAggregates for FusedAggregates {
    fn holds(&self, index: usize) -> bool {
        self.placement.holds(index)
    }

    fn update(
        &mut self,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        for column in &mut self.columns {
            column.update(arguments, filters, groups, total)?;
        }
        Ok(())
    }

    fn merge(
        &mut self,
        index: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        let (column, member) = self.placement.of(index)?;
        self.columns[column].merge(member, states, groups, total)
    }

    fn emit(&mut self, index: usize, n: usize) -> Result<ArrayRef> {
        let (column, member) = self.placement.of(index)?;
        self.columns[column].cover(n);
        self.columns[column].emit(member, n)
    }

    fn emit_states(&mut self, index: usize, n: usize) -> Result<Vec<ArrayRef>> {
        let (column, member) = self.placement.of(index)?;
        self.columns[column].cover(n);
        self.columns[column].emit_states(member, n)
    }

    fn results_of(&mut self, index: usize, total: usize, groups: &UInt32Array) -> Result<ArrayRef> {
        let (column, member) = self.placement.of(index)?;
        self.columns[column].cover(total);
        self.columns[column].peek(member, groups)
    }

    fn size(&self) -> usize {
        self.columns.iter().map(|c| c.size()).sum()
    }
}

fn new_column(
    data_type: &DataType,
    argument_of: usize,
    members: Vec<(usize, Fold, DataType)>,
) -> Option<Box<dyn FusedColumn>> {
    fn build<T: Numeric>(
        argument_of: usize,
        members: Vec<(usize, Fold, DataType)>,
    ) -> Box<dyn FusedColumn> {
        Box::new(Column::<T> {
            argument_of,
            members: members
                .into_iter()
                .map(|(aggregate, fold, output)| Member::new(aggregate, fold, output))
                .collect(),
        })
    }
    Some(match data_type {
        DataType::Int32 => build::<Int32Type>(argument_of, members),
        DataType::Int64 => build::<Int64Type>(argument_of, members),
        DataType::UInt32 => build::<UInt32Type>(argument_of, members),
        DataType::UInt64 => build::<UInt64Type>(argument_of, members),
        DataType::Float32 => build::<Float32Type>(argument_of, members),
        DataType::Float64 => build::<Float64Type>(argument_of, members),
        _ => return None,
    })
}
#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{
        Array, AsArray, Float64Array, Int32Array, Int64Array, UInt32Array,
    };
    use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::common::ScalarValue;
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::logical_expr::{AggregateUDF, EmitTo, GroupsAccumulator};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::{col, lit};

    use super::*;
    use crate::kernels::GroupTable;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("i", DataType::Int64, true),
            Field::new("s", DataType::Int32, true),
        ]))
    }

    fn aggregate(
        function: Arc<AggregateUDF>,
        argument: Arc<dyn PhysicalExpr>,
        name: &str,
    ) -> Arc<AggregateFunctionExpr> {
        Arc::new(
            AggregateExprBuilder::new(function, vec![argument])
                .schema(schema())
                .alias(name)
                .build()
                .unwrap(),
        )
    }

    /// Every fused fold over each column type, `COUNT(*)` twice (one rides a count slot).
    fn aggregates() -> Vec<Arc<AggregateFunctionExpr>> {
        let s = schema();
        let (x, i, small) = (
            col("x", &s).unwrap(),
            col("i", &s).unwrap(),
            col("s", &s).unwrap(),
        );
        vec![
            aggregate(count_udaf(), lit(1i64), "rows"),
            aggregate(avg_udaf(), Arc::clone(&x), "avg_x"),
            aggregate(min_udaf(), Arc::clone(&x), "min_x"),
            aggregate(max_udaf(), Arc::clone(&x), "max_x"),
            aggregate(sum_udaf(), Arc::clone(&x), "sum_x"),
            aggregate(count_udaf(), x, "count_x"),
            aggregate(sum_udaf(), Arc::clone(&i), "sum_i"),
            aggregate(min_udaf(), Arc::clone(&i), "min_i"),
            aggregate(max_udaf(), i, "max_i"),
            aggregate(count_udaf(), lit(1i64), "rows_again"),
            aggregate(max_udaf(), Arc::clone(&small), "max_s"),
            aggregate(min_udaf(), small, "min_s"),
        ]
    }

    /// A small deterministic generator.
    struct Random(u64);

    impl Random {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    /// A batch of `rows` rows over `keys` keys (one in eight null); `nulls`: one value in four
    /// is null. Floats include NaN, infinities and huge values.
    fn batch(random: &mut Random, rows: usize, keys: u64, nulls: bool) -> RecordBatch {
        let null = |r: &mut Random| nulls && r.next(4) == 0;
        let k: Int64Array = (0..rows)
            .map(|_| (random.next(8) != 0).then(|| random.next(keys) as i64))
            .collect();
        let x: Float64Array = (0..rows)
            .map(|_| {
                (!null(random)).then(|| match random.next(20) {
                    0 => f64::NAN,
                    1 => f64::INFINITY,
                    2 => f64::NEG_INFINITY,
                    3 => 1e300,
                    n => n as f64 * 0.1 - 1.0,
                })
            })
            .collect();
        let i: Int64Array = (0..rows)
            .map(|_| (!null(random)).then(|| random.next(1000) as i64 - 500))
            .collect();
        let small: Int32Array = (0..rows)
            .map(|_| (!null(random)).then(|| random.next(100) as i32 - 50))
            .collect();
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(k), Arc::new(x), Arc::new(i), Arc::new(small)],
        )
        .unwrap()
    }

    fn arguments(
        aggregates: &[Arc<AggregateFunctionExpr>],
        batch: &RecordBatch,
    ) -> Vec<Vec<ArrayRef>> {
        aggregates
            .iter()
            .map(|a| {
                a.expressions()
                    .iter()
                    .map(|e| {
                        e.evaluate(batch)
                            .unwrap()
                            .into_array(batch.num_rows())
                            .unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    fn datafusion_accumulators(
        aggregates: &[Arc<AggregateFunctionExpr>],
    ) -> Vec<Box<dyn GroupsAccumulator>> {
        aggregates
            .iter()
            .map(|a| a.create_groups_accumulator().unwrap())
            .collect()
    }

    fn shown(arrays: &[ArrayRef]) -> Vec<String> {
        arrays
            .iter()
            .map(|a| format!("{}: {a:?}", a.data_type()))
            .collect()
    }

    /// Filters for every other aggregate: rows whose `i` is even (null where `i` is).
    fn filters(batch: &RecordBatch, count: usize) -> Vec<Option<BooleanArray>> {
        let i = batch.column(2).as_primitive::<Int64Type>();
        let even: BooleanArray = i.iter().map(|v| v.map(|v| v % 2 == 0)).collect();
        (0..count)
            .map(|a| (a % 2 == 1).then(|| even.clone()))
            .collect()
    }

    /// Feeds the same batches to a group table (fused) and to DataFusion's accumulators;
    /// returns both sides' results (or states) of the first 7 groups, then of the rest.
    fn run(seed: u64, nulls: bool, filtered: bool, states: bool) -> (Vec<String>, Vec<String>) {
        let aggregates = aggregates();
        let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut table = GroupTable::try_new(&key_schema, &aggregates).unwrap();
        let mut reference = datafusion_accumulators(&aggregates);
        let mut random = Random(seed);
        for (round, rows) in [0usize, 1, 700, 3000, 64].into_iter().enumerate() {
            let batch = batch(&mut random, rows, 10 + 20 * round as u64, nulls);
            let arguments = arguments(&aggregates, &batch);
            let filters = if filtered {
                filters(&batch, aggregates.len())
            } else {
                vec![None; aggregates.len()]
            };
            let keys = [Arc::clone(batch.column(0))];
            table.update(&keys, &arguments, &filters, rows).unwrap();
            let groups = table.len();
            let ids = table.last_group_ids(rows).to_vec();
            for ((accumulator, arguments), filter) in
                reference.iter_mut().zip(&arguments).zip(&filters)
            {
                accumulator
                    .update_batch(arguments, &ids, filter.as_ref(), groups)
                    .unwrap();
            }
        }
        let mut fused = Vec::new();
        let mut expected = Vec::new();
        for emit_to in [EmitTo::First(7), EmitTo::All] {
            let mut reference_out = Vec::new();
            for accumulator in &mut reference {
                if states {
                    reference_out.extend(accumulator.state(emit_to).unwrap());
                } else {
                    reference_out.push(accumulator.evaluate(emit_to).unwrap());
                }
            }
            let table_out = if states {
                table.emit_states(emit_to).unwrap().1.concat()
            } else {
                table.emit(emit_to).unwrap().1
            };
            fused.extend(shown(&table_out));
            expected.extend(shown(&reference_out));
        }
        (fused, expected)
    }

    #[test]
    fn the_fused_aggregates_are_planned_for_count_sum_avg_min_max() {
        let aggregates = aggregates();
        let fused = FusedAggregates::plan(&aggregates).unwrap();
        assert!((0..aggregates.len()).all(|a| fused.holds(a)));
        // x, i and s: three columns; both COUNT(*)s ride in them.
        assert_eq!(fused.columns.len(), 3);
    }

    #[test]
    fn other_aggregates_keep_datafusion_accumulators() {
        let s = schema();
        let x = col("x", &s).unwrap();
        let distinct = Arc::new(
            AggregateExprBuilder::new(sum_udaf(), vec![Arc::clone(&x)])
                .schema(schema())
                .alias("distinct_sum")
                .distinct()
                .build()
                .unwrap(),
        );
        let aggregates = vec![
            aggregate(count_udaf(), col("k", &s).unwrap(), "count_k"),
            distinct,
            aggregate(count_udaf(), lit(ScalarValue::Int64(None)), "count_null"),
            aggregate(sum_udaf(), Arc::clone(&x), "sum_x"),
            aggregate(max_udaf(), x, "max_x"),
        ];
        let fused = FusedAggregates::plan(&aggregates).unwrap();
        // COUNT(k) alone on its column, DISTINCT and COUNT(NULL) are DataFusion's.
        let fuses: Vec<bool> = (0..aggregates.len()).map(|a| fused.holds(a)).collect();
        assert_eq!(fuses, [false, false, false, true, true]);
        // A single aggregate gains nothing from fusing.
        assert!(FusedAggregates::plan(&aggregates[3..4]).is_none());
    }

    #[test]
    fn results_equal_datafusion_accumulators_without_nulls() {
        for seed in 0..4 {
            let (fused, expected) = run(seed, false, false, false);
            assert_eq!(fused, expected, "seed {seed}");
        }
    }

    #[test]
    fn results_equal_datafusion_accumulators_with_nulls_nan_and_filters() {
        for (seed, filtered) in [(10, false), (11, true), (12, true)] {
            let (fused, expected) = run(seed, true, filtered, false);
            assert_eq!(fused, expected, "seed {seed}");
        }
    }

    #[test]
    fn partial_states_equal_datafusion_accumulators() {
        for (seed, nulls) in [(20, false), (21, true)] {
            let (fused, expected) = run(seed, nulls, nulls, true);
            assert_eq!(fused, expected, "seed {seed}");
        }
    }

    #[test]
    fn merged_states_equal_datafusion_merges() {
        let aggregates = aggregates();
        let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut random = Random(30);
        let mut table = GroupTable::try_new(&key_schema, &aggregates).unwrap();
        let mut reference = datafusion_accumulators(&aggregates);
        for nulls in [false, true, false] {
            // Partial states of one batch, from DataFusion's accumulators.
            let batch = batch(&mut random, 500, 30, nulls);
            let mut partial = GroupTable::try_new(&key_schema, &[]).unwrap();
            let ids = partial
                .intern(&[Arc::clone(batch.column(0))], 500)
                .unwrap()
                .to_vec();
            let mut producers = datafusion_accumulators(&aggregates);
            let arguments = arguments(&aggregates, &batch);
            for (producer, arguments) in producers.iter_mut().zip(&arguments) {
                producer
                    .update_batch(arguments, &ids, None, partial.len())
                    .unwrap();
            }
            let states: Vec<Vec<ArrayRef>> = producers
                .iter_mut()
                .map(|p| p.state(EmitTo::All).unwrap())
                .collect();
            let keys = partial.emit_keys(EmitTo::All).unwrap();
            let rows = keys[0].len();
            table.merge(&keys, &states, rows).unwrap();
            let merged_ids = table.last_group_ids(rows).to_vec();
            for (accumulator, states) in reference.iter_mut().zip(&states) {
                accumulator
                    .merge_batch(states, &merged_ids, table.len())
                    .unwrap();
            }
        }
        let fused = table.emit(EmitTo::All).unwrap().1;
        let expected: Vec<ArrayRef> = reference
            .iter_mut()
            .map(|a| a.evaluate(EmitTo::All).unwrap())
            .collect();
        assert_eq!(shown(&fused), shown(&expected));
    }

    #[test]
    fn current_values_leave_the_state_as_it_is() {
        let aggregates = aggregates();
        let key_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let mut table = GroupTable::try_new(&key_schema, &aggregates).unwrap();
        let batch = batch(&mut Random(40), 300, 5, true);
        let arguments = arguments(&aggregates, &batch);
        let filters = vec![None; aggregates.len()];
        let keys = [Arc::clone(batch.column(0))];
        table.update(&keys, &arguments, &filters, 300).unwrap();
        let groups = UInt32Array::from(vec![2, 0]);
        let peeked = table.current_values(&groups).unwrap();
        let all = table.emit(EmitTo::All).unwrap().1;
        let expected: Vec<ArrayRef> = all
            .iter()
            .map(|a| datafusion::arrow::compute::take(a.as_ref(), &groups, None).unwrap())
            .collect();
        assert_eq!(shown(&peeked), shown(&expected));
    }
}
