//! Random streams for differential tests: null keys, NaN and null values, event times out of
//! order within a bound, batches of random size (including empty ones), few or many keys.
//! Deterministic for a seed.

use std::sync::Arc;

use super::rng::TestRng;
use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

/// Parameters of a random stream with columns `k1` (Utf8, nullable), `k2` (Int64, nullable),
/// `v` (Float64, nullable, with NaN), `q` (Int64) and `ts` (Timestamp ms).
#[derive(Debug, Clone)]
pub struct RandomStream {
    pub rows: usize,
    /// Batches hold 1 to this many rows (0 too with `empty_batches`).
    pub max_batch_rows: usize,
    pub empty_batches: bool,
    /// Distinct values of each key column.
    pub keys: u64,
    pub null_key_fraction: f64,
    pub nan_fraction: f64,
    pub null_value_fraction: f64,
    /// Event time step between records and the largest backward move of one record.
    pub step_ms: i64,
    pub disorder_ms: i64,
    /// Every record gets its own event time (`step_ms` apart, arrival order shuffled within
    /// the disorder bound), for queries whose result depends on the order of ties.
    pub distinct_times: bool,
    pub seed: u64,
}

impl RandomStream {
    /// 1 000 rows of 5 keys with a few nulls and NaNs, in order, for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rows: 1_000,
            max_batch_rows: 97,
            empty_batches: true,
            keys: 5,
            null_key_fraction: 0.05,
            nan_fraction: 0.05,
            null_value_fraction: 0.05,
            step_ms: 100,
            disorder_ms: 0,
            distinct_times: false,
            seed,
        }
    }

    pub fn rows(mut self, rows: usize) -> Self {
        self.rows = rows;
        self
    }

    pub fn keys(mut self, keys: u64) -> Self {
        self.keys = keys;
        self
    }

    pub fn disorder_ms(mut self, disorder_ms: i64) -> Self {
        self.disorder_ms = disorder_ms;
        self
    }

    pub fn distinct_times(mut self) -> Self {
        self.distinct_times = true;
        self
    }

    pub fn max_batch_rows(mut self, max_batch_rows: usize) -> Self {
        self.max_batch_rows = max_batch_rows.max(1);
        self
    }

    pub fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k1", DataType::Utf8, true),
            Field::new("k2", DataType::Int64, true),
            Field::new("v", DataType::Float64, true),
            Field::new("q", DataType::Int64, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]))
    }

    /// The stream's batches.
    pub fn generate(&self) -> Vec<RecordBatch> {
        let mut rng = TestRng::new(self.seed);
        let times = self.distinct_times.then(|| self.shuffled_times());
        let mut batches = Vec::new();
        let mut next_row = 0;
        while next_row < self.rows {
            // One batch in ten is empty when empty batches are asked for.
            let size = if self.empty_batches && rng.below(10) == 0 {
                0
            } else {
                (1 + rng.below(self.max_batch_rows as u64) as usize).min(self.rows - next_row)
            };
            batches.push(self.batch(&mut rng, next_row, size, times.as_deref()));
            next_row += size;
        }
        batches
    }

    /// Distinct event times `step_ms` apart, shuffled within blocks that span at most the
    /// disorder bound: no record is more than `disorder_ms` behind an earlier one.
    fn shuffled_times(&self) -> Vec<i64> {
        let mut rng = TestRng::from_state(self.seed ^ 0x9E37_79B9_7F4A_7C15);
        let block = (self.disorder_ms.max(0) / self.step_ms.max(1) + 1) as usize;
        let mut offsets: Vec<i64> = (0..self.rows as i64).collect();
        for chunk in offsets.chunks_mut(block) {
            for i in (1..chunk.len()).rev() {
                chunk.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        offsets
            .iter()
            .map(|offset| 1_700_000_000_000 + offset * self.step_ms)
            .collect()
    }

    fn batch(
        &self,
        rng: &mut TestRng,
        first: usize,
        size: usize,
        times: Option<&[i64]>,
    ) -> RecordBatch {
        let mut k1 = Vec::with_capacity(size);
        let mut k2 = Vec::with_capacity(size);
        let mut v = Vec::with_capacity(size);
        let mut q = Vec::with_capacity(size);
        let mut ts = Vec::with_capacity(size);
        for row in first..first + size {
            k1.push(
                (rng.unit() >= self.null_key_fraction)
                    .then(|| format!("key{}", rng.below(self.keys))),
            );
            k2.push((rng.unit() >= self.null_key_fraction).then(|| rng.below(self.keys) as i64));
            let draw = rng.unit();
            v.push(if draw < self.null_value_fraction {
                None
            } else if draw < self.null_value_fraction + self.nan_fraction {
                Some(f64::NAN)
            } else {
                Some((rng.below(200_000) as f64 - 100_000.0) / 100.0)
            });
            q.push(rng.below(100) as i64);
            let jitter = rng.below(self.disorder_ms.max(0) as u64 + 1) as i64;
            ts.push(match times {
                Some(times) => times[row],
                None => 1_700_000_000_000 + row as i64 * self.step_ms - jitter,
            });
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(k1)),
            Arc::new(Int64Array::from(k2)),
            Arc::new(Float64Array::from(v)),
            Arc::new(Int64Array::from(q)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ];
        // The columns match `schema()` by construction.
        RecordBatch::try_new(Self::schema(), columns).expect("columns match the schema") // ok: fixed schema
    }
}
