//! `prefixkv-bench smr`: the SMaRtTrie evaluation on prefixkv-smr.
//!
//! Three replicas on loopback, in this process, each with its own directory, TCP listeners and
//! disk log; closed-loop RESP clients (default 8) send update-only SETs on random loaded keys to
//! the leader. Phases per run: load (bulk `SetMany` entries, no checkpoints) → one checkpoint on
//! every replica → warm-up → benchmark, with a checkpoint every Δ commands. Both state models
//! (concurrent = CTrie, blocking = BTreeMap) alternate over the rounds. Throughput is sampled
//! every 100 ms at the clients (acknowledged by the leader); checkpoint start/end times come
//! from the leader's state machine.
//!
//! Verification per run (`verified`): each client writes only its own keys (congruent to its
//! number), each SET with a value unique to (client, sequence), and remembers each key's last
//! acknowledged value. Once the load stops, a follower is stopped and restarted from its own
//! directory (newest checkpoint + log replay, then catch-up), and every key is read back from
//! it: each must hold its last acknowledged value, or the loaded one if no write to it was
//! acknowledged. The replicas' digests are only reported.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use prefixkv_resp::Reply;
use prefixkv_smr::client::ClusterClient;
use prefixkv_smr::types::{Command, NodeId};
use prefixkv_smr::{Node, NodeConfig, StateModel};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::plot::{write_line_chart, LineChart, Marker, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Spread};
use crate::Common;

/// Flags of `prefixkv-bench smr`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keys loaded before the benchmark [default: 2,000,000; --quick: 100,000].
    #[arg(long)]
    pub keys: Option<u64>,
    /// Value size in bytes [default: 200; --quick: 100].
    #[arg(long)]
    pub value_bytes: Option<usize>,
    /// Closed-loop clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Benchmark phase of each run, in seconds [default: 30; --quick: 3].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Warm-up of each run, in seconds [default: 5; --quick: 1].
    #[arg(long)]
    pub warmup_seconds: Option<f64>,
    /// Δ, commands between checkpoints [default: from the first run's warm-up throughput, so
    /// that about `--checkpoints` happen in the benchmark phase; then the same Δ for every run].
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Checkpoints wanted per benchmark phase when Δ is chosen automatically.
    #[arg(long, default_value_t = 4)]
    pub checkpoints: u64,
    /// Where replicas keep their data [default: a temporary directory, removed afterwards].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

const MODELS: [StateModel; 2] = [StateModel::Concurrent, StateModel::Blocking];
const BUCKET_SECONDS: f64 = 0.1;
const WAIT: Duration = Duration::from_secs(300);

struct Setup {
    keys: u64,
    value_bytes: usize,
    clients: usize,
    seconds: f64,
    warmup_seconds: f64,
}

/// What one run measured.
struct RunResult {
    /// Ops/s per 100 ms bucket of the benchmark phase.
    buckets: Vec<f64>,
    /// Leader checkpoints (start, end) in seconds from the benchmark phase's start.
    checkpoints: Vec<(f64, f64)>,
    skipped: u64,
    delta: u64,
    verified: bool,
    verification: String,
}

impl RunResult {
    fn during_mask(&self) -> Vec<bool> {
        (0..self.buckets.len())
            .map(|i| {
                let (from, to) = (i as f64 * BUCKET_SECONDS, (i + 1) as f64 * BUCKET_SECONDS);
                self.checkpoints
                    .iter()
                    .any(|(start, end)| *start < to && *end > from)
            })
            .collect()
    }

    fn mean(values: &[f64]) -> f64 {
        if values.is_empty() {
            return f64::NAN;
        }
        values.iter().sum::<f64>() / values.len() as f64
    }

    fn sd(values: &[f64]) -> f64 {
        let mean = Self::mean(values);
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len().max(1) as f64).sqrt()
    }

    fn split(&self) -> (Vec<f64>, Vec<f64>) {
        let mask = self.during_mask();
        let during = self
            .buckets
            .iter()
            .zip(&mask)
            .filter(|(_, d)| **d)
            .map(|(v, _)| *v)
            .collect();
        let outside = self
            .buckets
            .iter()
            .zip(&mask)
            .filter(|(_, d)| !**d)
            .map(|(v, _)| *v)
            .collect();
        (during, outside)
    }
}

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let setup = Setup {
        keys: args
            .keys
            .unwrap_or(if common.quick { 100_000 } else { 2_000_000 }),
        value_bytes: args
            .value_bytes
            .unwrap_or(if common.quick { 100 } else { 200 }),
        clients: args.clients.max(1),
        seconds: args
            .seconds
            .unwrap_or(if common.quick { 3.0 } else { 30.0 }),
        warmup_seconds: args
            .warmup_seconds
            .unwrap_or(if common.quick { 1.0 } else { 5.0 }),
    };
    let rounds = common.rounds();
    let mut report = Report::new("smr");
    report.config("quick", common.quick);
    report.config("replicas", 3);
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
        "update-only SET on uniformly random loaded keys, closed loop",
    );
    report.config(
        "durability",
        "Raft log fdatasync per batch on every replica (group commit); checkpoints fsynced + renamed",
    );
    report.notes.push(format!(
        "3 replicas, {} client tasks and the checkpoint writers share this machine's {} cores in one process; \
         the paper ran one replica per machine",
        setup.clients,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    if !common.quick {
        report.notes.push(
            "state scaled from the paper's several GB to keys x value_bytes (see config)".into(),
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    let root = match &args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            tempfile::tempdir_in(dir)?
        }
        None => tempfile::tempdir()?,
    };
    let schedule = alternating_schedule(MODELS.len(), rounds);
    let progress = crate::progress::bar(schedule.len() as u64, "smr runs");
    let mut results: Vec<Vec<RunResult>> = MODELS.iter().map(|_| Vec::new()).collect();
    let mut delta = args.checkpoint_every;
    for (run_number, (round, contender)) in schedule.into_iter().enumerate() {
        let model = MODELS[contender];
        let dir = root
            .path()
            .join(format!("run-{run_number}-{}", model.name()));
        let result = runtime
            .block_on(run_once(model, &setup, &dir, delta, args.checkpoints))
            .with_context(|| format!("round {round}, model {}", model.name()))?;
        delta = Some(result.delta);
        std::fs::remove_dir_all(&dir).ok();
        progress.inc(1);
        results[contender].push(result);
    }
    progress.finish_and_clear();
    report.config("checkpoint_every_commands", delta.unwrap_or(0));

    let mut per_model: BTreeMap<&str, BTreeMap<&str, f64>> = BTreeMap::new();
    for (model, runs) in MODELS.iter().zip(&results) {
        let spread =
            |f: &dyn Fn(&RunResult) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
        let mean = spread(&|r| RunResult::mean(&r.buckets));
        let sd = spread(&|r| RunResult::sd(&r.buckets));
        let during = spread(&|r| RunResult::mean(&r.split().0));
        let outside = spread(&|r| RunResult::mean(&r.split().1));
        let during_over_outside = spread(&|r| {
            let (d, o) = r.split();
            ratio(RunResult::mean(&d), RunResult::mean(&o))
        });
        let checkpoints = spread(&|r| r.checkpoints.len() as f64);
        let checkpoint_ms = spread(&|r| {
            RunResult::mean(
                &r.checkpoints
                    .iter()
                    .map(|(s, e)| (e - s) * 1000.0)
                    .collect::<Vec<_>>(),
            )
        });
        let verified = runs.iter().all(|r| r.verified);
        for run in runs {
            report.record_verification(run.verified);
            if !run.verified {
                report
                    .notes
                    .push(format!("{}: {}", model.name(), run.verification));
            }
        }
        let mut model_row = row([("variant", Value::from(model.name()))]);
        mean.insert_into(&mut model_row, "throughput_ops_per_s");
        sd.insert_into(&mut model_row, "throughput_sd_ops_per_s");
        during.insert_into(&mut model_row, "throughput_during_checkpoint_ops_per_s");
        outside.insert_into(&mut model_row, "throughput_outside_checkpoint_ops_per_s");
        during_over_outside.insert_into(&mut model_row, "during_over_outside");
        checkpoints.insert_into(&mut model_row, "checkpoints");
        checkpoint_ms.insert_into(&mut model_row, "checkpoint_duration_ms");
        model_row.insert(
            "checkpoints_skipped".into(),
            Value::from(runs.iter().map(|r| r.skipped).sum::<u64>()),
        );
        model_row.insert("verified".into(), Value::from(verified));
        if let Some(first) = runs.first() {
            model_row.insert(
                "timeline_round0_ops_per_s".into(),
                Value::from(first.buckets.clone()),
            );
            model_row.insert(
                "timeline_round0_checkpoints_s".into(),
                Value::from(
                    first
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
            BTreeMap::from([
                ("mean", mean.median),
                ("sd", sd.median),
                ("during_over_outside", during_over_outside.median),
            ]),
        );
    }
    let (concurrent, blocking) = (&per_model["concurrent"], &per_model["blocking"]);
    report.summary(
        "concurrent_during_over_outside",
        concurrent["during_over_outside"],
    );
    report.summary(
        "blocking_during_over_outside",
        blocking["during_over_outside"],
    );
    report.summary(
        "concurrent_over_blocking_mean",
        ratio(concurrent["mean"], blocking["mean"]),
    );
    report.summary(
        "concurrent_sd_over_blocking_sd",
        ratio(concurrent["sd"], blocking["sd"]),
    );

    plot(common, &results)?;
    Ok(report)
}

fn plot(common: &Common, results: &[Vec<RunResult>]) -> Result<()> {
    let mut chart = LineChart {
        title: "prefixkv-smr: leader throughput per 100 ms (round 0), checkpoint start/end markers"
            .into(),
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
                .buckets
                .iter()
                .enumerate()
                .map(|(i, v)| ((i as f64 + 0.5) * BUCKET_SECONDS, *v))
                .collect(),
        });
        for (start, end) in &first.checkpoints {
            chart.markers.push(Marker {
                x: *start,
                series: Some(index),
                end: false,
            });
            chart.markers.push(Marker {
                x: *end,
                series: Some(index),
                end: true,
            });
        }
    }
    write_line_chart(&chart, &common.out, "smr")
}

async fn run_once(
    model: StateModel,
    setup: &Setup,
    dir: &std::path::Path,
    delta: Option<u64>,
    checkpoints_wanted: u64,
) -> Result<RunResult> {
    // Bind every listener first so that the peer map is known before any replica starts.
    let mut raft_listeners = BTreeMap::new();
    let mut client_listeners = BTreeMap::new();
    for id in 1..=3u64 {
        raft_listeners.insert(id, TcpListener::bind("127.0.0.1:0").await?);
        client_listeners.insert(id, TcpListener::bind("127.0.0.1:0").await?);
    }
    let peers: BTreeMap<NodeId, SocketAddr> = raft_listeners
        .iter()
        .map(|(id, l)| (*id, l.local_addr().unwrap()))
        .collect();
    let client_addresses: BTreeMap<NodeId, SocketAddr> = client_listeners
        .iter()
        .map(|(id, l)| (*id, l.local_addr().unwrap()))
        .collect();
    let config = |id: NodeId| {
        let mut config = NodeConfig::new(id, peers.clone(), dir.join(format!("replica-{id}")));
        config.model = model;
        config.checkpoint_every_commands = 0; // no checkpoints while loading
        config.heartbeat_ms = 100;
        config.election_timeout_min_ms = 1500;
        config
    };
    let mut nodes = BTreeMap::new();
    for id in 1..=3u64 {
        let node = Node::start_with_listeners(
            config(id),
            raft_listeners.remove(&id).unwrap(),
            client_listeners.remove(&id).unwrap(),
        )
        .await?;
        nodes.insert(id, node);
    }
    let phase = Instant::now();
    let leader_id = nodes[&1].wait_for_leader(WAIT).await?;
    tracing_phase("leader elected", phase);

    // Load: bulk entries straight into the leader's Raft (replicated and fsynced like any other).
    let batch = 1000u64;
    let value = vec![b'v'; setup.value_bytes];
    let loaders = 4u64;
    let mut loading = Vec::new();
    let rafts: BTreeMap<NodeId, _> = nodes
        .iter()
        .map(|(id, node)| (*id, node.raft.clone()))
        .collect();
    for loader in 0..loaders {
        let rafts = rafts.clone();
        let (keys, value) = (setup.keys, value.clone());
        loading.push(tokio::spawn(async move {
            let mut start = loader * batch;
            let mut leader = leader_id;
            while start < keys {
                let pairs: Vec<_> = (start..(start + batch).min(keys))
                    .map(|k| (key_bytes(k), value.clone()))
                    .collect();
                // A leader change under load is possible on a busy machine: follow it. SetMany
                // is idempotent, so a retried batch is harmless.
                let mut attempts = 0;
                loop {
                    match rafts[&leader]
                        .client_write(Command::SetMany {
                            pairs: pairs.clone(),
                        })
                        .await
                    {
                        Ok(_) => break,
                        Err(error) => {
                            attempts += 1;
                            if attempts > 100 {
                                return Err(anyhow!("load: {error}"));
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            if let Some(current) = rafts[&leader].metrics().borrow().current_leader
                            {
                                leader = current;
                            }
                        }
                    }
                }
                start += loaders * batch;
            }
            anyhow::Ok(())
        }));
    }
    for loader in loading {
        loader.await??;
    }
    tracing_phase("loaded", phase);
    let leader_id = nodes[&1].wait_for_leader(WAIT).await?;
    let loaded_index = nodes[&leader_id].shared.applied_index();
    // One checkpoint on every replica after the load, so the log behind it can be purged and
    // every run starts from the same shape of state.
    for node in nodes.values() {
        node.wait_applied(loaded_index, WAIT).await?;
        node.checkpoint_now(loaded_index, WAIT).await?;
    }

    tracing_phase("checkpointed after load", phase);
    // Clients (closed loop, RESP).
    let acknowledged = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for client_number in 0..setup.clients {
        let (acknowledged, stop, addresses) =
            (acknowledged.clone(), stop.clone(), client_addresses.clone());
        let (keys, value_bytes, clients_count) = (setup.keys, setup.value_bytes, setup.clients);
        clients.push(tokio::spawn(async move {
            let mut client = ClusterClient::new(addresses);
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (client_number as u64 + 1);
            // The oracle: each key's last acknowledged value. Client c writes only the keys
            // congruent to c, so a key's last acknowledged write is its final value.
            let mut last_acknowledged: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            let owned = client_keys(keys, clients_count, client_number);
            let mut sequence = 0u64;
            while !stop.load(Ordering::Relaxed) && owned > 0 {
                // xorshift: cheap, independent per client.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let key = (state % owned) * clients_count as u64 + client_number as u64;
                sequence += 1;
                let value = unique_value(client_number, sequence, value_bytes);
                match client.call(&[b"SET", &key_bytes(key), &value]).await? {
                    Reply::SimpleString(_) => {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                        last_acknowledged.insert(key, value);
                    }
                    other => anyhow::bail!("SET answered {other:?}"),
                }
            }
            anyhow::Ok(last_acknowledged)
        }));
    }
    // Warm-up; its throughput picks Δ when not given.
    let warmup_start_count = acknowledged.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(setup.warmup_seconds)).await;
    let warmup_rate =
        (acknowledged.load(Ordering::Relaxed) - warmup_start_count) as f64 / setup.warmup_seconds;
    let delta = delta.unwrap_or_else(|| {
        ((warmup_rate * setup.seconds / checkpoints_wanted.max(1) as f64) as u64).max(100)
    });
    for node in nodes.values() {
        node.shared.set_checkpoint_every(delta);
    }

    // Benchmark: sample the acknowledgement counter every 100 ms.
    let leader_shared = nodes[&leader_id].shared.clone();
    let events_before = leader_shared.events.lock().unwrap().len();
    let skipped_before = leader_shared.stats.skipped.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut buckets = Vec::new();
    let mut previous = acknowledged.load(Ordering::Relaxed);
    let bucket_count = (setup.seconds / BUCKET_SECONDS).round() as u64;
    let mut interval = tokio::time::interval_at(
        tokio::time::Instant::from_std(start) + Duration::from_secs_f64(BUCKET_SECONDS),
        Duration::from_secs_f64(BUCKET_SECONDS),
    );
    for _ in 0..bucket_count {
        interval.tick().await;
        let now = acknowledged.load(Ordering::Relaxed);
        buckets.push((now - previous) as f64 / BUCKET_SECONDS);
        previous = now;
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut expected: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for client in clients {
        expected.extend(client.await??);
    }
    for node in nodes.values() {
        node.shared.set_checkpoint_every(0);
    }
    let checkpoints: Vec<(f64, f64)> = {
        let events = leader_shared.events.lock().unwrap();
        events[events_before..]
            .iter()
            .filter_map(|event| {
                let started = event
                    .started
                    .checked_duration_since(start)
                    .map_or(0.0, |d| d.as_secs_f64());
                let finished = event.finished.map(|f| {
                    f.checked_duration_since(start)
                        .map_or(0.0, |d| d.as_secs_f64())
                });
                (started < elapsed).then(|| (started, finished.unwrap_or(elapsed).min(elapsed)))
            })
            .collect()
    };
    let skipped = leader_shared.stats.skipped.load(Ordering::Relaxed) - skipped_before;

    // Verification: restart a follower from its checkpoint + log; it must hold every key's
    // last acknowledged value (and the loaded value where no write was acknowledged).
    tracing_phase("benchmark done", phase);
    let (verified, verification) = verify(
        &mut nodes,
        leader_id,
        &config,
        &client_addresses,
        &Expected {
            keys: setup.keys,
            loaded: value,
            acknowledged: expected,
        },
    )
    .await?;
    tracing_phase("verified", phase);
    for (_, node) in nodes {
        node.shutdown().await?;
    }
    tracing_phase("shut down", phase);
    Ok(RunResult {
        buckets,
        checkpoints,
        skipped,
        delta,
        verified,
        verification,
    })
}

/// What clients were told: the loaded keys and each written key's last acknowledged value.
struct Expected {
    keys: u64,
    loaded: Vec<u8>,
    acknowledged: BTreeMap<u64, Vec<u8>>,
}

/// Restarts a follower from its checkpoint and log, waits until it applied what the leader
/// had, and reads every key back from it: each must hold its last acknowledged value (or the
/// loaded one). The replicas' own digests are reported beside, never trusted.
async fn verify(
    nodes: &mut BTreeMap<NodeId, Node>,
    leader_id: NodeId,
    config: &dyn Fn(NodeId) -> NodeConfig,
    client_addresses: &BTreeMap<NodeId, SocketAddr>,
    expected: &Expected,
) -> Result<(bool, String)> {
    let follower = *nodes
        .keys()
        .find(|id| **id != leader_id)
        .expect("3 replicas");
    let leader_applied = nodes[&leader_id].shared.applied_index();
    nodes.remove(&follower).unwrap().shutdown().await?;
    let restarted = Node::start(config(follower), client_addresses[&follower]).await?;
    let recovered_at = restarted
        .shared
        .current_checkpoint()
        .and_then(|m| m.last_log_id)
        .map_or(0, |l| l.index);
    restarted.wait_applied(leader_applied, WAIT).await?;
    let wrong = wrong_keys(expected, |key| restarted.shared.store.get(&key_bytes(key)));
    let recovered = restarted.shared.store.digest();
    nodes.insert(follower, restarted);
    let verified = wrong.is_empty() && recovered_at > 0;
    Ok((
        verified,
        format!(
            "replica {follower} restarted from checkpoint {recovered_at} + log to index {leader_applied}: \
             {} acknowledged writes and {} keys read back, {} wrong{}; digest {recovered:?}",
            expected.acknowledged.len(),
            expected.keys,
            wrong.len(),
            wrong
                .first()
                .map_or(String::new(), |k| format!(" (first: key {k})"))
        ),
    ))
}

/// Keys whose value in `read` is not what the clients were told.
fn wrong_keys(
    expected: &Expected,
    read: impl Fn(u64) -> Option<prefixkv_smr::store::Value>,
) -> Vec<u64> {
    (0..expected.keys)
        .filter(|key| {
            let want = expected
                .acknowledged
                .get(key)
                .map_or(expected.loaded.as_slice(), Vec::as_slice);
            read(*key).as_deref() != Some(want)
        })
        .collect()
}

/// How many keys client `client` of `clients` owns (keys congruent to it).
fn client_keys(keys: u64, clients: usize, client: usize) -> u64 {
    let (clients, client) = (clients as u64, client as u64);
    keys / clients + u64::from(client < keys % clients)
}

/// A value unique to (client, sequence), `value_bytes` long (longer if the tag needs it), so a
/// lost or reordered write changes what is read back.
fn unique_value(client: usize, sequence: u64, value_bytes: usize) -> Vec<u8> {
    let mut value = format!("c{client}s{sequence}:").into_bytes();
    value.resize(value.len().max(value_bytes), b'v');
    value
}

fn tracing_phase(what: &str, since: Instant) {
    if std::env::var_os("SMR_BENCH_PHASES").is_some() {
        eprintln!(
            "smr bench: {what} at {:.2} s",
            since.elapsed().as_secs_f64()
        );
    }
}

fn key_bytes(key: u64) -> Vec<u8> {
    format!("user{key:012}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected() -> Expected {
        let mut acknowledged = BTreeMap::new();
        acknowledged.insert(3, unique_value(0, 7, 16));
        acknowledged.insert(5, unique_value(1, 2, 16));
        Expected {
            keys: 8,
            loaded: b"loaded".to_vec(),
            acknowledged,
        }
    }

    fn image(expected: &Expected) -> BTreeMap<u64, Vec<u8>> {
        (0..expected.keys)
            .map(|k| {
                let v = expected.acknowledged.get(&k).unwrap_or(&expected.loaded);
                (k, v.clone())
            })
            .collect()
    }

    #[test]
    fn the_oracle_passes_an_intact_replica_and_catches_a_dropped_or_stale_write() {
        let expected = expected();
        let mut replica = image(&expected);
        let read = |r: &BTreeMap<u64, Vec<u8>>, k: u64| r.get(&k).map(|v| v.as_slice().into());
        assert!(wrong_keys(&expected, |k| read(&replica, k)).is_empty());
        replica.insert(3, unique_value(0, 6, 16)); // an older write of the same client
        assert_eq!(wrong_keys(&expected, |k| read(&replica, k)), vec![3]);
        replica.insert(3, expected.acknowledged[&3].clone());
        replica.remove(&5); // an acknowledged key lost
        assert_eq!(wrong_keys(&expected, |k| read(&replica, k)), vec![5]);
    }

    #[test]
    fn clients_own_every_key_once() {
        let (keys, clients) = (10u64, 3usize);
        let owned: u64 = (0..clients).map(|c| client_keys(keys, clients, c)).sum();
        assert_eq!(owned, keys);
        assert_ne!(unique_value(0, 1, 4), unique_value(1, 1, 4));
    }
}
