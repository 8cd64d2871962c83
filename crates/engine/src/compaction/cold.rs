//! The compaction thread of a tiered store: eviction into the page file (`tier`), and compaction
//! of the page file, which otherwise grows with every byte written.
//!
//! Compaction of the page file works on its oldest segment (the file frees space by whole
//! segments), `[begin, until)` with `until` the segment's end, only once the head passed it (every
//! page there left memory):
//! 1. Under the maintenance lock (checkpoint scanners and live-byte recounts assume a begin
//!    address that does not move; a checkpoint that waits for the lock gets it before the next
//!    segment) and epoch protection, scan the segment's pages from the file. A record that is
//!    its key's newest is copied to the tail with its version, capacity and access word
//!    (`shared::relocate::copy_if_live`, as in-memory compaction: a CAS of the index entry, relinking when other
//!    keys of the chain moved the head). "Newest" is decided under the key's tier
//!    stripe (`Shared::tier_stripe`): every writer that supersedes a record below the read-only
//!    address holds it while it checks that record and publishes its own, so no newer version
//!    can appear between the check and the copy. A record flagged sealed on disk is superseded
//!    for sure; an unflagged one may be too (a seal set after its page was flushed is not on
//!    disk): the index decides. Flags INVALID and STABLE are set before a page is flushed
//!    (within the operation that wrote the record, which eviction's epoch bump waits out).
//! 2. Move the begin address to `until`, bump the epoch and wait: a chain walk stops at a begin
//!    it read before its chain head (`shared::Located`), so once the bump completes nobody walks
//!    into the segment any more.
//! 3. Delete the segments wholly below `until`.
//!
//! Crash argument: nothing durable depends on the page file yet (recovery loads the newest
//! checkpoint and starts a new page file), and the copies are ordinary records at the tail.
//!
//! Trigger and write amplification: the log's dead bytes (its extent from begin to tail minus
//! the live record bytes) exceed half of that extent, and a whole segment lies below the head.
//! Copies use the compaction reserve of the page budget; a segment whose copies do not fit is
//! left where it is for now (eviction makes room, the next pass finds the copied records
//! superseded). After a segment that reclaimed under [`super::MIN_RECLAIMED_SHARE`] of what it
//! scanned (mostly live data at the log's old end), compaction waits until the log grew by a
//! segment more: it does not copy the same live records around for nothing.

use std::sync::Arc;
use std::time::Duration;

use super::{Chunk, MIN_RECLAIMED_SHARE};
use crate::shared::relocate::{copy_if_live, Copied};
use crate::shared::Shared;

/// Records the page-file compaction copies between epoch refreshes.
const REFRESH_RECORDS: u32 = 256;

/// The compaction thread's loop in a tiered store: evict while memory is short, then compact
/// the page file while it is mostly garbage.
pub(crate) fn run(shared: &Arc<Shared>) {
    let protection = shared.thread_epoch();
    let mut reported = false;
    let mut compaction_failed = false;
    // After a segment that reclaimed little: compact again only above this log extent.
    let mut quiet_until_extent = 0u64;
    loop {
        shared
            .compaction
            .wait_for_request(Duration::from_millis(10));
        if shared.compaction.is_shut_down() {
            break;
        }
        let mut writers_waiting = shared.compaction.take_memory_wanted();
        loop {
            let chunk = crate::tier::chunk_pages(shared);
            let mut evicted = false;
            while !shared.compaction.is_shut_down()
                && (writers_waiting
                    || shared.log.pages_in_use() + chunk > shared.log.writer_page_limit())
            {
                writers_waiting = false;
                match crate::tier::evict_once(shared, chunk) {
                    Ok(true) => evicted = true,
                    Ok(false) => break,
                    Err(failure) => {
                        if !reported {
                            tracing::error!(%failure, "the storage tier cannot evict; writes will fail at the memory budget");
                            reported = true;
                        }
                        break;
                    }
                }
            }
            if evicted {
                shared.memory.notify();
            }
            if shared.compaction.is_shut_down()
                || compaction_failed
                || extent(shared) <= quiet_until_extent
                || !garbage_wanted(shared)
            {
                break;
            }
            match compact_segment(shared, &protection) {
                Ok(Some(chunk)) => {
                    quiet_until_extent = if chunk.reclaimed_share() < MIN_RECLAIMED_SHARE {
                        extent(shared) + segment_bytes(shared)
                    } else {
                        0
                    };
                }
                // A checkpoint holds or waits for the maintenance lock, or the copies ran out of
                // reserve: evict, and try again at the next wake-up.
                Ok(None) => break,
                Err(failure) => {
                    tracing::error!(%failure, "the storage tier's page file cannot be compacted; it keeps growing");
                    compaction_failed = true;
                    break;
                }
            }
        }
        shared.memory.notify();
    }
}

/// The log's extent from its begin to its tail, in bytes.
fn extent(shared: &Shared) -> u64 {
    shared.log.tail_address() - shared.log.begin_address()
}

fn segment_bytes(shared: &Shared) -> u64 {
    shared.log.tier_pages_per_segment() * shared.log.page_bytes() as u64
}

/// Whether the page file is worth compacting (see the module docs): more than half of the log's
/// extent is dead, and its oldest segment lies wholly below the head.
fn garbage_wanted(shared: &Shared) -> bool {
    if oldest_segment_end(shared).is_none() {
        return false;
    }
    let extent = extent(shared);
    extent.saturating_sub(shared.live_record_bytes()) > extent / 2
}

/// The end address of the segment holding the begin address, if the head is past it.
fn oldest_segment_end(shared: &Shared) -> Option<u64> {
    let log = &shared.log;
    let page_bytes = log.page_bytes() as u64;
    let per = log.tier_pages_per_segment();
    let begin_page = log.begin_address() / page_bytes;
    let end = (begin_page - begin_page % per + per) * page_bytes;
    (end <= log.head_address()).then_some(end)
}

/// Compacts the oldest segment of the page file (see the module docs). `Ok(None)`: nothing was
/// freed (a checkpoint holds or waits for the maintenance lock, no whole segment is below the
/// head, or the copies ran out of reserve).
fn compact_segment(
    shared: &Arc<Shared>,
    protection: &crate::shared::ThreadEpoch<'_>,
) -> Result<Option<Chunk>, String> {
    let Some(_maintenance) = shared.compaction.try_lock_for_chunk() else {
        return Ok(None);
    };
    let log = &shared.log;
    let Some(until) = oldest_segment_end(shared) else {
        return Ok(None);
    };
    let begin = log.begin_address();
    // A tiered store has no rollback (refused with `rollback_ready`): nothing is invalid.
    let invalid = shared.rollback.invalid();
    let mut chunk = Chunk {
        scanned_bytes: 0,
        copied_bytes: 0,
    };
    let mut out_of_reserve = false;
    let mut visited = 0u32;
    let mut key = Vec::new();
    let mut value = Vec::new();
    protection.protect();
    log.scan(begin, until, |record| {
        let size = record.size_bytes() as u64;
        chunk.scanned_bytes += size;
        match copy_if_live(
            shared,
            record,
            begin,
            invalid,
            (&mut key, &mut value),
            true,
            true,
        ) {
            Copied::Yes => chunk.copied_bytes += size,
            Copied::No | Copied::Keep => {}
            Copied::OutOfReserve => out_of_reserve = true,
        }
        visited += 1;
        if visited.is_multiple_of(REFRESH_RECORDS) {
            // Done with `record`.
            protection.protect();
        }
        !out_of_reserve
    });
    protection.suspend();
    if out_of_reserve {
        return Ok(None);
    }
    // 2. Nobody walks below `until` once this bump completes.
    log.shift_begin(until);
    shared.bump_and_wait(None);
    // 3. Free the disk space, except what a retained incremental checkpoint points into (its
    //    segments go once a newer checkpoint with a higher begin replaced it).
    let keep_from = shared.durable_tier.lock().keep_from_page();
    log.remove_cold_pages_before((until / log.page_bytes() as u64).min(keep_from))?;
    Ok(Some(chunk))
}
