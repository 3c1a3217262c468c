//! The exactly-once sink of a checkpointed run, and the run's checkpoint coordinator.
//!
//! A file output is a directory of part files, one per checkpoint epoch that wrote rows:
//! rows handed out between barriers `e - 1` and `e` are written to the pending part
//! `.part-<e>.<ext>.pending` (hidden from readers of the directory by its leading dot).
//! Once every output partition has passed barrier `e`, the part is closed and synced, the
//! checkpoint completed (its manifest names the part), and only then the part renamed to
//! `part-<e>.<ext>`. A resumed run renames the parts its checkpoint names that are still
//! pending and deletes every other pending part: rows after the checkpoint are written
//! again by the resumed run, and the committed output never holds a row twice nor misses
//! one. Outputs that cannot be committed (the terminal table, stdout, `null`) are written
//! as they come: at-least-once.
//!
//! The late output (the records operators dropped as late) is a second directory of parts,
//! committed with the same checkpoints: an operator partition tags each late batch with the
//! barriers it had passed, so rows it dropped before barrier `e` go to part `e`. It sends them
//! before it passes the barrier on, so by the time every output partition has passed barrier
//! `e` they wait in the late channel, and are written before the part is closed. The
//! manifest names the late output's parts under `late/`.
//!
//! The coordinator places a barrier once the interval has passed since the last checkpoint
//! completed (in records read, or in time). Each output partition is read by a task
//! of its own; before it forwards a batch it asks the partition's [`BarrierProbe`] whether
//! the barrier was passed before that batch was handed out, and if so says so first. When
//! every output partition has ended, a last checkpoint marks the query finished.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err, plan_err};
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, watch};

use super::{BatchWriter, SinkSpec, SinkSummary};
use crate::checkpoint::{
    Barrier, BarrierProbe, Checkpointing, Fingerprint, Manifest, fail_point, sync_dir,
};
use crate::late_records::LateBatch;

/// When barriers are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointInterval {
    /// After this many records read since the last barrier.
    Records(u64),
    /// After this much time since the last barrier.
    Time(Duration),
}

impl std::str::FromStr for CheckpointInterval {
    type Err = datafusion::error::DataFusionError;

    /// `10s`, `500ms`, `2m` (a duration) or `1M`, `250k`, `5000` (a record count).
    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        let count = |digits: &str, scale: u64| {
            digits
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(|n| Self::Records(n * scale))
        };
        let parsed = if let Some(digits) = text.strip_suffix('M') {
            count(digits, 1_000_000)
        } else if let Some(digits) = text.strip_suffix('k').or(text.strip_suffix('K')) {
            count(digits, 1_000)
        } else if text.chars().all(|c| c.is_ascii_digit()) {
            count(text, 1)
        } else {
            crate::parse_duration(text)
                .ok()
                .filter(|d| !d.is_zero())
                .map(Self::Time)
        };
        match parsed {
            Some(interval) => Ok(interval),
            None => plan_err!(
                "checkpoint interval '{text}': expected a duration (10s, 500ms, 2m) or a record count (1M, 250k, 5000)"
            ),
        }
    }
}

/// Where a checkpointed run's rows (or its late records) go.
pub enum PartOutput {
    /// A directory of committed part files in the format of `spec`, named in the manifest
    /// after `prefix` (empty for the query's rows, `late/` for the late output).
    Parts {
        dir: PathBuf,
        spec: SinkSpec,
        prefix: &'static str,
    },
    /// A writer that cannot commit (terminal, stdout, null): at-least-once.
    Direct(Box<dyn BatchWriter>),
}

/// How the manifest names the late output's parts.
const LATE_PREFIX: &str = "late/";

impl PartOutput {
    /// The output of `spec`: a directory of parts for a file, else `direct`.
    pub fn of(
        spec: &SinkSpec,
        direct: impl FnOnce() -> Result<Box<dyn BatchWriter>>,
    ) -> Result<Self> {
        Self::named(spec, "", direct)
    }

    /// The late output of `spec`: a directory of parts for a file, else `direct`.
    pub fn late(
        spec: &SinkSpec,
        direct: impl FnOnce() -> Result<Box<dyn BatchWriter>>,
    ) -> Result<Self> {
        Self::named(spec, LATE_PREFIX, direct)
    }

    fn named(
        spec: &SinkSpec,
        prefix: &'static str,
        direct: impl FnOnce() -> Result<Box<dyn BatchWriter>>,
    ) -> Result<Self> {
        Ok(match spec.path() {
            Some(dir) => Self::Parts {
                dir: dir.to_path_buf(),
                spec: spec.clone(),
                prefix,
            },
            None => Self::Direct(direct()?),
        })
    }

    /// Whether the output is committed with the checkpoints (exactly-once).
    pub fn is_exactly_once(&self) -> bool {
        matches!(self, Self::Parts { .. })
    }

    /// Brings the part directory in line with `restored`: commits the parts it covers that
    /// are still pending and deletes every other pending part. A directory with committed
    /// parts and no checkpoint to resume is another run's output, and refused.
    pub fn recover(&self, restored: Option<&Manifest>) -> Result<()> {
        let Self::Parts { dir, prefix, .. } = self else {
            return Ok(());
        };
        if dir.exists() && !dir.is_dir() {
            return plan_err!(
                "with a checkpoint directory, the output {} is a directory of part files, and a file is in the way",
                dir.display()
            );
        }
        fs::create_dir_all(dir)?;
        let covered = restored.map_or_else(Vec::new, |manifest| {
            manifest
                .outputs
                .iter()
                .filter_map(|(pending, committed)| {
                    let pending = pending.strip_prefix(prefix)?;
                    let committed = committed.strip_prefix(prefix)?;
                    (!pending.contains('/') && !committed.contains('/'))
                        .then(|| (pending.to_string(), committed.to_string()))
                })
                .collect::<Vec<_>>()
        });
        for (pending, committed) in &covered {
            if dir.join(pending).exists() {
                fs::rename(dir.join(pending), dir.join(committed))?;
            }
        }
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().to_string();
            if name.starts_with(".part-") && name.ends_with(".pending") {
                fs::remove_file(dir.join(&name))?;
                continue;
            }
            let Some(epoch) = name
                .strip_prefix("part-")
                .and_then(|rest| rest.split('.').next())
                .and_then(|epoch| epoch.parse::<u64>().ok())
            else {
                continue;
            };
            match restored {
                None => {
                    return plan_err!(
                        "the output directory {} holds part files of another run, and there is no checkpoint to resume: remove it, or resume with that run's checkpoint directory",
                        dir.display()
                    );
                }
                // A part after the checkpoint resumed (one whose own checkpoint was found
                // corrupt) holds rows the resumed run writes again.
                Some(manifest) if epoch > manifest.epoch => fs::remove_file(dir.join(&name))?,
                Some(_) => {}
            }
        }
        sync_dir(dir)
    }
}

/// One output partition's news for the coordinator.
enum News {
    Rows(RecordBatch),
    Passed(u64),
    Ended,
    Failed(datafusion::error::DataFusionError),
}

/// The part files being written, by epoch.
struct Parts {
    dir: PathBuf,
    spec: SinkSpec,
    /// How the manifest names them (see [`PartOutput::Parts`]).
    prefix: &'static str,
    schema: SchemaRef,
    open: BTreeMap<u64, Box<dyn BatchWriter>>,
}

/// Where a run writes one output: parts committed with the checkpoints, or a writer.
enum Sink {
    Parts(Parts),
    Direct(Box<dyn BatchWriter>),
}

impl Sink {
    fn new(output: PartOutput, schema: SchemaRef) -> Self {
        match output {
            PartOutput::Parts { dir, spec, prefix } => Self::Parts(Parts {
                dir,
                spec,
                prefix,
                schema,
                open: BTreeMap::new(),
            }),
            PartOutput::Direct(writer) => Self::Direct(writer),
        }
    }

    /// Writes `batch`, which belongs to checkpoint `epoch`.
    fn write(&mut self, epoch: u64, batch: &RecordBatch) -> Result<()> {
        match self {
            Self::Parts(parts) => parts.write(epoch, batch),
            Self::Direct(writer) => writer.write(batch),
        }
    }

    /// Finishes the writers; parts after the last checkpoint (a stop) stay pending: the
    /// resumed run writes their rows again.
    fn finish(self) -> Result<()> {
        match self {
            Self::Parts(parts) => parts
                .open
                .into_values()
                .try_for_each(|writer| writer.finish()),
            Self::Direct(writer) => writer.finish(),
        }
    }
}

/// The late records of a checkpointed run: the channel the operators send them into, and
/// where they go.
pub struct LateOutput {
    pub batches: mpsc::UnboundedReceiver<LateBatch>,
    pub output: PartOutput,
    pub schema: SchemaRef,
}

/// The late output while the run goes on.
struct LateSink {
    batches: mpsc::UnboundedReceiver<LateBatch>,
    sink: Sink,
    /// The epoch of the checkpoint the run resumed (0 for a fresh run): an operator
    /// partition counts only the barriers it passed in this run.
    restored: u64,
    /// Late records written.
    rows: u64,
    /// Whether operators may still send some.
    open: bool,
}

impl LateSink {
    /// Writes every late batch the operators have sent so far.
    fn drain(&mut self) -> Result<()> {
        loop {
            match self.batches.try_recv() {
                Ok(batch) => self.write(batch)?,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Ok(()),
            }
        }
    }

    fn write(&mut self, (passed, batch): LateBatch) -> Result<()> {
        self.rows += batch.num_rows() as u64;
        self.sink.write(passed.max(self.restored) + 1, &batch)
    }
}

/// The late records, if wanted, once some are sent.
async fn next_late(late: &mut Option<LateSink>) -> Option<LateBatch> {
    match late {
        Some(late) if late.open => late.batches.recv().await,
        _ => std::future::pending().await,
    }
}

impl Parts {
    fn names(&self, epoch: u64) -> (String, String) {
        let extension = match self.spec {
            SinkSpec::Parquet(_) => "parquet",
            SinkSpec::Arrow(_) => "arrow",
            SinkSpec::JsonLines(_) => "jsonl",
            _ => "csv",
        };
        (
            format!(".part-{epoch:06}.{extension}.pending"),
            format!("part-{epoch:06}.{extension}"),
        )
    }

    fn write(&mut self, epoch: u64, batch: &RecordBatch) -> Result<()> {
        if !self.open.contains_key(&epoch) {
            let path = self.dir.join(self.names(epoch).0);
            let spec = match &self.spec {
                SinkSpec::Parquet(_) => SinkSpec::Parquet(path),
                SinkSpec::Arrow(_) => SinkSpec::Arrow(path),
                SinkSpec::JsonLines(_) => SinkSpec::JsonLines(Some(path)),
                _ => SinkSpec::Csv(Some(path)),
            };
            let writer = spec.open(&self.schema, Box::new(std::io::sink()))?;
            self.open.insert(epoch, writer);
        }
        match self.open.get_mut(&epoch) {
            Some(writer) => writer.write(batch),
            None => Ok(()),
        }
    }

    /// Takes out the parts of epochs up to `epoch` (those of earlier epochs hold no rows
    /// that were never written), to be closed: each writer and its (pending, committed)
    /// names.
    fn take_through(&mut self, epoch: u64) -> Vec<ClosingPart> {
        let later = self.open.split_off(&(epoch + 1));
        let through = std::mem::replace(&mut self.open, later);
        through
            .into_iter()
            .map(|(epoch, writer)| (writer, self.names(epoch)))
            .collect()
    }
}

/// A part's writer, and its (pending, committed) names.
type ClosingPart = (Box<dyn BatchWriter>, (String, String));

/// Closes and syncs `parts` in `dir`; their (pending, committed) names.
fn close_parts(dir: &std::path::Path, parts: Vec<ClosingPart>) -> Result<Vec<(String, String)>> {
    let mut outputs = Vec::with_capacity(parts.len());
    for (writer, names) in parts {
        writer.finish()?;
        fs::File::open(dir.join(&names.0))?.sync_all()?;
        outputs.push(names);
    }
    Ok(outputs)
}

/// Renames the closed parts `outputs` in `dir` to their committed names.
fn commit_parts(dir: &std::path::Path, outputs: &[(String, String)]) -> Result<()> {
    for (pending, committed) in outputs {
        fs::rename(dir.join(pending), dir.join(committed))?;
    }
    sync_dir(dir)?;
    fail_point("after_commit");
    Ok(())
}

/// What a checkpointed run did.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointedSummary {
    pub sink: SinkSummary,
    /// Checkpoints completed by this run.
    pub checkpoints: u64,
    /// Whether the run stopped at a checkpoint before its input ended.
    pub stopped: bool,
    /// The largest checkpoint's state files, in bytes.
    pub largest_bytes: u64,
    /// The longest time from placing a barrier to its checkpoint's completion.
    pub slowest: Duration,
    /// The longest time from placing a barrier until every output partition had passed it:
    /// the barrier's way through the exchanges, its alignment at joins, and the operators'
    /// taking of their state (whose files are written after).
    pub slowest_alignment: Duration,
    /// Late records written to the late output, if the run has one.
    pub late_written: Option<u64>,
}

impl CheckpointedSummary {
    /// Counts a checkpoint of `bytes` whose barrier was placed at `placed` and passed by
    /// every output partition at `aligned`.
    fn completed(&mut self, bytes: u64, placed: Instant, aligned: Instant) {
        self.checkpoints += 1;
        self.largest_bytes = self.largest_bytes.max(bytes);
        self.slowest = self.slowest.max(placed.elapsed());
        self.slowest_alignment = self.slowest_alignment.max(aligned.duration_since(placed));
    }
}

/// A checkpointed run of one query: its output partitions, where each learns of barriers,
/// and what it needs to place them.
pub struct CheckpointedRun {
    pub streams: Vec<SendableRecordBatchStream>,
    pub probe: BarrierProbe,
    pub checkpointing: Arc<Checkpointing>,
    pub fingerprint: Fingerprint,
    pub interval: CheckpointInterval,
    /// Records read so far by the query's sources.
    pub records_read: Box<dyn Fn() -> u64 + Send>,
    /// Set to stop at the next checkpoint.
    pub stop: watch::Receiver<bool>,
    /// Where the records dropped as late go, if anywhere.
    pub late: Option<LateOutput>,
}

impl CheckpointedRun {
    /// Runs the query into `output` (see the module documentation).
    pub async fn run(self, output: PartOutput, schema: SchemaRef) -> Result<CheckpointedSummary> {
        let CheckpointedRun {
            streams,
            probe,
            checkpointing,
            fingerprint,
            interval,
            records_read,
            mut stop,
            late,
        } = self;
        let partitions = streams.len();
        let (news_sender, mut news) = mpsc::channel::<(usize, News)>(4 * partitions.max(1));
        for (partition, stream) in streams.into_iter().enumerate() {
            let sender = news_sender.clone();
            let probe = probe.clone();
            let checkpointing = Arc::clone(&checkpointing);
            tokio::spawn(read_partition(
                partition,
                stream,
                probe,
                checkpointing,
                sender,
            ));
        }
        drop(news_sender);
        let restored = checkpointing.restored().map_or(0, |m| m.epoch);
        let mut sinks = Sinks {
            rows: Sink::new(output, schema),
            late: late.map(|late| LateSink {
                batches: late.batches,
                sink: Sink::new(late.output, late.schema),
                restored,
                rows: 0,
                open: true,
            }),
        };
        let mut passed = vec![restored; partitions];
        let mut ended = vec![false; partitions];
        let mut summary = CheckpointedSummary::default();
        // The sources may have read already (an exchange starts its inputs as it is
        // executed): the first interval counts from the run's first record.
        let mut last_barrier = (0, Instant::now());
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        // A stop asked for before the run began is seen too.
        let mut stopping = *stop.borrow();
        let mut completing: Option<Completing> = None;
        loop {
            let (partition, item) = tokio::select! {
                item = news.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
                bytes = completion(&mut completing) => {
                    let Some(done) = completing.take() else {
                        continue;
                    };
                    summary.completed(bytes?, done.placed, done.aligned);
                    // The interval counts from here: a checkpoint slower than the interval
                    // must not leave the query no time to run between checkpoints.
                    last_barrier = (records_read(), Instant::now());
                    if stopping {
                        summary.stopped = true;
                        return sinks.finish(summary);
                    }
                    continue;
                }
                batch = next_late(&mut sinks.late) => {
                    if let Some(late) = &mut sinks.late {
                        match batch {
                            Some(batch) => late.write(batch)?,
                            // Every operator is gone: nothing more comes.
                            None => late.open = false,
                        }
                    }
                    continue;
                }
                _ = tick.tick() => {
                    let due = match interval {
                        CheckpointInterval::Records(n) => records_read().saturating_sub(last_barrier.0) >= n,
                        CheckpointInterval::Time(t) => last_barrier.1.elapsed() >= t,
                    };
                    if (due || stopping) && completing.is_none() && checkpointing.barriers().place().is_some() {
                        last_barrier = (records_read(), Instant::now());
                    }
                    continue;
                }
                changed = stop.changed(), if !stopping => {
                    if changed.is_ok() && *stop.borrow() {
                        stopping = true;
                    }
                    continue;
                }
            };
            match item {
                News::Rows(batch) => {
                    summary.sink.rows += batch.num_rows() as u64;
                    summary.sink.batches += 1;
                    sinks.rows.write(passed[partition] + 1, &batch)?;
                }
                News::Passed(epoch) => passed[partition] = passed[partition].max(epoch),
                News::Ended => ended[partition] = true,
                News::Failed(error) => return Err(error),
            }
            // A barrier is complete once every partition has passed it or ended; it
            // completes while the rows after it go on.
            if completing.is_none()
                && let Some(barrier) = checkpointing.barriers().pending()
                && (0..partitions).all(|p| ended[p] || passed[p] >= barrier.epoch)
            {
                for epoch in &mut passed {
                    *epoch = (*epoch).max(barrier.epoch);
                }
                completing = Some(Completing::start(
                    &checkpointing,
                    &fingerprint,
                    &mut sinks,
                    barrier,
                    last_barrier.1,
                    false,
                )?);
            }
        }
        if !ended.iter().all(|e| *e) {
            return plan_err!("an output partition stopped without ending");
        }
        if let Some(done) = completing.take() {
            done.count_in(&mut summary).await?;
            if stopping {
                summary.stopped = true;
                return sinks.finish(summary);
            }
        }
        // A barrier placed after the last partition ended is passed by all of them.
        if let Some(barrier) = checkpointing.barriers().pending() {
            let done = Completing::start(
                &checkpointing,
                &fingerprint,
                &mut sinks,
                barrier,
                last_barrier.1,
                false,
            )?;
            done.count_in(&mut summary).await?;
        }
        // The last checkpoint: everything after the last barrier, and the end.
        let Some(last) = checkpointing.barriers().place() else {
            return plan_err!("a checkpoint barrier was left pending at the end");
        };
        let last = Barrier {
            epoch: last.epoch,
            position: i64::MAX,
        };
        let done = Completing::start(
            &checkpointing,
            &fingerprint,
            &mut sinks,
            last,
            Instant::now(),
            true,
        )?;
        done.count_in(&mut summary).await?;
        sinks.finish(summary)
    }
}

/// The run's outputs: its rows, and its late records if wanted.
struct Sinks {
    rows: Sink,
    late: Option<LateSink>,
}

impl Sinks {
    /// The parts of epochs up to `epoch` of each output, to be closed, with where they are
    /// and how the manifest names them; the late records sent so far are written first.
    fn take_through(&mut self, epoch: u64) -> Result<Vec<ClosingParts>> {
        if let Some(late) = &mut self.late {
            late.drain()?;
        }
        let late = self.late.as_mut().map(|late| &mut late.sink);
        Ok([Some(&mut self.rows), late]
            .into_iter()
            .flatten()
            .filter_map(|sink| match sink {
                Sink::Parts(parts) => Some(ClosingParts {
                    dir: parts.dir.clone(),
                    prefix: parts.prefix,
                    parts: parts.take_through(epoch),
                }),
                Sink::Direct(_) => None,
            })
            .collect())
    }

    fn finish(mut self, mut summary: CheckpointedSummary) -> Result<CheckpointedSummary> {
        if let Some(mut late) = self.late.take() {
            late.drain()?;
            summary.late_written = Some(late.rows);
            late.sink.finish()?;
        }
        self.rows.finish()?;
        Ok(summary)
    }
}

/// One output's parts of a checkpoint, being closed.
struct ClosingParts {
    dir: PathBuf,
    prefix: &'static str,
    parts: Vec<ClosingPart>,
}

/// A checkpoint completing in a task of its own while the run goes on.
struct Completing {
    barrier: Barrier,
    placed: Instant,
    aligned: Instant,
    task: tokio::task::JoinHandle<Result<u64>>,
}

impl Completing {
    /// Starts completing checkpoint `barrier`, placed at `placed` and passed by every output
    /// partition now: its parts closed and synced, its manifest written, its parts committed
    /// (the bytes of its state files, once done). The blocking work runs on blocking
    /// threads: the rows after the barrier keep going to the next epoch's part meanwhile.
    fn start(
        checkpointing: &Arc<Checkpointing>,
        fingerprint: &Fingerprint,
        sinks: &mut Sinks,
        barrier: Barrier,
        placed: Instant,
        finished: bool,
    ) -> Result<Self> {
        let closing = sinks.take_through(barrier.epoch)?;
        let checkpointing = Arc::clone(checkpointing);
        let fingerprint = fingerprint.clone();
        let task = tokio::spawn(async move {
            let closed = blocking(move || {
                closing
                    .into_iter()
                    .map(|closing| {
                        let names = close_parts(&closing.dir, closing.parts)?;
                        Ok((closing.dir, closing.prefix, names))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .await?;
            let outputs = closed
                .iter()
                .flat_map(|(_, prefix, names)| {
                    names.iter().map(move |(pending, committed)| {
                        (format!("{prefix}{pending}"), format!("{prefix}{committed}"))
                    })
                })
                .collect();
            let bytes = checkpointing
                .complete(barrier, finished, &fingerprint, outputs)
                .await?;
            blocking(move || {
                closed
                    .iter()
                    .try_for_each(|(dir, _, names)| commit_parts(dir, names))
            })
            .await?;
            Ok(bytes)
        });
        Ok(Self {
            barrier,
            placed,
            aligned: Instant::now(),
            task,
        })
    }

    /// Waits until the checkpoint is complete, and counts it in `summary`.
    async fn count_in(mut self, summary: &mut CheckpointedSummary) -> Result<()> {
        let bytes = self.finished().await?;
        summary.completed(bytes, self.placed, self.aligned);
        Ok(())
    }

    /// Waits until the checkpoint is complete; the bytes of its state files.
    async fn finished(&mut self) -> Result<u64> {
        match (&mut self.task).await {
            Ok(outcome) => outcome,
            Err(error) => internal_err!(
                "completing checkpoint {} failed: {error}",
                self.barrier.epoch
            ),
        }
    }
}

/// Runs `work` on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(outcome) => outcome,
        Err(error) => internal_err!("a checkpoint's file work failed: {error}"),
    }
}

/// The checkpoint completing, if any, once complete.
async fn completion(completing: &mut Option<Completing>) -> Result<u64> {
    match completing {
        Some(completing) => completing.finished().await,
        None => std::future::pending().await,
    }
}

/// Reads output partition `partition`, telling the coordinator of each barrier it passed
/// before the batch handed out after it.
async fn read_partition(
    partition: usize,
    mut stream: SendableRecordBatchStream,
    probe: BarrierProbe,
    checkpointing: Arc<Checkpointing>,
    news: mpsc::Sender<(usize, News)>,
) {
    let mut passed = 0;
    while let Some(batch) = stream.next().await {
        let batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                let _ = news.send((partition, News::Failed(error))).await;
                return;
            }
        };
        if let Some(barrier) = checkpointing.barriers().pending()
            && barrier.epoch > passed
            && probe.passed(partition, barrier)
        {
            passed = barrier.epoch;
            if news.send((partition, News::Passed(passed))).await.is_err() {
                return;
            }
        }
        if batch.num_rows() > 0 && news.send((partition, News::Rows(batch))).await.is_err() {
            return;
        }
    }
    let _ = news.send((partition, News::Ended)).await;
}
