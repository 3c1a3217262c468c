//! [`install`]: adds Freshet to a DataFusion session.

use std::sync::Arc;

use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::limit_pushdown_past_window::LimitPushPastWindows;

use crate::aggregate_rule::StreamingAggregateRule;
use crate::alignment_rule::SourceAlignmentRule;
use crate::changelog_rule::ChangelogRule;
use crate::distribution_repair::DistributionRepair;
use crate::filter_projection_rule::FilterProjectionRule;
use crate::functions::{faster_builtin_functions, scalar_functions, window_functions};
use crate::interval_rule::FixedIntervalsAsDurations;
use crate::join_rule::StreamingJoinRule;
use crate::join_time_rule::KeepJoinEventTimes;
use crate::kernel_expressions::KernelExpressionRule;
use crate::limits_rule::{KeepLimitsRule, StreamSafeLimitPastWindows};
use crate::lookup_join_rule::{LookupJoinRule, LookupProbeRule};
use crate::options::FreshetOptions;
use crate::over_rule::StreamingOverRule;
use crate::read_placement_rule::ReadPlacementRule;
use crate::shared_filter_expr_rule::SharedFilterExpressionRule;
use crate::stateless_rule::StatelessExchangeRule;
use crate::stream_filter_rule::StreamFilterRule;
use crate::stream_safe_rules::stream_safe;
use crate::stream_sort_rule::StreamSortRule;
use crate::top_n_rule::TopNRule;
use crate::unbounded_check::UnboundedInputCheck;

/// Adds Freshet's window functions and planning rules to `builder`, keeping whatever else
/// it holds.
///
/// [`KeepLimitsRule`], [`LookupJoinRule`], [`StreamingJoinRule`], [`StreamingAggregateRule`],
/// [`StreamingJoinRule`] again (for joins of windowed aggregations),
/// [`StreamingAggregateRule`] again (for windows over those joins), [`ChangelogRule`],
/// [`StreamingOverRule`], [`StatelessExchangeRule`], [`StreamFilterRule`],
/// [`SharedFilterExpressionRule`], [`StreamSortRule`],
/// [`UnboundedInputCheck`], [`DistributionRepair`], the lookup probe,
/// [`ReadPlacementRule`], [`SourceAlignmentRule`] then [`KernelExpressionRule`] and [`FilterProjectionRule`] go right before DataFusion's own
/// `SanityCheckPlan` (and DataFusion's `LimitPushPastWindows` skips plans over streams): a
/// LIMIT DataFusion folded into an operator Freshet replaces stays a LIMIT, a stream
/// joined to a table probes the table, joins of two streams bounded in event time become
/// interval joins, windowed and changelog aggregations and window functions over streams
/// become Freshet's operators, a changelog's `op` column reaches the output (operators
/// that would read it as plain records are refused), the remaining round-robin repartitions of streams become
/// Freshet's exchange, filters over streams pass each batch on at once (a call both the
/// filter and the projection above it make is made once), an ORDER BY led by
/// an event time over an endless stream sorts as the watermark moves,
/// a query an endless stream still cannot answer fails with Freshet's explanation of
/// what to change, DataFusion's operators above Freshet's get the partitioning they need,
/// sources whose every core decodes for a light consumer are read where consumed, and the
/// sources below an interval join move together in event time, and integers divided by a
/// literal and columns compared with literals are computed by Freshet's kernels, and
/// filters filter only the columns that go on. The window functions and the `freshet.*` session options are added too,
/// and DataFusion's `SingleDistinctToGroupBy` and `PushDownLimit` are kept off the plans over
/// streams they would get wrong ([`crate::stream_safe_rules`]).
pub fn install(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    let optimizer = builder.physical_optimizers().take().unwrap_or_default();
    let mut rules = optimizer.rules;
    let sanity_check = rules
        .iter()
        .position(|rule| rule.name() == "SanityCheckPlan")
        .unwrap_or(rules.len());
    let past_windows = LimitPushPastWindows::new().name().to_string();
    for rule in rules.iter_mut() {
        if rule.name() == past_windows {
            *rule = Arc::new(StreamSafeLimitPastWindows::default());
        }
    }
    rules.insert(sanity_check, Arc::new(FilterProjectionRule));
    rules.insert(sanity_check, Arc::new(KernelExpressionRule));
    rules.insert(sanity_check, Arc::new(SourceAlignmentRule));
    rules.insert(sanity_check, Arc::new(ReadPlacementRule));
    rules.insert(sanity_check, Arc::new(LookupProbeRule));
    rules.insert(sanity_check, Arc::new(DistributionRepair));
    rules.insert(sanity_check, Arc::new(UnboundedInputCheck));
    rules.insert(sanity_check, Arc::new(StreamSortRule));
    rules.insert(sanity_check, Arc::new(SharedFilterExpressionRule));
    rules.insert(sanity_check, Arc::new(StreamFilterRule));
    rules.insert(sanity_check, Arc::new(StatelessExchangeRule));
    rules.insert(sanity_check, Arc::new(StreamingOverRule));
    rules.insert(sanity_check, Arc::new(ChangelogRule));
    // Before the changelog rule (which gives an emitting top-N its op column) and the OVER
    // rule (which would refuse its window over an endless stream).
    rules.insert(sanity_check, Arc::new(TopNRule));
    // Again, for windows over joins planned in the pass before.
    rules.insert(
        sanity_check,
        Arc::new(StreamingAggregateRule::after_joins()),
    );
    // Again, for joins of windowed aggregations: their window start has a watermark once
    // they are Freshet's.
    rules.insert(sanity_check, Arc::new(StreamingJoinRule));
    rules.insert(sanity_check, Arc::new(StreamingAggregateRule::default()));
    rules.insert(sanity_check, Arc::new(StreamingJoinRule));
    rules.insert(sanity_check, Arc::new(LookupJoinRule));
    rules.insert(sanity_check, Arc::new(KeepLimitsRule));
    let config = builder
        .config()
        .get_or_insert_with(Default::default)
        .options_mut();
    // No file statistics: DataFusion reads a Parquet column whose statistics say min = max
    // as that constant, and Parquet statistics leave NaN out, so a NaN beside one other value
    // would be read as that value. A replay reads every row anyway.
    config.execution.collect_statistics = false;
    let options = &mut config.extensions;
    if options.get::<FreshetOptions>().is_none() {
        options.insert(FreshetOptions::default());
    }
    builder
        .scalar_functions()
        .get_or_insert_with(Vec::new)
        .extend(
            window_functions()
                .into_iter()
                .chain(scalar_functions())
                .chain(faster_builtin_functions()),
        );
    let mut logical_rules = stream_safe(builder.optimizer().take().unwrap_or_default().rules);
    logical_rules.push(Arc::new(KeepJoinEventTimes));
    logical_rules.push(Arc::new(FixedIntervalsAsDurations));
    builder
        .with_optimizer_rules(logical_rules)
        .with_physical_optimizer_rules(rules)
}
