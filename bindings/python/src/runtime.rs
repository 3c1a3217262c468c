//! The one tokio runtime every query of the process runs on, and [`wait`]: blocking on a
//! future from Python with the GIL released, checking for signals in between.
//!
//! A query's operators run as tasks on the runtime's worker threads whatever Python does;
//! a Python thread that waits for a result gives up the GIL while it waits, so other Python
//! threads run, and wakes every [`SIGNAL_CHECK`] to let Python run its signal handlers: a
//! Ctrl-C raises `KeyboardInterrupt` in the waiting thread within that time.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::FreshetError;

/// How often a thread blocked on a query checks for signals (Ctrl-C).
pub const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The process's runtime: one worker thread per core, as the command line has.
pub fn runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("freshet")
        .build()
        .map_err(|e| FreshetError::new_err(format!("cannot start Freshet's runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// Runs `future` to completion on the runtime with the GIL released, raising Python's
/// exception (KeyboardInterrupt) if a signal handler raises one while it waits; the future
/// is then dropped, which cancels what it was doing.
pub fn wait<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    let mut future = std::pin::pin!(future);
    loop {
        let slice = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, future.as_mut()).await })
        });
        match slice {
            Ok(output) => return Ok(output),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}

/// Runs `future` to completion like [`wait`], but a first signal handler exception
/// (Ctrl-C) calls `stop` and goes on waiting, so that the query flushes and its output
/// closes as the command line's first Ctrl-C does; the exception is raised once the future
/// is done. A second one drops the future at once.
pub fn wait_stopping<F>(py: Python<'_>, future: F, stop: impl Fn()) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    let mut future = std::pin::pin!(future);
    let mut interrupted: Option<PyErr> = None;
    loop {
        let slice = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(SIGNAL_CHECK, future.as_mut()).await })
        });
        match slice {
            Ok(output) => {
                return match interrupted {
                    Some(interrupt) => Err(interrupt),
                    None => Ok(output),
                };
            }
            Err(_elapsed) => {
                if let Err(interrupt) = py.check_signals() {
                    if interrupted.is_some() {
                        return Err(interrupt);
                    }
                    stop();
                    interrupted = Some(interrupt);
                }
            }
        }
    }
}
