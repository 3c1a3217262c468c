//! Checkpoints: a query's state saved at a consistent cut of its input, so that a run killed
//! at any moment resumes from the last one and its committed output is as if it had never
//! stopped.
//!
//! The cut is a *barrier*, a position in a replay of files ([`barriers`]). The run's
//! coordinator (the exactly-once sink, `crate::sink::exactly_once`) places one every
//! checkpoint interval, one past the largest replay position any source partition has
//! handed out. It travels in order with the data as [`StreamMessage::Barrier`]
//! (`crate::watermark`): the exchange's merge — which applies source partitions in replay
//! order — passes it on once every partition it reads has reached the barrier's position,
//! after every row before it and ahead of every row after it, so the barriers of all
//! partitions of an operator are aligned by construction. The exchange writes its watermark
//! state there; each stateful operator, when the barrier reaches it, writes its state
//! ([`OperatorState`]: one Arrow IPC file per operator and partition), records that it has
//! passed the barrier ([`PassedBarriers`]) and hands out an empty batch, so that what reads it
//! learns of the barrier exactly between the rows before and after. A stateless query's
//! sink reads the sources' positions itself.
//!
//! Once every output partition has passed the barrier, every state of the epoch is on disk:
//! the coordinator writes the manifest ([`store`]), which makes the checkpoint exist, then
//! commits the output the epoch covered. A resumed run reads the newest whole checkpoint,
//! refuses it if the query, the options or the number of streams differ, seeks every source
//! partition to the barrier's position and restores each operator's state before its first
//! batch.
//!
//! Operators name their state files by their place in the plan (`<index>-<operator>`), so a
//! resumed run of the same query finds them.

mod barriers;
mod codec;
mod plan;
mod state;
mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

pub use barriers::{Barrier, Barriers, PassedBarriers};
pub use codec::{Persist, StateReader, StateWriter};
pub use plan::{BarrierProbe, barrier_probe, lookup_tables, probe_below};
pub use state::{Checksum, OperatorState, checksum};
pub use store::{CheckpointStore, FORMAT_VERSION, Fingerprint, Manifest, StateEntry, sync_dir};

/// A run's checkpointing, reachable from every operator through the task context's session
/// config (see the module documentation).
#[derive(Debug)]
pub struct Checkpointing {
    store: CheckpointStore,
    barriers: Barriers,
    /// The checkpoint this run resumes from.
    restored: Option<Manifest>,
    /// Each operator's name, by the address of its plan node.
    operators: HashMap<usize, String>,
    /// The nodes of lookups' tables (by address): read whole by every run, they take no
    /// part in checkpoints.
    tables: HashSet<usize>,
    /// The state files being written, by epoch: each is written in a task of its own
    /// while its operator goes on.
    written: Mutex<BTreeMap<u64, Vec<JoinHandle<Result<StateEntry>>>>>,
    /// The states of operator partitions whose input ended, by state file name (see
    /// [`Self::record_ended`]).
    ended: Mutex<BTreeMap<String, OperatorState>>,
}

impl Checkpointing {
    /// Checkpointing of `plan` into `store`, resuming from `restored` if given.
    pub fn new(
        store: CheckpointStore,
        restored: Option<Manifest>,
        plan: &Arc<dyn ExecutionPlan>,
    ) -> Self {
        let mut operators = HashMap::new();
        let mut index = 0;
        let _ = plan.apply(|node| {
            operators.insert(
                node_address(node.as_ref()),
                format!("{index:02}-{}", node.name()),
            );
            index += 1;
            Ok(TreeNodeRecursion::Continue)
        });
        let (last_epoch, resumed_at) = restored.as_ref().map_or((0, 0), |m| (m.epoch, m.position));
        let tables = lookup_tables(plan)
            .iter()
            .map(|node| node_address(node.as_ref()))
            .collect();
        Self {
            store,
            barriers: Barriers::new(last_epoch, resumed_at),
            restored,
            operators,
            tables,
            written: Mutex::new(BTreeMap::new()),
            ended: Mutex::new(BTreeMap::new()),
        }
    }

    /// The run's checkpointing, if it has one.
    pub fn of(context: &TaskContext) -> Option<Arc<Self>> {
        context.session_config().get_extension::<Self>()
    }

    pub fn barriers(&self) -> &Barriers {
        &self.barriers
    }

    pub fn store(&self) -> &CheckpointStore {
        &self.store
    }

    pub fn restored(&self) -> Option<&Manifest> {
        self.restored.as_ref()
    }

    /// The replay position this run starts from: that of the checkpoint it resumes.
    pub fn resumed_at(&self) -> i64 {
        self.restored.as_ref().map_or(0, |m| m.position)
    }

    /// Whether `node` belongs to a lookup's table, which every run reads whole.
    pub fn reads_whole(&self, node: &dyn ExecutionPlan) -> bool {
        self.tables.contains(&node_address(node))
    }

    /// The name of `node`'s state files, for partition `partition`.
    pub fn state_name(&self, node: &dyn ExecutionPlan, partition: usize) -> Result<String> {
        match self.operators.get(&node_address(node)) {
            Some(name) => Ok(format!("{name}-p{partition}.arrow")),
            None => internal_err!("checkpoint: {} is not in the planned query", node.name()),
        }
    }

    /// Writes state file `name` (see [`Self::state_name`]) of barrier `epoch`, in a task
    /// of its own: the operator goes on while its state reaches the disk, and the checkpoint
    /// completes once every file of its epoch has.
    pub fn write_state(&self, epoch: u64, name: &str, state: OperatorState) -> Result<()> {
        let store = self.store.clone();
        let name = name.to_string();
        let writing = tokio::task::spawn_blocking(move || {
            let entry = store.write_state(epoch, &name, &state)?;
            fail_point("after_state_write");
            Ok(entry)
        });
        self.written.lock().entry(epoch).or_default().push(writing);
        Ok(())
    }

    /// Records that the operator partition of state file `name` has ended, leaving `state`.
    /// A partition ends once its whole input was read, so a barrier it did not pass stands
    /// past all it read: each later checkpoint it did not pass holds `state` as its state.
    /// (Without it, a checkpoint placed as the input ended would lose what the ended
    /// partitions counted.)
    pub fn record_ended(&self, name: &str, state: OperatorState) {
        self.ended.lock().insert(name.to_string(), state);
    }

    /// State file `name` of the checkpoint this run resumes, if it has one.
    pub fn restored_state(&self, name: &str) -> Result<Option<OperatorState>> {
        let Some(manifest) = &self.restored else {
            return Ok(None);
        };
        self.store.read_state(manifest, name)
    }

    /// Makes checkpoint `barrier` exist with the states written for it, covering `outputs`;
    /// `finished`: the query has ended. Returns the bytes of its state files.
    pub async fn complete(
        &self,
        barrier: Barrier,
        finished: bool,
        fingerprint: &Fingerprint,
        outputs: Vec<(String, String)>,
    ) -> Result<u64> {
        let writing = self
            .written
            .lock()
            .remove(&barrier.epoch)
            .unwrap_or_default();
        let mut states = Vec::with_capacity(writing.len());
        for written in writing {
            match written.await {
                Ok(entry) => states.push(entry?),
                Err(error) => return internal_err!("writing checkpoint state failed: {error}"),
            }
        }
        let ended: Vec<(String, OperatorState)> = self
            .ended
            .lock()
            .iter()
            .filter(|(name, _)| !states.iter().any(|entry| &entry.name == *name))
            .map(|(name, state)| (name.clone(), state.clone()))
            .collect();
        if !ended.is_empty() {
            let store = self.store.clone();
            let epoch = barrier.epoch;
            let written = tokio::task::spawn_blocking(move || {
                ended
                    .iter()
                    .map(|(name, state)| store.write_state(epoch, name, state))
                    .collect::<Result<Vec<_>>>()
            })
            .await;
            match written {
                Ok(entries) => states.extend(entries?),
                Err(error) => return internal_err!("writing checkpoint state failed: {error}"),
            }
        }
        fail_point("before_manifest");
        let bytes = states.iter().map(|s| s.bytes).sum();
        self.store.complete(&Manifest {
            epoch: barrier.epoch,
            position: barrier.position,
            finished,
            fingerprint: fingerprint.clone(),
            states,
            outputs,
        })?;
        fail_point("after_manifest");
        self.barriers.complete(barrier.epoch);
        Ok(bytes)
    }
}

/// The address of a plan node, which names it for as long as the plan lives.
fn node_address(node: &dyn ExecutionPlan) -> usize {
    node as *const dyn ExecutionPlan as *const () as usize
}

/// A named point at which a test makes the process die as if killed
/// (`FRESHET_FAIL_POINT=NAME` or `NAME:N`, the N-th time it is reached).
pub fn fail_point(name: &str) {
    static CHOSEN: OnceLock<Option<(String, usize)>> = OnceLock::new();
    static REACHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let chosen = CHOSEN.get_or_init(|| {
        let text = std::env::var("FRESHET_FAIL_POINT").ok()?;
        Some(match text.split_once(':') {
            Some((name, nth)) => (name.to_string(), nth.parse().unwrap_or(1)),
            None => (text, 1),
        })
    });
    if let Some((chosen, nth)) = chosen
        && chosen == name
        && REACHED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 >= *nth
    {
        eprintln!("fail point {name} reached: aborting");
        std::process::abort();
    }
}

/// A named point at which a test makes the task wait (`FRESHET_PAUSE_POINT=NAME:MS`, for MS
/// milliseconds), so that what it races with happens meanwhile: a barrier placed while an
/// operator partition finishes, for example.
pub async fn pause_point(name: &str) {
    static CHOSEN: OnceLock<Option<(String, u64)>> = OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| {
        let text = std::env::var("FRESHET_PAUSE_POINT").ok()?;
        let (name, millis) = text.split_once(':')?;
        Some((name.to_string(), millis.parse().ok()?))
    });
    if let Some((chosen, millis)) = chosen
        && chosen == name
    {
        tokio::time::sleep(std::time::Duration::from_millis(*millis)).await;
    }
}
