//! `count_char(text, c)`: how many times the character `c` occurs in `text` (Nexmark q14's
//! user-defined function, shipped with Freshet). NULL text or character gives NULL; `c`
//! must be one character.
//!
//! The count runs over the bytes of the text: for an ASCII character a byte scan the compiler
//! vectorizes; for any other character a search of its UTF-8 encoding (whose bytes cannot
//! start inside another character's).

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, StringArrayType};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

/// The function, for registration in a session.
pub fn count_char_function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(CountChar::new()))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CountChar {
    signature: Signature,
}

impl CountChar {
    fn new() -> Self {
        let strings = [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View];
        let exact = strings
            .iter()
            .flat_map(|text| {
                strings
                    .iter()
                    .map(|c| TypeSignature::Exact(vec![text.clone(), c.clone()]))
            })
            .collect();
        Self {
            signature: Signature::one_of(exact, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CountChar {
    fn name(&self) -> &str {
        "count_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ColumnarValue::Scalar(c) = &args.args[1] else {
            return plan_err!("count_char(text, c): c must be a constant");
        };
        let c = match c {
            ScalarValue::Utf8(c) | ScalarValue::LargeUtf8(c) | ScalarValue::Utf8View(c) => c,
            other => return exec_err!("count_char(text, c): c is {other:?}, not a string"),
        };
        let Some(c) = c else {
            return Ok(ColumnarValue::Scalar(ScalarValue::Int64(None)));
        };
        let mut chars = c.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return exec_err!("count_char(text, c): c must be one character, not '{c}'");
        };
        let texts = args.args[0].to_array(args.number_rows)?;
        if let Ok(byte) = u8::try_from(c)
            && byte.is_ascii()
        {
            let counts = match texts.data_type() {
                DataType::Utf8 => count_byte(texts.as_string::<i32>(), byte),
                DataType::LargeUtf8 => count_byte(texts.as_string::<i64>(), byte),
                DataType::Utf8View => count_byte(texts.as_string_view(), byte),
                other => return exec_err!("count_char(text, c): text is {other}, not a string"),
            };
            return Ok(ColumnarValue::Array(Arc::new(counts)));
        }
        let counts: Int64Array = match texts.data_type() {
            DataType::Utf8 => count_in(texts.as_string::<i32>().iter(), c),
            DataType::LargeUtf8 => count_in(texts.as_string::<i64>().iter(), c),
            DataType::Utf8View => count_in(texts.as_string_view().iter(), c),
            other => return exec_err!("count_char(text, c): text is {other}, not a string"),
        };
        Ok(ColumnarValue::Array(Arc::new(counts)))
    }
}

/// The count of an ASCII `byte` in each text (an ASCII byte is never part of another
/// character): a count a row into one buffer, the texts' NULLs kept.
fn count_byte<'a, T>(texts: T, byte: u8) -> Int64Array
where
    T: StringArrayType<'a> + Array,
{
    let counts: Vec<i64> = (0..texts.len())
        .map(|row| {
            // A NULL's slot holds a valid (empty or unused) text; its count is masked.
            let text = texts.value(row).as_bytes();
            text.iter().map(|b| u64::from(*b == byte)).sum::<u64>() as i64
        })
        .collect();
    Int64Array::new(counts.into(), texts.nulls().cloned())
}

/// The count of a character of several bytes in each text.
fn count_in<'a>(texts: impl Iterator<Item = Option<&'a str>>, c: char) -> Int64Array {
    texts
        .map(|text| text.map(|text| text.matches(c).count() as i64))
        .collect()
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringViewArray;
    use datafusion::prelude::SessionContext;

    use super::*;

    #[tokio::test]
    async fn counts_a_character_in_each_row() {
        let ctx = SessionContext::new();
        ctx.register_udf(count_char_function().as_ref().clone());
        let batches = ctx
            .sql(
                "SELECT count_char(t, 'c') AS n, count_char(t, 'é') AS accents FROM \
                 (VALUES ('abcc'), (''), (NULL), ('cécé'), ('no')) AS v(t)",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let n = batches[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(
            n.iter().collect::<Vec<_>>(),
            [Some(2), Some(0), None, Some(2), Some(0)]
        );
        let accents = batches[0]
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(accents.value(3), 2);
    }

    #[test]
    fn counts_in_string_views() {
        let texts = StringViewArray::from(vec![Some("cccccccccccccccc long"), None]);
        let counts = count_in(texts.iter(), 'c');
        assert_eq!(counts.iter().collect::<Vec<_>>(), [Some(16), None]);
    }

    #[tokio::test]
    async fn refuses_more_than_one_character() {
        let ctx = SessionContext::new();
        ctx.register_udf(count_char_function().as_ref().clone());
        let error = ctx
            .sql("SELECT count_char('abc', 'ab')")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap_err();
        assert!(error.to_string().contains("one character"), "{error}");
    }
}
