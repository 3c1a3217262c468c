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
    CheckpointInterval, CheckpointedRun, CheckpointedSummary, LateOutput, PartOutput,
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
    /// Where the records dropped as late go, if anywhere: a file output is a directory of
    /// parts committed with the checkpoints, as the query's own.
    pub late_output: Option<SinkSpec>,
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
        // (Idempotent: the caller may have taken it already, to read the run's metrics.)
        let query = self.for_checkpoints()?;
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
        let options = match &config.late_output {
            // A run with a late output resumes only with the same one.
            Some(late) => format!("{}\nlate output: {late:?}", config.options_text),
            None => config.options_text.clone(),
        };
        let fingerprint = Fingerprint {
            query: checksum(config.query_text.trim().as_bytes()),
            options: checksum(options.as_bytes()),
            streams: query.output_partitions(),
        };
        if let Some(late) = &config.late_output {
            late.refuse_overlap_with(sink)?;
        }
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
                if let Some(late) = &config.late_output
                    && let Ok(output) = PartOutput::late(late, || plan_err!("no direct output"))
                {
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
        // Generators and dealt in-memory batches, replayed as fast as they go, are cut by
        // their blocks and batches.
        query.plan().apply(|node| {
            if let Some(source) = node.downcast_ref::<StreamSourceExec>() {
                source.take_checkpoint_positions();
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let probe = barrier_probe(query.plan())?;
        let schema = query.schema();
        let output = PartOutput::of(sink, || sink.open(&schema, Box::new(std::io::stdout())))?;
        output.recover(restored.as_ref())?;
        if !output.is_exactly_once() {
            note(
                "note: this output is at-least-once (rows after the last checkpoint are written again on resume); a file output (parquet=PATH, csv=PATH, …) is committed exactly once",
            );
        }
        let late = match &config.late_output {
            Some(late) => {
                let (schema, batches) = query.late_batches();
                let output =
                    PartOutput::late(late, || late.open(&schema, Box::new(std::io::stderr())))?;
                output.recover(restored.as_ref())?;
                Some(LateOutput {
                    batches,
                    output,
                    schema,
                })
            }
            None => None,
        };
        let checkpointing = Arc::new(Checkpointing::new(store, restored, query.plan()));
        let query = query.with_checkpointing(Arc::clone(&checkpointing));
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
            late,
        }
        .run(output, schema)
        .await?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use freshet_engine::StreamOptions;
    use freshet_engine::options::Pacing;
    use freshet_engine::source::ReplaySource;
    use freshet_engine::source::{GeneratorKind, GeneratorSpec};

    use super::*;
    use crate::StreamingContext;

    const QUERY: &str = "SELECT trader_id, COUNT(*) AS n, SUM(quantity) AS q FROM market_data GROUP BY trader_id EMIT CHANGES";

    /// Disordered in-memory batches, as a library user registers them, replayed at `pacing`.
    fn context(pacing: Pacing) -> StreamingContext {
        let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(60_000));
        spec.set("batch_size", "500").unwrap();
        spec.set("disorder_ms", "3000").unwrap();
        let batches = spec.generate_all().unwrap();
        let context = StreamingContext::with_partitions(2);
        let options = StreamOptions {
            event_time: Some("trade_time".to_string()),
            pacing,
            ..StreamOptions::default()
        };
        context
            .register_batches("market_data", spec.schema(), batches, options)
            .unwrap();
        context
    }

    fn config(checkpoints: &Path) -> CheckpointConfig {
        CheckpointConfig {
            dir: checkpoints.to_path_buf(),
            interval: "5000".parse().unwrap(),
            kept: 2,
            query_text: QUERY.to_string(),
            options_text: "in-memory".to_string(),
            late_output: None,
        }
    }

    /// Runs the query into a directory of CSV parts, stopping at its first checkpoint when
    /// `stop_at_once`; whether it stopped.
    async fn run(out: &Path, checkpoints: &Path, stop_at_once: bool, pacing: Pacing) -> bool {
        let query = context(pacing).sql(QUERY).await.unwrap();
        let (_stopper, stop) = watch::channel(stop_at_once);
        let sink = SinkSpec::Csv(Some(out.to_path_buf()));
        let report = query
            .run_checkpointed(&sink, &config(checkpoints), stop, &|_| {})
            .await
            .unwrap();
        report.summary.stopped
    }

    /// The rows of every part file, without their header lines, sorted.
    fn committed(out: &Path) -> Vec<String> {
        let mut rows: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("part-")
            })
            .flat_map(|path| {
                let text = std::fs::read_to_string(path).unwrap();
                text.lines().skip(1).map(str::to_string).collect::<Vec<_>>()
            })
            .collect();
        rows.sort();
        rows
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_in_memory_replay_stopped_at_a_checkpoint_resumes_at_its_batch() {
        // Paced or not: the replay's batches are numbered by their place in it either way.
        for (case, pacing) in [
            Pacing::AsFastAsPossible,
            Pacing::RecordsPerSecond(300_000.0),
        ]
        .into_iter()
        .enumerate()
        {
            let dir =
                std::env::temp_dir().join(format!("freshet-memory-{}-{case}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let (reference, out) = (dir.join("reference"), dir.join("out"));
            let reference_checkpoints = dir.join("reference-checkpoints");
            assert!(!run(&reference, &reference_checkpoints, false, pacing).await);
            let checkpoints = dir.join("checkpoints");
            assert!(
                run(&out, &checkpoints, true, pacing).await,
                "the run did not stop"
            );
            let partial = committed(&out).len();
            assert!(!run(&out, &checkpoints, false, pacing).await);
            let expected = committed(&reference);
            assert!(partial < expected.len(), "the first run read everything");
            assert_eq!(committed(&out), expected, "{pacing:?}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_memory_partitions_with_no_order_across_them_are_refused() {
        let mut spec = GeneratorSpec::new(GeneratorKind::MarketData, Some(1_000));
        spec.set("batch_size", "100").unwrap();
        let batches = spec.generate_all().unwrap();
        let (first, second) = batches.split_at(batches.len() / 2);
        let context = StreamingContext::with_partitions(2);
        let source = ReplaySource::Partitioned {
            schema: spec.schema(),
            partitions: vec![first.to_vec(), second.to_vec()],
        };
        context
            .register_stream("market_data", source, StreamOptions::default())
            .unwrap();
        let query = context.sql(QUERY).await.unwrap();
        let dir = std::env::temp_dir().join(format!("freshet-partitioned-{}", std::process::id()));
        let (_stopper, stop) = watch::channel(false);
        let sink = SinkSpec::Csv(Some(dir.join("out")));
        let refused = query
            .run_checkpointed(&sink, &config(&dir.join("checkpoints")), stop, &|_| {})
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("stream 'market_data' is not (a live stream, or in-memory partitions with no order across them)"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
