//! `prefixkv-bench dredis`: D-Redis (DPR over unmodified redis-server) against a pass-through
//! proxy and Redis direct — the DPR paper's D-Redis experiment (SIGMOD 2021, §6).
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
//! every key of every client is read from every Redis and checked by `dpr`'s verifier oracle
//! ([`super::dpr::track::Oracle`], one classification for both experiments): an operation
//! inside the last commit point the client was told of must be present whatever the rollback
//! report says of it (and a report calling it lost is itself a failure); an acknowledged one
//! after it must be present unless the report says lost; only operations after that commit
//! point that the report calls uncertain may go either way; no other key may exist. `verified`.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prefixkv_dprnet::client::shard_for_key;
use prefixkv_dprnet::connection::{encode_command, RedisConnection};
use prefixkv_dprnet::wire::FrameLimits;
use prefixkv_dprnet::{ClientConfig, DprRedisClient, DprRedisSession};
use prefixkv_dredis::redis::{RedisProcess, RedisServerConfig};
use prefixkv_dredis::{LocalCluster, LocalClusterConfig, PassThroughProxy};
use prefixkv_resp::Reply;

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, ratio, Latencies, Spread};
use crate::workload::{KeyDistribution, KeyGenerator};
use crate::Common;

mod recovery;

use recovery::recovery;

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
                    port: prefixkv_dprnet::free_port()?,
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
            let recovery = recovery(&deployment, args)?;
            totals.recovery_ms = recovery.recovery_ms;
            report.check(
                "every recovery client's writes read back from Redis after a shard failure and \
                 rollback",
                "what each client was acknowledged and told: inside the last commit point told \
                 present whatever the rollback report says; after it, the report's fate \
                 (uncertain accepted either way)",
                recovery.operations,
                recovery.verified,
            );
            report.notes.extend(recovery.notes);
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
