//! [`WindowSpec`]: an event-time window as the operators use it, in the event-time column's
//! own unit, built from the interval literals of a `tumble` / `hop` / `session` call.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result, ScalarValue, plan_err};

/// An event-time window; lengths are in the unit of the event-time column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowSpec {
    /// Epoch-aligned `[start, start + size)`, starts at multiples of `size` plus `offset`.
    Tumble { size: i64, offset: i64 },
    /// Windows of `size` starting every `slide`; a record is in `size / slide` of them.
    Hop { size: i64, slide: i64 },
    /// A key's records closer than `gap` to each other share a window.
    Session { gap: i64 },
}

impl WindowSpec {
    /// The spec of window function `name` called with the literal `durations` (after the time
    /// column) over an event time of type `time_type`.
    pub fn from_call(name: &str, durations: &[ScalarValue], time_type: &DataType) -> Result<Self> {
        let lengths = durations
            .iter()
            .map(|d| duration_in_unit(d, time_type))
            .collect::<Result<Vec<_>>>()?;
        let positive = |what: &str, value: i64| {
            if value > 0 {
                Ok(value)
            } else {
                plan_err!(
                    "{name}(): the window {what} must be positive, got {}",
                    durations_text(durations)
                )
            }
        };
        match (name, lengths.as_slice()) {
            ("tumble", [size]) => Ok(Self::Tumble {
                size: positive("size", *size)?,
                offset: 0,
            }),
            ("tumble", [size, offset]) => Ok(Self::Tumble {
                size: positive("size", *size)?,
                offset: offset.rem_euclid(positive("size", *size)?),
            }),
            ("hop", [slide, size]) => {
                let (slide, size) = (positive("slide", *slide)?, positive("size", *size)?);
                if slide > size {
                    return plan_err!(
                        "hop(): the slide ({}) is larger than the window size ({}); records between windows would be lost — use a slide up to the size",
                        duration_text(&durations[0]),
                        duration_text(&durations[1])
                    );
                }
                if size % slide != 0 {
                    return plan_err!(
                        "hop(): the window size ({}) must be a whole multiple of the slide ({})",
                        duration_text(&durations[1]),
                        duration_text(&durations[0])
                    );
                }
                let windows_per_record = size / slide;
                if windows_per_record > MAX_HOPPING_WINDOWS_PER_RECORD {
                    return plan_err!(
                        "hop(): each record would fall in {windows_per_record} windows (size / slide); at most {MAX_HOPPING_WINDOWS_PER_RECORD} are allowed — use a larger slide, or a tumbling window"
                    );
                }
                Ok(Self::Hop { size, slide })
            }
            ("session", [gap]) => Ok(Self::Session {
                gap: positive("gap", *gap)?,
            }),
            _ => plan_err!(
                "{name}() takes a time column and {} interval(s), got {}",
                match name {
                    "hop" => "two (slide, size)",
                    "tumble" => "one (size) or two (size, offset)",
                    _ => "one (gap)",
                },
                durations.len()
            ),
        }
    }

    /// The length of the windows (the gap for sessions).
    pub fn size(&self) -> i64 {
        match self {
            Self::Tumble { size, .. } | Self::Hop { size, .. } => *size,
            Self::Session { gap } => *gap,
        }
    }
}

/// The most hopping windows one record may fall in: each record updates every one of them,
/// so a 1-hour window sliding by 1 ms (3.6 M per record) would never finish.
pub const MAX_HOPPING_WINDOWS_PER_RECORD: i64 = 1_000;

fn durations_text(durations: &[ScalarValue]) -> String {
    durations
        .iter()
        .map(duration_text)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A duration literal as the user would write it (`INTERVAL '10' SECOND`), not as arrow
/// prints its type.
pub fn duration_text(value: &ScalarValue) -> String {
    let months = match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.days == 0 && v.nanoseconds == 0 => {
            Some(v.months)
        }
        ScalarValue::IntervalYearMonth(Some(months)) => Some(*months),
        _ => None,
    };
    match months {
        Some(months) if months != 0 && months % 12 == 0 => {
            return format!("INTERVAL '{}' YEAR", months / 12);
        }
        Some(months) if months != 0 => return format!("INTERVAL '{months}' MONTH"),
        _ => {}
    }
    let Ok(nanos) = interval_nanos(value) else {
        return value.to_string();
    };
    let units = [
        (86_400_000_000_000, "DAY"),
        (3_600_000_000_000, "HOUR"),
        (60_000_000_000, "MINUTE"),
        (1_000_000_000, "SECOND"),
        (1_000_000, "MILLISECOND"),
        (1_000, "MICROSECOND"),
    ];
    let (per_unit, unit) = units
        .into_iter()
        .find(|(per_unit, _)| nanos != 0 && nanos % per_unit == 0)
        .unwrap_or((1, "NANOSECOND"));
    format!("INTERVAL '{}' {unit}", nanos / per_unit)
}
/// A duration literal (an interval) in nanoseconds.
fn interval_nanos(value: &ScalarValue) -> Result<i128> {
    Ok(match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            v.days as i128 * 86_400_000_000_000 + v.nanoseconds as i128
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            v.days as i128 * 86_400_000_000_000 + v.milliseconds as i128 * 1_000_000
        }
        ScalarValue::DurationSecond(Some(v)) => *v as i128 * 1_000_000_000,
        ScalarValue::DurationMillisecond(Some(v)) => *v as i128 * 1_000_000,
        ScalarValue::DurationMicrosecond(Some(v)) => *v as i128 * 1_000,
        ScalarValue::DurationNanosecond(Some(v)) => *v as i128,
        ScalarValue::IntervalMonthDayNano(Some(_)) | ScalarValue::IntervalYearMonth(_) => {
            return plan_err!(
                "window lengths in months or years are not supported (their length varies): use days"
            );
        }
        other => {
            return plan_err!(
                "a window length must be an interval literal such as INTERVAL '1' MINUTE, got {other}"
            );
        }
    })
}

/// The timestamp type window bounds have for an event time of `time_type`
/// (integers are epoch milliseconds).
pub fn time_unit_type(time_type: &DataType) -> Result<DataType> {
    match time_type {
        DataType::Timestamp(unit, tz) => Ok(DataType::Timestamp(*unit, tz.clone())),
        DataType::Int64 | DataType::Int32 | DataType::UInt32 | DataType::UInt64 => {
            Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
        }
        other => plan_err!(
            "windows need a timestamp or integer (epoch milliseconds) event time, but the time column has type {other}"
        ),
    }
}

/// Nanoseconds per unit of an event-time column of type `time_type` (an integer is epoch
/// milliseconds).
pub fn nanoseconds_per_unit(time_type: &DataType) -> Result<i64> {
    Ok(match time_unit_type(time_type)? {
        DataType::Timestamp(TimeUnit::Second, _) => 1_000_000_000,
        DataType::Timestamp(TimeUnit::Millisecond, _) => 1_000_000,
        DataType::Timestamp(TimeUnit::Microsecond, _) => 1_000,
        _ => 1,
    })
}

/// A duration literal (an interval) in the unit of `time_type`.
pub fn duration_in_unit(value: &ScalarValue, time_type: &DataType) -> Result<i64> {
    let nanos = interval_nanos(value)?;
    let per_unit = i128::from(nanoseconds_per_unit(time_type)?);
    if nanos % per_unit != 0 {
        return plan_err!(
            "window length {} is finer than the event-time column's unit",
            duration_text(value)
        );
    }
    match i64::try_from(nanos / per_unit) {
        Ok(length) => Ok(length),
        Err(_) => plan_err!("window length {value} is too large"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::IntervalMonthDayNano;

    fn minutes(n: i64) -> ScalarValue {
        ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 0, n * 60_000_000_000)))
    }

    const MS: DataType = DataType::Timestamp(TimeUnit::Millisecond, None);

    #[test]
    fn specs_in_the_event_time_unit() {
        assert_eq!(
            WindowSpec::from_call("tumble", &[minutes(1)], &MS).unwrap(),
            WindowSpec::Tumble {
                size: 60_000,
                offset: 0
            }
        );
        assert_eq!(
            WindowSpec::from_call("hop", &[minutes(5), minutes(10)], &DataType::Int64).unwrap(),
            WindowSpec::Hop {
                size: 600_000,
                slide: 300_000
            }
        );
        let seconds = DataType::Timestamp(TimeUnit::Second, None);
        assert_eq!(
            WindowSpec::from_call("session", &[minutes(1)], &seconds).unwrap(),
            WindowSpec::Session { gap: 60 }
        );
    }

    #[test]
    fn bad_windows_are_refused() {
        let error = WindowSpec::from_call("tumble", &[minutes(0)], &MS).unwrap_err();
        assert!(error.to_string().contains("must be positive"), "{error}");
        let error = WindowSpec::from_call("tumble", &[minutes(-1)], &MS).unwrap_err();
        assert!(error.to_string().contains("must be positive"), "{error}");
        let error = WindowSpec::from_call("hop", &[minutes(10), minutes(5)], &MS).unwrap_err();
        assert!(
            error.to_string().contains("larger than the window size"),
            "{error}"
        );
        let error = WindowSpec::from_call("tumble", &[minutes(1)], &DataType::Utf8).unwrap_err();
        assert!(error.to_string().contains("type Utf8"), "{error}");
        let months = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(1, 0, 0)));
        assert!(WindowSpec::from_call("tumble", &[months], &MS).is_err());
    }
}
