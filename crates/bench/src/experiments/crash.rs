//! `prefixkv-bench crash`: kill the engine at random moments and check what recovery makes of it.
//!
//! Each iteration starts a child process (this same binary, `crash --child`) that preloads a store,
//! runs worker sessions on the oracle's deterministic workload, and checkpoints back to back with a
//! strategy chosen per iteration. The child prints `session <id> <index>` for every session it
//! starts, `request <version> <acknowledged serial per session>` just before each checkpoint
//! request, and `published <version>` after each checkpoint is durable; each worker also raises
//! its issued and acknowledged serials in a shared counter file (`prefixkv_testkit::counters`)
//! around every operation. The parent reads the lines, and after a random number of publications
//! (and a random delay of up to a checkpoint's length, so kills land in segment writes, fsyncs and
//! around the manifest rename alike) sends SIGKILL.
//!
//! Then the parent opens the directory and checks the recovery against what the child's clients
//! were told, not against what the store reports: the recovered version is `v` or `v + 1`, where
//! `v` is the newest version the child reported durable (a checkpoint may become durable just
//! before the kill, before its line was printed); each session's CPR point lies between what it
//! had been acknowledged before that version was requested and the last serial it issued before
//! the kill; and the recovered image equals the oracle's state for those points — never a mixture.

use crate::report::{row, Report};
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_engine::{SessionId, Store, StoreConfig, Strategy};
use prefixkv_testkit::child::{self, ChildError, ChildProcess};
use prefixkv_testkit::counters::SharedCounters;
use prefixkv_testkit::oracle::{self, Op, PointBounds, WorkloadSpec};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Flags of `prefixkv-bench crash`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kill-and-recover iterations.
    #[arg(long, default_value_t = 30)]
    pub iterations: u32,
    /// Strategies to rotate through (comma separated). Default: all five.
    #[arg(long, value_delimiter = ',')]
    pub strategies: Option<Vec<String>>,
    /// Keys in the store.
    #[arg(long, default_value_t = 20_000)]
    pub keys: u64,
    /// Worker sessions in the child.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Seed for kill timing and workloads (iterations are repeatable from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the stores (a fresh subdirectory per iteration). Default: system temp.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Run the store with a storage tier (`StoreConfig::storage_tier`): the log's memory is a
    /// quarter of the dataset (`--log-memory-bytes` to change), the rest is evicted to the page
    /// file while the workers write and checkpoints run.
    #[arg(long)]
    pub storage_tier: bool,
    /// The log's memory budget with `--storage-tier`, bytes. Default: a quarter of the dataset
    /// (40 bytes per record), at least 8 pages.
    #[arg(long, requires = "storage_tier")]
    pub log_memory_bytes: Option<u64>,
    /// Internal: run as the child process in this directory.
    #[arg(long, hide = true)]
    pub child: Option<PathBuf>,
    /// Internal: the child's strategy.
    #[arg(long, hide = true)]
    pub child_strategy: Option<String>,
    /// Internal: the child's client counter file.
    #[arg(long, hide = true)]
    pub child_counters: Option<PathBuf>,
}

/// How long the parent waits for any line from the child before declaring it stuck: a minute,
/// plus half a minute per million keys (a 10M-key checkpoint at niceness 10 on a loaded machine
/// can take over a minute; a stuck child is still caught, only later).
fn child_line_timeout(keys: u64) -> Duration {
    Duration::from_secs(60 + keys.div_ceil(1_000_000) * 30)
}

/// Runs the stress (parent) or the child.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    if let Some(dir) = &args.child {
        run_child(dir, args)?;
        unreachable!("the child runs until it is killed");
    }
    let strategies: Vec<Strategy> = match &args.strategies {
        Some(names) => names
            .iter()
            .map(|n| {
                n.parse()
                    .map_err(|_| anyhow::anyhow!("unknown strategy {n:?}"))
            })
            .collect::<Result<_>>()?,
        None => Strategy::ALL.to_vec(),
    };
    if strategies.is_empty() || args.iterations == 0 {
        bail!("nothing to do: give at least one strategy and one iteration");
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut report = Report::new("crash");
    report.config("iterations", args.iterations);
    report.config("keys", args.keys);
    report.config("threads", args.threads);
    report.config("seed", args.seed);
    report.config("storage_tier", args.storage_tier);
    if args.storage_tier {
        report.config("log_memory_bytes", tier_memory_bytes(args));
        report.config("dataset_bytes_estimate", args.keys * RECORD_BYTES);
    }
    report.config(
        "strategies",
        strategies.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    let _ = common;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let progress = crate::progress::bar(u64::from(args.iterations), "crash");
    let mut per_strategy: HashMap<String, (u32, u32, u32)> = HashMap::new(); // (runs, passed, recovered at the reported version)
    for iteration in 0..args.iterations {
        let strategy = strategies[iteration as usize % strategies.len()];
        let outcome = one_iteration(args, &data_dir, strategy, iteration, &mut rng)
            .with_context(|| format!("iteration {iteration} ({strategy})"));
        let entry = per_strategy.entry(strategy.to_string()).or_default();
        entry.0 += 1;
        match outcome {
            Ok(at_reported) => {
                report.check(
                    "recovered image and CPR points after a SIGKILL (one per kill)",
                    "the client-side bounds and the oracle state at those points",
                    1,
                    true,
                );
                entry.1 += 1;
                entry.2 += u32::from(at_reported);
            }
            Err(error) => {
                eprintln!("crash: {error:#}");
                report.check(
                    "recovered image and CPR points after a SIGKILL (one per kill)",
                    "the client-side bounds and the oracle state at those points",
                    1,
                    false,
                );
                report.notes.push(format!("{error:#}"));
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let mut names: Vec<_> = per_strategy.keys().cloned().collect();
    names.sort();
    for name in names {
        let (runs, passed, at_reported) = per_strategy[&name];
        report.rows.push(row([
            ("variant", Value::from(name)),
            ("kills", Value::from(runs)),
            ("verified_recoveries", Value::from(passed)),
            ("recovered_reported_version", Value::from(at_reported)),
            ("recovered_next_version", Value::from(runs - at_reported)),
            ("verified", Value::from(runs == passed)),
        ]));
    }
    Ok(report)
}

/// One kill-and-recover cycle; returns whether recovery came back at the last *reported* version
/// rather than a newer one.
fn one_iteration(
    args: &Args,
    data_dir: &Path,
    strategy: Strategy,
    iteration: u32,
    rng: &mut SmallRng,
) -> Result<bool> {
    let dir = tempfile::Builder::new()
        .prefix("prefixkv-crash-")
        .tempdir_in(data_dir)
        .with_context(|| format!("creating a store directory in {}", data_dir.display()))?;
    let exe = std::env::current_exe().context("locating this binary to re-run it as the child")?;
    let seed = args
        .seed
        .wrapping_mul(1_000_003)
        .wrapping_add(u64::from(iteration));
    let counters_path = dir.path().join("client-counters");
    SharedCounters::create(&counters_path, counter_slots(args.threads))
        .context("creating the client counter file")?;
    let store_dir = dir.path().join("store");
    let mut command = Command::new(exe);
    command
        .arg("crash")
        .arg("--child")
        .arg(&store_dir)
        .arg("--child-strategy")
        .arg(strategy.to_string())
        .arg("--child-counters")
        .arg(&counters_path)
        .arg("--keys")
        .arg(args.keys.to_string())
        .arg("--threads")
        .arg(args.threads.to_string())
        .arg("--seed")
        .arg(seed.to_string());
    if args.storage_tier {
        command
            .arg("--storage-tier")
            .arg("--log-memory-bytes")
            .arg(tier_memory_bytes(args).to_string());
    }
    let mut process = ChildProcess::spawn_reporting(command).context("starting the child")?;
    let kill_after_publications = rng.random_range(1..=4u32);
    let jitter = Duration::from_micros(rng.random_range(0..40_000));
    let mut heard = Heard::default();
    let mut kill_at: Option<Instant> = None;
    loop {
        let wait = match kill_at {
            Some(at) if Instant::now() >= at => break,
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => child_line_timeout(args.keys),
        };
        match process.next_line(wait) {
            Ok(line) => {
                heard.take(&line)?;
                if kill_at.is_none() && heard.publications == kill_after_publications {
                    kill_at = Some(Instant::now() + jitter);
                }
            }
            Err(ChildError::Quiet(_)) if kill_at.is_some() => break,
            Err(error) => bail!("{error}"),
        }
    }
    // Lines still in the pipe when the child died count too: each was printed after what it says.
    for line in process.kill() {
        heard.take(&line)?;
    }
    let counters = SharedCounters::read_file(&counters_path)?;
    // What the killed child had evicted (before recovery discards what its checkpoint does not
    // name): the tier was used.
    let page_file_bytes = page_file_bytes(&store_dir.join("log"));
    if args.storage_tier && page_file_bytes == 0 {
        bail!("the child ran with a storage tier but its page file is empty: nothing was evicted");
    }

    let store = Store::open(child_config(&store_dir, args))
        .context("recovery refused a directory left by a killed process")?;
    let spec = child_spec(args.keys, seed);
    let version = check_recovery(&store, &spec, args.threads, &heard, &counters)?;
    Ok(version == heard.newest_published)
}

/// Checks a store recovered after the kill against what the child's clients were told: the
/// version is the newest reported durable or the next; each session's CPR point lies between
/// what it was acknowledged before that version's request (the child's `request` line) and the
/// last serial it issued (the counter file); the image is the state those points name. Returns
/// the recovered version.
fn check_recovery(
    store: &std::sync::Arc<Store>,
    spec: &WorkloadSpec,
    threads: u32,
    heard: &Heard,
    counters: &[u64],
) -> Result<u64> {
    let newest_published = heard.newest_published;
    let info = store
        .recovery_info()
        .context("no checkpoint recovered although some were published")?
        .clone();
    if info.version != newest_published && info.version != newest_published + 1 {
        bail!(
            "recovered version {} but version {newest_published} was reported durable (expected it or the next)",
            info.version
        );
    }
    let acknowledged = heard.requests.get(&info.version).with_context(|| {
        format!(
            "recovered version {}, which the child never requested",
            info.version
        )
    })?;
    let bounds: Vec<PointBounds> = (0..=threads)
        .map(|index| PointBounds {
            session: index,
            acknowledged_before_request: acknowledged.get(index as usize).copied().unwrap_or(0),
            issued: counters[issued_slot(index)],
        })
        .collect();
    let mut reported = Vec::new();
    for (id, serial) in &info.session_commit_points {
        match heard.sessions.get(id) {
            Some(&index) => reported.push((index, *serial)),
            // A session can be registered (and so be in a checkpoint) before its line is printed,
            // but it runs no operation before printing it.
            None if *serial == 0 => {}
            None => {
                bail!("recovered session {id} at serial {serial}, which the child never announced")
            }
        }
    }
    let mut reader = store.start_session();
    let mut image = Vec::new();
    let mut value = Vec::new();
    for key in 0..spec.keys {
        if reader.read(&key.to_be_bytes(), &mut value)? {
            image.push((key.to_be_bytes().to_vec(), value.clone()));
        }
    }
    oracle::verify_recovery(spec, &reported, &bounds, image).map_err(|problem| {
        anyhow::anyhow!(
            "recovered version {} does not hold what the clients were told: {problem} \
             (the checkpoint's session points {:?}; sessions announced {:?})",
            info.version,
            info.session_commit_points,
            heard.sessions
        )
    })?;
    Ok(info.version)
}

/// Counter slots: issued and acknowledged serial of each session index (0 = the loader).
fn counter_slots(threads: u32) -> usize {
    issued_slot(threads + 1)
}
fn issued_slot(index: u32) -> usize {
    index as usize * 2
}
fn acknowledged_slot(index: u32) -> usize {
    index as usize * 2 + 1
}

/// The child's store configuration (the parent recovers with the same): the index and the log
/// budget scale with the key count, as in `cpr`, so a 10M-key stress fits. The budget is four
/// times 64 bytes per record (records take 40 bytes since the compact format: more room), as `cpr`'s: every key's first write in a new version copies
/// its record, and compaction waits for the checkpoint to end. At twice (the old budget) a 10M-key
/// cpr-copy child with checkpoints back to back ran out of log memory after 30 s and its writer
/// failed (`OutOfMemory`): an error to that client, not a loss, but it ended the stress.
fn child_config(dir: &Path, args: &Args) -> StoreConfig {
    let mut config = base_config(dir, args.keys);
    if args.storage_tier {
        config.storage_tier = true;
        config.log_memory_bytes = tier_memory_bytes(args);
        // The page file through the page cache: the parent's oracle reads every key after each
        // kill, and with O_DIRECT each cold read is a device read (10M of them per recovery).
        // The stress is about what survives a kill, which the page cache does not change (a
        // SIGKILL keeps written pages); direct reads are the storage crate's tests.
        config.checkpoint_direct_io = false;
    }
    config
}

fn base_config(dir: &Path, keys: u64) -> StoreConfig {
    let mut config = StoreConfig::new(dir.to_path_buf());
    config.index_buckets = (keys as usize / 4).next_power_of_two().max(1 << 10);
    config.log_memory_bytes = (keys * 64 * 4).max(256 << 20);
    config.flusher_threads = 2;
    config
}

/// Bytes of one key's record in the child's workload (8-byte key and value, the 3-word header).
const RECORD_BYTES: u64 = 40;

/// The log's memory with `--storage-tier`: as given, or a quarter of the dataset (at least the
/// engine's minimum of 8 pages).
fn tier_memory_bytes(args: &Args) -> u64 {
    let page_bytes = StoreConfig::new(PathBuf::new()).log_page_bytes as u64;
    args.log_memory_bytes
        .unwrap_or(args.keys * RECORD_BYTES / 4)
        .max(8 * page_bytes)
}

/// Bytes of the page file's data segments in `dir` (0 if it does not exist).
fn page_file_bytes(dir: &Path) -> u64 {
    prefixkv_storage::pagefile::data_bytes(&*prefixkv_storage::real_disk(), dir).unwrap_or(0)
}

/// What the parent has heard from the child.
#[derive(Default)]
struct Heard {
    sessions: HashMap<SessionId, u32>,
    /// Per requested version: the acknowledged serial of each session index before the request.
    requests: BTreeMap<u64, Vec<u64>>,
    newest_published: u64,
    publications: u32,
}

impl Heard {
    fn take(&mut self, line: &str) -> Result<()> {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("session"), Some(id), Some(index)) => {
                self.sessions.insert(SessionId(id.parse()?), index.parse()?);
            }
            (Some("request"), Some(version), Some(first)) => {
                let acknowledged = std::iter::once(first)
                    .chain(words)
                    .map(str::parse)
                    .collect::<std::result::Result<Vec<u64>, _>>()?;
                self.requests.insert(version.parse()?, acknowledged);
            }
            (Some("published"), Some(version), None) => {
                self.newest_published = version.parse()?;
                self.publications += 1;
            }
            (Some("failed"), ..) => bail!("a client of the child failed: {line}"),
            _ => bail!("unexpected line from the child: {line:?}"),
        }
        Ok(())
    }
}

fn child_spec(keys: u64, seed: u64) -> WorkloadSpec {
    WorkloadSpec {
        keys,
        read_percent: 50,
        delete_percent: 0,
        cycle: 0,
        zipfian: seed % 2 == 1,
        seed,
    }
}

/// The child: preload, then workers under continuous checkpoints until killed.
fn run_child(dir: &Path, args: &Args) -> Result<()> {
    let strategy: Strategy = args
        .child_strategy
        .as_deref()
        .unwrap_or("persian")
        .parse()
        .map_err(|_| anyhow::anyhow!("bad --child-strategy"))?;
    let spec = child_spec(args.keys, args.seed);
    let counters = SharedCounters::open(
        args.child_counters
            .as_deref()
            .context("the child needs --child-counters")?,
    )?;
    let store = Store::open(child_config(dir, args))?;
    let mut loader = store.start_session();
    child::report(format!("session {} 0", loader.id().0));
    for serial in 1..=spec.keys {
        counters.raise(issued_slot(0), serial);
        if let Op::Upsert(key) = oracle::op_at(&spec, 0, serial) {
            loader.upsert(&key.to_be_bytes(), &oracle::encode_value(0, serial))?;
        }
        counters.raise(acknowledged_slot(0), serial);
    }
    loader.suspend();
    let stop = AtomicBool::new(false);
    let counters = &counters;
    std::thread::scope(|scope| -> Result<()> {
        for index in 1..=args.threads {
            let (store, spec, stop) = (&store, &spec, &stop);
            scope.spawn(move || {
                // A client that gets an error stops, and its dropped session is forgotten once a
                // checkpoint covers it: say so and end the child, or the parent would see only a
                // session missing from a later checkpoint.
                if let Err(error) = run_worker(store, spec, counters, stop, index) {
                    child::report(format!("failed session {index}: {error:#}"));
                    std::process::exit(3);
                }
            });
        }
        loop {
            // What every session had been acknowledged before the request: the checkpoint must
            // hold at least this (the single driver knows the version the request will get).
            let acknowledged: Vec<String> = (0..=args.threads)
                .map(|index| {
                    counters
                        .get(acknowledged_slot(index))
                        .load(Ordering::SeqCst)
                        .to_string()
                })
                .collect();
            let version = store.version();
            child::report(format!("request {version} {}", acknowledged.join(" ")));
            let token = store.checkpoint(strategy)?;
            anyhow::ensure!(
                token.version == version,
                "checkpoint got version {} where {version} was announced",
                token.version
            );
            let report = store.wait_for_commit(token, Duration::from_secs(600))?;
            child::report(format!("published {}", report.version));
        }
    })
}

/// One worker client of the child: the oracle's operations, counted around each acknowledgement.
fn run_worker(
    store: &std::sync::Arc<Store>,
    spec: &WorkloadSpec,
    counters: &SharedCounters,
    stop: &AtomicBool,
    index: u32,
) -> Result<()> {
    let mut session = store.start_session();
    child::report(format!("session {} {index}", session.id().0));
    let mut value = Vec::new();
    let mut serial = 0u64;
    while !stop.load(Ordering::Relaxed) {
        serial += 1;
        counters.raise(issued_slot(index), serial);
        match oracle::op_at(spec, index, serial) {
            Op::Read(key) => {
                session.read(&key.to_be_bytes(), &mut value)?;
            }
            Op::Upsert(key) => {
                session.upsert(&key.to_be_bytes(), &oracle::encode_value(index, serial))?
            }
            Op::Delete(key) => {
                session.delete(&key.to_be_bytes())?;
            }
        }
        counters.raise(acknowledged_slot(index), serial);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kill check is not vacuous: what a child would have reported, built in-process around a
    /// real checkpoint, passes; removing one acknowledged record from the recovered store, or a
    /// request line claiming one more acknowledgement than the checkpoint holds, fails it.
    #[test]
    fn check_recovery_catches_a_dropped_acknowledged_write() {
        let dir = tempfile::tempdir().unwrap();
        let spec = child_spec(3_000, 4);
        let worker_ops = 4_000u64;
        let mut heard = Heard::default();
        let mut counters = vec![0u64; counter_slots(1)];
        {
            let store = Store::open(base_config(dir.path(), spec.keys)).unwrap();
            let mut loader = store.start_session();
            heard.sessions.insert(loader.id(), 0);
            let mut worker = store.start_session();
            heard.sessions.insert(worker.id(), 1);
            for serial in 1..=spec.keys {
                if let Op::Upsert(key) = oracle::op_at(&spec, 0, serial) {
                    let value = oracle::encode_value(0, serial);
                    loader.upsert(&key.to_be_bytes(), &value).unwrap();
                }
            }
            let mut value = Vec::new();
            for serial in 1..=worker_ops {
                match oracle::op_at(&spec, 1, serial) {
                    Op::Read(key) => {
                        worker.read(&key.to_be_bytes(), &mut value).unwrap();
                    }
                    Op::Upsert(key) => worker
                        .upsert(&key.to_be_bytes(), &oracle::encode_value(1, serial))
                        .unwrap(),
                    Op::Delete(key) => {
                        worker.delete(&key.to_be_bytes()).unwrap();
                    }
                }
            }
            loader.suspend();
            worker.suspend();
            counters[issued_slot(0)] = spec.keys;
            counters[issued_slot(1)] = worker_ops;
            heard
                .requests
                .insert(store.version(), vec![spec.keys, worker_ops]);
            let token = store.checkpoint(Strategy::Persian).unwrap();
            let report = store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
            heard.newest_published = report.version;
        }
        let store = Store::open(base_config(dir.path(), spec.keys)).unwrap();
        check_recovery(&store, &spec, 1, &heard, &counters).expect("untampered");
        let mut overclaimed = Heard {
            sessions: heard.sessions.clone(),
            requests: heard.requests.clone(),
            ..Heard::default()
        };
        overclaimed.newest_published = heard.newest_published;
        for acknowledged in overclaimed.requests.values_mut() {
            acknowledged[1] += 1;
        }
        counters[issued_slot(1)] += 1;
        let error = check_recovery(&store, &spec, 1, &overclaimed, &counters).unwrap_err();
        assert!(
            format!("{error:#}").contains("acknowledged serial"),
            "{error:#}"
        );
        counters[issued_slot(1)] -= 1;
        let mut session = store.start_session();
        let key = (0..spec.keys)
            .map(u64::to_be_bytes)
            .find(|key| session.read(key, &mut Vec::new()).unwrap())
            .unwrap();
        session.delete(&key).unwrap();
        drop(session);
        let error = check_recovery(&store, &spec, 1, &heard, &counters).unwrap_err();
        assert!(format!("{error:#}").contains("missing key"), "{error:#}");
    }
}
