//! What a simulation run is: cluster size, workload, timings (all virtual), failures and seed.

use std::path::PathBuf;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::RngExt;

use crate::queue::Micros;

/// Which libDPR finder the cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FinderKind {
    /// [`prefixkv_dpr::finder::ExactFinder`]: the precedence graph in the metadata store.
    Exact,
    /// [`prefixkv_dpr::finder::ApproximateFinder`]: `Vmin` over persisted versions.
    Approximate,
    /// [`prefixkv_dpr::finder::HybridFinder`]: the graph in memory, `Vmin` as the fallback.
    Hybrid,
}

impl FinderKind {
    /// Lower-case name (rows, file names).
    pub fn name(self) -> &'static str {
        match self {
            FinderKind::Exact => "exact",
            FinderKind::Approximate => "approximate",
            FinderKind::Hybrid => "hybrid",
        }
    }
}

/// A distribution of virtual delays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delay {
    /// Always the same.
    Fixed(Duration),
    /// Uniform in `[min, max]`.
    Uniform {
        /// Smallest delay.
        min: Duration,
        /// Largest delay.
        max: Duration,
    },
    /// `min` plus an exponential tail with mean `mean_extra`: mostly short, occasionally long,
    /// which is what reorders messages.
    Exponential {
        /// Smallest delay.
        min: Duration,
        /// Mean of the part above `min`.
        mean_extra: Duration,
    },
}

impl Delay {
    /// One sample, in virtual microseconds.
    pub fn sample(&self, rng: &mut StdRng) -> Micros {
        let us = |d: Duration| d.as_micros() as u64;
        match *self {
            Delay::Fixed(d) => us(d),
            Delay::Uniform { min, max } => rng.random_range(us(min)..=us(max).max(us(min))),
            Delay::Exponential { min, mean_extra } => {
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                // Capped at 20 means so one sample cannot stall a run.
                us(min)
                    + (-(u.ln()) * us(mean_extra) as f64).min(20.0 * us(mean_extra) as f64) as u64
            }
        }
    }
}

/// How a worker's periodic commit numbers versions (the worker method it calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitMode {
    /// `commit`: every `commit_interval` (+ jitter), seal and move to the next number.
    Plain,
    /// `commit_with_catch_up` (§3.4): the sealed version is labelled at least `Vmax`.
    CatchUp,
    /// `commit_to(slot)` at wall-clock slot boundaries, skipped when the version already reached
    /// the slot: what the engine cluster's workers do. Each worker's clock is off by a fixed
    /// skew in `[0, commit_jitter]`.
    AlignedSlots,
}

/// A worker crash at a virtual time (it stops, loses its memory and is restarted by the
/// manager's restore command after [`SimConfig::restart_delay`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Virtual time of the crash.
    pub at: Duration,
    /// Which worker.
    pub worker: usize,
}

/// Deliberate corruption, to show the oracle catches a broken guarantee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tamper {
    /// Before the first rollback check runs, delete one operation a session was told is
    /// committed from its worker's state.
    EraseCommittedOperation,
}

/// One simulation run. Every time is virtual; see [`SimConfig::new`] for the defaults.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Workers (each a `DprWorker` over a `VersionedMap`).
    pub workers: usize,
    /// Client sessions.
    pub sessions: usize,
    /// Batches in flight per session.
    pub window: usize,
    /// Operations per batch.
    pub batch: usize,
    /// Time between a session's batch issues (when its window allows).
    pub think: Duration,
    /// The finder.
    pub finder: FinderKind,
    /// Each worker commits (seals a version, with `Vmax` catch-up) this often...
    pub commit_interval: Duration,
    /// ...plus a uniform jitter in `[0, commit_jitter]`.
    pub commit_jitter: Duration,
    /// One-way network delay of every message.
    pub network: Delay,
    /// From a commit to its version being durable (and reported).
    pub persist: Delay,
    /// Finder refresh period.
    pub refresh_interval: Duration,
    /// Each session reads the published cut (its commit point) this often.
    pub poll_interval: Duration,
    /// Worker heartbeat period.
    pub heartbeat_interval: Duration,
    /// The manager fails a worker silent for longer than this.
    pub lease: Duration,
    /// Cluster manager check period.
    pub manager_interval: Duration,
    /// From a failed worker receiving its restart command to it running again.
    pub restart_delay: Duration,
    /// Injected crashes.
    pub failures: Vec<Failure>,
    /// Sessions issue batches until this virtual time; the run then drains.
    pub duration: Duration,
    /// The seed: same seed and config, same trace.
    pub seed: u64,
    /// How workers pick the version a commit moves to.
    pub commit_mode: CommitMode,
    /// Workers fast-forward by relabelling the unsealed version (`FastForward::Relabel`, what the
    /// engine cluster uses) instead of sealing it. Sound with the exact finder only: with the
    /// others the oracle reports broken prefixes (a test shows it).
    pub relabel: bool,
    /// Deliberate corruption (tests of the oracle only).
    pub tamper: Option<Tamper>,
    /// Parent directory of the run's files (default `/dev/shm` if present, else the temp dir).
    pub data_dir: Option<PathBuf>,
}

impl SimConfig {
    /// Defaults: one session per worker, window 4, 4 operations per batch, a batch per 1 ms per
    /// session, 10 ms commit interval (+ up to 2 ms jitter), network 100 µs + exp(150 µs),
    /// persistence 1–4 ms, refresh and poll every 2.5 ms, heartbeat 5 ms, lease 25 ms, manager
    /// every 5 ms, restart 10 ms, 500 ms of load, no failures, commits with `Vmax` catch-up,
    /// fast-forward by sealing.
    pub fn new(workers: usize, finder: FinderKind, seed: u64) -> Self {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        Self {
            workers,
            sessions: workers,
            window: 4,
            batch: 4,
            think: ms(1),
            finder,
            commit_interval: ms(10),
            commit_jitter: ms(2),
            network: Delay::Exponential {
                min: us(100),
                mean_extra: us(150),
            },
            persist: Delay::Uniform {
                min: ms(1),
                max: ms(4),
            },
            refresh_interval: us(2_500),
            poll_interval: us(2_500),
            heartbeat_interval: ms(5),
            lease: ms(25),
            manager_interval: ms(5),
            restart_delay: ms(10),
            failures: Vec::new(),
            duration: ms(500),
            seed,
            commit_mode: CommitMode::CatchUp,
            relabel: false,
            tamper: None,
            data_dir: None,
        }
    }

    /// The same config with one crash of worker `workers / 2` at half the duration.
    pub fn with_failure_midway(mut self) -> Self {
        self.failures.push(Failure {
            at: self.duration / 2,
            worker: self.workers / 2,
        });
        self
    }
}
