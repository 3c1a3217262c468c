//! A hint to the CPU to start loading memory that a kernel will read soon.
//!
//! A lookup in a table larger than the caches waits for memory at each dependent load (the
//! slot, then the key it names). Hinting the loads of a whole chunk of rows first lets those
//! waits overlap instead of following one another. And a pass over a column that is not in
//! the caches yet (the first operator to read a batch a source made a while ago) reads
//! memory twice as fast on this machine when it asks for the values a few kilobytes ahead
//! of those it folds (`cargo bench -p freshet-bench --bench kernels -- cold`).

/// Starts loading the cache line holding `value` into the first-level cache; no effect on
/// targets without the instruction.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch reads nothing (it
        // never faults, whatever the address).
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
