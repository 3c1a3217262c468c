//! [`PartitionKeyCheck`]: checks, as the records flow, a stream's declaration that its source
//! partitions are partitioned by key columns (`partitioned_by`).
//!
//! A sticky exchange trusts that declaration: each stream keeps its source partitions' rows,
//! so a key met in two source partitions would be aggregated on two streams and give two
//! partial rows instead of one. The check makes a false declaration an error that names the
//! stream and the key, never a silently wrong answer.
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

/// The keys claimed so far, shared by a stream's source partitions.
#[derive(Debug)]
pub struct PartitionKeyCheck {
    table: String,
    columns: Vec<usize>,
    names: Vec<String>,
    fields: Vec<SortField>,
    owners: Mutex<HashMap<OwnedRow, usize>>,
}

impl PartitionKeyCheck {
    /// A check of `names` (the declared keys) in `schema`; `None` when a key is not in the
    /// schema (a projection dropped it, so nothing downstream relies on the declaration).
    pub fn try_new(table: &str, schema: &SchemaRef, names: &[String]) -> Option<Arc<Self>> {
        let columns: Option<Vec<usize>> = names.iter().map(|n| schema.index_of(n).ok()).collect();
        let columns = columns?;
        let fields = columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        Some(Arc::new(Self {
            table: table.to_string(),
            columns,
            names: names.to_vec(),
            fields,
            owners: Mutex::new(HashMap::new()),
        }))
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
                Some(&owner) if owner != self.partition => {
                    let values: Vec<String> = keys
                        .iter()
                        .map(|column| {
                            datafusion::common::ScalarValue::try_from_array(column, row)
                                .map(|v| v.to_string())
                                .unwrap_or_default()
                        })
                        .collect();
                    return exec_err!(
                        "stream '{}' is declared partitioned_by={}, but the key ({}) is in source partitions {owner} and {}: declare the keys the source is really partitioned by, or leave partitioned_by out",
                        self.check.table,
                        self.check.names.join("+"),
                        values.join(", "),
                        self.partition
                    );
                }
                Some(_) => {}
                None => {
                    owners.insert(key.owned(), self.partition);
                }
            }
        }
        Ok(())
    }
}
