//! [`CheckpointStore`]: a checkpoint directory, and [`Manifest`]: what makes one of its
//! checkpoints exist.
//!
//! ```text
//! DIR/LATEST                      the name of the newest complete checkpoint
//! DIR/epoch-000007/MANIFEST       epoch, barrier position, plan fingerprint, files
//! DIR/epoch-000007/<operator>-p<partition>.arrow   one operator partition's state
//! ```
//!
//! State files are written and synced first. A checkpoint exists once its manifest is
//! written to a temporary file, synced, renamed into place and the directory synced; the
//! `LATEST` pointer follows the same way. The manifest lists every state file with its size
//! and checksum, and ends with a checksum of its own text, so a torn or corrupt checkpoint
//! is recognised on recovery, which then falls back to the one before it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use datafusion::common::{DataFusionError, Result, plan_err};

use super::state::{Checksum, OperatorState, SummingWriter, checksum};

/// The version of the checkpoint format; a checkpoint of another one is not resumed.
pub const FORMAT_VERSION: u64 = 1;
const LATEST: &str = "LATEST";
const MANIFEST: &str = "MANIFEST";
const EPOCH_PREFIX: &str = "epoch-";

/// What a resumed run must share with the run that wrote the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// A hash of the query's text.
    pub query: u64,
    /// A hash of the streams' registrations and the session's settings.
    pub options: u64,
    /// The number of streams (output partitions).
    pub streams: usize,
}

impl Fingerprint {
    /// Why a checkpoint written with `self` cannot be resumed by a run with `other`, if so.
    pub fn difference(&self, other: &Self) -> Option<String> {
        if self.query != other.query {
            return Some("the query differs from the one that wrote it".to_string());
        }
        if self.options != other.options {
            return Some(
                "the streams' registrations or the session's settings differ from the run that wrote it"
                    .to_string(),
            );
        }
        if self.streams != other.streams {
            return Some(format!(
                "it was written at {} streams, this run has {} (keyed state is not redistributed: run with --partitions {})",
                self.streams, other.streams, self.streams
            ));
        }
        None
    }
}

/// One state file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateEntry {
    pub name: String,
    pub bytes: u64,
    pub checksum: u64,
}

/// See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub epoch: u64,
    /// The barrier's replay position: the checkpoint holds every unit before it.
    pub position: i64,
    /// Whether the query had ended: nothing is left to run.
    pub finished: bool,
    pub fingerprint: Fingerprint,
    pub states: Vec<StateEntry>,
    /// Output parts this checkpoint covers: (pending name, committed name).
    pub outputs: Vec<(String, String)>,
}

impl Manifest {
    fn to_text(&self) -> String {
        let mut text = format!(
            "freshet checkpoint\nformat={FORMAT_VERSION}\nepoch={}\nposition={}\nfinished={}\nquery={:016x}\noptions={:016x}\nstreams={}\n",
            self.epoch,
            self.position,
            self.finished,
            self.fingerprint.query,
            self.fingerprint.options,
            self.fingerprint.streams
        );
        for state in &self.states {
            text.push_str(&format!(
                "state={} {} {:016x}\n",
                state.name, state.bytes, state.checksum
            ));
        }
        for (pending, committed) in &self.outputs {
            text.push_str(&format!("output={pending} {committed}\n"));
        }
        let sum = checksum(text.as_bytes());
        text.push_str(&format!("checksum={sum:016x}\n"));
        text
    }

    fn parse(text: &str) -> Result<Self> {
        let Some((body, last)) = text.trim_end_matches('\n').rsplit_once('\n') else {
            return plan_err!("the manifest is empty");
        };
        let body = format!("{body}\n");
        match last.strip_prefix("checksum=") {
            Some(sum) if u64::from_str_radix(sum, 16).ok() == Some(checksum(body.as_bytes())) => {}
            _ => return plan_err!("the manifest's checksum does not match its text"),
        }
        let mut lines = body.lines();
        if lines.next() != Some("freshet checkpoint") {
            return plan_err!("not a Freshet checkpoint manifest");
        }
        let mut manifest = Manifest {
            epoch: 0,
            position: 0,
            finished: false,
            fingerprint: Fingerprint {
                query: 0,
                options: 0,
                streams: 0,
            },
            states: Vec::new(),
            outputs: Vec::new(),
        };
        for line in lines {
            let Some((key, value)) = line.split_once('=') else {
                return plan_err!("manifest line '{line}' is not KEY=VALUE");
            };
            let bad = || DataFusionError::Plan(format!("manifest line '{line}' has a bad value"));
            match key {
                "format" => {
                    let format: u64 = value.parse().map_err(|_| bad())?;
                    if format != FORMAT_VERSION {
                        return plan_err!(
                            "the checkpoint has format version {format}, this Freshet reads version {FORMAT_VERSION}"
                        );
                    }
                }
                "epoch" => manifest.epoch = value.parse().map_err(|_| bad())?,
                "position" => manifest.position = value.parse().map_err(|_| bad())?,
                "finished" => manifest.finished = value.parse().map_err(|_| bad())?,
                "query" => {
                    manifest.fingerprint.query =
                        u64::from_str_radix(value, 16).map_err(|_| bad())?
                }
                "options" => {
                    manifest.fingerprint.options =
                        u64::from_str_radix(value, 16).map_err(|_| bad())?
                }
                "streams" => manifest.fingerprint.streams = value.parse().map_err(|_| bad())?,
                "state" => {
                    let mut parts = value.split(' ');
                    let (Some(name), Some(bytes), Some(sum), None) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        return Err(bad());
                    };
                    manifest.states.push(StateEntry {
                        name: name.to_string(),
                        bytes: bytes.parse().map_err(|_| bad())?,
                        checksum: u64::from_str_radix(sum, 16).map_err(|_| bad())?,
                    });
                }
                "output" => {
                    let Some((pending, committed)) = value.split_once(' ') else {
                        return Err(bad());
                    };
                    manifest
                        .outputs
                        .push((pending.to_string(), committed.to_string()));
                }
                _ => return plan_err!("manifest line '{line}' has an unknown key"),
            }
        }
        Ok(manifest)
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    /// How many complete checkpoints to keep.
    kept: usize,
}

impl CheckpointStore {
    /// The store in `dir`, created if missing.
    pub fn open(dir: &Path, kept: usize) -> Result<Self> {
        if let Err(error) = fs::create_dir_all(dir) {
            return plan_err!(
                "cannot create the checkpoint directory {}: {error}",
                dir.display()
            );
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            kept: kept.max(1),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn epoch_name(epoch: u64) -> String {
        format!("{EPOCH_PREFIX}{epoch:06}")
    }

    fn epoch_dir(&self, epoch: u64) -> PathBuf {
        self.dir.join(Self::epoch_name(epoch))
    }

    /// Writes and syncs the state file `name` of checkpoint `epoch`.
    pub fn write_state(&self, epoch: u64, name: &str, state: &OperatorState) -> Result<StateEntry> {
        let dir = self.epoch_dir(epoch);
        fs::create_dir_all(&dir)?;
        let file = fs::File::create(dir.join(name))?;
        let mut out = SummingWriter {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            sum: Checksum::default(),
        };
        state.write_to(&mut out)?;
        let SummingWriter { inner, sum } = out;
        let file = inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(StateEntry {
            name: name.to_string(),
            bytes: sum.bytes(),
            checksum: sum.finish(),
        })
    }

    /// Makes checkpoint `manifest.epoch` exist (see the module documentation), then drops
    /// the checkpoints beyond the kept ones.
    pub fn complete(&self, manifest: &Manifest) -> Result<()> {
        let dir = self.epoch_dir(manifest.epoch);
        fs::create_dir_all(&dir)?;
        sync_dir(&dir)?;
        replace_synced(&dir, MANIFEST, manifest.to_text().as_bytes())?;
        replace_synced(
            &self.dir,
            LATEST,
            format!("{}\n", Self::epoch_name(manifest.epoch)).as_bytes(),
        )?;
        let mut epochs = self.epochs()?;
        epochs.retain(|epoch| *epoch < manifest.epoch);
        let dropped = epochs.len().saturating_sub(self.kept - 1);
        for epoch in &epochs[..dropped] {
            let _ = fs::remove_dir_all(self.epoch_dir(*epoch));
        }
        Ok(())
    }

    /// The epochs of the directories in the store, ascending.
    fn epochs(&self) -> Result<Vec<u64>> {
        let mut epochs: Vec<u64> = fs::read_dir(&self.dir)?
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_prefix(EPOCH_PREFIX)?.parse().ok()
            })
            .collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// The newest checkpoint that is whole — its manifest and every state file it lists
    /// read back with their sizes and checksums — and a warning for each newer one passed
    /// over. `None` when the store holds no checkpoint.
    pub fn latest(&self) -> Result<(Option<Manifest>, Vec<String>)> {
        let mut warnings = Vec::new();
        let pointed = fs::read_to_string(self.dir.join(LATEST))
            .ok()
            .and_then(|name| name.trim().strip_prefix(EPOCH_PREFIX)?.parse::<u64>().ok());
        let mut candidates = self.epochs()?;
        candidates.reverse();
        // The pointer names the newest complete one; a newer directory is an unfinished
        // checkpoint (its manifest was never renamed into place) unless it has a manifest.
        for epoch in candidates {
            let dir = self.epoch_dir(epoch);
            if !dir.join(MANIFEST).exists() {
                continue;
            }
            // A checkpoint of another format is not corrupt: it is refused, not passed over.
            let text = fs::read_to_string(dir.join(MANIFEST)).unwrap_or_default();
            if let Some(format) = text.lines().find_map(|l| l.strip_prefix("format="))
                && format != FORMAT_VERSION.to_string()
            {
                return plan_err!(
                    "the checkpoint {} has format version {format}, and this Freshet reads version {FORMAT_VERSION}: resume it with the Freshet that wrote it, or use another checkpoint directory",
                    dir.display()
                );
            }
            match self.verified(epoch) {
                Ok(manifest) => return Ok((Some(manifest), warnings)),
                Err(error) => warnings.push(format!(
                    "checkpoint {} is not usable ({error}); falling back to the one before it",
                    dir.display()
                )),
            }
        }
        if pointed.is_some() && warnings.is_empty() {
            return plan_err!(
                "{} names a checkpoint that is missing",
                self.dir.join(LATEST).display()
            );
        }
        Ok((None, warnings))
    }

    fn verified(&self, epoch: u64) -> Result<Manifest> {
        let dir = self.epoch_dir(epoch);
        let text = fs::read_to_string(dir.join(MANIFEST))?;
        let manifest = Manifest::parse(&text)?;
        if manifest.epoch != epoch {
            return plan_err!("its manifest names epoch {}", manifest.epoch);
        }
        for state in &manifest.states {
            let bytes = fs::read(dir.join(&state.name))?;
            if bytes.len() as u64 != state.bytes || checksum(&bytes) != state.checksum {
                return plan_err!("state file {} does not match its checksum", state.name);
            }
        }
        Ok(manifest)
    }

    /// The state `name` of checkpoint `manifest`, if it lists one.
    pub fn read_state(&self, manifest: &Manifest, name: &str) -> Result<Option<OperatorState>> {
        if !manifest.states.iter().any(|s| s.name == name) {
            return Ok(None);
        }
        let bytes = fs::read(self.epoch_dir(manifest.epoch).join(name))?;
        OperatorState::decode(&bytes).map(Some)
    }
}

/// Writes `bytes` to `path` and syncs the file.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// Replaces `dir/name` atomically: a synced temporary file renamed into place, then the
/// directory synced.
pub fn replace_synced(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let temporary = dir.join(format!(".{name}.tmp"));
    write_synced(&temporary, bytes)?;
    fs::rename(&temporary, dir.join(name))?;
    sync_dir(dir)
}

/// Syncs a directory, so that the names in it (a rename) are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use std::sync::Arc;

    use super::*;

    fn manifest(epoch: u64, states: Vec<StateEntry>) -> Manifest {
        Manifest {
            epoch,
            position: 10 * epoch as i64,
            finished: false,
            fingerprint: Fingerprint {
                query: 1,
                options: 2,
                streams: 2,
            },
            states,
            outputs: vec![(".part-1.pending".into(), "part-1".into())],
        }
    }

    fn state() -> OperatorState {
        let mut state = OperatorState::default();
        state.put_array("a", Arc::new(Int64Array::from(vec![1, 2, 3])));
        state
    }

    #[test]
    fn a_manifest_round_trips_and_refuses_a_changed_byte() {
        let text = manifest(3, vec![]).to_text();
        assert_eq!(Manifest::parse(&text).unwrap(), manifest(3, vec![]));
        let changed = text.replace("position=30", "position=31");
        let error = Manifest::parse(&changed).unwrap_err().to_string();
        assert!(error.contains("checksum"), "{error}");
    }

    #[test]
    fn a_corrupt_latest_checkpoint_falls_back_to_the_one_before() {
        let dir = tempfile_dir();
        let store = CheckpointStore::open(&dir, 3).unwrap();
        for epoch in 1..=2 {
            let entry = store.write_state(epoch, "op-p0.arrow", &state()).unwrap();
            store.complete(&manifest(epoch, vec![entry])).unwrap();
        }
        assert_eq!(store.latest().unwrap().0.unwrap().epoch, 2);
        fs::write(dir.join("epoch-000002/op-p0.arrow"), b"garbage").unwrap();
        let (latest, warnings) = store.latest().unwrap();
        assert_eq!(latest.unwrap().epoch, 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        // A checkpoint whose manifest never landed is not one.
        fs::create_dir_all(dir.join("epoch-000003")).unwrap();
        assert_eq!(store.latest().unwrap().0.unwrap().epoch, 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_of_another_format_version_is_refused_not_passed_over() {
        let dir = tempfile_dir();
        let store = CheckpointStore::open(&dir, 3).unwrap();
        store.complete(&manifest(1, vec![])).unwrap();
        let path = dir.join("epoch-000001/MANIFEST");
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replace("format=1", "format=9")).unwrap();
        let error = store.latest().unwrap_err().to_string();
        assert!(error.contains("has format version 9"), "{error}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn old_checkpoints_beyond_the_kept_ones_are_removed() {
        let dir = tempfile_dir();
        let store = CheckpointStore::open(&dir, 2).unwrap();
        for epoch in 1..=4 {
            store.complete(&manifest(epoch, vec![])).unwrap();
        }
        assert_eq!(store.epochs().unwrap(), vec![3, 4]);
        fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "freshet-store-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
