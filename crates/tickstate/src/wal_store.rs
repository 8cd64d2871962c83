//! The WAL-backed image store: the alternative to double backup, doing Cao et al.'s *Merge* with
//! the Turso/SQLite technique. The image lives in one `prefixkv-pagestore` database
//! (`<dir>/image.pkvpages` and its WAL `<dir>/image.pkvpages-wal`). A checkpoint writes only the
//! pages that changed since the previous image, as WAL frames of **one** write transaction
//! whose commit frame makes the whole image of that tick visible at once; the pagestore's
//! checkpoint later backfills the newest frame of every page into the database file (the merge
//! of the dirty pages into the full image), and the WAL starts over.
//!
//! Page layout inside the store (pages are [`PAGE_BYTES`] bytes, numbered from 1):
//!
//! | pages | content |
//! |---|---|
//! | 1 | header (below), zero padded |
//! | 2 ..= 1 + T | page checksum table: CRC32C (u32 LE) of every data page, in order |
//! | 2 + T ..= 1 + T + D | data: the cells, u64 LE, 512 per page, last page zero padded |
//!
//! with D = ⌈8·words / PAGE_BYTES⌉ and T = ⌈4·D / PAGE_BYTES⌉. Header (little-endian): magic
//! `PKVTICKW` (8), format version u32 = 1, page size u32, tick u64, marker LSN u64 (the oplog
//! LSN of the tick's point-of-consistency record), words u64, CRC32C of the checksum table u32,
//! CRC32C of header bytes 0..44 u32.
//!
//! Integrity: the WAL protects its frames with a checksum chain, but backfilled pages in the
//! database file carry none, so the image carries its own: header CRC → table CRC → one CRC per
//! data page. Recovery verifies all of them; a mismatch makes the image invalid (named in the
//! recovery report), never silently used.
//!
//! Crash safety: (1) all pages of a checkpoint (changed data pages, the table pages they touch,
//! the header) go into one transaction; pagestore recovery replays only whole committed
//! transactions, so a crash during the frame writes leaves the previous image. (2) The logical
//! log is made durable through the image's marker before the commit, as the double-backup store
//! does before its complete footer, so a committed image never claims a tick the log lacks.
//! (3) Backfill crash safety is the pagestore's (`docs/pagestore.md`): frames stay in the WAL,
//! and win over the database file, until their copies are fsynced.
//!
//! Costs: a checkpoint writes (changed pages + touched table pages + 1) WAL frames of
//! 24 + PAGE_BYTES bytes, and reads each changed page's previous version (page cache, WAL or
//! database file) to fill the clean words around the dirty ones; the backfill writes each page
//! with frames once, however many checkpoints rewrote it since the previous backfill. The write
//! transaction buffers its pages in memory until the commit (up to |AS| for a full image), and
//! the page store's cache keeps the newest image's pages (up to |AS|; see
//! `page_store_options` for why it must hold a whole commit).
//! Algorithms that track no changes (all but Ping-Pong) report every page changed, so every
//! checkpoint writes the full image as frames.

use crate::algo::Algorithm;
use crate::image::{words_as_bytes, words_as_bytes_mut, Footer, ImageCheck};
use crate::writer::Shared;
use prefixkv_pagestore::{
    CheckpointMode, Options as PageStoreOptions, PageStore, SyncPolicy, MAX_PAGE_NUMBER,
};
use prefixkv_storage::log::Log;
use prefixkv_storage::Disk;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Page size of the store (one OS page).
pub const PAGE_BYTES: usize = 4096;
/// Cells per data page.
pub const PAGE_WORDS: usize = PAGE_BYTES / 8;
/// Header magic.
pub const HEADER_MAGIC: [u8; 8] = *b"PKVTICKW";
/// Header format version.
pub const HEADER_VERSION: u32 = 1;
/// Bytes of the header that carry fields (the rest of page 1 is zero).
pub const HEADER_BYTES: usize = 48;
/// Bytes of a WAL frame header in `prefixkv-pagestore`.
const FRAME_HEADER_BYTES: u64 = 24;

/// The database file of the WAL-backed store in a tick-state directory (its WAL is beside it,
/// with `-wal` appended).
pub fn store_path(dir: &Path) -> PathBuf {
    dir.join("image.pkvpages")
}

/// Where each part of an image of `words` cells lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Data pages.
    pub data_pages: usize,
    /// Checksum table pages.
    pub table_pages: usize,
}

impl Layout {
    /// The layout for `words` cells; an error if the pages would not fit the page store.
    pub fn new(words: usize) -> io::Result<Layout> {
        let data_pages = words.div_ceil(PAGE_WORDS).max(1);
        let table_pages = (data_pages * 4).div_ceil(PAGE_BYTES);
        if 1 + table_pages + data_pages > MAX_PAGE_NUMBER as usize {
            return Err(io::Error::other(format!(
                "a state of {words} cells needs more than {MAX_PAGE_NUMBER} pages of {PAGE_BYTES} bytes"
            )));
        }
        Ok(Layout {
            data_pages,
            table_pages,
        })
    }

    /// Page number of checksum-table page `index`.
    fn table_page(&self, index: usize) -> u32 {
        debug_assert!(index < self.table_pages);
        (2 + index) as u32
    }

    /// Page number of data page `index`.
    fn data_page(&self, index: usize) -> u32 {
        debug_assert!(index < self.data_pages);
        (2 + self.table_pages + index) as u32
    }
}

/// Encode the header page's fields (the footer fields of the double-backup format, as the
/// same [`Footer`] type; `data_crc` is the checksum table's CRC, `complete` must be true).
pub fn encode_header(footer: &Footer) -> [u8; HEADER_BYTES] {
    assert!(
        footer.complete,
        "the WAL store commits only complete images"
    );
    let mut bytes = [0u8; HEADER_BYTES];
    bytes[0..8].copy_from_slice(&HEADER_MAGIC);
    bytes[8..12].copy_from_slice(&HEADER_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(PAGE_BYTES as u32).to_le_bytes());
    bytes[16..24].copy_from_slice(&footer.tick.to_le_bytes());
    bytes[24..32].copy_from_slice(&footer.marker_lsn.to_le_bytes());
    bytes[32..40].copy_from_slice(&footer.words.to_le_bytes());
    bytes[40..44].copy_from_slice(&footer.data_crc.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[0..44]);
    bytes[44..48].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decode a header; the error says what is wrong.
pub fn decode_header(bytes: &[u8]) -> Result<Footer, String> {
    if bytes.len() < HEADER_BYTES {
        return Err(format!("{} bytes, shorter than a header", bytes.len()));
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if bytes[0..8] != HEADER_MAGIC {
        return Err("bad magic".into());
    }
    if crc32c::crc32c(&bytes[0..44]) != u32_at(44) {
        return Err("header checksum mismatch".into());
    }
    if u32_at(8) != HEADER_VERSION {
        return Err(format!("unknown format version {}", u32_at(8)));
    }
    if u32_at(12) != PAGE_BYTES as u32 {
        return Err(format!(
            "page size {} (this build uses {PAGE_BYTES})",
            u32_at(12)
        ));
    }
    Ok(Footer {
        complete: true,
        tick: u64_at(16),
        marker_lsn: u64_at(24),
        words: u64_at(32),
        data_crc: u32_at(40),
    })
}

fn page_store_options(layout: Layout) -> PageStoreOptions {
    PageStoreOptions {
        page_size_bytes: PAGE_BYTES as u32,
        sync: SyncPolicy::Full,
        // The writer decides when to backfill (see `WalImageWriter::backfill_after_frames`).
        auto_checkpoint_frames: 0,
        // Room for every page of the image: the cache keeps the newest image's pages, which
        // serve the base reads of the next checkpoint and the backfill (Turso's cache reuse):
        // up to |AS| of memory. (A commit's dirty pages are held until it commits whatever the
        // capacity; eviction skips them in O(1).)
        cache_capacity_pages: 1 + layout.table_pages + layout.data_pages + 16,
        ..PageStoreOptions::default()
    }
}

fn store_error(path: &Path, what: &str, error: prefixkv_pagestore::Error) -> io::Error {
    io::Error::other(format!("{} ({what}): {error}", path.display()))
}

/// Read and verify the newest committed image of the WAL-backed store in `dir` on `disk` (which
/// must hold `words` cells). [`ImageCheck::Missing`] if the store does not exist or has no
/// committed image. Opening the store recovers its WAL (it may drop an uncommitted tail),
/// nothing else changes.
pub fn read_wal_image(disk: &Arc<dyn Disk>, dir: &Path, words: usize) -> io::Result<ImageCheck> {
    Ok(open_and_read(disk, dir, words)?.0)
}

/// [`read_wal_image`], also returning the opened store (if it exists) for the writer.
pub(crate) fn open_and_read(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    words: usize,
) -> io::Result<(ImageCheck, Option<PageStore>)> {
    let path = store_path(dir);
    if !prefixkv_storage::io::exists(&**disk, &path)? {
        return Ok((ImageCheck::Missing, None));
    }
    let layout = Layout::new(words)?;
    let (store, _report) = PageStore::open_on(Arc::clone(disk), &path, page_store_options(layout))
        .map_err(|e| store_error(&path, "open", e))?;
    let check = read_image_from(&store, &path, words, layout)?;
    Ok((check, Some(store)))
}

fn read_image_from(
    store: &PageStore,
    path: &Path,
    words: usize,
    layout: Layout,
) -> io::Result<ImageCheck> {
    let snapshot = store
        .begin_read()
        .map_err(|e| store_error(path, "begin read", e))?;
    if snapshot.db_size_pages() == 0 {
        return Ok(ImageCheck::Missing);
    }
    let read = |page: u32| {
        snapshot
            .read_page(page)
            .map_err(|e| store_error(path, &format!("reading page {page}"), e))
    };
    let header = read(1)?;
    let footer = match decode_header(&header) {
        Ok(footer) => footer,
        Err(reason) => {
            return Ok(ImageCheck::Invalid(format!(
                "{}: header page: {reason}",
                path.display()
            )))
        }
    };
    if footer.words != words as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: image of {} cells but the state has {words} cells; open the directory with \
                 the configuration that wrote it, or move the files away",
                path.display(),
                footer.words
            ),
        ));
    }
    let needed_pages = 1 + layout.table_pages + layout.data_pages;
    if (snapshot.db_size_pages() as usize) < needed_pages {
        return Ok(ImageCheck::Invalid(format!(
            "{}: {} pages, an image of {words} cells needs {needed_pages}",
            path.display(),
            snapshot.db_size_pages()
        )));
    }
    let mut table_bytes = Vec::with_capacity(layout.table_pages * PAGE_BYTES);
    for index in 0..layout.table_pages {
        table_bytes.extend_from_slice(&read(layout.table_page(index))?);
    }
    table_bytes.truncate(layout.data_pages * 4);
    let table_crc = crc32c::crc32c(&table_bytes);
    if table_crc != footer.data_crc {
        return Ok(ImageCheck::Invalid(format!(
            "{}: page checksum table CRC {table_crc:#010x} does not match the header's {:#010x}",
            path.display(),
            footer.data_crc
        )));
    }
    let mut cells = vec![0u64; words];
    let mut padded = vec![0u64; PAGE_WORDS];
    for index in 0..layout.data_pages {
        let page = read(layout.data_page(index))?;
        let expected = u32::from_le_bytes(
            table_bytes[index * 4..index * 4 + 4]
                .try_into()
                .expect("4 bytes"),
        );
        let crc = crc32c::crc32c(&page);
        if crc != expected {
            return Ok(ImageCheck::Invalid(format!(
                "{}: data page {index} (store page {}, database offset {}) has CRC {crc:#010x}, \
                 the table says {expected:#010x} (damaged image)",
                path.display(),
                layout.data_page(index),
                (layout.data_page(index) as u64 - 1) * PAGE_BYTES as u64
            )));
        }
        words_as_bytes_mut(&mut padded).copy_from_slice(&page);
        let start = index * PAGE_WORDS;
        let length = PAGE_WORDS.min(words - start);
        cells[start..start + length].copy_from_slice(&padded[..length]);
    }
    Ok(ImageCheck::Valid { footer, cells })
}

/// Byte counters of the WAL-backed store.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WalCounters {
    pub(crate) frame_bytes: u64,
    pub(crate) backfill_bytes: u64,
    pub(crate) base_bytes: u64,
}

/// The writer's side of the WAL-backed store.
pub(crate) struct WalImageWriter {
    store: PageStore,
    path: PathBuf,
    words: usize,
    layout: Layout,
    /// CRC32C of every data page of the newest committed image (exact after the first full
    /// image this writer commits, which every algorithm's first capture after open is).
    table: Vec<u32>,
    /// Whether this writer committed an image (so a base exists in the store).
    has_image: bool,
    newest_marker_lsn: u64,
    /// Backfill when this many frames are not yet backfilled.
    backfill_after_frames: u64,
    page: Vec<u64>,
    table_page_dirty: Vec<bool>,
}

impl WalImageWriter {
    /// Open (creating) the store in `dir`. `store` is the one recovery opened, if any;
    /// `newest_marker_lsn` is the marker of the newest image recovery loaded (kept for log
    /// truncation). `backfill_after_frames` 0 means the image's page count.
    pub(crate) fn open(
        disk: &Arc<dyn Disk>,
        dir: &Path,
        words: usize,
        store: Option<PageStore>,
        newest_marker_lsn: u64,
        backfill_after_frames: u64,
    ) -> io::Result<WalImageWriter> {
        let path = store_path(dir);
        let layout = Layout::new(words)?;
        let store = match store {
            Some(store) => store,
            // `open_on` makes the names of the files it creates durable before any commit.
            None => {
                PageStore::open_on(Arc::clone(disk), &path, page_store_options(layout))
                    .map_err(|e| store_error(&path, "open", e))?
                    .0
            }
        };
        let image_pages = (1 + layout.table_pages + layout.data_pages) as u64;
        Ok(WalImageWriter {
            store,
            path,
            words,
            layout,
            table: vec![0; layout.data_pages],
            has_image: false,
            newest_marker_lsn,
            backfill_after_frames: if backfill_after_frames == 0 {
                image_pages
            } else {
                backfill_after_frames
            },
            page: vec![0; PAGE_WORDS],
            table_page_dirty: vec![false; layout.table_pages],
        })
    }

    /// Write the checkpoint the last `prepare` started as the image of `tick`: one transaction
    /// of the changed pages, committed after the log is durable through `marker_lsn`; then
    /// backfill if enough frames are pending; then truncate the log before the previous image.
    pub(crate) fn write_image<A: Algorithm>(
        &mut self,
        shared: &Shared<A>,
        tick: u64,
        marker_lsn: u64,
        log: Option<&Log>,
    ) -> io::Result<()> {
        let path = self.path.clone();
        let error = |what: &str, e: prefixkv_pagestore::Error| store_error(&path, what, e);
        let algorithm = &shared.algorithm;
        let needs_base = algorithm.needs_base();
        assert!(
            !needs_base || self.has_image,
            "an algorithm asked for a base image before this writer wrote one"
        );
        let mut counters = WalCounters::default();
        let mut transaction = self
            .store
            .begin_write()
            .map_err(|e| error("begin write", e))?;
        self.table_page_dirty.fill(false);
        for index in 0..self.layout.data_pages {
            let start = index * PAGE_WORDS;
            let length = PAGE_WORDS.min(self.words - start);
            let page_number = self.layout.data_page(index);
            if needs_base {
                if !algorithm.changed_since_base(start, length) {
                    continue;
                }
                let base = transaction
                    .read_page(page_number)
                    .map_err(|e| error("reading a base page", e))?;
                words_as_bytes_mut(&mut self.page).copy_from_slice(&base);
                counters.base_bytes += PAGE_BYTES as u64;
            } else {
                // The tail of the last page stays zero, as the format says.
                self.page.fill(0);
            }
            algorithm.capture(start, &mut self.page[..length]);
            let bytes = words_as_bytes(&self.page);
            self.table[index] = crc32c::crc32c(bytes);
            self.table_page_dirty[index * 4 / PAGE_BYTES] = true;
            transaction
                .write_page(page_number, bytes)
                .map_err(|e| error("writing a data page", e))?;
        }
        let mut table_bytes = Vec::with_capacity(self.layout.table_pages * PAGE_BYTES);
        for crc in &self.table {
            table_bytes.extend_from_slice(&crc.to_le_bytes());
        }
        let table_crc = crc32c::crc32c(&table_bytes);
        table_bytes.resize(self.layout.table_pages * PAGE_BYTES, 0);
        for (index, dirty) in self.table_page_dirty.iter().enumerate() {
            if *dirty {
                transaction
                    .write_page(
                        self.layout.table_page(index),
                        &table_bytes[index * PAGE_BYTES..(index + 1) * PAGE_BYTES],
                    )
                    .map_err(|e| error("writing a checksum table page", e))?;
            }
        }
        let mut header = vec![0u8; PAGE_BYTES];
        header[..HEADER_BYTES].copy_from_slice(&encode_header(&Footer {
            complete: true,
            tick,
            marker_lsn,
            words: self.words as u64,
            data_crc: table_crc,
        }));
        transaction
            .write_page(1, &header)
            .map_err(|e| error("writing the header page", e))?;
        if let Some(log) = log {
            if log.durable_lsn() < marker_lsn {
                log.flush_and_sync().map_err(|e| {
                    io::Error::other(format!("syncing the log before an image commit: {e}"))
                })?;
            }
            debug_assert!(log.durable_lsn() >= marker_lsn);
        }
        let info = transaction
            .commit()
            .map_err(|e| error("committing the image", e))?;
        let frames = info.last_frame + 1 - info.first_frame;
        counters.frame_bytes = frames * (FRAME_HEADER_BYTES + PAGE_BYTES as u64);
        self.has_image = true;
        let previous_marker_lsn = self.newest_marker_lsn;
        self.newest_marker_lsn = marker_lsn;
        shared.completed_tick.store(tick, Ordering::Release);
        shared.images_completed.fetch_add(1, Ordering::Relaxed);
        let state = self.store.wal_state();
        if state.max_frame - state.backfilled_frames >= self.backfill_after_frames {
            let outcome = self
                .store
                .checkpoint(CheckpointMode::Passive)
                .map_err(|e| error("backfilling the WAL into the image file", e))?;
            counters.backfill_bytes = outcome.pages_written * PAGE_BYTES as u64;
        }
        shared.image_bytes_written.fetch_add(
            counters.frame_bytes + counters.backfill_bytes,
            Ordering::Relaxed,
        );
        shared
            .wal_frame_bytes_written
            .fetch_add(counters.frame_bytes, Ordering::Relaxed);
        shared
            .backfill_bytes_written
            .fetch_add(counters.backfill_bytes, Ordering::Relaxed);
        shared
            .base_bytes_read
            .fetch_add(counters.base_bytes, Ordering::Relaxed);
        if let (Some(log), true) = (log, previous_marker_lsn > 0) {
            log.truncate_through(previous_marker_lsn)
                .map_err(|e| io::Error::other(format!("truncating the log after an image: {e}")))?;
        }
        Ok(())
    }
}
