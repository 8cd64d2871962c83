//! The storage tier: pages below the head address live in a page file
//! (`prefixkv_storage::pagefile`), and reads of their records are served from it.
//!
//! Writing (eviction's half, driven by `tier.rs` one floor up): [`HybridLog::flush_pages`] copies
//! immutable pages word by word (relaxed loads: the access word and a record's seqlock word may
//! still change on an immutable page, see below) into a buffer, hands whole pages to the page
//! file, and syncs it; only then does [`HybridLog::set_head`] move the head past them. So every
//! page below the head is in the page file, written and synced, before any reader can be sent
//! there.
//!
//! Reading: [`HybridLog::record`] sends an address below the head here. The record is read from
//! the page file into a heap copy owned by the calling thread (a thread-local arena), and the
//! `Record` handed out borrows that copy. Invariants of the copies:
//! - A copy lives until the thread calls [`release_cold_copies`]: at the start of each session
//!   operation (`Session::begin_op`), and at the chunk boundaries of the scanners that run
//!   outside sessions (checkpoint index scans, live-byte recounts, recovery). A `Record` is never
//!   kept across those points: the same rule as for in-memory records and epoch refreshes.
//! - A copy is a snapshot: flag, lock and access-word changes made through it reach no other
//!   thread. Nothing needs them to: records below the head are immutable (never written in
//!   place: they are below the read-only address), the flags set on old records after they were
//!   written (SEALED, INVALID of a rollback, compaction's seals) are not used in tiered stores or
//!   only shortcut a retry. The one lock that matters, the record lock a read-copy-update takes
//!   on the record it copies, is replaced for records below the read-only address by a lock per
//!   key hash (`Session::hold_tier_stripe`), under which the writer checks that the record is
//!   still its key's newest.
//! - The copy's seqlock bit is cleared: a page may have been copied while a writer held the lock
//!   of one of its records (writers lock old records to read-copy-update them), and the copy must
//!   not look locked forever.
//!
//! Reads check the page's checksum only when a page is read whole ([`HybridLog::scan`]); a single
//! record read trusts the file's bytes within the process that wrote and synced them. A failed
//! synchronous read panics with the page file's error; the pending path (`session/pending.rs`)
//! reads through a [`PageReads`](prefixkv_storage::pagefile::PageReads) instead and reports
//! failures to its caller.
//!
//! Read-ahead copies (the pending path): a record the pending path read is handed to this
//! module with [`install_read_ahead`] before the operation that needs it runs again, and
//! [`take_back_read_ahead`] takes them back after. While installed, [`HybridLog::record`] serves that
//! address from the copy (no I/O), and a walk that pends treats it as readable
//! ([`read_ahead`]). A copy is a snapshot like any other cold copy: the record is immutable, so
//! it holds the record's bytes for as long as the address is at or above the begin address.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prefixkv_storage::pagefile::{PageFile, PageFileError};

use super::{HybridLog, Record, HEADER_WORDS};

/// Bytes read first for a cold record: its header and, for most records, all of it.
const FIRST_READ_BYTES: u64 = 512;

// A thread's cold record copies (see the module invariants).
thread_local! {
    static COPIES: RefCell<Vec<Box<[AtomicU64]>>> = const { RefCell::new(Vec::new()) };
}

/// Read-ahead copies: (the record's address, its words).
pub(crate) type ReadAheadCopies = Vec<(u64, Box<[AtomicU64]>)>;

// The read-ahead copies installed on this thread.
thread_local! {
    static READ_AHEAD: RefCell<ReadAheadCopies> = const { RefCell::new(Vec::new()) };
}

/// Whether the record at `address` has a read-ahead copy installed on this thread.
#[inline]
pub(crate) fn read_ahead(address: u64) -> bool {
    READ_AHEAD.with(|copies| copies.borrow().iter().any(|(at, _)| *at == address))
}

/// Installs read-ahead copies (see the module docs), taking them from `copies`.
pub(crate) fn install_read_ahead(copies: &mut ReadAheadCopies) {
    READ_AHEAD.with(|installed| installed.borrow_mut().append(copies));
}

/// Uninstalls this thread's read-ahead copies, moving them back into `into` (the operation
/// keeps them for its next attempt).
pub(crate) fn take_back_read_ahead(into: &mut ReadAheadCopies) {
    READ_AHEAD.with(|installed| into.append(&mut installed.borrow_mut()));
}

/// What the bytes of a pending read at a record's address hold ([`HybridLog::cold_copy_of`]).
pub(crate) enum ColdBytes {
    /// The whole record (its seqlock cleared, as every cold copy's).
    Record(Box<[AtomicU64]>),
    /// The record is longer than the bytes read: read this many from its address.
    Short {
        /// The record's size in bytes.
        needed: usize,
    },
}

/// Frees the calling thread's cold record copies: every `Record` it got for an address below the
/// head is invalid afterwards.
#[inline]
pub(crate) fn release_cold_copies() {
    COPIES.with(|copies| {
        let mut copies = copies.borrow_mut();
        if !copies.is_empty() {
            copies.clear();
        }
    });
}

/// The page file a tiered log evicts into, and how far it is written.
pub(crate) struct Tier {
    /// Shared with the sessions' pending readers (`PageReads` holds an `Arc`).
    file: Arc<PageFile>,
    /// Pages below this one are written to the file and synced.
    flushed_until_page: AtomicU64,
    /// The first write or sync failure; eviction stops for good after one (the page file fails
    /// too), and writers that wait for memory report it.
    failure: Mutex<Option<String>>,
    /// Held for one eviction chunk (`tier.rs`): one evictor at a time.
    eviction: Mutex<()>,
}

impl Tier {
    /// A tier on an opened, empty page file whose page size is the log's.
    pub(crate) fn new(file: PageFile) -> Tier {
        Tier {
            file: Arc::new(file),
            flushed_until_page: AtomicU64::new(1),
            failure: Mutex::new(None),
            eviction: Mutex::new(()),
        }
    }
}

/// A page read whole from the page file for a scan.
pub(super) struct ColdPage {
    pub(super) page: u64,
    words: Box<[AtomicU64]>,
}

impl ColdPage {
    /// The record at `address` in this page (the caller checked the page).
    pub(super) fn record<'a>(&'a self, log: &HybridLog, address: u64) -> Record<'a> {
        let word_index = ((address & ((1u64 << log.page_bits) - 1)) / 8) as usize;
        let record = Record {
            address,
            words: &self.words[word_index..],
        };
        // The page's zeroed end has no header to clear (the scan skips it).
        if record.words.len() >= HEADER_WORDS {
            record.unlock_copy();
        }
        record
    }
}

/// Words from native-endian bytes (the page file holds the log's words as they were in memory).
fn words_of(bytes: &[u8]) -> Box<[AtomicU64]> {
    bytes
        .chunks_exact(8)
        .map(|chunk| AtomicU64::new(u64::from_ne_bytes(chunk.try_into().expect("8 bytes"))))
        .collect()
}

impl HybridLog {
    fn tier(&self) -> &Tier {
        self.tier
            .as_ref()
            .expect("an address below the head exists only in a log with a storage tier")
    }

    /// The record at `address` (below the head) read from the page file into this thread's
    /// arena, or taken from an installed read-ahead copy.
    #[cold]
    #[inline(never)]
    pub(super) fn cold_record(&self, address: u64) -> Record<'_> {
        let copy = READ_AHEAD
            .with(|installed| {
                installed
                    .borrow()
                    .iter()
                    .find(|(at, _)| *at == address)
                    .map(|(_, words)| {
                        words
                            .iter()
                            .map(|word| AtomicU64::new(word.load(Ordering::Relaxed)))
                            .collect::<Box<[AtomicU64]>>()
                    })
            })
            .unwrap_or_else(|| self.read_cold_words(address));
        let (pointer, len) = (copy.as_ptr(), copy.len());
        COPIES.with(|copies| copies.borrow_mut().push(copy));
        // SAFETY: the boxed slice was moved into this thread's arena without moving its heap
        // allocation, and stays there until `release_cold_copies`, which the module invariants
        // order after every use of the records handed out before it.
        let words = unsafe { std::slice::from_raw_parts(pointer, len) };
        Record { address, words }
    }

    /// The words of the record at `address` (below the head), read synchronously from the page
    /// file, its seqlock bit cleared. Panics on a failed read (module docs).
    pub(crate) fn read_cold_words(&self, address: u64) -> Box<[AtomicU64]> {
        let tier = self.tier();
        let page = address >> self.page_bits;
        let offset = address & ((1u64 << self.page_bits) - 1);
        let room = self.page_bytes() as u64 - offset;
        let mut first = FIRST_READ_BYTES.min(room) as usize;
        let mut bytes = vec![0u8; first];
        match tier.file.read(page, offset as u32, &mut bytes) {
            Ok(()) => {}
            Err(PageFileError::OutOfRange { valid_bytes, .. }) => {
                // The last page of an incremental checkpoint ends before the page does: read
                // what it holds (the record lies within it; its size is checked below).
                first = (u64::from(valid_bytes).saturating_sub(offset)) as usize;
                bytes.truncate(first);
                read_or_panic(&tier.file, page, offset, &mut bytes);
            }
            Err(error) => {
                panic!("reading log page {page} at offset {offset} from the storage tier: {error}")
            }
        }
        match self.cold_copy_of(address, &bytes) {
            Ok(ColdBytes::Record(copy)) => copy,
            Ok(ColdBytes::Short { needed }) => {
                // Only the bytes the first read did not cover.
                bytes.resize(needed, 0);
                read_or_panic(&tier.file, page, offset + first as u64, &mut bytes[first..]);
                match self.cold_copy_of(address, &bytes) {
                    Ok(ColdBytes::Record(copy)) => copy,
                    Ok(ColdBytes::Short { .. }) => unreachable!("the bytes cover the record"),
                    Err(damage) => panic!("{damage}"),
                }
            }
            Err(damage) => panic!("{damage}"),
        }
    }

    /// The record at `address` from `bytes` read at its address: a copy when they cover it, the
    /// size to read when they do not, and an error when its header claims more bytes than its
    /// page has left (the page file holds something else there). A copy may run past its
    /// record, as a record in a page does.
    pub(crate) fn cold_copy_of(&self, address: u64, bytes: &[u8]) -> Result<ColdBytes, String> {
        let offset = address & ((1u64 << self.page_bits) - 1);
        let room = self.page_bytes() - offset as usize;
        if bytes.len() < HEADER_WORDS * 8 {
            return Err(format!(
                "the record at log address {address} has {} bytes in the page file, less than a \
                 record header",
                bytes.len()
            ));
        }
        let copy = words_of(bytes);
        let record = Record {
            address,
            words: &copy,
        };
        // The record's size from its header (record.rs is the one place that knows the layout;
        // `HEADER_WORDS` cover every header word).
        let needed = record.size_bytes();
        if needed > room {
            return Err(format!(
                "the record at log address {address} claims {needed} bytes, past its page's end: \
                 the page file holds something else there"
            ));
        }
        if needed > bytes.len() {
            return Ok(ColdBytes::Short { needed });
        }
        record.unlock_copy();
        Ok(ColdBytes::Record(copy))
    }

    /// Where a pending read of the record at `address` (below the head) starts and how long it
    /// is: at least `at_least` bytes (0: a first read, through the end of the 4 KiB block that
    /// holds the record's first 512 bytes, which covers most records and costs a direct read
    /// nothing more), never past the page's valid bytes. `None` if the page file has no such
    /// page (the address fell below the begin address and its segment is gone).
    pub(crate) fn cold_read_range(&self, address: u64, at_least: usize) -> Option<(u64, u32, u32)> {
        let page = address >> self.page_bits;
        let offset = address & ((1u64 << self.page_bits) - 1);
        let valid = u64::from(self.tier().file.entry(page)?.valid_bytes);
        const BLOCK: u64 = 4096;
        let wanted_end = if at_least == 0 {
            (offset + FIRST_READ_BYTES).div_ceil(BLOCK) * BLOCK
        } else {
            offset + at_least as u64
        };
        let end = wanted_end.min(valid);
        (end > offset).then(|| (page, offset as u32, (end - offset) as u32))
    }

    /// The page file, shared (a session's pending reader holds it).
    pub(crate) fn page_file_shared(&self) -> Arc<PageFile> {
        Arc::clone(&self.tier().file)
    }

    /// Page `page` (below the head) read whole from the page file, its checksum verified.
    pub(super) fn load_cold_page(&self, page: u64) -> ColdPage {
        let mut bytes = vec![0u8; self.page_bytes()];
        if let Err(error) = self.tier().file.read_verified_page(page, &mut bytes) {
            panic!("reading log page {page} from the storage tier: {error}");
        }
        ColdPage {
            page,
            words: words_of(&bytes),
        }
    }

    /// Writes the log below `address` (immutable: below the read-only address after an epoch
    /// bump) from the tier's flushed mark on to the page file, and syncs it once; returns the
    /// bytes written. Whole pages move the flushed mark; a last page that `address` ends inside
    /// (an incremental checkpoint's fold-over point) is written with the bytes below `address` as
    /// its valid bytes and zeros after them (writers may be filling the rest, which is not part
    /// of the checkpoint); it is written whole again later. The caller holds the eviction lock
    /// (the flushed mark moves only here). After a failure the tier refuses every later flush
    /// with the same error.
    pub(crate) fn flush_until(&self, address: u64) -> Result<u64, String> {
        let tier = self.tier();
        if let Some(failure) = tier.failure.lock().expect("tier lock").clone() {
            return Err(failure);
        }
        let page_bytes = self.page_bytes();
        let first_page = tier.flushed_until_page.load(Ordering::Acquire);
        let end_page = address >> self.page_bits;
        let partial = (address as usize) & (page_bytes - 1);
        let mut bytes = vec![0u8; page_bytes];
        let mut written = 0u64;
        let result = (|| -> Result<(), String> {
            for page in first_page..=end_page {
                let valid = if page < end_page { page_bytes } else { partial };
                if valid == 0 {
                    continue;
                }
                bytes[valid..].fill(0);
                let words = self.words_at(page << self.page_bits);
                for (chunk, word) in bytes[..valid].chunks_exact_mut(8).zip(words) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
                }
                tier.file
                    .write_page(page, &bytes, valid as u32)
                    .map_err(|error| format!("writing log page {page}: {error}"))?;
                written += valid as u64;
            }
            tier.file
                .sync()
                .map_err(|error| format!("syncing the log's page file: {error}"))?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                tier.flushed_until_page
                    .fetch_max(end_page, Ordering::AcqRel);
                Ok(written)
            }
            Err(failure) => {
                *tier.failure.lock().expect("tier lock") = Some(failure.clone());
                Err(failure)
            }
        }
    }

    /// The page file (recovery checks and discards pages in it; `checkpoint/incremental.rs`).
    pub(crate) fn page_file(&self) -> &PageFile {
        &self.tier().file
    }

    /// A failure of the page file while trying to `operation` (a verb phrase naming what,
    /// ending in "in": the page file's directory follows) as the engine's I/O error.
    pub(crate) fn page_file_error(
        &self,
        operation: &str,
        error: impl std::fmt::Display,
    ) -> crate::EngineError {
        crate::EngineError::io(
            operation,
            self.page_file().dir(),
            std::io::Error::other(error.to_string()),
        )
    }

    /// Starts a fresh log (nothing written yet, no thread in it) at page `page` with the begin
    /// address `begin`: the pages from `begin`'s up to `page` are in the page file. Recovery
    /// from an incremental checkpoint calls it before anything is written.
    pub(crate) fn resume_at(&self, begin: u64, page: u64) {
        assert_eq!(
            self.tail_address(),
            1u64 << self.page_bits,
            "resume_at is for a fresh log"
        );
        let address = page << self.page_bits;
        assert!(
            begin <= address,
            "the begin address lies above the new tail"
        );
        if page <= 1 {
            return;
        }
        self.tier()
            .flushed_until_page
            .store(page, Ordering::Release);
        self.begin_address.store(begin, Ordering::SeqCst);
        self.read_only_address.store(address, Ordering::SeqCst);
        self.head_address.store(address, Ordering::SeqCst);
        // Page 1 first: its ring slot may be the one the new page takes.
        self.free_pages_below(address);
        self.ensure_page(page, true)
            .expect("a fresh log has room for its first page");
        self.tail.store(page << 32, Ordering::SeqCst);
    }

    /// Pages per segment of the page file: it frees disk space by whole segments.
    pub(crate) fn tier_pages_per_segment(&self) -> u64 {
        u64::from(self.tier().file.config().pages_per_segment)
    }

    /// Deletes the page file's segments that lie wholly below `page` (their pages are below the
    /// begin address, and no reader can be in them: the caller bumped the epoch after moving
    /// the begin). A failure fails the page file, and so every later eviction.
    pub(crate) fn remove_cold_pages_before(&self, page: u64) -> Result<usize, String> {
        debug_assert!(page <= self.begin_address() >> self.page_bits);
        self.tier()
            .file
            .remove_before(page)
            .map_err(|error| format!("removing compacted page file segments: {error}"))
    }

    /// The eviction lock of the tier (one evictor at a time, `tier.rs`).
    pub(crate) fn eviction_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.tier()
            .eviction
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The first eviction failure, if one happened.
    pub(crate) fn tier_failure(&self) -> Option<String> {
        self.tier
            .as_ref()
            .and_then(|tier| tier.failure.lock().expect("tier lock").clone())
    }

    /// Moves the head address to `address` (a page boundary no higher than the read-only
    /// address, whose pages below are flushed). The caller then frees the pages below it after an
    /// epoch bump ([`HybridLog::free_pages_below`]).
    pub(crate) fn set_head(&self, address: u64) {
        debug_assert!(address.is_multiple_of(self.page_bytes() as u64));
        assert!(
            address <= self.read_only_address(),
            "the head ({address}) may not pass the read-only address"
        );
        let flushed = self
            .tier()
            .flushed_until_page
            .load(Ordering::Acquire)
            .max(1);
        assert!(
            address >> self.page_bits <= flushed,
            "the head ({address}) may not pass the flushed pages (below page {flushed})"
        );
        self.head_address.fetch_max(address, Ordering::SeqCst);
    }
}

fn read_or_panic(file: &PageFile, page: u64, offset: u64, bytes: &mut [u8]) {
    if let Err(error) = file.read(page, offset as u32, bytes) {
        panic!("reading log page {page} at offset {offset} from the storage tier: {error}");
    }
}
