//! `freshet._freshet`: Freshet's Python bindings (the `freshet` package wraps them).
//!
//! A [`context::Context`] is the command line's session; its queries run on one tokio
//! runtime for the process ([`runtime`]); record batches cross in both directions through
//! Arrow's C data interface ([`arrow_ffi`]), so their buffers are not copied; a Freshet
//! stream or query can be handed to datafusion-python as a table provider ([`provider`]).

mod arrow_ffi;
mod context;
mod errors;
mod options;
mod provider;
mod query;
mod runtime;
mod write;

use pyo3::prelude::*;

// The allocator the command line runs with: the engine's batch-sized allocations cost less
// there than in the system allocator. Python's own objects keep Python's allocator; buffers
// handed across are freed by their owner's release callback, in the allocator they came from.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
fn _freshet(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<context::Context>()?;
    module.add_class::<query::Query>()?;
    module.add_class::<arrow_ffi::ExportedBatch>()?;
    module.add_class::<arrow_ffi::ExportedSchema>()?;
    module.add_class::<provider::TableExport>()?;
    module.add(
        "FreshetError",
        module.py().get_type::<errors::FreshetError>(),
    )?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
