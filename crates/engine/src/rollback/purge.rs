//! PURGE: neutralise and unlink the records of a rollback's invalid versions, in the background.
//!
//! Runs on the purge thread once every protected session adopted THROW, so no operation of the
//! old world-line is in flight and no new record of an invalid version can appear. It holds the
//! maintenance lock (compaction and checkpoints wait), so the begin address is fixed and no page
//! is freed while it reads the log without epoch protection, as checkpoint scanners do.
//!
//! 1. Log pass, in address order over `[begin, tail)`: every record whose version is invalid gets
//!    `FLAG_INVALID` — in chains or not (a tombstone compaction unlinked, a stable copy), so that
//!    log-order readers (fold-over and snapshot images, compaction) skip it without the range.
//! 2. Index pass: an entry whose head is flagged invalid is CASed to the first valid record below
//!    it; a valid record whose previous link leads to flagged records is re-linked past them (a CAS
//!    on its header word, which keeps its flags). Links only move *down* the log, so chains keep
//!    pointing down (the invariant chain walks that stop at the begin address rely on). A walker
//!    that read the old link walks through the flagged records, which stay in memory, and skips
//!    them: readers are correct before, during and after this pass.
//! 3. An epoch bump, then the range is forgotten: from then on every invalid record carries the
//!    flag, which every walker checks anyway.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::InvalidVersions;
use crate::checkpoint::bump_and_wait;
use crate::log::{HybridLog, FLAG_INVALID};
use crate::store::Shared;

/// Buckets per index chunk.
const CHUNK: usize = 4096;

/// Purges `invalid`; returns (records flagged, links repaired).
pub(super) fn run(shared: &Arc<Shared>, invalid: InvalidVersions) -> (u64, u64) {
    let maintenance = shared.maintenance.lock();
    let log = &shared.log;
    // Every record below `tail` is completely written once the bump's action ran.
    let tail = log.tail_address();
    bump_and_wait(shared, None);
    let begin = log.begin_address();
    let mut flagged = 0;
    log.scan(begin, tail, |record| {
        if record.word0() & FLAG_INVALID == 0 && invalid.contains(record.version()) {
            record.set_flags(FLAG_INVALID);
            flagged += 1;
        }
        true
    });
    let mut repaired = 0;
    let buckets = shared.index.bucket_count();
    let mut start = 0;
    while start < buckets {
        let end = (start + CHUNK).min(buckets);
        shared.index.for_each_slot(start..end, |mut entry| {
            // Re-point the entry past invalid heads (a new write may move it meanwhile: retry).
            loop {
                let head = entry.address();
                let first = first_valid(log, head, begin);
                if first == head {
                    break;
                }
                match entry.compare_exchange(first) {
                    Ok(()) => {
                        repaired += 1;
                        break;
                    }
                    Err(current) if entry.retarget(current) => {}
                    Err(_) => return,
                }
            }
            // Re-link valid records past the invalid ones behind them.
            let mut address = entry.address();
            while address >= begin && address != 0 {
                let record = log.record(address);
                let next = record.previous();
                let target = first_valid(log, next, begin);
                if target != next && record.replace_previous(next, target) {
                    repaired += 1;
                }
                address = target;
            }
        });
        start = end;
    }
    // No walker still relies on the range: every invalid record is flagged (step 1).
    bump_and_wait(shared, None);
    shared.rollback.invalid.store(0, Ordering::SeqCst);
    drop(maintenance);
    // Compaction was excluded meanwhile.
    shared.request_compaction();
    (flagged, repaired)
}

/// The first record at or below `address` that is not flagged invalid (or an address below
/// `begin`, or 0).
fn first_valid(log: &HybridLog, mut address: u64, begin: u64) -> u64 {
    while address >= begin && address != 0 {
        let record = log.record(address);
        let word0 = record.word0();
        if word0 & FLAG_INVALID == 0 {
            break;
        }
        address = word0 & crate::log::ADDRESS_MASK;
    }
    address
}
