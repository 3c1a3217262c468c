//! Where the time of a short Nexmark query goes: Freshet and DataFusion batch, alternately,
//! over the same batches in memory at one stream, each run timed in four phases — the
//! session, the tables registered, the SQL planned, the batches drained — and the mean of
//! each phase printed in microseconds.
//!
//! `cargo run --release -p freshet-bench --example nexmark_phases -- q3 100 [10M]`
//! (query, runs, events). For the queries that both engines run in a few milliseconds
//! (q0, q1, q3), the fixed phases decide the ratio `freshet bench --suite nexmark` prints.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result, exec_err};
use datafusion::datasource::MemTable;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::prelude::{SessionConfig, SessionContext};
use freshet_bench::nexmark::nexmark_query;
use freshet_engine::{GeneratorSpec, StreamOptions};
use freshet_planner::{StreamingContext, scalar_functions};
use futures::StreamExt;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Session, registration, planning and draining.
type Phases = [Duration; 4];

/// Rows of every stream, each drained in a task of its own as the bench does.
async fn drain(streams: Vec<SendableRecordBatchStream>) -> Result<u64> {
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut rows = 0;
                while let Some(batch) = stream.next().await {
                    rows += batch?.num_rows() as u64;
                }
                Ok::<_, DataFusionError>(rows)
            })
        })
        .collect();
    let mut rows = 0;
    for task in tasks {
        rows += task
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = || DataFusionError::Plan("usage: nexmark_phases QUERY RUNS [EVENTS]".into());
    let query = args
        .get(1)
        .and_then(|name| nexmark_query(name))
        .ok_or_else(usage)?;
    let runs: u32 = args
        .get(2)
        .and_then(|runs| runs.parse().ok())
        .ok_or_else(usage)?;
    let events = match args.get(3).map(|events| events.to_ascii_uppercase()) {
        None => 10_000_000,
        Some(events) => match events.strip_suffix('M') {
            Some(millions) => millions.parse::<u64>().map(|m| m * 1_000_000),
            None => events.parse(),
        }
        .map_err(|_| usage())?,
    };
    if query.side_input || runs == 0 {
        return exec_err!("q13 reads a side input this tool does not register; runs ≥ 1");
    }
    let batches: Vec<_> = query
        .reads
        .iter()
        .map(|table| GeneratorSpec::nexmark(*table, Some(events)).generate_all())
        .collect::<Result<_>>()?;
    let (mut freshet, mut datafusion): (Phases, Phases) = Default::default();
    for _ in 0..runs {
        let start = Instant::now();
        let ctx = StreamingContext::with_partitions(1);
        let session = Instant::now();
        for (table, batches) in query.reads.iter().zip(&batches) {
            let options = StreamOptions {
                event_time: Some("date_time".to_string()),
                out_of_orderness: Duration::from_secs(4),
                ..StreamOptions::default()
            };
            ctx.register_batches(table.name(), table.schema(), batches.clone(), options)?;
        }
        let registered = Instant::now();
        let plan = ctx.sql(query.sql).await?;
        let planned = Instant::now();
        drain(plan.execute_partitions()?).await?;
        let drained = Instant::now();
        add(&mut freshet, [start, session, registered, planned, drained]);

        let start = Instant::now();
        let config = SessionConfig::new().with_target_partitions(1);
        let ctx = SessionContext::new_with_config(config);
        for function in scalar_functions() {
            ctx.register_udf(function.as_ref().clone());
        }
        let session = Instant::now();
        for (table, batches) in query.reads.iter().zip(&batches) {
            let memory = MemTable::try_new(table.schema(), vec![batches.clone()])?;
            ctx.register_table(table.name(), Arc::new(memory))?;
        }
        let registered = Instant::now();
        let frame = ctx.sql(query.batch_sql).await?;
        let task_ctx = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let planned = Instant::now();
        let streams = (0..plan.output_partitioning().partition_count())
            .map(|partition| plan.execute(partition, Arc::clone(&task_ctx)))
            .collect::<Result<_>>()?;
        drain(streams).await?;
        let drained = Instant::now();
        add(
            &mut datafusion,
            [start, session, registered, planned, drained],
        );
    }
    let line = |phases: &Phases| {
        let micros = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(runs);
        let total: Duration = phases.iter().sum();
        format!(
            "session {:.0}, tables {:.0}, planning {:.0}, run {:.0}, total {:.0}",
            micros(phases[0]),
            micros(phases[1]),
            micros(phases[2]),
            micros(phases[3]),
            micros(total)
        )
    };
    println!(
        "{} over {events} events, µs a run (mean of {runs}):",
        query.name
    );
    println!("  Freshet    {}", line(&freshet));
    println!("  DataFusion {}", line(&datafusion));
    Ok(())
}

/// Adds the spans between consecutive `marks` to `phases`.
fn add(phases: &mut Phases, marks: [Instant; 5]) {
    for (phase, pair) in phases.iter_mut().zip(marks.windows(2)) {
        *phase += pair[1] - pair[0];
    }
}
