//! Freshet's changelog: the output of an EMIT CHANGES aggregation.
//!
//! A changelog is an upsert stream keyed by the aggregation's GROUP BY keys and window start.
//! Each row carries its operation in a last column named `op`, as Flink's row kinds in upsert
//! mode:
//!
//! | `op` | meaning |
//! |---|---|
//! | `+I` | the key's first row: insert it |
//! | `+U` | the key's row is now this one: replace it (insert it if absent) |
//! | `-D` | the key has no row any more: delete it (nothing if absent) |
//!
//! `+I` and `+U` are both upserts: applying a changelog in order, by key, gives at any moment
//! the result so far, and at the end of bounded input the EMIT FINAL result. A `-D` row's key
//! columns name the row it deletes; its other columns are not the deleted values.
//!
//! Operators above a changelog either apply its meaning or are refused at planning: a
//! projection carries `op` along. A HAVING of a tumbling, hopping or whole-stream
//! changelog is applied by the aggregation itself ([`GroupHaving`]), which knows which groups'
//! rows are out: a group that stops passing is deleted once, one that never passed is never
//! mentioned. Any other filter over a changelog (a WHERE over it, a session changelog's
//! HAVING) turns an upsert that fails its predicate into a deletion of that key, since the
//! key's earlier row may have passed ([`apply_filter`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, StringArray};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use datafusion::physical_expr::PhysicalExpr;

/// The name of a changelog's operation column.
pub const OP_COLUMN: &str = "op";

/// The field metadata key that marks the operation column.
const OP_MARKER: &str = "freshet.changelog";

/// A changelog row's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    Insert,
    Update,
    Delete,
}

impl ChangeOp {
    pub fn code(self) -> &'static str {
        match self {
            Self::Insert => "+I",
            Self::Update => "+U",
            Self::Delete => "-D",
        }
    }

    /// The operation of `code` (`+I`, `+U` or `-D`).
    pub fn parse(code: &str) -> Option<Self> {
        match code {
            "+I" => Some(Self::Insert),
            "+U" => Some(Self::Update),
            "-D" => Some(Self::Delete),
            _ => None,
        }
    }

    /// An upsert (insert or update) or a deletion.
    pub fn of_upsert(inserted: bool) -> Self {
        if inserted { Self::Insert } else { Self::Update }
    }
}

/// The operation column's field.
pub fn op_field() -> Field {
    Field::new(OP_COLUMN, DataType::Utf8, false)
        .with_metadata(HashMap::from([(OP_MARKER.to_string(), "op".to_string())]))
}

/// The position of the operation column of `schema`, if it is a changelog's.
pub fn op_column(schema: &Schema) -> Option<usize> {
    schema
        .fields()
        .iter()
        .position(|field| field.metadata().contains_key(OP_MARKER))
}

/// `schema` with the operation column appended (as it is, if it has one).
pub fn with_op_column(schema: &SchemaRef) -> SchemaRef {
    if op_column(schema).is_some() {
        return Arc::clone(schema);
    }
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(op_field());
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `batch` without its operation column, if it has one: a changelog's rows as plain rows
/// (to compare per-record changelogs with running aggregates).
pub fn without_op(batch: &RecordBatch) -> Result<RecordBatch> {
    match op_column(&batch.schema()) {
        Some(op) => {
            let keep: Vec<usize> = (0..batch.num_columns()).filter(|&i| i != op).collect();
            Ok(batch.project(&keep)?)
        }
        None => Ok(batch.clone()),
    }
}

/// The operation column of `ops`. Every code is two bytes, so the offsets are known and the
/// values are written in one pass (a per-record changelog builds one per input row).
pub fn op_array(ops: impl IntoIterator<Item = ChangeOp>) -> ArrayRef {
    let mut values: Vec<u8> = Vec::new();
    for op in ops {
        values.extend_from_slice(op.code().as_bytes());
    }
    let rows = values.len() / 2;
    let offsets: ScalarBuffer<i32> = (0..=rows as i32).map(|i| i * 2).collect();
    // SAFETY: the offsets start at 0 and grow by 2 up to `values.len()`, and each pair of
    // bytes is one of the ASCII codes: valid offsets and UTF-8. Validating them again would
    // cost as much as writing them, once per changelog row.
    Arc::new(unsafe {
        StringArray::new_unchecked(
            OffsetBuffer::new_unchecked(offsets),
            Buffer::from_vec(values),
            None,
        )
    })
}

/// A filter over a changelog: an upsert whose `passed` is not true becomes a deletion of its
/// key (its earlier row may have passed); a deletion passes as it is. Every row stays.
pub fn apply_filter(batch: &RecordBatch, passed: &BooleanArray, op: usize) -> Result<RecordBatch> {
    let Some(ops) = batch.column(op).as_any().downcast_ref::<StringArray>() else {
        return internal_err!(
            "a changelog's op column is {}",
            batch.column(op).data_type()
        );
    };
    let delete = ChangeOp::Delete.code();
    let mut changed = false;
    let codes: Vec<&str> = ops
        .iter()
        .zip(passed.iter())
        .map(|(code, passed)| match code {
            // A NULL predicate fails the row, as in WHERE.
            Some(code) if code == delete || passed == Some(true) => code,
            _ => {
                changed = true;
                delete
            }
        })
        .collect();
    if !changed {
        return Ok(batch.clone());
    }
    let mut columns = batch.columns().to_vec();
    columns[op] = Arc::new(StringArray::from(codes));
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// HAVING over a changelog of numbered groups, applied where the groups live: each group
/// remembers whether its last row went out (passed), so a row that passes is an insert when
/// its group was not out and an update when it was; a row that fails deletes its group when
/// it was out and is dropped when it was not. Groups are numbered as the group table numbers
/// them, and leave from the front when their windows close.
#[derive(Debug)]
pub struct GroupHaving {
    predicate: Arc<dyn PhysicalExpr>,
    /// Per group id: whether its last row went out.
    out: VecDeque<bool>,
}

impl GroupHaving {
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        Self {
            predicate,
            out: VecDeque::new(),
        }
    }

    /// `batch` (a changelog batch whose row `r` is of group `groups[r]`, in order) with the
    /// HAVING applied; `None` when no row is left.
    pub fn apply(&mut self, batch: &RecordBatch, groups: &[usize]) -> Result<Option<RecordBatch>> {
        let Some(op) = op_column(&batch.schema()) else {
            return internal_err!("HAVING over a changelog without its op column");
        };
        let passed = self
            .predicate
            .evaluate(batch)?
            .into_array(batch.num_rows())?;
        let Some(passed) = passed.as_any().downcast_ref::<BooleanArray>() else {
            return internal_err!("a HAVING predicate gave {}", passed.data_type());
        };
        if let Some(&largest) = groups.iter().max()
            && largest >= self.out.len()
        {
            self.out.resize(largest + 1, false);
        }
        let mut keep = Vec::with_capacity(groups.len());
        let mut ops = Vec::with_capacity(groups.len());
        for (row, &group) in groups.iter().enumerate() {
            let passes = passed.is_valid(row) && passed.value(row);
            let was_out = std::mem::replace(&mut self.out[group], passes);
            match (passes, was_out) {
                (true, _) => ops.push(ChangeOp::of_upsert(!was_out)),
                (false, true) => ops.push(ChangeOp::Delete),
                (false, false) => {}
            }
            keep.push(passes || was_out);
        }
        if ops.is_empty() {
            return Ok(None);
        }
        let kept = filter_record_batch(batch, &BooleanArray::from(keep))?;
        let mut columns = kept.columns().to_vec();
        columns[op] = op_array(ops);
        Ok(Some(RecordBatch::try_new(kept.schema(), columns)?))
    }

    /// Whether each group's last row went out, by group id: what a checkpoint keeps.
    pub fn snapshot(&self) -> BooleanArray {
        self.out.iter().map(|out| Some(*out)).collect()
    }

    /// Takes back what [`Self::snapshot`] kept.
    pub fn restore(&mut self, out: &BooleanArray) {
        self.out = out.values().iter().collect();
    }

    /// Forgets the first `groups` groups (their windows closed; the others move down).
    pub fn forget_first(&mut self, groups: usize) {
        self.out.drain(..groups.min(self.out.len()));
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.out.capacity()
    }
}

/// The rows of `batch` that a filter keeps: over a changelog (`op` given) every row, with
/// failing upserts made deletions; otherwise the rows for which `passed` is true.
pub fn filter_rows(
    batch: &RecordBatch,
    passed: &BooleanArray,
    op: Option<usize>,
) -> Result<RecordBatch> {
    match op {
        Some(op) => apply_filter(batch, passed, op),
        None => Ok(filter_record_batch(batch, passed)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};

    fn changelog(values: &[i64], ops: &[ChangeOp]) -> RecordBatch {
        let schema = with_op_column(&Arc::new(Schema::new(vec![Field::new(
            "n",
            DataType::Int64,
            true,
        )])));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(values.to_vec())),
                op_array(ops.iter().copied()),
            ],
        )
        .unwrap()
    }

    fn codes(batch: &RecordBatch) -> Vec<String> {
        batch
            .column(1)
            .as_string::<i32>()
            .iter()
            .map(|c| c.unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn a_failing_upsert_deletes_its_key_and_a_deletion_passes() {
        use ChangeOp::*;
        let batch = changelog(&[1, 2, 3, 4], &[Insert, Update, Delete, Update]);
        let passed = BooleanArray::from(vec![Some(true), Some(false), Some(false), None]);
        let out = filter_rows(&batch, &passed, op_column(&batch.schema())).unwrap();
        assert_eq!(out.num_rows(), 4);
        assert_eq!(codes(&out), ["+I", "-D", "-D", "-D"]);
    }

    #[test]
    fn having_by_group_deletes_a_group_once_and_never_one_that_was_not_out() {
        use ChangeOp::*;
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
        // n < 3, over groups 0, 1, 0, 0, 1, 0 with counts 1, 5, 2, 3, 6, 4.
        let predicate = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("n", 0)),
            Operator::Lt,
            Arc::new(Literal::new(datafusion::common::ScalarValue::Int64(Some(
                3,
            )))),
        ));
        let mut having = GroupHaving::new(predicate);
        let batch = changelog(
            &[1, 5, 2, 3, 6, 4],
            &[Insert, Insert, Update, Update, Update, Update],
        );
        let out = having.apply(&batch, &[0, 1, 0, 0, 1, 0]).unwrap().unwrap();
        let counts: Vec<i64> = out
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .values()
            .to_vec();
        assert_eq!(counts, [1, 2, 3]);
        assert_eq!(codes(&out), ["+I", "+U", "-D"]);
        // Group 0 closes; group 1 becomes group 0 and was never out.
        having.forget_first(1);
        let batch = changelog(&[7], &[Update]);
        assert!(having.apply(&batch, &[0]).unwrap().is_none());
    }

    #[test]
    fn without_a_changelog_a_filter_drops_failing_rows() {
        let batch = changelog(&[1, 2], &[ChangeOp::Insert, ChangeOp::Update]);
        let passed = BooleanArray::from(vec![true, false]);
        assert_eq!(filter_rows(&batch, &passed, None).unwrap().num_rows(), 1);
    }
}
