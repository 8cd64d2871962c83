//! The replicated state machine: applies committed commands in log order and checkpoints every
//! Δ applied commands.
//!
//! # Checkpoint protocol
//! After the Δ-th command since the last checkpoint is applied (on openraft's state-machine
//! worker, which is the only task that mutates the state), at that exact log index, the next
//! checkpoint version is begun in the catalog (`checkpoint.rs`) and:
//! - *blocking*: the whole map is written, synced and published right there, so applying stops
//!   until the checkpoint is durable;
//! - *concurrent*: the CTrie's O(1) read-only snapshot is taken right there and handed to a
//!   background thread, which writes, syncs and publishes it while applying continues. If the
//!   previous concurrent checkpoint is still being written, this boundary is skipped (as in
//!   SMaRtTrie) and counted in [`CheckpointStats::skipped`].
//!
//! A checkpoint at the log id of the newest one is not written again: the state is the same, so
//! that one is handed over.
//!
//! The finished (or in-flight) checkpoint is then offered to openraft as its snapshot: the node
//! asks openraft to build a snapshot, and [`StateMachine::get_snapshot_builder`] hands over the
//! pending checkpoint instead of taking a new one, so openraft's snapshot is exactly our
//! checkpoint and lagging followers receive its file through openraft's snapshot install.
//!
//! # Log purging
//! Two checkpoints are kept. Once a new one is durable, the Raft log is purged up to the *older*
//! kept checkpoint (openraft's automatic purge is off): the log then always covers everything
//! after either checkpoint, so if the newest one turns out corrupt at recovery, the previous one
//! plus the log still rebuild the state.
//!
//! # Recovery
//! [`StateMachine::open`] loads the newest checkpoint whose checksums all verify (the catalog
//! moves newer corrupt ones to `.corrupt`); openraft then re-applies the committed log after it.
//! If checkpoints exist and none verifies it refuses to start empty unless told to.
//!
//! # Files
//! Checkpoints go through the [`Disk`] of [`StateMachineConfig`]. The one exception is the
//! snapshot openraft moves between replicas: its type is a `tokio::fs::File` (the type config's
//! `SnapshotData`), so serving a checkpoint to openraft and receiving one from the leader need
//! the real disk; on another disk those calls fail with an error saying so. A received snapshot
//! is copied into a new catalog version through the disk, verified, and only then published.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use prefixkv_storage::{real_disk, Disk};
use tokio::sync::{mpsc, oneshot, watch};

use crate::checkpoint::{self, CheckpointHeader, CheckpointWriter, Checkpoints, Selection};
use crate::store::{KvStore, StateModel};
use crate::types::{
    Command, CommandResponse, Entry, LogId, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};

/// One checkpoint's timing, for the bench's start/end markers.
#[derive(Clone, Debug)]
pub struct CheckpointEvent {
    /// Log index the checkpoint includes.
    pub index: u64,
    /// When the apply task took the snapshot (blocking: started writing).
    pub started: Instant,
    /// When the file was durable, if it is yet.
    pub finished: Option<Instant>,
    /// File size.
    pub file_bytes: u64,
    /// Pairs written.
    pub pairs: u64,
}

/// Counters about checkpoints.
#[derive(Default, Debug)]
pub struct CheckpointStats {
    /// Checkpoints that became durable.
    pub completed: AtomicU64,
    /// Δ boundaries skipped because the previous checkpoint was still being written.
    pub skipped: AtomicU64,
}

/// State shared between the state machine, its checkpoint threads and the node (client reads,
/// metrics, the purge task).
pub struct Shared {
    /// The key-value state.
    pub store: KvStore,
    /// Checkpoint counters.
    pub stats: CheckpointStats,
    /// Every checkpoint's timing, in order.
    pub events: Mutex<Vec<CheckpointEvent>>,
    /// The newest durable checkpoint.
    current: Mutex<Option<(SnapshotMeta, PathBuf)>>,
    /// The oldest retained checkpoint's index: the log may be purged up to it.
    purge_upto: watch::Sender<Option<u64>>,
    /// True while a background writer runs.
    writing: AtomicBool,
    /// The last applied index (for metrics without going through openraft).
    applied_index: AtomicU64,
    /// Δ: checkpoint every this many applied commands (0: only when openraft asks).
    checkpoint_every_commands: AtomicU64,
    /// False once the [`StateMachine`] owning this state has been dropped.
    state_machine_alive: AtomicBool,
}

impl Shared {
    /// A receiver of the index up to which the log may be purged.
    pub fn purge_upto(&self) -> watch::Receiver<Option<u64>> {
        self.purge_upto.subscribe()
    }

    /// The last applied log index.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(Ordering::Acquire)
    }

    /// Changes Δ from the next applied command on (0 turns our own checkpoints off).
    pub fn set_checkpoint_every(&self, commands: u64) {
        self.checkpoint_every_commands
            .store(commands, Ordering::Relaxed);
    }

    /// False once openraft has dropped the state machine (after shutdown, queued work done).
    pub fn state_machine_alive(&self) -> bool {
        self.state_machine_alive.load(Ordering::Acquire)
    }

    /// True while a background checkpoint writer runs.
    pub fn checkpoint_in_progress(&self) -> bool {
        self.writing.load(Ordering::Acquire)
    }

    /// Metadata of the newest durable checkpoint.
    pub fn current_checkpoint(&self) -> Option<SnapshotMeta> {
        self.current
            .lock()
            .expect("poisoned")
            .as_ref()
            .map(|(meta, _)| meta.clone())
    }
}

enum Pending {
    /// Already durable (blocking model).
    Ready(SnapshotMeta, PathBuf),
    /// Being written by a background thread (concurrent model).
    Writing(SnapshotMeta, oneshot::Receiver<std::io::Result<PathBuf>>),
    /// Writing it failed (blocking model).
    Failed(std::io::Error),
}

/// How the state machine is configured.
#[derive(Clone, Debug)]
pub struct StateMachineConfig {
    /// The state model.
    pub model: StateModel,
    /// Initial Δ: checkpoint every this many applied commands (0: only when openraft asks);
    /// [`Shared::set_checkpoint_every`] changes it at run time.
    pub checkpoint_every_commands: u64,
    /// Start with an empty state even though checkpoint files exist and none verifies.
    pub allow_missing_checkpoint: bool,
    /// Where checkpoints are written ([`real_disk`] in production; see the module docs).
    pub disk: Arc<dyn Disk>,
}

impl StateMachineConfig {
    /// `model` with checkpoints every `checkpoint_every_commands`, on the real disk, refusing
    /// to start empty when no checkpoint verifies.
    pub fn new(model: StateModel, checkpoint_every_commands: u64) -> Self {
        StateMachineConfig {
            model,
            checkpoint_every_commands,
            allow_missing_checkpoint: false,
            disk: real_disk(),
        }
    }
}

/// The openraft state machine of one replica.
pub struct StateMachine {
    shared: Arc<Shared>,
    checkpoints: Arc<Checkpoints>,
    config: StateMachineConfig,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    applied_since_checkpoint: u64,
    pending: Option<Pending>,
    receiving: Option<PathBuf>,
    snapshot_requests: mpsc::UnboundedSender<()>,
}

impl Drop for StateMachine {
    fn drop(&mut self) {
        self.shared
            .state_machine_alive
            .store(false, Ordering::Release);
    }
}

fn io_err(error: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(None, &std::io::Error::other(error.to_string())).into()
}

impl StateMachine {
    /// Opens the state machine with its checkpoint root at `dir` (created if missing), loading
    /// the newest checkpoint that verifies. `snapshot_requests` receives a message whenever a
    /// checkpoint is ready for openraft to take as its snapshot (the node answers with
    /// `raft.trigger().snapshot()`).
    pub fn open(
        dir: &Path,
        config: StateMachineConfig,
        snapshot_requests: mpsc::UnboundedSender<()>,
    ) -> anyhow::Result<Self> {
        let checkpoints = Checkpoints::open(Arc::clone(&config.disk), dir)
            .with_context(|| format!("opening the checkpoints in {}", dir.display()))?;
        let store = KvStore::new(config.model);
        let selection = checkpoints
            .select(|key, value| store.set(key, value.into()), || store.clear())
            .with_context(|| format!("reading the checkpoints in {}", dir.display()))?;
        let loaded = match selection {
            Selection::Nothing => None,
            Selection::Loaded {
                checkpoint,
                rejected,
                quarantined,
            } => {
                for (version, why) in &rejected {
                    tracing::warn!("checkpoint v{version} failed verification: {why}");
                }
                if !quarantined.is_empty() {
                    tracing::warn!(
                        "recovered from the older checkpoint v{}; the failed ones were moved to {:?}",
                        checkpoint.version,
                        quarantined
                    );
                }
                Some((checkpoint.header.meta, checkpoint.path))
            }
            Selection::NoneVerifies(rejected) => {
                let why: Vec<String> = rejected
                    .iter()
                    .map(|(version, why)| format!("v{version}: {why}"))
                    .collect();
                if !config.allow_missing_checkpoint {
                    anyhow::bail!(
                        "{} checkpoint(s) in {} and none verifies ({}); refusing to start with an \
                         empty state (inspect the files; to start empty and take a snapshot from \
                         the leader, pass --allow-missing-checkpoint)",
                        rejected.len(),
                        dir.display(),
                        why.join("; ")
                    );
                }
                tracing::warn!(
                    "no checkpoint in {} verifies ({}); starting empty as allowed",
                    dir.display(),
                    why.join("; ")
                );
                None
            }
        };
        let (purge_upto, _) = watch::channel(None);
        let (last_applied, membership) = match &loaded {
            Some((meta, _)) => (meta.last_log_id, meta.last_membership.clone()),
            None => (None, StoredMembership::default()),
        };
        let shared = Arc::new(Shared {
            store,
            stats: CheckpointStats::default(),
            events: Mutex::new(Vec::new()),
            current: Mutex::new(loaded),
            purge_upto,
            writing: AtomicBool::new(false),
            applied_index: AtomicU64::new(last_applied.map_or(0, |id| id.index)),
            checkpoint_every_commands: AtomicU64::new(config.checkpoint_every_commands),
            state_machine_alive: AtomicBool::new(true),
        });
        Ok(StateMachine {
            shared,
            checkpoints: Arc::new(checkpoints),
            config,
            last_applied,
            membership,
            applied_since_checkpoint: 0,
            pending: None,
            receiving: None,
            snapshot_requests,
        })
    }

    /// The shared state (reads, metrics).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    fn meta_now(&self) -> SnapshotMeta {
        let snapshot_id = match self.last_applied {
            Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, std::process::id()),
            None => "empty".to_string(),
        };
        SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        }
    }

    /// Takes a checkpoint of the state as of `self.last_applied` (see the module docs).
    fn start_checkpoint(&mut self) -> Pending {
        let meta = self.meta_now();
        let current = self.shared.current.lock().expect("poisoned").clone();
        if let Some((current, path)) = current {
            if current.last_log_id == meta.last_log_id {
                // The same log id is the same state: hand over the durable checkpoint.
                return Pending::Ready(current, path);
            }
        }
        let header = CheckpointHeader {
            meta: meta.clone(),
            model: self.config.model.name().to_string(),
        };
        let index = meta.last_log_id.map_or(0, |id| id.index);
        let writer = match self.checkpoints.begin(&header) {
            Ok(writer) => writer,
            Err(error) => {
                tracing::error!("checkpoint {index} failed: {error}");
                return Pending::Failed(error);
            }
        };
        let started = Instant::now();
        let event_slot = {
            let mut events = self.shared.events.lock().expect("poisoned");
            events.push(CheckpointEvent {
                index,
                started,
                finished: None,
                file_bytes: 0,
                pairs: 0,
            });
            events.len() - 1
        };
        let shared = self.shared.clone();
        let checkpoints = self.checkpoints.clone();
        match self.shared.store.freeze() {
            None => {
                // Blocking model: write it here, holding the apply task (and the map's read lock).
                let result = crate::log_store::blocking(|| write_blocking(&shared, writer));
                match result {
                    Ok((path, size, pairs)) => {
                        let finished = Finished {
                            event_slot,
                            meta: &meta,
                            path: &path,
                            size,
                            pairs,
                        };
                        finish_checkpoint(&shared, &checkpoints, finished);
                        Pending::Ready(meta, path)
                    }
                    Err(error) => {
                        // Nothing is purged for a failed checkpoint; openraft sees the error.
                        tracing::error!("checkpoint {index} failed: {error}");
                        Pending::Failed(error)
                    }
                }
            }
            Some(frozen) => {
                let (done_tx, done_rx) = oneshot::channel();
                shared.writing.store(true, Ordering::Release);
                let thread_meta = meta.clone();
                std::thread::Builder::new()
                    .name(format!("checkpoint-{index}"))
                    .spawn(move || {
                        let mut writer = writer;
                        let result = (|| -> std::io::Result<(PathBuf, u64, u64)> {
                            for (key, value) in frozen.iter() {
                                writer.push(&key, &value)?;
                            }
                            let pairs = writer.pairs();
                            let (path, size) = writer.finish()?;
                            Ok((path, size, pairs))
                        })();
                        let result = result.map(|(path, size, pairs)| {
                            let finished = Finished {
                                event_slot,
                                meta: &thread_meta,
                                path: &path,
                                size,
                                pairs,
                            };
                            finish_checkpoint(&shared, &checkpoints, finished);
                            path
                        });
                        if let Err(error) = &result {
                            tracing::error!("checkpoint {index} failed: {error}");
                        }
                        shared.writing.store(false, Ordering::Release);
                        let _ = done_tx.send(result);
                    })
                    .expect("spawn checkpoint thread");
                Pending::Writing(meta, done_rx)
            }
        }
    }

    fn at_command_boundary(&mut self) {
        let every = self
            .shared
            .checkpoint_every_commands
            .load(Ordering::Relaxed);
        if every == 0 {
            return;
        }
        self.applied_since_checkpoint += 1;
        if self.applied_since_checkpoint < every {
            return;
        }
        self.applied_since_checkpoint = 0;
        if matches!(self.pending, Some(Pending::Failed(_))) {
            self.pending = None;
        }
        if self.pending.is_some() || self.shared.writing.load(Ordering::Acquire) {
            self.shared.stats.skipped.fetch_add(1, Ordering::Relaxed);
        } else {
            self.pending = Some(self.start_checkpoint());
        }
        // Ask again even when skipping: openraft may have ignored the last request while it was
        // building a snapshot, and the pending checkpoint must still reach it.
        let _ = self.snapshot_requests.send(());
    }

    fn apply_one(&mut self, entry: Entry) -> CommandResponse {
        self.last_applied = Some(entry.log_id);
        let response = match entry.payload {
            EntryPayload::Blank => CommandResponse::Done,
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(entry.log_id), membership);
                CommandResponse::Done
            }
            EntryPayload::Normal(command) => {
                let response = match command {
                    Command::Set { key, value } => {
                        self.shared.store.set(key, value.into());
                        CommandResponse::Done
                    }
                    Command::Del { key } => {
                        CommandResponse::Removed(self.shared.store.remove(&key))
                    }
                    Command::SetMany { pairs } => {
                        self.shared.store.set_many(pairs);
                        CommandResponse::Done
                    }
                };
                self.shared
                    .applied_index
                    .store(entry.log_id.index, Ordering::Release);
                self.at_command_boundary();
                return response;
            }
        };
        self.shared
            .applied_index
            .store(entry.log_id.index, Ordering::Release);
        response
    }
}

fn write_blocking(
    shared: &Shared,
    mut writer: CheckpointWriter,
) -> std::io::Result<(PathBuf, u64, u64)> {
    shared
        .store
        .for_each(|key, value| writer.push(key, value))?;
    let pairs = writer.pairs();
    let (path, size) = writer.finish()?;
    Ok((path, size, pairs))
}

/// A checkpoint that was just published.
struct Finished<'a> {
    event_slot: usize,
    meta: &'a SnapshotMeta,
    path: &'a Path,
    size: u64,
    pairs: u64,
}

/// Bookkeeping once a checkpoint is published: newest pointer, retention, purge watermark.
fn finish_checkpoint(shared: &Shared, checkpoints: &Checkpoints, finished: Finished<'_>) {
    {
        let mut events = shared.events.lock().expect("poisoned");
        let event = &mut events[finished.event_slot];
        event.finished = Some(Instant::now());
        event.file_bytes = finished.size;
        event.pairs = finished.pairs;
    }
    {
        let mut current = shared.current.lock().expect("poisoned");
        if current
            .as_ref()
            .is_none_or(|(old, _)| old.last_log_id <= finished.meta.last_log_id)
        {
            *current = Some((finished.meta.clone(), finished.path.to_path_buf()));
        }
    }
    shared.stats.completed.fetch_add(1, Ordering::Relaxed);
    // Two are kept; the log is purged only up to the older one's index (module docs).
    match checkpoints.retain(2) {
        Ok(Some(oldest_kept)) => {
            shared.purge_upto.send_replace(Some(oldest_kept));
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(
            "cannot delete old checkpoints in {}: {error}",
            checkpoints.root().display()
        ),
    }
}

/// Hands a checkpoint (durable, or being written) to openraft as its snapshot.
pub struct CheckpointBuilder {
    pending: Option<Pending>,
    disk: Arc<dyn Disk>,
}

/// openraft's snapshot type is a `tokio::fs::File`: a checkpoint can be handed to it (or received
/// from it) only when checkpoints live on the real disk.
fn snapshot_files_usable(disk: &dyn Disk) -> std::io::Result<()> {
    if disk.kind() == real_disk().kind() {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "openraft's snapshot data is a tokio::fs::File, so snapshots need checkpoints on the \
             real disk; these are on the {} disk",
            disk.kind()
        ),
    ))
}

async fn open_snapshot(
    disk: &dyn Disk,
    meta: SnapshotMeta,
    path: &Path,
) -> Result<Snapshot<TypeConfig>, StorageError> {
    snapshot_files_usable(disk).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
    Ok(Snapshot {
        meta,
        snapshot: Box::new(file),
    })
}

impl RaftSnapshotBuilder<TypeConfig> for CheckpointBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        match self.pending.take().expect("a builder builds once") {
            Pending::Ready(meta, path) => open_snapshot(&*self.disk, meta, &path).await,
            Pending::Failed(error) => Err(StorageIOError::write_snapshot(None, &error).into()),
            Pending::Writing(meta, done) => {
                let path = done
                    .await
                    .map_err(io_err)?
                    .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
                open_snapshot(&*self.disk, meta, &path).await
            }
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = CheckpointBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        Ok(entries
            .into_iter()
            .map(|entry| self.apply_one(entry))
            .collect())
    }

    async fn get_snapshot_builder(&mut self) -> CheckpointBuilder {
        let pending = match self.pending.take() {
            Some(pending) => pending,
            None => self.start_checkpoint(),
        };
        CheckpointBuilder {
            pending: Some(pending),
            disk: Arc::clone(&self.config.disk),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        snapshot_files_usable(&*self.config.disk)
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let path = self.checkpoints.incoming_path();
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        self.receiving = Some(path);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        // openraft hands back a handle that is usually the file we created, but may be any
        // file (its test suite passes the sender's); copy whatever it holds into a new catalog
        // version, verify it, publish it, and only then replace the state from it.
        let write_error =
            |e: std::io::Error| -> StorageError { StorageIOError::write_snapshot(None, &e).into() };
        let mut snapshot = snapshot;
        {
            use tokio::io::AsyncSeekExt;
            snapshot
                .seek(std::io::SeekFrom::Start(0))
                .await
                .map_err(write_error)?;
        }
        let mut source = (*snapshot).into_std().await;
        let checkpoints = self.checkpoints.clone();
        let expected = meta.clone();
        let shared = self.shared.clone();
        let installed = tokio::task::spawn_blocking(move || -> std::io::Result<PathBuf> {
            let path = checkpoints.install(&mut source, &expected)?;
            drop(source);
            shared.store.clear();
            checkpoint::read(&**checkpoints.disk(), &path, |key, value| {
                shared.store.set(key, value.into())
            })
            .map_err(std::io::Error::other)?;
            // The log before the snapshot is not this replica's to replay: keep only it.
            checkpoints.retain(1)?;
            Ok(path)
        })
        .await
        .map_err(io_err)?;
        if let Some(incoming) = self.receiving.take() {
            let _ = tokio::fs::remove_file(incoming).await;
        }
        let installed = installed.map_err(write_error)?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.applied_since_checkpoint = 0;
        self.pending = None;
        self.shared
            .applied_index
            .store(meta.last_log_id.map_or(0, |id| id.index), Ordering::Release);
        *self.shared.current.lock().expect("poisoned") = Some((meta.clone(), installed));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let current = self.shared.current.lock().expect("poisoned").clone();
        match current {
            Some((meta, path)) => Ok(Some(open_snapshot(&*self.config.disk, meta, &path).await?)),
            None => Ok(None),
        }
    }
}
