//! The `freshet` command-line program.

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    freshet::memory::without_transparent_huge_pages();
    freshet::cli::main()
}
