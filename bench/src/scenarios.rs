//! The reference scenarios of `docs/scenarios.md`: their streaming SQL, the
//! DataFusion batch SQL that gives the same result on bounded data, and their data.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::Result;
use freshet_engine::{GeneratorKind, GeneratorSpec};

/// One benchmark scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short name, as `--scenario` takes it.
    pub id: &'static str,
    pub description: &'static str,
    /// The generated stream the query reads and its table name.
    pub data: GeneratorKind,
    /// `orders` only: `total_amount = amount_base + (i % 100)`.
    pub amount_base: f64,
    /// Freshet's query, as in `docs/scenarios.md`.
    pub streaming_sql: &'static str,
    /// The DataFusion batch query with the same result on bounded data.
    pub batch_sql: &'static str,
    /// Columns whose rows must stay in one source partition, in order, when the data is split
    /// over several: results that depend on arrival order per key (running values) are then
    /// the same on every run. `None` splits whole batches round-robin.
    pub keyed_by: Option<&'static [&'static str]>,
    /// How many times the query reads the table (a self-join reads it twice): the input
    /// records counted are the table's times this.
    pub reads: u64,
    /// `market_data` only: its records spread over this many symbols, and a bounded table
    /// `symbols(symbol, name)` of one row per symbol registered beside the stream (a lookup
    /// join's table). `None`: the generator's 10 symbols and no table.
    pub lookup_symbols: Option<u64>,
}

impl Scenario {
    /// The table name the queries read.
    pub fn table(&self) -> &'static str {
        match self.data {
            GeneratorKind::MarketData => "market_data",
            GeneratorKind::Orders => "orders",
            GeneratorKind::Nexmark(table) => table.name(),
        }
    }

    /// The event-time column of the table (the generator's own choice), if it has one.
    pub fn event_time(&self) -> Option<&'static str> {
        self.data_spec(0).event_time_column()
    }

    /// The generator spec of this scenario's data with `records` records.
    pub fn data_spec(&self, records: u64) -> GeneratorSpec {
        let mut spec = GeneratorSpec::new(self.data, Some(records));
        spec.amount_base = self.amount_base;
        if let Some(symbols) = self.lookup_symbols {
            spec.symbols = symbols;
        }
        spec
    }

    /// The bounded table of a lookup scenario: `symbols(symbol, name)`, one row per symbol
    /// (`SYM0`, `name0`, …).
    pub fn lookup_table(&self) -> Result<Option<RecordBatch>> {
        let Some(symbols) = self.lookup_symbols else {
            return Ok(None);
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("symbol", DataType::Utf8, false),
            Field::new("name", DataType::Utf8, false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                (0..symbols).map(|i| format!("SYM{i}")),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..symbols).map(|i| format!("name{i}")),
            )),
        ];
        Ok(Some(RecordBatch::try_new(schema, columns)?))
    }
}

const S1_SQL: &str = "SELECT symbol, price, \
LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, \
ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, \
AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg \
FROM market_data";

const S2_SQL: &str = "SELECT symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
MIN(price) AS min_price, MAX(price) AS max_price, SUM(quantity) AS total_quantity \
FROM market_data GROUP BY symbol";

pub const S3A_SQL: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol \
WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";

const S3A_BATCH_SQL: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
SUM(quantity) AS total_quantity FROM market_data \
GROUP BY trader_id, symbol, date_bin(INTERVAL '1 minute', trade_time)";

const S3B_SQL: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price \
FROM market_data GROUP BY trader_id, symbol \
WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";

const S3B_BATCH_SQL: &str = "SELECT trader_id, symbol, COUNT(*) OVER w AS trade_count, AVG(price) OVER w AS avg_price \
FROM market_data WINDOW w AS (PARTITION BY trader_id, symbol, date_bin(INTERVAL '1 minute', trade_time) \
ORDER BY trade_time ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)";

const S0_SQL: &str =
    "SELECT order_id, customer_id, order_date, total_amount FROM orders WHERE total_amount > 100";

/// The reference scenarios, and S0's half-filtered variant.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            id: "S0",
            description: "pure SELECT (every row passes)",
            data: GeneratorKind::Orders,
            amount_base: 150.0,
            streaming_sql: S0_SQL,
            batch_sql: S0_SQL,
            keyed_by: None,
            reads: 1,
            lookup_symbols: None,
        },
        Scenario {
            id: "S0-half",
            description: "pure SELECT (half the rows fail the filter)",
            data: GeneratorKind::Orders,
            amount_base: 51.0,
            streaming_sql: S0_SQL,
            batch_sql: S0_SQL,
            keyed_by: None,
            reads: 1,
            lookup_symbols: None,
        },
        Scenario {
            id: "S1",
            description: "ROWS window: LAG, ROW_NUMBER, 100-row moving AVG",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: S1_SQL,
            batch_sql: S1_SQL,
            keyed_by: Some(&["symbol"]),
            reads: 1,
            lookup_symbols: None,
        },
        Scenario {
            id: "S2",
            description: "GROUP BY on a stream",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: S2_SQL,
            batch_sql: S2_SQL,
            keyed_by: None,
            reads: 1,
            lookup_symbols: None,
        },
        Scenario {
            id: "S3a",
            description: "TUMBLING window + GROUP BY, EMIT FINAL",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: S3A_SQL,
            batch_sql: S3A_BATCH_SQL,
            keyed_by: Some(&["trader_id", "symbol"]),
            reads: 1,
            lookup_symbols: None,
        },
        Scenario {
            id: "S3b",
            description: "TUMBLING window + GROUP BY, EMIT CHANGES (one row per record)",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: S3B_SQL,
            batch_sql: S3B_BATCH_SQL,
            keyed_by: Some(&["trader_id", "symbol"]),
            reads: 1,
            lookup_symbols: None,
        },
    ]
}

const S1_FRAME_10_SQL: &str = "SELECT symbol, price, \
AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg_10, \
MAX(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS max_10 \
FROM market_data";

const S1_FRAME_10K_SQL: &str = "SELECT symbol, price, \
AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 9999 PRECEDING AND CURRENT ROW) AS avg_10k, \
MAX(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 9999 PRECEDING AND CURRENT ROW) AS max_10k \
FROM market_data";

const J1_SQL: &str = "SELECT a.symbol, a.trade_time, a.price, b.price AS prior_price \
FROM market_data a JOIN market_data b ON a.symbol = b.symbol \
AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND AND a.trade_time";

const J2_SQL: &str = "SELECT m.symbol, s.name, m.price \
FROM market_data m JOIN symbols s ON m.symbol = s.symbol";

const J3_SQL: &str = "SELECT x.symbol, x.window_start, x.trades, y.quantity \
FROM (SELECT symbol, window_start, COUNT(*) AS trades FROM market_data \
GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)) x \
JOIN (SELECT symbol, window_start, SUM(quantity) AS quantity FROM market_data \
GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '10' SECOND)) y \
ON x.symbol = y.symbol AND x.window_start = y.window_start";

const J3_BATCH_SQL: &str = "SELECT x.symbol, x.window_start, x.trades, y.quantity \
FROM (SELECT symbol, date_bin(INTERVAL '10 seconds', trade_time) AS window_start, COUNT(*) AS trades \
FROM market_data GROUP BY symbol, date_bin(INTERVAL '10 seconds', trade_time)) x \
JOIN (SELECT symbol, date_bin(INTERVAL '10 seconds', trade_time) AS window_start, SUM(quantity) AS quantity \
FROM market_data GROUP BY symbol, date_bin(INTERVAL '10 seconds', trade_time)) y \
ON x.symbol = y.symbol AND x.window_start = y.window_start";

/// Variants run only when named (`--scenario`): S1's moving AVG and MAX over frames of 10
/// and of 10 000 rows, to show that a row's cost does not depend on the frame length; J1,
/// an interval join (DataFusion batch compares every pair of rows of a symbol: run it at a
/// size DataFusion finishes); J2, a lookup of each record in a bounded table; J3, a window
/// join of two per-symbol 10-second aggregations.
pub fn variants() -> Vec<Scenario> {
    let frame = |id, description, sql| Scenario {
        id,
        description,
        data: GeneratorKind::MarketData,
        amount_base: 150.0,
        streaming_sql: sql,
        batch_sql: sql,
        keyed_by: Some(&["symbol"]),
        reads: 1,
        lookup_symbols: None,
    };
    vec![
        frame(
            "S1-frame10",
            "moving AVG and MAX over 10 rows",
            S1_FRAME_10_SQL,
        ),
        frame(
            "S1-frame10k",
            "moving AVG and MAX over 10 000 rows",
            S1_FRAME_10K_SQL,
        ),
        Scenario {
            id: "J1",
            description: "interval join of market_data with itself: same symbol, 1-second bound",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: J1_SQL,
            batch_sql: J1_SQL,
            keyed_by: None,
            reads: 2,
            lookup_symbols: None,
        },
        Scenario {
            id: "J2",
            description: "lookup join of market_data (10 000 symbols) into a 10 000-row table",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: J2_SQL,
            batch_sql: J2_SQL,
            keyed_by: None,
            reads: 1,
            lookup_symbols: Some(10_000),
        },
        Scenario {
            id: "J3",
            description: "window join of two per-symbol 10-second aggregations of market_data",
            data: GeneratorKind::MarketData,
            amount_base: 150.0,
            streaming_sql: J3_SQL,
            batch_sql: J3_BATCH_SQL,
            keyed_by: Some(&["symbol"]),
            reads: 2,
            lookup_symbols: None,
        },
    ]
}

/// The scenario or variant named `id` (case-insensitive).
pub fn scenario(id: &str) -> Option<Scenario> {
    scenarios()
        .into_iter()
        .chain(variants())
        .find(|s| s.id.eq_ignore_ascii_case(id))
}
