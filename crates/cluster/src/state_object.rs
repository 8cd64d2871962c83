//! The engine as a DPR [`StateObject`]: a DPR version is a CPR checkpoint of the engine.
//!
//! **Versions and labels.** The engine numbers its versions itself (1, 2, 3, ... per checkpoint);
//! DPR needs versions it chooses (wall-clock slots, `Vs` fast-forwards, `Vmax` catch-up). So a
//! DPR version is a *label* attached to an engine version: `commit(label)` starts a CPR checkpoint
//! of the engine's current version `e` with the label in its commit cookie, and records `e →
//! label`. The version batches run in now (the unsealed engine version) has no entry; its label is
//! the worker's current version, which only grows ([`crate::worker`] mirrors it into
//! [`Engine::set_current_label`]).
//!
//! Invariants:
//! - Labels strictly increase with engine versions (DPR seals increasing versions).
//! - A batch runs wholly in one engine version: the worker holds its latch shared while a batch
//!   is admitted and runs, and exclusively while it commits (or restores), so no version switch
//!   happens under a running batch. A CPR checkpoint would otherwise let a batch's operations
//!   straddle the switch, and a batch reports one version for all of them: operations in the
//!   older version would survive a rollback to it although the batch is reported as lost. The
//!   batch's version is therefore the one it was admitted in.
//! - `commit` returns only once the engine's version switch happened (`wait_for_version_switch`):
//!   every batch admitted after the commit (under the worker's mutex) runs in the new engine
//!   version. Hence a batch whose `Vs` or dependencies were raised after the seal never runs in
//!   the sealed version (whose dependency set does not list them).
//! - One checkpoint at a time: the engine refuses a second while one is being written, so
//!   `commit` fails with [`StateObjectError::CommitInProgress`] until the persister thread saw
//!   the previous one published (the worker's periodic commit simply tries again next tick; the
//!   DPR worker runs in [`prefixkv_dpr::worker::FastForward::Relabel`] mode so that batches never
//!   need a seal).
//! - Checkpoints are removed only by `restore` (those above the target, newest first, durably)
//!   and `prune` (those below the cut); the engine's own retention is disabled.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use prefixkv_dpr::state_object::{PersistCallback, StateObject, StateObjectError};
use prefixkv_dpr::Version;
use prefixkv_engine::checkpoint_files::manifest::decode_manifest_bytes;
use prefixkv_engine::checkpoint_files::MANIFEST_FILE_NAME;
use prefixkv_engine::{CheckpointToken, EngineError, Session, Store, StoreConfig, Strategy};
use prefixkv_storage::{Catalog, Disk};

/// First bytes of a commit cookie written by this adapter.
const COOKIE_MAGIC: &[u8; 4] = b"DPRv";

/// How long a commit waits for the engine's version switch before saying so in the log (it keeps
/// waiting: returning early would let batches with raised dependencies run in the sealed version).
const SWITCH_WARN_AFTER: Duration = Duration::from_secs(5);

/// How long a restore waits for the checkpoint being written to finish.
const RESTORE_WAIT: Duration = Duration::from_secs(60);

/// Configuration of one worker's engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The engine's configuration (its `dir` holds `checkpoints/`). `keep_checkpoints` is
    /// overridden: DPR decides which versions to keep.
    pub store: StoreConfig,
    /// The checkpoint strategy of every commit.
    pub strategy: Strategy,
}

/// The engine and the sessions batches run on. Shared by the state object and the worker's
/// connection threads; a (blocking) restore replaces the store inside it.
pub struct Engine {
    inner: Mutex<Inner>,
    /// Engine version → DPR label, for every version sealed by a commit (and every checkpoint on
    /// disk at open).
    labels: Mutex<BTreeMap<u64, Version>>,
    /// The label of the version batches run in now (the worker's current version).
    current_label: AtomicU64,
}

struct Inner {
    /// `None` only after a failed restore: batches then fail until a restore succeeds.
    store: Option<Arc<Store>>,
    idle: Vec<Session>,
    checked_out: usize,
}

/// A session lent to one batch; give it back with [`Engine::give_back`].
pub struct Lent {
    /// The engine session.
    pub session: Session,
}

impl Engine {
    /// Lends a session (a new one if none is idle).
    pub fn lend(&self) -> Result<Lent, EngineError> {
        let mut inner = self.inner.lock();
        let session = match inner.idle.pop() {
            Some(session) => session,
            None => match &inner.store {
                Some(store) => store.try_start_session()?,
                None => {
                    return Err(EngineError::InvalidArgument(
                        "the worker's engine is closed: its last restore failed".into(),
                    ))
                }
            },
        };
        inner.checked_out += 1;
        Ok(Lent { session })
    }

    /// Takes a lent session back, suspended (an idle session must never hold up a version switch).
    pub fn give_back(&self, lent: Lent) {
        let mut session = lent.session;
        session.suspend();
        let mut inner = self.inner.lock();
        inner.checked_out -= 1;
        // A restore waits until no session is lent (see `restore`), so this session belongs to
        // the current store.
        inner.idle.push(session);
    }

    /// The DPR label of engine version `engine_version` as of now (see the module docs).
    pub fn label_of(&self, engine_version: u64) -> Version {
        if let Some(&label) = self.labels.lock().get(&engine_version) {
            return label;
        }
        self.current_label.load(Ordering::SeqCst)
    }

    /// Records the worker's current version (call under the worker's mutex after it changed).
    pub fn set_current_label(&self, label: Version) {
        self.current_label.fetch_max(label, Ordering::SeqCst);
    }

    /// The store, unless the last restore failed.
    pub fn store(&self) -> Option<Arc<Store>> {
        self.inner.lock().store.clone()
    }
}

/// The commit persister's job: wait for one checkpoint and report it.
struct PersistJob {
    store: Arc<Store>,
    token: CheckpointToken,
    label: Version,
    on_persist: PersistCallback,
}

/// Shared between the state object and its persister thread.
#[derive(Default)]
struct Persisted {
    /// Label → engine version of every checkpoint on disk, ascending.
    versions: BTreeMap<Version, u64>,
    /// Whether a checkpoint is being written.
    in_flight: bool,
}

/// The engine as a DPR state object. See the module docs.
pub struct EngineStateObject {
    engine: Arc<Engine>,
    config: EngineConfig,
    catalog: Catalog,
    persisted: Arc<(Mutex<Persisted>, Condvar)>,
    jobs: Option<mpsc::Sender<PersistJob>>,
    persister: Option<std::thread::JoinHandle<()>>,
    failed: Arc<AtomicBool>,
}

fn io_error<'a>(path: &'a Path, what: &str) -> impl Fn(std::io::Error) -> StateObjectError + 'a {
    let what = what.to_string();
    move |source| StateObjectError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(source.kind(), format!("{what}: {source}")),
    }
}

fn engine_error(path: &Path, error: EngineError) -> StateObjectError {
    StateObjectError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(error.to_string()),
    }
}

/// Encodes a commit cookie: magic, label, then the DPR metadata.
fn encode_cookie(label: Version, metadata: &[u8]) -> Vec<u8> {
    let mut cookie = Vec::with_capacity(12 + metadata.len());
    cookie.extend_from_slice(COOKIE_MAGIC);
    cookie.extend_from_slice(&label.to_le_bytes());
    cookie.extend_from_slice(metadata);
    cookie
}

/// Decodes a commit cookie into (label, metadata).
fn decode_cookie(cookie: &[u8]) -> Option<(Version, &[u8])> {
    if cookie.len() < 12 || &cookie[..4] != COOKIE_MAGIC {
        return None;
    }
    let label = u64::from_le_bytes(cookie[4..12].try_into().ok()?);
    Some((label, &cookie[12..]))
}

/// Reads the commit cookie of published checkpoint `engine_version` (`None`: no readable,
/// decodable MANIFEST: recovery decides what such a checkpoint means, and it is never a target).
fn read_cookie(catalog: &Catalog, disk: &dyn Disk, engine_version: u64) -> Option<Vec<u8>> {
    let path = catalog.version_dir(engine_version).join(MANIFEST_FILE_NAME);
    // A MANIFEST is small; the engine's own limit is far below this one.
    let bytes = match prefixkv_storage::durable::read_file(disk, &path, 16 << 20) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            tracing::warn!(path = %path.display(), "checkpoint without a manifest");
            return None;
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "unreadable checkpoint manifest");
            return None;
        }
    };
    match decode_manifest_bytes(&bytes, &path) {
        Ok(manifest) => Some(manifest.content.cookie),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "corrupt checkpoint");
            None
        }
    }
}

/// Reads the labels of the published checkpoints under `catalog` (label → engine version).
fn read_labels(
    catalog: &Catalog,
    disk: &dyn Disk,
) -> Result<BTreeMap<Version, u64>, StateObjectError> {
    let root = catalog.root().to_path_buf();
    let versions = catalog
        .published_versions()
        .map_err(|e| engine_error(&root, EngineError::InvalidArgument(e.to_string())))?;
    let mut labels = BTreeMap::new();
    for engine_version in versions {
        let Some(cookie) = read_cookie(catalog, disk, engine_version) else {
            continue;
        };
        match decode_cookie(&cookie) {
            Some((label, _)) => {
                labels.insert(label, engine_version);
            }
            None => {
                return Err(StateObjectError::Corrupt {
                    path: catalog.version_dir(engine_version).join(MANIFEST_FILE_NAME),
                    offset: 0,
                    reason: "the checkpoint has no DPR label in its commit cookie (not written \
                             by a cluster worker)"
                        .into(),
                })
            }
        }
    }
    Ok(labels)
}

impl EngineStateObject {
    /// Opens the engine in `config.store.dir`, recovering its newest checkpoint (the DPR worker
    /// then restores it to the cut).
    pub fn open(mut config: EngineConfig) -> Result<Self, StateObjectError> {
        // DPR prunes below the cut; the engine must never drop a version DPR may restore.
        config.store.keep_checkpoints = usize::MAX;
        // Survivors of a failure roll back in memory (THROW/PURGE) instead of reloading.
        config.store.rollback_ready = true;
        let root = config.store.dir.join("checkpoints");
        prefixkv_storage::durable::create_dir_all_durably(&*config.store.disk, &root)
            .map_err(io_error(&root, "create"))?;
        // Opened before the store: opening removes unfinished `.tmp` drafts, which is only safe
        // while no checkpoint is being written.
        let catalog = Catalog::open(Arc::clone(&config.store.disk), &root)
            .map_err(|e| engine_error(&root, EngineError::InvalidArgument(e.to_string())))?;
        let versions = read_labels(&catalog, &*config.store.disk)?;
        let store = Store::open(config.store.clone()).map_err(|e| engine_error(&root, e))?;
        let mut engine_labels = BTreeMap::new();
        for (&label, &engine_version) in &versions {
            engine_labels.insert(engine_version, label);
        }
        let engine = Arc::new(Engine {
            inner: Mutex::new(Inner {
                store: Some(store),
                idle: Vec::new(),
                checked_out: 0,
            }),
            labels: Mutex::new(engine_labels),
            current_label: AtomicU64::new(0),
        });
        let persisted = Arc::new((
            Mutex::new(Persisted {
                versions,
                in_flight: false,
            }),
            Condvar::new(),
        ));
        let (jobs, receiver) = mpsc::channel::<PersistJob>();
        let failed = Arc::new(AtomicBool::new(false));
        let persister = {
            let persisted = Arc::clone(&persisted);
            let failed = Arc::clone(&failed);
            std::thread::Builder::new()
                .name("cluster-persist".into())
                .spawn(move || persist(receiver, persisted, failed))
                .map_err(io_error(&root, "spawn persister"))?
        };
        Ok(Self {
            engine,
            config,
            catalog,
            persisted,
            jobs: Some(jobs),
            persister: Some(persister),
            failed,
        })
    }

    /// The engine, for the worker's connection threads.
    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.engine)
    }

    /// Whether a checkpoint is being written (a commit now would fail).
    pub fn commit_in_flight(&self) -> bool {
        self.persisted.0.lock().in_flight
    }

    /// Set once a checkpoint failed to persist (the worker then stops renewing its lease).
    pub fn failed_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.failed)
    }

    fn root(&self) -> PathBuf {
        self.catalog.root().to_path_buf()
    }

    /// Waits (bounded) until no checkpoint is being written.
    fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, changed) = &*self.persisted;
        let mut persisted = lock.lock();
        while persisted.in_flight {
            if changed.wait_until(&mut persisted, deadline).timed_out() {
                return !persisted.in_flight;
            }
        }
        true
    }

    /// The non-blocking restore of a surviving worker: the engine's in-memory rollback to the
    /// checkpoint labelled `version` (THROW now, PURGE in the background), which also deletes the
    /// checkpoints above it. `Ok(None)` when the engine cannot (its store is closed, or the target
    /// lies below the compaction floor): the caller then reloads from disk.
    fn roll_back_in_memory(
        &self,
        inner: &Inner,
        version: Version,
    ) -> Result<Option<Vec<u8>>, StateObjectError> {
        let root = self.root();
        let Some(store) = inner.store.as_ref() else {
            return Ok(None);
        };
        let engine_version = match version {
            0 => 0,
            label => match self.persisted.0.lock().versions.get(&label) {
                Some(&engine_version) => engine_version,
                None => return Ok(None),
            },
        };
        let metadata = match engine_version {
            0 => Vec::new(),
            _ => match read_cookie(&self.catalog, &*self.config.store.disk, engine_version)
                .as_deref()
                .and_then(decode_cookie)
            {
                Some((label, metadata)) if label == version => metadata.to_vec(),
                _ => return Ok(None),
            },
        };
        let started = Instant::now();
        match store.rollback(engine_version) {
            Ok(report) => {
                self.persisted
                    .0
                    .lock()
                    .versions
                    .retain(|&label, _| label <= version);
                self.engine
                    .labels
                    .lock()
                    .retain(|&engine, _| engine <= engine_version);
                tracing::info!(
                    label = version,
                    engine_version,
                    world_line = report.world_line,
                    throw_ms = report.throw_ms,
                    wait_ms = report.wait_ms,
                    delete_ms = report.delete_ms,
                    deleted = report.deleted_checkpoints.len(),
                    rollback_ms = started.elapsed().as_secs_f64() * 1e3,
                    "rolled the engine back in memory"
                );
                Ok(Some(metadata))
            }
            Err(EngineError::InvalidArgument(reason)) => {
                tracing::warn!(label = version, %reason, "in-memory rollback refused: reloading");
                Ok(None)
            }
            Err(error) => Err(engine_error(&root, error)),
        }
    }
}

/// The persister thread: waits for each checkpoint in commit order and reports it.
fn persist(
    jobs: mpsc::Receiver<PersistJob>,
    persisted: Arc<(Mutex<Persisted>, Condvar)>,
    failed: Arc<AtomicBool>,
) {
    for job in jobs {
        // A checkpoint's result always arrives (the engine reports failures too); the timeout
        // only bounds a wedged disk, which is a failure of this worker.
        let result = job
            .store
            .wait_for_commit(job.token, Duration::from_secs(600));
        let (lock, changed) = &*persisted;
        if let Err(EngineError::CheckpointAborted { version }) = &result {
            // A rollback discarded this version before it was written (see `restore`): not a
            // failure, and nothing to report (the DPR worker forgets the old world-line's
            // pending versions when it restores).
            tracing::info!(
                label = job.label,
                version,
                "checkpoint abandoned by a rollback"
            );
            lock.lock().in_flight = false;
            changed.notify_all();
            continue;
        }
        let outcome = {
            let mut state = lock.lock();
            state.in_flight = false;
            match result {
                Ok(_) => {
                    state.versions.insert(job.label, job.token.version);
                    Ok(job.label)
                }
                Err(error) => {
                    failed.store(true, Ordering::SeqCst);
                    Err(StateObjectError::Io {
                        path: PathBuf::from(format!("checkpoint v{}", job.token.version)),
                        source: std::io::Error::other(error.to_string()),
                    })
                }
            }
        };
        changed.notify_all();
        (job.on_persist)(outcome);
    }
}

impl Drop for EngineStateObject {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(persister) = self.persister.take() {
            let _ = persister.join();
        }
    }
}

impl StateObject for EngineStateObject {
    /// Batches run on lent sessions outside the worker (see [`crate::worker`]); the worker
    /// admits them with no operations.
    type Operation = ();
    type Output = ();

    fn execute(
        &mut self,
        _version: Version,
        operations: &[()],
    ) -> Result<Vec<()>, StateObjectError> {
        Ok(vec![(); operations.len()])
    }

    fn commit(
        &mut self,
        version: Version,
        metadata: Vec<u8>,
        on_persist: PersistCallback,
    ) -> Result<(), StateObjectError> {
        let root = self.root();
        {
            let mut persisted = self.persisted.0.lock();
            if persisted.in_flight {
                return Err(StateObjectError::CommitInProgress);
            }
            persisted.in_flight = true;
        }
        let store = self.engine.store().ok_or_else(|| {
            engine_error(
                &root,
                EngineError::InvalidArgument(
                    "the engine is closed: its last restore failed".into(),
                ),
            )
        })?;
        let token = match store
            .checkpoint_with_cookie(self.config.strategy, encode_cookie(version, &metadata))
        {
            Ok(token) => token,
            Err(error) => {
                self.persisted.0.lock().in_flight = false;
                return Err(match error {
                    // A rollback's PURGE holds the engine's state machine until it ends.
                    EngineError::CheckpointInProgress => StateObjectError::CommitInProgress,
                    error => engine_error(&root, error),
                });
            }
        };
        self.engine.labels.lock().insert(token.version, version);
        let started = Instant::now();
        loop {
            match store.wait_for_version_switch(token, SWITCH_WARN_AFTER) {
                Ok(()) => break,
                Err(_) => tracing::warn!(
                    label = version,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "the engine's version switch is slow (a session is not refreshing)"
                ),
            }
        }
        let job = PersistJob {
            store,
            token,
            label: version,
            on_persist,
        };
        self.jobs
            .as_ref()
            .ok_or(StateObjectError::PersisterGone)?
            .send(job)
            .map_err(|_| StateObjectError::PersisterGone)
    }

    fn restore(&mut self, version: Version) -> Result<Vec<u8>, StateObjectError> {
        let root = self.root();
        let available: Vec<Version> = self.persisted.0.lock().versions.keys().copied().collect();
        if version != 0 && !available.contains(&version) {
            return Err(StateObjectError::NoSuchVersion { version, available });
        }
        let mut inner = self.engine.inner.lock();
        assert_eq!(
            inner.checked_out, 0,
            "a restore runs while no batch holds a session (the worker's exclusive latch)"
        );
        // Sessions of the old world-line would answer their next operation with `RolledBack`.
        inner.idle.clear();
        // In memory first, without waiting for a checkpoint being written: it is of a version
        // above every persisted one, hence above the target, and the engine's rollback stops it
        // (`EngineError::CheckpointAborted`, which the persister does not count as a failure).
        if let Some(metadata) = self.roll_back_in_memory(&inner, version)? {
            return Ok(metadata);
        }
        // The reload path replaces the store: the persister must be done with it.
        if !self.wait_idle(RESTORE_WAIT) {
            return Err(engine_error(&root, EngineError::Timeout));
        }
        // Drop the store (its directory lock and threads) before opening it again: the persister
        // is idle and no session is lent, so this is the last holder.
        drop(inner.store.take());
        let doomed: Vec<(Version, u64)> = self
            .persisted
            .0
            .lock()
            .versions
            .range(version + 1..)
            .map(|(&label, &engine_version)| (label, engine_version))
            .collect();
        for &(label, engine_version) in doomed.iter().rev() {
            self.catalog
                .remove(engine_version)
                .map_err(|e| engine_error(&root, EngineError::InvalidArgument(e.to_string())))?;
            self.persisted.0.lock().versions.remove(&label);
        }
        let store = Store::open(self.config.store.clone()).map_err(|e| engine_error(&root, e))?;
        // Engine versions above the recovered one will be used again: forget their labels (a
        // stale, smaller label would under-report a batch's version).
        let recovered = store.recovery_info().map_or(0, |info| info.version);
        self.engine
            .labels
            .lock()
            .retain(|&engine_version, _| engine_version <= recovered);
        let metadata = match store.recovery_info() {
            None if version == 0 => Vec::new(),
            None => {
                return Err(StateObjectError::NoSuchVersion {
                    version,
                    available: Vec::new(),
                })
            }
            Some(info) => match decode_cookie(&info.cookie) {
                Some((label, metadata)) if label == version => metadata.to_vec(),
                Some((label, _)) => {
                    return Err(StateObjectError::Corrupt {
                        path: root.join(format!("v{:020}", info.version)),
                        offset: 0,
                        reason: format!(
                            "restoring DPR version {version} recovered version {label} instead \
                             ({})",
                            info.fell_back.as_deref().unwrap_or("no fallback reported")
                        ),
                    })
                }
                None => {
                    return Err(StateObjectError::Corrupt {
                        path: root,
                        offset: 0,
                        reason: "recovered checkpoint has no DPR label".into(),
                    })
                }
            },
        };
        inner.store = Some(store);
        Ok(metadata)
    }

    fn persisted_versions(&self) -> Result<Vec<Version>, StateObjectError> {
        Ok(self.persisted.0.lock().versions.keys().copied().collect())
    }

    fn prune(&mut self, below: Version) -> Result<(), StateObjectError> {
        let root = self.root();
        let doomed: Vec<(Version, u64)> = self
            .persisted
            .0
            .lock()
            .versions
            .range(..below)
            .map(|(&label, &engine_version)| (label, engine_version))
            .collect();
        // Compaction may now drop what only versions below the cut needed.
        let floor = self.persisted.0.lock().versions.get(&below).copied();
        if let (Some(floor), Some(store)) = (floor, self.engine.store()) {
            store.set_rollback_floor(floor);
        }
        for (label, engine_version) in doomed {
            self.catalog
                .remove(engine_version)
                .map_err(|e| engine_error(&root, EngineError::InvalidArgument(e.to_string())))?;
            self.persisted.0.lock().versions.remove(&label);
            self.engine.labels.lock().remove(&engine_version);
        }
        Ok(())
    }
}
