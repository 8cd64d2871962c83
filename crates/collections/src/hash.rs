//! A map of byte strings by linear hashing: one record per bucket, grown and shrunk one bucket
//! at a time.
//!
//! # Shape
//!
//! A field's hash is `h = xxh3_64(field)`. The table has `2^level + split` buckets
//! (`split < 2^level`): bucket `b = h mod 2^level`, unless `b < split` (bucket `b` was already
//! split this round), in which case `b = h mod 2^(level+1)`. Buckets `split..2^level` use the
//! coarse mask `2^level - 1`; buckets `0..split` and `2^level..2^level + split` the fine mask
//! `2^(level+1) - 1`. An insert that brings the average load above [`MAX_LOAD`] entries per
//! bucket splits bucket `split` into `split` and `split + 2^level` (the entries whose bit `level`
//! is set move) and advances `split` (at `2^level` the round ends: `level += 1`, `split = 0`). A
//! removal that brings it below [`MIN_LOAD`] merges the last bucket back into its partner (the
//! reverse of the last split). One split or merge per update: each adds or removes [`MAX_LOAD`]
//! or [`MIN_LOAD`] entries' worth of room while the update changes `len` by one, so one step per
//! update keeps the load between the two bounds, and an update reads and writes at most six
//! records however large the map is.
//!
//! # Formats
//!
//! Header ([`HEADER_BYTES`], little-endian): `[id u64][len u64][level u8][split u64]`, with
//! `level <= 62` (so that `2^(level+1)` fits in a u64), `split < 2^level`, and `len == 0` only
//! with the one-bucket shape (`level == split == 0`).
//!
//! Bucket `b`: record [`crate::record_key`]`(id, Part::HashBucket, b)`, value
//! `[count u32 LE]` then `count` times `[field len u32][field][value len u32][value]` (lengths
//! little-endian), nothing after. `count >= 1`: an empty bucket has no record.
//!
//! # Invariants
//!
//! Under a header written back after an `Ok` update:
//! - Each entry is in the bucket its hash names (above) and in no other; the fields of a bucket
//!   are distinct.
//! - A bucket `b < bucket_count` has a record exactly when it has entries, and the record holds
//!   them all; `len` is the total number of entries.
//! - Records at indices `>= bucket_count` are never read. Every split writes (puts or deletes)
//!   the bucket it brings into the table before the header counts it, and a reset to one bucket
//!   ([`Hash::clear`], removing the last entry) deletes bucket 0 first; so a leftover record
//!   beyond the table (after an error, below) is harmless: it is replaced before it is reached.
//! - Reading checks all of this that one bucket shows (lengths, count, nothing trailing, every
//!   entry in the right bucket): a violation is [`Error::Corrupt`], never a panic.
//!
//! # Errors and crash safety
//!
//! The caller writes every record of an update and the header in one store transaction, so a
//! checkpoint and the log hold the update whole; what remains is an update cut short by an
//! error. The store has no rollback, so the writes an update made before the error stay. Each
//! update therefore makes its one content change (the bucket holding the field) as its first
//! write, and only then reshapes the table:
//! - The content write fails: `Err`, nothing was written; `self` and the old header still
//!   describe the records exactly. This is where a record too large for the store is refused
//!   (the entry's bucket is the only record an update makes larger, apart from a merge below).
//! - A split or merge write fails after the content write succeeded: the update still returns
//!   `Ok`, with the header of the content change and the shape of the last step that completed,
//!   and that header describes the records exactly; the reshaping is retried by the next update.
//!   Returning `Err` instead would leave the caller with the old header, which counts one entry
//!   too many or too few. The orders that make this hold: a split writes the new bucket
//!   `split + 2^level` (which the unsplit header never reads) before rewriting bucket `split`; a
//!   merge writes the union into the partner (the shape changes once that succeeded), then
//!   deletes the last bucket, which is beyond the merged table if the delete fails. Either can
//!   leave a leftover record beyond the table (harmless, above). A merge whose union is too large
//!   for one record is refused this way every time: the table then stays larger than the load
//!   asks, which costs only space.
//! - A reset ([`Hash::clear`], removing the last entry) deletes the bucket holding entries (bucket
//!   0 for `clear`) first: if that fails, `Err` and nothing changed; after that the empty
//!   one-bucket header is exact, and failures deleting the other buckets leave only leftovers.
//!   A leftover that is never reached again (the table never regrows that far) is leaked space.
//! - Not covered: a store error that reports a write as failed although the engine applied it
//!   (the log append failing after the engine write). The store is failing then; the update is
//!   reported failed, and the records keep its writes up to that one, which the old header may
//!   not describe (nothing here can undo a write, as for any other record of the store).
//!
//! # Scan
//!
//! The cursor is Redis's `dictScan` cursor. Let `rev` reverse the 64 bits of a word. A step at
//! cursor `v` finds the bucket holding the hashes `h` with `h & m == v & m`, where `m` is that
//! bucket's own mask (`2^level - 1` or `2^(level+1) - 1`, `k` bits): every such `h` is in that
//! one bucket and the bucket holds nothing else, so the step visits the bucket whole. It returns
//! `rev(rev(v | !m) + 1)`: with `P = rev(v)`, the next `P` is `P` cut to its top `k` bits plus
//! `2^(64-k)`, the start of the next interval of `2^(64-k)` values of `rev(h)`.
//!
//! Why every entry present for the whole scan is visited: the classes `h & m == v & m` are
//! exactly the intervals `[floor_k(P), floor_k(P) + 2^(64-k))` of `rev(h)`, where `floor_k`
//! clears all but the top `k` bits. Claim: before each step, every `h` with `rev(h) < P` that
//! has been present since the scan started was visited. At the start `P = 0`. A step visits the
//! interval from `floor_k(P) <= P` to the next `P`, in the table as it is at that step, so the
//! claim holds again after it, whatever mask the table had at earlier steps (a coarser mask now
//! only makes the step start before `P`, repeating entries: the duplicates Redis allows too).
//! `P` strictly increases, and the scan ends when it wraps past `2^64 - 1`, i.e. after an
//! interval reaching the top: then every `rev(h)`, hence every `h`, was covered.
//!
//! Each bucket of an unchanging table is one class, so a scan over it visits every entry
//! exactly once in `bucket_count` steps, and every step reads one record.

use xxhash_rust::xxh3::xxh3_64;

use crate::{
    put_bytes, record_key, take_bytes, take_u32, take_u64, Error, Part, Records, Result,
    RECORD_KEY_BYTES,
};

/// Bytes of an encoded [`Hash`](struct@Hash) header.
pub const HEADER_BYTES: usize = 8 + 8 + 1 + 8;

/// Average entries per bucket above which an insert splits a bucket: a bucket record holds about
/// this many entries, so a lookup reads one record of a few hundred bytes for small entries.
pub const MAX_LOAD: u64 = 8;

/// Average entries per bucket below which a removal merges the last bucket back. A quarter of
/// [`MAX_LOAD`], so that inserting and removing around one size does not split and merge the
/// same bucket over and over.
pub const MIN_LOAD: u64 = MAX_LOAD / 4;

/// Buckets up to this size are written with room to grow ([`crate::capacity_hint`]); larger
/// ones (large fields or values) are written exact. Far above a bucket of [`MAX_LOAD`] small
/// entries.
pub const HINT_MAX_BYTES: usize = 16 << 10;

/// The largest `level`: `2^(level+1) - 1` (the fine mask) must fit in a u64.
pub const MAX_LEVEL: u8 = 62;

/// Draws from the seed before [`Hash::random`] falls back to walking the buckets in order.
const RANDOM_TRIES: u32 = 64;

/// A map's header: kept by the application in its root record (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hash {
    /// The object id its records are keyed under.
    pub id: u64,
    len: u64,
    level: u8,
    split: u64,
}

/// One entry of a decoded bucket, borrowed from the record bytes.
#[derive(Clone, Copy, Debug)]
struct Entry<'a> {
    hash: u64,
    field: &'a [u8],
    value: &'a [u8],
}

/// Where an entry lies in its bucket record's bytes.
#[derive(Clone, Debug)]
struct Located {
    /// The whole entry, from its field's length to its value's end.
    entry: std::ops::Range<usize>,
    /// The value's bytes.
    value: std::ops::Range<usize>,
}

fn corrupt(detail: String) -> Error {
    Error::Corrupt(detail)
}

/// The next state of the splitmix64 sequence and its output.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The scan cursor after `cursor` at a `mask` of low bits: the reverse-binary increment of the
/// masked bits (module docs, "Scan"); 0 once every class was covered.
fn next_cursor(cursor: u64, mask: u64) -> u64 {
    (cursor | !mask)
        .reverse_bits()
        .wrapping_add(1)
        .reverse_bits()
}

/// Encodes `entries` as a bucket record into `out` (cleared first).
fn encode_bucket(entries: &[Entry<'_>], out: &mut Vec<u8>) {
    out.clear();
    let count = u32::try_from(entries.len()).expect("a bucket holds fewer than 2^32 entries");
    out.extend_from_slice(&count.to_le_bytes());
    for entry in entries {
        put_bytes(out, entry.field);
        put_bytes(out, entry.value);
    }
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

    /// Number of buckets, `2^level + split` (each at most one record): what [`Hash::clear`] and
    /// [`Hash::for_each`] read or delete.
    pub fn bucket_count(&self) -> u64 {
        (1u64 << self.level) + self.split
    }

    /// Appends the header ([`HEADER_BYTES`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The header's bytes, as [`Hash::encode`] appends them (on the stack: writing a header back
    /// after every insert must not allocate).
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[..8].copy_from_slice(&self.id.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.len.to_le_bytes());
        bytes[16] = self.level;
        bytes[17..].copy_from_slice(&self.split.to_le_bytes());
        bytes
    }

    /// Reads a header from the front of `rest`, checking it is consistent, and advances `rest`
    /// by exactly [`HEADER_BYTES`] (what follows belongs to the caller's root record). On an
    /// error `rest` is unchanged.
    pub fn decode(rest: &mut &[u8]) -> Result<Hash> {
        let mut bytes = *rest;
        let id = take_u64(&mut bytes, "hash header id")?;
        let len = take_u64(&mut bytes, "hash header length")?;
        let (&level, tail) = bytes
            .split_first()
            .ok_or_else(|| corrupt("hash header level cut short".into()))?;
        bytes = tail;
        let split = take_u64(&mut bytes, "hash header split")?;
        if level > MAX_LEVEL {
            return Err(corrupt(format!(
                "hash {id} header: level {level} above {MAX_LEVEL}"
            )));
        }
        if split >= 1u64 << level {
            return Err(corrupt(format!(
                "hash {id} header: split {split} not below 2^{level}"
            )));
        }
        if len == 0 && (level, split) != (0, 0) {
            return Err(corrupt(format!(
                "hash {id} header: empty but {} buckets",
                (1u64 << level) + split
            )));
        }
        *rest = bytes;
        Ok(Hash {
            id,
            len,
            level,
            split,
        })
    }

    /// Reads `field`'s value into `out` (cleared first); whether it exists. The bucket is read
    /// into the thread's scratch buffer and searched on its bytes: no allocation.
    pub fn get(&self, records: &mut impl Records, field: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        let hash = xxh3_64(field);
        let index = self.bucket_of(hash);
        crate::with_scratch(|bytes| {
            if !records.get(&self.bucket_key(index), bytes)? {
                return Ok(false);
            }
            let Some(at) = self.find(index, bytes, hash, field)?.1 else {
                return Ok(false);
            };
            out.extend_from_slice(&bytes[at.value]);
            Ok(true)
        })
    }

    /// Sets `field` to `value`; whether the field is new.
    ///
    /// Reads and writes at most five records. On `Err` nothing was written and `self` is
    /// unchanged (module docs, "Errors"). The bucket is read into the thread's scratch buffer
    /// and changed there (the value overwritten or spliced, or the entry appended): no
    /// allocation unless the table splits. Setting a field to the value it holds writes nothing.
    pub fn insert(
        &mut self,
        records: &mut impl Records,
        field: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        if u32::try_from(field.len().max(value.len())).is_err() {
            return Err(Error::Store(prefixkv_store::StoreError::Storage(format!(
                "hash field or value of {} bytes: at most 4 GiB",
                field.len().max(value.len())
            ))));
        }
        let hash = xxh3_64(field);
        let index = self.bucket_of(hash);
        let key = self.bucket_key(index);
        crate::with_scratch(|bytes| {
            let (count, found) = match records.get(&key, bytes)? {
                true => self.find(index, bytes, hash, field)?,
                false => {
                    bytes.clear();
                    bytes.extend_from_slice(&0u32.to_le_bytes());
                    (0, None)
                }
            };
            let new = found.is_none();
            match found {
                Some(at) if bytes[at.value.clone()] == *value => return Ok(false),
                Some(at) => {
                    let prefix = at.value.start - 4;
                    bytes[prefix..at.value.start]
                        .copy_from_slice(&(value.len() as u32).to_le_bytes());
                    bytes.splice(at.value, value.iter().copied());
                }
                None => {
                    let count = count.checked_add(1).ok_or_else(|| {
                        corrupt(format!("hash {} bucket {index}: count overflows", self.id))
                    })?;
                    bytes[..4].copy_from_slice(&count.to_le_bytes());
                    put_bytes(bytes, field);
                    put_bytes(bytes, value);
                }
            }
            let len = if new {
                self.len.checked_add(1).ok_or_else(|| {
                    corrupt(format!(
                        "hash {} header: length {} overflows",
                        self.id, self.len
                    ))
                })?
            } else {
                self.len
            };
            // Room to grow: a bucket gains one entry per insert until it splits.
            let capacity = crate::capacity_hint(bytes.len(), HINT_MAX_BYTES);
            records.put_with_capacity(&key, bytes, capacity)?;
            // The content change is in the records: from here the update succeeds.
            self.len = len;
            if new && self.needs_split() {
                // A failed split leaves the records exact under the unsplit shape it keeps
                // (module docs, "Errors"); the next insert tries again. The bucket as written
                // decoded before, so decoding it again does not fail.
                if let Ok(entries) = self.decode_bucket(index, bytes) {
                    let _ = self.split_one(records, index, &entries, &mut Vec::new());
                }
            }
            self.debug_check();
            Ok(new)
        })
    }

    /// Removes `field`; whether it existed. Removing the last entry deletes every record.
    ///
    /// Reads and writes at most six records (removing the last entry: one read and a delete per
    /// bucket, which shrinking keeps at one). On `Err` nothing was written and `self` is
    /// unchanged (module docs, "Errors"). The entry is cut out of the bucket's bytes in the
    /// thread's scratch buffer: no allocation unless the table merges.
    pub fn remove(&mut self, records: &mut impl Records, field: &[u8]) -> Result<bool> {
        let hash = xxh3_64(field);
        let index = self.bucket_of(hash);
        let key = self.bucket_key(index);
        crate::with_scratch(|bytes| {
            if !records.get(&key, bytes)? {
                return Ok(false);
            }
            let (count, Some(at)) = self.find(index, bytes, hash, field)? else {
                return Ok(false);
            };
            let len = self.len.checked_sub(1).ok_or_else(|| {
                corrupt(format!(
                    "hash {} header: empty but bucket {index} holds entries",
                    self.id
                ))
            })?;
            if len == 0 {
                if count != 1 {
                    return Err(corrupt(format!(
                        "hash {} header: one entry but bucket {index} holds {count}",
                        self.id
                    )));
                }
                self.reset(records, index)?;
                return Ok(true);
            }
            if count == 1 {
                records.delete(&key)?;
            } else {
                bytes.drain(at.entry.clone());
                bytes[..4].copy_from_slice(&(count - 1).to_le_bytes());
                let capacity = crate::capacity_hint(bytes.len(), HINT_MAX_BYTES);
                records.put_with_capacity(&key, bytes, capacity)?;
            }
            // The content change is in the records: from here the update succeeds.
            self.len = len;
            if self.needs_merge() {
                // A failed merge leaves the records exact under the shape it keeps (module docs,
                // "Errors"); the next removal tries again. The bucket as written decoded before.
                let known = match count {
                    1 => Ok(Vec::new()),
                    _ => self.decode_bucket(index, bytes),
                };
                if let Ok(known) = known {
                    let _ = self.merge_last(records, index, &known, &mut Vec::new());
                }
            }
            self.debug_check();
            Ok(true)
        })
    }

    /// One step of a scan: visits some entries and returns the cursor to continue from, 0 at the
    /// end (start at 0). Every entry present for the whole scan is visited at least once, even
    /// when the table grows or shrinks between steps (entries may be visited more than once
    /// then); a step reads one bucket and visits all of it. Any cursor is accepted (module docs,
    /// "Scan").
    pub fn scan(
        &self,
        records: &mut impl Records,
        cursor: u64,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        let coarse = (1u64 << self.level) - 1;
        let fine = (2u64 << self.level) - 1;
        // The bucket's own mask: the class `h & mask == cursor & mask` is that bucket, whole.
        let mask = if cursor & coarse < self.split {
            fine
        } else {
            coarse
        };
        let mut bytes = Vec::new();
        for entry in self.read_bucket(records, cursor & mask, &mut bytes)? {
            visit(entry.field, entry.value);
        }
        Ok(next_cursor(cursor, mask))
    }

    /// Visits every entry (in bucket order).
    pub fn for_each(
        &self,
        records: &mut impl Records,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        let mut bytes = Vec::new();
        for index in 0..self.bucket_count() {
            for entry in self.read_bucket(records, index, &mut bytes)? {
                visit(entry.field, entry.value);
            }
        }
        Ok(())
    }

    /// A random entry, drawn with `seed`: `None` when empty. Not exactly uniform (a random
    /// non-empty bucket, then a random entry of it), as Redis's own sampling is not.
    ///
    /// Draws up to 64 buckets from the seed's splitmix64 sequence; if all are empty (the load
    /// keeps an average of at least [`MIN_LOAD`] per bucket, so this is rare), walks from a
    /// random bucket to the next non-empty one.
    pub fn random(
        &self,
        records: &mut impl Records,
        seed: u64,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.len == 0 {
            return Ok(None);
        }
        let count = self.bucket_count();
        let mut state = seed;
        let mut bytes = Vec::new();
        let pick = |entries: &[Entry<'_>], state: &mut u64| {
            let entry = entries[(splitmix64(state) % entries.len() as u64) as usize];
            (entry.field.to_vec(), entry.value.to_vec())
        };
        for _ in 0..RANDOM_TRIES {
            let index = splitmix64(&mut state) % count;
            let entries = self.read_bucket(records, index, &mut bytes)?;
            if !entries.is_empty() {
                return Ok(Some(pick(&entries, &mut state)));
            }
        }
        let start = splitmix64(&mut state) % count;
        for step in 0..count {
            let index = (start + step) % count;
            let entries = self.read_bucket(records, index, &mut bytes)?;
            if !entries.is_empty() {
                return Ok(Some(pick(&entries, &mut state)));
            }
        }
        Err(corrupt(format!(
            "hash {} header: {} entries but every bucket is empty",
            self.id, self.len
        )))
    }

    /// Deletes every record; the map is empty afterwards. On `Err` nothing was deleted and `self`
    /// is unchanged.
    pub fn clear(&mut self, records: &mut impl Records) -> Result<()> {
        self.reset(records, 0)
    }

    /// The bucket that holds (or would hold) an entry of hash `hash`.
    fn bucket_of(&self, hash: u64) -> u64 {
        let coarse = hash & ((1u64 << self.level) - 1);
        if coarse < self.split {
            hash & ((2u64 << self.level) - 1)
        } else {
            coarse
        }
    }

    fn bucket_key(&self, index: u64) -> [u8; RECORD_KEY_BYTES] {
        record_key(self.id, Part::HashBucket, index)
    }

    /// Whether the load is above [`MAX_LOAD`] and the table can still grow.
    fn needs_split(&self) -> bool {
        let last_of_level = self.split + 1 == 1u64 << self.level;
        self.len > MAX_LOAD.saturating_mul(self.bucket_count())
            && !(last_of_level && self.level == MAX_LEVEL)
    }

    /// Whether the load is below [`MIN_LOAD`] and the table can still shrink.
    fn needs_merge(&self) -> bool {
        let count = self.bucket_count();
        count > 1 && self.len < MIN_LOAD.saturating_mul(count)
    }

    /// Reads bucket `index` into `bytes` and decodes it; no record is an empty bucket.
    fn read_bucket<'b>(
        &self,
        records: &mut impl Records,
        index: u64,
        bytes: &'b mut Vec<u8>,
    ) -> Result<Vec<Entry<'b>>> {
        if !records.get(&self.bucket_key(index), bytes)? {
            return Ok(Vec::new());
        }
        let bytes: &'b [u8] = bytes;
        self.decode_bucket(index, bytes)
    }

    /// Decodes the record of bucket `index`, checking every length, the count, that nothing
    /// trails and that every entry belongs in this bucket.
    fn decode_bucket<'b>(&self, index: u64, bytes: &'b [u8]) -> Result<Vec<Entry<'b>>> {
        // Not sized by the count: a damaged count must not allocate.
        let mut entries = Vec::new();
        self.walk_bucket(index, bytes, |entry, _| entries.push(entry))?;
        debug_assert!(
            entries
                .iter()
                .enumerate()
                .all(|(i, a)| entries[..i].iter().all(|b| a.field != b.field)),
            "hash {} bucket {index}: a field twice",
            self.id
        );
        Ok(entries)
    }

    /// Where `field` (of hash `hash`) is in the record of bucket `index`, and the record's entry
    /// count; checks the whole record as [`Hash::decode_bucket`] does, without allocating.
    fn find(
        &self,
        index: u64,
        bytes: &[u8],
        hash: u64,
        field: &[u8],
    ) -> Result<(u32, Option<Located>)> {
        let mut found = None;
        let count = self.walk_bucket(index, bytes, |entry, at| {
            if found.is_none() && entry.hash == hash && entry.field == field {
                found = Some(at);
            }
        })?;
        Ok((count, found))
    }

    /// Visits the entries of the record of bucket `index` with where each lies, checking every
    /// length, the count, that nothing trails and that every entry belongs in this bucket;
    /// returns the count.
    fn walk_bucket<'b>(
        &self,
        index: u64,
        bytes: &'b [u8],
        mut visit: impl FnMut(Entry<'b>, Located),
    ) -> Result<u32> {
        // Error text is built only on an error: formatting it for every entry read was a tenth of
        // an SADD's time.
        let what = |part: &str| format!("hash {} bucket {index} {part}", self.id);
        let placed = |error: Error| match error {
            Error::Corrupt(detail) => corrupt(format!("hash {} bucket {index} {detail}", self.id)),
            other => other,
        };
        let mut rest = bytes;
        let count = take_u32(&mut rest, "count").map_err(placed)?;
        if count == 0 {
            return Err(corrupt(what("record with no entries")));
        }
        for _ in 0..count {
            let start = bytes.len() - rest.len();
            let field = take_bytes(&mut rest, "field").map_err(placed)?;
            let value = take_bytes(&mut rest, "value").map_err(placed)?;
            let end = bytes.len() - rest.len();
            let hash = xxh3_64(field);
            if self.bucket_of(hash) != index {
                return Err(corrupt(format!(
                    "{}: holds a field of bucket {}",
                    what("record"),
                    self.bucket_of(hash)
                )));
            }
            let located = Located {
                entry: start..end,
                value: end - value.len()..end,
            };
            visit(Entry { hash, field, value }, located);
        }
        if !rest.is_empty() {
            return Err(corrupt(format!(
                "{}: {} bytes after {count} entries",
                what("record"),
                rest.len()
            )));
        }
        Ok(count)
    }

    /// Writes bucket `index` holding `entries`: deletes its record when there are none.
    fn write_bucket(
        &self,
        records: &mut impl Records,
        index: u64,
        entries: &[Entry<'_>],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let key = self.bucket_key(index);
        if entries.is_empty() {
            return records.delete(&key);
        }
        encode_bucket(entries, scratch);
        // Room to grow: a bucket gains one entry per insert until it splits.
        let capacity = crate::capacity_hint(scratch.len(), HINT_MAX_BYTES);
        records.put_with_capacity(&key, scratch, capacity)
    }

    /// Splits bucket `split` (the next of this round) into itself and `split + 2^level`, then
    /// advances the shape. `known` is bucket `known_index` as just written (saves a read when it
    /// is the one to split). On `Err` the shape is unchanged, and so is every bucket the unsplit
    /// shape reads.
    fn split_one(
        &mut self,
        records: &mut impl Records,
        known_index: u64,
        known: &[Entry<'_>],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let low = self.split;
        let high = low + (1u64 << self.level);
        let fine = (2u64 << self.level) - 1;
        let mut bytes = Vec::new();
        let entries = if known_index == low {
            known.to_vec()
        } else {
            self.read_bucket(records, low, &mut bytes)?
        };
        let (stay, moved): (Vec<Entry<'_>>, Vec<Entry<'_>>) = entries
            .iter()
            .copied()
            .partition(|entry| entry.hash & fine == low);
        debug_assert!(moved.iter().all(|entry| entry.hash & fine == high));
        // The new bucket first: the unsplit shape never reads it, so until `low` is rewritten
        // every entry is still where that shape looks. Written even when empty (a delete) to
        // replace any leftover record at `high`.
        self.write_bucket(records, high, &moved, scratch)?;
        if !moved.is_empty() {
            self.write_bucket(records, low, &stay, scratch)?;
        }
        self.split += 1;
        if self.split == 1u64 << self.level {
            self.level += 1;
            self.split = 0;
        }
        Ok(())
    }

    /// Merges the last bucket back into its partner (undoes the last split). `known` is bucket
    /// `known_index` as just written. Changes the shape once the partner holds both halves; an
    /// `Err` before that leaves everything unchanged, and one after it (deleting the last bucket)
    /// leaves that record only as a leftover beyond the table.
    fn merge_last(
        &mut self,
        records: &mut impl Records,
        known_index: u64,
        known: &[Entry<'_>],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let (level, split) = match self.split {
            0 => (self.level - 1, (1u64 << (self.level - 1)) - 1),
            split => (self.level, split - 1),
        };
        let low = split;
        let high = split + (1u64 << level);
        debug_assert_eq!(high + 1, self.bucket_count(), "merging the last bucket");
        let (mut high_bytes, mut low_bytes) = (Vec::new(), Vec::new());
        let moved = if known_index == high {
            known.to_vec()
        } else {
            self.read_bucket(records, high, &mut high_bytes)?
        };
        if !moved.is_empty() {
            let mut merged = if known_index == low {
                known.to_vec()
            } else {
                self.read_bucket(records, low, &mut low_bytes)?
            };
            merged.extend_from_slice(&moved);
            self.write_bucket(records, low, &merged, scratch)?;
        }
        // `low` holds both halves: the merged shape is the exact one from here.
        self.level = level;
        self.split = split;
        if !moved.is_empty() {
            records.delete(&self.bucket_key(high))?;
        }
        Ok(())
    }

    /// Empties the map: deletes bucket `first` (the one holding entries, if any) and then every
    /// other bucket, and resets the shape to one bucket. On `Err` nothing was deleted and `self`
    /// is unchanged.
    fn reset(&mut self, records: &mut impl Records, first: u64) -> Result<()> {
        let count = self.bucket_count();
        records.delete(&self.bucket_key(first))?;
        let old = std::mem::replace(self, Hash::new(self.id));
        // From here the empty one-bucket header is exact whatever else fails: bucket 0 is `first`
        // or was already empty (`remove` checked that `first` held the only entry) and the other
        // buckets lie beyond the new table, so a failed delete only leaves a leftover (module
        // docs, "Errors"); the next delete is still tried.
        for index in (0..count).filter(|&index| index != first) {
            let _ = records.delete(&old.bucket_key(index));
        }
        Ok(())
    }

    /// Debug builds: the shape is one a header may hold.
    fn debug_check(&self) {
        debug_assert!(self.level <= MAX_LEVEL, "{self:?}: level too high");
        debug_assert!(self.split < 1u64 << self.level, "{self:?}: split too high");
        debug_assert!(
            self.len > 0 || self.bucket_count() == 1,
            "{self:?}: empty with several buckets"
        );
    }
}

#[cfg(test)]
mod tests;
