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

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder, Int64Array, UInt32Array,
    new_null_array,
};
use datafusion::arrow::compute::{cast, concat_batches, interleave, interleave_record_batch, take};
use datafusion::arrow::datatypes::{DataType, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinSide, JoinType, Result, internal_err, plan_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
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
use futures::stream::BoxStream;
use futures::stream::PollNext;
use std::sync::atomic::{AtomicI64, Ordering as AtomicOrdering};

use super::side_state::{Chunk, Position, SideState};
use super::{KeyEquality, key_comparator};
use crate::exchange::StreamExchangeExec;
use crate::late_records::LateRecords;
use crate::operator_metrics::StatefulMetrics;
use crate::plan_util::{evaluate, stateful_properties, visit_expressions};
use crate::progress::PartitionProgress;
use crate::source::StreamSourceExec;
use crate::watermark::{StreamMessage, event_times, time_range as batch_time_range};
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

    fn until(&self, side: JoinSide) -> Option<usize> {
        match side {
            JoinSide::Left => self.left_until,
            _ => self.right_until,
        }
    }

    /// The other side's `until` values a row of `side` spanning `[time, until]` can match:
    /// the range its probe reads from the other side's kept rows.
    fn probe_range(&self, side: JoinSide, time: i64, until: i64) -> (i64, i64) {
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
    fn reach(&self, side: JoinSide) -> i64 {
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
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
    left_exchange: Arc<StreamExchangeExec>,
    right_exchange: Arc<StreamExchangeExec>,
    spec: IntervalJoinSpec,
    join_schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// Per side whose time column is an event time of the output: the column's position in
    /// the output and each output partition's progress in it.
    output_times: Vec<OutputTime>,
    /// The side outputs of each side's late rows.
    late_records: [LateRecords; 2],
}

/// An event-time column of the join's output: the time column of `side`.
#[derive(Debug, Clone)]
struct OutputTime {
    side: JoinSide,
    column: usize,
    progress: Arc<PartitionProgress>,
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
        let tagged = |messages: BoxStream<'static, Result<StreamMessage>>, side: JoinSide| {
            messages
                .map(move |message| (side, Some(message)))
                .chain(futures::stream::once(async move { (side, None) }))
        };
        let left = tagged(
            self.left_exchange
                .execute_messages(partition, Arc::clone(&context))?,
            JoinSide::Left,
        );
        let right = tagged(
            self.right_exchange.execute_messages(partition, context)?,
            JoinSide::Right,
        );
        // Read the side whose watermark is behind first: the side ahead waits in its
        // exchange's channels, so neither side's state grows with the other's lag. A side
        // with nothing ready never holds the other back.
        let join = JoinStream::try_new(self, partition, reservation)?;
        let progress = Arc::clone(&join.progress);
        let messages =
            futures::stream::select_with_strategy(left, right, move |turn: &mut bool| {
                let (left, right) = progress.watermarks();
                *turn = !*turn;
                match left.cmp(&right) {
                    std::cmp::Ordering::Less => PollNext::Left,
                    std::cmp::Ordering::Greater => PollNext::Right,
                    std::cmp::Ordering::Equal if *turn => PollNext::Left,
                    std::cmp::Ordering::Equal => PollNext::Right,
                }
            })
            .boxed();
        let outputs = futures::stream::unfold(Some((messages, join)), |running| async move {
            let (mut messages, mut join) = running?;
            loop {
                let (side, message) = messages.next().await?;
                let output = match message {
                    Some(Ok(StreamMessage::Batch(batch))) => join.on_batch(side, &batch),
                    Some(Ok(StreamMessage::Watermark(w))) => join.on_watermark(side, w),
                    Some(Err(e)) => Err(e),
                    None => join.on_watermark(side, i64::MAX),
                };
                match output {
                    Ok(Some(batch)) => return Some((Ok(batch), Some((messages, join)))),
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

/// One side of a running join.
struct Side {
    state: SideState,
    watermark: i64,
    keys: Vec<PhysicalExprRef>,
    /// The left side's key types, which this side's keys are cast to.
    key_types: Vec<DataType>,
    time_column: usize,
    /// The column that ends its rows' reach, if not the event time.
    until_column: Option<usize>,
    role: SideRole,
    late_records: LateRecords,
}

/// What a side's rows become in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SideRole {
    /// Pairs only (an inner join, the inner side of an outer join).
    Paired,
    /// Pairs, and rows that never matched with nulls for the other side (the outer side).
    Outer,
    /// A row alone, the first time it matches (the kept side of a semi join).
    Semi,
    /// A row alone, when it is freed without having matched (the kept side of an anti join).
    Anti,
    /// Nothing: only filters the other side's rows (the other side of a semi or anti join).
    Filter,
}

impl SideRole {
    fn of(join_type: JoinType, side: JoinSide) -> Self {
        let left = side == JoinSide::Left;
        match join_type {
            JoinType::Inner => Self::Paired,
            JoinType::Left | JoinType::Right | JoinType::Full
                if join_type == JoinType::Full || (join_type == JoinType::Left) == left =>
            {
                Self::Outer
            }
            JoinType::Left | JoinType::Right => Self::Paired,
            JoinType::LeftSemi | JoinType::RightSemi
                if (join_type == JoinType::LeftSemi) == left =>
            {
                Self::Semi
            }
            JoinType::LeftAnti | JoinType::RightAnti
                if (join_type == JoinType::LeftAnti) == left =>
            {
                Self::Anti
            }
            _ => Self::Filter,
        }
    }

    /// Whether the pairs its rows find go out (inner and outer joins).
    fn emits_pairs(self) -> bool {
        matches!(self, Self::Paired | Self::Outer)
    }

    /// Whether its kept rows remember if they matched.
    fn tracks_matches(self) -> bool {
        matches!(self, Self::Outer | Self::Semi | Self::Anti)
    }

    /// Whether rows that never matched go out when freed.
    fn emits_unmatched(self) -> bool {
        matches!(self, Self::Outer | Self::Anti)
    }
}

/// Both sides' watermarks, read by the choice of which side to read next.
#[derive(Default)]
struct Progress {
    left: AtomicI64,
    right: AtomicI64,
}

impl Progress {
    fn watermarks(&self) -> (i64, i64) {
        (
            self.left.load(AtomicOrdering::Relaxed),
            self.right.load(AtomicOrdering::Relaxed),
        )
    }

    fn set(&self, side: JoinSide, watermark: i64) {
        let slot = match side {
            JoinSide::Left => &self.left,
            _ => &self.right,
        };
        slot.store(watermark, AtomicOrdering::Relaxed);
    }
}

/// The state of one output partition of the join.
struct JoinStream {
    left: Side,
    right: Side,
    progress: Arc<Progress>,
    common: Common,
    reservation: MemoryReservation,
    partition: usize,
    /// The output's event-time columns, and the progress last recorded in each.
    output_times: Vec<(OutputTime, i64)>,
}

/// What both sides of a running join read.
struct Common {
    bound: TimeBound,
    allowed_lateness: i64,
    filter: Option<JoinFilter>,
    join_schema: SchemaRef,
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    projection: Option<Vec<usize>>,
    random_state: RandomState,
    metrics: StatefulMetrics,
    name: String,
    output_schema: SchemaRef,
}

/// The pairs one probe found: rows of the probing batch and positions in the other side.
#[derive(Default)]
struct Pairs {
    probe: Vec<u32>,
    kept: Vec<Position>,
}

impl JoinStream {
    fn try_new(
        exec: &IntervalJoinExec,
        partition: usize,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        let spec = &exec.spec;
        let left_schema = exec.left.schema();
        let right_schema = exec.right.schema();
        let key_types = spec
            .on
            .iter()
            .map(|(l, _)| l.data_type(&left_schema))
            .collect::<Result<Vec<_>>>()?;
        let side = |which, keys: Vec<PhysicalExprRef>, time_column| Side {
            state: SideState::default(),
            watermark: i64::MIN,
            keys,
            key_types: key_types.clone(),
            time_column,
            until_column: spec.bound.until(which),
            role: SideRole::of(spec.join_type, which),
            late_records: exec.late_records[usize::from(which == JoinSide::Right)].clone(),
        };
        Ok(Self {
            left: side(
                JoinSide::Left,
                spec.on.iter().map(|(l, _)| Arc::clone(l)).collect(),
                spec.bound.left_time,
            ),
            right: side(
                JoinSide::Right,
                spec.on.iter().map(|(_, r)| Arc::clone(r)).collect(),
                spec.bound.right_time,
            ),
            progress: Arc::new(Progress {
                left: AtomicI64::new(i64::MIN),
                right: AtomicI64::new(i64::MIN),
            }),
            common: Common {
                bound: spec.bound,
                allowed_lateness: spec.allowed_lateness,
                filter: spec.filter.clone(),
                join_schema: Arc::clone(&exec.join_schema),
                left_schema,
                right_schema,
                projection: spec.projection.clone(),
                random_state: RandomState::with_seed(0x10_1e),
                metrics: StatefulMetrics::new(&exec.metrics, partition),
                name: format!("IntervalJoinExec[{partition}]"),
                output_schema: exec.schema(),
            },
            reservation,
            partition,
            output_times: exec
                .output_times
                .iter()
                .map(|t| (t.clone(), i64::MIN))
                .collect(),
        })
    }

    /// The side `which` and the other one.
    fn sides(&mut self, which: JoinSide) -> (&mut Side, &mut Side, &Common) {
        match which {
            JoinSide::Left => (&mut self.left, &mut self.right, &self.common),
            _ => (&mut self.right, &mut self.left, &self.common),
        }
    }

    fn on_batch(&mut self, which: JoinSide, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        self.common.metrics.records_in.add(rows);
        if rows == 0 {
            return Ok(None);
        }
        let (side, other, common) = self.sides(which);
        let times = event_times(batch.column(side.time_column))?
            .as_primitive::<Int64Type>()
            .clone();
        // Where each row's reach ends: its `until` column, or its own time.
        let untils = match side.until_column {
            Some(column) => event_times(batch.column(column))?
                .as_primitive::<Int64Type>()
                .clone(),
            None => times.clone(),
        };
        let mut keys = evaluate(&side.keys, batch)?;
        for (key, key_type) in keys.iter_mut().zip(&side.key_types) {
            if key.data_type() != key_type {
                *key = cast(key, key_type)?;
            }
        }
        let own_limit = if side.watermark == i64::MIN {
            i64::MIN
        } else {
            side.watermark.saturating_sub(common.allowed_lateness)
        };
        let keep_through = common.freed_through(which, other.watermark);
        let mut hashes = vec![0; rows];
        create_hashes(&keys, &common.random_state, &mut hashes)?;
        // Rows that can match, and the rows that are late.
        let mut late = Vec::new();
        let mut unmatchable = Vec::new();
        let nullable: Vec<&ArrayRef> = keys.iter().filter(|k| k.null_count() > 0).collect();
        // A regular join's rows match whatever their times, null ones included.
        let time_nulls =
            !common.bound.is_unbounded() && (times.null_count() > 0 || untils.null_count() > 0);
        // The time and until ranges of the matchable rows. Usually no key or time is null
        // and no row is late: then every row can match, found in one pass.
        let mut time_range = batch_time_range(&times)
            .filter(|(earliest, _)| nullable.is_empty() && !time_nulls && *earliest >= own_limit);
        let every_row_matchable = time_range.is_some();
        let mut until_range = match side.until_column {
            Some(_) if every_row_matchable => batch_time_range(&untils),
            _ => time_range,
        };
        let matchable: Vec<u32> = if every_row_matchable {
            (0..rows as u32).collect()
        } else {
            let mut matchable = Vec::with_capacity(rows);
            for row in 0..rows {
                if (time_nulls && (times.is_null(row) || untils.is_null(row)))
                    || nullable.iter().any(|k| k.is_null(row))
                {
                    unmatchable.push(row as u32);
                } else if times.value(row) < own_limit {
                    late.push(row);
                } else {
                    let widen = |range: &mut Option<(i64, i64)>, value: i64| {
                        let (first, last) = range.unwrap_or((value, value));
                        *range = Some((first.min(value), last.max(value)));
                    };
                    widen(&mut time_range, times.value(row));
                    widen(&mut until_range, untils.value(row));
                    matchable.push(row as u32);
                }
            }
            matchable
        };
        common.metrics.late_dropped.add(late.len());
        if !late.is_empty() && side.late_records.wanted() {
            let mut selected = vec![false; rows];
            for &row in &late {
                selected[row] = true;
            }
            side.late_records
                .send(batch, &BooleanArray::from(selected))?;
        }
        // The other side's until values a row can match.
        let bound = common.bound;
        let reach = |row: usize| bound.probe_range(which, times.value(row), untils.value(row));
        if let (Some((first, _)), Some((_, last))) = (time_range, until_range) {
            let from = bound.probe_range(which, first, last).0;
            let to = bound.probe_range(which, first, last).1;
            other.state.index_reaching(from, to);
        }
        // Probe the other side's rows.
        // Most rows find one match or none.
        let mut pairs = Pairs {
            probe: Vec::with_capacity(matchable.len()),
            kept: Vec::with_capacity(matchable.len()),
        };
        let mut candidates = Vec::new();
        // Per kept chunk met, the comparison of its keys with the batch's (a hash may be
        // another key's). Without equality keys every pair within the bound is a candidate.
        // Indexed by the chunk's sequence number from the oldest kept one.
        let first_chunk = other.state.first_sequence();
        let mut same_keys: Vec<Option<KeyEquality>> = Vec::new();
        for &row in &matchable {
            let row_index = row as usize;
            let (from, to) = reach(row_index);
            candidates.clear();
            other
                .state
                .probe(hashes[row_index], from, to, &mut candidates);
            for &position in &candidates {
                let same_key = keys.is_empty() || {
                    let slot = (position.chunk - first_chunk) as usize;
                    if same_keys.len() <= slot {
                        same_keys.resize_with(slot + 1, || None);
                    }
                    let compare = match &mut same_keys[slot] {
                        Some(compare) => compare,
                        empty => {
                            let Some(chunk) = other.state.chunk(position.chunk) else {
                                continue;
                            };
                            empty.insert(key_comparator(&chunk.keys, &keys)?)
                        }
                    };
                    compare.is_equal(position.row as usize, row_index)
                };
                if same_key {
                    pairs.probe.push(row);
                    pairs.kept.push(position);
                }
            }
        }
        let pairs = match &common.filter {
            Some(filter) if !pairs.probe.is_empty() => {
                apply_filter(filter, which, batch, &other.state, pairs)?
            }
            _ => pairs,
        };
        let mut outputs = Vec::new();
        // The probing rows that matched, where this side's role asks (an inner join's does
        // not).
        let probe_matched = (side.role == SideRole::Semi
            || side.role.tracks_matches()
            || side.role.emits_unmatched())
        .then(|| {
            let mut matched = vec![false; rows];
            for &row in &pairs.probe {
                matched[row as usize] = true;
            }
            matched
        });
        let matched_row = |row: u32| probe_matched.as_ref().is_some_and(|m| m[row as usize]);
        if other.role.tracks_matches() {
            // The kept rows matching for the first time: a semi join's output.
            let mut first_matches = Vec::new();
            for position in &pairs.kept {
                if let Some(chunk) = other.state.chunk_mut(position.chunk)
                    && let Some(matched) = chunk.matched.as_mut()
                    && !matched.get_bit(position.row as usize)
                {
                    matched.set_bit(position.row as usize, true);
                    first_matches.push(*position);
                }
            }
            if other.role == SideRole::Semi && !first_matches.is_empty() {
                let rows = gather(&other.state, &first_matches)?;
                outputs.push(common.project(rows.with_schema(Arc::clone(&common.join_schema))?)?);
            }
        }
        if side.role == SideRole::Semi {
            let matched: Vec<u32> = (0..rows as u32).filter(|&row| matched_row(row)).collect();
            if !matched.is_empty() {
                let rows = take_record(batch, &UInt32Array::from(matched))?;
                outputs.push(common.project(rows.with_schema(Arc::clone(&common.join_schema))?)?);
            }
        }
        if side.role.emits_pairs() && !pairs.probe.is_empty() {
            outputs.push(common.paired(which, batch, &other.state, pairs)?);
        }
        // Keep the rows a later row of the other side may still match; the outer side's
        // others go out unmatched now. Usually every row is kept.
        let mut unmatched = unmatchable;
        let kept = match until_range {
            Some((earliest, _)) if every_row_matchable && earliest > keep_through => matchable,
            _ => {
                let mut kept = Vec::new();
                for &row in &matchable {
                    if untils.value(row as usize) > keep_through {
                        kept.push(row);
                    } else if !matched_row(row) {
                        unmatched.push(row);
                    }
                }
                kept
            }
        };
        if !kept.is_empty() {
            let matched = side.role.tracks_matches().then(|| {
                let mut matched = BooleanBufferBuilder::new(kept.len());
                for &r in &kept {
                    matched.append(matched_row(r));
                }
                matched
            });
            // Usually every row is kept: the batch is kept as it is, not copied.
            let kept_all = kept.len() == rows;
            let (chunk_batch, chunk_times, chunk_untils, chunk_keys, chunk_hashes) = if kept_all {
                (batch.clone(), times, untils, keys, hashes)
            } else {
                let rows = UInt32Array::from(kept);
                let chunk_keys = keys
                    .iter()
                    .map(|key| Ok(take(key.as_ref(), &rows, None)?))
                    .collect::<Result<Vec<_>>>()?;
                let take_times = |times: &Int64Array| -> Result<Int64Array> {
                    Ok(take(times, &rows, None)?
                        .as_primitive::<Int64Type>()
                        .clone())
                };
                (
                    take_record(batch, &rows)?,
                    take_times(&times)?,
                    take_times(&untils)?,
                    chunk_keys,
                    rows.values().iter().map(|&r| hashes[r as usize]).collect(),
                )
            };
            let (min_time, max_time) = match until_range {
                Some(range) if kept_all => range,
                _ => batch_time_range(&chunk_untils).unwrap_or((i64::MAX, i64::MIN)),
            };
            let earliest_event_time = match (side.until_column, time_range) {
                (None, _) => min_time,
                (Some(_), Some((earliest, _))) if kept_all => earliest,
                (Some(_), _) => batch_time_range(&chunk_times).map_or(i64::MAX, |(e, _)| e),
            };
            let chunk = Chunk {
                batch: chunk_batch,
                times: chunk_untils,
                keys: chunk_keys,
                matched,
                max_time,
                min_time,
                earliest_event_time,
            };
            side.state.insert(chunk, chunk_hashes);
        }
        if side.role.emits_unmatched() && !unmatched.is_empty() {
            unmatched.sort_unstable();
            let rows = UInt32Array::from(unmatched);
            let own = take_record(batch, &rows)?;
            outputs.push(common.project(common.unmatched(which, side.role, own)?)?);
        }
        self.account()?;
        self.common.output(outputs)
    }

    fn on_watermark(&mut self, which: JoinSide, watermark: i64) -> Result<Option<RecordBatch>> {
        let other_side = match which {
            JoinSide::Left => JoinSide::Right,
            _ => JoinSide::Left,
        };
        let (side, _, _) = self.sides(which);
        if watermark <= side.watermark {
            return Ok(None);
        }
        side.watermark = watermark;
        self.progress.set(which, watermark);
        let freed_through = self.common.freed_through(other_side, watermark);
        let (other, _, _) = self.sides(other_side);
        let mut outputs = Vec::new();
        let other_role = other.role;
        if other_role.emits_unmatched() {
            let mut positions = Vec::new();
            for (sequence, chunk) in other.state.live_chunks() {
                if chunk.min_time > freed_through {
                    continue;
                }
                let Some(matched) = chunk.matched.as_mut() else {
                    continue;
                };
                for row in 0..chunk.times.len() {
                    if !matched.get_bit(row) && chunk.times.value(row) <= freed_through {
                        matched.set_bit(row, true);
                        positions.push(Position {
                            chunk: sequence,
                            row: row as u32,
                        });
                    }
                }
            }
            if !positions.is_empty() {
                let rows = gather(&other.state, &positions)?;
                outputs.push(rows);
            }
        }
        let (other, _, _) = self.sides(other_side);
        other.state.free_through(freed_through);
        let outputs = outputs
            .into_iter()
            .map(|rows| {
                let rows = self.common.unmatched(other_side, other_role, rows)?;
                self.common.project(rows)
            })
            .collect::<Result<Vec<_>>>()?;
        self.account()?;
        let output = self.common.output(outputs)?;
        // Only progress moved: an empty batch wakes the exchange above to read it.
        match (output, self.record_progress()) {
            (None, true) => Ok(Some(RecordBatch::new_empty(Arc::clone(
                &self.common.output_schema,
            )))),
            (output, _) => Ok(output),
        }
    }

    /// Records, per event-time column of the output, the smallest time this partition may
    /// still emit in it (see the module documentation); whether any moved.
    fn record_progress(&mut self) -> bool {
        let lateness = self.common.allowed_lateness;
        let bound = self.common.bound;
        // `watermark - lateness + shift`, where a finished input (+infinity) stays finished.
        let at = |watermark: i64, shift: i64| match watermark {
            i64::MAX => i64::MAX,
            _ => watermark.saturating_sub(lateness).saturating_add(shift),
        };
        let (left, right) = (self.left.watermark, self.right.watermark);
        let mut moved = false;
        for (time, recorded) in &mut self.output_times {
            let (own, other, shift) = match time.side {
                JoinSide::Left => (&self.left, right, bound.upper.saturating_neg()),
                _ => (&self.right, left, bound.lower),
            };
            // A row still to come is not late; a kept one is not freed yet, and with an
            // until column its own time may lie anywhere before that: the earliest kept.
            let kept = match own.until_column {
                None => at(other, shift),
                Some(_) => own.state.earliest_event_time(),
            };
            let next = at(own.watermark, 0).min(kept);
            if next > *recorded {
                *recorded = next;
                time.progress.record(self.partition, next);
                moved = true;
            }
        }
        moved
    }

    /// Accounts both sides' state in the memory pool.
    fn account(&mut self) -> Result<()> {
        let bytes = self.left.state.size() + self.right.state.size();
        self.common.metrics.state_bytes.set(bytes);
        if let Err(e) = self.reservation.try_resize(bytes) {
            return plan_err!(
                "{} keeps more rows than the memory limit allows ({bytes} bytes of join state): narrow the join's time bound or raise the limit ({e})",
                self.common.name
            );
        }
        Ok(())
    }
}

impl Common {
    /// The last event time of a row of `side` the other side's watermark `watermark` no
    /// longer keeps: later rows of the other side, not late, are all beyond its reach.
    fn freed_through(&self, side: JoinSide, watermark: i64) -> i64 {
        if watermark == i64::MAX {
            return i64::MAX;
        }
        watermark
            .saturating_sub(self.allowed_lateness)
            .saturating_sub(self.bound.reach(side))
            .saturating_sub(1)
    }

    /// Rows of side `which` (in `role`) that never matched, as output rows: alone in an anti
    /// join, with nulls for the other side's columns in an outer one.
    fn unmatched(&self, which: JoinSide, role: SideRole, rows: RecordBatch) -> Result<RecordBatch> {
        match role {
            SideRole::Anti => Ok(rows.with_schema(Arc::clone(&self.join_schema))?),
            _ => self.null_padded(which, rows),
        }
    }

    /// Rows of side `which` with nulls for the other side's columns.
    fn null_padded(&self, which: JoinSide, rows: RecordBatch) -> Result<RecordBatch> {
        let count = rows.num_rows();
        let nulls = |schema: &Schema| -> Vec<ArrayRef> {
            schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), count))
                .collect()
        };
        let columns = match which {
            JoinSide::Left => [rows.columns().to_vec(), nulls(&self.right_schema)].concat(),
            _ => [nulls(&self.left_schema), rows.columns().to_vec()].concat(),
        };
        Ok(RecordBatch::try_new(
            Arc::clone(&self.join_schema),
            columns,
        )?)
    }

    /// The pairs' rows, `batch`'s rows `pairs.probe` beside the other side's kept rows
    /// `pairs.kept`, as output rows: only the columns the output keeps are built.
    fn paired(
        &self,
        which: JoinSide,
        batch: &RecordBatch,
        kept: &SideState,
        pairs: Pairs,
    ) -> Result<RecordBatch> {
        let left_width = self.left_schema.fields().len();
        let (probe_first, kept_first) = match which {
            JoinSide::Left => (0, left_width),
            _ => (left_width, 0),
        };
        let probe_columns = probe_first..probe_first + batch.num_columns();
        let probe_rows = UInt32Array::from(pairs.probe);
        let (kept_batches, kept_rows) = chunk_indices(kept, &pairs.kept)?;
        // Pairs that all met one kept chunk (the usual case) gather from it with `take`.
        let one_chunk_rows = match kept_batches.as_slice() {
            [_] => Some(UInt32Array::from_iter_values(
                kept_rows.iter().map(|&(_, row)| row as u32),
            )),
            _ => None,
        };
        let column = |c: usize| -> Result<ArrayRef> {
            if probe_columns.contains(&c) {
                return Ok(take(batch.column(c - probe_first), &probe_rows, None)?);
            }
            if let (Some(rows), [kept]) = (&one_chunk_rows, kept_batches.as_slice()) {
                return Ok(take(kept.column(c - kept_first), rows, None)?);
            }
            let arrays: Vec<&dyn Array> = kept_batches
                .iter()
                .map(|kept| kept.column(c - kept_first).as_ref())
                .collect();
            Ok(interleave(&arrays, &kept_rows)?)
        };
        let columns: Result<Vec<ArrayRef>> = match &self.projection {
            Some(columns) => columns.iter().map(|&c| column(c)).collect(),
            None => (0..self.join_schema.fields().len()).map(column).collect(),
        };
        let options = RecordBatchOptions::new().with_row_count(Some(probe_rows.len()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.output_schema),
            columns?,
            &options,
        )?)
    }

    /// `batch`, in the join's schema, as the output keeps it.
    fn project(&self, batch: RecordBatch) -> Result<RecordBatch> {
        Ok(match &self.projection {
            Some(columns) => batch.project(columns)?,
            None => batch,
        })
    }

    /// The output pieces (each as the output keeps it) as one batch.
    fn output(&self, pieces: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
        let mut pieces: Vec<RecordBatch> =
            pieces.into_iter().filter(|b| b.num_rows() > 0).collect();
        let batch = match (pieces.pop(), pieces.is_empty()) {
            (None, _) => return Ok(None),
            (Some(only), true) => only,
            (Some(last), false) => {
                pieces.push(last);
                concat_batches(&self.output_schema, &pieces)?
            }
        };
        self.metrics.baseline.record_output(batch.num_rows());
        Ok(Some(batch))
    }
}

/// `batch`'s columns at `rows`.
fn take_columns(batch: &RecordBatch, rows: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), rows, None))
        .collect::<std::result::Result<_, _>>()?)
}

fn take_record(batch: &RecordBatch, rows: &UInt32Array) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        batch.schema(),
        take_columns(batch, rows)?,
    )?)
}

/// The kept rows at `positions`, in that order.
fn gather(state: &SideState, positions: &[Position]) -> Result<RecordBatch> {
    let (batches, indices) = chunk_indices(state, positions)?;
    Ok(interleave_record_batch(&batches, &indices)?)
}

/// The chunks `positions` name, and each position as `(chunk in that list, row)`.
#[allow(clippy::type_complexity)]
fn chunk_indices<'a>(
    state: &'a SideState,
    positions: &[Position],
) -> Result<(Vec<&'a RecordBatch>, Vec<(usize, usize)>)> {
    // Per kept chunk (by sequence number from the oldest held), its place in `batches`.
    const ABSENT: usize = usize::MAX;
    let first = state.first_sequence();
    let mut slots: Vec<usize> = Vec::new();
    let mut batches = Vec::new();
    let mut indices = Vec::with_capacity(positions.len());
    for position in positions {
        let Some(offset) = position.chunk.checked_sub(first).map(|o| o as usize) else {
            return internal_err!("interval join: a freed chunk was referenced");
        };
        if slots.len() <= offset {
            slots.resize(offset + 1, ABSENT);
        }
        if slots[offset] == ABSENT {
            let Some(chunk) = state.chunk(position.chunk) else {
                return internal_err!("interval join: a freed chunk was referenced");
            };
            batches.push(&chunk.batch);
            slots[offset] = batches.len() - 1;
        }
        indices.push((slots[offset], position.row as usize));
    }
    Ok((batches, indices))
}

/// The pairs for which the join's filter is true. The filter reads columns of both sides,
/// gathered per pair into its own schema.
fn apply_filter(
    filter: &JoinFilter,
    probing: JoinSide,
    batch: &RecordBatch,
    state: &SideState,
    pairs: Pairs,
) -> Result<Pairs> {
    let probe_rows = UInt32Array::from(pairs.probe.clone());
    let (batches, indices) = chunk_indices(state, &pairs.kept)?;
    let columns = filter
        .column_indices()
        .iter()
        .map(|column| {
            if column.side == probing {
                Ok(take(
                    batch.column(column.index).as_ref(),
                    &probe_rows,
                    None,
                )?)
            } else {
                let arrays: Vec<&dyn Array> = batches
                    .iter()
                    .map(|b| b.column(column.index).as_ref())
                    .collect();
                Ok(interleave(&arrays, &indices)?)
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let intermediate = RecordBatch::try_new(Arc::clone(filter.schema()), columns)?;
    let verdict = filter
        .expression()
        .evaluate(&intermediate)?
        .into_array(intermediate.num_rows())?;
    let Some(verdict) = verdict.as_any().downcast_ref::<BooleanArray>() else {
        return internal_err!("a join filter gave {}", verdict.data_type());
    };
    let mut kept = Pairs::default();
    for (index, pass) in verdict.iter().enumerate() {
        if pass == Some(true) {
            kept.probe.push(pairs.probe[index]);
            kept.kept.push(pairs.kept[index]);
        }
    }
    Ok(kept)
}
