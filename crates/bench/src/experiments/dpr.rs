//! `prefixkv-bench dpr`: the DPR paper's D-FASTER evaluation (SIGMOD 2021, §7.2–7.4 and 7.6) on
//! our cluster: engine workers as separate processes (`prefixkv-cluster worker`) on loopback, the
//! cluster manager on a thread, clients as threads of this process with `DprRedisClient`
//! sessions ([`session`]). Every session runs YCSB-A (50% GET, 50% blind SET, 8-byte keys and
//! values over a preloaded key space, uniform or zipfian) in batches of `b` commands with a
//! window of `w` batches. Each cell starts a fresh cluster ([`deploy`]), preloads it, runs the
//! sessions for `--seconds`, and stops it; contenders of a comparison alternate over rounds
//! (docs/benchmarks.md, rule 1) and rows hold the median with min and max.
//!
//! Parts (`--only`, default all):
//! - `scale-out` (Figs. 10–11, 12 and 19; [`sweeps`]): workers 1..N × distributions ×
//!   recoverability none / eventual / dpr, throughput. At the largest worker count with uniform
//!   keys, `synchronous` (DPR + an fdatasync of every batch) joins the same rounds (Fig. 19), and
//!   the dpr cells' operation and commit latencies are Fig. 12.
//! - `batch` (Fig. 13): throughput and latency against `b` at `w` = `--window`.
//! - `interval` (Fig. 14): throughput and commit latency against the checkpoint interval, on the
//!   local disk and on a tmpfs (`/dev/shm`) standing in for the paper's null device.
//! - `failures` (Fig. 16; [`failures`]): a long run with three failures (one, then two in quick
//!   succession), completed / committed / lost operations per 250 ms, recovery time per failure,
//!   and verification of every verifier session's surviving state against its oracle
//!   ([`track::Oracle`]): `verified`. Run once per `--failure-kinds` entry: `simulated` (the
//!   paper's method: a worker is reported failed without crashing, and every worker rolls back
//!   in memory; rows `failures-simulated*`, summary `recovery_ms_max`) and `kill` (SIGKILL: the
//!   survivors roll back in memory, the killed worker restarts and reloads its checkpoint; rows
//!   `failures*`, summary `recovery_ms_max_process_kill`).
//! - `simulation` (issue 14; [`simulation`]): 8–64 workers × exact / approximate / hybrid finder
//!   under `prefixkv-dprsim`'s deterministic network simulation in virtual time, one crash
//!   mid-run: cut progress, commit latency (virtual ms and commit intervals), finder load
//!   (metadata calls, precedence-graph size), oracle-verified. Needs no worker executable.
//!
//! - `colocation` (Fig. 15; [`colocation`]): 3 workers, each process hosting co-located client
//!   threads (`prefixkv-bench dpr-colocated-worker`, hidden) whose batches for the worker's own
//!   keys skip the network; throughput against the fraction of remote operations, beside the
//!   all-remote baseline (bench threads over TCP, same total thread count). Every process's
//!   verifier reads back its committed writes (`verified`).
//!
//! Fig. 11 (scale-up over cores per worker) has no separate axis on a 2-core machine, and Fig. 14's cloud
//! SSD no counterpart (local disk and tmpfs only).
//!
//! Running it: build the bench and the worker executable together
//! (`cargo build --release -p prefixkv-bench -p prefixkv-cluster`; the workers are found next
//! to `prefixkv-bench`, or at `--cluster-binary`), then `prefixkv-bench dpr --quick` (a smoke run
//! under 60 s: 1 and 2 workers, uniform keys, 1 s cells, a 5 s failure run with one kill) or
//! `prefixkv-bench dpr` (every figure, about 15 minutes: 1–3 workers, 5 s cells, 3 rounds, a 45 s
//! failure run with three kills), on a quiet machine. `--only failures` (etc.) runs one part.
//!
//! JSON rows carry `figure`: `scale-out` (and `scale-out+levels` for the largest worker count
//! with uniform keys, where all four levels ran), `batch`, `interval` (one row per contender:
//! `workers`, `recoverability`, `distribution`, `batch`, `window`, `checkpoint_interval_ms`,
//! `device`, `throughput_ops_per_s` with `_min` / `_max`, `op_latency_p50_ms` / `_p99_ms`,
//! `commit_latency_p50_ms` / `_p99_ms`, `rollbacks`, `uncommitted_at_end`); `failures` (one per
//! kill: `worker`, `at_s`, `world_line_before`, `recovery_first_op_ms`,
//! `recovery_all_sessions_ms`, `recovery_metadata_ms`, `recovery_ms`); `failures-run` (totals:
//! completed / committed / lost / uncertain operations, session rollbacks, `final_world_line`
//! (above the kill count when leases expired too), verifier counts, `verified`); and
//! `failures-timeline` (per 250 ms: `t_s`, `completed_ops_per_s`, `committed_ops_per_s`,
//! `lost_ops`). Plots: `dpr` (scale-out), `dpr-levels`, `dpr-latency`, `dpr-batch`,
//! `dpr-batch-latency`, `dpr-interval`, `dpr-interval-commit`, `dpr-failures`, `dpr-colocation`.
//! `colocation` rows: `mode` (`colocated` / `remote`), `remote_fraction`,
//! `measured_remote_fraction`, `local_batches`, `clients_total`, `throughput_ops_per_s`, `verified`.
//!
//! Summary: `dpr_over_uncoordinated`, `dpr_over_no_checkpoint`, `dpr_over_synchronous` (at the
//! largest worker count, uniform), `colocated_over_remote` (co-located throughput at 0 % remote ÷
//! the all-remote baseline's), `commit_latency_p50_ms`, `recovery_ms_max`, `verified`, the
//! load average at start and end; targets from the issue are printed beside them and stored in
//! the config.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Result};
use prefixkv_cluster::worker::Recoverability;
use serde_json::Value;

use crate::report::Report;
use crate::stats::Latencies;
use crate::workload::KeyDistribution;
use crate::Common;

mod colocation;
mod deploy;
mod failures;
mod session;
mod simulation;
mod sweeps;
/// The verifier oracle is shared with `dredis`: one place classifies rollback reports.
pub(super) mod track;

pub use colocation::host::{host, HostArgs};
use deploy::Device;
use failures::FailureKind;

/// Flags of `prefixkv-bench dpr`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Parts to run (comma separated): scale-out, batch, interval, colocation, failures,
    /// simulation.
    /// Default: all.
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<Part>>,
    /// Worker counts of the scale-out (default 1,2,3 on this 2-core machine; quick 1,2).
    #[arg(long, value_delimiter = ',')]
    pub workers: Option<Vec<usize>>,
    /// Key distributions of the scale-out (default uniform,zipfian; quick uniform).
    #[arg(long, value_delimiter = ',')]
    pub distributions: Option<Vec<KeyDistribution>>,
    /// Key distribution of the batch, interval and failure runs (the paper's 50:50 zipfian).
    #[arg(long, default_value = "zipfian")]
    pub sweep_distribution: KeyDistribution,
    /// Keys preloaded (default 200,000; quick 10,000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Measured seconds per cell (default 5; quick 1).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Client threads, each one session.
    #[arg(long, default_value_t = 2)]
    pub clients: usize,
    /// Commands per batch (b).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Batches in flight per session (w).
    #[arg(long, default_value_t = 16)]
    pub window: usize,
    /// Checkpoint interval of every part but the interval sweep.
    #[arg(long, default_value_t = 100)]
    pub checkpoint_interval_ms: u64,
    /// Batch sizes of the batch part (default 1,4,16,64,256; quick 1,16,256).
    #[arg(long, value_delimiter = ',')]
    pub batch_sizes: Option<Vec<usize>>,
    /// Checkpoint intervals of the interval part (default 25,50,100,250,500,1000; quick 25,250).
    #[arg(long, value_delimiter = ',')]
    pub intervals_ms: Option<Vec<u64>>,
    /// Parent directory of the clusters' files on the local disk (default: the temp directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// tmpfs directory standing in for the null device in the interval part.
    #[arg(long, default_value = "/dev/shm")]
    pub null_dir: PathBuf,
    /// Skip the null-device cells of the interval part.
    #[arg(long)]
    pub no_null_device: bool,
    /// Seconds of the failure run (default 45; quick 5).
    #[arg(long)]
    pub failure_seconds: Option<f64>,
    /// Workers SIGKILLed in the failure run (default 3: one, then two in quick succession;
    /// quick 1).
    #[arg(long)]
    pub kills: Option<usize>,
    /// Milliseconds between the second and the third kill of the failure run.
    #[arg(long, default_value_t = 100)]
    pub kill_gap_ms: u64,
    /// How failures are injected (comma separated): `simulated` (the paper's method: a worker is
    /// reported failed without crashing, every worker rolls back in memory) and/or `kill`
    /// (SIGKILL; the killed worker restarts and reloads from disk). Default: both.
    #[arg(long, value_delimiter = ',')]
    pub failure_kinds: Option<Vec<FailureKind>>,
    /// Verifier sessions (unique keys, checked at the end) in the failure run.
    #[arg(long, default_value_t = 1)]
    pub verifiers: usize,
    /// Writes per second of each verifier session.
    #[arg(long, default_value_t = 5000)]
    pub verifier_ops_per_s: u64,
    /// Lease after which a silent worker is failed (a killed worker is reported at once, so
    /// this only catches hung workers; shorter leases turn heartbeat stalls on a loaded machine
    /// into extra rollbacks).
    #[arg(long, default_value_t = 2000)]
    pub lease_ms: u64,
    /// In-memory log of each worker's engine, MiB (default 256; quick 64).
    #[arg(long)]
    pub log_memory_mib: Option<u64>,
    /// Keep every cluster's directory (worker logs, checkpoints, metadata) instead of removing it.
    #[arg(long)]
    pub keep_dirs: bool,
    /// The `prefixkv-cluster` executable (default: next to this executable).
    #[arg(long)]
    pub cluster_binary: Option<PathBuf>,
    /// Remote-operation fractions of the colocation part (default 0,0.1,0.25,0.5,0.75,1; quick
    /// 0,0.5).
    #[arg(long, value_delimiter = ',')]
    pub remote_fractions: Option<Vec<f64>>,
    /// Co-located client threads per worker process in the colocation part (the all-remote
    /// baseline runs 3x this many bench threads).
    #[arg(long, default_value_t = 1)]
    pub colocated_clients: usize,
    /// Simulated worker counts (default 8,16,32,64; quick 8).
    #[arg(long, value_delimiter = ',')]
    pub sim_workers: Option<Vec<usize>>,
    /// Simulated finders: exact, approximate, hybrid (default all three; quick exact,approximate).
    #[arg(long, value_delimiter = ',')]
    pub sim_finders: Option<Vec<String>>,
    /// Seeds per simulated cell (default 2; quick 1).
    #[arg(long)]
    pub sim_seeds: Option<u64>,
    /// Virtual milliseconds of load per simulated run (default 1000; quick 200).
    #[arg(long)]
    pub sim_virtual_ms: Option<u64>,
    /// How simulated workers commit: catch-up (`Vmax`, the paper's), aligned-slots (the engine
    /// cluster's) or plain.
    #[arg(long, default_value = "catch-up")]
    pub sim_commit_mode: String,
    /// Simulated workers fast-forward by relabelling (`FastForward::Relabel`; sound with the
    /// exact finder only) instead of sealing: what the engine cluster did while a seal had to
    /// wait for the previous checkpoint, kept to show why it stalled.
    #[arg(long)]
    pub sim_relabel: bool,
}

/// A part of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Figs. 10–12 and 19.
    ScaleOut,
    /// Fig. 13.
    Batch,
    /// Fig. 14.
    Interval,
    /// Fig. 15.
    Colocation,
    /// Fig. 16.
    Failures,
    /// Issue 14: 8–64 workers under the deterministic network simulation.
    Simulation,
}

/// Sizes after applying `--quick` defaults.
pub(super) struct Plan {
    parts: Vec<Part>,
    workers: Vec<usize>,
    distributions: Vec<KeyDistribution>,
    sweep_distribution: KeyDistribution,
    keys: u64,
    run: Duration,
    rounds: usize,
    sweep_rounds: usize,
    clients: usize,
    batch: usize,
    window: usize,
    interval_ms: u64,
    batch_sizes: Vec<usize>,
    intervals_ms: Vec<u64>,
    devices: Vec<Device>,
    remote_fractions: Vec<f64>,
    colocated_clients: usize,
    failure_run: Duration,
    kills: usize,
    kill_gap: Duration,
    failure_kinds: Vec<FailureKind>,
    verifiers: usize,
    verifier_ops_per_s: u64,
    lease_ms: u64,
    index_buckets: usize,
    log_memory_bytes: u64,
    keep_dirs: bool,
    executable: PathBuf,
    data_dir: PathBuf,
    null_dir: Option<PathBuf>,
    sim: simulation::SimPlan,
}

impl Plan {
    fn max_workers(&self) -> usize {
        self.workers.iter().copied().max().unwrap_or(1)
    }
}

/// What the parts gather for the summary.
#[derive(Default)]
struct Totals {
    /// Median throughput per level at the largest worker count, uniform keys.
    headline: Vec<(Recoverability, f64)>,
    /// The dpr cells' latencies there (Fig. 12).
    op_latency: Option<Latencies>,
    commit_latency: Option<Latencies>,
    recovery_ms_max: Option<f64>,
    recovery_ms_max_process_kill: Option<f64>,
    /// Co-located throughput at 0 % remote over the all-remote baseline.
    colocated_over_remote: Option<f64>,
}

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    super::dredis::init_logging();
    let load_start = load_average();
    let plan = plan(common, args)?;
    let mut report = Report::new("dpr");
    write_config(&mut report, common, &plan)?;
    let mut totals = Totals::default();
    if plan.parts.contains(&Part::ScaleOut) {
        sweeps::scale_out(common, &plan, &mut report, &mut totals)?;
    }
    if plan.parts.contains(&Part::Batch) {
        sweeps::batch_sizes(common, &plan, &mut report)?;
    }
    if plan.parts.contains(&Part::Interval) {
        sweeps::intervals(common, &plan, &mut report)?;
    }
    if plan.parts.contains(&Part::Colocation) {
        colocation::run(common, &plan, &mut report, &mut totals)?;
    }
    if plan.parts.contains(&Part::Simulation) {
        simulation::run(common, &plan.sim, &mut report)?;
    }
    if plan.parts.contains(&Part::Failures) {
        for &kind in &plan.failure_kinds {
            let recovery = failures::run(common, &plan, &mut report, kind)?;
            match kind {
                FailureKind::Simulated => totals.recovery_ms_max = Some(recovery),
                FailureKind::Kill => totals.recovery_ms_max_process_kill = Some(recovery),
            }
        }
    } else {
        report.notes.push(
            "the failures part did not run: `verified` covers no recovery (nothing was checked)"
                .into(),
        );
    }
    write_summary(&mut report, &plan, &totals, load_start);
    Ok(report)
}

fn plan(common: &Common, args: &Args) -> Result<Plan> {
    let quick = common.quick;
    let pick = |full: f64, small: f64| if quick { small } else { full };
    let parts = args.only.clone().unwrap_or_else(|| {
        vec![
            Part::ScaleOut,
            Part::Batch,
            Part::Interval,
            Part::Colocation,
            Part::Failures,
            Part::Simulation,
        ]
    });
    // The simulation runs in this process: only the other parts need the worker executable.
    let needs_cluster = parts.iter().any(|&p| p != Part::Simulation);
    let workers = args
        .workers
        .clone()
        .unwrap_or(if quick { vec![1, 2] } else { vec![1, 2, 3] });
    ensure!(
        !workers.is_empty() && workers.iter().all(|&w| w >= 1),
        "--workers needs counts of at least 1"
    );
    let keys = args.keys.unwrap_or(if quick { 10_000 } else { 200_000 });
    ensure!(keys >= 1, "--keys must be at least 1");
    let mut devices = vec![Device::Disk];
    let null_dir = (!args.no_null_device && args.null_dir.is_dir()).then(|| args.null_dir.clone());
    if null_dir.is_some() {
        devices.push(Device::Null);
    }
    let rounds = common.rounds.unwrap_or(if quick { 2 } else { 3 }).max(1);
    Ok(Plan {
        parts,
        workers,
        distributions: args.distributions.clone().unwrap_or(if quick {
            vec![KeyDistribution::Uniform]
        } else {
            vec![KeyDistribution::Uniform, KeyDistribution::Zipfian]
        }),
        sweep_distribution: args.sweep_distribution,
        keys,
        run: Duration::from_secs_f64(args.seconds.unwrap_or(pick(5.0, 1.0)).max(0.1)),
        rounds,
        sweep_rounds: if quick && common.rounds.is_none() {
            1
        } else {
            rounds
        },
        clients: args.clients.max(1),
        batch: args.batch.max(1),
        window: args.window.max(1),
        interval_ms: args.checkpoint_interval_ms.max(1),
        batch_sizes: args.batch_sizes.clone().unwrap_or(if quick {
            vec![1, 16, 256]
        } else {
            vec![1, 4, 16, 64, 256]
        }),
        intervals_ms: args.intervals_ms.clone().unwrap_or(if quick {
            vec![25, 250]
        } else {
            vec![25, 50, 100, 250, 500, 1000]
        }),
        devices,
        remote_fractions: match &args.remote_fractions {
            Some(fractions) => {
                ensure!(
                    fractions.iter().all(|f| (0.0..=1.0).contains(f)),
                    "--remote-fractions must lie within 0..=1"
                );
                fractions.clone()
            }
            None if quick => vec![0.0, 0.5],
            None => vec![0.0, 0.1, 0.25, 0.5, 0.75, 1.0],
        },
        colocated_clients: args.colocated_clients.max(1),
        failure_run: Duration::from_secs_f64(
            args.failure_seconds.unwrap_or(pick(45.0, 5.0)).max(1.0),
        ),
        kills: args.kills.unwrap_or(if quick { 1 } else { 3 }),
        kill_gap: Duration::from_millis(args.kill_gap_ms),
        failure_kinds: args
            .failure_kinds
            .clone()
            .unwrap_or_else(|| vec![FailureKind::Simulated, FailureKind::Kill]),
        verifiers: args.verifiers,
        verifier_ops_per_s: args.verifier_ops_per_s.max(1),
        lease_ms: args.lease_ms,
        // The paper sizes FASTER's index at #keys/2 buckets; each worker holds a share of the
        // keys, and an index never shrinks below 4 Ki buckets.
        index_buckets: ((keys / 2) as usize).next_power_of_two().max(1 << 12),
        log_memory_bytes: args.log_memory_mib.unwrap_or(if quick { 64 } else { 256 }) << 20,
        keep_dirs: args.keep_dirs,
        executable: if needs_cluster {
            deploy::cluster_executable(args.cluster_binary.as_deref())?
        } else {
            PathBuf::new()
        },
        data_dir: args.data_dir.clone().unwrap_or_else(std::env::temp_dir),
        null_dir,
        sim: sim_plan(quick, args)?,
    })
}

fn sim_plan(quick: bool, args: &Args) -> Result<simulation::SimPlan> {
    let workers =
        args.sim_workers
            .clone()
            .unwrap_or(if quick { vec![8] } else { vec![8, 16, 32, 64] });
    ensure!(
        !workers.is_empty() && workers.iter().all(|&w| w >= 2),
        "--sim-workers needs counts of at least 2"
    );
    let default_finders: &[&str] = if quick {
        &["exact", "approximate"]
    } else {
        &["exact", "approximate", "hybrid"]
    };
    let finders = match &args.sim_finders {
        Some(names) => names.iter().map(|n| simulation::parse_finder(n)).collect(),
        None => default_finders
            .iter()
            .map(|n| simulation::parse_finder(n))
            .collect::<Result<Vec<_>>>(),
    }?;
    Ok(simulation::SimPlan {
        workers,
        finders,
        seeds: args.sim_seeds.unwrap_or(if quick { 1 } else { 2 }).max(1),
        virtual_run: Duration::from_millis(
            args.sim_virtual_ms
                .unwrap_or(if quick { 200 } else { 1000 })
                .max(50),
        ),
        commit_mode: simulation::parse_commit_mode(&args.sim_commit_mode)?,
        relabel: args.sim_relabel,
    })
}

fn write_config(report: &mut Report, common: &Common, plan: &Plan) -> Result<()> {
    let parts: Vec<String> = plan.parts.iter().map(|p| format!("{p:?}")).collect();
    report.config("quick", common.quick);
    report.config("parts", parts);
    report.config("workers", plan.workers.clone());
    report.config("distributions", serde_json::to_value(&plan.distributions)?);
    report.config(
        "sweep_distribution",
        serde_json::to_value(plan.sweep_distribution)?,
    );
    report.config("keys", plan.keys);
    report.config("seconds_per_cell", plan.run.as_secs_f64());
    report.config("rounds", plan.rounds);
    report.config("sweep_rounds", plan.sweep_rounds);
    report.config("clients", plan.clients);
    report.config("batch", plan.batch);
    report.config("window", plan.window);
    report.config("checkpoint_interval_ms", plan.interval_ms);
    report.config("batch_sizes", plan.batch_sizes.clone());
    report.config("intervals_ms", plan.intervals_ms.clone());
    report.config("devices", serde_json::to_value(&plan.devices)?);
    report.config("failure_seconds", plan.failure_run.as_secs_f64());
    report.config("kills", plan.kills);
    report.config("kill_gap_ms", plan.kill_gap.as_millis() as u64);
    report.config("verifiers", plan.verifiers);
    report.config("verifier_ops_per_s", plan.verifier_ops_per_s);
    report.config("lease_ms", plan.lease_ms);
    report.config(
        "checkpoints",
        "sealed versions written behind: deltas, a whole image every 64",
    );
    report.config("index_buckets_per_worker", plan.index_buckets);
    report.config("log_memory_bytes_per_worker", plan.log_memory_bytes);
    report.config("data_dir", plan.data_dir.display().to_string());
    report.config(
        "null_dir",
        plan.null_dir
            .as_ref()
            .map_or(Value::Null, |d| Value::from(d.display().to_string())),
    );
    report.config("mix", "ycsb-a r50bu50, 8-byte keys and values");
    report.config(
        "durability",
        "none: no checkpoints; eventual: a CPR checkpoint every interval, no DPR (each worker \
         recovers some state of its own); dpr: checkpoints + DPR cuts (prefix recovery); \
         synchronous: dpr + every batch appended to an oplog and fdatasynced before its reply \
         (the cost of per-batch durability; its log is not replayed on recovery)",
    );
    report.config(
        "targets",
        serde_json::json!({
            "dpr_over_uncoordinated": ">= 0.95",
            "dpr_over_synchronous": ">= 10",
            "recovery_ms_max": "< 200",
            "commit_latency_p50_ms": "<= 2 checkpoint intervals",
        }),
    );
    report.config("cluster_binary", plan.executable.display().to_string());
    report.config("sim_workers", plan.sim.workers.clone());
    let finders: Vec<&str> = plan.sim.finders.iter().map(|f| f.name()).collect();
    report.config("sim_finders", finders);
    report.config("sim_seeds", plan.sim.seeds);
    report.config("sim_relabel", plan.sim.relabel);
    report.config("sim_virtual_ms", plan.sim.virtual_run.as_millis() as u64);
    report.config(
        "sim_commit_mode",
        simulation::mode_name(plan.sim.commit_mode),
    );
    report.config(
        "sim_model",
        "prefixkv-dprsim: real DprWorker (VersionedMap), DprSession, finder, ClusterManager and \
         SQLite metadata; virtual time; one session per worker (window 4, 4 writes per batch, \
         a batch per ~1 ms), network 100 us + exp(150 us), persistence 1-4 ms, commit every \
         10 ms + up to 2 ms jitter, refresh and poll every 2.5 ms, lease 25 ms, restart 10 ms, \
         worker workers/2 crashed at half the run",
    );
    report.notes.push(format!(
        "workers (separate processes), the cluster manager and the client threads share the \
         machine's {} cores; keys {} (the paper: 250 M), clients {} threads on the same machine",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.keys,
        plan.clients
    ));
    report.config("remote_fractions", plan.remote_fractions.clone());
    report.config("colocated_clients_per_worker", plan.colocated_clients);
    report.config("colocation_workers", colocation::WORKERS);
    report.config(
        "colocated_over_remote",
        "median throughput of co-located clients (threads inside each worker process, batches \
         for the worker's own keys run on its engine directly) at 0% remote operations, divided \
         by the median throughput of the all-remote baseline (the same total number of client \
         threads running the same load loop in the bench process, every batch over TCP); 3 \
         workers, dpr, YCSB-A uniform, b and w as configured",
    );
    report.notes.push(
        "Fig. 11 (scale-up over cores per worker) has no axis of its own on 2 cores: the \
         worker-count sweep, uniform and zipfian, stands for Figs. 10-11; Fig. 14's cloud SSD \
         has no counterpart here (local disk and tmpfs only)"
            .into(),
    );
    if common.quick && plan.sweep_rounds == 1 {
        report.notes.push(
            "quick: the batch and interval sweeps run one round (no spread); the scale-out \
             comparison runs the rounds given"
                .into(),
        );
    }
    if plan.null_dir.is_some() {
        report.notes.push(
            "null device: a tmpfs directory (RAM; writes and fsyncs cost no device time), which \
             also holds that cluster's metadata store"
                .into(),
        );
    }
    Ok(())
}

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`), or empty.
pub(crate) fn load_average() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn level_throughput(totals: &Totals, level: Recoverability) -> f64 {
    totals
        .headline
        .iter()
        .find(|(l, _)| *l == level)
        .map_or(f64::NAN, |(_, t)| *t)
}

fn write_summary(report: &mut Report, plan: &Plan, totals: &Totals, load_start: Vec<f64>) {
    use crate::stats::ratio;
    let dpr = level_throughput(totals, Recoverability::Dpr);
    let over = |level| ratio(dpr, level_throughput(totals, level));
    report.summary("dpr_over_uncoordinated", over(Recoverability::Eventual));
    report.summary("dpr_over_no_checkpoint", over(Recoverability::None));
    report.summary("dpr_over_synchronous", over(Recoverability::Synchronous));
    let commit = totals.commit_latency.as_ref();
    let commit_p50 = commit.map_or(f64::NAN, |l| l.quantile_ms(0.5));
    report.summary("commit_latency_p50_ms", commit_p50);
    report.summary(
        "commit_latency_p99_ms",
        commit.map_or(f64::NAN, |l| l.quantile_ms(0.99)),
    );
    report.summary(
        "commit_latency_p50_intervals",
        commit_p50 / plan.interval_ms as f64,
    );
    let op = totals.op_latency.as_ref();
    report.summary(
        "op_latency_p50_ms",
        op.map_or(f64::NAN, |l| l.quantile_ms(0.5)),
    );
    report.summary(
        "op_latency_p99_ms",
        op.map_or(f64::NAN, |l| l.quantile_ms(0.99)),
    );
    report.summary(
        "colocated_over_remote",
        totals.colocated_over_remote.unwrap_or(f64::NAN),
    );
    report.summary(
        "recovery_ms_max",
        totals.recovery_ms_max.unwrap_or(f64::NAN),
    );
    report.summary(
        "recovery_ms_max_process_kill",
        totals.recovery_ms_max_process_kill.unwrap_or(f64::NAN),
    );
    let load_end = load_average();
    report.summary(
        "load_average_start",
        load_start.first().copied().unwrap_or(f64::NAN),
    );
    report.summary(
        "load_average_end",
        load_end.first().copied().unwrap_or(f64::NAN),
    );
    report.config("load_average_start", load_start);
    report.config("load_average_end", load_end);
    report
        .summary
        .insert("verified".into(), report.verified_json());
    let shown = |key: &str| {
        report
            .summary
            .get(key)
            .and_then(Value::as_f64)
            .map_or("n/a".to_string(), |v| format!("{v:.3}"))
    };
    eprintln!("dpr: measured against the issue's targets");
    for (key, target) in [
        ("dpr_over_uncoordinated", ">= 0.95"),
        ("dpr_over_synchronous", ">= 10"),
        (
            "recovery_ms_max",
            "< 200 (simulated failures, the paper's method)",
        ),
        (
            "recovery_ms_max_process_kill",
            "(no target; SIGKILL: the killed worker reloads from disk)",
        ),
        (
            "commit_latency_p50_intervals",
            "<= 2 (p50 in checkpoint intervals)",
        ),
        (
            "dpr_over_no_checkpoint",
            "(no target; the paper's cost of checkpoints)",
        ),
        (
            "colocated_over_remote",
            "(no target; co-located at 0% remote / all-remote clients)",
        ),
    ] {
        eprintln!("  {key:<30} {:>10}   target {target}", shown(key));
    }
}
