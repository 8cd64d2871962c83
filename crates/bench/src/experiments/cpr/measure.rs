//! One timed cell of `cpr`: `threads` worker sessions take chunks of the pre-generated operations
//! from a shared cursor (FASTER's method, [`crate::workload::operations`]) while this thread
//! samples their progress every 10 ms and, for a checkpointing contender, requests a checkpoint
//! every `checkpoint_interval` and one more after the workers stop, so that the last checkpoint
//! covers every session's final serial.
//!
//! Invariants: a worker's progress counter only ever holds a serial whose operations have all
//! returned (it is stored after each chunk), so what the counters say before a checkpoint request
//! is a lower bound of what each session had been acknowledged; each worker logs the position of
//! every chunk it ran, in order, so that its serials can be mapped back to operations
//! ([`super::verify`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use prefixkv_engine::{
    CheckpointBreakdown, CheckpointReport, CheckpointToken, EngineError, Store, Strategy,
};

use super::Plan;
use crate::memory::current_rss_bytes;
use crate::stats::ratio;
use crate::workload::operations::{pin_to_core, Chunk, Cursor, Operations};

/// How often the driver samples progress and memory.
const SAMPLE_PERIOD: Duration = Duration::from_millis(10);
/// Width of a timeline bucket.
const TIMELINE_BUCKET_S: f64 = 0.1;

/// One checkpoint as seen by the driver.
#[derive(Debug, Clone)]
pub(super) struct CheckpointWindow {
    pub(super) start_s: f64,
    pub(super) end_s: f64,
    pub(super) duration_ms: f64,
    pub(super) bytes: u64,
    pub(super) rss_before_bytes: u64,
    pub(super) rss_peak_bytes: u64,
    /// Where the checkpoint's time went (the engine's own measurement).
    pub(super) breakdown: CheckpointBreakdown,
}

/// What one (contender, point, round) cell measured.
#[derive(Debug, Clone)]
pub(super) struct Cell {
    pub(super) throughput_ops_per_s: f64,
    pub(super) during_ops_per_s: Option<f64>,
    pub(super) outside_ops_per_s: f64,
    pub(super) checkpoints: Vec<CheckpointWindow>,
    pub(super) peak_rss_bytes: u64,
    /// Largest in-memory log size seen (engine contenders only), and the configured budget.
    pub(super) peak_log_memory_bytes: Option<u64>,
    pub(super) log_memory_budget_bytes: Option<u64>,
    /// (seconds since start, ops/s over the preceding 100 ms).
    pub(super) timeline: Vec<(f64, f64)>,
    /// Whether the image of the last checkpoint (or, without checkpoints, the live store) passed
    /// the stamp rule; `None` for maps, which are not checked.
    pub(super) verified: Option<bool>,
    pub(super) verify_detail: String,
    /// Whether the newest checkpoint requested while the workers ran, recovered from a copy,
    /// passed the stamp rule; `None` where none was published under load (or no checkpoints).
    pub(super) under_load_verified: Option<bool>,
    pub(super) under_load_detail: String,
}

/// A cell's measurement plus what verification needs from the client side.
pub(super) struct Measured {
    pub(super) cell: Cell,
    pub(super) record: ClientRecord,
}

/// What a cell's clients recorded: the reference verification holds the store to.
#[derive(Debug, Clone, Default)]
pub(super) struct ClientRecord {
    /// (session index, last serial) per worker.
    pub(super) final_serials: Vec<(u32, u64)>,
    /// (session index, position of every chunk it ran, in order) per worker.
    pub(super) chunk_logs: Vec<(u32, Vec<u64>)>,
    /// For each checkpoint requested (by version): what each worker (session index) had been
    /// acknowledged before the request, as the workers' own counters said. Verification holds
    /// the recovered checkpoint's CPR points to these, not to what the store reports.
    pub(super) acknowledged_at_request: BTreeMap<u64, Vec<(u32, u64)>>,
}

/// One worker thread's side of a contender for one cell.
pub(super) trait CellWorker {
    /// Runs every operation of `chunk`.
    fn run(&mut self, chunk: &Chunk<'_>) -> Result<()>;
    /// Called once after the last chunk, with the session's last serial.
    fn finish(self: Box<Self>, serial: u64) -> Result<()>;
}

/// Makes the worker of session index `session` (1-based), on that session's thread.
pub(super) type MakeWorker<'a> = dyn Fn(u32) -> Result<Box<dyn CellWorker + 'a>> + Sync + 'a;

/// What a worker thread hands back: its session index, last serial and chunk log.
type WorkerEnd = (u32, u64, Vec<u64>);

/// Runs `threads` workers (session indices 1..=threads, pinned, made before the clock starts)
/// over `operations` for `plan.seconds`, sampling progress every 10 ms; with a `driver`,
/// checkpoints as the module says. `probe` is the store whose log memory is watched.
pub(super) fn measure(
    plan: &Plan,
    threads: usize,
    operations: &Operations,
    make_worker: &MakeWorker<'_>,
    driver: Option<(Strategy, &Arc<Store>)>,
    probe: Option<&Arc<Store>>,
) -> Result<Measured> {
    let stop = AtomicBool::new(false);
    let counters: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let cursor = Cursor::new(operations);
    let ready = Barrier::new(threads + 1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| -> Result<Measured> {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (stop, counter, cursor, ready) = (&stop, &counters[i], &cursor, &ready);
                scope.spawn(move || {
                    pin_to_core(i % cores);
                    let worker = make_worker(i as u32 + 1);
                    ready.wait();
                    work(i as u32 + 1, worker?, cursor, stop, counter)
                })
            })
            .collect();
        ready.wait();
        let mut sampler = Sampler::start(plan, &counters, driver, probe);
        let driven = sampler.run_for(Duration::from_secs_f64(plan.seconds));
        stop.store(true, Ordering::Relaxed);
        let mut ends = Vec::with_capacity(threads);
        for (i, handle) in handles.into_iter().enumerate() {
            let end = handle
                .join()
                .map_err(|_| anyhow::anyhow!("worker {i} panicked"))??;
            ends.push(end);
        }
        driven.context("checkpoint driver")?;
        let final_serials: Vec<(u32, u64)> = ends.iter().map(|e| (e.0, e.1)).collect();
        sampler.finish_checkpoints(&final_serials)?;
        let (cell, acknowledged_at_request) = sampler.into_cell();
        Ok(Measured {
            cell,
            record: ClientRecord {
                final_serials,
                chunk_logs: ends.into_iter().map(|e| (e.0, e.2)).collect(),
                acknowledged_at_request,
            },
        })
    })
}

/// A worker's loop: chunks from the cursor until `stop`, its progress counter stored after each.
fn work(
    session: u32,
    mut worker: Box<dyn CellWorker + '_>,
    cursor: &Cursor<'_>,
    stop: &AtomicBool,
    counter: &AtomicU64,
) -> Result<WorkerEnd> {
    let mut serial = 0u64;
    let mut chunks = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let chunk = cursor.take(session, serial + 1);
        worker.run(&chunk)?;
        serial += chunk.len();
        chunks.push(chunk.position);
        counter.store(serial, Ordering::Relaxed);
    }
    worker.finish(serial)?;
    Ok((session, serial, chunks))
}

/// The driver's state through one cell: samples, checkpoints, peaks.
struct Sampler<'a> {
    plan: &'a Plan,
    counters: &'a [AtomicU64],
    driver: Option<(Strategy, &'a Arc<Store>)>,
    probe: Option<&'a Arc<Store>>,
    start: Instant,
    /// (seconds since start, operations completed, RSS bytes).
    samples: Vec<(f64, u64, u64)>,
    windows: Vec<CheckpointWindow>,
    acknowledged_at_request: BTreeMap<u64, Vec<(u32, u64)>>,
    next_checkpoint: Instant,
    /// The checkpoint in flight: token, start (s), RSS before.
    pending: Option<(CheckpointToken, f64, u64)>,
    peak_rss: u64,
    peak_log: u64,
}

impl<'a> Sampler<'a> {
    fn start(
        plan: &'a Plan,
        counters: &'a [AtomicU64],
        driver: Option<(Strategy, &'a Arc<Store>)>,
        probe: Option<&'a Arc<Store>>,
    ) -> Sampler<'a> {
        let start = Instant::now();
        let mut sampler = Sampler {
            plan,
            counters,
            driver,
            probe,
            start,
            samples: Vec::new(),
            windows: Vec::new(),
            acknowledged_at_request: BTreeMap::new(),
            next_checkpoint: start + plan.checkpoint_interval,
            pending: None,
            peak_rss: 0,
            peak_log: 0,
        };
        let total = sampler.total();
        sampler.samples.push((0.0, total, current_rss_bytes()));
        sampler
    }

    fn total(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Samples every [`SAMPLE_PERIOD`] for `duration`, driving checkpoints; stops early at the
    /// first checkpoint error.
    fn run_for(&mut self, duration: Duration) -> Result<(), EngineError> {
        while self.start.elapsed() < duration {
            std::thread::sleep(SAMPLE_PERIOD); // a sampling period, not a wait for a condition
            let (now, rss) = self.sample();
            if let Some((strategy, store)) = self.driver {
                self.poll_pending(store, now)?;
                if self.pending.is_none() && Instant::now() >= self.next_checkpoint {
                    self.request(strategy, store, now, rss)?;
                }
            }
        }
        Ok(())
    }

    /// Records progress and memory now; returns (seconds since start, RSS).
    fn sample(&mut self) -> (f64, u64) {
        let now = self.start.elapsed().as_secs_f64();
        let rss = current_rss_bytes();
        self.peak_rss = self.peak_rss.max(rss);
        if let Some(store) = self.probe {
            self.peak_log = self.peak_log.max(store.log_memory_in_use_bytes());
        }
        self.samples.push((now, self.total(), rss));
        (now, rss)
    }

    /// Records the checkpoint in flight as a window if it has committed.
    fn poll_pending(&mut self, store: &Store, now: f64) -> Result<(), EngineError> {
        if let Some((token, started_s, rss_before)) = self.pending.take() {
            match store.wait_for_commit(token, Duration::ZERO) {
                Ok(report) => self.close_window(started_s, now, &report, rss_before),
                Err(EngineError::Timeout) => self.pending = Some((token, started_s, rss_before)),
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Requests a checkpoint, noting first what every worker had been acknowledged.
    fn request(
        &mut self,
        strategy: Strategy,
        store: &Store,
        now: f64,
        rss: u64,
    ) -> Result<(), EngineError> {
        // Read before the request: a lower bound of what each worker was acknowledged.
        let acknowledged = acknowledged_now(self.counters);
        let token = store.checkpoint(strategy)?;
        self.acknowledged_at_request
            .insert(token.version, acknowledged);
        self.pending = Some((token, now, rss));
        self.next_checkpoint = Instant::now() + self.plan.checkpoint_interval;
        Ok(())
    }

    fn close_window(&mut self, start_s: f64, end_s: f64, report: &CheckpointReport, rss: u64) {
        let window = window(&self.samples, start_s, end_s, report, rss);
        self.windows.push(window);
    }

    /// After the workers stopped: finishes the checkpoint in flight (it was taken under load
    /// and counts as a window), then takes a final one with the workers quiescent so that
    /// verification covers their ends.
    fn finish_checkpoints(&mut self, final_serials: &[(u32, u64)]) -> Result<()> {
        let Some((strategy, store)) = self.driver else {
            return Ok(());
        };
        let measured_s = self.measured_s();
        if let Some((token, started_s, rss_before)) = self.pending.take() {
            let report = store.wait_for_commit(token, Duration::from_secs(120))?;
            let now = self.start.elapsed().as_secs_f64();
            self.close_window(started_s, now.min(measured_s), &report, rss_before);
        }
        let token = store.checkpoint(strategy)?;
        // The workers have stopped: everything they ran was acknowledged before this request.
        self.acknowledged_at_request
            .insert(token.version, final_serials.to_vec());
        store.wait_for_commit(token, Duration::from_secs(120))?;
        Ok(())
    }

    fn measured_s(&self) -> f64 {
        self.samples.last().map_or(self.plan.seconds, |s| s.0)
    }

    /// The cell's figures: throughput overall, during checkpoints and outside them.
    fn into_cell(self) -> (Cell, BTreeMap<u64, Vec<(u32, u64)>>) {
        let measured_s = self.measured_s();
        let total_ops = self.samples.last().map_or(0, |s| s.1) as f64;
        let (during_ops, during_s) = self.windows.iter().fold((0.0, 0.0), |(ops, secs), w| {
            let end_s = w.end_s.min(measured_s);
            let done = ops_at(&self.samples, end_s) - ops_at(&self.samples, w.start_s);
            (ops + done, secs + (end_s - w.start_s).max(0.0))
        });
        let cell = Cell {
            throughput_ops_per_s: total_ops / measured_s,
            during_ops_per_s: (during_s > 0.0).then(|| during_ops / during_s),
            outside_ops_per_s: ratio(total_ops - during_ops, measured_s - during_s),
            peak_rss_bytes: self.peak_rss,
            peak_log_memory_bytes: self.probe.map(|_| self.peak_log),
            log_memory_budget_bytes: None,
            timeline: timeline(&self.samples),
            checkpoints: self.windows,
            verified: None,
            verify_detail: String::new(),
            under_load_verified: None,
            under_load_detail: String::new(),
        };
        (cell, self.acknowledged_at_request)
    }
}

/// Each worker's (session index, acknowledged serial) from its progress counter, which it
/// stores after every chunk of operations returned.
fn acknowledged_now(counters: &[AtomicU64]) -> Vec<(u32, u64)> {
    counters
        .iter()
        .enumerate()
        .map(|(i, counter)| (i as u32 + 1, counter.load(Ordering::SeqCst)))
        .collect()
}

fn window(
    samples: &[(f64, u64, u64)],
    start_s: f64,
    end_s: f64,
    report: &CheckpointReport,
    rss_before_bytes: u64,
) -> CheckpointWindow {
    let rss_peak_bytes = samples
        .iter()
        .filter(|s| s.0 >= start_s && s.0 <= end_s)
        .map(|s| s.2)
        .max()
        .unwrap_or(rss_before_bytes);
    CheckpointWindow {
        start_s,
        end_s,
        duration_ms: report.duration.as_secs_f64() * 1000.0,
        bytes: report.bytes,
        rss_before_bytes,
        rss_peak_bytes,
        breakdown: report.breakdown,
    }
}

/// Completed operations at time `t`, interpolated between samples.
fn ops_at(samples: &[(f64, u64, u64)], t: f64) -> f64 {
    match samples.iter().position(|s| s.0 >= t) {
        None => samples.last().map_or(0.0, |s| s.1 as f64),
        Some(0) => samples[0].1 as f64,
        Some(i) => {
            let (a, b) = (samples[i - 1], samples[i]);
            let span = b.0 - a.0;
            let fraction = if span > 0.0 { (t - a.0) / span } else { 1.0 };
            a.1 as f64 + fraction * (b.1 as f64 - a.1 as f64)
        }
    }
}

/// Throughput per 100 ms bucket.
fn timeline(samples: &[(f64, u64, u64)]) -> Vec<(f64, f64)> {
    let end = samples.last().map_or(0.0, |s| s.0);
    let mut points = Vec::new();
    let mut t = TIMELINE_BUCKET_S;
    while t <= end + 1e-9 {
        let ops = ops_at(samples, t) - ops_at(samples, t - TIMELINE_BUCKET_S);
        points.push((t, ops / TIMELINE_BUCKET_S));
        t += TIMELINE_BUCKET_S;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_and_timeline() {
        let samples = vec![(0.0, 0, 0), (0.1, 100, 0), (0.2, 300, 0)];
        assert_eq!(ops_at(&samples, 0.05), 50.0);
        assert_eq!(ops_at(&samples, 0.2), 300.0);
        assert_eq!(ops_at(&samples, 5.0), 300.0);
        let t = timeline(&samples);
        assert_eq!(t.len(), 2);
        assert!((t[1].1 - 2000.0).abs() < 1e-6);
    }
}
