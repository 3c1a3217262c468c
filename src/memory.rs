//! How the `freshet` program's memory is mapped: in small pages, without transparent huge
//! pages.
//!
//! mimalloc, the program's allocator, asks the kernel for transparent huge pages
//! (`madvise(MADV_HUGEPAGE)` on its arenas). On a kernel whose huge pages are enabled "for
//! madvise" with defragmentation "on madvise" (a common default), a fault in such memory
//! that finds no free 2 MiB page compacts memory on the spot, and a purge of part of a huge
//! page splits it. Queries whose state grows (a join's kept rows, a window's groups) then
//! spend a varying and often larger share of their time in the kernel than in their own
//! work, from one run to the next on the same input (Nexmark q9 over 10 M generated events:
//! 1.3–2.3 s of system time against 0.3–0.5 s in small pages; docs/benchmarks.md). Small
//! pages cost a fault per 4 KiB, a fixed and smaller price. This is the advice databases
//! commonly give for their processes.
//!
//! A user who wants huge pages says so to mimalloc (`MIMALLOC_ALLOW_THP=1`), and is obeyed.
//! The Python module does not change the interpreter's process.

/// The environment variable with which a user chooses mimalloc's use of huge pages.
const ALLOW_THP: &str = "MIMALLOC_ALLOW_THP";

/// Turns transparent huge pages off for this process (Linux; elsewhere nothing), unless the
/// user chose otherwise. Call at the start of a program.
pub fn without_transparent_huge_pages() {
    if std::env::var_os(ALLOW_THP).is_some() {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `prctl(PR_SET_THP_DISABLE)` sets a flag of this process's memory map; it takes
    // no pointers. An old kernel without it returns an error, which leaves things as they were.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_program_runs_without_transparent_huge_pages() {
        without_transparent_huge_pages();
        // SAFETY: reads the flag set above.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        let chosen_by_user = std::env::var_os(ALLOW_THP).is_some();
        assert!(
            chosen_by_user || disabled == 1,
            "PR_GET_THP_DISABLE gave {disabled}"
        );
    }
}
