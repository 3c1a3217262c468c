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
    /// Every batch to every output: the small side of a join whose other side stays where
    /// it is (one row per window, joined back to the rows of each window).
    Broadcast,
    /// Rows in runs of event time: a row of time `t` goes to output
    /// `floor((t - origin) / run) mod n` (rows without a time to output 0). A tumbling
    /// window's rows share an output when `run` is a whole number of windows starting at
    /// `origin`, so a windowed aggregation needs no hash of its keys; a replay in time order
    /// then goes out in a few slices of each batch instead of a gather of every row.
    TimeRuns(TimeRuns),
}

/// The runs of [`RoutingStrategy::TimeRuns`].
#[derive(Debug, Clone)]
pub struct TimeRuns {
    /// The event-time column (an integer or timestamp column of the input).
    pub time: Arc<dyn PhysicalExpr>,
    /// The length of a run, in the time column's unit.
    pub run: i64,
    /// Where runs start: a run starts at `origin + k * run`.
    pub origin: i64,
}

impl TimeRuns {
    /// The output of time `time` over `outputs` outputs.
    pub fn output_of(&self, time: i64, outputs: usize) -> usize {
        self.run_of(time, outputs).0
    }

    /// The output of time `time` over `outputs` outputs, and the bounds `[low, high)` of its
    /// run (`None` where they would overflow).
    pub fn run_of(&self, time: i64, outputs: usize) -> (usize, Option<(i64, i64)>) {
        let run = time.wrapping_sub(self.origin).div_euclid(self.run);
        let bounds = run
            .checked_mul(self.run)
            .and_then(|start| start.checked_add(self.origin))
            .and_then(|start| Some((start, start.checked_add(self.run)?)));
        (run.rem_euclid(outputs as i64) as usize, bounds)
    }
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
            Self::Broadcast => "broadcast",
            Self::TimeRuns(_) => "time_runs",
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
            Self::Hash(_) | Self::RoundRobin | Self::Broadcast | Self::TimeRuns(_) => None,
        }
    }

    /// Whether one key's rows can reach an output from several inputs, interleaved in an
    /// order the consumer sees (hash, time runs, fan-in and broadcast). Sticky keeps a key
    /// in one input; round-robin feeds only consumers that do not care.
    pub fn interleaves_keys(&self) -> bool {
        matches!(
            self,
            Self::Hash(_) | Self::FanIn | Self::Broadcast | Self::TimeRuns(_)
        )
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
            Self::TimeRuns(runs) => write!(f, "time_runs({}, run={})", runs.time, runs.run),
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
    fn time_runs_keep_a_run_on_one_output_and_take_turns() {
        let runs = TimeRuns {
            time: Arc::new(datafusion::physical_expr::expressions::Column::new("t", 0)),
            run: 120,
            origin: 30,
        };
        // Runs [30, 150), [150, 270), … take turns; times before the origin too.
        assert_eq!(runs.output_of(30, 2), 0);
        assert_eq!(runs.output_of(149, 2), 0);
        assert_eq!(runs.output_of(150, 2), 1);
        assert_eq!(runs.output_of(270, 2), 0);
        assert_eq!(runs.output_of(29, 2), 1);
        assert_eq!(runs.output_of(-90, 2), 1);
        assert_eq!(runs.output_of(-91, 2), 0);
        assert_eq!(runs.output_of(390, 3), 0);
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
