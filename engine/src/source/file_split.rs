//! How a replay of files is split into source partitions.
//!
//! Source partitions must advance together in event time: an exchange that merges them in
//! event-time order, and a watermark that is the minimum over them, take rows from a
//! partition only as far as the others have come. A file cut into consecutive halves would
//! give one partition that is entirely later than the other, and that partition would wait
//! for the first to finish: one core idle.
//!
//! So the files are cut into units in replay order, and unit `u` goes to source partition
//! `u mod n`: every partition covers the whole time range, in order, and all of them read at
//! once. Each partition reads its units one at a time and tags every batch with its unit's
//! index ([`super::replay_units`]); the exchange merges the partitions by that index, which
//! is the replay's order whatever the event times. The units do not depend on `n` (one
//! partition reads the same units, in the same batches), so a replay gives the same records
//! in the same batches at any number of source partitions.
//!
//! - Parquet: a unit is a row group, or a range of at most [`UNIT_ROWS`] rows of a larger
//!   one: a file entry with a `ParquetAccessPlan` that scans that row group or selects that
//!   range and skips the rest (the reader skips whole pages with the page index).
//! - CSV and Arrow: a unit is a byte range of DataFusion's split of a file (files too small
//!   to split stay whole), or a whole file of a directory.
//!
//! The files go in name order, except that a Parquet file with an event time goes after
//! every file whose records all come before its own by the row groups' statistics (see
//! [`replay_order`]), so that a directory whose names do not follow time is not replayed
//! with the records of its earlier files late, while files whose times overlap keep name
//! order.
//!
//! A source declared `partitioned_by` keys has its files dealt whole: each file's keys
//! stay in one source partition, as the declaration says of the files.
//!
//! Each partition's units come out in stored order, so a partition's rows are in stored
//! order too, and a time-ordered replay is time-ordered in every partition. DataFusion lets
//! an idle partition's reader take files queued for another (work stealing); the scan is
//! marked order-preserving, which keeps every partition to its own units.
//!
//! A Parquet scan's readers read each partition's next unit ahead of it, as the partitions'
//! unit lists say ([`PrefetchingReaderFactory`]).

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::config::ConfigOptions;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, ParquetFileReaderFactory, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::parquet::file::statistics::Statistics;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};

use super::prefetch::PrefetchingReaderFactory;
use crate::options::FileReads;

/// The most rows of a Parquet unit: row groups larger than this (arrow's default is a
/// million rows) are cut into row ranges, so that the partitions take turns often enough to
/// read at once through the exchange's short channels; the row groups DuckDB and Freshet
/// write (about 128 Ki rows) stay whole, so that no partition decodes a page or dictionary
/// it then skips.
pub const UNIT_ROWS: usize = 128 * 1024;

/// About the bytes of a CSV or Arrow unit: a replay is cut into its size over this many byte
/// ranges (DataFusion leaves files smaller than its `repartition_file_min_size` whole). Each
/// range is opened and decoded on its own, which costs more the smaller it is (ranges of
/// 300 KiB took 15 % more CPU than the whole file).
const UNIT_BYTES: u64 = 4 * 1024 * 1024;

/// The most byte ranges a replay of CSV or Arrow files is cut into.
const MAX_BYTE_RANGE_UNITS: usize = 1024;

/// A scan of files dealt into source partitions: each partition's units, and the Parquet
/// reader factory the partitions' read ahead wraps.
#[derive(Debug, Clone)]
pub struct FileSplit {
    groups: Vec<FileGroup>,
    reader_factory: Option<Arc<dyn ParquetFileReaderFactory>>,
    /// How the replay's records lie in event time, when every row group's statistics
    /// tell.
    time_span: Option<TimeSpan>,
    /// How local Parquet files are read.
    file_reads: FileReads,
}

/// The records of a replay and the event times they span (by the Parquet statistics of
/// the event-time column): how many records an interval of event time holds on average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeSpan {
    pub records: u64,
    pub min: i64,
    pub max: i64,
}

impl TimeSpan {
    /// The records an interval of `length` (in the event time's unit) holds on average.
    pub fn records_in(&self, length: i64) -> f64 {
        let span = (self.max as f64 - self.min as f64).max(1.0);
        self.records as f64 * length as f64 / span
    }

    fn widened(self, other: Self) -> Self {
        Self {
            records: self.records + other.records,
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }
}

impl FileSplit {
    /// `plan`'s files split into `partitions` source partitions as described above, or
    /// `None` when `plan` is no scan of files; with `whole_files`, the units are whole
    /// files. `event_time` names the event-time column, whose Parquet statistics show where
    /// records of one time may straddle two units.
    pub async fn try_new(
        plan: &Arc<dyn ExecutionPlan>,
        partitions: usize,
        whole_files: bool,
        event_time: Option<&str>,
        state: &dyn Session,
    ) -> Result<Option<Self>> {
        let Some(config) = scan_config(plan) else {
            return Ok(None);
        };
        let parquet = config.file_source().file_type() == "parquet";
        // One partition reads the same units as many: the same batches at any split.
        let mut time_span = None;
        let groups = if whole_files {
            let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions];
            let files = files_in_replay_order(config, event_time, state).await?;
            for (index, file) in files.into_iter().enumerate() {
                groups[index % partitions].push(file);
            }
            groups.into_iter().map(FileGroup::new).collect()
        } else if parquet {
            let (groups, span) = parquet_units(config, partitions, event_time, state).await?;
            time_span = span;
            groups
        } else {
            byte_range_units(plan, partitions, state.config_options())?
        };
        let reader_factory = config
            .file_source()
            .downcast_ref::<ParquetSource>()
            .and_then(|parquet| parquet.parquet_file_reader_factory().cloned());
        Ok(Some(Self {
            groups,
            reader_factory,
            time_span,
            file_reads: FileReads::default(),
        }))
    }

    /// The split, reading local Parquet files as `file_reads` says.
    pub fn with_file_reads(mut self, file_reads: FileReads) -> Self {
        self.file_reads = file_reads;
        self
    }

    /// The replay's records and the event times they span, if the statistics tell.
    pub fn time_span(&self) -> Option<TimeSpan> {
        self.time_span
    }

    /// `plan` (the scan this split was made of, or one a DataFusion rule rebuilt from it,
    /// under the projection that retypes an integer event time) reading this split, each
    /// partition's next row group read ahead.
    pub fn apply(&self, plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(config) = scan_config(plan) else {
            return match plan.children().as_slice() {
                [child] if scan_config(child).is_some() => {
                    let child = self.apply(child)?;
                    let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                    Arc::clone(plan).replace_children(vec![child], options)
                }
                _ => Ok(Arc::clone(plan)),
            };
        };
        let mut builder = FileScanConfigBuilder::from(config.clone());
        if let (Some(parquet), Some(reader_factory)) = (
            config.file_source().downcast_ref::<ParquetSource>(),
            &self.reader_factory,
        ) {
            let map = self.file_reads == FileReads::MemoryMap
                && config.object_store_url == ObjectStoreUrl::local_filesystem();
            let reader_factory =
                PrefetchingReaderFactory::new(Arc::clone(reader_factory), &self.groups, map);
            let source = parquet
                .clone()
                .with_parquet_file_reader_factory(Arc::new(reader_factory));
            builder = builder.with_source(Arc::new(source));
        }
        let config = builder
            .with_file_groups(self.groups.clone())
            .with_preserve_order(true)
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}

/// The file scan `plan` is, if it is one.
pub(super) fn scan_config(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()
        .and_then(|source| source.data_source().downcast_ref::<FileScanConfig>())
}

/// `new`, a scan that replaces `old` (a DataFusion rule pushed a projection or a filter into
/// it), with `old`'s split into source partitions: DataFusion's `repartition_file_scans`
/// may also have re-split the files by byte ranges, regardless of units and access plans.
pub fn keep_split(
    new: Arc<dyn ExecutionPlan>,
    old: &Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if let (Some(new_config), Some(old_config)) = (scan_config(&new), scan_config(old)) {
        let config = FileScanConfigBuilder::from(new_config.clone())
            .with_file_groups(old_config.file_groups.clone())
            .with_preserve_order(true)
            .build();
        return Ok(DataSourceExec::from_data_source(config));
    }
    // An integer event time is retyped by a projection over the scan.
    match (new.children().as_slice(), old.children().as_slice()) {
        ([new_child], [old_child]) if scan_config(old_child).is_some() => {
            let child = keep_split(Arc::clone(new_child), old_child)?;
            let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
            new.replace_children(vec![child], options)
        }
        _ => Ok(new),
    }
}

/// The files of `config` in name order, whole.
fn files_in_order(config: &FileScanConfig) -> Vec<PartitionedFile> {
    let mut files: Vec<PartitionedFile> = config
        .file_groups
        .iter()
        .flat_map(|group| group.files().iter().cloned())
        .filter(|file| file.range.as_ref().is_none_or(|range| range.start == 0))
        .map(|mut file| {
            file.range = None;
            file
        })
        .collect();
    files.sort_by(|a, b| a.object_meta.location.cmp(&b.object_meta.location));
    files.dedup_by(|a, b| a.object_meta.location == b.object_meta.location);
    files
}

/// The files of `config` in replay order: name order, except that a Parquet file with an
/// event time goes after every file whose records all come before its own by the row
/// groups' statistics. So a directory whose names do not follow time is not replayed with
/// most of its records late, while files whose times overlap (records out of order across
/// a file boundary, within the watermark) keep name order. If a file's statistics do not
/// tell, every file stays in name order, as other formats' files do.
async fn files_in_replay_order(
    config: &FileScanConfig,
    event_time: Option<&str>,
    state: &dyn Session,
) -> Result<Vec<PartitionedFile>> {
    let files = files_in_order(config);
    let Some(name) = event_time else {
        return Ok(files);
    };
    if files.len() < 2 || config.file_source().file_type() != "parquet" {
        return Ok(files);
    }
    let store = state.runtime_env().object_store(&config.object_store_url)?;
    let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
    let mut ranges = Vec::with_capacity(files.len());
    for file in &files {
        let metadata = DFParquetMetadata::new(store.as_ref(), &file.object_meta)
            .with_file_metadata_cache(Some(Arc::clone(&cache)))
            .fetch_metadata()
            .await?;
        let Some(span) = file_time_span(&metadata, name) else {
            return Ok(files);
        };
        ranges.push(span.map(|span| (span.min, span.max)));
    }
    Ok(replay_order(&ranges)
        .into_iter()
        .map(|index| files[index].clone())
        .collect())
}

/// The order to replay files in whose event times lie in `ranges` (`None`: an empty file),
/// given in name order: each time the first remaining file in name order that no remaining
/// file entirely precedes in time. Empty files keep their place.
fn replay_order(ranges: &[Option<(i64, i64)>]) -> Vec<usize> {
    let mut remaining: Vec<usize> = (0..ranges.len()).collect();
    let mut order = Vec::with_capacity(ranges.len());
    while !remaining.is_empty() {
        let precedes = |before: usize, after: usize| match (ranges[before], ranges[after]) {
            (Some((_, before_max)), Some((after_min, _))) => before_max < after_min,
            _ => false,
        };
        let position = remaining
            .iter()
            .position(|&file| !remaining.iter().any(|&other| precedes(other, file)))
            .unwrap_or(0);
        order.push(remaining.remove(position));
    }
    order
}

/// The leaf column of a Parquet file named `name`, if there is one.
fn time_column(metadata: &ParquetMetaData, name: &str) -> Option<usize> {
    let schema = metadata.file_metadata().schema_descr();
    (0..schema.num_columns()).find(|&c| schema.column(c).path().string() == name)
}

/// Parquet files cut into row-group and row-range units, dealt round-robin, and the span
/// of their event times if every non-empty row group's statistics tell it.
async fn parquet_units(
    config: &FileScanConfig,
    partitions: usize,
    event_time: Option<&str>,
    state: &dyn Session,
) -> Result<(Vec<FileGroup>, Option<TimeSpan>)> {
    let store = state.runtime_env().object_store(&config.object_store_url)?;
    let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions];
    let mut units = 0;
    // `Some(None)`: no non-empty row group yet; `None`: one whose statistics do not tell.
    let mut span: Option<Option<TimeSpan>> = event_time.map(|_| None);
    for file in files_in_replay_order(config, event_time, state).await? {
        let metadata = DFParquetMetadata::new(store.as_ref(), &file.object_meta)
            .with_file_metadata_cache(Some(Arc::clone(&cache)))
            .fetch_metadata()
            .await?;
        if let (Some(known), Some(name)) = (&mut span, event_time) {
            match file_time_span(&metadata, name) {
                Some(Some(file_span)) => {
                    *known = Some(known.map_or(file_span, |k| k.widened(file_span)))
                }
                Some(None) => {}
                None => span = None,
            }
        }
        let row_groups: Vec<usize> = metadata
            .row_groups()
            .iter()
            .map(|group| group.num_rows().max(0) as usize)
            .collect();
        for access in unit_plans(&row_groups) {
            groups[units % partitions].push(file.clone().with_extension(access));
            units += 1;
        }
    }
    Ok((
        groups.into_iter().map(FileGroup::new).collect(),
        span.flatten(),
    ))
}

/// The records of a Parquet file and the span of its event-time column `name` by its row
/// groups' statistics: `Some(None)` for a file without records, `None` if they do not tell.
fn file_time_span(metadata: &ParquetMetaData, name: &str) -> Option<Option<TimeSpan>> {
    let column = time_column(metadata, name)?;
    let mut span: Option<TimeSpan> = None;
    for group in metadata.row_groups().iter().filter(|g| g.num_rows() > 0) {
        let (min, max) = group.column(column).statistics().and_then(time_range)?;
        let group_span = TimeSpan {
            records: group.num_rows() as u64,
            min,
            max,
        };
        span = Some(span.map_or(group_span, |s| s.widened(group_span)));
    }
    Some(span)
}

/// The smallest and largest value of an integer (or timestamp) column chunk, if stored.
fn time_range(statistics: &Statistics) -> Option<(i64, i64)> {
    match statistics {
        Statistics::Int64(values) => Some((*values.min_opt()?, *values.max_opt()?)),
        Statistics::Int32(values) => {
            Some((i64::from(*values.min_opt()?), i64::from(*values.max_opt()?)))
        }
        _ => None,
    }
}

/// One access plan per unit of a file whose row groups have `row_groups` rows, in stored
/// order. Each unit is a file entry of its own, read by a scan of its own (see
/// [`super::replay_units`]): no batch spans two units.
fn unit_plans(row_groups: &[usize]) -> Vec<ParquetAccessPlan> {
    let mut plans = Vec::new();
    for (group, &rows) in row_groups.iter().enumerate() {
        let units = rows.div_ceil(UNIT_ROWS).max(1);
        for index in 0..units {
            let (start, end) = (index * rows / units, (index + 1) * rows / units);
            let mut plan = ParquetAccessPlan::new_none(row_groups.len());
            if units == 1 {
                plan.scan(group);
            } else {
                let selectors = vec![
                    RowSelector::skip(start),
                    RowSelector::select(end - start),
                    RowSelector::skip(rows - end),
                ];
                plan.set(
                    group,
                    RowGroupAccess::Selection(RowSelection::from(selectors)),
                );
            }
            plans.push(plan);
        }
    }
    plans
}

/// CSV or Arrow files cut into byte ranges of about [`UNIT_BYTES`] by DataFusion, dealt
/// round-robin. The ranges do not depend on the number of partitions, so that a replay's
/// batches are the same at any.
fn byte_range_units(
    plan: &Arc<dyn ExecutionPlan>,
    partitions: usize,
    options: &ConfigOptions,
) -> Result<Vec<FileGroup>> {
    let bytes: u64 = scan_config(plan).map_or(0, |config| {
        files_in_order(config)
            .iter()
            .map(|file| file.object_meta.size)
            .sum()
    });
    let ranges = (bytes.div_ceil(UNIT_BYTES) as usize).clamp(1, MAX_BYTE_RANGE_UNITS);
    let split = match plan.repartitioned(ranges, options)? {
        Some(split) if split.output_partitioning().partition_count() > 1 => split,
        _ => Arc::clone(plan),
    };
    let Some(config) = split
        .downcast_ref::<DataSourceExec>()
        .and_then(|source| source.data_source().downcast_ref::<FileScanConfig>())
    else {
        return Ok(vec![FileGroup::default(); partitions]);
    };
    let mut units: Vec<PartitionedFile> = config
        .file_groups
        .iter()
        .flat_map(|group| group.files().iter().cloned())
        .collect();
    units.sort_by(|a, b| {
        let start = |file: &PartitionedFile| file.range.as_ref().map(|r| r.start);
        (&a.object_meta.location, start(a)).cmp(&(&b.object_meta.location, start(b)))
    });
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions];
    for (index, unit) in units.into_iter().enumerate() {
        groups[index % partitions].push(unit);
    }
    Ok(groups.into_iter().map(FileGroup::new).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each plan's rows, as `group:first+rows`.
    fn selected(plans: &[ParquetAccessPlan]) -> Vec<String> {
        plans
            .iter()
            .map(|plan| {
                let picked: Vec<String> = plan
                    .inner()
                    .iter()
                    .enumerate()
                    .filter_map(|(group, access)| match access {
                        RowGroupAccess::Skip => None,
                        RowGroupAccess::Scan => Some(format!("{group}:all")),
                        RowGroupAccess::Selection(selection) => {
                            let mut start = 0;
                            let mut picked = Vec::new();
                            for selector in selection.iter() {
                                if !selector.skip && selector.row_count > 0 {
                                    picked.push(format!("{group}:{start}+{}", selector.row_count));
                                }
                                start += selector.row_count;
                            }
                            Some(picked.join(","))
                        }
                    })
                    .collect();
                picked.join(" ")
            })
            .collect()
    }

    #[test]
    fn each_row_group_is_a_unit() {
        assert_eq!(
            selected(&unit_plans(&[10, 3, 7])),
            ["0:all", "1:all", "2:all"]
        );
    }

    #[test]
    fn files_go_after_the_files_entirely_before_them_and_otherwise_in_name_order() {
        // b lies entirely before a: b first. c overlaps a (records out of order across the
        // boundary): name order between them. The empty file keeps its place.
        let ranges = [Some((200, 300)), Some((0, 100)), Some((250, 400)), None];
        assert_eq!(replay_order(&ranges), [1, 0, 2, 3]);
        // Overlapping files whose smallest times are inverted stay in name order.
        assert_eq!(replay_order(&[Some((558, 734)), Some((496, 879))]), [0, 1]);
        assert_eq!(
            replay_order(&[Some((5, 9)), Some((0, 4)), Some((10, 12))]),
            [1, 0, 2]
        );
    }

    #[test]
    fn a_large_row_group_is_cut_into_row_ranges() {
        let rows = 2 * UNIT_ROWS + 3;
        let plans = unit_plans(&[5, rows]);
        let third = rows / 3;
        assert_eq!(
            selected(&plans),
            [
                "0:all".to_string(),
                format!("1:0+{third}"),
                format!("1:{third}+{}", 2 * rows / 3 - third),
                format!("1:{}+{}", 2 * rows / 3, rows - 2 * rows / 3),
            ]
        );
    }
}
