//! The nodes of the trie and the pure (allocation-only) operations on them.
//!
//! Shape: the root is an [`INode`]; an INode's `main` is a [`MainNode`], which is a CNode
//! ([`Kind::Branches`]), a TNode ([`Kind::Tomb`]), an LNode ([`Kind::List`]) or, only inside
//! GCAS, a FailedNode ([`Kind::Failed`]). A CNode's branches are INodes or SNodes.
//!
//! Invariants:
//! - Everything but `INode::main` and `MainNode::prev` is immutable once published; an update
//!   builds a new main node and swings one `main` pointer with GCAS.
//! - Every node is reference counted (`Arc`): the live trie and its snapshots share subtrees, so
//!   a node stays alive while *any* trie (or a pending deferred release) still counts it.
//! - Hashes are 64 bits, consumed [`BITS_PER_LEVEL`] = 6 bits per level from the lowest bits up,
//!   so a CNode has at most 64 branches and a `u64` bitmap. Levels are 0, 6, …, 60 (the last one
//!   uses the 4 remaining bits); two different hashes always part at some level ≤ 60, and two
//!   keys with the same full hash meet in an LNode (created at level [`LIST_LEVEL`]).
//! - A non-root CNode never holds a single SNode and nothing else once an update has finished:
//!   such a CNode is *contracted* into a TNode, which the parent later *compresses* back into
//!   a plain SNode.

use crate::sync::{AtomicPtr, AtomicU8};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Hash bits consumed per trie level.
pub(crate) const BITS_PER_LEVEL: u32 = 6;
/// Branches per CNode (one bit of the bitmap each).
pub(crate) const BRANCHING: u32 = 1 << BITS_PER_LEVEL;
/// The first level past the 64 hash bits: keys that still collide here share an LNode.
pub(crate) const LIST_LEVEL: u32 = 66;

/// A generation: a value of the global counter in [`new_generation`], never an address.
pub(crate) type Generation = u64;

static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A fresh, never before used generation.
pub(crate) fn new_generation() -> Generation {
    // Uniqueness is all that matters; the counter is not part of the GCAS/RDCSS protocol, so a
    // plain std atomic is fine even under loom and shuttle.
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

/// Nodes alive now, counted only in builds with debug assertions (the test profile), so the
/// leak tests can check that it returns to zero; release builds pay nothing.
#[cfg(debug_assertions)]
static LIVE_NODES: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// One count in [`LIVE_NODES`] for as long as the node holding it lives.
pub(crate) struct Tally(());

impl Tally {
    pub(crate) fn new() -> Tally {
        #[cfg(debug_assertions)]
        LIVE_NODES.fetch_add(1, Ordering::Relaxed);
        Tally(())
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        LIVE_NODES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Nodes (INodes, main nodes, leaves, RDCSS descriptors) alive in the whole process, or `None`
/// in builds without debug assertions. For leak tests only.
#[doc(hidden)]
pub fn debug_live_nodes() -> Option<isize> {
    #[cfg(debug_assertions)]
    return Some(LIVE_NODES.load(Ordering::SeqCst));
    #[cfg(not(debug_assertions))]
    return None;
}

/// A key-value pair with the key's hash (an SNode); immutable.
pub(crate) struct Leaf<K, V> {
    pub(crate) hash: u64,
    pub(crate) key: K,
    pub(crate) value: V,
    _tally: Tally,
}

impl<K, V> Leaf<K, V> {
    pub(crate) fn new(hash: u64, key: K, value: V) -> Leaf<K, V> {
        Leaf {
            hash,
            key,
            value,
            _tally: Tally::new(),
        }
    }
}

/// An indirection node: the only mutable cell below the root.
pub(crate) struct INode<K, V> {
    pub(crate) generation: Generation,
    /// Owns one strong count of an `Arc<MainNode>` (see `sync`'s retirement rule).
    pub(crate) main: AtomicPtr<MainNode<K, V>>,
    _tally: Tally,
}

impl<K, V> INode<K, V> {
    pub(crate) fn new(generation: Generation, main: Arc<MainNode<K, V>>) -> INode<K, V> {
        INode {
            generation,
            main: AtomicPtr::new(Arc::into_raw(main).cast_mut()),
            _tally: Tally::new(),
        }
    }
}

impl<K, V> Drop for INode<K, V> {
    fn drop(&mut self) {
        // `&mut self`: nobody else can reach this INode any more, so its count on the main node
        // can go at once (a reader pinned earlier that reached the main node through this INode
        // reached this INode through a node whose own release was deferred past that reader).
        let main = self.main.load(Ordering::Relaxed);
        // SAFETY: `main` always holds exactly one count from `Arc::into_raw`.
        drop(unsafe { Arc::from_raw(main) });
    }
}

/// A branch of a CNode.
pub(crate) enum Branch<K, V> {
    Indirect(Arc<INode<K, V>>),
    Single(Arc<Leaf<K, V>>),
}

impl<K, V> Clone for Branch<K, V> {
    fn clone(&self) -> Self {
        match self {
            Branch::Indirect(inode) => Branch::Indirect(inode.clone()),
            Branch::Single(leaf) => Branch::Single(leaf.clone()),
        }
    }
}

/// A bitmap-indexed array of up to 64 branches (a CNode).
pub(crate) struct CNode<K, V> {
    pub(crate) bitmap: u64,
    pub(crate) branches: Box<[Branch<K, V>]>,
    pub(crate) generation: Generation,
}

/// Where a hash falls in a CNode at `level`: its bitmap flag and its array position.
#[inline]
pub(crate) fn locate(bitmap: u64, hash: u64, level: u32) -> (u64, usize) {
    debug_assert!(level < 64, "CNodes exist only at levels 0..=60");
    let index = (hash >> level) & u64::from(BRANCHING - 1);
    let flag = 1u64 << index;
    (flag, (bitmap & (flag - 1)).count_ones() as usize)
}

impl<K, V> CNode<K, V> {
    pub(crate) fn empty(generation: Generation) -> CNode<K, V> {
        CNode {
            bitmap: 0,
            branches: Box::new([]),
            generation,
        }
    }

    /// This CNode with the branch at `position` replaced.
    pub(crate) fn updated_at(
        &self,
        position: usize,
        branch: Branch<K, V>,
        generation: Generation,
    ) -> CNode<K, V> {
        let mut branches = self.branches.to_vec();
        branches[position] = branch;
        CNode {
            bitmap: self.bitmap,
            branches: branches.into_boxed_slice(),
            generation,
        }
    }

    /// This CNode with `branch` added under the (clear) bitmap bit `flag` at `position`.
    pub(crate) fn inserted_at(
        &self,
        position: usize,
        flag: u64,
        branch: Branch<K, V>,
        generation: Generation,
    ) -> CNode<K, V> {
        debug_assert_eq!(self.bitmap & flag, 0);
        let mut branches = Vec::with_capacity(self.branches.len() + 1);
        branches.extend_from_slice(&self.branches[..position]);
        branches.push(branch);
        branches.extend_from_slice(&self.branches[position..]);
        CNode {
            bitmap: self.bitmap | flag,
            branches: branches.into_boxed_slice(),
            generation,
        }
    }

    /// This CNode without the branch under bit `flag` at `position`.
    pub(crate) fn removed_at(
        &self,
        position: usize,
        flag: u64,
        generation: Generation,
    ) -> CNode<K, V> {
        debug_assert_ne!(self.bitmap & flag, 0);
        let mut branches = self.branches.to_vec();
        branches.remove(position);
        CNode {
            bitmap: self.bitmap & !flag,
            branches: branches.into_boxed_slice(),
            generation,
        }
    }

    /// Contraction: a non-root CNode left with one SNode and nothing else becomes a TNode, so the
    /// parent can pull the entry up a level.
    pub(crate) fn contracted(self, level: u32) -> MainNode<K, V> {
        if level > 0 && self.branches.len() == 1 {
            if let Branch::Single(leaf) = &self.branches[0] {
                return MainNode::new(Kind::Tomb(leaf.clone()));
            }
        }
        MainNode::new(Kind::Branches(self))
    }
}

/// Entries whose full 64-bit hashes collide (an LNode); never fewer than two.
pub(crate) struct ListNode<K, V> {
    pub(crate) entries: Vec<Arc<Leaf<K, V>>>,
}

impl<K: Eq, V> ListNode<K, V> {
    pub(crate) fn find<Q>(&self, key: &Q) -> Option<&Arc<Leaf<K, V>>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.entries.iter().find(|leaf| leaf.key.borrow() == key)
    }

    /// The list with `leaf` added, or replacing the entry with the same key.
    pub(crate) fn inserted(&self, leaf: Arc<Leaf<K, V>>) -> ListNode<K, V> {
        debug_assert!(self.entries.iter().all(|entry| entry.hash == leaf.hash));
        let mut entries: Vec<Arc<Leaf<K, V>>> = self
            .entries
            .iter()
            .filter(|entry| entry.key != leaf.key)
            .cloned()
            .collect();
        entries.push(leaf);
        ListNode { entries }
    }

    /// The main node left after removing `key`: an LNode, or a TNode once one entry is left.
    pub(crate) fn removed<Q>(&self, key: &Q) -> MainNode<K, V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let entries: Vec<Arc<Leaf<K, V>>> = self
            .entries
            .iter()
            .filter(|entry| entry.key.borrow() != key)
            .cloned()
            .collect();
        debug_assert!(
            !entries.is_empty(),
            "an LNode always holds at least two entries"
        );
        if entries.len() == 1 {
            MainNode::new(Kind::Tomb(entries[0].clone()))
        } else {
            MainNode::new(Kind::List(ListNode { entries }))
        }
    }
}

/// What a main node is.
pub(crate) enum Kind<K, V> {
    /// A CNode.
    Branches(CNode<K, V>),
    /// A TNode: the INode holding it is dead; its one entry belongs in the parent.
    Tomb(Arc<Leaf<K, V>>),
    /// An LNode.
    List(ListNode<K, V>),
    /// A FailedNode: only ever stored in a `prev` field; wraps the main node to roll back to.
    Failed(Arc<MainNode<K, V>>),
}

/// A node an INode can point at, with GCAS's `prev` field.
pub(crate) struct MainNode<K, V> {
    /// Null once the GCAS that installed this node committed; otherwise the node it replaced
    /// (still undecided) or a FailedNode wrapping it (aborted). Owns one count when non-null.
    pub(crate) prev: AtomicPtr<MainNode<K, V>>,
    pub(crate) kind: Kind<K, V>,
    _tally: Tally,
}

impl<K, V> MainNode<K, V> {
    pub(crate) fn new(kind: Kind<K, V>) -> MainNode<K, V> {
        MainNode {
            prev: AtomicPtr::new(std::ptr::null_mut()),
            kind,
            _tally: Tally::new(),
        }
    }
}

impl<K, V> Drop for MainNode<K, V> {
    fn drop(&mut self) {
        let prev = self.prev.load(Ordering::Relaxed);
        if !prev.is_null() {
            // SAFETY: a non-null `prev` owns one count from `Arc::into_raw`; `&mut self` means no
            // reader can still be following it (readers reach this node only while it is counted).
            drop(unsafe { Arc::from_raw(prev) });
        }
    }
}

/// Builds the subtree holding two leaves with different keys that met at `level`: a chain of
/// CNodes down to the level where their hashes part, or an LNode if the full hashes are equal.
pub(crate) fn dual<K, V>(
    first: Arc<Leaf<K, V>>,
    second: Arc<Leaf<K, V>>,
    level: u32,
    generation: Generation,
) -> MainNode<K, V> {
    if level >= 64 {
        debug_assert_eq!(level, LIST_LEVEL);
        debug_assert_eq!(first.hash, second.hash);
        return MainNode::new(Kind::List(ListNode {
            entries: vec![first, second],
        }));
    }
    let mask = u64::from(BRANCHING - 1);
    let first_index = (first.hash >> level) & mask;
    let second_index = (second.hash >> level) & mask;
    let bitmap = (1u64 << first_index) | (1u64 << second_index);
    let branches: Box<[Branch<K, V>]> = if first_index == second_index {
        let below = dual(first, second, level + BITS_PER_LEVEL, generation);
        Box::new([Branch::Indirect(Arc::new(INode::new(
            generation,
            Arc::new(below),
        )))])
    } else if first_index < second_index {
        Box::new([Branch::Single(first), Branch::Single(second)])
    } else {
        Box::new([Branch::Single(second), Branch::Single(first)])
    };
    MainNode::new(Kind::Branches(CNode {
        bitmap,
        branches,
        generation,
    }))
}

/// Outcome of an RDCSS descriptor: decided once by a CAS, so whoever asks later agrees.
pub(crate) const UNDECIDED: u8 = 0;
/// The root was (or will be) swung to the new INode.
pub(crate) const COMMITTED: u8 = 1;
/// The root was (or will be) put back to the old INode.
pub(crate) const ABORTED: u8 = 2;

/// An RDCSS descriptor in the root slot: "swing the root from `old` to `new` if `old`'s main
/// node is still `expected`".
pub(crate) struct Descriptor<K, V> {
    pub(crate) old: Arc<INode<K, V>>,
    /// Held (not just compared) so its address cannot be reused while the descriptor exists.
    pub(crate) expected: Arc<MainNode<K, V>>,
    pub(crate) new: Arc<INode<K, V>>,
    /// UNDECIDED, COMMITTED or ABORTED. Deciding is a CAS from UNDECIDED, which is what makes the
    /// owner's "did my snapshot commit?" answer race-free (the Go port's bug #122).
    pub(crate) state: AtomicU8,
    _tally: Tally,
}

impl<K, V> Descriptor<K, V> {
    pub(crate) fn new(
        old: Arc<INode<K, V>>,
        expected: Arc<MainNode<K, V>>,
        new: Arc<INode<K, V>>,
    ) -> Self {
        Descriptor {
            old,
            expected,
            new,
            state: AtomicU8::new(UNDECIDED),
            _tally: Tally::new(),
        }
    }
}

impl<K, V> Descriptor<K, V> {
    /// Decides the descriptor as `wanted` unless it is decided already; returns the decision.
    pub(crate) fn decide(&self, wanted: u8) -> u8 {
        match self
            .state
            .compare_exchange(UNDECIDED, wanted, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => wanted,
            Err(decided) => decided,
        }
    }
}
