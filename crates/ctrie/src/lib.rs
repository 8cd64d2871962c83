//! `prefixkv-ctrie`: a concurrent hash trie with O(1) consistent snapshots.
//!
//! This is Prokopec, Bronson, Bagwell and Odersky's CTrie ("Concurrent Tries with Efficient
//! Non-Blocking Snapshots", PPoPP 2012), the state store of SMaRtTrie-style replicated state
//! machines: a checkpoint takes a [`ReadOnlySnapshot`] in O(1) on the executor thread and hands
//! it to a writer thread, while commands keep running against the live [`CTrie`].
//!
//! ```
//! use prefixkv_ctrie::CTrie;
//! let trie = CTrie::new();
//! trie.insert(1u64, "one");
//! let frozen = trie.read_only_snapshot();
//! trie.insert(2, "two");
//! assert_eq!(frozen.len(), 1);
//! assert_eq!(trie.len(), 2);
//! ```
//!
//! # Algorithm (see `docs/ctrie.md` for the long form)
//! INodes are the only mutable cells below the root; they point at immutable main nodes
//! (CNode, TNode, LNode). An update builds a new main node and installs it with **GCAS**, a CAS
//! that commits only if the trie's root generation still equals the INode's. A snapshot is an
//! **RDCSS** on the root that installs a fresh root INode of a new generation over the same
//! main node: after it, every old INode belongs to the snapshot and is *renewed* (copied into the
//! new generation) by the first writer that passes it. Generations are values of a global
//! counter, never addresses. A SeqCst fence sits between GCAS's CAS on `main` and its read of
//! the root, and between RDCSS's CAS on the root and its read of `main` (loom found the store
//! buffering that breaks snapshots without them). Hashes are 64 bits, 6 bits per level (64-way CNodes with a `u64`
//! bitmap; Scala's TrieMap uses 32-bit hashes, 5 bits per level); full-hash collisions go to
//! LNodes.
//!
//! # Guarantees
//! - Every operation is linearizable and lock-free (a thread that meets another's half-done
//!   GCAS or RDCSS finishes or aborts it rather than waiting).
//! - A snapshot equals the map at a single instant between the call and its return; later
//!   changes to the trie are invisible in the snapshot and vice versa.
//! - `get`/`insert`/`remove` cost O(log₆₄ n) node visits plus one CNode copy (≤ 64 branches);
//!   the first write after a snapshot also renews the CNodes on its path.
//!
//! # Memory reclamation
//! The live trie and its snapshots *share* nodes, so "unlinked from this trie" does not mean
//! "garbage". Ownership is therefore reference counting, with epochs only to protect loads:
//! 1. Every node is an `Arc`. Immutable links (CNode branches, TNode/LNode entries, a
//!    FailedNode's wrapped node, a descriptor's fields) are ordinary `Arc`s.
//! 2. Each mutable link (`INode::main`, `MainNode::prev`, the root slot) is an atomic raw pointer
//!    that owns exactly one strong count of its target.
//! 3. Readers pin a crossbeam-epoch guard before loading any mutable link and use the loaded
//!    pointers only while pinned (or after taking their own count, as iterators do).
//! 4. A successful CAS on a mutable link hands the new target's count to the link and *defers*
//!    the release of the old target's count to the epoch GC (`defer_release`). A failed CAS
//!    drops the never-published new node at once.
//!
//! Why no use-after-free: a pointer a reader loaded from a mutable link was counted by that
//! link when loaded; the link's release of that count runs only after every thread pinned at
//! the time of the CAS has unpinned, so it happens after the reader is done. Everything the
//! reader reaches *through* that node is kept alive by the node's own (immutable) `Arc`s,
//! transitively, and nodes whose count drops to zero inside a deferred release were reachable
//! only through links released after the reader unpinned. Why no leak and no double free: each
//! count has exactly one owner (a link, an immutable parent, or one deferred release), every
//! count is released once by that owner, and the graph has no cycles (`prev` points only to
//! older nodes, and a committed node's `prev` is null). A node reachable from another snapshot's
//! root is counted by that snapshot's nodes, so one trie replacing it only drops one count.
//! Dropping a trie releases its root's count at once (no thread can be inside it).
//!
//! # Model checking
//! - loom (GCAS/RDCSS on tiny tries):
//!   `RUSTFLAGS="--cfg loom" cargo test -p prefixkv-ctrie --release --lib loom`
//! - shuttle (randomised schedules of larger scenarios):
//!   `RUSTFLAGS="--cfg shuttle" cargo test -p prefixkv-ctrie --release --lib shuttle`
//!
//! Both swap the atomics in the `sync` module; normal builds use `std` atomics.

#![warn(missing_docs)]

mod iter;
mod map;
mod node;
mod ops;
mod protocol;
mod sync;

#[cfg(all(test, not(loom)))]
mod lincheck;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, shuttle, not(loom)))]
mod shuttle_tests;
#[cfg(test)]
mod unit_tests;

pub use iter::Iter;
pub use map::{CTrie, DefaultHashBuilder, ReadOnlySnapshot};
#[doc(hidden)]
pub use node::debug_live_nodes;
