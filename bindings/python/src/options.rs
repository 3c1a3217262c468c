//! Keyword arguments as Freshet's textual options: the same names and values the command
//! line takes (`watermark="5s"`, `records=1_000_000`, `partitioned_by=["a", "b"]`).

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

/// `value` as the text the command line would take: booleans as true/false, numbers as
/// written, a `datetime.timedelta` in milliseconds, a list of columns joined with `+`.
pub fn option_text(key: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if value.is_instance_of::<PyBool>() {
        return Ok(value.extract::<bool>()?.to_string());
    }
    if value.is_instance_of::<PyString>() {
        return value.extract();
    }
    if let Ok(integer) = value.extract::<i64>() {
        return Ok(integer.to_string());
    }
    if let Ok(float) = value.extract::<f64>() {
        return Ok(float.to_string());
    }
    if let Ok(duration) = value.extract::<Duration>() {
        return Ok(format!("{}ms", duration.as_millis()));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let parts: Vec<String> = value
            .try_iter()?
            .map(|item| item?.extract())
            .collect::<PyResult<_>>()?;
        return Ok(parts.join("+"));
    }
    Err(PyTypeError::new_err(format!(
        "option {key}: expected a string, number, bool, timedelta or list of column names, got {}",
        value.get_type().name()?
    )))
}

/// Every `key=value` of `kwargs` (None values left out), in order.
pub fn option_pairs(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, String)>> {
    let Some(kwargs) = kwargs else {
        return Ok(Vec::new());
    };
    let mut pairs = Vec::new();
    for (key, value) in kwargs.iter() {
        if value.is_none() {
            continue;
        }
        let key: String = key.extract()?;
        let text = option_text(&key, &value)?;
        pairs.push((key, text));
    }
    Ok(pairs)
}
