//! The throughput parts of `dpr`: a cell is one cluster running YCSB-A sessions for the cell
//! time ([`run_cell`]); a comparison alternates its contenders over rounds ([`measure`]); the
//! scale-out (Figs. 10–12, 19), batch-size (Fig. 13) and checkpoint-interval (Fig. 14) parts
//! turn the measurements into rows and charts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use prefixkv_cluster::worker::Recoverability;
use serde_json::{Map, Value};

use super::deploy::{ClusterSpec, Deployment, Device};
use super::session::{run_session, SessionPlan, Work};
use super::{Plan, Totals};
use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, Latencies, Spread};
use crate::workload::KeyDistribution;
use crate::Common;

/// One cell's configuration.
#[derive(Clone, Copy, Debug)]
pub(super) struct CellSpec {
    pub cluster: ClusterSpec,
    pub distribution: KeyDistribution,
    pub batch: usize,
    pub window: usize,
}

/// A contender of a comparison: a label and its cell.
pub(super) struct Contender {
    pub label: String,
    pub spec: CellSpec,
}

/// A contender's measurements over the rounds.
#[derive(Default)]
pub(super) struct Measured {
    /// Throughput per round, ops/s.
    pub throughput: Vec<f64>,
    pub op_latency: Latencies,
    pub commit_latency: Latencies,
    pub rollbacks: u64,
    /// Sampled operations whose commit was not observed within the commit wait.
    pub uncommitted: u64,
}

/// Throughput cells track the commit of one operation in this many (see [`SessionPlan`]).
const COMMIT_SAMPLE: u64 = 32;

fn tracks_commits(level: Recoverability) -> bool {
    matches!(level, Recoverability::Dpr | Recoverability::Synchronous)
}

/// One round of one contender: a fresh cluster, preloaded, with `plan.clients` sessions.
fn run_cell(plan: &Plan, spec: &CellSpec, round: usize, into: &mut Measured) -> Result<f64> {
    let deployment = Deployment::start(plan, &spec.cluster)?;
    deployment.preload(plan.keys)?;
    let client = deployment.client(spec.batch, spec.window)?;
    let stop = AtomicBool::new(false);
    let origin = Instant::now();
    let interval = Duration::from_millis(spec.cluster.interval_ms);
    let outcomes = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.clients)
            .map(|client_index| {
                let session = SessionPlan {
                    id: 1 + client_index as u64,
                    work: Work::Ycsb {
                        distribution: spec.distribution,
                        keys: plan.keys,
                        seed: (round * 1000 + client_index) as u64 + 1,
                    },
                    turn: spec.batch.clamp(16, 256),
                    track_commits: tracks_commits(spec.cluster.level),
                    commit_sample: COMMIT_SAMPLE,
                    commit_poll: Duration::from_millis(2),
                    commit_wait: interval * 4 + Duration::from_secs(1),
                    origin,
                    bucket: Duration::from_millis(250),
                };
                let (client, stop) = (&client, &stop);
                scope.spawn(move || run_session(client, session, stop))
            })
            .collect();
        std::thread::sleep(plan.run);
        stop.store(true, Ordering::SeqCst);
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a session thread panicked"))?)
            .collect::<Result<Vec<_>>>()
    })?;
    drop(client);
    deployment.shutdown();
    let mut operations = 0;
    let mut elapsed = Duration::ZERO;
    for outcome in outcomes {
        operations += outcome.completed;
        elapsed = elapsed.max(outcome.elapsed);
        into.op_latency.merge(&outcome.op_latency);
        into.commit_latency.merge(&outcome.commit_latency);
        into.rollbacks += outcome.rollbacks;
        into.uncommitted += outcome.uncommitted as u64;
    }
    let ops_per_s = operations as f64 / elapsed.as_secs_f64().max(1e-9);
    into.throughput.push(ops_per_s);
    Ok(ops_per_s)
}

/// Every contender once per round, alternating the order (A B, B A, ...).
pub(super) fn measure(
    plan: &Plan,
    part: &str,
    contenders: &[Contender],
    rounds: usize,
) -> Result<Vec<Measured>> {
    let mut measured: Vec<Measured> = contenders.iter().map(|_| Measured::default()).collect();
    let schedule = alternating_schedule(contenders.len(), rounds);
    let bar = crate::progress::bar(schedule.len() as u64, &format!("dpr {part}"));
    for (round, index) in schedule {
        let contender = &contenders[index];
        let ops_per_s = run_cell(plan, &contender.spec, round, &mut measured[index])?;
        let line = format!(
            "dpr {part}: round {round} {}: {ops_per_s:.0} ops/s",
            contender.label
        );
        crate::progress::line(&bar, line);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(measured)
}

/// The row of one contender of `figure`.
fn cell_row(figure: &str, contender: &Contender, measured: &Measured) -> Map<String, Value> {
    let spec = &contender.spec;
    let nan_null = |v: f64| {
        if v.is_finite() {
            Value::from(v)
        } else {
            Value::Null
        }
    };
    let mut r = row([
        ("figure", Value::from(figure)),
        ("variant", contender.label.clone().into()),
        ("workers", spec.cluster.workers.into()),
        ("recoverability", spec.cluster.level.name().into()),
        (
            "distribution",
            serde_json::to_value(spec.distribution).unwrap_or(Value::Null),
        ),
        ("batch", spec.batch.into()),
        ("window", spec.window.into()),
        ("checkpoint_interval_ms", spec.cluster.interval_ms.into()),
        ("device", spec.cluster.device.name().into()),
        (
            "op_latency_p50_ms",
            nan_null(measured.op_latency.quantile_ms(0.5)),
        ),
        (
            "op_latency_p99_ms",
            nan_null(measured.op_latency.quantile_ms(0.99)),
        ),
        (
            "commit_latency_p50_ms",
            nan_null(measured.commit_latency.quantile_ms(0.5)),
        ),
        (
            "commit_latency_p99_ms",
            nan_null(measured.commit_latency.quantile_ms(0.99)),
        ),
        ("rollbacks", measured.rollbacks.into()),
        ("uncommitted_at_end", measured.uncommitted.into()),
    ]);
    Spread::of(&measured.throughput).insert_into(&mut r, "throughput_ops_per_s");
    r
}

pub(super) fn chart(
    common: &Common,
    name: &str,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: Vec<Series>,
    log_x: bool,
) -> Result<()> {
    write_line_chart(
        &LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series,
            markers: Vec::new(),
            log_x,
        },
        &common.out,
        name,
    )
}

const SCALE_OUT_LEVELS: [Recoverability; 3] = [
    Recoverability::None,
    Recoverability::Eventual,
    Recoverability::Dpr,
];

/// Figs. 10–11 (throughput against workers per level and distribution), 19 (every level at the
/// largest worker count, uniform) and 12 (latencies of the dpr cells there).
pub(super) fn scale_out(
    common: &Common,
    plan: &Plan,
    report: &mut Report,
    totals: &mut Totals,
) -> Result<()> {
    let mut series: Vec<Series> = Vec::new();
    let max_workers = plan.max_workers();
    for &workers in &plan.workers {
        for &distribution in &plan.distributions {
            let headline = workers == max_workers && distribution == KeyDistribution::Uniform;
            let mut levels = SCALE_OUT_LEVELS.to_vec();
            if headline {
                levels.push(Recoverability::Synchronous);
            }
            let contenders: Vec<Contender> = levels
                .iter()
                .map(|&level| Contender {
                    label: format!("{} {distribution:?} {workers}w", level.name()),
                    spec: CellSpec {
                        cluster: ClusterSpec {
                            workers,
                            level,
                            interval_ms: plan.interval_ms,
                            device: Device::Disk,
                        },
                        distribution,
                        batch: plan.batch,
                        window: plan.window,
                    },
                })
                .collect();
            let measured = measure(plan, "scale-out", &contenders, plan.rounds)?;
            for (contender, measured) in contenders.iter().zip(&measured) {
                let figure = if headline {
                    "scale-out+levels"
                } else {
                    "scale-out"
                };
                report.rows.push(cell_row(figure, contender, measured));
                let label = format!("{} {distribution:?}", contender.spec.cluster.level.name());
                let point = (workers as f64, median(&measured.throughput));
                match series.iter_mut().find(|s| s.label == label) {
                    Some(s) => s.points.push(point),
                    None => series.push(Series {
                        label,
                        points: vec![point],
                    }),
                }
            }
            if headline {
                record_headline(common, totals, &levels, &measured)?;
            }
        }
    }
    chart(
        common,
        "dpr",
        "D-FASTER scale-out on prefixkv workers (YCSB-A, median over rounds)",
        ("workers", "ops/s"),
        series,
        false,
    )
}

/// Fig. 19's comparison and Fig. 12's latency distributions.
fn record_headline(
    common: &Common,
    totals: &mut Totals,
    levels: &[Recoverability],
    measured: &[Measured],
) -> Result<()> {
    totals.headline = levels
        .iter()
        .zip(measured)
        .map(|(&level, m)| (level, median(&m.throughput)))
        .collect();
    let dpr = levels
        .iter()
        .position(|&l| l == Recoverability::Dpr)
        .expect("dpr is a scale-out level");
    totals.op_latency = Some(measured[dpr].op_latency.clone());
    totals.commit_latency = Some(measured[dpr].commit_latency.clone());
    chart(
        common,
        "dpr-levels",
        "Recoverability levels (1 none, 2 eventual, 3 dpr, 4 synchronous)",
        ("level", "ops/s"),
        vec![Series {
            label: "YCSB-A uniform, largest worker count".into(),
            points: totals
                .headline
                .iter()
                .enumerate()
                .map(|(i, &(_, t))| (i as f64 + 1.0, t))
                .collect(),
        }],
        false,
    )?;
    let distribution = |latencies: &Latencies| -> Vec<(f64, f64)> {
        (1..=99)
            .map(|p| (latencies.quantile_ms(p as f64 / 100.0), p as f64))
            .filter(|(ms, _)| ms.is_finite())
            .collect()
    };
    chart(
        common,
        "dpr-latency",
        "Operation completion and commit latency (dpr, distribution)",
        ("latency (ms, log)", "percentile"),
        vec![
            Series {
                label: "completion".into(),
                points: distribution(&measured[dpr].op_latency),
            },
            Series {
                label: "commit".into(),
                points: distribution(&measured[dpr].commit_latency),
            },
        ],
        true,
    )
}

/// Fig. 13: throughput and latency against the batch size.
pub(super) fn batch_sizes(common: &Common, plan: &Plan, report: &mut Report) -> Result<()> {
    let contenders: Vec<Contender> = plan
        .batch_sizes
        .iter()
        .map(|&batch| Contender {
            label: format!("b={batch}"),
            spec: CellSpec {
                cluster: ClusterSpec {
                    workers: plan.max_workers(),
                    level: Recoverability::Dpr,
                    interval_ms: plan.interval_ms,
                    device: Device::Disk,
                },
                distribution: plan.sweep_distribution,
                batch: batch.max(1),
                window: plan.window,
            },
        })
        .collect();
    let measured = measure(plan, "batch", &contenders, plan.sweep_rounds)?;
    let mut throughput = Vec::new();
    let mut latency = Vec::new();
    for (contender, measured) in contenders.iter().zip(&measured) {
        report.rows.push(cell_row("batch", contender, measured));
        let b = contender.spec.batch as f64;
        throughput.push((b, median(&measured.throughput)));
        latency.push((b, measured.op_latency.quantile_ms(0.5)));
    }
    chart(
        common,
        "dpr-batch",
        "Throughput against batch size (dpr, w batches in flight)",
        ("batch size b (log)", "ops/s"),
        vec![Series {
            label: "throughput".into(),
            points: throughput,
        }],
        true,
    )?;
    chart(
        common,
        "dpr-batch-latency",
        "Operation latency against batch size (dpr, p50)",
        ("batch size b (log)", "ms"),
        vec![Series {
            label: "p50 completion latency".into(),
            points: latency,
        }],
        true,
    )
}

/// Fig. 14: throughput and commit latency against the checkpoint interval, per device.
pub(super) fn intervals(common: &Common, plan: &Plan, report: &mut Report) -> Result<()> {
    let mut contenders = Vec::new();
    for &device in &plan.devices {
        for &interval_ms in &plan.intervals_ms {
            contenders.push(Contender {
                label: format!("{interval_ms}ms {}", device.name()),
                spec: CellSpec {
                    cluster: ClusterSpec {
                        workers: plan.max_workers(),
                        level: Recoverability::Dpr,
                        interval_ms: interval_ms.max(1),
                        device,
                    },
                    distribution: plan.sweep_distribution,
                    batch: plan.batch,
                    window: plan.window,
                },
            });
        }
    }
    let measured = measure(plan, "interval", &contenders, plan.sweep_rounds)?;
    let mut throughput: Vec<Series> = Vec::new();
    let mut commit: Vec<Series> = Vec::new();
    for (contender, measured) in contenders.iter().zip(&measured) {
        report.rows.push(cell_row("interval", contender, measured));
        let device = contender.spec.cluster.device.name();
        let x = contender.spec.cluster.interval_ms as f64;
        for (into, y) in [
            (&mut throughput, median(&measured.throughput)),
            (&mut commit, measured.commit_latency.quantile_ms(0.5)),
        ] {
            match into.iter_mut().find(|s| s.label == device) {
                Some(s) => s.points.push((x, y)),
                None => into.push(Series {
                    label: device.into(),
                    points: vec![(x, y)],
                }),
            }
        }
    }
    chart(
        common,
        "dpr-interval",
        "Throughput against checkpoint interval (dpr)",
        ("checkpoint interval (ms, log)", "ops/s"),
        throughput,
        true,
    )?;
    chart(
        common,
        "dpr-interval-commit",
        "Commit latency (p50) against checkpoint interval (dpr)",
        ("checkpoint interval (ms, log)", "ms"),
        commit,
        true,
    )
}
