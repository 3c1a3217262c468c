//! Freshet's streaming SQL dialect, rewritten into SQL that DataFusion parses and plans.
//!
//! DataFusion's parser reads `WINDOW` after GROUP BY as a named-window clause and knows no
//! `EMIT`, so the streaming clauses are rewritten on the token stream first (see
//! [`rewrite`]): window clauses of every accepted form become a window function key in
//! GROUP BY (`tumble(ts, size)`, `hop(ts, slide, size)`, `session(ts, gap)`), `window_start`
//! and `window_end` become expressions over that key, and `EMIT …` becomes a flag. Because
//! `tumble()` computes what `date_bin` computes, the rewritten query is also valid batch SQL.
//! OVER clauses are rewritten too (the predecessor's `ROWS WINDOW BUFFER n ROWS`, `EXPIRE
//! AFTER … INACTIVITY`, extended named windows): see `over`.

mod over;
mod rewrite;
mod tokens;

pub use rewrite::{EmitMode, StreamingSql, WindowKind, rewrite};
