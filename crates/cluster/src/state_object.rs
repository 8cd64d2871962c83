//! The engine as a DPR [`StateObject`]: a DPR version is a sealed version of the engine, made
//! durable by a checkpoint of it.
//!
//! **Versions and labels.** The engine numbers its versions itself (1, 2, 3, ... per seal); DPR
//! needs versions it chooses (wall-clock slots, `Vs` fast-forwards). So a DPR version is a
//! *label* attached to an engine version: `commit(label)` seals the engine's current version `e`
//! ([`Store::seal`]: the CPR version switch alone, which writes nothing) and records `e → label`.
//! The version batches run in now (the unsealed engine version) has no entry; its label is the
//! worker's current version, which only grows ([`crate::worker`] mirrors it into
//! [`Engine::set_current_label`]).
//!
//! **Seal now, write behind.** Sealing is cheap and never waits for a checkpoint, so the DPR
//! worker runs in [`prefixkv_dpr::worker::FastForward::Seal`] mode, the paper's rule: a batch
//! with a larger `Vs` seals the current version under its own number. (Relabelling it instead,
//! as this adapter did while a seal had to wait for the previous checkpoint, let versions depend
//! on larger ones, and under load the cut stopped advancing.) The persister thread writes the
//! sealed versions' checkpoints one after another, in seal order ([`Store::checkpoint_sealed`]):
//! each one a delta of the records written since the previous checkpoint
//! ([`Scope::Since`]), or, every [`MAX_DELTAS`] deltas or once the deltas add up to more than
//! the last whole image, a whole image ([`Scope::Full`]). So every DPR version has a checkpoint
//! of its own that a restore can return to, and what each costs is what was written in it.
//!
//! Invariants:
//! - Labels strictly increase with engine versions (DPR seals increasing versions).
//! - A batch runs wholly in one engine version: the worker holds its latch shared while a batch
//!   is admitted and runs, and exclusively while it seals (or restores), so no version switch
//!   happens under a running batch. The batch's version is therefore the one it was admitted in.
//! - Persistence callbacks fire in seal order (one persister, one queue), once each; versions
//!   discarded by a restore get none (the DPR worker forgets them).
//! - A delta is written only on top of the newest checkpoint of the current history (`tip`):
//!   published, or the target of the last restore. Checkpoints are removed only by `restore`
//!   (those above the target) and `prune` (those below the cut's chain: a delta needs its bases
//!   down to a whole image); the engine's own retention is disabled.

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
use prefixkv_engine::checkpoint_files::{ManifestContent, ManifestKind, MANIFEST_FILE_NAME};
use prefixkv_engine::{CheckpointReport, EngineError, Scope, Store, StoreConfig};
use prefixkv_storage::{Catalog, Disk};
use prefixkv_store::{DurableStore, StoreSession};

/// First bytes of a commit cookie written by this adapter.
const COOKIE_MAGIC: &[u8; 4] = b"DPRv";

/// How long a seal waits while the engine's state machine is busy (a rollback's PURGE) before
/// the commit reports `CommitInProgress`.
const SEAL_WAIT: Duration = Duration::from_secs(2);

/// A whole image is written after this many deltas in a row (the chain a recovery reads).
pub const MAX_DELTAS: usize = 64;

/// Sealed versions waiting for their checkpoint beyond which periodic commits pause (a `Vs`
/// fast-forward still seals): the disk is behind, and more versions would only wait longer.
pub const MAX_BACKLOG: usize = 8;

/// How long a restore waits for the checkpoint being written to finish.
const RESTORE_WAIT: Duration = Duration::from_secs(60);

/// Configuration of one worker's engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The engine's configuration (its `dir` holds `checkpoints/`). `keep_checkpoints` and
    /// `rollback_ready` are overridden: DPR decides which versions to keep, and survivors roll
    /// back in memory. Checkpoints are log scans of sealed versions (see the module docs), so
    /// the engine's checkpoint strategy does not apply.
    pub store: StoreConfig,
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
    /// The command layer's store over `store` ([`DurableStore::over_engine`]): a new one after
    /// every restore (in memory or reloaded), so that what the command layer derived from the
    /// old contents (key counts, function libraries) is rebuilt from the restored ones.
    durable: Option<Arc<DurableStore>>,
    idle: Vec<StoreSession>,
    checked_out: usize,
}

impl Inner {
    fn set_store(&mut self, store: Option<Arc<Store>>) {
        self.durable = store
            .as_ref()
            .map(|s| DurableStore::over_engine(Arc::clone(s)));
        self.store = store;
    }
}

/// A session lent to one batch; give it back with [`Engine::give_back`].
pub struct Lent {
    /// The store session (an engine session under the store's write rules).
    pub session: StoreSession,
}

impl Engine {
    /// Lends a session (a new one if none is idle).
    pub fn lend(&self) -> Result<Lent, EngineError> {
        let mut inner = self.inner.lock();
        let session = match inner.idle.pop() {
            Some(session) => session,
            None => match &inner.durable {
                Some(store) => store.session().map_err(|error| match error {
                    prefixkv_store::StoreError::Engine(error) => error,
                    other => EngineError::InvalidArgument(other.to_string()),
                })?,
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

    /// The command layer's store over the engine, unless the last restore failed (a new one
    /// after every restore: see [`Inner`]).
    pub fn durable(&self) -> Option<Arc<DurableStore>> {
        self.inner.lock().durable.clone()
    }
}

/// The commit persister's job: write the checkpoint of one sealed version and report it.
struct PersistJob {
    store: Arc<Store>,
    engine_version: u64,
    label: Version,
    cookie: Vec<u8>,
    /// [`Persisted::generation`] at the seal: a restore since discards the job.
    generation: u64,
    on_persist: PersistCallback,
}

/// Shared between the state object and its persister thread.
#[derive(Default)]
struct Persisted {
    /// Label → engine version of every checkpoint on disk, ascending.
    versions: BTreeMap<Version, u64>,
    /// Engine version → the base of every delta on disk (whole images are absent).
    bases: BTreeMap<u64, u64>,
    /// The checkpoint the next delta applies on (see the module docs); `None`: write a whole one.
    tip: Option<u64>,
    /// Deltas since the last whole image, and their bytes.
    deltas_since_full: usize,
    delta_bytes_since_full: u64,
    /// Bytes of the last whole image.
    full_bytes: u64,
    /// Jobs sent to the persister and not yet done with (each holds the store): the sealed
    /// versions whose checkpoint is not written yet, plus, for a moment after a restore, those
    /// of the discarded history, which the persister skips.
    queued: usize,
    /// Grows with every restore: jobs sealed before it are of a discarded history.
    generation: u64,
}

impl Persisted {
    /// What the next checkpoint writes.
    fn next_scope(&self) -> Scope {
        match self.tip {
            Some(tip)
                if self.deltas_since_full < MAX_DELTAS
                    && self.delta_bytes_since_full < self.full_bytes.max(1 << 20) =>
            {
                Scope::Since(tip)
            }
            _ => Scope::Full,
        }
    }

    /// The oldest checkpoint `engine_version`'s image needs (its chain's whole image).
    fn chain_root(&self, engine_version: u64) -> u64 {
        let mut root = engine_version;
        while let Some(&base) = self.bases.get(&root) {
            debug_assert!(base < root);
            root = base;
        }
        root
    }

    /// A restore to `engine_version` (0: empty) left only checkpoints at or below it. (The
    /// restore bumped `generation` before it began.)
    fn restored_to(&mut self, label: Version, engine_version: u64) {
        self.versions.retain(|&l, _| l <= label);
        self.bases.retain(|&e, _| e <= engine_version);
        self.tip = (engine_version != 0).then_some(engine_version);
    }
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

/// Reads the MANIFEST content of published checkpoint `engine_version` (`None`: no readable,
/// decodable MANIFEST: recovery decides what such a checkpoint means, and it is never a target).
fn read_content(
    catalog: &Catalog,
    disk: &dyn Disk,
    engine_version: u64,
) -> Option<ManifestContent> {
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
        Ok(manifest) => Some(manifest.content),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "corrupt checkpoint");
            None
        }
    }
}

/// The commit cookie of published checkpoint `engine_version` (see [`read_content`]).
fn read_cookie(catalog: &Catalog, disk: &dyn Disk, engine_version: u64) -> Option<Vec<u8>> {
    read_content(catalog, disk, engine_version).map(|content| content.cookie)
}

/// Reads the labels of the published checkpoints under `catalog` (label → engine version) and
/// the base of each delta among them (engine version → base).
#[allow(clippy::type_complexity)]
fn read_labels(
    catalog: &Catalog,
    disk: &dyn Disk,
) -> Result<(BTreeMap<Version, u64>, BTreeMap<u64, u64>), StateObjectError> {
    let root = catalog.root().to_path_buf();
    let versions = catalog
        .published_versions()
        .map_err(|e| engine_error(&root, EngineError::InvalidArgument(e.to_string())))?;
    let mut labels = BTreeMap::new();
    let mut bases = BTreeMap::new();
    for engine_version in versions {
        let Some(content) = read_content(catalog, disk, engine_version) else {
            continue;
        };
        if let ManifestKind::LogDelta { base } = content.kind {
            bases.insert(engine_version, base);
        }
        match decode_cookie(&content.cookie) {
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
    Ok((labels, bases))
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
        let (versions, bases) = read_labels(&catalog, &*config.store.disk)?;
        let store = Store::open(config.store.clone()).map_err(|e| engine_error(&root, e))?;
        let tip = store.recovery_info().map(|info| info.version);
        let mut engine_labels = BTreeMap::new();
        for (&label, &engine_version) in &versions {
            engine_labels.insert(engine_version, label);
        }
        let engine = Arc::new(Engine {
            inner: Mutex::new(Inner {
                durable: Some(DurableStore::over_engine(Arc::clone(&store))),
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
                bases,
                tip,
                ..Persisted::default()
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

    /// Whether [`MAX_BACKLOG`] sealed versions are waiting for their checkpoints (periodic
    /// commits then wait: the disk is behind).
    pub fn backlog_full(&self) -> bool {
        self.persisted.0.lock().queued >= MAX_BACKLOG
    }

    /// Set once a checkpoint failed to persist (the worker then stops renewing its lease).
    pub fn failed_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.failed)
    }

    fn root(&self) -> PathBuf {
        self.catalog.root().to_path_buf()
    }

    /// Waits (bounded) until the persister is done with every job, so none holds the store:
    /// after a restore bumped the generation, queued jobs are of the discarded history and are
    /// skipped at once; only a checkpoint being written is waited for.
    fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, changed) = &*self.persisted;
        let mut persisted = lock.lock();
        while persisted.queued > 0 {
            if changed.wait_until(&mut persisted, deadline).timed_out() {
                return persisted.queued == 0;
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
                self.persisted.0.lock().restored_to(version, engine_version);
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

/// The persister thread: writes each sealed version's checkpoint, in seal order, and reports it.
fn persist(
    jobs: mpsc::Receiver<PersistJob>,
    persisted: Arc<(Mutex<Persisted>, Condvar)>,
    failed: Arc<AtomicBool>,
) {
    let (lock, changed) = &*persisted;
    for job in jobs {
        // Consumes the job: its hold on the store ends before the count below says so (a reload
        // waits for that, then reopens the store's directory).
        persist_one(job, lock, changed, &failed);
        lock.lock().queued -= 1;
        changed.notify_all();
    }
}

/// Writes and reports one job (see [`persist`]).
fn persist_one(job: PersistJob, lock: &Mutex<Persisted>, changed: &Condvar, failed: &AtomicBool) {
    let scope = {
        let state = lock.lock();
        if job.generation != state.generation {
            // Sealed before a restore: its version was discarded (no report is expected).
            return;
        }
        state.next_scope()
    };
    let result = write_checkpoint(&job, scope);
    let outcome = {
        let mut state = lock.lock();
        let outcome = match result {
            // A restore began meanwhile: its version is discarded, and if it was published the
            // restore removes it (a rollback unpublishes every checkpoint above its target; a
            // reload removes every one on disk above it).
            _ if job.generation != state.generation => None,
            // A rollback discarded this version while it was being written (see `restore`):
            // not a failure, and nothing to report.
            Err(EngineError::CheckpointAborted { version }) => {
                tracing::info!(
                    label = job.label,
                    version,
                    "checkpoint abandoned by a rollback"
                );
                None
            }
            Ok(report) => {
                state.versions.insert(job.label, job.engine_version);
                state.tip = Some(job.engine_version);
                match scope {
                    Scope::Since(base) => {
                        state.bases.insert(job.engine_version, base);
                        state.deltas_since_full += 1;
                        state.delta_bytes_since_full += report.bytes;
                    }
                    Scope::Full => {
                        state.deltas_since_full = 0;
                        state.delta_bytes_since_full = 0;
                        state.full_bytes = report.bytes;
                    }
                }
                Some(Ok(job.label))
            }
            Err(error) => {
                failed.store(true, Ordering::SeqCst);
                Some(Err(StateObjectError::Io {
                    path: PathBuf::from(format!("checkpoint v{}", job.engine_version)),
                    source: std::io::Error::other(error.to_string()),
                }))
            }
        };
        changed.notify_all();
        outcome
    };
    if let Some(outcome) = outcome {
        (job.on_persist)(outcome);
    }
}

/// Writes `job`'s checkpoint and waits for it. The engine writes one at a time and a rollback's
/// PURGE holds its state machine: `CheckpointInProgress` is waited out while the version is
/// still sealed (a rollback unseals what it discards: then `CheckpointAborted`).
fn write_checkpoint(job: &PersistJob, scope: Scope) -> Result<CheckpointReport, EngineError> {
    let token = loop {
        match job
            .store
            .checkpoint_sealed(job.engine_version, scope, job.cookie.clone())
        {
            Ok(token) => break token,
            Err(EngineError::CheckpointInProgress) => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(error) => {
                if !job.store.sealed_versions().contains(&job.engine_version) {
                    return Err(EngineError::CheckpointAborted {
                        version: job.engine_version,
                    });
                }
                return Err(error);
            }
        }
        if !job.store.sealed_versions().contains(&job.engine_version) {
            return Err(EngineError::CheckpointAborted {
                version: job.engine_version,
            });
        }
    };
    // A checkpoint's result always arrives (the engine reports failures too); the timeout only
    // bounds a wedged disk, which is a failure of this worker.
    job.store.wait_for_commit(token, Duration::from_secs(600))
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
        let store = self.engine.store().ok_or_else(|| {
            engine_error(
                &root,
                EngineError::InvalidArgument(
                    "the engine is closed: its last restore failed".into(),
                ),
            )
        })?;
        let engine_version = match store.seal(SEAL_WAIT) {
            Ok(engine_version) => engine_version,
            // A rollback's PURGE holds the engine's state machine until it ends.
            Err(EngineError::CheckpointInProgress) => {
                return Err(StateObjectError::CommitInProgress)
            }
            Err(error) => return Err(engine_error(&root, error)),
        };
        self.engine.labels.lock().insert(engine_version, version);
        let generation = {
            let mut persisted = self.persisted.0.lock();
            persisted.queued += 1;
            persisted.generation
        };
        let job = PersistJob {
            store,
            engine_version,
            label: version,
            cookie: encode_cookie(version, &metadata),
            generation,
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
        // Versions sealed above the target are discarded from here on: the persister skips their
        // jobs instead of writing them (their engine versions are no longer sealed).
        self.persisted.0.lock().generation += 1;
        // In memory first, without waiting for a checkpoint being written: it is of a version
        // above every persisted one, hence above the target, and the engine's rollback stops it
        // (`EngineError::CheckpointAborted`, which the persister does not count as a failure).
        if let Some(metadata) = self.roll_back_in_memory(&inner, version)? {
            let store = inner.store.clone();
            inner.set_store(store);
            return Ok(metadata);
        }
        // The reload path replaces the store: the persister must be done with it.
        if !self.wait_idle(RESTORE_WAIT) {
            return Err(engine_error(&root, EngineError::Timeout));
        }
        // Drop the store (its directory lock and threads) before opening it again: the persister
        // is idle and no session is lent, so this is the last holder.
        inner.set_store(None);
        // Every checkpoint on disk above the target goes, newest first: the ones recorded, and
        // one a persister published for a version the restore had already discarded.
        let target = match version {
            0 => 0,
            label => match self.persisted.0.lock().versions.get(&label) {
                Some(&engine_version) => engine_version,
                None => {
                    return Err(StateObjectError::NoSuchVersion {
                        version,
                        available: Vec::new(),
                    })
                }
            },
        };
        let catalog_error = |e: prefixkv_storage::CatalogError| {
            engine_error(&root, EngineError::InvalidArgument(e.to_string()))
        };
        let mut doomed = self.catalog.published_versions().map_err(catalog_error)?;
        doomed.retain(|&engine_version| engine_version > target);
        for &engine_version in doomed.iter().rev() {
            self.catalog.remove(engine_version).map_err(catalog_error)?;
        }
        self.persisted
            .0
            .lock()
            .versions
            .retain(|&label, _| label <= version);
        let store = Store::open(self.config.store.clone()).map_err(|e| engine_error(&root, e))?;
        // Engine versions above the recovered one will be used again: forget their labels (a
        // stale, smaller label would under-report a batch's version).
        let recovered = store.recovery_info().map_or(0, |info| info.version);
        self.persisted.0.lock().restored_to(version, recovered);
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
        inner.set_store(Some(store));
        Ok(metadata)
    }

    fn persisted_versions(&self) -> Result<Vec<Version>, StateObjectError> {
        Ok(self.persisted.0.lock().versions.keys().copied().collect())
    }

    fn prune(&mut self, below: Version) -> Result<(), StateObjectError> {
        let root = self.root();
        let (doomed, floor) = {
            let persisted = self.persisted.0.lock();
            let Some(&floor) = persisted.versions.get(&below) else {
                // Not on disk (0, or already gone): nothing below it is known to be unneeded.
                return Ok(());
            };
            // Everything the cut's checkpoint and the newer ones load on top of stays: deltas
            // above the cut chain down to whole images at or below the cut's chain root.
            let keep_from = persisted
                .versions
                .range(below..)
                .map(|(_, &engine_version)| persisted.chain_root(engine_version))
                .min()
                .unwrap_or(floor);
            let doomed: Vec<(Version, u64)> = persisted
                .versions
                .iter()
                .filter(|&(&label, &engine_version)| label < below && engine_version < keep_from)
                .map(|(&label, &engine_version)| (label, engine_version))
                .collect();
            (doomed, floor)
        };
        // Compaction may now drop what only versions below the cut needed.
        if let Some(store) = self.engine.store() {
            store.set_rollback_floor(floor);
        }
        for (label, engine_version) in doomed {
            self.catalog
                .remove(engine_version)
                .map_err(|e| engine_error(&root, EngineError::InvalidArgument(e.to_string())))?;
            let mut persisted = self.persisted.0.lock();
            persisted.versions.remove(&label);
            persisted.bases.remove(&engine_version);
            drop(persisted);
            self.engine.labels.lock().remove(&engine_version);
        }
        Ok(())
    }
}
