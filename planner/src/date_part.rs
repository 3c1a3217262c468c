//! Freshet's `date_part`: DataFusion's function, with the hour of a timestamp without a time
//! zone computed by arithmetic.
//!
//! DataFusion (through arrow's `date_part`) turns every timestamp into a chrono date and
//! time to read its hour: a calendar conversion per row, most of the cost of Nexmark q14's
//! `CASE WHEN date_part('hour', date_time) …`. Without a time zone the hour of a timestamp
//! is the number of whole hours since the epoch, modulo 24, with Euclidean division so that
//! times before 1970 count as the calendar does. Every other part, zone or argument goes to
//! DataFusion's function, which also gives the return type and the preimage the optimizer
//! asks for.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int32Array};
use datafusion::arrow::datatypes::{
    ArrowTimestampType, DataType, FieldRef, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions::datetime::date_part::DatePartFunc;
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
};

use crate::functions::described_as_datafusion_s;

/// The function, for registration in a session in place of DataFusion's.
pub fn date_part_function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(DatePart::default()))
}

#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct DatePart {
    datafusion: DatePartFunc,
}

impl ScalarUDFImpl for DatePart {
    described_as_datafusion_s!();

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.datafusion.return_field_from_args(args)
    }

    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> Result<PreimageResult> {
        self.datafusion.preimage(args, lit_expr, info)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let [ColumnarValue::Scalar(part), ColumnarValue::Array(times)] = args.args.as_slice()
            && is_hour(part)
            && let Some(hours) = hours_of_day(times)
        {
            return Ok(ColumnarValue::Array(hours));
        }
        self.datafusion.invoke_with_args(args)
    }
}

/// Whether the part is the constant `'hour'` (DataFusion's other spellings of it go to
/// DataFusion's function).
fn is_hour(part: &ScalarValue) -> bool {
    match part {
        ScalarValue::Utf8(Some(part)) | ScalarValue::Utf8View(Some(part)) => {
            part.eq_ignore_ascii_case("hour")
        }
        _ => false,
    }
}

/// The hour of the day of each timestamp, for timestamps without a time zone.
fn hours_of_day(times: &ArrayRef) -> Option<ArrayRef> {
    let DataType::Timestamp(unit, None) = times.data_type() else {
        return None;
    };
    Some(match unit {
        TimeUnit::Second => hours::<TimestampSecondType>(times, 3_600),
        TimeUnit::Millisecond => hours::<TimestampMillisecondType>(times, 3_600_000),
        TimeUnit::Microsecond => hours::<TimestampMicrosecondType>(times, 3_600_000_000),
        TimeUnit::Nanosecond => hours::<TimestampNanosecondType>(times, 3_600_000_000_000),
    })
}

fn hours<T: ArrowTimestampType>(times: &ArrayRef, per_hour: i64) -> ArrayRef {
    let hours: Int32Array = times
        .as_primitive::<T>()
        .unary(|time| time.div_euclid(per_hour).rem_euclid(24) as i32);
    Arc::new(hours)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{
        TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
        TimestampSecondArray,
    };
    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    use super::*;

    /// `date_part(part, times)` by `function`.
    fn call(function: &dyn ScalarUDFImpl, part: &str, times: &ArrayRef) -> Result<ArrayRef> {
        let part = ScalarValue::Utf8(Some(part.to_string()));
        let args = vec![
            ColumnarValue::Scalar(part.clone()),
            ColumnarValue::Array(Arc::clone(times)),
        ];
        let arg_fields: Vec<FieldRef> = args
            .iter()
            .map(|arg| Arc::new(Field::new("a", arg.data_type(), true)))
            .collect();
        let scalars = [Some(&part), None];
        let return_field = DatePartFunc::new().return_field_from_args(ReturnFieldArgs {
            arg_fields: &arg_fields,
            scalar_arguments: &scalars,
        })?;
        function
            .invoke_with_args(ScalarFunctionArgs {
                args,
                arg_fields,
                number_rows: times.len(),
                return_field,
                config_options: Arc::new(ConfigOptions::default()),
            })?
            .into_array(times.len())
    }

    /// Seconds around the epoch and far from it, every hour of a day before and after
    /// 1970, with NULLs.
    fn seconds() -> Vec<Option<i64>> {
        let mut seconds = vec![None, Some(0), Some(-1), Some(1), Some(-3_600), Some(3_599)];
        for hour in -50..50i64 {
            for offset in [-1, 0, 1, 1_799] {
                seconds.push(Some(hour * 3_600 + offset));
            }
        }
        let mut state = 0x1234_5678_9abc_def1u64;
        for _ in 0..2_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            // Years from about 1700 to 2240.
            seconds.push(Some((state >> 30) as i64 % 8_500_000_000 - 8_500_000_000));
            seconds.push(Some((state >> 31) as i64 % 8_500_000_000));
        }
        seconds
    }

    #[test]
    fn hours_equal_datafusions_in_every_unit() {
        let seconds = seconds();
        let scaled = |factor: i64| -> Vec<Option<i64>> {
            seconds
                .iter()
                .map(|s| s.map(|s| s * factor + factor / 3))
                .collect()
        };
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(TimestampSecondArray::from(seconds.clone())),
            Arc::new(TimestampMillisecondArray::from(scaled(1_000))),
            Arc::new(TimestampMicrosecondArray::from(scaled(1_000_000))),
            Arc::new(TimestampNanosecondArray::from(scaled(1_000_000_000))),
        ];
        for times in &arrays {
            for part in ["hour", "HOUR"] {
                let ours = call(&DatePart::default(), part, times).unwrap();
                let theirs = call(&DatePartFunc::new(), part, times).unwrap();
                assert_eq!(
                    ours.as_ref(),
                    theirs.as_ref(),
                    "{part} of {}",
                    times.data_type()
                );
            }
        }
    }

    #[test]
    fn other_parts_and_zones_are_datafusions() {
        let times: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![
            Some(-86_400_123),
            None,
            Some(1_700_000_000_123),
        ]));
        let zoned: ArrayRef = Arc::new(
            TimestampMillisecondArray::from(vec![Some(1_700_000_000_123), None])
                .with_timezone("+05:30"),
        );
        for (part, times) in [
            ("minute", &times),
            ("hours", &times),
            ("epoch", &times),
            ("doy", &times),
            ("hour", &zoned),
        ] {
            let ours = call(&DatePart::default(), part, times).unwrap();
            let theirs = call(&DatePartFunc::new(), part, times).unwrap();
            assert_eq!(ours.as_ref(), theirs.as_ref(), "{part}");
        }
        let error = |function: &dyn ScalarUDFImpl| {
            call(function, "fortnight", &times).unwrap_err().to_string()
        };
        assert_eq!(error(&DatePart::default()), error(&DatePartFunc::new()));
    }
}
