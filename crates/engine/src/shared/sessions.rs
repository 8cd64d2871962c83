//! The session registry: every session the store knows (open, or ended and not yet in a
//! checkpoint, or recovered and not resumed) by id, the next id, and how many are open.
//!
//! Writers: the store starts, resumes and forgets sessions; recovery registers the recovered
//! ones; a finishing checkpoint forgets ended sessions it holds all of; a rollback resets every
//! registered session. All of them do it under the registry lock ([`SessionRegistry::lock`]),
//! which is what makes those steps atomic with respect to each other (see each caller).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::cpr_points::SessionShared;
use crate::epoch::LightEpoch;
use crate::{EngineError, SessionId};

/// How many sessions may be open at once (each holds one slot of the epoch table).
pub const MAX_OPEN_SESSIONS: usize = 1024;

/// Slots of the epoch table: one per open session, and beyond them one for each engine thread
/// that may be protected at once — the compaction thread, and the checkpoint scanners or the
/// live-byte recount of the maintenance lock's holder (at most [`crate::MAX_FLUSHER_THREADS`];
/// see `Shared::thread_epoch`) — and a spare. Sessions are capped by their count, not by the
/// table, so the engine's threads always find a slot.
pub(crate) const EPOCH_SLOTS: usize = MAX_OPEN_SESSIONS + 1 + crate::MAX_FLUSHER_THREADS + 1;

/// The registered sessions by id.
pub(crate) type Sessions = BTreeMap<u64, Arc<SessionShared>>;

/// See the module docs.
pub(crate) struct SessionRegistry {
    /// The registry lock: held while a session is registered, claimed, forgotten or reset.
    sessions: Mutex<Sessions>,
    next_id: AtomicU64,
    /// Sessions open now; at most [`MAX_OPEN_SESSIONS`] (the epoch table has more slots, for
    /// the engine's own threads: [`EPOCH_SLOTS`]).
    open: AtomicUsize,
}

impl SessionRegistry {
    /// No sessions; the first id is 1.
    pub(crate) fn new() -> SessionRegistry {
        SessionRegistry {
            sessions: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            open: AtomicUsize::new(0),
        }
    }

    /// The registry under its lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock()
    }

    /// Takes a fresh session id.
    pub(crate) fn take_id(&self) -> SessionId {
        SessionId(self.next_id.fetch_add(1, Ordering::SeqCst))
    }

    /// The id the next new session gets (what a checkpoint manifest records).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.load(Ordering::SeqCst)
    }

    /// Sets the next id (recovery: above every recovered session).
    pub(crate) fn set_next_id(&self, next: u64) {
        self.next_id.store(next, Ordering::SeqCst);
    }

    /// Reserves an epoch slot for a session (given back by [`SessionRegistry::release_slot`]).
    pub(crate) fn acquire_slot(&self, epoch: &LightEpoch) -> Result<usize, EngineError> {
        let too_many = EngineError::TooManySessions {
            limit: MAX_OPEN_SESSIONS,
        };
        if self.open.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN_SESSIONS {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return Err(too_many);
        }
        match epoch.acquire_slot() {
            Some(slot) => Ok(slot),
            None => {
                self.open.fetch_sub(1, Ordering::SeqCst);
                Err(too_many)
            }
        }
    }

    /// Gives back what [`SessionRegistry::acquire_slot`] took.
    pub(crate) fn release_slot(&self, epoch: &LightEpoch, slot: usize) {
        epoch.release_slot(slot);
        let previous = self.open.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(
            previous > 0,
            "released more session slots than were acquired"
        );
    }
}
