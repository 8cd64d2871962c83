//! The rollback's bookkeeping: the invalid range of the rollback in flight, the rollback floor,
//! the published versions a rollback may return to, where in the log each version began to be
//! allowed (PURGE's lower bound), and the control block of the running PURGE.
//!
//! Writers: the `rollback` module (THROW sets the invalid range, PURGE clears it and fills in
//! its report, through the methods below and the [`PurgeControl`] it locks), the checkpoint
//! driver (publishes and forgets targets), [`crate::shared::Shared::publish_state`] and the
//! store's open (note where versions begin). Every other module only reads, through methods.
//!
//! Locks: `one_at_a_time` (one THROW at a time) is taken first, before the state machine slot
//! and the seal lock; `purge` guards [`PurgeControl`] and `purge_changed`; `targets` and
//! `allowed` are taken briefly, `targets` before `allowed` (in `note_allowed`) and never the
//! reverse.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard, WaitTimeoutResult};

use crate::report::PurgeReport;
use crate::state::InvalidVersions;
use crate::SessionId;

/// The store's rollback bookkeeping.
pub(crate) struct RollbackState {
    /// The invalid range of the rollback in flight ([`InvalidVersions`] word), 0 outside one.
    invalid: AtomicU64,
    /// `Store::set_rollback_floor`.
    floor: AtomicU64,
    /// Versions a rollback may return to: published by this process (or recovered) and still on
    /// disk, with each session's CPR point in them.
    targets: Mutex<BTreeMap<u64, BTreeMap<SessionId, u64>>>,
    /// For each version `w` the store let sessions run as, from the moment the state word first
    /// allowed it: the version allowed before and the log tail read just before that state word
    /// was stored (see [`RollbackState::note_allowed`]). PURGE starts its log pass there.
    allowed: Mutex<BTreeMap<u64, Allowed>>,
    /// One THROW at a time (a rollback's PURGE may still run when the next one starts).
    one_at_a_time: Mutex<()>,
    /// Test-only sabotage (`Store::tamper_rollback_for_tests`): skip the invalidation.
    tamper_skip_invalidation: AtomicBool,
    /// Test-only sabotage (`Store::tamper_purge_bound_for_tests`): PURGE's log pass starts at
    /// the tail of the THROW instead of the recorded bound.
    tamper_purge_bound: AtomicBool,
    /// Test-only (`Store::hold_purge_for_tests`): PURGE waits after its log pass.
    hold_purge: AtomicBool,
    /// The generation of the PURGE that is to finish; an older one stops at its next check.
    purge_generation: AtomicU64,
    purge: Mutex<PurgeControl>,
    purge_changed: Condvar,
}

/// A version the store began to allow (see [`RollbackState::allowed`]).
#[derive(Clone, Copy, Debug)]
struct Allowed {
    /// The highest version a session could run as before.
    after: u64,
    /// The log tail read just before the state word allowing it was stored.
    tail: u64,
}

/// The running PURGE, under [`RollbackState::purge_control`]; written by the `rollback` module.
#[derive(Default)]
pub(crate) struct PurgeControl {
    /// A rollback's PURGE (or its THROW) is in flight: it holds the state machine.
    pub(crate) running: bool,
    /// THROW of the rollback in flight was adopted by every session.
    pub(crate) adopted: Option<Arc<(Mutex<bool>, Condvar)>>,
    /// The report of the last PURGE that finished.
    pub(crate) last: Option<PurgeReport>,
    /// PURGE threads not yet joined (a superseded one may still be stopping).
    pub(crate) threads: Vec<JoinHandle<()>>,
}

impl RollbackState {
    /// No rollback in flight, no targets, floor 0.
    pub(crate) fn new() -> RollbackState {
        RollbackState {
            invalid: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            targets: Mutex::new(BTreeMap::new()),
            allowed: Mutex::new(BTreeMap::new()),
            one_at_a_time: Mutex::new(()),
            tamper_skip_invalidation: AtomicBool::new(false),
            tamper_purge_bound: AtomicBool::new(false),
            hold_purge: AtomicBool::new(false),
            purge_generation: AtomicU64::new(0),
            purge: Mutex::new(PurgeControl::default()),
            purge_changed: Condvar::new(),
        }
    }

    /// The invalid range of the rollback in flight (for threads that are not sessions).
    pub(crate) fn invalid(&self) -> InvalidVersions {
        InvalidVersions::from_word(self.invalid.load(Ordering::SeqCst))
    }

    /// A checkpoint of `version` was published (or recovered) with these CPR points.
    pub(crate) fn record_published(&self, version: u64, points: BTreeMap<SessionId, u64>) {
        self.targets.lock().insert(version, points);
    }

    /// Whether `version` is a published (or recovered) checkpoint still on disk.
    pub(crate) fn is_target(&self, version: u64) -> bool {
        self.targets.lock().contains_key(&version)
    }

    /// Checkpoints that were deleted from disk are no longer rollback targets.
    pub(crate) fn forget_published(&self, versions: &[u64]) {
        let mut targets = self.targets.lock();
        for version in versions {
            targets.remove(version);
        }
    }

    /// The floor compaction works with: a record may be dropped only if a newer record of its key
    /// has a version `<=` max(its own version, this). Every version a rollback may still return to
    /// is at least this: the caller's floor raises it; otherwise it is the oldest checkpoint still
    /// on disk (older ones can never be rollback targets), or, with none, the current version
    /// (every later checkpoint is of a version at least that).
    pub(crate) fn compaction_floor(&self, current_version: u64) -> u64 {
        let oldest_target = self.targets.lock().keys().next().copied();
        let possible = oldest_target.map_or(current_version, |oldest| oldest.min(current_version));
        possible.max(self.floor.load(Ordering::SeqCst))
    }

    /// The state word is about to let sessions run as versions up to `allowed` (above `after`,
    /// the highest they could run as so far); `tail` is the log tail read *before* that state word
    /// is stored. Called by [`Shared::publish_state`] (and once at open).
    ///
    /// Why `tail` is below every record of a version above `after` (the bound PURGE relies on):
    /// with `rollback_ready`, a record gets version `w` only (a) when a session running as `w`
    /// allocates it, or writes in place a record whose version already is `w` (`must_copy`: no
    /// cpr-copy or Persian in-place change of an older record), or (b) when compaction or a re-link
    /// copies a record of version `w` to the tail, above the original. A session runs as the
    /// version of the state word it loaded (one above it in PAUSE): adopting a version never
    /// happens otherwise (a CPR shift refreshes and adopts the state word, which the record that
    /// caused the shift proves was stored). So for (a) the session's state load read the new word,
    /// which was stored after `tail` was read: that read happens-before the session's allocation,
    /// so the allocation's fetch-add reads a later tail value (coherence) and the tail only grows;
    /// (b) follows by induction. Sessions still running an older version meanwhile append records
    /// of versions `<= after` above `tail`; that is allowed (the bound is only a lower bound).
    /// Recovery loads records of versions up to the recovered checkpoint only, before `open`
    /// notes its first version with the tail after loading.
    pub(crate) fn note_allowed(&self, after: u64, allowed: u64, tail: u64) {
        debug_assert!(allowed > after);
        // Only targets at or above the oldest possible one are ever looked up (`purge_bound`
        // finds the first entry above the target): forget entries at or below it, so the map
        // holds about as many entries as checkpoints are kept.
        let oldest_target = self.targets.lock().keys().next().copied();
        let never_needed = oldest_target
            .map_or(after, |oldest| oldest.min(after))
            .max(self.floor.load(Ordering::SeqCst));
        let mut entries = self.allowed.lock();
        *entries = entries.split_off(&(never_needed + 1));
        entries.insert(allowed, Allowed { after, tail });
    }

    /// A log address below which no record has a version above `to_version`: the tail when the
    /// state word first let a session run as a version above it (`note_allowed`). `None` when
    /// unknown (that moment was before this process opened the store): use the begin address.
    pub(crate) fn purge_bound(&self, to_version: u64) -> Option<u64> {
        let entries = self.allowed.lock();
        let (_, first_above) = entries.range(to_version + 1..).next()?;
        // The entry must be *the* moment the store moved past `to_version`: the versions allowed
        // before it were all at most `to_version`.
        (first_above.after <= to_version).then_some(first_above.tail)
    }

    /// THROW: the versions of `invalid` are invalid from now on (stored before the THROW state
    /// word, so a session that adopts the new world-line loads it too); PURGE clears it with
    /// [`InvalidVersions::NONE`] once every record of the range is flagged.
    pub(crate) fn set_invalid(&self, invalid: InvalidVersions) {
        self.invalid.store(invalid.word(), Ordering::SeqCst);
    }

    /// The published (or recovered) versions still on disk with their CPR points, under their
    /// lock (a rollback checks its target and reads the points at once).
    pub(crate) fn targets(&self) -> MutexGuard<'_, BTreeMap<u64, BTreeMap<SessionId, u64>>> {
        self.targets.lock()
    }

    /// `Store::rollback_floor`.
    pub(crate) fn floor(&self) -> u64 {
        self.floor.load(Ordering::SeqCst)
    }

    /// `Store::set_rollback_floor`: raises the floor (never lowers it).
    pub(crate) fn raise_floor(&self, version: u64) {
        self.floor.fetch_max(version, Ordering::SeqCst);
    }

    /// One THROW at a time: the guard, waiting at most until `deadline`.
    pub(crate) fn one_at_a_time(&self, deadline: Instant) -> Option<MutexGuard<'_, ()>> {
        self.one_at_a_time.try_lock_until(deadline)
    }

    /// The running PURGE's control block, under its lock.
    pub(crate) fn purge_control(&self) -> MutexGuard<'_, PurgeControl> {
        self.purge.lock()
    }

    /// Waits on the control block's condition (a PURGE ending), at most until `deadline`.
    pub(crate) fn wait_purge_changed(
        &self,
        control: &mut MutexGuard<'_, PurgeControl>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        self.purge_changed.wait_until(control, deadline)
    }

    /// Wakes the waiters of [`RollbackState::wait_purge_changed`].
    pub(crate) fn notify_purge_changed(&self) {
        self.purge_changed.notify_all();
    }

    /// Starts a new PURGE generation (an older PURGE stops at its next check); the new number.
    pub(crate) fn next_purge_generation(&self) -> u64 {
        self.purge_generation.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The generation of the PURGE that is to finish.
    pub(crate) fn purge_generation(&self) -> u64 {
        self.purge_generation.load(Ordering::SeqCst)
    }

    /// Test-only sabotage: skip the invalidation.
    pub(crate) fn set_tamper_skip_invalidation(&self, skip: bool) {
        self.tamper_skip_invalidation.store(skip, Ordering::SeqCst);
    }

    /// Whether the invalidation is to be skipped (test-only sabotage).
    pub(crate) fn tamper_skip_invalidation(&self) -> bool {
        self.tamper_skip_invalidation.load(Ordering::SeqCst)
    }

    /// Test-only sabotage: PURGE's log pass starts at the tail of the THROW.
    pub(crate) fn set_tamper_purge_bound(&self, from_throw_tail: bool) {
        self.tamper_purge_bound
            .store(from_throw_tail, Ordering::SeqCst);
    }

    /// Whether PURGE's bound is sabotaged (test-only).
    pub(crate) fn tamper_purge_bound(&self) -> bool {
        self.tamper_purge_bound.load(Ordering::SeqCst)
    }

    /// Test-only: PURGE waits after its log pass while this is set.
    pub(crate) fn set_hold_purge(&self, hold: bool) {
        self.hold_purge.store(hold, Ordering::SeqCst);
    }

    /// Whether PURGE is to wait after its log pass (test-only).
    pub(crate) fn hold_purge(&self) -> bool {
        self.hold_purge.load(Ordering::SeqCst)
    }

    /// Joins the PURGE threads (store shutdown).
    pub(crate) fn join(&self) {
        let threads = std::mem::take(&mut self.purge.lock().threads);
        for thread in threads {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RollbackState;
    use std::collections::BTreeMap;

    #[test]
    fn the_purge_bound_is_the_tail_when_the_store_first_ran_above_the_target() {
        let state = RollbackState::new();
        // Opened after recovering v4: sessions run as 5 from a tail of 1000.
        state.note_allowed(4, 5, 1000);
        state.record_published(4, BTreeMap::new());
        // Checkpoints of 5 and 6 (IN_PROGRESS: 6 and 7 allowed), then a rollback to 5 from 7
        // (THROW: 8 allowed).
        state.note_allowed(5, 6, 2000);
        state.record_published(5, BTreeMap::new());
        state.note_allowed(6, 7, 3000);
        state.record_published(6, BTreeMap::new());
        state.note_allowed(7, 8, 4000);
        assert_eq!(state.purge_bound(4), Some(1000));
        assert_eq!(state.purge_bound(5), Some(2000));
        assert_eq!(state.purge_bound(6), Some(3000));
        assert_eq!(state.purge_bound(7), Some(4000));
        // Before this process: what recovery loaded may be of any version up to 4.
        assert_eq!(state.purge_bound(3), None);
        assert_eq!(state.purge_bound(0), None);
        // A jump over versions (from 8 to 12): versions 9 to 11 never ran, so every record above
        // them is of 12 or later, all above the tail of the jump.
        state.note_allowed(8, 12, 5000);
        assert_eq!(state.purge_bound(8), Some(5000));
        assert_eq!(state.purge_bound(10), Some(5000));
        // Entries at or below the oldest possible target are forgotten.
        state.forget_published(&[4, 5]);
        state.note_allowed(12, 13, 6000);
        assert_eq!(state.purge_bound(4), None);
        assert_eq!(state.purge_bound(6), Some(3000));
        assert_eq!(state.allowed.lock().len(), 4);
    }

    #[test]
    fn the_compaction_floor_is_the_oldest_target_or_the_callers_floor() {
        let state = RollbackState::new();
        // No checkpoint: every later target is at least the current version.
        assert_eq!(state.compaction_floor(9), 9);
        state.record_published(4, BTreeMap::new());
        state.record_published(6, BTreeMap::new());
        assert_eq!(state.compaction_floor(9), 4);
        state.forget_published(&[4]);
        assert_eq!(state.compaction_floor(9), 6);
        state.floor.store(8, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(state.compaction_floor(9), 8);
    }
}
