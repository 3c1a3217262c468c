//! The reference scenarios of the project's `scenarios.md`: their streaming SQL, the
//! DataFusion batch SQL that gives the same result on bounded data, and their data.

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
    /// Freshet's query, as in `scenarios.md`.
    pub streaming_sql: &'static str,
    /// The DataFusion batch query with the same result on bounded data.
    pub batch_sql: &'static str,
}

impl Scenario {
    /// The table name the queries read.
    pub fn table(&self) -> &'static str {
        match self.data {
            GeneratorKind::MarketData => "market_data",
            GeneratorKind::Orders => "orders",
        }
    }

    /// The generator spec of this scenario's data with `records` records.
    pub fn data_spec(&self, records: u64) -> GeneratorSpec {
        let mut spec = GeneratorSpec::new(self.data, Some(records));
        spec.amount_base = self.amount_base;
        spec
    }
}

const S0_SQL: &str =
    "SELECT order_id, customer_id, order_date, total_amount FROM orders WHERE total_amount > 100";

/// The scenarios Freshet runs today.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            id: "S0",
            description: "pure SELECT (every row passes)",
            data: GeneratorKind::Orders,
            amount_base: 150.0,
            streaming_sql: S0_SQL,
            batch_sql: S0_SQL,
        },
        Scenario {
            id: "S0-half",
            description: "pure SELECT (about half the rows fail the filter)",
            data: GeneratorKind::Orders,
            amount_base: 51.0,
            streaming_sql: S0_SQL,
            batch_sql: S0_SQL,
        },
    ]
}

/// The scenario named `id` (case-insensitive).
pub fn scenario(id: &str) -> Option<Scenario> {
    scenarios()
        .into_iter()
        .find(|s| s.id.eq_ignore_ascii_case(id))
}
