//! The checkpoint root directory: naming, creating, publishing and pruning checkpoint directories.
//!
//! Invariants:
//! - A directory named exactly `v{version:020}` is published: its MANIFEST and segments were fsynced
//!   and the directory fsynced before the rename that gave it this name.
//! - Directories with the `.tmp` or `.deleting` suffix are never read; `open` removes them.
//! - Directories with the `.corrupt` suffix (moved aside by a recovery that fell back) are never
//!   read and never removed: they are evidence for the operator.
//! - `begin(version)` requires a version above every published one, so versions only grow.
//! - `published` (the cache behind `newest_published_version`) only ever holds versions whose
//!   directory was seen published on disk or was published by this process.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::manifest::{encode_manifest, Manifest, ManifestContent};
use super::pacer::WritePacer;
use super::recovery::{self, VerifiedCheckpoint};
use super::segment::{segment_file_name, DecodeLimits, SegmentSummary, SegmentWriter};
use super::MANIFEST_FILE_NAME;
use crate::error::EngineError;

const TMP_SUFFIX: &str = ".tmp";
const DELETING_SUFFIX: &str = ".deleting";
/// Suffix of a checkpoint that failed verification while an older one was recovered: never read,
/// never removed automatically.
pub(crate) const QUARANTINE_SUFFIX: &str = ".corrupt";

/// The name of the published directory of `version`.
pub(crate) fn published_name(version: u64) -> String {
    format!("v{version:020}")
}

/// What a directory entry's name says it is.
#[derive(Debug, PartialEq, Eq)]
enum EntryName {
    Published(u64),
    Unfinished(u64),
    Deleting(u64),
    Other,
}

fn classify(name: &str) -> EntryName {
    let parse = |stem: &str| -> Option<u64> {
        let digits = stem.strip_prefix('v')?;
        if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    if let Some(stem) = name.strip_suffix(TMP_SUFFIX) {
        parse(stem).map_or(EntryName::Other, EntryName::Unfinished)
    } else if let Some(stem) = name.strip_suffix(DELETING_SUFFIX) {
        parse(stem).map_or(EntryName::Other, EntryName::Deleting)
    } else {
        parse(name).map_or(EntryName::Other, EntryName::Published)
    }
}

/// fsyncs a directory so that entries created, renamed or removed in it are durable.
pub(crate) fn sync_directory(path: &Path) -> Result<(), EngineError> {
    File::open(path)
        .and_then(|directory| directory.sync_all())
        .map_err(|source| EngineError::io("fsync directory", path, source))
}

/// The root holding all checkpoint directories of a store. `Send + Sync`.
#[derive(Debug)]
pub struct CheckpointDirectory {
    root: PathBuf,
    limits: DecodeLimits,
    published: Arc<Mutex<BTreeSet<u64>>>,
    removed_stale: Vec<PathBuf>,
    /// Each checkpoint's writes together stay under this rate; `None`: as fast as the disk goes.
    write_bytes_per_s: Option<u64>,
}

impl CheckpointDirectory {
    /// Opens (creating if missing) the checkpoint root, with the default [`DecodeLimits`], and
    /// removes the `.tmp` and `.deleting` directories that an earlier crash left behind.
    pub fn open(root: &Path) -> Result<CheckpointDirectory, EngineError> {
        CheckpointDirectory::open_with_limits(root, DecodeLimits::default())
    }

    /// Like [`open`](Self::open), with explicit limits for writing and decoding segments.
    pub fn open_with_limits(
        root: &Path,
        limits: DecodeLimits,
    ) -> Result<CheckpointDirectory, EngineError> {
        if !root.is_dir() {
            fs::create_dir_all(root)
                .map_err(|source| EngineError::io("create checkpoint directory", root, source))?;
            if let Some(parent) = root
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty())
            {
                sync_directory(parent)?;
            }
        }
        let mut directory = CheckpointDirectory {
            root: root.to_path_buf(),
            limits,
            published: Arc::new(Mutex::new(BTreeSet::new())),
            removed_stale: Vec::new(),
            write_bytes_per_s: None,
        };
        let mut published = BTreeSet::new();
        for (name, kind) in directory.list()? {
            match kind {
                EntryName::Published(version) => {
                    published.insert(version);
                }
                EntryName::Unfinished(_) | EntryName::Deleting(_) => {
                    let path = directory.root.join(&name);
                    tracing::warn!(
                        path = %path.display(),
                        "removing an unfinished checkpoint directory left by an earlier crash"
                    );
                    fs::remove_dir_all(&path).map_err(|source| {
                        EngineError::io("remove unfinished checkpoint directory", &path, source)
                    })?;
                    directory.removed_stale.push(path);
                }
                EntryName::Other => {}
            }
        }
        if !directory.removed_stale.is_empty() {
            sync_directory(&directory.root)?;
        }
        *directory.published.lock().expect("published set lock") = published;
        Ok(directory)
    }

    /// The root path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The unfinished directories that [`open`](Self::open) removed.
    pub fn removed_stale(&self) -> &[PathBuf] {
        &self.removed_stale
    }

    /// The newest published version known to this handle (seen at open or published since).
    pub fn newest_published_version(&self) -> Option<u64> {
        self.published
            .lock()
            .expect("published set lock")
            .last()
            .copied()
    }

    /// Limits the write rate of every later checkpoint (all its segments together) to
    /// `bytes_per_s`; `None` removes the limit.
    pub fn set_write_rate(&mut self, bytes_per_s: Option<u64>) {
        self.write_bytes_per_s = bytes_per_s;
    }

    /// Starts writing checkpoint `version` in a fresh `.tmp` directory.
    pub fn begin(&self, version: u64) -> Result<PendingCheckpoint, EngineError> {
        if version == 0 {
            return Err(EngineError::InvalidArgument(
                "checkpoint version 0 is reserved; versions start at 1".into(),
            ));
        }
        if let Some(newest) = self
            .newest_published_version()
            .filter(|&newest| newest >= version)
        {
            return Err(EngineError::InvalidArgument(format!(
                "checkpoint v{version} is not newer than the published v{newest}; checkpoint \
                 versions must grow"
            )));
        }
        let final_path = self.root.join(published_name(version));
        if final_path.exists() {
            return Err(EngineError::InvalidArgument(format!(
                "checkpoint v{version} is already published at {}; use a newer version",
                final_path.display()
            )));
        }
        let tmp_path = self
            .root
            .join(format!("{}{TMP_SUFFIX}", published_name(version)));
        fs::create_dir(&tmp_path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                EngineError::InvalidArgument(format!(
                    "checkpoint v{version} is already being written in {}; finish or drop it first",
                    tmp_path.display()
                ))
            } else {
                EngineError::io("create checkpoint directory", &tmp_path, source)
            }
        })?;
        Ok(PendingCheckpoint {
            root: self.root.clone(),
            version,
            tmp_path,
            final_path,
            limits: self.limits,
            pacer: self
                .write_bytes_per_s
                .map(|rate| Arc::new(WritePacer::new(rate))),
            published_set: Arc::clone(&self.published),
            published: false,
        })
    }

    /// Chooses the checkpoint to recover from: the newest whose MANIFEST and every segment verify.
    /// Newer checkpoints that failed are renamed to `v….corrupt` (kept, never read again) and
    /// named in [`VerifiedCheckpoint::fell_back`].
    ///
    /// `Ok(None)`: no published checkpoint exists. `Err(Corrupt)`: checkpoints exist and none
    /// verifies (the error names each file and problem). I/O errors other than missing files are
    /// returned as they are, because they say nothing about the data.
    pub fn select_for_recovery(&self) -> Result<Option<VerifiedCheckpoint>, EngineError> {
        let versions: Vec<u64> = self
            .list()?
            .into_iter()
            .filter_map(|(_, kind)| match kind {
                EntryName::Published(version) => Some(version),
                _ => None,
            })
            .collect();
        *self.published.lock().expect("published set lock") = versions.iter().copied().collect();
        let selected = recovery::select(&self.root, versions, self.limits)?;
        if let Some(checkpoint) = &selected {
            // Newer checkpoints that failed were moved aside and are no longer published.
            self.published
                .lock()
                .expect("published set lock")
                .retain(|&v| v <= checkpoint.version());
        }
        Ok(selected)
    }

    /// Deletes all but the newest `keep` published checkpoints (`keep` >= 1).
    pub fn prune(&self, keep: usize) -> Result<(), EngineError> {
        if keep == 0 {
            return Err(EngineError::InvalidArgument(
                "prune(0) would delete every checkpoint; keep at least 1".into(),
            ));
        }
        let mut versions: Vec<u64> = self
            .list()?
            .into_iter()
            .filter_map(|(_, kind)| match kind {
                EntryName::Published(version) => Some(version),
                _ => None,
            })
            .collect();
        versions.sort_unstable_by(|a, b| b.cmp(a));
        for &version in versions.iter().skip(keep) {
            let path = self.root.join(published_name(version));
            let doomed = self
                .root
                .join(format!("{}{DELETING_SUFFIX}", published_name(version)));
            // Rename first: after a crash the directory is recognisably half-deleted, never a
            // published checkpoint with missing files.
            fs::rename(&path, &doomed).map_err(|source| {
                EngineError::io(format!("rename to {}", doomed.display()), &path, source)
            })?;
            sync_directory(&self.root)?;
            self.published
                .lock()
                .expect("published set lock")
                .remove(&version);
            fs::remove_dir_all(&doomed)
                .map_err(|source| EngineError::io("remove pruned checkpoint", &doomed, source))?;
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<(String, EntryName)>, EngineError> {
        let entries = fs::read_dir(&self.root)
            .map_err(|source| EngineError::io("list checkpoint directory", &self.root, source))?;
        let mut result = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| {
                EngineError::io("list checkpoint directory", &self.root, source)
            })?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let kind = classify(&name);
            if kind != EntryName::Other {
                result.push((name, kind));
            }
        }
        Ok(result)
    }
}

/// A checkpoint being written in its `.tmp` directory. Dropping it unpublished removes the directory.
#[derive(Debug)]
pub struct PendingCheckpoint {
    root: PathBuf,
    version: u64,
    tmp_path: PathBuf,
    final_path: PathBuf,
    limits: DecodeLimits,
    /// Shared by all segment writers of this checkpoint.
    pacer: Option<Arc<WritePacer>>,
    published_set: Arc<Mutex<BTreeSet<u64>>>,
    published: bool,
}

/// A checkpoint that is durable and visible to recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedCheckpoint {
    /// Its version.
    pub version: u64,
    /// Its directory.
    pub dir: PathBuf,
    /// Total bytes of its segment files.
    pub bytes: u64,
    /// Total entries over its segments.
    pub entries: u64,
}

impl PendingCheckpoint {
    /// The version being written.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The `.tmp` directory being written.
    pub fn path(&self) -> &Path {
        &self.tmp_path
    }

    /// Creates the writer of segment `index`; each index can be created once.
    pub fn segment_writer(&self, index: u32) -> Result<SegmentWriter, EngineError> {
        SegmentWriter::create(
            &self.tmp_path,
            index,
            self.version,
            self.limits,
            self.pacer.clone(),
        )
    }

    /// Writes the MANIFEST and publishes the checkpoint (see the module docs for the ordering).
    ///
    /// `segments` are the summaries returned by [`SegmentWriter::finish`] (already fsynced), in any
    /// order; every segment file in the directory must be listed exactly once.
    pub fn publish(
        mut self,
        manifest: ManifestContent,
        mut segments: Vec<SegmentSummary>,
    ) -> Result<PublishedCheckpoint, EngineError> {
        if manifest.version != self.version {
            return Err(EngineError::InvalidArgument(format!(
                "manifest says version {} but this checkpoint is v{}",
                manifest.version, self.version
            )));
        }
        segments.sort_unstable_by_key(|segment| segment.index);
        for segment in &segments {
            let path = self.tmp_path.join(&segment.file_name);
            let on_disk_bytes = fs::metadata(&path)
                .map_err(|source| EngineError::io("stat finished segment", &path, source))?
                .len();
            if on_disk_bytes != segment.bytes {
                return Err(EngineError::InvalidArgument(format!(
                    "segment summary says {} bytes but {} has {on_disk_bytes}; was finish() called \
                     on this checkpoint's writer?",
                    segment.bytes,
                    path.display()
                )));
            }
        }
        let listed: BTreeSet<String> = segments.iter().map(|s| s.file_name.clone()).collect();
        for entry in fs::read_dir(&self.tmp_path).map_err(|source| {
            EngineError::io("list checkpoint directory", &self.tmp_path, source)
        })? {
            let entry = entry.map_err(|source| {
                EngineError::io("list checkpoint directory", &self.tmp_path, source)
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !listed.contains(&name) {
                return Err(EngineError::InvalidArgument(format!(
                    "{} is in the checkpoint directory but not among the published segments; \
                     pass every finished segment's summary to publish",
                    self.tmp_path.join(name).display()
                )));
            }
        }
        let manifest = Manifest {
            content: manifest,
            segments,
        };
        manifest
            .check_consistency()
            .map_err(|detail| EngineError::InvalidArgument(format!("bad manifest: {detail}")))?;
        debug_assert!(manifest
            .segments
            .iter()
            .all(|s| s.file_name == segment_file_name(s.index)));

        let manifest_path = self.tmp_path.join(MANIFEST_FILE_NAME);
        let bytes = encode_manifest(&manifest);
        let mut file = File::options()
            .write(true)
            .create_new(true)
            .open(&manifest_path)
            .map_err(|source| EngineError::io("create MANIFEST", &manifest_path, source))?;
        file.write_all(&bytes)
            .map_err(|source| EngineError::io("write MANIFEST", &manifest_path, source))?;
        file.sync_all()
            .map_err(|source| EngineError::io("fsync MANIFEST", &manifest_path, source))?;
        drop(file);
        sync_directory(&self.tmp_path)?;
        fs::rename(&self.tmp_path, &self.final_path).map_err(|source| {
            EngineError::io(
                format!("rename to {}", self.final_path.display()),
                &self.tmp_path,
                source,
            )
        })?;
        // From here on the checkpoint exists; Drop must not remove anything.
        self.published = true;
        sync_directory(&self.root)?;
        self.published_set
            .lock()
            .expect("published set lock")
            .insert(self.version);
        Ok(PublishedCheckpoint {
            version: self.version,
            dir: self.final_path.clone(),
            bytes: manifest.segment_bytes(),
            entries: manifest.entries(),
        })
    }
}

impl Drop for PendingCheckpoint {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        if let Err(error) = fs::remove_dir_all(&self.tmp_path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    path = %self.tmp_path.display(),
                    %error,
                    "could not remove an abandoned checkpoint directory; the next open removes it"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified() {
        assert_eq!(classify("v00000000000000000007"), EntryName::Published(7));
        assert_eq!(
            classify("v00000000000000000007.tmp"),
            EntryName::Unfinished(7)
        );
        assert_eq!(
            classify("v00000000000000000007.deleting"),
            EntryName::Deleting(7)
        );
        assert_eq!(classify("v7"), EntryName::Other);
        assert_eq!(classify("v0000000000000000000x"), EntryName::Other);
        assert_eq!(classify("notes.txt"), EntryName::Other);
        assert_eq!(published_name(7), "v00000000000000000007");
    }
}
