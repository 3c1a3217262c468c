//! Freshet streams and queries as datafusion-python tables: an object with
//! `__datafusion_table_provider__`, whose capsule is datafusion-ffi's `FFI_TableProvider`.
//!
//! A registered stream is handed over as its own provider (datafusion-python plans a scan of
//! it as Freshet does). A query is handed over as [`QueryTable`]: a scan of it runs the
//! query in Freshet's own session (its settings and runtime), whatever session reads it, and
//! yields its merged results.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, project_schema};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use freshet::StreamingQuery;
use futures::StreamExt;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::runtime::runtime;

/// A Freshet stream or query, ready to be registered in a `datafusion.SessionContext`.
#[pyclass(module = "freshet._freshet", frozen)]
pub struct TableExport {
    provider: Arc<dyn TableProvider>,
}

impl TableExport {
    pub fn new(provider: Arc<dyn TableProvider>) -> Self {
        Self { provider }
    }

    pub fn of_query(query: StreamingQuery) -> Self {
        Self::new(Arc::new(QueryTable::new(query)))
    }
}

#[pymethods]
impl TableExport {
    /// The provider capsule datafusion-python's `register_table` asks for; `session` gives
    /// the host's logical codec.
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let codec = logical_codec(session)?;
        let handle = runtime()?.handle().clone();
        let provider = FFI_TableProvider::new_with_ffi_codec(
            Arc::clone(&self.provider),
            false,
            Some(handle),
            codec,
        );
        PyCapsule::new_with_value(py, provider, c"datafusion_table_provider")
    }
}

/// The host's logical extension codec, from `session` (or its
/// `__datafusion_logical_extension_codec__`).
fn logical_codec(session: Bound<'_, PyAny>) -> PyResult<FFI_LogicalExtensionCodec> {
    let name = "__datafusion_logical_extension_codec__";
    let capsule = match session.hasattr(name)? {
        true => session.getattr(name)?.call0()?,
        false => session,
    };
    let capsule = capsule.cast::<PyCapsule>().map_err(PyErr::from)?;
    let data: NonNull<FFI_LogicalExtensionCodec> = capsule
        .pointer_checked(Some(c"datafusion_logical_extension_codec"))?
        .cast();
    // SAFETY: a capsule of this name holds the codec (datafusion-python's contract); it is
    // cloned, the capsule keeps its own.
    Ok(unsafe { data.as_ref() }.clone())
}

/// A streaming query's results as a table: each scan runs the query.
pub struct QueryTable {
    query: StreamingQuery,
}

impl fmt::Debug for QueryTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueryTable")
    }
}

impl QueryTable {
    fn new(query: StreamingQuery) -> Self {
        Self { query }
    }
}

#[async_trait]
impl TableProvider for QueryTable {
    fn schema(&self) -> SchemaRef {
        self.query.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(QueryResultsExec::try_new(
            self.query.clone(),
            projection.cloned(),
        )?))
    }
}

/// A leaf that runs a Freshet query in its own session and yields its merged results.
pub struct QueryResultsExec {
    query: StreamingQuery,
    projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl QueryResultsExec {
    fn try_new(query: StreamingQuery, projection: Option<Vec<usize>>) -> Result<Self> {
        let schema = project_schema(&query.schema(), projection.as_ref())?;
        let boundedness = match query.plan().boundedness().is_unbounded() {
            true => Boundedness::Unbounded {
                requires_infinite_memory: false,
            },
            false => Boundedness::Bounded,
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            boundedness,
        );
        Ok(Self {
            query,
            projection,
            properties: Arc::new(properties),
        })
    }
}

impl fmt::Debug for QueryResultsExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueryResultsExec")
    }
}

impl DisplayAs for QueryResultsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "FreshetQueryResults")
    }
}

impl ExecutionPlan for QueryResultsExec {
    fn name(&self) -> &str {
        "FreshetQueryResults"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let results = self.query.execute_merged()?;
        let schema = self.properties.eq_properties.schema().clone();
        let Some(projection) = self.projection.clone() else {
            return Ok(results);
        };
        let projected = results.map(move |batch| Ok(batch?.project(&projection)?));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, projected)))
    }
}
