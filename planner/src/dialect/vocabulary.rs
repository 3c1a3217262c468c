//! What the dialect tells the planner about a query: when it emits and the kind of its window.

/// When a streaming aggregation emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmitMode {
    /// Not said: windows emit when they close, plain GROUP BY at the end of bounded input.
    #[default]
    Default,
    /// `EMIT FINAL`.
    Final,
    /// `EMIT CHANGES`: an upsert changelog.
    Changes,
}

/// The kind of event-time window a query groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Tumble,
    Hop,
    Session,
}
