//! The page store: a database file of fixed-size pages plus a WAL of page frames.
//!
//! Concurrency: one writer at a time (`writer` mutex, held by a [`WriteTransaction`]); any
//! number of readers, each pinned to a snapshot by a read mark (`marks`); one checkpointer at a
//! time (`checkpointer` mutex). Lock order: checkpointer, writer, marks, shared state, cache.
//! The writer only *tries* the checkpointer lock (lazy log restart), so the order is never
//! inverted by a blocking call.
//!
//! Invariants of [`Shared`]: `backfilled_frames <= max_frame`; `frame_pages.len() == max_frame`;
//! `index[p]` lists, ascending, exactly the frames `f <= max_frame` with `frame_pages[f-1] == p`;
//! every frame `<= max_frame` is on disk with a valid chain; `last_checksum` is the chain value
//! at `max_frame`; the database file holds, for every page, the image of its newest frame
//! `<= backfilled_frames` (or its pre-WAL image) and is fsynced up to there;
//! `db_size_pages <= high_water_pages`, and no page above `high_water_pages` has an image in the
//! database file or a frame in the index (so a page the database grows back into reads as zeros,
//! see [`WriteTransaction::truncate`]).
//!
//! The database size is the commit size of the newest commit frame when the WAL has one (a
//! shrink is only in the WAL until a complete checkpoint truncates the file), else the database
//! file's length in pages.

use crate::cache::{FrameTag, PageCache};
use crate::error::{io_error, Error, Result};
use crate::format::{valid_page_size, WalHeader};
use crate::marks::{ReadMarks, ReaderPin};
use crate::wal::{self, RecoveryReport};
pub use crate::write::WriteTransaction;
use parking_lot::{Mutex, RwLock};
use prefixkv_storage::{real_disk, Disk, DiskFile, OpenMode};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When the WAL is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync the WAL at every commit: a commit that returned is durable.
    Full,
    /// No fsync at commit, only at checkpoint (before the first database write): a crash can
    /// lose the commits since the last checkpoint, but recovery still yields a committed prefix.
    Normal,
}

/// How a checkpoint copies frames into the database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillStrategy {
    /// One synchronous read and one write per page, in frame order, no page-cache reuse (the
    /// Turso document's "before"); kept for the experiment.
    Naive,
    /// One loop with WAL reads (frame order) and database writes in flight together, on
    /// io_uring (or the fallback engine when io_uring is unavailable or the files are simulated),
    /// page-cache reuse, page-sorted batches flushed by a run-length heuristic, one vectored
    /// write per run of consecutive pages.
    Fast,
    /// [`BackfillStrategy::Fast`] with the fallback engine forced (two reader threads, `pwritev`
    /// writes): tests the fallback and serves as a benchmark contender.
    FastThreadPool,
}

/// Options for [`PageStore::open`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size in bytes (power of two, 512..=65536). Default 4096.
    pub page_size_bytes: u32,
    /// WAL sync policy. Default [`SyncPolicy::Full`].
    pub sync: SyncPolicy,
    /// Run a passive checkpoint after a commit when this many frames are not yet backfilled;
    /// 0 disables. Default 1000.
    pub auto_checkpoint_frames: u64,
    /// Page cache capacity in pages. Default 2048.
    pub cache_capacity_pages: usize,
    /// How long blocking checkpoint modes wait for readers and the writer. Default 5 s.
    pub busy_timeout: Duration,
    /// Backfill implementation. Default [`BackfillStrategy::Fast`].
    pub backfill: BackfillStrategy,
    /// Experiment knob, default false: after the pre-copy WAL fsync, ask the kernel to drop the
    /// WAL's (now clean) pages from the OS page cache (`posix_fadvise(DONTNEED)`), so the copy
    /// sees a cold WAL as after memory pressure. Costs I/O; never needed for correctness.
    pub evict_wal_from_os_cache_before_backfill: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size_bytes: 4096,
            sync: SyncPolicy::Full,
            auto_checkpoint_frames: 1000,
            cache_capacity_pages: 2048,
            busy_timeout: Duration::from_secs(5),
            backfill: BackfillStrategy::Fast,
            evict_wal_from_os_cache_before_backfill: false,
        }
    }
}

/// The largest page number accepted (keeps `(page - 1) * page_size` far from overflow).
pub const MAX_PAGE_NUMBER: u32 = 1 << 30;

#[derive(Debug)]
pub(crate) struct Shared {
    pub header: WalHeader,
    pub header_checksum: u32,
    /// False after a restart until the next writer has written and fsynced the new header.
    pub header_durable: bool,
    pub max_frame: u64,
    pub backfilled_frames: u64,
    pub last_checksum: u32,
    pub db_size_pages: u32,
    /// See the module doc: pages above it have no image anywhere.
    pub high_water_pages: u32,
    pub index: HashMap<u32, Vec<u64>>,
    pub frame_pages: Vec<u32>,
    /// Bumped at every log restart; part of every cache tag.
    pub epoch: u64,
}

impl Shared {
    /// Newest frame of `page` at or below `mark`.
    pub fn frame_for(&self, page_number: u32, mark: u64) -> Option<u64> {
        let frames = self.index.get(&page_number)?;
        let below = frames.partition_point(|&f| f <= mark);
        below.checked_sub(1).map(|i| frames[i])
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub options: Options,
    pub db_path: PathBuf,
    pub wal_path: PathBuf,
    pub db_file: Arc<dyn DiskFile>,
    pub wal_file: Arc<dyn DiskFile>,
    pub shared: RwLock<Shared>,
    pub marks: ReadMarks,
    pub writer: Mutex<()>,
    pub checkpointer: Mutex<()>,
    pub cache: PageCache,
    /// The checkpointer's io_uring, created on first use and kept (setting up a 1024-entry ring
    /// costs more than a small checkpoint's copy); `Err` remembers that io_uring is unavailable.
    /// Only touched under the `checkpointer` lock.
    pub ring: Mutex<crate::backfill::RingSlot>,
}

/// A page file with a write-ahead log. Cheap to clone (shared handle).
#[derive(Debug, Clone)]
pub struct PageStore {
    pub(crate) inner: Arc<Inner>,
}

/// What a commit wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitInfo {
    /// First frame id written.
    pub first_frame: u64,
    /// Last frame id written (the commit frame).
    pub last_frame: u64,
    /// Database size in pages after the commit.
    pub db_size_pages: u32,
}

impl PageStore {
    /// Opens (creating if absent) the database file `db_path` and its WAL `<db_path>-wal` on
    /// the real disk, and recovers the frame index from the WAL. The report says what recovery
    /// dropped.
    pub fn open(
        db_path: impl AsRef<Path>,
        options: Options,
    ) -> Result<(PageStore, RecoveryReport)> {
        PageStore::open_on(real_disk(), db_path, options)
    }

    /// [`PageStore::open`] on `disk` (the simulated disk in power-cut tests). Files created here
    /// get their directory entries synced before any commit can be acknowledged.
    pub fn open_on(
        disk: Arc<dyn Disk>,
        db_path: impl AsRef<Path>,
        options: Options,
    ) -> Result<(PageStore, RecoveryReport)> {
        if !valid_page_size(options.page_size_bytes) {
            return Err(Error::Invalid(format!(
                "page_size_bytes {} is not a power of two in 512..=65536",
                options.page_size_bytes
            )));
        }
        let db_path = db_path.as_ref().to_path_buf();
        let mut wal_name = db_path.as_os_str().to_owned();
        wal_name.push("-wal");
        let wal_path = PathBuf::from(wal_name);
        let mut created = false;
        let mut open = |path: &Path| {
            let existed = prefixkv_storage::io::exists(&*disk, path)
                .map_err(|e| io_error("looking for", path, e))?;
            created |= !existed;
            disk.open(path, OpenMode::Create)
                .map_err(|e| io_error("opening", path, e))
        };
        let db_file = open(&db_path)?;
        let wal_file = open(&wal_path)?;
        if created {
            // A commit fsyncs the WAL's data, not its directory entry: without this, a power cut
            // could take the whole (acknowledged) WAL file away with the entry.
            let dir = prefixkv_storage::durable::parent_dir(&db_path);
            prefixkv_storage::durable::sync_dir(&*disk, &dir)
                .map_err(|e| io_error("fsync of the directory of", &db_path, e))?;
        }
        let page_size = options.page_size_bytes;
        let recovered = wal::recover(&*wal_file, &wal_path, page_size)?;
        let db_length = db_file
            .len()
            .map_err(|e| io_error("reading the size of", &db_path, e))?;
        let db_file_pages =
            u32::try_from(db_length.div_ceil(page_size as u64)).map_err(|_| Error::Mismatch {
                path: db_path.clone(),
                message: format!(
                    "database file of {db_length} bytes is too large for {page_size}-byte pages"
                ),
            })?;
        let (header, header_checksum, header_durable) = match recovered.header {
            Some((header, checksum)) => (header, checksum, true),
            None => {
                let header = WalHeader {
                    page_size_bytes: page_size,
                    checkpoint_sequence: 0,
                    salt1: rand::random(),
                    salt2: rand::random(),
                };
                let checksum = header.encode().1;
                (header, checksum, false)
            }
        };
        // The newest commit's size is authoritative: after a shrink whose truncation of the
        // database file did not happen (or was not durable), the file is longer than the database.
        let db_size_pages = recovered.db_size_pages.unwrap_or(db_file_pages);
        let high_water_pages = recovered
            .index
            .keys()
            .copied()
            .chain([db_size_pages, db_file_pages])
            .max()
            .unwrap_or(0);
        let shared = Shared {
            header,
            header_checksum,
            header_durable,
            max_frame: recovered.max_frame,
            backfilled_frames: 0,
            last_checksum: if recovered.max_frame == 0 {
                header_checksum
            } else {
                recovered.last_checksum
            },
            db_size_pages,
            high_water_pages,
            index: recovered.index,
            frame_pages: recovered.frame_pages,
            epoch: 0,
        };
        let inner = Inner {
            cache: PageCache::new(options.cache_capacity_pages),
            options,
            db_path,
            wal_path,
            db_file,
            wal_file,
            shared: RwLock::new(shared),
            marks: ReadMarks::default(),
            writer: Mutex::new(()),
            checkpointer: Mutex::new(()),
            ring: Mutex::new(crate::backfill::RingSlot(None)),
        };
        Ok((
            PageStore {
                inner: Arc::new(inner),
            },
            recovered.report,
        ))
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// Page size in bytes.
    pub fn page_size_bytes(&self) -> u32 {
        self.inner.options.page_size_bytes
    }

    /// The committed (max_frame, backfilled_frames, db_size_pages) right now.
    pub fn wal_state(&self) -> WalState {
        let shared = self.inner.shared.read();
        WalState {
            max_frame: shared.max_frame,
            backfilled_frames: shared.backfilled_frames,
            db_size_pages: shared.db_size_pages,
            checkpoint_sequence: shared.header.checkpoint_sequence,
        }
    }

    /// Which reader the fast backfill uses: `"io_uring"`, `"thread pool (io_uring unavailable)"`,
    /// or `"not yet chosen"` before the first fast checkpoint.
    pub fn backfill_reader(&self) -> &'static str {
        match &self.inner.ring.lock().0 {
            None => "not yet chosen",
            Some(Ok(_)) => "io_uring",
            Some(Err(())) => "thread pool (io_uring unavailable)",
        }
    }

    /// The page cache (for statistics).
    pub fn cache(&self) -> &PageCache {
        &self.inner.cache
    }

    /// Starts a read transaction pinned to the newest committed snapshot. Waits (up to the busy
    /// timeout) only while a log restart holds every slot.
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.options.busy_timeout;
        let mut table = inner.marks.lock();
        loop {
            let shared = inner.shared.read();
            if let Some(pin) = table.pin_reader(shared.max_frame, shared.backfilled_frames) {
                let db_size_pages = shared.db_size_pages;
                return Ok(ReadTransaction {
                    store: self.clone(),
                    pin,
                    db_size_pages,
                });
            }
            drop(shared);
            if !inner.marks.wait(&mut table, deadline) {
                return Err(Error::Busy(
                    "every read-mark slot is held by a log restart".into(),
                ));
            }
        }
    }

    /// Starts the write transaction, waiting up to the busy timeout for the current writer.
    pub fn begin_write(&self) -> Result<WriteTransaction<'_>> {
        let guard = self
            .inner
            .writer
            .try_lock_for(self.inner.options.busy_timeout)
            .ok_or_else(|| Error::Busy("another write transaction is running".into()))?;
        self.restart_log_if_backfilled()?;
        Ok(WriteTransaction::new(self, guard))
    }

    /// Lazy restart (SQLite `walRestartLog`): when every frame is backfilled and no reader uses
    /// the WAL, the next writer starts the log over at frame 1 instead of growing the file.
    fn restart_log_if_backfilled(&self) -> Result<()> {
        let inner = &self.inner;
        {
            let shared = inner.shared.read();
            if shared.max_frame == 0 || shared.backfilled_frames != shared.max_frame {
                return Ok(());
            }
        }
        let Some(_checkpointer) = inner.checkpointer.try_lock() else {
            return Ok(());
        };
        let mut table = inner.marks.lock();
        let taken: Vec<usize> = (1..crate::marks::READ_MARK_SLOTS)
            .filter(|&i| table.try_exclusive(i))
            .collect();
        if taken.len() == crate::marks::READ_MARK_SLOTS - 1 {
            let mut shared = inner.shared.write();
            if shared.backfilled_frames == shared.max_frame {
                restart_shared(&mut shared);
            }
            for &i in &taken {
                table.slots[i].mark = crate::marks::UNUSED_MARK;
            }
        }
        for i in taken {
            table.release_exclusive(i);
        }
        drop(table);
        inner.marks.notify();
        Ok(())
    }

    /// Reads page `page_number` from the database file (zeros past its end).
    pub(crate) fn read_db_page(&self, page_number: u32) -> Result<Vec<u8>> {
        let page_size = self.inner.options.page_size_bytes as usize;
        let mut page = vec![0u8; page_size];
        let offset = (page_number as u64 - 1) * page_size as u64;
        let mut filled = 0;
        while filled < page_size {
            let n = self
                .inner
                .db_file
                .read_at(&mut page[filled..], offset + filled as u64)
                .map_err(|e| {
                    io_error(
                        format!("reading page {page_number} (offset {offset}) of"),
                        &self.inner.db_path,
                        e,
                    )
                })?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        Ok(page)
    }

    /// Reads `page_number` as seen by a snapshot with mark `mark` (WAL frame or database file).
    pub(crate) fn read_page_at(
        &self,
        page_number: u32,
        mark: u64,
        wal_allowed: bool,
    ) -> Result<Arc<[u8]>> {
        let (frame, epoch) = {
            let shared = self.inner.shared.read();
            (
                if wal_allowed {
                    shared.frame_for(page_number, mark)
                } else {
                    None
                },
                shared.epoch,
            )
        };
        match frame {
            Some(frame_id) => {
                let tag = FrameTag { frame_id, epoch };
                if let Some(page) = self.inner.cache.get_clean(page_number, tag) {
                    return Ok(page);
                }
                let mut page = vec![0u8; self.inner.options.page_size_bytes as usize];
                wal::read_frame_page(
                    &*self.inner.wal_file,
                    &self.inner.wal_path,
                    frame_id,
                    &mut page,
                )?;
                let page: Arc<[u8]> = Arc::from(page);
                self.inner
                    .cache
                    .insert_clean(page_number, Arc::clone(&page), tag);
                Ok(page)
            }
            None => Ok(Arc::from(self.read_db_page(page_number)?)),
        }
    }
}

/// A snapshot of the log's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalState {
    /// Last committed frame.
    pub max_frame: u64,
    /// Frames copied into the database file (and fsynced there).
    pub backfilled_frames: u64,
    /// Database size in pages.
    pub db_size_pages: u32,
    /// The WAL header's checkpoint sequence.
    pub checkpoint_sequence: u32,
}

/// Resets the in-memory log to a new generation: new salts, frame ids from 1, epoch bumped.
/// The new header reaches the disk with the next commit (`write_new_header`).
pub(crate) fn restart_shared(shared: &mut Shared) {
    debug_assert_eq!(shared.backfilled_frames, shared.max_frame);
    shared.header = WalHeader {
        page_size_bytes: shared.header.page_size_bytes,
        checkpoint_sequence: shared.header.checkpoint_sequence.wrapping_add(1),
        salt1: shared.header.salt1.wrapping_add(1),
        salt2: rand::random(),
    };
    shared.header_checksum = shared.header.encode().1;
    shared.header_durable = false;
    shared.max_frame = 0;
    shared.backfilled_frames = 0;
    shared.last_checksum = shared.header_checksum;
    shared.index.clear();
    shared.frame_pages.clear();
    shared.epoch += 1;
    // Every frame was backfilled, and the checkpoint that backfilled the last one truncated the
    // database file to `db_size_pages` (it was complete): with the index empty, nothing above
    // the size is left anywhere.
    shared.high_water_pages = shared.db_size_pages;
}

/// A read transaction: a stable snapshot until dropped.
#[derive(Debug)]
pub struct ReadTransaction {
    store: PageStore,
    pin: ReaderPin,
    db_size_pages: u32,
}

impl ReadTransaction {
    /// The snapshot's mark (newest frame visible).
    pub fn mark(&self) -> u64 {
        self.pin.mark
    }

    /// Database size in pages in this snapshot.
    pub fn db_size_pages(&self) -> u32 {
        self.db_size_pages
    }

    /// Reads page `page_number` (1-based) as of this snapshot.
    pub fn read_page(&self, page_number: u32) -> Result<Arc<[u8]>> {
        if page_number == 0 || page_number > self.db_size_pages {
            return Err(Error::Invalid(format!(
                "page {page_number} is outside the snapshot's database of {} pages",
                self.db_size_pages
            )));
        }
        self.store
            .read_page_at(page_number, self.pin.mark, self.pin.slot != 0)
    }
}

impl Drop for ReadTransaction {
    fn drop(&mut self) {
        self.store.inner.marks.lock().unpin_reader(self.pin);
        self.store.inner.marks.notify();
    }
}
