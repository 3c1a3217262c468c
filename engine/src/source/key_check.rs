//! [`PartitionKeyCheck`]: checks, as the records flow, a stream's declaration that its source
//! partitions are partitioned by key columns (`partitioned_by`), and that two streams joined
//! on such keys are partitioned alike.
//!
//! A sticky exchange trusts that declaration: each stream keeps its source partitions' rows,
//! so a key met in two source partitions would be aggregated on two streams and give two
//! partial rows instead of one. The check makes a false declaration an error that names the
//! stream and the key, never a silently wrong answer. A join of two different streams, each
//! declared partitioned by the join keys into as many partitions, keeps both sides' partitions
//! too (partition `p` of one meets partition `p` of the other): their checks then share one
//! map of keys to partitions ([`PartitionKeyCheck::co_partitioned`]), so a key in partition 0
//! of one stream and partition 1 of the other fails the run as well.
//!
//! Each source partition hashes its batch's keys and looks the hashes up in a set of its own,
//! so a key it has met before costs one hash and one probe. A key new to the partition is
//! encoded in arrow's row format and claimed in a map shared by all partitions: claimed by
//! another partition, the run fails. Work outside the local probe is per distinct key and
//! partition, not per record.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::hash_utils::{RandomState, create_hashes};
use datafusion::common::{Result, exec_err};
use parking_lot::Mutex;

use crate::kernels::PrehashedSet;

/// The source partition that claimed a key first, and the stream it was met in.
#[derive(Debug)]
struct Owner {
    partition: usize,
    table: Arc<str>,
}

/// Keys (in arrow's row format) claimed so far, shared by a stream's source partitions and,
/// for streams joined sticky, by both streams'.
type KeyOwners = Mutex<HashMap<OwnedRow, Owner>>;

/// The check of one stream's declaration.
#[derive(Debug)]
pub struct PartitionKeyCheck {
    table: Arc<str>,
    /// The checked key columns; for co-partitioned streams, in the join's key order.
    columns: Vec<usize>,
    /// The declaration, as the user wrote it.
    declared: String,
    fields: Vec<SortField>,
    owners: Arc<KeyOwners>,
}

impl PartitionKeyCheck {
    /// A check of `names` (the declared keys) in `schema`; `None` when a key is not in the
    /// schema (a projection dropped it, so nothing downstream relies on the declaration).
    pub fn try_new(table: &str, schema: &SchemaRef, names: &[String]) -> Option<Arc<Self>> {
        let columns: Option<Vec<usize>> = names.iter().map(|n| schema.index_of(n).ok()).collect();
        Some(Arc::new(Self::new(
            table,
            schema,
            columns?,
            &names.join("+"),
            Arc::default(),
        )))
    }

    /// Checks of two streams joined on their declared keys, sharing one map of keys to
    /// partitions: each side is its stream's name, schema, declaration and the columns of
    /// its declared keys in the join's key order (equal types, position by position). A key
    /// is then in partitions of one number in both streams, or the run fails.
    pub fn co_partitioned(sides: [CoPartitionedSide<'_>; 2]) -> [Arc<Self>; 2] {
        let owners: Arc<KeyOwners> = Arc::default();
        sides.map(|side| {
            Arc::new(Self::new(
                side.table,
                side.schema,
                side.columns,
                side.declared,
                Arc::clone(&owners),
            ))
        })
    }

    fn new(
        table: &str,
        schema: &SchemaRef,
        columns: Vec<usize>,
        declared: &str,
        owners: Arc<KeyOwners>,
    ) -> Self {
        let fields = columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        Self {
            table: table.into(),
            columns,
            declared: declared.to_string(),
            fields,
            owners,
        }
    }

    /// The per-partition side of the check.
    pub fn partition(self: &Arc<Self>, partition: usize) -> Result<PartitionKeys> {
        Ok(PartitionKeys {
            check: Arc::clone(self),
            partition,
            seen: PrehashedSet::default(),
            converter: RowConverter::new(self.fields.clone())?,
            hashes: Vec::new(),
            random_state: RandomState::with_seed(0x5eed),
        })
    }
}

/// One stream of a sticky join on declared keys; see [`PartitionKeyCheck::co_partitioned`].
pub struct CoPartitionedSide<'a> {
    pub table: &'a str,
    pub schema: &'a SchemaRef,
    pub columns: Vec<usize>,
    pub declared: &'a str,
}

/// One source partition's keys.
pub struct PartitionKeys {
    check: Arc<PartitionKeyCheck>,
    partition: usize,
    seen: PrehashedSet,
    converter: RowConverter,
    hashes: Vec<u64>,
    random_state: RandomState,
}

impl PartitionKeys {
    /// Claims the batch's keys for this partition; an error when another partition has one.
    pub fn check(&mut self, batch: &RecordBatch) -> Result<()> {
        let keys: Vec<ArrayRef> = self
            .check
            .columns
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        self.hashes.clear();
        self.hashes.resize(batch.num_rows(), 0);
        create_hashes(&keys, &self.random_state, &mut self.hashes)?;
        let new_rows: Vec<usize> = (0..batch.num_rows())
            .filter(|&row| self.seen.insert(self.hashes[row]))
            .collect();
        if new_rows.is_empty() {
            return Ok(());
        }
        let rows = self.converter.convert_columns(&keys)?;
        let mut owners = self.check.owners.lock();
        for row in new_rows {
            let key = rows.row(row);
            match owners.get(&key.owned()) {
                Some(owner) if owner.partition != self.partition => {
                    let values: Vec<String> = keys
                        .iter()
                        .map(|column| {
                            datafusion::common::ScalarValue::try_from_array(column, row)
                                .map(|v| v.to_string())
                                .unwrap_or_default()
                        })
                        .collect();
                    let check = &self.check;
                    if owner.table != check.table {
                        return exec_err!(
                            "stream '{}' is declared partitioned_by={}, but the key ({}) is in its source partition {} and in source partition {} of stream '{}', which it is joined with on that key: streams joined on their declared keys must put each key in partitions of the same number; declare the keys the sources are really partitioned by, or leave partitioned_by out of one of them",
                            check.table,
                            check.declared,
                            values.join(", "),
                            self.partition,
                            owner.partition,
                            owner.table
                        );
                    }
                    return exec_err!(
                        "stream '{}' is declared partitioned_by={}, but the key ({}) is in source partitions {} and {}: declare the keys the source is really partitioned by, or leave partitioned_by out",
                        check.table,
                        check.declared,
                        values.join(", "),
                        owner.partition,
                        self.partition
                    );
                }
                Some(_) => {}
                None => {
                    let owner = Owner {
                        partition: self.partition,
                        table: Arc::clone(&self.check.table),
                    };
                    owners.insert(key.owned(), owner);
                }
            }
        }
        Ok(())
    }
}
