//! [`FreshetOptions`]: Freshet's session options, `SET freshet.<name> = <value>`.

use datafusion::common::config::{ConfigExtension, ConfigOptions};
use datafusion::common::extensions_options;

extensions_options! {
    /// Freshet's session options.
    pub struct FreshetOptions {
        /// How streaming aggregations emit: '' (windows when they close; plain GROUP BY at
        /// the end of bounded input), 'final' or 'changes'. A query's EMIT clause sets it.
        pub emit: String, default = String::new()
        /// Granularity of EMIT CHANGES: 'record' (one row per input record) or 'batch' (one
        /// row per group changed by an input batch).
        pub changes_per: String, default = "record".to_string()
        /// How long after its end a window still accepts late records, in milliseconds of
        /// event time; EMIT FINAL waits this long before emitting a window.
        pub allowed_lateness_ms: u64, default = 0
        /// How keyed streaming operators are fed: '' (chosen from the plan), 'hash',
        /// 'sticky', 'round_robin', 'fan_in' or 'two_phase'. A query's WITH ('partitioning_strategy' = …)
        /// sets it for that query.
        pub partitioning_strategy: String, default = String::new()
        /// Window functions (OVER): forget a PARTITION BY key after this many milliseconds of
        /// event time without a row (0: never). `EXPIRE AFTER … INACTIVITY` in OVER sets it.
        pub expire_after_ms: u64, default = 0
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
