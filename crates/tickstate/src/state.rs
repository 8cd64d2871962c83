//! [`TickState`]: the mutator's handle, tying an algorithm, the asynchronous writer and the
//! logical log together.
//!
//! Invariants: only the thread holding the `TickState` (it is `Send`, not `Sync`, and every
//! mutating method takes `&mut self`) reads and writes the state, so the algorithms' single-mutator
//! contract holds. Ticks passed to `point_of_consistency` increase by exactly one, so that the log
//! can tell a complete tick from an unfinished one. The mutator never waits for the writer or for
//! the disk, except in the explicit `wait_*` methods and when the log's bounded queue is full.

use crate::algo::Algorithm;
use crate::error::{Result, TickError};
use crate::recover::{encode_record, recover_inner, RecoveryReport, RECORD_ACTION, RECORD_POINT};
use crate::writer::{run_writer, ImageBase, ImageFiles, ImageStore, ImageWriter, Shared};
use prefixkv_storage::log::{AppendTicket, Log, LogConfig};
use prefixkv_storage::{durable, real_disk, Disk};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to open a [`TickState`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Number of 64-bit cells in the state.
    pub words: usize,
    /// Advise the kernel to back the algorithm's arrays with huge pages (`MADV_HUGEPAGE`).
    pub huge_pages: bool,
    /// The logical log's configuration; `None` turns logical logging off (then `log_action` is an
    /// error, and recovery returns the newest image's state).
    pub log: Option<LogConfig>,
    /// How Ping-Pong's writer builds full images in the double-backup store (Copy from the
    /// previous file, or Merge in memory).
    pub image_base: ImageBase,
    /// Where images go: double-backup files, or the WAL-backed page store.
    pub image_store: ImageStore,
    /// Pin the asynchronous writer to this CPU (the paper runs it on another core than the
    /// mutator); `None`: the scheduler's choice.
    pub writer_cpu: Option<usize>,
    /// The disk every file (images, page store, log) goes through: the real one by default, a
    /// `prefixkv_storage::SimDisk` in power-cut tests.
    pub disk: Arc<dyn Disk>,
}

impl Config {
    /// `words` cells, logging on with the oplog defaults (fsync every group), no huge pages,
    /// Ping-Pong images built by Copy.
    pub fn new(words: usize) -> Config {
        Config {
            words,
            huge_pages: false,
            log: Some(LogConfig::default()),
            image_base: ImageBase::CopyFromFile,
            image_store: ImageStore::DoubleBackup,
            writer_cpu: None,
            disk: real_disk(),
        }
    }
}

/// What [`TickState::point_of_consistency`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointOfConsistency {
    /// A checkpoint of this tick was started (else the writer was still busy and the checkpoint
    /// was deferred to a later point of consistency).
    pub checkpoint_started: bool,
    /// Mutator time spent in the algorithm's `prepare` (bulk copy, flag reset or pointer swap).
    pub prepare_time: Duration,
}

/// Counters of a [`TickState`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Points of consistency.
    pub points: u64,
    /// Checkpoints started.
    pub checkpoints_started: u64,
    /// Points of consistency at which the writer was busy.
    pub checkpoints_deferred: u64,
    /// Images completed by the writer.
    pub images_completed: u64,
    /// Image bytes written (cells and footers).
    pub image_bytes_written: u64,
    /// Bytes of previous images read as a base (Ping-Pong *Copy*; with the WAL store, the
    /// previous versions of changed pages).
    pub base_bytes_read: u64,
    /// WAL store: bytes of WAL frames written (headers included).
    pub wal_frame_bytes_written: u64,
    /// WAL store: bytes the store's checkpoints copied into the database file.
    pub backfill_bytes_written: u64,
    /// Total mutator time in `prepare`.
    pub prepare_time: Duration,
}

/// A state of fixed-size cells owned by one mutator, checkpointed with algorithm `A` and
/// made durable with a logical log. See the crate documentation for an example.
pub struct TickState<A: Algorithm> {
    shared: Arc<Shared<A>>,
    writer: Option<JoinHandle<()>>,
    log: Option<Arc<Log>>,
    tick: u64,
    /// Point-of-consistency records whose durability has not been observed yet.
    unsynced_points: VecDeque<(u64, AppendTicket)>,
    durable_tick: u64,
    next_job_seq: u64,
    record: Vec<u8>,
    stats: Stats,
}

impl<A: Algorithm> TickState<A> {
    /// Open the state kept in `dir` (created if needed): recover it (newest verified image, then
    /// the log through the last complete tick, applying each action with `apply`), and start the
    /// asynchronous writer. Returns the handle, positioned at the recovered tick, and the report.
    pub fn open(
        dir: impl AsRef<Path>,
        config: Config,
        apply: impl FnMut(&mut [u64], u64, &[u8]),
    ) -> Result<(TickState<A>, RecoveryReport)> {
        let dir = dir.as_ref();
        let disk = &config.disk;
        durable::create_dir_all_durably(&**disk, dir)?;
        let recovered = recover_inner(disk, dir, config.words, config.log.clone(), apply)?;
        let mut algorithm = A::new(config.words, config.huge_pages)?;
        algorithm.load(&recovered.cells);
        drop(recovered.cells);
        let files = match config.image_store {
            ImageStore::DoubleBackup => {
                drop(recovered.wal_store);
                ImageWriter::DoubleBackup(ImageFiles::open(
                    &**disk,
                    dir,
                    config.words,
                    recovered.newest_image,
                    recovered.newest_marker_lsn,
                    config.image_base,
                )?)
            }
            ImageStore::PageStoreWal {
                backfill_after_frames,
            } => ImageWriter::Wal(Box::new(crate::wal_store::WalImageWriter::open(
                disk,
                dir,
                config.words,
                recovered.wal_store,
                recovered.newest_marker_lsn,
                backfill_after_frames,
            )?)),
        };
        let completed = recovered.report.image_tick;
        let shared = Arc::new(Shared::new(algorithm, completed));
        let log = recovered.log.map(Arc::new);
        let writer = {
            let shared = Arc::clone(&shared);
            let log = log.clone();
            let cpu = config.writer_cpu;
            std::thread::Builder::new()
                .name("tickstate-writer".into())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        if let Err(error) = crate::pin_current_thread(cpu) {
                            eprintln!("tickstate: could not pin the writer to CPU {cpu}: {error}");
                        }
                    }
                    run_writer(shared, files, log)
                })?
        };
        let state = TickState {
            shared,
            writer: Some(writer),
            log,
            tick: recovered.tick,
            unsynced_points: VecDeque::new(),
            durable_tick: recovered.tick,
            next_job_seq: 0,
            record: Vec::new(),
            stats: Stats::default(),
        };
        Ok((state, recovered.report))
    }

    /// Cell `index` (panics if out of range).
    #[inline]
    pub fn read(&self, index: usize) -> u64 {
        self.shared.algorithm.read(index)
    }

    /// Set cell `index` (panics if out of range).
    #[inline]
    pub fn write(&mut self, index: usize, value: u64) {
        self.shared.algorithm.write(index, value)
    }

    /// Number of cells.
    pub fn words(&self) -> usize {
        self.shared.algorithm.words()
    }

    /// The tick of the last point of consistency (the recovered tick right after `open`).
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// Append an input action of the tick being computed (`tick() + 1`) to the logical log. It
    /// returns at once; the record is made durable by group commit with the tick's other records.
    pub fn log_action(&mut self, action: &[u8]) -> Result<u64> {
        let log = self.log.as_ref().ok_or_else(|| {
            TickError::Usage("log_action: logging is off (Config::log is None)".into())
        })?;
        encode_record(RECORD_ACTION, self.tick + 1, action, &mut self.record);
        Ok(log.append(&self.record)?.lsn())
    }

    /// The state is consistent at the end of tick `tick` (must be `tick() + 1`): log that, and if
    /// the writer is idle, start a checkpoint of this state (the algorithm's `prepare`); if it is
    /// busy, defer. Never waits for the writer or the disk. If the writer has failed, returns
    /// its error (`TickError::WriterFailed`), before or after logging the point.
    pub fn point_of_consistency(&mut self, tick: u64) -> Result<PointOfConsistency> {
        if tick != self.tick + 1 {
            return Err(TickError::Usage(format!(
                "point_of_consistency({tick}) after tick {}: ticks must increase by one",
                self.tick
            )));
        }
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.writer_failure());
        }
        let mut marker_lsn = 0;
        if let Some(log) = &self.log {
            encode_record(RECORD_POINT, tick, &[], &mut self.record);
            let ticket = log.append(&self.record)?;
            marker_lsn = ticket.lsn();
            self.unsynced_points.push_back((tick, ticket));
        }
        self.tick = tick;
        self.stats.points += 1;
        let idle = self.shared.done_seq.load(Ordering::Acquire) == self.next_job_seq;
        if !idle {
            self.stats.checkpoints_deferred += 1;
            return Ok(PointOfConsistency {
                checkpoint_started: false,
                prepare_time: Duration::ZERO,
            });
        }
        // Check again: the writer may have failed since the check above, and a failed writer
        // has exited, so a job handed to it would never be done (`wait_writer_idle` would wait
        // out its timeout). It stores `failed` before `done_seq`, both Release, and we loaded
        // `done_seq` with Acquire: a failure of the job we saw done is visible here.
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.writer_failure());
        }
        let started = Instant::now();
        // SAFETY: we are the only mutator (`&mut self`), and the writer finished every job
        // (`done_seq == next_job_seq`, observed with Acquire).
        unsafe { self.shared.algorithm.prepare() };
        let prepare_time = started.elapsed();
        self.shared.job_tick.store(tick, Ordering::Relaxed);
        self.shared
            .job_marker_lsn
            .store(marker_lsn, Ordering::Relaxed);
        self.next_job_seq += 1;
        self.shared
            .job_seq
            .store(self.next_job_seq, Ordering::Release);
        if let Some(writer) = &self.writer {
            writer.thread().unpark();
        }
        self.stats.checkpoints_started += 1;
        self.stats.prepare_time += prepare_time;
        Ok(PointOfConsistency {
            checkpoint_started: true,
            prepare_time,
        })
    }

    /// The newest tick whose point-of-consistency record is known durable (does not wait).
    pub fn durable_tick(&mut self) -> u64 {
        while let Some((tick, ticket)) = self.unsynced_points.front() {
            if !ticket.is_complete() {
                break;
            }
            self.durable_tick = *tick;
            self.unsynced_points.pop_front();
        }
        self.durable_tick
    }

    /// Wait until the point of consistency of `tick` (or a later one) is durable in the log, and
    /// return the newest tick known durable; points after `tick` may still be in flight (so the
    /// mutator can overlap one tick's log write with the next tick's work, as the paper does).
    pub fn wait_durable_through(&mut self, tick: u64) -> Result<u64> {
        while let Some((front, ticket)) = self.unsynced_points.front() {
            if *front > tick && !ticket.is_complete() {
                break;
            }
            ticket.wait()?;
            self.durable_tick = *front;
            self.unsynced_points.pop_front();
        }
        Ok(self.durable_tick)
    }

    /// Wait until every point of consistency so far is durable in the log; returns the tick.
    /// (With logging off this is the recovered tick plus nothing: only images are durable.)
    pub fn wait_durable(&mut self) -> Result<u64> {
        while let Some((tick, ticket)) = self.unsynced_points.pop_front() {
            ticket.wait()?;
            self.durable_tick = tick;
        }
        Ok(self.durable_tick)
    }

    /// Tick of the newest complete image, if any.
    pub fn checkpointed_tick(&self) -> Option<u64> {
        let tick = self.shared.completed_tick.load(Ordering::Acquire);
        (tick != u64::MAX).then_some(tick)
    }

    /// Whether the writer has finished every checkpoint started.
    pub fn writer_idle(&self) -> bool {
        self.shared.done_seq.load(Ordering::Acquire) == self.next_job_seq
    }

    /// Wait (sleeping briefly between checks, at most `timeout`) until the writer finished every checkpoint started.
    /// Returns whether it did. For tests and orderly shutdown; a game loop never needs it.
    pub fn wait_writer_idle(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        while !self.writer_idle() {
            // A failed writer has exited (after storing `failed`): nothing will become idle.
            if self.shared.failed.load(Ordering::Acquire) {
                return Err(self.writer_failure());
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            // Sleep rather than spin: a spinning waiter takes the core the writer needs.
            std::thread::sleep(Duration::from_micros(100));
        }
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.writer_failure());
        }
        Ok(true)
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        Stats {
            images_completed: self.shared.images_completed.load(Ordering::Relaxed),
            image_bytes_written: self.shared.image_bytes_written.load(Ordering::Relaxed),
            base_bytes_read: self.shared.base_bytes_read.load(Ordering::Relaxed),
            wal_frame_bytes_written: self.shared.wal_frame_bytes_written.load(Ordering::Relaxed),
            backfill_bytes_written: self.shared.backfill_bytes_written.load(Ordering::Relaxed),
            ..self.stats
        }
    }

    /// Bytes of memory the algorithm's arrays reserve.
    pub fn memory_bytes(&self) -> usize {
        self.shared.algorithm.memory_bytes()
    }

    /// Stop the writer after the checkpoint in progress, make the log durable, and report any
    /// writer failure.
    pub fn close(mut self) -> Result<()> {
        self.stop_writer();
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.writer_failure());
        }
        self.wait_durable()?;
        if let Some(log) = self.log.take() {
            if let Ok(log) = Arc::try_unwrap(log) {
                log.close()?;
            }
        }
        Ok(())
    }

    fn stop_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            self.shared.shutdown.store(true, Ordering::Release);
            writer.thread().unpark();
            // A panicking writer already recorded nothing; surface it as a failure.
            if writer.join().is_err() {
                *self
                    .shared
                    .failure
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some("writer thread panicked".into());
                self.shared.failed.store(true, Ordering::Release);
            }
        }
    }

    fn writer_failure(&self) -> TickError {
        let message = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        TickError::WriterFailed(message.unwrap_or_else(|| "unknown error".into()))
    }
}

impl<A: Algorithm> Drop for TickState<A> {
    fn drop(&mut self) {
        self.stop_writer();
    }
}
