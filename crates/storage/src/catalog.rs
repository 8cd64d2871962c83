//! The version catalog: a root directory holding one directory per published version, published
//! atomically, opened as the newest version that verifies, with fallback, quarantine and pruning.
//!
//! ```text
//! <root>/
//!   v00000000000000000007/            published version 7 (its files, as the caller wrote them)
//!   v00000000000000000008.tmp/        a version being written, or left by a crash: removed at open
//!   v00000000000000000005.deleting/   a version being pruned, or left by a crash: removed at open
//!   v00000000000000000009.corrupt/    failed verification while an older version was chosen:
//!                                     never read, never removed (evidence for the operator)
//! ```
//!
//! # Crash-safety argument
//!
//! 1. [`Catalog::begin`] creates `v….tmp`. Nothing ever reads a `.tmp` directory.
//! 2. The caller writes its files into it and syncs each one ([`Draft::write_file`] does both;
//!    a file from [`Draft::create_file`] is the caller's to sync). Contract: every file is synced
//!    before [`Draft::publish`].
//! 3. [`Draft::publish`] fsyncs the `.tmp` directory (the files' entries become durable), renames
//!    it to `v…` (atomic: there is no state in between), and fsyncs the root (the rename becomes
//!    durable) before it returns. A power cut before the rename leaves only `.tmp`, invisible; a
//!    cut after the rename but before the root fsync may undo the rename, but `publish` had not
//!    returned, so the caller had told no one. Once `publish` returns, every byte the version's
//!    name reaches was durable before the name existed.
//! 4. [`Catalog::select`] does not trust this alone: it runs the caller's verification on each
//!    published version, newest first, and takes the first that passes. Newer versions that
//!    failed are renamed `v….corrupt` (durably) so that pruning never keeps them in place of a
//!    good version and the next version can reuse the number; the caller is told which and why.
//!    If versions exist and none verifies, selection refuses rather than start from nothing.
//! 5. [`Catalog::prune`] and [`Catalog::remove`] rename `v…` to `v….deleting` and fsync the root
//!    before deleting files, so a cut mid-deletion never leaves a published-looking version with
//!    files missing.
//!
//! Invariants: versions only grow ([`Catalog::begin`] refuses a version at or below the newest
//! published one); the cached set of published versions only holds versions seen published on
//! disk or published through this handle.

use crate::durable::{create_dir_all_durably, sync_dir};
use crate::io::{self, Disk, DiskFile, OpenMode};
use crate::names::NumberedName;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Names of published version directories: `v` and 20 digits.
pub const VERSION_NAME: NumberedName = NumberedName::new("v", 20, "");
const TMP_SUFFIX: &str = ".tmp";
const DELETING_SUFFIX: &str = ".deleting";
/// Suffix of a version that failed verification while an older one was selected.
pub const QUARANTINE_SUFFIX: &str = ".corrupt";

/// An error of the catalog itself (the caller's verification errors travel in [`SelectError`]).
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A call the catalog refuses (a version that does not grow, `prune(0)`, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A file-system call failed.
    #[error("I/O error while trying to {operation} {}: {source}", path.display())]
    Io {
        /// What was being done, as a verb phrase.
        operation: String,
        /// The file or directory.
        path: PathBuf,
        /// The error (its kind tells `StorageFull` and friends apart).
        #[source]
        source: std::io::Error,
    },
}

fn io_error(operation: &str, path: &Path) -> impl FnOnce(std::io::Error) -> CatalogError {
    let (operation, path) = (operation.to_string(), path.to_path_buf());
    move |source| CatalogError::Io {
        operation,
        path,
        source,
    }
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
    if let Some(stem) = name.strip_suffix(TMP_SUFFIX) {
        VERSION_NAME
            .parse(stem)
            .map_or(EntryName::Other, EntryName::Unfinished)
    } else if let Some(stem) = name.strip_suffix(DELETING_SUFFIX) {
        VERSION_NAME
            .parse(stem)
            .map_or(EntryName::Other, EntryName::Deleting)
    } else {
        VERSION_NAME
            .parse(name)
            .map_or(EntryName::Other, EntryName::Published)
    }
}

/// A version's verification outcome other than success.
#[derive(Debug)]
pub enum Rejection<E> {
    /// The version's files are bad (why, naming the file): fall back to an older version.
    Invalid(String),
    /// Verification could not run (an I/O error that says nothing about the data): stop.
    Abort(E),
}

/// The version [`Catalog::select`] chose.
#[derive(Debug)]
pub struct Selected<T> {
    /// Its number.
    pub version: u64,
    /// Its directory.
    pub dir: PathBuf,
    /// What the verification returned.
    pub value: T,
    /// Newer versions that failed verification, newest first, with why.
    pub rejected: Vec<(u64, String)>,
    /// Where those were moved (`v….corrupt`).
    pub quarantined: Vec<PathBuf>,
}

/// Why [`Catalog::select`] chose nothing.
#[derive(Debug)]
pub enum SelectError<E> {
    /// Versions exist and none verifies (each with why, newest first); nothing was moved.
    NoneVerifies(Vec<(u64, String)>),
    /// The verification stopped with the caller's error.
    Aborted(E),
    /// The catalog failed (listing, quarantining).
    Catalog(CatalogError),
}

/// A root of versioned directories (see the module docs). `Send + Sync`.
#[derive(Debug)]
pub struct Catalog {
    disk: Arc<dyn Disk>,
    root: PathBuf,
    published: Arc<Mutex<BTreeSet<u64>>>,
    removed_stale: Vec<PathBuf>,
}

impl Catalog {
    /// Opens (creating durably if missing) the catalog at `root` and removes the `.tmp` and
    /// `.deleting` directories an earlier crash left behind.
    pub fn open(disk: Arc<dyn Disk>, root: &Path) -> Result<Catalog, CatalogError> {
        create_dir_all_durably(&*disk, root).map_err(io_error("create", root))?;
        let mut catalog = Catalog {
            disk,
            root: root.to_path_buf(),
            published: Arc::new(Mutex::new(BTreeSet::new())),
            removed_stale: Vec::new(),
        };
        let mut published = BTreeSet::new();
        for (name, kind) in catalog.list()? {
            match kind {
                EntryName::Published(version) => {
                    published.insert(version);
                }
                EntryName::Unfinished(_) | EntryName::Deleting(_) => {
                    let path = catalog.root.join(&name);
                    tracing::warn!(path = %path.display(),
                        "removing an unfinished version directory left by an earlier crash");
                    io::remove_dir_all(&*catalog.disk, &path)
                        .map_err(io_error("remove the unfinished directory", &path))?;
                    catalog.removed_stale.push(path);
                }
                EntryName::Other => {}
            }
        }
        if !catalog.removed_stale.is_empty() {
            sync_dir(&*catalog.disk, &catalog.root).map_err(io_error("fsync", &catalog.root))?;
        }
        *catalog.published.lock() = published;
        Ok(catalog)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The disk the catalog lives on.
    pub fn disk(&self) -> &Arc<dyn Disk> {
        &self.disk
    }

    /// The unfinished directories [`Catalog::open`] removed.
    pub fn removed_stale(&self) -> &[PathBuf] {
        &self.removed_stale
    }

    /// The newest published version known to this handle.
    pub fn newest_published(&self) -> Option<u64> {
        self.published.lock().last().copied()
    }

    /// The directory of published version `version`.
    pub fn version_dir(&self, version: u64) -> PathBuf {
        self.root.join(VERSION_NAME.format(version))
    }

    /// Starts writing `version` (above every published one, and at least 1) in a fresh `.tmp`
    /// directory.
    pub fn begin(&self, version: u64) -> Result<Draft, CatalogError> {
        if version == 0 {
            return Err(CatalogError::InvalidArgument(
                "version 0 is reserved; versions start at 1".into(),
            ));
        }
        if let Some(newest) = self.newest_published().filter(|&newest| newest >= version) {
            return Err(CatalogError::InvalidArgument(format!(
                "v{version} is not newer than the published v{newest}; versions must grow"
            )));
        }
        let final_path = self.version_dir(version);
        if io::exists(&*self.disk, &final_path).map_err(io_error("stat", &final_path))? {
            return Err(CatalogError::InvalidArgument(format!(
                "v{version} is already published at {}; use a newer version",
                final_path.display()
            )));
        }
        let tmp_path = self
            .root
            .join(format!("{}{TMP_SUFFIX}", VERSION_NAME.format(version)));
        self.disk.create_dir(&tmp_path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                CatalogError::InvalidArgument(format!(
                    "v{version} is already being written in {}; finish or drop it first",
                    tmp_path.display()
                ))
            } else {
                io_error("create", &tmp_path)(source)
            }
        })?;
        Ok(Draft {
            disk: Arc::clone(&self.disk),
            root: self.root.clone(),
            version,
            tmp_path,
            final_path,
            published_set: Arc::clone(&self.published),
            published: false,
        })
    }

    /// Published versions on disk, newest first (refreshes the cached set).
    pub fn published_versions(&self) -> Result<Vec<u64>, CatalogError> {
        let mut versions: Vec<u64> = self
            .list()?
            .into_iter()
            .filter_map(|(_, kind)| match kind {
                EntryName::Published(version) => Some(version),
                _ => None,
            })
            .collect();
        versions.sort_unstable_by(|a, b| b.cmp(a));
        *self.published.lock() = versions.iter().copied().collect();
        Ok(versions)
    }

    /// Chooses the newest published version for which `verify(version, dir)` succeeds; newer
    /// ones that were [`Rejection::Invalid`] are quarantined (see the module docs). `Ok(None)`:
    /// no version is published.
    pub fn select<T, E>(
        &self,
        mut verify: impl FnMut(u64, &Path) -> Result<T, Rejection<E>>,
    ) -> Result<Option<Selected<T>>, SelectError<E>> {
        let versions = self.published_versions().map_err(SelectError::Catalog)?;
        let mut rejected: Vec<(u64, String)> = Vec::new();
        for &version in &versions {
            let dir = self.version_dir(version);
            match verify(version, &dir) {
                Ok(value) => {
                    let mut quarantined = Vec::new();
                    for &(failed, _) in &rejected {
                        quarantined.push(self.quarantine(failed).map_err(SelectError::Catalog)?);
                    }
                    self.published.lock().retain(|&v| v <= version);
                    return Ok(Some(Selected {
                        version,
                        dir,
                        value,
                        rejected,
                        quarantined,
                    }));
                }
                Err(Rejection::Invalid(why)) => rejected.push((version, why)),
                Err(Rejection::Abort(error)) => return Err(SelectError::Aborted(error)),
            }
        }
        if rejected.is_empty() {
            Ok(None)
        } else {
            Err(SelectError::NoneVerifies(rejected))
        }
    }

    /// Renames published `version` to `v….corrupt`, durably.
    fn quarantine(&self, version: u64) -> Result<PathBuf, CatalogError> {
        let path = self.version_dir(version);
        let target = self.root.join(format!(
            "{}{QUARANTINE_SUFFIX}",
            VERSION_NAME.format(version)
        ));
        self.disk.rename(&path, &target).map_err(io_error(
            &format!("move aside to {}", target.display()),
            &path,
        ))?;
        sync_dir(&*self.disk, &self.root).map_err(io_error("fsync", &self.root))?;
        self.published.lock().remove(&version);
        Ok(target)
    }

    /// Deletes all but the newest `keep` (>= 1) published versions; returns those deleted.
    pub fn prune(&self, keep: usize) -> Result<Vec<u64>, CatalogError> {
        if keep == 0 {
            return Err(CatalogError::InvalidArgument(
                "prune(0) would delete every version; keep at least 1".into(),
            ));
        }
        let versions = self.published_versions()?;
        let mut deleted = Vec::new();
        for &version in versions.iter().skip(keep) {
            self.remove(version)?;
            deleted.push(version);
        }
        Ok(deleted)
    }

    /// Deletes published `version` (any one: an owner that rolls back to an older version
    /// removes the newer ones it abandons, newest first; an owner with its own retention rule
    /// removes old ones). Durable when it returns: the directory is renamed `v….deleting` and
    /// the root fsynced before any file is deleted, so a cut never leaves a published-looking
    /// version with files missing. A version that is not published is an error.
    pub fn remove(&self, version: u64) -> Result<(), CatalogError> {
        let retired = self.retire(&[version])?;
        self.remove_retired(&retired)
    }

    /// Unpublishes `versions` durably and cheaply: each directory is renamed aside (`.deleting`,
    /// which [`Catalog::open`] removes as half-deleted) and the root is synced once, so from the
    /// return on no recovery sees any of them. Their files are still there: pass the returned
    /// paths to [`Catalog::remove_retired`] (when it suits the caller: removing large files can
    /// take long). A crash before the return may leave any subset renamed.
    pub fn retire(&self, versions: &[u64]) -> Result<Vec<PathBuf>, CatalogError> {
        let mut retired = Vec::with_capacity(versions.len());
        for &version in versions {
            let path = self.version_dir(version);
            let doomed = self
                .root
                .join(format!("{}{DELETING_SUFFIX}", VERSION_NAME.format(version)));
            self.disk
                .rename(&path, &doomed)
                .map_err(io_error(&format!("rename to {}", doomed.display()), &path))?;
            retired.push(doomed);
        }
        if !retired.is_empty() {
            sync_dir(&*self.disk, &self.root).map_err(io_error("fsync", &self.root))?;
        }
        let mut published = self.published.lock();
        for version in versions {
            published.remove(version);
        }
        Ok(retired)
    }

    /// Removes directories [`Catalog::retire`] renamed aside. One already gone (removed by an
    /// [`Catalog::open`] of the same root meanwhile) is not an error.
    pub fn remove_retired(&self, retired: &[PathBuf]) -> Result<(), CatalogError> {
        for doomed in retired {
            match io::remove_dir_all(&*self.disk, doomed) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                other => other.map_err(io_error("remove", doomed))?,
            }
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<(String, EntryName)>, CatalogError> {
        let entries = self
            .disk
            .list(&self.root)
            .map_err(io_error("list", &self.root))?;
        Ok(entries
            .into_iter()
            .filter(|entry| entry.is_dir)
            .map(|entry| {
                let kind = classify(&entry.name);
                (entry.name, kind)
            })
            .filter(|(_, kind)| *kind != EntryName::Other)
            .collect())
    }
}

/// A version being written in its `.tmp` directory; dropping it unpublished removes the directory.
#[derive(Debug)]
pub struct Draft {
    disk: Arc<dyn Disk>,
    root: PathBuf,
    version: u64,
    tmp_path: PathBuf,
    final_path: PathBuf,
    published_set: Arc<Mutex<BTreeSet<u64>>>,
    published: bool,
}

impl Draft {
    /// The version being written.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The `.tmp` directory being written.
    pub fn path(&self) -> &Path {
        &self.tmp_path
    }

    /// The disk.
    pub fn disk(&self) -> &Arc<dyn Disk> {
        &self.disk
    }

    /// Creates file `name` in the draft (it must not exist). The caller must sync it before
    /// [`Draft::publish`].
    pub fn create_file(&self, name: &str) -> Result<Arc<dyn DiskFile>, CatalogError> {
        let path = self.tmp_path.join(name);
        self.disk
            .open(&path, OpenMode::CreateNew)
            .map_err(io_error("create", &path))
    }

    /// Creates file `name` holding `bytes`, synced.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), CatalogError> {
        let path = self.tmp_path.join(name);
        let file = self.create_file(name)?;
        file.write_all_at(bytes, 0)
            .map_err(io_error("write", &path))?;
        file.sync_all().map_err(io_error("fsync", &path))
    }

    /// Names of the files in the draft, sorted.
    pub fn file_names(&self) -> Result<Vec<String>, CatalogError> {
        Ok(self
            .disk
            .list(&self.tmp_path)
            .map_err(io_error("list", &self.tmp_path))?
            .into_iter()
            .map(|entry| entry.name)
            .collect())
    }

    /// Publishes the version (see the module docs for the order of calls); returns its directory.
    /// Every file in the draft must already be synced.
    pub fn publish(mut self) -> Result<PathBuf, CatalogError> {
        sync_dir(&*self.disk, &self.tmp_path).map_err(io_error("fsync", &self.tmp_path))?;
        self.disk
            .rename(&self.tmp_path, &self.final_path)
            .map_err(io_error(
                &format!("rename to {}", self.final_path.display()),
                &self.tmp_path,
            ))?;
        // From here on the version exists; Drop must not remove anything.
        self.published = true;
        sync_dir(&*self.disk, &self.root).map_err(io_error("fsync", &self.root))?;
        self.published_set.lock().insert(self.version);
        Ok(self.final_path.clone())
    }
}

impl Drop for Draft {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        if let Err(error) = io::remove_dir_all(&*self.disk, &self.tmp_path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.tmp_path.display(), %error,
                    "could not remove an abandoned version directory; the next open removes it");
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
        assert_eq!(classify("v00000000000000000007.corrupt"), EntryName::Other);
        assert_eq!(classify("v7"), EntryName::Other);
        assert_eq!(classify("v0000000000000000000x"), EntryName::Other);
        assert_eq!(classify("notes.txt"), EntryName::Other);
    }
}
