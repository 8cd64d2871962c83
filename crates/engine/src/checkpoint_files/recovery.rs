//! Choosing the checkpoint to recover from, and loading its entries.
//!
//! Invariants:
//! - A [`VerifiedCheckpoint`] is only built for a checkpoint whose MANIFEST and every segment
//!   passed a full verification pass (every byte read, every CRC32C compared; segments in
//!   parallel, the lowest failing segment reported).
//! - Loading decodes the files again with the same checks (files may change between verification
//!   and loading); if a check fails after entries were already handed to the sink, the load
//!   returns the error and the caller must discard what it built.
//! - A delta checkpoint ([`ManifestKind::LogDelta`]) verifies only with its whole chain: every
//!   base down to a full image is read and checked like the delta itself, and each base is of a
//!   strictly smaller version (so a chain ends, within [`MAX_CHAIN`] links). A missing or
//!   damaged base rejects the delta, and recovery falls back to an older checkpoint.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prefixkv_storage::{Catalog, Disk, OpenMode, Rejection, SelectError};

use super::directory::catalog_error;
use super::manifest::{
    decode_manifest_bytes, Manifest, ManifestKind, TierImage, MAX_MANIFEST_BYTES,
};
use super::segment::{read_segment_file, DecodeLimits, EntryRef, SegmentSummary};
use super::MANIFEST_FILE_NAME;
use crate::error::EngineError;

/// The longest chain of delta checkpoints recovery follows (a writer starts a full image long
/// before: the cluster's persister after 64 deltas).
pub const MAX_CHAIN: usize = 4096;

/// A checkpoint that passed verification and can be loaded.
#[derive(Debug, Clone)]
pub struct VerifiedCheckpoint {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    manifest: Manifest,
    /// For a delta: its bases, the full image first, each verified like this one.
    chain: Vec<(PathBuf, Manifest)>,
    fell_back: Option<String>,
    limits: DecodeLimits,
}

impl VerifiedCheckpoint {
    /// The MANIFEST: content and segment summaries.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The checkpoint version.
    pub fn version(&self) -> u64 {
        self.manifest.content.version
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// If newer checkpoints failed verification: which, which file and why, and what was used.
    pub fn fell_back(&self) -> Option<&str> {
        self.fell_back.as_deref()
    }

    /// Loads a `KeyUnique` checkpoint with up to `threads` threads, segments spread over them;
    /// `sink` is called once per entry, from any of the threads, in no particular order. Returns
    /// the number of entries. Key uniqueness across segments is the sink's to assert (it sees
    /// every key, the loader does not keep them).
    pub fn load_parallel(
        &self,
        threads: usize,
        sink: &(dyn Fn(EntryRef<'_>) -> Result<(), EngineError> + Sync),
    ) -> Result<u64, EngineError> {
        if self.manifest.content.kind != ManifestKind::KeyUnique {
            return Err(EngineError::InvalidArgument(format!(
                "checkpoint v{} is {:?}: its entries must be applied in order with load_in_order",
                self.version(),
                self.manifest.content.kind
            )));
        }
        each_segment_in_parallel(&self.manifest.segments, threads, &|summary| {
            read_segment_file(
                &*self.disk,
                &self.dir,
                summary,
                self.version(),
                self.limits,
                &mut |entry| sink(entry),
            )
        })
    }

    /// Loads the image of a log-ordered checkpoint on the calling thread: for a delta, its full
    /// base first and then every delta of the chain in version order; within each, segments in
    /// index order and entries in file order. Each member passes on only the entries of its own
    /// versions (`<= version` for the full image, `(base, version]` for a delta), so applying
    /// them in order, the last one winning, builds the image of this checkpoint's version.
    /// Returns the number of entries passed on.
    pub fn load_image_in_order(
        &self,
        sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
    ) -> Result<u64, EngineError> {
        let mut passed = 0;
        let members = self
            .chain
            .iter()
            .map(|(dir, manifest)| (dir.as_path(), manifest))
            .chain(std::iter::once((self.dir.as_path(), &self.manifest)));
        for (dir, manifest) in members {
            let version = manifest.content.version;
            let above = match manifest.content.kind {
                ManifestKind::LogDelta { base } => base,
                ManifestKind::LogOrdered => 0,
                ManifestKind::KeyUnique | ManifestKind::Incremental => {
                    return Err(EngineError::InvalidArgument(format!(
                        "checkpoint v{version} is {:?}: it has no log-ordered segments",
                        manifest.content.kind
                    )))
                }
            };
            for summary in &manifest.segments {
                read_segment_file(
                    &*self.disk,
                    dir,
                    summary,
                    version,
                    self.limits,
                    &mut |entry| {
                        if entry.record_version <= above || entry.record_version > version {
                            return Ok(());
                        }
                        passed += 1;
                        sink(entry)
                    },
                )?;
            }
        }
        Ok(passed)
    }

    /// The versions of the delta chain this checkpoint loads on top of, the full image first
    /// (empty for a full checkpoint).
    pub fn chain_versions(&self) -> Vec<u64> {
        self.chain
            .iter()
            .map(|(_, manifest)| manifest.content.version)
            .collect()
    }

    /// Loads the checkpoint on the calling thread: segments in index order, entries in file order.
    /// Required for `LogOrdered` checkpoints, allowed for any. Every entry is passed on as written
    /// (including record versions above the checkpoint version and tombstones); applying the
    /// `LogOrdered` rules is the caller's. Returns the number of entries.
    pub fn load_in_order(
        &self,
        sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
    ) -> Result<u64, EngineError> {
        let mut total_entries = 0;
        for summary in &self.manifest.segments {
            total_entries += read_segment_file(
                &*self.disk,
                &self.dir,
                summary,
                self.version(),
                self.limits,
                sink,
            )?;
        }
        Ok(total_entries)
    }
}

/// Reads and checks the MANIFEST of `dir`, which must describe checkpoint `version`.
fn read_manifest(disk: &dyn Disk, dir: &Path, version: u64) -> Result<Manifest, EngineError> {
    let path = dir.join(MANIFEST_FILE_NAME);
    let file = match disk.open(&path, OpenMode::Read) {
        Ok(file) => file,
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(EngineError::corrupt(&path, 0, "MANIFEST is missing"));
        }
        Err(source) => return Err(EngineError::io("open MANIFEST", &path, source)),
    };
    let file_bytes = file
        .len()
        .map_err(|source| EngineError::io("stat MANIFEST", &path, source))?;
    let limit = MAX_MANIFEST_BYTES + 64;
    if file_bytes > limit {
        return Err(EngineError::corrupt(
            &path,
            0,
            format!("MANIFEST is {file_bytes} bytes, above the {limit}-byte limit"),
        ));
    }
    let mut bytes = vec![0u8; file_bytes as usize];
    file.read_exact_at(&mut bytes, 0).map_err(|source| {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            EngineError::corrupt(&path, 0, "MANIFEST shrank while being read")
        } else {
            EngineError::io("read MANIFEST", &path, source)
        }
    })?;
    let manifest = decode_manifest_bytes(&bytes, &path)?;
    if manifest.content.version != version {
        return Err(EngineError::corrupt(
            &path,
            0,
            format!(
                "MANIFEST describes checkpoint v{} but sits in the directory of v{version}",
                manifest.content.version
            ),
        ));
    }
    Ok(manifest)
}

/// Runs `read` on every segment, up to `threads` at a time, segments handed out in index order;
/// returns the sum of what the reads returned (their entries). After a failure no new segment is
/// started, and the error returned is the lowest-index segment's whatever the threads' timing:
/// every segment below a failed one was handed out before it, so each is read to the end.
fn each_segment_in_parallel(
    segments: &[SegmentSummary],
    threads: usize,
    read: &(dyn Fn(&SegmentSummary) -> Result<u64, EngineError> + Sync),
) -> Result<u64, EngineError> {
    let threads = threads.clamp(1, segments.len().max(1));
    let next_segment = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let total_entries = AtomicU64::new(0);
    let errors: Mutex<Vec<(usize, EngineError)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let position = next_segment.fetch_add(1, Ordering::Relaxed);
                    let Some(summary) = segments.get(position) else {
                        break;
                    };
                    match read(summary) {
                        Ok(entries) => {
                            total_entries.fetch_add(entries, Ordering::Relaxed);
                        }
                        Err(error) => {
                            stop.store(true, Ordering::Relaxed);
                            errors
                                .lock()
                                .expect("error list lock")
                                .push((position, error));
                        }
                    }
                }
            });
        }
    });
    let errors = errors.into_inner().expect("error list lock");
    match errors.into_iter().min_by_key(|(position, _)| *position) {
        Some((_, error)) => Err(error),
        None => Ok(total_entries.into_inner()),
    }
}

/// Fully verifies checkpoint `version` in `dir`: its segments in parallel (one thread per core at
/// most), so that verifying costs a restart what one segment's read does, not all of them. When
/// several segments fail, the error of the lowest segment index is reported, whatever the threads'
/// timing.
fn verify(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    version: u64,
    limits: DecodeLimits,
    dir_of: &dyn Fn(u64) -> PathBuf,
) -> Result<VerifiedCheckpoint, EngineError> {
    let manifest = verify_one(disk, dir, version, limits)?;
    let mut chain = Vec::new();
    let mut next = manifest.content.kind;
    while let ManifestKind::LogDelta { base } = next {
        if chain.len() >= MAX_CHAIN {
            return Err(EngineError::corrupt(
                dir,
                0,
                format!("delta checkpoint v{version} has a chain of more than {MAX_CHAIN} bases"),
            ));
        }
        let base_dir = dir_of(base);
        // A missing or damaged base makes the delta unusable: reported as damage to the delta
        // (recovery then falls back past it).
        let base_manifest = verify_one(disk, &base_dir, base, limits).map_err(|error| {
            EngineError::corrupt(
                dir,
                0,
                format!(
                    "delta checkpoint v{version} needs base v{base}, which is unusable: {error}"
                ),
            )
        })?;
        if matches!(
            base_manifest.content.kind,
            ManifestKind::KeyUnique | ManifestKind::Incremental
        ) {
            return Err(EngineError::corrupt(
                dir,
                0,
                format!(
                    "delta checkpoint v{version} names base v{base}, a {:?} image",
                    base_manifest.content.kind
                ),
            ));
        }
        next = base_manifest.content.kind;
        chain.push((base_dir, base_manifest));
    }
    chain.reverse();
    Ok(VerifiedCheckpoint {
        disk: Arc::clone(disk),
        dir: dir.to_path_buf(),
        manifest,
        chain,
        fell_back: None,
        limits,
    })
}

/// Verifies one checkpoint directory (its MANIFEST and every segment), not its bases.
fn verify_one(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    version: u64,
    limits: DecodeLimits,
) -> Result<Manifest, EngineError> {
    let manifest = read_manifest(&**disk, dir, version)?;
    if let Some(tier) = &manifest.content.tier {
        verify_index_copy(&**disk, dir, tier)?;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    each_segment_in_parallel(&manifest.segments, threads, &|summary| {
        read_segment_file(&**disk, dir, summary, version, limits, &mut |_| Ok(()))
    })?;
    Ok(manifest)
}

/// Reads an incremental checkpoint's index copy whole and checks its length and CRC against the
/// manifest (loading checks every chunk again; this catches damage before the checkpoint is
/// chosen, so that recovery can fall back past it). The pages it points into are checked by the
/// engine's recovery against the page file's trusted entries.
fn verify_index_copy(disk: &dyn Disk, dir: &Path, tier: &TierImage) -> Result<(), EngineError> {
    let path = dir.join(super::INDEX_FILE_NAME);
    let file = disk.open(&path, OpenMode::Read).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            EngineError::corrupt(
                &path,
                0,
                "the incremental checkpoint's index copy is missing",
            )
        } else {
            EngineError::io("open the index copy", &path, error)
        }
    })?;
    let len = file
        .len()
        .map_err(|error| EngineError::io("read the length of the index copy", &path, error))?;
    if len != tier.index_bytes {
        return Err(EngineError::corrupt(
            &path,
            len.min(tier.index_bytes),
            format!(
                "the index copy is {len} bytes, the manifest says {}",
                tier.index_bytes
            ),
        ));
    }
    let mut crc = 0u32;
    let mut buffer = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < len {
        let want = ((len - offset) as usize).min(buffer.len());
        file.read_exact_at(&mut buffer[..want], offset)
            .map_err(|error| EngineError::io("read the index copy", &path, error))?;
        crc = crc32c::crc32c_append(crc, &buffer[..want]);
        offset += want as u64;
    }
    if crc != tier.index_crc {
        return Err(EngineError::corrupt(
            &path,
            0,
            format!(
                "the index copy's CRC32C is {crc:#010x}, the manifest says {:#010x}",
                tier.index_crc
            ),
        ));
    }
    Ok(())
}

/// The selection rule; see `CheckpointDirectory::select_for_recovery`. A checkpoint is rejected
/// (and recovery falls back) on [`EngineError::Corrupt`]; any other error stops the selection.
pub(crate) fn select(
    catalog: &Catalog,
    limits: DecodeLimits,
) -> Result<Option<VerifiedCheckpoint>, EngineError> {
    let disk = Arc::clone(catalog.disk());
    let dir_of = |version| catalog.version_dir(version);
    let selected = catalog.select(|version, dir| {
        verify(&disk, dir, version, limits, &dir_of).map_err(|error| match error {
            error @ EngineError::Corrupt { .. } => Rejection::Invalid(error.to_string()),
            other => Rejection::Abort(other),
        })
    });
    match selected {
        Ok(None) => Ok(None),
        Ok(Some(selected)) => {
            let mut checkpoint = selected.value;
            if !selected.rejected.is_empty() {
                // The failed newer checkpoints were moved aside (kept for inspection) so that the
                // engine can write its next version under the normal name and so that pruning
                // never counts a corrupt checkpoint among the ones it keeps.
                let failures: Vec<String> = selected
                    .rejected
                    .iter()
                    .map(|(version, why)| {
                        format!("checkpoint v{version} failed verification ({why})")
                    })
                    .collect();
                let moved: Vec<String> = selected
                    .quarantined
                    .iter()
                    .map(|path| path.display().to_string())
                    .collect();
                let message = format!(
                    "{}; recovered v{}; the failed checkpoint files were moved to {} for inspection",
                    failures.join("; "),
                    selected.version,
                    moved.join(", ")
                );
                tracing::warn!(%message, "recovering from an older checkpoint");
                checkpoint.fell_back = Some(message);
            }
            Ok(Some(checkpoint))
        }
        Err(SelectError::Aborted(error)) => Err(error),
        Err(SelectError::Catalog(error)) => Err(catalog_error(error)),
        Err(SelectError::NoneVerifies(rejected)) => {
            let failures: Vec<String> = rejected
                .iter()
                .map(|(version, why)| format!("checkpoint v{version} failed verification ({why})"))
                .collect();
            let root = catalog.root();
            Err(EngineError::corrupt(
                root,
                0,
                format!(
                    "none of the {} checkpoints verifies: {}. The store refuses to start rather \
                     than serve a partial or empty image; the files are left untouched. To start \
                     empty, move the directory {} aside (keep it for inspection or restore it \
                     from a backup)",
                    rejected.len(),
                    failures.join("; "),
                    root.display()
                ),
            ))
        }
    }
}
