//! Epoch protection for the engine's own threads that read log pages outside a session while
//! eviction may free them: a tiered store's checkpoint scanners and live-byte recounts.
//!
//! Why only a tiered store: without a tier, the only thing that frees log pages is compaction,
//! and these threads run under the maintenance lock, which excludes it. With a tier, eviction
//! (`tier.rs`) frees memory pages while checkpoints run (it must: writers would otherwise wait
//! for memory for a whole checkpoint), and it relies on epoch protection alone: it moves the head
//! address, bumps the epoch, and frees the pages once every protected thread has refreshed.
//!
//! Rules for a protected thread (the same as a session's):
//! - A `Record` it got for an in-memory address is valid until it refreshes or suspends; it
//!   never keeps one across those points (addresses, which it may keep, are re-resolved:
//!   `HybridLog::record` sends an address that was evicted meanwhile to the page file).
//! - It does not block while protected (a protected thread holds back every eviction and so
//!   every writer waiting for memory): it suspends around blocking I/O and refreshes at least
//!   every few dozen chains or few thousand records.

use crate::epoch::LightEpoch;

/// Index chains a protected thread walks between refreshes: each chain may read the page file,
/// and a protected thread holds back eviction.
pub(crate) const REFRESH_CHAINS: usize = 64;

use super::Shared;

/// One engine thread's epoch slot (or none, in a store without a tier: every call is then a
/// no-op). Released when dropped.
pub(crate) struct ThreadEpoch<'a> {
    epoch: &'a LightEpoch,
    slot: Option<usize>,
}

impl ThreadEpoch<'_> {
    /// Enters the critical section, or refreshes: `Record`s got before are invalid afterwards.
    #[inline]
    pub(crate) fn protect(&self) {
        if let Some(slot) = self.slot {
            self.epoch.protect(slot);
        }
    }

    /// Leaves the critical section (before blocking).
    #[inline]
    pub(crate) fn suspend(&self) {
        if let Some(slot) = self.slot {
            self.epoch.suspend(slot);
        }
    }

    /// Whether this thread takes part in epoch protection (the store has a tier).
    pub(crate) fn is_active(&self) -> bool {
        self.slot.is_some()
    }
}

impl Drop for ThreadEpoch<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.epoch.release_slot(slot);
        }
    }
}

impl Shared {
    /// An epoch slot for an engine thread that reads log pages outside a session (see the module
    /// docs), unprotected until [`ThreadEpoch::protect`]; without a storage tier, none.
    pub(crate) fn thread_epoch(&self) -> ThreadEpoch<'_> {
        let slot = self.log.is_tiered().then(|| {
            self.epoch.acquire_slot().expect(
                "the epoch table keeps a slot for every engine thread (shared::EPOCH_SLOTS)",
            )
        });
        ThreadEpoch {
            epoch: &self.epoch,
            slot,
        }
    }
}
