//! `freshet.FreshetError`: every error Freshet raises, with its one-line message.

use datafusion::error::DataFusionError;
use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyException;

create_exception!(
    freshet,
    FreshetError,
    PyException,
    "An error Freshet reports: a query it refuses, a stream it cannot read, a run that failed."
);

/// `error` as a Python exception, with the message the command line prints.
pub fn to_py(error: DataFusionError) -> PyErr {
    FreshetError::new_err(error.to_string())
}
