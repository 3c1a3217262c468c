//! Criterion benches of the scenarios, Freshet next to DataFusion batch on the same in-memory
//! batches (1 M records by default, one stream). Run with `cargo bench -p freshet-bench`;
//! `FRESHET_BENCH_RECORDS=10M` measures at the issues' 10 M records (S3b's DataFusion
//! equivalent then takes half a minute per run, so filter, e.g. `-- "S2/|S3a/"`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshet_bench::{ScenarioInput, ScenarioRun, scenarios};
use freshet_engine::options::parse_count;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Records per scenario unless `FRESHET_BENCH_RECORDS` says otherwise.
const RECORDS: u64 = 1_000_000;

fn scenario_benches(c: &mut Criterion) {
    let records = match std::env::var("FRESHET_BENCH_RECORDS") {
        Ok(value) => parse_count("FRESHET_BENCH_RECORDS", &value)
            .expect("FRESHET_BENCH_RECORDS is a count like 10M") // ok: bench setup
            as u64,
        Err(_) => RECORDS,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime"); // ok: bench setup
    for scenario in scenarios() {
        let spec = scenario.data_spec(records);
        let schema = spec.schema();
        let batches = spec.generate_all().expect("bounded data"); // ok: bench setup
        let partitions = vec![batches];
        let run = ScenarioRun {
            scenario: &scenario,
            streams: 1,
            input: ScenarioInput::Batches {
                schema: &schema,
                partitions: &partitions,
            },
        };
        let mut group = c.benchmark_group(scenario.id);
        group.throughput(Throughput::Elements(records));
        // Criterion's smallest sample keeps 10 M-record runs within minutes.
        group.sample_size(if records > RECORDS { 10 } else { 20 });
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
