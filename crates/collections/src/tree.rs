//! A counted B+tree of byte strings: one record per node, every child pointer carrying its
//! subtree's entry count, so that position (rank) and byte order both cost O(log n) records.
//!
//! HELPER: the format, the invariants and the crash-safety argument go here.

use std::ops::ControlFlow;

use crate::{Records, Result};

/// Bytes of an encoded [`Tree`] header.
pub const HEADER_BYTES: usize = 8 + 8 + 8 + 8 + 1;

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
        todo!()
    }

    /// Reads a header from the front of `rest`, checking it is consistent.
    pub fn decode(rest: &mut &[u8]) -> Result<Tree> {
        todo!()
    }

    /// Reads the entry at `rank` (0-based) into `out`; false when `rank >= len`.
    pub fn get(&self, records: &mut impl Records, rank: u64, out: &mut Vec<u8>) -> Result<bool> {
        todo!()
    }

    /// Inserts `entry` so that it gets position `rank` (`rank <= len`, else panics).
    pub fn insert_at(&mut self, records: &mut impl Records, rank: u64, entry: &[u8]) -> Result<()> {
        todo!()
    }

    /// Removes and returns the entry at `rank` (`rank < len`, else panics). Removing the last
    /// entry deletes every record.
    pub fn remove_at(&mut self, records: &mut impl Records, rank: u64) -> Result<Vec<u8>> {
        todo!()
    }

    /// Replaces the entry at `rank` (`rank < len`, else panics).
    pub fn replace_at(
        &mut self,
        records: &mut impl Records,
        rank: u64,
        entry: &[u8],
    ) -> Result<()> {
        todo!()
    }

    /// Visits entries from `rank` upwards (`visit(rank, entry)`) until the end or until `visit`
    /// breaks. Reads one node per `fanout` entries after the first descent.
    pub fn range(
        &self,
        records: &mut impl Records,
        rank: u64,
        visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        todo!()
    }

    /// Visits entries from `rank` downwards (`rank < len`; nothing when the tree is empty).
    pub fn range_rev(
        &self,
        records: &mut impl Records,
        rank: u64,
        visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        todo!()
    }

    /// The rank of the first entry `>= probe` in byte order (`len` when none). Ordered trees.
    pub fn lower_bound(&self, records: &mut impl Records, probe: &[u8]) -> Result<u64> {
        todo!()
    }

    /// The rank of the first entry `> probe` in byte order (`len` when none). Ordered trees.
    pub fn upper_bound(&self, records: &mut impl Records, probe: &[u8]) -> Result<u64> {
        todo!()
    }

    /// Inserts `entry` at its place in byte order and returns its rank; an entry equal to it
    /// must not be present (panics in debug builds). Ordered trees.
    pub fn insert_sorted(&mut self, records: &mut impl Records, entry: &[u8]) -> Result<u64> {
        todo!()
    }

    /// Removes the entry equal to `entry`; its rank, or `None` when absent. Ordered trees.
    pub fn remove_sorted(
        &mut self,
        records: &mut impl Records,
        entry: &[u8],
    ) -> Result<Option<u64>> {
        todo!()
    }

    /// Deletes every record; the tree is empty afterwards.
    pub fn clear(&mut self, records: &mut impl Records) -> Result<()> {
        todo!()
    }
}
