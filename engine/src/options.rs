//! The options a stream is registered with: its event-time column, watermark delay and idle
//! timeout, boundedness, source partitioning and replay pacing.
//!
//! Options are plain data so that they can be written out with a checkpoint and sent to
//! another machine with the plan. They are set from code or from `key=value` pairs (the
//! command line's `--table NAME=PATH,key=value` form) through [`StreamOptions::set`].

use std::time::Duration;

use datafusion::arrow::datatypes::TimeUnit;
use datafusion::common::{Result, plan_err};

use crate::duration::parse_duration;

/// The most source partitions a stream has, and the most streams a query runs on: an
/// exchange keeps a bounded channel per pair of input and output partition, so its memory
/// grows with their product (1 024 streams over 1 024 source partitions took 3.4 GB for a
/// 10 000-record windowed GROUP BY, 4 096 more than 24 GB).
pub const MAX_PARTITIONS: usize = 256;

/// How fast a replay hands out its records.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Pacing {
    /// As fast as the consumers take them.
    #[default]
    AsFastAsPossible,
    /// At most this many records per second, over all source partitions.
    RecordsPerSecond(f64),
}

/// How a replay reads local Parquet files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileReads {
    /// Through a memory map: the decoder reads the page cache without a copy.
    #[default]
    MemoryMap,
    /// Copied out of the file into buffers (`pread`), as other object stores are read.
    Copy,
}

/// Registration options of a stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamOptions {
    /// The event-time column: a timestamp, or an integer of epoch milliseconds (or of
    /// `event_time_unit`).
    pub event_time: Option<String>,
    /// The unit of an integer event-time column, which the stream then shows as a timestamp
    /// of that unit; `None`: an integer column is epoch milliseconds.
    pub event_time_unit: Option<TimeUnit>,
    /// How far behind the largest event time seen a record may still arrive
    /// (the watermark is `max event time - out_of_orderness`).
    pub out_of_orderness: Duration,
    /// `Some(true)`: a replay that ends; `Some(false)`: a stream that never ends;
    /// `None`: what the source is (files and batches end, a generator without a record
    /// count does not).
    pub bounded: Option<bool>,
    /// Number of source partitions; `None` uses the session's target partitions.
    pub partitions: Option<usize>,
    /// Key columns the source is already partitioned by, when known.
    pub partitioned_by: Vec<String>,
    /// Replay speed.
    pub pacing: Pacing,
    /// A source partition that sends no record for this long (wall-clock) stops holding
    /// the watermark back until it sends again (its records may then be late).
    pub idle_timeout: Option<Duration>,
    /// How local Parquet files are read.
    pub file_reads: FileReads,
}

impl StreamOptions {
    /// The option names [`StreamOptions::set`] accepts.
    pub const KEYS: &'static [&'static str] = &[
        "event_time",
        "event_time_unit",
        "watermark",
        "bounded",
        "partitions",
        "partitioned_by",
        "rate",
        "idle_timeout",
        "memory_map",
    ];

    /// The options that differ from the defaults, as text that [`Self::set`] reads back.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let millis = |d: Duration| format!("{}ms", d.as_secs_f64() * 1_000.0);
        let mut pairs = Vec::new();
        if let Some(column) = &self.event_time {
            pairs.push(("event_time", column.clone()));
        }
        if let Some(unit) = self.event_time_unit {
            let unit = match unit {
                TimeUnit::Second => "s",
                TimeUnit::Millisecond => "ms",
                TimeUnit::Microsecond => "us",
                TimeUnit::Nanosecond => "ns",
            };
            pairs.push(("event_time_unit", unit.to_string()));
        }
        if !self.out_of_orderness.is_zero() {
            pairs.push(("watermark", millis(self.out_of_orderness)));
        }
        if let Some(bounded) = self.bounded {
            pairs.push(("bounded", bounded.to_string()));
        }
        if let Some(partitions) = self.partitions {
            pairs.push(("partitions", partitions.to_string()));
        }
        if !self.partitioned_by.is_empty() {
            pairs.push(("partitioned_by", self.partitioned_by.join("+")));
        }
        if let Pacing::RecordsPerSecond(rate) = self.pacing {
            pairs.push(("rate", rate.to_string()));
        }
        if let Some(timeout) = self.idle_timeout {
            pairs.push(("idle_timeout", millis(timeout)));
        }
        if self.file_reads == FileReads::Copy {
            pairs.push(("memory_map", "false".to_string()));
        }
        pairs
    }

    /// Sets the option `key` from its textual `value`. Returns `Ok(false)` when `key` is not a
    /// stream option (so that a caller can try other option sets), and an error when the value
    /// does not fit the option.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool> {
        match key {
            "event_time" => self.event_time = Some(value.to_string()),
            "event_time_unit" => {
                self.event_time_unit = Some(match value.to_ascii_lowercase().as_str() {
                    "s" => TimeUnit::Second,
                    "ms" => TimeUnit::Millisecond,
                    "us" => TimeUnit::Microsecond,
                    "ns" => TimeUnit::Nanosecond,
                    _ => {
                        return plan_err!(
                            "option event_time_unit={value}: expected s, ms, us or ns (the unit of an integer event-time column's epoch values)"
                        );
                    }
                })
            }
            "watermark" | "out_of_orderness" => self.out_of_orderness = parse_duration(value)?,
            "bounded" => self.bounded = Some(parse_bool(key, value)?),
            "partitions" => {
                let partitions = parse_count(key, value)?;
                if partitions == 0 || partitions > MAX_PARTITIONS {
                    return plan_err!(
                        "option partitions={value}: expected 1 to {MAX_PARTITIONS} source partitions (every exchange keeps a channel per pair of source partition and stream, so memory grows with their product)"
                    );
                }
                self.partitions = Some(partitions);
            }
            "partitioned_by" => {
                let columns: Vec<String> = value
                    .split(['+', ':'])
                    .map(|column| column.trim().to_string())
                    .collect();
                if columns.iter().any(String::is_empty) {
                    return plan_err!(
                        "option partitioned_by={value}: expected the key columns, separated by +"
                    );
                }
                self.partitioned_by = columns;
            }
            "rate" => {
                let rate: f64 = value.parse().unwrap_or(f64::NAN);
                if !(rate.is_finite() && rate > 0.0) {
                    return plan_err!(
                        "option rate={value}: expected a positive number of records per second"
                    );
                }
                self.pacing = Pacing::RecordsPerSecond(rate);
            }
            "idle_timeout" => {
                let timeout = parse_duration(value)?;
                if timeout.is_zero() {
                    return plan_err!(
                        "option idle_timeout={value}: expected a positive duration, e.g. 30s"
                    );
                }
                self.idle_timeout = Some(timeout);
            }
            "memory_map" => {
                self.file_reads = if parse_bool(key, value)? {
                    FileReads::MemoryMap
                } else {
                    FileReads::Copy
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => plan_err!("option {key}={value}: expected true or false"),
    }
}

pub fn parse_count(key: &str, value: &str) -> Result<usize> {
    let cleaned = value.replace('_', "");
    let parsed = match cleaned.strip_suffix(['k', 'K']) {
        Some(n) => n.parse::<usize>().map(|n| n * 1_000),
        None => match cleaned.strip_suffix(['m', 'M']) {
            Some(n) => n.parse::<usize>().map(|n| n * 1_000_000),
            None => cleaned.parse::<usize>(),
        },
    };
    match parsed {
        Ok(n) => Ok(n),
        Err(_) => plan_err!("option {key}={value}: expected a whole number (e.g. 10000, 10k, 10M)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(options: &StreamOptions) -> StreamOptions {
        let mut read = StreamOptions::default();
        for (key, value) in options.to_pairs() {
            assert!(read.set(key, &value).unwrap(), "{key}");
        }
        read
    }

    /// What differs from the defaults comes back from its text, fractions of a millisecond
    /// included; the defaults give no text.
    #[test]
    fn options_come_back_from_their_pairs() {
        assert!(StreamOptions::default().to_pairs().is_empty());
        let options = StreamOptions {
            event_time: Some("ts".into()),
            event_time_unit: Some(TimeUnit::Microsecond),
            out_of_orderness: Duration::from_micros(4_000_500),
            bounded: Some(false),
            partitions: Some(3),
            partitioned_by: vec!["a".into(), "b".into()],
            pacing: Pacing::RecordsPerSecond(2_500.5),
            idle_timeout: Some(Duration::from_secs(30)),
            file_reads: FileReads::Copy,
        };
        assert_eq!(read_back(&options), options);
    }

    #[test]
    fn sets_known_options() {
        let mut options = StreamOptions::default();
        assert!(options.set("event_time", "ts").unwrap());
        assert!(options.set("watermark", "5s").unwrap());
        assert!(options.set("partitions", "4").unwrap());
        assert!(options.set("partitioned_by", "").is_err());
        assert!(options.set("partitioned_by", "a+").is_err());
        assert!(options.set("partitioned_by", "a+b").unwrap());
        assert!(options.set("rate", "1000").unwrap());
        assert!(options.set("bounded", "false").unwrap());
        assert!(options.set("idle_timeout", "30s").unwrap());
        assert!(options.set("event_time_unit", "s").unwrap());
        assert_eq!(options.event_time_unit, Some(TimeUnit::Second));
        assert_eq!(options.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(options.event_time.as_deref(), Some("ts"));
        assert_eq!(options.out_of_orderness, Duration::from_secs(5));
        assert_eq!(options.partitions, Some(4));
        assert_eq!(options.partitioned_by, vec!["a", "b"]);
        assert_eq!(options.pacing, Pacing::RecordsPerSecond(1000.0));
        assert_eq!(options.bounded, Some(false));
    }

    #[test]
    fn unknown_key_is_not_taken_and_bad_values_fail() {
        let mut options = StreamOptions::default();
        assert!(!options.set("colour", "blue").unwrap());
        assert!(options.set("partitions", "0").is_err());
        assert!(options.set("rate", "-3").is_err());
        assert!(options.set("bounded", "maybe").is_err());
        assert!(options.set("idle_timeout", "0s").is_err());
        assert!(options.set("idle_timeout", "soon").is_err());
        assert!(options.set("event_time_unit", "minutes").is_err());
    }

    #[test]
    fn counts_take_suffixes() {
        assert_eq!(parse_count("records", "10M").unwrap(), 10_000_000);
        assert_eq!(parse_count("records", "5k").unwrap(), 5_000);
        assert_eq!(parse_count("records", "1_000").unwrap(), 1_000);
        assert!(parse_count("records", "many").is_err());
    }
}
