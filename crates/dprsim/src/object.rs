//! [`SimObject`]: the real [`VersionedMap`] with persistence completion moved into virtual time.
//!
//! The map writes each committed snapshot for real (fsynced file, its own persister thread), but
//! the worker's persist callback — which reports the version to the finder — runs only when the
//! simulator says the version became durable, on the simulator's thread. That is what makes a
//! run deterministic: the callback's timing is an event, not a race with a background thread.
//!
//! Invariants:
//! - Callbacks run in commit order (the `StateObject` contract): [`SimObject::complete`] only ever
//!   completes the oldest pending commit, and only if its id matches the event's.
//! - A restore drops every pending callback (allowed by the contract: a state object may never
//!   call back for commits its restore discarded); their ids are never reused, so a stale
//!   completion event finds nothing to complete.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use prefixkv_dpr::state_object::{
    MapOperation, PersistCallback, StateObject, StateObjectError, VersionedMap,
};
use prefixkv_dpr::Version;
use slot::Slot;

/// A one-shot result slot filled by the map's persister thread (a std mutex: no extra crate).
mod slot {
    use std::sync::Mutex;

    use prefixkv_dpr::state_object::StateObjectError;
    use prefixkv_dpr::Version;

    /// Where the map's real persist callback leaves its result.
    #[derive(Default)]
    pub struct Slot(Mutex<Option<Result<Version, StateObjectError>>>);

    impl Slot {
        pub fn put(&self, result: Result<Version, StateObjectError>) {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        }
        pub fn take(&self) -> Option<Result<Version, StateObjectError>> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
        }
    }
}

struct Pending {
    id: u64,
    slot: Arc<Slot>,
    on_persist: PersistCallback,
}

/// The simulated worker's state object; see the module docs.
pub struct SimObject {
    map: VersionedMap,
    pending: VecDeque<Pending>,
    next_id: u64,
    /// Ids of commits made since the simulator last asked (it schedules their completion).
    fresh: Vec<u64>,
}

impl SimObject {
    /// Opens (or reopens, after a simulated crash) the map in `directory`.
    pub fn open(directory: &Path) -> Result<Self, StateObjectError> {
        Ok(Self {
            map: VersionedMap::open(directory)?,
            pending: VecDeque::new(),
            next_id: 0,
            fresh: Vec::new(),
        })
    }

    /// The real map (the oracle reads its entries).
    pub fn map(&self) -> &VersionedMap {
        &self.map
    }

    /// The real map, mutably (only the tamper test writes through it).
    pub fn map_mut(&mut self) -> &mut VersionedMap {
        &mut self.map
    }

    /// Commits made since the last call, oldest first: the simulator schedules their completion.
    pub fn take_fresh_commits(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.fresh)
    }

    /// Completes commit `id` if it is the oldest pending one: waits for the real write, then runs
    /// the worker's callback. Returns whether it ran.
    pub fn complete(&mut self, id: u64) -> Result<bool, StateObjectError> {
        if self.pending.front().is_none_or(|p| p.id != id) {
            return Ok(false);
        }
        let pending = self.pending.pop_front().expect("checked above");
        // Real I/O: the only wall-clock wait of the simulation, and it cannot change the outcome.
        self.map.flush()?;
        let result = pending
            .slot
            .take()
            .unwrap_or(Err(StateObjectError::PersisterGone));
        (pending.on_persist)(result);
        Ok(true)
    }
}

impl StateObject for SimObject {
    type Operation = MapOperation;
    type Output = Option<Vec<u8>>;

    fn execute(
        &mut self,
        version: Version,
        operations: &[MapOperation],
    ) -> Result<Vec<Self::Output>, StateObjectError> {
        self.map.execute(version, operations)
    }

    fn commit(
        &mut self,
        version: Version,
        metadata: Vec<u8>,
        on_persist: PersistCallback,
    ) -> Result<(), StateObjectError> {
        let slot = Arc::new(Slot::default());
        let filled = Arc::clone(&slot);
        self.map.commit(
            version,
            metadata,
            Box::new(move |result| filled.put(result)),
        )?;
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push_back(Pending {
            id,
            slot,
            on_persist,
        });
        self.fresh.push(id);
        Ok(())
    }

    fn restore(&mut self, version: Version) -> Result<Vec<u8>, StateObjectError> {
        self.pending.clear();
        self.fresh.clear();
        self.map.restore(version)
    }

    fn persisted_versions(&self) -> Result<Vec<Version>, StateObjectError> {
        self.map.persisted_versions()
    }

    fn prune(&mut self, below: Version) -> Result<(), StateObjectError> {
        self.map.prune(below)
    }
}
