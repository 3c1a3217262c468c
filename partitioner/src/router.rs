//! [`Router`]: one input partition's routing of batches to output partitions.

use datafusion::arrow::array::{Array, AsArray, UInt32Array};
use datafusion::arrow::compute::{cast, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_plan::metrics;
use datafusion::physical_plan::repartition::BatchPartitioner;

use crate::hash_routing::HashRouting;
use crate::strategy::{RoutingStrategy, TimeRuns};
use crate::time_range::time_range;

/// Routes the batches of one input partition.
pub struct Router {
    kind: RouterKind,
}

enum RouterKind {
    /// Hash to two outputs: rows by DataFusion's hash of their keys, in two passes.
    Hash(HashRouting),
    /// Hash to other counts of outputs, and round-robin: DataFusion's partitioner.
    Partitioner(BatchPartitioner),
    /// Sticky and fan-in: every batch to one output.
    Fixed(usize),
    /// Broadcast: every batch, uncopied, to each of this many outputs.
    Every(usize),
    /// Time runs: slices of the batch where its rows come in runs, else a grouped take.
    TimeRuns { runs: TimeRuns, outputs: usize },
}

impl Router {
    /// A router for input partition `input` of `inputs`, to `outputs` output partitions.
    pub fn try_new(
        strategy: &RoutingStrategy,
        input: usize,
        inputs: usize,
        outputs: usize,
    ) -> Result<Self> {
        let timer = metrics::Time::new();
        // One output, sticky and fan-in: nothing to route, and no reason to hash or copy.
        let kind = match (strategy.fixed_output(input, outputs), strategy) {
            (Some(output), _) => RouterKind::Fixed(output),
            (None, RoutingStrategy::Hash(keys)) if outputs == 2 => {
                RouterKind::Hash(HashRouting::to_two_outputs(keys.clone()))
            }
            (None, RoutingStrategy::Hash(keys)) => RouterKind::Partitioner(
                BatchPartitioner::new_hash_partitioner(keys.clone(), outputs, timer)?,
            ),
            (None, RoutingStrategy::Broadcast) => RouterKind::Every(outputs),
            (None, RoutingStrategy::TimeRuns(runs)) => RouterKind::TimeRuns {
                runs: runs.clone(),
                outputs,
            },
            (None, _) => RouterKind::Partitioner(BatchPartitioner::new_round_robin_partitioner(
                outputs, timer, input, inputs,
            )),
        };
        Ok(Self { kind })
    }

    /// The pieces of `batch` and the output each goes to; rows of one key keep their order.
    pub fn route(&mut self, batch: RecordBatch) -> Result<Vec<(usize, RecordBatch)>> {
        match &mut self.kind {
            RouterKind::Fixed(output) => Ok(vec![(*output, batch)]),
            RouterKind::Every(_) if batch.num_rows() == 0 => Ok(Vec::new()),
            RouterKind::Every(outputs) => Ok((0..*outputs).map(|o| (o, batch.clone())).collect()),
            RouterKind::Hash(hash) => hash.route(batch),
            RouterKind::Partitioner(partitioner) => partitioner.partition_iter(batch)?.collect(),
            RouterKind::TimeRuns { runs, outputs } => route_time_runs(runs, *outputs, batch),
        }
    }
}

/// The pieces of `batch` under time runs. Each row's output is found in one pass that
/// divides only when a row leaves the run of the row before it, and the rows are cut into
/// segments of one output. When each output has at most one segment (a batch in time
/// order, which a run of many batches' worth of time mostly holds whole) the pieces are
/// slices of the batch, which copy nothing; otherwise one grouped take gathers them.
fn route_time_runs(
    runs: &TimeRuns,
    outputs: usize,
    batch: RecordBatch,
) -> Result<Vec<(usize, RecordBatch)>> {
    let rows = batch.num_rows();
    if rows == 0 {
        return Ok(Vec::new());
    }
    let times = runs.time.evaluate(&batch)?.into_array(rows)?;
    let times = cast(&times, &DataType::Int64)?;
    let times = times.as_primitive::<Int64Type>();
    // Most batches lie in one run: one pass over the times finds that, and the batch goes
    // whole, without a division or a branch per row.
    if times.null_count() == 0
        && let Some((oldest, newest)) = time_range(times)
        && let (output, Some((_, high))) = runs.run_of(oldest, outputs)
        && newest < high
    {
        return Ok(vec![(output, batch)]);
    }
    // The current run's bounds [low, high) and output; empty until a row sets them.
    let (mut low, mut high, mut current) = (1i64, 0i64, 0usize);
    let mut segments: Vec<(usize, usize, usize)> = Vec::new();
    for (row, time) in times.values().iter().enumerate() {
        let output = if times.is_null(row) {
            0
        } else {
            let time = *time;
            if !(low <= time && time < high) {
                let (output, bounds) = runs.run_of(time, outputs);
                current = output;
                // Bounds that would overflow are not kept: every row then divides.
                (low, high) = bounds.unwrap_or((1, 0));
            }
            current
        };
        match segments.last_mut() {
            Some((last, _, end)) if *last == output => *end = row + 1,
            _ => segments.push((output, row, row + 1)),
        }
    }
    let mut seen = vec![false; outputs];
    let one_segment_each = segments
        .iter()
        .all(|(output, _, _)| !std::mem::replace(&mut seen[*output], true));
    if one_segment_each {
        return Ok(segments
            .into_iter()
            .map(|(output, start, end)| (output, batch.slice(start, end - start)))
            .collect());
    }
    // Rows of each output in their order, outputs one after another.
    let mut indices: Vec<Vec<u32>> = vec![Vec::new(); outputs];
    for (output, start, end) in segments {
        indices[output].extend(start as u32..end as u32);
    }
    let counts: Vec<usize> = indices.iter().map(Vec::len).collect();
    let gathered = take_record_batch(
        &batch,
        &UInt32Array::from(indices.into_iter().flatten().collect::<Vec<_>>()),
    )?;
    let mut offset = 0;
    let mut pieces = Vec::new();
    for (output, count) in counts.into_iter().enumerate() {
        if count > 0 {
            pieces.push((output, gathered.slice(offset, count)));
        }
        offset += count;
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::physical_expr::expressions::col;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn batch(keys: Vec<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys))]).unwrap()
    }

    #[test]
    fn hash_routing_sends_each_key_to_one_output_in_order() {
        let input = batch((0..1000).map(|i| i % 37).collect());
        let key = col("k", &input.schema()).unwrap();
        let mut router = Router::try_new(&RoutingStrategy::Hash(vec![key]), 0, 1, 4).unwrap();
        let mut home: HashMap<i64, usize> = HashMap::new();
        let mut rows = 0;
        for (output, piece) in router.route(input).unwrap() {
            assert!(output < 4);
            for key in piece.column(0).as_primitive::<Int64Type>().values() {
                assert_eq!(
                    *home.entry(*key).or_insert(output),
                    output,
                    "key {key} split"
                );
            }
            rows += piece.num_rows();
        }
        assert_eq!(rows, 1000);
        assert!(
            home.values()
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 1
        );
    }

    fn timed(times: Vec<Option<i64>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Int64, true),
            Field::new("row", DataType::Int64, false),
        ]));
        let rows = times.len() as i64;
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(times)),
                Arc::new(Int64Array::from_iter_values(0..rows)),
            ],
        )
        .unwrap()
    }

    fn time_runs(run: i64, origin: i64, outputs: usize) -> Router {
        let time = Arc::new(datafusion::physical_expr::expressions::Column::new("t", 0));
        let strategy = RoutingStrategy::TimeRuns(TimeRuns { time, run, origin });
        Router::try_new(&strategy, 0, 1, outputs).unwrap()
    }

    /// Each output's rows (column `row`) in the order they were routed.
    fn rows_by_output(pieces: Vec<(usize, RecordBatch)>, outputs: usize) -> Vec<Vec<i64>> {
        let mut rows = vec![Vec::new(); outputs];
        for (output, piece) in pieces {
            rows[output].extend(piece.column(1).as_primitive::<Int64Type>().values());
        }
        rows
    }

    #[test]
    fn time_runs_slice_a_batch_in_time_order() {
        let mut router = time_runs(10, 0, 2);
        let pieces = router.route(timed((0..25).map(Some).collect())).unwrap();
        // [0, 10) and [20, 25) go to output 0, [10, 20) to output 1: output 0 has two
        // segments, so the rows are gathered, each output's in order.
        assert_eq!(
            rows_by_output(pieces, 2),
            vec![
                (0..10).chain(20..25).collect::<Vec<_>>(),
                (10..20).collect::<Vec<_>>()
            ]
        );
        let pieces = router.route(timed((5..18).map(Some).collect())).unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].0, 0);
        assert_eq!(pieces[0].1.num_rows(), 5);
        assert_eq!(pieces[1].0, 1);
        assert_eq!(pieces[1].1.num_rows(), 8);
    }

    #[test]
    fn time_runs_route_every_row_by_its_own_time_out_of_order() {
        let mut router = time_runs(10, 5, 3);
        let times = vec![
            Some(31),
            None,
            Some(4),
            Some(15),
            Some(-6),
            Some(30),
            Some(14),
        ];
        let expected: Vec<usize> = vec![2, 0, 2, 1, 1, 2, 0];
        let pieces = router.route(timed(times)).unwrap();
        let mut want = vec![Vec::new(); 3];
        for (row, output) in expected.into_iter().enumerate() {
            want[output].push(row as i64);
        }
        assert_eq!(rows_by_output(pieces, 3), want);
    }

    #[test]
    fn time_runs_send_a_batch_of_one_run_whole_and_split_one_whose_ends_share_an_output() {
        let mut router = time_runs(10, 0, 2);
        // Out of order, but all in run [20, 30): one piece, the batch itself.
        let pieces = router
            .route(timed(vec![Some(27), Some(20), Some(29)]))
            .unwrap();
        assert_eq!(pieces.len(), 1);
        assert_eq!((pieces[0].0, pieces[0].1.num_rows()), (0, 3));
        // Oldest and newest in runs 0 and 2 (both output 0), a row of run 1 between them.
        let pieces = router
            .route(timed(vec![Some(0), Some(15), Some(25)]))
            .unwrap();
        assert_eq!(rows_by_output(pieces, 2), vec![vec![0, 2], vec![1]]);
    }

    #[test]
    fn broadcast_sends_every_batch_to_every_output() {
        let mut broadcast = Router::try_new(&RoutingStrategy::Broadcast, 1, 2, 3).unwrap();
        let routed = broadcast.route(batch(vec![1, 2, 3])).unwrap();
        let outputs: Vec<usize> = routed.iter().map(|(output, _)| *output).collect();
        assert_eq!(outputs, vec![0, 1, 2]);
        assert!(routed.iter().all(|(_, piece)| piece.num_rows() == 3));
        assert!(broadcast.route(batch(vec![])).unwrap().is_empty());
    }

    #[test]
    fn sticky_and_fan_in_send_whole_batches() {
        let mut sticky = Router::try_new(&RoutingStrategy::Sticky, 3, 4, 2).unwrap();
        let routed = sticky.route(batch(vec![1, 2, 3])).unwrap();
        assert_eq!(routed.len(), 1);
        assert_eq!(routed[0].0, 1);
        let mut fan_in = Router::try_new(&RoutingStrategy::FanIn, 3, 4, 2).unwrap();
        assert_eq!(fan_in.route(batch(vec![1])).unwrap()[0].0, 0);
    }
}
