//! The routing strategies of an exchange, and what each implies for the exchange's outputs:
//! how many there are, the partitioning DataFusion sees, which input feeds which output, and
//! over which inputs a watermark is combined.

use std::fmt;
use std::sync::Arc;

use datafusion::physical_expr::{Partitioning, PhysicalExpr};

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

/// Inputs whose watermark is combined, and the outputs that watermark goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkDomain {
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

impl WatermarkDomain {
    /// One domain: every input's watermark combined for every output.
    pub fn all(inputs: usize, outputs: usize) -> Self {
        Self {
            inputs: (0..inputs).collect(),
            outputs: (0..outputs).collect(),
        }
    }
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

    /// The outputs of an exchange over `inputs` input partitions asked for `streams`
    /// streams: fan-in has one; sticky keeps each input whole, so more inputs than streams
    /// share streams (`p mod n`) and fewer keep their own.
    pub fn output_count(&self, inputs: usize, streams: usize) -> usize {
        match self {
            Self::FanIn => 1,
            Self::Sticky => inputs.min(streams.max(1)),
            _ => streams.max(1),
        }
    }

    /// The partitioning of the outputs as DataFusion sees it: hash on the keys, or unknown.
    pub fn partitioning(&self, outputs: usize) -> Partitioning {
        match self {
            Self::Hash(keys) => Partitioning::Hash(keys.clone(), outputs),
            _ => Partitioning::UnknownPartitioning(outputs),
        }
    }

    /// The output every row of input `input` goes to, when the strategy fixes one.
    pub fn fixed_output(&self, input: usize, outputs: usize) -> Option<usize> {
        match self {
            _ if outputs <= 1 => Some(0),
            Self::Sticky => Some(input % outputs),
            Self::FanIn => Some(0),
            Self::Hash(_) | Self::RoundRobin => None,
        }
    }

    /// Whether one key's rows can reach an output from several inputs, interleaved in an
    /// order the consumer sees (hash and fan-in). Sticky keeps a key in one input;
    /// round-robin feeds only consumers that do not care.
    pub fn interleaves_keys(&self) -> bool {
        matches!(self, Self::Hash(_) | Self::FanIn)
    }

    /// The groups of inputs whose watermark is combined, and the outputs they feed. Sticky
    /// routing keeps each input on one output, so an output's watermark is the minimum over
    /// its own inputs only, and inputs on different outputs need not wait for each other.
    /// Every other strategy mixes inputs on every output: one group.
    pub fn watermark_domains(&self, inputs: usize, outputs: usize) -> Vec<WatermarkDomain> {
        if matches!(self, Self::Sticky) {
            return (0..outputs)
                .map(|output| WatermarkDomain {
                    inputs: (0..inputs)
                        .filter(|&i| self.fixed_output(i, outputs) == Some(output))
                        .collect(),
                    outputs: vec![output],
                })
                .collect();
        }
        vec![WatermarkDomain::all(inputs, outputs)]
    }
}

impl fmt::Display for RoutingStrategy {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Self::Hash(keys) => {
                let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                write!(f, "hash([{}])", keys.join(", "))
            }
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_keeps_inputs_whole_and_shares_streams_beyond_them() {
        assert_eq!(RoutingStrategy::Sticky.output_count(3, 2), 2);
        assert_eq!(RoutingStrategy::Sticky.output_count(1, 4), 1);
        assert_eq!(RoutingStrategy::FanIn.output_count(4, 4), 1);
        assert_eq!(RoutingStrategy::RoundRobin.output_count(1, 4), 4);
        assert_eq!(RoutingStrategy::Sticky.fixed_output(3, 2), Some(1));
        assert_eq!(RoutingStrategy::RoundRobin.fixed_output(3, 2), None);
    }

    #[test]
    fn sticky_watermarks_are_combined_per_output() {
        assert_eq!(
            RoutingStrategy::Sticky.watermark_domains(3, 2),
            vec![
                WatermarkDomain {
                    inputs: vec![0, 2],
                    outputs: vec![0]
                },
                WatermarkDomain {
                    inputs: vec![1],
                    outputs: vec![1]
                },
            ]
        );
        assert_eq!(
            RoutingStrategy::RoundRobin.watermark_domains(2, 2),
            vec![WatermarkDomain {
                inputs: vec![0, 1],
                outputs: vec![0, 1]
            }]
        );
    }
}
