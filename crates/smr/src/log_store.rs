//! The Raft log of one replica, on `prefixkv-storage`: the entries in the shared segmented log
//! ([`prefixkv_storage::log`]), the vote and the purge point as durable whole files
//! ([`prefixkv_storage::durable::write_file_durably`]), the commit index as a hint. Every file goes
//! through the [`Disk`] of [`LogStoreConfig`] (the real disk, or the simulated one in power-cut
//! tests).
//!
//! # Files (in the log directory, `<replica>/log`)
//! - `segments/`: the shared log (byte format and crash-safety argument in `docs/storage.md`,
//!   "Log segments" and "Log"). One record per Raft entry, its payload the postcard encoding of
//!   the openraft entry; the entry at Raft index `i` is the record with LSN `i + 1` (LSNs start
//!   at 1, Raft indexes at 0). Written with the `always` policy by default ([`LogSync::On`]): a
//!   group is synced before its completions fire. With [`LogSync::Off`] (the paper's "logging
//!   disabled") the policy is `none`: completions fire once the group is written to the file
//!   (the OS page cache), and the log is synced only when a segment rolls, a vote or purge point
//!   is saved, or the log closes.
//! - `vote`, `purged`: `crc32c u32 | JSON` of the vote and of the last purged log id, each
//!   replaced by `write_file_durably` before the call that changed it returns.
//! - `committed`: `crc32c u32 | len u32 | JSON` of the last committed log id, overwritten in place
//!   and *not* synced: a hint that lets a restarted replica re-apply its own log at once. Opening
//!   keeps it only if the log holds that very entry (or it is the purge point), so a torn, stale
//!   or early hint only means re-applying less and waiting for the leader's commit index.
//!
//! # Invariants
//! - The records above the purge point hold a dense run of entries, record LSN = index + 1
//!   (checked at open and before every append: a batch that would leave a hole or overlap is
//!   refused). Records at or below the purge point may remain in the oldest segment (the shared
//!   log deletes whole segments only); opening skips them. A log that has never been purged and
//!   holds no entry may begin at any index (openraft allows it, and its conformance suite does
//!   it); the shared log is then started over at that entry's LSN. Raft itself never does: a
//!   follower's first entry is index 0 or follows a snapshot, whose installation purges.
//!   Entries at or below the purge point are not stored (the state machine covers them).
//! - openraft issues one call at a time (`&mut self`) and each finishes its I/O before the next
//!   starts, except appends, whose sync completes on the log's I/O thread; every later write
//!   (vote, purge, truncation) first waits for those (`flush_and_sync`, or `truncate_after`'s own
//!   drain). So the write I/O is serialized in call order, as openraft requires.
//! - The in-memory cache holds exactly the unpurged entries (openraft reads them back at once),
//!   so its size is bounded by the checkpoint interval (the log is purged behind checkpoints).
//! - Fail-stop: after any failed write or sync (of the log, the vote or the purge point) every
//!   later write is refused; nothing is retried. The shared log's failure is sticky too.
//!
//! # Crash safety
//! - `append`: openraft's callback fires from the shared log's completion, which under `always`
//!   follows the sync of the group holding the entries. A cut loses only entries whose callback
//!   never fired (the shared log drops the torn tail at open). Under [`LogSync::Off`] a process
//!   crash (SIGKILL) still loses no entry whose callback fired (the kernel holds the written
//!   bytes), but a power cut or kernel crash may lose any suffix written since the last sync:
//!   openraft was told those entries were durable, so this replica may have counted towards the
//!   majority of a write it no longer holds. Everything else below (vote, purge, truncation)
//!   stays durable under both settings.
//! - `truncate`: `truncate_after` is durable before it returns; a cut during it leaves a longer,
//!   dense log, which openraft truncates again.
//! - `purge`: the purge point is written durably first, then whole segments at or below it are
//!   deleted; a cut in between leaves extra records below the purge point, skipped at open. A
//!   purge beyond the last entry (openraft installing a snapshot ahead of this log) starts the
//!   log over above it: the segments directory is removed durably
//!   (`durable::remove_dir_all_durably`) and a new log begins at LSN purge + 2. A cut in between
//!   leaves a log that ends at or below the purge point, which opening starts over the same way;
//!   a log that *starts* above purge + 1 has a hole and opening refuses it.
//! - `save_vote`: the log is synced first, then the vote written durably, before returning.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError, Vote};
use prefixkv_storage::durable::{
    create_dir_all_durably, read_file, remove_dir_all_durably, remove_leftover, write_file_durably,
};
use prefixkv_storage::log::{Log, LogConfig, LogError, SyncPolicy};
use prefixkv_storage::{real_disk, Disk, DiskFile, OpenMode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig};

/// Largest accepted log record payload (one postcard-encoded entry).
pub const MAX_RECORD_BYTES: u32 = 64 << 20;
/// A segment is closed once it would grow past this size.
pub const SEGMENT_BYTES: u64 = 32 << 20;
/// The shared log's directory inside the log directory.
pub const SEGMENTS_DIR: &str = "segments";
/// Bytes of entries that may wait for the log's I/O thread before `append` blocks.
const QUEUE_CAPACITY_BYTES: usize = 64 << 20;
const VOTE_FILE: &str = "vote";
const PURGED_FILE: &str = "purged";
const COMMITTED_FILE: &str = "committed";
/// Largest `vote`, `purged` or `committed` file read back (they hold a few hundred bytes).
const SMALL_FILE_LIMIT: u64 = 64 << 10;

/// Whether appended entries are synced before openraft is told they are durable
/// (`--log-sync`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum LogSync {
    /// Every group of entries is fdatasynced before its callback fires: a power cut loses no
    /// entry openraft was told is durable.
    #[default]
    On,
    /// Entries are written to the file (the OS page cache) before their callback fires, and
    /// synced only on segment roll, vote, purge and close: a process crash loses nothing
    /// acknowledged, a power cut or kernel crash may lose the log's unsynced suffix (module
    /// docs, "Crash safety").
    Off,
}

impl LogSync {
    /// The shared log's policy for this setting.
    pub fn policy(self) -> SyncPolicy {
        match self {
            LogSync::On => SyncPolicy::Always,
            LogSync::Off => SyncPolicy::None,
        }
    }

    /// The setting's name as the CLI and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            LogSync::On => "on",
            LogSync::Off => "off",
        }
    }
}

/// How a [`LogStore`] is opened.
#[derive(Clone, Debug)]
pub struct LogStoreConfig {
    /// Where every file goes ([`real_disk`] by default; a `SimDisk` in power-cut tests).
    pub disk: Arc<dyn Disk>,
    /// Segment size of the shared log (at least 4096).
    pub segment_bytes: u64,
    /// Whether appends are synced before they are reported durable.
    pub sync: LogSync,
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        LogStoreConfig {
            disk: real_disk(),
            segment_bytes: SEGMENT_BYTES,
            sync: LogSync::On,
        }
    }
}

/// The LSN of the record holding the entry at Raft index `index`.
fn lsn_of(index: u64) -> u64 {
    index + 1
}

/// Called once appended entries are durable, or with the failure.
pub type OnDurable = Box<dyn FnOnce(io::Result<()>) + Send + 'static>;

#[derive(Default)]
struct Cache {
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
}

/// The disk log store of one replica.
pub struct LogStore {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    log_config: LogConfig,
    /// `None` only after a failed restart of the log (then `failure` is set).
    log: Option<Log>,
    cache: Arc<Mutex<Cache>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId>,
    committed_file: Option<Arc<dyn DiskFile>>,
    /// Set by the first failed write; every later write is refused (fail-stop).
    failure: Option<String>,
}

/// Reads entries from the cache (used by openraft's replication tasks).
#[derive(Clone)]
pub struct LogReader {
    cache: Arc<Mutex<Cache>>,
}

/// Runs blocking I/O from async code: through `block_in_place` on a multi-threaded tokio runtime
/// (other tasks move to other workers meanwhile), directly anywhere else.
pub(crate) fn blocking<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// An `io::Error` for a log error, keeping the kind of an underlying I/O error (so `ENOSPC`
/// stays `StorageFull`).
fn log_io_error(error: LogError) -> io::Error {
    match &error {
        LogError::Io { source, .. } => io::Error::new(source.kind(), error.to_string()),
        _ => io::Error::other(error.to_string()),
    }
}

fn encode_small_file<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let json = serde_json::to_vec(value).map_err(io::Error::other)?;
    let mut bytes = crc32c::crc32c(&json).to_le_bytes().to_vec();
    bytes.extend_from_slice(&json);
    Ok(bytes)
}

/// Reads a `vote` or `purged` file; `Ok(None)` if it is absent. It was replaced atomically, so
/// a bad checksum is media corruption, and an error.
fn read_small_file<T: DeserializeOwned>(disk: &dyn Disk, path: &Path) -> anyhow::Result<Option<T>> {
    let Some(bytes) = read_file(disk, path, SMALL_FILE_LIMIT)? else {
        return Ok(None);
    };
    let valid = bytes.len() >= 4
        && crc32c::crc32c(&bytes[4..]) == u32::from_le_bytes(bytes[..4].try_into().unwrap());
    if !valid {
        anyhow::bail!(
            "{} is corrupt (CRC mismatch at offset 0); it was written atomically, so this is media \
             corruption: restore it or remove the replica's directory and re-add it",
            path.display()
        );
    }
    let value = serde_json::from_slice(&bytes[4..])
        .with_context(|| format!("{} does not parse", path.display()))?;
    Ok(Some(value))
}

/// Reads the `committed` hint; anything unreadable is no hint.
fn read_committed_hint(disk: &dyn Disk, path: &Path) -> Option<LogId> {
    let bytes = read_file(disk, path, SMALL_FILE_LIMIT).ok()??;
    let crc = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let len = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let json = bytes.get(8..8usize.checked_add(len)?)?;
    if crc32c::crc32c(json) != crc {
        return None;
    }
    serde_json::from_slice::<Option<LogId>>(json).ok().flatten()
}

/// Closes `log`, removes its directory durably and opens a new, empty log there that starts at
/// `config.first_lsn`.
fn restart_log(disk: &Arc<dyn Disk>, log: Log, config: &LogConfig) -> anyhow::Result<Log> {
    let dir = log.dir().to_path_buf();
    log.close()
        .with_context(|| format!("closing {} to start it over", dir.display()))?;
    remove_dir_all_durably(&**disk, &dir)
        .with_context(|| format!("removing {} to start it over", dir.display()))?;
    let (log, report) = Log::open_on(Arc::clone(disk), &dir, config.clone())?;
    anyhow::ensure!(
        report.next_lsn == config.first_lsn,
        "{} restarted at LSN {} instead of {}",
        dir.display(),
        report.next_lsn,
        config.first_lsn
    );
    Ok(log)
}

impl LogStore {
    /// Opens (or creates) the log in `dir` on the real disk, recovering its files.
    pub fn open(dir: &Path) -> anyhow::Result<LogStore> {
        Self::open_with(dir, LogStoreConfig::default())
    }

    /// Opens (or creates) the log in `dir` as `config` says, recovering its files: the shared
    /// log drops a torn tail and refuses corruption; a log that ends at or below the purge point
    /// starts over above it; the entries above the purge point are read into memory.
    pub fn open_with(dir: &Path, config: LogStoreConfig) -> anyhow::Result<LogStore> {
        let disk = config.disk;
        create_dir_all_durably(&*disk, dir)?;
        if let Some(old) = disk
            .list(dir)?
            .into_iter()
            .find(|entry| entry.name.starts_with("seg-") && entry.name.ends_with(".log"))
        {
            anyhow::bail!(
                "{} holds {}, a Raft log segment of the format before prefixkv-storage; this \
                 version cannot read it. Remove the replica's directory and let it rejoin from a \
                 snapshot.",
                dir.display(),
                old.name
            );
        }
        let vote: Option<Vote<NodeId>> = read_small_file(&*disk, &dir.join(VOTE_FILE))?;
        let last_purged: Option<LogId> = read_small_file(&*disk, &dir.join(PURGED_FILE))?;
        let committed = read_committed_hint(&*disk, &dir.join(COMMITTED_FILE));
        let segments = dir.join(SEGMENTS_DIR);
        remove_leftover(&*disk, &segments)?;
        let first_lsn = last_purged.map_or(1, |id| lsn_of(id.index) + 1);
        let log_config = LogConfig {
            policy: config.sync.policy(),
            segment_bytes: config.segment_bytes,
            max_record_bytes: MAX_RECORD_BYTES,
            queue_capacity_bytes: QUEUE_CAPACITY_BYTES,
            first_lsn,
            ..LogConfig::default()
        };
        let (mut log, report) = Log::open_on(Arc::clone(&disk), &segments, log_config.clone())?;
        if let Some(torn) = &report.torn_tail {
            tracing::warn!(
                "Raft log: dropped a torn tail of {} bytes at offset {} of {} (never reported durable)",
                torn.bytes_dropped,
                torn.offset,
                torn.segment.display()
            );
        }
        if log.next_lsn() < first_lsn {
            // Everything left is at or below the purge point (a cut during a purge beyond the
            // end, or an unsynced tail lost behind a snapshot): start over above it.
            log = restart_log(&disk, log, &log_config)?;
        }
        anyhow::ensure!(
            last_purged.is_none() || log.oldest_lsn() <= first_lsn,
            "Raft log {} starts at index {} but the purge point is {:?}: entries in between are \
             missing; refusing to start. Remove this replica's directory and let it rejoin from a \
             snapshot.",
            segments.display(),
            log.oldest_lsn() - 1,
            last_purged
        );
        let mut cache = Cache {
            entries: BTreeMap::new(),
            last_purged,
        };
        for record in log.replay(first_lsn.max(log.oldest_lsn()))? {
            let (lsn, payload) = record?;
            let entry: Entry = postcard::from_bytes(&payload).with_context(|| {
                format!(
                    "Raft log {}: the record with LSN {lsn} passed its CRC but is not an entry",
                    segments.display()
                )
            })?;
            anyhow::ensure!(
                lsn_of(entry.log_id.index) == lsn,
                "Raft log {}: the record with LSN {lsn} holds entry {}, whose index does not match",
                segments.display(),
                entry.log_id
            );
            cache.entries.insert(entry.log_id.index, entry);
        }
        let committed = committed.filter(|hint| {
            Some(*hint) == cache.last_purged
                || cache
                    .entries
                    .get(&hint.index)
                    .is_some_and(|entry| entry.log_id == *hint)
        });
        Ok(LogStore {
            disk,
            dir: dir.to_path_buf(),
            log_config,
            log: Some(log),
            cache: Arc::new(Mutex::new(cache)),
            vote,
            committed,
            committed_file: None,
            failure: None,
        })
    }

    /// The log state: last purged and last log id.
    pub fn log_state(&self) -> LogState<TypeConfig> {
        let cache = self.cache.lock().expect("poisoned");
        let last_log_id = cache
            .entries
            .last_key_value()
            .map(|(_, entry)| entry.log_id)
            .or(cache.last_purged);
        LogState {
            last_purged_log_id: cache.last_purged,
            last_log_id,
        }
    }

    /// The unpurged entries with index in `range`.
    pub fn entries(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        let cache = self.cache.lock().expect("poisoned");
        cache
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect()
    }

    /// The last saved vote.
    pub fn vote(&self) -> Option<Vote<NodeId>> {
        self.vote
    }

    /// The commit index hint (validated at open).
    pub fn committed(&self) -> Option<LogId> {
        self.committed
    }

    /// The shared log's segment files, oldest first (tests tamper with them).
    pub fn segment_paths(&self) -> Vec<PathBuf> {
        self.log.as_ref().map_or_else(Vec::new, Log::segment_paths)
    }

    fn live_log(&self) -> io::Result<&Log> {
        match (&self.failure, &self.log) {
            (None, Some(log)) => Ok(log),
            (failure, _) => Err(io::Error::other(format!(
                "the Raft log store in {} failed earlier and accepts no more writes ({}); \
                 restart the replica to recover",
                self.dir.display(),
                failure.as_deref().unwrap_or("its log is closed")
            ))),
        }
    }

    /// Records the first failure (fail-stop) and returns it.
    fn fail(&mut self, error: io::Error) -> io::Error {
        tracing::error!("Raft log I/O failed in {}: {error}", self.dir.display());
        self.failure.get_or_insert_with(|| error.to_string());
        error
    }

    /// Appends `entries` (which must continue the log: the first at the last index + 1, or at
    /// the purge point + 1) and calls `on_durable` once they are durable, or with the failure.
    /// When this returns `Ok`, the entries are readable.
    pub fn append_entries(
        &mut self,
        mut entries: Vec<Entry>,
        on_durable: OnDurable,
    ) -> io::Result<()> {
        // Entries at or below the purge point are covered by the state machine already and
        // are not stored (Raft never sends them; openraft's conformance suite appends some).
        if let Some(purged) = self.cache.lock().expect("poisoned").last_purged {
            entries.retain(|entry| entry.log_id.index > purged.index);
        }
        if entries.is_empty() {
            // Nothing new: durable once everything before it is.
            let log = self.live_log()?;
            let outcome = blocking(|| log.flush_and_sync());
            let outcome = outcome.map(|_| ()).map_err(log_io_error);
            let failed = outcome
                .as_ref()
                .err()
                .map(|e| io::Error::new(e.kind(), e.to_string()));
            on_durable(outcome);
            return match failed {
                Some(error) => Err(self.fail(error)),
                None => Ok(()),
            };
        }
        let mut next_lsn = self.live_log()?.next_lsn();
        let first_lsn = lsn_of(entries[0].log_id.index);
        let never_used = {
            let cache = self.cache.lock().expect("poisoned");
            cache.entries.is_empty() && cache.last_purged.is_none()
        };
        if first_lsn != next_lsn && never_used {
            // An empty, never purged log may begin anywhere (module docs).
            self.restart_at(first_lsn)?;
            next_lsn = first_lsn;
        }
        for (position, entry) in entries.iter().enumerate() {
            if lsn_of(entry.log_id.index) != next_lsn + position as u64 {
                let error = io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "append of entry {} would leave a hole or overlap: the log's next index is {}",
                        entry.log_id,
                        next_lsn + position as u64 - 1
                    ),
                );
                return Err(self.fail(error));
            }
        }
        let mut payloads = Vec::with_capacity(entries.len());
        for entry in &entries {
            let payload = postcard::to_allocvec(entry).map_err(io::Error::other)?;
            if payload.len() > MAX_RECORD_BYTES as usize {
                // Refused before anything is queued, so the log stays consistent.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "log entry {} of {} bytes exceeds the {MAX_RECORD_BYTES}-byte record limit",
                        entry.log_id,
                        payload.len()
                    ),
                ));
            }
            payloads.push(payload);
        }
        let first_index = entries[0].log_id.index;
        {
            let mut cache = self.cache.lock().expect("poisoned");
            for entry in entries {
                cache.entries.insert(entry.log_id.index, entry);
            }
        }
        let log = self.live_log()?;
        let mut on_durable = Some(on_durable);
        let last = payloads.len() - 1;
        let mut failed = None;
        for (position, payload) in payloads.iter().enumerate() {
            let queued = if position == last {
                let callback = on_durable.take().expect("called once");
                log.append_with_callback(
                    payload,
                    Box::new(move |outcome| callback(outcome.map(|_| ()).map_err(log_io_error))),
                )
            } else {
                // Completion is a watermark: the last record's callback covers this one too.
                log.append(payload).map(|ticket| ticket.lsn())
            };
            if let Err(error) = queued {
                failed = Some(log_io_error(error));
                break;
            }
        }
        match failed {
            None => Ok(()),
            Some(error) => {
                self.cache
                    .lock()
                    .expect("poisoned")
                    .entries
                    .split_off(&first_index);
                if let Some(callback) = on_durable {
                    callback(Err(io::Error::new(error.kind(), error.to_string())));
                }
                Err(self.fail(error))
            }
        }
    }

    /// Removes the entries from `index` on, durably, before returning.
    pub fn truncate_since(&mut self, index: u64) -> io::Result<()> {
        let log = self.live_log()?;
        let purged = self.cache.lock().expect("poisoned").last_purged;
        if purged.is_some_and(|purged| index <= purged.index) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("truncating from index {index} would cut into the purged log ({purged:?})"),
            ));
        }
        // Records with LSN above `lsn_of(index) - 1 = index` go. A log that began above
        // `index` (never purged, module docs) has nothing below its oldest record to keep.
        let keep_through = index.max(log.oldest_lsn() - 1);
        let outcome = blocking(|| log.truncate_after(keep_through));
        self.cache
            .lock()
            .expect("poisoned")
            .entries
            .split_off(&index);
        match outcome {
            Ok(_) => Ok(()),
            Err(error) => Err(self.fail(log_io_error(error))),
        }
    }

    /// Records `upto` as purged, durably, then deletes what the log no longer needs (see the
    /// module docs). A purge point at or below the current one is a no-op.
    pub fn purge_upto(&mut self, upto: LogId) -> io::Result<()> {
        let log = self.live_log()?;
        let purged = self.cache.lock().expect("poisoned").last_purged;
        if purged.is_some_and(|purged| purged.index >= upto.index) {
            return Ok(());
        }
        let path = self.dir.join(PURGED_FILE);
        let disk = Arc::clone(&self.disk);
        let written = blocking(|| -> io::Result<()> {
            // Serialized after the appends before it (openraft's rule for write I/O).
            log.flush_and_sync().map_err(log_io_error)?;
            write_file_durably(&*disk, &path, &encode_small_file(&upto)?)
        });
        if let Err(error) = written {
            return Err(self.fail(error));
        }
        {
            let mut cache = self.cache.lock().expect("poisoned");
            cache.entries = cache.entries.split_off(&(upto.index + 1));
            cache.last_purged = Some(upto);
        }
        if lsn_of(upto.index) < log.next_lsn() {
            let deleted = blocking(|| log.truncate_through(lsn_of(upto.index)));
            return match deleted {
                Ok(_) => Ok(()),
                Err(error) => Err(self.fail(log_io_error(error))),
            };
        }
        // Beyond the last entry: start the log over above the purge point.
        self.restart_at(lsn_of(upto.index) + 1)
    }

    /// Starts the shared log over, empty, with `first_lsn` as its next LSN (module docs).
    fn restart_at(&mut self, first_lsn: u64) -> io::Result<()> {
        self.log_config.first_lsn = first_lsn;
        let log = self.log.take().expect("checked live by the caller");
        let restarted = blocking(|| restart_log(&self.disk, log, &self.log_config));
        match restarted {
            Ok(log) => {
                self.log = Some(log);
                Ok(())
            }
            Err(error) => Err(self.fail(io::Error::other(format!("{error:#}")))),
        }
    }

    /// Saves the vote durably, after every entry appended before it is durable.
    pub fn write_vote(&mut self, vote: &Vote<NodeId>) -> io::Result<()> {
        let log = self.live_log()?;
        let path = self.dir.join(VOTE_FILE);
        let disk = Arc::clone(&self.disk);
        let written = blocking(|| -> io::Result<()> {
            log.flush_and_sync().map_err(log_io_error)?;
            write_file_durably(&*disk, &path, &encode_small_file(vote)?)
        });
        match written {
            Ok(()) => {
                self.vote = Some(*vote);
                Ok(())
            }
            Err(error) => Err(self.fail(error)),
        }
    }

    /// Records the commit index as a hint (not synced; see the module docs). A failure to write
    /// the hint is logged and otherwise ignored: the hint is never needed for correctness.
    pub fn write_committed(&mut self, committed: Option<LogId>) {
        self.committed = committed;
        if self.failure.is_some() {
            return;
        }
        if let Err(error) = self.write_committed_hint(&committed) {
            tracing::warn!("cannot write the committed hint: {error}");
        }
    }

    fn write_committed_hint(&mut self, committed: &Option<LogId>) -> io::Result<()> {
        if self.committed_file.is_none() {
            let path = self.dir.join(COMMITTED_FILE);
            self.committed_file = Some(self.disk.open(&path, OpenMode::Create)?);
        }
        let json = serde_json::to_vec(committed).map_err(io::Error::other)?;
        let mut bytes = Vec::with_capacity(8 + json.len());
        bytes.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
        bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&json);
        self.committed_file
            .as_ref()
            .expect("opened above")
            .write_all_at(&bytes, 0)
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let cache = self.cache.lock().expect("poisoned");
        Ok(cache
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.entries(range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(self.log_state())
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            cache: self.cache.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.write_vote(vote)
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.write_committed(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let on_durable: OnDurable = Box::new(move |outcome| callback.log_io_completed(outcome));
        self.append_entries(entries.into_iter().collect(), on_durable)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.truncate_since(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.purge_upto(log_id)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
