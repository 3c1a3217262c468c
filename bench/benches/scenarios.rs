//! Criterion benches of the scenarios, Freshet next to DataFusion batch on the same in-memory
//! batches (1 M records, one stream). Run with `cargo bench -p freshet-bench`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshet_bench::{ScenarioRun, scenarios};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: u64 = 1_000_000;

fn scenario_benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime"); // ok: bench setup
    for scenario in scenarios() {
        let spec = scenario.data_spec(RECORDS);
        let schema = spec.schema();
        let batches = spec.generate_all().expect("bounded data"); // ok: bench setup
        let partitions = vec![batches];
        let run = ScenarioRun {
            scenario: &scenario,
            schema: &schema,
            partitions: &partitions,
        };
        let mut group = c.benchmark_group(scenario.id);
        group.throughput(Throughput::Elements(RECORDS));
        group.sample_size(20);
        group.bench_function("freshet", |b| {
            b.iter(|| {
                runtime
                    .block_on(run.run_freshet(false))
                    .expect("Freshet runs")
            }) // ok: bench
        });
        group.bench_function("datafusion_batch", |b| {
            b.iter(|| {
                runtime
                    .block_on(run.run_datafusion(false))
                    .expect("DataFusion runs")
            }) // ok: bench
        });
        group.finish();
    }
}

criterion_group!(benches, scenario_benches);
criterion_main!(benches);
