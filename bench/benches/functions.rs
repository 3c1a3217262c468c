//! Criterion benches of the DataFusion functions Freshet registers in place of DataFusion's,
//! each against DataFusion's own on the same 8 192-row batch: `to_char` of Nexmark's bid
//! times (10 µs apart) to a day (q15–q17) and to a minute (q16), and of times a few
//! seconds apart to a second (every value its own granule, where DataFusion formats);
//! `regexp_extract` of Nexmark q21's channel id from bid urls by its literal search for a
//! query parameter, against the same extraction by the regex engine (the same pattern
//! spelled `{0,}` for `*`, which the literal search does not take); `split_part` of Nexmark
//! q22's three directories of the same urls; and the expression Freshet puts in place of
//! DataFusion's division of an integer column by a literal, Nexmark q13's `auction % 10000`
//! (and the quotient `auction / 10000`) of bid auction ids; and the expression Freshet puts
//! in place of DataFusion's comparisons of a column with literals, Nexmark q3's `state =
//! 'OR' OR state = 'ID' OR state = 'CA'` (and one equality) of people's states and its
//! `category = 10` of auctions.
//! Run with `cargo bench -p freshet-bench --bench functions`.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, StringViewArray, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::config::ConfigOptions;
use datafusion::functions::datetime::to_char;
use datafusion::functions::string::split_part;
use datafusion::logical_expr::{ColumnarValue, Operator, ScalarFunctionArgs, ScalarUDF};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, col, lit};
use freshet_engine::kernels::{IntegerSet, StringSet};
use freshet_planner::{
    ConstantDivisorExpr, LiteralSet, LiteralSetExpr, regexp_extract_function, split_part_function,
    to_char_function,
};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROWS: usize = 8_192;

fn times(step_ms: f64) -> ArrayRef {
    let start = 1_700_000_000_000_i64;
    Arc::new(TimestampMillisecondArray::from_iter_values(
        (0..ROWS).map(|row| start + (row as f64 * step_ms) as i64),
    ))
}

/// Bid urls as Nexmark's generator makes them: most with a `channel_id` parameter.
fn urls() -> ArrayRef {
    Arc::new(StringViewArray::from_iter_values((0..ROWS).map(|row| {
        let word = |salt: usize| format!("{:x}", (row * 2_654_435_761 + salt) % 4_096 + 256);
        let mut url = format!(
            "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
            word(1),
            word(2),
            word(3)
        );
        if row % 10 != 0 {
            url.push_str(&format!("&channel_id={}", row * 7_919 % 1_000_003));
        }
        url
    })))
}

fn call(function: &ScalarUDF, column: &ArrayRef, argument: &str) -> ArrayRef {
    call_with(
        function,
        column,
        vec![ScalarValue::Utf8(Some(argument.to_string()))],
    )
}

fn call_with(function: &ScalarUDF, column: &ArrayRef, constants: Vec<ScalarValue>) -> ArrayRef {
    let args: Vec<ColumnarValue> = std::iter::once(ColumnarValue::Array(Arc::clone(column)))
        .chain(constants.into_iter().map(ColumnarValue::Scalar))
        .collect();
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
        .expect("the function's answer")
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

    let extract = regexp_extract_function();
    let urls = urls();
    let extract_with = |pattern: &str| {
        call_with(
            &extract,
            &urls,
            vec![
                ScalarValue::Utf8(Some(pattern.to_string())),
                ScalarValue::Int64(Some(2)),
            ],
        )
    };
    let (literal, regex) = ("(&|^)channel_id=([^&]*)", "(&|^)channel_id=([^&]{0,})");
    assert_eq!(extract_with(literal).as_ref(), extract_with(regex).as_ref());
    let mut group = c.benchmark_group("regexp_extract");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("q21 channel id: regex", |b| b.iter(|| extract_with(regex)));
    group.bench_function("q21 channel id: literal search", |b| {
        b.iter(|| extract_with(literal))
    });
    group.finish();

    let (datafusion, freshet) = (split_part(), split_part_function());
    let directories = |function: &ScalarUDF| {
        [4, 5, 6].map(|position| {
            call_with(
                function,
                &urls,
                vec![
                    ScalarValue::Utf8(Some("/".to_string())),
                    ScalarValue::Int64(Some(position)),
                ],
            )
        })
    };
    assert_eq!(directories(&freshet), directories(&datafusion));
    let mut group = c.benchmark_group("split_part");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("q22 three directories: DataFusion", |b| {
        b.iter(|| directories(&datafusion))
    });
    group.bench_function("q22 three directories: Freshet", |b| {
        b.iter(|| directories(&freshet))
    });
    group.finish();

    let schema = Arc::new(Schema::new(vec![Field::new(
        "auction",
        DataType::Int64,
        false,
    )]));
    let auctions =
        Int64Array::from_iter_values((0..ROWS as i64).map(|row| 1_000 + row * 37 % 50_000));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(auctions)])
        .expect("a batch of auction ids");
    let mut group = c.benchmark_group("divide_by_constant");
    group.throughput(Throughput::Elements(ROWS as u64));
    for (name, op) in [
        ("remainder", Operator::Modulo),
        ("quotient", Operator::Divide),
    ] {
        let datafusion = BinaryExpr::new(
            col("auction", &schema).expect("the column"),
            op,
            lit(10_000_i64),
        );
        let freshet = ConstantDivisorExpr::of(&datafusion).expect("a constant divisor");
        let evaluate = |expr: &dyn PhysicalExpr| {
            expr.evaluate(&batch)
                .and_then(|value| value.into_array(ROWS))
                .expect("the expression's value")
        };
        assert_eq!(evaluate(&freshet).as_ref(), evaluate(&datafusion).as_ref());
        group.bench_function(format!("q13 {name} by 10000: DataFusion"), |b| {
            b.iter(|| evaluate(&datafusion))
        });
        group.bench_function(format!("q13 {name} by 10000: Freshet"), |b| {
            b.iter(|| evaluate(&freshet))
        });
    }
    group.finish();
    literal_set(c);
}

/// q3's filters, DataFusion's equalities (and their ORs) against Freshet's literal sets:
/// people by state, auctions by category.
fn literal_set(c: &mut Criterion) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("state", DataType::Utf8View, false),
        Field::new("category", DataType::Int64, false),
    ]));
    let states = ["AZ", "CA", "ID", "OR", "WA", "WY"];
    let state_column = StringViewArray::from_iter_values((0..ROWS).map(|row| states[row * 7 % 6]));
    let categories = Int64Array::from_iter_values((0..ROWS as i64).map(|row| 10 + row * 3 % 5));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(state_column), Arc::new(categories)],
    )
    .expect("a batch of states and categories");
    let column = |name: &str| col(name, &schema).expect("the column");
    let equals = |name: &str, value: ScalarValue| -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(column(name), Operator::Eq, lit(value)))
    };
    let state = |value: &str| equals("state", ScalarValue::Utf8View(Some(value.to_string())));
    let or = |l, r| -> Arc<dyn PhysicalExpr> { Arc::new(BinaryExpr::new(l, Operator::Or, r)) };
    let evaluate = |expr: &dyn PhysicalExpr| {
        expr.evaluate(&batch)
            .and_then(|value| value.into_array(ROWS))
            .expect("the expression's value")
    };
    let strings = |literals: &[&str]| LiteralSet::Strings(StringSet::new(literals));
    let mut group = c.benchmark_group("literal_set");
    group.throughput(Throughput::Elements(ROWS as u64));
    let cases = [
        (
            "q3 state in three",
            or(or(state("OR"), state("ID")), state("CA")),
            LiteralSetExpr::new(column("state"), strings(&["OR", "ID", "CA"])),
        ),
        (
            "state equals one",
            state("CA"),
            LiteralSetExpr::new(column("state"), strings(&["CA"])),
        ),
        (
            "q3 category equals 10",
            equals("category", ScalarValue::Int64(Some(10))),
            LiteralSetExpr::new(
                column("category"),
                LiteralSet::Integers(IntegerSet::new([10])),
            ),
        ),
    ];
    for (name, datafusion, freshet) in cases {
        assert_eq!(
            evaluate(&freshet).as_ref(),
            evaluate(datafusion.as_ref()).as_ref()
        );
        group.bench_function(format!("{name}: DataFusion"), |b| {
            b.iter(|| evaluate(datafusion.as_ref()))
        });
        group.bench_function(format!("{name}: Freshet"), |b| {
            b.iter(|| evaluate(&freshet))
        });
    }
    // The category filter as the first reader of a batch: successive slices of a column of
    // 1 GiB, four times the last level cache, so that each is read from memory.
    const COLD_VALUES: usize = 1 << 27;
    let cold = Int64Array::from_iter_values((0..COLD_VALUES as i64).map(|row| 10 + row * 3 % 5));
    let mut next_slice = 0;
    let mut slice = || {
        next_slice = (next_slice + ROWS) % (COLD_VALUES - ROWS);
        let categories = Arc::new(cold.slice(next_slice, ROWS));
        let states = Arc::clone(batch.column(0));
        RecordBatch::try_new(Arc::clone(&schema), vec![states, categories])
            .expect("a slice of categories")
    };
    let category = col("category", &schema).expect("the column");
    let datafusion = BinaryExpr::new(Arc::clone(&category), Operator::Eq, lit(10_i64));
    let freshet = LiteralSetExpr::new(category, LiteralSet::Integers(IntegerSet::new([10])));
    for (name, expr) in [
        ("DataFusion", &datafusion as &dyn PhysicalExpr),
        ("Freshet", &freshet),
    ] {
        group.bench_function(format!("q3 category equals 10, cold: {name}"), |b| {
            b.iter(|| expr.evaluate(&slice()).expect("the expression's value"))
        });
    }
    group.finish();
}

criterion_group!(benches, functions);
criterion_main!(benches);
