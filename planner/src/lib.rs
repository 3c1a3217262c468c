//! Freshet's planner: what turns streaming SQL into a DataFusion physical plan over Freshet's
//! sources and operators, and the [`StreamingContext`] applications embed.
//!
//! Freshet is a DataFusion extension: [`install`] adds it to any `SessionStateBuilder`, and
//! [`StreamingContext`] is a thin wrapper over `SessionContext` with helpers to register
//! streams and to run queries as one stream of results per output partition.

mod aggregate_rule;
mod alignment_rule;
mod changelog_key;
mod changelog_rule;
mod checkpointed;
mod constant_divisor;
mod context;
mod count_char;
mod date_part;
mod dialect;
mod distribution_repair;
mod execution_errors;
mod filter_projection_rule;
mod flink_functions;
mod functions;
mod install;
mod interval_rule;
mod java_format;
mod join_broadcast;
mod join_parts;
mod join_rule;
mod join_time_rule;
mod kernel_expressions;
mod limits_rule;
mod literal_set;
mod lookup_join_rule;
mod options;
mod over_rule;
mod query;
mod query_parameter;
mod read_placement_rule;
mod regexp_extract;
mod shared_filter_expr_rule;
mod split_part;
mod stateless_rule;
mod stream_filter_rule;
mod stream_inputs;
mod stream_safe_rules;
mod stream_sort_rule;
#[cfg(test)]
mod test_support;
mod to_char;
mod top_n_rule;
mod unbounded_check;

pub use aggregate_rule::StreamingAggregateRule;
pub use checkpointed::{CheckpointConfig, CheckpointedReport};
pub use constant_divisor::ConstantDivisorExpr;
pub use context::StreamingContext;
pub use count_char::count_char_function;
pub use dialect::{EmitMode, StreamingSql, WindowKind, rewrite, rewrite_with};
pub use distribution_repair::DistributionRepair;
pub use filter_projection_rule::FilterProjectionRule;
pub use functions::{faster_builtin_functions, scalar_functions, window_functions};
pub use install::install;
pub use join_rule::StreamingJoinRule;
pub use kernel_expressions::KernelExpressionRule;
pub use literal_set::{LiteralSet, LiteralSetExpr};
pub use lookup_join_rule::LookupJoinRule;
pub use options::FreshetOptions;
pub use over_rule::StreamingOverRule;
pub use query::StreamingQuery;
pub use read_placement_rule::ReadPlacementRule;
pub use regexp_extract::regexp_extract_function;
pub use split_part::split_part_function;
pub use stateless_rule::StatelessExchangeRule;
pub use to_char::to_char_function;
pub use unbounded_check::UnboundedInputCheck;
