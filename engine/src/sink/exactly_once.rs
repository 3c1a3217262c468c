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
use datafusion::common::{Result, plan_err};
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use super::{BatchWriter, SinkSpec, SinkSummary};
use crate::checkpoint::{
    Barrier, BarrierProbe, Checkpointing, Fingerprint, Manifest, fail_point, sync_dir,
};

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

/// Where a checkpointed run's rows go.
pub enum PartOutput {
    /// A directory of committed part files in the format of `spec`.
    Parts { dir: PathBuf, spec: SinkSpec },
    /// A writer that cannot commit (terminal, stdout, null): at-least-once.
    Direct(Box<dyn BatchWriter>),
}

impl PartOutput {
    /// The output of `spec`: a directory of parts for a file, else `direct`.
    pub fn of(
        spec: &SinkSpec,
        direct: impl FnOnce() -> Result<Box<dyn BatchWriter>>,
    ) -> Result<Self> {
        Ok(match spec.path() {
            Some(dir) => Self::Parts {
                dir: dir.to_path_buf(),
                spec: spec.clone(),
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
        let Self::Parts { dir, .. } = self else {
            return Ok(());
        };
        if dir.exists() && !dir.is_dir() {
            return plan_err!(
                "with a checkpoint directory, the output {} is a directory of part files, and a file is in the way",
                dir.display()
            );
        }
        fs::create_dir_all(dir)?;
        let covered: Vec<(String, String)> =
            restored.map(|m| m.outputs.clone()).unwrap_or_default();
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
    schema: SchemaRef,
    open: BTreeMap<u64, Box<dyn BatchWriter>>,
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

    /// Closes and syncs the part of `epoch`, if it has one; its (pending, committed) names.
    fn close(&mut self, epoch: u64) -> Result<Vec<(String, String)>> {
        let Some(writer) = self.open.remove(&epoch) else {
            return Ok(Vec::new());
        };
        writer.finish()?;
        let names = self.names(epoch);
        fs::File::open(self.dir.join(&names.0))?.sync_all()?;
        Ok(vec![names])
    }

    fn commit(&self, outputs: &[(String, String)]) -> Result<()> {
        for (pending, committed) in outputs {
            fs::rename(self.dir.join(pending), self.dir.join(committed))?;
        }
        sync_dir(&self.dir)?;
        fail_point("after_commit");
        Ok(())
    }
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
}

impl CheckpointedSummary {
    fn completed(&mut self, bytes: u64, placed: Instant) {
        self.checkpoints += 1;
        self.largest_bytes = self.largest_bytes.max(bytes);
        self.slowest = self.slowest.max(placed.elapsed());
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
        let (mut parts, mut direct) = match output {
            PartOutput::Parts { dir, spec } => (
                Some(Parts {
                    dir,
                    spec,
                    schema,
                    open: BTreeMap::new(),
                }),
                None,
            ),
            PartOutput::Direct(writer) => (None, Some(writer)),
        };
        let mut passed = vec![checkpointing.restored().map_or(0, |m| m.epoch); partitions];
        let mut ended = vec![false; partitions];
        let mut summary = CheckpointedSummary::default();
        let mut last_barrier = (records_read(), Instant::now());
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        let mut stopping = false;
        loop {
            let (partition, item) = tokio::select! {
                item = news.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
                _ = tick.tick() => {
                    let due = match interval {
                        CheckpointInterval::Records(n) => records_read().saturating_sub(last_barrier.0) >= n,
                        CheckpointInterval::Time(t) => last_barrier.1.elapsed() >= t,
                    };
                    if (due || stopping) && checkpointing.barriers().place().is_some() {
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
                    match (&mut parts, &mut direct) {
                        (Some(parts), _) => parts.write(passed[partition] + 1, &batch)?,
                        (None, Some(writer)) => writer.write(&batch)?,
                        (None, None) => {}
                    }
                }
                News::Passed(epoch) => passed[partition] = passed[partition].max(epoch),
                News::Ended => ended[partition] = true,
                News::Failed(error) => return Err(error),
            }
            // A barrier is complete once every partition has passed it or ended.
            if let Some(barrier) = checkpointing.barriers().pending()
                && (0..partitions).all(|p| ended[p] || passed[p] >= barrier.epoch)
            {
                let bytes =
                    complete(&checkpointing, &fingerprint, &mut parts, barrier, false).await?;
                summary.completed(bytes, last_barrier.1);
                // The interval counts from here: a checkpoint slower than the interval must
                // not leave the query no time to run between checkpoints.
                last_barrier = (records_read(), Instant::now());
                for epoch in &mut passed {
                    *epoch = (*epoch).max(barrier.epoch);
                }
                if stopping {
                    summary.stopped = true;
                    return finish(parts, direct, summary);
                }
            }
        }
        if !ended.iter().all(|e| *e) {
            return plan_err!("an output partition stopped without ending");
        }
        // A barrier placed after the last partition ended is passed by all of them.
        if let Some(barrier) = checkpointing.barriers().pending() {
            let bytes = complete(&checkpointing, &fingerprint, &mut parts, barrier, false).await?;
            summary.completed(bytes, last_barrier.1);
        }
        // The last checkpoint: everything after the last barrier, and the end.
        let Some(last) = checkpointing.barriers().place() else {
            return plan_err!("a checkpoint barrier was left pending at the end");
        };
        let last = Barrier {
            epoch: last.epoch,
            position: i64::MAX,
        };
        let placed = Instant::now();
        let bytes = complete(&checkpointing, &fingerprint, &mut parts, last, true).await?;
        summary.completed(bytes, placed);
        finish(parts, direct, summary)
    }
}

/// Completes checkpoint `barrier`: its part closed, its manifest written, its part
/// committed; returns the bytes of its state files.
async fn complete(
    checkpointing: &Checkpointing,
    fingerprint: &Fingerprint,
    parts: &mut Option<Parts>,
    barrier: Barrier,
    finished: bool,
) -> Result<u64> {
    let outputs = match parts {
        Some(parts) => {
            // Parts of earlier epochs are empty of rows that were never written.
            let mut outputs = Vec::new();
            let epochs: Vec<u64> = parts
                .open
                .range(..=barrier.epoch)
                .map(|(e, _)| *e)
                .collect();
            for epoch in epochs {
                outputs.extend(parts.close(epoch)?);
            }
            outputs
        }
        None => Vec::new(),
    };
    let bytes = checkpointing
        .complete(barrier, finished, fingerprint, outputs.clone())
        .await?;
    if let Some(parts) = parts {
        parts.commit(&outputs)?;
    }
    Ok(bytes)
}

fn finish(
    parts: Option<Parts>,
    direct: Option<Box<dyn BatchWriter>>,
    summary: CheckpointedSummary,
) -> Result<CheckpointedSummary> {
    if let Some(parts) = parts {
        // Parts after the last checkpoint (a stop) are pending: the resumed run writes
        // their rows again.
        for writer in parts.open.into_values() {
            writer.finish()?;
        }
    }
    if let Some(writer) = direct {
        writer.finish()?;
    }
    Ok(summary)
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
