//! Fig. 16: failures and recovery. One DPR cluster (the largest worker count) under YCSB-A
//! sessions plus verifier sessions writing unique keys, for `--failure-seconds`; workers are
//! SIGKILLed (full run: one at a third of the run, then two `--kill-gap-ms` apart at two thirds,
//! the third while the cluster recovers from the second; quick: one kill) and restarted by the
//! launcher, which reports the failure to the cluster manager at once.
//!
//! Measured: completed, committed and lost operations per 250 ms (the paper's plot, first and
//! last bucket dropped); per failure, the time from the kill to the first operation completed on
//! a newer world-line (any session, and every session), and to the end of the recovery as the
//! metadata store reports it (`recovering` false on a newer world-line, as the client's cut
//! watcher reads it every 10 ms: a resolution of about 10 ms). `recovery_ms` of a failure is the larger of the first two
//! that bound it: first operation back and metadata recovery end.
//!
//! Verification (`verified`): every verifier session's keys are read back through the cluster
//! and must match its oracle ([`super::track::Oracle`]): operations inside the last commit point
//! the session was told of are present with their value whatever a rollback report says of them
//! (and none of them may be reported lost); after it, acknowledged operations that no rollback
//! reported lost are present, reported-lost ones are absent, reported-uncertain ones may go
//! either way; and every kill led to a new world-line.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use prefixkv_cluster::worker::Recoverability;
use prefixkv_cluster::LocalCluster;
use prefixkv_dpr::WorldLine;
use prefixkv_dprnet::client::ClientError;
use prefixkv_dprnet::DprRedisClient;
use prefixkv_resp::Reply;
use serde_json::Value;

use super::deploy::{ClusterSpec, Deployment, Device};
use super::session::{run_session, SessionOutcome, SessionPlan, Work};
use super::track::{Buckets, Oracle};
use super::Plan;
use crate::plot::{write_line_chart, LineChart, Marker, Series};
use crate::report::{row, Report};
use crate::Common;

/// Width of the timeline's buckets (the paper's).
const BUCKET: Duration = Duration::from_millis(250);
/// Bound on waiting for the cluster to finish recovering at the end of the run.
const RECOVERY_WAIT: Duration = Duration::from_secs(30);
/// Session ids of verifiers start here (YCSB sessions use 1..).
const VERIFIER_IDS: u64 = 100;

/// One injected failure.
struct Kill {
    worker: usize,
    at: Instant,
    world_line_before: WorldLine,
}

/// The published cluster state whenever it changed: (when, world-line, recovering).
type StateLog = Vec<(Instant, WorldLine, bool)>;

/// When to kill whom: (offset from the start, worker). One kill at 40% of the run; more: the
/// first at a third, the others `kill_gap` apart from two thirds on (the paper's 15 s, 30 s).
fn schedule(run: Duration, kills: usize, gap: Duration, workers: usize) -> Vec<(Duration, usize)> {
    match kills {
        0 => Vec::new(),
        1 => vec![(run.mul_f64(0.4), 0)],
        _ => std::iter::once((run / 3, 0))
            .chain((1..kills).map(|k| (run * 2 / 3 + gap * (k as u32 - 1), k % workers)))
            .collect(),
    }
}

/// Runs the failure part; returns the largest recovery time in ms (NaN if none measured).
pub(super) fn run(
    common: &Common,
    plan: &Plan,
    report: &mut Report,
    kind: FailureKind,
) -> Result<f64> {
    let workers = plan.max_workers();
    let spec = ClusterSpec {
        workers,
        level: Recoverability::Dpr,
        interval_ms: plan.interval_ms,
        device: Device::Disk,
    };
    let deployment = Deployment::start(plan, &spec)?;
    deployment.preload(plan.keys)?;
    let client = deployment.client(plan.batch, plan.window)?;
    let stop = AtomicBool::new(false);
    let monitor_stop = AtomicBool::new(false);
    let origin = Instant::now();
    let cluster = &deployment.cluster;
    let (outcomes, kills, states) = std::thread::scope(|scope| -> Result<_> {
        let monitor = scope.spawn(|| monitor(&client, &monitor_stop));
        let mut handles = Vec::new();
        for index in 0..plan.clients + plan.verifiers {
            let work = if index < plan.clients {
                Work::Ycsb {
                    distribution: plan.sweep_distribution,
                    keys: plan.keys,
                    seed: index as u64 + 77,
                }
            } else {
                Work::Unique {
                    ops_per_s: plan.verifier_ops_per_s,
                }
            };
            let id = match work {
                Work::Ycsb { .. } => 1 + index as u64,
                Work::Unique { .. } => VERIFIER_IDS + (index - plan.clients) as u64,
            };
            let session = SessionPlan {
                id,
                work,
                turn: if index < plan.clients {
                    plan.batch.clamp(16, 256)
                } else {
                    32
                },
                track_commits: true,
                commit_sample: 1,
                commit_poll: Duration::from_millis(2),
                commit_wait: Duration::from_millis(4 * plan.interval_ms) + Duration::from_secs(1),
                origin,
                bucket: BUCKET,
            };
            let (client, stop) = (&client, &stop);
            handles.push(scope.spawn(move || run_session(client, session, stop)));
        }
        let kills = inject(plan, cluster, origin, workers, kind);
        let settled = match &kills {
            Ok(kills) => wait_recovered(&client, cluster, kills),
            Err(_) => Ok(()),
        };
        stop.store(true, Ordering::SeqCst);
        let outcomes = handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a session thread panicked"))?)
            .collect::<Result<Vec<_>>>();
        monitor_stop.store(true, Ordering::SeqCst);
        let states = monitor
            .join()
            .map_err(|_| anyhow!("the monitor panicked"))?;
        let kills = kills?;
        settled?;
        Ok((outcomes?, kills, states?))
    })?;
    // From the sessions' first push to the end of their drain (not the commit wait after it).
    let elapsed = outcomes.iter().map(|o| o.elapsed).max().unwrap_or_default();
    let restarts: u32 = cluster.restarts().iter().sum();
    let check = verify(&client, &outcomes)?;
    drop(client);
    deployment.shutdown();
    let recovery = recovery_rows(report, &kills, &outcomes, &states, origin, kind);
    let mut verified = check.errors.is_empty();
    let expected_restarts = match kind {
        FailureKind::Kill => kills.len(),
        FailureKind::Simulated => 0,
    };
    if restarts as usize != expected_restarts {
        verified = false;
        report.notes.push(format!(
            "failures ({}): {} failures but {restarts} worker restarts",
            kind.name(),
            kills.len()
        ));
    }
    if recovery.iter().any(|r| r.metadata_ms.is_nan()) {
        verified = false;
        report
            .notes
            .push("failures: a kill was not followed by a recovery on a newer world-line".into());
    }
    report.check(
        &format!(
            "verifier sessions' writes read back after {} failures",
            kind.name()
        ),
        "what each verifier was acknowledged and told: inside the last commit point told \
         present whatever the rollback report says; after it, the report's fate (uncertain \
         accepted either way)",
        (check.present + check.absent + check.either) as u64,
        verified,
    );
    report.notes.extend(check.errors.iter().take(20).cloned());
    let final_world_line = states.last().map_or(0, |&(_, w, _)| w);
    if final_world_line > kills.len() as u64 {
        report.notes.push(format!(
            "failures: the cluster ended on world-line {final_world_line} after {} kills: \
             rollbacks nobody injected (lease expiries; the cluster manager's warnings on \
             stderr name the failed workers)",
            kills.len()
        ));
    }
    run_row(
        report,
        &outcomes,
        &check,
        (elapsed, final_world_line),
        (verified, kind),
    );
    timeline(common, report, &outcomes, &kills, origin, kind)?;
    Ok(recovery
        .iter()
        .map(|r| r.first_op_ms.max(r.metadata_ms))
        .fold(f64::NAN, f64::max))
}

/// Logs every change of the published state until `stop`, as the client's cut watcher reads it
/// (every 10 ms, on its own connection: polling the manager's store would contend with it).
fn monitor(client: &DprRedisClient, stop: &AtomicBool) -> Result<StateLog> {
    let mut log: StateLog = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let state = client
            .latest_cluster_state()
            .context("reading the published cluster state")?;
        if log
            .last()
            .is_none_or(|&(_, w, r)| (w, r) != (state.world_line, state.recovering))
        {
            log.push((Instant::now(), state.world_line, state.recovering));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(log)
}

/// How a failure is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureKind {
    /// The DPR paper's method (§7.4): the worker is reported failed to the cluster manager
    /// without crashing, so every worker, that one included, rolls back to the cut in memory.
    Simulated,
    /// SIGKILL of the worker's process: the survivors roll back in memory, the killed worker is
    /// started again and reloads its checkpoint in the cut from disk.
    Kill,
}

impl FailureKind {
    /// The name in rows and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Simulated => "simulated",
            FailureKind::Kill => "kill",
        }
    }

    /// The `figure` of this kind's rows: `failures<suffix>` for kills (as before),
    /// `failures-simulated<suffix>` for simulated failures.
    fn figure(self, suffix: &str) -> String {
        match self {
            FailureKind::Kill => format!("failures{suffix}"),
            FailureKind::Simulated => format!("failures-simulated{suffix}"),
        }
    }
}

/// Injects failures on schedule, then waits for the end of the run.
fn inject(
    plan: &Plan,
    cluster: &LocalCluster,
    origin: Instant,
    workers: usize,
    kind: FailureKind,
) -> Result<Vec<Kill>> {
    let mut kills = Vec::new();
    for (offset, worker) in schedule(plan.failure_run, plan.kills, plan.kill_gap, workers) {
        std::thread::sleep((origin + offset).saturating_duration_since(Instant::now()));
        let world_line_before = cluster.cluster_state()?.world_line;
        // A worker being restarted has no process for a moment: retry (bounded).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let injected = match kind {
                FailureKind::Kill => cluster.kill(worker),
                FailureKind::Simulated => {
                    cluster.report_failure(worker);
                    Ok(())
                }
            };
            match injected {
                Ok(()) => break,
                Err(error) if Instant::now() >= deadline => {
                    bail!("SIGKILL of worker {worker} failed: {error}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let at = Instant::now();
        eprintln!(
            "dpr failures: {} worker {worker} at {:.2} s (world-line {world_line_before})",
            match kind {
                FailureKind::Kill => "SIGKILLed",
                FailureKind::Simulated => "reported failed (no crash)",
            },
            at.duration_since(origin).as_secs_f64()
        );
        kills.push(Kill {
            worker,
            at,
            world_line_before,
        });
    }
    std::thread::sleep((origin + plan.failure_run).saturating_duration_since(Instant::now()));
    Ok(kills)
}

/// Waits (bounded) until the cluster is past the last kill's world-line and not recovering.
fn wait_recovered(client: &DprRedisClient, cluster: &LocalCluster, kills: &[Kill]) -> Result<()> {
    let Some(last) = kills.last() else {
        return Ok(());
    };
    let deadline = Instant::now() + RECOVERY_WAIT;
    loop {
        let state = client.latest_cluster_state()?;
        if state.world_line > last.world_line_before && !state.recovering {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the cluster did not finish recovering within {RECOVERY_WAIT:?} after the last \
                 kill (world-line {}, recovering {}); see the worker logs in {}",
                state.world_line,
                state.recovering,
                cluster.directory().display()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One failure's recovery times, ms (NaN when not observed).
struct Recovery {
    first_op_ms: f64,
    metadata_ms: f64,
}

fn ms_since(at: Instant, later: Option<Instant>) -> f64 {
    later.map_or(f64::NAN, |l| l.duration_since(at).as_secs_f64() * 1e3)
}

/// A row per kill; returns each kill's recovery times.
fn recovery_rows(
    report: &mut Report,
    kills: &[Kill],
    outcomes: &[SessionOutcome],
    states: &StateLog,
    origin: Instant,
    kind: FailureKind,
) -> Vec<Recovery> {
    let mut recoveries = Vec::new();
    for (index, kill) in kills.iter().enumerate() {
        let back = |outcome: &SessionOutcome| {
            outcome
                .back
                .iter()
                .filter(|&&(w, at)| w > kill.world_line_before && at >= kill.at)
                .map(|&(_, at)| at)
                .min()
        };
        let first = outcomes.iter().filter_map(back).min();
        let every = outcomes.iter().map(back).collect::<Option<Vec<_>>>();
        let all = every.and_then(|v| v.into_iter().max());
        let metadata = states
            .iter()
            .find(|&&(at, w, recovering)| {
                at >= kill.at && w > kill.world_line_before && !recovering
            })
            .map(|&(at, _, _)| at);
        let recovery = Recovery {
            first_op_ms: ms_since(kill.at, first),
            metadata_ms: ms_since(kill.at, metadata),
        };
        let nan_null = |v: f64| {
            if v.is_finite() {
                Value::from(v)
            } else {
                Value::Null
            }
        };
        report.rows.push(row([
            ("figure", Value::from(kind.figure(""))),
            ("failure_kind", Value::from(kind.name())),
            ("kill", (index + 1).into()),
            ("worker", kill.worker.into()),
            ("at_s", kill.at.duration_since(origin).as_secs_f64().into()),
            ("world_line_before", kill.world_line_before.into()),
            ("recovery_first_op_ms", nan_null(recovery.first_op_ms)),
            ("recovery_all_sessions_ms", nan_null(ms_since(kill.at, all))),
            ("recovery_metadata_ms", nan_null(recovery.metadata_ms)),
            (
                "recovery_ms",
                nan_null(recovery.first_op_ms.max(recovery.metadata_ms)),
            ),
        ]));
        recoveries.push(recovery);
    }
    recoveries
}

/// What reading the verifiers' keys back found.
struct Verification {
    present: usize,
    absent: usize,
    either: usize,
    errors: Vec<String>,
}

/// Reads every verifier key back through the cluster and checks it against the oracle.
fn verify(client: &DprRedisClient, outcomes: &[SessionOutcome]) -> Result<Verification> {
    let mut total = Verification {
        present: 0,
        absent: 0,
        either: 0,
        errors: Vec::new(),
    };
    for outcome in outcomes.iter().filter(|o| o.oracle.is_some()) {
        let oracle = outcome.oracle.as_ref().expect("filtered");
        let (found, world_line) = read_back(client, oracle)?;
        let check = oracle.check(&found);
        if check.present == 0 {
            total
                .errors
                .push(format!("verifier {}: nothing survived", oracle.session));
        }
        if outcome.uncommitted > 0 && world_line != outcome.world_line {
            // Operations never known committed may be lost by a rollback the session did not
            // live to see: their absence would not be a fault, so the check is not exact.
            total.errors.push(format!(
                "verifier {}: {} operations were not known committed when it ended on \
                 world-line {}, and the cluster rolled back to world-line {world_line} before \
                 the read-back: the check is inconclusive",
                oracle.session, outcome.uncommitted, outcome.world_line
            ));
        }
        eprintln!(
            "dpr failures: verifier {}: {} rollbacks, {} present, {} absent, {} uncertain, {} errors",
            oracle.session,
            oracle.rollbacks,
            check.present,
            check.absent,
            check.either,
            check.errors.len()
        );
        total.present += check.present;
        total.absent += check.absent;
        total.either += check.either;
        total.errors.extend(check.errors);
    }
    if outcomes.iter().all(|o| o.oracle.is_none()) {
        total
            .errors
            .push("no verifier session ran (--verifiers 0)".into());
    }
    Ok(total)
}

/// One verifier's keys as the cluster holds them (tag → value; absent keys omitted), and the
/// world-line they were read on. A rollback during the read (a worker failing after the run) is
/// retried on the new world-line with a fresh reader session, at most three times.
fn read_back(
    client: &DprRedisClient,
    oracle: &Oracle,
) -> Result<(BTreeMap<u64, Vec<u8>>, WorldLine)> {
    let tags: Vec<u64> = oracle.expected.keys().copied().collect();
    for attempt in 0..3u64 {
        let mut reader = client.session(10_000 + 1_000 * attempt + oracle.session)?;
        let read = tags
            .iter()
            .try_for_each(|&tag| {
                reader
                    .push(&[b"GET", &Oracle::key(oracle.session, tag)])
                    .map(drop)
            })
            .and_then(|()| reader.drain());
        match read {
            Ok(()) => {}
            Err(ClientError::Rollback(_)) => {
                eprintln!("dpr failures: a rollback during the read-back; reading again");
                continue;
            }
            Err(error) => return Err(error).context("reading the verifier keys back"),
        }
        let mut found = BTreeMap::new();
        for completed in reader.take_completed() {
            let tag = tags[completed.tag as usize];
            match completed.reply {
                Reply::BulkString(value) => {
                    found.insert(tag, value.to_vec());
                }
                Reply::Null | Reply::NullBulkString => {}
                other => bail!("GET of verifier key {tag} answered {other:?}"),
            }
        }
        return Ok((found, reader.world_line()));
    }
    bail!(
        "verifier {}: the read-back met a rollback three times",
        oracle.session
    )
}

/// The run's totals as one row.
fn run_row(
    report: &mut Report,
    outcomes: &[SessionOutcome],
    check: &Verification,
    (elapsed, final_world_line): (Duration, WorldLine),
    (verified, kind): (bool, FailureKind),
) {
    let sum = |f: &dyn Fn(&SessionOutcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    let completed = sum(&|o| o.completed);
    report.rows.push(row([
        ("figure", Value::from(kind.figure("-run"))),
        ("failure_kind", Value::from(kind.name())),
        ("seconds", elapsed.as_secs_f64().into()),
        ("completed_ops", completed.into()),
        (
            "throughput_ops_per_s",
            (completed as f64 / elapsed.as_secs_f64()).into(),
        ),
        (
            "committed_ops",
            sum(&|o| o.buckets.committed.iter().sum()).into(),
        ),
        ("lost_ops", sum(&|o| o.resolved.lost).into()),
        ("uncertain_ops", sum(&|o| o.resolved.uncertain).into()),
        ("session_rollbacks", sum(&|o| o.rollbacks).into()),
        ("final_world_line", final_world_line.into()),
        ("verifier_present", check.present.into()),
        ("verifier_absent", check.absent.into()),
        ("verifier_uncertain", check.either.into()),
        ("verification_errors", check.errors.len().into()),
        ("verified", verified.into()),
    ]));
}

/// Rows per 250 ms bucket and the Fig. 16 chart, kills marked.
fn timeline(
    common: &Common,
    report: &mut Report,
    outcomes: &[SessionOutcome],
    kills: &[Kill],
    origin: Instant,
    kind: FailureKind,
) -> Result<()> {
    let mut buckets = Buckets::new(origin, BUCKET);
    for outcome in outcomes {
        buckets.merge(&outcome.buckets);
    }
    let per_s = |n: u64| n as f64 / buckets.width_s();
    let (mut completed, mut committed) = (Vec::new(), Vec::new());
    // The paper drops the first and last bucket (start-up and the drain).
    for index in 1..buckets.len().saturating_sub(1) {
        let (t, done, commits, lost) = buckets.bucket(index);
        report.rows.push(row([
            ("figure", Value::from(kind.figure("-timeline"))),
            ("t_s", t.into()),
            ("completed_ops_per_s", per_s(done).into()),
            ("committed_ops_per_s", per_s(commits).into()),
            ("lost_ops", lost.into()),
        ]));
        completed.push((t, per_s(done)));
        committed.push((t, per_s(commits)));
    }
    write_line_chart(
        &LineChart {
            title: format!(
                "Throughput with failures ({}; 250 ms buckets; failures marked)",
                kind.name()
            ),
            x_label: "time (s)".into(),
            y_label: "ops/s".into(),
            series: vec![
                Series {
                    label: "completed".into(),
                    points: completed,
                },
                Series {
                    label: "committed".into(),
                    points: committed,
                },
            ],
            markers: kills
                .iter()
                .map(|k| Marker {
                    x: k.at.duration_since(origin).as_secs_f64(),
                    series: None,
                    end: false,
                })
                .collect(),
            log_x: false,
        },
        &common.out,
        &format!("dpr-{}", kind.figure("")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_follow_the_papers_schedule() {
        let run = Duration::from_secs(45);
        let gap = Duration::from_millis(100);
        assert_eq!(schedule(run, 1, gap, 3), vec![(Duration::from_secs(18), 0)]);
        assert_eq!(
            schedule(run, 3, gap, 3),
            vec![
                (Duration::from_secs(15), 0),
                (Duration::from_secs(30), 1),
                (Duration::from_millis(30_100), 2),
            ]
        );
        // Two workers: the third kill is worker 0 again.
        assert_eq!(schedule(run, 3, gap, 2)[2].1, 0);
        assert!(schedule(run, 0, gap, 2).is_empty());
    }
}
