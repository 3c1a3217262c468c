//! [`IntervalJoinExec`]: an equi-join of two streams whose rows match only within a bound
//! on their event times, with state bounded by the watermarks.
//!
//! Both inputs come through a [`StreamExchangeExec`] hashed on their join keys (both to the
//! same number of streams, so that equal keys meet in one stream; without keys, both go to
//! one stream), which also brings each side's watermarks. A pair of rows `(l, r)` matches
//! when their keys are equal (nulls never match), `r.time - l.time` lies in `[lower, upper]`
//! (the bound read from the join's ON clause) and the join's filter, which holds the bound
//! and any other condition, is true.
//!
//! Each stream keeps, per side, the rows that may still match a row of the other side
//! ([`SideState`]). A batch of one side is first probed against the other side's rows —
//! hash of the keys, then equal keys, the time bound and the filter — and the pairs found go
//! out at once; then its rows are kept for the other side's rows to come. A left row at time
//! `t` can match right rows up to `t + upper`; once the right side's watermark minus the
//! allowed lateness has passed that, no right row that is not late can match it, and it is
//! freed (a right row likewise with `t - lower` and the left watermark). A row the outer
//! side of a LEFT, RIGHT or FULL join preserves and that never matched goes out with nulls
//! for the other side when it is freed: as soon as the watermark proves no match can come.
//! Rows without a key or an event time never match and go out (outer side) or are dropped
//! (inner side) at once.
//!
//! A semi join (`IN`, `EXISTS`, or DataFusion's rewrite of a join whose other side only
//! filters) emits a row of its side, alone, the first time it matches; an anti join (`NOT
//! EXISTS`) emits a row of its side, alone, when it is freed without having matched — as the
//! outer side of an outer join does, without the nulls.
//!
//! A row older than its own side's watermark minus the allowed lateness is late: its
//! partners may already be freed, so it is dropped, counted and sent to the side output of
//! late records. At the end of one input its
//! watermark is +infinity: the other side keeps nothing more, and at the end of both every
//! unmatched row has gone out.
//!
//! The output has the schema of DataFusion's join of the same type (left columns, then
//! right), projected as DataFusion's `HashJoinExec` projects it.
//!
//! The output's event times are the input rows' own: a side's time column is an event time
//! of the output wherever every output row carries it (both sides of an inner join, the
//! preserved side of a LEFT or RIGHT join, the kept side of a semi or anti join; a FULL
//! join's output has none). After each watermark, each output partition records in a
//! [`PartitionProgress`] the smallest time of that column it may still emit: a row of the
//! left side still to come is not late (time ≥ left watermark − lateness), and one it keeps
//! is not yet freed (time ≥ right watermark − lateness − upper); for the right side,
//! likewise with `− lower`. The exchange above takes that progress as its watermark, so
//! windows, OVER windows and joins compose over a join's output.

//!
//! This file holds the plan; `interval_stream.rs` one output partition at work (probing,
//! keeping, freeing, progress) and `join_output.rs` the rows it puts out.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinSide, JoinType, Result, internal_err, plan_err};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_plan::execution_plan::Boundedness;
use datafusion::physical_plan::joins::utils::{JoinFilter, build_join_schema};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, ReplaceChildrenOptions,
};
use futures::StreamExt;

use super::aligned_inputs::{AlignedInputs, JoinInput};
use super::interval_stream::JoinStream;
use crate::checkpoint::PassedBarriers;
use crate::exchange::StreamExchangeExec;
use crate::late_records::LateRecords;
use crate::message_loop::OperatorCheckpoint;
use crate::plan_util::{stateful_properties, visit_expressions};
use crate::progress::PartitionProgress;
use crate::source::StreamSourceExec;
use crate::watermark::StreamMessage;
use freshet_partitioner::RoutingStrategy;

/// The time bound of an interval join: `right.time - left.time` in `[lower, upper]`, in the
/// event-time columns' unit.
///
/// A side may end its rows' reach with a column of its own (its "until" column) in place of
/// its event time: `b.ts BETWEEN a.ts AND a.expires` is `right.time - left.time >= 0` and
/// `right.time - left.expires <= 0`. A row then spans `[time, until]`, and the bound reads
/// `right.until - left.time >= lower` and `right.time - left.until <= upper` (a side without
/// one has `until = time`). The rows a side keeps are ordered and freed by `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBound {
    /// The event-time column of each input.
    pub left_time: usize,
    pub right_time: usize,
    pub lower: i64,
    pub upper: i64,
    /// The column of each input that ends its rows' reach, if not its event time.
    pub left_until: Option<usize>,
    pub right_until: Option<usize>,
}

impl TimeBound {
    /// A bound between the two event times alone.
    pub fn between_times(left_time: usize, right_time: usize, lower: i64, upper: i64) -> Self {
        Self {
            left_time,
            right_time,
            lower,
            upper,
            left_until: None,
            right_until: None,
        }
    }

    /// A regular join's: every pair of rows with equal keys matches, whatever their times.
    pub fn is_unbounded(&self) -> bool {
        self.lower == i64::MIN && self.upper == i64::MAX
    }

    pub(super) fn until(&self, side: JoinSide) -> Option<usize> {
        match side {
            JoinSide::Left => self.left_until,
            _ => self.right_until,
        }
    }

    /// The other side's `until` values a row of `side` spanning `[time, until]` can match:
    /// the range its probe reads from the other side's kept rows.
    pub(super) fn probe_range(&self, side: JoinSide, time: i64, until: i64) -> (i64, i64) {
        let other_has_until = self.until(side.negate()).is_some();
        match side {
            JoinSide::Left => (
                time.saturating_add(self.lower),
                match other_has_until {
                    true => i64::MAX,
                    false => until.saturating_add(self.upper),
                },
            ),
            _ => (
                time.saturating_sub(self.upper),
                match other_has_until {
                    true => i64::MAX,
                    false => until.saturating_sub(self.lower),
                },
            ),
        }
    }

    /// How far past a row's own time the other side's times it can match reach.
    pub(super) fn reach(&self, side: JoinSide) -> i64 {
        match side {
            JoinSide::Left => self.upper,
            _ => self.lower.saturating_neg(),
        }
    }
}

/// The join types an interval join runs.
pub const INTERVAL_JOIN_TYPES: [JoinType; 8] = [
    JoinType::Inner,
    JoinType::Left,
    JoinType::Right,
    JoinType::Full,
    JoinType::LeftSemi,
    JoinType::RightSemi,
    JoinType::LeftAnti,
    JoinType::RightAnti,
];

/// What an interval join is: everything but its inputs.
#[derive(Debug, Clone)]
pub struct IntervalJoinSpec {
    pub on: Vec<(PhysicalExprRef, PhysicalExprRef)>,
    pub filter: Option<JoinFilter>,
    pub join_type: JoinType,
    pub bound: TimeBound,
    /// Allowed lateness, in the event-time unit.
    pub allowed_lateness: i64,
    /// Columns of the join's output kept, as `HashJoinExec` projects them.
    pub projection: Option<Vec<usize>>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct IntervalJoinExec {
    pub(super) left: Arc<dyn ExecutionPlan>,
    pub(super) right: Arc<dyn ExecutionPlan>,
    pub(super) left_exchange: Arc<StreamExchangeExec>,
    pub(super) right_exchange: Arc<StreamExchangeExec>,
    pub(super) spec: IntervalJoinSpec,
    pub(super) join_schema: SchemaRef,
    pub(super) properties: Arc<PlanProperties>,
    pub(super) metrics: ExecutionPlanMetricsSet,
    /// Per side whose time column is an event time of the output: the column's position in
    /// the output and each output partition's progress in it.
    pub(super) output_times: Vec<OutputTime>,
    /// The side outputs of each side's late rows.
    pub(super) late_records: [LateRecords; 2],
    /// The checkpoint barriers each output partition has passed.
    pub(super) passed: Arc<PassedBarriers>,
}

/// An event-time column of the join's output: the time column of `side`.
#[derive(Debug, Clone)]
pub(super) struct OutputTime {
    pub(super) side: JoinSide,
    pub(super) column: usize,
    pub(super) progress: Arc<PartitionProgress>,
}

impl IntervalJoinExec {
    pub fn try_new(
        left: Arc<StreamExchangeExec>,
        right: Arc<StreamExchangeExec>,
        spec: IntervalJoinSpec,
    ) -> Result<Self> {
        if !INTERVAL_JOIN_TYPES.contains(&spec.join_type) {
            return plan_err!(
                "an interval join supports INNER, LEFT, RIGHT, FULL, semi and anti joins, not {}",
                spec.join_type
            );
        }
        let partitions = left.properties().partitioning.partition_count();
        if right.properties().partitioning.partition_count() != partitions {
            return internal_err!("IntervalJoinExec: both inputs need as many partitions");
        }
        if spec.bound.lower > spec.bound.upper {
            return plan_err!(
                "the join's time bound is empty: the right time minus the left time would have to lie between {} and {}",
                spec.bound.lower,
                spec.bound.upper
            );
        }
        let (join_schema, _) = build_join_schema(&left.schema(), &right.schema(), &spec.join_type);
        let join_schema = Arc::new(join_schema);
        let schema = match &spec.projection {
            Some(columns) => Arc::new(join_schema.project(columns)?),
            None => Arc::clone(&join_schema),
        };
        let left_plan: Arc<dyn ExecutionPlan> = Arc::clone(&left) as _;
        let right_plan: Arc<dyn ExecutionPlan> = Arc::clone(&right) as _;
        let mut properties = stateful_properties(&left_plan, &schema);
        if right_plan.boundedness().is_unbounded() {
            properties.boundedness = Boundedness::Unbounded {
                requires_infinite_memory: false,
            };
        }
        let left_width = left_plan.schema().fields().len();
        let output_times = timed_sides(spec.join_type)
            .into_iter()
            .filter_map(|side| {
                let in_join = match (side, spec.join_type) {
                    (JoinSide::Left, _) => spec.bound.left_time,
                    (_, JoinType::RightSemi | JoinType::RightAnti) => spec.bound.right_time,
                    _ => left_width + spec.bound.right_time,
                };
                let column = match &spec.projection {
                    Some(columns) => columns.iter().position(|&c| c == in_join)?,
                    None => in_join,
                };
                Some(OutputTime {
                    side,
                    column,
                    progress: Arc::new(PartitionProgress::new(partitions)),
                })
            })
            .collect();
        Ok(Self {
            left: left_plan,
            right: right_plan,
            left_exchange: left,
            right_exchange: right,
            spec,
            join_schema,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            output_times,
            late_records: Default::default(),
            passed: Arc::new(PassedBarriers::new(partitions)),
        })
    }

    /// The side outputs of the late rows of each side (left, then right), with the schema of
    /// that side's rows (without the columns DataFusion computes below a join for its ON
    /// clause).
    pub fn late_records(&self) -> [(&LateRecords, SchemaRef); 2] {
        let rows = |input: &Arc<dyn ExecutionPlan>| {
            let schema = input.schema();
            let fields: Vec<_> = schema
                .fields()
                .iter()
                .filter(|f| !f.name().starts_with("join_proj_push_down_"))
                .cloned()
                .collect();
            Arc::new(Schema::new(fields))
        };
        [
            (&self.late_records[0], rows(&self.left)),
            (&self.late_records[1], rows(&self.right)),
        ]
    }

    /// The checkpoint barriers each output partition has passed on.
    pub fn passed_barriers(&self) -> &Arc<PassedBarriers> {
        &self.passed
    }

    pub fn spec(&self) -> &IntervalJoinSpec {
        &self.spec
    }

    /// The output's event-time columns (see the module documentation), each with the
    /// smallest time each output partition may still emit in it.
    pub fn progress(&self) -> impl Iterator<Item = (&Arc<PartitionProgress>, usize)> {
        self.output_times.iter().map(|t| (&t.progress, t.column))
    }
}

/// The streams `plan` reads, as EXPLAIN names a join's side: `bids`, or `(bids, asks)`.
fn stream_names(plan: &Arc<dyn ExecutionPlan>) -> String {
    let mut names = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
            names.push(format!("`{}`", source.table()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    match names.len() {
        1 => names.remove(0),
        _ => format!("({})", names.join(", ")),
    }
}

/// The sides whose time column every output row of a `join_type` join carries (not null).
fn timed_sides(join_type: JoinType) -> Vec<JoinSide> {
    match join_type {
        JoinType::Inner => vec![JoinSide::Left, JoinSide::Right],
        JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti => vec![JoinSide::Left],
        JoinType::Right | JoinType::RightSemi | JoinType::RightAnti => vec![JoinSide::Right],
        _ => Vec::new(),
    }
}

impl DisplayAs for IntervalJoinExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let on: Vec<String> = self
            .spec
            .on
            .iter()
            .map(|(l, r)| format!("({l}, {r})"))
            .collect();
        let bound = self.spec.bound;
        let lateness = self.spec.allowed_lateness;
        let column =
            |plan: &Arc<dyn ExecutionPlan>, c: usize| plan.schema().field(c).name().clone();
        let left_time = column(&self.left, bound.left_time);
        let right_time = column(&self.right, bound.right_time);
        let left_until = bound
            .left_until
            .map_or(left_time.clone(), |c| column(&self.left, c));
        let right_until = bound
            .right_until
            .map_or(right_time.clone(), |c| column(&self.right, c));
        write!(
            f,
            "IntervalJoinExec: join_type={}, on=[{}], ",
            self.spec.join_type,
            on.join(", ")
        )?;
        let (lower, upper) = (bound.lower, bound.upper);
        if bound.is_unbounded() {
            write!(
                f,
                "time=unbounded (a regular join), filter={}, state: every row kept to the end of the other input",
                self.spec
                    .filter
                    .as_ref()
                    .map_or("none".to_string(), |f| f.expression().to_string())
            )?;
            if matches!(self.left_exchange.strategy(), RoutingStrategy::FanIn) {
                write!(f, " (no equality keys: one stream)")?;
            }
            return Ok(());
        }
        match bound.left_until.is_some() || bound.right_until.is_some() {
            true => write!(
                f,
                "time=right.{right_until} - left.{left_time} >= {lower} and right.{right_time} - left.{left_until} <= {upper}"
            )?,
            false => write!(
                f,
                "time=right.{right_time} - left.{left_time} in [{lower}, {upper}]"
            )?,
        }
        if let Some(filter) = &self.spec.filter {
            write!(f, ", filter={}", filter.expression())?;
        }
        let (left_name, right_name) = (stream_names(&self.left), stream_names(&self.right));
        write!(
            f,
            ", state: rows of {left_name} kept while {right_name}'s watermark <= {left_until} + {}, rows of {right_name} while {left_name}'s watermark <= {right_until} + {}",
            bound.reach(JoinSide::Left).saturating_add(lateness),
            bound.reach(JoinSide::Right).saturating_add(lateness),
        )?;
        if matches!(self.left_exchange.strategy(), RoutingStrategy::FanIn) {
            write!(f, " (no equality keys: one stream)")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for IntervalJoinExec {
    fn name(&self) -> &str {
        "IntervalJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.left, &self.right]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false, false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let expressions: Vec<Arc<dyn PhysicalExpr>> = self
            .spec
            .on
            .iter()
            .flat_map(|(l, r)| [Arc::clone(l), Arc::clone(r)])
            .chain(self.spec.filter.iter().map(|f| Arc::clone(f.expression())))
            .collect();
        visit_expressions(&expressions, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Ok([left, right]) = <[_; 2]>::try_from(children) else {
            return internal_err!("IntervalJoinExec takes two children");
        };
        let left = StreamExchangeExec::from_plan(left, "IntervalJoinExec")?;
        let right = StreamExchangeExec::from_plan(right, "IntervalJoinExec")?;
        Ok(Arc::new(Self::try_new(left, right, self.spec.clone())?))
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
        let reservation = MemoryConsumer::new(format!("IntervalJoinExec[{partition}]"))
            .register(context.memory_pool());
        let join = JoinStream::try_new(self, partition, reservation)?;
        let inputs = AlignedInputs::new(
            self.left_exchange
                .execute_messages(partition, Arc::clone(&context))?,
            self.right_exchange
                .execute_messages(partition, Arc::clone(&context))?,
            Arc::clone(&join.progress),
        );
        let checkpoint =
            OperatorCheckpoint::of(&context, self, partition, &self.passed, self.schema())?;
        let restored = match &checkpoint {
            Some(checkpoint) => checkpoint.restored_state(),
            None => Ok(None),
        };
        let running = Some((inputs, join, checkpoint, restored));
        let outputs = futures::stream::unfold(running, |running| async move {
            let (mut inputs, mut join, checkpoint, restored) = running?;
            if let Err(e) = restored.and_then(|state| state.map_or(Ok(()), |s| join.restore(&s))) {
                return Some((Err(e), None));
            }
            loop {
                let Some(input) = inputs.next().await else {
                    if let Some(checkpoint) = &checkpoint {
                        checkpoint.end(Some(join.dropped_counts()));
                    }
                    return None;
                };
                let output = match input {
                    Ok(JoinInput::Message(side, StreamMessage::Batch(batch))) => {
                        join.on_batch(side, &batch)
                    }
                    Ok(JoinInput::Message(side, StreamMessage::Watermark(w))) => {
                        join.on_watermark(side, w)
                    }
                    Ok(JoinInput::Message(_, StreamMessage::Barrier(_))) => {
                        internal_err!("a join's barrier came unaligned")
                    }
                    Ok(JoinInput::Ended(side)) => join.on_watermark(side, i64::MAX),
                    Ok(JoinInput::Barrier(epoch)) => match &checkpoint {
                        Some(checkpoint) => join
                            .snapshot()
                            .and_then(|state| checkpoint.write(epoch, state))
                            .map(Some),
                        None => {
                            internal_err!("a checkpoint barrier reached an operator outside it")
                        }
                    },
                    Err(e) => Err(e),
                };
                match output {
                    Ok(Some(batch)) => {
                        return Some((Ok(batch), Some((inputs, join, checkpoint, Ok(None)))));
                    }
                    Ok(None) => continue,
                    Err(e) => return Some((Err(e), None)),
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            outputs,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
