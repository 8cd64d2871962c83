//! A map of byte strings by linear hashing: one record per bucket, grown and shrunk one bucket
//! at a time.
//!
//! HELPER: the format, the invariants and the crash-safety argument go here.

use crate::{Records, Result};

/// Bytes of an encoded [`Hash`] header.
pub const HEADER_BYTES: usize = 8 + 8 + 1 + 8;

/// A map's header: kept by the application in its root record (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hash {
    /// The object id its records are keyed under.
    pub id: u64,
    len: u64,
    level: u8,
    split: u64,
}

impl Hash {
    /// An empty map with object id `id` (no record exists yet).
    pub fn new(id: u64) -> Hash {
        Hash {
            id,
            len: 0,
            level: 0,
            split: 0,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the header ([`HEADER_BYTES`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        todo!()
    }

    /// Reads a header from the front of `rest`, checking it is consistent.
    pub fn decode(rest: &mut &[u8]) -> Result<Hash> {
        todo!()
    }

    /// Reads `field`'s value into `out`; whether it exists.
    pub fn get(&self, records: &mut impl Records, field: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        todo!()
    }

    /// Sets `field` to `value`; whether the field is new.
    pub fn insert(
        &mut self,
        records: &mut impl Records,
        field: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        todo!()
    }

    /// Removes `field`; whether it existed. Removing the last entry deletes every record.
    pub fn remove(&mut self, records: &mut impl Records, field: &[u8]) -> Result<bool> {
        todo!()
    }

    /// One step of a scan: visits some entries and returns the cursor to continue from, 0 at the
    /// end (start at 0). Every entry present for the whole scan is visited at least once, even
    /// when the table grows or shrinks between steps; a step reads at most two buckets.
    pub fn scan(
        &self,
        records: &mut impl Records,
        cursor: u64,
        visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        todo!()
    }

    /// Visits every entry (in bucket order).
    pub fn for_each(
        &self,
        records: &mut impl Records,
        visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        todo!()
    }

    /// A random entry, drawn with `seed`: `None` when empty. Not exactly uniform (a random
    /// non-empty bucket, then a random entry of it), as Redis's own sampling is not.
    pub fn random(
        &self,
        records: &mut impl Records,
        seed: u64,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        todo!()
    }

    /// Deletes every record; the map is empty afterwards.
    pub fn clear(&mut self, records: &mut impl Records) -> Result<()> {
        todo!()
    }
}
