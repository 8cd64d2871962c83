//! `prefixkv-bench dredis`: D-Redis (DPR over unmodified redis-server) against a pass-through
//! proxy and Redis direct — the DPR paper's D-Redis experiment (seed 002, §6).
//!
//! YCSB-A (50% GET, 50% blind SET, 8-byte keys and values, uniform or zipfian keys) over N
//! shards on loopback. Contenders, alternated A B C, C B A over the rounds on the same keys:
//! - `direct`: the client pipelines batches straight to N plain redis-servers;
//! - `passthrough`: the same client library as D-Redis, through N proxies that only forward
//!   (same framing, no DPR state, no commits), to the same plain redis-servers;
//! - `dredis`: a D-Redis cluster (its own N redis-servers, proxies committing by BGSAVE every
//!   `--commit-interval-ms`, the exact finder and cluster manager).
//!
//! Every contender batches the same way (`--batch` commands per shard, `--window` batches in
//! flight per client thread). Operation latency is push → reply (it includes batching).
//! Commit latency (D-Redis only) is reply → the published cut covering the operation, observed
//! from the commit point computed every `--commit-poll-ms` against the cut the client's watcher
//! thread reads every 10 ms (so it is over-estimated by up to about 15 ms).
//!
//! Recovery: with clients writing unique keys to D-Redis, one redis-server is SIGKILLed;
//! `recovery_ms` is the time from the kill until every client completed a batch on the new
//! world-line (it includes the lease expiry that detects the failure, `--lease-ms`). Afterwards
//! every Redis is read and each client's keys must be exactly what its rollback report says
//! survived (present, absent, or uncertain for batches in flight at the failure), and no
//! operation inside the last commit point a client was told of may be reported lost by a
//! rollback (the report is checked against what the client was told): `verified`.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prefixkv_dpr::session::CommitPoint;
use prefixkv_dredis::client::{shard_for_key, ClientError, Fate, RollbackReport};
use prefixkv_dredis::redis::{encode_command, RedisConnection, RedisProcess, RedisServerConfig};
use prefixkv_dredis::wire::FrameLimits;
use prefixkv_dredis::{
    ClientConfig, DprRedisClient, DprRedisSession, LocalCluster, LocalClusterConfig,
    PassThroughProxy,
};
use prefixkv_resp::Reply;

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, ratio, Latencies, Spread};
use crate::workload::{KeyDistribution, KeyGenerator};
use crate::Common;

/// Flags of the `dredis` experiment.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Shard counts to measure (default 2,4; 2 with --quick).
    #[arg(long, value_delimiter = ',')]
    pub shards: Option<Vec<usize>>,
    /// Key distributions.
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipfian")]
    pub distributions: Vec<KeyDistribution>,
    /// Keys loaded (default 100000; 10000 with --quick).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Milliseconds per measured run (default 5000; 1000 with --quick).
    #[arg(long)]
    pub run_ms: Option<u64>,
    /// Client threads (each one session).
    #[arg(long, default_value_t = 2)]
    pub clients: usize,
    /// Commands per batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Batches in flight per client.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// D-Redis commit (BGSAVE) interval.
    #[arg(long, default_value_t = 100)]
    pub commit_interval_ms: u64,
    /// Lease after which a silent shard is failed.
    #[arg(long, default_value_t = 300)]
    pub lease_ms: u64,
    /// How often D-Redis clients compute their commit point (from the cut their watcher thread
    /// reads every 10 ms) for commit latency.
    #[arg(long, default_value_t = 5)]
    pub commit_poll_ms: u64,
    /// The redis-server executable.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: std::path::PathBuf,
}

const CONTENDERS: [&str; 3] = ["direct", "passthrough", "dredis"];

fn key_bytes(key: u64) -> [u8; 8] {
    let text = format!("{:08}", key % 100_000_000);
    text.as_bytes().try_into().expect("8 digits")
}

/// Redis direct: the same batching and window as the DPR client, plain RESP.
struct DirectSession {
    connections: Vec<RedisConnection>,
    buffered: Vec<Vec<u64>>,
    payloads: Vec<Vec<u8>>,
    in_flight: VecDeque<(usize, Vec<u64>)>,
    batch: usize,
    window: usize,
    next_tag: u64,
    completed: Vec<u64>,
}

impl DirectSession {
    fn connect(shards: &[SocketAddr], batch: usize, window: usize) -> Result<Self> {
        Ok(Self {
            connections: shards
                .iter()
                .map(|a| RedisConnection::connect(*a, Duration::from_secs(30)))
                .collect::<std::io::Result<_>>()?,
            buffered: vec![Vec::new(); shards.len()],
            payloads: vec![Vec::new(); shards.len()],
            in_flight: VecDeque::new(),
            batch,
            window,
            next_tag: 0,
            completed: Vec::new(),
        })
    }

    fn push(&mut self, args: &[&[u8]]) -> Result<u64> {
        let shard = shard_for_key(args[1], self.connections.len());
        encode_command(&mut self.payloads[shard], args);
        let tag = self.next_tag;
        self.next_tag += 1;
        self.buffered[shard].push(tag);
        if self.buffered[shard].len() >= self.batch {
            self.send(shard)?;
        }
        Ok(tag)
    }

    fn send(&mut self, shard: usize) -> Result<()> {
        while self.in_flight.len() >= self.window {
            self.receive()?;
        }
        self.connections[shard].send_raw(&self.payloads[shard])?;
        self.payloads[shard].clear();
        self.in_flight
            .push_back((shard, std::mem::take(&mut self.buffered[shard])));
        Ok(())
    }

    fn receive(&mut self) -> Result<()> {
        if let Some((shard, tags)) = self.in_flight.pop_front() {
            let mut raw = Vec::new();
            self.connections[shard].read_raw_replies(tags.len(), &mut raw)?;
            if raw.first() == Some(&b'-') {
                bail!("redis error reply: {}", String::from_utf8_lossy(&raw));
            }
            self.completed.extend(tags);
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<()> {
        for shard in 0..self.buffered.len() {
            if !self.buffered[shard].is_empty() {
                self.send(shard)?;
            }
        }
        while !self.in_flight.is_empty() {
            self.receive()?;
        }
        Ok(())
    }
}

enum Driver {
    Direct(DirectSession),
    Dpr(Box<DprRedisSession>),
}

struct Completion {
    tag: u64,
    sequence: u64,
}

impl Driver {
    fn push(&mut self, args: &[&[u8]]) -> Result<u64> {
        Ok(match self {
            Driver::Direct(s) => s.push(args)?,
            Driver::Dpr(s) => s.push(args)?,
        })
    }

    fn drain(&mut self) -> Result<()> {
        match self {
            Driver::Direct(s) => s.drain(),
            Driver::Dpr(s) => Ok(s.drain()?),
        }
    }

    fn take_completed(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        match self {
            Driver::Direct(s) => out.extend(
                s.completed
                    .drain(..)
                    .map(|tag| Completion { tag, sequence: tag }),
            ),
            Driver::Dpr(s) => {
                for c in s.take_completed() {
                    if matches!(c.reply, Reply::Error(_)) {
                        bail!("redis error reply: {:?}", c.reply);
                    }
                    out.push(Completion {
                        tag: c.tag,
                        sequence: c.sequence,
                    });
                }
            }
        }
        Ok(())
    }
}

struct RunResult {
    operations: u64,
    elapsed: Duration,
    /// Push to reply, per operation.
    latency: Latencies,
    /// Reply to the commit point covering it, per operation (D-Redis only).
    commit_latency: Latencies,
}

/// One client thread's run: YCSB-A for `run` on `driver`.
fn client_run(
    mut driver: Driver,
    distribution: KeyDistribution,
    keys: u64,
    seed: u64,
    run: Duration,
    measure_commits: bool,
    commit_poll: Duration,
) -> Result<RunResult> {
    let mut generator = KeyGenerator::new(distribution, keys, seed);
    let mut latency = Latencies::new();
    let mut commit_latency = Latencies::new();
    let mut pushed_at: VecDeque<Instant> = VecDeque::new();
    let mut first_tag = 0u64;
    let mut awaiting_commit: VecDeque<(u64, Instant)> = VecDeque::new();
    let mut completions = Vec::new();
    let mut operations = 0u64;
    let started = Instant::now();
    let mut last_commit_poll = started;
    let mut counter = seed;
    while started.elapsed() < run {
        for _ in 0..64 {
            let key = key_bytes(generator.next_key());
            if generator.percent() < 50 {
                driver.push(&[b"GET", &key])?;
            } else {
                counter = counter.wrapping_add(1);
                driver.push(&[b"SET", &key, &key_bytes(counter)])?;
            }
            pushed_at.push_back(Instant::now());
        }
        driver.take_completed(&mut completions)?;
        let now = Instant::now();
        for completion in completions.drain(..) {
            let index = (completion.tag - first_tag) as usize;
            if let Some(pushed) = pushed_at.get(index) {
                latency.record(now.duration_since(*pushed));
            }
            operations += 1;
            if measure_commits {
                awaiting_commit.push_back((completion.sequence, now));
            }
        }
        // Forget push times of the oldest operations once all of them completed (tags complete
        // out of order across shards, so keep a generous margin).
        while pushed_at.len() > 1 << 16 {
            pushed_at.pop_front();
            first_tag += 1;
        }
        if measure_commits && now.duration_since(last_commit_poll) >= commit_poll {
            last_commit_poll = now;
            if let Driver::Dpr(session) = &mut driver {
                let point = session.commit_point()?;
                while let Some(&(sequence, completed_at)) = awaiting_commit.front() {
                    let excluded = point
                        .excluded
                        .iter()
                        .any(|r| r.start <= sequence && sequence < r.end);
                    if sequence >= point.until_sequence || excluded {
                        break;
                    }
                    commit_latency.record(now.duration_since(completed_at));
                    awaiting_commit.pop_front();
                }
            }
        }
    }
    driver.drain()?;
    driver.take_completed(&mut completions)?;
    operations += completions.len() as u64;
    Ok(RunResult {
        operations,
        elapsed: started.elapsed(),
        latency,
        commit_latency,
    })
}

/// The three deployments for one shard count.
struct Deployment {
    cluster: LocalCluster,
    plain: Vec<RedisProcess>,
    passthrough: Vec<PassThroughProxy>,
    _directory: tempfile::TempDir,
}

impl Deployment {
    fn start(shards: usize, args: &Args) -> Result<Self> {
        let directory = tempfile::tempdir()?;
        let mut config = LocalClusterConfig::new(shards, directory.path().join("dredis"));
        config.redis_server = args.redis_server.clone();
        config.commit_interval_ms = args.commit_interval_ms;
        config.lease_ms = args.lease_ms;
        let cluster = LocalCluster::start(config).context("starting the D-Redis cluster")?;
        let mut plain = Vec::new();
        let mut passthrough = Vec::new();
        for shard in 0..shards {
            let process = RedisProcess::start(
                RedisServerConfig {
                    executable: args.redis_server.clone(),
                    port: prefixkv_dredis::cluster::free_port()?,
                    directory: directory.path().join(format!("plain-{shard}")),
                    start_timeout_ms: 10_000,
                },
                "dump.rdb",
            )?;
            passthrough.push(PassThroughProxy::start(
                shard as u64,
                SocketAddr::from(([127, 0, 0, 1], 0)),
                process.address(),
                FrameLimits::default(),
            )?);
            plain.push(process);
        }
        Ok(Self {
            cluster,
            plain,
            passthrough,
            _directory: directory,
        })
    }

    fn client_config(&self, contender: &str, args: &Args) -> ClientConfig {
        let mut config = self.cluster.client_config();
        if contender == "passthrough" {
            config.shards = self.passthrough.iter().map(|p| p.local_address()).collect();
        }
        config.window_batches = args.window;
        config.max_batch_commands = args.batch;
        config
    }

    fn driver(&self, contender: &str, args: &Args, session: u64) -> Result<Driver> {
        Ok(match contender {
            "direct" => Driver::Direct(DirectSession::connect(
                &self
                    .plain
                    .iter()
                    .map(RedisProcess::address)
                    .collect::<Vec<_>>(),
                args.batch,
                args.window,
            )?),
            _ => Driver::Dpr(Box::new(
                DprRedisClient::new(self.client_config(contender, args))?.session(session)?,
            )),
        })
    }

    /// Loads every key into both Redis sets.
    fn load(&self, keys: u64, args: &Args) -> Result<()> {
        for contender in ["direct", "dredis"] {
            let mut driver = self.driver(contender, args, 1_000_000)?;
            for key in 0..keys {
                let key = key_bytes(key);
                driver.push(&[b"SET", &key, &key])?;
            }
            driver.drain()?;
        }
        Ok(())
    }
}

/// Runs the recovery measurement; returns (recovery_ms, verified, notes).
fn recovery(deployment: &Deployment, args: &Args) -> Result<(f64, bool, Vec<String>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for client in 0..args.clients as u64 {
        let config = deployment.client_config("dredis", args);
        let stop = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || -> Result<_> {
            let session_id = 2_000_000 + client;
            let mut session = DprRedisClient::new(config)?.session(session_id)?;
            // Per tag: Some(true) present, Some(false) absent, None uncertain.
            let mut expected: BTreeMap<u64, Option<bool>> = BTreeMap::new();
            // The last commit point this client was told of: no operation inside it may be
            // reported lost by a rollback (the report is the system's claim, checked here; the
            // read-back below checks the report's survivors against Redis).
            let mut committed: Option<CommitPoint> = None;
            let mut lost_committed: Vec<u64> = Vec::new();
            let mut back_on_new_world_line: Option<Instant> = None;
            let mut rolled_back = false;
            let mut next_tag = 0u64;
            loop {
                let stopping = stop.load(Ordering::SeqCst);
                let step: Result<(), ClientError> = (|| {
                    if stopping {
                        return session.drain();
                    }
                    for _ in 0..16 {
                        // The session numbers pushes 0, 1, 2, ... (a failed send still uses one).
                        let tag = next_tag;
                        next_tag += 1;
                        expected.insert(tag, Some(false));
                        let key = format!("r{session_id}:{tag}");
                        session.push(&[b"SET", key.as_bytes(), b"v"])?;
                    }
                    session.flush()?;
                    committed = Some(session.commit_point()?);
                    Ok(())
                })();
                let completed = session.take_completed();
                if rolled_back && back_on_new_world_line.is_none() && !completed.is_empty() {
                    back_on_new_world_line = Some(Instant::now());
                }
                for c in completed {
                    expected.insert(c.tag, Some(true));
                }
                match step {
                    Ok(()) if stopping => break,
                    Ok(()) => {}
                    Err(ClientError::Rollback(report)) => {
                        rolled_back = true;
                        lost_committed.extend(lost_inside(committed.as_ref(), &report));
                        // What survived is the new floor of what the client may rely on.
                        if let Some(point) = committed.as_mut() {
                            point.until_sequence =
                                point.until_sequence.min(report.prefix.until_sequence);
                            point.excluded.clear();
                        }
                        for op in &report.operations {
                            expected.insert(
                                op.tag,
                                match op.fate {
                                    Fate::Survived => Some(true),
                                    Fate::Uncertain => None,
                                    Fate::Lost | Fate::Rejected | Fate::NotSent => Some(false),
                                },
                            );
                        }
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            Ok((session_id, expected, lost_committed, back_on_new_world_line))
        }));
    }
    // Load for a while (including commits) before the kill.
    std::thread::sleep(Duration::from_millis(4 * args.commit_interval_ms + 300));
    let pid = deployment.cluster.redis_pids()[0].context("shard 0 has no redis")?;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let kill_time = Instant::now();
    let world_line = deployment.cluster.cluster_state()?.world_line;
    let deadline = kill_time + Duration::from_secs(60);
    loop {
        let state = deployment.cluster.cluster_state()?;
        let all_back = deployment
            .cluster
            .proxy_world_lines()
            .iter()
            .all(|&w| w == state.world_line);
        if state.world_line > world_line && !state.recovering && all_back {
            break;
        }
        if Instant::now() > deadline {
            bail!("the D-Redis cluster did not recover within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Let every client complete batches on the new world-line.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let mut recovery_ms: f64 = 0.0;
    let mut verified = true;
    let mut notes = Vec::new();
    let redis = deployment.cluster.redis_addresses();
    for thread in threads {
        let (session_id, expected, lost_committed, back) = thread.join().expect("client thread")?;
        let Some(back) = back else {
            bail!("client {session_id} never completed a batch on the new world-line");
        };
        recovery_ms = recovery_ms.max(back.duration_since(kill_time).as_secs_f64() * 1000.0);
        let mut found = std::collections::BTreeSet::new();
        for address in &redis {
            let mut connection = RedisConnection::connect(*address, Duration::from_secs(10))?;
            if let Reply::Array(keys) =
                connection.command(&[b"KEYS", format!("r{session_id}:*").as_bytes()])?
            {
                for key in keys {
                    if let Reply::BulkString(key) = key {
                        found.insert(String::from_utf8_lossy(&key).into_owned());
                    }
                }
            }
        }
        let found_tags = found
            .iter()
            .filter_map(|key| key.strip_prefix(&format!("r{session_id}:"))?.parse().ok())
            .collect();
        let check = check_client(&expected, &found_tags);
        let (present, absent, uncertain) = (check.present, check.absent, check.uncertain);
        let wrong = check.mismatches + lost_committed.len() + (found.len() - found_tags.len());
        if let Some(sequence) = lost_committed.first() {
            notes.push(format!(
                "client {session_id}: operation {sequence} was inside a reported commit point but \
                 a rollback reported it lost"
            ));
        }
        let lost_committed = lost_committed.len();
        if wrong > 0 {
            verified = false;
        }
        notes.push(format!(
            "recovery client {session_id}: {present} present, {absent} absent, {uncertain} uncertain, \
             {lost_committed} lost inside a reported commit point, {wrong} mismatches"
        ));
    }
    Ok((recovery_ms, verified, notes))
}

/// Sizes after applying `--quick` defaults.
struct Plan {
    shard_counts: Vec<usize>,
    keys: u64,
    run: Duration,
    rounds: usize,
}

/// What the runs gather over shard counts and distributions, for the summary and the chart.
struct Totals {
    /// "contender distribution" → (shards, median ops/s) points.
    series: BTreeMap<String, Vec<(f64, f64)>>,
    dredis_over_passthrough: Vec<f64>,
    dredis_over_direct: Vec<f64>,
    commit_latency: Latencies,
    recovery_ms: f64,
}

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    init_logging();
    let plan = plan(common, args);
    let mut report = Report::new("dredis");
    write_config(&mut report, common, args, &plan)?;
    let mut totals = Totals {
        series: BTreeMap::new(),
        dredis_over_passthrough: Vec::new(),
        dredis_over_direct: Vec::new(),
        commit_latency: Latencies::new(),
        recovery_ms: f64::NAN,
    };
    for (shard_index, &shards) in plan.shard_counts.iter().enumerate() {
        let deployment = Deployment::start(shards, args)?;
        deployment.load(plan.keys, args)?;
        for &distribution in &args.distributions {
            let point = (shards, distribution);
            run_point(&mut report, &mut totals, &deployment, args, &plan, point)?;
        }
        if shard_index == 0 {
            let (measured, verified, notes) = recovery(&deployment, args)?;
            totals.recovery_ms = measured;
            report.check(
                "a verifier's writes read back after a shard failure and rollback",
                "what the client was told committed, with the rollback report's uncertain \
                 operations accepted either way",
                1,
                verified,
            );
            report.notes.extend(notes);
        }
    }
    write_summary(&mut report, &totals);
    write_chart(common, totals.series)?;
    Ok(report)
}

/// D-Redis logs slow latch holds and recoveries; RUST_LOG=warn (the default here) shows them.
/// Also `dpr`'s: the cluster manager logs failures and rollbacks.
pub(crate) fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

fn plan(common: &Common, args: &Args) -> Plan {
    Plan {
        shard_counts: args.shards.clone().unwrap_or(if common.quick {
            vec![2]
        } else {
            vec![2, 4]
        }),
        keys: args
            .keys
            .unwrap_or(if common.quick { 10_000 } else { 100_000 }),
        run: Duration::from_millis(
            args.run_ms
                .unwrap_or(if common.quick { 1000 } else { 5000 }),
        ),
        rounds: common.rounds(),
    }
}

fn write_config(report: &mut Report, common: &Common, args: &Args, plan: &Plan) -> Result<()> {
    report.config("quick", common.quick);
    report.config("shards", plan.shard_counts.clone());
    report.config("distributions", serde_json::to_value(&args.distributions)?);
    report.config("keys", plan.keys);
    report.config("run_ms", plan.run.as_millis() as u64);
    report.config("rounds", plan.rounds);
    report.config("clients", args.clients);
    report.config("batch", args.batch);
    report.config("window", args.window);
    report.config("commit_interval_ms", args.commit_interval_ms);
    report.config("lease_ms", args.lease_ms);
    report.config("commit_poll_ms", args.commit_poll_ms);
    report.config("mix", "ycsb-a r50bu50, 8-byte keys and values");
    report.config(
        "durability",
        "redis: --save \"\" --appendonly no for all; D-Redis commits by BGSAVE every commit_interval_ms (RDB fsynced by Redis, checksummed manifest); direct and passthrough have no durability",
    );
    report.notes.push(format!(
        "client threads and redis-servers share the machine's {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    Ok(())
}

/// Every contender at one (shards, distribution), alternated over the rounds; one row each.
fn run_point(
    report: &mut Report,
    totals: &mut Totals,
    deployment: &Deployment,
    args: &Args,
    plan: &Plan,
    (shards, distribution): (usize, KeyDistribution),
) -> Result<()> {
    let mut throughput: Vec<Vec<f64>> = vec![Vec::new(); CONTENDERS.len()];
    let mut latency: Vec<Latencies> = (0..CONTENDERS.len()).map(|_| Latencies::new()).collect();
    for (round, contender) in alternating_schedule(CONTENDERS.len(), plan.rounds) {
        let name = CONTENDERS[contender];
        let results = run_clients(deployment, args, plan, distribution, round, name)?;
        let mut operations = 0;
        let mut elapsed = Duration::ZERO;
        for result in results {
            operations += result.operations;
            elapsed = elapsed.max(result.elapsed);
            latency[contender].merge(&result.latency);
            totals.commit_latency.merge(&result.commit_latency);
        }
        let ops_per_s = operations as f64 / elapsed.as_secs_f64();
        throughput[contender].push(ops_per_s);
        eprintln!(
            "dredis: shards {shards} {distribution:?} round {round} {name}: {ops_per_s:.0} ops/s"
        );
    }
    let medians: Vec<f64> = throughput.iter().map(|t| median(t)).collect();
    totals
        .dredis_over_passthrough
        .push(ratio(medians[2], medians[1]));
    totals
        .dredis_over_direct
        .push(ratio(medians[2], medians[0]));
    for (contender, name) in CONTENDERS.iter().enumerate() {
        let mut r = row([
            ("variant", serde_json::Value::from(*name)),
            ("shards", shards.into()),
            ("distribution", serde_json::to_value(distribution)?),
            ("p50_latency_us", latency[contender].quantile_us(0.5).into()),
            (
                "p99_latency_us",
                latency[contender].quantile_us(0.99).into(),
            ),
        ]);
        Spread::of(&throughput[contender]).insert_into(&mut r, "throughput_ops_per_s");
        report.rows.push(r);
        totals
            .series
            .entry(format!("{name} {distribution:?}"))
            .or_default()
            .push((shards as f64, medians[contender]));
    }
    Ok(())
}

/// One round of one contender: `args.clients` client threads, each its own session.
fn run_clients(
    deployment: &Deployment,
    args: &Args,
    plan: &Plan,
    distribution: KeyDistribution,
    round: usize,
    name: &str,
) -> Result<Vec<RunResult>> {
    let mut handles = Vec::new();
    for client in 0..args.clients {
        let driver = deployment.driver(name, args, (round * 100 + client) as u64)?;
        let seed = (round * 1000 + client) as u64 + 1;
        let measure = name == "dredis";
        let commit_poll = Duration::from_millis(args.commit_poll_ms);
        let (keys, run) = (plan.keys, plan.run);
        handles.push(std::thread::spawn(move || {
            client_run(driver, distribution, keys, seed, run, measure, commit_poll)
        }));
    }
    handles
        .into_iter()
        .map(|handle| handle.join().expect("client thread"))
        .collect()
}

fn write_summary(report: &mut Report, totals: &Totals) {
    report.summary(
        "dredis_over_passthrough",
        median(&totals.dredis_over_passthrough),
    );
    report.summary("dredis_over_direct", median(&totals.dredis_over_direct));
    report.summary(
        "commit_latency_p50_ms",
        totals.commit_latency.quantile_ms(0.5),
    );
    report.summary(
        "commit_latency_p99_ms",
        totals.commit_latency.quantile_ms(0.99),
    );
    report.summary("recovery_ms", totals.recovery_ms);
    if totals.commit_latency.is_empty() {
        report
            .notes
            .push("no D-Redis operation was observed committed".into());
        report.check(
            "D-Redis operations observed committed",
            "at least one",
            0,
            false,
        );
    }
    report
        .summary
        .insert("verified".into(), report.verified_json());
}

fn write_chart(common: &Common, series: BTreeMap<String, Vec<(f64, f64)>>) -> Result<()> {
    write_line_chart(
        &LineChart {
            title: "D-Redis YCSB-A throughput (median over rounds)".into(),
            x_label: "shards".into(),
            y_label: "ops/s".into(),
            series: series
                .into_iter()
                .map(|(label, points)| Series { label, points })
                .collect(),
            markers: Vec::new(),
            log_x: false,
        },
        &common.out,
        "dredis",
    )
}

/// What the recovery check found for one client.
#[derive(Debug, Default, PartialEq, Eq)]
struct ClientCheck {
    present: usize,
    absent: usize,
    uncertain: usize,
    /// Tags whose presence in Redis differs from what the client was told (completed, or the
    /// rollback report's verdict), or found but never sent.
    mismatches: usize,
}

/// Compares what Redis holds (`found`, the client's tags) with each tag's expected fate.
fn check_client(
    expected: &BTreeMap<u64, Option<bool>>,
    found: &std::collections::BTreeSet<u64>,
) -> ClientCheck {
    let mut check = ClientCheck::default();
    for (tag, fate) in expected {
        let exists = found.contains(tag);
        match fate {
            Some(true) => check.present += 1,
            Some(false) => check.absent += 1,
            None => check.uncertain += 1,
        }
        if fate.is_some_and(|f| f != exists) {
            check.mismatches += 1;
        }
    }
    check.mismatches += found.iter().filter(|t| !expected.contains_key(t)).count();
    check
}

/// Sequence numbers a rollback reported lost (or rejected) although they were inside the last
/// commit point the client had been told of: the guarantee itself broken.
fn lost_inside(committed: Option<&CommitPoint>, report: &RollbackReport) -> Vec<u64> {
    let Some(point) = committed else {
        return Vec::new();
    };
    report
        .operations
        .iter()
        .filter(|op| matches!(op.fate, Fate::Lost | Fate::Rejected))
        .filter_map(|op| op.sequence)
        .filter(|&sequence| {
            sequence < point.until_sequence
                && !point
                    .excluded
                    .iter()
                    .any(|r| r.start <= sequence && sequence < r.end)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_dpr::session::SequenceRange;
    use prefixkv_dredis::client::OperationFate;
    use std::collections::BTreeSet;

    fn fates(n: u64) -> BTreeMap<u64, Option<bool>> {
        (0..n).map(|t| (t, Some(true))).collect()
    }

    #[test]
    fn an_intact_recovery_passes_and_a_dropped_write_fails() {
        let mut found: BTreeSet<u64> = (0..10).collect();
        assert_eq!(check_client(&fates(10), &found).mismatches, 0);
        found.remove(&3); // tampered: an acknowledged write removed from Redis
        assert_eq!(check_client(&fates(10), &found).mismatches, 1);
    }

    #[test]
    fn a_rollback_that_loses_a_committed_operation_fails() {
        let point = CommitPoint {
            until_sequence: 6,
            excluded: vec![SequenceRange { start: 2, end: 3 }],
        };
        let operation = |sequence: u64, fate| OperationFate {
            tag: sequence,
            sequence: Some(sequence),
            fate,
        };
        let report = RollbackReport {
            prefix: Default::default(),
            operations: vec![
                operation(2, Fate::Lost),     // excluded from the point: allowed
                operation(4, Fate::Survived), // inside and kept
                operation(5, Fate::Lost),     // inside the point and lost: the violation
                operation(7, Fate::Lost),     // after the point: allowed
            ],
        };
        assert_eq!(lost_inside(Some(&point), &report), vec![5]);
        assert!(lost_inside(None, &report).is_empty());
    }
}
