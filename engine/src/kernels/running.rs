//! [`RunningAggregates`]: per-record changelog kernels for COUNT, SUM, AVG, MIN and MAX, and
//! the per-group states of open session windows.
//!
//! EMIT CHANGES emits, for every input record, its group's aggregates including that record.
//! For these five functions the running value is kept per group in plain vectors indexed by
//! group id, and one pass over a batch's rows both updates the group and writes the row's
//! output value — O(1) per row and aggregate, whatever the number of groups. Other
//! aggregates have no such kernel; the operator then emits per batch instead.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, new_null_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, Schema};
use datafusion::common::Result;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use super::builtin::BuiltinAggregate;
use crate::checkpoint::OperatorState;

/// A per-record kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Count,
    SumInt,
    SumFloat,
    AvgInt,
    AvgFloat,
    MinInt,
    MaxInt,
    MinFloat,
    MaxFloat,
}

/// Per-group running state of one aggregate.
#[derive(Debug, Default, Clone)]
struct Running {
    /// Non-null values seen per group.
    counts: Vec<i64>,
    ints: Vec<i64>,
    floats: Vec<f64>,
}

/// Running aggregates of one window's groups.
#[derive(Debug, Clone)]
pub struct RunningAggregates {
    kernels: Vec<Kernel>,
    states: Vec<Running>,
    /// Each aggregate's output type: MIN and MAX of a temporal type run on its Int64 values.
    output_types: Vec<DataType>,
    /// `(count, sum)`: a COUNT and a float SUM or AVG whose running counts are the same as
    /// long as neither argument has had a null (the usual `COUNT(*), AVG(x)`). While they
    /// are, the COUNT takes its values from the sum's pass and keeps no counts of its own.
    shared_count: Option<(usize, usize)>,
}

impl RunningAggregates {
    /// Kernels for `aggregates` over `input`, or `None` if one of them has none
    /// (not COUNT/SUM/AVG/MIN/MAX of an Int64 or Float64 or MIN/MAX of a timestamp, date or
    /// time; DISTINCT, FILTER or ORDER BY).
    pub fn plan(
        aggregates: &[Arc<AggregateFunctionExpr>],
        filters: &[Option<Arc<dyn datafusion::physical_expr::PhysicalExpr>>],
        input: &Schema,
    ) -> Option<Self> {
        let kernels = aggregates
            .iter()
            .zip(filters)
            .map(|(aggregate, filter)| {
                if filter.is_some() || aggregate.is_distinct() || !aggregate.order_bys().is_empty()
                {
                    return None;
                }
                let arguments = aggregate.expressions();
                let builtin = BuiltinAggregate::of(aggregate)?;
                if builtin == BuiltinAggregate::Count {
                    return (arguments.len() <= 1).then_some(Kernel::Count);
                }
                let [argument] = arguments.as_slice() else {
                    return None;
                };
                let input_type = argument.data_type(input).ok()?;
                let output_type = aggregate.field().data_type().clone();
                if matches!(builtin, BuiltinAggregate::Min | BuiltinAggregate::Max)
                    && is_temporal_int64(&input_type)
                    && output_type == input_type
                {
                    return Some(if builtin == BuiltinAggregate::Min {
                        Kernel::MinInt
                    } else {
                        Kernel::MaxInt
                    });
                }
                let kernel = match (builtin, &input_type) {
                    (BuiltinAggregate::Sum, DataType::Int64) => Kernel::SumInt,
                    (BuiltinAggregate::Sum, DataType::Float64) => Kernel::SumFloat,
                    (BuiltinAggregate::Avg, DataType::Int64) => Kernel::AvgInt,
                    (BuiltinAggregate::Avg, DataType::Float64) => Kernel::AvgFloat,
                    (BuiltinAggregate::Min, DataType::Int64) => Kernel::MinInt,
                    (BuiltinAggregate::Max, DataType::Int64) => Kernel::MaxInt,
                    (BuiltinAggregate::Min, DataType::Float64) => Kernel::MinFloat,
                    (BuiltinAggregate::Max, DataType::Float64) => Kernel::MaxFloat,
                    _ => return None,
                };
                let expected = match kernel {
                    Kernel::Count | Kernel::SumInt | Kernel::MinInt | Kernel::MaxInt => {
                        DataType::Int64
                    }
                    _ => DataType::Float64,
                };
                (output_type == expected).then_some(kernel)
            })
            .collect::<Option<Vec<_>>>()?;
        let states = vec![Running::default(); kernels.len()];
        let output_types = aggregates
            .iter()
            .map(|a| a.field().data_type().clone())
            .collect();
        let count = kernels.iter().position(|k| *k == Kernel::Count);
        let sum = kernels
            .iter()
            .position(|k| matches!(k, Kernel::SumFloat | Kernel::AvgFloat));
        Some(Self {
            kernels,
            states,
            output_types,
            shared_count: count.zip(sum),
        })
    }

    /// Whether this batch's COUNT values come from the sum's pass: while both arguments
    /// have never held a null. The first batch with one ends the sharing for good, and the
    /// COUNT takes the sum's counts as its own from there.
    fn share_count(&mut self, arguments: &[Vec<ArrayRef>]) -> Option<(usize, usize)> {
        let (count, sum) = self.shared_count?;
        let without_nulls = |aggregate: usize| {
            arguments
                .get(aggregate)
                .and_then(|a| a.first())
                .is_none_or(|a| a.null_count() == 0)
        };
        if without_nulls(count) && without_nulls(sum) {
            return Some((count, sum));
        }
        self.stop_sharing_count();
        None
    }

    /// The shared COUNT takes the sum's counts as its own and keeps them from now on.
    fn stop_sharing_count(&mut self) {
        if let Some((count, sum)) = self.shared_count.take() {
            let counts = self.states[sum].counts.clone();
            self.states[count].counts = counts;
        }
    }

    /// Puts the running values of every group into a checkpoint's `state`.
    pub fn snapshot_into(&self, state: &mut OperatorState) {
        state.put_value(
            "running_shared_count",
            i64::from(self.shared_count.is_some()),
        );
        for (index, running) in self.states.iter().enumerate() {
            state.put_array(
                format!("running_{index:03}_counts"),
                Arc::new(Int64Array::from(running.counts.clone())),
            );
            state.put_array(
                format!("running_{index:03}_ints"),
                Arc::new(Int64Array::from(running.ints.clone())),
            );
            state.put_array(
                format!("running_{index:03}_floats"),
                Arc::new(Float64Array::from(running.floats.clone())),
            );
        }
    }

    /// Takes back the running values [`Self::snapshot_into`] kept.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<()> {
        if state.value("running_shared_count")? == 0 {
            self.shared_count = None;
        }
        for (index, running) in self.states.iter_mut().enumerate() {
            let ints = |name: &str| -> Result<Vec<i64>> {
                let array = state.array(&format!("running_{index:03}_{name}"))?;
                Ok(array.as_primitive::<Int64Type>().values().to_vec())
            };
            running.counts = ints("counts")?;
            running.ints = ints("ints")?;
            running.floats = state
                .array(&format!("running_{index:03}_floats"))?
                .as_primitive::<Float64Type>()
                .values()
                .to_vec();
        }
        Ok(())
    }

    /// Folds rows into their groups (`group_ids`, `groups` groups in all) without the
    /// per-row values [`Self::update`] gives, for states read with [`Self::values_of`].
    pub fn fold(
        &mut self,
        group_ids: &[usize],
        groups: usize,
        arguments: &[Vec<ArrayRef>],
    ) -> Result<()> {
        self.stop_sharing_count();
        for ((kernel, state), arguments) in self.kernels.iter().zip(&mut self.states).zip(arguments)
        {
            state.counts.resize(groups, 0);
            let argument = match arguments.first() {
                Some(a) if is_temporal_int64(a.data_type()) => {
                    Some(cast(a.as_ref(), &DataType::Int64)?)
                }
                other => other.cloned(),
            };
            match (kernel, argument) {
                (Kernel::Count, argument) => {
                    let counts = state.counts.as_mut_slice();
                    match argument.filter(|a| a.null_count() > 0) {
                        None => group_ids.iter().for_each(|&g| counts[g] += 1),
                        Some(values) => {
                            for (row, &g) in group_ids.iter().enumerate() {
                                counts[g] += i64::from(values.is_valid(row));
                            }
                        }
                    }
                }
                (
                    Kernel::SumInt | Kernel::AvgInt | Kernel::MinInt | Kernel::MaxInt,
                    Some(values),
                ) => {
                    state.ints.resize(groups, initial_int(*kernel));
                    let values = values.as_primitive::<Int64Type>();
                    let (counts, totals) = (state.counts.as_mut_slice(), state.ints.as_mut_slice());
                    for (row, (&g, &v)) in group_ids.iter().zip(values.values()).enumerate() {
                        if values.is_valid(row) {
                            counts[g] += 1;
                            totals[g] = next_int(*kernel, totals[g], v);
                        }
                    }
                }
                (_, Some(values)) => {
                    state.floats.resize(groups, 0.0);
                    let values = values.as_primitive::<Float64Type>();
                    let (counts, totals) =
                        (state.counts.as_mut_slice(), state.floats.as_mut_slice());
                    for (row, (&g, &v)) in group_ids.iter().zip(values.values()).enumerate() {
                        if values.is_valid(row) {
                            totals[g] = next_float(*kernel, totals[g], counts[g] == 0, v);
                            counts[g] += 1;
                        }
                    }
                }
                (_, None) => {
                    return datafusion::common::internal_err!("{kernel:?} needs an argument");
                }
            }
        }
        Ok(())
    }

    /// Folds rows into their groups (`group_ids`, `groups` groups in all) and returns, per
    /// aggregate, each row's value after its own update. `arguments[i]` are aggregate `i`'s.
    pub fn update(
        &mut self,
        group_ids: &[usize],
        groups: usize,
        arguments: &[Vec<ArrayRef>],
    ) -> Result<Vec<ArrayRef>> {
        let shared = self.share_count(arguments);
        let mut shared_counts = None;
        let mut values = self
            .kernels
            .iter()
            .zip(&mut self.states)
            .zip(arguments)
            .zip(&self.output_types)
            .enumerate()
            .map(|(aggregate, (((kernel, state), arguments), output_type))| {
                if shared.is_some_and(|(count, _)| count == aggregate) {
                    // Filled in from the sum's pass below.
                    return Ok(new_null_array(output_type, 0));
                }
                state.counts.resize(groups, 0);
                let argument = match arguments.first() {
                    Some(a) if is_temporal_int64(a.data_type()) => {
                        Some(cast(a.as_ref(), &DataType::Int64)?)
                    }
                    other => other.cloned(),
                };
                let argument = argument.as_ref();
                let values = match kernel {
                    Kernel::Count => count(state, group_ids, argument),
                    Kernel::SumInt | Kernel::AvgInt | Kernel::MinInt | Kernel::MaxInt => {
                        let Some(values) = argument else {
                            return datafusion::common::internal_err!(
                                "{kernel:?} needs an argument"
                            );
                        };
                        ints(
                            *kernel,
                            state,
                            group_ids,
                            values.as_primitive::<Int64Type>(),
                            groups,
                        )
                    }
                    _ => {
                        let Some(values) = argument else {
                            return datafusion::common::internal_err!(
                                "{kernel:?} needs an argument"
                            );
                        };
                        let counting = shared.is_some_and(|(_, sum)| sum == aggregate);
                        let (values, counts) = floats(
                            *kernel,
                            state,
                            group_ids,
                            values.as_primitive::<Float64Type>(),
                            groups,
                            counting,
                        );
                        if counts.is_some() {
                            shared_counts = counts;
                        }
                        values
                    }
                };
                Ok(if values.data_type() == output_type {
                    values
                } else {
                    cast(values.as_ref(), output_type)?
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some((count, _)) = shared {
            let Some(counts) = shared_counts else {
                return datafusion::common::internal_err!("a shared COUNT without counts");
            };
            values[count] = Arc::new(counts);
        }
        Ok(values)
    }

    /// The aggregates of `groups` as they stand, one row per group (NULL where no value
    /// reached a group, as SQL's SUM, AVG, MIN and MAX give; COUNT 0).
    pub fn values_of(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        self.kernels
            .iter()
            .zip(&self.states)
            .zip(&self.output_types)
            .enumerate()
            .map(|(aggregate, ((kernel, state), output_type))| {
                // A shared COUNT's counts are its sum's.
                let counts = match self.shared_count {
                    Some((count, sum)) if count == aggregate => &self.states[sum].counts,
                    _ => &state.counts,
                };
                let count_of = |g: usize| counts.get(g).copied().unwrap_or(0);
                let nulls = || -> Option<NullBuffer> {
                    let valid: Vec<bool> = groups.iter().map(|&g| count_of(g) > 0).collect();
                    Some(NullBuffer::from(valid)).filter(|n| n.null_count() > 0)
                };
                let int_of = |g: usize| state.ints.get(g).copied().unwrap_or(0);
                let float_of = |g: usize| state.floats.get(g).copied().unwrap_or(0.0);
                let values: ArrayRef = match kernel {
                    Kernel::Count => Arc::new(Int64Array::from_iter_values(
                        groups.iter().map(|&g| count_of(g)),
                    )),
                    Kernel::SumInt | Kernel::MinInt | Kernel::MaxInt => Arc::new(Int64Array::new(
                        groups.iter().map(|&g| int_of(g)).collect(),
                        nulls(),
                    )),
                    Kernel::AvgInt => Arc::new(Float64Array::new(
                        groups
                            .iter()
                            .map(|&g| int_of(g) as f64 / count_of(g).max(1) as f64)
                            .collect(),
                        nulls(),
                    )),
                    Kernel::AvgFloat => Arc::new(Float64Array::new(
                        groups
                            .iter()
                            .map(|&g| float_of(g) / count_of(g).max(1) as f64)
                            .collect(),
                        nulls(),
                    )),
                    Kernel::SumFloat | Kernel::MinFloat | Kernel::MaxFloat => Arc::new(
                        Float64Array::new(groups.iter().map(|&g| float_of(g)).collect(), nulls()),
                    ),
                };
                Ok(if values.data_type() == output_type {
                    values
                } else {
                    cast(values.as_ref(), output_type)?
                })
            })
            .collect()
    }

    /// Folds group `from`'s running state into group `into` (two sessions merging); `from`
    /// is left empty.
    pub fn merge_group(&mut self, from: usize, into: usize) {
        for (kernel, state) in self.kernels.iter().zip(&mut self.states) {
            let (Some(&from_count), Some(&into_count)) =
                (state.counts.get(from), state.counts.get(into))
            else {
                continue;
            };
            let groups = state.counts.len();
            state
                .ints
                .resize(groups.max(state.ints.len()), initial_int(*kernel));
            state.floats.resize(groups.max(state.floats.len()), 0.0);
            if from_count > 0 {
                match kernel {
                    Kernel::Count => {}
                    Kernel::SumInt | Kernel::AvgInt | Kernel::MinInt | Kernel::MaxInt => {
                        let (a, b) = (state.ints[into], state.ints[from]);
                        state.ints[into] = if into_count == 0 {
                            b
                        } else {
                            next_int(*kernel, a, b)
                        };
                    }
                    _ => {
                        let (a, b) = (state.floats[into], state.floats[from]);
                        state.floats[into] = next_float(*kernel, a, into_count == 0, b);
                    }
                }
            }
            state.counts[into] += from_count;
            state.counts[from] = 0;
        }
    }

    /// Keeps only the groups `keep` lists, renumbered `0..keep.len()` in that order.
    pub fn retain(&mut self, keep: &[usize]) {
        for state in &mut self.states {
            let pick = |values: &[i64]| -> Vec<i64> {
                keep.iter()
                    .map(|&g| values.get(g).copied().unwrap_or(0))
                    .collect()
            };
            state.counts = pick(&state.counts);
            if !state.ints.is_empty() {
                state.ints = pick(&state.ints);
            }
            if !state.floats.is_empty() {
                state.floats = keep
                    .iter()
                    .map(|&g| state.floats.get(g).copied().unwrap_or(0.0))
                    .collect();
            }
        }
    }

    /// Forgets the first `n` groups (the others' ids shift down by `n`, as in the group
    /// table after `EmitTo::First(n)`).
    pub fn drop_first(&mut self, n: usize) {
        for state in &mut self.states {
            for values in [&mut state.counts, &mut state.ints] {
                values.drain(..n.min(values.len()));
            }
            state.floats.drain(..n.min(state.floats.len()));
        }
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.states
            .iter()
            .map(|s| (s.counts.capacity() + s.ints.capacity() + s.floats.capacity()) * 8)
            .sum()
    }
}

/// An integer kernel's state after folding in `v` (SUM and AVG wrap, as DataFusion's).
#[inline]
fn next_int(kernel: Kernel, total: i64, v: i64) -> i64 {
    match kernel {
        Kernel::MinInt => total.min(v),
        Kernel::MaxInt => total.max(v),
        _ => total.wrapping_add(v),
    }
}

/// A float kernel's state after folding in `v` (`first`: the group had no value yet). MIN
/// and MAX use the total order, as arrow's min/max: NaN is the largest value.
#[inline]
fn next_float(kernel: Kernel, total: f64, first: bool, v: f64) -> f64 {
    match kernel {
        _ if first => v,
        Kernel::MinFloat if v.total_cmp(&total).is_lt() => v,
        Kernel::MaxFloat if v.total_cmp(&total).is_gt() => v,
        Kernel::MinFloat | Kernel::MaxFloat => total,
        _ => total + v,
    }
}

/// The integer state of a group without values.
fn initial_int(kernel: Kernel) -> i64 {
    match kernel {
        Kernel::MinInt => i64::MAX,
        Kernel::MaxInt => i64::MIN,
        _ => 0,
    }
}

/// Temporal types stored as 64-bit integers, whose MIN and MAX are those of the integers.
fn is_temporal_int64(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Timestamp(_, _) | DataType::Date64 | DataType::Time64(_) | DataType::Duration(_)
    )
}

fn count(state: &mut Running, group_ids: &[usize], argument: Option<&ArrayRef>) -> ArrayRef {
    // Slices, not `&mut Vec`s: the loop keeps their pointers in registers instead of
    // reloading them after every store.
    let counts = state.counts.as_mut_slice();
    let output: Int64Array = match argument.filter(|a| a.null_count() > 0) {
        None => group_ids
            .iter()
            .map(|&g| {
                counts[g] += 1;
                counts[g]
            })
            .collect::<Vec<_>>()
            .into(),
        Some(values) => group_ids
            .iter()
            .enumerate()
            .map(|(row, &g)| {
                counts[g] += i64::from(values.is_valid(row));
                counts[g]
            })
            .collect::<Vec<_>>()
            .into(),
    };
    Arc::new(output)
}

fn ints(
    kernel: Kernel,
    state: &mut Running,
    group_ids: &[usize],
    values: &Int64Array,
    groups: usize,
) -> ArrayRef {
    state.ints.resize(groups, initial_int(kernel));
    let (counts, totals) = (state.counts.as_mut_slice(), state.ints.as_mut_slice());
    let mut output_ints = Vec::with_capacity(group_ids.len());
    let mut output_floats = Vec::new();
    let has_nulls = values.null_count() > 0;
    let mut valid = Vec::with_capacity(if has_nulls { group_ids.len() } else { 0 });
    for (row, &g) in group_ids.iter().enumerate() {
        if values.is_valid(row) {
            let v = values.value(row);
            counts[g] += 1;
            totals[g] = next_int(kernel, totals[g], v);
        }
        if has_nulls {
            valid.push(counts[g] > 0);
        }
        if kernel == Kernel::AvgInt {
            output_floats.push(totals[g] as f64 / counts[g].max(1) as f64);
        } else {
            output_ints.push(totals[g]);
        }
    }
    // Every row is counted in its own group unless its value is null: without nulls, every
    // output is valid.
    let nulls = has_nulls.then(|| valid.into());
    if kernel == Kernel::AvgInt {
        Arc::new(Float64Array::new(output_floats.into(), nulls))
    } else {
        Arc::new(Int64Array::new(output_ints.into(), nulls))
    }
}

/// The float kernels' values, and with `counting` (a shared COUNT: SUM or AVG without
/// nulls) each row's running count too.
fn floats(
    kernel: Kernel,
    state: &mut Running,
    group_ids: &[usize],
    values: &Float64Array,
    groups: usize,
    counting: bool,
) -> (ArrayRef, Option<Int64Array>) {
    state.floats.resize(groups, 0.0);
    let (counts, totals) = (state.counts.as_mut_slice(), state.floats.as_mut_slice());
    let no_nulls = values.null_count() == 0;
    if no_nulls && matches!(kernel, Kernel::SumFloat | Kernel::AvgFloat) {
        // The common case in one map over the rows, collected without capacity checks; an
        // average divides in a second pass, which vectorizes (a division per row stalls).
        let running: Vec<(f64, f64)> = group_ids
            .iter()
            .zip(values.values())
            .map(|(&g, &v)| {
                let count = counts[g];
                let total = if count == 0 { v } else { totals[g] + v };
                totals[g] = total;
                counts[g] = count + 1;
                (total, (count + 1) as f64)
            })
            .collect();
        let output: Vec<f64> = if kernel == Kernel::AvgFloat {
            running.iter().map(|(total, count)| total / count).collect()
        } else {
            running.iter().map(|(total, _)| *total).collect()
        };
        let counts = counting.then(|| {
            running
                .iter()
                .map(|(_, count)| *count as i64)
                .collect::<Vec<_>>()
                .into()
        });
        return (Arc::new(Float64Array::new(output.into(), None)), counts);
    }
    let mut output = Vec::with_capacity(group_ids.len());
    let mut valid = Vec::with_capacity(if no_nulls { 0 } else { group_ids.len() });
    let raw = values.values();
    for (row, &g) in group_ids.iter().enumerate() {
        if no_nulls || values.is_valid(row) {
            totals[g] = next_float(kernel, totals[g], counts[g] == 0, raw[row]);
            counts[g] += 1;
        }
        if !no_nulls {
            valid.push(counts[g] > 0);
        }
        output.push(if kernel == Kernel::AvgFloat {
            totals[g] / counts[g].max(1) as f64
        } else {
            totals[g]
        });
    }
    let nulls = (!no_nulls).then(|| valid.into());
    // A shared COUNT means no nulls and a SUM or AVG: the path above.
    (Arc::new(Float64Array::new(output.into(), nulls)), None)
}
