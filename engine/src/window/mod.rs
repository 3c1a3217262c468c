//! Event-time windows: their definition ([`WindowSpec`]) and the kernel that assigns records
//! to windows ([`window_starts`]).

mod assign;
mod spec;

pub use assign::{window_starts, window_starts_array, window_starts_counting};
pub use spec::{WindowSpec, duration_in_unit, duration_text, nanoseconds_per_unit, time_unit_type};
