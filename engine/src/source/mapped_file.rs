//! Local files read through a memory map, so that a Parquet reader decodes straight from the
//! page cache.
//!
//! Read through the object store, every column chunk is copied out of the page cache into a
//! fresh buffer (`pread`): the copy, and the kernel zeroing the buffer's fresh pages, cost a
//! fifth of a one-stream query over a local Parquet file. A file mapped read-only instead
//! hands out [`Bytes`] that point into the mapping; the kernel maps the cached pages on first
//! touch, and [`MappedFile::populate`] maps a range ahead of its decoding, from the task that
//! used to read it.
//!
//! A range past the mapped length, or past the file's present length (a file that shrank
//! since it was mapped: each read looks at the open file's length first), is an error that
//! names the file. A file truncated in the moment between that look and the decoding of the
//! range is not seen in time: touching a page past its new end raises `SIGBUS`, as in every
//! reader that maps files (docs/sql.md says so), and a stream registered with
//! `memory_map=false` copies its files out instead.

use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bytes::Bytes;

/// A whole file mapped read-only.
pub struct MappedFile {
    /// The file, kept open to look at its length before each read.
    file: File,
    path: std::path::PathBuf,
    /// Start of the mapping; dangling (and never read) for an empty file.
    start: *mut libc::c_void,
    len: usize,
    /// Ranges no longer read, whose pages are unmapped together once they add up to
    /// [`UNMAP_BYTES`]: one call for many column chunks, as each call interrupts every
    /// core that runs the process.
    released: parking_lot::Mutex<Released>,
}

/// Bytes of released ranges that are unmapped together.
const UNMAP_BYTES: usize = 64 << 20;

#[derive(Default)]
struct Released {
    ranges: Vec<Range<usize>>,
    bytes: usize,
}

// SAFETY: the mapping is read-only and owned by this value until it is dropped; reading it
// from several threads at once is reading immutable memory.
unsafe impl Send for MappedFile {}
// SAFETY: as above; `&MappedFile` gives only shared reads.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the file at `path`.
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::other("the file is larger than the address space"))?;
        let start = if len == 0 {
            // Nothing to map (the system refuses an empty mapping); never read.
            std::ptr::NonNull::<u8>::dangling().as_ptr().cast()
        } else {
            // SAFETY: a new read-only private mapping of a whole file we opened; the kernel
            // chooses the address, and the result is checked before use.
            let start = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            if start == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            start
        };
        Ok(Self {
            file,
            path: path.to_path_buf(),
            start,
            len,
            released: Default::default(),
        })
    }

    /// The file's bytes in `range`, without a copy; an error past the mapped end or past
    /// the file's present end.
    pub fn bytes(self: &Arc<Self>, range: Range<u64>) -> std::io::Result<Bytes> {
        let range = self.checked(range)?;
        let present = self.file.metadata()?.len();
        if range.end as u64 > present {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{} shrank from {} to {present} bytes while it was read: it must not change during a replay",
                    self.path.display(),
                    self.len
                ),
            ));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        Ok(Bytes::from_owner(MappedRange {
            file: Arc::clone(self),
            range,
        }))
    }

    /// Maps the pages of `range` into the process now (best effort), so that decoding them
    /// later does not stop at a page fault for each.
    pub fn populate(&self, range: Range<u64>) {
        // A kernel without MADV_POPULATE_READ (before Linux 5.14, or another system)
        // refuses it or is not asked: the pages are then mapped on first touch.
        #[cfg(target_os = "linux")]
        if let Ok(range) = self.checked(range) {
            self.advise(range, libc::MADV_POPULATE_READ);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = range;
    }

    /// Gives `advice` for the whole pages that hold `range` (checked) of the mapping.
    fn advise(&self, range: Range<usize>, advice: libc::c_int) {
        let page = page_size();
        let first = range.start / page * page;
        if range.end <= first {
            return;
        }
        // SAFETY: the advice covers pages of our own mapping only (`range` ends within
        // it, and a mapping is whole pages). The advice given (populate, don't need) never
        // changes what the mapping reads: a page dropped is read again from the file when
        // touched.
        unsafe {
            libc::madvise(
                self.start.cast::<u8>().add(first).cast(),
                range.end - first,
                advice,
            );
        }
    }

    fn checked(&self, range: Range<u64>) -> std::io::Result<Range<usize>> {
        let start = usize::try_from(range.start).unwrap_or(usize::MAX);
        let end = usize::try_from(range.end).unwrap_or(usize::MAX);
        if start > end || end > self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "bytes {}..{} are past the end of {} ({} bytes when it was opened): did it change while it was read?",
                    range.start,
                    range.end,
                    self.path.display(),
                    self.len
                ),
            ));
        }
        Ok(start..end)
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `open`, unmapped once: every `MappedRange` holds
            // an `Arc` of this value, so no slice of it outlives it.
            unsafe {
                libc::munmap(self.start, self.len);
            }
        }
    }
}

/// A range of a mapped file, the owner of the [`Bytes`] that point into it.
struct MappedRange {
    file: Arc<MappedFile>,
    range: Range<usize>,
}

impl Drop for MappedRange {
    /// Unmaps the range's pages once nothing points into it, so that a replay's resident
    /// memory does not grow by the file (its page cache stays; a neighbouring range that
    /// shares a page maps it again on its next touch).
    fn drop(&mut self) {
        let ranges = {
            let mut released = self.file.released.lock();
            released.bytes += self.range.len();
            released.ranges.push(self.range.clone());
            if released.bytes < UNMAP_BYTES {
                return;
            }
            released.bytes = 0;
            std::mem::take(&mut released.ranges)
        };
        for range in merged(ranges) {
            self.file.advise(range, libc::MADV_DONTNEED);
        }
    }
}

impl AsRef<[u8]> for MappedRange {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `range` was checked against the mapping's length, and the mapping lives
        // as long as `file`.
        unsafe {
            std::slice::from_raw_parts(
                self.file.start.cast::<u8>().add(self.range.start),
                self.range.len(),
            )
        }
    }
}

/// `ranges` sorted and joined where they touch or overlap.
fn merged(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.sort_unstable_by_key(|range| range.start);
    let mut joined: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match joined.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => joined.push(range),
        }
    }
    joined
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_file_gives_its_bytes_and_refuses_ranges_past_its_end() {
        let path = std::env::temp_dir().join(format!("freshet-{}-mapped.bin", std::process::id()));
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let file = Arc::new(MappedFile::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        file.populate(0..10_000);
        assert_eq!(file.bytes(0..10_000).unwrap().as_ref(), &content[..]);
        assert_eq!(
            file.bytes(4095..4099).unwrap().as_ref(),
            &content[4095..4099]
        );
        assert!(file.bytes(7..7).unwrap().is_empty());
        let error = file.bytes(9_990..10_001).unwrap_err();
        assert!(error.to_string().contains("are past the end of"), "{error}");
    }

    #[test]
    fn a_file_that_shrank_is_an_error_not_a_crash() {
        let path =
            std::env::temp_dir().join(format!("freshet-{}-shrinking.bin", std::process::id()));
        std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
        let file = Arc::new(MappedFile::open(&path).unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        assert_eq!(file.bytes(0..4096).unwrap().as_ref(), &[7u8; 4096][..]);
        let error = file.bytes(4096..8192).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(
            error
                .to_string()
                .contains("shrank from 12288 to 4096 bytes"),
            "{error}"
        );
    }

    #[test]
    fn an_empty_file_maps_to_no_bytes() {
        let path = std::env::temp_dir().join(format!("freshet-{}-empty.bin", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let file = Arc::new(MappedFile::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        assert!(file.bytes(0..0).unwrap().is_empty());
        assert!(file.bytes(0..1).is_err());
    }
}
