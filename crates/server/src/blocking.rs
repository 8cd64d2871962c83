//! Clients blocked on lists (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH): who waits for which key, and the
//! wake-up a push sends them.
//!
//! A blocked connection registers one `Notify` of its own under every key it waits for, then runs
//! its command again, then awaits the `Notify` (or its deadline). A write that makes a list
//! exist or grow calls [`Blocked::ready`] inside its transaction; `notify_one` leaves a permit
//! when the waiter is not yet awaiting, so a push between the registration and the await is
//! never lost. The woken client runs its command again under the key's lock, which it gets only
//! after the pushing transaction committed; if another client took the element first it simply
//! waits again. Redis serves blocked clients strictly first come, first served; here the clients
//! woken by one push race for it (documented in docs/server.md).
//!
//! Invariants: an entry exists only while its connection is blocked ([`Registration`] removes it
//! on drop, however the wait ends), so the map holds at most one entry per blocked client and
//! key; `waiting` counts entries, so a push pays one atomic load when nobody waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

type Waiters = HashMap<(u8, Vec<u8>), Vec<(u64, Arc<Notify>)>>;

/// The registry of blocked clients.
#[derive(Default)]
pub struct Blocked {
    waiters: Mutex<Waiters>,
    waiting: AtomicUsize,
}

impl Blocked {
    /// Registers client `client` (its `notify`) as waiting for `keys` of `database`, until the
    /// returned registration is dropped.
    pub fn register<'a>(
        &'a self,
        client: u64,
        database: u8,
        keys: &[bytes::Bytes],
        notify: &Arc<Notify>,
    ) -> Registration<'a> {
        let mut waiters = self.waiters.lock();
        let mut registered = Vec::with_capacity(keys.len());
        for key in keys {
            let entry = (database, key.to_vec());
            if registered.contains(&entry) {
                continue;
            }
            waiters
                .entry(entry.clone())
                .or_default()
                .push((client, notify.clone()));
            self.waiting.fetch_add(1, Ordering::Relaxed);
            registered.push(entry);
        }
        Registration {
            blocked: self,
            client,
            keys: registered,
        }
    }

    /// A list at `key` of `database` was created or grew: wakes every client waiting for it.
    pub fn ready(&self, database: u8, key: &[u8]) {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let waiters = self.waiters.lock();
        if let Some(list) = waiters.get(&(database, key.to_vec())) {
            for (_, notify) in list {
                notify.notify_one();
            }
        }
    }

    /// Number of blocked clients' registrations (INFO `blocked_clients` counts clients).
    pub fn registrations(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// A client's registration under its keys; dropping it removes them.
pub struct Registration<'a> {
    blocked: &'a Blocked,
    client: u64,
    keys: Vec<(u8, Vec<u8>)>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut waiters = self.blocked.waiters.lock();
        for key in &self.keys {
            if let Some(list) = waiters.get_mut(key) {
                list.retain(|(client, _)| *client != self.client);
                if list.is_empty() {
                    waiters.remove(key);
                }
            }
            self.blocked.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // The permit left by `ready` completes the wait at once.
        runtime.block_on(notify.notified());
        drop(registration);
        assert_eq!(blocked.registrations(), 0);
        assert!(blocked.waiters.lock().is_empty());
    }
}
