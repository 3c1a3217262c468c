//! [`AggregateInputs`]: what an aggregation evaluates on its input rows (the GROUP BY keys
//! other than the window, each aggregate's arguments, and its FILTER), and the rows of one
//! window assignment taken from them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;

use super::assignment::Assignment;
use crate::plan_util::evaluate;

/// The expressions an aggregation evaluates per input row.
#[derive(Debug, Clone)]
pub(crate) struct AggregateInputs {
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Per aggregate: its arguments, then its ORDER BY expressions.
    pub arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    literals: Arc<LiteralArrays>,
}

/// Literal arguments (`COUNT(*)` is `COUNT(1)`) as arrays, built once at the longest batch
/// length seen and sliced for each batch instead of filled anew.
#[derive(Debug, Default)]
struct LiteralArrays(Mutex<HashMap<(usize, usize), ArrayRef>>);

impl LiteralArrays {
    /// Argument `argument` of aggregate `aggregate`, the literal `literal`, for `rows` rows.
    fn get(
        &self,
        (aggregate, argument): (usize, usize),
        literal: &Literal,
        rows: usize,
    ) -> Result<ArrayRef> {
        let mut arrays = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(array) = arrays.get(&(aggregate, argument))
            && array.len() >= rows
        {
            return Ok(array.slice(0, rows));
        }
        let array = literal.value().to_array_of_size(rows)?;
        arrays.insert((aggregate, argument), Arc::clone(&array));
        Ok(array)
    }
}

/// [`AggregateInputs`] evaluated on a batch.
pub(crate) struct InputColumns {
    pub keys: Vec<ArrayRef>,
    pub arguments: Vec<Vec<ArrayRef>>,
    pub filters: Vec<Option<ArrayRef>>,
}

/// The rows of one assignment: key columns, arguments and filters.
pub(crate) type PickedColumns = (Vec<ArrayRef>, Vec<Vec<ArrayRef>>, Vec<Option<BooleanArray>>);

impl AggregateInputs {
    pub fn new(
        keys: Vec<Arc<dyn PhysicalExpr>>,
        aggregates: &[Arc<AggregateFunctionExpr>],
        filters: &[Option<Arc<dyn PhysicalExpr>>],
    ) -> Self {
        let arguments = aggregates
            .iter()
            .map(|a| {
                let mut arguments = a.expressions();
                arguments.extend(a.order_bys().iter().map(|o| Arc::clone(&o.expr)));
                arguments
            })
            .collect();
        Self {
            keys,
            arguments,
            filters: filters.to_vec(),
            literals: Arc::default(),
        }
    }

    pub fn evaluate(&self, batch: &RecordBatch) -> Result<InputColumns> {
        Ok(InputColumns {
            keys: evaluate(&self.keys, batch)?,
            arguments: self
                .arguments
                .iter()
                .enumerate()
                .map(|(aggregate, exprs)| self.evaluate_arguments(aggregate, exprs, batch))
                .collect::<Result<_>>()?,
            filters: self
                .filters
                .iter()
                .map(|f| match f {
                    Some(f) => Ok(Some(f.evaluate(batch)?.into_array(batch.num_rows())?)),
                    None => Ok(None),
                })
                .collect::<Result<_>>()?,
        })
    }

    /// Aggregate `aggregate`'s argument expressions on `batch`; literals from the cache.
    fn evaluate_arguments(
        &self,
        aggregate: usize,
        exprs: &[Arc<dyn PhysicalExpr>],
        batch: &RecordBatch,
    ) -> Result<Vec<ArrayRef>> {
        exprs
            .iter()
            .enumerate()
            .map(|(argument, expr)| match expr.downcast_ref::<Literal>() {
                Some(literal) => {
                    self.literals
                        .get((aggregate, argument), literal, batch.num_rows())
                }
                None => expr.evaluate(batch)?.into_array(batch.num_rows()),
            })
            .collect()
    }
}

impl InputColumns {
    /// The rows `assignment` takes part with.
    pub fn pick(&self, assignment: &Assignment) -> Result<PickedColumns> {
        Ok((
            assignment.pick(&self.keys)?,
            self.arguments
                .iter()
                .map(|a| assignment.pick(a))
                .collect::<Result<_>>()?,
            self.filters
                .iter()
                .map(|f| assignment.pick_filter(f))
                .collect::<Result<_>>()?,
        ))
    }
}
