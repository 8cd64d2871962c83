//! The two state models of the replicated key-value store.
//!
//! - [`StateModel::Blocking`]: a `BTreeMap` behind a `RwLock`. A checkpoint serializes it on the
//!   apply task, so applying stops until the file is written and fsynced (the baseline).
//! - [`StateModel::Concurrent`]: a [`CTrie`]. A checkpoint takes an O(1) read-only snapshot on the
//!   apply task, at the exact log index, and a background thread writes it while applying goes on.
//!
//! Invariant: only the state machine's apply task (openraft's state-machine worker) mutates the
//! store; client reads go through `get` concurrently (the CTrie is lock-free; the map takes a read
//! lock).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use prefixkv_ctrie::{CTrie, ReadOnlySnapshot};

/// Which data structure holds the state, and so how checkpoints interfere with applying.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum StateModel {
    /// `BTreeMap`; checkpoints stop applying until they are durable.
    Blocking,
    /// CTrie; checkpoints write an O(1) snapshot in the background.
    Concurrent,
}

impl StateModel {
    /// The model's name as the CLI and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            StateModel::Blocking => "blocking",
            StateModel::Concurrent => "concurrent",
        }
    }
}

/// A value as stored: shared, so reads and snapshots clone a pointer, not the bytes.
pub type Value = Arc<[u8]>;

/// The key-value state of one replica.
pub struct KvStore {
    inner: Inner,
    /// Keys of the concurrent model, kept by every write: counting a CTrie takes a snapshot and
    /// walks it (O(n)), and SMR.STATUS, which every client asks when it looks for the leader,
    /// reports the count. With 2 M keys, a dozen clients' lookups held the replica's runtime for
    /// seconds. Every mutation goes through `set`, `set_many`, `remove` and `clear` below.
    concurrent_keys: std::sync::atomic::AtomicI64,
}

enum Inner {
    Blocking(RwLock<BTreeMap<Vec<u8>, Value>>),
    Concurrent(CTrie<Vec<u8>, Value>),
}

/// A frozen view for a checkpoint writer thread (concurrent model only).
pub type FrozenState = ReadOnlySnapshot<Vec<u8>, Value>;

/// An order-independent digest of a state: equal states have equal digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StateDigest {
    /// Number of keys.
    pub keys: u64,
    /// Wrapping sum of a fixed-key SipHash of every (key, value) pair.
    pub sum: u64,
}

impl KvStore {
    /// An empty store of the given model.
    pub fn new(model: StateModel) -> Self {
        let inner = match model {
            StateModel::Blocking => Inner::Blocking(RwLock::new(BTreeMap::new())),
            StateModel::Concurrent => Inner::Concurrent(CTrie::new()),
        };
        KvStore {
            inner,
            concurrent_keys: std::sync::atomic::AtomicI64::new(0),
        }
    }

    fn count_concurrent(&self, added: bool, removed: bool) {
        let delta = i64::from(added) - i64::from(removed);
        if delta != 0 {
            self.concurrent_keys
                .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The model.
    pub fn model(&self) -> StateModel {
        match self.inner {
            Inner::Blocking(_) => StateModel::Blocking,
            Inner::Concurrent(_) => StateModel::Concurrent,
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Value> {
        match &self.inner {
            Inner::Blocking(map) => map.read().expect("state lock poisoned").get(key).cloned(),
            Inner::Concurrent(trie) => trie.get(key),
        }
    }

    pub(crate) fn set(&self, key: Vec<u8>, value: Value) {
        match &self.inner {
            Inner::Blocking(map) => {
                map.write().expect("state lock poisoned").insert(key, value);
            }
            Inner::Concurrent(trie) => {
                let added = trie.insert(key, value).is_none();
                self.count_concurrent(added, false);
            }
        }
    }

    pub(crate) fn set_many(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>) {
        match &self.inner {
            Inner::Blocking(map) => {
                let mut map = map.write().expect("state lock poisoned");
                for (key, value) in pairs {
                    map.insert(key, value.into());
                }
            }
            Inner::Concurrent(trie) => {
                for (key, value) in pairs {
                    let added = trie.insert(key, value.into()).is_none();
                    self.count_concurrent(added, false);
                }
            }
        }
    }

    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        match &self.inner {
            Inner::Blocking(map) => map
                .write()
                .expect("state lock poisoned")
                .remove(key)
                .is_some(),
            Inner::Concurrent(trie) => {
                let removed = trie.remove(key).is_some();
                self.count_concurrent(false, removed);
                removed
            }
        }
    }

    pub(crate) fn clear(&self) {
        match &self.inner {
            Inner::Blocking(map) => map.write().expect("state lock poisoned").clear(),
            Inner::Concurrent(trie) => {
                trie.clear();
                self.concurrent_keys
                    .store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Blocking(map) => map.read().expect("state lock poisoned").len(),
            Inner::Concurrent(_) => self
                .concurrent_keys
                .load(std::sync::atomic::Ordering::Relaxed)
                .max(0) as usize,
        }
    }

    /// True if there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An O(1) frozen view (concurrent model); `None` for the blocking model.
    pub(crate) fn freeze(&self) -> Option<FrozenState> {
        match &self.inner {
            Inner::Blocking(_) => None,
            Inner::Concurrent(trie) => Some(trie.read_only_snapshot()),
        }
    }

    /// Calls `visit` for every pair of a consistent view of the state. For the blocking model it
    /// holds the read lock throughout, which is what makes that model block writers.
    pub(crate) fn for_each<E>(
        &self,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        match &self.inner {
            Inner::Blocking(map) => {
                let map = map.read().expect("state lock poisoned");
                map.iter().try_for_each(|(key, value)| visit(key, value))
            }
            Inner::Concurrent(trie) => {
                let frozen = trie.read_only_snapshot();
                frozen
                    .iter()
                    .try_for_each(|(key, value)| visit(&key, &value))
            }
        }
    }

    /// The digest of a consistent view of the state (used to compare replicas).
    pub fn digest(&self) -> StateDigest {
        let mut digest = StateDigest { keys: 0, sum: 0 };
        let _ = self.for_each::<()>(|key, value| {
            digest.keys += 1;
            digest.sum = digest.sum.wrapping_add(pair_hash(key, value));
            Ok(())
        });
        digest
    }
}

/// A hash of one pair that is the same in every process (SipHash with fixed keys).
pub fn pair_hash(key: &[u8], value: &[u8]) -> u64 {
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new_with_keys(0x7072_6566_6978, 0x006b_7673_6d72);
    key.hash(&mut hasher);
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept count of the concurrent model is the count a full walk finds, through every
    /// kind of write (new keys, overwrites, removals of present and absent keys, bulk loads,
    /// clear); and the blocking model reports the same.
    #[test]
    fn key_counts_match_a_walk() {
        for model in [StateModel::Concurrent, StateModel::Blocking] {
            let store = KvStore::new(model);
            for i in 0..500u32 {
                store.set(i.to_le_bytes().to_vec(), vec![1].into());
            }
            for i in 250..750u32 {
                store.set(i.to_le_bytes().to_vec(), vec![2].into());
            }
            for i in (0..1000u32).step_by(3) {
                store.remove(&i.to_le_bytes());
            }
            store.set_many(
                (700..900u32)
                    .map(|i| (i.to_le_bytes().to_vec(), vec![3]))
                    .collect(),
            );
            assert_eq!(store.len() as u64, store.digest().keys, "{model:?}");
            store.clear();
            assert_eq!(store.len(), 0);
            store.set(b"k".to_vec(), vec![4].into());
            assert_eq!(store.len() as u64, store.digest().keys, "{model:?}");
        }
    }
}
