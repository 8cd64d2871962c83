//! prefixkv-dprsim: libDPR's real objects under a seeded discrete-event network simulation.
//!
//! What is real: [`prefixkv_dpr::DprWorker`] over the in-memory [`VersionedMap`] state object
//! (whose snapshots are really written and fsynced), [`prefixkv_dpr::DprSession`], the three
//! finders, the [`prefixkv_dpr::cluster::ClusterManager`] and a SQLite metadata file. What is
//! simulated: time (a virtual clock in microseconds), the network (every request, response and
//! restore command is a message with a sampled delay, so messages reorder), when a commit becomes
//! durable ([`object::SimObject`]), timers (commit interval with jitter, finder refresh, session
//! polls, heartbeats, manager checks) and failures (a worker crash drops its memory and its
//! un-reported commits; the manager finds it by lease expiry and restarts it).
//!
//! Invariant: one thread drives every libDPR object in the order of one seeded event queue, so a
//! config (seed included) fixes the trace; [`SimReport::trace_digest`] is its fingerprint. Real
//! time is spent only in SQLite and snapshot I/O, which cannot change an outcome; loads are
//! reported as counts.
//!
//! The oracle ([`oracle`]) trusts only what sessions were told. It is not the engine worker
//! process: see `docs/simulation.md` for the limits.
//!
//! [`VersionedMap`]: prefixkv_dpr::state_object::VersionedMap

pub mod config;
pub mod object;
pub mod oracle;
pub mod queue;
pub mod report;
mod sim;
pub mod store;

pub use config::{CommitMode, Delay, Failure, FinderKind, SimConfig, Tamper};
pub use report::{CutSample, FinderLoad, SimReport};

/// Why a run could not finish (a libDPR call failed where the protocol says it cannot).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A worker call failed.
    #[error(transparent)]
    Worker(#[from] prefixkv_dpr::worker::WorkerError),
    /// A session call failed.
    #[error(transparent)]
    Session(#[from] prefixkv_dpr::session::SessionError),
    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] prefixkv_dpr::metadata::MetadataError),
    /// The state object failed.
    #[error(transparent)]
    StateObject(#[from] prefixkv_dpr::state_object::StateObjectError),
    /// A persistence callback reported an error.
    #[error("persisting a version failed: {0}")]
    Persist(String),
    /// The run's directory.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Runs one simulation. Sessions issue batches until `config.duration`; the run then drains
/// (commit intervals, a lease and a restart) until every worker is up and no recovery is under
/// way, and finally every session learns of any rollback and the oracle runs its last checks.
pub fn run(config: SimConfig) -> Result<SimReport, SimError> {
    let duration = config.duration.as_micros() as u64;
    let drain_until = duration
        + 10 * config.commit_interval.as_micros() as u64
        + config.lease.as_micros() as u64
        + config.restart_delay.as_micros() as u64;
    let cap = drain_until + 2 * duration + 1_000_000;
    let mut sim = sim::Sim::new(config)?;
    while let Some(event) = sim.queue.pop() {
        let now = sim.queue.now();
        if now >= drain_until && sim.settled()? {
            break;
        }
        if now >= cap {
            sim.report
                .violations
                .push("the cluster did not settle after the load stopped".into());
            break;
        }
        sim.handle(event)?;
    }
    sim.finish()
}
