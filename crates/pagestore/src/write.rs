//! The write transaction and the commit path: buffering pages, shrinking, zero frames for pages
//! the database grows back into, appending frames, and the new-generation header.
//!
//! Invariants: a transaction holds the writer lock for its whole life, so nothing else appends
//! frames or changes the size meanwhile; its pages are dirty in the cache until the commit
//! re-tags them (or the drop discards them); a commit's pages are all at or below the size it
//! commits (asserted), and every page between the floor (the committed size, or the smallest
//! size truncated to) and the new size is either written or logged as zeros up to the high-water
//! mark (see `store`'s module doc), so no stale image can reappear.

use crate::cache::FrameTag;
use crate::error::{io_error, Error, Result};
use crate::format::{encode_frame, frame_offset, FrameHeader, WalHeader, FRAME_HEADER_BYTES};
use crate::store::{CommitInfo, PageStore, SyncPolicy, MAX_PAGE_NUMBER};
use parking_lot::MutexGuard;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What [`WriteTransaction::truncate`] did: pages above `floor_pages` (the smallest size
/// truncated to) that the transaction did not write read as zeros; `size_pages` is the size the
/// commit sets.
#[derive(Debug, Clone, Copy)]
struct Truncation {
    floor_pages: u32,
    size_pages: u32,
}

/// The single write transaction. Pages written are buffered until [`WriteTransaction::commit`];
/// dropping it without committing rolls back.
#[derive(Debug)]
pub struct WriteTransaction<'a> {
    store: &'a PageStore,
    _guard: MutexGuard<'a, ()>,
    pages: BTreeMap<u32, Arc<[u8]>>,
    /// Set by [`WriteTransaction::truncate`].
    truncation: Option<Truncation>,
}

impl<'a> WriteTransaction<'a> {
    pub(crate) fn new(store: &'a PageStore, guard: MutexGuard<'a, ()>) -> WriteTransaction<'a> {
        WriteTransaction {
            store,
            _guard: guard,
            pages: BTreeMap::new(),
            truncation: None,
        }
    }

    /// Replaces page `page_number` (1-based; the database grows to include it).
    pub fn write_page(&mut self, page_number: u32, bytes: &[u8]) -> Result<()> {
        let page_size = self.store.page_size_bytes() as usize;
        if page_number == 0 || page_number > MAX_PAGE_NUMBER {
            return Err(Error::Invalid(format!(
                "page number {page_number} is outside 1..={MAX_PAGE_NUMBER}"
            )));
        }
        if bytes.len() != page_size {
            return Err(Error::Invalid(format!(
                "page image of {} bytes, the page size is {page_size}",
                bytes.len()
            )));
        }
        let image: Arc<[u8]> = Arc::from(bytes);
        self.store
            .inner
            .cache
            .mark_dirty(page_number, Arc::clone(&image));
        self.pages.insert(page_number, image);
        if let Some(truncation) = &mut self.truncation {
            truncation.size_pages = truncation.size_pages.max(page_number);
        }
        Ok(())
    }

    /// Shrinks the database to `size_pages` pages (1 ..= the current size) at commit: pages
    /// above it are gone (reads are refused), pages this transaction wrote above it are
    /// dropped, and a page written above it later (in this or another transaction) brings the
    /// pages between back as zeros. The database file itself is cut to the size by the first
    /// checkpoint that backfills every frame (as SQLite does).
    pub fn truncate(&mut self, size_pages: u32) -> Result<()> {
        let current = self.size_pages();
        if size_pages == 0 || size_pages > current {
            return Err(Error::Invalid(format!(
                "cannot truncate a database of {current} pages to {size_pages} pages (1..={current})"
            )));
        }
        let dropped = self.pages.split_off(&(size_pages + 1));
        for page in dropped.keys() {
            self.store.inner.cache.discard_dirty(*page);
        }
        let floor_pages = self
            .truncation
            .map_or(size_pages, |t| t.floor_pages.min(size_pages));
        self.truncation = Some(Truncation {
            floor_pages,
            size_pages,
        });
        Ok(())
    }

    /// The database size in pages as this transaction sees it.
    pub fn size_pages(&self) -> u32 {
        let committed = self.store.inner.shared.read().db_size_pages;
        let written = self.pages.keys().next_back().copied().unwrap_or(0);
        self.truncation
            .map_or(committed.max(written), |t| t.size_pages)
    }

    /// Reads a page as this transaction sees it (its own writes, else the newest commit).
    pub fn read_page(&self, page_number: u32) -> Result<Arc<[u8]>> {
        if let Some(page) = self.pages.get(&page_number) {
            return Ok(Arc::clone(page));
        }
        let (max_frame, committed_pages) = {
            let shared = self.store.inner.shared.read();
            (shared.max_frame, shared.db_size_pages)
        };
        let db_size_pages = self.size_pages();
        if page_number == 0 || page_number > db_size_pages {
            return Err(Error::Invalid(format!(
                "page {page_number} is outside the database of {db_size_pages} pages"
            )));
        }
        let floor_pages = self.truncation.map_or(committed_pages, |t| t.floor_pages);
        if page_number > floor_pages {
            // Above the committed size (or truncated away here) and not written: a page the
            // database grows back into reads as zeros (the commit logs those zeros).
            return Ok(Arc::from(vec![0u8; self.store.page_size_bytes() as usize]));
        }
        // The writer lock keeps restarts away, and a passive checkpoint only rewrites pages
        // that have frames, which this read takes from the WAL.
        self.store.read_page_at(page_number, max_frame, true)
    }

    /// Appends the pages as frames (the last one marked as the commit), fsyncs the WAL under
    /// [`SyncPolicy::Full`], publishes them, then runs the auto-checkpoint if it is due.
    pub fn commit(mut self) -> Result<CommitInfo> {
        let store = self.store;
        let new_size_pages = self.size_pages();
        let mut pages = std::mem::take(&mut self.pages);
        let floor_pages = self.truncation.map(|t| t.floor_pages);
        let filled = store.fill_for_commit(&mut pages, floor_pages, new_size_pages);
        let info = filled.and_then(|()| store.append_commit(&pages, new_size_pages));
        if info.is_err() {
            for page in pages.keys() {
                store.inner.cache.discard_dirty(*page);
            }
        }
        let info = info?;
        drop(self);
        let due = {
            let shared = store.inner.shared.read();
            let threshold = store.inner.options.auto_checkpoint_frames;
            threshold > 0 && shared.max_frame - shared.backfilled_frames >= threshold
        };
        if due {
            match store.checkpoint(crate::CheckpointMode::Passive) {
                Ok(_) | Err(Error::Busy(_)) => {}
                Err(other) => return Err(other),
            }
        }
        Ok(info)
    }
}

impl Drop for WriteTransaction<'_> {
    fn drop(&mut self) {
        for page in self.pages.keys() {
            self.store.inner.cache.discard_dirty(*page);
        }
    }
}

impl PageStore {
    /// Adds the frames a commit needs beyond the pages written: zero images for the pages a
    /// growth brings back (between the old size, or the truncation size, and the new size, up to
    /// the high-water mark: only those can have an old image somewhere), and page 1's current
    /// image when a shrink wrote nothing (a commit needs a frame to carry its size).
    fn fill_for_commit(
        &self,
        pages: &mut BTreeMap<u32, Arc<[u8]>>,
        floor_pages: Option<u32>,
        new_size_pages: u32,
    ) -> Result<()> {
        let (old_size_pages, high_water_pages, max_frame) = {
            let shared = self.inner.shared.read();
            (
                shared.db_size_pages,
                shared.high_water_pages,
                shared.max_frame,
            )
        };
        let floor = floor_pages.unwrap_or(old_size_pages);
        let zeros: Arc<[u8]> = Arc::from(vec![0u8; self.inner.options.page_size_bytes as usize]);
        for page in floor + 1..=new_size_pages.min(high_water_pages) {
            pages.entry(page).or_insert_with(|| Arc::clone(&zeros));
        }
        if pages.is_empty() && new_size_pages != old_size_pages {
            debug_assert!(new_size_pages >= 1, "truncate keeps at least one page");
            let page_one = self.read_page_at(1, max_frame, true)?;
            pages.insert(1, page_one);
        }
        Ok(())
    }

    fn append_commit(
        &self,
        pages: &BTreeMap<u32, Arc<[u8]>>,
        new_db_size: u32,
    ) -> Result<CommitInfo> {
        let inner = &self.inner;
        let page_size = inner.options.page_size_bytes;
        let (header, header_durable, max_frame, mut checksum, db_size_pages, epoch) = {
            let shared = inner.shared.read();
            (
                shared.header,
                shared.header_durable,
                shared.max_frame,
                shared.last_checksum,
                shared.db_size_pages,
                shared.epoch,
            )
        };
        match pages.keys().next_back() {
            Some(&last_page) => assert!(
                last_page <= new_db_size,
                "page {last_page} is above the committed size {new_db_size}"
            ),
            None => {
                return Ok(CommitInfo {
                    first_frame: max_frame + 1,
                    last_frame: max_frame,
                    db_size_pages,
                })
            }
        };
        if !header_durable {
            self.write_new_header(&header)?;
        }
        let frame_bytes = FRAME_HEADER_BYTES + page_size as usize;
        let mut buffer = Vec::with_capacity(frame_bytes * pages.len());
        for (i, (&page_number, image)) in pages.iter().enumerate() {
            let commit_size_pages = if i + 1 == pages.len() { new_db_size } else { 0 };
            let (frame_header, next) = encode_frame(
                &FrameHeader {
                    page_number,
                    commit_size_pages,
                },
                &header,
                checksum,
                image,
            );
            checksum = next;
            buffer.extend_from_slice(&frame_header);
            buffer.extend_from_slice(image);
        }
        let offset = frame_offset(max_frame + 1, page_size);
        crate::fail_point::step("commit:before_frames_write");
        inner.wal_file.write_all_at(&buffer, offset).map_err(|e| {
            io_error(
                format!("appending frames at offset {offset} to"),
                &inner.wal_path,
                e,
            )
        })?;
        crate::fail_point::step("commit:before_wal_fsync");
        if inner.options.sync == SyncPolicy::Full {
            inner
                .wal_file
                .sync_data()
                .map_err(|e| io_error("fsync of", &inner.wal_path, e))?;
        }
        let first_frame = max_frame + 1;
        {
            let mut shared = inner.shared.write();
            assert_eq!(
                shared.max_frame, max_frame,
                "only the writer appends frames"
            );
            for (i, &page_number) in pages.keys().enumerate() {
                shared
                    .index
                    .entry(page_number)
                    .or_default()
                    .push(first_frame + i as u64);
                shared.frame_pages.push(page_number);
            }
            shared.max_frame = max_frame + pages.len() as u64;
            shared.last_checksum = checksum;
            shared.db_size_pages = new_db_size;
            shared.high_water_pages = shared.high_water_pages.max(new_db_size);
            debug_assert_eq!(shared.frame_pages.len() as u64, shared.max_frame);
        }
        for (i, (&page_number, image)) in pages.iter().enumerate() {
            inner.cache.commit_dirty(
                page_number,
                Arc::clone(image),
                FrameTag {
                    frame_id: first_frame + i as u64,
                    epoch,
                },
            );
        }
        Ok(CommitInfo {
            first_frame,
            last_frame: max_frame + pages.len() as u64,
            db_size_pages: new_db_size,
        })
    }

    /// Writes and fsyncs a new generation's header before its first frame, whatever the sync
    /// policy: otherwise an old header could survive a crash beside new frames, and recovery
    /// would replay a prefix of the old generation over a database that is already newer.
    fn write_new_header(&self, header: &WalHeader) -> Result<()> {
        let inner = &self.inner;
        let (bytes, _) = header.encode();
        crate::fail_point::step("restart:before_header_write");
        inner
            .wal_file
            .write_all_at(&bytes, 0)
            .map_err(|e| io_error("writing the header of", &inner.wal_path, e))?;
        inner
            .wal_file
            .sync_data()
            .map_err(|e| io_error("fsync of", &inner.wal_path, e))?;
        crate::fail_point::step("restart:after_header_fsync");
        inner.shared.write().header_durable = true;
        Ok(())
    }
}
