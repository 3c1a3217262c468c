//! [`FreshetOptions`]: Freshet's session options, `SET freshet.<name> = <value>`.
//!
//! Every option is parsed into a type when it is set: an unknown value (`'chnages'`) is an
//! error that lists the valid ones, never a silent default.

use std::fmt;
use std::str::FromStr;

use datafusion::common::config::{ConfigExtension, ConfigField, ConfigOptions, Visit};
use datafusion::common::{DataFusionError, Result, extensions_options};

/// An option whose value is one of a few names.
macro_rules! named_setting {
    ($(#[$doc:meta])* $name:ident, $key:literal, default = $default:ident,
     { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// The value's name, as it is written in `SET`.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::$default
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = DataFusionError;

            fn from_str(value: &str) -> Result<Self> {
                match value.trim().to_ascii_lowercase().as_str() {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(DataFusionError::Configuration(format!(
                        "{} = '{value}' is not a valid value; valid values: {}",
                        $key,
                        [$(format!("'{}'", $text)),+].join(", ")
                    ))),
                }
            }
        }

        impl ConfigField for $name {
            fn visit<V: Visit>(&self, v: &mut V, key: &str, description: &'static str) {
                v.some(key, self, description)
            }

            fn set(&mut self, _key: &str, value: &str) -> Result<()> {
                *self = value.parse()?;
                Ok(())
            }

            fn reset(&mut self, _key: &str) -> Result<()> {
                *self = Self::default();
                Ok(())
            }
        }
    };
}

named_setting!(
    /// How streaming aggregations emit.
    EmitSetting, "freshet.emit", default = Default, {
        /// Windows when they close; a plain GROUP BY at the end of bounded input.
        Default = "",
        Final = "final",
        Changes = "changes",
    }
);

named_setting!(
    /// The granularity of EMIT CHANGES.
    ChangesPer, "freshet.changes_per", default = Record, {
        /// One row per input record.
        Record = "record",
        /// One row per group changed by an input batch.
        Batch = "batch",
    }
);

named_setting!(
    /// How keyed streaming operators are fed.
    StrategySetting, "freshet.partitioning_strategy", default = Auto, {
        /// Chosen from the plan.
        Auto = "",
        Hash = "hash",
        Sticky = "sticky",
        RoundRobin = "round_robin",
        FanIn = "fan_in",
        TwoPhase = "two_phase",
    }
);

/// Milliseconds of event time, at most [`EventMillis::MAX`] (292 years, so that any time unit
/// down to nanoseconds holds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventMillis(pub u64);

impl EventMillis {
    pub const MAX: u64 = (i64::MAX / 1_000_000) as u64;
}

impl fmt::Display for EventMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl ConfigField for EventMillis {
    fn visit<V: Visit>(&self, v: &mut V, key: &str, description: &'static str) {
        v.some(key, self, description)
    }

    /// Whole milliseconds (`5000`), or a duration with its unit (`5s`, `250ms`).
    fn set(&mut self, _key: &str, value: &str) -> Result<()> {
        let millis = match value.trim().parse::<u64>() {
            Ok(ms) => Some(ms),
            Err(_) => freshet_engine::parse_duration(value)
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok()),
        };
        match millis {
            Some(ms) if ms <= Self::MAX => {
                self.0 = ms;
                Ok(())
            }
            _ => Err(DataFusionError::Configuration(format!(
                "'{value}' is not an event-time span: expected whole milliseconds (5000) or a duration with its unit (5s), up to {} ms",
                Self::MAX
            ))),
        }
    }

    fn reset(&mut self, _key: &str) -> Result<()> {
        *self = Self::default();
        Ok(())
    }
}

extensions_options! {
    /// Freshet's session options.
    pub struct FreshetOptions {
        /// How streaming aggregations emit: '' (windows when they close; plain GROUP BY at
        /// the end of bounded input), 'final' or 'changes'. A query's EMIT clause sets it.
        pub emit: EmitSetting, default = EmitSetting::Default
        /// Granularity of EMIT CHANGES: 'record' (one row per input record) or 'batch' (one
        /// row per group changed by an input batch).
        pub changes_per: ChangesPer, default = ChangesPer::Record
        /// How long after its end a window still accepts late records, in milliseconds of
        /// event time; EMIT FINAL waits this long before emitting a window.
        pub allowed_lateness_ms: EventMillis, default = EventMillis(0)
        /// How keyed streaming operators are fed: '' (chosen from the plan), 'hash',
        /// 'sticky', 'round_robin', 'fan_in' or 'two_phase'. A query's WITH ('partitioning_strategy' = …)
        /// sets it for that query.
        pub partitioning_strategy: StrategySetting, default = StrategySetting::Auto
        /// Window functions (OVER): forget a PARTITION BY key after this many milliseconds of
        /// event time without a row (0: never). `EXPIRE AFTER … INACTIVITY` in OVER sets it.
        pub expire_after_ms: EventMillis, default = EventMillis(0)
        /// Joins of two streams without a time bound (regular joins): keep each row this
        /// many milliseconds of event time, matching rows whose event times lie within it of
        /// each other (0: keep every row, only where both streams are bounded).
        pub state_ttl_ms: EventMillis, default = EventMillis(0)
        /// Tumbling-window aggregations over a replay of files (chosen automatically): route
        /// rows in runs of whole windows holding about this many records by the files'
        /// statistics, each run to one stream (0: hash on the GROUP BY keys instead).
        pub time_run_records: u64, default = 131_072
        /// Set when the query is planned to run across workers: the automatic strategy then
        /// takes a partial step over fixed windows only where the final step judges lateness
        /// (over a replay of files), since workers share no watermark.
        pub across_workers: bool, default = false
        /// Set when the query's late records will be read (the command line's
        /// --late-output, Python's late_output and late_records()): the automatic strategy
        /// then takes no partial step that judges lateness from states (hopping windows
        /// over a replay of files), so that every late record reaches the side output.
        pub keep_late_records: bool, default = false
    }
}

impl FreshetOptions {
    /// The options set in `config`, or the defaults.
    pub fn of(config: &ConfigOptions) -> Self {
        config
            .extensions
            .get::<FreshetOptions>()
            .cloned()
            .unwrap_or_default()
    }
}

impl ConfigExtension for FreshetOptions {
    const PREFIX: &'static str = "freshet";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_are_refused_with_the_valid_ones() {
        let mut options = FreshetOptions::default();
        let error = options.set("emit", "chnages").unwrap_err().to_string();
        assert!(
            error.contains("'chnages'") && error.contains("'changes'"),
            "{error}"
        );
        assert!(options.set("changes_per", "row").is_err());
        assert!(options.set("partitioning_strategy", "random").is_err());
        assert!(options.set("allowed_lateness_ms", "-1").is_err());
        assert!(
            options
                .set("allowed_lateness_ms", "99999999999999999999")
                .is_err()
        );
        assert!(options.set("expire_after_ms", "soon").is_err());
        options.set("emit", "CHANGES").unwrap();
        assert_eq!(options.emit, EmitSetting::Changes);
        options.set("partitioning_strategy", "two_phase").unwrap();
        assert_eq!(options.partitioning_strategy, StrategySetting::TwoPhase);
        options.set("allowed_lateness_ms", "10000").unwrap();
        assert_eq!(options.allowed_lateness_ms, EventMillis(10_000));
    }
}
