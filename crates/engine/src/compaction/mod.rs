//! Log compaction: keeps the in-memory log within `log_memory_bytes` under sustained updates.
//!
//! Choice (documented in `docs/engine.md`): when more than half of the page budget is in use, the
//! compaction thread takes the oldest pages, makes them read-only (epoch bump: no in-place writer is
//! left there), copies every record that is still the newest of its key to the tail (under the
//! record's lock, CASing the index entry; the old record is sealed), then moves the begin address
//! past those pages and frees them in an epoch action, once no session can hold a pointer into them.
//! Superseded versions, invalid records and cpr-copy stable copies are simply dropped.
//!
//! With `rollback_ready` (see `rollback` module) compaction also keeps what a rollback may need:
//! a record that is not its key's newest is dropped only if the next newer record of its key has
//! a version `<=` max(its own version, floor) — then it is nobody's newest at any version a
//! rollback may return to (`RollbackState::compaction_floor`: the caller's floor, at least the
//! oldest checkpoint on disk). Such a record cannot be moved (a copy at the tail would sit above
//! its newer versions in the chain), so a chunk that meets one ends at the page holding it; the
//! pages before it are freed. Records of discarded versions (flagged, or in the invalid range of
//! a rollback in flight) are dropped and never copied, and a valid record sealed by a discarded
//! one is still copied when it is its key's newest (the seal is stale).
//!
//! Invariants: compaction never runs during a checkpoint (the `maintenance` lock), so a checkpoint
//! always sees a fixed begin address; it starts no chunk while a checkpoint or PURGE waits for
//! that lock (`CompactionState::lock_maintenance`), so it cannot hold them off chunk after chunk; copies use the compaction reserve of the page budget, so they
//! can always make progress while user writes are held at the writer limit; a key's newest record
//! is always at or above the begin address, so chain walks may stop there — which also needs every
//! chain to point down the log (each record's previous address below its own; see
//! `HybridLog::relink_or_rewrite`), or a walk that stops below the begin would skip live records.

mod cold;

use std::sync::Arc;
use std::time::Duration;

use crate::index::KeyHash;
use crate::log::{Record, ADDRESS_MASK, FLAG_INVALID, FLAG_STABLE};
use crate::shared::relocate::{copy_if_live, copy_locked, Copied};
use crate::shared::Shared;
use crate::state::InvalidVersions;
use crate::MIN_PAGES_FOR_DEAD_TRIGGER;

/// A chunk that reclaimed less than this share of the bytes it scanned was mostly live data:
/// compacting again at once would copy the same live records around for nothing.
const MIN_RECLAIMED_SHARE: f64 = 0.25;

/// The compaction thread's loop.
///
/// When to compact: when more than half of the page budget is in use, or (with
/// `StoreConfig::compact_dead_fraction`) when the dead bytes exceed that fraction of the pages
/// in use ([`garbage_wanted`]); but not while the last
/// chunk found the log mostly live (it reclaimed under [`MIN_RECLAIMED_SHARE`] of what it
/// scanned): then compaction waits until the log grew by an eighth of the budget more, or until a
/// writer is held at the limit. Without that, a store whose live data sits near half its budget
/// compacts without pause, copying live records forward, and its in-place writes to records
/// being compacted turn into copies (measured: YCSB-A at 1M keys ran at a third of its speed, and
/// faster during checkpoints, which exclude compaction).
pub(crate) fn run(shared: &Arc<Shared>) {
    if shared.log.is_tiered() {
        // Old pages go to the page file instead, which is compacted in turn.
        return cold::run(shared);
    }
    let Some(slot) = shared.epoch.acquire_slot() else {
        return;
    };
    // While the log is mostly live, compact again only above this many pages.
    let mut quiet_until_pages = 0;
    // The same for the garbage trigger: after a chunk that reclaimed little (the dead bytes are
    // out of compaction's reach: records a rollback may need, the tail page), garbage starts
    // compaction again only once the log grew past this many pages.
    let mut garbage_quiet_until_pages = 0;
    loop {
        shared
            .compaction
            .wait_for_request(Duration::from_millis(50));
        if shared.compaction.is_shut_down() {
            break;
        }
        let trigger = shared.log.total_page_limit() / 2;
        if shared.log.pages_in_use() <= trigger {
            quiet_until_pages = 0;
        }
        // Writers held at the limit set this again on every failed allocation.
        let writers_waiting = shared.compaction.take_memory_wanted();
        loop {
            let in_use = shared.log.pages_in_use();
            let over_budget = in_use > trigger && (in_use > quiet_until_pages || writers_waiting);
            let garbage = !over_budget
                && in_use > garbage_quiet_until_pages
                && garbage_wanted(shared, in_use);
            if shared.compaction.is_shut_down() || !(over_budget || garbage) {
                break;
            }
            let outcome = compact_once(shared, slot);
            if garbage {
                garbage_quiet_until_pages = match &outcome {
                    Some(chunk) if chunk.reclaimed_share() >= MIN_RECLAIMED_SHARE => 0,
                    _ => in_use + (in_use / 8).max(1),
                };
            }
            let Some(outcome) = outcome else {
                break;
            };
            if outcome.reclaimed_share() < MIN_RECLAIMED_SHARE {
                let margin = (shared.log.total_page_limit() / 8).max(1);
                quiet_until_pages = shared.log.pages_in_use() + margin;
                if !writers_waiting {
                    break;
                }
            }
        }
        shared.memory.notify();
    }
    shared.epoch.release_slot(slot);
}

/// Whether the garbage trigger holds (`StoreConfig::compact_dead_fraction`): at least
/// [`MIN_PAGES_FOR_DEAD_TRIGGER`] pages in use, and the dead bytes (pages in use minus live
/// record bytes) above the configured fraction of them.
fn garbage_wanted(shared: &Shared, in_use_pages: u64) -> bool {
    let Some(fraction) = shared.config.compact_dead_fraction else {
        return false;
    };
    if in_use_pages < MIN_PAGES_FOR_DEAD_TRIGGER {
        return false;
    }
    let in_use_bytes = in_use_pages * shared.log.page_bytes() as u64;
    let dead = in_use_bytes.saturating_sub(shared.live_record_bytes());
    dead as f64 > fraction * in_use_bytes as f64
}

/// What one chunk of compaction did.
struct Chunk {
    /// Bytes of records scanned.
    scanned_bytes: u64,
    /// Bytes of live records copied forward.
    copied_bytes: u64,
}

impl Chunk {
    fn reclaimed_share(&self) -> f64 {
        if self.scanned_bytes == 0 {
            return 1.0;
        }
        1.0 - self.copied_bytes as f64 / self.scanned_bytes as f64
    }
}

/// Compacts one chunk of the oldest pages. Returns what it did, or `None` if it freed nothing
/// (a checkpoint holds the maintenance lock, nothing to compact, or the reserve ran out).
fn compact_once(shared: &Arc<Shared>, slot: usize) -> Option<Chunk> {
    // A checkpoint or PURGE waits for the lock: let it have it (the next request resumes).
    let _maintenance = shared.compaction.try_lock_for_chunk()?;
    let log = &shared.log;
    let page_bytes = log.page_bytes() as u64;
    let begin = log.begin_address();
    let tail_page_start = log.tail_address() & !(page_bytes - 1);
    let reserve_pages = (log.total_page_limit() - log.writer_page_limit()).max(1);
    let chunk_pages = (log.pages_in_use() / 4).clamp(1, reserve_pages / 2 + 1);
    let until = (begin + chunk_pages * page_bytes).min(tail_page_start);
    if until <= begin {
        return None;
    }
    // 1. No in-place writer may touch [begin, until) once this bump completes; every record below
    //    `until` is also completely written by then.
    log.shift_read_only(until);
    shared.bump_and_wait(None);
    // 2. Copy live records forward.
    shared.epoch.protect(slot);
    let rollback = shared.config.rollback_ready.then(|| RollbackRules {
        invalid: shared.rollback.invalid(),
        floor: shared
            .rollback
            .compaction_floor(shared.state.load().version),
    });
    let invalid = shared.rollback.invalid();
    let mut keep_from = None;
    let mut ok = true;
    let mut visited = 0u32;
    let mut key = Vec::new();
    let mut value = Vec::new();
    let mut chunk = Chunk {
        scanned_bytes: 0,
        copied_bytes: 0,
    };
    log.scan(begin, until, |record| {
        visited += 1;
        if visited.is_multiple_of(256) {
            shared.epoch.protect(slot);
        }
        let size = record.size_bytes() as u64;
        chunk.scanned_bytes += size;
        let copied = match &rollback {
            None => copy_if_live(
                shared,
                record,
                begin,
                invalid,
                (&mut key, &mut value),
                false,
                true,
            ),
            Some(rules) => {
                copy_if_live_rollback(shared, record, begin, rules, &mut key, &mut value)
            }
        };
        match copied {
            Copied::Yes => chunk.copied_bytes += size,
            Copied::No => {}
            Copied::OutOfReserve => ok = false,
            Copied::Keep => {
                keep_from = Some(record.address);
                return false;
            }
        }
        ok
    });
    shared.epoch.suspend(slot);
    if !ok {
        return None;
    }
    // A record a rollback may need: free only the pages before it.
    let until = match keep_from {
        Some(address) => address & !(page_bytes - 1),
        None => until,
    };
    if until <= begin {
        return None;
    }
    // 3. Retire the pages: nobody starting after the bump can reach them; wait out the rest.
    log.shift_begin(until);
    shared.bump_and_wait(None);
    log.free_pages_below(until);
    shared.memory.notify();
    Some(chunk)
}

/// What compaction keeps for rollbacks (`rollback_ready` only).
struct RollbackRules {
    invalid: InvalidVersions,
    floor: u64,
}

/// Where a record stands in its key's chain.
enum Standing {
    /// It is the key's newest valid record.
    Newest,
    /// A newer valid record of its key exists; the next newer one has this version.
    Superseded { next_version: u64 },
    /// The chain does not reach it (unlinked): nobody can see it.
    Unreachable,
}

/// Walks the chain from `head` down to `record`, noting the version of the last valid record of
/// its key passed on the way (the next newer version: chains hold a key's records newest first).
fn standing(
    shared: &Shared,
    record: &Record<'_>,
    head: u64,
    begin: u64,
    invalid: InvalidVersions,
) -> Standing {
    let mut next_version = None;
    let mut address = head;
    while address >= begin && address != 0 {
        if address == record.address {
            return match next_version {
                None => Standing::Newest,
                Some(next_version) => Standing::Superseded { next_version },
            };
        }
        let other = shared.log.record(address);
        let word0 = other.word0();
        if word0 & (FLAG_INVALID | FLAG_STABLE) == 0
            && !invalid.contains(other.version())
            && other.same_key(record)
        {
            next_version = Some(other.version());
        }
        address = word0 & ADDRESS_MASK;
    }
    Standing::Unreachable
}

/// [`copy_if_live`] with `rollback_ready`: see the module comment.
fn copy_if_live_rollback(
    shared: &Shared,
    record: Record<'_>,
    begin: u64,
    rules: &RollbackRules,
    key: &mut Vec<u8>,
    value: &mut Vec<u8>,
) -> Copied {
    let word0 = record.word0();
    let version = record.version();
    if word0 & (FLAG_INVALID | FLAG_STABLE) != 0 || rules.invalid.contains(version) {
        return Copied::No;
    }
    key.clear();
    record.copy_key(key);
    let hash = KeyHash::of(key);
    // The index entry if the record is still its key's newest, else the verdict.
    let newest = || {
        let Some(entry) = shared.index.find(hash) else {
            return Err(Copied::No);
        };
        match standing(shared, &record, entry.address(), begin, rules.invalid) {
            Standing::Newest => Ok(entry),
            Standing::Unreachable => Err(Copied::No),
            Standing::Superseded { next_version } if next_version <= version.max(rules.floor) => {
                Err(Copied::No)
            }
            Standing::Superseded { .. } => Err(Copied::Keep),
        }
    };
    if let Err(verdict) = newest() {
        return verdict;
    }
    let guard = record.lock();
    // Under the lock, again from a fresh head: a writer that superseded the record published its
    // new record before it unlocked. A seal alone proves nothing here (a discarded operation may
    // have set it: see the module comment).
    let entry = match newest() {
        Ok(entry) => entry,
        Err(verdict) => return verdict,
    };
    copy_locked(
        shared,
        record,
        guard,
        entry,
        (begin, rules.invalid),
        (key, value),
        true,
    )
}
