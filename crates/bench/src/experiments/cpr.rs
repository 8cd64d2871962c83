//! `prefixkv-bench cpr`: the Persian paper's evaluation on our engine.
//!
//! Workload, as `ycsb` and FASTER's benchmark ([`crate::workload::operations`]): per (mix,
//! distribution), `--operations` operations over `key(0..keys)` (a bijective hash of the index;
//! 8-byte little-endian keys in the engine, `u64` keys in the maps) are generated before anything
//! is timed; a loader writes every key once, then `threads` worker sessions take 3,200-operation
//! chunks from one shared cursor (wrapping around the fixed-size arrays, so memory does not grow
//! with time or threads) for a fixed time while the driver checkpoints every
//! `checkpoint_interval_ms`. Contenders are the engine with no checkpoints, with its batch
//! prefetch hints (`none`) and without them (`none-no-hints`), with each checkpoint strategy
//! (hinted), and two in-memory maps without durability (`dashmap`, `papaya`), all running
//! `ycsb`'s map code ([`crate::workload::maps`]). `engine_over_dashmap` / `engine_over_papaya`
//! are `none-no-hints` over the map, like for like and measured as `ycsb`'s
//! `engine_over_dashmap_siphash` is; `engine_batched_over_*` are `none` (hinted) over maps
//! without lookahead. Contenders alternate over rounds (docs/benchmarks.md, rule 1).
//!
//! Correctness rides along: every upsert writes a value naming its session and serial, and each
//! worker logs the chunks it ran. After a checkpointed run the store is dropped, reopened from its
//! newest checkpoint (taken after the workers stopped), and the recovered image is checked
//! ([`verify`], the stamp rule of [`crate::workload::stamp_rule`]) against the CPR points the
//! checkpoint reported, once those are checked against what each session had been acknowledged.
//! Then the newest checkpoint requested while the workers ran (kept on disk beside the final
//! one) is copied alone into a fresh directory, recovered and checked the same way against the
//! acknowledgements noted at its request (`under_load_verified`, its own check). The `none` runs
//! are checked live, with each session's last serial as its point. A row says
//! `"verified": true` only if its check passed.
//!
//! Steps: [`plan`] (flags into sizes), the cells of every point and round ([`cell`], measured by
//! [`measure`]), then the report ([`summary`]: rows, summary ratios, plots).

use crate::report::Report;
use crate::stats::alternating_schedule;
use crate::workload::operations::{Kind, OperationMix, Operations, CHUNK_OPS};
use crate::workload::KeyDistribution;
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_engine::Strategy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod cell;
mod measure;
mod summary;
mod verify;

use measure::Cell;

/// Flags of `prefixkv-bench cpr`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Worker thread counts to sweep (comma separated). The code works for 64; this machine has 2 cores.
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Operation mixes: r90w10 (default), r50w50, r100.
    #[arg(long, value_delimiter = ',', default_value = "r90w10")]
    pub mixes: Vec<Mix>,
    /// Key distributions: uniform (default), zipfian.
    #[arg(long, value_delimiter = ',', default_value = "uniform")]
    pub distributions: Vec<KeyDistribution>,
    /// Contenders (comma separated): none, none-no-hints, blocking, cpr-copy, fold-over, snapshot,
    /// persian, dashmap, papaya. Default all.
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// Number of distinct keys (8-byte keys, 8-byte values). Default 1,000,000 (quick: 100,000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Pre-generated operations per (mix, distribution); the workers' shared cursor wraps around
    /// them. Default 32,000,000, about 290 MB (quick: 4,000,000).
    #[arg(long)]
    pub operations: Option<u64>,
    /// Measured seconds per (contender, point, round). Default 10 (quick: 1.5).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Milliseconds between checkpoint starts. Default 2000, as the paper (quick: 500).
    #[arg(long)]
    pub checkpoint_interval_ms: Option<u64>,
    /// Persian flusher threads (K). Default: the number of cores.
    #[arg(long)]
    pub flushers: Option<usize>,
    /// The engine's in-memory log budget in MiB. Default: four times the log bytes of the keys
    /// (64 bytes a record), at least 64.
    #[arg(long)]
    pub log_memory_mib: Option<u64>,
    /// Directory for the stores' checkpoints (a fresh subdirectory per run, removed after).
    /// Default: the system temp directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// A read/write mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mix {
    /// 90% reads, 10% upserts (the paper's workload).
    R90w10,
    /// 50% reads, 50% upserts.
    R50w50,
    /// Reads only.
    R100,
}

impl Mix {
    /// Its operations: reads, and upserts for the rest.
    fn operation_mix(self) -> OperationMix {
        let read_percent = match self {
            Mix::R90w10 => 90,
            Mix::R50w50 => 50,
            Mix::R100 => 100,
        };
        OperationMix {
            read_percent,
            write: Kind::Upsert,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mix::R90w10 => "r90w10",
            Mix::R50w50 => "r50w50",
            Mix::R100 => "r100",
        }
    }
}

/// What one contender is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// The engine with its batch hints (prefetches 16 operations ahead); `None` = no checkpoints.
    Engine(Option<Strategy>),
    /// The engine without checkpoints and without hints, one operation at a time as the maps run:
    /// the like-for-like row that `engine_over_dashmap` and `engine_over_papaya` use.
    EngineNoHints,
    /// `dashmap` with SipHash (`ycsb`'s `dashmap-siphash`).
    DashMap,
    /// `papaya` with its default hasher.
    Papaya,
}

impl Contender {
    fn parse(name: &str) -> Result<Contender> {
        Ok(match name {
            "none" => Contender::Engine(None),
            "none-no-hints" => Contender::EngineNoHints,
            "dashmap" => Contender::DashMap,
            "papaya" => Contender::Papaya,
            other => Contender::Engine(Some(other.parse().map_err(|_| {
                anyhow::anyhow!(
                    "unknown variant {other:?}: expected none, none-no-hints, blocking, cpr-copy, fold-over, snapshot, persian, dashmap or papaya"
                )
            })?)),
        })
    }
    fn name(self) -> String {
        match self {
            Contender::Engine(None) => "none".into(),
            Contender::EngineNoHints => "none-no-hints".into(),
            Contender::Engine(Some(strategy)) => strategy.to_string(),
            Contender::DashMap => "dashmap".into(),
            Contender::Papaya => "papaya".into(),
        }
    }
}

/// Sizes after applying `--quick` defaults.
#[derive(Debug, Clone)]
struct Plan {
    threads: Vec<usize>,
    keys: u64,
    operations: u64,
    seconds: f64,
    checkpoint_interval: Duration,
    flushers: usize,
    log_memory_bytes: u64,
    contenders: Vec<Contender>,
    data_dir: PathBuf,
    rounds: usize,
}

/// A parameter point: (mix, distribution, worker threads).
type Point = (Mix, KeyDistribution, usize);

/// cells[(point index, contender index)] = one Cell per round.
type Cells = BTreeMap<(usize, usize), Vec<Cell>>;

/// The contenders run when `--variants` is not given.
const DEFAULT_VARIANTS: [&str; 9] = [
    "none",
    "none-no-hints",
    "blocking",
    "cpr-copy",
    "fold-over",
    "snapshot",
    "persian",
    "dashmap",
    "papaya",
];

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let plan = plan(common, args)?;
    let mut report = Report::new("cpr");
    write_config(&mut report, common, args, &plan);
    let points = points(args, &plan);
    let cells = run_points(&plan, &points)?;
    let headline = summary::headline(&plan, &points);
    summary::write_rows(&mut report, &plan, &points, &cells);
    summary::write_summary(&mut report, &plan, &cells, headline)?;
    summary::write_plots(common, &plan, &points, &cells, headline)?;
    Ok(report)
}

/// The flags with `--quick` defaults applied, checked.
fn plan(common: &Common, args: &Args) -> Result<Plan> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let names: Vec<&str> = match &args.variants {
        Some(names) => names.iter().map(String::as_str).collect(),
        None => DEFAULT_VARIANTS.to_vec(),
    };
    let plan = Plan {
        threads: args.threads.clone().unwrap_or_else(|| {
            if common.quick {
                vec![2]
            } else {
                vec![1, 2]
            }
        }),
        keys: args
            .keys
            .unwrap_or(if common.quick { 100_000 } else { 1_000_000 }),
        operations: args
            .operations
            .unwrap_or(if common.quick { 4_000_000 } else { 32_000_000 }),
        seconds: args
            .seconds
            .unwrap_or(if common.quick { 1.5 } else { 10.0 }),
        checkpoint_interval: Duration::from_millis(
            args.checkpoint_interval_ms
                .unwrap_or(if common.quick { 500 } else { 2000 }),
        ),
        flushers: args.flushers.unwrap_or(cores).max(1),
        log_memory_bytes: args.log_memory_mib.map_or(0, |mib| mib << 20),
        contenders: names
            .into_iter()
            .map(Contender::parse)
            .collect::<Result<Vec<_>>>()?,
        data_dir: args.data_dir.clone().unwrap_or_else(std::env::temp_dir),
        rounds: common.rounds(),
    };
    if plan.threads.is_empty() || plan.threads.contains(&0) {
        bail!("--threads needs one or more positive counts");
    }
    if plan.keys == 0 || plan.operations == 0 {
        bail!("--keys and --operations must be at least 1");
    }
    Ok(plan)
}

/// The run's configuration and notes.
fn write_config(report: &mut Report, common: &Common, args: &Args, plan: &Plan) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    report.config("quick", common.quick);
    report.config("threads", plan.threads.clone());
    report.config("keys", plan.keys);
    report.config("key_bytes", 8);
    report.config("value_bytes", 8);
    report.config("operations_per_point", plan.operations);
    report.config("chunk_operations", CHUNK_OPS);
    report.config(
        "mixes",
        args.mixes.iter().map(|m| m.name()).collect::<Vec<_>>(),
    );
    report.config(
        "distributions",
        args.distributions
            .iter()
            .map(|d| format!("{d:?}").to_lowercase())
            .collect::<Vec<_>>(),
    );
    report.config("seconds_per_cell", plan.seconds);
    report.config(
        "checkpoint_interval_ms",
        plan.checkpoint_interval.as_millis() as u64,
    );
    report.config("flusher_threads", plan.flushers);
    report.config(
        "log_memory_budget_bytes",
        cell::engine_config(plan, Path::new(".")).log_memory_bytes,
    );
    report.config("rounds", plan.rounds);
    report.config(
        "variants",
        plan.contenders.iter().map(|c| c.name()).collect::<Vec<_>>(),
    );
    report.config(
        "durability",
        "engine strategies write fsynced checkpoints; none/dashmap/papaya keep nothing on disk",
    );
    if plan.threads.iter().any(|&t| t > cores) {
        report.notes.push(format!(
            "thread counts above {cores} oversubscribe this {cores}-core machine; the paper swept 1-64 threads"
        ));
    }
    report.notes.push(format!(
        "scaled to {} keys and {} s per cell on a {cores}-core machine",
        plan.keys, plan.seconds
    ));
    report
        .notes
        .push(crate::experiments::ycsb::BATCHED_NOTE.replace("engine-no-hints", "none-no-hints"));
}

/// Every (mix, distribution, threads), mixes outermost, so that points sharing operations are
/// adjacent.
fn points(args: &Args, plan: &Plan) -> Vec<Point> {
    let mut points = Vec::new();
    for &mix in &args.mixes {
        for &distribution in &args.distributions {
            for &threads in &plan.threads {
                points.push((mix, distribution, threads));
            }
        }
    }
    points
}

/// Runs every contender at every point, `plan.rounds` times in alternating order; the operations
/// of a (mix, distribution) are generated once, before its first cell.
fn run_points(plan: &Plan, points: &[Point]) -> Result<Cells> {
    let schedule = alternating_schedule(plan.contenders.len(), plan.rounds);
    let progress = crate::progress::bar((points.len() * schedule.len()) as u64, "cpr");
    let mut cells = Cells::new();
    let mut workloads = 0u64;
    let mut current: Option<((Mix, KeyDistribution), Operations)> = None;
    for (point_index, &(mix, distribution, threads)) in points.iter().enumerate() {
        if current.as_ref().map(|(workload, _)| *workload) != Some((mix, distribution)) {
            drop(current.take()); // free the previous arrays before generating the next
            let seed = 0x5EED_0000 + workloads;
            let operations = Operations::generate(
                mix.operation_mix(),
                distribution,
                plan.keys,
                plan.operations,
                seed,
            );
            current = Some(((mix, distribution), operations));
            workloads += 1;
        }
        let (_, operations) = current.as_ref().expect("generated above");
        for &(round, contender_index) in &schedule {
            let contender = plan.contenders[contender_index];
            progress.set_message(format!(
                "{} {} {threads}t round {round}",
                contender.name(),
                mix.name()
            ));
            let cell = run_one(plan, contender, operations, threads, mix)?;
            cells
                .entry((point_index, contender_index))
                .or_default()
                .push(cell);
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    Ok(cells)
}

/// One cell, with a failed verification reported on the terminal as it happens.
fn run_one(
    plan: &Plan,
    contender: Contender,
    operations: &Operations,
    threads: usize,
    mix: Mix,
) -> Result<Cell> {
    let cell = cell::run_cell(plan, contender, operations, threads)
        .with_context(|| format!("{} at {threads} threads, {}", contender.name(), mix.name()))?;
    if cell.verified == Some(false) {
        eprintln!(
            "cpr: verification FAILED for {} ({} threads, {}): {}",
            contender.name(),
            threads,
            mix.name(),
            cell.verify_detail
        );
    }
    Ok(cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contender_names_round_trip() {
        for name in DEFAULT_VARIANTS {
            assert_eq!(Contender::parse(name).unwrap().name(), name);
        }
        assert!(Contender::parse("bogus").is_err());
    }
}
