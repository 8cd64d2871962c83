//! A list as a doubly linked deque of chunks (like Redis's quicklist): a push or pop at either
//! end reads and writes O(1) small records whatever the length, where a [`crate::tree::Tree`]
//! rewrites a whole root-to-leaf path. Positional access walks chunk by chunk from the nearer
//! end, O(rank / chunk size) reads, as Redis's LINDEX, LSET and LINSERT are O(n).
//!
//! The public API is the positional subset of [`crate::tree::Tree`], with the same signatures
//! and documented semantics, so the application can keep a list in either.
//!
//! # Records
//!
//! Header ([`HEADER_BYTES`] = 48 bytes, little-endian, kept by the application):
//! `[id u64][len u64][head u64][tail u64][next_chunk u64][chunks u64]`. `head` and `tail` are the
//! end chunks' ids (0 when empty), `chunks` the number of chunks, `next_chunk` the id the next
//! new chunk gets.
//!
//! Chunk `c` is the record [`crate::record_key`]`(id, Part::ListChunk, c)`:
//! `[prev u64][next u64][count u32]` then `count` times `[len u32][bytes]`, the entries in list
//! order; `prev`/`next` are the neighbours' ids, 0 at the ends.
//!
//! # Invariants (after every update that returned `Ok`)
//!
//! 1. `len == 0` ⇔ `head == 0` ⇔ `tail == 0` ⇔ `chunks == 0`.
//! 2. Following `next` from `head` visits `chunks` distinct chunks and ends at `tail`; every
//!    chunk's `prev` is the chunk before it (0 for `head`), its `next` the one after (0 for
//!    `tail`). The counts of the chunks add up to `len`.
//! 3. A chunk holds at least one entry, and at most `max_entries` (128) entries and
//!    `max_bytes` (8 KiB) encoded bytes, unless it holds a single larger entry.
//! 4. The object's `ListChunk` records are exactly the chunks of the chain, all with ids in
//!    `1..next_chunk`. `next_chunk` only grows (also across [`List::clear`]): an id below it is
//!    never reused, so garbage a failed store leaves there (below) is never mistaken for a live
//!    chunk.
//!
//! Fill is a goal, not an invariant. An insert goes into the chunk holding its position; when
//! that chunk is full, an insert at its edge goes into the neighbour beyond that edge if it has
//! room (middle of the list only), else into a new one-entry chunk there (so a push onto a full
//! end chunk starts a new chunk), and an insert inside it splits it in halves (by bytes when over
//! the byte budget, else by count, repeatedly until each piece fits). A removal from the middle
//! that leaves a chunk *small* (under a quarter of both limits) merges it with its next, else its
//! previous neighbour when the two fit in one chunk; removals at the ends never merge (a queue
//! drains its end chunk to empty, then deletes it). No minimum fill is enforced: contrived
//! sequences can leave small chunks (down to one entry) beside chunks too full to merge with, so
//! a positional walk may read more than `len / 128` chunks (at worst about one per entry); the
//! end operations never walk.
//!
//! # Costs (records read / written or deleted)
//!
//! - Push at either end (`insert_at(0)`, `insert_at(len)`): 1 read, 1 write, done on the end
//!   chunk's bytes without decoding its entries (`push_in_place`: O(1) work at the back, a
//!   memmove of the chunk at the front, no allocation); when the end chunk is full, 1 read
//!   and 2 writes (the new chunk, then the old end chunk's link patched on its bytes).
//! - Pop at either end (`remove_at(0)`, `remove_at(len - 1)`): 1 read, 1 write, on the bytes
//!   (`pop_in_place`); when the chunk empties: 3 reads, 2 writes (the neighbour's link, the
//!   delete).
//! - Elsewhere: the walk from the nearer end (one read per chunk passed), then at most 3 reads
//!   (neighbours whose links change), and 1 write, or 3 for a merge or an emptied chunk, or one
//!   per piece plus up to 2 links for a split (2 pieces; more when big entries need their own).
//! - `range` / `range_rev`: the walk to the start, then one read per chunk. `clear`: reads and
//!   deletes every chunk.
//!
//! # Errors and crash safety
//!
//! An update first reads everything it needs (the walk, the neighbours whose links change),
//! then performs its writes in this order: puts that create a chunk (fresh id) or make one
//! bigger (the chunk that receives the new entry), then same-size relinks of neighbours, then
//! rewrites that shrink a chunk, then deletes. Only the first kind can fail for size, and it
//! comes before any write that changes a record the old header reaches; and undoing a write
//! never puts a record larger than one the store just accepted. The header in `self` changes
//! only when every write succeeded. So:
//! - [`Error::Corrupt`] is found while reading, before anything is written: nothing changed.
//! - When a write fails (a record too large for the store, a refused write), the update undoes
//!   the writes before it in reverse order (a fresh chunk is deleted, an overwritten or deleted
//!   chunk is put back as it was read), leaves `self` unchanged and returns the error: the
//!   records and `self` are exactly as before the call.
//! - An undo write can itself fail only when the store refuses every write (out of memory, a
//!   failed log), which loses the caller's transaction anyway. What can then be left: fresh
//!   chunks at ids `>= next_chunk` (unreachable; overwritten when those ids are allocated), and
//!   chunks of the old chain carrying their new content or links, which the old header in `self`
//!   may then no longer describe (later reads report `Corrupt`, never a panic).
//! - A removal that would merge tries the merged chunk first; when its first write is refused
//!   it removes without merging instead (a merge is only an optimisation).
//! - [`List::clear`] reads the whole chain first (damage is reported before anything is
//!   deleted), empties the header, then deletes; a refused delete leaves `self` empty and the
//!   chunks not yet deleted as unreachable garbage (their ids are never reused).
//! - Crashes: the application writes every record of an update and the header in one store
//!   transaction, which the checkpoint and the operation log keep whole.
//!
//! Damaged data (a missing chunk, a chunk that does not decode or is empty, an id outside
//! `1..next_chunk`, links that disagree with each other or with `head`/`tail`, counts that do not
//! add up to `len`) is [`Error::Corrupt`], never a panic; every walk takes at most `chunks` steps,
//! so a cycle of links cannot loop. Damage is found where the reads reach: an end operation reads
//! only the end chunks, and a push or a pop at the front only their heads (links, count, at least
//! 4 bytes per counted entry: it splices bytes at the front or back and leaves the other entries'
//! bytes as they were, so damage inside them stays as it was until a read decodes them). Damage
//! elsewhere (say a `next_chunk` too small, which lets a new chunk
//! overwrite a live one) shows when a walk or [`List::clear`] gets there.

mod chunk;
#[cfg(test)]
mod tests;
mod update;

use std::ops::ControlFlow;

use crate::{put_bytes, record_key, take_u64, Error, Part, Records, Result, RECORD_KEY_BYTES};
use chunk::{Chunk, Limits, CHUNK_HEAD_BYTES};
use update::Write;

/// Bytes of an encoded [`List`] header.
pub const HEADER_BYTES: usize = 6 * 8;

/// A list's header: kept by the application in its root record (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct List {
    /// The object id its records are keyed under.
    pub id: u64,
    len: u64,
    head: u64,
    tail: u64,
    next_chunk: u64,
    chunks: u64,
    limits: Limits,
}

/// A chunk found by a walk: its id, content, record as read, and an index in it.
struct Spot {
    id: u64,
    chunk: Chunk,
    raw: Vec<u8>,
    index: usize,
}

impl Spot {
    /// The write putting the (changed) chunk back in place.
    fn rewrite(self) -> Write {
        Write::Put {
            id: self.id,
            chunk: self.chunk,
            old: Some(self.raw),
        }
    }
}

impl List {
    /// An empty list with object id `id` (no record exists yet).
    pub fn new(id: u64) -> List {
        List {
            id,
            len: 0,
            head: 0,
            tail: 0,
            next_chunk: 1,
            chunks: 0,
            limits: Limits::DEFAULT,
        }
    }

    /// An empty list with other chunk limits (tests: many chunks from few entries).
    #[cfg(test)]
    fn with_limits(id: u64, limits: Limits) -> List {
        assert!(limits.max_entries >= 4 && limits.max_bytes > chunk::CHUNK_HEAD_BYTES);
        List {
            limits,
            ..List::new(id)
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the header ([`HEADER_BYTES`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The header's bytes, as [`List::encode`] appends them (on the stack: writing a header back
    /// after every push must not allocate).
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        let fields = [
            self.id,
            self.len,
            self.head,
            self.tail,
            self.next_chunk,
            self.chunks,
        ];
        for (slot, field) in bytes.chunks_exact_mut(8).zip(fields) {
            slot.copy_from_slice(&field.to_le_bytes());
        }
        bytes
    }

    /// Reads a header from the front of `rest`, checking it is consistent; on error `rest` is
    /// left as it was.
    pub fn decode(rest: &mut &[u8]) -> Result<List> {
        let mut bytes = *rest;
        if bytes.len() < HEADER_BYTES {
            return Err(Error::Corrupt(format!(
                "list header cut short: {} of {HEADER_BYTES} bytes",
                bytes.len()
            )));
        }
        let mut field = || take_u64(&mut bytes, "list header");
        let list = List {
            id: field()?,
            len: field()?,
            head: field()?,
            tail: field()?,
            next_chunk: field()?,
            chunks: field()?,
            limits: Limits::DEFAULT,
        };
        if !list.consistent() {
            return Err(Error::Corrupt(format!("inconsistent list header {list:?}")));
        }
        *rest = bytes;
        Ok(list)
    }

    /// Invariant 1 and what the header alone can show of 2 and 4.
    fn consistent(&self) -> bool {
        let empty = self.len == 0;
        self.next_chunk != 0
            && empty == (self.head == 0)
            && empty == (self.tail == 0)
            && empty == (self.chunks == 0)
            && (empty
                || (self.head < self.next_chunk
                    && self.tail < self.next_chunk
                    && self.chunks <= self.len
                    && self.chunks < self.next_chunk
                    && (self.chunks == 1) == (self.head == self.tail)))
    }

    /// Reads the entry at `rank` (0-based) into `out`; false when `rank >= len`.
    pub fn get(&self, records: &mut impl Records, rank: u64, out: &mut Vec<u8>) -> Result<bool> {
        if rank >= self.len {
            return Ok(false);
        }
        let spot = self.locate(records, rank, false)?;
        out.clear();
        out.extend_from_slice(&spot.chunk.entries[spot.index]);
        Ok(true)
    }

    /// Inserts `entry` so that it gets position `rank` (`rank <= len`, else panics).
    pub fn insert_at(&mut self, records: &mut impl Records, rank: u64, entry: &[u8]) -> Result<()> {
        assert!(
            rank <= self.len,
            "List::insert_at: rank {rank} past the end (len {})",
            self.len
        );
        let mut next = List {
            len: self.len + 1,
            ..*self
        };
        if self.is_empty() {
            let id = self.next_chunk;
            (next.head, next.tail, next.chunks, next.next_chunk) = (id, id, 1, id + 1);
            let chunk = Chunk {
                prev: 0,
                next: 0,
                entries: vec![entry.to_vec()],
            };
            return self.commit(
                records,
                vec![Write::Put {
                    id,
                    chunk,
                    old: None,
                }],
                next,
            );
        }
        if (rank == 0 || rank == self.len) && self.push_in_place(records, rank == 0, entry)? {
            return Ok(());
        }
        let mut spot = self.locate(records, rank, true)?;
        let (count, index) = (spot.chunk.entries.len(), spot.index);
        if self.limits.room(&spot.chunk, entry) {
            spot.chunk.entries.insert(index, entry.to_vec());
            return self.commit(records, vec![spot.rewrite()], next);
        }
        // Full: at an edge inside the list, the neighbour beyond it may have room. (The ends of
        // the list have no neighbour, so a push reads nothing more.)
        let beyond = match index {
            0 => spot.chunk.prev,
            _ if index == count => spot.chunk.next,
            _ => 0,
        };
        if beyond != 0 {
            let (mut chunk, raw) = self.read(records, beyond)?;
            let back = if index == 0 { chunk.next } else { chunk.prev };
            if back != spot.id {
                return Err(self.damaged(beyond, "links disagree with its neighbour's"));
            }
            if self.limits.room(&chunk, entry) {
                let at = if index == 0 { chunk.entries.len() } else { 0 };
                chunk.entries.insert(at, entry.to_vec());
                let write = Write::Put {
                    id: beyond,
                    chunk,
                    old: Some(raw),
                };
                return self.commit(records, vec![write], next);
            }
        }
        let alone = vec![entry.to_vec()];
        let (pieces, keep) = if index == 0 {
            (vec![alone, std::mem::take(&mut spot.chunk.entries)], 1)
        } else if index == count {
            (vec![std::mem::take(&mut spot.chunk.entries), alone], 0)
        } else {
            spot.chunk.entries.insert(index, entry.to_vec());
            (self.split(std::mem::take(&mut spot.chunk.entries)), 0)
        };
        let writes = self.reshape(records, spot, pieces, keep, &mut next)?;
        self.commit(records, writes, next)
    }

    /// Removes and returns the entry at `rank` (`rank < len`, else panics). Removing the last
    /// entry deletes every record.
    pub fn remove_at(&mut self, records: &mut impl Records, rank: u64) -> Result<Vec<u8>> {
        assert!(
            rank < self.len,
            "List::remove_at: rank {rank} out of range (len {})",
            self.len
        );
        if rank == 0 || rank + 1 == self.len {
            if let Some(removed) = self.pop_in_place(records, rank == 0)? {
                return Ok(removed);
            }
        }
        let mut spot = self.locate(records, rank, false)?;
        let removed = spot.chunk.entries.remove(spot.index);
        let mut next = List {
            len: self.len - 1,
            ..*self
        };
        if spot.chunk.entries.is_empty() {
            let writes = self.unlink(records, spot, &mut next)?;
            self.commit(records, writes, next)?;
            return Ok(removed);
        }
        let end = rank == 0 || rank + 1 == self.len;
        if !end && self.limits.small(&spot.chunk) {
            if let Some((writes, merged)) = self.merge_plan(records, &spot, next)? {
                self.check_next(&merged)?;
                match self.apply(records, writes) {
                    Ok(()) => {
                        *self = merged;
                        return Ok(removed);
                    }
                    Err((step, error)) if step > 0 => return Err(error),
                    // The merged chunk was refused (it is bigger): remove without merging.
                    Err(_) => {}
                }
            }
        }
        self.commit(records, vec![spot.rewrite()], next)?;
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
            "List::replace_at: rank {rank} out of range (len {})",
            self.len
        );
        let mut spot = self.locate(records, rank, false)?;
        spot.chunk.entries[spot.index] = entry.to_vec();
        let mut next = *self;
        if self.limits.fits(&spot.chunk.entries) {
            return self.commit(records, vec![spot.rewrite()], next);
        }
        let pieces = self.split(std::mem::take(&mut spot.chunk.entries));
        let writes = self.reshape(records, spot, pieces, 0, &mut next)?;
        self.commit(records, writes, next)
    }

    /// Visits entries from `rank` upwards (`visit(rank, entry)`) until the end or until `visit`
    /// breaks (nothing when `rank >= len`). Reads one chunk per up to 128 entries after the walk
    /// to `rank`.
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

    /// Visits entries from `rank` downwards (`rank < len`; nothing when the list is empty; panics
    /// when `rank >= len` on a non-empty list), like [`List::range`].
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
            "List::range_rev: rank {rank} out of range (len {})",
            self.len
        );
        self.walk(records, rank, false, visit)
    }

    /// Deletes every record; the list is empty afterwards (`next_chunk` keeps growing). Reads
    /// the whole chain first: a damaged list is reported before anything is deleted.
    pub fn clear(&mut self, records: &mut impl Records) -> Result<()> {
        let mut doomed = Vec::new();
        let mut entries = 0u64;
        let (mut id, mut from) = (self.head, 0);
        while id != 0 {
            if doomed.len() as u64 == self.chunks {
                return Err(self.damaged(id, "more chunks than the header counts"));
            }
            let (chunk, _) = self.read(records, id)?;
            if chunk.prev != from {
                return Err(self.damaged(id, "links disagree with its neighbour's"));
            }
            entries += chunk.entries.len() as u64;
            doomed.push(id);
            (from, id) = (id, chunk.next);
        }
        if doomed.len() as u64 != self.chunks || entries != self.len {
            return Err(Error::Corrupt(format!(
                "list {}: {} chunks of {entries} entries, the header says {} of {}",
                self.id,
                doomed.len(),
                self.chunks,
                self.len
            )));
        }
        (self.len, self.head, self.tail, self.chunks) = (0, 0, 0, 0);
        for id in doomed {
            records.delete(&self.key(id))?;
        }
        Ok(())
    }
}

// Reading and walking.
impl List {
    /// The common case of a push at an end, on the end chunk's bytes: when it has room, the entry
    /// is spliced into the record as read and written back (one read, one write, no allocation:
    /// the record is read into the thread's scratch buffer, and only the chunk's head is
    /// decoded, so a push costs the same however many entries the chunk holds). `false` when the
    /// general path must run (no room, or anything unexpected, which that path reads again and
    /// reports). One write, so an error leaves everything as it was.
    fn push_in_place(
        &mut self,
        records: &mut impl Records,
        front: bool,
        entry: &[u8],
    ) -> Result<bool> {
        let id = if front { self.head } else { self.tail };
        crate::with_scratch(|raw| {
            let Some(head) = self.read_end(records, id, raw)? else {
                return Ok(false);
            };
            let added = 4 + entry.len();
            if head.count >= self.limits.max_entries || raw.len() + added > self.limits.max_bytes {
                self.push_new_chunk(records, front, entry, id, raw)?;
                return Ok(true);
            }
            let next = List {
                len: self.len + 1,
                ..*self
            };
            self.check_next(&next)?;
            raw[16..CHUNK_HEAD_BYTES].copy_from_slice(&(head.count as u32 + 1).to_le_bytes());
            if front {
                // Shift the entries up and write the new one in front of them.
                let old = raw.len();
                raw.resize(old + added, 0);
                raw.copy_within(CHUNK_HEAD_BYTES..old, CHUNK_HEAD_BYTES + added);
                let at = CHUNK_HEAD_BYTES;
                raw[at..at + 4].copy_from_slice(&(entry.len() as u32).to_le_bytes());
                raw[at + 4..at + added].copy_from_slice(entry);
            } else {
                put_bytes(raw, entry);
            }
            // Room to grow: pushes at this end fill the chunk one entry at a time.
            let capacity = crate::capacity_hint(raw.len(), self.limits.max_bytes);
            records.put_with_capacity(&self.key(id), raw, capacity)?;
            *self = next;
            Ok(true)
        })
    }

    /// A push onto a full end chunk `id` (its record in `raw`): a new one-entry chunk beyond it,
    /// and the old end's link patched on its bytes; the records the general path would write,
    /// without decoding the old chunk. The fresh chunk is written first (the only write that can
    /// fail for size; nothing changed then), then the same-size relink; when that is refused the
    /// fresh chunk is deleted again and the error returned (module docs, "Errors").
    fn push_new_chunk(
        &mut self,
        records: &mut impl Records,
        front: bool,
        entry: &[u8],
        id: u64,
        raw: &mut [u8],
    ) -> Result<()> {
        let fresh = self.next_chunk;
        let next = List {
            len: self.len + 1,
            chunks: self.chunks + 1,
            next_chunk: fresh + 1,
            head: if front { fresh } else { self.head },
            tail: if front { self.tail } else { fresh },
            ..*self
        };
        self.check_next(&next)?;
        let (prev, after) = if front { (0, id) } else { (id, 0) };
        let mut bytes = Vec::with_capacity(CHUNK_HEAD_BYTES + 4 + entry.len());
        bytes.extend_from_slice(&prev.to_le_bytes());
        bytes.extend_from_slice(&after.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        put_bytes(&mut bytes, entry);
        let capacity = crate::capacity_hint(bytes.len(), self.limits.max_bytes);
        records.put_with_capacity(&self.key(fresh), &bytes, capacity)?;
        let link = if front { 0..8 } else { 8..16 };
        raw[link].copy_from_slice(&fresh.to_le_bytes());
        let capacity = crate::capacity_hint(raw.len(), self.limits.max_bytes);
        if let Err(error) = records.put_with_capacity(&self.key(id), raw, capacity) {
            let _ = records.delete(&self.key(fresh));
            return Err(error);
        }
        *self = next;
        Ok(())
    }

    /// The common case of a pop at an end, on the end chunk's bytes: when the chunk keeps at
    /// least one entry, the first (or last) is cut out of the record as read and the record
    /// written back (no allocation but the returned entry). `None` when the general path must
    /// run (the chunk would empty, or anything unexpected).
    fn pop_in_place(&mut self, records: &mut impl Records, front: bool) -> Result<Option<Vec<u8>>> {
        let id = if front { self.head } else { self.tail };
        crate::with_scratch(|raw| {
            let Some(head) = self.read_end(records, id, raw)? else {
                return Ok(None);
            };
            if head.count < 2 {
                return Ok(None);
            }
            // The popped entry's span: the first one's is read from its length; the last one's
            // start is found by walking the lengths, which also checks the whole record.
            let span = if front {
                let length = u32::from_le_bytes(
                    raw[CHUNK_HEAD_BYTES..CHUNK_HEAD_BYTES + 4]
                        .try_into()
                        .expect("4 bytes"),
                ) as usize;
                let end = CHUNK_HEAD_BYTES + 4 + length;
                (end <= raw.len()).then_some(CHUNK_HEAD_BYTES..end)
            } else {
                last_entry_start(raw, head.count).map(|start| start..raw.len())
            };
            let Some(span) = span else {
                return Ok(None);
            };
            let next = List {
                len: self.len - 1,
                ..*self
            };
            self.check_next(&next)?;
            let removed = raw[span.start + 4..span.end].to_vec();
            raw.copy_within(span.end.., span.start);
            raw.truncate(raw.len() - span.len());
            raw[16..CHUNK_HEAD_BYTES].copy_from_slice(&(head.count as u32 - 1).to_le_bytes());
            records.put(&self.key(id), raw)?;
            *self = next;
            Ok(Some(removed))
        })
    }

    /// Reads end chunk `id` into `raw` and checks its head as [`List::read`] checks a chunk
    /// (links to the header, a count of at least one, and at least 4 bytes per counted entry),
    /// without decoding the entries; `None` for anything unexpected, which the general path then
    /// reads again and reports. Damage inside the entries is not looked for here: an end
    /// operation splices bytes at one end and leaves the others as they were, and the first read
    /// that decodes them reports it (module docs, "Damaged data").
    fn read_end(
        &self,
        records: &mut impl Records,
        id: u64,
        raw: &mut Vec<u8>,
    ) -> Result<Option<ChunkHead>> {
        if id == 0 || id >= self.next_chunk || !records.get(&self.key(id), raw)? {
            return Ok(None);
        }
        let Some(head) = ChunkHead::of(raw) else {
            return Ok(None);
        };
        let linked = head.prev != id
            && head.next != id
            && (head.prev == 0) == (id == self.head)
            && (head.next == 0) == (id == self.tail);
        Ok(linked.then_some(head))
    }

    fn key(&self, chunk: u64) -> [u8; RECORD_KEY_BYTES] {
        record_key(self.id, Part::ListChunk, chunk)
    }

    fn damaged(&self, chunk: u64, what: &str) -> Error {
        Error::Corrupt(format!("list {} chunk {chunk}: {what}", self.id))
    }

    /// Reads chunk `id` (and its record), checking its id and that its ends agree with the
    /// header's `head` and `tail`.
    fn read(&self, records: &mut impl Records, id: u64) -> Result<(Chunk, Vec<u8>)> {
        if id == 0 || id >= self.next_chunk {
            let what = format!("id not below next_chunk {}", self.next_chunk);
            return Err(self.damaged(id, &what));
        }
        let mut raw = Vec::new();
        if !records.get(&self.key(id), &mut raw)? {
            return Err(self.damaged(id, "missing"));
        }
        let chunk = Chunk::decode(&raw).map_err(|error| match error {
            Error::Corrupt(what) => self.damaged(id, &what),
            other => other,
        })?;
        if chunk.prev == id
            || chunk.next == id
            || (chunk.prev == 0) != (id == self.head)
            || (chunk.next == 0) != (id == self.tail)
        {
            return Err(self.damaged(id, "links disagree with the header"));
        }
        Ok((chunk, raw))
    }

    /// The chunk holding position `rank` and the index in it, walking from the nearer end (at
    /// most `chunks` reads). With `insert`, `rank` may be `len`, and an index may be one past
    /// the chunk's last entry. The list must not be empty.
    fn locate(&self, records: &mut impl Records, rank: u64, insert: bool) -> Result<Spot> {
        debug_assert!(!self.is_empty() && (rank < self.len || (insert && rank == self.len)));
        let forward = rank < self.len / 2;
        // Entries before the position (forward), or at and after it (backward).
        let mut left = if forward { rank } else { self.len - rank };
        let (mut id, mut from) = (if forward { self.head } else { self.tail }, 0);
        for _ in 0..self.chunks {
            let (chunk, raw) = self.read(records, id)?;
            let (back, onward) = match forward {
                true => (chunk.prev, chunk.next),
                false => (chunk.next, chunk.prev),
            };
            if back != from {
                return Err(self.damaged(id, "links disagree with its neighbour's"));
            }
            let count = chunk.entries.len() as u64;
            let index = match forward {
                true => (left < count || (insert && left == count)).then_some(left),
                false => (left <= count).then(|| count - left),
            };
            if let Some(index) = index {
                let index = index as usize;
                return Ok(Spot {
                    id,
                    chunk,
                    raw,
                    index,
                });
            }
            if onward == 0 {
                return Err(self.damaged(id, "the counts add up to less than len"));
            }
            left -= count;
            (from, id) = (id, onward);
        }
        Err(self.damaged(id, "more chunks than the header counts"))
    }

    /// Visits entries from `rank` (below `len`) on, upwards (`forward`) or downwards: the walk
    /// to `rank`, then one read per chunk entered, checking links and counts on the way.
    fn walk(
        &self,
        records: &mut impl Records,
        rank: u64,
        forward: bool,
        mut visit: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let Spot {
            mut id,
            mut chunk,
            mut index,
            ..
        } = self.locate(records, rank, false)?;
        let short = |id| self.damaged(id, "the counts do not add up to len");
        // Rank of the current chunk's first entry.
        let mut base = rank.checked_sub(index as u64).ok_or_else(|| short(id))?;
        for _ in 0..self.chunks {
            let count = chunk.entries.len();
            if base + count as u64 > self.len {
                return Err(short(id));
            }
            if forward {
                for (at, entry) in chunk.entries.iter().enumerate().skip(index) {
                    if visit(base + at as u64, entry).is_break() {
                        return Ok(());
                    }
                }
            } else {
                for at in (0..=index).rev() {
                    if visit(base + at as u64, &chunk.entries[at]).is_break() {
                        return Ok(());
                    }
                }
            }
            let onward = if forward { chunk.next } else { chunk.prev };
            if onward == 0 {
                // The chain ends: the ranks walked must reach the end (forward) or 0.
                let whole = if forward {
                    base + count as u64 == self.len
                } else {
                    base == 0
                };
                return if whole { Ok(()) } else { Err(short(id)) };
            }
            let (step, _) = self.read(records, onward)?;
            if (if forward { step.prev } else { step.next }) != id {
                return Err(self.damaged(onward, "links disagree with its neighbour's"));
            }
            if forward {
                base += count as u64;
                index = 0;
            } else {
                let before = step.entries.len();
                base = base
                    .checked_sub(before as u64)
                    .ok_or_else(|| short(onward))?;
                index = before - 1;
            }
            (id, chunk) = (onward, step);
        }
        Err(self.damaged(id, "more chunks than the header counts"))
    }
}

/// The head of a chunk record (format in the module docs), as far as it can be checked without
/// decoding the entries.
struct ChunkHead {
    prev: u64,
    next: u64,
    count: usize,
}

impl ChunkHead {
    /// `None` unless the record has a head, a count of at least one and at least the 4 bytes of
    /// a length per counted entry.
    fn of(raw: &[u8]) -> Option<ChunkHead> {
        let mut rest = raw;
        let prev = crate::take_u64(&mut rest, "").ok()?;
        let next = crate::take_u64(&mut rest, "").ok()?;
        let count = crate::take_u32(&mut rest, "").ok()? as usize;
        (count > 0 && rest.len() / 4 >= count).then_some(ChunkHead { prev, next, count })
    }
}

/// The offset of the last entry's length prefix in a chunk record of `count` entries, walking
/// the lengths (no copy); `None` unless the entries fill the record exactly.
fn last_entry_start(raw: &[u8], count: usize) -> Option<usize> {
    let mut rest = raw.get(CHUNK_HEAD_BYTES..)?;
    let mut last_start = 0;
    for _ in 0..count {
        last_start = raw.len() - rest.len();
        crate::take_bytes(&mut rest, "").ok()?;
    }
    rest.is_empty().then_some(last_start)
}
