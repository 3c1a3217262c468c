//! Freshet's integration tests: one test binary, one module per capability.

mod aggregation;
mod bad_input;
mod checkpoints;
mod cli;
mod dictionaries;
mod distributed;
mod filters;
mod fuzz;
mod handed_over;
mod joins;
mod live;
mod lookups;
mod nexmark;
mod oracle;
mod over;
mod partitioning;
mod replays;
mod reproductions;
mod s0;
mod sql_fixtures;
mod support;
mod top_n;
mod two_phase;
