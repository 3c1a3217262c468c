//! Criterion benches of Freshet's kernels on one 8 192-row `market_data` batch: window
//! assignment, event-time ranges, hash and sticky routing, the check of a declared key
//! partitioning, group interning (strings, integers and dictionaries) and accumulator
//! updates (S2's aggregates fused against DataFusion's accumulators; q16's DISTINCT counts
//! sharing one table against DataFusion's), the per-record
//! changelog kernels, the ROWS-window kernels of S1, and a lookup table's integer key index
//! (dense against hashed). Run with `cargo bench -p freshet-bench --bench kernels`.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int64Array, StringViewArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, max, min, take};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::hash_utils::create_hashes;
use datafusion::functions_aggregate::average::avg_udaf;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::{Column, col, lit};
use datafusion::physical_plan::aggregates::group_values::{
    GroupValues, new_group_values as datafusion_group_values,
};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use datafusion::physical_plan::repartition::{BatchPartitioner, REPARTITION_RANDOM_STATE};
use freshet_engine::join::LookupTable;
use freshet_engine::kernels::{
    GroupTable, PackedGroupValues, RunningAggregates, WindowedGroupValues, new_group_values,
    take_rows,
};
use freshet_engine::over::{
    FrameAggregateKind, FrameStart, OverFunction, OverFunctionKind, OverKernel, RankingKind,
};
use freshet_engine::watermark::{event_times, newest_time, time_range};
use freshet_engine::window::window_starts;
use freshet_engine::{GeneratorKind, GeneratorSpec, PartitionKeyCheck};
use freshet_partitioner::{Router, RoutingStrategy};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROWS: usize = 8_192;

/// Values of the column the cold folds read (1 GiB).
const COLD_VALUES: usize = 1 << 27;

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
    group.bench_function("time_range", |b| b.iter(|| time_range(&times)));
    group.bench_function("arrow_min_max", |b| b.iter(|| min(&times).zip(max(&times))));
    group.bench_function("newest_time", |b| b.iter(|| newest_time(&times)));
    group.bench_function("arrow_max", |b| b.iter(|| max(&times)));
    // The same folds as the first reader of a batch: successive slices of a column of 1 GiB,
    // four times the last level cache, so that each is read from memory.
    let cold = Int64Array::from_iter_values((0..COLD_VALUES as i64).map(|i| i * 10));
    let mut next_slice = 0;
    let mut slice = || {
        next_slice = (next_slice + ROWS) % (COLD_VALUES - ROWS);
        cold.slice(next_slice, ROWS)
    };
    group.bench_function("time_range_cold", |b| b.iter(|| time_range(&slice())));
    group.bench_function("arrow_min_max_cold", |b| {
        b.iter(|| {
            let times = slice();
            min(&times).zip(max(&times))
        })
    });
    group.bench_function("newest_time_cold", |b| b.iter(|| newest_time(&slice())));
    group.bench_function("arrow_max_cold", |b| b.iter(|| max(&slice())));
    drop(cold);

    let keys = vec![
        col("trader_id", &schema).expect("column"), // ok: bench setup
        col("symbol", &schema).expect("column"),    // ok: bench setup
    ];
    let mut hash = Router::try_new(&RoutingStrategy::Hash(keys.clone()), 0, 1, 2).expect("router"); // ok: bench setup
    // The two pieces of hash routing's cost: hashing the keys and gathering a Utf8 column.
    let key_arrays = vec![batch.column(1).clone(), batch.column(0).clone()];
    let mut hashes = vec![0u64; ROWS];
    group.bench_function("create_hashes_two_utf8_keys", |b| {
        b.iter(|| {
            hashes.fill(0);
            create_hashes(
                &key_arrays,
                REPARTITION_RANDOM_STATE.random_state(),
                &mut hashes,
            )
            .map(|h| h[0])
        })
    });
    let order: UInt32Array = (0..ROWS as u32)
        .map(|i| (i % 2) * (ROWS as u32 / 2) + i / 2)
        .collect();
    let symbols = batch.column(0).clone();
    group.bench_function("arrow_take_utf8", |b| {
        b.iter(|| take(symbols.as_ref(), &order, None).expect("take")) // ok: bench
    });
    group.bench_function("hash_routing_2_streams", |b| {
        b.iter(|| hash.route(batch.clone()).expect("routes")) // ok: bench
    });
    let mut datafusion_hash = BatchPartitioner::new_hash_partitioner(
        keys.clone(),
        2,
        datafusion::physical_plan::metrics::Time::new(),
    )
    .expect("partitioner"); // ok: bench setup
    group.bench_function("hash_routing_2_streams_datafusion", |b| {
        b.iter(|| {
            datafusion_hash
                .partition_iter(batch.clone())
                .expect("routes") // ok: bench
                .count()
        })
    });
    // S1's columns over Parquet: the symbol as string views, the price and the time.
    let views = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("symbol", DataType::Utf8View, false),
            schema.field(2).clone(),
            schema.field(4).clone(),
        ])),
        vec![
            cast(batch.column(0), &DataType::Utf8View).expect("views"), // ok: bench setup
            batch.column(2).clone(),
            batch.column(4).clone(),
        ],
    )
    .expect("a batch"); // ok: bench setup
    let symbol = vec![col("symbol", &views.schema()).expect("column")]; // ok: bench setup
    for outputs in [2, 4] {
        let mut ours =
            Router::try_new(&RoutingStrategy::Hash(symbol.clone()), 0, 1, outputs).expect("router"); // ok: bench setup
        group.bench_function(format!("hash_routing_views_{outputs}_streams"), |b| {
            b.iter(|| ours.route(views.clone()).expect("routes")) // ok: bench
        });
        let mut theirs = BatchPartitioner::new_hash_partitioner(
            symbol.clone(),
            outputs,
            datafusion::physical_plan::metrics::Time::new(),
        )
        .expect("partitioner"); // ok: bench setup
        group.bench_function(
            format!("hash_routing_views_{outputs}_streams_datafusion"),
            |b| {
                b.iter(|| {
                    theirs
                        .partition_iter(views.clone())
                        .expect("routes") // ok: bench
                        .count()
                })
            },
        );
    }
    // The check of a `partitioned_by=trader_id+symbol` declaration, on keys the partition has
    // met (what a sticky replay pays per batch once its keys are known).
    let declared = ["trader_id".to_string(), "symbol".to_string()];
    let check = PartitionKeyCheck::try_new("market_data", &schema, &declared).expect("keys"); // ok: bench setup
    let mut keys = check.partition(0).expect("a partition"); // ok: bench setup
    keys.check(&batch).expect("one partition"); // ok: bench setup
    group.bench_function("partition_key_check", |b| {
        b.iter(|| keys.check(&batch).expect("one partition")) // ok: bench
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
    group.bench_function("accumulate_only", |b| {
        // COUNT + AVG folded into groups already interned: the accumulators' share of
        // `intern_and_accumulate`.
        let mut table = GroupTable::try_new(&key_schema, &aggregates).expect("table"); // ok: bench
        table.intern(&key_columns, ROWS).expect("intern"); // ok: bench setup
        let group_ids = table.last_group_ids(ROWS).to_vec();
        datafusion_accumulators(b, &aggregates, &arguments, &group_ids, table.len())
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
    accumulate_s2(&mut group, &schema, &batch);
    accumulate_distinct(&mut group, &schema, &batch);
    let symbols = vec![batch.column(0).clone()];
    let symbol_schema = Arc::new(Schema::new(vec![schema.field(0).clone()]));
    let mut symbol_table = GroupTable::try_new(&symbol_schema, &[]).expect("table"); // ok: bench setup
    let symbol_groups = symbol_table
        .intern(&symbols, ROWS)
        .expect("intern") // ok: bench setup
        .to_vec();
    group.bench_function("intern_one_utf8_key", |b| {
        b.iter(|| symbol_table.intern(&symbols, ROWS).expect("intern").len()) // ok: bench
    });
    // Freshet's packed interner against DataFusion's on the keys of S1/S2 (symbol) and of
    // S3a/S3b (window start, trader_id, symbol).
    let starts: ArrayRef = Arc::new(window_starts(&times, 60_000, 0));
    let window_keys: Vec<ArrayRef> = vec![
        cast(&starts, schema.field(4).data_type()).expect("cast"), // ok: bench setup
        batch.column(1).clone(),
        batch.column(0).clone(),
    ];
    // Nexmark's auction ids: one Int64 key of tens of thousands of values (q5's HOP count).
    let auctions: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(
        (0..ROWS as i64).map(|i| 1000 + (i * 7919) % 50_000),
    ))];
    // Nexmark q4's (auction id, category): two Int64 keys, the second of five values.
    let auctions_and_categories: Vec<ArrayRef> = vec![
        auctions[0].clone(),
        Arc::new(Int64Array::from_iter_values(
            (0..ROWS as i64).map(|i| 10 + (i * 7919) % 50_000 % 5),
        )),
    ];
    // The trader and symbol as dictionaries (a Parquet file's dictionary-encoded columns read
    // as they are stored), which Freshet interns once per dictionary value.
    let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let dictionary_keys: Vec<ArrayRef> = [1, 0]
        .iter()
        .map(|&c| cast(batch.column(c), &dictionary).expect("cast")) // ok: bench setup
        .collect();
    let window_and_dictionary_keys: Vec<ArrayRef> = std::iter::once(window_keys[0].clone())
        .chain(dictionary_keys.iter().cloned())
        .collect();
    for (name, keys) in [
        ("one_utf8_key", &symbols),
        ("window_and_two_utf8_keys", &window_keys),
        ("one_int64_key", &auctions),
        ("two_int64_keys", &auctions_and_categories),
        ("two_utf8_keys", &window_keys[1..].to_vec()),
        ("two_dictionary_keys", &dictionary_keys),
        (
            "window_and_two_dictionary_keys",
            &window_and_dictionary_keys,
        ),
    ] {
        let key_schema = Arc::new(Schema::new(
            keys.iter()
                .enumerate()
                .map(|(i, k)| Field::new(format!("k{i}"), k.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let freshet = new_group_values(Arc::clone(&key_schema)).expect("interner"); // ok: bench setup
        let label = match name {
            _ if name.contains("dictionary") => "dictionary",
            "one_int64_key" | "two_int64_keys" => "dense",
            _ => "packed",
        };
        let mut interners: Vec<(&str, Box<dyn GroupValues>)> = vec![(label, freshet)];
        if name == "two_int64_keys" {
            let packed = PackedGroupValues::try_new(&key_schema).expect("interner"); // ok: bench setup
            interners.push(("packed", Box::new(packed)));
        }
        if name.starts_with("window_") {
            let windowed = WindowedGroupValues::try_new(&key_schema).expect("interner"); // ok: bench setup
            interners.push(("windowed", Box::new(windowed)));
        }
        let datafusion =
            datafusion_group_values(key_schema, &GroupOrdering::None).expect("interner"); // ok: bench setup
        interners.push(("datafusion", datafusion));
        for (interner, mut values) in interners {
            let mut ids = Vec::with_capacity(ROWS);
            group.bench_function(format!("intern_{name}_{interner}"), |b| {
                b.iter(|| values.intern(keys, &mut ids).expect("intern")) // ok: bench
            });
        }
    }
    // q4's keys as its join emits them: (auction id, category) of bids naming, half the time,
    // the first of the last 100 auctions and else one of them at random, into a table that
    // already holds 600 000 auctions' keys.
    let held = 600_000i64;
    let held_keys: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(1000..1000 + held)),
        Arc::new(Int64Array::from_iter_values((0..held).map(|i| 10 + i % 5))),
    ];
    let recent = |i: i64| match i % 2 {
        0 => 1000 + held - 100,
        _ => 1000 + held - 100 + (i * 7919) % 100,
    };
    let recent_keys: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values((0..ROWS as i64).map(recent))),
        Arc::new(Int64Array::from_iter_values(
            (0..ROWS as i64).map(|i| 10 + (recent(i) - 1000) % 5),
        )),
    ];
    let key_schema = Arc::new(Schema::new(vec![
        Field::new("k0", DataType::Int64, true),
        Field::new("k1", DataType::Int64, true),
    ]));
    // q4's keys as its join emits them over a long run: the keys of a batch are the ~700
    // auctions in flight, each met about a dozen times and rarely again, so each batch's
    // slots are cold in a table of 600 000 keys. Batches over 64 ranges spread across the
    // table, interned in turn.
    let spread_batches: Vec<Vec<ArrayRef>> = (0..64i64)
        .map(|batch| {
            let id = |i: i64| 1000 + batch * 9000 + (i * 7919) % 700;
            vec![
                Arc::new(Int64Array::from_iter_values((0..ROWS as i64).map(id))) as ArrayRef,
                Arc::new(Int64Array::from_iter_values(
                    (0..ROWS as i64).map(|i| 10 + (id(i) - 1000) % 5),
                )),
            ]
        })
        .collect();
    // Each pattern's batches, interned in turn into a table that holds the 600 000 keys.
    let recent_batches = vec![recent_keys];
    for (pattern, batches) in [("recent", &recent_batches), ("cold", &spread_batches)] {
        for (interner, mut values) in [
            (
                "dense",
                new_group_values(Arc::clone(&key_schema)).expect("interner"),
            ), // ok: bench setup
            (
                "packed",
                Box::new(PackedGroupValues::try_new(&key_schema).expect("interner"))
                    as Box<dyn GroupValues>,
            ), // ok: bench setup
            (
                "datafusion",
                datafusion_group_values(Arc::clone(&key_schema), &GroupOrdering::None)
                    .expect("interner"), // ok: bench setup
            ),
        ] {
            let mut ids = Vec::with_capacity(held as usize);
            values.intern(&held_keys, &mut ids).expect("intern"); // ok: bench setup
            let mut next = 0;
            group.bench_function(
                format!("intern_two_int64_keys_{pattern}_of_many_{interner}"),
                |b| {
                    b.iter(|| {
                        next = (next + 1) % batches.len();
                        values.intern(&batches[next], &mut ids).expect("intern") // ok: bench
                    })
                },
            );
        }
    }
    // Nexmark q8's people as its windowed GROUP BY (id, name) interns them: each batch new
    // ids, in order, with their names as string views; the table emptied every 64 batches,
    // as windows close.
    let people_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8View, true),
    ]));
    let first_names = [
        "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie",
    ];
    let last_names = [
        "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith",
    ];
    let people_batches: Vec<Vec<ArrayRef>> = (0..64i64)
        .map(|batch| {
            let ids: Vec<i64> = (0..ROWS as i64)
                .map(|i| 1000 + batch * ROWS as i64 + i)
                .collect();
            let names: Vec<String> = ids
                .iter()
                .map(|id| {
                    let (first, last) = (*id as usize % 8, (*id as usize / 8) % 7);
                    format!("{} {}", first_names[first], last_names[last])
                })
                .collect();
            vec![
                Arc::new(Int64Array::from(ids)) as ArrayRef,
                Arc::new(StringViewArray::from_iter_values(names)),
            ]
        })
        .collect();
    for (interner, mut values) in [
        (
            "dense",
            new_group_values(Arc::clone(&people_schema)).expect("interner"), // ok: bench setup
        ),
        (
            "packed",
            Box::new(PackedGroupValues::try_new(&people_schema).expect("interner"))
                as Box<dyn GroupValues>, // ok: bench setup
        ),
        (
            "datafusion",
            datafusion_group_values(Arc::clone(&people_schema), &GroupOrdering::None)
                .expect("interner"), // ok: bench setup
        ),
    ] {
        let mut ids = Vec::with_capacity(ROWS);
        let mut next = 0;
        group.bench_function(format!("intern_id_and_name_new_people_{interner}"), |b| {
            b.iter(|| {
                next = (next + 1) % people_batches.len();
                if next == 0 {
                    values.clear_shrink(0);
                }
                values
                    .intern(&people_batches[next], &mut ids)
                    .expect("intern") // ok: bench
            })
        });
    }
    // Nexmark's bidders as q12 and q19 key their state by them: a table that holds 200 000
    // people's ids, batches naming a hot one half the time and else one of the last 10 000
    // (a window further on each batch), interned in turn.
    let people = 200_000i64;
    let held_people: Vec<ArrayRef> =
        vec![Arc::new(Int64Array::from_iter_values(1000..1000 + people))];
    let bidder_batches: Vec<Vec<ArrayRef>> = (0..64i64)
        .map(|batch| {
            let id = |i: i64| match i % 2 {
                0 => 1000 + (i * 7919) % 100,
                _ => 1000 + people - 20_000 + batch * 100 + (i * 7919) % 10_000,
            };
            vec![Arc::new(Int64Array::from_iter_values((0..ROWS as i64).map(id))) as ArrayRef]
        })
        .collect();
    let id_schema = Arc::new(Schema::new(vec![Field::new("k0", DataType::Int64, true)]));
    for (interner, mut values) in [
        (
            "dense",
            new_group_values(Arc::clone(&id_schema)).expect("interner"), // ok: bench setup
        ),
        (
            "datafusion",
            datafusion_group_values(Arc::clone(&id_schema), &GroupOrdering::None)
                .expect("interner"), // ok: bench setup
        ),
    ] {
        let mut ids = Vec::with_capacity(people as usize);
        values.intern(&held_people, &mut ids).expect("intern"); // ok: bench setup
        let mut next = 0;
        group.bench_function(format!("intern_recent_int64_ids_{interner}"), |b| {
            b.iter(|| {
                next = (next + 1) % bidder_batches.len();
                values
                    .intern(&bidder_batches[next], &mut ids)
                    .expect("intern") // ok: bench
            })
        });
    }
    // Emitting keys as S3a's window close gathers them: a third of a batch's rows, from a
    // column that holds each of the 20 trader ids once.
    let every_third = UInt32Array::from_iter_values((0..ROWS as u32 / 3).map(|i| i % 20));
    let traders = batch.column(1).slice(0, 20);
    group.bench_function("take_utf8_keys_freshet", |b| {
        b.iter(|| {
            take_rows(traders.as_ref(), &every_third)
                .expect("take")
                .len()
        }) // ok: bench
    });
    group.bench_function("take_utf8_keys_arrow", |b| {
        b.iter(|| {
            take(traders.as_ref(), &every_third, None)
                .expect("take")
                .len()
        }) // ok: bench
    });
    // A lookup table of 10 000 integer keys probed by a batch (q13's side input): the
    // keys 0..10 000 take the dense index, the same keys spread 1 000 003 apart the hashed.
    for (name, spread) in [
        ("lookup_integer_keys_dense", 1i64),
        ("lookup_integer_keys_hashed", 1_000_003),
    ] {
        let key_schema = Arc::new(Schema::new(vec![Field::new("key", DataType::Int64, false)]));
        let table_keys = Int64Array::from_iter_values((0..10_000).map(|k| k * spread));
        let table_batch = RecordBatch::try_new(Arc::clone(&key_schema), vec![Arc::new(table_keys)])
            .expect("table batch"); // ok: bench setup
        let on = [col("key", &key_schema).expect("key column")]; // ok: bench setup
        let table = LookupTable::try_new(table_batch, &on).expect("lookup table"); // ok: bench setup
        let probes: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (0..ROWS as i64).map(|row| (row * 7_919 % 10_000) * spread),
        ));
        let mut groups = Vec::with_capacity(ROWS);
        group.bench_function(name, |b| {
            b.iter(|| {
                table
                    .find(std::slice::from_ref(&probes), &mut groups)
                    .expect("find"); // ok: bench
                groups.len()
            })
        });
    }
    let price_values = batch.column(2).clone();
    for (name, functions) in [
        ("rows_window_s1", s1_functions(99)),
        ("rows_window_avg_10", vec![moving_avg(9)]),
        ("rows_window_avg_10000", vec![moving_avg(9_999)]),
    ] {
        group.bench_function(name, |b| {
            let mut kernels: Vec<OverKernel> = functions
                .iter()
                .map(|f| OverKernel::try_new(f, Some(&DataType::Float64), 0).expect("kernel")) // ok: bench setup
                .collect();
            let mut counts = vec![0u64; symbol_groups.iter().max().map_or(0, |g| g + 1)];
            let times = vec![0i64; ROWS];
            b.iter(|| {
                let positions: Vec<u64> = symbol_groups
                    .iter()
                    .map(|g| {
                        counts[*g] += 1;
                        counts[*g] - 1
                    })
                    .collect();
                for (function, kernel) in functions.iter().zip(&mut kernels) {
                    let argument = function.argument.as_ref().map(|_| &price_values);
                    kernel
                        .evaluate(function, 0, argument, &symbol_groups, &positions, &times)
                        .expect("window values"); // ok: bench
                }
            })
        });
    }
    group.finish();
}

/// S1's functions: LAG(price, 1), ROW_NUMBER() and AVG(price) over `preceding + 1` rows.
/// S2's aggregates (`COUNT(*)`, `AVG(price)`, `MIN(price)`, `MAX(price)`, `SUM(quantity)`)
/// over its 10 symbol groups: DataFusion's accumulators, a pass each, against the group
/// table's fused passes (one per argument column).
fn accumulate_s2(
    group: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    schema: &SchemaRef,
    batch: &RecordBatch,
) {
    let aggregate = |function: Arc<AggregateUDF>, argument: Arc<dyn PhysicalExpr>, name: &str| {
        Arc::new(
            AggregateExprBuilder::new(function, vec![argument])
                .schema(Arc::clone(schema))
                .alias(name)
                .build()
                .expect("aggregate"), // ok: bench setup
        )
    };
    let price = col("price", schema).expect("column"); // ok: bench setup
    let quantity = col("quantity", schema).expect("column"); // ok: bench setup
    let aggregates = vec![
        aggregate(count_udaf(), lit(1i64), "trade_count"),
        aggregate(avg_udaf(), Arc::clone(&price), "avg_price"),
        aggregate(min_udaf(), Arc::clone(&price), "min_price"),
        aggregate(max_udaf(), price, "max_price"),
        aggregate(sum_udaf(), quantity, "total_quantity"),
    ];
    let arguments: Vec<Vec<ArrayRef>> = aggregates
        .iter()
        .map(|a| {
            a.expressions()
                .iter()
                .map(|e| e.evaluate(batch)?.into_array(ROWS))
                .collect::<datafusion::common::Result<_>>()
                .expect("arguments") // ok: bench setup
        })
        .collect();
    let filters = vec![None; aggregates.len()];
    let symbols = vec![batch.column(0).clone()];
    let symbol_schema = Arc::new(Schema::new(vec![schema.field(0).clone()]));
    let mut table = GroupTable::try_new(&symbol_schema, &aggregates).expect("table"); // ok: bench setup
    table.intern(&symbols, ROWS).expect("intern"); // ok: bench setup
    let group_ids = table.last_group_ids(ROWS).to_vec();
    let groups = table.len();
    group.bench_function("accumulate_s2_datafusion", |b| {
        datafusion_accumulators(b, &aggregates, &arguments, &group_ids, groups)
    });
    group.bench_function("accumulate_s2_fused", |b| {
        b.iter(|| table.accumulate(&arguments, &filters).expect("update")) // ok: bench
    });
}

/// Nexmark q16's distinct counts of one column over the 10 symbol groups: `COUNT(DISTINCT
/// v)` without a FILTER and under three FILTERs that split the rows (a price range each),
/// into empty state each time (8 192 mostly distinct values): DataFusion's accumulators, a
/// set each, against the group table's one shared table of pairs.
fn accumulate_distinct(
    group: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    schema: &SchemaRef,
    batch: &RecordBatch,
) {
    let values_schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let argument = col("v", &values_schema).expect("column"); // ok: bench setup
    let aggregates: Vec<_> = (0..4)
        .map(|i| {
            Arc::new(
                AggregateExprBuilder::new(count_udaf(), vec![Arc::clone(&argument)])
                    .schema(Arc::clone(&values_schema))
                    .alias(format!("distinct_{i}"))
                    .distinct()
                    .build()
                    .expect("aggregate"), // ok: bench setup
            )
        })
        .collect();
    let values: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..ROWS as i64).map(|row| row * 2_654_435_761 % 1_000_003),
    ));
    let arguments = vec![vec![values]; aggregates.len()];
    let filters: Vec<Option<BooleanArray>> = [None]
        .into_iter()
        .chain((0..3).map(|range| {
            Some(BooleanArray::from_iter(
                (0..ROWS).map(|row| Some(row % 3 == range)),
            ))
        }))
        .collect();
    let symbols = vec![batch.column(0).clone()];
    let symbol_schema = Arc::new(Schema::new(vec![schema.field(0).clone()]));
    let mut table = GroupTable::try_new(&symbol_schema, &aggregates).expect("table"); // ok: bench setup
    table.intern(&symbols, ROWS).expect("intern"); // ok: bench setup
    let group_ids = table.last_group_ids(ROWS).to_vec();
    let groups = table.len();
    group.bench_function("accumulate_distinct_datafusion", |b| {
        b.iter_batched(
            || {
                aggregates
                    .iter()
                    .map(|a| a.create_groups_accumulator().expect("accumulator")) // ok: bench setup
                    .collect::<Vec<_>>()
            },
            |mut accumulators| {
                for ((accumulator, arguments), filter) in
                    accumulators.iter_mut().zip(&arguments).zip(&filters)
                {
                    accumulator
                        .update_batch(arguments, &group_ids, filter.as_ref(), groups)
                        .expect("update"); // ok: bench
                }
                accumulators
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("accumulate_distinct_shared", |b| {
        b.iter_batched(
            || {
                let mut table = GroupTable::try_new(&symbol_schema, &aggregates).expect("table"); // ok: bench setup
                table.intern(&symbols, ROWS).expect("intern"); // ok: bench setup
                table
            },
            |mut table| {
                table.accumulate(&arguments, &filters).expect("update"); // ok: bench
                table
            },
            BatchSize::SmallInput,
        )
    });
}

/// Times DataFusion's accumulators of `aggregates` folding `arguments` into `groups` groups.
fn datafusion_accumulators(
    b: &mut criterion::Bencher,
    aggregates: &[Arc<AggregateFunctionExpr>],
    arguments: &[Vec<ArrayRef>],
    group_ids: &[usize],
    groups: usize,
) {
    let mut accumulators: Vec<_> = aggregates
        .iter()
        .map(|a| a.create_groups_accumulator().expect("groups accumulator")) // ok: bench setup
        .collect();
    b.iter(|| {
        for (accumulator, arguments) in accumulators.iter_mut().zip(arguments) {
            accumulator
                .update_batch(arguments, group_ids, None, groups)
                .expect("update"); // ok: bench
        }
    })
}

fn s1_functions(preceding: u64) -> Vec<OverFunction> {
    let price: Arc<dyn PhysicalExpr> = Arc::new(Column::new("price", 2));
    vec![
        OverFunction {
            kind: OverFunctionKind::Lag {
                offset: 1,
                default: ScalarValue::Null,
            },
            argument: Some(Arc::clone(&price)),
            frame: FrameStart::UnboundedPreceding,
            following: 0,
            peers: false,
            field: Arc::new(Field::new("prev_price", DataType::Float64, true)),
        },
        OverFunction {
            kind: OverFunctionKind::Ranking(RankingKind::RowNumber),
            argument: None,
            frame: FrameStart::UnboundedPreceding,
            following: 0,
            peers: false,
            field: Arc::new(Field::new("seq_num", DataType::UInt64, false)),
        },
        moving_avg(preceding),
    ]
}

fn moving_avg(preceding: u64) -> OverFunction {
    OverFunction {
        kind: OverFunctionKind::Aggregate(FrameAggregateKind::Avg),
        argument: Some(Arc::new(Column::new("price", 2))),
        frame: FrameStart::Preceding(preceding),
        following: 0,
        peers: false,
        field: Arc::new(Field::new("moving_avg", DataType::Float64, true)),
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
