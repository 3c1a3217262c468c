//! [`DealExec`]: one input partition dealt to several output partitions in turns.
//!
//! A paced replay of files split into source partitions the user chose would give each
//! partition whole row groups (or files) that follow one another in event time: paced by
//! records, the partitions then read different stretches of time at once, and an
//! event-time merge downstream holds the later ones back by a row group's worth of time.
//! Instead the replay is read by one partition and dealt, as the generators and in-memory
//! replays deal their records, so that every output partition covers the whole time range
//! in order:
//!
//! 1. A task reads the input partition and cuts each batch into slices of `slice_rows` rows
//!    (zero-copy views).
//! 2. Slices go to the output partitions in turns, through a channel of a few slices each.
//!    When the output whose turn it is has no room (its consumer waits: an event-time merge
//!    holds back a partition that is ahead until the others catch up), the slice goes to the
//!    next output with room, and when none has room the task waits for the first that
//!    makes some. Strict turns would deadlock there: the waiting consumer waits for the
//!    very partitions that the full channel holds up. No output is ever skipped otherwise.
//! 3. The end of the input ends every output; an error (or a panic of the reader) is handed
//!    to one output, which ends the query.
//!
//! Each output partition keeps the input's order; paced at `rate / n` records per second
//! each (by [`super::StreamSourceExec`]), the partitions stay within a slice of each other.
//! Each slice carries its number in the replay ([`DealExec::execute_positioned`]): the
//! exchange merges the partitions by it, so the dealing, which depends on timing, does not
//! change the order records are applied in.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{Partitioning, PhysicalExpr};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::file_split::keep_split;
use crate::plan_util::{single_child, unless_panicked};

/// A slice of the replay and its number.
type Slice = Result<(RecordBatch, i64)>;

/// Slices each output partition's channel holds ahead of its consumer.
const SLICES_AHEAD: usize = 4;

/// Deals one input partition's rows to `partitions` outputs in turns; see the module
/// documentation.
#[derive(Debug)]
pub struct DealExec {
    input: Arc<dyn ExecutionPlan>,
    partitions: usize,
    slice_rows: usize,
    properties: Arc<PlanProperties>,
    /// The outputs' receivers, made at the first `execute`; each is taken once.
    dealt: Mutex<Option<Dealt>>,
}

/// The running deal: the reading task, held here until every output holds it, and the
/// receivers not yet handed out.
struct Dealt {
    task: Option<Arc<SpawnedTask<()>>>,
    receivers: Vec<Option<mpsc::Receiver<Slice>>>,
}

impl fmt::Debug for Dealt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dealt").finish_non_exhaustive()
    }
}

impl DealExec {
    /// `input` (one partition) dealt to `partitions` outputs in slices of `slice_rows` rows.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        partitions: usize,
        slice_rows: usize,
    ) -> Result<Self> {
        if input.output_partitioning().partition_count() != 1 {
            return internal_err!("DealExec deals one input partition");
        }
        let properties = input
            .properties()
            .as_ref()
            .clone()
            .with_partitioning(Partitioning::UnknownPartitioning(partitions.max(1)));
        Ok(Self {
            input,
            partitions: partitions.max(1),
            slice_rows: slice_rows.max(1),
            properties: Arc::new(properties),
            dealt: Mutex::new(None),
        })
    }

    /// Starts the task that reads the input and deals its slices, from slice `resumed_at` on.
    fn start(&self, context: Arc<TaskContext>, resumed_at: i64) -> Result<Dealt> {
        let mut input = self.input.execute(0, context)?;
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..self.partitions)
            .map(|_| mpsc::channel(SLICES_AHEAD))
            .unzip();
        let slice_rows = self.slice_rows;
        let task = SpawnedTask::spawn(async move {
            let mut dealer = Dealer { senders, turn: 0 };
            let mut dealt = 0i64;
            loop {
                let next = unless_panicked("reading the replay", async {
                    input.next().await.transpose()
                })
                .await;
                let batch = match next {
                    Ok(Some(batch)) => batch,
                    Ok(None) => return,
                    Err(error) => {
                        dealer.send(Err(error)).await;
                        return;
                    }
                };
                for start in (0..batch.num_rows()).step_by(slice_rows) {
                    // A resumed run's slices before its checkpoint's barrier were applied.
                    if dealt >= resumed_at {
                        let rows = slice_rows.min(batch.num_rows() - start);
                        if !dealer.send(Ok((batch.slice(start, rows), dealt))).await {
                            return;
                        }
                    }
                    dealt += 1;
                }
            }
        });
        Ok(Dealt {
            task: Some(Arc::new(task)),
            receivers: receivers.into_iter().map(Some).collect(),
        })
    }
}

impl DealExec {
    /// Output `partition`'s slices, each with its number in the replay (the order the reader
    /// cut them in), from slice `resumed_at` on (the replay is read again up to it: the
    /// numbers follow the reader's batches).
    pub fn execute_positioned(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
        resumed_at: i64,
    ) -> Result<BoxStream<'static, Slice>> {
        let mut dealt = self.dealt.lock();
        if dealt.is_none() {
            *dealt = Some(self.start(context, resumed_at)?);
        }
        let Some(Dealt { task, receivers }) = dealt.as_mut() else {
            return internal_err!("DealExec started no deal");
        };
        let (Some(receiver), Some(held)) = (
            receivers.get_mut(partition).and_then(Option::take),
            task.as_ref(),
        ) else {
            return internal_err!("DealExec partition {partition} executed twice or not there");
        };
        // Each output holds the task: it stops when the last output is dropped.
        let held = Arc::clone(held);
        if receivers.iter().all(Option::is_none) {
            *task = None;
        }
        Ok(
            futures::stream::unfold((receiver, held), |(mut receiver, held)| async {
                let slice = receiver.recv().await?;
                Some((slice, (receiver, held)))
            })
            .boxed(),
        )
    }
}

/// The outputs' senders and whose turn it is.
struct Dealer {
    senders: Vec<mpsc::Sender<Slice>>,
    turn: usize,
}

impl Dealer {
    /// Sends `item` to the first output, from the one whose turn it is, that has room, or
    /// else to the first that makes room. An output whose consumer waits (an event-time
    /// merge holding back a partition that is ahead) never holds up the others, which the
    /// consumer may be waiting for. False once every output is gone (the query ended).
    async fn send(&mut self, item: Slice) -> bool {
        let outputs = self.senders.len();
        let open = (0..outputs).map(|step| (self.turn + step) % outputs);
        let mut waits = Vec::with_capacity(outputs);
        for index in open {
            match self.senders[index].try_reserve() {
                Ok(permit) => {
                    permit.send(item);
                    self.turn = (index + 1) % outputs;
                    return true;
                }
                Err(TrySendError::Full(())) => {
                    let reserve = self.senders[index].reserve();
                    waits.push(reserve.map(move |reserved| (index, reserved)).boxed());
                }
                Err(TrySendError::Closed(())) => {}
            }
        }
        while !waits.is_empty() {
            let ((index, reserved), _, rest) = futures::future::select_all(waits).await;
            if let Ok(permit) = reserved {
                permit.send(item);
                self.turn = (index + 1) % outputs;
                return true;
            }
            waits = rest;
        }
        false
    }
}

impl DisplayAs for DealExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "DealExec: partitions=1->{}, slices of {} rows in turns",
            self.partitions, self.slice_rows
        )
    }
}

impl ExecutionPlan for DealExec {
    fn name(&self) -> &str {
        "DealExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // DataFusion's `repartition_file_scans` may have re-split the scan by byte ranges:
        // the replay stays one reader, in order.
        let input = keep_split(single_child("DealExec", children)?, &self.input)?;
        Ok(Arc::new(Self::try_new(
            input,
            self.partitions,
            self.slice_rows,
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let batches = self
            .execute_positioned(partition, context, 0)?
            .map(|item| item.map(|(batch, _)| batch));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            batches,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::prelude::SessionContext;
    use futures::TryStreamExt;
    use std::time::Duration;

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let column = Arc::new(Int64Array::from_iter_values(values));
        RecordBatch::try_new(schema, vec![column]).unwrap()
    }

    fn flat(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    #[tokio::test]
    async fn slices_go_to_the_partitions_in_turns_in_order() {
        let input = vec![batch(0..5), batch(5..10)];
        let schema = input[0].schema();
        let source = MemorySourceConfig::try_new_exec(&[input], schema, None).unwrap();
        let exec = DealExec::try_new(source, 2, 2).unwrap();
        assert_eq!(exec.properties().output_partitioning().partition_count(), 2);
        let context = SessionContext::new().task_ctx();
        // Both outputs are read at once: the dealer waits on a full channel.
        let first = exec.execute(0, Arc::clone(&context)).unwrap();
        let second = exec.execute(1, context).unwrap();
        let (first, second): (Vec<RecordBatch>, Vec<RecordBatch>) =
            futures::try_join!(first.try_collect(), second.try_collect()).unwrap();
        // Slices of two rows, a batch's last one shorter: [0 1] [2 3] [4] | [5 6] [7 8] [9].
        assert_eq!(flat(&first), [0, 1, 4, 7, 8]);
        assert_eq!(flat(&second), [2, 3, 5, 6, 9]);
        let again = exec.execute(0, SessionContext::new().task_ctx());
        assert!(again.is_err(), "a partition is dealt once");
    }

    /// A consumer that stops reading one partition (an event-time merge holding back a
    /// partition that is ahead) does not stop the others: their slices go on, and the held
    /// partition gets the rest once read. Dealt in strict turns, this would deadlock.
    #[tokio::test]
    async fn a_partition_not_read_does_not_hold_up_the_others() {
        let input: Vec<RecordBatch> = (0..10).map(|b| batch(b * 10..(b + 1) * 10)).collect();
        let schema = input[0].schema();
        let source = MemorySourceConfig::try_new_exec(&[input], schema, None).unwrap();
        let exec = DealExec::try_new(source, 2, 5).unwrap();
        let context = SessionContext::new().task_ctx();
        let held = exec.execute(0, Arc::clone(&context)).unwrap();
        let read = exec.execute(1, context).unwrap();
        let read: Vec<RecordBatch> =
            tokio::time::timeout(Duration::from_secs(30), read.try_collect())
                .await
                .expect("partition 1 waited for partition 0")
                .unwrap();
        let held: Vec<RecordBatch> = held.try_collect().await.unwrap();
        let (held, read) = (flat(&held), flat(&read));
        assert!(held.len() <= SLICES_AHEAD * 5 + 5, "{held:?}");
        assert!(held.is_sorted() && read.is_sorted());
        let mut all = [held, read].concat();
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<i64>>());
    }
}
