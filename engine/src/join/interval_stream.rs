//! One output partition of an [`IntervalJoinExec`] at work: both sides' kept rows and
//! watermarks, a batch probed against the other side's rows and kept for its rows to come, a
//! watermark that frees what it puts out of reach (see `interval_join.rs` for the
//! algorithm).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering as AtomicOrdering};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder, Int64Array, UInt32Array,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef, UInt32Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{JoinSide, JoinType, Result, plan_err};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::ExecutionPlan;

use super::interval_join::{IntervalJoinExec, OutputTime};
use super::join_output::{Common, Pairs, apply_filter, gather, take_record};
use super::side_state::{Chunk, Found, Position, ProbingRows, SideState};
use super::{KeyEquality, KeyHasher, integer_values, key_comparator};
use crate::checkpoint::OperatorState;
use crate::late_records::LateRecords;
use crate::message_loop::ended_state;
use crate::operator_metrics::StatefulMetrics;
use crate::plan_util::evaluate;
use crate::watermark::{event_times, time_range as batch_time_range};

/// One side of a running join.
struct Side {
    state: SideState,
    watermark: i64,
    keys: Vec<PhysicalExprRef>,
    /// The left side's key types, which this side's keys are cast to.
    key_types: Vec<DataType>,
    time_column: usize,
    /// The column that ends its rows' reach, if not the event time.
    until_column: Option<usize>,
    role: SideRole,
    late_records: LateRecords,
}

impl Side {
    /// The key columns of `batch`, cast to the left side's key types.
    fn keys_of(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let mut keys = evaluate(&self.keys, batch)?;
        for (key, key_type) in keys.iter_mut().zip(&self.key_types) {
            if key.data_type() != key_type {
                *key = cast(key, key_type)?;
            }
        }
        Ok(keys)
    }

    /// Writes the rows this side keeps, their matched flags and where its rows are freed
    /// through, under `prefix`.
    fn snapshot_into(
        &self,
        state: &mut OperatorState,
        prefix: &str,
        schema: &SchemaRef,
    ) -> Result<()> {
        let chunks: Vec<&Chunk> = self.state.held_chunks().collect();
        let rows = concat_batches(schema, chunks.iter().map(|chunk| &chunk.batch))?;
        for (index, column) in rows.columns().iter().enumerate() {
            state.put_array(format!("{prefix}_column_{index:03}"), Arc::clone(column));
        }
        let lengths = chunks.iter().map(|chunk| chunk.batch.num_rows() as u32);
        state.put_array(
            format!("{prefix}_chunk_rows"),
            Arc::new(UInt32Array::from_iter_values(lengths)),
        );
        if self.role.tracks_matches() {
            let matched = chunks.iter().flat_map(|chunk| {
                let matched = chunk.matched.as_ref();
                (0..chunk.batch.num_rows()).map(move |row| matched.is_some_and(|m| m.get_bit(row)))
            });
            state.put_array(
                format!("{prefix}_matched"),
                Arc::new(BooleanArray::from_iter(matched.map(Some))),
            );
        }
        state.put_value(format!("{prefix}_watermark"), self.watermark);
        state.put_value(
            format!("{prefix}_freed_through"),
            self.state.freed_through(),
        );
        Ok(())
    }

    /// Takes back what [`Self::snapshot_into`] wrote: the kept rows, chunk by chunk as they
    /// were kept, with their times, keys and hashes computed again.
    fn restore_from(
        &mut self,
        state: &OperatorState,
        prefix: &str,
        schema: &SchemaRef,
        key_hasher: &KeyHasher,
    ) -> Result<()> {
        let rows = RecordBatch::try_new(
            Arc::clone(schema),
            state.arrays_with_prefix(&format!("{prefix}_column_")),
        )?;
        let lengths = state
            .array(&format!("{prefix}_chunk_rows"))?
            .as_primitive::<UInt32Type>()
            .clone();
        let matched = match self.role.tracks_matches() {
            true => Some(
                state
                    .array(&format!("{prefix}_matched"))?
                    .as_boolean()
                    .clone(),
            ),
            false => None,
        };
        let mut chunks = Vec::with_capacity(lengths.len());
        let mut offset = 0;
        for length in lengths.values().iter().map(|&l| l as usize) {
            let batch = rows.slice(offset, length);
            let flags = matched.as_ref().map(|matched| {
                let mut flags = BooleanBufferBuilder::new(length);
                flags.append_buffer(&matched.values().slice(offset, length));
                flags
            });
            chunks.push(self.kept_chunk(batch, flags, key_hasher)?);
            offset += length;
        }
        self.state
            .restore(chunks, state.value(&format!("{prefix}_freed_through"))?);
        self.watermark = state.value(&format!("{prefix}_watermark"))?;
        Ok(())
    }

    /// `batch`, every row of which this side kept, as a chunk with its rows' key hashes.
    fn kept_chunk(
        &self,
        batch: RecordBatch,
        matched: Option<BooleanBufferBuilder>,
        key_hasher: &KeyHasher,
    ) -> Result<(Chunk, Vec<u64>)> {
        let times = event_times(batch.column(self.time_column))?
            .as_primitive::<Int64Type>()
            .clone();
        let untils = match self.until_column {
            Some(column) => event_times(batch.column(column))?
                .as_primitive::<Int64Type>()
                .clone(),
            None => times.clone(),
        };
        let keys = self.keys_of(&batch)?;
        let hashes = key_hasher.hashes(&keys, batch.num_rows())?;
        let (min_time, max_time) = batch_time_range(&untils).unwrap_or((i64::MAX, i64::MIN));
        let (earliest_event_time, latest_event_time) =
            batch_time_range(&times).unwrap_or((i64::MAX, i64::MIN));
        let event_times = self.until_column.map(|_| times);
        let chunk = Chunk {
            batch,
            times: untils,
            keys,
            matched,
            max_time,
            min_time,
            earliest_event_time,
            latest_event_time,
            event_times,
        };
        Ok((chunk, hashes))
    }
}

/// What a side's rows become in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SideRole {
    /// Pairs only (an inner join, the inner side of an outer join).
    Paired,
    /// Pairs, and rows that never matched with nulls for the other side (the outer side).
    Outer,
    /// A row alone, the first time it matches (the kept side of a semi join).
    Semi,
    /// A row alone, when it is freed without having matched (the kept side of an anti join).
    Anti,
    /// Nothing: only filters the other side's rows (the other side of a semi or anti join).
    Filter,
}

impl SideRole {
    fn of(join_type: JoinType, side: JoinSide) -> Self {
        let left = side == JoinSide::Left;
        match join_type {
            JoinType::Inner => Self::Paired,
            JoinType::Left | JoinType::Right | JoinType::Full
                if join_type == JoinType::Full || (join_type == JoinType::Left) == left =>
            {
                Self::Outer
            }
            JoinType::Left | JoinType::Right => Self::Paired,
            JoinType::LeftSemi | JoinType::RightSemi
                if (join_type == JoinType::LeftSemi) == left =>
            {
                Self::Semi
            }
            JoinType::LeftAnti | JoinType::RightAnti
                if (join_type == JoinType::LeftAnti) == left =>
            {
                Self::Anti
            }
            _ => Self::Filter,
        }
    }

    /// Whether the pairs its rows find go out (inner and outer joins).
    fn emits_pairs(self) -> bool {
        matches!(self, Self::Paired | Self::Outer)
    }

    /// Whether its kept rows remember if they matched.
    fn tracks_matches(self) -> bool {
        matches!(self, Self::Outer | Self::Semi | Self::Anti)
    }

    /// Whether rows that never matched go out when freed.
    fn emits_unmatched(self) -> bool {
        matches!(self, Self::Outer | Self::Anti)
    }
}

/// Both sides' watermarks, read by the choice of which side to read next.
#[derive(Default)]
pub(super) struct Progress {
    left: AtomicI64,
    right: AtomicI64,
}

impl Progress {
    pub(super) fn watermarks(&self) -> (i64, i64) {
        (
            self.left.load(AtomicOrdering::Relaxed),
            self.right.load(AtomicOrdering::Relaxed),
        )
    }

    fn set(&self, side: JoinSide, watermark: i64) {
        let slot = match side {
            JoinSide::Left => &self.left,
            _ => &self.right,
        };
        slot.store(watermark, AtomicOrdering::Relaxed);
    }
}

/// The state of one output partition of the join.
pub(super) struct JoinStream {
    left: Side,
    right: Side,
    pub(super) progress: Arc<Progress>,
    common: Common,
    reservation: MemoryReservation,
    partition: usize,
    /// The output's event-time columns, and the progress last recorded in each.
    output_times: Vec<(OutputTime, i64)>,
}

impl JoinStream {
    pub(super) fn try_new(
        exec: &IntervalJoinExec,
        partition: usize,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        let spec = &exec.spec;
        let left_schema = exec.left.schema();
        let right_schema = exec.right.schema();
        let key_types = spec
            .on
            .iter()
            .map(|(l, _)| l.data_type(&left_schema))
            .collect::<Result<Vec<_>>>()?;
        let right_key_types = spec
            .on
            .iter()
            .map(|(_, r)| r.data_type(&right_schema))
            .collect::<Result<Vec<_>>>()?;
        let key_hasher = KeyHasher::for_key_types(&key_types, &right_key_types);
        let integer_key = matches!(key_hasher, KeyHasher::Integer);
        let side = |which, keys: Vec<PhysicalExprRef>, time_column| Side {
            state: match integer_key {
                true => SideState::with_integer_key(),
                false => SideState::default(),
            },
            watermark: i64::MIN,
            keys,
            key_types: key_types.clone(),
            time_column,
            until_column: spec.bound.until(which),
            role: SideRole::of(spec.join_type, which),
            late_records: exec.late_records[usize::from(which == JoinSide::Right)]
                .of_partition(&exec.passed, partition),
        };
        Ok(Self {
            left: side(
                JoinSide::Left,
                spec.on.iter().map(|(l, _)| Arc::clone(l)).collect(),
                spec.bound.left_time,
            ),
            right: side(
                JoinSide::Right,
                spec.on.iter().map(|(_, r)| Arc::clone(r)).collect(),
                spec.bound.right_time,
            ),
            progress: Arc::new(Progress {
                left: AtomicI64::new(i64::MIN),
                right: AtomicI64::new(i64::MIN),
            }),
            common: Common {
                bound: spec.bound,
                allowed_lateness: spec.allowed_lateness,
                filter: spec.filter.clone(),
                join_schema: Arc::clone(&exec.join_schema),
                left_schema,
                right_schema,
                projection: spec.projection.clone(),
                key_hasher,
                metrics: StatefulMetrics::new(&exec.metrics, partition),
                name: format!("IntervalJoinExec[{partition}]"),
                output_schema: exec.schema(),
            },
            reservation,
            partition,
            output_times: exec
                .output_times
                .iter()
                .map(|t| (t.clone(), i64::MIN))
                .collect(),
        })
    }

    /// The side `which` and the other one.
    fn sides(&mut self, which: JoinSide) -> (&mut Side, &mut Side, &Common) {
        match which {
            JoinSide::Left => (&mut self.left, &mut self.right, &self.common),
            _ => (&mut self.right, &mut self.left, &self.common),
        }
    }

    pub(super) fn on_batch(
        &mut self,
        which: JoinSide,
        batch: &RecordBatch,
    ) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        self.common.metrics.records_in.add(rows);
        if rows == 0 {
            return Ok(None);
        }
        let (side, other, common) = self.sides(which);
        let times = event_times(batch.column(side.time_column))?
            .as_primitive::<Int64Type>()
            .clone();
        // Where each row's reach ends: its `until` column, or its own time.
        let untils = match side.until_column {
            Some(column) => event_times(batch.column(column))?
                .as_primitive::<Int64Type>()
                .clone(),
            None => times.clone(),
        };
        let keys = side.keys_of(batch)?;
        let own_limit = if side.watermark == i64::MIN {
            i64::MIN
        } else {
            side.watermark.saturating_sub(common.allowed_lateness)
        };
        let keep_through = common.freed_through(which, other.watermark);
        let hashes = common.key_hasher.hashes(&keys, rows)?;
        // Rows that can match, and the rows that are late.
        let mut late = Vec::new();
        let mut unmatchable = Vec::new();
        let nullable: Vec<&ArrayRef> = keys.iter().filter(|k| k.null_count() > 0).collect();
        // A regular join's rows match whatever their times, null ones included.
        let time_nulls =
            !common.bound.is_unbounded() && (times.null_count() > 0 || untils.null_count() > 0);
        // The time and until ranges of the matchable rows. Usually no key or time is null
        // and no row is late: then every row can match, found in one pass.
        let mut time_range = batch_time_range(&times)
            .filter(|(earliest, _)| nullable.is_empty() && !time_nulls && *earliest >= own_limit);
        let every_row_matchable = time_range.is_some();
        let mut until_range = match side.until_column {
            Some(_) if every_row_matchable => batch_time_range(&untils),
            _ => time_range,
        };
        let matchable: Vec<u32> = if every_row_matchable {
            (0..rows as u32).collect()
        } else {
            let mut matchable = Vec::with_capacity(rows);
            for row in 0..rows {
                // A late row is late whatever its keys: an outer join's unmatched row
                // passed on behind the join's progress would be late downstream instead, at
                // one number of streams and not at another.
                if times.is_valid(row) && times.value(row) < own_limit {
                    late.push(row);
                } else if (time_nulls && (times.is_null(row) || untils.is_null(row)))
                    || nullable.iter().any(|k| k.is_null(row))
                {
                    unmatchable.push(row as u32);
                } else {
                    let widen = |range: &mut Option<(i64, i64)>, value: i64| {
                        let (first, last) = range.unwrap_or((value, value));
                        *range = Some((first.min(value), last.max(value)));
                    };
                    widen(&mut time_range, times.value(row));
                    widen(&mut until_range, untils.value(row));
                    matchable.push(row as u32);
                }
            }
            matchable
        };
        common.metrics.late_dropped.add(late.len());
        if !late.is_empty() && side.late_records.wanted() {
            let mut selected = vec![false; rows];
            for &row in &late {
                selected[row] = true;
            }
            side.late_records
                .send(batch, &BooleanArray::from(selected))?;
        }
        // The other side's until values a row can match.
        let bound = common.bound;
        let reach = |row: usize| bound.probe_range(which, times.value(row), untils.value(row));
        // The batch's key values, for a join on one integer key indexed by value.
        let key_values = match keys.as_slice() {
            [key] if other.state.wants_key_values() => integer_values(key)?,
            _ => None,
        };
        let probing = ProbingRows {
            rows: &matchable,
            hashes: &hashes,
            values: key_values.as_ref(),
        };
        // Whether the other side holds rows the batch can reach: a side whose rows come
        // after the other side's (q7's maxima, a window's end after its rows) probes nothing.
        let reachable = match (time_range, until_range) {
            (Some((first, _)), Some((_, last))) => {
                let (from, to) = bound.probe_range(which, first, last);
                other.state.prepare_probes(from, to, &probing);
                other.state.holds_rows_within(from, to)
            }
            _ => false,
        };
        // The kept rows each of the batch's rows reaches.
        let mut found = Found::with_capacity(if reachable { matchable.len() } else { 0 });
        if reachable {
            other.state.probe_batch(&probing, reach, &mut found);
        }
        // Probing and kept rows have keys that are not null: where the hash is the key,
        // an equal hash is an equal key.
        if common.key_hasher.hash_is_key() {
            found.unsure.clear();
        }
        // A kept row of a side with an until column spans [its time, its until]: the probe
        // reads the bound's end on the until values, and the other end is checked here, the
        // kept row's own time at most this limit.
        let other_has_until = bound.until(which.negate()).is_some();
        // Rows found by value hold the probing row's key; a hash may be another key's.
        let pairs = if !other_has_until && (found.unsure.is_empty() || keys.is_empty()) {
            Pairs {
                probe: found.probe,
                kept: found.kept,
            }
        } else {
            let limit_of = |until: i64| match which {
                JoinSide::Left => until.saturating_add(bound.upper),
                _ => until.saturating_sub(bound.lower),
            };
            // A chunk whose rows all start by the batch's smallest limit needs no check of
            // its rows' own times (the auctions of q4 created before the bids probing them).
            let smallest_limit = until_range.map_or(i64::MIN, |(first, _)| limit_of(first));
            // Per kept chunk met, the comparison of its keys with the batch's, indexed by
            // the chunk's sequence number from the oldest kept one.
            let first_chunk = other.state.first_sequence();
            let mut same_keys: Vec<Option<KeyEquality>> = Vec::new();
            let mut unsure = found.unsure.iter().peekable();
            // The pairs that hold are moved to the front, in place.
            let Found {
                probe: mut pair_probe,
                kept: mut pair_kept,
                ..
            } = found;
            let mut held = 0;
            for at in 0..pair_probe.len() {
                let (row, position) = (pair_probe[at], pair_kept[at]);
                let check_key = unsure.next_if_eq(&&(at as u32)).is_some();
                let slot = (position.chunk - first_chunk) as usize;
                let Some(chunk) = other.state.chunk(position.chunk) else {
                    continue;
                };
                if other_has_until
                    && chunk.latest_event_time > smallest_limit
                    && chunk.event_times.as_ref().is_some_and(|times| {
                        times.value(position.row as usize) > limit_of(untils.value(row as usize))
                    })
                {
                    continue;
                }
                let same_key = !check_key || keys.is_empty() || {
                    if same_keys.len() <= slot {
                        same_keys.resize_with(slot + 1, || None);
                    }
                    let compare = match &mut same_keys[slot] {
                        Some(compare) => compare,
                        empty => empty.insert(key_comparator(&chunk.keys, &keys)?),
                    };
                    compare.is_equal(position.row as usize, row as usize)
                };
                if same_key {
                    pair_probe[held] = row;
                    pair_kept[held] = position;
                    held += 1;
                }
            }
            pair_probe.truncate(held);
            pair_kept.truncate(held);
            Pairs {
                probe: pair_probe,
                kept: pair_kept,
            }
        };
        let pairs = match &common.filter {
            Some(filter) if !pairs.probe.is_empty() => {
                apply_filter(filter, which, batch, &other.state, pairs)?
            }
            _ => pairs,
        };
        let mut outputs = Vec::new();
        // The probing rows that matched, where this side's role asks (an inner join's does
        // not).
        let probe_matched = (side.role == SideRole::Semi
            || side.role.tracks_matches()
            || side.role.emits_unmatched())
        .then(|| {
            let mut matched = vec![false; rows];
            for &row in &pairs.probe {
                matched[row as usize] = true;
            }
            matched
        });
        let matched_row = |row: u32| probe_matched.as_ref().is_some_and(|m| m[row as usize]);
        if other.role.tracks_matches() {
            // The kept rows matching for the first time: a semi join's output.
            let mut first_matches = Vec::new();
            for position in &pairs.kept {
                if let Some(chunk) = other.state.chunk_mut(position.chunk)
                    && let Some(matched) = chunk.matched.as_mut()
                    && !matched.get_bit(position.row as usize)
                {
                    matched.set_bit(position.row as usize, true);
                    first_matches.push(*position);
                }
            }
            if other.role == SideRole::Semi && !first_matches.is_empty() {
                let rows = gather(&other.state, &first_matches)?;
                outputs.push(common.project(rows.with_schema(Arc::clone(&common.join_schema))?)?);
            }
        }
        if side.role == SideRole::Semi {
            let matched: Vec<u32> = (0..rows as u32).filter(|&row| matched_row(row)).collect();
            if !matched.is_empty() {
                let rows = take_record(batch, &UInt32Array::from(matched))?;
                outputs.push(common.project(rows.with_schema(Arc::clone(&common.join_schema))?)?);
            }
        }
        if side.role.emits_pairs() && !pairs.probe.is_empty() {
            outputs.push(common.paired(which, batch, &other.state, pairs)?);
        }
        // Keep the rows a later row of the other side may still match; the outer side's
        // others go out unmatched now. Usually every row is kept.
        let mut unmatched = unmatchable;
        let kept = match until_range {
            Some((earliest, _)) if every_row_matchable && earliest > keep_through => matchable,
            _ => {
                let mut kept = Vec::new();
                for &row in &matchable {
                    if untils.value(row as usize) > keep_through {
                        kept.push(row);
                    } else if !matched_row(row) {
                        unmatched.push(row);
                    }
                }
                kept
            }
        };
        if !kept.is_empty() {
            let matched = side.role.tracks_matches().then(|| {
                let mut matched = BooleanBufferBuilder::new(kept.len());
                for &r in &kept {
                    matched.append(matched_row(r));
                }
                matched
            });
            // Usually every row is kept: the batch is kept as it is, not copied.
            let kept_all = kept.len() == rows;
            let (chunk_batch, chunk_times, chunk_untils, chunk_keys, chunk_hashes) = if kept_all {
                (batch.clone(), times, untils, keys, hashes)
            } else {
                let rows = UInt32Array::from(kept);
                let chunk_keys = keys
                    .iter()
                    .map(|key| Ok(take(key.as_ref(), &rows, None)?))
                    .collect::<Result<Vec<_>>>()?;
                let take_times = |times: &Int64Array| -> Result<Int64Array> {
                    Ok(take(times, &rows, None)?
                        .as_primitive::<Int64Type>()
                        .clone())
                };
                (
                    take_record(batch, &rows)?,
                    take_times(&times)?,
                    take_times(&untils)?,
                    chunk_keys,
                    rows.values().iter().map(|&r| hashes[r as usize]).collect(),
                )
            };
            let (min_time, max_time) = match until_range {
                Some(range) if kept_all => range,
                _ => batch_time_range(&chunk_untils).unwrap_or((i64::MAX, i64::MIN)),
            };
            let (earliest_event_time, latest_event_time) = match (side.until_column, time_range) {
                (None, _) => (min_time, max_time),
                (Some(_), Some(range)) if kept_all => range,
                (Some(_), _) => batch_time_range(&chunk_times).unwrap_or((i64::MAX, i64::MIN)),
            };
            let chunk = Chunk {
                batch: chunk_batch,
                times: chunk_untils,
                keys: chunk_keys,
                matched,
                max_time,
                min_time,
                earliest_event_time,
                latest_event_time,
                event_times: side.until_column.map(|_| chunk_times),
            };
            side.state.insert(chunk, chunk_hashes);
        }
        if side.role.emits_unmatched() && !unmatched.is_empty() {
            unmatched.sort_unstable();
            let rows = UInt32Array::from(unmatched);
            let own = take_record(batch, &rows)?;
            outputs.push(common.project(common.unmatched(which, side.role, own)?)?);
        }
        self.account()?;
        self.common.output(outputs)
    }

    pub(super) fn on_watermark(
        &mut self,
        which: JoinSide,
        watermark: i64,
    ) -> Result<Option<RecordBatch>> {
        let other_side = match which {
            JoinSide::Left => JoinSide::Right,
            _ => JoinSide::Left,
        };
        let (side, _, _) = self.sides(which);
        if watermark <= side.watermark {
            return Ok(None);
        }
        side.watermark = watermark;
        self.progress.set(which, watermark);
        let freed_through = self.common.freed_through(other_side, watermark);
        let (other, _, _) = self.sides(other_side);
        let mut outputs = Vec::new();
        let other_role = other.role;
        if other_role.emits_unmatched() {
            let mut positions = Vec::new();
            for (sequence, chunk) in other.state.live_chunks() {
                if chunk.min_time > freed_through {
                    continue;
                }
                let Some(matched) = chunk.matched.as_mut() else {
                    continue;
                };
                for row in 0..chunk.times.len() {
                    if !matched.get_bit(row) && chunk.times.value(row) <= freed_through {
                        matched.set_bit(row, true);
                        positions.push(Position {
                            chunk: sequence,
                            row: row as u32,
                        });
                    }
                }
            }
            if !positions.is_empty() {
                let rows = gather(&other.state, &positions)?;
                outputs.push(rows);
            }
        }
        let (other, _, _) = self.sides(other_side);
        other.state.free_through(freed_through);
        let outputs = outputs
            .into_iter()
            .map(|rows| {
                let rows = self.common.unmatched(other_side, other_role, rows)?;
                self.common.project(rows)
            })
            .collect::<Result<Vec<_>>>()?;
        self.account()?;
        let output = self.common.output(outputs)?;
        // Only progress moved: an empty batch wakes the exchange above to read it.
        match (output, self.record_progress()) {
            (None, true) => Ok(Some(RecordBatch::new_empty(Arc::clone(
                &self.common.output_schema,
            )))),
            (output, _) => Ok(output),
        }
    }

    /// Both sides' kept rows and watermarks, and the output's recorded progress: what a
    /// checkpoint keeps of this partition.
    pub(super) fn snapshot(&self) -> Result<OperatorState> {
        let mut state = OperatorState::default();
        self.left
            .snapshot_into(&mut state, "left", &self.common.left_schema)?;
        self.right
            .snapshot_into(&mut state, "right", &self.common.right_schema)?;
        for (index, (_, recorded)) in self.output_times.iter().enumerate() {
            state.put_value(format!("output_time_{index:03}"), *recorded);
        }
        self.common.metrics.snapshot_into(&mut state);
        Ok(state)
    }

    /// The counts of records this partition dropped.
    pub(super) fn dropped_counts(&self) -> &StatefulMetrics {
        &self.common.metrics
    }

    /// Takes back what [`Self::snapshot`] kept; of a partition whose input had ended, only
    /// the counts of the records it dropped.
    pub(super) fn restore(&mut self, state: &OperatorState) -> Result<()> {
        if ended_state(state) {
            return self.common.metrics.restore_from(state);
        }
        let key_hasher = &self.common.key_hasher;
        self.left
            .restore_from(state, "left", &self.common.left_schema, key_hasher)?;
        self.right
            .restore_from(state, "right", &self.common.right_schema, key_hasher)?;
        self.progress.set(JoinSide::Left, self.left.watermark);
        self.progress.set(JoinSide::Right, self.right.watermark);
        self.common.metrics.restore_from(state)?;
        for (index, (time, recorded)) in self.output_times.iter_mut().enumerate() {
            *recorded = state.value(&format!("output_time_{index:03}"))?;
            if *recorded > i64::MIN {
                time.progress.record(self.partition, *recorded);
            }
        }
        self.account()
    }

    /// Records, per event-time column of the output, the smallest time this partition may
    /// still emit in it (see the module documentation); whether any moved.
    fn record_progress(&mut self) -> bool {
        let lateness = self.common.allowed_lateness;
        let bound = self.common.bound;
        // `watermark - lateness + shift`, where a finished input (+infinity) stays finished.
        let at = |watermark: i64, shift: i64| match watermark {
            i64::MAX => i64::MAX,
            _ => watermark.saturating_sub(lateness).saturating_add(shift),
        };
        let (left, right) = (self.left.watermark, self.right.watermark);
        let mut moved = false;
        for (time, recorded) in &mut self.output_times {
            let (own, other, shift) = match time.side {
                JoinSide::Left => (&self.left, right, bound.upper.saturating_neg()),
                _ => (&self.right, left, bound.lower),
            };
            // A row still to come is not late; a kept one is not freed yet, and with an
            // until column its own time may lie anywhere before that: the earliest kept.
            let kept = match own.until_column {
                None => at(other, shift),
                Some(_) => own.state.earliest_event_time(),
            };
            let next = at(own.watermark, 0).min(kept);
            if next > *recorded {
                *recorded = next;
                time.progress.record(self.partition, next);
                moved = true;
            }
        }
        moved
    }

    /// Accounts both sides' state in the memory pool.
    fn account(&mut self) -> Result<()> {
        let bytes = self.left.state.size() + self.right.state.size();
        self.common.metrics.state_bytes.set(bytes);
        if let Err(e) = self.reservation.try_resize(bytes) {
            return plan_err!(
                "{} keeps more rows than the memory limit allows ({bytes} bytes of join state): narrow the join's time bound or raise the limit ({e})",
                self.common.name
            );
        }
        Ok(())
    }
}
