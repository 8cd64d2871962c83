//! The `colocation` part of `dpr` (Fig. 15): throughput against the fraction of remote
//! operations when the clients run inside the worker processes.
//!
//! A co-located cell starts the 3-worker cluster with every worker process hosted by this bench
//! binary (`prefixkv-bench dpr-colocated-worker`, [`host`]): a `prefixkv_cluster::Worker` plus
//! `--colocated-clients` client threads whose sessions run the batches of the worker's own keys
//! on its engine directly and send the others over TCP. The bench preloads the key space, creates
//! the go file, and collects each process's counts (`load-<id>.json`); the cell's throughput is
//! the sum of the processes' rates. Each operation's key is drawn uniformly from the keys other
//! workers own with probability `remote fraction`, else from the worker's own (YCSB-A: 50% GET,
//! 50% blind SET). The baseline is today's all-remote setup at the same total client thread count:
//! `prefixkv-cluster worker` processes and the same load loop ([`host::run_threads`]) on threads
//! of this process over TCP, keys uniform over the whole key space, so the two differ only in
//! where the clients run and how their batches travel. Contenders alternate over rounds, each
//! cell on a fresh cluster.
//!
//! `colocated_over_remote` = median co-located throughput at 0 % remote ÷ median all-remote
//! baseline throughput. Verification: every worker process's verifier session writes unique keys
//! through its co-located client (local and remote), waits for them to commit, reads each back
//! and checks it against the rollback-aware oracle of the failure run; a disagreement, or writes
//! that never commit, clears the report's `verified`.

pub mod host;

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prefixkv_cluster::worker::Recoverability;
use serde_json::Value;

use super::deploy::{ClusterSpec, Deployment, Device};
use super::{Plan, Totals};
use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, Spread};
use crate::Common;

use host::{HostReport, Load};

/// Workers of every colocation cell (the paper's Fig. 15 uses a fixed cluster too).
pub(super) const WORKERS: usize = 3;

/// Unique keys each worker process's verifier writes and reads back.
const VERIFY_KEYS: u64 = 1000;

/// A contender: co-located clients at a remote fraction, or the all-remote baseline.
#[derive(Clone, Copy, Debug)]
enum Contender {
    Colocated(f64),
    Remote,
}

impl Contender {
    fn label(self) -> String {
        match self {
            Contender::Colocated(fraction) => format!("co-located {:.0}% remote", fraction * 100.0),
            Contender::Remote => "all-remote baseline".into(),
        }
    }
}

/// A contender's measurements over the rounds.
#[derive(Default)]
struct Outcome {
    throughput: Vec<f64>,
    /// Co-located: operations pushed, and those on the pushing worker's own keys.
    pushed: u64,
    pushed_local: u64,
    local_batches: u64,
    /// Co-located: rollbacks the processes' sessions saw.
    rollbacks: u64,
    /// Co-located: verifier operations expected present, and the oracle's disagreements (with
    /// a process whose writes did not commit counted as one).
    verify_present: u64,
    verify_errors: Vec<String>,
    verified_cells: u64,
}

fn cluster_spec(plan: &Plan) -> ClusterSpec {
    ClusterSpec {
        workers: WORKERS,
        level: Recoverability::Dpr,
        interval_ms: plan.interval_ms,
        device: Device::Disk,
    }
}

/// Runs the part: rows, the `dpr-colocation` chart and `colocated_over_remote`.
pub(super) fn run(
    common: &Common,
    plan: &Plan,
    report: &mut Report,
    totals: &mut Totals,
) -> Result<()> {
    let mut contenders: Vec<Contender> = plan
        .remote_fractions
        .iter()
        .map(|&f| Contender::Colocated(f))
        .collect();
    contenders.push(Contender::Remote);
    let mut outcomes: Vec<Outcome> = contenders.iter().map(|_| Outcome::default()).collect();
    let schedule = alternating_schedule(contenders.len(), plan.sweep_rounds);
    let bar = crate::progress::bar(schedule.len() as u64, "dpr colocation");
    for (round, index) in schedule {
        let contender = contenders[index];
        let into = &mut outcomes[index];
        let ops_per_s = match contender {
            Contender::Colocated(fraction) => run_colocated(plan, fraction, into)?,
            Contender::Remote => run_remote(plan, into)?,
        };
        into.throughput.push(ops_per_s);
        let line = format!(
            "dpr colocation: round {round} {}: {ops_per_s:.0} ops/s",
            contender.label()
        );
        crate::progress::line(&bar, line);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut colocated = Vec::new();
    let mut baseline = f64::NAN;
    for (contender, outcome) in contenders.iter().zip(&outcomes) {
        report.rows.push(contender_row(plan, *contender, outcome));
        if outcome.verified_cells > 0 {
            let passed = outcome.verify_errors.is_empty() && outcome.verify_present > 0;
            report.check(
                "co-located and remote verifier sessions' writes read back after the run",
                "the writes each verifier was told committed",
                outcome.verify_present,
                passed,
            );
            if !passed {
                report.notes.push(format!(
                    "colocation {}: verifier check failed ({} operations expected present): {}",
                    contender.label(),
                    outcome.verify_present,
                    outcome.verify_errors.join("; ")
                ));
            }
        }
        match contender {
            Contender::Colocated(f) => colocated.push((*f, median(&outcome.throughput))),
            Contender::Remote => baseline = median(&outcome.throughput),
        }
    }
    let at_zero = colocated
        .iter()
        .find(|(f, _)| *f == 0.0)
        .map_or(f64::NAN, |(_, t)| *t);
    totals.colocated_over_remote = Some(crate::stats::ratio(at_zero, baseline));
    let (first, last) = (
        colocated.first().map_or(0.0, |p| p.0),
        colocated.last().map_or(1.0, |p| p.0),
    );
    write_line_chart(
        &LineChart {
            title: "Co-located clients: throughput against remote operations (dpr, 3 workers)"
                .into(),
            x_label: "fraction of operations on other workers' keys".into(),
            y_label: "ops/s".into(),
            series: vec![
                Series {
                    label: "co-located clients".into(),
                    points: colocated,
                },
                Series {
                    label: "all-remote clients (same thread count)".into(),
                    points: vec![(first, baseline), (last, baseline)],
                },
            ],
            markers: Vec::new(),
            log_x: false,
        },
        &common.out,
        "dpr-colocation",
    )
}

fn contender_row(
    plan: &Plan,
    contender: Contender,
    outcome: &Outcome,
) -> serde_json::Map<String, Value> {
    let (mode, fraction) = match contender {
        Contender::Colocated(f) => ("colocated", Value::from(f)),
        Contender::Remote => ("remote", Value::Null),
    };
    let measured_remote = if outcome.pushed > 0 {
        Value::from(1.0 - outcome.pushed_local as f64 / outcome.pushed as f64)
    } else {
        Value::Null
    };
    let mut r = row([
        ("figure", Value::from("colocation")),
        ("variant", contender.label().into()),
        ("mode", mode.into()),
        ("remote_fraction", fraction),
        ("measured_remote_fraction", measured_remote),
        ("local_batches", outcome.local_batches.into()),
        ("workers", WORKERS.into()),
        ("clients_total", (WORKERS * plan.colocated_clients).into()),
        ("recoverability", "dpr".into()),
        ("distribution", "uniform".into()),
        ("batch", plan.batch.into()),
        ("window", plan.window.into()),
        ("checkpoint_interval_ms", plan.interval_ms.into()),
        ("rollbacks", outcome.rollbacks.into()),
    ]);
    if outcome.verified_cells > 0 {
        let passed = outcome.verify_errors.is_empty() && outcome.verify_present > 0;
        r.insert("verified".into(), passed.into());
        r.insert("verifier_present".into(), outcome.verify_present.into());
    }
    Spread::of(&outcome.throughput).insert_into(&mut r, "throughput_ops_per_s");
    r
}

/// One all-remote cell: a fresh cluster of `prefixkv-cluster worker` processes and the same load
/// as the co-located cells, from threads of this process over TCP, keys uniform over the whole
/// key space; returns ops/s.
fn run_remote(plan: &Plan, into: &mut Outcome) -> Result<f64> {
    let deployment = Deployment::start(plan, &cluster_spec(plan))?;
    deployment.preload(plan.keys)?;
    let client = deployment.client(plan.batch, plan.window)?;
    let keys: Vec<u64> = (0..plan.keys).collect();
    let load = Load {
        first_session: 1,
        threads: WORKERS * plan.colocated_clients,
        batch: plan.batch,
        remote_fraction: 0.0,
        run: plan.run,
    };
    let counts = host::run_threads(&load, &client, (&keys, &[]))?;
    drop(client);
    deployment.shutdown();
    into.rollbacks += counts.rollbacks;
    Ok(counts.completed as f64 / counts.elapsed.as_secs_f64().max(1e-9))
}

/// One co-located cell: a fresh cluster of hosting processes; returns ops/s.
fn run_colocated(plan: &Plan, fraction: f64, into: &mut Outcome) -> Result<f64> {
    let bench = std::env::current_exe().context("locating prefixkv-bench's own executable")?;
    let seconds = plan.run.as_secs_f64();
    let deployment = Deployment::start_with(plan, &cluster_spec(plan), |config| {
        let dir = config.directory.clone();
        config.executable = bench;
        config.worker_command = vec!["dpr-colocated-worker".into()];
        config.restart_failed = false;
        let mut extra: Vec<std::ffi::OsString> = Vec::new();
        for (flag, value) in [
            ("--clients", plan.colocated_clients.to_string()),
            ("--remote-fraction", fraction.to_string()),
            ("--keys", plan.keys.to_string()),
            ("--batch", plan.batch.to_string()),
            ("--window", plan.window.to_string()),
            ("--seconds", seconds.to_string()),
            ("--verify-keys", VERIFY_KEYS.to_string()),
        ] {
            extra.push(flag.into());
            extra.push(value.into());
        }
        extra.extend(["--go".into(), dir.join("go").into_os_string()]);
        extra.extend(["--report-dir".into(), dir.into_os_string()]);
        config.worker_extra_args = extra;
    })?;
    deployment.preload(plan.keys)?;
    let directory = deployment.cluster.directory().to_path_buf();
    std::fs::write(directory.join("go"), b"go\n")?;
    let deadline = Instant::now() + plan.run + Duration::from_secs(120);
    let mut reports: Vec<Option<HostReport>> = (0..WORKERS).map(|_| None).collect();
    while reports.iter().any(Option::is_none) {
        for (id, slot) in reports.iter_mut().enumerate() {
            let path = directory.join(format!("load-{id}.json"));
            if slot.is_none() && path.exists() {
                let text = std::fs::read(&path)?;
                *slot = Some(serde_json::from_slice(&text).context("a worker's load report")?);
            } else if slot.is_none() && deployment.cluster.pids()[id].is_none() {
                bail!(
                    "co-located worker {id} exited before reporting (log: {})",
                    directory.join(format!("worker-{id}.log")).display()
                );
            }
        }
        if Instant::now() >= deadline {
            bail!("co-located workers did not report within {:?}", plan.run);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    deployment.shutdown();
    let mut ops_per_s = 0.0;
    for report in reports.into_iter().flatten() {
        ops_per_s += report.completed as f64 / report.elapsed_s.max(1e-9);
        into.pushed += report.pushed;
        into.pushed_local += report.pushed_local;
        into.local_batches += report.local_batches;
        into.rollbacks += report.rollbacks;
        into.verify_present += report.verify_present;
        into.verify_errors.extend(report.verify_errors);
        if !report.verify_committed {
            into.verify_errors.push(format!(
                "worker {}'s verifier writes did not all commit within 30 s",
                report.worker
            ));
        }
    }
    into.verified_cells += 1;
    Ok(ops_per_s)
}
