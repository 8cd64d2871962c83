//! [`Sequence`]: the positional API that [`List`] and [`Tree`] share, so that code which keeps a
//! sequence of byte strings in either (a Redis list, a sorted set's order read by rank, a
//! stream's entries) is written once over the trait instead of once per structure.
//!
//! The trait only names what both structures already offer with the same signatures and the
//! same documented semantics; each method forwards to the structure's own method of the same
//! name (see those for costs: a [`List`] walks chunk by chunk from the nearer end, a [`Tree`]
//! descends O(log n) nodes). What only one of them has stays off the trait: the order-based
//! methods of a [`Tree`] (`lower_bound`, `insert_sorted`, ...), which hold only for trees kept in
//! byte order. Headers stay per structure too (`encode`/`decode`): the application stores the
//! header of the structure it chose.
//!
//! Invariant: for any sequence of calls, a [`List`] and a [`Tree`] driven through this trait over
//! the same records return the same results (`tests/sequence.rs` checks both against a model).

use std::ops::ControlFlow;

use crate::list::List;
use crate::tree::Tree;
use crate::{Records, Result};

/// A sequence of byte strings addressed by position (rank, 0-based), stored as records of one
/// object (see the crate docs for how records and headers relate).
///
/// Panics are part of the contract, as on the structures: a rank out of the documented range is
/// a caller bug, not a data error. Damaged records are [`crate::Error::Corrupt`].
pub trait Sequence {
    /// Number of entries.
    fn len(&self) -> u64;

    /// Whether the sequence is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the entry at `rank` into `out`; false when `rank >= len`.
    fn get(&self, records: &mut impl Records, rank: u64, out: &mut Vec<u8>) -> Result<bool>;

    /// Inserts `entry` so that it gets position `rank` (`rank <= len`, else panics).
    fn insert_at(&mut self, records: &mut impl Records, rank: u64, entry: &[u8]) -> Result<()>;

    /// Removes and returns the entry at `rank` (`rank < len`, else panics).
    fn remove_at(&mut self, records: &mut impl Records, rank: u64) -> Result<Vec<u8>>;

    /// Replaces the entry at `rank` (`rank < len`, else panics).
    fn replace_at(&mut self, records: &mut impl Records, rank: u64, entry: &[u8]) -> Result<()>;

    /// Visits entries from `rank` upwards (`visit(rank, entry)`) until the end or until `visit`
    /// breaks (nothing when `rank >= len`).
    fn range(
        &self,
        records: &mut impl Records,
        rank: u64,
        visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()>;

    /// Visits entries from `rank` downwards (`rank < len`; nothing when the sequence is empty;
    /// panics when `rank >= len` on a non-empty sequence), like [`Sequence::range`].
    fn range_rev(
        &self,
        records: &mut impl Records,
        rank: u64,
        visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()>;

    /// Deletes every record; the sequence is empty afterwards. A damaged sequence is reported
    /// before anything is deleted.
    fn clear(&mut self, records: &mut impl Records) -> Result<()>;
}

/// Implements [`Sequence`] by the structure's inherent methods of the same names (inherent
/// methods win over trait methods in method resolution, so `<$type>::name` is never recursive).
macro_rules! forward_sequence {
    ($type:ty) => {
        impl Sequence for $type {
            fn len(&self) -> u64 {
                <$type>::len(self)
            }

            fn is_empty(&self) -> bool {
                <$type>::is_empty(self)
            }

            fn get(
                &self,
                records: &mut impl Records,
                rank: u64,
                out: &mut Vec<u8>,
            ) -> Result<bool> {
                <$type>::get(self, records, rank, out)
            }

            fn insert_at(
                &mut self,
                records: &mut impl Records,
                rank: u64,
                entry: &[u8],
            ) -> Result<()> {
                <$type>::insert_at(self, records, rank, entry)
            }

            fn remove_at(&mut self, records: &mut impl Records, rank: u64) -> Result<Vec<u8>> {
                <$type>::remove_at(self, records, rank)
            }

            fn replace_at(
                &mut self,
                records: &mut impl Records,
                rank: u64,
                entry: &[u8],
            ) -> Result<()> {
                <$type>::replace_at(self, records, rank, entry)
            }

            fn range(
                &self,
                records: &mut impl Records,
                rank: u64,
                visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
            ) -> Result<()> {
                <$type>::range(self, records, rank, visit)
            }

            fn range_rev(
                &self,
                records: &mut impl Records,
                rank: u64,
                visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
            ) -> Result<()> {
                <$type>::range_rev(self, records, rank, visit)
            }

            fn clear(&mut self, records: &mut impl Records) -> Result<()> {
                <$type>::clear(self, records)
            }
        }
    };
}

forward_sequence!(List);
forward_sequence!(Tree);
