//! [`RedisStateObject`]: the libDPR StateObject contract over an unmodified `redis-server`.
//!
//! - **commit(v)**: wait until the previous BGSAVE was observed finished (bounded), `CONFIG SET
//!   dbfilename v<v>.rdb`, read `rdb_saves` from `INFO persistence`, `BGSAVE`. Redis forks at the
//!   BGSAVE, so the content of `v` is fixed when it replies "Background saving started": that is
//!   when `commit` returns. The proxy calls it under the exclusive latch, so no batch of `v` is
//!   still running and none of `v+1` has started.
//! - **persisted**: a persister thread polls `INFO persistence` until `rdb_bgsave_in_progress`
//!   is 0; the save succeeded iff `rdb_saves` grew and `rdb_last_bgsave_status` is `ok`. Redis
//!   has already fsynced and renamed the RDB. We publish it as version `v` of the catalog in
//!   `versions/` (`prefixkv_storage::Catalog`): begin the draft `v….tmp`, move the RDB into it,
//!   checksum and fsync it, write the manifest (see [`crate::manifest`]) synced, publish (one
//!   rename, root fsync). Only then does the callback report `v` durable.
//! - **restore(v)**: kill the Redis (SIGKILL: its memory is being thrown away), copy version
//!   `v`'s RDB to `restore.rdb` in Redis's directory while checksumming it against the manifest
//!   (a mismatch is an error naming the RDB, which stays in place, and nothing is loaded),
//!   remove every version above `v` from the catalog (newest first, each durably), start Redis
//!   with `--dbfilename restore.rdb` and wait until it answers PING (bounded). `restore(0)`
//!   starts it empty.
//!
//! Crash safety: every durable step is the storage layer's (catalog publish and removal;
//! `docs/storage.md`). A version exists whole (RDB and manifest) or not at all; a crash mid-way
//! leaves a `v….tmp` or `v….deleting` directory that the next open removes. Files in Redis's
//! own directory are scratch and need no durability: `restore.rdb` is deleted by every open
//! (the worker restores the cut again after any restart) and a BGSAVE output not yet moved is
//! either moved by its finaliser or deleted by the next restore.
//!
//! A restore bumps a generation counter; a persister job of an older generation never finalises
//! its files (its version belongs to an abandoned world-line) and reports failure instead.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use prefixkv_dpr::state_object::{PersistCallback, StateObject, StateObjectError};
use prefixkv_dpr::Version;
use prefixkv_resp::Reply;
use prefixkv_storage::{durable, real_disk, Catalog, CatalogError, Disk, NumberedName, OpenMode};

use crate::manifest::{self, Manifest};
use crate::redis::{info_field, info_persistence, RedisProcess, RedisServerConfig};
use prefixkv_dprnet::connection::RedisConnection;

/// The RDB file Redis loads after a restore.
const RESTORE_FILE: &str = "restore.rdb";
/// How often the persister polls `INFO persistence`.
const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// Per-call socket timeout for control connections.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// The file a BGSAVE of version `v` writes in Redis's directory.
const BGSAVE_NAME: NumberedName = NumberedName::new("v", 20, ".rdb");
/// Bytes read at a time when checksumming or copying an RDB.
const COPY_CHUNK_BYTES: usize = 256 * 1024;

/// Configuration of a [`RedisStateObject`].
#[derive(Clone, Debug)]
pub struct RedisStateConfig {
    /// How to run the Redis (its `directory` is where it writes RDBs).
    pub server: RedisServerConfig,
    /// Where committed versions are kept.
    pub versions_directory: PathBuf,
    /// Bound on waiting for one BGSAVE to finish.
    pub save_timeout_ms: u64,
}

struct SaveJob {
    generation: u64,
    version: Version,
    saves_before: i64,
    metadata: Vec<u8>,
    on_persist: PersistCallback,
}

/// State shared with the persister thread.
struct Shared {
    config: RedisStateConfig,
    /// Redis writes its files on the real disk, so ours are there too.
    disk: Arc<dyn Disk>,
    /// The committed versions (`versions_directory`).
    catalog: Catalog,
    /// Bumped by every restore.
    generation: AtomicU64,
    /// Serialises finalising versions with restore and prune.
    files: Mutex<()>,
    /// The save not yet observed finished: (generation, version).
    outstanding: Mutex<Option<(u64, Version)>>,
    finished: Condvar,
}

/// Waits for a state object's outstanding BGSAVE (see [`RedisStateObject::saves`]).
pub struct SaveTracker {
    shared: Arc<Shared>,
}

impl SaveTracker {
    /// Waits up to `timeout` until no BGSAVE is outstanding; returns whether none is.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut outstanding = self.shared.outstanding.lock();
        while outstanding.is_some() {
            if self
                .shared
                .finished
                .wait_until(&mut outstanding, deadline)
                .timed_out()
            {
                return outstanding.is_none();
            }
        }
        true
    }
}

/// An unmodified redis-server as a DPR state object. See the module docs.
pub struct RedisStateObject {
    shared: Arc<Shared>,
    process: Arc<Mutex<RedisProcess>>,
    control: Option<RedisConnection>,
    last_committed: Version,
    jobs: Option<Sender<SaveJob>>,
    persister: Option<JoinHandle<()>>,
}

fn redis_io(path: &Path, error: std::io::Error) -> StateObjectError {
    StateObjectError::Io {
        path: path.to_path_buf(),
        source: error,
    }
}

/// A catalog failure as a state-object error (the path and the step stay in the message).
fn catalog_error(root: &Path, error: CatalogError) -> StateObjectError {
    match error {
        CatalogError::Io {
            operation,
            path,
            source,
        } => StateObjectError::Io {
            source: std::io::Error::new(source.kind(), format!("{operation}: {source}")),
            path,
        },
        CatalogError::InvalidArgument(message) => redis_io(
            root,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, message),
        ),
    }
}

impl RedisStateObject {
    /// Starts the Redis (empty; the worker's start restores it to the cut) and the persister.
    pub fn open(config: RedisStateConfig) -> Result<Self, StateObjectError> {
        let disk = real_disk();
        // Removes the drafts and half-removed versions a crash left.
        let catalog = Catalog::open(Arc::clone(&disk), &config.versions_directory)
            .map_err(|e| catalog_error(&config.versions_directory, e))?;
        durable::create_dir_all_durably(&*disk, &config.server.directory)
            .map_err(|e| redis_io(&config.server.directory, e))?;
        // Never load whatever a previous run left: the worker restores the cut's version.
        remove_if_exists(&*disk, &config.server.directory.join(RESTORE_FILE))?;
        let process = RedisProcess::start(config.server.clone(), RESTORE_FILE)
            .map_err(|e| redis_io(&config.server.directory, e))?;
        let shared = Arc::new(Shared {
            config,
            disk,
            catalog,
            generation: AtomicU64::new(0),
            files: Mutex::new(()),
            outstanding: Mutex::new(None),
            finished: Condvar::new(),
        });
        let (jobs, inbox) = mpsc::channel();
        let persister = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("dredis-persister".into())
                .spawn(move || persister(shared, inbox))
                .map_err(|e| redis_io(Path::new("persister thread"), e))?
        };
        Ok(Self {
            shared,
            process: Arc::new(Mutex::new(process)),
            control: None,
            last_committed: 0,
            jobs: Some(jobs),
            persister: Some(persister),
        })
    }

    /// Redis's address.
    pub fn redis_address(&self) -> std::net::SocketAddr {
        self.process.lock().address()
    }

    /// A handle to wait for the outstanding BGSAVE without holding the worker.
    pub fn saves(&self) -> SaveTracker {
        SaveTracker {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The process handle (to read its pid without holding the worker).
    pub fn process(&self) -> Arc<Mutex<RedisProcess>> {
        Arc::clone(&self.process)
    }

    fn control(&mut self) -> Result<&mut RedisConnection, StateObjectError> {
        if self.control.is_none() {
            let address = self.redis_address();
            self.control = Some(
                RedisConnection::connect(address, CONTROL_TIMEOUT)
                    .map_err(|e| redis_io(&self.shared.config.server.directory, e))?,
            );
        }
        Ok(self.control.as_mut().expect("set above"))
    }

    /// Runs `f` on the control connection, dropping the connection on an error.
    fn with_control<T>(
        &mut self,
        f: impl FnOnce(&mut RedisConnection) -> std::io::Result<T>,
    ) -> Result<T, StateObjectError> {
        let directory = self.shared.config.server.directory.clone();
        let result = f(self.control()?);
        if result.is_err() {
            self.control = None;
        }
        result.map_err(|e| redis_io(&directory, e))
    }

    fn wait_no_outstanding_save(&self) -> Result<(), StateObjectError> {
        let deadline = Instant::now() + Duration::from_millis(self.shared.config.save_timeout_ms);
        let mut outstanding = self.shared.outstanding.lock();
        while let Some((_, version)) = *outstanding {
            if self
                .shared
                .finished
                .wait_until(&mut outstanding, deadline)
                .timed_out()
                && outstanding.is_some()
            {
                return Err(redis_io(
                    &self.shared.config.server.directory,
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "BGSAVE of version {version} did not finish within {} ms",
                            self.shared.config.save_timeout_ms
                        ),
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn remove_if_exists(disk: &dyn Disk, path: &Path) -> Result<(), StateObjectError> {
    match disk.remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(redis_io(path, e)),
    }
}

/// Streams the file at `path`, returning (length, CRC32C), and fsyncs it (the catalog's contract:
/// every file of a draft is synced before it is published).
fn checksum_and_sync(disk: &dyn Disk, path: &Path) -> Result<(u64, u32), StateObjectError> {
    let file = disk
        .open(path, OpenMode::ReadWrite)
        .map_err(|e| redis_io(path, e))?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let (mut length, mut crc) = (0u64, 0u32);
    loop {
        let n = file
            .read_at(&mut buffer, length)
            .map_err(|e| redis_io(path, e))?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buffer[..n]);
        length += n as u64;
    }
    file.sync_all().map_err(|e| redis_io(path, e))?;
    Ok((length, crc))
}

/// Copies the RDB at `from` to `to` (which must not exist), checking the bytes copied against the
/// manifest; on a mismatch the copy is removed and the error names `from`. The copy is scratch
/// (see the module docs), so it is not synced.
fn copy_verified(
    disk: &dyn Disk,
    from: &Path,
    to: &Path,
    manifest: &Manifest,
) -> Result<(), StateObjectError> {
    let source = disk
        .open(from, OpenMode::Read)
        .map_err(|e| redis_io(from, e))?;
    let target = disk
        .open(to, OpenMode::CreateNew)
        .map_err(|e| redis_io(to, e))?;
    let mut buffer = vec![0u8; COPY_CHUNK_BYTES];
    let (mut length, mut crc) = (0u64, 0u32);
    loop {
        let n = source
            .read_at(&mut buffer, length)
            .map_err(|e| redis_io(from, e))?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buffer[..n]);
        target
            .write_all_at(&buffer[..n], length)
            .map_err(|e| redis_io(to, e))?;
        length += n as u64;
    }
    if (length, crc) != (manifest.rdb_bytes, manifest.rdb_crc32c) {
        drop(target);
        remove_if_exists(disk, to)?;
        return Err(StateObjectError::Corrupt {
            path: from.to_path_buf(),
            offset: 0,
            reason: format!(
                "RDB has {length} bytes with CRC32C {crc:#010x}; the manifest says {} bytes with {:#010x}",
                manifest.rdb_bytes, manifest.rdb_crc32c
            ),
        });
    }
    Ok(())
}

impl StateObject for RedisStateObject {
    /// One RESP-encoded command.
    type Operation = Vec<u8>;
    /// Its raw RESP reply.
    type Output = Vec<u8>;

    /// Sends the commands on the control connection and returns the raw replies. (The proxy
    /// admits batches through the worker with no operations and forwards them on pooled
    /// connections itself, so batches run concurrently under the shared latch.)
    fn execute(
        &mut self,
        _version: Version,
        operations: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, StateObjectError> {
        if operations.is_empty() {
            return Ok(Vec::new());
        }
        self.with_control(|connection| {
            for operation in operations {
                connection.send_raw(operation)?;
            }
            let mut outputs = Vec::with_capacity(operations.len());
            for _ in operations {
                let mut raw = Vec::new();
                connection.read_raw_replies(1, &mut raw)?;
                outputs.push(raw);
            }
            Ok(outputs)
        })
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
        let started = Instant::now();
        self.wait_no_outstanding_save()?;
        let waited = started.elapsed();
        let name = BGSAVE_NAME.format(version);
        let saves_before = self.with_control(|c| {
            match c.command(&[b"CONFIG", b"SET", b"dbfilename", name.as_bytes()])? {
                Reply::SimpleString(_) => {}
                other => {
                    return Err(std::io::Error::other(format!(
                        "CONFIG SET dbfilename replied {other:?}"
                    )))
                }
            }
            let saves = info_field(&info_persistence(c)?, "rdb_saves")?;
            match c.command(&[b"BGSAVE"])? {
                Reply::SimpleString(text) if text.starts_with(b"Background saving started") => {
                    Ok(saves)
                }
                other => Err(std::io::Error::other(format!("BGSAVE replied {other:?}"))),
            }
        })?;
        if started.elapsed() > Duration::from_millis(20) {
            tracing::warn!(
                version,
                wait_ms = waited.as_millis() as u64,
                total_ms = started.elapsed().as_millis() as u64,
                "slow BGSAVE start"
            );
        }
        let generation = self.shared.generation.load(Ordering::SeqCst);
        *self.shared.outstanding.lock() = Some((generation, version));
        self.last_committed = version;
        let job = SaveJob {
            generation,
            version,
            saves_before,
            metadata,
            on_persist,
        };
        match self.jobs.as_ref().map(|jobs| jobs.send(job)) {
            Some(Ok(())) => Ok(()),
            _ => Err(StateObjectError::PersisterGone),
        }
    }

    fn restore(&mut self, version: Version) -> Result<Vec<u8>, StateObjectError> {
        let config = self.shared.config.clone();
        let disk = Arc::clone(&self.shared.disk);
        let catalog = &self.shared.catalog;
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        self.control = None;
        let _files = self.shared.files.lock();
        let mut process = self.process.lock();
        process.stop();
        let restore_path = config.server.directory.join(RESTORE_FILE);
        remove_if_exists(&*disk, &restore_path)?;
        let published = catalog
            .published_versions()
            .map_err(|e| catalog_error(&config.versions_directory, e))?;
        let metadata = if version == 0 {
            Vec::new()
        } else {
            if !published.contains(&version) {
                return Err(StateObjectError::NoSuchVersion {
                    version,
                    available: self.persisted_versions()?,
                });
            }
            let manifest = manifest::read_verified(&*disk, &config.versions_directory, version)?;
            let rdb = manifest::rdb_path(&config.versions_directory, version);
            copy_verified(&*disk, &rdb, &restore_path, &manifest)?;
            manifest.metadata
        };
        // Only after the target verified: versions above it belong to the abandoned world-line.
        // Newest first, so that a crash midway leaves the versions below the one it stopped at.
        for &above in published.iter().filter(|&&v| v > version) {
            catalog
                .remove(above)
                .map_err(|e| catalog_error(&config.versions_directory, e))?;
        }
        remove_stray_rdbs(&*disk, &config.server.directory)?;
        *self.shared.outstanding.lock() = None;
        self.shared.finished.notify_all();
        process
            .restart(RESTORE_FILE)
            .map_err(|e| redis_io(&config.server.directory, e))?;
        Ok(metadata)
    }

    /// Published versions whose manifest verifies, ascending (one that does not is logged and
    /// left in place for inspection; restoring it is refused).
    fn persisted_versions(&self) -> Result<Vec<Version>, StateObjectError> {
        let shared = &self.shared;
        let directory = &shared.config.versions_directory;
        let mut versions = shared
            .catalog
            .published_versions()
            .map_err(|e| catalog_error(directory, e))?;
        versions.retain(
            |&v| match manifest::read_verified(&*shared.disk, directory, v) {
                Ok(_) => true,
                Err(error) => {
                    tracing::warn!(version = v, %error, "ignoring a version whose manifest does not verify");
                    false
                }
            },
        );
        versions.reverse();
        Ok(versions)
    }

    fn prune(&mut self, below: Version) -> Result<(), StateObjectError> {
        let _files = self.shared.files.lock();
        let catalog = &self.shared.catalog;
        let directory = &self.shared.config.versions_directory;
        let published = catalog
            .published_versions()
            .map_err(|e| catalog_error(directory, e))?;
        // Oldest first: a crash midway leaves a suffix of versions, the restorable ones.
        for &old in published.iter().rev().filter(|&&v| v < below) {
            catalog
                .remove(old)
                .map_err(|e| catalog_error(directory, e))?;
        }
        Ok(())
    }
}

/// Removes the BGSAVE outputs (`v*.rdb`) left in Redis's directory: saves of an abandoned
/// world-line, or of a run that crashed before finalising them. Scratch files: not synced.
fn remove_stray_rdbs(disk: &dyn Disk, directory: &Path) -> Result<(), StateObjectError> {
    let entries = disk.list(directory).map_err(|e| redis_io(directory, e))?;
    for entry in entries {
        if !entry.is_dir && BGSAVE_NAME.parse(&entry.name).is_some() {
            remove_if_exists(disk, &directory.join(&entry.name))?;
        }
    }
    Ok(())
}

impl Drop for RedisStateObject {
    fn drop(&mut self) {
        self.jobs = None;
        // Unblock a persister waiting on a save by killing the Redis first.
        self.process.lock().stop();
        if let Some(persister) = self.persister.take() {
            let _ = persister.join();
        }
    }
}

/// Watches each BGSAVE child in commit order and hands finished saves to a finaliser thread, so
/// the next BGSAVE can start as soon as Redis's child exits, while the previous version's files
/// are still being made durable and reported. Callbacks run on the finaliser, in commit order.
fn persister(shared: Arc<Shared>, inbox: Receiver<SaveJob>) {
    let (finished, finisher_inbox) = mpsc::channel::<(SaveJob, Result<(), StateObjectError>)>();
    let finaliser = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("dredis-finalise".into())
            .spawn(move || {
                for (job, child) in finisher_inbox {
                    let result = child.and_then(|()| finalise(&shared, &job));
                    if let Err(error) = &result {
                        tracing::warn!(version = job.version, %error, "D-Redis version did not persist");
                    }
                    (job.on_persist)(result);
                }
            })
    };
    let Ok(finaliser) = finaliser else {
        for job in inbox {
            (job.on_persist)(Err(StateObjectError::PersisterGone));
        }
        return;
    };
    for job in inbox {
        let child = wait_for_child(&shared, &job);
        {
            // Redis can fork the next BGSAVE now; it writes another file name, so finalising
            // this version's files can overlap it.
            let mut outstanding = shared.outstanding.lock();
            if *outstanding == Some((job.generation, job.version)) {
                *outstanding = None;
            }
            shared.finished.notify_all();
        }
        if finished.send((job, child)).is_err() {
            break;
        }
    }
    drop(finished);
    let _ = finaliser.join();
}

/// Waits (bounded) until Redis's BGSAVE child for `job` has exited successfully.
fn wait_for_child(shared: &Shared, job: &SaveJob) -> Result<(), StateObjectError> {
    let config = &shared.config;
    let directory = &config.server.directory;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], config.server.port));
    let deadline = Instant::now() + Duration::from_millis(config.save_timeout_ms);
    let abandoned = || shared.generation.load(Ordering::SeqCst) != job.generation;
    let mut connection: Option<RedisConnection> = None;
    let (saves, status) = loop {
        if abandoned() {
            return Err(redis_io(
                directory,
                std::io::Error::other(format!(
                    "version {} was abandoned by a restore",
                    job.version
                )),
            ));
        }
        if Instant::now() > deadline {
            return Err(redis_io(
                directory,
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "BGSAVE of version {} not finished within {} ms",
                        job.version, config.save_timeout_ms
                    ),
                ),
            ));
        }
        if connection.is_none() {
            connection = RedisConnection::connect(address, CONTROL_TIMEOUT).ok();
        }
        let observed = connection.as_mut().map(|c| {
            info_persistence(c).and_then(|info| {
                let in_progress = info_field(&info, "rdb_bgsave_in_progress")?;
                let saves = info_field(&info, "rdb_saves")?;
                let ok = info
                    .iter()
                    .any(|(k, v)| k == "rdb_last_bgsave_status" && v == "ok");
                Ok((in_progress, saves, ok))
            })
        });
        match observed {
            Some(Ok((0, saves, ok))) => break (saves, ok),
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                // The Redis died or restarted: this save cannot be trusted any more.
                return Err(redis_io(directory, error));
            }
            None => {
                return Err(redis_io(
                    directory,
                    std::io::Error::other("cannot reach redis to watch the BGSAVE"),
                ))
            }
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    if saves <= job.saves_before || !status {
        return Err(redis_io(
            directory,
            std::io::Error::other(format!(
                "BGSAVE of version {} failed (rdb_saves {} -> {saves}, last status ok: {status}); see redis.log",
                job.version, job.saves_before
            )),
        ));
    }
    Ok(())
}

/// Publishes the finished RDB and its manifest as a catalog version (see the module docs).
fn finalise(shared: &Shared, job: &SaveJob) -> Result<Version, StateObjectError> {
    let config = &shared.config;
    let directory = &config.server.directory;
    let abandoned = || shared.generation.load(Ordering::SeqCst) != job.generation;
    let _files = shared.files.lock();
    if abandoned() {
        return Err(redis_io(
            directory,
            std::io::Error::other(format!(
                "version {} was abandoned by a restore",
                job.version
            )),
        ));
    }
    let catalog = &shared.catalog;
    let versions = &config.versions_directory;
    let draft = catalog
        .begin(job.version)
        .map_err(|e| catalog_error(versions, e))?;
    let written = directory.join(BGSAVE_NAME.format(job.version));
    let kept = draft.path().join(manifest::RDB_FILE);
    shared
        .disk
        .rename(&written, &kept)
        .map_err(|e| redis_io(&written, e))?;
    let (rdb_bytes, rdb_crc32c) = checksum_and_sync(&*shared.disk, &kept)?;
    let bytes = Manifest {
        version: job.version,
        rdb_bytes,
        rdb_crc32c,
        metadata: job.metadata.clone(),
    }
    .encode()?;
    draft
        .write_file(manifest::MANIFEST_FILE, &bytes)
        .map_err(|e| catalog_error(versions, e))?;
    // Dropping an unpublished draft (any `?` above) removes it with the RDB moved into it.
    draft.publish().map_err(|e| catalog_error(versions, e))?;
    Ok(job.version)
}
