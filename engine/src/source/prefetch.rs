//! Parquet reads that fetch the next row group while the current one decodes.
//!
//! DataFusion's Parquet reader fetches a row group's column chunks when it needs them, then
//! decodes them: a source partition's reader waits for every read, and the read (a copy out
//! of the page cache, or a request to an object store) and the decode take turns on one
//! core. A replay reads its row groups in an order known in advance, so each read can start
//! the next one:
//!
//! 1. A read of whole column chunks of row group `g` is answered (from the read started
//!    for it, or by reading now).
//! 2. The same columns of the partition's next row group are then read in a task of their
//!    own: the next row group this file entry scans, or else the first row group of the
//!    partition's next entry when that is a unit of the same file (`file_split` deals a
//!    file's row groups to the partitions as entries of one row group each).
//! 3. The next read takes that result when it asks for exactly those byte ranges of that
//!    file; anything else (pages chosen by a page index, a row group pruned by a filter)
//!    is read as it comes, and a partition whose guesses keep missing stops guessing.
//!
//! The bytes a read returns never depend on the guess: a read ahead is used only for the
//! very ranges it read, of the same file.
//!
//! A local file is mapped into memory instead ([`MappedFile`]): a read is then a slice of
//! the mapping, and reading ahead maps the next row group's pages into the process.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::common::Result;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::datasource::physical_plan::{FileGroup, ParquetFileReaderFactory};
use datafusion::object_store::path::Path;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use super::mapped_file::MappedFile;

/// The scan's metric of reads answered by a read ahead.
pub const READ_AHEAD_USED: &str = "row_groups_read_ahead";

/// The scan's metric of reads answered from a memory map.
pub const READ_MAPPED: &str = "reads_memory_mapped";

/// Guesses a partition may miss before it stops reading ahead.
const MISSES_BEFORE_GIVING_UP: usize = 2;

/// A [`ParquetFileReaderFactory`] whose readers read the partition's next row group ahead.
pub struct PrefetchingReaderFactory {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Arc<dyn ParquetFileReaderFactory>,
    /// For a unit (partition, file, its last scanned row group), the partition's next
    /// entry and the row group it scans first, when that entry is a unit of the same file.
    next_unit: HashMap<(usize, Path, usize), (PartitionedFile, usize)>,
    /// Each partition's read ahead.
    partitions: Vec<Mutex<ReadAhead>>,
    /// Local files, mapped when first read; `None` when files are read through `inner`.
    mapped: Option<MappedFiles>,
}

/// The local files of a scan, each mapped once for all its partitions while anything reads
/// it: the readers of its entries, their reads ahead and the bytes they handed out hold the
/// mapping, and it is unmapped when the last of them is dropped (a directory's files do not
/// stay mapped after they were read).
struct MappedFiles {
    store: datafusion::object_store::local::LocalFileSystem,
    files: Mutex<HashMap<Path, FileMapping>>,
}

/// What the scan knows of a file's mapping.
enum FileMapping {
    /// Mapped, while anything holds the mapping.
    Mapped(std::sync::Weak<MappedFile>),
    /// Not mappable (not a plain file, or the system refused): read through the store.
    Unmappable,
}

impl MappedFiles {
    /// The mapping of the file at `location`, mapped now if nothing holds one.
    fn get(&self, location: &Path) -> Option<Arc<MappedFile>> {
        let mut files = self.files.lock();
        match files.get(location) {
            Some(FileMapping::Unmappable) => return None,
            Some(FileMapping::Mapped(mapped)) => {
                if let Some(mapped) = mapped.upgrade() {
                    return Some(mapped);
                }
            }
            None => {}
        }
        let mapped = self
            .store
            .path_to_filesystem(location)
            .ok()
            .and_then(|path| MappedFile::open(&path).ok())
            .map(Arc::new);
        let known = match &mapped {
            Some(mapped) => FileMapping::Mapped(Arc::downgrade(mapped)),
            None => FileMapping::Unmappable,
        };
        files.insert(location.clone(), known);
        mapped
    }
}

/// `ranges` of a mapped file, their pages mapped into the process once the file is known
/// to still hold them.
fn mapped_ranges(
    file: &Arc<MappedFile>,
    ranges: &[Range<u64>],
) -> datafusion::parquet::errors::Result<Vec<Bytes>> {
    ranges
        .iter()
        .map(|range| {
            let bytes = file
                .bytes(range.clone())
                .map_err(|error| ParquetError::External(Box::new(error)))?;
            file.populate(range.clone());
            Ok(bytes)
        })
        .collect()
}

/// One partition's read ahead.
#[derive(Default)]
struct ReadAhead {
    state: AheadState,
    misses: usize,
}

/// What a partition has read ahead.
#[derive(Default)]
enum AheadState {
    /// Nothing under way.
    #[default]
    Idle,
    /// `ranges` of `file` being read in a task of their own.
    Reading {
        file: Path,
        ranges: Vec<Range<u64>>,
        task: JoinHandle<datafusion::parquet::errors::Result<Vec<Bytes>>>,
    },
}

impl PrefetchingReaderFactory {
    /// Reads through `inner`'s readers, ahead along `groups` (the scan's file groups, one a
    /// source partition, in the order each partition reads them); with `map_local_files`,
    /// the files are local and read through memory maps.
    pub fn new(
        inner: Arc<dyn ParquetFileReaderFactory>,
        groups: &[FileGroup],
        map_local_files: bool,
    ) -> Self {
        let mut next_unit = HashMap::new();
        for (partition, group) in groups.iter().enumerate() {
            for pair in group.files().windows(2) {
                let [unit, next] = pair else { continue };
                let (Some(last), Some(first)) = (
                    scanned_row_groups(unit).and_then(|groups| groups.last().copied()),
                    whole_row_groups(next).and_then(|groups| groups.first().copied()),
                ) else {
                    continue;
                };
                if unit.object_meta.location == next.object_meta.location {
                    let key = (partition, unit.object_meta.location.clone(), last);
                    next_unit.insert(key, (next.clone(), first));
                }
            }
        }
        let partitions = groups.iter().map(|_| Mutex::default()).collect();
        let mapped = map_local_files.then(|| MappedFiles {
            store: datafusion::object_store::local::LocalFileSystem::new(),
            files: Mutex::default(),
        });
        Self {
            shared: Arc::new(Shared {
                inner,
                next_unit,
                partitions,
                mapped,
            }),
        }
    }
}

impl fmt::Debug for PrefetchingReaderFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefetchingReaderFactory")
            .field("inner", &self.shared.inner)
            .finish_non_exhaustive()
    }
}

impl ParquetFileReaderFactory for PrefetchingReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn AsyncFileReader + Send>> {
        let inner = self.shared.inner.create_reader(
            partition_index,
            partitioned_file.clone(),
            metadata_size_hint,
            metrics,
        )?;
        Ok(Box::new(PrefetchingReader {
            inner,
            shared: Arc::clone(&self.shared),
            partition: partition_index,
            row_groups: scanned_row_groups(&partitioned_file),
            file: partitioned_file,
            metadata_size_hint,
            metrics: metrics.clone(),
            read_ahead_used: MetricBuilder::new(metrics).counter(READ_AHEAD_USED, partition_index),
            read_mapped: MetricBuilder::new(metrics).counter(READ_MAPPED, partition_index),
            mapping: None,
            metadata: None,
        }))
    }
}

/// A file entry's reader that reads ahead (see the module documentation).
struct PrefetchingReader {
    inner: Box<dyn AsyncFileReader + Send>,
    shared: Arc<Shared>,
    partition: usize,
    file: PartitionedFile,
    /// The row groups the entry's access plan scans, in order; `None`: all of them.
    row_groups: Option<Vec<usize>>,
    metadata_size_hint: Option<usize>,
    metrics: ExecutionPlanMetricsSet,
    /// Reads answered by a read ahead.
    read_ahead_used: Count,
    /// Reads answered from a memory map.
    read_mapped: Count,
    /// The mapping of the entry's file, held from its first read on.
    mapping: Option<Arc<MappedFile>>,
    /// The file's metadata, once the reader was asked for it.
    metadata: Option<Arc<ParquetMetaData>>,
}

impl PrefetchingReader {
    /// The read ahead of exactly `ranges` of this file, if one is under way; any other read
    /// ahead is dropped (its task finishes on its own) and counted as a miss.
    fn take_read_ahead(
        &self,
        ranges: &[Range<u64>],
    ) -> Option<JoinHandle<datafusion::parquet::errors::Result<Vec<Bytes>>>> {
        let slot = self.shared.partitions.get(self.partition)?;
        let mut ahead = slot.lock();
        match std::mem::take(&mut ahead.state) {
            AheadState::Idle => None,
            AheadState::Reading {
                file,
                ranges: read,
                task,
            } => {
                if file == self.file.object_meta.location && read == ranges {
                    Some(task)
                } else {
                    ahead.misses += 1;
                    None
                }
            }
        }
    }

    /// Starts reading the columns of `ranges` (whole column chunks of one row group) in the
    /// partition's next row group.
    fn read_ahead(&self, ranges: &[Range<u64>]) {
        let Some(metadata) = &self.metadata else {
            return;
        };
        let Some((row_group, columns)) = column_chunks(metadata, ranges) else {
            return;
        };
        let Some((file, next)) = self.next_row_group(row_group) else {
            return;
        };
        let Some(next_ranges) = columns
            .iter()
            .map(|&column| chunk_range(metadata, next, column))
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        let Some(slot) = self.shared.partitions.get(self.partition) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut ahead = slot.lock();
        if ahead.misses >= MISSES_BEFORE_GIVING_UP || !matches!(ahead.state, AheadState::Idle) {
            return;
        }
        if let Some(mapped) = self.mapping_of(&file.object_meta.location) {
            let wanted = next_ranges.clone();
            // Mapping pages in blocks the thread, as a read does: not a worker's.
            let task = runtime.spawn_blocking(move || mapped_ranges(&mapped, &wanted));
            ahead.state = AheadState::Reading {
                file: file.object_meta.location,
                ranges: next_ranges,
                task,
            };
            return;
        }
        let Ok(mut reader) = self.shared.inner.create_reader(
            self.partition,
            file.clone(),
            self.metadata_size_hint,
            &self.metrics,
        ) else {
            return;
        };
        let wanted = next_ranges.clone();
        let task = runtime.spawn(async move { reader.get_byte_ranges(wanted).await });
        ahead.state = AheadState::Reading {
            file: file.object_meta.location,
            ranges: next_ranges,
            task,
        };
    }

    /// The mapping of the file at `location`, if files are mapped and it could be.
    fn mapping_of(&self, location: &Path) -> Option<Arc<MappedFile>> {
        self.shared.mapped.as_ref()?.get(location)
    }

    /// The mapping of this entry's file, if files are mapped and it could be; a read
    /// answered from it is counted.
    fn own_mapping(&mut self) -> Option<Arc<MappedFile>> {
        if self.mapping.is_none() {
            self.mapping = self.mapping_of(&self.file.object_meta.location);
        }
        let mapping = self.mapping.clone()?;
        self.read_mapped.add(1);
        Some(mapping)
    }

    /// `ranges` of this entry's file, from its mapping or through the inner reader.
    async fn read(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> datafusion::parquet::errors::Result<Vec<Bytes>> {
        match self.own_mapping() {
            Some(mapped) => mapped_ranges(&mapped, &ranges),
            None => self.inner.get_byte_ranges(ranges).await,
        }
    }

    /// The entry and row group the partition reads after `row_group` of this entry.
    fn next_row_group(&self, row_group: usize) -> Option<(PartitionedFile, usize)> {
        let metadata = self.metadata.as_ref()?;
        let later_in_entry = match &self.row_groups {
            Some(groups) => groups.iter().copied().find(|&group| group > row_group),
            None => Some(row_group + 1).filter(|&group| group < metadata.num_row_groups()),
        };
        match later_in_entry {
            Some(group) => Some((self.file.clone(), group)),
            None => {
                let key = (
                    self.partition,
                    self.file.object_meta.location.clone(),
                    row_group,
                );
                self.shared.next_unit.get(&key).cloned()
            }
        }
    }
}

impl AsyncFileReader for PrefetchingReader {
    fn get_bytes(
        &mut self,
        range: Range<u64>,
    ) -> BoxFuture<'_, datafusion::parquet::errors::Result<Bytes>> {
        match self.own_mapping() {
            Some(mapped) => {
                let bytes = mapped_ranges(&mapped, std::slice::from_ref(&range))
                    .map(|mut read| read.pop().unwrap_or_default());
                futures::future::ready(bytes).boxed()
            }
            None => self.inner.get_bytes(range),
        }
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, datafusion::parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let read_ahead = match self.take_read_ahead(&ranges) {
                // A read ahead that failed is read again, to report its error here.
                Some(task) => task.await.ok().and_then(|read| read.ok()),
                None => None,
            };
            let data = match read_ahead {
                Some(data) => {
                    self.read_ahead_used.add(1);
                    data
                }
                None => self.read(ranges.clone()).await?,
            };
            self.read_ahead(&ranges);
            Ok(data)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, datafusion::parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let metadata = self.inner.get_metadata(options).await?;
            self.metadata = Some(Arc::clone(&metadata));
            Ok::<_, ParquetError>(metadata)
        }
        .boxed()
    }
}

/// The row groups an entry's access plan scans, in order; `None` without a plan.
fn scanned_row_groups(file: &PartitionedFile) -> Option<Vec<usize>> {
    let plan = file.extensions.get::<ParquetAccessPlan>()?;
    Some(plan.row_group_indexes())
}

/// The row groups an entry scans whole (not a selection of their rows), if it has a plan
/// that scans only whole row groups.
fn whole_row_groups(file: &PartitionedFile) -> Option<Vec<usize>> {
    let plan = file.extensions.get::<ParquetAccessPlan>()?;
    let whole = plan
        .inner()
        .iter()
        .all(|access| !matches!(access, RowGroupAccess::Selection(_)));
    whole.then(|| plan.row_group_indexes())
}

/// The row group and column indexes of `ranges` if each is exactly a column chunk of one
/// row group. Row groups are stored in order, so the row group is found by a binary search
/// on where each begins (a file stored otherwise finds no match, and is not read ahead).
fn column_chunks(metadata: &ParquetMetaData, ranges: &[Range<u64>]) -> Option<(usize, Vec<usize>)> {
    let first = ranges.first()?;
    let begins = |group: &RowGroupMetaData| {
        let columns = group.columns().iter();
        columns.map(|c| c.byte_range().0).min().unwrap_or(u64::MAX)
    };
    let after = metadata
        .row_groups()
        .partition_point(|group| begins(group) <= first.start);
    let row_group = after.checked_sub(1)?;
    let columns = ranges
        .iter()
        .map(|range| {
            (0..metadata.row_group(row_group).num_columns())
                .find(|&column| chunk_range(metadata, row_group, column).as_ref() == Some(range))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((row_group, columns))
}

/// The byte range of a column chunk.
fn chunk_range(metadata: &ParquetMetaData, row_group: usize, column: usize) -> Option<Range<u64>> {
    let group = metadata.row_groups().get(row_group)?;
    let (start, length) = group.columns().get(column)?.byte_range();
    Some(start..start + length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::physical_plan::{
        FileScanConfigBuilder, ParquetSource, parquet::DefaultParquetFileReaderFactory,
    };
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::object_store::local::LocalFileSystem;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;
    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::prelude::SessionContext;

    const ROWS_PER_GROUP: usize = 100;
    const GROUPS: usize = 5;

    /// A file of `GROUPS` row groups: `a` counts the rows, `b` names them.
    fn write_file(name: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("freshet-{}-{name}.parquet", std::process::id()));
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let rows = (ROWS_PER_GROUP * GROUPS) as i64;
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| format!("row{i}")),
                )),
            ],
        )
        .unwrap();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(ROWS_PER_GROUP))
            .build();
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = ArrowWriter::try_new(file, schema, Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        path
    }

    /// Column `a` of every row the scan of `groups` returns, partition by partition, and the
    /// reads the read ahead answered.
    async fn scan(
        path: &std::path::Path,
        groups: Vec<FileGroup>,
        mapped: bool,
    ) -> (Vec<Vec<i64>>, usize) {
        let (partitions, used, reads_mapped) = scan_counting_maps(path, groups, mapped).await;
        assert_eq!(
            reads_mapped > 0,
            mapped,
            "reads answered from a memory map: {reads_mapped}"
        );
        (partitions, used)
    }

    /// As `scan`, also with the reads answered from a memory map.
    async fn scan_counting_maps(
        path: &std::path::Path,
        groups: Vec<FileGroup>,
        mapped: bool,
    ) -> (Vec<Vec<i64>>, usize, usize) {
        let ctx = SessionContext::new();
        let store = Arc::new(LocalFileSystem::new());
        let size = std::fs::metadata(path).unwrap().len();
        let name = path.to_str().unwrap();
        let partition_count = groups.len();
        let groups: Vec<FileGroup> = groups
            .into_iter()
            .map(|group| {
                FileGroup::new(
                    group
                        .files()
                        .iter()
                        .map(|unit| {
                            let mut entry = PartitionedFile::new(name, size);
                            entry.extensions = unit.extensions.clone();
                            entry
                        })
                        .collect(),
                )
            })
            .collect();
        let reader_factory = PrefetchingReaderFactory::new(
            Arc::new(DefaultParquetFileReaderFactory::new(store)),
            &groups,
            mapped,
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let source =
            ParquetSource::new(schema).with_parquet_file_reader_factory(Arc::new(reader_factory));
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_groups(groups)
                .with_preserve_order(true)
                .build();
        let plan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
        let mut partitions = Vec::new();
        for partition in 0..partition_count {
            let stream = plan.execute(partition, ctx.task_ctx()).unwrap();
            let batches = datafusion::physical_plan::common::collect(stream)
                .await
                .unwrap();
            let values = batches
                .iter()
                .flat_map(|batch| {
                    let a = batch
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap();
                    a.values().to_vec()
                })
                .collect();
            partitions.push(values);
        }
        let count = |name: &str| {
            plan.metrics()
                .and_then(|metrics| metrics.sum_by_name(name))
                .map_or(0, |value| value.as_usize())
        };
        (partitions, count(READ_AHEAD_USED), count(READ_MAPPED))
    }

    fn unit(row_group: usize) -> PartitionedFile {
        let mut plan = ParquetAccessPlan::new_none(GROUPS);
        plan.scan(row_group);
        PartitionedFile::new("placeholder", 0).with_extension(plan)
    }

    #[test]
    fn a_file_stays_mapped_while_something_holds_it() {
        let path = write_file("held");
        let files = MappedFiles {
            store: LocalFileSystem::new(),
            files: Mutex::default(),
        };
        let location = Path::from_filesystem_path(&path).unwrap();
        let first = files.get(&location).unwrap();
        let again = files.get(&location).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "one mapping for every reader");
        let weak = Arc::downgrade(&first);
        drop((first, again));
        assert!(weak.upgrade().is_none(), "unmapped once nothing holds it");
        assert!(
            files.get(&location).is_some(),
            "mapped again when read again"
        );
        std::fs::remove_file(&path).unwrap();
        let directory = Path::from_filesystem_path(std::env::temp_dir()).unwrap();
        assert!(
            files.get(&directory).is_none(),
            "a directory cannot be mapped"
        );
    }

    #[tokio::test]
    async fn a_whole_file_reads_each_next_row_group_ahead() {
        for mapped in [false, true] {
            let path = write_file(&format!("whole-{mapped}"));
            let (partitions, used) = scan(
                &path,
                vec![FileGroup::new(vec![PartitionedFile::new("x", 0)])],
                mapped,
            )
            .await;
            std::fs::remove_file(&path).unwrap();
            let expected: Vec<i64> = (0..(ROWS_PER_GROUP * GROUPS) as i64).collect();
            assert_eq!(partitions, vec![expected], "mapped: {mapped}");
            assert_eq!(
                used,
                GROUPS - 1,
                "every row group after the first was read ahead (mapped: {mapped})"
            );
        }
    }

    #[tokio::test]
    async fn dealt_row_groups_are_read_ahead_along_each_partition() {
        for mapped in [false, true] {
            let path = write_file(&format!("dealt-{mapped}"));
            let groups = vec![
                FileGroup::new(vec![unit(0), unit(2), unit(4)]),
                FileGroup::new(vec![unit(1), unit(3)]),
            ];
            let (partitions, used) = scan(&path, groups, mapped).await;
            std::fs::remove_file(&path).unwrap();
            let rows = |groups: &[usize]| -> Vec<i64> {
                groups
                    .iter()
                    .flat_map(|&g| (g * ROWS_PER_GROUP) as i64..((g + 1) * ROWS_PER_GROUP) as i64)
                    .collect()
            };
            assert_eq!(
                partitions,
                vec![rows(&[0, 2, 4]), rows(&[1, 3])],
                "mapped: {mapped}"
            );
            assert_eq!(
                used, 3,
                "row groups 2 and 4 of one partition and 3 of the other (mapped: {mapped})"
            );
        }
    }
}
