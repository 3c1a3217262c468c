//! `regexp_extract(text, pattern [, group])`: the part of `text` that capture group `group`
//! of the first match of `pattern` covers, as Flink's and Spark's `REGEXP_EXTRACT` (Nexmark
//! q21 uses it). Group 0 (the default, as Flink's) is the whole match; groups count from 1.
//! NULL when `text` is NULL, when nothing matches, or when the group took no part in the
//! match (Flink's rule; Spark and DuckDB give an empty string there). The pattern is Rust's
//! `regex` syntax, as `regexp_match`'s, and must be a constant; a group the pattern does not
//! have is an error.
//!
//! DataFusion's `regexp_match(text, pattern)[group]` gives the same values, but builds a
//! list of every group for each row and then picks one. Here one set of capture locations
//! is reused for every row, and the result points into the input's own buffers: a string
//! view of the extracted bytes (inline when they are at most 12 bytes long, as every view
//! is), with no copy. Each pattern is compiled once per session, not once per batch. A
//! pattern that takes one parameter out of a URL's query, `(&|^)name=([^&]*)`, is searched
//! for as a literal ([`QueryParameter`]), with the regex's answer.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::builder::make_view;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, ByteView, NullBufferBuilder, StringViewArray, StringViewBuilder,
};
use datafusion::arrow::buffer::{Buffer, ScalarBuffer};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use parking_lot::Mutex;
use regex::Regex;

use crate::query_parameter::QueryParameter;

/// The function, for registration in a session.
pub fn regexp_extract_function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(RegexpExtract::new()))
}

#[derive(Debug)]
struct RegexpExtract {
    signature: Signature,
    /// The patterns compiled so far (cloning a `Regex` shares it): a query that calls the
    /// function with several patterns compiles each once.
    compiled: Mutex<Vec<(String, Compiled)>>,
}

/// A pattern compiled: its regex, and its literal search if it is a query parameter.
#[derive(Debug, Clone)]
struct Compiled {
    regex: Regex,
    parameter: Option<Arc<QueryParameter>>,
}

impl PartialEq for RegexpExtract {
    fn eq(&self, other: &Self) -> bool {
        self.signature == other.signature
    }
}

impl Eq for RegexpExtract {}

impl Hash for RegexpExtract {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.signature.hash(state);
    }
}

impl RegexpExtract {
    fn new() -> Self {
        let strings = [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View];
        let exact = strings
            .iter()
            .flat_map(|text| {
                strings.iter().flat_map(move |pattern| {
                    [
                        TypeSignature::Exact(vec![text.clone(), pattern.clone()]),
                        TypeSignature::Exact(vec![text.clone(), pattern.clone(), DataType::Int64]),
                    ]
                })
            })
            .collect();
        Self {
            signature: Signature::one_of(exact, Volatility::Immutable),
            compiled: Mutex::new(Vec::new()),
        }
    }

    /// `pattern` compiled, from the cache when it was compiled before.
    fn compile(&self, pattern: &str) -> Result<Compiled> {
        /// Patterns kept compiled: more than a query writes, few enough to search in order.
        const CACHED_PATTERNS: usize = 16;
        let mut cache = self.compiled.lock();
        if let Some((_, compiled)) = cache.iter().find(|(cached, _)| cached == pattern) {
            return Ok(compiled.clone());
        }
        let regex = match Regex::new(pattern) {
            Ok(regex) => regex,
            Err(e) => return exec_err!("regexp_extract: invalid pattern '{pattern}': {e}"),
        };
        let compiled = Compiled {
            regex,
            parameter: QueryParameter::recognize(pattern).map(Arc::new),
        };
        if cache.len() == CACHED_PATTERNS {
            cache.remove(0);
        }
        cache.push((pattern.to_string(), compiled.clone()));
        Ok(compiled)
    }
}

impl ScalarUDFImpl for RegexpExtract {
    fn name(&self) -> &str {
        "regexp_extract"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8View)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ColumnarValue::Scalar(pattern) = &args.args[1] else {
            return plan_err!(
                "regexp_extract(text, pattern, group): the pattern must be a constant"
            );
        };
        let group = match args.args.get(2) {
            None => Some(0),
            Some(ColumnarValue::Scalar(ScalarValue::Int64(group))) => *group,
            Some(_) => {
                return plan_err!(
                    "regexp_extract(text, pattern, group): the group must be a constant integer"
                );
            }
        };
        let (Some(pattern), Some(group)) = (pattern.try_as_str().flatten(), group) else {
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8View(None)));
        };
        let compiled = self.compile(pattern)?;
        let groups = compiled.regex.captures_len() - 1;
        let group = match usize::try_from(group) {
            Ok(group) if group <= groups => group,
            _ => {
                return exec_err!(
                    "regexp_extract: group {group} of a pattern with {groups} groups ('{pattern}'); groups count from 1, 0 is the whole match"
                );
            }
        };
        let texts = args.args[0].to_array(args.number_rows)?;
        let extracted = Extractor::new(&compiled, group).extract(&texts)?;
        Ok(ColumnarValue::Array(extracted))
    }
}

/// One group of one pattern, extracted row by row.
struct Extractor<'a> {
    search: Search<'a>,
    group: usize,
}

/// How a row is searched.
enum Search<'a> {
    /// The regex, with capture locations reused for every row.
    Regex {
        regex: &'a Regex,
        locations: regex::CaptureLocations,
    },
    /// A query parameter's literal search.
    Parameter(&'a QueryParameter),
}

impl<'a> Extractor<'a> {
    fn new(compiled: &'a Compiled, group: usize) -> Self {
        let search = match &compiled.parameter {
            Some(parameter) => Search::Parameter(parameter),
            None => Search::Regex {
                regex: &compiled.regex,
                locations: compiled.regex.capture_locations(),
            },
        };
        Self { search, group }
    }

    /// The byte range of `text` the group covers, if it took part in a match.
    fn find(&mut self, text: &str) -> Option<(usize, usize)> {
        match &mut self.search {
            Search::Regex { regex, locations } => {
                regex.captures_read(locations, text)?;
                locations.get(self.group)
            }
            Search::Parameter(parameter) => parameter
                .find(text.as_bytes())
                .and_then(|groups| groups.get(self.group).copied()),
        }
    }

    fn extract(&mut self, texts: &ArrayRef) -> Result<ArrayRef> {
        match texts.data_type() {
            DataType::Utf8View => {
                let texts = texts.as_string_view();
                let views = texts.views();
                Ok(Arc::new(self.views_into(
                    texts.iter(),
                    texts.data_buffers().to_vec(),
                    |row, start| {
                        let view = ByteView::from(views[row]);
                        (view.buffer_index, view.offset + start)
                    },
                )))
            }
            DataType::Utf8 => {
                let texts = texts.as_string::<i32>();
                let offsets = texts.value_offsets();
                // Offsets of a Utf8 array fit in 32 bits: views into its one values buffer.
                Ok(Arc::new(self.views_into(
                    texts.iter(),
                    vec![texts.values().clone()],
                    |row, start| (0, offsets[row] as u32 + start),
                )))
            }
            DataType::LargeUtf8 => {
                let texts = texts.as_string::<i64>();
                let mut builder = StringViewBuilder::with_capacity(texts.len());
                for text in texts.iter() {
                    match text.and_then(|text| Some((text, self.find(text)?))) {
                        Some((text, (start, end))) => builder.append_value(&text[start..end]),
                        None => builder.append_null(),
                    }
                }
                Ok(Arc::new(builder.finish()))
            }
            other => exec_err!("regexp_extract: text is {other}, not a string"),
        }
    }

    /// Views of the extracted bytes into `buffers`, which hold the texts: `place(row,
    /// start)` is the buffer and offset of byte `start` of row `row`'s text (used only for
    /// extracts longer than 12 bytes, which cannot come from an inline text).
    fn views_into<'t>(
        &mut self,
        texts: impl Iterator<Item = Option<&'t str>>,
        buffers: Vec<Buffer>,
        place: impl Fn(usize, u32) -> (u32, u32),
    ) -> StringViewArray {
        let (rows, _) = texts.size_hint();
        let mut views = Vec::with_capacity(rows);
        let mut nulls = NullBufferBuilder::new(rows);
        for (row, text) in texts.enumerate() {
            match text.and_then(|text| Some((text, self.find(text)?))) {
                Some((text, (start, end))) => {
                    let bytes = &text.as_bytes()[start..end];
                    let (buffer, offset) = if bytes.len() > 12 {
                        place(row, start as u32)
                    } else {
                        (0, 0)
                    };
                    views.push(make_view(bytes, buffer, offset));
                    nulls.append_non_null();
                }
                None => {
                    views.push(0);
                    nulls.append_null();
                }
            }
        }
        // SAFETY: each view is of UTF-8 bytes at a character boundary of a valid string (a
        // match's bounds are), inline or at the buffer and offset those bytes are stored at.
        unsafe {
            StringViewArray::new_unchecked(ScalarBuffer::from(views), buffers, nulls.finish())
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;
    use datafusion::prelude::SessionContext;

    use super::*;

    fn extracted(array: &ArrayRef) -> Vec<Option<String>> {
        array
            .as_string_view()
            .iter()
            .map(|s| s.map(str::to_string))
            .collect()
    }

    const URLS: [Option<&str>; 6] = [
        Some("https://www.nexmark.com/item.htm?query=1&channel_id=1234567890123"),
        Some("channel_id=7"),
        Some("https://www.nexmark.com/item.htm?query=1"),
        None,
        Some("https://x.com/a?b=1&channel_id=&c=2"),
        Some("https://x.com/a?xchannel_id=9"),
    ];

    fn expected(group: usize) -> Vec<Option<String>> {
        let wanted: [[Option<&str>; 3]; 6] = [
            [
                Some("&channel_id=1234567890123"),
                Some("&"),
                Some("1234567890123"),
            ],
            [Some("channel_id=7"), Some(""), Some("7")],
            [None, None, None],
            [None, None, None],
            [Some("&channel_id="), Some("&"), Some("")],
            [None, None, None],
        ];
        wanted
            .iter()
            .map(|row| row[group].map(str::to_string))
            .collect()
    }

    /// `pattern` compiled as the function compiles it, or with its regex alone.
    fn compiled(pattern: &str, literal_search: bool) -> Compiled {
        let parameter = QueryParameter::recognize(pattern).filter(|_| literal_search);
        Compiled {
            regex: Regex::new(pattern).unwrap(),
            parameter: parameter.map(Arc::new),
        }
    }

    #[test]
    fn extracts_each_group_from_every_string_type_by_regex_and_by_literal_search() {
        let pattern = "(&|^)channel_id=([^&]*)";
        assert!(compiled(pattern, true).parameter.is_some());
        let inputs: [ArrayRef; 3] = [
            Arc::new(StringViewArray::from(URLS.to_vec())),
            Arc::new(StringArray::from(URLS.to_vec())),
            Arc::new(datafusion::arrow::array::LargeStringArray::from(
                URLS.to_vec(),
            )),
        ];
        for literal_search in [false, true] {
            let compiled = compiled(pattern, literal_search);
            for input in &inputs {
                for group in 0..=2 {
                    let out = Extractor::new(&compiled, group).extract(input).unwrap();
                    assert_eq!(
                        extracted(&out),
                        expected(group),
                        "{} group {group}, literal search {literal_search}",
                        input.data_type()
                    );
                }
            }
        }
    }

    #[test]
    fn long_extracts_point_into_the_input_buffers() {
        let input: ArrayRef = Arc::new(StringViewArray::from(vec![
            "id=a value longer than twelve bytes",
        ]));
        let out = Extractor::new(&compiled("id=(.*)", false), 1)
            .extract(&input)
            .unwrap();
        let out = out.as_string_view();
        assert_eq!(out.value(0), "a value longer than twelve bytes");
        let input = input.as_string_view();
        assert_eq!(
            out.data_buffers()[0].as_ptr(),
            input.data_buffers()[0].as_ptr()
        );
    }

    async fn run(sql: &str) -> Result<Vec<Option<String>>> {
        let ctx = SessionContext::new();
        ctx.register_udf(regexp_extract_function().as_ref().clone());
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(batches
            .iter()
            .flat_map(|b| extracted(b.column(0)))
            .collect())
    }

    #[tokio::test]
    async fn runs_in_sql_with_and_without_a_group() {
        let values = "(VALUES ('foothebar'), ('nothing'), (NULL)) AS v(t)";
        let whole = run(&format!(
            "SELECT regexp_extract(t, 'foo(.*?)(bar)') FROM {values}"
        ))
        .await
        .unwrap();
        assert_eq!(whole, [Some("foothebar".to_string()), None, None]);
        let second = run(&format!(
            "SELECT regexp_extract(t, 'foo(.*?)(bar)', 2) FROM {values}"
        ))
        .await
        .unwrap();
        assert_eq!(second, [Some("bar".to_string()), None, None]);
    }

    #[tokio::test]
    async fn refuses_a_missing_group_and_a_bad_pattern() {
        let error = run("SELECT regexp_extract('ab', '(a)', 2)")
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("group 2 of a pattern with 1 groups"),
            "{error}"
        );
        let error = run("SELECT regexp_extract('ab', '(a', 1)")
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("invalid pattern '(a'"),
            "{error}"
        );
        let error = run("SELECT regexp_extract(t, t) FROM (VALUES ('a')) AS v(t)")
            .await
            .unwrap_err();
        assert!(error.to_string().contains("must be a constant"), "{error}");
    }
}
