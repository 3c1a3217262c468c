//! [`LiteralSetExpr`]: an expression compared with literals (`state = 'OR' OR state =
//! 'ID'`, `channel IN ('apple', 'google')`, `category = 10`) by one of Freshet's kernels
//! ([`StringSet`] for a Utf8View expression, [`IntegerSet`] for an Int64 or Int32 one): one
//! pass over the column whatever the number of literals, asking memory ahead.
//!
//! [`LiteralSetExpr::of`] takes an equality of the expression with a non-null literal
//! (either side), an `IN` list of such literals (not `NOT IN`), and an `OR` of two of those
//! over the same expression; applied bottom up ([`crate::kernel_expressions`]), it folds a
//! whole chain of ORs into one set. SQL's answer is kept: null where the value is null,
//! as each equality and their OR give.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type, Schema};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, InListExpr, Literal};
use freshet_engine::kernels::{IntegerSet, StringSet};

/// The literals a [`LiteralSetExpr`] compares with, by the kernel for their type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LiteralSet {
    Strings(StringSet),
    Integers(IntegerSet),
}

impl LiteralSet {
    /// The set of `literals`, if they are all strings or all integers.
    fn of(literals: &[LiteralValue<'_>]) -> Option<Self> {
        let strings: Option<Vec<&str>> = literals
            .iter()
            .map(|literal| match literal {
                LiteralValue::String(value) => Some(*value),
                LiteralValue::Integer(_) => None,
            })
            .collect();
        let integers: Option<Vec<i64>> = literals
            .iter()
            .map(|literal| match literal {
                LiteralValue::Integer(value) => Some(*value),
                LiteralValue::String(_) => None,
            })
            .collect();
        match (strings, integers) {
            (Some(strings), _) => Some(Self::Strings(StringSet::new(strings))),
            (_, Some(integers)) => Some(Self::Integers(IntegerSet::new(integers))),
            _ => None,
        }
    }

    fn values(&self) -> Vec<LiteralValue<'_>> {
        match self {
            Self::Strings(set) => set
                .literals()
                .iter()
                .map(|value| LiteralValue::String(value))
                .collect(),
            Self::Integers(set) => set
                .literals()
                .iter()
                .map(|&value| LiteralValue::Integer(value))
                .collect(),
        }
    }

    /// The number of literals.
    fn len(&self) -> usize {
        match self {
            Self::Strings(set) => set.literals().len(),
            Self::Integers(set) => set.literals().len(),
        }
    }

    /// Whether the kernel compares values of `data_type`.
    fn compares(&self, data_type: &DataType) -> bool {
        matches!(
            (self, data_type),
            (Self::Strings(_), DataType::Utf8View)
                | (Self::Integers(_), DataType::Int64 | DataType::Int32)
        )
    }

    fn sql(&self) -> String {
        let literals: Vec<String> = match self {
            Self::Strings(set) => set
                .literals()
                .iter()
                .map(|literal| format!("'{}'", literal.replace('\'', "''")))
                .collect(),
            Self::Integers(set) => set.literals().iter().map(i64::to_string).collect(),
        };
        literals.join(", ")
    }
}

/// A literal a [`LiteralSet`] may hold.
#[derive(Clone, Copy)]
enum LiteralValue<'a> {
    String(&'a str),
    Integer(i64),
}

/// The value of a non-null string or integer literal.
fn literal_value(expr: &Arc<dyn PhysicalExpr>) -> Option<LiteralValue<'_>> {
    match expr.downcast_ref::<Literal>()?.value() {
        ScalarValue::Utf8(Some(value))
        | ScalarValue::Utf8View(Some(value))
        | ScalarValue::LargeUtf8(Some(value)) => Some(LiteralValue::String(value)),
        ScalarValue::Int64(Some(value)) => Some(LiteralValue::Integer(*value)),
        ScalarValue::Int32(Some(value)) => Some(LiteralValue::Integer(i64::from(*value))),
        _ => None,
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct LiteralSetExpr {
    /// The expression compared.
    operand: Arc<dyn PhysicalExpr>,
    set: LiteralSet,
}

impl LiteralSetExpr {
    /// `operand` compared with the literals of `set`.
    pub fn new(operand: Arc<dyn PhysicalExpr>, set: LiteralSet) -> Self {
        Self { operand, set }
    }

    /// `expr` as a [`LiteralSetExpr`], if it compares a Utf8View, Int64 or Int32 expression
    /// of `schema` with literals of its kind as the module documentation says.
    pub fn of(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<Option<Self>> {
        if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
            return Ok(match binary.op() {
                Operator::Eq => {
                    let (left, right) = (binary.left(), binary.right());
                    match (literal_value(left), literal_value(right)) {
                        (None, Some(literal)) => Self::over(left, &[literal], schema)?,
                        (Some(literal), None) => Self::over(right, &[literal], schema)?,
                        _ => None,
                    }
                }
                Operator::Or => {
                    let left = binary.left().downcast_ref::<LiteralSetExpr>();
                    let right = binary.right().downcast_ref::<LiteralSetExpr>();
                    match (left, right) {
                        (Some(left), Some(right))
                            if left.operand.as_ref() == right.operand.as_ref() =>
                        {
                            let mut literals = left.set.values();
                            literals.extend(right.set.values());
                            Self::over(&left.operand, &literals, schema)?
                        }
                        _ => None,
                    }
                }
                _ => None,
            });
        }
        if let Some(in_list) = expr.downcast_ref::<InListExpr>() {
            if in_list.negated() {
                return Ok(None);
            }
            let literals: Option<Vec<LiteralValue>> =
                in_list.list().iter().map(literal_value).collect();
            return match literals {
                Some(literals) => Self::over(in_list.expr(), &literals, schema),
                None => Ok(None),
            };
        }
        Ok(None)
    }

    /// `operand` compared with `literals`, if a kernel compares them with its type in
    /// `schema`.
    fn over(
        operand: &Arc<dyn PhysicalExpr>,
        literals: &[LiteralValue<'_>],
        schema: &Schema,
    ) -> Result<Option<Self>> {
        let Some(set) = LiteralSet::of(literals) else {
            return Ok(None);
        };
        Ok(set
            .compares(&operand.data_type(schema)?)
            .then(|| Self::new(Arc::clone(operand), set)))
    }

    /// The expression compared.
    pub fn operand(&self) -> &Arc<dyn PhysicalExpr> {
        &self.operand
    }

    /// The literals.
    pub fn set(&self) -> &LiteralSet {
        &self.set
    }
}

impl PartialEq for LiteralSetExpr {
    fn eq(&self, other: &Self) -> bool {
        self.operand.as_ref() == other.operand.as_ref() && self.set == other.set
    }
}

impl Eq for LiteralSetExpr {}

impl Hash for LiteralSetExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.operand.hash(state);
        self.set.hash(state);
    }
}

impl fmt::Display for LiteralSetExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.set.len() {
            1 => write!(f, "{} = {}", self.operand, self.set.sql()),
            _ => write!(f, "{} IN ({})", self.operand, self.set.sql()),
        }
    }
}

impl PhysicalExpr for LiteralSetExpr {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.operand.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let (values, scalar) = match self.operand.evaluate(batch)? {
            ColumnarValue::Array(values) => (values, false),
            ColumnarValue::Scalar(value) => (value.to_array()?, true),
        };
        let found = match (&self.set, values.data_type()) {
            (LiteralSet::Strings(set), DataType::Utf8View) => {
                set.contains_each(values.as_string_view())
            }
            (LiteralSet::Integers(set), DataType::Int64) => {
                set.contains_each(values.as_primitive::<Int64Type>())
            }
            (LiteralSet::Integers(set), DataType::Int32) => {
                set.contains_each(values.as_primitive::<Int32Type>())
            }
            (_, other) => return internal_err!("{self} compares a column of {other}"),
        };
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&found, 0)?),
            false => ColumnarValue::Array(Arc::new(found)),
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.operand]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [operand] = <[_; 1]>::try_from(children)
            .or_else(|_| internal_err!("{self} takes one child, the expression compared"))?;
        Ok(Arc::new(Self::new(operand, self.set.clone())))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.operand.fmt_sql(f)?;
        match self.set.len() {
            1 => write!(f, " = {}", self.set.sql()),
            _ => write!(f, " IN ({})", self.set.sql()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{binary, col, in_list, lit};

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("state", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, false),
        ]);
        let state = StringViewArray::from(vec![
            Some("OR"),
            None,
            Some("ID"),
            Some("CA"),
            Some("a city whose name is long"),
            Some("WA"),
        ]);
        let n = Int64Array::from(vec![1, 2, 3, 4, 5, 6]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(state), Arc::new(n)]).unwrap()
    }

    fn text(value: &str) -> Arc<dyn PhysicalExpr> {
        lit(ScalarValue::Utf8View(Some(value.to_string())))
    }

    fn value(expr: &dyn PhysicalExpr, batch: &RecordBatch) -> ArrayRef {
        expr.evaluate(batch)
            .unwrap()
            .into_array(batch.num_rows())
            .unwrap()
    }

    /// `expr` with [`LiteralSetExpr::of`] applied bottom up, as the rule applies it.
    fn folded(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Arc<dyn PhysicalExpr> {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        Arc::clone(expr)
            .transform_up(|node| {
                Ok(match LiteralSetExpr::of(&node, schema)? {
                    Some(set) => Transformed::yes(Arc::new(set) as Arc<dyn PhysicalExpr>),
                    None => Transformed::no(node),
                })
            })
            .unwrap()
            .data
    }

    #[test]
    fn equalities_ors_and_in_lists_of_strings_and_integers_fold_into_one_set_with_datafusion_s_answer()
     {
        let batch = batch();
        let schema = batch.schema();
        let state = || col("state", &schema).unwrap();
        let eq = |value: &str| binary(state(), Operator::Eq, text(value), &schema).unwrap();
        let or = |l, r| binary(l, Operator::Or, r, &schema).unwrap();
        let n = || col("n", &schema).unwrap();
        let long = "a city whose name is long";
        let cases: Vec<Arc<dyn PhysicalExpr>> = vec![
            eq("OR"),
            binary(text("CA"), Operator::Eq, state(), &schema).unwrap(),
            or(or(eq("OR"), eq("ID")), eq("CA")),
            or(eq(long), eq("WA")),
            in_list(state(), vec![text("ID"), text(long)], &false, &schema).unwrap(),
            binary(n(), Operator::Eq, lit(4_i64), &schema).unwrap(),
            or(
                binary(n(), Operator::Eq, lit(4_i64), &schema).unwrap(),
                binary(lit(1_i64), Operator::Eq, n(), &schema).unwrap(),
            ),
            in_list(n(), vec![lit(6_i64), lit(2_i64)], &false, &schema).unwrap(),
        ];
        for case in cases {
            let ours = folded(&case, &schema);
            let set = ours.downcast_ref::<LiteralSetExpr>();
            assert!(set.is_some(), "{case} was not folded into a set: {ours}");
            assert_eq!(
                &value(ours.as_ref(), &batch),
                &value(case.as_ref(), &batch),
                "{case}"
            );
        }
        let three = folded(&cases_three(&schema), &schema);
        assert_eq!(three.to_string(), "state@0 IN ('OR', 'ID', 'CA')");
        assert_eq!(
            value(three.as_ref(), &batch).as_ref(),
            &BooleanArray::from(vec![
                Some(true),
                None,
                Some(true),
                Some(true),
                Some(false),
                Some(false)
            ]) as &dyn datafusion::arrow::array::Array
        );
    }

    fn cases_three(schema: &Schema) -> Arc<dyn PhysicalExpr> {
        let state = || col("state", schema).unwrap();
        let eq = |value: &str| binary(state(), Operator::Eq, text(value), schema).unwrap();
        let or = |l, r| binary(l, Operator::Or, r, schema).unwrap();
        or(or(eq("OR"), eq("ID")), eq("CA"))
    }

    #[test]
    fn other_comparisons_are_left_to_datafusion() {
        let batch = batch();
        let schema = batch.schema();
        let state = || col("state", &schema).unwrap();
        let n = || col("n", &schema).unwrap();
        let left: Vec<Arc<dyn PhysicalExpr>> = vec![
            binary(state(), Operator::NotEq, text("OR"), &schema).unwrap(),
            binary(n(), Operator::Lt, lit(1_i64), &schema).unwrap(),
            in_list(state(), vec![text("OR")], &true, &schema).unwrap(),
            in_list(
                n(),
                vec![lit(1_i64), lit(ScalarValue::Int64(None))],
                &false,
                &schema,
            )
            .unwrap(),
            binary(
                state(),
                Operator::Eq,
                lit(ScalarValue::Utf8View(None)),
                &schema,
            )
            .unwrap(),
            // An OR of sets over two different expressions, and of a string and an integer.
            binary(
                binary(state(), Operator::Eq, text("OR"), &schema).unwrap(),
                Operator::Or,
                binary(n(), Operator::Eq, lit(1_i64), &schema).unwrap(),
                &schema,
            )
            .unwrap(),
        ];
        for case in left {
            let ours = folded(&case, &schema);
            assert!(
                ours.downcast_ref::<LiteralSetExpr>().is_none(),
                "{case} became {ours}"
            );
            assert_eq!(
                &value(ours.as_ref(), &batch),
                &value(case.as_ref(), &batch),
                "{case}"
            );
        }
    }
}
