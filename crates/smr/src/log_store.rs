//! The Raft log on disk: CRC-framed records in segment files, one writer thread with group
//! commit, and a durable vote.
//!
//! # Files (in the log directory)
//! - `seg-<first index, 20 digits>.log`: records `len u32 | crc u32 | payload`, where `payload`
//!   is a postcard-encoded openraft entry (≤ [`MAX_RECORD_BYTES`]) and `crc` is CRC32C over the
//!   four length bytes followed by the payload. Indexes are consecutive within and across segments.
//! - `vote`: `crc u32 | JSON`, replaced atomically (write temp, fsync, rename, fsync directory)
//!   before `save_vote` returns.
//! - `purged`: the last purged log id, same format and same atomic replacement.
//! - `committed`: `crc u32 | len u32 | JSON` of the last committed log id, overwritten in place
//!   and *not* fsynced: it is a hint that lets a restarted replica re-apply its own log at once;
//!   if it is torn or stale, the replica re-applies less and waits for the leader to tell it the
//!   commit index, which is always safe.
//!
//! # Invariants
//! - One thread (the writer) touches the files; every mutating call is a message to it, processed
//!   in the order openraft issued them (openraft requires log and vote I/O to be serialized).
//! - `append` puts entries into the in-memory cache before returning (openraft reads them back at
//!   once) and the writer calls the flush callback only after `fdatasync` covered them. One
//!   `fdatasync` covers every append the writer drained in one go (group commit).
//! - The cache holds exactly the unpurged entries, so its size is bounded by the checkpoint
//!   interval (the log is purged behind each checkpoint).
//!
//! # Crash safety
//! A torn write can only damage the tail of the newest segment: recovery stops at the first
//! record whose length or CRC does not verify and truncates the file there (those entries were
//! never acknowledged as flushed). A bad record in an older segment is real corruption: opening
//! fails with the file and offset rather than silently dropping committed entries. Truncation
//! deletes later segments before cutting the file, so a crash in between leaves a longer but
//! consistent log that openraft truncates again. Purging writes `purged` before deleting files;
//! entries at or below it are ignored at recovery.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::checkpoint::sync_dir;
use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig};

/// Largest accepted log record payload.
pub const MAX_RECORD_BYTES: u32 = 64 << 20;
/// A segment is closed once it grows past this size.
pub const SEGMENT_BYTES: u64 = 32 << 20;

#[derive(Default)]
struct Cache {
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
}

enum Op {
    Append(Vec<Entry>, LogFlushed<TypeConfig>),
    Truncate(u64),
    Purge(LogId),
    Vote(Vote<NodeId>, tokio::sync::oneshot::Sender<io::Result<()>>),
    Committed(Option<LogId>),
}

/// The disk log store of one replica.
pub struct LogStore {
    cache: Arc<Mutex<Cache>>,
    ops: mpsc::Sender<Op>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LogStore {
    fn drop(&mut self) {
        // Close the queue, then wait for the writer to finish what was queued, so that the
        // directory can be reopened at once (in-process restarts) without two writers.
        self.ops = mpsc::channel().0;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Reads entries from the cache (used by openraft's replication tasks).
#[derive(Clone)]
pub struct LogReader {
    cache: Arc<Mutex<Cache>>,
}

struct Segment {
    first_index: u64,
    last_index: u64,
    path: PathBuf,
    bytes: u64,
}

struct Writer {
    dir: PathBuf,
    segments: Vec<Segment>,
    current: Option<File>,
    /// Where each unpurged entry's record starts: index → (segment position in `segments`'s
    /// `first_index` terms, byte offset).
    offsets: BTreeMap<u64, (u64, u64)>,
    committed_file: Option<File>,
    segment_bytes: u64,
}

/// Reads the `committed` hint; anything unreadable is no hint.
fn read_committed_hint(dir: &Path) -> Option<LogId> {
    let bytes = fs::read(dir.join("committed")).ok()?;
    let crc = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let len = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let json = bytes.get(8..8usize.checked_add(len)?)?;
    if crc32c::crc32c(json) != crc {
        return None;
    }
    serde_json::from_slice::<Option<LogId>>(json).ok().flatten()
}

fn write_small_file<T: Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
    durable: bool,
) -> io::Result<()> {
    let json = serde_json::to_vec(value).map_err(io::Error::other)?;
    let mut bytes = crc32c::crc32c(&json).to_le_bytes().to_vec();
    bytes.extend_from_slice(&json);
    let temporary = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&temporary)?;
    file.write_all(&bytes)?;
    if durable {
        file.sync_all()?;
    }
    drop(file);
    fs::rename(&temporary, dir.join(name))?;
    if durable {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Reads a file written by `write_small_file`; `Ok(None)` if it is absent. A bad checksum is an
/// error for durable files and `None` for hints.
fn read_small_file<T: DeserializeOwned>(
    dir: &Path,
    name: &str,
    hint: bool,
) -> io::Result<Option<T>> {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let valid = bytes.len() >= 4
        && crc32c::crc32c(&bytes[4..]) == u32::from_le_bytes(bytes[..4].try_into().unwrap());
    if !valid {
        if hint {
            return Ok(None);
        }
        return Err(io::Error::other(format!(
            "{} is corrupt (CRC mismatch at offset 0); it was written atomically, so this is media corruption: restore it or remove the replica's directory and re-add it",
            path.display()
        )));
    }
    serde_json::from_slice(&bytes[4..])
        .map(Some)
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// A decoded segment: entries with their record offsets, the valid prefix length in bytes, and
/// what is wrong after that prefix (if anything).
pub type DecodedSegment = (Vec<(u64, Entry)>, u64, Option<String>);

fn segment_name(first_index: u64) -> String {
    format!("seg-{first_index:020}.log")
}

fn encode_record(entry: &Entry, out: &mut Vec<u8>) -> io::Result<()> {
    let payload = postcard::to_allocvec(entry).map_err(io::Error::other)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| *len <= MAX_RECORD_BYTES)
        .ok_or_else(|| {
            io::Error::other(format!(
                "log entry {} of {} bytes exceeds the record limit",
                entry.log_id,
                payload.len()
            ))
        })?;
    let mut crc = crc32c::crc32c(&len.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &payload);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// Reads the records of one segment. Returns the entries with their offsets and the length of
/// the valid prefix, plus a description of the first bad record if there is one.
fn scan_segment(path: &Path) -> io::Result<DecodedSegment> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(decode_segment(&bytes, path))
}

/// Decodes a segment's bytes (`path` appears in problems): the entries with their record
/// offsets, the length of the valid prefix, and what is wrong after it, if anything. Never
/// panics and never allocates more than the input holds; for recovery, tests and the fuzz target.
pub fn decode_segment(bytes: &[u8], path: &Path) -> DecodedSegment {
    let mut entries = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let bad = |what: &str| Some(format!("{} at byte offset {at}: {what}", path.display()));
        if bytes.len() - at < 8 {
            return (entries, at as u64, bad("record header cut short"));
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
        if len > MAX_RECORD_BYTES || (len as usize) > bytes.len() - at - 8 {
            return (
                entries,
                at as u64,
                bad("record length out of bounds (torn write?)"),
            );
        }
        let payload = &bytes[at + 8..at + 8 + len as usize];
        if crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), payload) != crc {
            return (entries, at as u64, bad("record CRC mismatch"));
        }
        let entry: Entry = match postcard::from_bytes(payload) {
            Ok(entry) => entry,
            Err(e) => {
                return (
                    entries,
                    at as u64,
                    bad(&format!("record does not decode: {e}")),
                )
            }
        };
        if let Some((_, previous)) = entries.last() {
            let previous: &Entry = previous;
            if entry.log_id.index != previous.log_id.index + 1 {
                return (entries, at as u64, bad("log index is not consecutive"));
            }
        }
        entries.push((at as u64, entry));
        at += 8 + len as usize;
    }
    (entries, at as u64, None)
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, recovering its files, and starts the writer thread.
    pub fn open(dir: &Path) -> anyhow::Result<LogStore> {
        Self::open_with_segment_bytes(dir, SEGMENT_BYTES)
    }

    /// [`LogStore::open`], closing segments at `segment_bytes` instead of [`SEGMENT_BYTES`].
    pub fn open_with_segment_bytes(dir: &Path, segment_bytes: u64) -> anyhow::Result<LogStore> {
        fs::create_dir_all(dir)?;
        let vote: Option<Vote<NodeId>> = read_small_file(dir, "vote", false)?;
        let last_purged: Option<LogId> = read_small_file(dir, "purged", false)?;
        let committed = read_committed_hint(dir);
        let mut segment_paths = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(digits) = name
                .strip_prefix("seg-")
                .and_then(|n| n.strip_suffix(".log"))
            {
                if let Ok(first) = digits.parse::<u64>() {
                    segment_paths.push((first, entry.path()));
                }
            }
        }
        segment_paths.sort();
        let mut cache = Cache {
            entries: BTreeMap::new(),
            last_purged,
        };
        let mut segments = Vec::new();
        let mut offsets = BTreeMap::new();
        let count = segment_paths.len();
        let purged_index = last_purged.map(|id| id.index);
        for (position, (_, path)) in segment_paths.into_iter().enumerate() {
            let (entries, valid_bytes, problem) = scan_segment(&path)?;
            if let Some(problem) = problem {
                if position + 1 != count {
                    anyhow::bail!(
                        "Raft log segment {problem}, and newer segments follow it; refusing to start \
                         (committed entries would be lost). Restore the file, or remove this replica's \
                         directory and let it rejoin from a snapshot."
                    );
                }
                tracing::warn!("truncating torn log tail: {problem}");
                let file = OpenOptions::new().write(true).open(&path)?;
                file.set_len(valid_bytes)?;
                file.sync_all()?;
            }
            let (Some((_, first)), Some((_, last))) = (entries.first(), entries.last()) else {
                fs::remove_file(&path)?;
                sync_dir(dir)?;
                continue;
            };
            let (first_index, last_index) = (first.log_id.index, last.log_id.index);
            if let Some(previous) = segments.last() {
                let previous: &Segment = previous;
                if first_index != previous.last_index + 1 {
                    anyhow::bail!(
                        "Raft log segment {} starts at index {first_index} but the previous one ends at {}: \
                         the log has a hole; refusing to start",
                        path.display(),
                        previous.last_index
                    );
                }
            }
            for (offset, entry) in entries {
                let index = entry.log_id.index;
                if purged_index.is_some_and(|purged| index <= purged) {
                    continue;
                }
                offsets.insert(index, (first_index, offset));
                cache.entries.insert(index, entry);
            }
            segments.push(Segment {
                first_index,
                last_index,
                path,
                bytes: valid_bytes,
            });
        }
        let current = match segments.last() {
            Some(segment) => Some(OpenOptions::new().append(true).open(&segment.path)?),
            None => None,
        };
        // The hint is written after the sync of its batch, but openraft may record a commit
        // index before the entries reach this replica's disk. Keep it only if the log holds that
        // very entry (or it is the purge point); otherwise wait for the leader.
        let committed = committed.filter(|hint| {
            Some(*hint) == cache.last_purged
                || cache
                    .entries
                    .get(&hint.index)
                    .is_some_and(|entry| entry.log_id == *hint)
        });
        let writer = Writer {
            dir: dir.to_path_buf(),
            segments,
            current,
            offsets,
            committed_file: None,
            segment_bytes,
        };
        let cache = Arc::new(Mutex::new(cache));
        let (ops, receiver) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || writer.run(receiver))?;
        Ok(LogStore {
            cache,
            ops,
            vote,
            committed,
            writer: Some(writer),
        })
    }

    #[allow(clippy::result_large_err)] // openraft's error type, returned as openraft wants it
    fn send(&self, op: Op) -> Result<(), StorageError> {
        self.ops.send(op).map_err(|_| {
            StorageIOError::write_logs(&io::Error::other("the log writer thread has stopped"))
                .into()
        })
    }
}

impl Writer {
    fn run(mut self, receiver: mpsc::Receiver<Op>) {
        while let Ok(first) = receiver.recv() {
            let mut batch = vec![first];
            while batch.len() < 4096 {
                match receiver.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            let mut flushed = Vec::new();
            let mut votes = Vec::new();
            let mut result: io::Result<()> = Ok(());
            let mut last_committed = None;
            for op in batch {
                if result.is_err() {
                    // After an I/O error nothing later may be reported durable.
                    match op {
                        Op::Append(_, callback) => flushed.push(callback),
                        Op::Vote(_, reply) => {
                            votes.push((reply, Err(io::Error::other("log writer failed earlier"))))
                        }
                        _ => {}
                    }
                    continue;
                }
                match op {
                    Op::Append(entries, callback) => {
                        result = self.append(&entries);
                        flushed.push(callback);
                    }
                    Op::Truncate(since) => result = self.truncate(since),
                    Op::Purge(upto) => result = self.purge(upto),
                    Op::Vote(vote, reply) => {
                        let written = write_small_file(&self.dir, "vote", &vote, true);
                        votes.push((reply, written));
                    }
                    Op::Committed(committed) => last_committed = Some(committed),
                }
            }
            if result.is_ok() {
                if let Some(file) = &self.current {
                    result = file.sync_data();
                }
            }
            if let Some(committed) = last_committed {
                // After the sync: the hint never points past entries that are durable here.
                if let Err(error) = self.write_committed_hint(&committed) {
                    tracing::warn!("cannot write the committed hint: {error}");
                }
            }
            for callback in flushed {
                let outcome = match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                };
                callback.log_io_completed(outcome);
            }
            for (reply, outcome) in votes {
                let _ = reply.send(outcome);
            }
            if let Err(error) = result {
                tracing::error!("Raft log I/O failed in {}: {error}", self.dir.display());
            }
        }
    }

    fn write_committed_hint(&mut self, committed: &Option<LogId>) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.committed_file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(self.dir.join("committed"))?;
            self.committed_file = Some(file);
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

    fn append(&mut self, entries: &[Entry]) -> io::Result<()> {
        let mut buffer = Vec::new();
        for entry in entries {
            let index = entry.log_id.index;
            let needs_new = match self.segments.last() {
                None => true,
                Some(segment) => {
                    self.current.is_none()
                        || segment.bytes + buffer.len() as u64 >= self.segment_bytes
                }
            };
            if needs_new {
                self.flush_buffer(&mut buffer)?;
                if let Some(file) = self.current.take() {
                    file.sync_data()?;
                }
                let path = self.dir.join(segment_name(index));
                let file = OpenOptions::new().create(true).append(true).open(&path)?;
                // A file of this name can only be a leftover of a truncated log: start it empty.
                file.set_len(0)?;
                sync_dir(&self.dir)?;
                self.current = Some(file);
                self.segments.push(Segment {
                    first_index: index,
                    last_index: index,
                    path,
                    bytes: 0,
                });
            }
            let segment = self.segments.last_mut().expect("a segment is open");
            debug_assert!(
                segment.bytes == 0 || index == segment.last_index + 1,
                "log hole at {index}"
            );
            self.offsets.insert(
                index,
                (segment.first_index, segment.bytes + buffer.len() as u64),
            );
            encode_record(entry, &mut buffer)?;
            segment.last_index = index;
        }
        self.flush_buffer(&mut buffer)
    }

    fn flush_buffer(&mut self, buffer: &mut Vec<u8>) -> io::Result<()> {
        if buffer.is_empty() {
            return Ok(());
        }
        let file = self.current.as_mut().expect("a segment is open");
        file.write_all(buffer)?;
        self.segments.last_mut().expect("a segment is open").bytes += buffer.len() as u64;
        buffer.clear();
        Ok(())
    }

    fn truncate(&mut self, since: u64) -> io::Result<()> {
        let Some(&(segment_first, offset)) = self.offsets.get(&since) else {
            return Ok(());
        };
        while self
            .segments
            .last()
            .is_some_and(|s| s.first_index > segment_first)
        {
            let segment = self.segments.pop().expect("checked");
            self.current = None;
            fs::remove_file(&segment.path)?;
        }
        sync_dir(&self.dir)?;
        let segment = self
            .segments
            .last_mut()
            .expect("the entry's segment exists");
        debug_assert_eq!(segment.first_index, segment_first);
        if offset == 0 {
            let segment = self.segments.pop().expect("checked");
            fs::remove_file(&segment.path)?;
            sync_dir(&self.dir)?;
            self.current = match self.segments.last() {
                Some(previous) => Some(OpenOptions::new().append(true).open(&previous.path)?),
                None => None,
            };
        } else {
            let file = OpenOptions::new().append(true).open(&segment.path)?;
            file.set_len(offset)?;
            segment.bytes = offset;
            segment.last_index = since - 1;
            self.current = Some(file);
        }
        self.offsets.split_off(&since);
        Ok(())
    }

    fn purge(&mut self, upto: LogId) -> io::Result<()> {
        write_small_file(&self.dir, "purged", &upto, true)?;
        let mut removed = false;
        while self
            .segments
            .first()
            .is_some_and(|s| s.last_index <= upto.index)
        {
            let segment = self.segments.remove(0);
            if self.segments.is_empty() {
                self.current = None;
            }
            fs::remove_file(&segment.path)?;
            removed = true;
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        self.offsets = self.offsets.split_off(&(upto.index + 1));
        Ok(())
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
        LogReader {
            cache: self.cache.clone(),
        }
        .try_get_log_entries(range)
        .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let cache = self.cache.lock().expect("poisoned");
        let last_log_id = cache
            .entries
            .last_key_value()
            .map(|(_, entry)| entry.log_id)
            .or(cache.last_purged);
        Ok(LogState {
            last_purged_log_id: cache.last_purged,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            cache: self.cache.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let (reply, done) = tokio::sync::oneshot::channel();
        self.send(Op::Vote(*vote, reply))?;
        let written = done
            .await
            .map_err(|_| StorageIOError::write_vote(&io::Error::other("log writer stopped")))?;
        written.map_err(|e| StorageIOError::write_vote(&e))?;
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.committed = committed;
        self.send(Op::Committed(committed))
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
        let entries: Vec<Entry> = entries.into_iter().collect();
        {
            let mut cache = self.cache.lock().expect("poisoned");
            for entry in &entries {
                cache.entries.insert(entry.log_id.index, entry.clone());
            }
        }
        self.send(Op::Append(entries, callback))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.cache
            .lock()
            .expect("poisoned")
            .entries
            .split_off(&log_id.index);
        self.send(Op::Truncate(log_id.index))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        {
            let mut cache = self.cache.lock().expect("poisoned");
            cache.entries = cache.entries.split_off(&(log_id.index + 1));
            cache.last_purged = Some(log_id);
        }
        self.send(Op::Purge(log_id))
    }
}
