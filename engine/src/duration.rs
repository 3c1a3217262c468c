//! Parsing of the short duration literals used in options and on the command line
//! (`5s`, `250ms`, `1m`, `2h`, `1d`; a bare number is milliseconds).

use std::time::Duration;

use datafusion::common::{Result, plan_err};

/// Parses a duration such as `5s`, `250ms`, `1m`, `1.5h` or `1d`; a bare number is milliseconds.
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
        "" | "ms" => 1.0,
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
        assert_eq!(parse_duration("40").unwrap(), Duration::from_millis(40));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
