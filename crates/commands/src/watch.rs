//! WATCH: Redis's optimistic locking. A client watches keys; any write to one of them (by any
//! client, itself included, and deletion by expiry or FLUSHDB) marks the client dirty; its next
//! EXEC then runs nothing and answers a null array, and the client retries.
//!
//! Invariants:
//! - A write that completes after a client's WATCH of its key returned marks that client dirty.
//!   The writer writes the engine, then (SeqCst fence) reads `active`; the watcher raises
//!   `active` (SeqCst), then registers and only then reads the key. Either the writer sees
//!   `active > 0` and looks the key up under its shard lock (the watcher registered under the
//!   same lock, before or after: after means the watcher's read sees the write), or the watcher's
//!   read already sees the write. A write the watcher's own reads saw needs no mark.
//! - EXEC checks the dirty flag while it holds the exec gate exclusively: every write that
//!   finished before holds the gate no more, and it marked its watchers inside its transaction.
//! - A client watches at most `client-query-buffer-limit` bytes of keys (the caller checks), and
//!   every registration is removed when the client unwatches: by EXEC, DISCARD, UNWATCH, RESET,
//!   or when the connection closes.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::CommandError;

/// Registry shards (a power of two): writes to different keys rarely share a lock.
const SHARDS: usize = 64;

/// One client's dirty flag, shared with the registry.
#[derive(Debug, Default)]
pub struct WatchFlag {
    dirty: AtomicBool,
}

impl WatchFlag {
    /// Whether a watched key was written since the client started watching.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::SeqCst)
    }
}

type Watchers = Vec<Arc<WatchFlag>>;
/// One registry shard: the watchers of each (database, key).
type Shard = Mutex<HashMap<(u8, Vec<u8>), Watchers>>;

/// Which clients watch which (database, key).
pub struct Watches {
    /// Registrations in the registry (0: writers skip it without a lock).
    active: AtomicUsize,
    shards: Box<[Shard]>,
}

impl Default for Watches {
    fn default() -> Self {
        Watches {
            active: AtomicUsize::new(0),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

fn shard_of(database: u8, key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, u64::from(database)) as usize) & (SHARDS - 1)
}

impl Watches {
    /// Registers `flag` as watching `key` of `database`. Call before reading the key.
    pub fn watch(&self, flag: &Arc<WatchFlag>, database: u8, key: &[u8]) {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.shards[shard_of(database, key)]
            .lock()
            .entry((database, key.to_vec()))
            .or_default()
            .push(flag.clone());
    }

    /// Removes `flag`'s registration for each of `keys` (as registered by [`Watches::watch`]).
    pub fn unwatch(&self, flag: &Arc<WatchFlag>, keys: &[(u8, Vec<u8>)]) {
        for (database, key) in keys {
            let mut shard = self.shards[shard_of(*database, key)].lock();
            let entry = (*database, key.clone());
            if let Some(watchers) = shard.get_mut(&entry) {
                if let Some(position) = watchers.iter().position(|w| Arc::ptr_eq(w, flag)) {
                    watchers.swap_remove(position);
                    self.active.fetch_sub(1, Ordering::SeqCst);
                }
                if watchers.is_empty() {
                    shard.remove(&entry);
                }
            }
        }
    }

    /// A write to `key` of `database` has been made: marks its watchers dirty. Cheap when nobody
    /// watches anything.
    pub fn touch(&self, database: u8, key: &[u8]) {
        // Orders the caller's engine write before the load (module invariants).
        fence(Ordering::SeqCst);
        if self.active.load(Ordering::SeqCst) == 0 {
            return;
        }
        let shard = self.shards[shard_of(database, key)].lock();
        if let Some(watchers) = shard.get(&(database, key.to_vec())) {
            for watcher in watchers {
                watcher.dirty.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Registrations now held (INFO clients: `total_watched_keys`).
    pub fn registrations(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }
}

/// One connection's watch state.
#[derive(Debug, Default)]
pub struct ClientWatch {
    flag: Arc<WatchFlag>,
    keys: Vec<(u8, Vec<u8>)>,
    key_bytes: u64,
}

impl ClientWatch {
    /// Watches `keys` of `database` unless that would take the watched bytes past
    /// `limit_bytes`; the error to answer otherwise (nothing registered).
    pub fn watch(
        &mut self,
        watches: &Watches,
        database: u8,
        keys: &[&[u8]],
        limit_bytes: u64,
    ) -> Result<(), CommandError> {
        let adding: u64 = keys.iter().map(|key| key.len() as u64 + 1).sum();
        if self.key_bytes + adding > limit_bytes {
            return Err(CommandError::err(format!(
                "too many watched keys: {} bytes would exceed client-query-buffer-limit \
                 ({limit_bytes}); UNWATCH or EXEC first",
                self.key_bytes + adding
            )));
        }
        for key in keys {
            if self.keys.iter().any(|(db, k)| *db == database && k == key) {
                continue;
            }
            watches.watch(&self.flag, database, key);
            self.keys.push((database, key.to_vec()));
            self.key_bytes += key.len() as u64 + 1;
        }
        Ok(())
    }

    /// The watched (database, key) pairs.
    pub fn keys(&self) -> &[(u8, Vec<u8>)] {
        &self.keys
    }

    /// Whether any key is watched.
    pub fn is_watching(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether a watched key was written since it was watched.
    pub fn is_dirty(&self) -> bool {
        self.flag.is_dirty()
    }

    /// Forgets every watched key and starts clean.
    pub fn unwatch_all(&mut self, watches: &Watches) {
        if !self.keys.is_empty() {
            watches.unwatch(&self.flag, &self.keys);
        }
        self.keys.clear();
        self.key_bytes = 0;
        self.flag = Arc::new(WatchFlag::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_marks_exactly_the_watchers_of_that_key_and_unwatch_cleans_up() {
        let watches = Watches::default();
        let (mut a, mut b) = (ClientWatch::default(), ClientWatch::default());
        a.watch(&watches, 0, &[b"x", b"y"], 1 << 20).unwrap();
        b.watch(&watches, 1, &[b"x"], 1 << 20).unwrap();
        assert_eq!(watches.registrations(), 3);
        watches.touch(0, b"z");
        watches.touch(1, b"y");
        assert!(!a.is_dirty() && !b.is_dirty());
        watches.touch(0, b"y");
        assert!(a.is_dirty() && !b.is_dirty());
        a.unwatch_all(&watches);
        assert!(!a.is_dirty());
        assert_eq!(watches.registrations(), 1);
        watches.touch(0, b"x");
        assert!(!a.is_dirty() && !b.is_dirty());
        b.unwatch_all(&watches);
        assert_eq!(watches.registrations(), 0);
        assert!(watches.shards.iter().all(|shard| shard.lock().is_empty()));
    }

    #[test]
    fn watched_bytes_are_bounded_and_a_repeat_is_one_registration() {
        let watches = Watches::default();
        let mut client = ClientWatch::default();
        client.watch(&watches, 0, &[b"abc", b"abc"], 8).unwrap();
        assert_eq!(watches.registrations(), 1);
        let error = client.watch(&watches, 0, &[b"defgh"], 8).unwrap_err();
        assert!(
            error.to_string().contains("too many watched keys"),
            "{error}"
        );
        assert_eq!(watches.registrations(), 1);
        client.unwatch_all(&watches);
        assert_eq!(watches.registrations(), 0);
    }
}
