//! [`ConstantDivisorExpr`]: an integer column divided by a literal (`auction % 10000`,
//! `id / 16`) is computed by a multiplication.
//!
//! DataFusion evaluates `x % 10000` with arrow's checked division, one 64-bit division
//! instruction a value (half of Nexmark q13's time). Freshet's kernel
//! ([`ConstantDivisor`]) multiplies by the divisor's reciprocal in 128-bit fixed point and
//! gives the same answers for every value; [`crate::kernel_expressions`] puts it in place of
//! each `/` and `%` of an Int64 or Int32 expression by a literal of its type other than 0,
//! 1 and -1.
//! The expression keeps the one it stands in for: EXPLAIN shows that, and a plan sent to a
//! worker carries it.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type, Schema};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::sort_properties::ExprProperties;
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
use freshet_engine::kernels::ConstantDivisor;

/// `dividend / divisor` or `dividend % divisor` by [`ConstantDivisor`]: see the module
/// documentation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConstantDivisorExpr {
    /// The expression this one computes, with the literal divisor on its right.
    binary: BinaryExpr,
    divisor: ConstantDivisor,
}

impl ConstantDivisorExpr {
    /// `binary` computed by [`ConstantDivisor`], if it divides by (or takes the remainder
    /// of) an Int64 or Int32 literal other than 0, 1 and -1. The caller checks that the
    /// dividend has the literal's type.
    pub fn of(binary: &BinaryExpr) -> Option<Self> {
        if !matches!(binary.op(), Operator::Divide | Operator::Modulo) {
            return None;
        }
        let divisor = match binary.right().downcast_ref::<Literal>()?.value() {
            ScalarValue::Int64(Some(divisor)) => *divisor,
            ScalarValue::Int32(Some(divisor)) => i64::from(*divisor),
            _ => return None,
        };
        Some(Self {
            binary: binary.clone(),
            divisor: ConstantDivisor::new(divisor)?,
        })
    }

    /// The expression this one computes.
    pub fn binary(&self) -> &BinaryExpr {
        &self.binary
    }

    fn divide(&self, dividend: &ArrayRef) -> Result<ArrayRef> {
        let divisor = &self.divisor;
        let remainder = *self.binary.op() == Operator::Modulo;
        Ok(match dividend.data_type() {
            DataType::Int64 => {
                let values = dividend.as_primitive::<Int64Type>();
                match remainder {
                    true => Arc::new(divisor.remainders_i64(values)),
                    false => Arc::new(divisor.quotients_i64(values)),
                }
            }
            DataType::Int32 => {
                let values = dividend.as_primitive::<Int32Type>();
                match remainder {
                    true => Arc::new(divisor.remainders_i32(values)),
                    false => Arc::new(divisor.quotients_i32(values)),
                }
            }
            other => return internal_err!("{self} divides a column of {other}"),
        })
    }
}

impl fmt::Display for ConstantDivisorExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.binary.fmt(f)
    }
}

impl PhysicalExpr for ConstantDivisorExpr {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.binary.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.binary.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        Ok(match self.binary.left().evaluate(batch)? {
            ColumnarValue::Array(dividend) => ColumnarValue::Array(self.divide(&dividend)?),
            ColumnarValue::Scalar(dividend) => {
                let quotient = self.divide(&dividend.to_array()?)?;
                ColumnarValue::Scalar(ScalarValue::try_from_array(&quotient, 0)?)
            }
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![self.binary.left()]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [dividend] = <[_; 1]>::try_from(children)
            .or_else(|_| internal_err!("{self} takes one child, the dividend"))?;
        let binary = BinaryExpr::new(dividend, *self.binary.op(), Arc::clone(self.binary.right()));
        Ok(Arc::new(Self {
            binary,
            divisor: self.divisor,
        }))
    }

    fn evaluate_bounds(&self, children: &[&Interval]) -> Result<Interval> {
        let divisor = self.binary.right().evaluate_bounds(&[])?;
        self.binary.evaluate_bounds(&[children[0], &divisor])
    }

    fn get_properties(&self, children: &[ExprProperties]) -> Result<ExprProperties> {
        let divisor = self.binary.right().get_properties(&[])?;
        self.binary.get_properties(&[children[0].clone(), divisor])
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.binary.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{col, lit};

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int32, false),
        ]);
        let a = Int64Array::from(vec![Some(123_456), None, Some(-98_765), Some(i64::MIN)]);
        let b = Int32Array::from(vec![7, -7, i32::MIN, i32::MAX]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(a), Arc::new(b)]).unwrap()
    }

    #[test]
    fn answers_equal_datafusion_s_binary_expression() {
        let batch = batch();
        let schema = batch.schema();
        let cases: Vec<(&str, ScalarValue)> = vec![
            ("a", ScalarValue::Int64(Some(10_000))),
            ("a", ScalarValue::Int64(Some(-3))),
            ("b", ScalarValue::Int32(Some(16))),
            ("b", ScalarValue::Int32(Some(-1_000))),
        ];
        for (column, divisor) in cases {
            for op in [Operator::Divide, Operator::Modulo] {
                let binary =
                    BinaryExpr::new(col(column, &schema).unwrap(), op, lit(divisor.clone()));
                let ours = ConstantDivisorExpr::of(&binary).unwrap();
                let expected = binary.evaluate(&batch).unwrap().into_array(4).unwrap();
                let actual = ours.evaluate(&batch).unwrap().into_array(4).unwrap();
                assert_eq!(&actual, &expected, "{binary}");
                assert_eq!(ours.to_string(), binary.to_string());
            }
        }
    }

    #[test]
    fn takes_only_integer_literals_that_divide() {
        let schema = batch().schema();
        let a = || col("a", &schema).unwrap();
        let of = |op, divisor| ConstantDivisorExpr::of(&BinaryExpr::new(a(), op, lit(divisor)));
        assert!(of(Operator::Modulo, ScalarValue::Int64(Some(10))).is_some());
        assert!(of(Operator::Modulo, ScalarValue::Int64(Some(-1))).is_none());
        assert!(of(Operator::Divide, ScalarValue::Int64(Some(0))).is_none());
        assert!(of(Operator::Divide, ScalarValue::Int64(None)).is_none());
        assert!(of(Operator::Multiply, ScalarValue::Int64(Some(10))).is_none());
        assert!(of(Operator::Divide, ScalarValue::Float64(Some(10.0))).is_none());
        let by_column = BinaryExpr::new(a(), Operator::Modulo, a());
        assert!(ConstantDivisorExpr::of(&by_column).is_none());
    }
}
