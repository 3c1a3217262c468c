//! The vocabulary of streaming aggregation, shared by the operator, its modes and the partial
//! step of two-phase aggregation: what a GROUP BY computes ([`AggregateSpec`]), the window it
//! is keyed by ([`WindowKey`]), when it emits ([`AggregateEmit`]), and when a window closes.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::changelog::with_op_column;
use crate::kernels::RunningAggregates;
use crate::window::WindowSpec;

/// A GROUP BY expression over the input and its output name.
pub type GroupExpr = (Arc<dyn PhysicalExpr>, String);

/// The window a GROUP BY is keyed by.
#[derive(Debug, Clone)]
pub struct WindowKey {
    /// Position of the window key among the GROUP BY expressions.
    pub position: usize,
    pub spec: WindowSpec,
    /// The event-time expression the window is computed from.
    pub time: Arc<dyn PhysicalExpr>,
}

impl WindowKey {
    /// Windows starting at or before this are closed once the watermark is `watermark`:
    /// their end (a session's last record plus the gap) plus `allowed_lateness` is at or
    /// below it.
    pub fn closed_through(&self, allowed_lateness: i64, watermark: i64) -> i64 {
        self.spec
            .size()
            .saturating_add(allowed_lateness)
            .saturating_neg()
            .saturating_add(watermark)
    }

    pub fn is_session(&self) -> bool {
        matches!(self.spec, WindowSpec::Session { .. })
    }
}

/// When results leave the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateEmit {
    /// One row per group and window when the window closes (or at the end of input).
    Final,
    /// An upsert changelog row per input record.
    ChangesPerRecord,
    /// An upsert changelog row per group changed by an input batch.
    ChangesPerBatch,
}

/// What a streaming aggregation computes: DataFusion's lowered GROUP BY and aggregates, the
/// window, when it emits, and its output schema.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    /// GROUP BY expressions over the input, with their output names.
    pub group_by: Vec<GroupExpr>,
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    pub window: Option<WindowKey>,
    pub emit: AggregateEmit,
    /// How long after a window's end late records still update it, in event-time units.
    pub allowed_lateness: i64,
    /// The schema of DataFusion's single-phase aggregate for the same query.
    pub schema: SchemaRef,
    /// A changelog's HAVING, over the output's columns, applied by the operator: it knows
    /// which of its groups' rows are out, so a group that stops passing is deleted once and
    /// one that never passed is not (tumbling, hopping and whole-stream changelogs).
    pub having: Option<Arc<dyn PhysicalExpr>>,
    /// Whether a changelog's output carries its `op` column: set once the plan above it has
    /// been made to read one (`ChangelogRule`), so that rules before that see DataFusion's
    /// aggregate schema.
    pub changelog_op: bool,
}

impl AggregateSpec {
    /// The GROUP BY keys other than the window, with their positions among the GROUP BY
    /// expressions (and so among the output's columns).
    pub fn keys(&self) -> Vec<(usize, &GroupExpr)> {
        let window = self.window.as_ref().map(|w| w.position);
        self.group_by
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != window)
            .collect()
    }

    /// The key expressions of [`Self::keys`].
    pub fn key_exprs(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        self.keys()
            .into_iter()
            .map(|(_, (expr, _))| Arc::clone(expr))
            .collect()
    }

    /// The output fields of the group table's keys: the window start (as the output's
    /// window column) first, then the other keys.
    pub fn table_fields(&self) -> Vec<Field> {
        let window = self.window.as_ref().map(|w| w.position);
        window
            .into_iter()
            .chain(self.keys().into_iter().map(|(i, _)| i))
            .map(|i| self.schema.field(i).clone())
            .collect()
    }

    /// Whether the changelog deletes rows (EMIT CHANGES on session windows: a merged
    /// session's old (keys, window start) with NULL aggregates).
    pub fn emits_deletions(&self) -> bool {
        self.emit != AggregateEmit::Final && self.window.as_ref().is_some_and(WindowKey::is_session)
    }

    /// The per-record kernels of the aggregates over `input`, if every one has one (the
    /// per-record changelog and session changes need them).
    pub fn running_kernels(&self, input: &Schema) -> Option<RunningAggregates> {
        RunningAggregates::plan(&self.aggregates, &self.filters, input)
    }

    /// Windows starting at or before this are closed at `watermark` (none without a window).
    pub fn closed_through(&self, watermark: i64) -> i64 {
        match &self.window {
            Some(window) => window.closed_through(self.allowed_lateness, watermark),
            None => i64::MIN,
        }
    }
}

impl AggregateSpec {
    /// Makes `schema` the operator's output schema: under EMIT CHANGES the changelog's `op`
    /// column is appended once asked for ([`crate::changelog`]), and where the changelog
    /// deletes merged sessions (with NULL aggregates) the aggregates are nullable. Idempotent.
    pub(super) fn complete_schema(&mut self) {
        if self.emit == AggregateEmit::Final {
            return;
        }
        if self.changelog_op {
            self.schema = with_op_column(&self.schema);
        }
        if self.emits_deletions() {
            self.schema = with_nullable_aggregates(
                &self.schema,
                self.aggregates.len(),
                usize::from(self.changelog_op),
            );
        }
    }
}

/// `schema` (a changelog's, ending in `after` columns: its `op` column, or none yet) with its
/// `aggregates` fields before those nullable.
fn with_nullable_aggregates(schema: &SchemaRef, aggregates: usize, after: usize) -> SchemaRef {
    let end = schema.fields().len().saturating_sub(after);
    let first = end.saturating_sub(aggregates);
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            f.as_ref()
                .clone()
                .with_nullable(f.is_nullable() || (first..end).contains(&i))
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}
