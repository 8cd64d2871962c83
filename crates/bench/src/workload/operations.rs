//! FASTER's benchmark method, shared by `ycsb` and `cpr`: keys and operations are generated into
//! arrays before anything is timed; worker threads take chunks of 3,200 operations from one
//! shared cursor (wrapping around the arrays) and check their stop flag once per chunk.
//!
//! Keys are `key(0..n)`, a bijective hash of the index, so `n` distinct 64-bit keys spread over
//! any hash index; a map stores the `u64`, a byte-keyed store its 8 little-endian bytes
//! ([`encode_key`]). An upsert writes a [`stamp`] value naming the session and serial that wrote
//! it (the layout of `prefixkv_testkit::oracle::encode_value`, read back with its
//! `decode_value`), so a recovered image says which write it holds.
//!
//! Invariants: the timed loop does nothing but take a chunk and hand it to the contender, so every
//! contender pays the same harness cost and a ratio between two contenders is a ratio between
//! their maps; the arrays have a fixed length whatever the run's duration (the cursor wraps), so
//! memory is bounded by `--operations`, not by time or thread count; within a session, operation
//! serials start at 1 and number the operations in the order the session ran them.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{KeyDistribution, KeyGenerator};

/// Operations a worker takes from the cursor at a time (FASTER's `kRefreshInterval * 50`).
pub const CHUNK_OPS: u64 = 3200;

/// One operation kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Read the key.
    Read = 0,
    /// Blind write of the operation's stamp.
    Upsert = 1,
    /// Read-modify-write: add 1 to the stored counter.
    Rmw = 2,
}

/// A mix of operations: the share of reads, and what every other operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperationMix {
    /// Reads per hundred operations (0..=100).
    pub read_percent: u64,
    /// The kind of the other operations.
    pub write: Kind,
}

impl OperationMix {
    /// The kind of an operation whose uniform draw in `0..100` is `percent`.
    fn kind(self, percent: u64) -> Kind {
        if percent < self.read_percent {
            Kind::Read
        } else {
            self.write
        }
    }
}

/// The splitmix64 finaliser: a bijection of `u64`, so `key(i)` for `i < n` are `n` distinct keys.
#[inline]
pub fn key(index: u64) -> u64 {
    let mut z = index.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A key as a byte-keyed store holds it: its 8 little-endian bytes.
#[inline]
pub fn encode_key(key: u64) -> [u8; 8] {
    key.to_le_bytes()
}

/// Bits of a stamp that hold the serial (the session is above them).
const SERIAL_BITS: u32 = 48;

/// The value an upsert by `session` at `serial` writes: the session in the top 16 bits, the
/// serial in the low 48 (as `prefixkv_testkit::oracle::encode_value`; a byte-valued store holds
/// its big-endian bytes, which that module's `decode_value` reads).
#[inline]
pub fn stamp(session: u32, serial: u64) -> u64 {
    (u64::from(session) << SERIAL_BITS) | (serial & ((1 << SERIAL_BITS) - 1))
}

/// The smallest value a byte-valued contender writes: the 8 big-endian bytes of a [`stamp`] (an
/// upsert) or of a counter (a read-modify-write) lead every value.
pub const MIN_VALUE_BYTES: usize = 8;

/// The largest value `ycsb --value-bytes` accepts (a record of it still fits the smallest log
/// page the benchmark configures, 64 KiB, many times over).
pub const MAX_VALUE_BYTES: usize = 4096;

/// A value buffer of `value_bytes` (at least [`MIN_VALUE_BYTES`]): 8 leading bytes for the
/// writer to set (zero here), then the fixed filler ([`filler_byte`]). Writers of larger values
/// keep one such buffer and overwrite only its leading word, so a value of any size costs its
/// copy and nothing else. Nothing in any comparison compresses values, so the filler's pattern
/// does not matter.
pub fn value_buffer(value_bytes: usize) -> Vec<u8> {
    assert!(
        value_bytes >= MIN_VALUE_BYTES,
        "a value holds at least its 8-byte stamp or counter, asked for {value_bytes} bytes"
    );
    (0..value_bytes)
        .map(|at| if at < 8 { 0 } else { filler_byte(at) })
        .collect()
}

/// The filler byte at offset `at` (8 or more) of every value larger than 8 bytes.
#[inline]
pub fn filler_byte(at: usize) -> u8 {
    (at as u8).wrapping_mul(37) ^ 0x5A
}

/// The leading word of a value (its first 8 bytes, big-endian: a [`stamp`] or a counter), or
/// `None` if it is shorter than 8 bytes.
#[inline]
pub fn leading_word(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

/// Whether `value` is `value_bytes` long and carries the filler after its leading word: what
/// every value a contender wrote with [`value_buffer`] looks like.
pub fn has_filler(value: &[u8], value_bytes: usize) -> bool {
    value.len() == value_bytes
        && value
            .iter()
            .enumerate()
            .skip(8)
            .all(|(at, &byte)| byte == filler_byte(at))
}

/// The pre-generated run: `keys[i]` and `kinds[i]` are operation `i` (the cursor wraps).
pub struct Operations {
    /// The key of each operation (already `key(index)`).
    pub keys: Vec<u64>,
    /// The kind of each operation.
    pub kinds: Vec<Kind>,
}

impl Operations {
    /// `count` operations of `mix` over `key(0..keys)`, uniform or zipfian (YCSB's scrambled
    /// zipfian, θ = 0.99), deterministic from `seed`.
    pub fn generate(
        mix: OperationMix,
        distribution: KeyDistribution,
        keys: u64,
        count: u64,
        seed: u64,
    ) -> Operations {
        let mut generator = KeyGenerator::new(distribution, keys, seed);
        let mut out = Operations {
            keys: Vec::with_capacity(count as usize),
            kinds: Vec::with_capacity(count as usize),
        };
        for _ in 0..count {
            out.keys.push(key(generator.next_key()));
            out.kinds.push(mix.kind(u64::from(generator.percent())));
        }
        out
    }

    /// Number of operations in the arrays.
    pub fn len(&self) -> u64 {
        self.keys.len() as u64
    }

    /// Whether there are no operations.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The chunk that starts at `position` (`< len`): up to [`CHUNK_OPS`] operations, fewer at
    /// the end of the arrays. `session` and `first_serial` say whom its writes are stamped with.
    pub fn chunk_at(&self, position: u64, session: u32, first_serial: u64) -> Chunk<'_> {
        let end = (position + CHUNK_OPS).min(self.len());
        let range = position as usize..end as usize;
        Chunk {
            position,
            keys: &self.keys[range.clone()],
            kinds: &self.kinds[range],
            session,
            first_serial,
        }
    }
}

/// A run of consecutive operations one session executes in one go.
pub struct Chunk<'a> {
    /// Index of the first operation in the [`Operations`] arrays.
    pub position: u64,
    /// The operations' keys.
    pub keys: &'a [u64],
    /// The operations' kinds.
    pub kinds: &'a [Kind],
    /// The session whose writes these are (its index goes into every [`stamp`]).
    pub session: u32,
    /// The session's serial of the first operation (the next ones follow on).
    pub first_serial: u64,
}

impl Chunk<'_> {
    /// Number of operations.
    pub fn len(&self) -> u64 {
        self.keys.len() as u64
    }

    /// Whether the chunk is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The value the `offset`-th operation writes if it is an upsert.
    #[inline]
    pub fn value(&self, offset: usize) -> u64 {
        stamp(self.session, self.first_serial + offset as u64)
    }
}

/// The shared cursor worker threads take chunks from, wrapping around the arrays.
pub struct Cursor<'a> {
    operations: &'a Operations,
    next: AtomicU64,
}

impl<'a> Cursor<'a> {
    /// A cursor at the first operation. `operations` must not be empty.
    pub fn new(operations: &'a Operations) -> Cursor<'a> {
        assert!(!operations.is_empty(), "a run needs operations");
        Cursor {
            operations,
            next: AtomicU64::new(0),
        }
    }

    /// The next chunk for `session`, whose first operation gets serial `first_serial`.
    #[inline]
    pub fn take(&self, session: u32, first_serial: u64) -> Chunk<'a> {
        let start = self.next.fetch_add(CHUNK_OPS, Ordering::Relaxed) % self.operations.len();
        self.operations.chunk_at(start, session, first_serial)
    }
}

/// Pins the calling thread to `core` (best effort: an error leaves it unpinned).
pub fn pin_to_core(core: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; the calls only touch it and this thread's affinity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_the_oracles_values() {
        let value = stamp(3, 12_345);
        assert_eq!(
            value.to_be_bytes(),
            prefixkv_testkit::oracle::encode_value(3, 12_345)
        );
        assert_eq!(
            prefixkv_testkit::oracle::decode_value(&value.to_be_bytes()),
            Some((3, 12_345))
        );
    }

    #[test]
    fn values_carry_their_word_then_the_filler() {
        let mut value = value_buffer(100);
        assert_eq!(value.len(), 100);
        value[..8].copy_from_slice(&stamp(2, 7).to_be_bytes());
        assert_eq!(leading_word(&value), Some(stamp(2, 7)));
        assert!(has_filler(&value, 100));
        assert!(!has_filler(&value, 101));
        value[50] ^= 1;
        assert!(!has_filler(&value, 100));
        assert_eq!(value_buffer(8), vec![0; 8]);
        assert!(has_filler(&stamp(1, 1).to_be_bytes(), 8));
        assert_eq!(leading_word(&[1, 2, 3]), None);
    }

    #[test]
    fn the_cursor_wraps_and_chunks_number_their_serials() {
        let mix = OperationMix {
            read_percent: 50,
            write: Kind::Upsert,
        };
        let operations = Operations::generate(mix, KeyDistribution::Uniform, 100, 5000, 1);
        let cursor = Cursor::new(&operations);
        let first = cursor.take(1, 1);
        assert_eq!((first.position, first.len()), (0, CHUNK_OPS));
        let second = cursor.take(2, 1);
        assert_eq!(
            (second.position, second.len()),
            (CHUNK_OPS, 5000 - CHUNK_OPS)
        );
        assert_eq!(cursor.take(1, 3201).position, 6400 % 5000);
        assert_eq!(first.value(4), stamp(1, 5));
        let reads = operations
            .kinds
            .iter()
            .filter(|&&k| k == Kind::Read)
            .count();
        assert!((2000..3000).contains(&reads), "{reads} reads of 5000");
        let distinct: std::collections::HashSet<u64> = (0..100).map(key).collect();
        assert_eq!(distinct.len(), 100);
    }
}
