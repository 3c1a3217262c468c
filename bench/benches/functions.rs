//! Criterion benches of the DataFusion functions Freshet registers in place of DataFusion's,
//! each against DataFusion's own on the same 8 192-row batch: `to_char` of Nexmark's bid
//! times (10 µs apart) to a day (q15–q17) and to a minute (q16), and of times a few
//! seconds apart to a second (every value its own granule, where DataFusion formats).
//! Run with `cargo bench -p freshet-bench --bench functions`.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use datafusion::arrow::array::{ArrayRef, TimestampMillisecondArray};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::config::ConfigOptions;
use datafusion::functions::datetime::to_char;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF};
use freshet_planner::to_char_function;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROWS: usize = 8_192;

fn times(step_ms: f64) -> ArrayRef {
    let start = 1_700_000_000_000_i64;
    Arc::new(TimestampMillisecondArray::from_iter_values(
        (0..ROWS).map(|row| start + (row as f64 * step_ms) as i64),
    ))
}

fn call(function: &ScalarUDF, times: &ArrayRef, format: &str) -> ArrayRef {
    let args = vec![
        ColumnarValue::Array(Arc::clone(times)),
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(format.to_string()))),
    ];
    let arg_fields = args
        .iter()
        .map(|arg| Arc::new(Field::new("a", arg.data_type(), true)))
        .collect();
    function
        .invoke_with_args(ScalarFunctionArgs {
            args,
            arg_fields,
            number_rows: ROWS,
            return_field: Arc::new(Field::new("f", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        })
        .and_then(|result| result.into_array(ROWS))
        .expect("to_char")
}

fn functions(c: &mut Criterion) {
    let datafusion = to_char();
    let freshet = to_char_function();
    let mut group = c.benchmark_group("to_char");
    group.throughput(Throughput::Elements(ROWS as u64));
    for (name, step_ms, format) in [
        ("day", 0.01, "%Y-%m-%d"),
        ("minute", 0.01, "%H:%M"),
        ("second, every row its own", 3_000.0, "%Y-%m-%d %H:%M:%S"),
    ] {
        let times = times(step_ms);
        assert_eq!(
            call(&freshet, &times, format).as_ref(),
            call(&datafusion, &times, format).as_ref()
        );
        group.bench_function(format!("{name}: DataFusion"), |b| {
            b.iter(|| call(&datafusion, &times, format))
        });
        group.bench_function(format!("{name}: Freshet"), |b| {
            b.iter(|| call(&freshet, &times, format))
        });
    }
    group.finish();
}

criterion_group!(benches, functions);
criterion_main!(benches);
