//! The format of partial states, the rows that cross the shuffle in two-phase aggregation:
//! written by the partial step ([`super::PartialAggregate`]) and read by the final step's
//! merge mode.
//!
//! One row per (window, GROUP BY keys) of one batch (or, without a window, per held group):
//! `__window_start` (Int64, event-time units; 0 without a window), the key columns, each
//! aggregate's state columns (`GroupsAccumulator::state`), and `__records` (UInt64: the input
//! records counted in that row). Over hopping windows a row is a pane's, not a window's: the
//! records of one slide, which the final step adds to each window holding the pane
//! ([`PartialStates::into_windows`]), so a record is sent once rather than once per window.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array, UInt64Array};
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;

use super::spec::AggregateSpec;

/// Name of the window-start column of partial states.
pub const WINDOW_START_COLUMN: &str = "__window_start";
/// Name of the record-count column of partial states.
pub const RECORDS_COLUMN: &str = "__records";

/// The layout of one aggregation's partial states.
#[derive(Debug, Clone)]
pub struct PartialStateFormat {
    schema: SchemaRef,
    /// Number of key columns (without the window start).
    key_count: usize,
    /// Number of state columns of each aggregate, in order after the key columns.
    state_widths: Vec<usize>,
}

impl PartialStateFormat {
    /// The format of `spec`'s partial states.
    pub fn try_new(spec: &AggregateSpec) -> Result<Self> {
        let key_fields: Vec<Field> = spec
            .keys()
            .into_iter()
            .map(|(i, _)| spec.schema.field(i).clone())
            .collect();
        let key_count = key_fields.len();
        let mut fields = vec![Arc::new(Self::window_start_field())];
        fields.extend(key_fields.into_iter().map(Arc::new));
        let mut state_widths = Vec::with_capacity(spec.aggregates.len());
        for aggregate in &spec.aggregates {
            let state_fields = aggregate.state_fields()?;
            state_widths.push(state_fields.len());
            fields.extend(state_fields);
        }
        fields.push(Arc::new(Field::new(
            RECORDS_COLUMN,
            DataType::UInt64,
            false,
        )));
        Ok(Self {
            schema: Arc::new(Schema::new(fields)),
            key_count,
            state_widths,
        })
    }

    /// The window-start field of the states.
    pub fn window_start_field() -> Field {
        Field::new(WINDOW_START_COLUMN, DataType::Int64, false)
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The key fields (without the window start), in order.
    pub fn key_fields(&self) -> Vec<Field> {
        (1..=self.key_count)
            .map(|i| self.schema.field(i).clone())
            .collect()
    }

    /// The GROUP BY key columns (without the window) of the states, to route on.
    pub fn key_columns(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        (1..=self.key_count)
            .map(|i| Arc::new(Column::new(self.schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
            .collect()
    }

    /// A batch of states from its parts.
    pub fn batch(
        &self,
        starts: ArrayRef,
        keys: Vec<ArrayRef>,
        states: Vec<ArrayRef>,
        records: UInt64Array,
        rows: usize,
    ) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        columns.push(starts);
        columns.extend(keys);
        columns.extend(states);
        columns.push(Arc::new(records) as ArrayRef);
        let options =
            datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            self.schema(),
            columns,
            &options,
        )?)
    }

    /// Splits `batch` (of [`Self::schema`]) into its parts.
    pub fn split(&self, batch: &RecordBatch) -> Result<PartialStates> {
        let key_count = self.key_count;
        let expected = 2 + key_count + self.state_widths.iter().sum::<usize>();
        if batch.num_columns() != expected {
            return internal_err!(
                "partial states with {} columns, expected {expected}",
                batch.num_columns()
            );
        }
        let columns = batch.columns();
        let mut at = 1 + key_count;
        let states = self
            .state_widths
            .iter()
            .map(|width| {
                let state = columns[at..at + width].to_vec();
                at += width;
                state
            })
            .collect();
        let (Some(starts), Some(records)) = (
            columns[0].as_primitive_opt::<Int64Type>(),
            columns[at].as_primitive_opt::<UInt64Type>(),
        ) else {
            return internal_err!("partial states without Int64 window starts and UInt64 counts");
        };
        Ok(PartialStates {
            starts: starts.clone(),
            keys: columns[1..1 + key_count].to_vec(),
            states,
            records: records.clone(),
        })
    }
}

/// The parts of a batch of partial states, as the final step reads them.
pub struct PartialStates {
    pub starts: Int64Array,
    pub keys: Vec<ArrayRef>,
    pub states: Vec<Vec<ArrayRef>>,
    pub records: UInt64Array,
}

impl PartialStates {
    /// The input records the states count.
    pub fn record_count(&self) -> u64 {
        self.records.values().iter().sum()
    }

    /// Pane states (each starting a slide of hopping windows `count` slides long) as the
    /// states of the windows that hold each pane and start after `closed_through`: one piece
    /// per window position, the panes' latest windows first. A piece whose windows are all
    /// open shares the panes' key and state columns (so the final step interns their keys
    /// once for all pieces); a window state counts the pane's records in the pane's latest
    /// window only.
    pub fn into_windows(
        self,
        slide: i64,
        count: i64,
        closed_through: i64,
    ) -> Result<Vec<PartialStates>> {
        let mut pieces = Vec::with_capacity(count as usize);
        for j in 0..count {
            let starts: Int64Array = self.starts.unary(|pane| pane.wrapping_sub(j * slide));
            let records = if j == 0 {
                self.records.clone()
            } else {
                UInt64Array::from_value(0, starts.len())
            };
            let piece = PartialStates {
                starts,
                keys: self.keys.clone(),
                states: self.states.clone(),
                records,
            };
            if piece
                .starts
                .values()
                .iter()
                .all(|start| *start > closed_through)
            {
                pieces.push(piece);
                continue;
            }
            let open: BooleanArray = piece
                .starts
                .values()
                .iter()
                .map(|start| Some(*start > closed_through))
                .collect();
            if open.true_count() > 0 {
                pieces.push(piece.filter(&open)?);
            }
        }
        Ok(pieces)
    }

    /// The rows `keep` selects.
    pub fn filter(self, keep: &BooleanArray) -> Result<Self> {
        let each = |arrays: Vec<ArrayRef>| -> Result<Vec<ArrayRef>> {
            arrays
                .iter()
                .map(|a| Ok(filter(a.as_ref(), keep)?))
                .collect()
        };
        Ok(Self {
            starts: filter(&self.starts, keep)?
                .as_primitive::<Int64Type>()
                .clone(),
            keys: each(self.keys)?,
            states: self.states.into_iter().map(each).collect::<Result<_>>()?,
            records: filter(&self.records, keep)?
                .as_primitive::<UInt64Type>()
                .clone(),
        })
    }
}
