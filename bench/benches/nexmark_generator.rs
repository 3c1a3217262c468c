//! Criterion bench of the Nexmark generator: the three streams of 100 000 events (2 000
//! people, 6 000 auctions, 92 000 bids), in batches of 8 192 rows, as its source partitions
//! make them. Throughput is in events. Run with
//! `cargo bench -p freshet-bench --bench nexmark_generator`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshet_engine::{GeneratorSpec, NexmarkTable};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EVENTS: u64 = 100_000;

fn generator(c: &mut Criterion) {
    let specs: Vec<GeneratorSpec> = NexmarkTable::ALL
        .into_iter()
        .map(|table| GeneratorSpec::nexmark(table, Some(EVENTS)))
        .collect();
    let mut group = c.benchmark_group("nexmark_generator");
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("all_three_streams", |b| {
        b.iter(|| {
            for spec in &specs {
                spec.generate_all().expect("generated batches"); // ok: bench
            }
        })
    });
    for spec in &specs {
        let GeneratorSpec { kind, .. } = spec;
        group.bench_function(format!("{kind}_alone"), |b| {
            b.iter(|| spec.generate_all().expect("generated batches")) // ok: bench
        });
    }
    group.finish();
}

criterion_group!(benches, generator);
criterion_main!(benches);
