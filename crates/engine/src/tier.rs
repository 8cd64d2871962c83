//! Eviction: how a store with a storage tier (`StoreConfig::storage_tier`) keeps its log within
//! `log_memory_bytes` — the oldest in-memory pages are written to the page file in `dir/log` and
//! freed, and the index keeps pointing at them (`log::cold` serves their reads).
//!
//! One chunk of eviction. It does not take the maintenance lock: it runs while checkpoints do
//! (otherwise writers at the budget would wait for a whole checkpoint), and it frees pages under
//! epoch protection alone — every thread that reads log pages in a tiered store is protected:
//! sessions, and the checkpoint scanners and live-byte recounts (`shared::ThreadEpoch`).
//! Eviction moves no record and changes no record's bytes, so nothing a checkpoint reads changes
//! meaning. What does move records in a tiered store, compaction of the page file
//! (`compaction::cold`), holds the maintenance lock as in-memory compaction does; PURGE does not
//! run in a tiered store (no `rollback_ready`).
//! 1. `until` = the head plus a chunk of pages, never past the tail's page (the page being
//!    filled stays in memory). Move the read-only address to `until` and bump the epoch: once the
//!    bump completes, no in-place writer is left in `[head, until)` and every record there is
//!    completely written (allocation and writing happen in one protected operation).
//! 2. Write the pages to the page file and sync it (data, then checksums, then the directory:
//!    the page file's order).
//! 3. Move the head to `until`; bump the epoch and wait, so that every thread that could have
//!    read the old head and followed a pointer into those pages has left its operation; free
//!    the pages.
//!
//! Crash argument: eviction only adds pages above every page a published incremental checkpoint
//! names, or extends the last, partly written one (`checkpoint/incremental.rs`; the page file never changes
//! the bytes below a trusted entry's valid bytes), and recovery discards the pages above the recovered checkpoint's fold-over point (or
//! all of them for any other kind of checkpoint). A crash between any two steps loses only pages
//! that no recovered state refers to. The only
//! step that can fail is 2 (a full disk, a failed fsync): the head then stays where it was, the
//! pages stay in memory, and the failure is kept: writers held at the budget fail with
//! `OutOfMemory` naming it, instead of waiting forever.
//!
//! Trigger (the loop is `compaction::cold::run`, the compaction thread of a tiered store): a
//! chunk is an eighth of the writers' page budget; eviction starts when the pages in use come
//! within a chunk of that budget, or when a writer waits for memory.

use std::sync::Arc;

use prefixkv_storage::pagefile::{format, PageFile, PageFileConfig};

use crate::log::Tier;
use crate::shared::Shared;
use crate::{EngineError, StoreConfig};

/// Bytes per page-file segment the store aims for at most (at least one page per segment).
/// Compaction frees disk space by whole segments (`compaction::cold`), so a segment is also at
/// most a quarter of the memory budget: a small store's file shrinks in small steps too.
const MAX_SEGMENT_BYTES: u64 = 64 << 20;

/// Opens the page file of a tiered store in `config.dir/log` as an earlier run left it: an
/// incremental checkpoint's pages are there (recovery then discards what that checkpoint does not
/// name, or everything: [`clear`]).
pub(crate) fn open(config: &StoreConfig) -> Result<Tier, EngineError> {
    let dir = config.dir.join("log");
    let disk = &config.disk;
    let io = |operation: &str, error: std::io::Error| EngineError::io(operation, &dir, error);
    let page_bytes = config.log_page_bytes as u64;
    // Segments of files already there keep their size (the memory budget may have changed since
    // they were made); new files get a quarter of the budget, at most MAX_SEGMENT_BYTES.
    let pages_per_segment = match existing_geometry(config, &dir)? {
        Some(header) if u64::from(header.page_bytes) != page_bytes => {
            return Err(EngineError::InvalidArgument(format!(
                "the storage tier's page file in {} was written with {}-byte log pages and the                  store is configured with {page_bytes}: start with the page size it was written                  with",
                dir.display(),
                header.page_bytes
            )))
        }
        Some(header) => header.pages_per_segment,
        None => (MAX_SEGMENT_BYTES.min(config.log_memory_bytes / 4) / page_bytes).max(1) as u32,
    };
    let file_config = PageFileConfig {
        page_bytes: config.log_page_bytes as u32,
        pages_per_segment,
        direct_io: config.checkpoint_direct_io,
    };
    let (file, _opened) = PageFile::open(Arc::clone(disk), &dir, file_config).map_err(|error| {
        io(
            "open the storage tier's page file in",
            std::io::Error::other(error.to_string()),
        )
    })?;
    Ok(Tier::new(file))
}

/// The geometry recorded by the first sums file in `dir` whose header decodes, if any.
fn existing_geometry(
    config: &StoreConfig,
    dir: &std::path::Path,
) -> Result<Option<format::SumsHeader>, EngineError> {
    let disk = &config.disk;
    let names = match disk.list(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(EngineError::io(
                "list the storage tier's directory",
                dir,
                error,
            ))
        }
    };
    for entry in names {
        if format::SUMS_NAME.parse(&entry.name).is_none() {
            continue;
        }
        let path = dir.join(&entry.name);
        let Ok(file) = disk.open(&path, prefixkv_storage::OpenMode::Read) else {
            continue;
        };
        let mut bytes = [0u8; format::SUMS_HEADER_BYTES];
        if file.read_exact_at(&mut bytes, 0).is_ok() {
            if let Ok(header) = format::decode_header(&bytes) {
                return Ok(Some(header));
            }
        }
    }
    Ok(None)
}

/// Removes every page of the page file: recovery from anything but an incremental checkpoint
/// (or a fresh start) rebuilds the log in memory, and nothing durable depends on old pages.
pub(crate) fn clear(shared: &Shared) -> Result<(), EngineError> {
    let log = &shared.log;
    log.page_file()
        .discard_from(0)
        .map(|_| ())
        .map_err(|error| {
            log.page_file_error("remove an earlier run's pages from the page file in", error)
        })
}

/// The page-file half of an incremental checkpoint (`checkpoint/incremental.rs`, step 3): writes
/// the log below `address` (the fold-over point: below the read-only address after an epoch
/// bump) that is not in the page file yet, the last page partly, and syncs the file. Holds the
/// eviction lock, so the flushed mark moves only here meanwhile. Returns the bytes written.
pub(crate) fn fold_over(shared: &Shared, address: u64) -> Result<u64, String> {
    let _evicting = shared.log.eviction_lock();
    shared.log.flush_until(address)
}

/// Pages one eviction chunk takes.
pub(crate) fn chunk_pages(shared: &Shared) -> u64 {
    (shared.log.writer_page_limit() / 8).max(1)
}

/// Evicts one chunk of at most `chunk` pages (see the module comment). `Ok(false)`: nothing was
/// evicted (only the tail's page is in memory).
pub(crate) fn evict_once(shared: &Arc<Shared>, chunk: u64) -> Result<bool, String> {
    // One evictor at a time (the tier thread, or recovery before it starts): the steps below
    // assume the head moves only here.
    let _evicting = shared.log.eviction_lock();
    let log = &shared.log;
    let page_bytes = log.page_bytes() as u64;
    let head = log.head_address();
    let tail_page_start = log.tail_address() & !(page_bytes - 1);
    let until = (head + chunk * page_bytes).min(tail_page_start);
    if until <= head {
        return Ok(false);
    }
    // 1. No in-place writer remains below `until`, and every record there is complete.
    log.shift_read_only(until);
    shared.bump_and_wait(None);
    // 2. On disk and synced.
    log.flush_until(until)?;
    // 3. Readers go to the file from now on; the pages are freed once nobody can be in them.
    log.set_head(until);
    shared.bump_and_wait(None);
    log.free_pages_below(until);
    shared.memory.notify();
    Ok(true)
}
