//! The fuzzer's random data: a small table of rows in stored order, and how it is stored
//! (in-memory batches, a Parquet file with row groups of a chosen size, a directory of Parquet
//! files, a CSV or an Arrow IPC file).
//!
//! Columns: `id` (the row's position in stored order, unique), `k` (Utf8 key, nullable; a
//! dictionary in a quarter of the tables not stored as CSV or Arrow IPC), `g`
//! (Int64 key, nullable), `v` (Float64, nullable, NaN in some tables), `i` (Int64) and `ts`
//! (the event time: a millisecond timestamp, or Int64 epoch milliseconds). Event times move
//! forward in small random steps (zero steps give ties) and some rows arrive up to `disorder_ms`
//! behind the largest time before them, never more, so that a watermark delay of `disorder_ms`
//! makes no row late.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DataFusionError, Result};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;

use crate::testing::TestRng;

/// One row of a fuzz table.
#[derive(Debug, Clone, PartialEq)]
pub struct FuzzRow {
    pub id: i64,
    pub k: Option<String>,
    pub g: Option<i64>,
    pub v: Option<f64>,
    pub i: i64,
    pub ts: i64,
}

/// How the event time is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeType {
    Timestamp,
    EpochMillis,
}

/// How a fuzz table is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// In-memory batches of at most this many rows (and some empty ones).
    Batches(usize),
    /// One Parquet file with row groups of at most this many rows.
    Parquet(usize),
    /// A directory of this many Parquet files, each a contiguous run of the rows, read in
    /// name order.
    ParquetDirectory(usize),
    Csv,
    Arrow,
    /// In-memory batches in this many source partitions, each key `k` in one of them (null
    /// keys in the first), declared `partitioned_by=k`.
    KeyedPartitions(usize),
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Batches(rows) => write!(f, "in-memory batches of up to {rows} rows"),
            Self::Parquet(rows) => write!(f, "a Parquet file with row groups of {rows} rows"),
            Self::ParquetDirectory(files) => write!(f, "a directory of {files} Parquet files"),
            Self::Csv => f.write_str("a CSV file"),
            Self::Arrow => f.write_str("an Arrow IPC file"),
            Self::KeyedPartitions(n) => write!(f, "{n} in-memory partitions by k"),
        }
    }
}

/// A random table and how it is stored.
#[derive(Debug, Clone)]
pub struct FuzzData {
    pub rows: Vec<FuzzRow>,
    pub time_type: TimeType,
    pub storage: Storage,
    /// The largest backward move of an event time (the watermark delay that makes no row late).
    pub disorder_ms: i64,
    /// Whether `v` may hold NaN.
    pub nan: bool,
    /// Whether two rows may share an event time.
    pub ties: bool,
    /// Seed of the batch sizes of in-memory storage.
    pub split_seed: u64,
    /// Whether `k` is a dictionary (as pyarrow writes a category).
    pub dictionary_keys: bool,
}

/// The first event time of every table: a whole minute, so windows start with the data.
pub const START_MS: i64 = 1_700_000_040_000;

/// How far apart the group numbers of a sparse table are, an even number.
const SPARSE_GROUP_STRIDE: i64 = 2_000_000_000_000;

impl FuzzData {
    /// A random table; `ties` allows equal event times.
    pub fn random(rng: &mut TestRng, ties: bool) -> Self {
        let rows = match rng.below(10) {
            0 => rng.below(3) as usize,
            1..=6 => 3 + rng.below(30) as usize,
            _ => 30 + rng.below(120) as usize,
        };
        let disorder_ms = *rng.pick(&[0, 0, 300, 1_500]);
        let nan = rng.chance(0.3);
        let keys = 1 + rng.below(5);
        let null_keys = *rng.pick(&[0.0, 0.0, 0.1, 0.3]);
        let max_step = *rng.pick(&[200, 700, 2_500]);
        let mut newest = START_MS + rng.below(1_000) as i64;
        let mut out = Vec::with_capacity(rows);
        for id in 0..rows as i64 {
            let step = rng.below(max_step + 1) as i64;
            newest += if ties { step } else { step.max(1) };
            let mut ts = newest;
            if disorder_ms > 0 && rng.chance(0.3) {
                ts -= rng.below(disorder_ms as u64 + 1) as i64;
            }
            let v = if rng.chance(0.1) {
                None
            } else if nan && rng.chance(0.1) {
                Some(f64::NAN)
            } else {
                Some((rng.below(2_000) as f64 - 1_000.0) / 8.0)
            };
            out.push(FuzzRow {
                id,
                k: (!rng.chance(null_keys))
                    .then(|| ["a", "b", "c", "d", "e"][rng.below(keys) as usize].to_string()),
                g: (!rng.chance(null_keys)).then(|| rng.below(keys) as i64),
                v,
                i: rng.below(100) as i64 - 50,
                ts,
            });
        }
        // CSV types are read from the values: a column with none would be of type Null.
        let csv_readable = out.iter().any(|r| r.k.is_some())
            && out.iter().any(|r| r.g.is_some())
            && out.iter().any(|r| r.v.is_some());
        let storage = match rng.below(10) {
            0..=2 => Storage::Batches(1 + rng.below(20) as usize),
            3..=5 => Storage::Parquet(*rng.pick(&[1, 2, 7, 1_000])),
            6 => Storage::ParquetDirectory(2 + rng.below(2) as usize),
            // An empty CSV file has no column types to read.
            7 if csv_readable => Storage::Csv,
            8 => Storage::Arrow,
            _ if rng.chance(0.5) => Storage::KeyedPartitions(1 + rng.below(3) as usize),
            _ => Storage::Parquet(1),
        };
        let mut data = Self {
            rows: out,
            time_type: if rng.chance(0.2) {
                TimeType::EpochMillis
            } else {
                TimeType::Timestamp
            },
            storage,
            disorder_ms,
            nan,
            ties,
            split_seed: rng.next_u64(),
            dictionary_keys: false,
        };
        // From bits of a seed already drawn, so that a seed's case is otherwise the one it was
        // before dictionary keys were drawn.
        // (An Arrow IPC file holds one dictionary per column for all its batches, and a CSV
        // file none.)
        data.dictionary_keys = !matches!(storage, Storage::Csv | Storage::Arrow)
            && (data.split_seed >> 17).is_multiple_of(4);
        // Likewise a table whose group numbers lie far apart, as ids of a sparse range do
        // (`g` and `g % 2` unchanged for 0 and 1): an integer key no dense array holds.
        if (data.split_seed >> 23).is_multiple_of(4) {
            for row in &mut data.rows {
                row.g = row.g.map(|g| g + g / 2 * SPARSE_GROUP_STRIDE);
            }
        }
        if !ties {
            data.separate_ties();
        }
        data
    }

    /// Gives some rows the event time of the row stored before them: ties, none of them late
    /// (the earlier row was not, and the watermark only follows times already seen).
    pub fn repeat_times(&mut self, rng: &mut TestRng) {
        for row in 1..self.rows.len() {
            if rng.chance(0.3) {
                self.rows[row].ts = self.rows[row - 1].ts;
            }
        }
    }

    /// Moves equal event times apart (by a millisecond at a time, in stored order).
    pub fn separate_ties(&mut self) {
        let mut seen = std::collections::HashSet::new();
        for row in &mut self.rows {
            while !seen.insert(row.ts) {
                row.ts += 1;
            }
        }
        self.ties = false;
    }

    pub fn schema(&self) -> SchemaRef {
        let ts_type = match self.time_type {
            TimeType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
            TimeType::EpochMillis => DataType::Int64,
        };
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("k", self.key_type(), true),
            Field::new("g", DataType::Int64, true),
            Field::new("v", DataType::Float64, true),
            Field::new("i", DataType::Int64, false),
            Field::new("ts", ts_type, false),
        ]))
    }

    /// The type of `k`.
    fn key_type(&self) -> DataType {
        match self.dictionary_keys {
            true => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false => DataType::Utf8,
        }
    }

    /// The rows `range` as one batch.
    fn batch(&self, rows: &[FuzzRow]) -> Result<RecordBatch> {
        let ts: ArrayRef = match self.time_type {
            TimeType::Timestamp => Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.ts),
            )),
            TimeType::EpochMillis => {
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.ts)))
            }
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.id))),
            match self.dictionary_keys {
                true => Arc::new(DictionaryArray::<Int32Type>::from_iter(
                    rows.iter().map(|r| r.k.as_deref()),
                )),
                false => Arc::new(StringArray::from_iter(rows.iter().map(|r| r.k.as_deref()))),
            },
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.g))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.v))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.i))),
            ts,
        ];
        Ok(RecordBatch::try_new(self.schema(), columns)?)
    }

    /// The rows as in-memory batches: random sizes up to `max_rows`, some empty.
    pub fn batches(&self) -> Result<Vec<RecordBatch>> {
        let max_rows = match self.storage {
            Storage::Batches(rows) => rows.max(1),
            _ => 1_000,
        };
        let mut rng = TestRng::new(self.split_seed);
        let mut batches = Vec::new();
        let mut next = 0;
        while next < self.rows.len() {
            let size = if rng.chance(0.1) {
                0
            } else {
                (1 + rng.below(max_rows as u64) as usize).min(self.rows.len() - next)
            };
            batches.push(self.batch(&self.rows[next..next + size])?);
            next += size;
        }
        if batches.is_empty() {
            batches.push(self.batch(&[])?);
        }
        Ok(batches)
    }

    /// The rows split by key `k` into `partitions` source partitions (stored order kept in
    /// each), as batches of random sizes; `turn` moves each key's partition number on (a
    /// split that holds alone but disagrees with the unturned one).
    pub fn keyed_partitions(
        &self,
        partitions: usize,
        turn: usize,
    ) -> Result<Vec<Vec<RecordBatch>>> {
        let mut split: Vec<FuzzData> = (0..partitions)
            .map(|_| Self {
                rows: Vec::new(),
                storage: Storage::Batches(4),
                ..self.clone()
            })
            .collect();
        for row in &self.rows {
            let partition = row
                .k
                .as_deref()
                .map_or(0, |k| k.bytes().map(usize::from).sum::<usize>() + turn)
                % partitions;
            split[partition].rows.push(row.clone());
        }
        split.iter().map(FuzzData::batches).collect()
    }

    /// Writes the table into `dir` as its storage asks; returns the path to register, or
    /// `None` for in-memory storage.
    pub fn write(&self, dir: &Path) -> Result<Option<PathBuf>> {
        let io = |e: std::io::Error| DataFusionError::External(Box::new(e));
        match self.storage {
            Storage::Batches(_) | Storage::KeyedPartitions(_) => Ok(None),
            Storage::Parquet(row_group_rows) => {
                let path = dir.join("t.parquet");
                self.write_parquet(&path, &self.rows, row_group_rows)?;
                Ok(Some(path))
            }
            Storage::ParquetDirectory(files) => {
                let path = dir.join("t");
                std::fs::create_dir_all(&path).map_err(io)?;
                let per_file = self.rows.len().div_ceil(files).max(1);
                let mut chunks: Vec<&[FuzzRow]> = self.rows.chunks(per_file).collect();
                while chunks.len() < files {
                    chunks.push(&[]);
                }
                for (index, chunk) in chunks.iter().enumerate() {
                    let file = path.join(format!("part-{index}.parquet"));
                    self.write_parquet(&file, chunk, 3)?;
                }
                Ok(Some(path))
            }
            Storage::Csv => {
                let path = dir.join("t.csv");
                let file = std::fs::File::create(&path).map_err(io)?;
                let mut writer = datafusion::arrow::csv::Writer::new(file);
                writer.write(&self.batch(&self.rows)?)?;
                Ok(Some(path))
            }
            Storage::Arrow => {
                let path = dir.join("t.arrow");
                let file = std::fs::File::create(&path).map_err(io)?;
                let mut writer =
                    datafusion::arrow::ipc::writer::FileWriter::try_new(file, &self.schema())?;
                for chunk in self.rows.chunks(5) {
                    writer.write(&self.batch(chunk)?)?;
                }
                writer.finish()?;
                Ok(Some(path))
            }
        }
    }

    fn write_parquet(&self, path: &Path, rows: &[FuzzRow], row_group_rows: usize) -> Result<()> {
        let file =
            std::fs::File::create(path).map_err(|e| DataFusionError::External(Box::new(e)))?;
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group_rows.max(1)))
            .build();
        let mut writer = ArrowWriter::try_new(file, self.schema(), Some(properties))?;
        writer.write(&self.batch(rows)?)?;
        writer.close()?;
        Ok(())
    }

    /// The table as `VALUES` rows for a reproduction (id, k, g, v, i, ts).
    pub fn describe_rows(&self) -> String {
        self.rows
            .iter()
            .map(|r| {
                format!(
                    "({}, {}, {}, {}, {}, {})",
                    r.id,
                    r.k.as_deref()
                        .map_or("NULL".to_string(), |k| format!("'{k}'")),
                    r.g.map_or("NULL".to_string(), |g| g.to_string()),
                    r.v.map_or("NULL".to_string(), |v| v.to_string()),
                    r.i,
                    r.ts - START_MS,
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
