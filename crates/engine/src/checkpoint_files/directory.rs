//! The checkpoint root directory: naming, creating, publishing and pruning checkpoint directories.
//! The mechanism (publish atomically, open the newest that verifies, quarantine, prune) is the
//! storage crate's version catalog ([`prefixkv_storage::Catalog`]); this module adds what is
//! particular to checkpoints: the MANIFEST, segment writers, and the engine's error messages.
//! Every file goes through the [`Disk`] given at open (the simulated disk in power-cut tests).
//!
//! Invariants (the catalog's, restated for checkpoints):
//! - A directory named exactly `v{version:020}` is published: its MANIFEST and segments were fsynced
//!   and the directory fsynced before the rename that gave it this name.
//! - Directories with the `.tmp` or `.deleting` suffix are never read; `open` removes them.
//! - Directories with the `.corrupt` suffix (moved aside by a recovery that fell back) are never
//!   read and never removed: they are evidence for the operator.
//! - `begin(version)` requires a version above every published one, so versions only grow.
//! - `published` (the cache behind `newest_published_version`) only ever holds versions whose
//!   directory was seen published on disk or was published by this process.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prefixkv_storage::{real_disk, Catalog, CatalogError, Disk, Draft};

use super::manifest::{encode_manifest, Manifest, ManifestContent, ManifestKind};
use super::pacer::WritePacer;
use super::recovery::{self, VerifiedCheckpoint};
use super::segment::{segment_file_name, DecodeLimits, SegmentSummary};
use super::segment_writer::SegmentWriter;
use super::MANIFEST_FILE_NAME;
use crate::checkpoint_priority::ThreadPriority;
use crate::error::EngineError;

/// The engine's error for a catalog error.
pub(crate) fn catalog_error(error: CatalogError) -> EngineError {
    match error {
        CatalogError::InvalidArgument(message) => {
            EngineError::InvalidArgument(format!("checkpoint {message}"))
        }
        CatalogError::Io {
            operation,
            path,
            source,
        } => EngineError::io(operation, path, source),
    }
}

/// The root holding all checkpoint directories of a store. `Send + Sync`.
#[derive(Debug)]
pub struct CheckpointDirectory {
    catalog: Catalog,
    limits: DecodeLimits,
    /// Each checkpoint's writes together stay under this rate; `None`: as fast as the disk goes.
    write_bytes_per_s: Option<u64>,
    /// Segment files bypass the page cache where the file system allows (see `segment_writer`).
    direct_io: bool,
}

impl CheckpointDirectory {
    /// Opens (creating if missing) the checkpoint root on the real disk, with the default
    /// [`DecodeLimits`], and removes the `.tmp` and `.deleting` directories that an earlier crash
    /// left behind.
    pub fn open(root: &Path) -> Result<CheckpointDirectory, EngineError> {
        CheckpointDirectory::open_with_limits(root, DecodeLimits::default())
    }

    /// Like [`open`](Self::open), with explicit limits for writing and decoding segments.
    pub fn open_with_limits(
        root: &Path,
        limits: DecodeLimits,
    ) -> Result<CheckpointDirectory, EngineError> {
        CheckpointDirectory::open_on(real_disk(), root, limits)
    }

    /// Like [`open_with_limits`](Self::open_with_limits), on `disk`.
    pub fn open_on(
        disk: Arc<dyn Disk>,
        root: &Path,
        limits: DecodeLimits,
    ) -> Result<CheckpointDirectory, EngineError> {
        let catalog = Catalog::open(disk, root).map_err(catalog_error)?;
        Ok(CheckpointDirectory {
            catalog,
            limits,
            write_bytes_per_s: None,
            direct_io: true,
        })
    }

    /// The root path.
    pub fn root(&self) -> &Path {
        self.catalog.root()
    }

    /// The disk the checkpoints live on.
    pub fn disk(&self) -> &Arc<dyn Disk> {
        self.catalog.disk()
    }

    /// The unfinished directories that [`open`](Self::open) removed.
    pub fn removed_stale(&self) -> &[PathBuf] {
        self.catalog.removed_stale()
    }

    /// The newest published version known to this handle (seen at open or published since).
    pub fn newest_published_version(&self) -> Option<u64> {
        self.catalog.newest_published()
    }

    /// Limits the write rate of every later checkpoint (all its segments together) to
    /// `bytes_per_s`; `None` removes the limit.
    pub fn set_write_rate(&mut self, bytes_per_s: Option<u64>) {
        self.write_bytes_per_s = bytes_per_s;
    }

    /// Whether later checkpoints write their segments with direct I/O (`O_DIRECT`, the default)
    /// where the file system has it, or through the page cache.
    pub fn set_direct_io(&mut self, on: bool) {
        self.direct_io = on;
    }

    /// Starts writing checkpoint `version` in a fresh `.tmp` directory.
    pub fn begin(&self, version: u64) -> Result<PendingCheckpoint, EngineError> {
        let draft = self.catalog.begin(version).map_err(catalog_error)?;
        Ok(PendingCheckpoint {
            draft,
            limits: self.limits,
            pacer: self
                .write_bytes_per_s
                .map(|rate| Arc::new(WritePacer::new(rate))),
            direct_io: self.direct_io,
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
        recovery::select(&self.catalog, self.limits)
    }

    /// Deletes all but the newest `keep` published checkpoints (`keep` >= 1); returns the
    /// versions deleted.
    pub fn prune(&self, keep: usize) -> Result<Vec<u64>, EngineError> {
        self.catalog.prune(keep).map_err(catalog_error)
    }

    /// The published checkpoint versions on disk, newest first.
    pub fn published_versions(&self) -> Result<Vec<u64>, EngineError> {
        self.catalog.published_versions().map_err(catalog_error)
    }

    /// Deletes published checkpoint `version`, durably (renamed aside and the directory synced
    /// before any file goes): a rollback removes the checkpoints above its target, newest first.
    pub fn remove(&self, version: u64) -> Result<(), EngineError> {
        self.catalog.remove(version).map_err(catalog_error)
    }

    /// Unpublishes `versions` durably with one directory sync; their directories stay until
    /// [`CheckpointDirectory::remove_retired`] (see `prefixkv_storage::Catalog::retire`).
    pub fn retire(&self, versions: &[u64]) -> Result<Vec<std::path::PathBuf>, EngineError> {
        self.catalog.retire(versions).map_err(catalog_error)
    }

    /// Removes the directories [`CheckpointDirectory::retire`] returned.
    pub fn remove_retired(&self, retired: &[std::path::PathBuf]) -> Result<(), EngineError> {
        self.catalog.remove_retired(retired).map_err(catalog_error)
    }
}

/// A checkpoint being written in its `.tmp` directory. Dropping it unpublished removes the directory.
#[derive(Debug)]
pub struct PendingCheckpoint {
    draft: Draft,
    limits: DecodeLimits,
    /// Shared by all segment writers of this checkpoint.
    pacer: Option<Arc<WritePacer>>,
    direct_io: bool,
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
        self.draft.version()
    }

    /// The `.tmp` directory being written.
    pub fn path(&self) -> &Path {
        self.draft.path()
    }

    /// Creates the writer of segment `index`; each index can be created once.
    pub fn segment_writer(&self, index: u32) -> Result<SegmentWriter, EngineError> {
        self.segment_writer_with_priority(index, None)
    }

    /// [`segment_writer`](Self::segment_writer) whose I/O thread runs under the checkpoint's
    /// adaptive priority and which reports its progress to it (`checkpoint_priority.rs`).
    pub(crate) fn segment_writer_with_priority(
        &self,
        index: u32,
        priority: Option<Arc<ThreadPriority>>,
    ) -> Result<SegmentWriter, EngineError> {
        let name = segment_file_name(index);
        let file = self.draft.create_file(&name).map_err(catalog_error)?;
        SegmentWriter::create(
            file,
            self.draft.path().join(name),
            index,
            self.draft.version(),
            self.limits,
            self.pacer.clone(),
            self.direct_io,
            priority,
        )
    }

    /// Writes the MANIFEST and publishes the checkpoint (see the module docs for the ordering).
    ///
    /// `segments` are the summaries returned by [`SegmentWriter::finish`] (already fsynced), in any
    /// order; every segment file in the directory must be listed exactly once.
    pub fn publish(
        self,
        manifest: ManifestContent,
        mut segments: Vec<SegmentSummary>,
    ) -> Result<PublishedCheckpoint, EngineError> {
        let version = self.draft.version();
        if manifest.version != version {
            return Err(EngineError::InvalidArgument(format!(
                "manifest says version {} but this checkpoint is v{version}",
                manifest.version
            )));
        }
        let disk = Arc::clone(self.draft.disk());
        segments.sort_unstable_by_key(|segment| segment.index);
        for segment in &segments {
            let path = self.draft.path().join(&segment.file_name);
            let on_disk_bytes = disk
                .metadata(&path)
                .map_err(|source| EngineError::io("stat finished segment", &path, source))?
                .len;
            if on_disk_bytes != segment.bytes {
                return Err(EngineError::InvalidArgument(format!(
                    "segment summary says {} bytes but {} has {on_disk_bytes}; was finish() called \
                     on this checkpoint's writer?",
                    segment.bytes,
                    path.display()
                )));
            }
        }
        let mut listed: BTreeSet<String> = segments.iter().map(|s| s.file_name.clone()).collect();
        if manifest.kind == ManifestKind::Incremental {
            // Its index copy, which the manifest names by length and CRC (`tier`).
            listed.insert(super::INDEX_FILE_NAME.to_string());
        }
        for name in self.draft.file_names().map_err(catalog_error)? {
            if !listed.contains(&name) {
                return Err(EngineError::InvalidArgument(format!(
                    "{} is in the checkpoint directory but not among the published segments; \
                     pass every finished segment's summary to publish",
                    self.draft.path().join(name).display()
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
        self.draft
            .write_file(MANIFEST_FILE_NAME, &encode_manifest(&manifest))
            .map_err(catalog_error)?;
        let dir = self.draft.publish().map_err(catalog_error)?;
        Ok(PublishedCheckpoint {
            version,
            dir,
            bytes: manifest.segment_bytes(),
            entries: manifest.entries(),
        })
    }
}
