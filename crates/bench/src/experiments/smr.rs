//! `prefixkv-bench smr`: the SMaRtTrie evaluation on prefixkv-smr, with the replicas as separate
//! `prefixkv-smr replica` processes.
//!
//! Two settings (`--setting`):
//! - **paper**: as the paper measured — one replica (the paper evaluates a single replica), Raft
//!   log sync off (the paper's "logging disabled"), the replica pinned to its own core and the
//!   bench's clients to the other cores (when the machine has at least two);
//! - **shared**: this machine's earlier setting — three replicas, log fdatasync on, replicas,
//!   clients and checkpoint writers sharing every core.
//!
//! Per run: start the replicas, load `keys` pairs (`SMR.LOAD` batches through the leader), one
//! checkpoint on every replica, warm-up (its throughput picks Δ unless given), then the measured
//! phase with a checkpoint every Δ commands; closed-loop RESP clients send update-only SETs on
//! random loaded keys to the leader. Throughput is sampled every 100 ms at the clients
//! (acknowledged SETs); checkpoint start/end times come from the leader (`SMR.CHECKPOINTS`, wall
//! clock). Both models alternate over the rounds (Figs. 4–5, Tables 1–2).
//!
//! Sweeps, in the paper setting: clients (Fig. 2: throughput and latency per client count,
//! concurrent model, no checkpoints) and clients × state size (Fig. 6: mean throughput per
//! model with checkpoints). Each writes JSON rows (`figure`).
//!
//! Verification (`verified`, every run and every sweep): the oracle of `smr/phase.rs` — values
//! unique per (phase, client, sequence), a replica SIGKILLed (a follower, or the only replica)
//! and restarted from its checkpoint and log, every key read back from it.

mod cluster;
mod phase;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use prefixkv_smr::log_store::LogSync;
use prefixkv_smr::StateModel;
use serde_json::Value;

use crate::plot::{write_line_chart, LineChart, Marker, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Spread};
use crate::Common;
use cluster::{Cluster, Setting};
use phase::{key_bytes, run_phase, verify, Expected, PhasePlan, PhaseResult, BUCKET_SECONDS};

/// Which settings to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SettingChoice {
    /// The paper's and the shared one.
    Both,
    /// One replica, log sync off, pinned.
    Paper,
    /// Three replicas, log sync on, sharing the cores.
    Shared,
}

/// Flags of `prefixkv-bench smr`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keys loaded before the benchmark [default: 2,000,000; --quick: 50,000].
    #[arg(long)]
    pub keys: Option<u64>,
    /// State size in MB (keys × (value + 16 B)); overrides --keys. Several GB need that much
    /// memory per replica, several times over for the CTrie.
    #[arg(long)]
    pub state_mb: Option<u64>,
    /// Value size in bytes [default: 200; --quick: 100].
    #[arg(long)]
    pub value_bytes: Option<usize>,
    /// Closed-loop clients of the main runs (the paper: 8).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Measured phase of each run, in seconds [default: 30; --quick: 2].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Warm-up of each run, in seconds [default: 5; --quick: 0.5].
    #[arg(long)]
    pub warmup_seconds: Option<f64>,
    /// Δ, commands between checkpoints [default: from the first run's warm-up throughput, so
    /// that about `--checkpoints` happen in the measured phase; then the same Δ for every run of
    /// that setting].
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Checkpoints wanted per measured phase when Δ is chosen automatically.
    #[arg(long, default_value_t = 4)]
    pub checkpoints: u64,
    /// Settings to run.
    #[arg(long, value_enum, default_value_t = SettingChoice::Both)]
    pub setting: SettingChoice,
    /// Client counts of the Fig. 2 sweep [default: 1,2,4,8,16,32,64; --quick: 1,4,16]; empty
    /// skips it.
    #[arg(long)]
    pub sweep_clients: Option<String>,
    /// Seconds per client count in the Fig. 2 sweep [default: 5; --quick: 1].
    #[arg(long)]
    pub sweep_seconds: Option<f64>,
    /// State sizes (MB) of the Fig. 6 sweep [default: 100,500,1000; --quick: 4,8]; empty skips
    /// it.
    #[arg(long)]
    pub fig6_state_mb: Option<String>,
    /// Client counts of the Fig. 6 sweep [default: 1,4,8,16,32; --quick: 1,8].
    #[arg(long)]
    pub fig6_clients: Option<String>,
    /// Where replicas keep their data [default: a temporary directory, removed afterwards].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The `prefixkv-smr` binary [default: next to this binary, else target/release/].
    #[arg(long)]
    pub smr_binary: Option<PathBuf>,
}

const MODELS: [StateModel; 2] = [StateModel::Concurrent, StateModel::Blocking];

fn paper_setting(machine_cores: &[usize]) -> Setting {
    Setting {
        name: "paper",
        replicas: 1,
        log_sync: LogSync::Off,
        pin: true,
        machine_cores: machine_cores.to_vec(),
    }
}

fn shared_setting(machine_cores: &[usize]) -> Setting {
    Setting {
        name: "shared",
        replicas: 3,
        log_sync: LogSync::On,
        pin: false,
        machine_cores: machine_cores.to_vec(),
    }
}

struct Setup {
    keys: u64,
    value_bytes: usize,
    clients: usize,
    seconds: f64,
    warmup_seconds: f64,
    checkpoints: u64,
}

/// Everything a run needs besides its model and setting.
struct Env<'a> {
    binary: &'a Path,
    root: &'a Path,
}

/// One main run: its phase and its verification.
struct RunResult {
    phase: PhaseResult,
    verified: bool,
    verification: String,
}

fn parse_list(text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse()
                .with_context(|| format!("bad number {p:?}"))
        })
        .collect()
}

fn keys_for_mb(mb: u64, value_bytes: usize) -> u64 {
    (mb << 20) / (value_bytes as u64 + 16)
}

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let quick = common.quick;
    let value_bytes = args.value_bytes.unwrap_or(if quick { 100 } else { 200 });
    let keys = match args.state_mb {
        Some(mb) => keys_for_mb(mb, value_bytes),
        None => args.keys.unwrap_or(if quick { 50_000 } else { 2_000_000 }),
    };
    let setup = Setup {
        keys,
        value_bytes,
        clients: args.clients.max(1),
        seconds: args.seconds.unwrap_or(if quick { 2.0 } else { 30.0 }),
        warmup_seconds: args.warmup_seconds.unwrap_or(if quick { 0.5 } else { 5.0 }),
        checkpoints: args.checkpoints,
    };
    let rounds = common.rounds.unwrap_or(if quick { 1 } else { 3 }).max(1);
    let binary = cluster::locate_binary(args.smr_binary.as_deref())?;
    let root = match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            tempfile::tempdir_in(dir)?
        }
        None => tempfile::tempdir()?,
    };
    let env = Env {
        binary: &binary,
        root: root.path(),
    };
    let mut report = Report::new("smr");
    report.config("quick", quick);
    report.config("clients", setup.clients as u64);
    report.config("keys", setup.keys);
    report.config("value_bytes", setup.value_bytes as u64);
    report.config(
        "state_bytes_estimate",
        setup.keys * (setup.value_bytes as u64 + 16),
    );
    report.config("benchmark_seconds", setup.seconds);
    report.config("warmup_seconds", setup.warmup_seconds);
    report.config("rounds", rounds as u64);
    report.config(
        "workload",
        "update-only SET on uniformly random loaded keys, closed loop, to the leader",
    );
    let all_cores = cluster::allowed_cores();
    let settings: Vec<Setting> = match args.setting {
        SettingChoice::Both => vec![paper_setting(&all_cores), shared_setting(&all_cores)],
        SettingChoice::Paper => vec![paper_setting(&all_cores)],
        SettingChoice::Shared => vec![shared_setting(&all_cores)],
    };
    for setting in &settings {
        let (replica_cores, client_cores) = setting.cores();
        report.config(
            &format!("setting_{}", setting.name),
            format!(
                "{} replica process(es), Raft log sync {}, replica cores {}, client cores {:?}",
                setting.replicas,
                setting.log_sync.name(),
                if replica_cores.is_empty() {
                    "unpinned (shared with everything)".to_string()
                } else {
                    format!("{replica_cores:?} (one each)")
                },
                client_cores
            ),
        );
        let runtime = runtime_on(&client_cores)?;
        let results = runtime.block_on(main_runs(&env, setting, &setup, args, rounds))?;
        report_main(&mut report, setting, &results);
        plot(common, setting, &results)?;
        if setting.name == "paper" {
            let sweep_clients = args
                .sweep_clients
                .clone()
                .unwrap_or_else(|| if quick { "1,4,16" } else { "1,2,4,8,16,32,64" }.into());
            let sweep_seconds = args.sweep_seconds.unwrap_or(if quick { 1.0 } else { 5.0 });
            let counts = parse_list(&sweep_clients)?;
            if !counts.is_empty() {
                runtime.block_on(fig2(
                    &env,
                    setting,
                    &setup,
                    &counts,
                    sweep_seconds,
                    &mut report,
                    &common.out,
                ))?;
            }
            let sizes = parse_list(args.fig6_state_mb.as_deref().unwrap_or(if quick {
                "4,8"
            } else {
                "100,500,1000"
            }))?;
            let fig6_clients = parse_list(args.fig6_clients.as_deref().unwrap_or(if quick {
                "1,8"
            } else {
                "1,4,8,16,32"
            }))?;
            if !sizes.is_empty() && !fig6_clients.is_empty() {
                let plan = Fig6 {
                    sizes_mb: &sizes,
                    clients: &fig6_clients,
                    seconds: sweep_seconds,
                };
                runtime.block_on(fig6(&env, setting, &setup, &plan, &mut report, &common.out))?;
            }
        }
        drop(runtime);
    }
    cluster::pin_current_thread(&all_cores)?;
    Ok(report)
}

/// A runtime whose threads run on `cores` (the bench's clients stay off the replicas' cores).
fn runtime_on(cores: &[usize]) -> Result<tokio::runtime::Runtime> {
    cluster::pin_current_thread(cores).context("pinning the bench's client threads")?;
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.len().clamp(1, 4))
        .enable_all()
        .build()?)
}

/// The rounds of Figs. 4–5 / Tables 1–2 in one setting: results per model.
async fn main_runs(
    env: &Env<'_>,
    setting: &Setting,
    setup: &Setup,
    args: &Args,
    rounds: usize,
) -> Result<Vec<Vec<RunResult>>> {
    let schedule = alternating_schedule(MODELS.len(), rounds);
    let progress =
        crate::progress::bar(schedule.len() as u64, &format!("smr {} runs", setting.name));
    let mut results: Vec<Vec<RunResult>> = MODELS.iter().map(|_| Vec::new()).collect();
    let mut delta = args.checkpoint_every;
    for (run_number, (round, contender)) in schedule.into_iter().enumerate() {
        let model = MODELS[contender];
        let dir = env.root.join(format!(
            "{}-run-{run_number}-{}",
            setting.name,
            model.name()
        ));
        let mut cluster = Cluster::start(env.binary, &dir, model, setting)?;
        let leader = load_and_checkpoint(&cluster, setup.keys, setup.value_bytes).await?;
        let plan = PhasePlan {
            phase: 0,
            clients: setup.clients,
            keys: setup.keys,
            value_bytes: setup.value_bytes,
            warmup_seconds: setup.warmup_seconds,
            seconds: setup.seconds,
            delta,
            checkpoints_wanted: setup.checkpoints,
        };
        let phase = run_phase(&cluster, leader, &plan)
            .await
            .with_context(|| format!("{} round {round}, model {}", setting.name, model.name()))?;
        delta = Some(phase.delta);
        let expected = Expected {
            keys: setup.keys,
            loaded: loaded_value(setup.value_bytes),
            acknowledged: phase.acknowledged.clone(),
        };
        let (verified, verification) = verify(&mut cluster, leader, &expected).await?;
        drop(cluster);
        std::fs::remove_dir_all(&dir).ok();
        progress.inc(1);
        results[contender].push(RunResult {
            phase,
            verified,
            verification,
        });
    }
    progress.finish_and_clear();
    Ok(results)
}

fn loaded_value(value_bytes: usize) -> Vec<u8> {
    vec![b'v'; value_bytes]
}

/// Waits for a leader, loads `keys` pairs, checkpoints every replica; returns the leader.
async fn load_and_checkpoint(cluster: &Cluster, keys: u64, value_bytes: usize) -> Result<u64> {
    let leader = cluster.wait_for_leader().await?;
    cluster
        .load(leader, keys, &loaded_value(value_bytes), key_bytes)
        .await?;
    let loaded = cluster.status_number(leader, "applied_index").await?;
    // One checkpoint everywhere after the load, so the log behind it can be purged and every
    // run starts from the same shape of state.
    cluster.checkpoint_all(loaded).await?;
    Ok(leader)
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

fn sd(values: &[f64]) -> f64 {
    let mean = mean(values);
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len().max(1) as f64).sqrt()
}

/// The buckets that overlap a checkpoint, and the others.
fn split(phase: &PhaseResult) -> (Vec<f64>, Vec<f64>) {
    let (mut during, mut outside) = (Vec::new(), Vec::new());
    for (i, value) in phase.buckets.iter().enumerate() {
        let (from, to) = (i as f64 * BUCKET_SECONDS, (i + 1) as f64 * BUCKET_SECONDS);
        let overlaps = phase.checkpoints.iter().any(|(s, e)| *s < to && *e > from);
        if overlaps {
            during.push(*value);
        } else {
            outside.push(*value);
        }
    }
    (during, outside)
}

fn report_main(report: &mut Report, setting: &Setting, results: &[Vec<RunResult>]) {
    let mut per_model: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
    for (model, runs) in MODELS.iter().zip(results) {
        let spread = |f: &dyn Fn(&PhaseResult) -> f64| {
            Spread::of(&runs.iter().map(|r| f(&r.phase)).collect::<Vec<_>>())
        };
        let mean_spread = spread(&|p| mean(&p.buckets));
        let sd_spread = spread(&|p| sd(&p.buckets));
        let during_over_outside = spread(&|p| {
            let (d, o) = split(p);
            ratio(mean(&d), mean(&o))
        });
        let mut model_row = row([
            ("figure", Value::from("fig4-5")),
            ("setting", Value::from(setting.name)),
            ("variant", Value::from(model.name())),
        ]);
        mean_spread.insert_into(&mut model_row, "throughput_ops_per_s");
        sd_spread.insert_into(&mut model_row, "throughput_sd_ops_per_s");
        spread(&|p| mean(&split(p).0))
            .insert_into(&mut model_row, "throughput_during_checkpoint_ops_per_s");
        spread(&|p| mean(&split(p).1))
            .insert_into(&mut model_row, "throughput_outside_checkpoint_ops_per_s");
        during_over_outside.insert_into(&mut model_row, "during_over_outside");
        spread(&|p| p.checkpoints.len() as f64).insert_into(&mut model_row, "checkpoints");
        spread(&|p| {
            mean(
                &p.checkpoints
                    .iter()
                    .map(|(s, e)| (e - s) * 1000.0)
                    .collect::<Vec<_>>(),
            )
        })
        .insert_into(&mut model_row, "checkpoint_duration_ms");
        model_row.insert(
            "checkpoints_skipped".into(),
            Value::from(runs.iter().map(|r| r.phase.skipped).sum::<u64>()),
        );
        model_row.insert(
            "checkpoint_every_commands".into(),
            Value::from(runs.first().map_or(0, |r| r.phase.delta)),
        );
        for run in runs {
            report.check(
                "replicas' final state after the run",
                "the commands the clients were acknowledged",
                1,
                run.verified,
            );
            if !run.verified {
                report.notes.push(format!(
                    "{} {}: {}",
                    setting.name,
                    model.name(),
                    run.verification
                ));
            }
        }
        model_row.insert(
            "verified".into(),
            Value::from(runs.iter().all(|r| r.verified)),
        );
        if let Some(first) = runs.first() {
            model_row.insert(
                "verification_round0".into(),
                Value::from(first.verification.clone()),
            );
            model_row.insert(
                "timeline_round0_ops_per_s".into(),
                Value::from(first.phase.buckets.clone()),
            );
            model_row.insert(
                "timeline_round0_checkpoints_s".into(),
                Value::from(
                    first
                        .phase
                        .checkpoints
                        .iter()
                        .map(|(s, e)| vec![*s, *e])
                        .collect::<Vec<_>>(),
                ),
            );
        }
        report.rows.push(model_row);
        per_model.insert(
            model.name(),
            (
                mean_spread.median,
                sd_spread.median,
                during_over_outside.median,
            ),
        );
    }
    // The paper's setting gets the plain names; the shared one the suffix, beside it.
    let suffix = if setting.name == "paper" {
        ""
    } else {
        "_shared_2core"
    };
    let (concurrent, blocking) = (per_model["concurrent"], per_model["blocking"]);
    report.summary(
        &format!("concurrent_during_over_outside{suffix}"),
        concurrent.2,
    );
    report.summary(&format!("blocking_during_over_outside{suffix}"), blocking.2);
    report.summary(
        &format!("concurrent_over_blocking_mean{suffix}"),
        ratio(concurrent.0, blocking.0),
    );
    report.summary(
        &format!("concurrent_sd_over_blocking_sd{suffix}"),
        ratio(concurrent.1, blocking.1),
    );
}

/// Fig. 2: throughput and latency by client count (concurrent model, no checkpoints), one
/// loaded cluster, one phase per count, verified once at the end.
async fn fig2(
    env: &Env<'_>,
    setting: &Setting,
    setup: &Setup,
    counts: &[u64],
    seconds: f64,
    report: &mut Report,
    out: &Path,
) -> Result<()> {
    let dir = env.root.join(format!("{}-fig2", setting.name));
    let mut cluster = Cluster::start(env.binary, &dir, StateModel::Concurrent, setting)?;
    let leader = load_and_checkpoint(&cluster, setup.keys, setup.value_bytes).await?;
    let mut expected = Expected {
        keys: setup.keys,
        loaded: loaded_value(setup.value_bytes),
        acknowledged: BTreeMap::new(),
    };
    let mut points = Vec::new();
    for (phase_number, clients) in counts.iter().enumerate() {
        let plan = PhasePlan {
            phase: phase_number as u64,
            clients: *clients as usize,
            keys: setup.keys,
            value_bytes: setup.value_bytes,
            warmup_seconds: (seconds / 4.0).max(0.2),
            seconds,
            delta: Some(0),
            checkpoints_wanted: 0,
        };
        let phase = run_phase(&cluster, leader, &plan).await?;
        let latency = &phase.latency;
        points.push((phase.operations as f64 / phase.elapsed, latency.mean_ms()));
        report.rows.push(row([
            ("figure", Value::from("fig2")),
            ("setting", Value::from(setting.name)),
            ("variant", Value::from("concurrent")),
            ("clients", Value::from(*clients)),
            (
                "throughput_ops_per_s",
                Value::from(phase.operations as f64 / phase.elapsed),
            ),
            ("latency_mean_ms", Value::from(latency.mean_ms())),
            ("latency_p50_ms", Value::from(latency.quantile_ms(0.5))),
            ("latency_p99_ms", Value::from(latency.quantile_ms(0.99))),
        ]));
        // Phases run one after another, so later acknowledgements supersede earlier ones.
        expected.acknowledged.extend(phase.acknowledged);
    }
    let (verified, verification) = verify(&mut cluster, leader, &expected).await?;
    record_sweep_verification(report, "fig2", verified, verification);
    let chart = LineChart {
        title: format!(
            "prefixkv-smr ({} setting): latency against throughput, client counts {counts:?}",
            setting.name
        ),
        x_label: "throughput (ops/s)".into(),
        y_label: "mean latency (ms)".into(),
        series: vec![Series {
            label: "concurrent".into(),
            points,
        }],
        markers: Vec::new(),
        log_x: false,
    };
    write_line_chart(&chart, out, "smr-fig2")?;
    drop(cluster);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// The grid of the Fig. 6 sweep.
struct Fig6<'a> {
    sizes_mb: &'a [u64],
    clients: &'a [u64],
    seconds: f64,
}

/// Fig. 6: mean throughput by client count × state size, both models, checkpoints every Δ (Δ
/// from each phase's warm-up, about 2 checkpoints per phase).
async fn fig6(
    env: &Env<'_>,
    setting: &Setting,
    setup: &Setup,
    plan: &Fig6<'_>,
    report: &mut Report,
    out: &Path,
) -> Result<()> {
    let mut series = Vec::new();
    for (size_number, size_mb) in plan.sizes_mb.iter().enumerate() {
        for model in MODELS {
            let mut points = Vec::new();
            let keys = keys_for_mb(*size_mb, setup.value_bytes);
            let dir = env.root.join(format!(
                "{}-fig6-{size_number}-{}",
                setting.name,
                model.name()
            ));
            let mut cluster = Cluster::start(env.binary, &dir, model, setting)?;
            let leader = load_and_checkpoint(&cluster, keys, setup.value_bytes).await?;
            let mut expected = Expected {
                keys,
                loaded: loaded_value(setup.value_bytes),
                acknowledged: BTreeMap::new(),
            };
            for (phase_number, clients) in plan.clients.iter().enumerate() {
                let phase_plan = PhasePlan {
                    phase: phase_number as u64,
                    clients: *clients as usize,
                    keys,
                    value_bytes: setup.value_bytes,
                    warmup_seconds: (plan.seconds / 4.0).max(0.2),
                    seconds: plan.seconds,
                    delta: None,
                    checkpoints_wanted: 2,
                };
                let phase = run_phase(&cluster, leader, &phase_plan).await?;
                let (during, outside) = split(&phase);
                points.push((*clients as f64, phase.operations as f64 / phase.elapsed));
                report.rows.push(row([
                    ("figure", Value::from("fig6")),
                    ("setting", Value::from(setting.name)),
                    ("variant", Value::from(model.name())),
                    ("state_mb", Value::from(*size_mb)),
                    ("keys", Value::from(keys)),
                    ("clients", Value::from(*clients)),
                    (
                        "throughput_ops_per_s",
                        Value::from(phase.operations as f64 / phase.elapsed),
                    ),
                    (
                        "during_over_outside",
                        Value::from(ratio(mean(&during), mean(&outside))),
                    ),
                    ("checkpoints", Value::from(phase.checkpoints.len() as u64)),
                    ("checkpoint_every_commands", Value::from(phase.delta)),
                ]));
                expected.acknowledged.extend(phase.acknowledged);
            }
            let (verified, verification) = verify(&mut cluster, leader, &expected).await?;
            record_sweep_verification(
                report,
                &format!("fig6 {size_mb} MB {}", model.name()),
                verified,
                verification,
            );
            drop(cluster);
            std::fs::remove_dir_all(&dir).ok();
            series.push(Series {
                label: format!("{} {size_mb} MB", model.name()),
                points,
            });
        }
    }
    let chart = LineChart {
        title: format!(
            "prefixkv-smr ({} setting): throughput by clients and state size",
            setting.name
        ),
        x_label: "clients (log scale)".into(),
        y_label: "throughput (ops/s)".into(),
        series,
        markers: Vec::new(),
        log_x: true,
    };
    write_line_chart(&chart, out, "smr-fig6")
}

fn record_sweep_verification(
    report: &mut Report,
    what: &str,
    verified: bool,
    verification: String,
) {
    report.check(
        &format!("{what}: the replicas' final state"),
        "the commands the clients were acknowledged",
        1,
        verified,
    );
    if !verified {
        report.notes.push(format!("{what}: {verification}"));
    }
}

fn plot(common: &Common, setting: &Setting, results: &[Vec<RunResult>]) -> Result<()> {
    let mut chart = LineChart {
        title: format!(
            "prefixkv-smr ({} setting): leader throughput per 100 ms (round 0), checkpoint start/end",
            setting.name
        ),
        x_label: "time in benchmark phase (s)".into(),
        y_label: "throughput (ops/s)".into(),
        series: Vec::new(),
        markers: Vec::new(),
        log_x: false,
    };
    for (index, (model, runs)) in MODELS.iter().zip(results).enumerate() {
        let Some(first) = runs.first() else { continue };
        chart.series.push(Series {
            label: model.name().to_string(),
            points: first
                .phase
                .buckets
                .iter()
                .enumerate()
                .map(|(i, v)| ((i as f64 + 0.5) * BUCKET_SECONDS, *v))
                .collect(),
        });
        for (start, end) in &first.phase.checkpoints {
            for (x, end) in [(*start, false), (*end, true)] {
                chart.markers.push(Marker {
                    x,
                    series: Some(index),
                    end,
                });
            }
        }
    }
    let name = if setting.name == "paper" {
        "smr".to_string()
    } else {
        format!("smr-{}", setting.name)
    };
    write_line_chart(&chart, &common.out, &name)
}
