//! `--table NAME=SOURCE[,key=value...]`: parsing stream specs and registering them.

use std::collections::HashSet;

use datafusion::common::{Result, plan_err};
use freshet_engine::{
    GeneratorKind, GeneratorSpec, NexmarkTable, StreamOptions, nexmark_side_input, parse_duration,
};
use freshet_planner::StreamingContext;

/// Records of the default generator tables the command line registers.
const DEFAULT_GENERATOR_RECORDS: u64 = 1_000_000;

/// `NAME=LOCATION[,OPTIONS]` split into its name, location (unquoted) and options text.
fn split_table_text(text: &str) -> Result<(&str, &str, &str)> {
    let Some((name, rest)) = text.split_once('=') else {
        return plan_err!(
            "--table {text}: expected NAME=PATH or NAME=generator:market_data|orders|nexmark"
        );
    };
    let name = name.trim();
    if name.is_empty() {
        return plan_err!("--table {text}: the table name is empty");
    }
    // A path with a comma is quoted: NAME="a,b.csv",key=value.
    let (location, options_text) = match rest.trim_start().strip_prefix('"') {
        Some(quoted) => {
            let Some((path, after)) = quoted.split_once('"') else {
                return plan_err!("--table {text}: the quoted path has no closing quote");
            };
            let after = after.trim_start();
            if !(after.is_empty() || after.starts_with(',')) {
                return plan_err!("--table {text}: expected ',' or the end after the quoted path");
            }
            (path, after.trim_start_matches(','))
        }
        None => rest.split_once(',').unwrap_or((rest, "")),
    };
    Ok((name, location.trim(), options_text))
}

/// `text` (a `--table`) with a relative file path made absolute against the current
/// directory, so that workers started elsewhere read the same files.
pub fn with_absolute_path(text: &str) -> Result<String> {
    let (name, location, options_text) = split_table_text(text)?;
    let path = std::path::Path::new(location);
    if location.starts_with("generator:") || path.is_absolute() || location.contains("://") {
        return Ok(text.to_string());
    }
    let absolute = std::path::absolute(path)?;
    let options = match options_text.is_empty() {
        true => String::new(),
        false => format!(",{options_text}"),
    };
    Ok(format!("{name}=\"{}\"{options}", absolute.display()))
}

/// Where a `--table` reads from.
#[derive(Debug, Clone, PartialEq)]
pub enum TableSource {
    Files(String),
    Generator(GeneratorSpec),
}

/// A parsed `--table` argument.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    pub name: String,
    pub source: TableSource,
    pub options: StreamOptions,
}

impl std::str::FromStr for TableSpec {
    type Err = datafusion::error::DataFusionError;

    fn from_str(text: &str) -> Result<Self> {
        let (name, location, options_text) = split_table_text(text)?;
        let parts = options_text.split(',');
        let source = match location.strip_prefix("generator:") {
            Some(kind) => Self::generator(name, kind)?.source,
            None if location.is_empty() => {
                return plan_err!("--table {text}: no path or generator given for '{name}'");
            }
            None => TableSource::Files(location.to_string()),
        };
        let mut spec = Self::new(name, source);
        for pair in parts.filter(|p| !p.trim().is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return plan_err!("--table {name}: option '{pair}' is not key=value");
            };
            spec.set(key.trim(), value.trim())?;
        }
        Ok(spec)
    }
}

impl TableSpec {
    /// A stream `name` reading `source`, with default options.
    pub fn new(name: &str, source: TableSource) -> Self {
        Self {
            name: name.to_string(),
            source,
            options: StreamOptions::default(),
        }
    }

    /// Sets a stream option (`event_time`, `watermark`, …) or a generator parameter
    /// (`records`, `symbols`, …) from its textual value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        if self.options.set(key, value)? {
            return Ok(());
        }
        let taken = match &mut self.source {
            TableSource::Generator(spec) => spec.set(key, value)?,
            TableSource::Files(_) => false,
        };
        if !taken {
            let mut valid = StreamOptions::KEYS.to_vec();
            if let TableSource::Generator(spec) = &self.source {
                valid.extend(spec.keys());
            }
            return plan_err!(
                "unknown option '{key}' for table '{}'; valid options are {}",
                self.name,
                valid.join(", ")
            );
        }
        Ok(())
    }

    /// A generator table `name` of `kind` (market_data, orders, nexmark.person, … or, for a
    /// table named person, auction or bid, nexmark), of 1 M records unless set otherwise.
    pub fn generator(name: &str, kind: &str) -> Result<Self> {
        let spec = match (kind, NexmarkTable::from_name(name)) {
            ("nexmark", Some(table)) => {
                GeneratorSpec::nexmark(table, Some(DEFAULT_GENERATOR_RECORDS))
            }
            _ => GeneratorSpec::new(
                kind.parse::<GeneratorKind>()?,
                Some(DEFAULT_GENERATOR_RECORDS),
            ),
        };
        Ok(Self::new(name, TableSource::Generator(spec)))
    }
}

/// Registers `specs` on `ctx`, then the default generator tables `market_data` and `orders`,
/// the Nexmark streams `person`, `auction` and `bid` (one sequence of 1 M events) and
/// Nexmark's bounded `side_input` under the names not taken. `event_time` and `watermark` apply to every given table that
/// does not set its own (`event_time` to those that have such a column, as a bounded side
/// table often does not; it is refused if no given table has it).
pub async fn register_tables(
    ctx: &StreamingContext,
    specs: &[String],
    event_time: Option<&str>,
    watermark: Option<&str>,
) -> Result<()> {
    let watermark = watermark.map(parse_duration).transpose()?;
    let mut taken = HashSet::new();
    // The first refusal of a given table without the column of `event_time`, and how many
    // have it.
    let (mut without_time, mut with_time) = (None, 0);
    for text in specs {
        let mut spec: TableSpec = text.parse()?;
        let time_given_for_all = spec.options.event_time.is_none() && event_time.is_some();
        if spec.options.event_time.is_none() {
            spec.options.event_time = event_time.map(str::to_string);
        }
        if let Some(watermark) = watermark
            && spec.options.out_of_orderness.is_zero()
        {
            spec.options.out_of_orderness = watermark;
        }
        if !taken.insert(spec.name.clone()) {
            return plan_err!("table '{}' is given twice", spec.name);
        }
        match (register_table(ctx, spec.clone()).await, event_time) {
            (Err(error), Some(column))
                if time_given_for_all
                    && error
                        .to_string()
                        .contains(&format!("event-time column '{column}' does not exist")) =>
            {
                without_time.get_or_insert(error);
                spec.options.event_time = None;
                register_table(ctx, spec).await?;
            }
            (registered, _) => {
                registered?;
                with_time += usize::from(time_given_for_all);
            }
        }
    }
    if let Some(refused) = without_time
        && with_time == 0
    {
        return Err(refused);
    }
    let nexmark = NexmarkTable::ALL.map(|table| (table.name(), GeneratorKind::Nexmark(table)));
    for (name, kind) in [
        ("market_data", GeneratorKind::MarketData),
        ("orders", GeneratorKind::Orders),
    ]
    .into_iter()
    .chain(nexmark)
    {
        if !taken.contains(name) {
            let options = StreamOptions {
                out_of_orderness: watermark.unwrap_or_default(),
                ..StreamOptions::default()
            };
            ctx.register_generator(
                name,
                GeneratorSpec::new(kind, Some(DEFAULT_GENERATOR_RECORDS)),
                options,
            )?;
        }
    }
    if !taken.contains("side_input") {
        let side_input = nexmark_side_input();
        let options = StreamOptions {
            bounded: Some(true),
            ..StreamOptions::default()
        };
        ctx.register_batches("side_input", side_input.schema(), vec![side_input], options)?;
    }
    Ok(())
}

/// Registers one stream on `ctx` (replacing one of the same name).
pub async fn register_table(ctx: &StreamingContext, spec: TableSpec) -> Result<()> {
    match spec.source {
        TableSource::Files(path) => {
            ctx.register_files(&spec.name, &path, None, spec.options)
                .await
        }
        TableSource::Generator(generator) => {
            ctx.register_generator(&spec.name, generator, spec.options)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_generator_with_options() {
        let spec: TableSpec =
            "md=generator:market_data,records=10k,symbols=3,watermark=2s,partitions=2"
                .parse()
                .unwrap();
        assert_eq!(spec.name, "md");
        let TableSource::Generator(generator) = spec.source else {
            panic!("expected a generator");
        };
        assert_eq!(generator.records, Some(10_000));
        assert_eq!(generator.symbols, 3);
        assert_eq!(spec.options.partitions, Some(2));
        assert_eq!(spec.options.out_of_orderness.as_secs(), 2);
    }

    #[test]
    fn a_quoted_path_may_hold_commas() {
        let spec: TableSpec = "t=\"data/a,b.csv\",event_time=ts".parse().unwrap();
        assert_eq!(spec.source, TableSource::Files("data/a,b.csv".to_string()));
        assert_eq!(spec.options.event_time.as_deref(), Some("ts"));
        assert!("t=\"data/a,b.csv".parse::<TableSpec>().is_err());
    }

    #[test]
    fn parses_files_and_rejects_unknown_options() {
        let spec: TableSpec = "t=data/x.parquet,event_time=ts".parse().unwrap();
        assert_eq!(
            spec.source,
            TableSource::Files("data/x.parquet".to_string())
        );
        let error = "t=data/x.parquet,symbols=3"
            .parse::<TableSpec>()
            .unwrap_err();
        assert!(
            error.to_string().contains("unknown option 'symbols'"),
            "{error}"
        );
        assert!("no_equals_sign".parse::<TableSpec>().is_err());
        let error = "o=generator:orders,symbols=3"
            .parse::<TableSpec>()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("a parameter of generator market_data"),
            "{error}"
        );
        assert!("t=x.parquet,partitioned_by=".parse::<TableSpec>().is_err());
        assert!("t=generator:weather".parse::<TableSpec>().is_err());
    }
}
