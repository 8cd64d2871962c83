//! PURGE: neutralise and unlink the records of a rollback's invalid versions, in the background.
//!
//! Runs on the purge thread once every protected session adopted THROW, so no operation of the
//! old world-line is in flight and no new record of an invalid version can appear. The caller
//! holds the maintenance lock (compaction and checkpoints wait), so the begin address is fixed
//! and no page is freed while it reads the log without epoch protection, as checkpoint scanners
//! do.
//!
//! 0. Where: no record of an invalid version `(after, through]` lies below `bound`, the log tail
//!    of the moment the store first let a session run a version above `after`
//!    (`RollbackState::note_allowed` has the argument). So both passes work on
//!    `[max(begin, bound), tail)` only: after a long history a rollback to a recent checkpoint
//!    reads the recent part of the log, not all of it. Debug builds check the claim: a scan of
//!    `[begin, bound)` finds no record of an invalid version.
//! 1. Log pass, in address order over `[from, tail)`: every record whose version is invalid gets
//!    `FLAG_INVALID` — in chains or not (a tombstone compaction unlinked, a stable copy), so that
//!    log-order readers (fold-over and snapshot images, compaction) skip it without the range.
//! 2. Index pass: an entry whose head is flagged invalid is CASed to the first valid record below
//!    it; a valid record whose previous link leads to flagged records is re-linked past them (a CAS
//!    on its header word, which keeps its flags). Links only move *down* the log, so chains keep
//!    pointing down (the invariant chain walks that stop at the begin address rely on). A walker
//!    that read the old link walks through the flagged records, which stay in memory, and skips
//!    them: readers are correct before, during and after this pass. Chains point down the log,
//!    so a chain is walked only while it is at or above `from`: an entry whose head is below it
//!    costs one load. The heads of a chunk's entries are loaded ahead (each is a cache miss; this
//!    pass, not the log pass, is most of PURGE's time: `PurgeReport::index_pass`).
//! 3. An epoch bump; the caller then forgets the range: from then on every invalid record carries
//!    the flag, which every walker checks anyway.
//!
//! A later rollback may take over while this runs (nested failures): `superseded` then turns
//! true, and the pass stops at its next check (a log page, an index chunk) without finishing; the
//! flags and links it changed are correct for the later rollback too, whose range contains this
//! one's and whose bound is not above this one's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::log::{HybridLog, FLAG_INVALID};
use crate::shared::Shared;
use crate::state::InvalidVersions;

/// Buckets per index chunk.
const CHUNK: usize = 4096;

/// What one PURGE did.
pub(super) struct Counts {
    pub(super) flagged: u64,
    pub(super) repaired: u64,
    /// The log pass's range and the records it visited.
    pub(super) from: u64,
    pub(super) until: u64,
    pub(super) scanned: u64,
    pub(super) log_pass: Duration,
    pub(super) index_pass: Duration,
}

/// How many chain heads ahead the index pass prefetches (as the checkpoint's index scan does).
const PREFETCH_AHEAD: usize = 16;

/// Records between checks of `superseded` in the log pass.
const CHECK_EVERY: u64 = 4096;

/// Purges `invalid` from `max(begin, bound)`; `None` if `superseded` turned true first. Caller
/// holds the maintenance lock. `check_below`: in debug builds, verify the bound's claim (off only
/// under the test-only sabotage of the bound).
pub(super) fn run(
    shared: &Arc<Shared>,
    invalid: InvalidVersions,
    bound: u64,
    check_below: bool,
    superseded: &dyn Fn() -> bool,
) -> Option<Counts> {
    let log = &shared.log;
    // Every record below `tail` is completely written once the bump's action ran.
    let tail = log.tail_address();
    shared.bump_and_wait(None);
    let begin = log.begin_address();
    let from = bound.clamp(begin, tail.max(begin));
    if cfg!(debug_assertions) && check_below && from > begin {
        log.scan(begin, from, |record| {
            assert!(
                !invalid.contains(record.version()),
                "PURGE bound {from:#x} unsound: record at {:#x} has version {} of {invalid:?}",
                record.address,
                record.version()
            );
            true
        });
    }
    let log_started = Instant::now();
    let mut flagged = 0;
    let mut scanned = 0;
    let mut stopped = false;
    log.scan(from, tail, |record| {
        scanned += 1;
        if scanned % CHECK_EVERY == 0 && superseded() {
            stopped = true;
            return false;
        }
        if record.word0() & FLAG_INVALID == 0 && invalid.contains(record.version()) {
            record.set_flags(FLAG_INVALID);
            flagged += 1;
        }
        true
    });
    if stopped {
        return None;
    }
    let log_pass = log_started.elapsed();
    while shared.rollback.hold_purge() {
        if superseded() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let index_started = Instant::now();
    let mut repaired = 0;
    let buckets = shared.index.bucket_count();
    let mut start = 0;
    // The entries of a chunk whose chains reach `from`: their heads are loaded ahead (each is a
    // cache miss: records lie in write order, not in bucket order).
    let mut candidates = Vec::new();
    while start < buckets {
        if superseded() {
            return None;
        }
        let end = (start + CHUNK).min(buckets);
        candidates.clear();
        shared.index.for_each_slot(start..end, |entry| {
            // A chain lying wholly below `from` holds no record of the range.
            if entry.address() >= from {
                candidates.push(entry);
            }
        });
        'entries: for position in 0..candidates.len() {
            if let Some(ahead) = candidates.get(position + PREFETCH_AHEAD) {
                log.prefetch(ahead.address());
            }
            let entry = &mut candidates[position];
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
                    // The slot was reused for another key, or reset: nothing of ours to repair.
                    Err(_) => continue 'entries,
                }
            }
            // Re-link valid records past the invalid ones behind them, down to `from`.
            let mut address = entry.address();
            while address >= from && address != 0 {
                let record = log.record(address);
                let next = record.previous();
                let target = first_valid(log, next, begin);
                if target != next && record.replace_previous(next, target) {
                    repaired += 1;
                }
                address = target;
            }
        }
        start = end;
    }
    let index_pass = index_started.elapsed();
    // No walker still relies on the range once this returns: every invalid record is flagged.
    shared.bump_and_wait(None);
    Some(Counts {
        flagged,
        repaired,
        from,
        until: tail,
        scanned,
        log_pass,
        index_pass,
    })
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
