//! Parsing of the short duration literals used in options and on the command line
//! (`5s`, `250ms`, `1m`, `2h`, `1d`). A number needs its unit (only `0` stands alone): `5` could
//! be milliseconds or seconds, and a guess would be silently wrong.

use std::time::Duration;

use datafusion::common::{Result, plan_err};

/// Parses a duration such as `5s`, `250ms`, `1m`, `1.5h` or `1d`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let Ok(value) = number.parse::<f64>() else {
        return plan_err!(
            "invalid duration '{text}': expected a number followed by ms, s, m, h or d (e.g. 5s)"
        );
    };
    let millis_per_unit = match unit.trim().to_ascii_lowercase().as_str() {
        "" if value == 0.0 => 1.0,
        "" => {
            return plan_err!("invalid duration '{text}': give its unit, e.g. {text}ms or {text}s");
        }
        "ms" => 1.0,
        "s" | "sec" | "second" | "seconds" => 1_000.0,
        "m" | "min" | "minute" | "minutes" => 60_000.0,
        "h" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        other => {
            return plan_err!(
                "invalid duration '{text}': unknown unit '{other}' (use ms, s, m, h or d)"
            );
        }
    };
    let millis = value * millis_per_unit;
    if !millis.is_finite() || millis > 1e15 {
        return plan_err!("invalid duration '{text}': too large");
    }
    Ok(Duration::from_micros((millis * 1_000.0).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        let error = parse_duration("5").unwrap_err().to_string();
        assert!(error.contains("5ms or 5s"), "{error}");
    }
}
