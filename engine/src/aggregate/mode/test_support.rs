//! Building one aggregation mode by hand and feeding it batches and watermarks, for the
//! modes' unit tests.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, UnboundedMemoryPool};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;

use super::AggregateMode;
use super::context::{ModeContext, ModeInputs};
use crate::aggregate::partial::PartialAggregate;
use crate::aggregate::spec::{AggregateEmit, AggregateSpec, WindowKey};
use crate::late_records::LateRecords;
use crate::message_loop::MessageHandler;
use crate::window::WindowSpec;

/// Tumbling windows of one second (event time in milliseconds).
pub const TUMBLE_1S: WindowSpec = WindowSpec::Tumble {
    size: 1_000,
    offset: 0,
};

/// The input: key `k`, event time `ts` (ms) and quantity `q`.
pub fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("q", DataType::Int64, true),
    ]))
}

/// A batch of `(k, ts, q)` rows.
pub fn rows(rows: &[(&str, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.1),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap()
}

/// `SELECT window, k, COUNT(q) AS n, SUM(q) AS total … GROUP BY window(ts), k` (or without
/// the window), emitting as `emit`.
pub fn spec(window: Option<WindowSpec>, emit: AggregateEmit) -> AggregateSpec {
    let schema = input_schema();
    let q = col("q", &schema).unwrap();
    let aggregate = |function, name: &str| {
        Arc::new(
            AggregateExprBuilder::new(function, vec![Arc::clone(&q)])
                .schema(Arc::clone(&schema))
                .alias(name)
                .build()
                .unwrap(),
        )
    };
    let ts = col("ts", &schema).unwrap();
    let key = (col("k", &schema).unwrap(), "k".to_string());
    let key_field = Field::new("k", DataType::Utf8, true);
    let (group_by, window, mut fields) = match window {
        Some(spec) => (
            vec![(Arc::clone(&ts), "window".to_string()), key],
            Some(WindowKey {
                position: 0,
                spec,
                time: ts,
            }),
            vec![Field::new("window", DataType::Int64, false), key_field],
        ),
        None => (vec![key], None, vec![key_field]),
    };
    fields.push(Field::new("n", DataType::Int64, false));
    fields.push(Field::new("total", DataType::Int64, true));
    AggregateSpec {
        group_by,
        aggregates: vec![aggregate(count_udaf(), "n"), aggregate(sum_udaf(), "total")],
        filters: vec![None, None],
        window,
        emit,
        allowed_lateness: 0,
        schema: Arc::new(Schema::new(fields)),
        having: None,
        changelog_op: emit != AggregateEmit::Final,
    }
}

/// One output partition's mode for `spec` (over partial states of `partial`, if given).
pub fn mode(spec: &AggregateSpec, partial: Option<&Arc<PartialAggregate>>) -> AggregateMode {
    // As the operator does: a changelog has its op column.
    let mut spec = spec.clone();
    spec.complete_schema();
    let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
    let metrics = ExecutionPlanMetricsSet::new();
    let input_schema = partial.map_or_else(input_schema, |p| p.format().schema());
    AggregateMode::try_new(ModeInputs {
        spec: &spec,
        input_schema,
        partial,
        late_records: LateRecords::default(),
        metrics: &metrics,
        partition: 0,
        reservation: MemoryConsumer::new("test").register(&pool),
    })
    .unwrap()
}

/// A mode's output rows as `window,k,n,total` lines (`window` left out without one), in
/// order; `None` for no output.
pub fn lines(output: Option<RecordBatch>) -> Vec<String> {
    let Some(batch) = output else {
        return Vec::new();
    };
    let formatted = datafusion::arrow::util::display::ArrayFormatter::try_new;
    let options = datafusion::arrow::util::display::FormatOptions::default().with_null("null");
    let columns: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| formatted(c.as_ref(), &options).unwrap())
        .collect();
    (0..batch.num_rows())
        .map(|row| {
            columns
                .iter()
                .map(|c| c.value(row).to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// Feeds `batch` to `mode`.
pub fn batch(mode: &mut AggregateMode, batch: &RecordBatch) -> Vec<String> {
    lines(mode.on_batch(batch).unwrap())
}

/// Feeds watermark `watermark` to `mode`.
pub fn watermark(mode: &mut AggregateMode, watermark: i64) -> Vec<String> {
    lines(mode.on_watermark(watermark).unwrap())
}

/// The mode's shared context.
pub fn context(mode: &AggregateMode) -> &ModeContext {
    match mode {
        AggregateMode::Windows(m) => &m.context,
        AggregateMode::SessionFinal(m) => &m.context,
        AggregateMode::SessionChangelog(m) => &m.context,
        AggregateMode::MergePartials(m) => &m.groups.context,
    }
}

/// Asserts that `spec`'s mode, snapshot after `before` (through the state's IPC form) and
/// restored into a fresh mode, answers `after` and the end of the input as the mode that
/// never stopped does, and so does the mode that took the snapshot.
pub fn assert_snapshot_continues(spec: &AggregateSpec, before: &RecordBatch, after: &RecordBatch) {
    use crate::checkpoint::OperatorState;
    use crate::message_loop::MessageHandler;
    let rest = |mode: &mut AggregateMode| {
        let mut changes = batch(mode, after);
        changes.extend(watermark(mode, i64::MAX));
        changes.sort();
        changes
    };
    let mut uninterrupted = mode(spec, None);
    batch(&mut uninterrupted, before);
    let mut snapshotted = mode(spec, None);
    batch(&mut snapshotted, before);
    let state = snapshotted.snapshot().unwrap().unwrap();
    let state = OperatorState::decode(&state.encode().unwrap()).unwrap();
    let mut restored = mode(spec, None);
    restored.restore(&state).unwrap();
    let expected = rest(&mut uninterrupted);
    assert_eq!(rest(&mut snapshotted), expected, "after a snapshot");
    assert_eq!(rest(&mut restored), expected, "restored");
}
