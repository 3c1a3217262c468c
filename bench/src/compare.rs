//! Comparing two query results as multisets of rows: the differential oracle's judge.
//!
//! Rows are compared cell by cell: floats within a relative tolerance (absolute below 1;
//! NaN equals NaN, since
//! both engines must produce the same NaN), everything else exactly through its `ScalarValue`.
//! Unless the query orders its output, both sides are sorted first, by their non-float cells,
//! then their float cells, so that rounding noise in a float cannot shuffle otherwise equal
//! rows differently on the two sides.
//!
//! For results too large to hold as rows, [`Fingerprint`] gives an order-insensitive summary:
//! row count, a sum of row hashes over the non-float columns, and per-column float sums.

use std::cmp::Ordering;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::{Result, ScalarValue};
use freshet_engine::changelog::without_op;

/// Relative tolerance of float comparisons.
pub const FLOAT_TOLERANCE: f64 = 1e-9;

#[derive(Debug, Clone)]
enum Cell {
    Null,
    Float(f64),
    Value(ScalarValue),
}

fn cell(array: &dyn Array, row: usize) -> Result<Cell> {
    if array.is_null(row) {
        return Ok(Cell::Null);
    }
    Ok(match array.data_type() {
        DataType::Float64 => Cell::Float(array.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => Cell::Float(array.as_primitive::<Float32Type>().value(row) as f64),
        _ => Cell::Value(ScalarValue::try_from_array(array, row)?),
    })
}

fn rows_of(batches: &[RecordBatch]) -> Result<Vec<Vec<Cell>>> {
    let mut rows = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .map(|column| cell(column.as_ref(), row))
                    .collect::<Result<_>>()?,
            );
        }
    }
    Ok(rows)
}

fn order_exact(a: &Cell, b: &Cell) -> Ordering {
    match (a, b) {
        (Cell::Null, Cell::Null) => Ordering::Equal,
        (Cell::Null, _) => Ordering::Less,
        (_, Cell::Null) => Ordering::Greater,
        (Cell::Value(x), Cell::Value(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        _ => Ordering::Equal,
    }
}

fn order_float(a: &Cell, b: &Cell) -> Ordering {
    match (a, b) {
        (Cell::Float(x), Cell::Float(y)) => x.total_cmp(y),
        _ => Ordering::Equal,
    }
}

fn sort_rows(rows: &mut [Vec<Cell>]) {
    rows.sort_by(|a, b| {
        let exact = a.iter().zip(b).map(|(x, y)| order_exact(x, y));
        let floats = a.iter().zip(b).map(|(x, y)| order_float(x, y));
        exact
            .chain(floats)
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    });
}

fn floats_match(x: f64, y: f64) -> bool {
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    // Relative, with an absolute floor for results near zero (sums that cancel out).
    x == y || (x - y).abs() <= FLOAT_TOLERANCE * x.abs().max(y.abs()).max(1.0)
}

fn cells_match(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Null, Cell::Null) => true,
        (Cell::Float(x), Cell::Float(y)) => floats_match(*x, *y),
        (Cell::Value(x), Cell::Value(y)) => x == y,
        _ => false,
    }
}

fn show(row: &[Cell]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|c| match c {
            Cell::Null => "NULL".to_string(),
            Cell::Float(f) => format!("{f:?}"),
            Cell::Value(v) => v.to_string(),
        })
        .collect();
    format!("({})", cells.join(", "))
}

/// Compares `actual` with `expected`; `Err` describes the first difference.
/// `ordered`: the row order must match too.
pub fn compare_results(
    expected: &[RecordBatch],
    actual: &[RecordBatch],
    ordered: bool,
) -> std::result::Result<(), String> {
    let describe = |batches: &[RecordBatch]| {
        batches.first().map(|b| {
            b.schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect::<Vec<_>>()
        })
    };
    if let (Some(e), Some(a)) = (describe(expected), describe(actual))
        && e != a
    {
        return Err(format!("column types differ: expected {e:?}, got {a:?}"));
    }
    let mut expected_rows = rows_of(expected).map_err(|e| e.to_string())?;
    let mut actual_rows = rows_of(actual).map_err(|e| e.to_string())?;
    if expected_rows.len() != actual_rows.len() {
        return Err(format!(
            "expected {} rows, got {}",
            expected_rows.len(),
            actual_rows.len()
        ));
    }
    if !ordered {
        sort_rows(&mut expected_rows);
        sort_rows(&mut actual_rows);
    }
    for (index, (e, a)) in expected_rows.iter().zip(&actual_rows).enumerate() {
        let same = e.len() == a.len() && e.iter().zip(a).all(|(x, y)| cells_match(x, y));
        if !same {
            return Err(format!(
                "row {index} of {} differs: expected {}, got {}",
                expected_rows.len(),
                show(e),
                show(a)
            ));
        }
    }
    Ok(())
}

/// Checks that every row of `part` is a row of `whole`, each row of `whole` used once (a
/// multiset containment, cells compared as in [`compare_results`]); `Err` shows the first
/// row of `part` that is not.
pub fn contains_results(
    whole: &[RecordBatch],
    part: &[RecordBatch],
) -> std::result::Result<(), String> {
    let whole_rows = rows_of(whole).map_err(|e| e.to_string())?;
    let part_rows = rows_of(part).map_err(|e| e.to_string())?;
    let mut used = vec![false; whole_rows.len()];
    for row in &part_rows {
        let found = whole_rows
            .iter()
            .enumerate()
            .position(|(index, candidate)| {
                !used[index]
                    && candidate.len() == row.len()
                    && candidate.iter().zip(row).all(|(x, y)| cells_match(x, y))
            });
        match found {
            Some(index) => used[index] = true,
            None => {
                return Err(format!(
                    "{} is not among the {} rows expected",
                    show(row),
                    whole_rows.len()
                ));
            }
        }
    }
    Ok(())
}

/// An order-insensitive summary of a result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fingerprint {
    pub rows: u64,
    /// Wrapping sum of per-row hashes over the non-float columns.
    pub row_hash_sum: u64,
    /// Sum of each float column's non-NaN values.
    pub float_sums: Vec<f64>,
}

impl Fingerprint {
    /// Adds `batch` to the summary.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        // A changelog is compared by its rows' values.
        let batch = &without_op(batch)?;
        let (floats, exact): (Vec<_>, Vec<_>) = batch
            .columns()
            .iter()
            .partition(|c| matches!(c.data_type(), DataType::Float64 | DataType::Float32));
        self.float_sums.resize(floats.len(), 0.0);
        for (sum, column) in self.float_sums.iter_mut().zip(&floats) {
            let column = datafusion::arrow::compute::cast(column, &DataType::Float64)?;
            *sum += column
                .as_primitive::<Float64Type>()
                .iter()
                .flatten()
                .filter(|v| !v.is_nan())
                .sum::<f64>();
        }
        if !exact.is_empty() {
            let mut hashes = vec![0u64; batch.num_rows()];
            create_hashes(
                exact.iter().copied(),
                &RandomState::with_seed(0),
                &mut hashes,
            )?;
            self.row_hash_sum = hashes
                .iter()
                .fold(self.row_hash_sum, |sum, h| sum.wrapping_add(*h));
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Whether two summaries describe the same multiset of rows (floats within tolerance,
    /// scaled by the row count since sums accumulate rounding).
    pub fn matches(&self, other: &Self) -> bool {
        self.rows == other.rows
            && self.row_hash_sum == other.row_hash_sum
            && self.float_sums.len() == other.float_sums.len()
            && self.float_sums.iter().zip(&other.float_sums).all(|(x, y)| {
                (x - y).abs() <= 1e-9 * (self.rows.max(1) as f64) * x.abs().max(y.abs()).max(1.0)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn batch(keys: Vec<Option<&str>>, ids: Vec<i64>, values: Vec<f64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(Int64Array::from(ids)),
                Arc::new(Float64Array::from(values)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn accepts_reordered_rows_and_rounding_noise() {
        let expected = batch(
            vec![Some("a"), None, Some("b")],
            vec![1, 2, 3],
            vec![0.1 + 0.2, f64::NAN, 5.0],
        );
        let actual = batch(
            vec![Some("b"), Some("a"), None],
            vec![3, 1, 2],
            vec![5.0, 0.3, f64::NAN],
        );
        assert_eq!(compare_results(&[expected], &[actual], false), Ok(()));
    }

    #[test]
    fn detects_missing_changed_and_reordered_rows() {
        let expected = batch(vec![Some("a"), Some("b")], vec![1, 2], vec![1.0, 2.0]);
        let fewer = batch(vec![Some("a")], vec![1], vec![1.0]);
        assert!(compare_results(std::slice::from_ref(&expected), &[fewer], false).is_err());
        let changed = batch(vec![Some("a"), Some("b")], vec![1, 2], vec![1.0, 2.000001]);
        let error =
            compare_results(std::slice::from_ref(&expected), &[changed], false).unwrap_err();
        assert!(error.contains("row 1"), "{error}");
        let null_key = batch(vec![Some("a"), None], vec![1, 2], vec![1.0, 2.0]);
        assert!(compare_results(std::slice::from_ref(&expected), &[null_key], false).is_err());
        let swapped = batch(vec![Some("b"), Some("a")], vec![2, 1], vec![2.0, 1.0]);
        assert!(
            compare_results(
                std::slice::from_ref(&expected),
                std::slice::from_ref(&swapped),
                true
            )
            .is_err()
        );
        assert!(compare_results(&[expected], &[swapped], false).is_ok());
    }

    #[test]
    fn fingerprints_ignore_order_but_not_content() {
        let a = batch(vec![Some("a"), Some("b")], vec![1, 2], vec![1.0, 2.0]);
        let b = batch(vec![Some("b"), Some("a")], vec![2, 1], vec![2.0, 1.0]);
        let c = batch(vec![Some("b"), Some("a")], vec![3, 1], vec![2.0, 1.0]);
        let print = |batch: &RecordBatch| {
            let mut fingerprint = Fingerprint::default();
            fingerprint.add(batch).unwrap();
            fingerprint
        };
        assert!(print(&a).matches(&print(&b)));
        assert!(!print(&a).matches(&print(&c)));
    }
}
