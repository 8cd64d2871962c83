//! Clients blocked on keys (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP on lists; BZPOPMIN,
//! BZPOPMAX, BZMPOP on sorted sets): who waits for which key, in which order, and the wake-up a
//! write sends them.
//!
//! A blocked connection registers one `Notify` of its own under every key it waits for, with the
//! kind of value it waits for, then runs its command again, then awaits the `Notify` (or its
//! deadline). A write that puts a value of some kind at a key calls [`Blocked::ready_kind`]
//! inside its transaction: it wakes the *first* client in the key's queue that waits for that
//! kind. `notify_one` leaves a permit when the waiter is not yet awaiting, so a write between the
//! registration and the await is never lost. The woken client runs its command again under the
//! key's lock, which it gets only after the writing transaction (or the whole EXEC: the exec
//! gate) committed, so a MULTI that pushes several elements wakes it once, at EXEC, and it sees
//! the final state.
//!
//! Redis serves blocked clients first come, first served, per key. Here a blocking command pops
//! from a key only when [`Blocked::may_serve`] says no client of the same kind blocked on that
//! key before it; when a client's registration ends (it was served, timed out, disconnected) the
//! next waiter of each kind on its keys is woken, so three waiters and three pushes hand out the
//! elements in blocking order even if the pushes land before the first waiter runs. A woken
//! client that finds nothing (another command took the element, the key was deleted or
//! re-created with another type: `Client::unblocking` makes a wrong type read as empty) waits
//! again in the same place.
//!
//! Invariants: an entry exists only while its connection is blocked ([`Registration`] removes it
//! on drop, however the wait ends), so the map holds at most one entry per blocked client and
//! key, in registration order; `waiting` counts entries, so a write pays one atomic load when
//! nobody waits.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::value::Kind;

/// One blocked client's entry under a key.
struct Waiter {
    client: u64,
    kind: Kind,
    notify: Arc<Notify>,
}

type Waiters = HashMap<(u8, Vec<u8>), VecDeque<Waiter>>;

/// The registry of blocked clients.
#[derive(Default)]
pub struct Blocked {
    waiters: Mutex<Waiters>,
    waiting: AtomicUsize,
}

impl Blocked {
    /// Registers client `client` (its `notify`) as waiting for lists at `keys` of `database`,
    /// until the returned registration is dropped.
    pub fn register<'a>(
        &'a self,
        client: u64,
        database: u8,
        keys: &[bytes::Bytes],
        notify: &Arc<Notify>,
    ) -> Registration<'a> {
        self.register_for(client, database, keys, Kind::List, notify)
    }

    /// Registers client `client` as waiting for values of `kind` at `keys` of `database`, behind
    /// every client already waiting there, until the returned registration is dropped.
    pub fn register_for<'a>(
        &'a self,
        client: u64,
        database: u8,
        keys: &[bytes::Bytes],
        kind: Kind,
        notify: &Arc<Notify>,
    ) -> Registration<'a> {
        let mut waiters = self.waiters.lock();
        let mut registered = Vec::with_capacity(keys.len());
        for key in keys {
            let entry = (database, key.to_vec());
            if registered.contains(&entry) {
                continue;
            }
            waiters.entry(entry.clone()).or_default().push_back(Waiter {
                client,
                kind,
                notify: notify.clone(),
            });
            self.waiting.fetch_add(1, Ordering::Relaxed);
            registered.push(entry);
        }
        Registration {
            blocked: self,
            client,
            kind,
            keys: registered,
        }
    }

    /// A list at `key` of `database` was created or grew (see [`Blocked::ready_kind`]).
    pub fn ready(&self, database: u8, key: &[u8]) {
        self.ready_kind(database, key, Kind::List);
    }

    /// A value of `kind` was written at `key` of `database`: wakes the first client waiting
    /// there for that kind (it wakes the next one when it is done).
    pub fn ready_kind(&self, database: u8, key: &[u8], kind: Kind) {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let waiters = self.waiters.lock();
        if let Some(queue) = waiters.get(&(database, key.to_vec())) {
            if let Some(first) = queue.iter().find(|w| w.kind == kind) {
                first.notify.notify_one();
            }
        }
    }

    /// Whether `client` may take a value of `kind` from `key` now: no other client waiting for
    /// that kind blocked there before it (it is first in line, or nobody waits).
    pub fn may_serve(&self, client: u64, database: u8, key: &[u8], kind: Kind) -> bool {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let waiters = self.waiters.lock();
        waiters
            .get(&(database, key.to_vec()))
            .and_then(|queue| queue.iter().find(|w| w.kind == kind))
            .is_none_or(|first| first.client == client)
    }

    /// Number of blocked clients' registrations (INFO `blocked_clients` counts clients).
    pub fn registrations(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// A client's registration under its keys; dropping it removes them and wakes the client next in
/// line on each (a value it did not take may be waiting for them).
pub struct Registration<'a> {
    blocked: &'a Blocked,
    client: u64,
    kind: Kind,
    keys: Vec<(u8, Vec<u8>)>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut waiters = self.blocked.waiters.lock();
        for key in &self.keys {
            if let Some(queue) = waiters.get_mut(key) {
                queue.retain(|waiter| waiter.client != self.client);
                match queue.iter().find(|w| w.kind == self.kind) {
                    Some(next) => next.notify.notify_one(),
                    None if queue.is_empty() => {
                        waiters.remove(key);
                    }
                    None => {}
                }
            }
            self.blocked.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_push_before_the_await_is_not_lost() {
        let blocked = Blocked::default();
        let notify = Arc::new(Notify::new());
        let keys = [
            bytes::Bytes::from_static(b"k"),
            bytes::Bytes::from_static(b"k"),
        ];
        let registration = blocked.register(7, 0, &keys, &notify);
        assert_eq!(blocked.registrations(), 1, "a repeated key registers once");
        blocked.ready(0, b"k");
        blocked.ready(1, b"k");
        // The permit left by `ready` completes the wait at once.
        runtime().block_on(notify.notified());
        drop(registration);
        assert_eq!(blocked.registrations(), 0);
        assert!(blocked.waiters.lock().is_empty());
    }

    #[test]
    fn waiters_are_served_in_blocking_order_per_kind() {
        let blocked = Blocked::default();
        let key = [bytes::Bytes::from_static(b"k")];
        let (a, b, z) = (
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
        );
        let first = blocked.register(1, 0, &key, &a);
        let second = blocked.register(2, 0, &key, &b);
        let zset = blocked.register_for(3, 0, &key, Kind::ZSet, &z);
        assert!(blocked.may_serve(1, 0, b"k", Kind::List));
        assert!(!blocked.may_serve(2, 0, b"k", Kind::List));
        assert!(
            blocked.may_serve(3, 0, b"k", Kind::ZSet),
            "kinds queue apart"
        );
        assert!(
            !blocked.may_serve(9, 0, b"k", Kind::List),
            "a newcomer waits its turn"
        );
        blocked.ready(0, b"k");
        let runtime = runtime();
        runtime.block_on(a.notified());
        drop(first);
        // The first one leaving wakes the second, which is now first in line.
        runtime.block_on(b.notified());
        assert!(blocked.may_serve(2, 0, b"k", Kind::List));
        drop(second);
        blocked.ready_kind(0, b"k", Kind::ZSet);
        runtime.block_on(z.notified());
        drop(zset);
        assert!(blocked.waiters.lock().is_empty());
    }
}
