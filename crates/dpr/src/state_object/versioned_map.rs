//! [`VersionedMap`]: a real, simple [`StateObject`]: an ordered byte map that writes a full
//! snapshot file per committed version.
//!
//! Snapshot file `v{version:020}.snap` (little-endian):
//!
//! | size | field |
//! |---|---|
//! | 8 | magic `b"DPRSNAP1"` |
//! | 8 | version |
//! | 4 | metadata length `m`, then `m` bytes |
//! | 8 | entry count `n`, then `n` × (key length u32, key, value length u32, value) |
//! | 4 | CRC32C of everything before |
//!
//! Crash safety: a snapshot is written with `prefixkv_storage::durable::write_file_durably`
//! (`v….snap.tmp`, fsync, rename, directory fsync; the argument is in `docs/storage.md`), and
//! only then does the persist callback fire. A crash leaves either no file or a complete one;
//! `*.tmp` leftovers are deleted on open. The versions a restore discards are removed and the
//! directory fsynced before the restore returns, so they never come back; pruned versions are
//! removed without a directory fsync (one that comes back after a crash is pruned again, and is
//! a valid older version meanwhile). Decoding checks the CRC before parsing and checks every
//! length against the bytes remaining, so a damaged file is an error, never a panic or an
//! oversized allocation. All file I/O goes through the storage layer's `Disk` (the real disk by
//! default; [`VersionedMap::open_on`] takes another, such as the simulated one).
//!
//! Commits are persisted by one background thread in commit order, so callbacks fire in order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use prefixkv_storage::durable::{self, TEMP_SUFFIX};
use prefixkv_storage::{real_disk, Disk, NumberedName};

use super::{PersistCallback, StateObject, StateObjectError};
use crate::Version;

const MAGIC: &[u8; 8] = b"DPRSNAP1";
/// Snapshot file names: `v`, the version in 20 digits, `.snap`.
const SNAPSHOT_NAME: NumberedName = NumberedName::new("v", 20, ".snap");
/// Largest snapshot file read back (a length on disk never sizes an allocation unchecked).
const MAX_SNAPSHOT_BYTES: u64 = 1 << 40;

/// An operation on a [`VersionedMap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapOperation {
    /// Set `key` to `value`; outputs the previous value.
    Put(Vec<u8>, Vec<u8>),
    /// Remove `key`; outputs the previous value.
    Delete(Vec<u8>),
    /// Read `key`.
    Get(Vec<u8>),
}

enum Job {
    Persist {
        version: Version,
        bytes: Vec<u8>,
        on_persist: PersistCallback,
    },
    Flush(mpsc::Sender<()>),
}

/// An in-memory ordered map that snapshots each committed version into its own fsynced file.
pub struct VersionedMap {
    disk: Arc<dyn Disk>,
    directory: PathBuf,
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    last_committed: Version,
    jobs: Option<mpsc::Sender<Job>>,
    persister: Option<JoinHandle<()>>,
}

fn io_error(path: &Path, source: std::io::Error) -> StateObjectError {
    StateObjectError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn snapshot_path(directory: &Path, version: Version) -> PathBuf {
    directory.join(SNAPSHOT_NAME.format(version))
}

/// Encodes a snapshot; fails (rather than truncating a length field) if a metadata blob, key or
/// value is 4 GiB or larger.
fn encode_snapshot(
    version: Version,
    metadata: &[u8],
    entries: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<Vec<u8>, StateObjectError> {
    let length = |bytes: &[u8], what: &'static str| {
        u32::try_from(bytes.len()).map_err(|_| StateObjectError::TooLarge {
            what,
            length_bytes: bytes.len(),
        })
    };
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&length(metadata, "metadata")?.to_le_bytes());
    out.extend_from_slice(metadata);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (key, value) in entries {
        out.extend_from_slice(&length(key, "key")?.to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&length(value, "value")?.to_le_bytes());
        out.extend_from_slice(value);
    }
    let checksum = crc32c::crc32c(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    Ok(out)
}

type Snapshot = (Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>);

/// Decodes a snapshot file's bytes. Public within the crate for tests.
pub(crate) fn decode_snapshot(
    path: &Path,
    bytes: &[u8],
    expected_version: Version,
) -> Result<Snapshot, StateObjectError> {
    let corrupt = |offset: usize, reason: String| StateObjectError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    if bytes.len() < 8 + 8 + 4 + 8 + 4 {
        return Err(corrupt(
            bytes.len(),
            format!(
                "file is {} bytes, shorter than an empty snapshot",
                bytes.len()
            ),
        ));
    }
    let body_len = bytes.len() - 4;
    let stored = u32::from_le_bytes(bytes[body_len..].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&bytes[..body_len]);
    if stored != computed {
        return Err(corrupt(
            body_len,
            format!("CRC32C mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    let body = &bytes[..body_len];
    let mut offset = 0usize;
    let take = |length: usize, offset: &mut usize| -> Result<&[u8], StateObjectError> {
        if body.len() - *offset < length {
            return Err(corrupt(
                *offset,
                format!(
                    "field of {length} bytes runs past the end ({} left)",
                    body.len() - *offset
                ),
            ));
        }
        let slice = &body[*offset..*offset + length];
        *offset += length;
        Ok(slice)
    };
    if take(8, &mut offset)? != MAGIC {
        return Err(corrupt(0, "bad magic (not a DPR snapshot)".into()));
    }
    let version = u64::from_le_bytes(take(8, &mut offset)?.try_into().expect("8"));
    if version != expected_version {
        return Err(corrupt(
            8,
            format!("holds version {version}, its name says {expected_version}"),
        ));
    }
    let metadata_len = u32::from_le_bytes(take(4, &mut offset)?.try_into().expect("4")) as usize;
    let metadata = take(metadata_len, &mut offset)?.to_vec();
    let count = u64::from_le_bytes(take(8, &mut offset)?.try_into().expect("8"));
    let mut entries = BTreeMap::new();
    for _ in 0..count {
        let key_len = u32::from_le_bytes(take(4, &mut offset)?.try_into().expect("4")) as usize;
        let key = take(key_len, &mut offset)?.to_vec();
        let value_len = u32::from_le_bytes(take(4, &mut offset)?.try_into().expect("4")) as usize;
        let value = take(value_len, &mut offset)?.to_vec();
        entries.insert(key, value);
    }
    if offset != body.len() {
        return Err(corrupt(
            offset,
            format!(
                "{} trailing bytes after the last entry",
                body.len() - offset
            ),
        ));
    }
    Ok((metadata, entries))
}

impl VersionedMap {
    /// Opens (creating if needed) a map persisting into `directory`. The in-memory state starts
    /// empty; call [`StateObject::restore`] to load a persisted version.
    pub fn open(directory: impl Into<PathBuf>) -> Result<Self, StateObjectError> {
        Self::open_on(real_disk(), directory)
    }

    /// [`VersionedMap::open`] on `disk` (the simulated disk in fault tests).
    pub fn open_on(
        disk: Arc<dyn Disk>,
        directory: impl Into<PathBuf>,
    ) -> Result<Self, StateObjectError> {
        let directory = directory.into();
        durable::create_dir_all_durably(&*disk, &directory).map_err(|e| io_error(&directory, e))?;
        // Temporary files of writes a crash interrupted: never a version, so no fsync needed.
        for entry in disk.list(&directory).map_err(|e| io_error(&directory, e))? {
            if !entry.is_dir && entry.name.ends_with(TEMP_SUFFIX) {
                let path = directory.join(&entry.name);
                disk.remove_file(&path).map_err(|e| io_error(&path, e))?;
            }
        }
        let (jobs, receiver) = mpsc::channel::<Job>();
        let persist_directory = directory.clone();
        let persist_disk = Arc::clone(&disk);
        let persister = std::thread::Builder::new()
            .name("dpr-versioned-map-persister".into())
            .spawn(move || {
                for job in receiver {
                    match job {
                        Job::Persist {
                            version,
                            bytes,
                            on_persist,
                        } => {
                            let path = snapshot_path(&persist_directory, version);
                            let result = durable::write_file_durably(&*persist_disk, &path, &bytes)
                                .map(|()| version)
                                .map_err(|e| io_error(&path, e));
                            on_persist(result);
                        }
                        Job::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .map_err(|e| io_error(&directory, e))?;
        let mut map = Self {
            disk,
            directory,
            entries: BTreeMap::new(),
            last_committed: 0,
            jobs: Some(jobs),
            persister: Some(persister),
        };
        map.last_committed = map.persisted_versions()?.last().copied().unwrap_or(0);
        Ok(map)
    }

    /// The directory holding the snapshots.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The current (uncommitted) contents, for tests and oracles.
    pub fn entries(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        &self.entries
    }

    /// Waits until every commit issued so far has been written (and its callback has run).
    pub fn flush(&self) -> Result<(), StateObjectError> {
        let (done, wait) = mpsc::channel();
        self.jobs
            .as_ref()
            .ok_or(StateObjectError::PersisterGone)?
            .send(Job::Flush(done))
            .map_err(|_| StateObjectError::PersisterGone)?;
        wait.recv().map_err(|_| StateObjectError::PersisterGone)
    }
}

impl Drop for VersionedMap {
    fn drop(&mut self) {
        // Closing the channel ends the persister after it drains queued commits.
        self.jobs.take();
        if let Some(persister) = self.persister.take() {
            let _ = persister.join();
        }
    }
}

impl StateObject for VersionedMap {
    type Operation = MapOperation;
    type Output = Option<Vec<u8>>;

    fn execute(
        &mut self,
        version: Version,
        operations: &[MapOperation],
    ) -> Result<Vec<Self::Output>, StateObjectError> {
        debug_assert!(
            version > self.last_committed,
            "executing in sealed version {version}"
        );
        Ok(operations
            .iter()
            .map(|operation| match operation {
                MapOperation::Put(key, value) => self.entries.insert(key.clone(), value.clone()),
                MapOperation::Delete(key) => self.entries.remove(key),
                MapOperation::Get(key) => self.entries.get(key).cloned(),
            })
            .collect())
    }

    fn commit(
        &mut self,
        version: Version,
        metadata: Vec<u8>,
        on_persist: PersistCallback,
    ) -> Result<(), StateObjectError> {
        if version <= self.last_committed {
            return Err(StateObjectError::VersionNotIncreasing {
                version,
                last: self.last_committed,
            });
        }
        // Encoding here fixes the content of `version` before the caller executes anything newer.
        let bytes = encode_snapshot(version, &metadata, &self.entries)?;
        self.jobs
            .as_ref()
            .ok_or(StateObjectError::PersisterGone)?
            .send(Job::Persist {
                version,
                bytes,
                on_persist,
            })
            .map_err(|_| StateObjectError::PersisterGone)?;
        self.last_committed = version;
        Ok(())
    }

    fn restore(&mut self, version: Version) -> Result<Vec<u8>, StateObjectError> {
        self.flush()?;
        let persisted = self.persisted_versions()?;
        let (metadata, entries) = if version == 0 {
            (Vec::new(), BTreeMap::new())
        } else {
            if !persisted.contains(&version) {
                return Err(StateObjectError::NoSuchVersion {
                    version,
                    available: persisted,
                });
            }
            let path = snapshot_path(&self.directory, version);
            let bytes = durable::read_file(&*self.disk, &path, MAX_SNAPSHOT_BYTES)
                .map_err(|e| io_error(&path, e))?
                .ok_or_else(|| {
                    io_error(
                        &path,
                        std::io::Error::new(std::io::ErrorKind::NotFound, "snapshot vanished"),
                    )
                })?;
            decode_snapshot(&path, &bytes, version)?
        };
        // Only after the target verified: drop the lost versions above it, durably (they belong
        // to a lost world-line and must not come back after a crash).
        let lost: Vec<Version> = persisted.into_iter().filter(|&v| v > version).collect();
        for &lost in &lost {
            let path = snapshot_path(&self.directory, lost);
            self.disk
                .remove_file(&path)
                .map_err(|e| io_error(&path, e))?;
        }
        if !lost.is_empty() {
            durable::sync_dir(&*self.disk, &self.directory)
                .map_err(|e| io_error(&self.directory, e))?;
        }
        self.entries = entries;
        self.last_committed = version;
        Ok(metadata)
    }

    fn persisted_versions(&self) -> Result<Vec<Version>, StateObjectError> {
        let entries = self
            .disk
            .list(&self.directory)
            .map_err(|e| io_error(&self.directory, e))?;
        let mut versions: Vec<Version> = entries
            .iter()
            .filter(|entry| !entry.is_dir)
            .filter_map(|entry| SNAPSHOT_NAME.parse(&entry.name))
            .collect();
        versions.sort_unstable();
        Ok(versions)
    }

    fn prune(&mut self, below: Version) -> Result<(), StateObjectError> {
        for version in self
            .persisted_versions()?
            .into_iter()
            .filter(|&v| v < below)
        {
            let path = snapshot_path(&self.directory, version);
            self.disk
                .remove_file(&path)
                .map_err(|e| io_error(&path, e))?;
        }
        Ok(())
    }
}
