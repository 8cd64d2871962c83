//! `prefixkv-bench cpr`: the Persian paper's evaluation on our engine.
//!
//! Every contender runs the same deterministic workload (`prefixkv_engine::oracle`): a loader
//! session writes every key once, then `threads` worker sessions run a read/upsert mix for a fixed
//! time while the driver checkpoints every `checkpoint_interval_ms`. Contenders are the engine
//! with no checkpoints (`none`), with each checkpoint strategy, and two in-memory maps without
//! durability (`dashmap`, `papaya`). Contenders alternate over rounds (BENCHMARKS.md rule 1).
//!
//! Correctness rides along: after a checkpointed run the store is dropped, reopened from its
//! newest checkpoint, and the recovered image is checked against the oracle with the CPR points
//! the checkpoint reported. The `none` run is checked live, with each session's last serial as
//! its point. A row says `"verified": true` only if that passed.

use crate::memory::current_rss_bytes;
use crate::plot::{write_line_chart, LineChart, Marker, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Spread};
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_engine::{SessionId, Store, StoreConfig, Strategy};
use prefixkv_testkit::oracle::{self, Op, WorkloadSpec};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod verify;
use verify::{recovery_bounds, verify, verify_recovery};

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
    pub distributions: Vec<crate::workload::KeyDistribution>,
    /// Contenders (comma separated): none, blocking, cpr-copy, fold-over, snapshot, persian, dashmap, papaya.
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// Number of distinct keys (8-byte keys, 8-byte values). Default 1,000,000 (quick: 100,000).
    #[arg(long)]
    pub keys: Option<u64>,
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
    fn read_percent(self) -> u32 {
        match self {
            Mix::R90w10 => 90,
            Mix::R50w50 => 50,
            Mix::R100 => 100,
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
    /// The engine; `None` = no checkpoints.
    Engine(Option<Strategy>),
    DashMap,
    Papaya,
}

impl Contender {
    fn parse(name: &str) -> Result<Contender> {
        Ok(match name {
            "none" => Contender::Engine(None),
            "dashmap" => Contender::DashMap,
            "papaya" => Contender::Papaya,
            other => Contender::Engine(Some(other.parse().map_err(|_| {
                anyhow::anyhow!(
                    "unknown variant {other:?}: expected none, blocking, cpr-copy, fold-over, snapshot, persian, dashmap or papaya"
                )
            })?)),
        })
    }
    fn name(self) -> String {
        match self {
            Contender::Engine(None) => "none".into(),
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
    seconds: f64,
    checkpoint_interval: Duration,
    flushers: usize,
    log_memory_bytes: u64,
    contenders: Vec<Contender>,
    data_dir: PathBuf,
}

/// One checkpoint as seen by the driver.
#[derive(Debug, Clone)]
struct CheckpointWindow {
    start_s: f64,
    end_s: f64,
    duration_ms: f64,
    bytes: u64,
    rss_before_bytes: u64,
    rss_peak_bytes: u64,
    /// Where the checkpoint's time went (the engine's own measurement).
    breakdown: prefixkv_engine::CheckpointBreakdown,
}

/// What one (contender, point, round) cell measured.
#[derive(Debug, Clone)]
struct Cell {
    throughput_ops_per_s: f64,
    during_ops_per_s: Option<f64>,
    outside_ops_per_s: f64,
    checkpoints: Vec<CheckpointWindow>,
    peak_rss_bytes: u64,
    /// Largest in-memory log size seen (engine contenders only), and the configured budget.
    peak_log_memory_bytes: Option<u64>,
    log_memory_budget_bytes: Option<u64>,
    /// (seconds since start, ops/s over the preceding 100 ms).
    timeline: Vec<(f64, f64)>,
    verified: Option<bool>,
    verify_detail: String,
}

const SAMPLE_PERIOD: Duration = Duration::from_millis(10);
const TIMELINE_BUCKET_S: f64 = 0.1;

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let contenders = match &args.variants {
        Some(names) => names
            .iter()
            .map(|n| Contender::parse(n))
            .collect::<Result<Vec<_>>>()?,
        None => [
            "none",
            "blocking",
            "cpr-copy",
            "fold-over",
            "snapshot",
            "persian",
            "dashmap",
            "papaya",
        ]
        .iter()
        .map(|n| Contender::parse(n))
        .collect::<Result<Vec<_>>>()?,
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
        seconds: args
            .seconds
            .unwrap_or(if common.quick { 1.5 } else { 10.0 }),
        checkpoint_interval: Duration::from_millis(
            args.checkpoint_interval_ms
                .unwrap_or(if common.quick { 500 } else { 2000 }),
        ),
        flushers: args.flushers.unwrap_or(cores).max(1),
        log_memory_bytes: args.log_memory_mib.map_or(0, |mib| mib << 20),
        contenders,
        data_dir: args.data_dir.clone().unwrap_or_else(std::env::temp_dir),
    };
    if plan.threads.is_empty() || plan.threads.contains(&0) {
        bail!("--threads needs one or more positive counts");
    }
    if plan.keys == 0 {
        bail!("--keys must be at least 1");
    }
    let rounds = common.rounds();

    let mut report = Report::new("cpr");
    report.config("quick", common.quick);
    report.config("threads", plan.threads.clone());
    report.config("keys", plan.keys);
    report.config("key_bytes", 8);
    report.config("value_bytes", 8);
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
        engine_config(&plan, Path::new(".")).log_memory_bytes,
    );
    report.config("rounds", rounds);
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

    let mut points: Vec<(Mix, crate::workload::KeyDistribution, usize)> = Vec::new();
    for &mix in &args.mixes {
        for &distribution in &args.distributions {
            for &threads in &plan.threads {
                points.push((mix, distribution, threads));
            }
        }
    }
    let schedule = alternating_schedule(plan.contenders.len(), rounds);
    let progress = crate::progress::bar((points.len() * schedule.len()) as u64, "cpr");
    // cells[(point index, contender index)] = one Cell per round.
    let mut cells: BTreeMap<(usize, usize), Vec<Cell>> = BTreeMap::new();
    for (point_index, &(mix, distribution, threads)) in points.iter().enumerate() {
        for &(round, contender_index) in &schedule {
            let contender = plan.contenders[contender_index];
            progress.set_message(format!(
                "{} {} {threads}t round {round}",
                contender.name(),
                mix.name()
            ));
            let spec = WorkloadSpec {
                keys: plan.keys,
                read_percent: mix.read_percent(),
                delete_percent: 0,
                cycle: cycle_ops(plan.keys),
                zipfian: distribution == crate::workload::KeyDistribution::Zipfian,
                seed: 0x5EED_0000 + round as u64,
            };
            let cell = run_cell(&plan, contender, &spec, threads).with_context(|| {
                format!("{} at {threads} threads, {}", contender.name(), mix.name())
            })?;
            if cell.verified == Some(false) {
                eprintln!(
                    "cpr: verification FAILED for {} ({} threads, {}): {}",
                    contender.name(),
                    threads,
                    mix.name(),
                    cell.verify_detail
                );
            }
            cells
                .entry((point_index, contender_index))
                .or_default()
                .push(cell);
            progress.inc(1);
        }
    }
    progress.finish_and_clear();

    // Rows: one per (point, contender), medians over rounds.
    for (&(point_index, contender_index), runs) in &cells {
        let (mix, distribution, threads) = points[point_index];
        let contender = plan.contenders[contender_index];
        let mut r = row([
            ("variant", Value::from(contender.name())),
            ("threads", Value::from(threads)),
            ("mix", Value::from(mix.name())),
            (
                "distribution",
                Value::from(format!("{distribution:?}").to_lowercase()),
            ),
        ]);
        let throughput: Vec<f64> = runs.iter().map(|c| c.throughput_ops_per_s).collect();
        Spread::of(&throughput).insert_into(&mut r, "throughput_ops_per_s");
        let during: Vec<f64> = runs.iter().filter_map(|c| c.during_ops_per_s).collect();
        let outside: Vec<f64> = runs.iter().map(|c| c.outside_ops_per_s).collect();
        let windows: Vec<&CheckpointWindow> =
            runs.iter().flat_map(|c| c.checkpoints.iter()).collect();
        let durations: Vec<f64> = windows.iter().map(|w| w.duration_ms).collect();
        let bytes: Vec<f64> = windows.iter().map(|w| w.bytes as f64).collect();
        let growth: Vec<f64> = windows
            .iter()
            .map(|w| w.rss_peak_bytes.saturating_sub(w.rss_before_bytes) as f64)
            .collect();
        let null_if_nan = |x: f64| {
            if x.is_finite() {
                Value::from(x)
            } else {
                Value::Null
            }
        };
        r.insert(
            "throughput_during_checkpoint_ops_per_s".into(),
            null_if_nan(Spread::of(&during).median),
        );
        r.insert(
            "throughput_outside_checkpoint_ops_per_s".into(),
            null_if_nan(Spread::of(&outside).median),
        );
        r.insert("checkpoints".into(), Value::from(windows.len()));
        r.insert(
            "checkpoint_duration_ms".into(),
            null_if_nan(Spread::of(&durations).median),
        );
        r.insert(
            "checkpoint_bytes".into(),
            null_if_nan(Spread::of(&bytes).median),
        );
        let costs: Vec<_> = windows.iter().map(|w| (w.breakdown, w.bytes)).collect();
        if !costs.is_empty() {
            crate::cost::insert_into(&mut r, &costs, report.host.cpu_mhz);
        }
        r.insert(
            "checkpoint_rss_growth_bytes".into(),
            null_if_nan(Spread::of(&growth).median),
        );
        r.insert(
            "peak_rss_bytes".into(),
            Value::from(runs.iter().map(|c| c.peak_rss_bytes).max().unwrap_or(0)),
        );
        let peak_log = runs.iter().filter_map(|c| c.peak_log_memory_bytes).max();
        r.insert(
            "peak_log_memory_bytes".into(),
            peak_log.map_or(Value::Null, Value::from),
        );
        let budget = runs.iter().find_map(|c| c.log_memory_budget_bytes);
        r.insert(
            "log_memory_budget_bytes".into(),
            budget.map_or(Value::Null, Value::from),
        );
        let verified = runs
            .iter()
            .map(|c| c.verified)
            .try_fold(true, |acc, v| v.map(|ok| acc && ok));
        r.insert("verified".into(), verified.map_or(Value::Null, Value::from));
        if let Some(ok) = verified {
            report.record_verification(ok);
        }
        report.rows.push(r);
    }

    // Summary at the largest thread count, r90w10 uniform (or the first point if that was not run).
    let largest = *plan.threads.iter().max().expect("threads is not empty");
    let headline = points
        .iter()
        .position(|&(m, d, t)| {
            m == Mix::R90w10 && d == crate::workload::KeyDistribution::Uniform && t == largest
        })
        .unwrap_or(points.len() - 1);
    let median_of = |name: &str, f: &dyn Fn(&Cell) -> Option<f64>| -> f64 {
        let Some(index) = plan.contenders.iter().position(|c| c.name() == name) else {
            return f64::NAN;
        };
        let values: Vec<f64> = cells
            .get(&(headline, index))
            .map(|runs| runs.iter().filter_map(f).collect())
            .unwrap_or_default();
        Spread::of(&values).median
    };
    let total = |c: &Cell| Some(c.throughput_ops_per_s);
    let during = |c: &Cell| c.during_ops_per_s;
    let outside = |c: &Cell| Some(c.outside_ops_per_s);
    type Metric<'a> = &'a dyn Fn(&Cell) -> Option<f64>;
    // (summary field, numerator variant and metric, denominator variant and metric)
    let ratios: [(&str, &str, Metric, &str, Metric); 7] = [
        (
            "persian_over_cpr_copy",
            "persian",
            &total,
            "cpr-copy",
            &total,
        ),
        ("persian_over_none", "persian", &total, "none", &total),
        (
            "persian_during_over_outside",
            "persian",
            &during,
            "persian",
            &outside,
        ),
        (
            "blocking_during_over_outside",
            "blocking",
            &during,
            "blocking",
            &outside,
        ),
        (
            "cpr_copy_during_over_outside",
            "cpr-copy",
            &during,
            "cpr-copy",
            &outside,
        ),
        ("engine_over_dashmap", "none", &total, "dashmap", &total),
        ("engine_over_papaya", "none", &total, "papaya", &total),
    ];
    for (field, top, top_metric, bottom, bottom_metric) in ratios {
        report.summary(
            field,
            ratio(median_of(top, top_metric), median_of(bottom, bottom_metric)),
        );
    }
    let dataset_bytes = (plan.keys * 16) as f64;
    let growth = |c: &Cell| {
        let g: Vec<f64> = c
            .checkpoints
            .iter()
            .map(|w| w.rss_peak_bytes.saturating_sub(w.rss_before_bytes) as f64)
            .collect();
        (!g.is_empty()).then(|| Spread::of(&g).median)
    };
    report.summary(
        "persian_memory_overhead",
        median_of("persian", &growth) / dataset_bytes,
    );
    report.summary(
        "cpr_copy_memory_overhead",
        median_of("cpr-copy", &growth) / dataset_bytes,
    );
    summarise_costs(&plan, &mut report, &median_of)?;

    write_plots(common, &plan, &points, &cells, headline)?;
    Ok(report)
}

/// The median of a per-cell metric over the rounds of one contender (by name) at the headline
/// point.
type MedianOf<'a> = dyn Fn(&str, &dyn Fn(&Cell) -> Option<f64>) -> f64 + 'a;

/// Persian's cost figures at the headline point (the median over rounds of each round's median
/// over its checkpoints), against the raw write rate of the data directory (pacing is off in
/// `cpr`).
fn summarise_costs(plan: &Plan, report: &mut Report, median_of: &MedianOf) -> Result<()> {
    crate::cost::summarise(report, &plan.data_dir, &|figure| {
        median_of("persian", &|c| {
            let values: Vec<f64> = c
                .checkpoints
                .iter()
                .map(|w| figure(&(w.breakdown, w.bytes)))
                .collect();
            (!values.is_empty()).then(|| Spread::of(&values).median)
        })
    })
}

/// Runs one contender at one point for one round.
fn run_cell(
    plan: &Plan,
    contender: Contender,
    spec: &WorkloadSpec,
    threads: usize,
) -> Result<Cell> {
    // Before anything is timed, as FASTER's benchmark does: the timed loops only index arrays.
    let ops: Vec<SessionOps> = (1..=threads as u32)
        .map(|session_index| SessionOps::generate(spec, session_index))
        .collect();
    let ops = &ops;
    match contender {
        Contender::Engine(strategy) => run_engine_cell(plan, strategy, spec, threads, ops),
        Contender::DashMap => {
            let map: dashmap::DashMap<[u8; 8], [u8; 8]> =
                dashmap::DashMap::with_capacity(plan.keys as usize);
            run_map_cell(
                plan,
                spec,
                threads,
                ops,
                &|k, v| {
                    map.insert(k, v);
                },
                &|k| map.get(&k).map(|v| *v),
            )
        }
        Contender::Papaya => {
            let map: papaya::HashMap<[u8; 8], [u8; 8]> =
                papaya::HashMap::with_capacity(plan.keys as usize);
            run_map_cell(
                plan,
                spec,
                threads,
                ops,
                &|k, v| {
                    map.pin().insert(k, v);
                },
                &|k| map.pin().get(&k).copied(),
            )
        }
    }
}

/// Operations per worker session the workload repeats (its `cycle`), generated before timing:
/// twice the key count, so every key is drawn many times per cycle, within 64K..16M (about 150 MB
/// of arrays per session at most).
fn cycle_ops(keys: u64) -> u64 {
    keys.saturating_mul(2).clamp(1 << 16, 1 << 24)
}

/// One worker session's operations `1..=cycle`, generated before timing.
struct SessionOps {
    keys: Vec<[u8; 8]>,
    reads: Vec<bool>,
}

impl SessionOps {
    fn generate(spec: &WorkloadSpec, session_index: u32) -> SessionOps {
        let mut ops = SessionOps {
            keys: Vec::with_capacity(spec.cycle as usize),
            reads: Vec::with_capacity(spec.cycle as usize),
        };
        for serial in 1..=spec.cycle {
            let op = oracle::op_at(spec, session_index, serial);
            assert!(
                !matches!(op, Op::Delete(_)),
                "cpr workloads have no deletes"
            );
            ops.keys.push(op.key_bytes());
            ops.reads.push(matches!(op, Op::Read(_)));
        }
        ops
    }
}

/// Shared by the two in-memory map baselines: preload, then the same mix for the same time.
fn run_map_cell<I, G>(
    plan: &Plan,
    spec: &WorkloadSpec,
    threads: usize,
    ops: &[SessionOps],
    insert: &I,
    get: &G,
) -> Result<Cell>
where
    I: Fn([u8; 8], [u8; 8]) + Sync,
    G: Fn([u8; 8]) -> Option<[u8; 8]> + Sync,
{
    for serial in 1..=spec.keys {
        if let Op::Upsert(key) = oracle::op_at(spec, 0, serial) {
            insert(key.to_be_bytes(), oracle::encode_value(0, serial));
        }
    }
    let measured = measure(
        plan,
        threads,
        &|session_index, stop, counter| {
            let ops = &ops[session_index as usize - 1];
            let mut serial = 0u64;
            let mut position = 0usize;
            let mut found = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    serial += 1;
                    let key = ops.keys[position];
                    if ops.reads[position] {
                        found += u64::from(get(key).is_some());
                    } else {
                        insert(key, oracle::encode_value(session_index, serial));
                    }
                    position = (position + 1) % ops.keys.len();
                }
                counter.store(serial, Ordering::Relaxed);
            }
            std::hint::black_box(found);
            Ok(serial)
        },
        None,
        None,
    )?;
    Ok(Cell {
        verified: None,
        verify_detail: String::new(),
        ..measured.cell
    })
}

/// The engine under load, optionally checkpointing, then recovery and verification.
fn run_engine_cell(
    plan: &Plan,
    strategy: Option<Strategy>,
    spec: &WorkloadSpec,
    threads: usize,
    ops: &[SessionOps],
) -> Result<Cell> {
    let run_dir = tempfile::Builder::new()
        .prefix("prefixkv-bench-cpr-")
        .tempdir_in(&plan.data_dir)
        .with_context(|| format!("creating a store directory in {}", plan.data_dir.display()))?;
    let config = engine_config(plan, run_dir.path());
    let budget_bytes = config.log_memory_bytes;
    let store = Store::open(config.clone())?;

    // The loader (session index 0) writes every key once; it stays open (suspended) so that its
    // CPR point is part of every checkpoint.
    let mut loader = store.start_session();
    for serial in 1..=spec.keys {
        if let Op::Upsert(key) = oracle::op_at(spec, 0, serial) {
            loader.upsert(&key.to_be_bytes(), &oracle::encode_value(0, serial))?;
        }
    }
    loader.suspend();
    let mut session_indices: HashMap<SessionId, u32> = HashMap::from([(loader.id(), 0)]);
    let ids = Mutex::new(Vec::new());
    // Worker sessions are parked here when their thread ends, so they stay registered (suspended)
    // through the final checkpoint and that checkpoint records their last serials.
    let parked = Mutex::new(Vec::new());
    let driver = strategy.map(|s| (s, Arc::clone(&store)));
    let measured = measure(
        plan,
        threads,
        &|session_index, stop, counter| {
            let mut session = store.start_session();
            ids.lock()
                .expect("ids lock")
                .push((session.id(), session_index));
            let ops = &ops[session_index as usize - 1];
            let len = ops.keys.len();
            let mut value = Vec::with_capacity(16);
            let mut serial = 0u64;
            let mut position = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    serial += 1;
                    // The engine's batch hints, as in `ycsb`: start the loads of operations 16
                    // (bucket) and 8 (record) ahead.
                    session.prefetch_index(&ops.keys[(position + 16) % len]);
                    session.prefetch_record(&ops.keys[(position + 8) % len]);
                    let key = &ops.keys[position];
                    if ops.reads[position] {
                        session.read(key, &mut value)?;
                    } else {
                        session.upsert(key, &oracle::encode_value(session_index, serial))?;
                    }
                    position = (position + 1) % len;
                }
                counter.store(serial, Ordering::Relaxed);
            }
            assert_eq!(
                session.serial(),
                serial,
                "the engine's serial numbers must match ours"
            );
            session.suspend();
            parked.lock().expect("parked lock").push(session);
            Ok(serial)
        },
        driver.as_ref().map(|(s, store)| (*s, store)),
        Some(&store),
    )?;
    session_indices.extend(ids.into_inner().expect("ids lock"));

    let (verified, detail) = match strategy {
        None => {
            // Live check: every session is quiescent, so its point is its last serial.
            let points: Vec<(u32, u64)> = std::iter::once((0, spec.keys))
                .chain(measured.final_serials.iter().map(|&(i, s)| (i, s)))
                .collect();
            let mut reader = store.start_session();
            verify(spec, &points, &mut |key| {
                let mut out = Vec::new();
                Ok(reader.read(key, &mut out)?.then_some(out))
            })
        }
        Some(_) => {
            drop(parked);
            drop(loader);
            drop(store);
            let recovered = Store::open(config)?;
            let info = recovered
                .recovery_info()
                .context("a checkpointed run must leave a checkpoint to recover")?
                .clone();
            let mut reported = Vec::new();
            for (id, serial) in &info.session_commit_points {
                match session_indices.get(id) {
                    Some(&index) => reported.push((index, *serial)),
                    None => bail!("recovered an unknown session {id}"),
                }
            }
            match recovery_bounds(spec, &measured, info.version) {
                Err(problem) => (false, problem),
                Ok(bounds) => {
                    let mut reader = recovered.start_session();
                    verify_recovery(spec, &reported, &bounds, &mut |key| {
                        let mut out = Vec::new();
                        Ok(reader.read(key, &mut out)?.then_some(out))
                    })
                }
            }
        }
    };
    Ok(Cell {
        verified: Some(verified),
        verify_detail: detail,
        log_memory_budget_bytes: Some(budget_bytes),
        ..measured.cell
    })
}

fn engine_config(plan: &Plan, dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir.to_path_buf());
    config.index_buckets = (plan.keys as usize / 4).next_power_of_two().max(1 << 10);
    // A record of an 8-byte key and value takes 64 bytes of log. Budget four times that: every
    // key's first write during a checkpoint copies its record (read-copy-update), and compaction
    // waits for the checkpoint to end, so the log may need twice the live data plus what
    // compaction has not reclaimed yet. At twice the live data, writers stalled at the limit
    // until the checkpoint ended (during/outside 0.36 at 1M keys; 0.95 at four times). The
    // budget is a limit, not an allocation: pages are taken as the log grows.
    config.log_memory_bytes = if plan.log_memory_bytes > 0 {
        plan.log_memory_bytes
    } else {
        (plan.keys * 64 * 4).max(64 << 20)
    };
    config.log_page_bytes = 4 << 20;
    config.flusher_threads = plan.flushers;
    config.keep_checkpoints = 2;
    config
}

struct Measured {
    cell: Cell,
    /// (session index, last serial) per worker.
    final_serials: Vec<(u32, u64)>,
    /// For each checkpoint requested (by version): what each worker (session index) had been
    /// acknowledged before the request, as the workers' own counters said. The oracle holds the
    /// recovered checkpoint's CPR points to these, not to what the store reports.
    acknowledged_at_request: BTreeMap<u64, Vec<(u32, u64)>>,
}

/// Runs `threads` workers (session indices 1..=threads) for `plan.seconds`, sampling progress
/// every 10 ms, and, with a driver, checkpointing every `plan.checkpoint_interval` — and once
/// more after the workers stop, so the last checkpoint covers every session's final point.
#[allow(clippy::type_complexity)]
fn measure(
    plan: &Plan,
    threads: usize,
    worker: &(dyn Fn(u32, &AtomicBool, &AtomicU64) -> Result<u64> + Sync),
    driver: Option<(Strategy, &Arc<Store>)>,
    probe: Option<&Arc<Store>>,
) -> Result<Measured> {
    let stop = AtomicBool::new(false);
    let counters: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let duration = Duration::from_secs_f64(plan.seconds);
    std::thread::scope(|scope| -> Result<Measured> {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (stop, counter) = (&stop, &counters[i]);
                scope.spawn(move || worker(i as u32 + 1, stop, counter))
            })
            .collect();
        let start = Instant::now();
        let total = || {
            counters
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>()
        };
        let mut samples: Vec<(f64, u64, u64)> = vec![(0.0, total(), current_rss_bytes())];
        let mut windows = Vec::new();
        let mut acknowledged_at_request = BTreeMap::new();
        let mut next_checkpoint = start + plan.checkpoint_interval;
        let mut pending: Option<(prefixkv_engine::CheckpointToken, f64, u64)> = None;
        let mut peak_rss = 0u64;
        let mut peak_log = 0u64;
        let mut driver_error = None;
        while start.elapsed() < duration {
            std::thread::sleep(SAMPLE_PERIOD); // a sampling period, not a wait for a condition
            let now = start.elapsed().as_secs_f64();
            let rss = current_rss_bytes();
            peak_rss = peak_rss.max(rss);
            if let Some(store) = probe {
                peak_log = peak_log.max(store.log_memory_in_use_bytes());
            }
            samples.push((now, total(), rss));
            if let Some((strategy, store)) = driver {
                if let Some((token, started_s, rss_before)) = pending.take() {
                    match store.wait_for_commit(token, Duration::ZERO) {
                        Ok(report) => {
                            windows.push(window(&samples, started_s, now, &report, rss_before))
                        }
                        Err(prefixkv_engine::EngineError::Timeout) => {
                            pending = Some((token, started_s, rss_before))
                        }
                        Err(error) => {
                            driver_error = Some(error);
                            break;
                        }
                    }
                }
                if pending.is_none() && Instant::now() >= next_checkpoint {
                    // Read before the request: a lower bound of what each worker was acknowledged.
                    let acknowledged = acknowledged_now(&counters);
                    let requested = store.checkpoint(strategy);
                    if let Ok(token) = &requested {
                        acknowledged_at_request.insert(token.version, acknowledged);
                    }
                    match requested {
                        Ok(token) => pending = Some((token, now, rss)),
                        Err(error) => {
                            driver_error = Some(error);
                            break;
                        }
                    }
                    next_checkpoint = Instant::now() + plan.checkpoint_interval;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let mut final_serials = Vec::with_capacity(threads);
        for (i, handle) in handles.into_iter().enumerate() {
            let serial = handle
                .join()
                .map_err(|_| anyhow::anyhow!("worker {i} panicked"))??;
            final_serials.push((i as u32 + 1, serial));
        }
        let measured_s = samples.last().map_or(plan.seconds, |s| s.0);
        let ops_in_window = samples.last().map_or(0, |s| s.1);
        if let Some(error) = driver_error {
            return Err(error).context("checkpoint driver");
        }
        if let Some((strategy, store)) = driver {
            // Finish the checkpoint in flight (it was taken under load and counts as a window),
            // then take a final one with the workers quiescent so verification covers their ends.
            if let Some((token, started_s, rss_before)) = pending.take() {
                let report = store.wait_for_commit(token, Duration::from_secs(120))?;
                let now = start.elapsed().as_secs_f64();
                windows.push(window(
                    &samples,
                    started_s,
                    now.min(measured_s),
                    &report,
                    rss_before,
                ));
            }
            let token = store.checkpoint(strategy)?;
            // The workers have stopped: everything they ran was acknowledged before this request.
            acknowledged_at_request.insert(token.version, final_serials.clone());
            store.wait_for_commit(token, Duration::from_secs(120))?;
        }
        let (during_ops, during_s) = windows.iter().fold((0.0, 0.0), |(ops, secs), w| {
            let (a, b) = (
                ops_at(&samples, w.start_s),
                ops_at(&samples, w.end_s.min(measured_s)),
            );
            (
                ops + (b - a),
                secs + (w.end_s.min(measured_s) - w.start_s).max(0.0),
            )
        });
        let total_ops = ops_in_window as f64;
        let during = (during_s > 0.0).then(|| during_ops / during_s);
        let outside = ratio(total_ops - during_ops, measured_s - during_s);
        Ok(Measured {
            cell: Cell {
                throughput_ops_per_s: total_ops / measured_s,
                during_ops_per_s: during,
                outside_ops_per_s: outside,
                checkpoints: windows,
                peak_rss_bytes: peak_rss,
                peak_log_memory_bytes: probe.map(|_| peak_log),
                log_memory_budget_bytes: None,
                timeline: timeline(&samples),
                verified: None,
                verify_detail: String::new(),
            },
            final_serials,
            acknowledged_at_request,
        })
    })
}

/// Each worker's (session index, acknowledged serial) from its progress counter, which it
/// stores after every batch of operations returned.
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
    report: &prefixkv_engine::CheckpointReport,
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

fn write_plots(
    common: &Common,
    plan: &Plan,
    points: &[(Mix, crate::workload::KeyDistribution, usize)],
    cells: &BTreeMap<(usize, usize), Vec<Cell>>,
    headline: usize,
) -> Result<()> {
    let (headline_mix, headline_distribution, _) = points[headline];
    // Figure 2 of the paper: throughput against threads, one line per contender.
    let mut series = Vec::new();
    for (contender_index, contender) in plan.contenders.iter().enumerate() {
        let mut line = Vec::new();
        for (point_index, &(mix, distribution, threads)) in points.iter().enumerate() {
            if mix != headline_mix || distribution != headline_distribution {
                continue;
            }
            if let Some(runs) = cells.get(&(point_index, contender_index)) {
                let values: Vec<f64> = runs.iter().map(|c| c.throughput_ops_per_s).collect();
                line.push((threads as f64, Spread::of(&values).median / 1e6));
            }
        }
        series.push(Series {
            label: contender.name(),
            points: line,
        });
    }
    write_line_chart(
        &LineChart {
            title: format!(
                "Throughput vs threads ({}, {:?} keys)",
                headline_mix.name(),
                headline_distribution
            ),
            x_label: "worker threads".into(),
            y_label: "throughput (M ops/s)".into(),
            series,
            markers: Vec::new(),
            log_x: false,
        },
        &common.out,
        "cpr",
    )?;
    // Throughput over time, first round at the headline point, with checkpoint markers.
    let mut series = Vec::new();
    let mut markers = Vec::new();
    for (contender_index, contender) in plan.contenders.iter().enumerate() {
        let Some(first) = cells
            .get(&(headline, contender_index))
            .and_then(|runs| runs.first())
        else {
            continue;
        };
        let index = series.len();
        series.push(Series {
            label: contender.name(),
            points: first
                .timeline
                .iter()
                .map(|&(t, ops)| (t, ops / 1e6))
                .collect(),
        });
        for w in &first.checkpoints {
            markers.push(Marker {
                x: w.start_s,
                series: Some(index),
                end: false,
            });
            markers.push(Marker {
                x: w.end_s,
                series: Some(index),
                end: true,
            });
        }
    }
    write_line_chart(
        &LineChart {
            title: "Throughput over time (checkpoint start: solid, end: light)".into(),
            x_label: "time (s)".into(),
            y_label: "throughput (M ops/s per 100 ms)".into(),
            series,
            markers,
            log_x: false,
        },
        &common.out,
        "cpr-timeline",
    )?;
    Ok(())
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

    #[test]
    fn contender_names_round_trip() {
        for name in [
            "none",
            "blocking",
            "cpr-copy",
            "fold-over",
            "snapshot",
            "persian",
            "dashmap",
            "papaya",
        ] {
            assert_eq!(Contender::parse(name).unwrap().name(), name);
        }
        assert!(Contender::parse("bogus").is_err());
    }
}
