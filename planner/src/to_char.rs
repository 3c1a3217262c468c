//! `to_char(timestamp, format)` (alias `date_format`), DataFusion's function with the same
//! answers, formatting each distinct value once a batch where the format allows it.
//!
//! DataFusion's `to_char` hands every row to chrono, which parses the format string again
//! for every value it formats: 100–200 ns a row, most of Nexmark q10, q15, q16 and q17
//! (`to_char(date_time, '%Y-%m-%d')`). A format that names no field finer than a day (an
//! hour, a minute, a second) gives one string for every time in the same day (hour,
//! minute, second). So for a timestamp without a time zone and a constant format made only
//! of such fields, each row's time is floored to that granule; the distinct granules of
//! the batch (found by comparing with the row before, then in a map) are formatted by
//! DataFusion's own `to_char`, and each row takes its granule's string. Everything else —
//! a format with fractions of seconds, time zone fields or specifiers not known here, a
//! time zone on the timestamp (days start at other instants in it), dates, times,
//! durations, a format per row, a batch with more than one granule in four rows — goes to
//! DataFusion's function as it is.
//!
//! A constant format without `%` names no chrono field (DataFusion would print it on every
//! row): it is read as a Java pattern, as Flink's and Spark's `DATE_FORMAT(ts,
//! 'yyyy-MM-dd')` take it, and planned as its chrono format, or refused
//! ([`crate::java_format`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, UInt32Array};
use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions::datetime::to_char::ToCharFunc;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl};

use crate::functions::described_as_datafusion_s;
use crate::java_format::chrono_format_of_java_pattern;

/// The function, for registration in a session in place of DataFusion's.
pub fn to_char_function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ToChar::default()))
}

/// Above this share of distinct granules among a batch's rows (or among its first rows),
/// formatting each row costs no more than finding the distinct ones.
const MOST_GRANULES_PER_ROW: f64 = 0.25;

#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct ToChar {
    datafusion: ToCharFunc,
}

impl ScalarUDFImpl for ToChar {
    described_as_datafusion_s!();

    /// A constant Java pattern becomes its chrono format (see the module documentation).
    fn simplify(&self, mut args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let Some(Expr::Literal(ScalarValue::Utf8(Some(format)), metadata)) = args.get(1) else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        if format.contains('%') {
            return Ok(ExprSimplifyResult::Original(args));
        }
        let chrono = chrono_format_of_java_pattern(format)?;
        args[1] = Expr::Literal(ScalarValue::Utf8(Some(chrono)), metadata.clone());
        Ok(ExprSimplifyResult::Simplified(Expr::ScalarFunction(
            ScalarFunction::new_udf(to_char_function(), args),
        )))
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // A constant format the simplifier did not see (folded from an expression).
        if let Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(format)))) = args.args.get(1)
            && !format.contains('%')
        {
            let chrono = chrono_format_of_java_pattern(format)?;
            args.args[1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some(chrono)));
        }
        if let [
            ColumnarValue::Array(times),
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(format))),
        ] = args.args.as_slice()
            && let DataType::Timestamp(unit, None) = times.data_type()
            && let Some(granule) = format_granule(format)
            && let Some(by_granule) = Granules::of(times, ticks_per_second(unit) * granule)?
        {
            let Granules { starts, rows } = by_granule;
            let distinct = starts.len();
            let starts = PrimitiveArray::<Int64Type>::from(starts);
            let starts = ColumnarValue::Array(cast(&starts, times.data_type())?);
            let formatted = self
                .datafusion
                .invoke_with_args(ScalarFunctionArgs {
                    number_rows: distinct,
                    args: vec![starts, args.args[1].clone()],
                    ..args
                })?
                .into_array(distinct)?;
            return Ok(ColumnarValue::Array(take(&formatted, &rows, None)?));
        }
        self.datafusion.invoke_with_args(args)
    }
}

fn ticks_per_second(unit: &TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    }
}

/// A batch's rows grouped by granule: the start of each distinct granule, in the time
/// column's unit, and each row's index into them (null where the time is null).
struct Granules {
    starts: Vec<i64>,
    rows: UInt32Array,
}

impl Granules {
    /// `None` where the batch has too many distinct granules to gain.
    fn of(times: &ArrayRef, ticks_per_granule: i64) -> Result<Option<Self>> {
        let values = cast(times, &DataType::Int64)?;
        let values = values.as_primitive::<Int64Type>();
        let most = (values.len() as f64 * MOST_GRANULES_PER_ROW).ceil() as usize;
        let mut starts = Vec::new();
        let mut index_of: HashMap<i64, u32> = HashMap::new();
        let mut last: Option<(i64, u32)> = None;
        let mut rows = Vec::with_capacity(values.len());
        for (row, value) in values.values().iter().enumerate() {
            if values.is_null(row) {
                rows.push(0);
                continue;
            }
            let granule = value.div_euclid(ticks_per_granule);
            let index = match last {
                Some((last_granule, index)) if last_granule == granule => index,
                _ => *index_of.entry(granule).or_insert_with(|| {
                    starts.push(granule * ticks_per_granule);
                    starts.len() as u32 - 1
                }),
            };
            // Given up early where the first rows are mostly distinct already.
            if starts.len() > most.min(row / 4 + 16).max(1) {
                return Ok(None);
            }
            last = Some((granule, index));
            rows.push(index);
        }
        let nulls = values.nulls().cloned();
        Ok(Some(Self {
            starts,
            rows: UInt32Array::new(ScalarBuffer::from(rows), nulls),
        }))
    }
}

/// The coarsest granule, in seconds, within which every time formats alike under
/// `format`: a day, an hour, a minute or a second. `None` where the format has a field this
/// does not know, fractions of a second or a time zone.
fn format_granule(format: &str) -> Option<i64> {
    const DAY: i64 = 86_400;
    let mut granule = DAY;
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        let mut specifier = chars.next()?;
        if matches!(specifier, '-' | '_' | '0') {
            specifier = chars.next()?;
        }
        let field = match specifier {
            '%' | 't' | 'n' => DAY,
            'Y' | 'C' | 'y' | 'q' | 'm' | 'b' | 'B' | 'h' | 'd' | 'e' | 'a' | 'A' | 'w' | 'u'
            | 'U' | 'W' | 'G' | 'g' | 'V' | 'j' | 'D' | 'x' | 'F' | 'v' => DAY,
            'H' | 'k' | 'I' | 'l' | 'P' | 'p' => 3_600,
            'M' | 'R' => 60,
            'S' | 'T' | 'X' | 'r' | 'c' | 's' => 1,
            _ => return None,
        };
        granule = granule.min(field);
    }
    Some(granule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{StringArray, TimestampMillisecondArray};

    use crate::test_support::invoke;

    fn call(function: &dyn ScalarUDFImpl, times: &ArrayRef, format: &str) -> Result<ArrayRef> {
        let format = ScalarValue::Utf8(Some(format.to_string()));
        invoke(function, times, &[format], DataType::Utf8)
    }

    /// Times a few seconds, minutes, hours and days apart, before and after 1970, in runs
    /// and out of order, with nulls.
    fn times(step_ms: i64, rows: i64) -> ArrayRef {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let values = (0..rows).map(|row| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let jitter = (state % 5) as i64 - 2;
            (row % 7 != 3).then_some((row / 3 + jitter) * step_ms - 40 * 86_400_000)
        });
        Arc::new(TimestampMillisecondArray::from_iter(values))
    }

    const FORMATS: [&str; 11] = [
        "%Y-%m-%d",
        "%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%-d %B %Y, %A (%j, week %U/%W/%V, %G)",
        "%I %p %P %l %k",
        "%T %R %r %D %F %x %X %c %s",
        "%e %b %h %a %u %w %C %y %g %q %v",
        "100%% at %H h%n%t",
        "%Y-%m-%d %H:%M:%S%.3f",
        "%s%.f",
        "%_H|%0M|%-S",
    ];

    #[test]
    fn answers_as_datafusion_for_every_format_and_granule() -> Result<()> {
        for step_ms in [
            1, 999, 1_000, 59_999, 60_000, 3_600_000, 86_400_000, 86_399_999,
        ] {
            let times = times(step_ms, 2_000);
            for format in FORMATS {
                let theirs = call(&ToCharFunc::new(), &times, format)
                    .unwrap_or_else(|e| panic!("DataFusion formats {format}: {e}"));
                let ours = call(&ToChar::default(), &times, format)?;
                assert_eq!(
                    ours.as_string::<i32>(),
                    theirs.as_string::<i32>(),
                    "{format} over times {step_ms} ms apart"
                );
            }
        }
        Ok(())
    }

    /// A format without `%` is a Java pattern, formatted as its chrono format, or refused.
    #[test]
    fn java_patterns_answer_as_their_chrono_formats() -> Result<()> {
        let times = times(59_999, 2_000);
        for (java, chrono) in [
            ("yyyy-MM-dd", "%Y-%m-%d"),
            ("HH:mm", "%H:%M"),
            ("d MMM yyyy HH:mm:ss.SSS", "%-d %b %Y %H:%M:%S.%3f"),
        ] {
            let theirs = call(&ToCharFunc::new(), &times, chrono)?;
            let ours = call(&ToChar::default(), &times, java)?;
            assert_eq!(ours.as_string::<i32>(), theirs.as_string::<i32>(), "{java}");
        }
        let error = call(&ToChar::default(), &times, "plain text").unwrap_err();
        assert!(error.to_string().contains("'plain text'"), "{error}");
        Ok(())
    }

    #[test]
    fn formats_each_granule_of_a_batch_once() -> Result<()> {
        let times = times(60_000, 3_000);
        let by_granule = Granules::of(&times, 3_600_000)?.expect("few hours");
        assert_eq!(by_granule.starts.len(), 18);
        assert_eq!(by_granule.rows.null_count(), times.null_count());
        // Every minute its own granule: more than one in four rows, so DataFusion formats.
        assert!(Granules::of(&times, 60_000)?.is_none());
        Ok(())
    }

    #[test]
    fn batches_of_nulls_or_no_rows_are_formatted_as_datafusion_does() -> Result<()> {
        for times in [
            Arc::new(TimestampMillisecondArray::from(vec![None, None, None])) as ArrayRef,
            Arc::new(TimestampMillisecondArray::from(Vec::<i64>::new())),
        ] {
            let ours = call(&ToChar::default(), &times, "%Y-%m-%d")?;
            let theirs = call(&ToCharFunc::new(), &times, "%Y-%m-%d")?;
            assert_eq!(ours.as_string::<i32>(), theirs.as_string::<i32>());
        }
        Ok(())
    }

    #[test]
    fn granules_follow_the_finest_field_of_the_format() {
        assert_eq!(format_granule("%Y-%m-%d"), Some(86_400));
        assert_eq!(format_granule("%d %H"), Some(3_600));
        assert_eq!(format_granule("%H:%M"), Some(60));
        assert_eq!(format_granule("%-S"), Some(1));
        assert_eq!(format_granule("%T"), Some(1));
        for format in ["%.3f", "%f", "%3f", "%z", "%:z", "%Z", "%+", "%E", "%Y %"] {
            assert_eq!(format_granule(format), None, "{format}");
        }
    }

    #[test]
    fn time_zones_and_errors_are_datafusion_s() -> Result<()> {
        let times: ArrayRef = Arc::new(
            TimestampMillisecondArray::from(vec![0, 3_600_000, 7_200_000])
                .with_timezone("Asia/Kolkata"),
        );
        let ours = call(&ToChar::default(), &times, "%Y-%m-%d %H")?;
        let theirs = call(&ToCharFunc::new(), &times, "%Y-%m-%d %H")?;
        assert_eq!(ours.as_string::<i32>(), theirs.as_string::<i32>());
        assert_eq!(
            ours.as_string::<i32>(),
            &StringArray::from(vec!["1970-01-01 05", "1970-01-01 06", "1970-01-01 07"])
        );
        let plain = self::times(1_000, 100);
        let error = |function: &dyn ScalarUDFImpl| {
            call(function, &plain, "%Y %Q")
                .expect_err("an unknown specifier")
                .to_string()
        };
        assert_eq!(error(&ToChar::default()), error(&ToCharFunc::new()));
        Ok(())
    }
}
