//! Checkpoints: the state machine's contents at one log index, with CRC32C on every part,
//! published through the version catalog of `prefixkv-storage` ([`prefixkv_storage::Catalog`]).
//!
//! # Layout (the checkpoint root, `<replica>/checkpoints`)
//! ```text
//! v00000000000000000007/checkpoint     published checkpoint 7 (its log index is in its header)
//! v00000000000000000008.tmp/           being written, or left by a crash: removed at open
//! v00000000000000000005.deleting/      being pruned, or left by a crash: removed at open
//! v00000000000000000009.corrupt/       failed verification at a recovery that fell back: kept
//! incoming-<pid>-<n>.snapshot          a snapshot openraft streams in from the leader: removed
//!                                      at open (openraft's type for it is a `tokio::fs::File`)
//! ```
//! Version numbers count checkpoints: each [`Checkpoints::begin`] takes the next one, above every
//! version published when the root was opened. Checkpoints are begun on the state machine's task
//! at its last applied index, which only grows (an installed snapshot is ahead of it), so a newer
//! version never holds an older index.
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
//! The catalog's argument (`docs/storage.md`, "Catalog"): the file is written into `v….tmp`,
//! synced ([`CheckpointWriter::finish`]), and the version published (directory fsync, rename,
//! root fsync) before `finish` returns; only then may the Raft log in front of it be purged (see
//! `state_machine.rs`). Recovery ([`Checkpoints::select`]) loads the newest version whose every
//! checksum verifies; newer ones that fail are moved to `.corrupt` by the catalog, and if
//! versions exist and none verifies it says so rather than start empty. [`Checkpoints::retain`]
//! keeps the newest two and returns the older one's index: the log is purged only up to it, so
//! if the newest turns out corrupt, the previous one plus the log still rebuild the state.
//!
//! # Bounds
//! Every length read from a file is checked against a limit before anything is allocated for it.

use std::io::{self, BufReader, IoSlice, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prefixkv_storage::{
    Catalog, CatalogError, Disk, DiskFile, Draft, FileReader, OpenMode, Rejection, SelectError,
};
use serde::{Deserialize, Serialize};

use crate::types::{SnapshotMeta, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// The first 8 bytes of every checkpoint file.
pub const MAGIC: &[u8; 8] = b"PKVSMRC1";
/// Largest accepted header, in bytes.
pub const MAX_HEADER_BYTES: u32 = 1 << 20;
/// Largest accepted chunk body, in bytes (the writer targets [`TARGET_CHUNK_BYTES`]).
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;
/// Size at which the writer closes a chunk (and writes it to the file).
pub const TARGET_CHUNK_BYTES: usize = 1 << 20;
/// The name of the checkpoint file inside a version directory.
pub const FILE_NAME: &str = "checkpoint";
const INCOMING_PREFIX: &str = "incoming-";
const PAIR_HEADER_BYTES: usize = 8;

/// What a checkpoint file says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointHeader {
    /// openraft's metadata: last included log id and membership.
    pub meta: SnapshotMeta,
    /// Which state model wrote it ("blocking" or "concurrent"); informational.
    pub model: String,
}

impl CheckpointHeader {
    /// The last log index the checkpoint includes (`None`: the state before the first entry).
    pub fn index(&self) -> Option<u64> {
        self.meta.last_log_id.map(|id| id.index)
    }
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

/// An `io::Error` for a catalog error, keeping the kind of the underlying error (`ENOSPC` stays
/// `StorageFull`).
fn catalog_io(error: CatalogError) -> io::Error {
    match &error {
        CatalogError::Io { source, .. } => io::Error::new(source.kind(), error.to_string()),
        CatalogError::InvalidArgument(_) => {
            io::Error::new(io::ErrorKind::InvalidInput, error.to_string())
        }
    }
}

/// One published checkpoint, as [`Checkpoints::published`] lists it.
#[derive(Clone, Debug)]
pub struct PublishedCheckpoint {
    /// Its catalog version.
    pub version: u64,
    /// Its file.
    pub path: PathBuf,
    /// Its header (only the header is read and checked).
    pub header: CheckpointHeader,
}

/// What [`Checkpoints::select`] found.
#[derive(Debug)]
pub enum Selection {
    /// No checkpoint is published.
    Nothing,
    /// This one verified and its pairs were loaded.
    Loaded {
        /// The checkpoint (boxed: the other variants are small).
        checkpoint: Box<PublishedCheckpoint>,
        /// Newer checkpoints that failed verification, newest first, with why.
        rejected: Vec<(u64, String)>,
        /// Where those were moved.
        quarantined: Vec<PathBuf>,
    },
    /// Checkpoints exist and none verifies (each with why, newest first); nothing was moved.
    NoneVerifies(Vec<(u64, String)>),
}

/// The checkpoint root of one replica: a catalog of checkpoint versions. `Send + Sync`.
#[derive(Debug)]
pub struct Checkpoints {
    catalog: Catalog,
    /// The version the next [`Checkpoints::begin`] takes.
    next_version: Mutex<u64>,
    /// Names incoming snapshot files apart.
    incoming: AtomicU64,
}

impl Checkpoints {
    /// Opens (creating if missing) the checkpoint root `root` on `disk`; removes unfinished
    /// versions and incoming snapshot files that an earlier crash left behind.
    pub fn open(disk: Arc<dyn Disk>, root: &Path) -> io::Result<Checkpoints> {
        let catalog = Catalog::open(Arc::clone(&disk), root).map_err(catalog_io)?;
        for entry in disk.list(root)? {
            if entry.is_dir {
                continue;
            }
            if entry.name.starts_with(INCOMING_PREFIX) {
                disk.remove_file(&root.join(&entry.name))?;
            } else if entry.name.starts_with("ckpt-") && entry.name.ends_with(".ckp") {
                // Ignoring it would start from an older state (or none) without a word.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} holds {}, a checkpoint of the layout before prefixkv-storage's \
                         catalog; this version cannot read it. Remove the replica's directory \
                         and let it rejoin from a snapshot.",
                        root.display(),
                        entry.name
                    ),
                ));
            }
        }
        let newest = catalog.published_versions().map_err(catalog_io)?;
        Ok(Checkpoints {
            next_version: Mutex::new(newest.first().map_or(1, |v| v + 1)),
            catalog,
            incoming: AtomicU64::new(0),
        })
    }

    /// The disk the checkpoints live on.
    pub fn disk(&self) -> &Arc<dyn Disk> {
        self.catalog.disk()
    }

    /// The checkpoint root.
    pub fn root(&self) -> &Path {
        self.catalog.root()
    }

    /// Where openraft may stream a snapshot from the leader into (see the module docs).
    pub fn incoming_path(&self) -> PathBuf {
        let n = self.incoming.fetch_add(1, Ordering::Relaxed);
        self.root().join(format!(
            "{INCOMING_PREFIX}{}-{n}.snapshot",
            std::process::id()
        ))
    }

    fn begin_version(&self) -> io::Result<(Draft, Arc<dyn DiskFile>)> {
        let version = {
            let mut next = self.next_version.lock().expect("poisoned");
            let version = *next;
            *next += 1;
            version
        };
        let draft = self.catalog.begin(version).map_err(catalog_io)?;
        let file = draft.create_file(FILE_NAME).map_err(catalog_io)?;
        Ok((draft, file))
    }

    /// Starts the next checkpoint version with `header`; [`CheckpointWriter::finish`] publishes
    /// it. Dropping the writer unfinished removes the draft.
    pub fn begin(&self, header: &CheckpointHeader) -> io::Result<CheckpointWriter> {
        let (draft, file) = self.begin_version()?;
        CheckpointWriter::create(draft, file, header)
    }

    /// Publishes the bytes of `source` (a checkpoint file received from the leader) as the next
    /// version, after checking every checksum and that it includes exactly `expected`'s last log
    /// id. Returns the published file.
    pub fn install(&self, source: &mut impl Read, expected: &SnapshotMeta) -> io::Result<PathBuf> {
        let (draft, file) = self.begin_version()?;
        let path = draft.path().join(FILE_NAME);
        let mut buffer = vec![0u8; TARGET_CHUNK_BYTES];
        let mut offset = 0u64;
        loop {
            let n = match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            file.write_all_at(&buffer[..n], offset)?;
            offset += n as u64;
        }
        file.sync_all()?;
        drop(file);
        let header = read(&**self.disk(), &path, |_, _| {}).map_err(io::Error::other)?;
        if header.meta.last_log_id != expected.last_log_id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "received snapshot file is at {:?} but openraft installs {:?}",
                    header.meta.last_log_id, expected.last_log_id
                ),
            ));
        }
        let dir = draft.publish().map_err(catalog_io)?;
        Ok(dir.join(FILE_NAME))
    }

    /// Loads the newest checkpoint whose every checksum verifies: `on_pair` gets its pairs as
    /// they are read, and `clear` is called after a checkpoint that failed part-way, so the
    /// caller can drop what it loaded. Newer checkpoints that fail are quarantined.
    pub fn select(
        &self,
        mut on_pair: impl FnMut(Vec<u8>, Vec<u8>),
        mut clear: impl FnMut(),
    ) -> io::Result<Selection> {
        let disk = Arc::clone(self.disk());
        let selected = self.catalog.select(|version, dir| {
            let path = dir.join(FILE_NAME);
            match read(&*disk, &path, &mut on_pair) {
                Ok(header) => Ok(PublishedCheckpoint {
                    version,
                    path,
                    header,
                }),
                Err(error) => {
                    clear();
                    match error {
                        CheckpointError::Corrupt { .. } => {
                            tracing::warn!("{error}");
                            Err(Rejection::Invalid(error.to_string()))
                        }
                        // A version directory without its file is a damaged version too.
                        CheckpointError::Io { ref source, .. }
                            if source.kind() == io::ErrorKind::NotFound =>
                        {
                            Err(Rejection::Invalid(error.to_string()))
                        }
                        CheckpointError::Io { .. } => Err(Rejection::Abort(error)),
                    }
                }
            }
        });
        match selected {
            Ok(None) => Ok(Selection::Nothing),
            Ok(Some(selected)) => Ok(Selection::Loaded {
                checkpoint: Box::new(selected.value),
                rejected: selected.rejected,
                quarantined: selected.quarantined,
            }),
            Err(SelectError::NoneVerifies(rejected)) => Ok(Selection::NoneVerifies(rejected)),
            Err(SelectError::Aborted(error)) => Err(io::Error::other(error)),
            Err(SelectError::Catalog(error)) => Err(catalog_io(error)),
        }
    }

    /// Published checkpoints, newest first, with their headers.
    pub fn published(&self) -> io::Result<Vec<PublishedCheckpoint>> {
        let mut found = Vec::new();
        for version in self.catalog.published_versions().map_err(catalog_io)? {
            let path = self.catalog.version_dir(version).join(FILE_NAME);
            let header = read_header(&**self.disk(), &path).map_err(io::Error::other)?;
            found.push(PublishedCheckpoint {
                version,
                path,
                header,
            });
        }
        Ok(found)
    }

    /// Deletes all but the newest `keep` (>= 1) checkpoints; returns the lowest log index the
    /// kept ones include (`None` if one of them is from before the first entry): the log may be
    /// purged up to there.
    pub fn retain(&self, keep: usize) -> io::Result<Option<u64>> {
        self.catalog.prune(keep).map_err(catalog_io)?;
        let kept = self.published()?;
        let mut lowest: Option<u64> = None;
        for checkpoint in kept.iter().take(keep) {
            let Some(index) = checkpoint.header.index() else {
                return Ok(None);
            };
            lowest = Some(lowest.map_or(index, |lowest| lowest.min(index)));
        }
        Ok(lowest)
    }
}

/// Streams pairs into a checkpoint version; [`CheckpointWriter::finish`] publishes it.
pub struct CheckpointWriter {
    file: Arc<dyn DiskFile>,
    draft: Draft,
    offset: u64,
    chunk: Vec<u8>,
    pairs: u64,
}

impl CheckpointWriter {
    fn create(
        draft: Draft,
        file: Arc<dyn DiskFile>,
        header: &CheckpointHeader,
    ) -> io::Result<Self> {
        let header_bytes = serde_json::to_vec(header).map_err(io::Error::other)?;
        assert!(
            header_bytes.len() <= MAX_HEADER_BYTES as usize,
            "checkpoint header too large"
        );
        let mut start = Vec::with_capacity(16 + header_bytes.len());
        start.extend_from_slice(MAGIC);
        start.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
        start.extend_from_slice(&crc32c::crc32c(&header_bytes).to_le_bytes());
        start.extend_from_slice(&header_bytes);
        file.write_all_at(&start, 0)?;
        Ok(CheckpointWriter {
            file,
            draft,
            offset: start.len() as u64,
            chunk: Vec::with_capacity(TARGET_CHUNK_BYTES + 1024),
            pairs: 0,
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
        let mut prefix = [0u8; 8];
        prefix[0..4].copy_from_slice(&(self.chunk.len() as u32).to_le_bytes());
        prefix[4..8].copy_from_slice(&crc32c::crc32c(&self.chunk).to_le_bytes());
        self.file.write_all_vectored_at(
            &mut [IoSlice::new(&prefix), IoSlice::new(&self.chunk)],
            self.offset,
        )?;
        self.offset += 8 + self.chunk.len() as u64;
        self.chunk.clear();
        Ok(())
    }

    /// Writes the end record, syncs the file and publishes the version (see the module docs).
    /// Returns the published file and its size in bytes.
    pub fn finish(mut self) -> io::Result<(PathBuf, u64)> {
        self.flush_chunk()?;
        let mut end = [0u8; 16];
        end[4..12].copy_from_slice(&self.pairs.to_le_bytes());
        let crc = crc32c::crc32c(&end[..12]);
        end[12..16].copy_from_slice(&crc.to_le_bytes());
        self.file.write_all_at(&end, self.offset)?;
        self.offset += end.len() as u64;
        self.file.sync_all()?;
        let dir = self.draft.publish().map_err(catalog_io)?;
        Ok((dir.join(FILE_NAME), self.offset))
    }

    /// Pairs written so far.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }
}

/// Reads and verifies a whole checkpoint file on `disk`, calling `on_pair` for every pair.
/// Nothing is returned until the end record has verified, but `on_pair` sees pairs as they are
/// read: callers load into a fresh map and drop it on error.
pub fn read(
    disk: &dyn Disk,
    path: &Path,
    on_pair: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<CheckpointHeader, CheckpointError> {
    let (file, file_bytes) = open_file(disk, path)?;
    let input = BufReader::with_capacity(4 << 20, FileReader::new(file, 0));
    let mut reader = Reader {
        input,
        offset: 0,
        path,
    };
    let header = reader.header(file_bytes)?;
    reader.body(file_bytes, on_pair)?;
    Ok(header)
}

/// Reads and verifies only the magic and the header of a checkpoint file.
pub fn read_header(disk: &dyn Disk, path: &Path) -> Result<CheckpointHeader, CheckpointError> {
    let (file, file_bytes) = open_file(disk, path)?;
    let mut reader = Reader {
        input: BufReader::new(FileReader::new(file, 0)),
        offset: 0,
        path,
    };
    reader.header(file_bytes)
}

fn open_file(disk: &dyn Disk, path: &Path) -> Result<(Arc<dyn DiskFile>, u64), CheckpointError> {
    let io_error = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = disk.open(path, OpenMode::Read).map_err(io_error)?;
    let file_bytes = file.len().map_err(io_error)?;
    Ok((file, file_bytes))
}

/// [`read`] on bytes in memory (`name` appears in errors); for tests and the fuzz target.
pub fn decode_bytes(
    bytes: &[u8],
    name: &Path,
    on_pair: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<CheckpointHeader, CheckpointError> {
    let mut reader = Reader {
        input: bytes,
        offset: 0,
        path: name,
    };
    let header = reader.header(bytes.len() as u64)?;
    reader.body(bytes.len() as u64, on_pair)?;
    Ok(header)
}

/// The decoder: reads from `input`, tracks the offset for error messages.
struct Reader<'a, R> {
    input: R,
    offset: u64,
    path: &'a Path,
}

impl<R: Read> Reader<'_, R> {
    fn corrupt(&self, offset: u64, what: String) -> CheckpointError {
        CheckpointError::Corrupt {
            path: self.path.to_path_buf(),
            offset,
            what,
        }
    }

    fn read_exact(&mut self, buffer: &mut [u8]) -> Result<(), CheckpointError> {
        if let Err(e) = self.input.read_exact(buffer) {
            return Err(if e.kind() == io::ErrorKind::UnexpectedEof {
                self.corrupt(self.offset, "file ends early (torn or truncated)".into())
            } else {
                CheckpointError::Io {
                    path: self.path.to_path_buf(),
                    source: e,
                }
            });
        }
        self.offset += buffer.len() as u64;
        Ok(())
    }

    fn header(&mut self, file_bytes: u64) -> Result<CheckpointHeader, CheckpointError> {
        let mut magic = [0u8; 8];
        self.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(self.corrupt(0, "bad magic (not a prefixkv-smr checkpoint)".into()));
        }
        let mut word = [0u8; 8];
        self.read_exact(&mut word)?;
        let header_len = u32::from_le_bytes(word[0..4].try_into().unwrap());
        let header_crc = u32::from_le_bytes(word[4..8].try_into().unwrap());
        if header_len > MAX_HEADER_BYTES
            || u64::from(header_len) > file_bytes.saturating_sub(self.offset)
        {
            return Err(self.corrupt(8, format!("header length {header_len} out of bounds")));
        }
        let mut header_bytes = vec![0u8; header_len as usize];
        self.read_exact(&mut header_bytes)?;
        if crc32c::crc32c(&header_bytes) != header_crc {
            return Err(self.corrupt(16, "header CRC mismatch".into()));
        }
        serde_json::from_slice(&header_bytes)
            .map_err(|e| self.corrupt(16, format!("header does not parse: {e}")))
    }

    fn body(
        &mut self,
        file_bytes: u64,
        mut on_pair: impl FnMut(Vec<u8>, Vec<u8>),
    ) -> Result<(), CheckpointError> {
        let mut pairs = 0u64;
        let mut chunk = Vec::new();
        let mut word = [0u8; 4];
        loop {
            let chunk_offset = self.offset;
            self.read_exact(&mut word)?;
            let chunk_len = u32::from_le_bytes(word);
            if chunk_len == 0 {
                return self.end(chunk_offset, pairs, file_bytes);
            }
            if chunk_len > MAX_CHUNK_BYTES
                || u64::from(chunk_len) > file_bytes.saturating_sub(self.offset)
            {
                return Err(self.corrupt(
                    chunk_offset,
                    format!("chunk length {chunk_len} out of bounds"),
                ));
            }
            self.read_exact(&mut word)?;
            let chunk_crc = u32::from_le_bytes(word);
            chunk.resize(chunk_len as usize, 0);
            self.read_exact(&mut chunk)?;
            if crc32c::crc32c(&chunk) != chunk_crc {
                return Err(self.corrupt(chunk_offset, "chunk CRC mismatch".into()));
            }
            pairs += self.pairs_of(&chunk, chunk_offset, &mut on_pair)?;
        }
    }

    fn end(&mut self, offset: u64, pairs: u64, file_bytes: u64) -> Result<(), CheckpointError> {
        let mut rest = [0u8; 12];
        self.read_exact(&mut rest)?;
        let mut end = [0u8; 12];
        end[4..12].copy_from_slice(&rest[0..8]);
        let count = u64::from_le_bytes(rest[0..8].try_into().unwrap());
        let end_crc = u32::from_le_bytes(rest[8..12].try_into().unwrap());
        if crc32c::crc32c(&end) != end_crc {
            return Err(self.corrupt(offset, "end record CRC mismatch".into()));
        }
        if count != pairs {
            return Err(self.corrupt(
                offset,
                format!("end record says {count} pairs, read {pairs}"),
            ));
        }
        if self.offset != file_bytes {
            return Err(self.corrupt(
                self.offset,
                format!("{} bytes after the end record", file_bytes - self.offset),
            ));
        }
        Ok(())
    }

    /// Decodes the pairs of one verified chunk; returns how many there were.
    fn pairs_of(
        &self,
        chunk: &[u8],
        chunk_offset: u64,
        on_pair: &mut impl FnMut(Vec<u8>, Vec<u8>),
    ) -> Result<u64, CheckpointError> {
        let mut pairs = 0;
        let mut at = 0usize;
        while at < chunk.len() {
            let bad = |what: &str| self.corrupt(chunk_offset + 8 + at as u64, what.to_string());
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
        Ok(pairs)
    }
}
