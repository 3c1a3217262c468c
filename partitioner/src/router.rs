//! [`Router`]: one input partition's routing of batches to output partitions.

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_plan::metrics;
use datafusion::physical_plan::repartition::BatchPartitioner;

use crate::strategy::RoutingStrategy;

/// Routes the batches of one input partition.
pub struct Router {
    kind: RouterKind,
}

enum RouterKind {
    /// Hash and round-robin: DataFusion's partitioner.
    Partitioner(BatchPartitioner),
    /// Sticky and fan-in: every batch to one output.
    Fixed(usize),
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
            (None, RoutingStrategy::Hash(keys)) => RouterKind::Partitioner(
                BatchPartitioner::new_hash_partitioner(keys.clone(), outputs, timer)?,
            ),
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
            RouterKind::Partitioner(partitioner) => partitioner.partition_iter(batch)?.collect(),
        }
    }
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
