//! The worker side of the `colocation` part: `prefixkv-bench dpr-colocated-worker` (hidden) runs
//! one cluster worker ([`prefixkv_cluster::Worker`], started from the same flags as
//! `prefixkv-cluster worker`, which the launcher passes) plus co-located client threads
//! ([`prefixkv_cluster::Worker::local_client`]), so that load generation stays out of the
//! product binary.
//!
//! Sequence: start the worker; read the published ownership (every worker's address) and split
//! the preloaded key space into the keys this worker owns and the others; wait for the go file
//! (the bench creates it once every worker serves and the key space is preloaded); run
//! `--clients` YCSB-A sessions for `--seconds`, each operation's key drawn uniformly from the
//! remote keys with probability `--remote-fraction`, else from the local ones; drain; then a
//! verifier session writes `--verify-keys` unique keys (local and remote), waits for them to
//! commit, reads each back and checks it against the rollback-aware oracle; finally the counts go to `<report-dir>/load-<id>.json` (written to
//! a temporary name and renamed, so the bench never reads half a file). The process then keeps
//! serving until it is killed: other workers' clients may still be sending it their remote keys.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use prefixkv_cluster::worker::Recoverability;
use prefixkv_cluster::{EngineConfig, Worker, WorkerConfig};
use prefixkv_dprnet::client::{ClientConfig, ClientError};
use prefixkv_dprnet::options::{FinderKind, MetadataLocation};
use prefixkv_dprnet::{DprRedisClient, DprRedisSession};
use prefixkv_engine::StoreConfig;
use prefixkv_resp::Reply;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::super::track::Oracle;
use crate::workload::operations::{encode_key, key};

/// Flags of `prefixkv-bench dpr-colocated-worker`: the worker flags of `prefixkv-cluster worker`
/// (as the launcher passes them) and the co-located load.
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// DPR worker id.
    #[arg(long)]
    pub id: u64,
    /// Listen address.
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    /// Worker directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// SQLite metadata store shared by the cluster.
    #[arg(long)]
    pub metadata: PathBuf,
    /// Commit (CPR checkpoint) interval.
    #[arg(long, default_value_t = 100)]
    pub checkpoint_interval_ms: u64,
    /// Recoverability level.
    #[arg(long, default_value = "dpr")]
    pub recoverability: Recoverability,
    /// Lease renewal interval.
    #[arg(long, default_value_t = 200)]
    pub heartbeat_interval_ms: u64,
    /// Engine index buckets.
    #[arg(long, default_value_t = 1 << 16)]
    pub index_buckets: usize,
    /// Engine log memory, bytes.
    #[arg(long, default_value_t = 256 << 20)]
    pub log_memory_bytes: u64,
    /// Co-located client threads (one session each).
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// Fraction of operations on keys other workers own.
    #[arg(long, default_value_t = 0.0)]
    pub remote_fraction: f64,
    /// Preloaded keys (`0..keys`).
    #[arg(long)]
    pub keys: u64,
    /// Commands per batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Batches in flight per session.
    #[arg(long, default_value_t = 16)]
    pub window: usize,
    /// Measured seconds.
    #[arg(long)]
    pub seconds: f64,
    /// The load starts once this file exists.
    #[arg(long)]
    pub go: PathBuf,
    /// Where `load-<id>.json` goes.
    #[arg(long)]
    pub report_dir: PathBuf,
    /// Unique keys the verifier writes and reads back.
    #[arg(long, default_value_t = 1000)]
    pub verify_keys: u64,
}

/// What one worker process reports.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct HostReport {
    pub worker: u64,
    /// YCSB operations completed by its client threads.
    pub completed: u64,
    /// The longest client thread's run, from its first push to the end of its drain.
    pub elapsed_s: f64,
    /// Batches its client threads ran on the local worker.
    pub local_batches: u64,
    /// Operations its client threads pushed, and those on keys this worker owns.
    pub pushed: u64,
    pub pushed_local: u64,
    /// Rollbacks its sessions saw (none unless a lease expired on a loaded machine).
    pub rollbacks: u64,
    /// Verifier: operations the oracle expects present, absent and either way, whether the
    /// session's writes all committed, and the oracle's first disagreements (none if verified).
    pub verify_present: u64,
    pub verify_absent: u64,
    pub verify_either: u64,
    pub verify_committed: bool,
    pub verify_errors: Vec<String>,
}

/// Runs the worker and its co-located load (see the module docs). Returns only on error.
pub fn host(args: &HostArgs) -> Result<()> {
    crate::experiments::dredis::init_logging();
    ensure!(
        (0.0..=1.0).contains(&args.remote_fraction),
        "--remote-fraction must be within 0..=1"
    );
    let mut store = StoreConfig::new(&args.dir);
    store.index_buckets = args.index_buckets;
    store.log_memory_bytes = args.log_memory_bytes;
    let mut config = WorkerConfig::new(args.id, args.listen, EngineConfig { store });
    config.checkpoint_interval_ms = args.checkpoint_interval_ms;
    config.recoverability = args.recoverability;
    config.heartbeat_interval_ms = args.heartbeat_interval_ms;
    let metadata = MetadataLocation::Sqlite(args.metadata.clone()).open()?;
    let worker = Worker::start(config, FinderKind::Exact.open(Arc::clone(&metadata))?)
        .context("starting the worker")?;
    let mut shards = Vec::new();
    for range in metadata.ownership()? {
        let index = range.worker as usize;
        if shards.len() <= index {
            shards.resize(index + 1, None);
        }
        shards[index] = Some(range.address.parse().context("a worker address")?);
    }
    let shards: Vec<std::net::SocketAddr> = shards
        .into_iter()
        .collect::<Option<_>>()
        .context("the ownership table misses a worker")?;
    let mut client_config = ClientConfig::new(shards, args.metadata.clone());
    client_config.max_batch_commands = args.batch.max(1);
    client_config.window_batches = args.window.max(1);
    let client = worker.local_client(client_config)?;
    let (local, remote) = split_keys(&client, args.id as usize, args.keys)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !args.go.exists() {
        ensure!(Instant::now() < deadline, "no go file after 120 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = run_load(args, &client, &local, &remote)?;
    let report = verify(args, &client, report)?;
    let path = args.report_dir.join(format!("load-{}.json", args.id));
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, serde_json::to_vec(&report)?)?;
    std::fs::rename(&temporary, &path)?;
    // Keep serving: other processes' clients may still send this worker their remote keys.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The preloaded keys this worker owns, and the others.
fn split_keys(client: &DprRedisClient, me: usize, keys: u64) -> Result<(Vec<u64>, Vec<u64>)> {
    let session = client.session(u64::MAX - me as u64)?;
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for index in 0..keys {
        if session.shard_of(&encode_key(key(index)))? == me {
            local.push(index);
        } else {
            remote.push(index);
        }
    }
    Ok((local, remote))
}

/// What load threads run: shared by the co-located worker processes and the all-remote
/// baseline, so the two differ only in where the client runs and how its batches travel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load {
    /// Session ids are `first_session + thread`.
    pub first_session: u64,
    /// Client threads, one session each.
    pub threads: usize,
    /// Commands per batch (pushes per turn: at least 16).
    pub batch: usize,
    /// Fraction of operations drawn from the second key pool.
    pub remote_fraction: f64,
    /// How long the threads push before they drain.
    pub run: Duration,
}

/// What a load's threads did, summed (`elapsed`: the longest thread's, from its first push to the
/// end of its drain).
#[derive(Default, Debug)]
pub(crate) struct LoadCounts {
    pub completed: u64,
    pub elapsed: Duration,
    pub local_batches: u64,
    pub pushed: u64,
    /// Pushes drawn from the first key pool (a co-located worker's own keys).
    pub pushed_local: u64,
    pub rollbacks: u64,
}

impl LoadCounts {
    fn add(&mut self, other: LoadCounts) {
        self.completed += other.completed;
        self.elapsed = self.elapsed.max(other.elapsed);
        self.local_batches += other.local_batches;
        self.pushed += other.pushed;
        self.pushed_local += other.pushed_local;
        self.rollbacks += other.rollbacks;
    }
}

/// Runs `load` on `client`: YCSB-A (50% GET, 50% blind SET) with each key drawn uniformly from
/// `pools.1` with probability `remote_fraction`, else from `pools.0` (one pool may be empty).
pub(crate) fn run_threads(
    load: &Load,
    client: &DprRedisClient,
    pools: (&[u64], &[u64]),
) -> Result<LoadCounts> {
    let outcomes = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..load.threads.max(1))
            .map(|thread| scope.spawn(move || client_thread(load, client, thread, pools)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a client thread panicked"))?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let mut total = LoadCounts::default();
    for counts in outcomes {
        total.add(counts);
    }
    Ok(total)
}

/// One session until `load.run` has passed, then drained. A rollback (a lease expiring on a
/// loaded machine) is counted and the session goes on, as the bench's own sessions do.
fn client_thread(
    load: &Load,
    client: &DprRedisClient,
    thread: usize,
    (local, remote): (&[u64], &[u64]),
) -> Result<LoadCounts> {
    let id = load.first_session + thread as u64;
    let mut session = client.session(id)?;
    let mut rng = SmallRng::seed_from_u64(id);
    let mut value = id << 40;
    let mut counts = LoadCounts::default();
    let started = Instant::now();
    loop {
        let stopping = started.elapsed() >= load.run;
        let step: Result<(), ClientError> = (|| {
            if stopping {
                return session.drain();
            }
            for _ in 0..load.batch.max(16) {
                let pick_local = remote.is_empty()
                    || (!local.is_empty() && rng.random::<f64>() >= load.remote_fraction);
                let pool = if pick_local { local } else { remote };
                // Counted here, not from sequence numbers: a push a rollback left unsent has none.
                counts.pushed += 1;
                counts.pushed_local += u64::from(pick_local);
                let key = encode_key(key(pool[rng.random_range(0..pool.len())]));
                if rng.random_range(0..100) < 50 {
                    session.push(&[b"GET", &key])?;
                } else {
                    value += 1;
                    session.push(&[b"SET", &key, &value.to_le_bytes()])?;
                }
            }
            Ok(())
        })();
        counts.completed += session.take_completed().len() as u64;
        match step {
            Ok(()) if stopping => break,
            Ok(()) => {}
            Err(ClientError::Rollback(_)) => counts.rollbacks += 1,
            Err(error) => bail!("session {id}: {error}"),
        }
    }
    counts.elapsed = started.elapsed();
    counts.local_batches = session.local_batches();
    Ok(counts)
}

/// The co-located YCSB-A threads of this worker process.
fn run_load(
    args: &HostArgs,
    client: &DprRedisClient,
    local: &[u64],
    remote: &[u64],
) -> Result<HostReport> {
    let load = Load {
        first_session: 10_000 + args.id * 100,
        threads: args.clients,
        batch: args.batch,
        remote_fraction: args.remote_fraction,
        run: Duration::from_secs_f64(args.seconds.max(0.05)),
    };
    let counts = run_threads(&load, client, (local, remote))?;
    Ok(HostReport {
        worker: args.id,
        completed: counts.completed,
        elapsed_s: counts.elapsed.as_secs_f64(),
        local_batches: counts.local_batches,
        pushed: counts.pushed,
        pushed_local: counts.pushed_local,
        rollbacks: counts.rollbacks,
        verify_present: 0,
        verify_absent: 0,
        verify_either: 0,
        verify_committed: false,
        verify_errors: Vec::new(),
    })
}

/// Unique keys written through the co-located client (local and remote), waited for until
/// committed, and read back, checked against the bench's rollback-aware oracle
/// ([`Oracle`]: acknowledged and not reported lost → present with its value; reported lost →
/// absent; uncertain → either), so a rollback (a lease expiring on a loaded machine) is judged
/// by what the session was told, never counted as a failure by itself.
fn verify(args: &HostArgs, client: &DprRedisClient, mut report: HostReport) -> Result<HostReport> {
    let id = 20_000 + args.id;
    let mut session = client.session(id)?;
    let mut oracle = Oracle::new(id);
    for tag in 0..args.verify_keys {
        oracle.pushed(tag);
        let pushed = session.push(&[b"SET", &Oracle::key(id, tag), &Oracle::value(tag)]);
        if let Err(error) = pushed {
            resolve(&mut oracle, &mut session, error, &mut report)?;
        }
    }
    let mut attempts = 0;
    loop {
        let step = session.drain().and_then(|()| {
            session.wait_for_commit(session.next_sequence(), Duration::from_secs(30))
        });
        for completed in session.take_completed() {
            oracle.completed(completed.tag);
        }
        match step {
            Ok(point) => {
                oracle.committed(&point);
                report.verify_committed = true;
                break;
            }
            Err(ClientError::CommitTimeout { .. }) => break,
            Err(error) if attempts < 3 => {
                attempts += 1;
                resolve(&mut oracle, &mut session, error, &mut report)?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    let found = read_back(&mut session, &oracle)?;
    let check = oracle.check(&found);
    report.verify_present = check.present as u64;
    report.verify_absent = check.absent as u64;
    report.verify_either = check.either as u64;
    report.verify_errors = check.errors.into_iter().take(5).collect();
    Ok(report)
}

/// A rollback's report goes to the oracle; any other error ends the verifier.
fn resolve(
    oracle: &mut Oracle,
    session: &mut DprRedisSession,
    error: ClientError,
    report: &mut HostReport,
) -> Result<()> {
    for completed in session.take_completed() {
        oracle.completed(completed.tag);
    }
    match error {
        ClientError::Rollback(rollback) => {
            oracle.rolled_back(&rollback);
            report.rollbacks += 1;
            Ok(())
        }
        other => Err(other.into()),
    }
}

/// Every verifier key read through the co-located session (tag → value, absent keys omitted);
/// a rollback while reading only repeats the reads.
fn read_back(session: &mut DprRedisSession, oracle: &Oracle) -> Result<BTreeMap<u64, Vec<u8>>> {
    let tags: Vec<u64> = oracle.expected.keys().copied().collect();
    if tags.is_empty() {
        return Ok(BTreeMap::new());
    }
    for attempt in 0.. {
        session.take_completed();
        let first = session
            .push(&[b"GET", &Oracle::key(oracle.session, tags[0])])
            .and_then(|first| {
                for &tag in &tags[1..] {
                    session.push(&[b"GET", &Oracle::key(oracle.session, tag)])?;
                }
                session.drain().map(|()| first)
            });
        match first {
            Ok(first) => {
                let mut found = BTreeMap::new();
                for completed in session.take_completed() {
                    let tag = tags[(completed.tag - first) as usize];
                    if let Reply::BulkString(value) = completed.reply {
                        found.insert(tag, value.to_vec());
                    }
                }
                return Ok(found);
            }
            Err(ClientError::Rollback(_)) if attempt < 3 => {}
            Err(error) => return Err(error.into()),
        }
    }
    unreachable!("the loop returns")
}
