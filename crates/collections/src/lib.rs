//! `prefixkv-collections`: collections (lists, sets, sorted sets, large hashes) stored as many
//! engine records, so that an update costs what Redis documents for it and not the size of the
//! whole collection.
//!
//! Three structures, each a set of records under one object id:
//! - [`hash::Hash`]: a map of byte strings to byte strings by linear hashing. A bucket is one
//!   record; the table grows (and shrinks) one bucket at a time, so an insert or removal reads and
//!   writes O(1) records however large the map is. Used for hashes, sets (empty values) and the
//!   member -> score side of sorted sets.
//! - [`tree::Tree`]: a counted B+tree of byte strings. A node is one record and every child
//!   pointer carries its subtree's entry count, so insertion, removal and lookup by position
//!   (rank) or by byte order cost O(log n) records. Used for lists (by position) and for the
//!   order side of sorted sets (entries `[sortable score][member]`, compared as bytes).
//! - [`list::List`]: a deque of chunks of byte strings, linked both ways (like Redis's
//!   quicklist). A push or pop at either end reads and writes O(1) small records; access by
//!   position walks chunk by chunk from the nearer end. Same positional API as [`tree::Tree`];
//!   meant for lists used as queues.
//!
//! [`List`](list::List) and [`Tree`](tree::Tree) both implement [`Sequence`], their shared
//! positional API (by rank: get, insert, remove, replace, range both ways, clear), so code that
//! keeps a sequence in either is written once.
//!
//! The structures never own the record that names them: the application keeps each one's small
//! fixed-size header ([`hash::Hash`], [`tree::Tree`], [`list::List`]: object id, length, shape)
//! inside its own root record (the user key's value) and writes the header back after every
//! update that changed it. Because the root record and every record of the object are written in one
//! `prefixkv_store::Txn`, a checkpoint and the operation log hold each update whole, and recovery
//! brings back a root together with exactly the records its header describes.
//!
//! Record keys ([`record_key`]): `[0xFF][object id u64 BE][part u8][index u64 BE]`. The first
//! byte 0xFF is never a database number of the server (0..=15), so these records are never
//! mistaken for user keys by KEYS, SCAN or DBSIZE. Big-endian ids keep one object's records
//! together in byte order (useful for reading dumps, not relied upon).
//!
//! # Capacity hints
//!
//! The engine packs a record without slack, so a record rewritten one entry larger would get a
//! new record per write and leave the old one dead until compaction. Records that grow a little
//! at a time are therefore written through [`Records::put_with_capacity`] with
//! [`capacity_hint`]: a hash bucket (every insert adds an entry until the bucket splits) and a
//! list chunk (every push at an end adds one). A record created that way has the smallest size
//! class that holds it; later writes that fit go in place. Size classes grow by
//! [`CAPACITY_GROWTH`] = 1.5, measured with `tests/capacity.rs` (`MemRecords` counts what the
//! engine would allocate; 200k fields `m:NNNNNNNNNN`, 100k pushes of 12-byte entries):
//!
//! | classes | set: allocations/write, capacity/values, dead B/element | list: same |
//! |---|---|---|
//! | none (exact)  | 0.62, x1.35, 125 | 0.99, x1.00, 1040 |
//! | x1.125        | 0.47, x1.43, 86  | 0.22, x1.09, 130 |
//! | x1.25         | 0.33, x1.51, 52  | 0.12, x1.04, 64 |
//! | **x1.5**      | 0.25, x1.64, 32  | 0.08, x1.22, 38 |
//! | x2            | 0.20, x1.95, 20  | 0.05, x1.98, 32 |
//!
//! x1.5 is the knee: against x2 it keeps a third less slack for almost the same garbage, against
//! x1.25 it halves the garbage (which costs compaction work: copying live records) for a little
//! more slack. A bucket that splits keeps its capacity (it is rewritten smaller, in place) and
//! regrows into it, which is most of the hash's slack, hints or not. Records above the
//! structure's largest (a bucket of large fields, [`hash::HINT_MAX_BYTES`]; a chunk's byte limit)
//! are written exact. A tree node gets a hint too (cut to the node byte budget): nodes are
//! rewritten in place under their ids, a leaf gaining an entry per insert and a parent a child
//! per split below it. Slack is engine memory
//! only: recovery writes records exact, and they get slack again when next rewritten.
//!
//! # Allocation on the common path
//!
//! A push or pop at a list's end and a hash's get, insert or remove read the one record they
//! change into a per-thread scratch buffer (`with_scratch`, kept up to 64 KiB) and change it
//! there: no heap allocation per update (the split of a bucket or a chunk allocates, once per
//! many updates). Headers are written back from a stack array (`to_bytes`).
//!
//! Invariants (every structure, every update):
//! - Every access to an object's records happens while the caller holds the lock of the object's
//!   root key (for the server: the root key named in the `Txn`); records are written through
//!   [`Records`], which writes them as records *under* that root.
//! - A header describes exactly the records present: after an update returns `Ok`, the records
//!   and the header written back by the caller agree. After an `Err` (a record too large, the
//!   store refusing a write) the caller must not write the header back and must report the error;
//!   the structure guarantees only that it wrote records the old header does not reach or that
//!   the old header still describes (see each module for what an error can leave).
//! - Decoding checks every length and count against the bytes present: a damaged record is
//!   [`Error::Corrupt`], never a panic, an out-of-bounds read or an allocation sized by a stored
//!   number.

#![warn(missing_docs)]

use std::collections::BTreeMap;

pub mod hash;
pub mod list;
mod sequence;
pub mod tree;

pub use sequence::Sequence;

/// The first byte of every record key of a collection object.
pub const RECORD_TAG: u8 = 0xFF;
/// Bytes of a record key: tag, object id, part, index.
pub const RECORD_KEY_BYTES: usize = 1 + 8 + 1 + 8;

/// Which structure of an object a record belongs to (an object may have one of each: a sorted
/// set has a hash and a tree under the same id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Part {
    /// A bucket of a [`hash::Hash`].
    HashBucket = 1,
    /// A node of a [`tree::Tree`].
    TreeNode = 2,
    /// A chunk of a [`list::List`].
    ListChunk = 3,
}

/// The key of record `index` of `part` of object `id`.
pub fn record_key(id: u64, part: Part, index: u64) -> [u8; RECORD_KEY_BYTES] {
    let mut key = [0u8; RECORD_KEY_BYTES];
    key[0] = RECORD_TAG;
    key[1..9].copy_from_slice(&id.to_be_bytes());
    key[9] = part as u8;
    key[10..18].copy_from_slice(&index.to_be_bytes());
    key
}

/// The object id of a collection record key, or `None` for any other key.
pub fn object_of(key: &[u8]) -> Option<u64> {
    (key.len() == RECORD_KEY_BYTES && key[0] == RECORD_TAG)
        .then(|| u64::from_be_bytes(key[1..9].try_into().expect("8 bytes")))
}

/// Why a collection operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused a write (a record too large for a log page, maxmemory, a failed log).
    #[error(transparent)]
    Store(#[from] prefixkv_store::StoreError),
    /// A record or header does not decode: the data is damaged (or was written by another
    /// program). Nothing was changed.
    #[error("collection record damaged: {0}")]
    Corrupt(String),
}

impl From<prefixkv_store::EngineError> for Error {
    fn from(error: prefixkv_store::EngineError) -> Error {
        Error::Store(prefixkv_store::StoreError::Engine(error))
    }
}

/// Result of a collection operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Where an object's records live: the store inside a transaction ([`Owned`]), or a map in tests
/// ([`MemRecords`]).
pub trait Records {
    /// Reads record `key` into `out` (cleared first); whether it exists.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Writes record `key`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Writes record `key`, asking that a record this write creates have room for a value of
    /// `capacity` bytes (see [`capacity_hint`]): a record rewritten a little larger each time
    /// then grows in place instead of leaving a dead copy per write. Where records have no
    /// capacity (a plain map) this is [`Records::put`].
    fn put_with_capacity(&mut self, key: &[u8], value: &[u8], capacity: usize) -> Result<()> {
        let _ = capacity;
        self.put(key, value)
    }
    /// Deletes record `key` (absent is fine).
    fn delete(&mut self, key: &[u8]) -> Result<()>;
    /// The largest value a record of this object may hold (`None`: no limit), so that an
    /// update writing several records can refuse before its first write (the tree rewrites its
    /// nodes in place and relies on it for its error guarantee).
    fn max_value_bytes(&self) -> Option<usize> {
        None
    }
}

/// The records of an object whose root key `owner` is locked by `txn`: reads and writes go to
/// the store as records under `owner` (`prefixkv_store::Txn::put_under`).
pub struct Owned<'t, 'a> {
    /// The transaction holding `owner`'s lock.
    pub txn: &'t mut prefixkv_store::Txn<'a>,
    /// The root's engine key.
    pub owner: &'t [u8],
}

impl Records for Owned<'_, '_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        Ok(self.txn.get(key, out)?)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.txn.put_under(self.owner, key, value)?;
        Ok(())
    }

    fn put_with_capacity(&mut self, key: &[u8], value: &[u8], capacity: usize) -> Result<()> {
        self.txn
            .put_under_with_capacity(self.owner, key, value, capacity)?;
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.txn.delete_under(self.owner, key)?;
        Ok(())
    }

    fn max_value_bytes(&self) -> Option<usize> {
        // A key too large for any value (never a collection record key) allows none.
        Some(self.txn.max_value_bytes(RECORD_KEY_BYTES).unwrap_or(0))
    }
}

/// Records in a map: for model tests and for tools that look at a collection without a store.
/// Counts its operations so tests can check the per-update cost, and follows the engine's
/// capacity rule (a record keeps the capacity it was created with, in whole words; a value that
/// does not fit gets a new record of `max(value, hint)`) so tests can count the records a store
/// would allocate.
#[derive(Default, Debug, Clone)]
pub struct MemRecords {
    /// The records.
    pub map: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Records read so far.
    pub gets: u64,
    /// Records written or deleted so far.
    pub writes: u64,
    /// When set, a `put` of a value longer than this fails (to test what an error leaves).
    pub max_value_bytes: Option<usize>,
    /// Each record's value capacity in bytes, as the engine would have created it.
    pub capacity: BTreeMap<Vec<u8>, usize>,
    /// Puts that needed a new record (the key had none, or its value did not fit): each leaves
    /// the key's previous record, if any, dead in an engine's log.
    pub allocations: u64,
    /// Value capacity bytes of all the records allocated so far (live and replaced).
    pub allocated_bytes: u64,
}

impl MemRecords {
    /// Value capacity bytes of the records present (what an engine holds for them, without
    /// headers and keys).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity.values().map(|&bytes| bytes as u64).sum()
    }
}

impl Records for MemRecords {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.gets += 1;
        out.clear();
        match self.map.get(key) {
            Some(value) => {
                out.extend_from_slice(value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with_capacity(key, value, 0)
    }

    fn put_with_capacity(&mut self, key: &[u8], value: &[u8], capacity: usize) -> Result<()> {
        if self.max_value_bytes.is_some_and(|max| value.len() > max) {
            return Err(Error::Store(prefixkv_store::StoreError::Storage(format!(
                "value too large: {} bytes",
                value.len()
            ))));
        }
        self.writes += 1;
        let words = |bytes: usize| bytes.div_ceil(8) * 8;
        let fits = self
            .capacity
            .get(key)
            .is_some_and(|&held| words(value.len()) <= held);
        if !fits {
            let held = words(value.len().max(capacity));
            self.capacity.insert(key.to_vec(), held);
            self.allocations += 1;
            self.allocated_bytes += held as u64;
        }
        self.map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.writes += 1;
        self.map.remove(key);
        self.capacity.remove(key);
        Ok(())
    }

    fn max_value_bytes(&self) -> Option<usize> {
        self.max_value_bytes
    }
}

/// The growth factor of [`capacity_hint`]'s size classes, as a fraction: each class is this
/// much larger than the one below (see the crate docs, "Capacity hints", for why 1.5).
pub const CAPACITY_GROWTH: (usize, usize) = (3, 2);
/// The smallest size class of [`capacity_hint`], in bytes.
pub const CAPACITY_FLOOR: usize = 64;

/// The capacity to ask for when writing a record of `len` bytes that grows a little at a time
/// (a hash bucket, a list chunk): the smallest size class that holds `len`, cut to `max` (the
/// structure's largest record; a record larger than that gets no slack). Classes are whole words
/// from [`CAPACITY_FLOOR`] up, each [`CAPACITY_GROWTH`] times the previous, so a record that
/// grows steadily is copied O(log) times instead of once per write.
pub fn capacity_hint(len: usize, max: usize) -> usize {
    if len >= max {
        return len;
    }
    let (numerator, denominator) = CAPACITY_GROWTH;
    let mut class = CAPACITY_FLOOR;
    while class < len {
        // Whole words, and always at least one word larger (the small classes would repeat).
        class = (class * numerator / denominator)
            .div_ceil(8)
            .max(class / 8 + 1)
            * 8;
    }
    class.min(max)
}

/// Scratch buffers larger than this are freed after use instead of kept for the thread's next
/// update (a chunk is at most 8 KiB and a bucket of small entries far less; a huge record read
/// once does not pin its memory).
const SCRATCH_KEEP_BYTES: usize = 64 << 10;

thread_local! {
    /// The buffer [`with_scratch`] lends: one per thread, reused so that reading and rewriting a
    /// record costs no allocation on the common path.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `body` with an empty buffer borrowed from the thread's scratch (a fresh one when it is
/// already lent: nested calls are fine, they just allocate). The buffer is kept for the next call
/// unless it grew past [`SCRATCH_KEEP_BYTES`].
pub(crate) fn with_scratch<R>(body: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut buffer = SCRATCH.with(std::cell::Cell::take);
    buffer.clear();
    let result = body(&mut buffer);
    if buffer.capacity() <= SCRATCH_KEEP_BYTES {
        SCRATCH.with(|slot| slot.set(buffer));
    }
    result
}

/// Reads a little-endian `u32` length or count from the front of `rest`.
pub(crate) fn take_u32(rest: &mut &[u8], what: &str) -> Result<u32> {
    let (head, tail) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| Error::Corrupt(format!("{what} cut short")))?;
    *rest = tail;
    Ok(u32::from_le_bytes(*head))
}

/// Reads a little-endian `u64` from the front of `rest`.
pub(crate) fn take_u64(rest: &mut &[u8], what: &str) -> Result<u64> {
    let (head, tail) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| Error::Corrupt(format!("{what} cut short")))?;
    *rest = tail;
    Ok(u64::from_le_bytes(*head))
}

/// Reads `[len u32][bytes]` from the front of `rest`, checking the length against what is there.
pub(crate) fn take_bytes<'a>(rest: &mut &'a [u8], what: &str) -> Result<&'a [u8]> {
    let length = take_u32(rest, what)? as usize;
    if rest.len() < length {
        return Err(Error::Corrupt(format!(
            "{what}: length {length} but {} bytes left",
            rest.len()
        )));
    }
    let (bytes, tail) = rest.split_at(length);
    *rest = tail;
    Ok(bytes)
}

/// Appends `[len u32][bytes]`.
pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Order-preserving encoding of a sorted-set score: the bytes of `score` compare (as unsigned
/// bytes) as the scores compare numerically, -inf < ... < -0.0 = 0.0 < ... < +inf. NaN is refused
/// by the caller (Redis never stores one). -0.0 is stored as 0.0.
pub fn score_key(score: f64) -> [u8; 8] {
    debug_assert!(!score.is_nan(), "a sorted-set score is never NaN");
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    ordered.to_be_bytes()
}

/// Inverse of [`score_key`].
pub fn score_of_key(bytes: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(bytes);
    let bits = if ordered >> 63 == 1 {
        ordered & !(1 << 63)
    } else {
        !ordered
    };
    f64::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_keys_name_their_object() {
        let key = record_key(0x0102_0304_0506_0708, Part::TreeNode, 9);
        assert_eq!(object_of(&key), Some(0x0102_0304_0506_0708));
        assert_eq!(object_of(b"\x00user key"), None);
        assert_eq!(object_of(&key[..17]), None);
    }

    #[test]
    fn score_keys_sort_as_scores() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            2.5,
            1e300,
            f64::INFINITY,
        ];
        for pair in scores.windows(2) {
            assert!(score_key(pair[0]) < score_key(pair[1]), "{pair:?}");
        }
        for score in scores {
            assert_eq!(score_of_key(score_key(score)), score);
        }
        assert_eq!(score_key(-0.0), score_key(0.0));
    }
}
