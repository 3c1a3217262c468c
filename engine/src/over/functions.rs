//! The window functions an [`OverWindowExec`](super::OverWindowExec) computes
//! ([`OverFunction`], built by the planner from DataFusion's window expressions) and their
//! per-key state ([`OverKernel`]), which turns a batch of rows in processing order into one
//! output column.
//!
//! Frames are ROWS frames from `n PRECEDING` or UNBOUNDED PRECEDING to the current row or
//! `m FOLLOWING`. A query that reads following rows (LEAD, FOLLOWING frames) has a lookahead
//! `L`, the most rows any of its functions reads ahead: each row is then completed by the
//! row `L` positions later in its key (or by the end of the input), and every kernel runs at
//! that completing row `q` for the row `p = q - L` — lookbacks reach `L` rows further back,
//! and a frame aggregate sees its values delayed by `L - m` rows. Without lookahead a row's
//! results are known as soon as it is processed.
//!
//! A RANGE frame's current row takes in its peers (rows of the key with the same ORDER BY
//! value): the row's result is the one computed at its last peer ([`fill_peers`]); the
//! operator releases peers together.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt32Array, new_null_array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{
    ArrowPrimitiveType, DataType, FieldRef, Float64Type, Int64Type,
};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::physical_expr::PhysicalExpr;

use super::frame_aggregate::{FloatFrameAggregate, FrameAggregateKind, IntegerFrameAggregate};
use super::history::{PrimitiveHistory, ValueHistory};
use super::range_frame::{FloatRangeAggregate, IntegerRangeAggregate};
use super::ranking::{Ranking, RankingKind};
use crate::checkpoint::{StateReader, StateWriter};

/// Where a frame starts; it ends at the current row or `following` rows after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameStart {
    UnboundedPreceding,
    /// `n PRECEDING`: the frame holds the current row and the `n` before it.
    Preceding(u64),
    /// RANGE `d PRECEDING`: the frame holds the rows whose ORDER BY value is at least the
    /// current row's minus `d` (in the ORDER BY column's unit), the current row's peers too.
    RangePreceding(i64),
}

/// What a window function computes.
#[derive(Debug, Clone, PartialEq)]
pub enum OverFunctionKind {
    Ranking(RankingKind),
    /// LAG(x, offset, default).
    Lag {
        offset: u64,
        default: ScalarValue,
    },
    /// LEAD(x, offset, default).
    Lead {
        offset: u64,
        default: ScalarValue,
    },
    FirstValue,
    LastValue,
    /// NTH_VALUE(x, n), n ≥ 1.
    NthValue(u64),
    Aggregate(FrameAggregateKind),
}

/// One window function of a query.
#[derive(Debug, Clone)]
pub struct OverFunction {
    pub kind: OverFunctionKind,
    /// The value argument (none for the rankings; COUNT(*) counts a literal).
    pub argument: Option<Arc<dyn PhysicalExpr>>,
    pub frame: FrameStart,
    /// Rows after the current one in the frame (`m FOLLOWING`; 0: CURRENT ROW).
    pub following: u64,
    /// RANGE frame: the current row's peers are in its frame.
    pub peers: bool,
    /// The output column.
    pub field: FieldRef,
}

/// How SUM/AVG/MIN/MAX/COUNT compute over an argument type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberClass {
    Integer,
    Float,
}

impl NumberClass {
    fn of(data_type: &DataType) -> Option<Self> {
        use DataType::*;
        match data_type {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Some(Self::Integer),
            Timestamp(_, _) | Date64 | Duration(_) | Time64(_) => Some(Self::Integer),
            Float16 | Float32 | Float64 => Some(Self::Float),
            _ => None,
        }
    }

    fn arrow_type(self) -> DataType {
        match self {
            Self::Integer => DataType::Int64,
            Self::Float => DataType::Float64,
        }
    }
}

impl OverFunction {
    /// How many rows after the current one the function reads.
    pub fn lookahead(&self) -> u64 {
        match &self.kind {
            OverFunctionKind::Lead { offset, .. } => *offset,
            OverFunctionKind::Ranking(_) | OverFunctionKind::Lag { .. } => 0,
            _ => self.following,
        }
    }

    pub fn is_ranking(&self) -> bool {
        matches!(self.kind, OverFunctionKind::Ranking(_))
    }

    /// Checks that the operator can compute this function over `argument_type`.
    pub fn validate(&self, argument_type: Option<&DataType>) -> Result<()> {
        let name = self.field.name();
        if let (OverFunctionKind::Aggregate(kind), Some(data_type)) = (&self.kind, argument_type)
            && *kind != FrameAggregateKind::Count
            && NumberClass::of(data_type).is_none()
        {
            return plan_err!(
                "{name}: streaming {kind:?} over a window takes integer, float or timestamp values, not {data_type}; cast the argument (e.g. CAST(x AS DOUBLE))"
            );
        }
        Ok(())
    }
}

/// The history of a lookback function: typed for Int64 and Float64 values, else generic.
#[derive(Debug)]
pub enum Lookback {
    Integer(PrimitiveHistory<Int64Type>),
    Float(PrimitiveHistory<Float64Type>),
    Any(ValueHistory),
}

impl Lookback {
    fn new(argument_type: Option<&DataType>, depth: u64, fixed: Option<u64>) -> Self {
        let depth = depth as usize;
        match argument_type {
            Some(DataType::Int64) => Self::Integer(PrimitiveHistory::new(depth, fixed)),
            Some(DataType::Float64) => Self::Float(PrimitiveHistory::new(depth, fixed)),
            _ => Self::Any(ValueHistory::new(depth, fixed)),
        }
    }

    fn gather(
        &mut self,
        values: &ArrayRef,
        default: &Option<ArrayRef>,
        groups: &[usize],
        positions: &[u64],
        target: impl Fn(u64) -> Option<u64>,
    ) -> Result<ArrayRef> {
        Ok(match self {
            Self::Integer(history) => {
                let default = typed_default::<Int64Type>(default)?;
                Arc::new(history.gather(
                    values.as_primitive::<Int64Type>(),
                    groups,
                    positions,
                    default,
                    target,
                ))
            }
            Self::Float(history) => {
                let default = typed_default::<Float64Type>(default)?;
                Arc::new(history.gather(
                    values.as_primitive::<Float64Type>(),
                    groups,
                    positions,
                    default,
                    target,
                ))
            }
            Self::Any(history) => {
                let default = match default {
                    Some(default) => cast(default, values.data_type())?,
                    None => new_null_array(values.data_type(), 1),
                };
                history.gather(values, groups, positions, &default, target)?
            }
        })
    }

    /// Each row's value `depth` rows back in its key (see [`PrimitiveHistory::gather_back`]).
    fn gather_back(
        &mut self,
        values: &ArrayRef,
        default: &Option<ArrayRef>,
        groups: &[usize],
        positions: &[u64],
    ) -> Result<ArrayRef> {
        Ok(match self {
            Self::Integer(history) => Arc::new(history.gather_back(
                values.as_primitive::<Int64Type>(),
                groups,
                typed_default::<Int64Type>(default)?,
            )),
            Self::Float(history) => Arc::new(history.gather_back(
                values.as_primitive::<Float64Type>(),
                groups,
                typed_default::<Float64Type>(default)?,
            )),
            Self::Any(history) => {
                let depth = history.depth() as u64;
                self.gather(values, default, groups, positions, move |q| {
                    q.checked_sub(depth)
                })?
            }
        })
    }

    fn persist_keys(&self, out: &mut StateWriter) {
        match self {
            Self::Integer(history) => history.persist_keys(out),
            Self::Float(history) => history.persist_keys(out),
            Self::Any(history) => history.persist_keys(out),
        }
    }

    fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        match self {
            Self::Integer(history) => history.restore_keys(input),
            Self::Float(history) => history.restore_keys(input),
            Self::Any(history) => history.restore_keys(input),
        }
    }

    fn retain_keys(&mut self, expired: &[bool]) {
        match self {
            Self::Integer(history) => history.retain_keys(expired),
            Self::Float(history) => history.retain_keys(expired),
            Self::Any(history) => history.retain_keys(expired),
        }
    }

    fn size(&self) -> usize {
        match self {
            Self::Integer(history) => history.size(),
            Self::Float(history) => history.size(),
            Self::Any(history) => history.size(),
        }
    }
}

/// A one-row default as a value of `T` (`None` for a null or missing default).
fn typed_default<T: ArrowPrimitiveType>(default: &Option<ArrayRef>) -> Result<Option<T::Native>> {
    let Some(default) = default else {
        return Ok(None);
    };
    let default = cast(default, &T::DATA_TYPE)?;
    let default = default.as_primitive::<T>();
    Ok((default.is_valid(0)).then(|| default.value(0)))
}

/// The state of one function: see the module documentation.
#[derive(Debug)]
pub enum OverKernel {
    Ranking(Ranking),
    /// LAG, FIRST_VALUE, NTH_VALUE: an earlier row's value.
    Lookback {
        history: Lookback,
        default: Option<ArrayRef>,
    },
    /// LAST_VALUE over a frame ending at the current row: the row's own value.
    Current,
    Integer(IntegerFrameAggregate, Delay),
    Float(FloatFrameAggregate, Delay),
    /// COUNT(x) of a type the numeric kernels do not take: only x's nulls matter.
    Count(IntegerFrameAggregate, Delay),
    /// Aggregates over a RANGE frame with an offset (no lookahead runs beside one).
    IntegerRange(IntegerRangeAggregate),
    FloatRange(FloatRangeAggregate),
    CountRange(IntegerRangeAggregate),
}

/// A frame aggregate's values delayed by some rows per key (a frame that ends `m FOLLOWING`
/// under a lookahead `L` sees each key's value from `L - m` rows back); `None`: no delay.
type Delay = Option<(Lookback, u64)>;

impl OverKernel {
    /// The state of `function` in a query with lookahead `lookahead` (see the module
    /// documentation).
    pub fn try_new(
        function: &OverFunction,
        argument_type: Option<&DataType>,
        lookahead: u64,
    ) -> Result<Self> {
        function.validate(argument_type)?;
        let preceding = match function.frame {
            FrameStart::UnboundedPreceding => None,
            FrameStart::Preceding(n) => Some(n),
            FrameStart::RangePreceding(distance) => {
                return Self::range_aggregate(function, argument_type, distance);
            }
        };
        let lookback = |depth: u64, fixed: Option<u64>, default: &ScalarValue| -> Result<Self> {
            Ok(Self::Lookback {
                history: Lookback::new(argument_type, depth, fixed),
                default: (!default.is_null())
                    .then(|| default.to_array())
                    .transpose()?,
            })
        };
        let none = ScalarValue::Null;
        Ok(match &function.kind {
            OverFunctionKind::Ranking(kind) => Self::Ranking(Ranking::new(*kind)),
            OverFunctionKind::Lag { offset, default } => {
                lookback(offset + lookahead, None, default)?
            }
            OverFunctionKind::Lead { offset, default } => {
                lookback(lookahead.saturating_sub(*offset), None, default)?
            }
            OverFunctionKind::FirstValue => match preceding {
                None => lookback(0, Some(0), &none)?,
                Some(n) => lookback(n + lookahead, None, &none)?,
            },
            OverFunctionKind::NthValue(n) => match preceding {
                None => lookback(0, Some(n - 1), &none)?,
                Some(p) => lookback(p + lookahead, None, &none)?,
            },
            OverFunctionKind::LastValue if lookahead == 0 => Self::Current,
            OverFunctionKind::LastValue => lookback(lookahead - function.following, None, &none)?,
            OverFunctionKind::Aggregate(kind) => {
                let frame = preceding.map(|p| p + function.following);
                let delay_rows = lookahead - function.following.min(lookahead);
                let class = argument_type.and_then(NumberClass::of);
                let delay = (delay_rows > 0).then(|| {
                    let delayed_type = class.unwrap_or(NumberClass::Integer).arrow_type();
                    (
                        Lookback::new(Some(&delayed_type), delay_rows, None),
                        delay_rows,
                    )
                });
                match class {
                    Some(NumberClass::Integer) => {
                        Self::Integer(IntegerFrameAggregate::new(*kind, frame), delay)
                    }
                    Some(NumberClass::Float) => {
                        Self::Float(FloatFrameAggregate::new(*kind, frame), delay)
                    }
                    None => Self::Count(IntegerFrameAggregate::new(*kind, frame), delay),
                }
            }
        })
    }

    /// The state of an aggregate over a RANGE frame reaching `distance` back.
    fn range_aggregate(
        function: &OverFunction,
        argument_type: Option<&DataType>,
        distance: i64,
    ) -> Result<Self> {
        let OverFunctionKind::Aggregate(kind) = &function.kind else {
            return plan_err!(
                "{}: only SUM, AVG, COUNT, MIN and MAX stream over a RANGE frame with an offset",
                function.field.name()
            );
        };
        Ok(match argument_type.and_then(NumberClass::of) {
            Some(NumberClass::Integer) => {
                Self::IntegerRange(IntegerRangeAggregate::new(*kind, distance))
            }
            Some(NumberClass::Float) => Self::FloatRange(FloatRangeAggregate::new(*kind, distance)),
            None => Self::CountRange(IntegerRangeAggregate::new(*kind, distance)),
        })
    }

    /// The function's output for rows in processing order: row `r` is at position
    /// `positions[r]` of key `groups[r]` with ORDER BY value `times[r]`; `argument` is the
    /// evaluated argument. Under a lookahead `L` the output of row `r` belongs to the row
    /// `L` positions earlier in its key (rankings are instead given the rows they rank).
    pub fn evaluate(
        &mut self,
        function: &OverFunction,
        lookahead: u64,
        argument: Option<&ArrayRef>,
        groups: &[usize],
        positions: &[u64],
        times: &[i64],
    ) -> Result<ArrayRef> {
        let output_type = function.field.data_type();
        let argument = || match argument {
            Some(argument) => Ok(argument),
            None => plan_err!("{} needs an argument", function.field.name()),
        };
        let output = match self {
            Self::Ranking(ranking) => ranking.evaluate(groups, positions, times),
            Self::Current => Arc::clone(argument()?),
            Self::Lookback { history, default } => gather_lookback(
                function,
                lookahead,
                history,
                argument()?,
                default,
                groups,
                positions,
            )?,
            Self::Integer(aggregate, delay) => {
                let values = cast(argument()?, &NumberClass::Integer.arrow_type())?;
                let values = delayed(delay, values, groups, positions)?;
                aggregate.evaluate(&values, groups, positions)?
            }
            Self::Float(aggregate, delay) => {
                let values = cast(argument()?, &NumberClass::Float.arrow_type())?;
                let values = delayed(delay, values, groups, positions)?;
                aggregate.evaluate(&values, groups, positions)?
            }
            Self::Count(aggregate, delay) => {
                let values = argument()?;
                let validity: ArrayRef = Arc::new(Int64Array::new(
                    vec![0; values.len()].into(),
                    values.logical_nulls(),
                ));
                let validity = delayed(delay, validity, groups, positions)?;
                aggregate.evaluate(&validity, groups, positions)?
            }
            Self::IntegerRange(aggregate) => {
                let values = cast(argument()?, &NumberClass::Integer.arrow_type())?;
                aggregate.evaluate(&values, groups, times)?
            }
            Self::FloatRange(aggregate) => {
                let values = cast(argument()?, &NumberClass::Float.arrow_type())?;
                aggregate.evaluate(&values, groups, times)?
            }
            Self::CountRange(aggregate) => {
                let values = argument()?;
                let validity: ArrayRef = Arc::new(Int64Array::new(
                    vec![0; values.len()].into(),
                    values.logical_nulls(),
                ));
                aggregate.evaluate(&validity, groups, times)?
            }
        };
        let output = if function.peers {
            fill_peers(&output, groups, times)?
        } else {
            output
        };
        if output.data_type() == output_type {
            Ok(output)
        } else {
            Ok(cast(&output, output_type)?)
        }
    }

    /// Forgets the keys `expired` marks, renumbering the others in order.
    /// Writes the function's state of every key, for a checkpoint.
    pub fn persist_keys(&self, out: &mut StateWriter) {
        match self {
            Self::Ranking(ranking) => ranking.persist_keys(out),
            Self::Lookback { history, .. } => history.persist_keys(out),
            Self::Current => {}
            Self::Integer(aggregate, delay) | Self::Count(aggregate, delay) => {
                aggregate.persist_keys(out);
                if let Some((history, _)) = delay {
                    history.persist_keys(out);
                }
            }
            Self::Float(aggregate, delay) => {
                aggregate.persist_keys(out);
                if let Some((history, _)) = delay {
                    history.persist_keys(out);
                }
            }
            Self::IntegerRange(aggregate) | Self::CountRange(aggregate) => {
                aggregate.persist_keys(out)
            }
            Self::FloatRange(aggregate) => aggregate.persist_keys(out),
        }
    }

    /// Takes back what [`Self::persist_keys`] wrote.
    pub fn restore_keys(&mut self, input: &mut StateReader) -> Result<()> {
        match self {
            Self::Ranking(ranking) => ranking.restore_keys(input),
            Self::Lookback { history, .. } => history.restore_keys(input),
            Self::Current => Ok(()),
            Self::Integer(aggregate, delay) | Self::Count(aggregate, delay) => {
                aggregate.restore_keys(input)?;
                match delay {
                    Some((history, _)) => history.restore_keys(input),
                    None => Ok(()),
                }
            }
            Self::Float(aggregate, delay) => {
                aggregate.restore_keys(input)?;
                match delay {
                    Some((history, _)) => history.restore_keys(input),
                    None => Ok(()),
                }
            }
            Self::IntegerRange(aggregate) | Self::CountRange(aggregate) => {
                aggregate.restore_keys(input)
            }
            Self::FloatRange(aggregate) => aggregate.restore_keys(input),
        }
    }

    pub fn retain_keys(&mut self, expired: &[bool]) {
        match self {
            Self::Ranking(ranking) => ranking.retain_keys(expired),
            Self::Lookback { history, .. } => history.retain_keys(expired),
            Self::Current => {}
            Self::Integer(aggregate, delay) | Self::Count(aggregate, delay) => {
                aggregate.retain_keys(expired);
                if let Some((history, _)) = delay {
                    history.retain_keys(expired);
                }
            }
            Self::Float(aggregate, delay) => {
                aggregate.retain_keys(expired);
                if let Some((history, _)) = delay {
                    history.retain_keys(expired);
                }
            }
            Self::IntegerRange(aggregate) | Self::CountRange(aggregate) => {
                aggregate.retain_keys(expired)
            }
            Self::FloatRange(aggregate) => aggregate.retain_keys(expired),
        }
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        match self {
            Self::Ranking(ranking) => ranking.size(),
            Self::Lookback { history, .. } => history.size(),
            Self::Current => 0,
            Self::Integer(aggregate, delay) | Self::Count(aggregate, delay) => {
                aggregate.size() + delay.as_ref().map_or(0, |(history, _)| history.size())
            }
            Self::Float(aggregate, delay) => {
                aggregate.size() + delay.as_ref().map_or(0, |(history, _)| history.size())
            }
            Self::IntegerRange(aggregate) | Self::CountRange(aggregate) => aggregate.size(),
            Self::FloatRange(aggregate) => aggregate.size(),
        }
    }
}

/// `values` delayed by the rows of `delay` per key (null until a key has that many rows).
fn delayed(
    delay: &mut Delay,
    values: ArrayRef,
    groups: &[usize],
    positions: &[u64],
) -> Result<ArrayRef> {
    match delay {
        None => Ok(values),
        Some((history, _)) => history.gather_back(&values, &None, groups, positions),
    }
}

/// The position whose value a lookback function returns for the row `p = q - lookahead`,
/// given the completing row `q`, per function kind: each gets its own closure so that the
/// per-row loop does not branch on the kind.
fn gather_lookback(
    function: &OverFunction,
    lookahead: u64,
    history: &mut Lookback,
    values: &ArrayRef,
    default: &Option<ArrayRef>,
    groups: &[usize],
    positions: &[u64],
) -> Result<ArrayRef> {
    let frame_start = move |p: u64| match function.frame {
        // (A RANGE frame with an offset takes no lookback function: `OverKernel::try_new`.)
        FrameStart::UnboundedPreceding | FrameStart::RangePreceding(_) => 0,
        FrameStart::Preceding(n) => p.saturating_sub(n),
    };
    let l = lookahead;
    match &function.kind {
        // A constant distance back: the history's depth (see `OverKernel::try_new`).
        OverFunctionKind::Lag { .. }
        | OverFunctionKind::Lead { .. }
        | OverFunctionKind::LastValue => history.gather_back(values, default, groups, positions),
        OverFunctionKind::FirstValue => {
            history.gather(values, default, groups, positions, move |q| {
                q.checked_sub(l).map(frame_start)
            })
        }
        OverFunctionKind::NthValue(n) => {
            let n = *n;
            history.gather(values, default, groups, positions, move |q| {
                let p = q.checked_sub(l)?;
                Some(frame_start(p) + n - 1).filter(|target| *target <= p)
            })
        }
        other => plan_err!("{other:?} is not a lookback function"),
    }
}

/// Gives every row the result of its last peer (same key, same ORDER BY value) in the batch:
/// a RANGE frame ending at the current row ends at its last peer.
fn fill_peers(output: &ArrayRef, groups: &[usize], times: &[i64]) -> Result<ArrayRef> {
    let groups_len = groups.iter().max().map_or(0, |g| g + 1);
    // Per key, going backwards: the last row of the current run of peers.
    let mut last_peer: Vec<Option<(i64, u32)>> = vec![None; groups_len];
    let mut indices = vec![0u32; groups.len()];
    for row in (0..groups.len()).rev() {
        let slot = &mut last_peer[groups[row]];
        indices[row] = match slot {
            Some((time, last)) if *time == times[row] => *last,
            _ => {
                *slot = Some((times[row], row as u32));
                row as u32
            }
        };
    }
    Ok(take(output.as_ref(), &UInt32Array::from(indices), None)?)
}
