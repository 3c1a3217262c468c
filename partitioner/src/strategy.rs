//! The routing strategies of an exchange.

use std::fmt;
use std::sync::Arc;

use datafusion::physical_expr::PhysicalExpr;

/// How an exchange sends each input partition's rows to its output partitions.
#[derive(Debug, Clone)]
pub enum RoutingStrategy {
    /// Each row to the output its key columns hash to.
    Hash(Vec<Arc<dyn PhysicalExpr>>),
    /// No shuffle: input partition `p` to output `p mod n`.
    Sticky,
    /// Whole batches spread over the outputs in turn.
    RoundRobin,
    /// Everything to output 0.
    FanIn,
}

impl RoutingStrategy {
    /// A short name, as the query option `partitioning_strategy` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Hash(_) => "hash",
            Self::Sticky => "sticky",
            Self::RoundRobin => "round_robin",
            Self::FanIn => "fan_in",
        }
    }
}

impl fmt::Display for RoutingStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hash(keys) => {
                let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                write!(f, "hash([{}])", keys.join(", "))
            }
            other => f.write_str(other.name()),
        }
    }
}
