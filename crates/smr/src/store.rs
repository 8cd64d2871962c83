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
        KvStore { inner }
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
                trie.insert(key, value);
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
                    trie.insert(key, value.into());
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
            Inner::Concurrent(trie) => trie.remove(key).is_some(),
        }
    }

    pub(crate) fn clear(&self) {
        match &self.inner {
            Inner::Blocking(map) => map.write().expect("state lock poisoned").clear(),
            Inner::Concurrent(trie) => trie.clear(),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Blocking(map) => map.read().expect("state lock poisoned").len(),
            Inner::Concurrent(trie) => trie.len(),
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
