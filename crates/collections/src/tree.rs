//! A counted B+tree of byte strings: one record per node, every child pointer carrying its
//! subtree's entry count, so that position (rank) and byte order both cost O(log n) records.
//!
//! # Records
//!
//! Header ([`HEADER_BYTES`] = 33 bytes, little-endian, kept by the application):
//! `[id u64][len u64][root u64][next_node u64][height u8]`. `root` is the root node's id (0 when
//! the tree is empty), `height` the number of node levels (0 when empty, 1 for a lone leaf),
//! `next_node` the id the next written node gets.
//!
//! Node `n` is the record [`crate::record_key`]`(id, Part::TreeNode, n)`. A leaf holds entries in
//! rank order; an internal node holds, per child, its id, its subtree's entry count and a
//! *separator*: the subtree's first entry, cut to `separator_bytes` (128) with a flag when cut
//! (byte formats in the `node` module). Descending by rank subtracts counts; descending by order
//! compares separators, and only a cut separator that is a prefix of the probe costs a read of
//! that subtree's first entry (a descent along its left edge).
//!
//! # Invariants (after every update that returned `Ok`)
//!
//! 1. `len == 0` ⇔ `root == 0` ⇔ `height == 0`; otherwise every leaf is `height - 1` levels
//!    below the root.
//! 2. Each child pointer's count is its subtree's number of entries; the root's is `len`.
//! 3. Each separator is `Separator::of` the subtree's first entry.
//! 4. A leaf has at least one entry, an internal node at least two children. Hence a tree of
//!    height `h` has at least `2^(h-1)` entries, and `h <= 64` (`MAX_HEIGHT`) for any `u64` length.
//! 5. A node fits the limits (at most `max_leaf_items` entries for a leaf, `max_items` children
//!    for an internal node, and `max_node_bytes` encoded bytes), or holds a single item (one
//!    entry larger than the byte budget). Limits are not stored: a tree written under larger
//!    ones (before 16-item nodes) decodes as any other, every read and the fast path's checks
//!    hold for it (they check counts and order, not sizes; the fast path leaves a node at or
//!    over the limit to the general path), and the general path splits such a node when it
//!    next rewrites it, so invariant 5 holds again for every node an update touched.
//! 6. The object's `TreeNode` records are exactly the nodes reachable from `root`, all with ids
//!    below `next_node`. A node keeps its id while it lives (it is rewritten in place); a
//!    deleted node's id is never reused within a tree (`next_node` only grows, also across
//!    [`Tree::clear`]).
//! 7. A tree used in order (sorted sets) holds its entries strictly ascending in rank order;
//!    the ordered operations rely on it and preserve it, as does [`Tree::remove_at`];
//!    [`Tree::insert_at`] and [`Tree::replace_at`] preserve it only if the caller's entry
//!    belongs at that rank (they do not check).
//!
//! Fill is a goal, not an invariant: a rewritten non-root node left empty (a removed first leaf)
//! is dropped from its parent and deleted; otherwise it is *underfull* when it has fewer
//! than a quarter of its item limit (at least 2) items and fewer than `max_node_bytes / 4` bytes;
//! it is then merged with a neighbour, or both are split evenly again when the two do not fit in
//! one node. A node over the limits is split in halves (by bytes when over the byte budget, else
//! by items) until every piece fits or is a single item, except a leaf an append overfilled by
//! items, which is cut into full leaves from the left (`update::Split::Append`: a stream's
//! leaves are packed full); a huge entry can so leave a small leaf beside it. A root
//! with one child is replaced by that child; a root that splits gets a new root above it. Because
//! a separator is at most 128 bytes, an internal node with one child is always underfull, so
//! invariant 4 holds whatever the entries' sizes.
//!
//! Cost: an update reads the nodes of one root-to-leaf path, plus at most one sibling per level
//! it rebalances, and writes the nodes it changed: the leaf and each ancestor whose pointer to
//! the changed child differs (its count, or its separator); a replace that keeps the leaf's first
//! entry writes the leaf alone. So O(height) records, and an insert into a leaf with room writes
//! `height` records and deletes none. Such an insert (an append, or an ordered insert that does
//! not become its leaf's first entry, into a leaf with room) takes the `fast` module's path: the
//! nodes are read as bytes and checked as decoding checks them, the entry is spliced into the
//! leaf and each ancestor's count patched in place, without decoding or allocating per entry. A
//! range reads each node it passes once.
//!
//! # Errors and crash safety: plan, check, then write in place
//!
//! An update first settles the whole path in memory (the `update` module's plan: which nodes keep their
//! id and are rewritten in place, which pieces of a split and which new root get fresh ids from
//! `next_node`, which merged-away nodes are deleted), reading every sibling it needs, and only
//! then writes. Before the first write it checks every planned node against the store's largest
//! value ([`Records::max_value_bytes`]), the one reason a write of a live store refuses; then it
//! writes the fresh nodes (invisible from the old header), then rewrites the changed nodes in
//! place (with a [`crate::capacity_hint`], so that a node gaining an entry mostly stays in its
//! engine record), then deletes. So:
//! - A node too large for the store, a damaged sibling or a refused write of a fresh node (the
//!   fresh nodes already written are deleted again, best effort) leaves `self` and every record
//!   the old header reaches unchanged, and returns the error: the old header, which the caller
//!   keeps by not writing the header back, still reads exactly the old content.
//! - A write failing after the first in-place rewrite fails only because the store refuses
//!   writes altogether (a failed log, engine log memory exhausted): the records are then part
//!   old, part new and the transaction is lost with the store anyway; the error is returned and
//!   `self` is unchanged, so the caller does not write the header back.
//! - Crashes: the application writes every record of one update and the header in one store
//!   transaction, which the checkpoint and the operation log keep whole (one log group), so
//!   recovery brings back a header with exactly the nodes it reaches, old or new.
//!
//! Damaged data (a missing node, a node that does not decode, a count or level that does not
//! match its parent, an id at or above `next_node`) is [`Error::Corrupt`], never a panic; a
//! descent is bounded by the header's height, so a cycle of node ids cannot loop.

mod fast;
#[cfg(test)]
mod in_place_tests;
mod node;
#[cfg(test)]
mod tests;
mod update;

use std::cell::RefCell;
use std::ops::ControlFlow;

use crate::{record_key, take_u64, Error, Part, Records, Result, RECORD_KEY_BYTES};
use fast::{Scratch, Target};
use node::{Child, Node, CHILD_OVERHEAD, NODE_HEAD_BYTES};
use update::Split;

thread_local! {
    /// The fast insert path's buffers, reused by every insert of the thread.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Bytes of an encoded [`Tree`] header.
pub const HEADER_BYTES: usize = 8 + 8 + 8 + 8 + 1;

/// The largest height a tree can reach (invariant 4: height `h` needs `2^(h-1)` entries).
const MAX_HEIGHT: u8 = 64;

/// Node size limits. Not stored: every tree of a build uses the same ones, except in unit tests
/// that shrink them to reach deep trees with few entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Limits {
    /// Most children of an internal node.
    max_items: usize,
    /// Most entries of a leaf. Smaller than `max_items`: every update reads and rewrites its
    /// leaf whole, so a short leaf is cheap to copy, while a wide internal node keeps the tree
    /// low.
    max_leaf_items: usize,
    /// Encoded bytes a node with more than one item may have.
    max_node_bytes: usize,
    /// Longest stored separator.
    separator_bytes: usize,
}

impl Limits {
    /// Narrow nodes: every update reads and rewrites each node of its path whole, so the
    /// bytes per update grow with the fanout while the levels shrink only with its logarithm.
    /// Measured (instructions per ZADD / capped XADD, ~70k members): 16 beat 8, 32 and 64.
    /// Trees written under other limits stay valid: limits are not stored, a node over them
    /// decodes and is split the next time it is rewritten (invariant 5 then holds again).
    const DEFAULT: Limits = Limits {
        max_items: 16,
        max_leaf_items: 16,
        max_node_bytes: 16 << 10,
        separator_bytes: 128,
    };

    /// The most items `node` may have: entries of a leaf, children of an internal node.
    fn item_limit(&self, node: &Node) -> usize {
        if node.is_leaf() {
            self.max_leaf_items
        } else {
            self.max_items
        }
    }

    /// Whether the limits keep invariant 4: an internal node with one child must be underfull
    /// (its bytes under a quarter of the budget), and halving an oversized node leaves two items
    /// on each side.
    const fn valid(&self) -> bool {
        self.max_items >= 4
            && self.max_leaf_items >= 4
            && NODE_HEAD_BYTES + CHILD_OVERHEAD + self.separator_bytes < self.max_node_bytes / 4
    }

    fn fits(&self, node: &Node) -> bool {
        node.items() <= self.item_limit(node) && node.encoded_len() <= self.max_node_bytes
    }

    fn underfull(&self, node: &Node) -> bool {
        node.items() < (self.item_limit(node) / 4).max(2)
            && node.encoded_len() < self.max_node_bytes / 4
    }
}

const _: () = assert!(Limits::DEFAULT.valid());

/// A tree's header: kept by the application in its root record (see the crate docs).
///
/// A tree is used either by position (lists: [`Tree::insert_at`], [`Tree::remove_at`], ...) or
/// in byte order (sorted sets: [`Tree::insert_sorted`], [`Tree::remove_sorted`], bounds); the
/// positional operations work on both, the ordered ones require that every entry was inserted
/// in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The object id its records are keyed under.
    pub id: u64,
    len: u64,
    root: u64,
    next_node: u64,
    height: u8,
    limits: Limits,
}

/// A node on a root-to-leaf path, with the child (internal) or entry (leaf) the path takes.
struct Frame {
    /// 0 for the empty leaf that stands for an empty tree's missing root.
    id: u64,
    node: Node,
    index: usize,
}

impl Frame {
    /// The path of an empty tree: an empty leaf that was never written.
    fn empty_root() -> Frame {
        Frame {
            id: 0,
            node: Node::Leaf(Vec::new()),
            index: 0,
        }
    }
}

impl Tree {
    /// An empty tree with object id `id` (no record exists yet).
    pub fn new(id: u64) -> Tree {
        Tree {
            id,
            len: 0,
            root: 0,
            next_node: 1,
            height: 0,
            limits: Limits::DEFAULT,
        }
    }

    /// An empty tree with other node limits (tests: deep trees from few entries).
    #[cfg(test)]
    fn with_limits(id: u64, limits: Limits) -> Tree {
        assert!(limits.valid(), "tree limits break invariant 4: {limits:?}");
        Tree {
            limits,
            ..Tree::new(id)
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the header ([`HEADER_BYTES`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.root.to_le_bytes());
        out.extend_from_slice(&self.next_node.to_le_bytes());
        out.push(self.height);
    }

    /// Reads a header from the front of `rest`, checking it is consistent.
    pub fn decode(rest: &mut &[u8]) -> Result<Tree> {
        let mut bytes = *rest;
        if bytes.len() < HEADER_BYTES {
            return Err(Error::Corrupt(format!(
                "tree header cut short: {} of {HEADER_BYTES} bytes",
                bytes.len()
            )));
        }
        let id = take_u64(&mut bytes, "tree header")?;
        let len = take_u64(&mut bytes, "tree header")?;
        let root = take_u64(&mut bytes, "tree header")?;
        let next_node = take_u64(&mut bytes, "tree header")?;
        let height = bytes[0];
        let tree = Tree {
            id,
            len,
            root,
            next_node,
            height,
            limits: Limits::DEFAULT,
        };
        let empty = len == 0;
        if empty != (root == 0)
            || empty != (height == 0)
            || height > MAX_HEIGHT
            || next_node == 0
            || (!empty && root >= next_node)
        {
            return Err(Error::Corrupt(format!("inconsistent tree header {tree:?}")));
        }
        *rest = &bytes[1..];
        Ok(tree)
    }

    /// Reads the entry at `rank` (0-based) into `out`; false when `rank >= len`.
    pub fn get(&self, records: &mut impl Records, rank: u64, out: &mut Vec<u8>) -> Result<bool> {
        if rank >= self.len {
            return Ok(false);
        }
        let mut frames = self.descend_rank(records, rank, false)?;
        let leaf = frames.pop().expect("a path ends at a leaf");
        out.clear();
        out.extend_from_slice(&leaf.node.entries()[leaf.index]);
        Ok(true)
    }

    /// Inserts `entry` so that it gets position `rank` (`rank <= len`, else panics).
    pub fn insert_at(&mut self, records: &mut impl Records, rank: u64, entry: &[u8]) -> Result<()> {
        assert!(
            rank <= self.len,
            "Tree::insert_at: rank {rank} past the end (len {})",
            self.len
        );
        if rank == self.len && self.fast_insert(records, Target::End, entry)?.is_some() {
            return Ok(());
        }
        let mut frames = self.descend_rank(records, rank, true)?;
        let leaf = frames.last_mut().expect("a path ends at a leaf");
        leaf.node.entries_mut().insert(leaf.index, entry.to_vec());
        let split = if rank == self.len {
            Split::Append
        } else {
            Split::Halves
        };
        self.rewrite(records, frames, self.len + 1, split)
    }

    /// [`Tree::insert_fast`] with the thread's scratch buffers.
    fn fast_insert(
        &mut self,
        records: &mut impl Records,
        target: Target<'_>,
        entry: &[u8],
    ) -> Result<Option<u64>> {
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => self.insert_fast(records, target, entry, &mut scratch),
            // Re-entered from inside `records` (never in practice): fresh buffers.
            Err(_) => self.insert_fast(records, target, entry, &mut Scratch::default()),
        })
    }

    /// Removes and returns the entry at `rank` (`rank < len`, else panics). Removing the last
    /// entry deletes every record.
    pub fn remove_at(&mut self, records: &mut impl Records, rank: u64) -> Result<Vec<u8>> {
        assert!(
            rank < self.len,
            "Tree::remove_at: rank {rank} out of range (len {})",
            self.len
        );
        let mut frames = self.descend_rank(records, rank, false)?;
        let leaf = frames.last_mut().expect("a path ends at a leaf");
        let removed = leaf.node.entries_mut().remove(leaf.index);
        self.rewrite(records, frames, self.len - 1, Split::Halves)?;
        Ok(removed)
    }

    /// Replaces the entry at `rank` (`rank < len`, else panics).
    pub fn replace_at(
        &mut self,
        records: &mut impl Records,
        rank: u64,
        entry: &[u8],
    ) -> Result<()> {
        assert!(
            rank < self.len,
            "Tree::replace_at: rank {rank} out of range (len {})",
            self.len
        );
        let mut frames = self.descend_rank(records, rank, false)?;
        let leaf = frames.last_mut().expect("a path ends at a leaf");
        leaf.node.entries_mut()[leaf.index] = entry.to_vec();
        self.rewrite(records, frames, self.len, Split::Halves)
    }

    /// Visits entries from `rank` upwards (`visit(rank, entry)`) until the end or until `visit`
    /// breaks (nothing when `rank >= len`). Reads one node per `fanout` entries after the first
    /// descent.
    pub fn range(
        &self,
        records: &mut impl Records,
        rank: u64,
        visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        if rank >= self.len {
            return Ok(());
        }
        self.walk(records, rank, true, visit)
    }

    /// Visits entries from `rank` downwards (`rank < len`; nothing when the tree is empty; panics
    /// when `rank >= len` on a non-empty tree), like [`Tree::range`].
    pub fn range_rev(
        &self,
        records: &mut impl Records,
        rank: u64,
        visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        assert!(
            rank < self.len,
            "Tree::range_rev: rank {rank} out of range (len {})",
            self.len
        );
        self.walk(records, rank, false, visit)
    }

    /// The rank of the first entry `>= probe` in byte order (`len` when none). Ordered trees.
    pub fn lower_bound(&self, records: &mut impl Records, probe: &[u8]) -> Result<u64> {
        Ok(self.descend_order(records, probe, false)?.1)
    }

    /// The rank of the first entry `> probe` in byte order (`len` when none). Ordered trees.
    pub fn upper_bound(&self, records: &mut impl Records, probe: &[u8]) -> Result<u64> {
        Ok(self.descend_order(records, probe, true)?.1)
    }

    /// Inserts `entry` at its place in byte order and returns its rank; an entry equal to it
    /// must not be present (panics in debug builds). Ordered trees.
    pub fn insert_sorted(&mut self, records: &mut impl Records, entry: &[u8]) -> Result<u64> {
        if let Some(rank) = self.fast_insert(records, Target::Sorted(entry), entry)? {
            return Ok(rank);
        }
        let (mut frames, rank) = self.descend_order(records, entry, true)?;
        let leaf = frames.last_mut().expect("a path ends at a leaf");
        let entries = leaf.node.entries_mut();
        debug_assert!(
            leaf.index == 0 || entries[leaf.index - 1] != entry,
            "Tree::insert_sorted: an equal entry is present"
        );
        debug_assert!(
            (leaf.index == 0 || entries[leaf.index - 1].as_slice() < entry)
                && entries
                    .get(leaf.index)
                    .is_none_or(|next| entry < next.as_slice()),
            "Tree::insert_sorted: the leaf is in order around the new entry"
        );
        entries.insert(leaf.index, entry.to_vec());
        self.rewrite(records, frames, self.len + 1, Split::Halves)?;
        Ok(rank)
    }

    /// Removes the entry equal to `entry`; its rank, or `None` when absent. Ordered trees.
    pub fn remove_sorted(
        &mut self,
        records: &mut impl Records,
        entry: &[u8],
    ) -> Result<Option<u64>> {
        // The path to the first entry greater than `entry`: an equal entry is the one before it,
        // in the same leaf (the routing took the last child whose first entry is <= `entry`).
        let (mut frames, after) = self.descend_order(records, entry, true)?;
        let leaf = frames.last_mut().expect("a path ends at a leaf");
        if leaf.index == 0 || leaf.node.entries()[leaf.index - 1] != entry {
            return Ok(None);
        }
        leaf.index -= 1;
        leaf.node.entries_mut().remove(leaf.index);
        self.rewrite(records, frames, self.len - 1, Split::Halves)?;
        Ok(Some(after - 1))
    }

    /// The first leaf: how many entries it holds, with its last entry copied into `last`;
    /// `None` when the tree is empty. Reads the left edge (`height` records) without decoding.
    pub fn first_leaf(
        &self,
        records: &mut impl Records,
        last: &mut Vec<u8>,
    ) -> Result<Option<u64>> {
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => self.scan_first_leaf(records, Some(last), &mut scratch),
            Err(_) => self.scan_first_leaf(records, Some(last), &mut Scratch::default()),
        })
    }

    /// How many entries the first leaf holds (what [`Tree::first_leaf`] counts), `None` when
    /// the tree is empty. Reads the left edge above the leaf (`height - 1` records): the leaf's
    /// count is in its parent's pointer, so deciding whether a whole leaf may go (a capped
    /// stream's XADD) does not copy the leaf.
    pub fn first_leaf_len(&self, records: &mut impl Records) -> Result<Option<u64>> {
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => self.scan_first_leaf(records, None, &mut scratch),
            Err(_) => self.scan_first_leaf(records, None, &mut Scratch::default()),
        })
    }

    /// Removes the whole first leaf (the entries [`Tree::first_leaf`] counts) and returns how
    /// many entries it held (0 when empty): trimming at the front by whole records, the way
    /// Redis trims a stream by whole nodes. The leaf's record is deleted, not rewritten.
    pub fn remove_first_leaf(&mut self, records: &mut impl Records) -> Result<u64> {
        if self.is_empty() {
            return Ok(0);
        }
        let mut frames = self.descend_rank(records, 0, false)?;
        let leaf = frames.last_mut().expect("a path ends at a leaf");
        let entries = leaf.node.entries_mut();
        let removed = entries.len() as u64;
        entries.clear();
        self.rewrite(records, frames, self.len - removed, Split::Halves)?;
        Ok(removed)
    }

    /// Deletes every record; the tree is empty afterwards. Reads every internal node first (not
    /// the leaves): a damaged tree is reported before anything is deleted.
    pub fn clear(&mut self, records: &mut impl Records) -> Result<()> {
        let mut doomed = Vec::new();
        let mut level = Vec::new();
        if !self.is_empty() {
            level.push((self.root, self.len));
        }
        let mut buf = Vec::new();
        for depth in 0..self.height as usize {
            let leaves = depth + 1 == self.height as usize;
            let mut next = Vec::new();
            for &(id, count) in &level {
                doomed.push(id);
                if !leaves {
                    let node = self.read(records, id, depth, count, &mut buf)?;
                    next.extend(node.children().iter().map(|child| (child.id, child.count)));
                }
            }
            level = next;
        }
        self.len = 0;
        self.root = 0;
        self.height = 0;
        for id in doomed {
            records.delete(&self.key(id))?;
        }
        Ok(())
    }
}

// Reading and descending.
impl Tree {
    fn key(&self, node: u64) -> [u8; RECORD_KEY_BYTES] {
        record_key(self.id, Part::TreeNode, node)
    }

    /// Reads node `id`, which its parent (or the header) says is `depth` levels below the root
    /// and holds `entries` entries, and checks that it does.
    fn read(
        &self,
        records: &mut impl Records,
        id: u64,
        depth: usize,
        entries: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Node> {
        let damaged = |what: String| Error::Corrupt(format!("tree {} node {id}: {what}", self.id));
        if id == 0 || id >= self.next_node {
            return Err(damaged(format!(
                "id not below next_node {}",
                self.next_node
            )));
        }
        if !records.get(&self.key(id), buf)? {
            return Err(damaged("missing".into()));
        }
        let node = Node::decode(buf).map_err(|error| match error {
            Error::Corrupt(what) => damaged(what),
            other => other,
        })?;
        let leaf_depth = self.height as usize - 1;
        if node.is_leaf() != (depth == leaf_depth) {
            return Err(damaged(format!(
                "a {} at depth {depth} of a tree of height {}",
                if node.is_leaf() {
                    "leaf"
                } else {
                    "internal node"
                },
                self.height
            )));
        }
        if node.count() != entries {
            return Err(damaged(format!(
                "holds {} entries, its parent says {entries}",
                node.count()
            )));
        }
        Ok(node)
    }

    /// The path to the entry at `rank`; with `to_end`, `rank` may be one past an entry (an
    /// insert position), and a position between two leaves is taken as the end of the first.
    fn descend_rank(
        &self,
        records: &mut impl Records,
        mut rank: u64,
        to_end: bool,
    ) -> Result<Vec<Frame>> {
        if self.is_empty() {
            return Ok(vec![Frame::empty_root()]);
        }
        let mut frames: Vec<Frame> = Vec::with_capacity(self.height as usize);
        let mut buf = Vec::new();
        let (mut id, mut count) = (self.root, self.len);
        loop {
            let node = self.read(records, id, frames.len(), count, &mut buf)?;
            let index = match &node {
                Node::Leaf(_) => rank as usize,
                Node::Internal(children) => children
                    .iter()
                    .position(|child| {
                        let inside = rank < child.count || (to_end && rank == child.count);
                        if !inside {
                            rank -= child.count;
                        }
                        inside
                    })
                    .expect("a rank within a node's count falls in one of its children"),
            };
            let leaf = node.is_leaf();
            frames.push(Frame { id, node, index });
            if leaf {
                return Ok(frames);
            }
            let parent = frames.last().expect("just pushed");
            let child = &parent.node.children()[parent.index];
            (id, count) = (child.id, child.count);
        }
    }

    /// The path to the first entry `> probe` (`inclusive`) or `>= probe`, and that entry's rank.
    fn descend_order(
        &self,
        records: &mut impl Records,
        probe: &[u8],
        inclusive: bool,
    ) -> Result<(Vec<Frame>, u64)> {
        if self.is_empty() {
            return Ok((vec![Frame::empty_root()], 0));
        }
        let mut frames: Vec<Frame> = Vec::with_capacity(self.height as usize);
        let mut buf = Vec::new();
        let mut rank = 0;
        let (mut id, mut count) = (self.root, self.len);
        loop {
            let depth = frames.len();
            let node = self.read(records, id, depth, count, &mut buf)?;
            let index = match &node {
                Node::Leaf(entries) => {
                    let index = entries.partition_point(|entry| {
                        let entry = entry.as_slice();
                        entry < probe || (inclusive && entry == probe)
                    });
                    rank += index as u64;
                    index
                }
                Node::Internal(children) => {
                    let index = self.route(records, children, depth + 1, probe, inclusive)?;
                    rank += children[..index]
                        .iter()
                        .map(|child| child.count)
                        .sum::<u64>();
                    index
                }
            };
            let leaf = node.is_leaf();
            frames.push(Frame { id, node, index });
            if leaf {
                return Ok((frames, rank));
            }
            let parent = frames.last().expect("just pushed");
            let child = &parent.node.children()[parent.index];
            (id, count) = (child.id, child.count);
        }
    }

    /// The child an ordered descent takes: the last whose first entry is `< probe` (or `<=`
    /// when `inclusive`), else the first. Every entry before that child is then below the probe
    /// and every entry after it at or above it (ordered trees: invariant 7).
    fn route(
        &self,
        records: &mut impl Records,
        children: &[Child],
        depth: usize,
        probe: &[u8],
        inclusive: bool,
    ) -> Result<usize> {
        // Children 1..low are before the probe, high.. are not; the predicate is monotone.
        let (mut low, mut high) = (1, children.len());
        while low < high {
            let middle = low + (high - low) / 2;
            let order = match children[middle].first.compare(probe) {
                Some(order) => order,
                None => self
                    .first_entry(records, &children[middle], depth)?
                    .as_slice()
                    .cmp(probe),
            };
            if order.is_lt() || (inclusive && order.is_eq()) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        Ok(low - 1)
    }

    /// The first entry of `child`'s subtree (`depth` levels below the root), read along its
    /// left edge: what a cut separator stands for.
    fn first_entry(
        &self,
        records: &mut impl Records,
        child: &Child,
        mut depth: usize,
    ) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        let (mut id, mut count) = (child.id, child.count);
        loop {
            match self.read(records, id, depth, count, &mut buf)? {
                Node::Leaf(mut entries) => return Ok(entries.swap_remove(0)),
                Node::Internal(children) => (id, count) = (children[0].id, children[0].count),
            }
            depth += 1;
        }
    }

    /// Visits entries from `rank` (below `len`) on, upwards (`forward`) or downwards: one
    /// descent, then each further node is read once, when the walk enters it.
    fn walk(
        &self,
        records: &mut impl Records,
        rank: u64,
        forward: bool,
        mut visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let mut frames = self.descend_rank(records, rank, false)?;
        let mut buf = Vec::new();
        // Rank of the current leaf's first entry.
        let mut base = rank - frames.last().expect("a path ends at a leaf").index as u64;
        loop {
            let leaf = frames.pop().expect("a path ends at a leaf");
            let entries = leaf.node.entries();
            let mut position = leaf.index;
            loop {
                if visit(base + position as u64, &entries[position]).is_break() {
                    return Ok(());
                }
                match forward {
                    true if position + 1 < entries.len() => position += 1,
                    false if position > 0 => position -= 1,
                    _ => break,
                }
            }
            if forward {
                base += entries.len() as u64;
            }
            // Up to the nearest node with a next (previous) child, then down its near edge.
            loop {
                let Some(top) = frames.last_mut() else {
                    return Ok(());
                };
                if forward && top.index + 1 < top.node.items() {
                    top.index += 1;
                    break;
                }
                if !forward && top.index > 0 {
                    top.index -= 1;
                    break;
                }
                frames.pop();
            }
            loop {
                let parent = frames.last().expect("the walk is below the root");
                let child = &parent.node.children()[parent.index];
                let id = child.id;
                let node = self.read(records, id, frames.len(), child.count, &mut buf)?;
                let index = if forward { 0 } else { node.items() - 1 };
                let leaf = node.is_leaf();
                frames.push(Frame { id, node, index });
                if leaf {
                    break;
                }
            }
            if !forward {
                base -= frames.last().expect("just pushed").node.items() as u64;
            }
        }
    }
}
