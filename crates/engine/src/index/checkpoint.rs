//! The index checkpoint file: the bucket array copied to disk while writers run (a *fuzzy* copy,
//! FASTER's index checkpoint), and loaded back into a fresh [`HashIndex`] at recovery.
//!
//! # Byte format (all integers little-endian)
//!
//! ```text
//! header (40 bytes)
//!   0  magic           8   b"PKVINDEX"
//!   8  format version  4   1
//!  12  reserved        4   0
//!  16  buckets         8   main buckets (a power of two; must equal the configured count)
//!  24  overflow        8   overflow buckets written (≤ buckets: the pool's capacity)
//!  32  chunk buckets   4   buckets per chunk (1..=65536; 16384 when written: 1 MiB)
//!  36  header CRC      4   CRC32C of bytes 0..36
//! body: the buckets + overflow buckets (main ones first, then overflow 0, 1, …), 64 bytes each,
//!   in chunks of `chunk buckets` buckets (the last one may be shorter), each chunk followed by
//!   the CRC32C (4 bytes) of its bucket bytes. A bucket is 8 words: 7 entries (the in-memory
//!   entry word, TENTATIVE always clear) and the overflow link (overflow bucket number + 1, or 0;
//!   never above `overflow`).
//! trailer (16 bytes)
//!   0  entries         8   non-empty entry words written
//!   8  reserved        4   0
//!  12  trailer CRC     4   CRC32C of the 40 header bytes followed by trailer bytes 0..12
//! ```
//!
//! The file's length is therefore exactly `40 + 64 × (buckets + overflow) + 4 × chunks + 16`,
//! and a loader checks it before reading a chunk.
//!
//! # The fuzzy contract
//!
//! The copy is **not a snapshot**. Each bucket word (entry or overflow link) is read once, with
//! an Acquire load, while writers keep changing the index:
//! - an entry changed during the copy is written with its value before or after the change (never
//!   a torn word), and a TENTATIVE entry (an insert in progress) is written as empty;
//! - the overflow region is written only up to the pool's high-water mark read when the copy
//!   starts; a link to an overflow bucket taken later is written as 0, and a link set during the
//!   copy may be missed either way. A bucket no written link reaches is dropped at load (zeroed
//!   and returned to the pool): every entry in it was created during the copy;
//! - a slot reused for another tag during the copy (its address fell below the log's begin) can
//!   leave the same tag twice in one chain in the image; the loader keeps the entry with the
//!   higher address (the other one points below the begin address: dead records).
//!
//! So the image is correct **only together with a log replay** that starts at a log address `L`
//! captured before the copy began (every change the copy may have missed is made by a record at
//! or above `L`) and re-applies every record at or above it, newest winning, skipping invalid
//! versions. Building that replay is the caller's job (`checkpoint/incremental.rs`).
//!
//! Replay can only move an entry *up* the log (to a newer record), so no index operation may move
//! an entry to an *older* address while a copy runs; what the engine does today:
//! - rollback's PURGE (`rollback/purge.rs`, index pass) CASes an entry whose head is an invalid
//!   record down to the first valid record below it. Replay skips invalid versions, so an image
//!   holding the invalid head would keep it: PURGE must not run during a copy. It already holds
//!   the maintenance lock, which checkpoints wait for; the caller must copy under that lock too.
//! - compaction (`compaction.rs`) CASes an entry from a tombstone to the tombstone's previous
//!   record when it unlinks a deleted key with no older version. The image may then hold the
//!   tombstone (still a deletion, and below the begin address once compaction frees its page:
//!   reusable), so this is harmless, but it moves an entry down; compaction's copy-to-tail moves
//!   entries up and is fine. Compaction also runs under the maintenance lock.
//! - session writes and recovery only CAS entries up the log; `find_or_create` reuses a slot only
//!   when its address is below the begin address (handled above).
//!
//! Writing goes through `prefixkv_storage::durable::write_file_durably_with` (temp file, fsync,
//! rename, directory fsync): a crash leaves the old file or the new one at `path`, complete. The
//! writer streams one chunk at a time (bounded memory whatever the index size). The loader
//! validates every field before trusting it and sizes allocations from the configured bucket
//! count (never from a number read from the file alone).

use std::path::Path;
use std::sync::atomic::Ordering;

use prefixkv_storage::le::{u32_at, u64_at};
use prefixkv_storage::{Disk, DiskFile, OpenMode};

use super::{Bucket, HashIndex, OverflowPool, ENTRIES_PER_BUCKET, TAG_MASK, TAG_SHIFT, TENTATIVE};
use crate::error::EngineError;
use crate::log::ADDRESS_MASK;

pub(crate) const MAGIC: &[u8; 8] = b"PKVINDEX";
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const HEADER_BYTES: usize = 40;
pub(crate) const TRAILER_BYTES: usize = 16;
pub(crate) const BUCKET_BYTES: usize = 64;
const CRC_BYTES: usize = 4;
/// Buckets per chunk when writing: 1 MiB of bucket bytes per write and per CRC.
pub(crate) const CHUNK_BUCKETS: usize = 16 << 10;
/// The largest chunk a loader accepts (its read buffer: 4 MiB).
pub(crate) const MAX_CHUNK_BUCKETS: u32 = 64 << 10;

const _: () = assert!(std::mem::size_of::<Bucket>() == BUCKET_BYTES);

/// The header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) buckets: u64,
    pub(crate) overflow: u64,
    pub(crate) chunk_buckets: u32,
}

impl Header {
    /// The exact file length this header implies, or `None` if it overflows a u64.
    pub(crate) fn file_len(&self) -> Option<u64> {
        let total = self.buckets.checked_add(self.overflow)?;
        let chunks = total.div_ceil(u64::from(self.chunk_buckets.max(1)));
        total
            .checked_mul(BUCKET_BYTES as u64)?
            .checked_add(chunks.checked_mul(CRC_BYTES as u64)?)?
            .checked_add((HEADER_BYTES + TRAILER_BYTES) as u64)
    }

    /// Byte offset of bucket `position` (main buckets first, then overflow) in the file.
    fn bucket_offset(&self, position: u64) -> u64 {
        let chunk = u64::from(self.chunk_buckets);
        HEADER_BYTES as u64 + position * BUCKET_BYTES as u64 + (position / chunk) * CRC_BYTES as u64
    }
}

pub(crate) fn encode_header(header: &Header) -> [u8; HEADER_BYTES] {
    let mut bytes = [0u8; HEADER_BYTES];
    bytes[0..8].copy_from_slice(MAGIC);
    bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&header.buckets.to_le_bytes());
    bytes[24..32].copy_from_slice(&header.overflow.to_le_bytes());
    bytes[32..36].copy_from_slice(&header.chunk_buckets.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[0..36]);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decodes and checks a header (magic, version, CRC, reserved field, chunk size). Never panics,
/// whatever `bytes` holds; the counts are checked against the configuration by the caller.
pub(crate) fn decode_header(bytes: &[u8]) -> Result<Header, String> {
    if bytes.len() < HEADER_BYTES {
        return Err(format!(
            "the file is {} bytes, shorter than the {HEADER_BYTES}-byte header",
            bytes.len()
        ));
    }
    if &bytes[0..8] != MAGIC {
        return Err(format!(
            "bad magic {:?} (expected \"PKVINDEX\"): not an index checkpoint",
            String::from_utf8_lossy(&bytes[0..8])
        ));
    }
    let stored = u32_at(bytes, 36);
    let computed = crc32c::crc32c(&bytes[0..36]);
    if stored != computed {
        return Err(format!(
            "header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    let version = u32_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, this build reads version {FORMAT_VERSION}"
        ));
    }
    if u32_at(bytes, 12) != 0 {
        return Err("the header's reserved field is not 0".to_string());
    }
    let header = Header {
        buckets: u64_at(bytes, 16),
        overflow: u64_at(bytes, 24),
        chunk_buckets: u32_at(bytes, 32),
    };
    if header.chunk_buckets == 0 || header.chunk_buckets > MAX_CHUNK_BUCKETS {
        return Err(format!(
            "chunk size of {} buckets is outside 1..={MAX_CHUNK_BUCKETS}",
            header.chunk_buckets
        ));
    }
    Ok(header)
}

fn trailer_crc(header: &[u8; HEADER_BYTES], trailer_fields: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), trailer_fields)
}

pub(crate) fn encode_trailer(header: &[u8; HEADER_BYTES], entries: u64) -> [u8; TRAILER_BYTES] {
    let mut bytes = [0u8; TRAILER_BYTES];
    bytes[0..8].copy_from_slice(&entries.to_le_bytes());
    let crc = trailer_crc(header, &bytes[0..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decodes and checks a trailer against the header bytes it was written with; returns the entry
/// count. Never panics.
pub(crate) fn decode_trailer(header: &[u8; HEADER_BYTES], bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() != TRAILER_BYTES {
        return Err(format!(
            "the trailer is {} bytes, expected {TRAILER_BYTES}",
            bytes.len()
        ));
    }
    let stored = u32_at(bytes, 12);
    let computed = trailer_crc(header, &bytes[0..12]);
    if stored != computed {
        return Err(format!(
            "trailer CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    if u32_at(bytes, 8) != 0 {
        return Err("the trailer's reserved field is not 0".to_string());
    }
    Ok(u64_at(bytes, 0))
}

/// What [`HashIndex::write_checkpoint`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexCheckpointSummary {
    /// Main buckets.
    pub(crate) buckets: u64,
    /// Overflow buckets written (the pool's high-water mark when the copy began).
    pub(crate) overflow_buckets: u64,
    /// Non-empty, non-tentative entry words written.
    pub(crate) entries: u64,
    /// The file's length.
    pub(crate) bytes: u64,
    /// CRC32C of the whole file.
    pub(crate) crc: u32,
}

/// Appends bucket `bucket`'s image to `out` (one Acquire load per word; see the fuzzy contract);
/// returns its non-empty entries.
fn encode_bucket(bucket: &Bucket, overflow_written: u64, out: &mut Vec<u8>) -> u64 {
    let mut entries = 0;
    for slot in &bucket.entries {
        let mut word = slot.load(Ordering::Acquire);
        if word & TENTATIVE != 0 {
            // An insert in progress: its record is at or above the replay start.
            word = 0;
        }
        entries += u64::from(word != 0);
        out.extend_from_slice(&word.to_le_bytes());
    }
    let mut link = bucket.overflow.load(Ordering::Acquire);
    if link > overflow_written {
        // A bucket taken after the copy began: not written, so not linked.
        link = 0;
    }
    out.extend_from_slice(&link.to_le_bytes());
    entries
}

fn io_error(operation: &str, path: &Path, source: std::io::Error) -> EngineError {
    EngineError::Io {
        operation: operation.to_string(),
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, offset: u64, detail: String) -> EngineError {
    EngineError::Corrupt {
        path: path.to_path_buf(),
        offset,
        detail: format!("index checkpoint: {detail}"),
    }
}

impl HashIndex {
    /// Bucket `position` of the file's order: main buckets, then overflow buckets.
    fn bucket_at(&self, position: usize) -> &Bucket {
        match position.checked_sub(self.buckets.len()) {
            None => &self.buckets[position],
            Some(overflow) => &self.overflow[overflow],
        }
    }

    /// Writes a fuzzy copy of the index to `path` durably (see the module docs for the format and
    /// the contract), streaming one ~1 MiB chunk at a time.
    pub(crate) fn write_checkpoint(
        &self,
        disk: &dyn Disk,
        path: &Path,
    ) -> Result<IndexCheckpointSummary, EngineError> {
        let overflow = self.pool.lock().next;
        let header = Header {
            buckets: self.buckets.len() as u64,
            overflow: overflow as u64,
            chunk_buckets: CHUNK_BUCKETS as u32,
        };
        let header_bytes = encode_header(&header);
        let total = self.buckets.len() + overflow;
        let mut entries = 0;
        let mut crc = 0;
        let mut offset = 0u64;
        let mut write = |file: &dyn DiskFile, bytes: &[u8]| -> std::io::Result<()> {
            file.write_all_at(bytes, offset)?;
            crc = crc32c::crc32c_append(crc, bytes);
            offset += bytes.len() as u64;
            Ok(())
        };
        prefixkv_storage::durable::write_file_durably_with(disk, path, |file| {
            write(file, &header_bytes)?;
            let mut chunk = Vec::with_capacity(CHUNK_BUCKETS * BUCKET_BYTES + CRC_BYTES);
            for start in (0..total).step_by(CHUNK_BUCKETS) {
                chunk.clear();
                for position in start..(start + CHUNK_BUCKETS).min(total) {
                    entries += encode_bucket(self.bucket_at(position), overflow as u64, &mut chunk);
                }
                let chunk_crc = crc32c::crc32c(&chunk);
                chunk.extend_from_slice(&chunk_crc.to_le_bytes());
                write(file, &chunk)?;
            }
            write(file, &encode_trailer(&header_bytes, entries))
        })
        .map_err(|source| io_error("write the index checkpoint", path, source))?;
        Ok(IndexCheckpointSummary {
            buckets: header.buckets,
            overflow_buckets: header.overflow,
            entries,
            bytes: offset,
            crc,
        })
    }

    /// Loads an index checkpoint written by [`HashIndex::write_checkpoint`] into a new index of
    /// `buckets` main buckets (the configured count; the file must hold exactly as many).
    /// Every field is validated before it is used; see the module docs.
    pub(crate) fn load_checkpoint(
        disk: &dyn Disk,
        path: &Path,
        buckets: usize,
    ) -> Result<HashIndex, EngineError> {
        if !buckets.is_power_of_two() {
            return Err(EngineError::InvalidArgument(format!(
                "index bucket count {buckets} is not a power of two"
            )));
        }
        let index = HashIndex::new(buckets);
        index.load_checkpoint_into(disk, path)?;
        Ok(index)
    }

    /// [`HashIndex::load_checkpoint`] into this index, which must be fresh (no entry, no overflow
    /// bucket taken: recovery's, before anything is written); the file must hold as many main
    /// buckets as this index has. Returns the entries loaded. On an error the index is left
    /// partly loaded: the caller fails.
    pub(crate) fn load_checkpoint_into(
        &self,
        disk: &dyn Disk,
        path: &Path,
    ) -> Result<u64, EngineError> {
        assert_eq!(
            self.pool.lock().next,
            0,
            "loading into an index that is in use"
        );
        let buckets = self.buckets.len();
        let file = disk
            .open(path, OpenMode::Read)
            .map_err(|source| io_error("open the index checkpoint", path, source))?;
        let len = file
            .len()
            .map_err(|source| io_error("read the length of the index checkpoint", path, source))?;
        let read = |buf: &mut [u8], offset: u64| {
            file.read_exact_at(buf, offset)
                .map_err(|source| io_error("read the index checkpoint", path, source))
        };
        if len < HEADER_BYTES as u64 {
            return Err(corrupt(
                path,
                0,
                format!("the file is {len} bytes, shorter than the {HEADER_BYTES}-byte header"),
            ));
        }
        let mut header_bytes = [0u8; HEADER_BYTES];
        read(&mut header_bytes, 0)?;
        let header = decode_header(&header_bytes).map_err(|detail| corrupt(path, 0, detail))?;
        if header.buckets != buckets as u64 {
            return Err(EngineError::InvalidArgument(format!(
                "the index checkpoint {} holds {} main buckets but the index is configured with \
                 {buckets}; start with the bucket count it was written with",
                path.display(),
                header.buckets
            )));
        }
        if header.overflow > buckets as u64 {
            return Err(corrupt(
                path,
                24,
                format!(
                    "{} overflow buckets, more than the pool's capacity of {buckets}",
                    header.overflow
                ),
            ));
        }
        // Both counts are now bounded by the configured bucket count: no overflow below.
        let expected = header.file_len().expect("bounded counts");
        if len != expected {
            let what = if len < expected {
                "truncated"
            } else {
                "extra bytes after the trailer"
            };
            return Err(corrupt(
                path,
                len.min(expected),
                format!(
                    "the file is {len} bytes, expected exactly {expected} for {} + {} buckets \
                     ({what})",
                    header.buckets, header.overflow
                ),
            ));
        }
        let trailer_offset = expected - TRAILER_BYTES as u64;
        let mut trailer = [0u8; TRAILER_BYTES];
        read(&mut trailer, trailer_offset)?;
        let expected_entries = decode_trailer(&header_bytes, &trailer)
            .map_err(|detail| corrupt(path, trailer_offset, detail))?;

        let overflow = header.overflow as usize;
        let entries = self.load_chunks(&header, &read, path)?;
        if entries != expected_entries {
            return Err(corrupt(
                path,
                trailer_offset,
                format!(
                    "the trailer counts {expected_entries} entries, the buckets hold {entries}"
                ),
            ));
        }
        self.rebuild_pool(overflow, &header, path)?;
        Ok(entries)
    }

    /// Reads and checks every chunk into this (fresh) index; returns the entries read.
    fn load_chunks(
        &self,
        header: &Header,
        mut read: impl FnMut(&mut [u8], u64) -> Result<(), EngineError>,
        path: &Path,
    ) -> Result<u64, EngineError> {
        let total = (header.buckets + header.overflow) as usize;
        let chunk_buckets = header.chunk_buckets as usize;
        let mut buffer = vec![0u8; chunk_buckets.min(total) * BUCKET_BYTES + CRC_BYTES];
        let mut entries = 0;
        for start in (0..total).step_by(chunk_buckets) {
            let count = chunk_buckets.min(total - start);
            let offset = header.bucket_offset(start as u64);
            let chunk = &mut buffer[..count * BUCKET_BYTES + CRC_BYTES];
            read(chunk, offset)?;
            let (bytes, stored) = chunk.split_at(count * BUCKET_BYTES);
            let stored = u32_at(stored, 0);
            let computed = crc32c::crc32c(bytes);
            if stored != computed {
                return Err(corrupt(
                    path,
                    offset,
                    format!(
                        "CRC mismatch in the chunk of buckets {start}..{} (stored {stored:#010x}, \
                         computed {computed:#010x})",
                        start + count
                    ),
                ));
            }
            for (index, image) in bytes.chunks_exact(BUCKET_BYTES).enumerate() {
                let position = start + index;
                let bucket_offset = header.bucket_offset(position as u64);
                let bucket = self.bucket_at(position);
                for (slot, word) in bucket.entries.iter().zip(image.chunks_exact(8)) {
                    let word = u64_at(word, 0);
                    if word & !(ADDRESS_MASK | (TAG_MASK << TAG_SHIFT)) != 0 {
                        return Err(corrupt(
                            path,
                            bucket_offset,
                            format!(
                                "bucket {position} holds an entry with flag bits set: {word:#x}"
                            ),
                        ));
                    }
                    entries += u64::from(word != 0);
                    slot.store(word, Ordering::Relaxed);
                }
                let link = u64_at(image, ENTRIES_PER_BUCKET * 8);
                if link > header.overflow {
                    return Err(corrupt(
                        path,
                        bucket_offset,
                        format!(
                            "bucket {position} links to overflow bucket {} but only {} were written",
                            link - 1,
                            header.overflow
                        ),
                    ));
                }
                bucket.overflow.store(link, Ordering::Relaxed);
            }
        }
        Ok(entries)
    }

    /// Walks every chain of the loaded image: refuses an overflow bucket linked twice (a cycle or
    /// a shared tail), keeps one entry per tag and chain (the higher address), zeroes unreachable
    /// overflow buckets and rebuilds the pool from the reachable ones.
    fn rebuild_pool(
        &self,
        overflow: usize,
        header: &Header,
        path: &Path,
    ) -> Result<(), EngineError> {
        let mut reached = vec![false; overflow];
        let mut chain_slots: Vec<&std::sync::atomic::AtomicU64> = Vec::new();
        for main in 0..self.buckets.len() {
            chain_slots.clear();
            let mut bucket = &self.buckets[main];
            loop {
                for slot in &bucket.entries {
                    let word = slot.load(Ordering::Relaxed);
                    if word == 0 {
                        continue;
                    }
                    let tag = word & (TAG_MASK << TAG_SHIFT);
                    let duplicate = chain_slots.iter().find(|other| {
                        other.load(Ordering::Relaxed) & (TAG_MASK << TAG_SHIFT) == tag
                    });
                    match duplicate {
                        Some(other)
                            if other.load(Ordering::Relaxed) & ADDRESS_MASK
                                >= word & ADDRESS_MASK =>
                        {
                            slot.store(0, Ordering::Relaxed)
                        }
                        Some(other) => other.store(0, Ordering::Relaxed),
                        None => {}
                    }
                    if slot.load(Ordering::Relaxed) != 0 {
                        chain_slots.push(slot);
                    }
                }
                let link = bucket.overflow.load(Ordering::Relaxed) as usize;
                if link == 0 {
                    break;
                }
                let number = link - 1;
                if reached[number] {
                    return Err(corrupt(
                        path,
                        header.bucket_offset((self.buckets.len() + number) as u64),
                        format!(
                            "overflow bucket {number} is linked twice (a cycle or a shared chain)"
                        ),
                    ));
                }
                reached[number] = true;
                bucket = &self.overflow[number];
            }
            chain_slots.retain(|slot| slot.load(Ordering::Relaxed) != 0);
        }
        let next = reached
            .iter()
            .rposition(|&reached| reached)
            .map_or(0, |n| n + 1);
        let mut free = Vec::new();
        for (number, &reached) in reached.iter().enumerate() {
            if reached {
                continue;
            }
            // Missed by the fuzzy copy (its entries are replayed from the log): must be empty
            // before the pool hands it out again.
            let bucket = &self.overflow[number];
            for slot in &bucket.entries {
                slot.store(0, Ordering::Relaxed);
            }
            bucket.overflow.store(0, Ordering::Relaxed);
            if number < next {
                free.push(number);
            }
        }
        *self.pool.lock() = OverflowPool { next, free };
        Ok(())
    }
}
