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

/// Bytes between the value a pass over a column reads and the one it asks memory for.
pub const PREFETCH_AHEAD_BYTES: usize = 2_048;

/// `f` of each of `values`, in order, asking memory for the values [`PREFETCH_AHEAD_BYTES`]
/// ahead as it goes: for a kernel that is the first to read a column.
pub fn map_prefetched<T: Copy, U>(values: &[T], f: impl Fn(T) -> U) -> Vec<U> {
    let mut out = Vec::with_capacity(values.len());
    let Some(last) = values.len().checked_sub(1) else {
        return out;
    };
    let line = (64 / size_of::<T>().max(1)).max(1);
    let ahead = PREFETCH_AHEAD_BYTES / size_of::<T>().max(1);
    for (index, chunk) in values.chunks(line).enumerate() {
        prefetch(&values[(index * line + ahead).min(last)]);
        out.extend(chunk.iter().map(|value| f(*value)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_prefetched_maps_every_value_in_order() {
        for len in [0, 1, 8, 9, 1_000] {
            let values: Vec<i64> = (0..len).collect();
            let mapped = map_prefetched(&values, |v| v * 3 - 1);
            assert_eq!(mapped, values.iter().map(|v| v * 3 - 1).collect::<Vec<_>>());
        }
    }
}
