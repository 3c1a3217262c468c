//! Arrow's C data and C stream interfaces as Python capsules (the `__arrow_c_stream__`,
//! `__arrow_c_array__` and `__arrow_c_schema__` protocols), so that record batches cross
//! between Python and Freshet without a copy of their buffers: pyarrow, polars, pandas (through
//! pyarrow) and datafusion-python all speak them.

use std::ffi::CStr;

use datafusion::arrow::array::{Array, RecordBatchReader, StructArray};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ffi::{FFI_ArrowSchema, to_ffi};
use datafusion::arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use datafusion::arrow::record_batch::RecordBatch;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::errors::FreshetError;

const STREAM: &CStr = c"arrow_array_stream";
const SCHEMA: &CStr = c"arrow_schema";
const ARRAY: &CStr = c"arrow_array";

/// The C stream of `object` (anything with `__arrow_c_stream__`: a pyarrow Table or
/// RecordBatchReader, a polars DataFrame, a datafusion-python DataFrame…) as a reader.
pub fn import_stream(object: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    if !object.hasattr("__arrow_c_stream__")? {
        let kind = object.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "expected Arrow data (an object with __arrow_c_stream__, such as a pyarrow Table or RecordBatchReader), got {kind}"
        )));
    }
    let capsule = object.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>().map_err(PyErr::from)?;
    let pointer = capsule.pointer_checked(Some(STREAM))?;
    // SAFETY: a capsule named `arrow_array_stream` holds an FFI_ArrowArrayStream (the
    // protocol's contract); `from_raw` moves it out and marks the capsule's copy released,
    // so the capsule's destructor does not release it again.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr().cast()) };
    ArrowArrayStreamReader::try_new(stream)
        .map_err(|e| FreshetError::new_err(format!("cannot read the Arrow stream: {e}")))
}

/// `schema` as an `arrow_schema` capsule.
pub fn export_schema<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyCapsule>> {
    let schema = FFI_ArrowSchema::try_from(schema)
        .map_err(|e| FreshetError::new_err(format!("cannot export the schema: {e}")))?;
    PyCapsule::new_with_value(py, schema, SCHEMA)
}

/// `batch` as the `(arrow_schema, arrow_array)` capsules of a struct array, without copying
/// its buffers.
pub fn export_batch<'py>(
    py: Python<'py>,
    batch: &RecordBatch,
) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
    let array = StructArray::from(batch.clone());
    let (array, schema) = to_ffi(&array.to_data())
        .map_err(|e| FreshetError::new_err(format!("cannot export a batch: {e}")))?;
    Ok((
        PyCapsule::new_with_value(py, schema, SCHEMA)?,
        PyCapsule::new_with_value(py, array, ARRAY)?,
    ))
}

/// `reader` as an `arrow_array_stream` capsule.
pub fn export_stream<'py>(
    py: Python<'py>,
    reader: Box<dyn RecordBatchReader + Send>,
) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), STREAM)
}

/// A batch handed to Python: pyarrow (`pyarrow.record_batch(it)`) or any reader of the
/// C data interface takes its buffers as they are.
#[pyclass(module = "freshet._freshet", frozen)]
pub struct ExportedBatch {
    batch: RecordBatch,
}

impl ExportedBatch {
    pub fn new(batch: RecordBatch) -> Self {
        Self { batch }
    }
}

#[pymethods]
impl ExportedBatch {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema;
        export_batch(py, &self.batch)
    }

    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        export_schema(py, &self.batch.schema())
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }
}

/// The schema of a query or stream, for `pyarrow.schema(it)`.
#[pyclass(module = "freshet._freshet", frozen)]
pub struct ExportedSchema {
    schema: SchemaRef,
}

impl ExportedSchema {
    pub fn new(schema: SchemaRef) -> Self {
        Self { schema }
    }
}

#[pymethods]
impl ExportedSchema {
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        export_schema(py, &self.schema)
    }
}
