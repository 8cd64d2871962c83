//! Chunk records of a [`super::List`] and the limits on their size (formats in the module docs
//! of `list`).

use crate::{put_bytes, take_bytes, take_u32, take_u64, Error, Result};

/// Bytes of a chunk record before its entries: prev, next, count.
pub(super) const CHUNK_HEAD_BYTES: usize = 8 + 8 + 4;

/// Chunk size limits. Not stored: every list of a build uses the same ones, except in unit tests
/// that shrink them to reach many chunks with few entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Limits {
    /// Most entries of a chunk.
    pub(super) max_entries: usize,
    /// Encoded bytes a chunk with more than one entry may have.
    pub(super) max_bytes: usize,
}

impl Limits {
    pub(super) const DEFAULT: Limits = Limits {
        max_entries: 128,
        max_bytes: 8 << 10,
    };

    pub(super) fn fits(&self, entries: &[Vec<u8>]) -> bool {
        entries.len() <= 1
            || (entries.len() <= self.max_entries
                && CHUNK_HEAD_BYTES + entries_bytes(entries) <= self.max_bytes)
    }

    /// Whether `entry` can join `chunk` within the limits.
    pub(super) fn room(&self, chunk: &Chunk, entry: &[u8]) -> bool {
        chunk.entries.len() < self.max_entries
            && chunk.encoded_len() + 4 + entry.len() <= self.max_bytes
    }

    /// Whether a chunk should be merged with a neighbour after a removal.
    pub(super) fn small(&self, chunk: &Chunk) -> bool {
        chunk.entries.len() < self.max_entries / 4 && chunk.encoded_len() < self.max_bytes / 4
    }
}

pub(super) fn entries_bytes(entries: &[Vec<u8>]) -> usize {
    entries.iter().map(|entry| 4 + entry.len()).sum()
}

/// A decoded chunk record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Chunk {
    pub(super) prev: u64,
    pub(super) next: u64,
    pub(super) entries: Vec<Vec<u8>>,
}

impl Chunk {
    pub(super) fn encoded_len(&self) -> usize {
        CHUNK_HEAD_BYTES + entries_bytes(&self.entries)
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.extend_from_slice(&self.prev.to_le_bytes());
        out.extend_from_slice(&self.next.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for entry in &self.entries {
            put_bytes(out, entry);
        }
    }

    pub(super) fn decode(mut rest: &[u8]) -> Result<Chunk> {
        let prev = take_u64(&mut rest, "chunk prev")?;
        let next = take_u64(&mut rest, "chunk next")?;
        let count = take_u32(&mut rest, "chunk count")? as usize;
        if count == 0 {
            return Err(Error::Corrupt("empty chunk".into()));
        }
        // Each entry takes at least its 4-byte length: never allocate by the stored count alone.
        let mut entries = Vec::with_capacity(count.min(rest.len() / 4));
        for _ in 0..count {
            entries.push(take_bytes(&mut rest, "chunk entry")?.to_vec());
        }
        if !rest.is_empty() {
            return Err(Error::Corrupt(format!(
                "{} bytes after the last entry",
                rest.len()
            )));
        }
        Ok(Chunk {
            prev,
            next,
            entries,
        })
    }
}
