//! The Nexmark queries q0–q22 (the files in `bench/nexmark/`), with the batch SQL each is
//! checked against and the tables each reads.
//!
//! A query's batch SQL is its own text where that is plain DataFusion SQL; a windowed query
//! has a `qN.batch.sql` beside it that writes its windows with `date_bin` (and q11's sessions
//! with window functions). Where equal values tie and the standard query keeps one of them
//! (q9, q18, q19), batch SQL cannot say which arrived first, so the check compares only the
//! columns every tie-break gives alike ([`NexmarkQuery::tie_free_columns`]).

use freshet_engine::NexmarkTable;

/// One Nexmark query.
#[derive(Debug, Clone, Copy)]
pub struct NexmarkQuery {
    /// `q0` … `q22`.
    pub name: &'static str,
    /// Freshet's streaming SQL.
    pub sql: &'static str,
    /// The batch SQL that gives the same rows on DataFusion.
    pub batch_sql: &'static str,
    /// The Nexmark streams it reads.
    pub reads: &'static [NexmarkTable],
    /// Whether it reads the bounded table `side_input` (q13).
    pub side_input: bool,
    /// Where ties make the kept row depend on arrival order: the output columns to compare.
    pub tie_free_columns: Option<&'static [&'static str]>,
}

const BID: &[NexmarkTable] = &[NexmarkTable::Bid];
const AUCTION_BID: &[NexmarkTable] = &[NexmarkTable::Auction, NexmarkTable::Bid];
const PERSON_AUCTION: &[NexmarkTable] = &[NexmarkTable::Person, NexmarkTable::Auction];

macro_rules! query {
    ($name:literal, $reads:expr) => {
        query!(
            $name,
            $reads,
            include_str!(concat!("../nexmark/", $name, ".sql"))
        )
    };
    ($name:literal, $reads:expr, $batch:expr) => {
        NexmarkQuery {
            name: $name,
            sql: include_str!(concat!("../nexmark/", $name, ".sql")),
            batch_sql: $batch,
            reads: $reads,
            side_input: false,
            tie_free_columns: None,
        }
    };
}

macro_rules! windowed {
    ($name:literal, $reads:expr) => {
        query!(
            $name,
            $reads,
            include_str!(concat!("../nexmark/", $name, ".batch.sql"))
        )
    };
}

/// q0–q22, in order.
pub const NEXMARK_QUERIES: [NexmarkQuery; 23] = [
    query!("q0", BID),
    query!("q1", BID),
    query!("q2", BID),
    query!("q3", PERSON_AUCTION),
    query!("q4", AUCTION_BID),
    windowed!("q5", BID),
    // A seller's auctions closing in the same millisecond tie in the OVER window's order.
    NexmarkQuery {
        tie_free_columns: Some(&["seller"]),
        ..query!("q6", AUCTION_BID)
    },
    windowed!("q7", BID),
    windowed!("q8", PERSON_AUCTION),
    NexmarkQuery {
        tie_free_columns: Some(&["id", "price", "seller", "category"]),
        ..query!("q9", AUCTION_BID)
    },
    query!("q10", BID),
    windowed!("q11", BID),
    windowed!("q12", BID),
    NexmarkQuery {
        side_input: true,
        ..query!("q13", BID)
    },
    query!("q14", BID),
    query!("q15", BID),
    query!("q16", BID),
    query!("q17", BID),
    NexmarkQuery {
        tie_free_columns: Some(&["auction", "bidder", "date_time"]),
        ..query!("q18", BID)
    },
    NexmarkQuery {
        tie_free_columns: Some(&["auction", "price", "rank_number"]),
        ..query!("q19", BID)
    },
    query!("q20", AUCTION_BID),
    query!("q21", BID),
    query!("q22", BID),
];

/// The query named `name` (`q5` or `5`).
pub fn nexmark_query(name: &str) -> Option<&'static NexmarkQuery> {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix('q').unwrap_or(&name);
    NEXMARK_QUERIES
        .iter()
        .find(|query| query.name.strip_prefix('q') == Some(name))
}
