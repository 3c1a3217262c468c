//! Freshet's benchmark crate: the reference scenarios, their data, the scenario runner behind
//! `freshet bench`, and the result comparison both the runner and the differential tests use.
//!
//! Every speed is measured next to DataFusion batch on the same data in the same run, and only
//! after both engines were checked to give the same result.

pub mod chart;
pub mod compare;
pub mod latency;
pub mod nexmark;
pub mod nexmark_runner;
pub mod report;
pub mod runner;
pub mod scaling;
pub mod scenarios;

pub use freshet_engine::{GeneratorKind, GeneratorSpec};
pub use runner::{
    BenchConfig, BenchSource, ScenarioInput, ScenarioResult, ScenarioRun, run_scenario,
};
pub use scenarios::{Scenario, scenario, scenarios, variants};
