//! Flink's spellings of functions DataFusion has under other forms, so that Flink SQL (the
//! Nexmark queries as nexmark/nexmark writes them) runs as written:
//!
//! - `MOD(a, b)`: `a % b` (the remainder has the dividend's sign, as in Flink);
//! - `HOUR(ts)`, `MINUTE(ts)`, `SECOND(ts)`, `YEAR(ts)`, `MONTH(ts)`, `DAYOFMONTH(ts)`:
//!   `date_part('hour', ts)` … as a BIGINT, Flink's type;
//! - `SPLIT_INDEX(text, separator, index)`: the `index`-th piece of `text` split at every
//!   `separator`, counted from 0; NULL when the index is negative or past the last piece, or
//!   an argument is NULL.
//!
//! The first two are rewritten by the simplifier into the DataFusion expressions they
//! stand for (EXPLAIN shows those), and run as those where no simplifier ran; `split_index`
//! runs itself: a string view split at one byte by `split_part`'s kernel (eight bytes at a
//! time, pieces as views), anything else as a string.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, StringViewArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::numeric::rem;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, ScalarValue, exec_err, plan_datafusion_err, plan_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility, lit,
};

use crate::split_part::{MissingPiece, pieces_of_views};

/// The functions, for registration in a session.
pub fn flink_functions() -> Vec<Arc<ScalarUDF>> {
    let parts = [
        ("hour", "hour"),
        ("minute", "minute"),
        ("second", "second"),
        ("year", "year"),
        ("month", "month"),
        ("dayofmonth", "day"),
    ];
    let mut functions = vec![
        Arc::new(ScalarUDF::new_from_impl(Mod::new())),
        Arc::new(ScalarUDF::new_from_impl(SplitIndex::new())),
    ];
    functions.extend(
        parts
            .into_iter()
            .map(|(name, part)| Arc::new(ScalarUDF::new_from_impl(TimePart::new(name, part)))),
    );
    functions
}

/// `MOD(a, b)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Mod {
    signature: Signature,
}

impl Mod {
    fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Mod {
    fn name(&self) -> &str {
        "mod"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        BinaryTypeCoercer::new(&arg_types[0], &Operator::Modulo, &arg_types[1]).get_result_type()
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let [a, b] = <[Expr; 2]>::try_from(args)
            .map_err(|_| plan_datafusion_err!("MOD(a, b) takes two arguments"))?;
        Ok(ExprSimplifyResult::Simplified(Expr::BinaryExpr(
            BinaryExpr::new(Box::new(a), Operator::Modulo, Box::new(b)),
        )))
    }

    /// Where the simplifier did not run: the same remainder, of the arguments in their
    /// common type.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let (a, b) = (args.args[0].to_array(rows)?, args.args[1].to_array(rows)?);
        let (a_type, b_type) =
            BinaryTypeCoercer::new(a.data_type(), &Operator::Modulo, b.data_type())
                .get_input_types()?;
        let remainder = rem(&cast(&a, &a_type)?, &cast(&b, &b_type)?)?;
        Ok(ColumnarValue::Array(remainder))
    }
}

/// `HOUR(ts)` and the other parts of a time, as BIGINT.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TimePart {
    name: &'static str,
    /// The part as `date_part` names it.
    part: &'static str,
    signature: Signature,
}

impl TimePart {
    fn new(name: &'static str, part: &'static str) -> Self {
        Self {
            name,
            part,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for TimePart {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match &arg_types[0] {
            DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Null => {
                Ok(DataType::Int64)
            }
            DataType::Time32(_) | DataType::Time64(_)
                if matches!(self.part, "hour" | "minute" | "second") =>
            {
                Ok(DataType::Int64)
            }
            other => plan_err!("{}(t) takes a timestamp or a date, not {other}", self.name),
        }
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let part =
            datafusion::functions::datetime::expr_fn::date_part(lit(self.part), args[0].clone());
        Ok(ExprSimplifyResult::Simplified(Expr::Cast(Cast::new(
            Box::new(part),
            DataType::Int64,
        ))))
    }

    /// Where the simplifier did not run: `date_part` itself, cast to BIGINT.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let date_part = datafusion::functions::datetime::date_part();
        let part = ScalarValue::Utf8(Some(self.part.to_string()));
        let part_field = Arc::new(Field::new("part", DataType::Utf8, false));
        let arg_fields = vec![part_field, Arc::clone(&args.arg_fields[0])];
        let return_field = date_part.return_field_from_args(ReturnFieldArgs {
            arg_fields: &arg_fields,
            scalar_arguments: &[Some(&part), None],
        })?;
        let value = date_part.invoke_with_args(ScalarFunctionArgs {
            args: vec![ColumnarValue::Scalar(part), args.args[0].clone()],
            arg_fields,
            number_rows: args.number_rows,
            return_field,
            config_options: args.config_options,
        })?;
        value.cast_to(&DataType::Int64, None)
    }
}

/// `SPLIT_INDEX(text, separator, index)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SplitIndex {
    signature: Signature,
}

impl SplitIndex {
    fn new() -> Self {
        let exact = [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View]
            .into_iter()
            .map(|text| TypeSignature::Exact(vec![text, DataType::Utf8, DataType::Int64]))
            .collect();
        Self {
            signature: Signature::one_of(exact, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SplitIndex {
    fn name(&self) -> &str {
        "split_index"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// A view for a view, as DataFusion's `split_part` gives.
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match arg_types[0] {
            DataType::Utf8View => DataType::Utf8View,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let output = self.return_type(&[args.args[0].data_type()])?;
        let (ColumnarValue::Scalar(separator), ColumnarValue::Scalar(index)) =
            (&args.args[1], &args.args[2])
        else {
            return plan_err!(
                "split_index(text, separator, index): separator and index must be constants"
            );
        };
        let (ScalarValue::Utf8(Some(separator)), ScalarValue::Int64(Some(index))) =
            (separator, index)
        else {
            let texts = args.args[0].to_array(rows)?;
            return Ok(ColumnarValue::Array(
                datafusion::arrow::array::new_null_array(&output, texts.len()),
            ));
        };
        if separator.is_empty() {
            return exec_err!("split_index(text, separator, index): the separator is empty");
        }
        let texts = args.args[0].to_array(rows)?;
        // A string view split at one byte: Freshet's `split_part` kernel.
        if let (Some(texts), [separator], Ok(index)) = (
            texts.as_string_view_opt(),
            separator.as_bytes(),
            usize::try_from(*index),
        ) {
            return Ok(ColumnarValue::Array(pieces_of_views(
                texts,
                *separator,
                index,
                MissingPiece::Null,
            )));
        }
        let texts: ArrayRef = cast(&texts, &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let index = usize::try_from(*index).ok();
        let pieces = texts.iter().map(|text| {
            text.zip(index)
                .and_then(|(text, index)| text.split(separator.as_str()).nth(index))
        });
        let pieces: ArrayRef = match output {
            DataType::Utf8View => Arc::new(pieces.collect::<StringViewArray>()),
            _ => Arc::new(pieces.collect::<StringArray>()),
        };
        Ok(ColumnarValue::Array(pieces))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::invoke;
    use datafusion::prelude::SessionContext;

    /// `split_index` of `texts` at `separator`, piece `index`, as Utf8.
    fn split_index(texts: ArrayRef, separator: &str, index: i64) -> ArrayRef {
        let constants = [
            ScalarValue::Utf8(Some(separator.to_string())),
            ScalarValue::Int64(Some(index)),
        ];
        let returns = texts.data_type().clone();
        let output = invoke(&SplitIndex::new(), &texts, &constants, returns).unwrap();
        cast(&output, &DataType::Utf8).unwrap()
    }

    /// A string view split at one byte (found eight bytes at a time) gives the pieces, and
    /// the NULLs past the last piece, that splitting the same texts as strings gives.
    #[test]
    fn split_index_of_views_equals_split_index_of_strings() {
        let alphabet = ["/", "/", "a", "bc", "é", "xyz"];
        let mut state = 0x853c_49e6_748f_ea9bu64;
        let texts: Vec<Option<String>> = (0..1_500)
            .map(|row| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let length = (state >> 59) as usize * 2 + row % 3;
                let text = (0..length)
                    .map(|i| alphabet[((state >> (i % 50)) as usize + i) % alphabet.len()])
                    .collect::<String>();
                (row % 41 != 0).then_some(text)
            })
            .collect();
        let strings: ArrayRef = Arc::new(StringArray::from(texts.clone()));
        let views: ArrayRef = Arc::new(StringViewArray::from(texts));
        for index in 0..12 {
            let expected = split_index(Arc::clone(&strings), "/", index);
            assert!(expected.null_count() > 0 && expected.null_count() < expected.len());
            let pieces = split_index(Arc::clone(&views), "/", index);
            assert_eq!(
                pieces.as_string::<i32>(),
                expected.as_string::<i32>(),
                "{index}"
            );
        }
    }

    async fn rows(sql: &str) -> Vec<String> {
        let ctx = SessionContext::new();
        for function in flink_functions() {
            ctx.register_udf(function.as_ref().clone());
        }
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
            .lines()
            .skip(3)
            .filter(|line| !line.starts_with('+'))
            .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[tokio::test]
    async fn flink_functions_answer_as_flink() {
        assert_eq!(
            rows(
                "SELECT MOD(17, 5), MOD(-7, 3), MOD(CAST(7 AS INT), CAST(2 AS BIGINT)), MOD(7.5, 2)"
            )
            .await,
            ["| 2 | -1 | 1 | 1.5 |"]
        );
        assert_eq!(
            rows("SELECT HOUR(TIMESTAMP '2015-07-15 13:04:05'), MINUTE(TIMESTAMP '2015-07-15 13:04:05'), SECOND(TIMESTAMP '2015-07-15 13:04:05.9'), YEAR(DATE '2015-07-15'), MONTH(DATE '2015-07-15'), DAYOFMONTH(DATE '2015-07-15')").await,
            ["| 13 | 4 | 5 | 2015 | 7 | 15 |"]
        );
        assert_eq!(
            rows("SELECT SPLIT_INDEX('https://www.nexmark.com/abc/def/item.htm', '/', 3), COALESCE(SPLIT_INDEX('a//b', '/', 1), 'null'), COALESCE(SPLIT_INDEX('a/b', '/', 2), 'null'), COALESCE(SPLIT_INDEX('a/b', '/', -1), 'null'), COALESCE(SPLIT_INDEX(NULL, '/', 0), 'null')").await,
            ["| abc | | null | null | null |"]
        );
        // A view in, a view out, NULL arguments included.
        assert_eq!(
            rows("SELECT arrow_typeof(n), n IS NULL, s FROM (SELECT SPLIT_INDEX(v, '/', CAST(NULL AS BIGINT)) AS n, SPLIT_INDEX(v, '/', 1) AS s FROM (VALUES (arrow_cast('a/b', 'Utf8View'))) AS t(v))").await,
            ["| Utf8View | true | b |"]
        );
    }

    /// Called without the simplifier's rewrite (as a plan built by hand would call it), a
    /// part of a time is still `date_part`'s, as a BIGINT.
    #[test]
    fn a_time_part_not_rewritten_runs_as_date_part() {
        use datafusion::arrow::array::{Int64Array, TimestampMillisecondArray};
        use datafusion::arrow::datatypes::TimeUnit;
        let times = TimestampMillisecondArray::from(vec![Some(1_436_965_445_900), None]);
        let field = Arc::new(Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        ));
        for (function, expected) in [("hour", 13), ("minute", 4), ("second", 5), ("year", 2015)] {
            let udf = flink_functions()
                .into_iter()
                .find(|udf| udf.name() == function)
                .unwrap();
            let value = udf
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![ColumnarValue::Array(Arc::new(times.clone()))],
                    arg_fields: vec![Arc::clone(&field)],
                    number_rows: 2,
                    return_field: Arc::new(Field::new(function, DataType::Int64, true)),
                    config_options: Arc::default(),
                })
                .unwrap();
            let ColumnarValue::Array(array) = value else {
                panic!("{function}: a scalar for an array");
            };
            assert_eq!(
                array.as_primitive::<datafusion::arrow::datatypes::Int64Type>(),
                &Int64Array::from(vec![Some(expected), None]),
                "{function}"
            );
        }
    }
}
