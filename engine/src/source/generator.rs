//! The built-in generator streams `market_data` and `orders` (shapes in the project's
//! `scenarios.md`) and the three Nexmark streams (see [`super::nexmark`]).
//!
//! Record `i` is a pure function of `i` and the spec, so any batch can be produced on its own:
//! the records are cut into blocks, and source partition `p` of `n` produces blocks `p, p + n,
//! p + 2n, …`, each partition in event time order, without coordination and without holding
//! more than one batch. A replay run as fast as it goes uses blocks of a whole batch, so that
//! an exchange that merges the partitions in event time passes whole batches on; a paced
//! stream uses blocks of one record, so that its partitions advance together in event time
//! at every moment, as live sources do. Bounded disorder
//! moves a record's event time back by a pseudo-random amount in `[0, disorder]`, so no record
//! is ever more than `disorder` behind the largest event time before it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, plan_err};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::Boundedness;
use datafusion::physical_plan::memory::{LazyBatchGenerator, LazyMemoryExec};
use parking_lot::RwLock;

use super::file_split::TimeSpan;
use super::nexmark::{
    NEXMARK_BASE_TIME_MS, NEXMARK_EVENT_RATE, NexmarkClock, NexmarkStrings, NexmarkTable,
    nexmark_batch, parse_events,
};
use crate::options::parse_count;

/// Which generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeneratorKind {
    /// Trades: symbol, trader_id, price, quantity, trade_time.
    MarketData,
    /// Orders: order_id, customer_id, order_date, total_amount.
    Orders,
    /// One of the Nexmark streams person, auction and bid.
    Nexmark(NexmarkTable),
}

impl std::fmt::Display for GeneratorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MarketData => f.write_str("market_data"),
            Self::Orders => f.write_str("orders"),
            Self::Nexmark(table) => write!(f, "nexmark.{table}"),
        }
    }
}

impl std::str::FromStr for GeneratorKind {
    type Err = datafusion::error::DataFusionError;
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "market_data" => Ok(Self::MarketData),
            "orders" => Ok(Self::Orders),
            "nexmark" => plan_err!(
                "generator nexmark makes three streams: name one (nexmark.person, nexmark.auction or nexmark.bid), or register generator:nexmark as a table named person, auction or bid"
            ),
            _ => match name
                .strip_prefix("nexmark.")
                .and_then(NexmarkTable::from_name)
            {
                Some(table) => Ok(Self::Nexmark(table)),
                None => plan_err!(
                    "unknown generator '{name}': expected market_data, orders or nexmark (nexmark.person, nexmark.auction, nexmark.bid)"
                ),
            },
        }
    }
}

/// Parameters of a generated stream.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorSpec {
    pub kind: GeneratorKind,
    /// Number of records; `None` generates forever. For a Nexmark stream, its rows among
    /// `events` events.
    pub records: Option<u64>,
    /// Records per batch.
    pub batch_size: usize,
    /// market_data: distinct symbols and traders.
    pub symbols: u64,
    pub traders: u64,
    /// Event time of record (or Nexmark event) 0, in milliseconds.
    pub start_ms: i64,
    /// market_data: the step between records, in milliseconds.
    pub step_ms: i64,
    /// The largest amount a record's event time moves back (bounded disorder).
    pub disorder_ms: i64,
    /// Seed of the disorder and of Nexmark's values.
    pub seed: u64,
    /// orders: distinct customers.
    pub customers: u64,
    /// orders: `total_amount = amount_base + (i % 100)`; 150 passes S0's filter always,
    /// 51 makes about half the rows fail it.
    pub amount_base: f64,
    /// Nexmark: events in the whole sequence (`None`: endless) and events per second of
    /// event time.
    pub events: Option<u64>,
    pub event_rate: u64,
    /// Nexmark: the strings of this seed, made once and shared by clones.
    strings: SharedStrings,
}

impl GeneratorSpec {
    /// The spec of `scenarios.md` for `kind`, with `records` records; for a Nexmark stream,
    /// the standard sequence of `records` events (of which the stream holds its own kind).
    pub fn new(kind: GeneratorKind, records: Option<u64>) -> Self {
        let mut spec = Self {
            kind,
            records,
            batch_size: 8192,
            symbols: 10,
            traders: 20,
            start_ms: 1_700_000_000_000,
            step_ms: 1_000,
            disorder_ms: 0,
            seed: 42,
            customers: 1_000,
            amount_base: 150.0,
            events: None,
            event_rate: NEXMARK_EVENT_RATE,
            strings: SharedStrings::default(),
        };
        if let GeneratorKind::Nexmark(_) = kind {
            spec.start_ms = NEXMARK_BASE_TIME_MS;
            spec.set_events(records);
        }
        spec
    }

    /// The standard Nexmark sequence of `events` events (`None`: endless), stream `table`.
    pub fn nexmark(table: NexmarkTable, events: Option<u64>) -> Self {
        Self::new(GeneratorKind::Nexmark(table), events)
    }

    fn set_events(&mut self, events: Option<u64>) {
        self.events = events;
        if let GeneratorKind::Nexmark(table) = self.kind {
            self.records = events.map(|events| table.rows_among(events));
        }
    }

    /// The parameter names [`GeneratorSpec::set`] accepts for every generator.
    const COMMON_KEYS: &'static [&'static str] = &["batch_size", "start_ms", "disorder_ms", "seed"];

    /// The parameter names of one generator only.
    fn kind_keys(kind: GeneratorKind) -> &'static [&'static str] {
        match kind {
            GeneratorKind::MarketData => &["records", "step_ms", "symbols", "traders"],
            GeneratorKind::Orders => &["records", "step_ms", "customers", "amount_base"],
            GeneratorKind::Nexmark(_) => &["events", "event_rate"],
        }
    }

    /// The parameter names [`GeneratorSpec::set`] accepts for this generator.
    pub fn keys(&self) -> Vec<&'static str> {
        let own = Self::kind_keys(self.kind);
        own.iter().chain(Self::COMMON_KEYS).copied().collect()
    }

    /// Every parameter of this generator as text that [`Self::set`] reads back.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let count = |n: Option<u64>| n.map_or_else(|| "unbounded".to_string(), |n| n.to_string());
        self.keys()
            .into_iter()
            .map(|key| {
                let value = match key {
                    "records" => count(self.records),
                    "events" => count(self.events),
                    "event_rate" => self.event_rate.to_string(),
                    "batch_size" => self.batch_size.to_string(),
                    "symbols" => self.symbols.to_string(),
                    "traders" => self.traders.to_string(),
                    "customers" => self.customers.to_string(),
                    "start_ms" => self.start_ms.to_string(),
                    "step_ms" => self.step_ms.to_string(),
                    "disorder_ms" => self.disorder_ms.to_string(),
                    "seed" => self.seed.to_string(),
                    _ => self.amount_base.to_string(),
                };
                (key, value)
            })
            .collect()
    }

    /// Sets a parameter from text; `Ok(false)` when `key` is not a generator parameter, an
    /// error when it is another generator's.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool> {
        if key == "records" && matches!(self.kind, GeneratorKind::Nexmark(_)) {
            return plan_err!(
                "option records={value}: a Nexmark stream is sized by the events of the whole sequence (events=N), of which it holds its own kind"
            );
        }
        let others = [
            GeneratorKind::MarketData,
            GeneratorKind::Orders,
            GeneratorKind::Nexmark(NexmarkTable::Bid),
        ];
        if !self.keys().contains(&key)
            && let Some(other) = others
                .into_iter()
                .find(|kind| Self::kind_keys(*kind).contains(&key))
        {
            let other = match other {
                GeneratorKind::Nexmark(_) => "nexmark".to_string(),
                kind => kind.to_string(),
            };
            return plan_err!(
                "option {key}={value} is a parameter of generator {other}, not of {}; its parameters are {}",
                self.kind,
                self.keys().join(", ")
            );
        }
        let positive = |key: &str, value: &str| -> Result<u64> {
            match parse_count(key, value)? {
                0 => plan_err!("option {key}={value}: must be at least 1"),
                n => Ok(n as u64),
            }
        };
        let integer = |key: &str, value: &str| -> Result<i64> {
            match value.parse::<i64>() {
                Ok(n) => Ok(n),
                Err(_) => plan_err!("option {key}={value}: expected an integer"),
            }
        };
        match key {
            "records" if value == "unbounded" => self.records = None,
            "records" => self.records = Some(parse_count(key, value)? as u64),
            "events" => self.set_events(parse_events(value)?),
            "event_rate" => self.event_rate = positive(key, value)?,
            "batch_size" => self.batch_size = positive(key, value)? as usize,
            "symbols" => self.symbols = positive(key, value)?,
            "traders" => self.traders = positive(key, value)?,
            "customers" => self.customers = positive(key, value)?,
            "start_ms" => self.start_ms = integer(key, value)?,
            "step_ms" => self.step_ms = integer(key, value)?,
            "disorder_ms" => {
                self.disorder_ms = integer(key, value)?;
                if self.disorder_ms < 0 {
                    return plan_err!("option disorder_ms={value}: must not be negative");
                }
            }
            "seed" => {
                self.seed = integer(key, value)? as u64;
                self.strings = SharedStrings::default();
            }
            "amount_base" => match value.parse::<f64>() {
                Ok(v) if v.is_finite() => self.amount_base = v,
                _ => return plan_err!("option amount_base={value}: expected a number"),
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The Nexmark clock of this spec.
    fn nexmark_clock(&self) -> NexmarkClock {
        NexmarkClock {
            seed: self.seed,
            start_ms: self.start_ms,
            event_rate: self.event_rate,
            disorder_ms: self.disorder_ms,
        }
    }

    /// The schema of the generated records.
    pub fn schema(&self) -> SchemaRef {
        let fields = match self.kind {
            GeneratorKind::MarketData => vec![
                Field::new("symbol", DataType::Utf8, false),
                Field::new("trader_id", DataType::Utf8, false),
                Field::new("price", DataType::Float64, false),
                Field::new("quantity", DataType::Int64, false),
                Field::new(
                    "trade_time",
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    false,
                ),
            ],
            GeneratorKind::Orders => vec![
                Field::new("order_id", DataType::Int64, false),
                Field::new("customer_id", DataType::Int64, false),
                Field::new("order_date", DataType::Utf8, false),
                Field::new("total_amount", DataType::Float64, false),
            ],
            GeneratorKind::Nexmark(table) => return table.schema(),
        };
        Arc::new(Schema::new(fields))
    }

    /// The event-time column, if the stream has one.
    pub fn event_time_column(&self) -> Option<&'static str> {
        match self.kind {
            GeneratorKind::MarketData => Some("trade_time"),
            GeneratorKind::Orders => None,
            GeneratorKind::Nexmark(_) => Some("date_time"),
        }
    }

    /// Records `[first, first + len)` as one batch.
    pub fn batch(&self, first: u64, len: usize) -> Result<RecordBatch> {
        self.records_batch(first..first + len as u64, None)
    }

    /// The records numbered `ids` as one batch, of the columns `columns` (indices into the
    /// schema, in that order) or of all of them.
    fn records_batch(
        &self,
        ids: impl Iterator<Item = u64> + Clone,
        columns: Option<&[usize]>,
    ) -> Result<RecordBatch> {
        let all: Vec<ArrayRef> = match self.kind {
            GeneratorKind::MarketData => {
                let symbols = names("SYM", self.symbols);
                let traders = names("TRADER", self.traders);
                vec![
                    Arc::new(StringArray::from_iter_values(
                        ids.clone().map(|i| &symbols[(i % self.symbols) as usize]),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        ids.clone().map(|i| &traders[(i % self.traders) as usize]),
                    )),
                    Arc::new(Float64Array::from_iter_values(ids.clone().map(|i| {
                        100.0 + (i % 50) as f64 + (i as f64 / 100.0).sin() * 10.0
                    }))),
                    Arc::new(Int64Array::from_iter_values(
                        ids.clone().map(|i| 100 + (i % 1000) as i64),
                    )),
                    Arc::new(TimestampMillisecondArray::from_iter_values(
                        ids.map(|i| self.event_time_ms(i)),
                    )),
                ]
            }
            GeneratorKind::Orders => vec![
                Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| i as i64))),
                Arc::new(Int64Array::from_iter_values(
                    ids.clone().map(|i| (i % self.customers) as i64),
                )),
                Arc::new(StringArray::from_iter_values(
                    ids.clone().map(|_| "2024-01-15"),
                )),
                Arc::new(Float64Array::from_iter_values(
                    ids.map(|i| self.amount_base + (i % 100) as f64),
                )),
            ],
            GeneratorKind::Nexmark(table) => {
                let strings = self.strings.get(self.seed);
                return nexmark_batch(table, &self.nexmark_clock(), &strings, ids, columns);
            }
        };
        let batch = RecordBatch::try_new(self.schema(), all)?;
        match columns {
            Some(columns) => Ok(batch.project(columns)?),
            None => Ok(batch),
        }
    }

    fn event_time_ms(&self, i: u64) -> i64 {
        let in_order = self.start_ms + i as i64 * self.step_ms;
        if self.disorder_ms == 0 {
            return in_order;
        }
        let jitter = splitmix64(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            % (self.disorder_ms as u64 + 1);
        in_order - jitter as i64
    }

    /// Number of batches, or `None` for an endless stream.
    pub fn batch_count(&self) -> Option<u64> {
        self.records
            .map(|records| records.div_ceil(self.batch_size as u64))
    }

    /// Batch number `index`, or `None` past the end.
    pub fn batch_at(&self, index: u64) -> Result<Option<RecordBatch>> {
        let first = index * self.batch_size as u64;
        let len = match self.records {
            Some(records) if first >= records => return Ok(None),
            Some(records) => (records - first).min(self.batch_size as u64) as usize,
            None => self.batch_size,
        };
        self.batch(first, len).map(Some)
    }

    /// All batches of a bounded spec, in record order.
    pub fn generate_all(&self) -> Result<Vec<RecordBatch>> {
        let Some(count) = self.batch_count() else {
            return plan_err!("cannot materialize an endless generator: give it a record count");
        };
        (0..count)
            .filter_map(|index| self.batch_at(index).transpose())
            .collect()
    }

    /// The records this generator makes and the event times they span (for an endless one,
    /// those of its first million records): how many records an interval of event time
    /// holds. None for orders, which have no event time.
    pub fn time_span(&self) -> Option<TimeSpan> {
        const ENDLESS: u64 = 1 << 20;
        match self.kind {
            GeneratorKind::MarketData => {
                let records = self.records.unwrap_or(ENDLESS);
                let span = (records as i64).saturating_mul(self.step_ms);
                Some(TimeSpan {
                    records,
                    min: self.start_ms,
                    max: self.start_ms.saturating_add(span),
                })
            }
            GeneratorKind::Nexmark(table) => {
                let events = self.events.unwrap_or(ENDLESS);
                let span_ms = events as f64 * 1_000.0 / self.event_rate.max(1) as f64;
                Some(TimeSpan {
                    records: table.rows_among(events),
                    min: self.start_ms,
                    max: self.start_ms.saturating_add(span_ms as i64),
                })
            }
            GeneratorKind::Orders => None,
        }
    }

    /// One lazy generator per source partition, for `LazyMemoryExec`; the partitions take
    /// turns by blocks of `block_records` records.
    pub fn partition_generators(
        self: &Arc<Self>,
        partitions: usize,
        block_records: usize,
        columns: Option<&[usize]>,
    ) -> Vec<Arc<RwLock<dyn LazyBatchGenerator>>> {
        let columns: Option<Arc<[usize]>> = columns.map(Arc::from);
        (0..partitions)
            .map(|partition| {
                Arc::new(RwLock::new(PartitionGenerator {
                    spec: Arc::clone(self),
                    columns: columns.clone(),
                    partitions: partitions as u64,
                    partition: partition as u64,
                    block_records: Arc::new(AtomicU64::new(block_records.max(1) as u64)),
                    next_batch: 0,
                    first_batch: Arc::default(),
                })) as Arc<RwLock<dyn LazyBatchGenerator>>
            })
            .collect()
    }
}

/// Nexmark's strings for a seed, made on first use and shared by the spec's clones (a spec
/// whose seed changes gets a new one).
#[derive(Debug, Clone, Default)]
struct SharedStrings(Arc<std::sync::OnceLock<Arc<NexmarkStrings>>>);

impl SharedStrings {
    fn get(&self, seed: u64) -> Arc<NexmarkStrings> {
        Arc::clone(self.0.get_or_init(|| Arc::new(NexmarkStrings::new(seed))))
    }
}

impl PartialEq for SharedStrings {
    /// Derived from the seed, which the spec compares.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

fn names(prefix: &str, count: u64) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}{n}")).collect()
}

/// A 64-bit mixing function (splitmix64's finalizer): deterministic pseudo-randomness
/// from a counter, so any record can be generated on its own.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Partition `partition` of `partitions` of a spec: every `partitions`-th block of records.
#[derive(Debug)]
struct PartitionGenerator {
    spec: Arc<GeneratorSpec>,
    /// The columns the query reads (the scan's projection), or all of them: a generator
    /// builds only those.
    columns: Option<Arc<[usize]>>,
    partitions: u64,
    partition: u64,
    /// Shared with the fresh copies each execution makes, as a checkpointed run makes a
    /// paced generator's blocks whole ([`generate_in_whole_batches`]).
    block_records: Arc<AtomicU64>,
    /// The partition's next batch.
    next_batch: u64,
    /// The batch each execution starts at (0, or where a resumed replay seeks to); shared
    /// with the fresh copies each execution makes.
    first_batch: Arc<AtomicU64>,
}

/// Replay positions of a generator replayed as fast as it goes, whose blocks are whole
/// batches: batch `k` of partition `p` of `n` is block `k * n + p` of the stream, its
/// position, as a file's row groups are numbered.
pub fn seek_generated(
    plan: &Arc<dyn ExecutionPlan>,
    partition: usize,
    from: i64,
) -> Option<GeneratedPositions> {
    let generator = partition_generator(plan, partition)?;
    let generator = generator.read();
    let generator = generator.as_any().downcast_ref::<PartitionGenerator>()?;
    let partitions = generator.partitions as i64;
    let partition = generator.partition as i64;
    // The first batch `k` at or past `from`: `k * n + p >= from`.
    let first = ((from - partition).max(0) as u64).div_ceil(partitions as u64);
    generator.first_batch.store(first, Ordering::SeqCst);
    Some(GeneratedPositions {
        next: first as i64 * partitions + partition,
        step: partitions,
    })
}

/// The positions of a generator partition's batches, from where it was sought.
pub struct GeneratedPositions {
    next: i64,
    step: i64,
}

impl GeneratedPositions {
    /// The position of the next batch.
    pub fn next_position(&mut self) -> i64 {
        let position = self.next;
        self.next += self.step;
        position
    }
}

/// Whether `plan` reads a generator whose blocks are whole batches (a replay run as fast as it
/// goes), which has replay positions.
pub fn generates_in_batches(plan: &Arc<dyn ExecutionPlan>) -> bool {
    partition_generator(plan, 0).is_some_and(|generator| {
        let generator = generator.read();
        generator
            .as_any()
            .downcast_ref::<PartitionGenerator>()
            .is_some_and(|g| g.block_records.load(Ordering::SeqCst) == g.spec.batch_size as u64)
    })
}

/// Has the generator `plan` reads (if any) deal whole batches to its partitions in turn,
/// rather than single records: a paced generator's partitions otherwise take turns record
/// by record, so that each covers the stream's time at once, but then no batch has a
/// place in the replay for a checkpoint's barrier to cut at.
pub fn generate_in_whole_batches(plan: &Arc<dyn ExecutionPlan>) {
    let mut partition = 0;
    while let Some(generator) = partition_generator(plan, partition) {
        let generator = generator.read();
        if let Some(generator) = generator.as_any().downcast_ref::<PartitionGenerator>() {
            let whole = generator.spec.batch_size as u64;
            generator.block_records.store(whole, Ordering::SeqCst);
        }
        partition += 1;
    }
}

/// The lazy generator of `partition` under `plan` (through single-child nodes).
fn partition_generator(
    plan: &Arc<dyn ExecutionPlan>,
    partition: usize,
) -> Option<Arc<RwLock<dyn LazyBatchGenerator>>> {
    let mut node = plan;
    loop {
        if let Some(lazy) = node.downcast_ref::<LazyMemoryExec>() {
            return lazy.generators().get(partition).cloned();
        }
        node = match node.children().as_slice() {
            [child] => child,
            _ => return None,
        };
    }
}

impl fmt::Display for PartitionGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records = match self.spec.records {
            Some(records) => records.to_string(),
            None => "unbounded".to_string(),
        };
        write!(
            f,
            "{:?}(records={records}, batch_size={})",
            self.spec.kind, self.spec.batch_size
        )
    }
}

impl LazyBatchGenerator for PartitionGenerator {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn boundedness(&self) -> Boundedness {
        match self.spec.records {
            Some(_) => Boundedness::Bounded,
            None => Boundedness::Unbounded {
                requires_infinite_memory: false,
            },
        }
    }

    /// Batch `k` of partition `p` of `n` holds the partition's records `k * batch_size + j`,
    /// its `j`-th record being record `(j / b * n + p) * b + j % b` for blocks of `b`: every
    /// partition covers the whole stream's time range, in order, at `1/n` of its density, so
    /// that source partitions advance together in event time.
    fn generate_next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let spec = &self.spec;
        let block = self.block_records.load(Ordering::SeqCst);
        let (partitions, partition) = (self.partitions, self.partition);
        let first = self.next_batch * spec.batch_size as u64;
        let record = move |j: u64| (j / block * partitions + partition) * block + j % block;
        let records = spec.records.unwrap_or(u64::MAX);
        if record(first) >= records {
            return Ok(None);
        }
        self.next_batch += 1;
        let ids = (first..first + spec.batch_size as u64)
            .map(record)
            .take_while(move |&id| id < records);
        spec.records_batch(ids, self.columns.as_deref()).map(Some)
    }

    fn reset_state(&self) -> Arc<RwLock<dyn LazyBatchGenerator>> {
        Arc::new(RwLock::new(PartitionGenerator {
            spec: Arc::clone(&self.spec),
            columns: self.columns.clone(),
            partitions: self.partitions,
            partition: self.partition,
            block_records: Arc::clone(&self.block_records),
            next_batch: self.first_batch.load(Ordering::SeqCst),
            first_batch: Arc::clone(&self.first_batch),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every parameter of every generator comes back from its text.
    #[test]
    fn a_generator_comes_back_from_its_pairs() {
        let kinds = [
            GeneratorKind::MarketData,
            GeneratorKind::Orders,
            GeneratorKind::Nexmark(NexmarkTable::Auction),
        ];
        for kind in kinds {
            let mut spec = match kind {
                GeneratorKind::Nexmark(table) => GeneratorSpec::nexmark(table, Some(1_234)),
                kind => GeneratorSpec::new(kind, None),
            };
            for (key, value) in [
                ("batch_size", "100"),
                ("start_ms", "-5"),
                ("disorder_ms", "7"),
                ("seed", "9"),
                ("step_ms", "3"),
                ("symbols", "4"),
                ("traders", "6"),
                ("customers", "8"),
                ("amount_base", "51.25"),
                ("event_rate", "1000"),
            ] {
                if spec.keys().contains(&key) {
                    spec.set(key, value).unwrap();
                }
            }
            let mut read = match kind {
                GeneratorKind::Nexmark(table) => GeneratorSpec::nexmark(table, Some(1)),
                kind => GeneratorSpec::new(kind, Some(1)),
            };
            for (key, value) in spec.to_pairs() {
                assert!(read.set(key, &value).unwrap(), "{key}");
            }
            assert_eq!(read, spec, "{kind:?}");
        }
    }
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::TimestampMillisecondType;

    #[test]
    fn market_data_follows_the_scenario_formulas() {
        let spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(3));
        let batch = spec.batch(1234, 1).unwrap();
        assert_eq!(batch.column(0).as_string::<i32>().value(0), "SYM4");
        assert_eq!(batch.column(1).as_string::<i32>().value(0), "TRADER14");
        let price = batch
            .column(2)
            .as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        assert_eq!(price.value(0), 100.0 + 34.0 + (12.34f64).sin() * 10.0);
        let time = batch.column(4).as_primitive::<TimestampMillisecondType>();
        assert_eq!(time.value(0), 1_700_000_000_000 + 1_234_000);
    }

    #[test]
    fn partitions_cover_every_record_once() {
        let mut spec = GeneratorSpec::new(GeneratorKind::Orders, Some(10_000));
        spec.batch_size = 999;
        let spec = Arc::new(spec);
        for block in [1, 64, 999] {
            let mut seen = vec![false; 10_000];
            for generator in spec.partition_generators(3, block, None) {
                while let Some(batch) = generator.write().generate_next_batch().unwrap() {
                    let ids = batch
                        .column(0)
                        .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                    for id in ids.values() {
                        assert!(!seen[*id as usize], "record {id} generated twice");
                        seen[*id as usize] = true;
                    }
                }
            }
            assert!(seen.iter().all(|s| *s), "blocks of {block}");
        }
    }

    #[test]
    fn each_partition_covers_the_whole_time_range_in_order() {
        let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(1_000));
        spec.batch_size = 100;
        let spec = Arc::new(spec);
        for block in [1, 10, 100] {
            let generators = spec.partition_generators(4, block, None);
            for (partition, generator) in generators.into_iter().enumerate() {
                let mut times = Vec::new();
                while let Some(batch) = generator.write().generate_next_batch().unwrap() {
                    let time = batch.column(4).as_primitive::<TimestampMillisecondType>();
                    times.extend(
                        time.values()
                            .iter()
                            .map(|t| (t - 1_700_000_000_000) / 1_000),
                    );
                }
                let expected: Vec<i64> = (0..1_000)
                    .filter(|i| (i / block as i64) % 4 == partition as i64)
                    .collect();
                assert_eq!(times, expected, "partition {partition}, blocks of {block}");
            }
        }
    }

    #[test]
    fn disorder_stays_within_its_bound() {
        let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(5_000));
        spec.disorder_ms = 3_000;
        let mut max_seen = i64::MIN / 2;
        let mut moved = 0;
        for batch in spec.generate_all().unwrap() {
            let time = batch.column(4).as_primitive::<TimestampMillisecondType>();
            for t in time.values() {
                assert!(*t >= max_seen - 3_000, "record behind the disorder bound");
                if *t < max_seen {
                    moved += 1;
                }
                max_seen = max_seen.max(*t);
            }
        }
        assert!(moved > 100, "disorder should move some records: {moved}");
    }
}
