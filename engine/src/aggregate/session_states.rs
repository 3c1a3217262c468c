//! [`SessionStates`]: the aggregate states of open session windows, one group per session,
//! folded as records arrive, merged when a record bridges two sessions, and read out when a
//! session closes — so a session costs its records once, however long it stays open.
//!
//! Two ways to hold them, chosen from the aggregates:
//! - COUNT, SUM, AVG, MIN and MAX of 64-bit values ([`RunningAggregates`]): plain vectors by
//!   group id. A bridge merges the two groups at once; closed groups are read where they
//!   are, and the open ones are renumbered only when most ids are dead, so closing costs the
//!   closed sessions.
//! - Any other aggregate (DataFusion's `GroupsAccumulator`s in a [`GroupTable`]): an
//!   accumulator gives its groups' states only all at once, so a bridge only notes that the
//!   later group now belongs to the earlier one, and when sessions close every state is taken
//!   out: the closed sessions' states (with the groups merged into them) are merged into a
//!   fresh table and evaluated, the open ones' merged back renumbered. Closing then costs
//!   the open sessions too, once per watermark that closes any.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, UInt32Array, UInt64Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{Schema, UInt64Type};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::checkpoint::OperatorState;
use crate::kernels::{GroupTable, RunningAggregates};

/// See the module documentation.
pub(crate) enum SessionStates {
    Kernels(RunningAggregates),
    Accumulators {
        table: GroupTable,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        /// Per group: the group a bridge folded it into (itself if none).
        merged_into: Vec<usize>,
    },
}

impl SessionStates {
    /// Per-group kernels if `kernels` is given, else accumulators for `aggregates`.
    pub fn try_new(
        kernels: Option<RunningAggregates>,
        aggregates: &[Arc<AggregateFunctionExpr>],
    ) -> Result<Self> {
        Ok(match kernels {
            Some(kernels) => Self::Kernels(kernels),
            None => Self::Accumulators {
                table: GroupTable::try_new(&Arc::new(Schema::empty()), aggregates)?,
                aggregates: aggregates.to_vec(),
                merged_into: Vec::new(),
            },
        })
    }

    /// Folds rows into the groups `group_ids` names (`groups` in all): `arguments[i]` and
    /// `filters[i]` belong to aggregate `i`.
    pub fn accumulate(
        &mut self,
        group_ids: &[usize],
        groups: usize,
        arguments: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        match self {
            Self::Kernels(kernels) => kernels.fold(group_ids, groups, arguments)?,
            Self::Accumulators {
                table, merged_into, ..
            } => {
                let known = merged_into.len();
                merged_into.extend(known..groups);
                table.accumulate_groups(group_ids, groups, arguments, filters)?;
            }
        }
        Ok(())
    }

    /// Folds group `from` into group `into` (a record bridged their sessions).
    pub fn merge(&mut self, from: usize, into: usize) {
        match self {
            Self::Kernels(kernels) => kernels.merge_group(from, into),
            Self::Accumulators { merged_into, .. } => {
                if from >= merged_into.len() {
                    let known = merged_into.len();
                    merged_into.extend(known..=from);
                }
                merged_into[from] = into;
            }
        }
    }

    /// Whether taking closed sessions out renumbers every open one (see the module
    /// documentation).
    pub fn renumbers_at_every_close(&self) -> bool {
        matches!(self, Self::Accumulators { .. })
    }

    /// The aggregates of the sessions whose groups are `closed` (one row each, in order),
    /// which leave; `renumbered`, if given, lists the old group of each open session's new
    /// group `0..`, and must be given when [`Self::renumbers_at_every_close`].
    pub fn take_closed(
        &mut self,
        closed: &[usize],
        renumbered: Option<&[usize]>,
    ) -> Result<Vec<ArrayRef>> {
        match self {
            Self::Kernels(kernels) => {
                let values = kernels.values_of(closed)?;
                if let Some(keep) = renumbered {
                    kernels.retain(keep);
                }
                Ok(values)
            }
            Self::Accumulators {
                table,
                aggregates,
                merged_into,
            } => {
                let Some(open) = renumbered else {
                    return internal_err!("open sessions must be renumbered when any closes");
                };
                take_from_accumulators(table, aggregates, merged_into, closed, open)
            }
        }
    }

    /// Puts the open sessions' aggregate states into a checkpoint's `state`: the kernels'
    /// vectors, or every accumulator's partial states (taken out and merged straight back)
    /// with the bridges between groups.
    pub fn snapshot_into(&mut self, state: &mut OperatorState) -> Result<()> {
        match self {
            Self::Kernels(kernels) => kernels.snapshot_into(state),
            Self::Accumulators {
                table, merged_into, ..
            } => {
                let known = merged_into.len();
                merged_into.extend(known..table.len());
                if !table.snapshot_in_place(state)? {
                    return internal_err!("checkpoint: session groups are kept without keys");
                }
                let merged = merged_into.iter().map(|&group| group as u64);
                state.put_array(
                    "session_merged_into",
                    Arc::new(UInt64Array::from_iter_values(merged)),
                );
            }
        }
        Ok(())
    }

    /// Takes back what [`Self::snapshot_into`] kept.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<()> {
        match self {
            Self::Kernels(kernels) => kernels.restore_from(state),
            Self::Accumulators {
                table, merged_into, ..
            } => {
                if !table.restore_in_place(state)? {
                    return internal_err!("checkpoint: no session aggregate states to restore");
                }
                *merged_into = state
                    .array("session_merged_into")?
                    .as_primitive::<UInt64Type>()
                    .values()
                    .iter()
                    .map(|&group| group as usize)
                    .collect();
                Ok(())
            }
        }
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        match self {
            Self::Kernels(kernels) => kernels.size(),
            Self::Accumulators {
                table, merged_into, ..
            } => table.size() + merged_into.capacity() * std::mem::size_of::<usize>(),
        }
    }
}

/// Where a group's state goes when sessions close.
#[derive(Debug, Clone, Copy)]
enum Destination {
    Closed(usize),
    Open(usize),
}

/// Takes every state out of `table`; evaluates the `closed` sessions' (with the groups merged
/// into them) and merges the `open` ones' back, open session `i` (old group `open[i]`) as
/// group `i`.
fn take_from_accumulators(
    table: &mut GroupTable,
    aggregates: &[Arc<AggregateFunctionExpr>],
    merged_into: &mut Vec<usize>,
    closed: &[usize],
    open: &[usize],
) -> Result<Vec<ArrayRef>> {
    let total = table.len();
    let known = merged_into.len();
    merged_into.extend(known..total);
    let mut destination: Vec<Option<Destination>> = vec![None; merged_into.len()];
    for (i, &group) in closed.iter().enumerate() {
        destination[group] = Some(Destination::Closed(i));
    }
    for (i, &group) in open.iter().enumerate() {
        destination[group] = Some(Destination::Open(i));
    }
    let (mut closed_rows, mut closed_groups) = (Vec::new(), Vec::new());
    let (mut open_rows, mut open_groups) = (Vec::new(), Vec::new());
    for group in 0..total {
        // Follow the bridges to the group that stands for the session.
        let mut root = group;
        while merged_into[root] != root {
            root = merged_into[root];
        }
        match destination[root] {
            Some(Destination::Closed(i)) => {
                closed_rows.push(group as u32);
                closed_groups.push(i);
            }
            Some(Destination::Open(i)) => {
                open_rows.push(group as u32);
                open_groups.push(i);
            }
            None => return internal_err!("session group {group} belongs to no session"),
        }
    }
    let (_, states) = table.emit_states(EmitTo::All)?;
    let pick = |rows: Vec<u32>| -> Result<Vec<Vec<ArrayRef>>> {
        let rows = UInt32Array::from(rows);
        states
            .iter()
            .map(|columns| {
                columns
                    .iter()
                    .map(|c| Ok(take(c.as_ref(), &rows, None)?))
                    .collect()
            })
            .collect()
    };
    let mut finished = GroupTable::try_new(&Arc::new(Schema::empty()), aggregates)?;
    finished.merge_groups(&closed_groups, closed.len(), &pick(closed_rows)?)?;
    let (_, values) = finished.emit(EmitTo::All)?;
    table.merge_groups(&open_groups, open.len(), &pick(open_rows)?)?;
    *merged_into = (0..open.len()).collect();
    Ok(values)
}
