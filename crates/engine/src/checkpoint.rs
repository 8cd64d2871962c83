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
//! Request threads never do this work: it all runs here and on the scanner threads.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use crate::checkpoint_files::{ManifestContent, ManifestKind, SegmentSummary, SegmentWriter};
use crate::log::{FLAG_INVALID, FLAG_PRESENT, FLAG_STABLE};
use crate::state::{Phase, SystemState};
use crate::store::{CheckpointReport, Shared};
use crate::{EngineError, SessionId, Strategy};

/// Bumps the epoch with an action that (optionally) stores `next` and waits until it ran. The
/// caller must not hold epoch protection. Drains the epoch itself so that idle stores progress.
pub(crate) fn bump_and_wait(shared: &Arc<Shared>, next: Option<SystemState>) {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    {
        let done = done.clone();
        let target = shared.clone();
        shared.epoch.bump(move || {
            if let Some(state) = next {
                target.state.store(state);
            }
            *done.0.lock() = true;
            done.1.notify_all();
        });
    }
    let mut finished = done.0.lock();
    while !*finished {
        drop(finished);
        shared.epoch.drain();
        finished = done.0.lock();
        if !*finished {
            done.1.wait_for(&mut finished, Duration::from_millis(1));
        }
    }
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
    let _maintenance = shared.maintenance.lock();
    let strategy_index = Strategy::ALL
        .iter()
        .position(|candidate| *candidate == strategy)
        .expect("listed");
    shared
        .running_strategy
        .store(strategy_index as u64, Ordering::Release);
    let result = if strategy == Strategy::Blocking {
        shared.state.store(SystemState {
            phase: Phase::Pause,
            version,
        });
        bump_and_wait(shared, None);
        write_image(shared, strategy, version, cookie, started)
    } else {
        shared.state.store(SystemState {
            phase: Phase::Prepare,
            version,
        });
        let next = |phase| {
            Some(SystemState {
                phase,
                version: version + 1,
            })
        };
        bump_and_wait(shared, next(Phase::InProgress));
        bump_and_wait(shared, next(Phase::WaitPending));
        // This engine has no operations pending on I/O: WAIT_PENDING ends once every session saw it.
        bump_and_wait(shared, next(Phase::WaitFlush));
        write_image(shared, strategy, version, cookie, started)
    };
    {
        let _pause = shared.pause_lock.lock();
        shared.state.store(SystemState {
            phase: Phase::Rest,
            version: version + 1,
        });
        shared.pause_changed.notify_all();
    }
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
    // Every record below `tail` is completely written once this bump's action ran: allocation and
    // writing happen inside one protected operation.
    let tail = shared.log.tail_address();
    bump_and_wait(shared, None);
    let session_points: BTreeMap<SessionId, u64> = shared
        .sessions
        .lock()
        .values()
        .map(|session| (session.id, session.point_for(version)))
        .collect();
    let pending = shared.checkpoints.begin(version)?;
    let threads = shared.config.flusher_threads;
    let (kind, segments): (ManifestKind, Vec<SegmentSummary>) = match strategy {
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
                scan_log_parallel(shared, &pending, 1, version, tail)?,
            )
        }
        Strategy::Snapshot => (
            ManifestKind::LogOrdered,
            scan_log_parallel(shared, &pending, threads, version, tail)?,
        ),
    };
    let records = segments.iter().map(|segment| segment.entries).sum();
    let manifest = ManifestContent {
        version,
        strategy: strategy.name().to_string(),
        kind,
        session_points: session_points
            .iter()
            .map(|(id, point)| (id.0, *point))
            .collect(),
        next_session_id: shared.next_session_id.load(Ordering::SeqCst),
        created_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64),
        cookie,
    };
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
    shared.checkpoints.prune(shared.config.keep_checkpoints)?;
    Ok(CheckpointReport {
        version,
        strategy,
        duration: started.elapsed(),
        bytes: published.bytes,
        records,
        session_points,
        dir: published.dir,
    })
}

/// K scanners over disjoint bucket ranges; each writes one KeyUnique segment, fsynced in parallel.
fn scan_index_parallel(
    shared: &Arc<Shared>,
    pending: &crate::checkpoint_files::PendingCheckpoint,
    threads: usize,
    version: u64,
    cpr_copy: bool,
) -> Result<Vec<SegmentSummary>, EngineError> {
    let buckets = shared.index.bucket_count();
    let threads = threads.clamp(1, buckets);
    let per_thread = buckets.div_ceil(threads);
    write_segments_in_parallel(shared, pending, threads, |index, writer| {
        let range = (index * per_thread).min(buckets)..((index + 1) * per_thread).min(buckets);
        scan_index_range(shared, range, version, cpr_copy, writer)
    })
}

/// Makes the calling thread yield the CPU to request threads: sets its niceness (Linux threads
/// are tasks, so this affects only this thread). Raising niceness needs no privilege; a failure
/// only means the thread keeps the default priority, so it is logged, not fatal.
fn lower_this_thread(nice: i32) {
    // SAFETY: plain syscalls on the calling thread's own id.
    let result = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice)
    };
    if result != 0 {
        tracing::debug!(
            "could not lower checkpoint thread priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Runs `fill(index, writer)` for segments `0..threads`, each on its own scoped thread with its own
/// segment writer, then finishes (fsyncs) every segment. Fails with the first error any thread met.
fn write_segments_in_parallel(
    shared: &Shared,
    pending: &crate::checkpoint_files::PendingCheckpoint,
    threads: usize,
    fill: impl Fn(usize, &mut SegmentWriter) -> Result<(), EngineError> + Sync,
) -> Result<Vec<SegmentSummary>, EngineError> {
    let writers = (0..threads)
        .map(|index| pending.segment_writer(index as u32))
        .collect::<Result<Vec<_>, _>>()?;
    let fill = &fill;
    let nice = (shared.strategy_in_flight() != Strategy::Blocking)
        .then_some(shared.config.checkpoint_thread_nice)
        .filter(|&nice| nice > 0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .into_iter()
            .enumerate()
            .map(|(index, mut writer)| {
                scope.spawn(move || -> Result<SegmentSummary, EngineError> {
                    if let Some(nice) = nice {
                        lower_this_thread(nice);
                    }
                    fill(index, &mut writer)?;
                    writer.finish()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("checkpoint segment thread panicked"))
            .collect()
    })
}

/// How many chain heads ahead the index scan prefetches. Records lie in the log in write order,
/// not in bucket order, so each chain head is a cache miss (profiled: 96 % of the scan's time was
/// the load of the record's first word); issuing the loads early overlaps them.
const PREFETCH_HEADS_AHEAD: usize = 16;

/// Emits the newest version <= v, non-tombstone record of every key whose chain starts in `range`.
fn scan_index_range(
    shared: &Shared,
    range: std::ops::Range<usize>,
    version: u64,
    cpr_copy: bool,
    writer: &mut SegmentWriter,
) -> Result<(), EngineError> {
    let log = &shared.log;
    // Compaction is excluded while a checkpoint runs, so begin does not move and no page is freed.
    let begin = log.begin_address();
    let mut heads = Vec::new();
    // Records of this chain whose key is settled (emitted, or a tombstone <= v): older records
    // of the same key are skipped. Most chains hold one key, so this stays empty or tiny.
    let mut settled: Vec<crate::log::Record<'_>> = Vec::new();
    let mut key = Vec::new();
    let mut value = Vec::new();
    let chunk = 4096;
    let mut start = range.start;
    while start < range.end {
        let end = (start + chunk).min(range.end);
        heads.clear();
        shared
            .index
            .for_each_entry(start..end, |head| heads.push(head));
        for (position, &head) in heads.iter().enumerate() {
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
                if word0 & FLAG_INVALID != 0 || word0 & FLAG_STABLE != 0 {
                    continue;
                }
                if settled.iter().any(|other| other.same_key(&record)) {
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
                    settled.push(record);
                    if found {
                        key.clear();
                        record.copy_key(&mut key);
                        writer.put(record_version, &key, &value)?;
                    }
                }
            }
        }
        start = end;
    }
    Ok(())
}

/// Log records with version <= v in `[begin, tail)`, in address order, split into `threads`
/// contiguous page ranges (segment i before segment i+1), written in parallel.
fn scan_log_parallel(
    shared: &Arc<Shared>,
    pending: &crate::checkpoint_files::PendingCheckpoint,
    threads: usize,
    version: u64,
    tail: u64,
) -> Result<Vec<SegmentSummary>, EngineError> {
    let log = &shared.log;
    let page_bytes = log.page_bytes() as u64;
    let begin = log.begin_address();
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
        if from < until {
            log.scan(from, until, |record| {
                let word0 = record.word0();
                debug_assert!(word0 & FLAG_PRESENT != 0);
                if word0 & (FLAG_INVALID | FLAG_STABLE) != 0 || record.version() > version {
                    return true;
                }
                key.clear();
                record.copy_key(&mut key);
                let result = if record.read_value(&mut value) {
                    writer.put(record.version(), &key, &value)
                } else {
                    writer.tombstone(record.version(), &key)
                };
                match result {
                    Ok(()) => true,
                    Err(error) => {
                        failure = Some(error);
                        false
                    }
                }
            });
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::lower_this_thread;

    #[test]
    fn lowering_a_thread_changes_only_that_thread() {
        // SAFETY: plain syscalls on thread ids of this process.
        let niceness = || unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        };
        let before = niceness();
        let target = (before + 7).min(19);
        let lowered = std::thread::spawn(move || {
            lower_this_thread(target);
            niceness()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, target);
        assert_eq!(niceness(), before, "the calling thread keeps its priority");
    }
}
