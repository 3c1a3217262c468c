//! [`StreamingQuery::run_checkpointed`]: a query run that checkpoints its state into a
//! directory, commits its file output with each checkpoint, and resumes from the latest
//! checkpoint when run again (see `freshet_engine::checkpoint` and
//! `freshet_engine::sink::exactly_once`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, plan_err};
use freshet_engine::StreamSourceExec;
use freshet_engine::checkpoint::{
    CheckpointStore, Checkpointing, Fingerprint, barrier_probe, checksum,
};
use freshet_engine::sink::SinkSpec;
use freshet_engine::sink::exactly_once::{
    CheckpointInterval, CheckpointedRun, CheckpointedSummary, PartOutput,
};
use tokio::sync::watch;

use crate::StreamingQuery;

/// Where and how often a run checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub dir: PathBuf,
    pub interval: CheckpointInterval,
    /// Complete checkpoints kept (at least 1).
    pub kept: usize,
    /// What a resumed run must share with the run that wrote the checkpoint, besides the
    /// number of streams: the query's text and its streams' registrations and settings, as
    /// the caller states them.
    pub query_text: String,
    pub options_text: String,
}

/// What a checkpointed run did.
#[derive(Debug, Clone, Default)]
pub struct CheckpointedReport {
    /// The checkpoint the run resumed from, if any.
    pub resumed_from: Option<u64>,
    /// The bytes of state restored, and the time from opening the directory to having
    /// every operator's state back.
    pub restored_bytes: u64,
    pub restore_time: Duration,
    /// The query had finished before this run: nothing ran.
    pub already_finished: bool,
    pub summary: CheckpointedSummary,
}

impl StreamingQuery {
    /// Runs the query into `sink` with checkpoints as `config` says, resuming from the
    /// directory's latest complete checkpoint; `stop` set to true stops the run at the next
    /// checkpoint. `note` receives what the run has to tell its user as it goes (a checkpoint
    /// passed over as corrupt, the resume, an output that is only at-least-once).
    pub async fn run_checkpointed(
        &self,
        sink: &SinkSpec,
        config: &CheckpointConfig,
        stop: watch::Receiver<bool>,
        note: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<CheckpointedReport> {
        if config.kept == 0 {
            return plan_err!("at least the latest checkpoint is kept: keep 1 or more");
        }
        let dir = &config.dir;
        let started = Instant::now();
        let store = CheckpointStore::open(dir, config.kept)?;
        let (restored, warnings) = store.latest()?;
        for warning in warnings {
            note(&format!("warning: {warning}"));
        }
        let fingerprint = Fingerprint {
            query: checksum(config.query_text.trim().as_bytes()),
            options: checksum(config.options_text.as_bytes()),
            streams: self.output_partitions(),
        };
        let mut report = CheckpointedReport::default();
        if let Some(manifest) = &restored {
            if let Some(difference) = manifest.fingerprint.difference(&fingerprint) {
                return plan_err!(
                    "cannot resume the checkpoint in {}: {difference}; use another checkpoint directory to start afresh",
                    dir.display()
                );
            }
            if manifest.finished {
                note(&format!(
                    "the query had finished at checkpoint {} in {}: nothing to resume",
                    manifest.epoch,
                    dir.display()
                ));
                if let Ok(output) = PartOutput::of(sink, || plan_err!("no direct output")) {
                    output.recover(Some(manifest))?;
                }
                report.already_finished = true;
                return Ok(report);
            }
            note(&format!(
                "resuming from checkpoint {} in {}",
                manifest.epoch,
                dir.display()
            ));
            report.resumed_from = Some(manifest.epoch);
            report.restored_bytes = manifest.states.iter().map(|s| s.bytes).sum();
        }
        // Generators replayed as fast as they go are cut by their blocks.
        self.plan().apply(|node| {
            if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
                source.take_generated_positions();
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let probe = barrier_probe(self.plan())?;
        let schema = self.schema();
        let output = PartOutput::of(sink, || sink.open(&schema, Box::new(std::io::stdout())))?;
        output.recover(restored.as_ref())?;
        if !output.is_exactly_once() {
            note(
                "note: this output is at-least-once (rows after the last checkpoint are written again on resume); a file output (parquet=PATH, csv=PATH, …) is committed exactly once",
            );
        }
        let checkpointing = Arc::new(Checkpointing::new(store, restored, self.plan()));
        let query = self.with_checkpointing(Arc::clone(&checkpointing));
        // Operators restore their state as their streams are made.
        let streams = query.execute_partitions()?;
        report.restore_time = started.elapsed();
        let records = {
            let query = query.clone();
            Box::new(move || query.records_read() as u64)
        };
        report.summary = CheckpointedRun {
            streams,
            probe,
            checkpointing,
            fingerprint,
            interval: config.interval,
            records_read: records,
            stop,
        }
        .run(output, schema)
        .await?;
        Ok(report)
    }
}
