//! [`install`]: adds Freshet to a DataFusion session.

use std::sync::Arc;

use datafusion::execution::session_state::SessionStateBuilder;

use crate::unbounded_check::UnboundedInputCheck;

/// Adds Freshet's planning rules to `builder`, keeping whatever else it holds.
///
/// [`UnboundedInputCheck`] goes right before DataFusion's own `SanityCheckPlan`, so that a
/// query an endless stream cannot answer fails with Freshet's explanation of what to change.
pub fn install(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    let optimizer = builder
        .physical_optimizers()
        .take()
        .unwrap_or_default();
    let mut rules = optimizer.rules;
    let sanity_check = rules
        .iter()
        .position(|rule| rule.name() == "SanityCheckPlan")
        .unwrap_or(rules.len());
    rules.insert(sanity_check, Arc::new(UnboundedInputCheck));
    builder.with_physical_optimizer_rules(rules)
}
