//! `prefixkv-bench`: every performance claim of prefixkv as a command.
//!
//! Each experiment is a module under [`experiments`] with an `Args` type (its flags) and a
//! `run(&Common, &Args) -> Result<Report>` function. The harness modules here are shared:
//! [`report`] (the JSON result shape), [`stats`] (medians and percentiles over rounds, latency
//! histograms, the alternating round schedule), [`plot`] (PNG + SVG line charts), [`cost`] (what
//! a checkpoint costs, and the raw write rate it is compared with), [`workload`] (uniform and
//! zipfian keys, FASTER's pre-generated operations, the maps `ycsb` and `cpr` share),
//! [`memory`] (RSS) and [`progress`] (terminal-only progress bars).
//!
//! Shape of an experiment: `plan` (flags and `--quick` defaults into sizes), rounds (each
//! contender once per round, in [`stats::alternating_schedule`] order, one function per round or
//! cell), then the report (config, rows, summary, plots), each step its own function.

pub mod cost;
pub mod experiments;
pub mod memory;
pub mod plot;
pub mod progress;
pub mod report;
pub mod stats;
pub mod workload;

use std::path::PathBuf;

/// Flags every experiment takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Small sizes that finish in under 60 seconds on 2 cores (smoke runs, CI).
    #[arg(long, global = true)]
    pub quick: bool,
    /// Directory for `<experiment>.json`, a timestamped copy, and the plots.
    #[arg(long, global = true, default_value = "results")]
    pub out: PathBuf,
    /// Rounds per contender (each round runs every contender once, order alternating).
    #[arg(long, global = true)]
    pub rounds: Option<usize>,
}

impl Common {
    /// Rounds to run: the flag, or 3 (docs/benchmarks.md's minimum for a comparison).
    pub fn rounds(&self) -> usize {
        self.rounds.unwrap_or(3).max(1)
    }
}
