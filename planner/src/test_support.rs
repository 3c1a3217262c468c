//! Planning SQL over a small market-data stream, for the rules' unit tests, and calling a
//! scalar function as a plan calls it, for the functions' tests.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl};
use freshet_engine::{GeneratorKind, GeneratorSpec, StreamOptions};

use crate::StreamingContext;

/// The physical plan of `sql` over `market_data` (1 000 generated records, event time
/// `trade_time`, `partitions` source partitions) at `streams` streams, as EXPLAIN shows it.
pub fn plan(sql: &str, partitions: usize, streams: usize) -> datafusion::common::Result<String> {
    plan_over(sql, Some(1_000), partitions, streams)
}

/// [`plan`] over `records` generated records (`None`: an endless stream).
pub fn plan_over(
    sql: &str,
    records: Option<u64>,
    partitions: usize,
    streams: usize,
) -> datafusion::common::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let context = StreamingContext::with_partitions(streams);
        let options = StreamOptions {
            event_time: Some("trade_time".to_string()),
            partitions: Some(partitions),
            ..StreamOptions::default()
        };
        let spec = GeneratorSpec::new(GeneratorKind::MarketData, records);
        context.register_generator("market_data", spec, options)?;
        Ok(context.sql(sql).await?.explain())
    })
}

/// The operator names in `plan`, top down.
pub fn operators(plan: &str) -> Vec<&str> {
    plan.lines()
        .filter_map(|line| line.trim_start().split(':').next())
        .filter(|name| name.ends_with("Exec"))
        .collect()
}

/// `function` called as a plan calls it, on `column` and the `constants` after it: its
/// result as an array of the column's length, for a return field of type `returns`.
pub fn invoke(
    function: &dyn ScalarUDFImpl,
    column: &ArrayRef,
    constants: &[ScalarValue],
    returns: DataType,
) -> Result<ArrayRef> {
    let args: Vec<ColumnarValue> = std::iter::once(ColumnarValue::Array(Arc::clone(column)))
        .chain(constants.iter().cloned().map(ColumnarValue::Scalar))
        .collect();
    let arg_fields = args
        .iter()
        .map(|arg| Arc::new(Field::new("a", arg.data_type(), true)))
        .collect();
    function
        .invoke_with_args(ScalarFunctionArgs {
            args,
            arg_fields,
            number_rows: column.len(),
            return_field: Arc::new(Field::new("f", returns, true)),
            config_options: Arc::new(ConfigOptions::default()),
        })?
        .into_array(column.len())
}
