//! LightEpoch: epoch protection with trigger actions, the synchronisation backbone of the engine.
//!
//! Every session owns one slot of a cache-padded table. A protected slot holds the global epoch the
//! session last observed; 0 means "not protected" (suspended or idle). `bump(action)` advances the
//! global epoch from E to E+1 and queues `action` with trigger epoch E. An action runs (exactly once,
//! on whichever thread drains the list) once every protected slot holds an epoch > E, i.e. once
//! every thread that was inside a critical section when the bump happened has refreshed or left.
//!
//! Invariants and why they give the guarantee the engine needs:
//! - State published before `bump` (SeqCst store, then SeqCst `fetch_add`) is visible to every
//!   thread once its action runs: a thread either refreshed after the bump (it loads the epoch and
//!   then the state, both SeqCst), or it protected itself after the drainer scanned its slot; the
//!   SeqCst fences after the slot store (`protect`) and before the scan (`safe_epoch`) order its
//!   later loads of the state after the publication. Loom found the version without fences
//!   failing (under loom's AcqRel model of SeqCst accesses), hence the explicit fences.
//! - Suspended slots (epoch 0) never hold an action back, so idle sessions never stall a bump.
//! - The drain list is bounded (`DRAIN_CAPACITY`); a bump that finds it full drains first.
//!
//! Model check (tiny, 2 threads): `RUSTFLAGS="--cfg loom" cargo test -p prefixkv-engine --release --lib loom`.

use crossbeam_utils::CachePadded;

use crate::sync::{fence, AtomicU64, AtomicUsize, Mutex, Ordering};

/// Slot value meaning "this session is not inside a critical section".
const UNPROTECTED: u64 = 0;
/// Maximum number of queued trigger actions (bumps are rare: phase changes and page frees).
pub(crate) const DRAIN_CAPACITY: usize = 64;

type Action = Box<dyn FnOnce() + Send>;

/// The epoch table and drain list.
pub(crate) struct LightEpoch {
    current: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<AtomicU64>]>,
    /// `true` for slots owned by a live session.
    owned: Mutex<Vec<bool>>,
    /// Slots `[0, high_water)` may be owned; scans stop there.
    high_water: AtomicUsize,
    pending: CachePadded<AtomicUsize>,
    drain_list: Mutex<Vec<(u64, Action)>>,
}

impl LightEpoch {
    /// A table with room for `max_slots` concurrent sessions.
    pub(crate) fn new(max_slots: usize) -> Self {
        assert!(max_slots > 0);
        Self {
            current: CachePadded::new(AtomicU64::new(1)),
            slots: (0..max_slots)
                .map(|_| CachePadded::new(AtomicU64::new(UNPROTECTED)))
                .collect(),
            owned: Mutex::new(vec![false; max_slots]),
            high_water: AtomicUsize::new(0),
            pending: CachePadded::new(AtomicUsize::new(0)),
            drain_list: Mutex::new(Vec::with_capacity(DRAIN_CAPACITY)),
        }
    }

    /// Claims a free slot, unprotected. `None` when every slot is owned.
    pub(crate) fn acquire_slot(&self) -> Option<usize> {
        let mut owned = self.owned.lock().unwrap();
        let index = owned.iter().position(|used| !used)?;
        owned[index] = true;
        if index >= self.high_water.load(Ordering::SeqCst) {
            self.high_water.store(index + 1, Ordering::SeqCst);
        }
        Some(index)
    }

    /// Slots `[0, high_water)` may be owned or have been: a per-slot table needs no more.
    pub(crate) fn high_water(&self) -> usize {
        self.high_water.load(Ordering::SeqCst)
    }

    /// Unprotects and frees a slot.
    pub(crate) fn release_slot(&self, slot: usize) {
        self.suspend(slot);
        self.owned.lock().unwrap()[slot] = false;
    }

    /// Enters (or re-enters) the critical section at the current epoch and runs ready actions.
    /// Returns the epoch now held.
    pub(crate) fn protect(&self, slot: usize) -> u64 {
        let epoch = self.current.load(Ordering::SeqCst);
        self.slots[slot].store(epoch, Ordering::SeqCst);
        // Store-load barrier (Dekker): either a drainer's scan sees this slot, or this thread's
        // later loads of published state see what was stored before the bump. (An explicit fence
        // also makes loom, which models SeqCst accesses as AcqRel, check the real argument.)
        fence(Ordering::SeqCst);
        if self.pending.load(Ordering::SeqCst) > 0 {
            self.drain();
        }
        epoch
    }

    /// Leaves the critical section; the slot no longer holds back any action.
    pub(crate) fn suspend(&self, slot: usize) {
        self.slots[slot].store(UNPROTECTED, Ordering::SeqCst);
        if self.pending.load(Ordering::SeqCst) > 0 {
            self.drain();
        }
    }

    /// Whether `slot` is inside a critical section.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_protected(&self, slot: usize) -> bool {
        self.slots[slot].load(Ordering::SeqCst) != UNPROTECTED
    }

    /// The global epoch.
    #[allow(dead_code)]
    pub(crate) fn current(&self) -> u64 {
        self.current.load(Ordering::SeqCst)
    }

    /// Advances the epoch and queues `action` to run once every protected slot has passed the
    /// epoch it replaced. Callers publish the state the action depends on *before* calling this.
    pub(crate) fn bump(&self, action: impl FnOnce() + Send + 'static) {
        let mut action: Option<Action> = Some(Box::new(action));
        loop {
            {
                let mut list = self.drain_list.lock().unwrap();
                if list.len() < DRAIN_CAPACITY {
                    // Increment under the list lock so that trigger epochs enter the list in order.
                    let prior = self.current.fetch_add(1, Ordering::SeqCst);
                    list.push((prior, action.take().expect("queued once")));
                    self.pending.fetch_add(1, Ordering::SeqCst);
                    break;
                }
            }
            // Full: make room by running what is ready, then try again.
            self.drain();
            std::hint::spin_loop();
            #[cfg(not(loom))]
            std::thread::yield_now();
            #[cfg(loom)]
            loom::thread::yield_now();
        }
        self.drain();
    }

    /// The largest epoch E such that no protected slot holds an epoch <= E.
    fn safe_epoch(&self) -> u64 {
        // Pairs with the fence in `protect`.
        fence(Ordering::SeqCst);
        let mut oldest = self.current.load(Ordering::SeqCst);
        let high_water = self.high_water.load(Ordering::SeqCst);
        for slot in &self.slots[..high_water] {
            let epoch = slot.load(Ordering::SeqCst);
            if epoch != UNPROTECTED && epoch < oldest {
                oldest = epoch;
            }
        }
        oldest - 1
    }

    /// [`LightEpoch::bump`]s with `action` and waits until it ran. The caller must not hold
    /// epoch protection (its own slot would hold the action back). Drains the epoch itself, so
    /// that an idle store (no session refreshing) progresses; wakes at least every millisecond to
    /// drain again, since the sessions that held the action back may leave without draining.
    pub(crate) fn bump_and_wait(&self, action: impl FnOnce() + Send + 'static) {
        use std::sync::Arc;
        let done = Arc::new((parking_lot::Mutex::new(false), parking_lot::Condvar::new()));
        {
            let done = done.clone();
            self.bump(move || {
                action();
                *done.0.lock() = true;
                done.1.notify_all();
            });
        }
        let mut finished = done.0.lock();
        while !*finished {
            drop(finished);
            self.drain();
            finished = done.0.lock();
            if !*finished {
                done.1
                    .wait_for(&mut finished, std::time::Duration::from_millis(1));
            }
        }
    }

    /// Runs every queued action whose trigger epoch is safe. Cheap when nothing is queued.
    pub(crate) fn drain(&self) {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return;
        }
        let safe = self.safe_epoch();
        let ready: Vec<Action> = {
            let mut list = self.drain_list.lock().unwrap();
            let mut ready = Vec::new();
            let mut index = 0;
            while index < list.len() {
                if list[index].0 <= safe {
                    ready.push(list.swap_remove(index).1);
                } else {
                    index += 1;
                }
            }
            self.pending.fetch_sub(ready.len(), Ordering::SeqCst);
            ready
        };
        // Actions run outside the lock: they may bump again.
        for action in ready {
            action();
        }
    }

    /// Number of queued actions (for drivers waiting on their own action).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn action_waits_for_protected_slot_and_not_for_suspended_one() {
        let epoch = LightEpoch::new(4);
        let a = epoch.acquire_slot().unwrap();
        let b = epoch.acquire_slot().unwrap();
        epoch.protect(a);
        // b is owned but idle: it must not hold anything back.
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        epoch.bump(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        epoch.drain();
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        epoch.protect(a); // refresh past the bump
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
        assert!(!epoch.is_protected(b));
        epoch.release_slot(a);
        epoch.release_slot(b);
        assert_eq!(epoch.pending(), 0);
    }

    #[test]
    fn full_drain_list_does_not_lose_actions() {
        let epoch = LightEpoch::new(2);
        let counter = Arc::new(AtomicUsize::new(0));
        for _ in 0..(DRAIN_CAPACITY * 3) {
            let counter = counter.clone();
            epoch.bump(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            });
        }
        epoch.drain();
        assert_eq!(counter.load(Ordering::SeqCst), DRAIN_CAPACITY * 3);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    /// The reclamation pattern the log relies on: a reader that observed the old state inside its
    /// critical section never sees the resource freed by an action bumped after the state change.
    #[test]
    fn loom_bump_action_never_overtakes_a_protected_reader() {
        loom::model(|| {
            let epoch = Arc::new(LightEpoch::new(2));
            let retired = Arc::new(AtomicBool::new(false));
            let freed = Arc::new(AtomicBool::new(false));
            let reader_slot = epoch.acquire_slot().unwrap();

            let reader = {
                let (epoch, retired, freed) = (epoch.clone(), retired.clone(), freed.clone());
                loom::thread::spawn(move || {
                    epoch.protect(reader_slot);
                    if !retired.load(Ordering::SeqCst) {
                        // Still allowed to use the resource: it must not be freed yet.
                        assert!(
                            !freed.load(Ordering::SeqCst),
                            "action ran under a protected reader"
                        );
                    }
                    epoch.suspend(reader_slot);
                })
            };

            retired.store(true, Ordering::SeqCst);
            let flag = freed.clone();
            epoch.bump(move || flag.store(true, Ordering::SeqCst));
            reader.join().unwrap();
            epoch.drain();
            assert!(
                freed.load(Ordering::SeqCst),
                "action lost after every slot left"
            );
        });
    }
}
