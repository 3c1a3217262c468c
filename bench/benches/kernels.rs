//! Criterion benches of Freshet's kernels on one 8 192-row `market_data` batch: window
//! assignment, hash and sticky routing, group interning and accumulator updates, and the
//! per-record changelog kernels. Run with `cargo bench -p freshet-bench --bench kernels`.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use datafusion::arrow::array::{AsArray, Int64Array};
use datafusion::arrow::datatypes::{Int64Type, Schema};
use datafusion::functions_aggregate::average::avg_udaf;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;
use freshet_engine::aggregate::{GroupTable, RunningAggregates};
use freshet_engine::watermark::event_times;
use freshet_engine::window::window_starts;
use freshet_engine::{GeneratorKind, GeneratorSpec};
use freshet_partitioner::{Router, RoutingStrategy};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROWS: usize = 8_192;

fn kernels(c: &mut Criterion) {
    let batch = GeneratorSpec::new(GeneratorKind::MarketData, Some(ROWS as u64))
        .batch(0, ROWS)
        .expect("a generated batch"); // ok: bench setup
    let schema = batch.schema();
    let mut group = c.benchmark_group("kernels");
    group.throughput(Throughput::Elements(ROWS as u64));

    let times = event_times(batch.column(4)).expect("timestamps"); // ok: bench setup
    let times: Int64Array = times.as_primitive::<Int64Type>().clone();
    group.bench_function("window_starts", |b| {
        b.iter(|| window_starts(&times, 60_000, 0))
    });

    let keys = vec![
        col("trader_id", &schema).expect("column"), // ok: bench setup
        col("symbol", &schema).expect("column"),    // ok: bench setup
    ];
    let mut hash = Router::try_new(&RoutingStrategy::Hash(keys.clone()), 0, 1, 2).expect("router"); // ok: bench setup
    group.bench_function("hash_routing_2_streams", |b| {
        b.iter(|| hash.route(batch.clone()).expect("routes")) // ok: bench
    });
    let mut sticky = Router::try_new(&RoutingStrategy::Sticky, 0, 2, 2).expect("router"); // ok: bench setup
    group.bench_function("sticky_routing", |b| {
        b.iter(|| sticky.route(batch.clone()).expect("routes")) // ok: bench
    });

    let key_columns = vec![batch.column(1).clone(), batch.column(0).clone()];
    let key_schema = Arc::new(Schema::new(vec![
        schema.field(1).clone(),
        schema.field(0).clone(),
    ]));
    let price = col("price", &schema).expect("column"); // ok: bench setup
    let aggregates = vec![
        Arc::new(
            AggregateExprBuilder::new(count_udaf(), vec![Arc::clone(&price)])
                .schema(Arc::clone(&schema))
                .alias("n")
                .build()
                .expect("count"), // ok: bench setup
        ),
        Arc::new(
            AggregateExprBuilder::new(avg_udaf(), vec![price])
                .schema(Arc::clone(&schema))
                .alias("mean")
                .build()
                .expect("avg"), // ok: bench setup
        ),
    ];
    let arguments = vec![vec![batch.column(2).clone()], vec![batch.column(2).clone()]];
    group.bench_function("intern_and_accumulate", |b| {
        let mut table = GroupTable::try_new(&key_schema, &aggregates).expect("table"); // ok: bench
        b.iter(|| {
            table
                .update(&key_columns, &arguments, &[None, None], ROWS)
                .expect("update") // ok: bench
        })
    });
    group.bench_function("per_record_changelog", |b| {
        let mut table = GroupTable::try_new(&key_schema, &aggregates).expect("table"); // ok: bench
        let mut running =
            RunningAggregates::plan(&aggregates, &[None, None], &schema).expect("kernels"); // ok: bench
        b.iter(|| {
            table.intern(&key_columns, ROWS).expect("intern"); // ok: bench
            let groups = table.len();
            running
                .update(table.last_group_ids(ROWS), groups, &arguments)
                .expect("running values") // ok: bench
        })
    });
    group.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
