//! The public map types: [`CTrie`] (writable, shared between threads by reference) and
//! [`ReadOnlySnapshot`] (frozen).
//!
//! Both snapshots are O(1): one RDCSS on the root plus one or two new INodes; everything below
//! the root is shared and copied lazily by later writers (see `ops`).

use crate::iter::{Iter, Leaves};
use crate::node::{new_generation, CNode, INode, Kind, Leaf, MainNode};
use crate::ops::{Condition, Updated};
use crate::protocol::Core;
use crate::sync::{clone_arc, pin, Guard};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, OnceLock};

/// The default hasher: foldhash's quality variant, a fast 64-bit hash whose every bit is well
/// mixed (the trie consumes all 64 bits, 6 per level), randomly seeded per map.
pub type DefaultHashBuilder = foldhash::quality::RandomState;

/// A concurrent hash trie with O(1) consistent snapshots (Prokopec et al., PPoPP 2012).
///
/// All operations take `&self` and are lock-free and linearizable; share a `CTrie` between
/// threads by reference (or `Arc`). Values are returned as clones, so cheap-to-clone values
/// (`Arc<T>`, small `Copy` types) suit it best.
pub struct CTrie<K, V, S = DefaultHashBuilder> {
    pub(crate) core: Core<K, V, S>,
}

/// A frozen, read-only view of a [`CTrie`] at one instant, taken in O(1) by
/// [`CTrie::read_only_snapshot`]. It never changes, whatever happens to the trie afterwards;
/// [`ReadOnlySnapshot::len`] and iteration are exact for that instant.
pub struct ReadOnlySnapshot<K, V, S = DefaultHashBuilder> {
    pub(crate) core: Arc<Core<K, V, S>>,
    len: OnceLock<usize>,
}

/// What a snapshot's RDCSS left behind: the old root INode (now the snapshot's) and the main
/// node it pointed at (now shared by every trie of the family).
struct Frozen<K, V> {
    old_root: Arc<INode<K, V>>,
    main: Arc<MainNode<K, V>>,
}

fn empty_root<K, V>(generation: u64) -> Arc<INode<K, V>> {
    let main = MainNode::new(Kind::Branches(CNode::empty(generation)));
    Arc::new(INode::new(generation, Arc::new(main)))
}

impl<K, V> CTrie<K, V, DefaultHashBuilder>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty trie with the default (randomly seeded) hasher.
    pub fn new() -> Self {
        Self::with_hasher(DefaultHashBuilder::default())
    }
}

impl<K, V> Default for CTrie<K, V, DefaultHashBuilder>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, S> CTrie<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Clone,
{
    /// An empty trie hashing keys with `hasher` (which must give equal keys equal hashes).
    pub fn with_hasher(hasher: S) -> Self {
        CTrie {
            core: Core::new(empty_root(new_generation()), false, hasher),
        }
    }

    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.core.hasher.hash_one(key)
    }

    /// The value of `key`, if present.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        lookup(&self.core, key, self.hash(key))
    }

    /// True if `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    fn update(&self, key: K, value: V, condition: Condition<'_, V>) -> Updated<V> {
        let leaf = Arc::new(Leaf::new(self.hash(&key), key, value));
        let guard = pin();
        loop {
            let root = self.core.read_root(false, &guard);
            if let Some(updated) = self.core.insert(root, &leaf, &condition, &guard) {
                return updated;
            }
        }
    }

    /// Sets `key` to `value`; returns the previous value.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        self.update(key, value, Condition::Always).previous
    }

    /// Sets `key` to `value` only if `key` is absent; returns the value already there (then
    /// nothing changed) or `None` (then `value` was inserted). Atomic.
    pub fn put_if_absent(&self, key: K, value: V) -> Option<V> {
        self.update(key, value, Condition::IfAbsent).previous
    }

    /// Sets `key` to `value` only if `key` is present; returns the replaced value, or `None`
    /// (then nothing changed). Atomic.
    pub fn replace(&self, key: K, value: V) -> Option<V> {
        self.update(key, value, Condition::IfPresent).previous
    }

    /// Sets `key` to `new` only if its current value equals `expected`; true if it did. Atomic.
    pub fn compare_and_replace(&self, key: K, expected: &V, new: V) -> bool
    where
        V: PartialEq,
    {
        let test = |current: &V| current == expected;
        self.update(key, new, Condition::IfValue(&test)).applied
    }

    fn remove_with<Q>(&self, key: &Q, condition: Condition<'_, V>) -> Updated<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let guard = pin();
        loop {
            let root = self.core.read_root(false, &guard);
            if let Some(updated) = self.core.remove(root, key, hash, &condition, &guard) {
                return updated;
            }
        }
    }

    /// Removes `key`; returns its value if it was present.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_with(key, Condition::Always).previous
    }

    /// Removes `key` only if its value equals `expected`; true if it did. Atomic.
    pub fn remove_if<Q>(&self, key: &Q, expected: &V) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        V: PartialEq,
    {
        let test = |current: &V| current == expected;
        self.remove_with(key, Condition::IfValue(&test)).applied
    }

    /// Installs a fresh root INode in a new generation over the current main node (RDCSS) and
    /// returns the old root INode and that main node. Both tries now share the subtree.
    fn freeze_root(&self, guard: &Guard) -> Frozen<K, V> {
        loop {
            let (root, root_pointer) = self.core.read_root_pointer(guard);
            let expected = self.core.gcas_read(root, guard);
            // SAFETY: `expected` came from `gcas_read` under `guard`.
            let expected_count = unsafe { clone_arc(std::ptr::from_ref(expected)) };
            let live_root = Arc::new(INode::new(new_generation(), expected_count.clone()));
            if self
                .core
                .rdcss_root(root_pointer, expected, live_root, guard)
            {
                // SAFETY: the old root is protected by `guard` (its retirement was deferred).
                return Frozen {
                    old_root: unsafe { clone_arc(root_pointer) },
                    main: expected_count,
                };
            }
        }
    }

    /// A writable copy of the trie as it is at this instant, in O(1). Later changes to either
    /// trie are invisible to the other; they share nodes until one of them writes there.
    pub fn snapshot(&self) -> CTrie<K, V, S> {
        let guard = pin();
        let frozen = self.freeze_root(&guard);
        let root = Arc::new(INode::new(new_generation(), frozen.main));
        CTrie {
            core: Core::new(root, false, self.core.hasher.clone()),
        }
    }

    /// A frozen view of the trie as it is at this instant, in O(1).
    pub fn read_only_snapshot(&self) -> ReadOnlySnapshot<K, V, S> {
        let guard = pin();
        let old_root = self.freeze_root(&guard).old_root;
        ReadOnlySnapshot {
            core: Arc::new(Core::new(old_root, true, self.core.hasher.clone())),
            len: OnceLock::new(),
        }
    }

    /// Removes every entry (atomically: one RDCSS to an empty root). Snapshots keep theirs.
    pub fn clear(&self) {
        let guard = pin();
        loop {
            let (root, root_pointer) = self.core.read_root_pointer(&guard);
            let expected = self.core.gcas_read(root, &guard);
            if self
                .core
                .rdcss_root(root_pointer, expected, empty_root(new_generation()), &guard)
            {
                return;
            }
        }
    }

    /// The number of entries at one instant: counts a read-only snapshot, so O(n).
    pub fn len(&self) -> usize {
        self.read_only_snapshot().len()
    }

    /// True if the trie has no entries at this instant.
    pub fn is_empty(&self) -> bool {
        self.read_only_snapshot().is_empty()
    }

    /// Iterates over the entries of a read-only snapshot taken now (so the iteration is
    /// consistent, whatever other threads do meanwhile).
    pub fn iter(&self) -> Iter<K, V, S> {
        self.read_only_snapshot().iter()
    }
}

fn lookup<K, V, S, Q>(core: &Core<K, V, S>, key: &Q, hash: u64) -> Option<V>
where
    K: Eq + Clone + Send + Sync + 'static + Borrow<Q>,
    V: Clone + Send + Sync + 'static,
    Q: Eq + ?Sized,
{
    let guard = pin();
    loop {
        let root = core.read_root(false, &guard);
        if let Some(found) = core.lookup(root, key, hash, &guard) {
            return found;
        }
    }
}

impl<K, V, S> ReadOnlySnapshot<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Clone,
{
    /// The value `key` had when the snapshot was taken.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        lookup(&self.core, key, self.core.hasher.hash_one(key))
    }

    /// True if `key` was present when the snapshot was taken.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// The number of entries (counted once, O(n), then cached: the snapshot never changes).
    pub fn len(&self) -> usize {
        *self
            .len
            .get_or_init(|| Leaves::new(self.core.clone()).count())
    }

    /// True if the snapshot has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Iterates over the snapshot's entries (clones of keys and values), in hash order.
    pub fn iter(&self) -> Iter<K, V, S> {
        Iter::new(Leaves::new(self.core.clone()))
    }
}

impl<K, V, S> IntoIterator for &ReadOnlySnapshot<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Clone,
{
    type Item = (K, V);
    type IntoIter = Iter<K, V, S>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K, V, S> std::fmt::Debug for CTrie<K, V, S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CTrie").finish_non_exhaustive()
    }
}

impl<K, V, S> std::fmt::Debug for ReadOnlySnapshot<K, V, S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ReadOnlySnapshot")
            .field("len", &self.len.get())
            .finish_non_exhaustive()
    }
}
