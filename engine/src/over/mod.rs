//! Streaming window functions over ROWS frames, and RANGE frames reaching back a fixed
//! distance (`OVER (PARTITION BY … ORDER BY …)`): one output row per input row, computed as
//! soon as its frame is complete; and the top N rows of each key (`ROW_NUMBER() … <= N`).

mod changelog_over;
mod frame_aggregate;
mod frame_sum;
mod functions;
mod history;
mod lookahead;
mod over_window;
mod range_frame;
mod ranking;
pub(crate) mod reorder;
mod ring;
mod sparse_nulls;
mod top_n;

pub use changelog_over::{ChangelogOverExec, ChangelogOverSpec};
pub use frame_aggregate::FrameAggregateKind;
pub use functions::{FrameStart, OverFunction, OverFunctionKind, OverKernel};
pub use over_window::{OverSpec, OverWindowExec};
pub use ranking::RankingKind;
pub use top_n::{TieOrder, TopNEmit, TopNExec, TopNSpec};
