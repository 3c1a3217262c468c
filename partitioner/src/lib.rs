//! Freshet's partitioner: how rows are routed between the parallel streams of a query
//! (hash, sticky, round-robin, fan-in) and how a strategy is chosen for each exchange.
//!
//! Until Freshet's own exchange lands, plans use DataFusion's `RepartitionExec` as the
//! physical optimizer places it; the planner depends on this crate so that the exchange can
//! replace it without changing the dependency graph.
