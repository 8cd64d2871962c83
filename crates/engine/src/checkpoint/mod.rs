//! The checkpoint driver: runs the CPR state machine for one version on the checkpoint thread and
//! writes the image of that version with the chosen strategy.
//!
//! REST(v) → PREPARE(v) → IN_PROGRESS(v+1) → WAIT_PENDING(v+1) → WAIT_FLUSH(v+1) → REST(v+1).
//! Each transition is an epoch trigger action: the driver publishes nothing itself after PREPARE;
//! the action that stores the next phase runs only once every protected session has refreshed
//! since the previous phase was stored, so a session adopts phases in order and never skips one
//! while inside an operation. When WAIT_FLUSH begins, every session runs as v+1 and no v operation
//! is in flight, so the newest record with version <= v of every key is final for v.
//!
//! Strategies (see `docs/engine.md`): `persian` and `cpr-copy` scan the index (KeyUnique
//! segments); `fold-over` and `snapshot` scan the log in address order (LogOrdered segments);
//! `blocking` pauses every session at a barrier and scans the index while the world waits.
//! Request threads never do this work: it all runs here and on the scanner threads. Those threads
//! (and their I/O threads) run under the checkpoint's priority, `SCHED_IDLE` while the checkpoint
//! keeps up with its floor rate and the fixed niceness once it falls behind; this driver is the
//! watchdog that raises them (`checkpoint_priority.rs` states why a save always finishes).

pub(crate) mod incremental;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::checkpoint_files::{
    ManifestContent, ManifestKind, SegmentSummary, SegmentWriter, WriteTimes,
};
use crate::checkpoint_priority::{ThreadPriority, WATCHDOG_TICK};
use crate::log::{FLAG_INVALID, FLAG_PRESENT, FLAG_STABLE};
use crate::report::{CheckpointBreakdown, CheckpointReport, Scope};
use crate::shared::{DurableTier, Shared, REFRESH_CHAINS};
use crate::state::{Phase, SystemState};
use crate::{EngineError, SessionId, Strategy};

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if result != 0 {
        // Only for measuring: an unsupported clock reads as no time, never as an error.
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The CPR version switch from `version` (in REST) to `version + 1`: PREPARE(v), then
/// IN_PROGRESS, WAIT_PENDING and `last` of v+1, each stored only once every protected session
/// refreshed since the previous one. So once `last` is stored, every session runs as v+1 and no
/// operation of v is in flight. The caller owns the phase changes (a checkpoint driver, or a seal
/// under `seal_lock`).
pub(crate) fn switch_version(shared: &Arc<Shared>, version: u64, last: Phase) {
    shared.publish_phase(Phase::Prepare, version);
    let world_line = shared.state.load().world_line;
    let next = |phase| {
        Some(SystemState {
            phase,
            version: version + 1,
            world_line,
        })
    };
    shared.bump_and_wait(next(Phase::InProgress));
    shared.bump_and_wait(next(Phase::WaitPending));
    shared.bump_and_wait(next(last));
}

/// Each session's CPR point in `version`, once no session runs as `version` any more (after
/// [`switch_version`]).
pub(crate) fn session_points(shared: &Shared, version: u64) -> BTreeMap<SessionId, u64> {
    shared
        .sessions
        .lock()
        .values()
        .map(|session| (session.id, session.point_for(version)))
        .collect()
}

/// Runs one checkpoint of `version`. Always leaves the store in REST(version + 1).
pub(crate) fn run(
    shared: &Arc<Shared>,
    strategy: Strategy,
    version: u64,
    cookie: Vec<u8>,
    started: Instant,
) -> Result<CheckpointReport, EngineError> {
    if version >= u32::MAX as u64 {
        return Err(EngineError::InvalidArgument(
            "record versions are 32 bits and this store has used them all".into(),
        ));
    }
    let _maintenance = shared.compaction.lock_maintenance();
    shared.machine.set_strategy(strategy);
    let result = if strategy == Strategy::Blocking {
        shared.publish_phase(Phase::Pause, version);
        shared.bump_and_wait(None);
        write_image(shared, strategy, version, cookie, started)
    } else if strategy == Strategy::FoldOver && shared.log.is_tiered() {
        // The log's fold-over onto the page file: only what is not on disk yet is written.
        incremental::checkpoint(shared, version, cookie, started)
    } else {
        // This engine has no operations pending on I/O: WAIT_PENDING ends once every session saw it.
        switch_version(shared, version, Phase::WaitFlush);
        write_image(shared, strategy, version, cookie, started)
    };
    {
        shared
            .pause
            .release(|| shared.publish_phase(Phase::Rest, version + 1));
    }
    // Compaction was excluded while the checkpoint ran.
    shared.request_compaction();
    result
}

/// Writes the checkpoint of `version`, which a [`Store::seal`](crate::Store::seal) already
/// closed: no phase changes (sessions run versions above it meanwhile, and may seal more), a
/// log scan of the records of `version` and below (`Scope::Full`) or of those above the base
/// (`Scope::Since`), published with the CPR points the seal recorded.
///
/// Why the scan sees exactly the state of `version`: the seal returned once no session ran as
/// `version` or below, so every such record was allocated before `tail` is read here, and the
/// bump below waits until each one is completely written; with `rollback_ready` (required by
/// `seal`) no later operation changes a record of an older version in place (`must_copy`), and
/// compaction, which copies records with their versions, is excluded while this runs.
pub(crate) fn run_sealed(
    shared: &Arc<Shared>,
    version: u64,
    scope: Scope,
    session_points: BTreeMap<SessionId, u64>,
    cookie: Vec<u8>,
    started: Instant,
) -> Result<CheckpointReport, EngineError> {
    let _maintenance = shared.compaction.lock_maintenance();
    let maintenance_wait = started.elapsed();
    let strategy = Strategy::FoldOver;
    shared.machine.set_strategy(strategy);
    let phases = started.elapsed();
    let tail = shared.log.tail_address();
    shared.bump_and_wait(None);
    let pending = shared.checkpoints.begin(version)?;
    let begin = shared.log.begin_address();
    let image_started = Instant::now();
    shared.log.shift_read_only(tail);
    let (kind, above, from) = match scope {
        Scope::Full => (ManifestKind::LogOrdered, 0, begin),
        Scope::Since(base) => (
            ManifestKind::LogDelta { base },
            base,
            // No record of a version above the base lies below the tail of the moment the store
            // first let a session run as one (`RollbackState::note_allowed`).
            shared
                .rollback
                .purge_bound(base)
                .unwrap_or(begin)
                .max(begin),
        ),
    };
    let scanned = scan_log_parallel(shared, &pending, 1, (above, version), (from, tail));
    if let Err(EngineError::CheckpointAborted { .. }) = &scanned {
        // What a rollback waited for (it stops this checkpoint and takes the state machine).
        tracing::info!(
            version,
            maintenance_wait_ms = maintenance_wait.as_secs_f64() * 1e3,
            image_ms = image_started.elapsed().as_secs_f64() * 1e3,
            "checkpoint of a sealed version stopped by a rollback"
        );
    }
    let image = ImageWritten::of_segments(pending, kind, scanned?, phases, image_started);
    let result = publish_image(
        shared,
        strategy,
        version,
        image,
        session_points,
        cookie,
        started,
    );
    drop(_maintenance);
    // Compaction was excluded while the checkpoint ran.
    shared.request_compaction();
    result
}

fn write_image(
    shared: &Arc<Shared>,
    strategy: Strategy,
    version: u64,
    cookie: Vec<u8>,
    started: Instant,
) -> Result<CheckpointReport, EngineError> {
    let phases = started.elapsed();
    // Every record below `tail` is completely written once this bump's action ran: allocation and
    // writing happen inside one protected operation.
    let tail = shared.log.tail_address();
    shared.bump_and_wait(None);
    let session_points = session_points(shared, version);
    let pending = shared.checkpoints.begin(version)?;
    let threads = shared.config.flusher_threads;
    // Compaction is excluded while a checkpoint runs (the maintenance lock): begin stays put.
    let begin = shared.log.begin_address();
    let image_started = Instant::now();
    let (kind, (segments, breakdown)): (ManifestKind, (Vec<SegmentSummary>, _)) = match strategy {
        Strategy::Persian => (
            ManifestKind::KeyUnique,
            scan_index_parallel(shared, &pending, threads, version, false)?,
        ),
        Strategy::CprCopy => (
            ManifestKind::KeyUnique,
            scan_index_parallel(shared, &pending, 1, version, true)?,
        ),
        Strategy::Blocking => (
            ManifestKind::KeyUnique,
            scan_index_parallel(shared, &pending, 1, version, false)?,
        ),
        Strategy::FoldOver => {
            // Fold the log: everything up to the version switch becomes read-only.
            shared.log.shift_read_only(tail);
            (
                ManifestKind::LogOrdered,
                scan_log_parallel(shared, &pending, 1, (0, version), (begin, tail))?,
            )
        }
        Strategy::Snapshot => (
            ManifestKind::LogOrdered,
            scan_log_parallel(shared, &pending, threads, (0, version), (begin, tail))?,
        ),
    };
    let image =
        ImageWritten::of_segments(pending, kind, (segments, breakdown), phases, image_started);
    publish_image(
        shared,
        strategy,
        version,
        image,
        session_points,
        cookie,
        started,
    )
}

/// What the scan of one checkpoint wrote, before it is published.
pub(crate) struct ImageWritten {
    pub(crate) pending: crate::checkpoint_files::PendingCheckpoint,
    pub(crate) kind: ManifestKind,
    pub(crate) segments: Vec<SegmentSummary>,
    pub(crate) breakdown: CheckpointBreakdown,
    /// Time from the request to the start of the image.
    pub(crate) phases: Duration,
    pub(crate) image_started: Instant,
    /// An incremental checkpoint's tier image (`ManifestKind::Incremental`).
    pub(crate) tier: Option<crate::checkpoint_files::TierImage>,
    /// Bytes written outside the segments (an incremental checkpoint's index copy and pages).
    pub(crate) written_bytes: u64,
}

impl ImageWritten {
    /// An image of segment files only (every kind but the incremental checkpoint).
    fn of_segments(
        pending: crate::checkpoint_files::PendingCheckpoint,
        kind: ManifestKind,
        (segments, breakdown): (Vec<SegmentSummary>, CheckpointBreakdown),
        phases: Duration,
        image_started: Instant,
    ) -> ImageWritten {
        ImageWritten {
            pending,
            kind,
            segments,
            breakdown,
            phases,
            image_started,
            tier: None,
            written_bytes: 0,
        }
    }
}

/// Writes the MANIFEST of a scanned image and publishes it: sessions' commit points, rollback
/// targets and pruning follow. Refuses (nothing published) once a rollback asked it to stop.
pub(crate) fn publish_image(
    shared: &Arc<Shared>,
    strategy: Strategy,
    version: u64,
    image: ImageWritten,
    session_points: BTreeMap<SessionId, u64>,
    cookie: Vec<u8>,
    started: Instant,
) -> Result<CheckpointReport, EngineError> {
    let ImageWritten {
        pending,
        kind,
        segments,
        mut breakdown,
        phases,
        image_started,
        tier,
        written_bytes,
    } = image;
    breakdown.phases = phases;
    breakdown.image = image_started.elapsed();
    let publish_started = Instant::now();
    let records = segments.iter().map(|segment| segment.entries).sum();
    let manifest = ManifestContent {
        version,
        strategy: strategy.name().to_string(),
        kind,
        session_points: session_points
            .iter()
            .map(|(id, point)| (id.0, *point))
            .collect(),
        next_session_id: shared.sessions.next_id(),
        created_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64),
        cookie,
        tier: tier.clone(),
    };
    // A rollback that discards this version asked for it to stop (checked last, for every
    // strategy; the log scans also check as they go): the draft is dropped, nothing published.
    if shared.machine.abort_requested() {
        return Err(EngineError::CheckpointAborted { version });
    }
    let published = pending.publish(manifest, segments)?;
    {
        let mut sessions = shared.sessions.lock();
        for (id, point) in &session_points {
            if let Some(session) = sessions.get(&id.0) {
                session.committed.fetch_max(*point, Ordering::SeqCst);
                // Bounded manifests: a session dropped after its last operation, all of which this
                // published checkpoint holds, has nothing left to report; the next manifest leaves
                // it out. (Under the registry lock, so `resume_session` cannot claim it meanwhile.)
                if session.finished_by(*point) {
                    sessions.remove(&id.0);
                }
            }
        }
    }
    shared
        .rollback
        .record_published(version, session_points.clone());
    shared.machine.forget_sealed_through(version);
    if let Some(tier) = &tier {
        let begin_page = tier.begin / shared.log.page_bytes() as u64;
        shared.durable_tier.lock().retain(version, begin_page);
    }
    let pruned = shared.checkpoints.prune(shared.config.keep_checkpoints)?;
    shared.rollback.forget_published(&pruned);
    shared.durable_tier.lock().forget(&pruned);
    breakdown.publish = publish_started.elapsed();
    Ok(CheckpointReport {
        version,
        strategy,
        duration: started.elapsed(),
        bytes: published.bytes + written_bytes,
        records,
        session_points,
        dir: published.dir,
        breakdown,
    })
}
/// K scanners over disjoint bucket ranges; each writes one KeyUnique segment, fsynced in parallel.
fn scan_index_parallel(
    shared: &Arc<Shared>,
    pending: &crate::checkpoint_files::PendingCheckpoint,
    threads: usize,
    version: u64,
    cpr_copy: bool,
) -> Result<(Vec<SegmentSummary>, CheckpointBreakdown), EngineError> {
    let buckets = shared.index.bucket_count();
    let threads = threads.clamp(1, buckets);
    let per_thread = buckets.div_ceil(threads);
    // Persian lets v+1 writers update emitted keys in place; the other index scans copy.
    let persian = shared.strategy_in_flight() == Strategy::Persian;
    if persian {
        shared.scan_progress.begin(version, threads, per_thread);
    }
    write_segments_in_parallel(shared, pending, threads, |index, writer| {
        let range = (index * per_thread).min(buckets)..((index + 1) * per_thread).min(buckets);
        let progress = persian.then_some((&shared.scan_progress, index));
        scan_index_range(shared, range, version, cpr_copy, progress, writer)
    })
}

/// Runs `fill(index, writer)` for segments `0..threads`, each on its own scoped thread with its own
/// segment writer, then finishes (fsyncs) every segment. Fails with the first error any thread met.
/// `fill` returns the time it spent reading the index; the breakdown's `phases`, `image` and
/// `publish` are left for the caller.
///
/// Except under the `blocking` strategy, the segment threads and their I/O threads run under the
/// checkpoint's priority (`checkpoint_priority.rs`), and the calling thread is the watchdog that
/// raises them when the checkpoint falls behind: it waits for the threads' ends at most a tick at
/// a time.
fn write_segments_in_parallel(
    shared: &Shared,
    pending: &crate::checkpoint_files::PendingCheckpoint,
    threads: usize,
    fill: impl Fn(usize, &mut SegmentWriter) -> Result<Duration, EngineError> + Sync,
) -> Result<(Vec<SegmentSummary>, CheckpointBreakdown), EngineError> {
    let priority = (shared.strategy_in_flight() != Strategy::Blocking)
        .then(|| ThreadPriority::for_config(&shared.config))
        .flatten();
    let writers = (0..threads)
        .map(|index| pending.segment_writer_with_priority(index as u32, priority.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let fill = &fill;
    let (ended, ends) = std::sync::mpsc::channel::<()>();
    let (segments, mut breakdown) = std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .into_iter()
            .enumerate()
            .map(|(index, mut writer)| {
                let priority = priority.clone();
                let ended = ended.clone();
                // Named for profiles and for tests that watch a scanner wait
                // (`tests/tier_checkpoint.rs`); 15 bytes, the kernel's limit, up to index 9.
                let builder = std::thread::Builder::new().name(format!("prefixkv-scan-{index}"));
                let spawned = builder.spawn_scoped(scope, move || -> Result<_, EngineError> {
                    // Sends on every exit, an error's too, so the watchdog below stops waiting.
                    let _ended = SendOnDrop(ended);
                    let _registered = priority.as_ref().map(|priority| priority.enter());
                    let (cpu_started, wall_started) = (thread_cpu_time(), Instant::now());
                    let index_scan = fill(index, &mut writer)?;
                    let (summary, times) = writer.finish()?;
                    let thread = ThreadTimes {
                        cpu: thread_cpu_time().saturating_sub(cpu_started),
                        wall: wall_started.elapsed(),
                        index_scan,
                        writes: times,
                    };
                    Ok((summary, thread))
                });
                // As `scope.spawn` would: the checkpoint thread's panic becomes its failure.
                spawned.expect("spawning a checkpoint segment thread")
            })
            .collect();
        if let Some(priority) = &priority {
            let mut running = handles.len();
            while running > 0 {
                match ends.recv_timeout(WATCHDOG_TICK) {
                    Ok(()) => running -= 1,
                    Err(_) => {
                        priority.check();
                    }
                }
            }
        }
        let mut segments = Vec::with_capacity(handles.len());
        let mut breakdown = CheckpointBreakdown::default();
        let mut failure = None;
        for handle in handles {
            match handle.join().expect("checkpoint segment thread panicked") {
                Ok((summary, thread)) => {
                    segments.push(summary);
                    breakdown.threads += 1;
                    breakdown.thread_cpu += thread.cpu;
                    breakdown.thread_wall += thread.wall;
                    breakdown.index_scan += thread.index_scan;
                    breakdown.records += thread
                        .wall
                        .saturating_sub(thread.index_scan + thread.writes.total());
                    breakdown.writes.add(&thread.writes);
                }
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok((segments, breakdown)),
        }
    })?;
    breakdown.priority_raised_after = priority.and_then(|priority| priority.raised_after());
    Ok((segments, breakdown))
}

/// Sends one message when dropped: a segment thread's end, however it ends.
struct SendOnDrop(std::sync::mpsc::Sender<()>);

impl Drop for SendOnDrop {
    fn drop(&mut self) {
        // The watchdog may have stopped listening (it only waits while threads run).
        let _ = self.0.send(());
    }
}

/// One segment thread's times, folded into a [`CheckpointBreakdown`].
struct ThreadTimes {
    cpu: Duration,
    wall: Duration,
    index_scan: Duration,
    writes: WriteTimes,
}

/// How many chain heads ahead the index scan prefetches. Records lie in the log in write order,
/// not in bucket order, so each chain head is a cache miss (profiled: 96 % of the scan's time was
/// the load of the record's first word); issuing the loads early overlaps them.
const PREFETCH_HEADS_AHEAD: usize = 16;

/// The keys of one chain that are settled (emitted, or a tombstone <= v): older records of the
/// same key are skipped. Copies, not `Record`s: a scanner of a tiered store suspends its epoch
/// protection around a blocking append, mid-chain, and a record it got before is invalid after
/// that. Most chains hold one key, so this stays tiny.
#[derive(Default)]
struct SettledKeys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl SettledKeys {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    fn contains(&self, record: &crate::log::Record<'_>) -> bool {
        let mut start = 0;
        self.ends.iter().any(|&end| {
            let same = record.key_equals(&self.bytes[start..end]);
            start = end;
            same
        })
    }

    /// Settles the record's key; returns the copy.
    fn push(&mut self, record: &crate::log::Record<'_>) -> &[u8] {
        let start = self.bytes.len();
        record.copy_key(&mut self.bytes);
        self.ends.push(self.bytes.len());
        &self.bytes[start..]
    }
}

/// Emits the newest version <= v, non-tombstone record of every key whose chain starts in `range`.
/// With `progress` (Persian: the progress record and this scanner's number), publishes each chunk
/// of buckets once it is emitted. Returns the time spent reading chain heads from the index.
///
/// In a tiered store the scanner runs under epoch protection (eviction frees pages while
/// checkpoints run): refreshed every [`REFRESH_CHAINS`] chains, suspended around appends that
/// may block; it keeps addresses, never records, across those points.
fn scan_index_range(
    shared: &Shared,
    range: std::ops::Range<usize>,
    version: u64,
    cpr_copy: bool,
    progress: Option<(&crate::scan_progress::ScanProgress, usize)>,
    writer: &mut SegmentWriter,
) -> Result<Duration, EngineError> {
    let log = &shared.log;
    // Compaction is excluded while a checkpoint runs (eviction, a tiered store's only page
    // freer besides, leaves it alone), so begin does not move.
    let begin = log.begin_address();
    // A checkpoint never overlaps a rollback (one state machine at a time) and PURGE flags every
    // invalid record before it ends, so this is empty; checked anyway, it costs nothing.
    let invalid = shared.rollback.invalid();
    let protection = shared.thread_epoch();
    let mut heads = Vec::new();
    let mut settled = SettledKeys::default();
    let mut value = Vec::new();
    let chunk = 4096;
    let mut start = range.start;
    let mut index_scan = Duration::ZERO;
    while start < range.end {
        // The previous chunk's records read from the storage tier (`log::cold`).
        crate::log::release_cold_copies();
        protection.protect();
        let end = (start + chunk).min(range.end);
        heads.clear();
        let index_started = Instant::now();
        shared
            .index
            .for_each_entry(start..end, |head| heads.push(head));
        index_scan += index_started.elapsed();
        for (position, &head) in heads.iter().enumerate() {
            if protection.is_active() && position % REFRESH_CHAINS == REFRESH_CHAINS - 1 {
                crate::log::release_cold_copies();
                protection.protect();
            }
            if let Some(&ahead) = heads.get(position + PREFETCH_HEADS_AHEAD) {
                if ahead >= begin {
                    log.prefetch(ahead);
                }
            }
            settled.clear();
            let mut address = head;
            while address >= begin && address != 0 {
                let record = log.record(address);
                let word0 = record.word0();
                address = record.previous();
                if word0 & FLAG_INVALID != 0
                    || word0 & FLAG_STABLE != 0
                    || invalid.contains(record.version())
                {
                    continue;
                }
                if settled.contains(&record) {
                    continue;
                }
                let emitted_version;
                let mut found = false;
                if cpr_copy {
                    // Capture under the record lock: a v+1 writer swaps in the stable copy and the
                    // new version atomically with respect to this lock.
                    let guard = record.lock();
                    let record_version = record.version();
                    if record_version <= version {
                        value.clear();
                        found = !record.is_tombstone();
                        if found {
                            guard.copy_value(&mut value);
                        }
                        emitted_version = Some(record_version);
                    } else {
                        let stable = record.stable_address();
                        if record_version == version + 1 && stable >= begin && stable != 0 {
                            let stable_record = log.record(stable);
                            found = stable_record.read_value(&mut value);
                            emitted_version = Some(stable_record.version());
                        } else {
                            emitted_version = None;
                        }
                    }
                    drop(guard);
                } else {
                    let record_version = record.version();
                    if record_version <= version {
                        found = record.read_value(&mut value);
                        emitted_version = Some(record_version);
                    } else {
                        emitted_version = None;
                    }
                }
                if let Some(record_version) = emitted_version {
                    let key = settled.push(&record);
                    if found {
                        // `record` is not used past this point: the suspension may free it.
                        let blocks = writer.append_may_block(key.len(), value.len());
                        if blocks {
                            protection.suspend();
                        }
                        let appended = writer.put(record_version, key, &value);
                        if blocks {
                            protection.protect();
                        }
                        appended?;
                    }
                }
            }
        }
        protection.suspend();
        // Every value of the chunk is in the writer's buffer: writers may now change its keys.
        if let Some((progress, thread)) = progress {
            progress.advance(thread, end);
        }
        start = end;
    }
    Ok(index_scan)
}

/// Records a log-scanning checkpoint writes between checks for a rollback's abort request.
const ABORT_CHECK_RECORDS: u64 = 4096;

/// Log records with a version in `(above, version]` in `[from, tail)`, in address order, split
/// into `threads` contiguous page ranges (segment i before segment i+1), written in parallel. A
/// whole image has `above` 0 and `from` the begin address; a delta has `above` its base and
/// `from` a bound below every record of a version above the base.
fn scan_log_parallel(
    shared: &Arc<Shared>,
    pending: &crate::checkpoint_files::PendingCheckpoint,
    threads: usize,
    (above, version): (u64, u64),
    (from, tail): (u64, u64),
) -> Result<(Vec<SegmentSummary>, CheckpointBreakdown), EngineError> {
    let log = &shared.log;
    let page_bytes = log.page_bytes() as u64;
    let begin = from.max(log.begin_address());
    let invalid = shared.rollback.invalid();
    // Dead records of crashed runs (a tiered store recovered from an incremental checkpoint).
    let holes = shared.durable_tier.lock().holes_from(0);
    let first_page = begin / page_bytes;
    let end_page = tail.div_ceil(page_bytes).max(first_page + 1);
    let pages = end_page - first_page;
    let threads = (threads as u64).clamp(1, pages);
    let per_thread = pages.div_ceil(threads);
    write_segments_in_parallel(shared, pending, threads as usize, |index, writer| {
        let index = index as u64;
        let from = ((first_page + index * per_thread) * page_bytes).max(begin);
        let until = ((first_page + (index + 1) * per_thread) * page_bytes).min(tail);
        let mut failure = None;
        let mut key = Vec::new();
        let mut value = Vec::new();
        // A tiered store's eviction frees pages while this runs: the same protection as the
        // index scan's (`scan_index_range`); `scan` re-resolves each address it moves to.
        let protection = shared.thread_epoch();
        if from < until {
            let mut visited = 0u64;
            protection.protect();
            log.scan(from, until, |record| {
                visited += 1;
                let check = visited.is_multiple_of(ABORT_CHECK_RECORDS);
                if check && shared.machine.abort_requested_relaxed() {
                    failure = Some(EngineError::CheckpointAborted { version });
                    return false;
                }
                let keep = (|| {
                    let word0 = record.word0();
                    debug_assert!(word0 & FLAG_PRESENT != 0);
                    if word0 & (FLAG_INVALID | FLAG_STABLE) != 0
                        || record.version() > version
                        || record.version() <= above
                        || invalid.contains(record.version())
                        || DurableTier::is_dead(&holes, record.address, record.version())
                    {
                        return true;
                    }
                    key.clear();
                    record.copy_key(&mut key);
                    let record_version = record.version();
                    let live = record.read_value(&mut value);
                    // `record` is not used past this point: the suspension may free it.
                    let blocks = writer.append_may_block(key.len(), value.len());
                    if blocks {
                        protection.suspend();
                    }
                    let result = if live {
                        writer.put(record_version, &key, &value)
                    } else {
                        writer.tombstone(record_version, &key)
                    };
                    if blocks {
                        protection.protect();
                    }
                    match result {
                        Ok(()) => true,
                        Err(error) => {
                            failure = Some(error);
                            false
                        }
                    }
                })();
                if check {
                    // Done with `record`: a refresh may let eviction free its page.
                    protection.protect();
                }
                keep
            });
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(Duration::ZERO),
        }
    })
}
