//! Checkpoint files: the state machine's contents at one log index, with CRC32C on every part.
//!
//! # File format (little-endian)
//! ```text
//! magic  b"PKVSMRC1"                                  8 bytes
//! header_len u32 | header_crc u32 | header            JSON of `CheckpointHeader` (≤ 1 MiB)
//! chunk*         chunk_len u32 | chunk_crc u32 | body  body = pairs: key_len u32, value_len u32, key, value
//! end            0u32 | pair_count u64 | end_crc u32   end_crc = CRC32C of the 12 bytes before it
//! ```
//! `chunk_len` counts the body bytes (1 ..= [`MAX_CHUNK_BYTES`]); a zero length marks the end.
//! The file is complete only if the end record is present, its CRC matches, its pair count equals
//! the pairs read, and nothing follows it.
//!
//! # Crash safety
//! A checkpoint is written to `<name>.tmp`, fsynced, renamed to `ckpt-<index>.ckp`, and the
//! directory is fsynced. A crash before the rename leaves only a `.tmp` file, which recovery
//! deletes; after the directory fsync the checkpoint is durable. Only then may the Raft log in
//! front of it be purged (see `state_machine.rs`). Recovery reads the newest `.ckp` file whose
//! every checksum verifies; a file that fails is renamed to `.corrupt` (kept for inspection, never
//! deleted) and the next older one is tried.
//!
//! # Bounds
//! Every length read from a file is checked against a limit before anything is allocated for it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::types::{SnapshotMeta, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// The first 8 bytes of every checkpoint file.
pub const MAGIC: &[u8; 8] = b"PKVSMRC1";
/// Largest accepted header, in bytes.
pub const MAX_HEADER_BYTES: u32 = 1 << 20;
/// Largest accepted chunk body, in bytes (the writer targets [`TARGET_CHUNK_BYTES`]).
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;
/// Size at which the writer closes a chunk.
pub const TARGET_CHUNK_BYTES: usize = 1 << 20;
const PAIR_HEADER_BYTES: usize = 8;

/// What a checkpoint file says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointHeader {
    /// openraft's metadata: last included log id and membership.
    pub meta: SnapshotMeta,
    /// Which state model wrote it ("blocking" or "concurrent"); informational.
    pub model: String,
}

/// Errors reading a checkpoint: always name the file and offset.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An I/O error.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The bytes are not a valid checkpoint.
    #[error("checkpoint {path} is corrupt at byte offset {offset}: {what}; the replica falls back to an older checkpoint (or a snapshot from the leader)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the bad part.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// The file name of the checkpoint that includes the log up to `index`.
pub fn file_name(index: u64) -> String {
    format!("ckpt-{index:020}.ckp")
}

/// Parses [`file_name`]'s output back to the index.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ckpt-")?.strip_suffix(".ckp")?;
    if digits.len() != 20 {
        return None;
    }
    digits.parse().ok()
}

/// Checkpoint files in `dir`, newest (highest index) first.
pub fn list(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(index) = entry.file_name().to_str().and_then(parse_file_name) {
            found.push((index, entry.path()));
        }
    }
    found.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    Ok(found)
}

/// Removes leftover `.tmp` files of checkpoints that were being written when the process died.
pub fn remove_temporaries(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(".tmp"))
        {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// fsyncs a directory so that renames and unlinks in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Streams pairs into a checkpoint file; [`CheckpointWriter::finish`] makes it durable.
pub struct CheckpointWriter {
    dir: PathBuf,
    temporary: PathBuf,
    index: u64,
    out: BufWriter<File>,
    chunk: Vec<u8>,
    pairs: u64,
    bytes: u64,
}

impl CheckpointWriter {
    /// Starts `dir/ckpt-<index>.ckp.tmp` with `header`.
    pub fn create(dir: &Path, header: &CheckpointHeader) -> io::Result<Self> {
        let index = header.meta.last_log_id.map_or(0, |id| id.index);
        let temporary = dir.join(format!("{}.{}.tmp", file_name(index), std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)?;
        let mut out = BufWriter::with_capacity(4 << 20, file);
        let header_bytes = serde_json::to_vec(header).map_err(io::Error::other)?;
        assert!(
            header_bytes.len() <= MAX_HEADER_BYTES as usize,
            "checkpoint header too large"
        );
        out.write_all(MAGIC)?;
        out.write_all(&(header_bytes.len() as u32).to_le_bytes())?;
        out.write_all(&crc32c::crc32c(&header_bytes).to_le_bytes())?;
        out.write_all(&header_bytes)?;
        Ok(CheckpointWriter {
            dir: dir.to_path_buf(),
            temporary,
            index,
            out,
            chunk: Vec::with_capacity(TARGET_CHUNK_BYTES + 1024),
            pairs: 0,
            bytes: 0,
        })
    }

    /// Appends one pair.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        debug_assert!(key.len() <= MAX_KEY_BYTES && value.len() <= MAX_VALUE_BYTES);
        self.chunk
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.chunk
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.chunk.extend_from_slice(key);
        self.chunk.extend_from_slice(value);
        self.pairs += 1;
        if self.chunk.len() >= TARGET_CHUNK_BYTES {
            self.flush_chunk()?;
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        debug_assert!(self.chunk.len() <= MAX_CHUNK_BYTES as usize);
        self.out
            .write_all(&(self.chunk.len() as u32).to_le_bytes())?;
        self.out
            .write_all(&crc32c::crc32c(&self.chunk).to_le_bytes())?;
        self.out.write_all(&self.chunk)?;
        self.bytes += 8 + self.chunk.len() as u64;
        self.chunk.clear();
        Ok(())
    }

    /// Writes the end record, fsyncs, renames into place and fsyncs the directory. Returns the
    /// final path and the file size in bytes.
    pub fn finish(mut self) -> io::Result<(PathBuf, u64)> {
        self.flush_chunk()?;
        let mut end = [0u8; 12];
        end[4..12].copy_from_slice(&self.pairs.to_le_bytes());
        self.out.write_all(&end)?;
        self.out.write_all(&crc32c::crc32c(&end).to_le_bytes())?;
        self.out.flush()?;
        let file = self.out.get_ref();
        file.sync_all()?;
        let size = file.metadata()?.len();
        let path = self.dir.join(file_name(self.index));
        fs::rename(&self.temporary, &path)?;
        sync_dir(&self.dir)?;
        self.bytes += 16;
        Ok((path, size))
    }

    /// Pairs written so far.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        // An unfinished checkpoint (error or panic mid-way) leaves no `.tmp` behind if we can help it.
        if self.temporary.exists() {
            let _ = fs::remove_file(&self.temporary);
        }
    }
}

/// Reads and verifies a whole checkpoint, calling `on_pair` for every pair. Nothing is returned
/// until the end record has verified, but `on_pair` sees pairs as they are read: callers load into
/// a fresh map and drop it on error.
pub fn read(
    path: &Path,
    on_pair: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<CheckpointHeader, CheckpointError> {
    let io_error = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let file_bytes = file.metadata().map_err(io_error)?.len();
    decode(
        BufReader::with_capacity(4 << 20, file),
        file_bytes,
        path,
        on_pair,
    )
}

/// [`read`] on bytes in memory (`name` appears in errors); for tests and the fuzz target.
pub fn decode_bytes(
    bytes: &[u8],
    name: &Path,
    on_pair: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<CheckpointHeader, CheckpointError> {
    decode(bytes, bytes.len() as u64, name, on_pair)
}

fn decode(
    mut input: impl Read,
    file_bytes: u64,
    path: &Path,
    mut on_pair: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<CheckpointHeader, CheckpointError> {
    let io_error = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |offset: u64, what: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    };
    let mut offset = 0u64;
    let mut read_exact = |buffer: &mut [u8], offset: &mut u64| -> Result<(), CheckpointError> {
        input.read_exact(buffer).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                corrupt(*offset, "file ends early (torn or truncated)".into())
            } else {
                io_error(e)
            }
        })?;
        *offset += buffer.len() as u64;
        Ok(())
    };
    let mut magic = [0u8; 8];
    read_exact(&mut magic, &mut offset)?;
    if &magic != MAGIC {
        return Err(corrupt(
            0,
            "bad magic (not a prefixkv-smr checkpoint)".into(),
        ));
    }
    let mut word = [0u8; 8];
    read_exact(&mut word, &mut offset)?;
    let header_len = u32::from_le_bytes(word[0..4].try_into().unwrap());
    let header_crc = u32::from_le_bytes(word[4..8].try_into().unwrap());
    if header_len > MAX_HEADER_BYTES || u64::from(header_len) > file_bytes.saturating_sub(offset) {
        return Err(corrupt(
            8,
            format!("header length {header_len} out of bounds"),
        ));
    }
    let mut header_bytes = vec![0u8; header_len as usize];
    read_exact(&mut header_bytes, &mut offset)?;
    if crc32c::crc32c(&header_bytes) != header_crc {
        return Err(corrupt(16, "header CRC mismatch".into()));
    }
    let header: CheckpointHeader = serde_json::from_slice(&header_bytes)
        .map_err(|e| corrupt(16, format!("header does not parse: {e}")))?;
    let mut pairs = 0u64;
    let mut chunk = Vec::new();
    loop {
        let chunk_offset = offset;
        read_exact(&mut word[..4], &mut offset)?;
        let chunk_len = u32::from_le_bytes(word[0..4].try_into().unwrap());
        if chunk_len == 0 {
            let mut rest = [0u8; 12];
            read_exact(&mut rest, &mut offset)?;
            let mut end = [0u8; 12];
            end[4..12].copy_from_slice(&rest[0..8]);
            let count = u64::from_le_bytes(rest[0..8].try_into().unwrap());
            let end_crc = u32::from_le_bytes(rest[8..12].try_into().unwrap());
            if crc32c::crc32c(&end) != end_crc {
                return Err(corrupt(chunk_offset, "end record CRC mismatch".into()));
            }
            if count != pairs {
                return Err(corrupt(
                    chunk_offset,
                    format!("end record says {count} pairs, read {pairs}"),
                ));
            }
            if offset != file_bytes {
                return Err(corrupt(
                    offset,
                    format!("{} bytes after the end record", file_bytes - offset),
                ));
            }
            return Ok(header);
        }
        if chunk_len > MAX_CHUNK_BYTES || u64::from(chunk_len) > file_bytes.saturating_sub(offset) {
            return Err(corrupt(
                chunk_offset,
                format!("chunk length {chunk_len} out of bounds"),
            ));
        }
        read_exact(&mut word[..4], &mut offset)?;
        let chunk_crc = u32::from_le_bytes(word[0..4].try_into().unwrap());
        chunk.resize(chunk_len as usize, 0);
        read_exact(&mut chunk, &mut offset)?;
        if crc32c::crc32c(&chunk) != chunk_crc {
            return Err(corrupt(chunk_offset, "chunk CRC mismatch".into()));
        }
        let mut at = 0usize;
        while at < chunk.len() {
            let bad = |what: &str| corrupt(chunk_offset + 8 + at as u64, what.to_string());
            if chunk.len() - at < PAIR_HEADER_BYTES {
                return Err(bad("pair header crosses the chunk end"));
            }
            let key_len = u32::from_le_bytes(chunk[at..at + 4].try_into().unwrap()) as usize;
            let value_len = u32::from_le_bytes(chunk[at + 4..at + 8].try_into().unwrap()) as usize;
            if key_len > MAX_KEY_BYTES || value_len > MAX_VALUE_BYTES {
                return Err(bad("pair length over the limit"));
            }
            let start = at + PAIR_HEADER_BYTES;
            if chunk.len() - start < key_len + value_len {
                return Err(bad("pair crosses the chunk end"));
            }
            on_pair(
                chunk[start..start + key_len].to_vec(),
                chunk[start + key_len..start + key_len + value_len].to_vec(),
            );
            pairs += 1;
            at = start + key_len + value_len;
        }
    }
}

/// Renames a checkpoint that failed verification to `<name>.corrupt`, so that it is neither
/// loaded again nor counted as a retained checkpoint, yet its bytes stay for inspection.
pub fn quarantine(path: &Path) -> io::Result<()> {
    let mut target = path.as_os_str().to_owned();
    target.push(".corrupt");
    fs::rename(path, &target)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Deletes all but the newest `keep` checkpoints; returns the index of the oldest one kept.
pub fn retain_newest(dir: &Path, keep: usize) -> io::Result<Option<u64>> {
    assert!(keep >= 1);
    let found = list(dir)?;
    for (_, path) in found.iter().skip(keep) {
        fs::remove_file(path)?;
    }
    if found.len() > keep {
        sync_dir(dir)?;
    }
    Ok(found.iter().take(keep).next_back().map(|(index, _)| *index))
}
