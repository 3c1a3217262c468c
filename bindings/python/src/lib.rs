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
