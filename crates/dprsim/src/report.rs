//! What a run measured. Times are virtual; loads are counts.

use std::collections::BTreeMap;

/// The published cut at one moment (recorded whenever it changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutSample {
    /// Virtual time, microseconds.
    pub at_us: u64,
    /// The world-line.
    pub world_line: u64,
    /// Smallest version in the cut (over every worker).
    pub min: u64,
    /// Largest version in the cut.
    pub max: u64,
}

/// The finder's (and the metadata store's) load, as counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FinderLoad {
    /// Metadata store calls that only read.
    pub metadata_reads: u64,
    /// Metadata store calls that write (each one transaction).
    pub metadata_writes: u64,
    /// Calls per store method.
    pub per_method: BTreeMap<String, u64>,
    /// Finder refreshes.
    pub refreshes: u64,
    /// Versions above the cut a refresh saw (the precedence graph's vertices), max and mean.
    pub graph_nodes_max: u64,
    /// Mean over refreshes.
    pub graph_nodes_mean: f64,
    /// Dependency entries above the cut (the graph's edges; 0 unless the finder stores them).
    pub graph_edges_max: u64,
    /// Mean over refreshes.
    pub graph_edges_mean: f64,
}

/// The result of one run.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// Virtual seconds of load (the configured duration).
    pub virtual_seconds: f64,
    /// Virtual seconds including the drain after the load stopped.
    pub virtual_seconds_total: f64,
    /// The cut over time.
    pub cut_timeline: Vec<CutSample>,
    /// Commit latency of every batch reported committed by a commit point (issue to the poll
    /// that reported it), virtual milliseconds, ascending.
    pub commit_latency_ms: Vec<f64>,
    /// Finder and metadata load.
    pub finder_load: FinderLoad,
    /// Operations issued.
    pub ops_issued: u64,
    /// Operations reported committed (by commit points or as survivors of a rollback).
    pub ops_committed: u64,
    /// Operations reported lost by a rollback.
    pub ops_lost: u64,
    /// Operations refused by a worker (issued in an abandoned world-line).
    pub ops_rejected: u64,
    /// Operations pending at a failure (may or may not have survived).
    pub ops_uncertain: u64,
    /// Rollbacks handled by sessions (one per session per world-line change).
    pub session_rollbacks: u64,
    /// The final world-line.
    pub world_line: u64,
    /// Every oracle check passed (and the run settled).
    pub verified: bool,
    /// What failed, if anything (at most a few per check).
    pub violations: Vec<String>,
    /// Whether the configured tamper was applied.
    pub tampered: bool,
    /// Events executed.
    pub events: u64,
    /// Digest of the event trace: equal for equal seeds and configs.
    pub trace_digest: u64,
}

impl SimReport {
    /// A quantile (0..=1) of the commit latency, virtual ms (NaN if nothing committed).
    pub fn commit_latency_quantile_ms(&self, q: f64) -> f64 {
        if self.commit_latency_ms.is_empty() {
            return f64::NAN;
        }
        let index = ((self.commit_latency_ms.len() - 1) as f64 * q).round() as usize;
        self.commit_latency_ms[index]
    }

    /// How fast the cut's smallest version grew: versions per virtual second over the run.
    pub fn cut_progress_per_s(&self) -> f64 {
        match (self.cut_timeline.first(), self.cut_timeline.last()) {
            (Some(first), Some(last)) if last.at_us > first.at_us => {
                (last.min - first.min.min(last.min)) as f64 * 1e6
                    / (last.at_us - first.at_us) as f64
            }
            _ => 0.0,
        }
    }

    /// Metadata store calls per virtual second (reads + writes).
    pub fn metadata_ops_per_s(&self) -> f64 {
        (self.finder_load.metadata_reads + self.finder_load.metadata_writes) as f64
            / self.virtual_seconds_total.max(1e-9)
    }

    /// Versions reported persisted per virtual second.
    pub fn reports_per_s(&self) -> f64 {
        self.finder_load
            .per_method
            .get("add_persisted_version")
            .copied()
            .unwrap_or(0) as f64
            / self.virtual_seconds_total.max(1e-9)
    }
}
