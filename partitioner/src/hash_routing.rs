//! [`HashRouting`]: rows to two outputs by the hash of their keys, as DataFusion's hash
//! repartition sends them, in two passes over the batch's rows.
//!
//! A row goes to output `hash % 2`, where `hash` is DataFusion's `create_hashes` of its keys
//! with the repartition's seed: the output DataFusion's `RepartitionExec` gives it, so a
//! source declared hash-partitioned by DataFusion and this router agree on where a key
//! lives. The first pass turns every hash into its output; the second writes every row's
//! number into both outputs' buffers and advances only its own output's cursor, so that no
//! row waits on the store of the row before it, as a push onto a vector per output does
//! (DataFusion's partitioner). One `take` then gathers every column in output order and
//! each output's piece is a slice of the result; a batch whose rows all go to one output is
//! sent whole, uncopied. Kernel bench `hash_routing_views_2_streams` (S1's columns): about
//! 12 % less time than DataFusion's partitioner; at four outputs a buffer and a cursor per
//! output cost more than DataFusion's vectors, so the router uses this for two only.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::take_arrays;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::Result;
use datafusion::common::hash_utils::create_hashes;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::repartition::REPARTITION_RANDOM_STATE;

/// Hash routing of one input partition's batches to two outputs.
pub struct HashRouting {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Reused across batches: each row's hash, then each row's output.
    hashes: Vec<u64>,
    /// Reused across batches: each output's row numbers, `rows` slots per output.
    rows_of: Vec<u32>,
}

impl HashRouting {
    /// Routing to two outputs (the router leaves other counts to DataFusion's partitioner,
    /// whose vector per output costs less there than a buffer and a cursor per output).
    pub fn to_two_outputs(keys: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        Self {
            keys,
            hashes: Vec::new(),
            rows_of: Vec::new(),
        }
    }

    /// The pieces of `batch` and the output each goes to, outputs in order; rows keep their
    /// order within a piece.
    pub fn route(&mut self, batch: RecordBatch) -> Result<Vec<(usize, RecordBatch)>> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(Vec::new());
        }
        let keys = self
            .keys
            .iter()
            .map(|key| key.evaluate(&batch)?.into_array(rows))
            .collect::<Result<Vec<ArrayRef>>>()?;
        self.hashes.clear();
        self.hashes.resize(rows, 0);
        create_hashes(
            &keys,
            REPARTITION_RANDOM_STATE.random_state(),
            &mut self.hashes,
        )?;
        // First pass: each row's output (`hash % 2`), in place of its hash.
        for hash in self.hashes.iter_mut() {
            *hash &= 1;
        }
        // Second pass: each output's row numbers. Every row is written into both outputs'
        // buffers and kept by advancing only its own output's cursor, so no row waits on the
        // store of the row before it (DataFusion's push onto a vector per output does).
        self.rows_of.resize(2 * rows, 0);
        let (first, second) = self.rows_of.split_at_mut(rows);
        let (mut firsts, mut seconds) = (0usize, 0usize);
        for (row, output) in self.hashes.iter().enumerate() {
            let to_second = *output as usize;
            first[firsts] = row as u32;
            second[seconds] = row as u32;
            firsts += 1 - to_second;
            seconds += to_second;
        }
        match (firsts, seconds) {
            (_, 0) => return Ok(vec![(0, batch)]),
            (0, _) => return Ok(vec![(1, batch)]),
            _ => {}
        }
        let mut order = Vec::with_capacity(rows);
        order.extend_from_slice(&first[..firsts]);
        order.extend_from_slice(&second[..seconds]);
        let ranges = [(0, 0, firsts), (1, firsts, seconds)];
        let order = UInt32Array::from(order);
        let columns = take_arrays(batch.columns(), &order, None)?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let gathered = RecordBatch::try_new_with_options(batch.schema(), columns, &options)?;
        Ok(ranges
            .into_iter()
            .map(|(output, start, count)| (output, gathered.slice(start, count)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::metrics;
    use datafusion::physical_plan::repartition::BatchPartitioner;

    /// A batch of `rows` rows: a string key with nulls and a few dozen values (inline and
    /// longer than a view's 12 bytes), an integer key, and the row number.
    fn batch(rows: usize, seed: u64) -> RecordBatch {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let names: Vec<Option<String>> = (0..rows)
            .map(|_| match next() % 40 {
                0 => None,
                n if n < 20 => Some(format!("S{n}")),
                n => Some(format!("a longer symbol name {n}")),
            })
            .collect();
        let numbers: Vec<i64> = (0..rows).map(|_| (next() % 7) as i64 - 3).collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8View, true),
            Field::new("number", DataType::Int64, false),
            Field::new("row", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringViewArray::from_iter(names)),
                Arc::new(Int64Array::from(numbers)),
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_go_where_datafusion_repartition_sends_them_in_their_order() {
        for (seed, rows) in [(1, 1), (2, 5), (3, 1000), (4, 8192)] {
            let batch = batch(rows, seed);
            for key_names in [&["name"][..], &["number"], &["name", "number"]] {
                let keys: Vec<Arc<dyn PhysicalExpr>> = key_names
                    .iter()
                    .map(|name| col(name, &batch.schema()).unwrap())
                    .collect();
                let mut datafusion =
                    BatchPartitioner::new_hash_partitioner(keys.clone(), 2, metrics::Time::new())
                        .unwrap();
                let expected: Vec<(usize, RecordBatch)> = datafusion
                    .partition_iter(batch.clone())
                    .unwrap()
                    .collect::<Result<_>>()
                    .unwrap();
                let routed = HashRouting::to_two_outputs(keys)
                    .route(batch.clone())
                    .unwrap();
                assert_eq!(routed, expected, "{rows} rows, keys {key_names:?}");
            }
        }
    }
}
