//! The input tasks of [`super::StreamExchangeExec`]: one per input partition, pulling its
//! batches, running the input step if any, routing the pieces into the output channels, and
//! moving the combined watermark of its domain (see the exchange's module documentation for
//! the ordering and alignment they keep). Also the idle-input watcher.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use freshet_partitioner::Router;
use futures::{StreamExt, future};
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use super::input_step::{InputStepState, StepOutput};
use super::ordered_merge::{MergeKeys, Routed, RoutedMessage};
use crate::checkpoint::{BarrierProbe, Checkpointing};
use crate::plan_util::unless_panicked;
use crate::progress::PartitionProgress;
use crate::watermark::{EventTime, WatermarkTracker};

/// The combined watermark, the last one sent, and how far in event time an input may run
/// ahead of it.
pub(super) struct Progress {
    pub tracker: WatermarkTracker,
    pub sent: i64,
    /// Twice the largest event-time span of one batch seen so far (`i64::MAX`: inputs are
    /// not aligned).
    pub drift_limit: i64,
}

impl Progress {
    /// The combined watermark, if it rose since it was last sent.
    fn advance(&mut self) -> Option<i64> {
        let watermark = self.tracker.watermark(Instant::now())?;
        (watermark > self.sent).then(|| {
            self.sent = watermark;
            watermark
        })
    }
}

pub(super) struct InputTask {
    pub input: usize,
    /// The input's index in its watermark domain's tracker.
    pub tracked: usize,
    pub plan: Arc<dyn ExecutionPlan>,
    pub context: Arc<TaskContext>,
    pub router: Router,
    /// One per output.
    pub senders: Vec<mpsc::Sender<RoutedMessage>>,
    /// The outputs of the input's watermark domain.
    pub watermark_senders: Vec<mpsc::Sender<RoutedMessage>>,
    /// When the outputs merge their inputs: the keys of this input's rows.
    pub merge_keys: Option<MergeKeys>,
    /// The progress of the operator below (a source before any filter, a window
    /// aggregation), plus the constant between it and the event-time column: it moves the
    /// watermark also when no row arrives (see [`PartitionProgress`]).
    pub input_progress: Option<(Arc<PartitionProgress>, i64)>,
    pub watermarks: Arc<Mutex<Progress>>,
    /// Woken whenever the combined watermark rises or an input ends.
    pub advanced: Arc<Notify>,
    pub event_time: Option<EventTime>,
    /// Whether this input waits for the others when it runs ahead in event time (see
    /// `wait_for_slower_inputs`).
    pub aligned: bool,
    pub step: Option<Box<dyn InputStepState>>,
    /// Held from reading the watermark for the step to having sent its output and any new
    /// watermark (see [`input_step`]).
    pub turns: Option<Arc<tokio::sync::Mutex<()>>>,
    /// In a checkpointed run over a stateful operator: where it records the barriers it
    /// passed, and the barriers (see `barrier_alignment`).
    pub barriers: Option<(BarrierProbe, Arc<Checkpointing>)>,
    /// The last barrier this input was seen to pass.
    pub passed: u64,
}

/// The routed pieces of a step's output (taken out of `output`).
fn route_output(
    router: &mut Router,
    output: &mut StepOutput,
) -> Result<Vec<(usize, datafusion::arrow::record_batch::RecordBatch)>> {
    match output.batch.take() {
        Some(batch) => router.route(batch),
        None => Ok(Vec::new()),
    }
}

/// Takes the turn, when the exchange's inputs take turns.
pub(super) async fn take_turn(
    turns: &Option<Arc<tokio::sync::Mutex<()>>>,
) -> Option<tokio::sync::MutexGuard<'_, ()>> {
    match turns {
        Some(turns) => Some(turns.lock().await),
        None => None,
    }
}

impl InputTask {
    pub async fn run(mut self) {
        let outcome = unless_panicked("an exchange's input", self.forward()).await;
        let senders = std::mem::take(&mut self.senders);
        let watermark_senders = std::mem::take(&mut self.watermark_senders);
        match outcome {
            Ok(()) => {
                if self.barriers.is_some() {
                    let input = self.input;
                    broadcast(&senders, || Ok(Routed::Ended { input })).await;
                }
                let _turn = take_turn(&self.turns).await;
                let watermark = {
                    let mut progress = self.watermarks.lock();
                    progress.tracker.finish(self.tracked);
                    progress.advance()
                };
                self.advanced.notify_waiters();
                if let Some(watermark) = watermark {
                    let key = self.watermark_key(watermark);
                    broadcast(&watermark_senders, || {
                        Ok(Routed::Watermark { watermark, key })
                    })
                    .await;
                }
            }
            Err(error) => {
                let error = Arc::new(error);
                broadcast(&senders, || {
                    Err(DataFusionError::Shared(Arc::clone(&error)))
                })
                .await;
            }
        }
    }

    async fn forward(&mut self) -> Result<()> {
        let mut stream = self.plan.execute(self.input, Arc::clone(&self.context))?;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            self.pass_barrier().await;
            // The batch's span in event time sets how far ahead an input may run, when the
            // inputs are aligned here.
            let (newest, span) = match &self.event_time {
                Some(event_time) if self.aligned => match event_time.range_in(&batch)? {
                    Some((oldest, newest)) => (Some(newest), newest.saturating_sub(oldest)),
                    None => (None, 0),
                },
                Some(_) if self.input_progress.is_some() => (None, 0),
                Some(event_time) => (event_time.newest_in(&batch)?, 0),
                None => (None, 0),
            };
            // The operator's progress, where it publishes one, says how far it has got; the
            // rows alone may say too little (a filter dropped them) or too much (a windowed
            // aggregation emits a window created late after later ones).
            let newest = match &self.input_progress {
                Some((progress, offset)) => progress
                    .newest(self.input)
                    .map(|newest| newest.saturating_add(*offset)),
                None => newest,
            };
            let (pieces, turn) = match &mut self.step {
                None => (self.router.route(batch)?, None),
                Some(step) => {
                    // Process and route at the watermark of now, then take the turn; only if
                    // the watermark meanwhile passed what the output holds for, again.
                    let watermark = self.watermarks.lock().sent;
                    let mut output = step.process(&batch, watermark)?;
                    let mut pieces = route_output(&mut self.router, &mut output)?;
                    let turn = take_turn(&self.turns).await;
                    let now = self.watermarks.lock().sent;
                    if now >= output.valid_below {
                        output = step.process(&batch, now)?;
                        pieces = route_output(&mut self.router, &mut output)?;
                    }
                    step.commit(&batch)?;
                    (pieces, turn)
                }
            };
            send_pieces(
                &self.senders,
                self.input,
                &mut self.merge_keys,
                pieces,
                newest,
            )
            .await?;
            // Merged by replay position, the outputs make the watermark themselves.
            let by_position = self
                .merge_keys
                .as_ref()
                .is_some_and(MergeKeys::is_by_position);
            if let Some(newest) = newest.filter(|_| !by_position) {
                let watermark = {
                    let mut progress = self.watermarks.lock();
                    progress
                        .tracker
                        .observe(self.tracked, newest, Instant::now());
                    progress.drift_limit = progress.drift_limit.max(span.saturating_mul(2));
                    progress.advance()
                };
                if let Some(watermark) = watermark {
                    self.advanced.notify_waiters();
                    let key = self.watermark_key(watermark);
                    broadcast(&self.watermark_senders, || {
                        Ok(Routed::Watermark { watermark, key })
                    })
                    .await;
                }
                drop(turn);
                wait_for_slower_inputs(self.tracked, &self.watermarks, &self.advanced).await;
            }
        }
        // What the step still holds (a partial step without a window holds its states
        // until its input ends).
        if let Some(step) = &mut self.step
            && let Some(held) = step.finish()?
        {
            let pieces = self.router.route(held)?;
            send_pieces(
                &self.senders,
                self.input,
                &mut self.merge_keys,
                pieces,
                None,
            )
            .await?;
        }
        Ok(())
    }

    /// Tells every output that the operator below has passed the pending barrier, if it
    /// has since the last one: before the batch it handed out after it.
    async fn pass_barrier(&mut self) {
        let Some((probe, checkpointing)) = &self.barriers else {
            return;
        };
        let Some(barrier) = checkpointing.barriers().pending() else {
            return;
        };
        if barrier.epoch > self.passed && probe.passed(self.input, barrier) {
            self.passed = barrier.epoch;
            let (input, epoch) = (self.input, barrier.epoch);
            broadcast(&self.senders, || Ok(Routed::BarrierPassed { input, epoch })).await;
        }
    }

    /// The merge key of `watermark` (unused by shared outputs).
    fn watermark_key(&self, watermark: i64) -> i64 {
        self.merge_keys
            .as_ref()
            .map_or(watermark, |keys| keys.of_watermark(watermark))
    }
}

/// Sends each piece to its output; when outputs merge their inputs, with the rows' merge
/// keys, and a progress key to every output that got no rows.
async fn send_pieces(
    senders: &[mpsc::Sender<RoutedMessage>],
    input: usize,
    merge_keys: &mut Option<MergeKeys>,
    pieces: Vec<(usize, datafusion::arrow::record_batch::RecordBatch)>,
    newest: Option<i64>,
) -> Result<()> {
    // An empty piece (a batch a filter emptied) is news only as progress.
    let pieces = pieces.into_iter().filter(|(_, piece)| piece.num_rows() > 0);
    let Some(keys) = merge_keys else {
        for (output, piece) in pieces {
            // A closed channel means its consumer stopped reading; the others go on.
            let piece = Routed::Piece {
                batch: piece,
                input,
            };
            let _ = senders[output].send(Ok(piece)).await;
        }
        return Ok(());
    };
    let mut served = vec![false; senders.len()];
    let mut keyed = Vec::new();
    for (output, piece) in pieces {
        served[output] = true;
        keyed.push((output, keys.of(&piece)?, piece));
    }
    keys.sent(newest);
    let progress = keys.progress();
    let by_position = keys.is_by_position();
    // To every output at once, each output's items in order: see the merge's documentation.
    let mut items: Vec<Vec<Routed>> = served
        .iter()
        .map(|served| match served {
            true => Vec::new(),
            false if by_position => Vec::new(),
            false => vec![Routed::Progress(progress)],
        })
        .collect();
    for (output, piece_keys, piece) in keyed {
        items[output].push(Routed::Rows(piece, Some(piece_keys)));
    }
    if by_position {
        // Every batch moves every output's watermark, as it moves one partition's.
        for output in &mut items {
            output.push(Routed::Passed {
                key: progress,
                newest,
            });
        }
    }
    let sends = senders.iter().zip(items).map(|(sender, items)| async move {
        for item in items {
            let _ = sender.send(Ok(item)).await;
        }
    });
    future::join_all(sends).await;
    Ok(())
}

/// Waits while input `input` is further ahead of the combined watermark than the drift
/// limit allows.
async fn wait_for_slower_inputs(input: usize, watermarks: &Mutex<Progress>, advanced: &Notify) {
    loop {
        let woken = advanced.notified();
        {
            let progress = watermarks.lock();
            let ahead = match (
                progress.tracker.input(input),
                progress.tracker.watermark(Instant::now()),
            ) {
                (Some(mine), Some(combined)) => mine.saturating_sub(combined),
                _ => 0,
            };
            if ahead <= progress.drift_limit {
                return;
            }
        }
        woken.await;
    }
}

/// With an idle timeout, looks at the combined watermark every `timeout`: an input that fell
/// silent stops holding it back even when no other input sends anything. Ends when every
/// input task has ended (it holds the outputs only weakly).
pub(super) async fn watch_idle_inputs(
    timeout: Duration,
    delay: i64,
    senders: Vec<mpsc::WeakSender<RoutedMessage>>,
    watermarks: Arc<Mutex<Progress>>,
    advanced: Arc<Notify>,
    turns: Option<Arc<tokio::sync::Mutex<()>>>,
) {
    let mut ticks = tokio::time::interval(timeout);
    loop {
        ticks.tick().await;
        let Some(senders) = senders
            .iter()
            .map(mpsc::WeakSender::upgrade)
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        let _turn = take_turn(&turns).await;
        let watermark = watermarks.lock().advance();
        if let Some(watermark) = watermark {
            advanced.notify_waiters();
            // Its key puts it after every row whose time it passes, on every input.
            let key = watermark.saturating_add(delay);
            broadcast(&senders, || Ok(Routed::Watermark { watermark, key })).await;
        }
    }
}

/// Sends `message` to every output at once (one full channel does not hold up the others).
async fn broadcast(senders: &[mpsc::Sender<RoutedMessage>], message: impl Fn() -> RoutedMessage) {
    future::join_all(senders.iter().map(|sender| sender.send(message()))).await;
}
