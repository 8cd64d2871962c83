//! The page file: where the hybrid log's flushed pages live (issue 33's lowest floor). A
//! directory of segments, each `pages_per_segment` pages of `page_bytes`: a data file
//! (`log-<first page>.pages`, page p at `(p - first) * page_bytes`) and a sidecar sums file
//! (`log-<first page>.sums`: a header, then one fixed-size entry per synced write: page,
//! valid_bytes, CRC32C of the page's valid bytes, the entry's own CRC). Byte format: [`format`].
//!
//! Invariants (the crash-safety argument, also in `docs/storage.md`):
//! 1. A page is *trusted* with `valid_bytes` v and CRC c only through a sums entry that verifies
//!    (its own CRC): the newest such entry per page wins. [`PageFile::sync`] syncs the data files
//!    before it appends the entries of the writes it covers, and syncs the sums files (then the
//!    directory, when a segment was created) before it returns; so an entry is durable only after
//!    the bytes it describes are, and a page is reported durable only after its entry is.
//! 2. Once a write of page p with v valid bytes returned, the file's bytes `[0, v)` of p never
//!    change again: a later write of p (a partly full tail page flushed again with more bytes)
//!    writes only from `v` on (from the 4 KiB block holding `v`, with that block's first bytes
//!    read back from the file, so the rewrite puts back identical bytes there), and its entry's
//!    CRC extends the previous CRC. So a power cut in the middle of a rewrite, which may tear any
//!    sector of it, cannot break the older entry that is still the trusted one. The caller's
//!    bytes `[0, v)` of a rewrite are ignored: the engine's design accepts stale record flags on
//!    disk (issue 33's design: readers of cold records must not rely on them).
//! 3. Every write goes through an aligned staging copy that is checksummed and written: the CRC
//!    always describes exactly the bytes written, even if the caller's page memory changes during
//!    the call (access words and flags do), and the write qualifies for `O_DIRECT` whatever the
//!    alignment of the caller's buffer.
//! 4. Opening reads only the sums files, never the data: an entry that fails its own checks ends
//!    its file's trusted entries (a torn tail, reported; the file is cut there and synced before
//!    anything is appended, so a stale intact entry after the tear can never become trusted).
//!    Data is verified on read: [`PageFile::read_verified_page`] checks the CRC;
//!    [`PageFile::read`] only checks bounds (for callers that verified the page when they
//!    faulted it in whole).
//!    A read concurrent with a rewrite of its page is safe: it hands out only bytes below the
//!    valid bytes of the entry it found, which the rewrite leaves as they are (invariant 2). A
//!    direct read fetches the whole aligned blocks around its range, so it may also fetch bytes
//!    the rewrite is changing (the block holding `valid_bytes`, rewritten with identical bytes
//!    below it); whatever mix of old and new it sees there, the bytes it hands out are the same.
//! 5. Reads bypass the OS page cache when writes do: with `direct_io`, each segment's read
//!    handle asks for `O_DIRECT` too ([`PageFile::direct_reads`]), and every read through it
//!    (`read`, `read_verified_page`, the write path's read-back of a rewritten block, both
//!    backends of [`PageReads`]) asks for aligned blocks into an aligned buffer and copies the
//!    requested bytes out (the caller's own buffer when it is aligned and long enough: a whole
//!    page read into a page buffer is not copied). Every write of a page writes through the
//!    page's end, so a page with an entry has its whole last block in the file (a file cut
//!    shorter anyway is `DataMissing` only if the requested bytes are missing). Where
//!    `O_DIRECT` is refused (not asked for, tmpfs) reads are buffered, as before. The rules
//!    (alignment, short reads, the thread-local bounce buffer, a refused direct read falling
//!    back) are in `direct.rs`.
//!
//!    The read handle is a second handle of the data file, not the write handle: `O_DIRECT` is
//!    a flag of the open file description, and each side falls back to buffered I/O on its
//!    own (a refused direct write turns the writer buffered; a refused direct read, the
//!    reader), which one shared handle would tie together, and flipping a shared handle's flag
//!    while reads are in flight on io_uring would change the rules under them. The read handle
//!    is only ever turned from direct to buffered, never back, so a read that saw it direct
//!    (aligned requests) stays valid. Direct reads see the data of buffered writes too: the
//!    kernel writes dirty cached pages of the range back before a direct read.
//! 6. Any failed write or sync fails the page file: no later write or sync is accepted, and no
//!    sync is retried (storage's rule). [`PageFile::remove_before`] deletes whole segments (data,
//!    then sums, then a directory sync); a data file without its sums file at open is a
//!    leftover of a cut creation and gets a fresh sums file, a sums file without its data file
//!    is a leftover of a cut removal and is deleted.
//!
//! A restart that must write page numbers again after a crash first forgets them:
//! [`PageFile::discard_from`] (`discard.rs`: whole segments removed, the straddling segment's
//! sums file rewritten atomically without them), so a shorter new write of such a page is not
//! merged with the crashed run's bytes (invariant 2).
//!
//! Batched reads (many in flight per thread, io_uring or a synchronous fallback) are
//! [`reads::PageReads`], for the engine's pending path.
//!
//! Bounded: nothing is sized from a number read from disk; sums files are read in fixed-size
//! chunks, and the in-memory map keeps one entry per page.

mod direct;
mod discard;
pub mod error;
pub mod format;
mod open;
pub mod reads;

pub use error::{PageFileError, Result};
pub use format::SumsEntry;
pub use open::{PageFileOpened, TornSums};
pub use reads::{PageReads, ReadBackend, ReadBackendChoice, ReadsError};

use crate::io::{Disk, DiskFile, DIRECT_IO_ALIGNMENT};
use crate::lock::DirLock;
use direct::ReadHandle;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of page data in the page file in `dir`: the lengths of its data segments (matched by
/// [`format::DATA_NAME`]; the sums sidecars are not counted). For callers that look at a page
/// file they did not open (a benchmark's or a test's evidence that pages were evicted).
pub fn data_bytes(disk: &dyn Disk, dir: &Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for entry in disk.list(dir)? {
        if format::DATA_NAME.parse(&entry.name).is_some() {
            bytes += disk.metadata(&dir.join(&entry.name))?.len;
        }
    }
    Ok(bytes)
}

/// Largest segment (`page_bytes * pages_per_segment`) accepted.
pub const MAX_SEGMENT_BYTES: u64 = 4 << 30;
/// Smallest page size accepted.
pub const MIN_PAGE_BYTES: u32 = 4096;
/// Largest page size accepted.
pub const MAX_PAGE_BYTES: u32 = 1 << 30;

/// How a page file is laid out and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFileConfig {
    /// Bytes per page: a power of two in [`MIN_PAGE_BYTES`]`..=`[`MAX_PAGE_BYTES`].
    pub page_bytes: u32,
    /// Pages per segment file (at least 1; the segment at most [`MAX_SEGMENT_BYTES`]).
    pub pages_per_segment: u32,
    /// Write pages with `O_DIRECT` where the file system allows it (buffered otherwise).
    pub direct_io: bool,
}

impl Default for PageFileConfig {
    /// 4 MiB pages, 16 per segment (64 MiB segments), direct I/O on.
    fn default() -> Self {
        PageFileConfig {
            page_bytes: 4 << 20,
            pages_per_segment: 16,
            direct_io: true,
        }
    }
}

impl PageFileConfig {
    /// Checks the ranges documented on the fields.
    pub fn validate(&self) -> Result<()> {
        let bytes = self.page_bytes;
        if !bytes.is_power_of_two() || !(MIN_PAGE_BYTES..=MAX_PAGE_BYTES).contains(&bytes) {
            return Err(PageFileError::InvalidConfig(format!(
                "page_bytes {bytes} must be a power of two in {MIN_PAGE_BYTES}..={MAX_PAGE_BYTES}"
            )));
        }
        let segment = u64::from(bytes) * u64::from(self.pages_per_segment);
        if self.pages_per_segment == 0 || segment > MAX_SEGMENT_BYTES {
            return Err(PageFileError::InvalidConfig(format!(
                "pages_per_segment {} gives {segment}-byte segments; it must be at least 1 and \
                 the segment at most {MAX_SEGMENT_BYTES} bytes",
                self.pages_per_segment
            )));
        }
        Ok(())
    }

    /// The first page of the segment holding `page`.
    pub fn segment_first(&self, page: u64) -> u64 {
        page - page % u64::from(self.pages_per_segment)
    }
}

/// A located, bounds-checked read ([`PageFile::locate_range`]).
#[derive(Debug, Clone)]
pub(crate) struct ReadTarget {
    /// The page's newest entry when the read was located.
    pub(crate) entry: SumsEntry,
    /// The data file's read handle (direct or buffered).
    pub(crate) reader: Arc<ReadHandle>,
    /// Absolute offset in the data file of the read's first byte.
    pub(crate) file_offset: u64,
}

/// What one [`PageFile::sync`] made durable: the entries it appended, in write order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    /// Each write the sync covered (a page written twice appears twice, newest last).
    pub entries: Vec<SumsEntry>,
    /// Segments whose creation this sync made durable (directory sync).
    pub segments_created: usize,
}

/// One segment's open files and unsynced state.
#[derive(Debug)]
struct Segment {
    /// Handle for page writes (direct I/O when on).
    writer: Arc<dyn DiskFile>,
    /// Handle for reads: `O_DIRECT` when direct I/O is on and granted, buffered otherwise
    /// ([`direct`] says why it is not the write handle).
    reader: Arc<ReadHandle>,
    sums: Arc<dyn DiskFile>,
    /// Length of the sums file's trusted part: where the next entries go.
    sums_len: u64,
    /// Writes since the last sync: the data file needs `sync_data`, then these entries go out.
    pending: Vec<SumsEntry>,
    /// Whether the writer handle has direct I/O on.
    direct: bool,
}

#[derive(Debug)]
struct Inner {
    segments: BTreeMap<u64, Segment>,
    /// The newest entry of each page: trusted at open, or written since.
    latest: HashMap<u64, SumsEntry>,
    /// Segments created (or fixed at open) whose directory entries are not yet synced.
    dir_dirty: usize,
    failed: Option<String>,
    /// Page-sized buffer plus room to align it to [`DIRECT_IO_ALIGNMENT`] (allocated on first use).
    staging: Vec<u8>,
}

impl Inner {
    fn staging(&mut self, page_bytes: usize) -> &mut [u8] {
        if self.staging.is_empty() {
            self.staging = vec![0u8; page_bytes + DIRECT_IO_ALIGNMENT];
        }
        let skip = self.staging.as_ptr().align_offset(DIRECT_IO_ALIGNMENT);
        &mut self.staging[skip..skip + page_bytes]
    }

    fn check_alive(&self) -> Result<()> {
        match &self.failed {
            Some(why) => Err(PageFileError::Failed(why.clone())),
            None => Ok(()),
        }
    }
}

/// The page file (see the module docs). All methods take `&self`; one lock orders writes, syncs
/// and removals, and reads hold it only to find their file.
#[derive(Debug)]
pub struct PageFile {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    config: PageFileConfig,
    inner: Mutex<Inner>,
    _lock: DirLock,
}

impl PageFile {
    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> PageFileConfig {
        self.config
    }

    fn data_path(&self, first: u64) -> PathBuf {
        self.dir.join(format::DATA_NAME.format(first))
    }

    fn sums_path(&self, first: u64) -> PathBuf {
        self.dir.join(format::SUMS_NAME.format(first))
    }

    /// Whether page writes currently go out with `O_DIRECT`: true if every open segment's write
    /// handle has it on (and at least one segment is open); false when direct I/O was not asked
    /// for or the file system refused it (then writes are buffered, equally durable after sync).
    pub fn direct_io(&self) -> bool {
        let inner = self.inner.lock();
        !inner.segments.is_empty() && inner.segments.values().all(|s| s.direct)
    }

    /// Whether reads (`read`, `read_verified_page`, [`PageReads`] on either backend) go out with
    /// `O_DIRECT`, bypassing the OS page cache: true if every open segment's read handle has it
    /// on (and at least one segment is open). Decided like [`direct_io`](Self::direct_io) but
    /// separately (each has its own handle and falls back on its own): false when direct I/O was
    /// not asked for, the file system refused it, or refused a direct read as misaligned (then
    /// reads are buffered, exactly as without direct I/O).
    pub fn direct_reads(&self) -> bool {
        let inner = self.inner.lock();
        !inner.segments.is_empty() && inner.segments.values().all(|s| s.reader.direct())
    }

    /// The newest entry of `page` (trusted at open or written since), if any.
    pub fn entry(&self, page: u64) -> Option<SumsEntry> {
        self.inner.lock().latest.get(&page).copied()
    }

    /// The data and sums files of every segment, oldest first.
    pub fn segment_paths(&self) -> Vec<(PathBuf, PathBuf)> {
        let firsts: Vec<u64> = self.inner.lock().segments.keys().copied().collect();
        firsts
            .into_iter()
            .map(|first| (self.data_path(first), self.sums_path(first)))
            .collect()
    }

    /// Writes page `page` (`bytes.len()` must be `page_bytes`) with its first `valid_bytes` bytes
    /// meaningful, creating its segment on first use. Not durable until [`sync`](Self::sync).
    /// A page may be written again with at least as many valid bytes (never fewer); the newest
    /// entry wins, and the bytes below the previous write's `valid_bytes` are kept as they are
    /// in the file (module docs, invariant 2). A failed write fails the page file.
    pub fn write_page(&self, page: u64, bytes: &[u8], valid_bytes: u32) -> Result<()> {
        let page_bytes = self.config.page_bytes as usize;
        if bytes.len() != page_bytes || valid_bytes as usize > page_bytes {
            return Err(PageFileError::Invalid(format!(
                "write of page {page}: {} bytes with {valid_bytes} valid, the page size is \
                 {page_bytes}",
                bytes.len()
            )));
        }
        let mut inner = self.inner.lock();
        inner.check_alive()?;
        let previous = inner.latest.get(&page).copied();
        let keep = previous.map_or(0, |entry| entry.valid_bytes) as usize;
        if (valid_bytes as usize) < keep {
            return Err(PageFileError::Invalid(format!(
                "page {page} was written with {keep} valid bytes, a rewrite cannot have fewer \
                 ({valid_bytes})"
            )));
        }
        let first = self.config.segment_first(page);
        if !inner.segments.contains_key(&first) {
            let segment = self.create_segment(first).inspect_err(|error| {
                inner.failed = Some(error.to_string());
            })?;
            inner.segments.insert(first, segment);
            inner.dir_dirty += 1;
        }
        let start = keep - keep % DIRECT_IO_ALIGNMENT;
        let offset = (page - first) * u64::from(self.config.page_bytes);
        let segment = &inner.segments[&first];
        let (reader, writer) = (Arc::clone(&segment.reader), Arc::clone(&segment.writer));
        let direct = segment.direct;
        let staging = inner.staging(page_bytes);
        let written = (|| {
            if start < keep {
                // The block holding `keep` is read back first (a direct read fills all of it,
                // so the caller's bytes go in after it).
                direct::read_exact(
                    &reader,
                    &mut staging[start..],
                    offset + start as u64,
                    keep - start,
                )?;
            }
            staging[keep..].copy_from_slice(&bytes[keep..]);
            write_staged(&writer, direct, &staging[start..], offset + start as u64)
        })();
        let crc = match previous {
            Some(entry) if keep > 0 => {
                crc32c::crc32c_append(entry.crc, &staging[keep..valid_bytes as usize])
            }
            _ => crc32c::crc32c(&staging[..valid_bytes as usize]),
        };
        let still_direct = match written {
            Ok(still_direct) => still_direct,
            Err(error) => {
                let error = PageFileError::io(
                    format!("writing page {page} to {}", self.data_path(first).display()),
                    error,
                );
                inner.failed = Some(error.to_string());
                return Err(error);
            }
        };
        let entry = SumsEntry {
            page,
            valid_bytes,
            crc,
        };
        inner.latest.insert(page, entry);
        let segment = inner
            .segments
            .get_mut(&first)
            .expect("segment created above");
        segment.pending.push(entry);
        segment.direct = still_direct;
        Ok(())
    }

    /// Creates segment `first`: data file, sums file with its header, synced (so that a sums
    /// file with entries always has a durable header). The directory entries become durable at
    /// the next [`sync`](Self::sync).
    fn create_segment(&self, first: u64) -> Result<Segment> {
        let data = self.data_path(first);
        let sums = self.sums_path(first);
        let open = |path: &Path| {
            self.disk
                .open(path, crate::io::OpenMode::Create)
                .map_err(|e| PageFileError::io(format!("creating {}", path.display()), e))
        };
        let writer = open(&data)?;
        let reader = self.read_handle(open(&data)?)?;
        let sums_file = open(&sums)?;
        let header = format::encode_header(&self.header(first));
        sums_file
            .set_len(0)
            .and_then(|()| sums_file.write_all_at(&header, 0))
            .and_then(|()| sums_file.sync_data())
            .map_err(|e| {
                PageFileError::io(format!("writing the header of {}", sums.display()), e)
            })?;
        let direct = self.enable_direct(&writer)?;
        Ok(Segment {
            writer,
            reader,
            sums: sums_file,
            sums_len: format::SUMS_HEADER_BYTES as u64,
            pending: Vec::new(),
            direct,
        })
    }

    fn header(&self, first: u64) -> format::SumsHeader {
        format::SumsHeader {
            page_bytes: self.config.page_bytes,
            pages_per_segment: self.config.pages_per_segment,
            first_page: first,
        }
    }

    /// Wraps a data file's read handle, asking for `O_DIRECT` when `direct_io` is on.
    fn read_handle(&self, file: Arc<dyn DiskFile>) -> Result<Arc<ReadHandle>> {
        let path = file.path().to_path_buf();
        ReadHandle::new(file, self.config.direct_io)
            .map(Arc::new)
            .map_err(|e| {
                PageFileError::io(format!("turning on direct reads for {}", path.display()), e)
            })
    }

    fn enable_direct(&self, writer: &Arc<dyn DiskFile>) -> Result<bool> {
        if !self.config.direct_io {
            return Ok(false);
        }
        writer.set_direct_io(true).map_err(|e| {
            PageFileError::io(
                format!("turning on direct I/O for {}", writer.path().display()),
                e,
            )
        })
    }

    /// Makes every write before it durable: data files' `sync_data`, then the sums entries of
    /// those writes appended and the sums files synced, then the directory synced if a segment
    /// was created. Returns the entries it made durable. Any failure is returned and fails the
    /// page file (never retried): the writes it covered may or may not survive a power cut.
    pub fn sync(&self) -> Result<Synced> {
        let mut inner = self.inner.lock();
        inner.check_alive()?;
        let result = self.sync_locked(&mut inner);
        if let Err(error) = &result {
            inner.failed = Some(error.to_string());
        }
        result
    }

    fn sync_locked(&self, inner: &mut Inner) -> Result<Synced> {
        for (first, segment) in &inner.segments {
            if !segment.pending.is_empty() {
                segment.writer.sync_data().map_err(|e| {
                    PageFileError::io(format!("fsync of {}", self.data_path(*first).display()), e)
                })?;
            }
        }
        let mut synced = Synced::default();
        let mut encoded = Vec::new();
        for (first, segment) in inner.segments.iter_mut() {
            if segment.pending.is_empty() {
                continue;
            }
            encoded.clear();
            for entry in &segment.pending {
                encoded.extend_from_slice(&format::encode_entry(entry));
            }
            let path = self.sums_path(*first);
            segment
                .sums
                .write_all_at(&encoded, segment.sums_len)
                .and_then(|()| segment.sums.sync_data())
                .map_err(|e| PageFileError::io(format!("appending to {}", path.display()), e))?;
            segment.sums_len += encoded.len() as u64;
            synced.entries.append(&mut segment.pending);
        }
        if inner.dir_dirty > 0 {
            crate::durable::sync_dir(self.disk.as_ref(), &self.dir)
                .map_err(|e| PageFileError::io("making new segments durable", e))?;
            synced.segments_created = inner.dir_dirty;
            inner.dir_dirty = 0;
        }
        Ok(synced)
    }

    fn locate(&self, page: u64) -> Result<(SumsEntry, Arc<ReadHandle>, u64)> {
        let inner = self.inner.lock();
        let entry = *inner
            .latest
            .get(&page)
            .ok_or(PageFileError::NotWritten { page })?;
        let first = self.config.segment_first(page);
        let segment = inner
            .segments
            .get(&first)
            .ok_or(PageFileError::NotWritten { page })?;
        let offset = (page - first) * u64::from(self.config.page_bytes);
        Ok((entry, Arc::clone(&segment.reader), offset))
    }

    /// Where bytes `[offset, offset + len)` of page `page` are: its newest entry, the data
    /// file's read handle (an `Arc`: holding it keeps the file open even if its segment is
    /// removed) and the file offset of `offset`. Checks what [`read`](Self::read) checks:
    /// `NotWritten` for a page without an entry, `OutOfRange` past its valid bytes.
    pub(crate) fn locate_range(&self, page: u64, offset: u32, len: u64) -> Result<ReadTarget> {
        let (entry, reader, base) = self.locate(page)?;
        let end = u64::from(offset) + len;
        if end > u64::from(entry.valid_bytes) {
            return Err(PageFileError::OutOfRange {
                page,
                offset: u64::from(offset),
                end,
                valid_bytes: entry.valid_bytes,
            });
        }
        Ok(ReadTarget {
            entry,
            reader,
            file_offset: base + u64::from(offset),
        })
    }

    /// Reads `buf.len()` bytes of page `page` from `offset`, which must lie within the page's
    /// valid bytes (its newest entry). Does not check the CRC: callers that read parts verify
    /// the page when they fault it in whole ([`read_verified_page`](Self::read_verified_page)).
    /// With [`direct_reads`](Self::direct_reads), any offset, length and buffer still work:
    /// the aligned blocks around the range go through this thread's bounce buffer (module docs,
    /// invariant 5).
    pub fn read(&self, page: u64, offset: u32, buf: &mut [u8]) -> Result<()> {
        let target = self.locate_range(page, offset, buf.len() as u64)?;
        let need = buf.len();
        direct::read_exact(&target.reader, buf, target.file_offset, need)
            .map_err(|e| read_error(page, &target.entry, target.reader.file().path(), e))
    }

    /// Reads page `page`'s valid bytes into `buf[..valid_bytes]` (`buf` must hold a page) and
    /// checks them against the entry's CRC (`Corrupt` on a mismatch). Returns `valid_bytes`.
    /// `buf[valid_bytes..]` is scratch: a direct read into an aligned `buf` fills it up to the
    /// next 4 KiB block with whatever the file holds there.
    pub fn read_verified_page(&self, page: u64, buf: &mut [u8]) -> Result<u32> {
        let (entry, reader, base) = self.locate(page)?;
        let valid = entry.valid_bytes as usize;
        if buf.len() < valid {
            return Err(PageFileError::Invalid(format!(
                "buffer of {} bytes for page {page}'s {valid} valid bytes",
                buf.len()
            )));
        }
        direct::read_exact(&reader, buf, base, valid)
            .map_err(|e| read_error(page, &entry, reader.file().path(), e))?;
        let computed = crc32c::crc32c(&buf[..valid]);
        if computed != entry.crc {
            return Err(PageFileError::Corrupt {
                page,
                path: reader.file().path().to_path_buf(),
                valid_bytes: entry.valid_bytes,
                stored: entry.crc,
                computed,
            });
        }
        Ok(entry.valid_bytes)
    }

    /// Deletes every segment that lies entirely below `page` (data file, then sums file, then a
    /// directory sync); never one that holds `page` or a later page. Returns how many it deleted.
    /// Unsynced writes to deleted segments are dropped. A failure fails the page file.
    pub fn remove_before(&self, page: u64) -> Result<usize> {
        let mut inner = self.inner.lock();
        inner.check_alive()?;
        let per = u64::from(self.config.pages_per_segment);
        let doomed: Vec<u64> = inner
            .segments
            .keys()
            .copied()
            .filter(|first| first.saturating_add(per) <= page)
            .collect();
        if doomed.is_empty() {
            return Ok(0);
        }
        let result = (|| {
            for first in &doomed {
                inner.segments.remove(first);
                inner.latest.retain(|p, _| *p < *first || *p >= first + per);
                for path in [self.data_path(*first), self.sums_path(*first)] {
                    self.disk.remove_file(&path).map_err(|e| {
                        PageFileError::io(format!("removing {}", path.display()), e)
                    })?;
                }
            }
            crate::durable::sync_dir(self.disk.as_ref(), &self.dir)
                .map_err(|e| PageFileError::io("removing segments", e))
        })();
        if let Err(error) = &result {
            inner.failed = Some(error.to_string());
        }
        result.map(|()| doomed.len())
    }
}

/// Writes `buf` (from the aligned staging buffer) at `offset`; returns whether the handle still
/// has direct I/O on. A direct write the file system refuses as misaligned (`InvalidInput`:
/// some file systems need more than [`DIRECT_IO_ALIGNMENT`]) wrote nothing, so it is retried
/// once buffered and the handle stays buffered from then on.
fn write_staged(
    writer: &Arc<dyn DiskFile>,
    direct: bool,
    buf: &[u8],
    offset: u64,
) -> std::io::Result<bool> {
    match writer.write_all_vectored_at(&mut [IoSlice::new(buf)], offset) {
        Err(error) if direct && error.kind() == std::io::ErrorKind::InvalidInput => {
            tracing::warn!(
                path = %writer.path().display(),
                %error,
                "direct write refused; the page file writes this segment buffered"
            );
            writer.set_direct_io(false)?;
            writer.write_all_vectored_at(&mut [IoSlice::new(buf)], offset)?;
            Ok(false)
        }
        result => result.map(|()| direct),
    }
}

/// The error of a failed read of `page`: `DataMissing` when the file ends inside the bytes its
/// trusted entry describes, the I/O error otherwise.
pub(crate) fn read_error(
    page: u64,
    entry: &SumsEntry,
    path: &Path,
    error: std::io::Error,
) -> PageFileError {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        return PageFileError::DataMissing {
            page,
            path: path.to_path_buf(),
            valid_bytes: entry.valid_bytes,
        };
    }
    PageFileError::io(format!("reading page {page}"), error)
}
