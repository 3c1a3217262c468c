//! Small helpers shared by Freshet's operators.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, exec_err, internal_err};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{ExecutionPlanProperties, PlanProperties};
use futures::FutureExt;

/// The one child of a unary operator `name` being rebuilt with new `children`.
pub(crate) fn single_child(
    name: &str,
    mut children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    match children.len() {
        1 => Ok(children.swap_remove(0)),
        n => internal_err!("{name} takes one child, got {n}"),
    }
}

/// The machine's cores (1 if unknown): how many source partitions can decode at once. Read
/// once a process: on Linux the standard library reads the cgroup's CPU quota from files
/// on every call, several system calls for each query planned.
pub fn machine_cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

thread_local! {
    /// Whether a panic on this thread now is caught by [`unless_panicked`].
    static PANIC_BECOMES_ERROR: Cell<bool> = const { Cell::new(false) };
}

/// Whether a panic on this thread now would be caught and reported as the query's error
/// (a reader's panic on a corrupt page): a panic hook can then leave it unprinted, since the
/// error names it.
pub fn panic_becomes_error() -> bool {
    PANIC_BECOMES_ERROR.with(Cell::get)
}

/// Puts back the previous [`PANIC_BECOMES_ERROR`] when a poll ends.
struct RestorePanicFlag(bool);

impl Drop for RestorePanicFlag {
    fn drop(&mut self) {
        PANIC_BECOMES_ERROR.with(|flag| flag.set(self.0));
    }
}

/// `future`'s result, or an error naming `what` if it panicked (the Parquet decoder panics on
/// some corrupt pages). A panic in a task of its own would otherwise only end the task, and
/// its consumers would take the end of its channel for the end of its input: a silently
/// short answer.
pub async fn unless_panicked<T>(what: &str, future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut caught = std::pin::pin!(AssertUnwindSafe(future).catch_unwind());
    let outcome = std::future::poll_fn(|cx| {
        let _restore = RestorePanicFlag(PANIC_BECOMES_ERROR.with(|flag| flag.replace(true)));
        caught.as_mut().poll(cx)
    })
    .await;
    match outcome {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|message| message.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            exec_err!("{what} failed: {message}")
        }
    }
}

/// `exprs` evaluated on `batch`, as arrays.
pub(crate) fn evaluate(
    exprs: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}

/// The properties of a stateful streaming operator over an exchange with output `schema`:
/// incremental, as many partitions as its input, and bounded memory even on an unbounded
/// input. Keys are routed by the exchange, but its hash expressions name input columns, not
/// this operator's output: the output partitioning is only a partition count.
pub(crate) fn stateful_properties(
    input: &Arc<dyn ExecutionPlan>,
    schema: &SchemaRef,
) -> PlanProperties {
    let boundedness = match input.boundedness() {
        Boundedness::Bounded => Boundedness::Bounded,
        Boundedness::Unbounded { .. } => Boundedness::Unbounded {
            requires_infinite_memory: false,
        },
    };
    PlanProperties::new(
        EquivalenceProperties::new(Arc::clone(schema)),
        Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
        EmissionType::Incremental,
        boundedness,
    )
}

/// Calls `f` on each of `expressions` until it says stop (`ExecutionPlan::apply_expressions`).
pub(crate) fn visit_expressions<'a>(
    expressions: impl IntoIterator<Item = &'a Arc<dyn PhysicalExpr>>,
    f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
) -> Result<TreeNodeRecursion> {
    for expression in expressions {
        if f(expression)? == TreeNodeRecursion::Stop {
            return Ok(TreeNodeRecursion::Stop);
        }
    }
    Ok(TreeNodeRecursion::Continue)
}
