//! A replay of files read unit by unit, each batch with its place in the replay.
//!
//! [`super::file_split`] cuts the files into units (row groups, row ranges, byte ranges or
//! whole files) in replay order and deals unit `u` to source partition `u mod n`. Read
//! through one scan, a partition's batches do not say where one unit ends and the next
//! begins; read one unit at a time, every batch has a position: the index of its unit in
//! the whole replay. Positions of one partition never fall, no two partitions share one, and
//! ordering batches by position is the replay's order at any number of partitions. The
//! exchange merges source partitions by these positions ([`crate::exchange`]), so a keyed
//! operator applies the records of a file in the file's order however the file was split.
//!
//! After each unit but the partition's last, the partition hands out an empty batch at the
//! position of its next unit: the merge then knows the partition is past the unit without
//! waiting for the next unit's first rows.
//!
//! A unit is read by a scan of that one file entry, placed in the partition's own slot of
//! the scan's file groups, so that the Parquet read ahead sees the partition it reads for.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use futures::StreamExt;
use futures::stream::{self, BoxStream};

use super::file_split::scan_config;

/// A batch and its position in the replay (the index of its unit).
pub type Positioned = (RecordBatch, i64);

/// Whether `plan` (the input of a stream's source: a file scan, or a projection that retypes
/// its event time over one) can be read unit by unit.
pub fn reads_units(plan: &Arc<dyn ExecutionPlan>) -> bool {
    scan_and_parent(plan).is_some()
}

/// A file scan, and the projection over it, if any.
type ScanAndParent<'a> = (
    &'a Arc<dyn ExecutionPlan>,
    Option<&'a Arc<dyn ExecutionPlan>>,
);

/// The file scan of `plan`, and the projection over it, if any.
fn scan_and_parent(plan: &Arc<dyn ExecutionPlan>) -> Option<ScanAndParent<'_>> {
    if scan_config(plan).is_some() {
        return Some((plan, None));
    }
    match plan.children().as_slice() {
        [child] if scan_config(child).is_some() => Some((*child, Some(plan))),
        _ => None,
    }
}

/// Partition `partition` of `plan` read one unit at a time from replay position `from` on
/// (a resumed checkpoint's), each batch with its position, and an empty batch at the next
/// unit's position after each unit but the last.
pub fn read_units(
    plan: &Arc<dyn ExecutionPlan>,
    partition: usize,
    context: Arc<TaskContext>,
    from: i64,
) -> Result<BoxStream<'static, Result<Positioned>>> {
    let Some((config, parent)) =
        scan_and_parent(plan).and_then(|(scan, parent)| Some((scan_config(scan)?, parent)))
    else {
        return internal_err!("read_units reads a file scan");
    };
    let partitions = config.file_groups.len();
    let units = config
        .file_groups
        .get(partition)
        .map(|group| group.files().to_vec())
        .unwrap_or_default();
    let count = units.len();
    let config = config.clone();
    let parent = parent.cloned();
    let schema = plan.schema();
    let first = units
        .iter()
        .enumerate()
        .position(|(index, _)| (index * partitions + partition) as i64 >= from)
        .unwrap_or(count);
    let unit_streams = units
        .into_iter()
        .enumerate()
        .skip(first)
        .map(move |(index, unit)| {
            let position = (index * partitions + partition) as i64;
            let mut groups = vec![FileGroup::default(); partitions];
            groups[partition] = FileGroup::new(vec![unit]);
            let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(
                FileScanConfigBuilder::from(config.clone())
                    .with_file_groups(groups)
                    .with_preserve_order(true)
                    .build(),
            );
            let opened = match &parent {
                Some(parent) => Arc::clone(parent).replace_children(
                    vec![scan],
                    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
                ),
                None => Ok(scan),
            }
            .and_then(|plan| plan.execute(partition, Arc::clone(&context)));
            let batches = match opened {
                Ok(batches) => batches
                    .map(move |batch| batch.map(|batch| (batch, position)))
                    .boxed(),
                Err(error) => stream::once(async move { Err(error) }).boxed(),
            };
            if index + 1 == count {
                return batches;
            }
            let next = position + partitions as i64;
            let marker = RecordBatch::new_empty(Arc::clone(&schema));
            batches
                .chain(stream::once(async move { Ok((marker, next)) }))
                .boxed()
        });
    Ok(stream::iter(unit_streams).flatten().boxed())
}
