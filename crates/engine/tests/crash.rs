//! Crash test: a child process (this test binary re-executed in child mode) runs writer sessions
//! and back-to-back checkpoints of every strategy; the parent SIGKILLs it after a varying number
//! of published checkpoints and checks the recovered store against what the child's clients were
//! told, never against what the store says about itself:
//! - the recovered version is at least the newest one the child saw published;
//! - each session's CPR point lies between the last serial it had been acknowledged before that
//!   checkpoint was requested (the child prints its counters just before each request) and the
//!   last serial it issued (kept in a shared counter file that survives the kill);
//! - the recovered image is exactly the state those points name (`prefixkv_testkit::oracle`).
//!
//! The same runs with a storage tier (`StoreConfig::storage_tier`, a 512 KiB memory budget, so
//! that records keep leaving memory for the page file while the clients write and read).
//!
//! `PREFIXKV_CRASH_ITERATIONS` (default 3) kills; `PREFIXKV_CRASH_SEED` replays kill points.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{apply, bounds, env_count, load, small_config, spec, verify_recovered};
use prefixkv_engine::{SessionId, Store, Strategy};
use prefixkv_testkit::child::{self, ChildProcess};
use prefixkv_testkit::counters::SharedCounters;
use prefixkv_testkit::oracle::WorkloadSpec;
use prefixkv_testkit::rng::Rng;

const KEYS: u64 = 2000;
/// Keys of the tiered runs: their records alone (about 1.6 MB) are three times the budget.
const TIERED_KEYS: u64 = 40_000;
const WORKERS: u32 = 2;
const OPS_PER_WORKER: u64 = 150_000;
const CHILD_ENV: &str = "PREFIXKV_CRASH_CHILD";
const COUNTERS_ENV: &str = "PREFIXKV_CRASH_COUNTERS";
/// Set (to anything) for a child that runs with a storage tier.
const TIER_ENV: &str = "PREFIXKV_CRASH_TIER";
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

/// The store's configuration: the engine tests' small one, with a storage tier if `tiered`.
fn config(dir: &Path, tiered: bool) -> prefixkv_engine::StoreConfig {
    let mut config = small_config(dir);
    if tiered {
        config.storage_tier = true;
        config.log_memory_bytes = 8 * config.log_page_bytes as u64;
        // Room for the keys of a scale run (about 8 per bucket).
        let keys = workload(true).keys as usize;
        config.index_buckets = config.index_buckets.max((keys / 8).next_power_of_two());
    }
    config
}

/// The workload; for scale runs `PREFIXKV_CRASH_TIER_KEYS` sets the tiered runs' keys and
/// `PREFIXKV_CRASH_ZIPFIAN` (set to anything) makes the keys zipfian (the children inherit both).
fn workload(tiered: bool) -> WorkloadSpec {
    let keys = if tiered {
        env_count("PREFIXKV_CRASH_TIER_KEYS", TIERED_KEYS)
    } else {
        KEYS
    };
    let mut spec = spec(keys, 3);
    spec.zipfian = std::env::var_os("PREFIXKV_CRASH_ZIPFIAN").is_some();
    spec
}

/// Counter slots: issued and acknowledged serial of each session index.
fn issued_slot(index: u32) -> usize {
    index as usize * 2
}
fn acknowledged_slot(index: u32) -> usize {
    index as usize * 2 + 1
}

/// The child's body; a no-op unless re-executed by the parent.
#[test]
fn crash_child() {
    let Some(dir) = child::child_mode(CHILD_ENV) else {
        return;
    };
    let counters = SharedCounters::open(Path::new(
        &std::env::var(COUNTERS_ENV).expect("the parent names the counter file"),
    ))
    .unwrap();
    let tiered = std::env::var_os(TIER_ENV).is_some();
    let store = Store::open(config(Path::new(&dir), tiered)).unwrap();
    let spec = workload(tiered);
    let loader = load(&store, &spec);
    counters.raise(issued_slot(0), spec.keys);
    counters.raise(acknowledged_slot(0), spec.keys);
    child::report(format!("session {} 0", loader.id().0));
    let counters = &counters;
    std::thread::scope(|scope| {
        for index in 1..=WORKERS {
            let mut session = store.start_session();
            child::report(format!("session {} {index}", session.id().0));
            scope.spawn(move || {
                let mut out = Vec::new();
                for serial in 1..=OPS_PER_WORKER {
                    counters.raise(issued_slot(index), serial);
                    // A client that gets an error stops, and the store forgets its dropped
                    // session once a checkpoint covers it: say so and end the child rather than
                    // leave the parent to find a session missing from a later checkpoint.
                    if let Err(error) = apply(&mut session, &spec, index, serial, &mut out) {
                        child::report(format!("failed session {index}: {error}"));
                        std::process::exit(3);
                    }
                    counters.raise(acknowledged_slot(index), serial);
                }
                session.suspend();
                // Stay alive (idle) until killed.
                std::thread::park();
            });
        }
        for round in 0u64.. {
            let strategy = Strategy::ALL[round as usize % 5];
            // The acknowledgements known before the request: the checkpoint must hold them.
            let acknowledged: Vec<String> = (0..=WORKERS)
                .map(|index| {
                    counters
                        .get(acknowledged_slot(index))
                        .load(std::sync::atomic::Ordering::SeqCst)
                        .to_string()
                })
                .collect();
            child::report(format!(
                "request {} {}",
                store.version(),
                acknowledged.join(" ")
            ));
            let token = store.checkpoint(strategy).unwrap();
            let report = store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
            child::report(format!("published {} {strategy}", report.version));
        }
    });
}

/// What the parent heard from one child.
#[derive(Default)]
struct Heard {
    indices: BTreeMap<SessionId, u32>,
    /// Acknowledged serials per session index, by the version whose request they preceded.
    requests: BTreeMap<u64, Vec<u64>>,
    published: u64,
    newest_published: u64,
    /// Bytes in the page file when the child died (tiered runs).
    evicted_bytes: u64,
}

impl Heard {
    fn take(&mut self, line: &str) {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields[0] {
            "session" => {
                self.indices.insert(
                    SessionId(fields[1].parse().unwrap()),
                    fields[2].parse().unwrap(),
                );
            }
            "request" => {
                let acknowledged = fields[2..].iter().map(|f| f.parse().unwrap()).collect();
                self.requests
                    .insert(fields[1].parse().unwrap(), acknowledged);
            }
            "published" => {
                self.published += 1;
                self.newest_published = fields[1].parse().unwrap();
            }
            "failed" => panic!("a client of the child failed: {line}"),
            other => panic!("unexpected line from the child: {other:?}"),
        }
    }
}

/// One child run, killed after `kill_after` publications: the recovered store (kept alive by the
/// returned directory), what the child said, and the issued serials at the kill.
fn run_and_kill(
    kill_after: u64,
    tiered: bool,
) -> (
    tempfile::TempDir,
    std::sync::Arc<Store>,
    Heard,
    Vec<prefixkv_testkit::oracle::PointBounds>,
) {
    let dir = tempfile::tempdir().unwrap();
    let counters_path = dir.path().join("client-counters");
    SharedCounters::create(&counters_path, issued_slot(WORKERS + 1)).unwrap();
    let store_dir = dir.path().join("store");
    let mut env = vec![
        (CHILD_ENV, store_dir.as_os_str()),
        (COUNTERS_ENV, counters_path.as_os_str()),
    ];
    if tiered {
        env.push((TIER_ENV, std::ffi::OsStr::new("1")));
    }
    let mut process = ChildProcess::spawn_test("crash_child", &env).unwrap();
    let mut heard = Heard::default();
    while heard.published < kill_after {
        let line = process
            .next_line(LINE_TIMEOUT)
            .unwrap_or_else(|error| panic!("{error}"));
        heard.take(&line);
    }
    for line in process.kill() {
        heard.take(&line);
    }
    let counters = SharedCounters::read_file(&counters_path).unwrap();
    let issued: Vec<u64> = (0..=WORKERS)
        .map(|index| counters[issued_slot(index)])
        .collect();
    if tiered {
        let evicted: u64 = std::fs::read_dir(store_dir.join("log"))
            .unwrap()
            .map(|entry| entry.unwrap().metadata().unwrap().len())
            .sum();
        heard.evicted_bytes = evicted;
    }
    let store = Store::open(config(&store_dir, tiered)).unwrap();
    let version = store
        .recovery_info()
        .expect("at least one checkpoint was published")
        .version;
    assert!(
        version >= heard.newest_published,
        "recovered v{version} but v{} was published",
        heard.newest_published
    );
    let acknowledged = heard
        .requests
        .get(&version)
        .unwrap_or_else(|| panic!("recovered v{version}, which was never requested"));
    let bounds = bounds(acknowledged, &issued);
    (dir, store, heard, bounds)
}

#[test]
fn recovery_after_sigkill_holds_what_clients_were_told() {
    if child::child_mode(CHILD_ENV).is_some() {
        return;
    }
    let iterations = env_count("PREFIXKV_CRASH_ITERATIONS", 3);
    let mut rng = Rng::from_env("PREFIXKV_CRASH_SEED");
    for iteration in 0..iterations {
        let (_dir, store, heard, bounds) = run_and_kill(rng.in_range(1..7), false);
        if let Err(problem) = verify_recovered(&store, &workload(false), &heard.indices, &bounds) {
            panic!("iteration {iteration}: {problem}");
        }
    }
}

#[test]
fn recovery_after_sigkill_with_a_storage_tier_holds_what_clients_were_told() {
    if child::child_mode(CHILD_ENV).is_some() {
        return;
    }
    let iterations = env_count("PREFIXKV_CRASH_ITERATIONS", 3);
    let mut rng = Rng::from_env("PREFIXKV_CRASH_SEED");
    let mut evicted = 0;
    for iteration in 0..iterations {
        let (_dir, store, heard, bounds) = run_and_kill(rng.in_range(2..8), true);
        evicted = evicted.max(heard.evicted_bytes);
        if let Err(problem) = verify_recovered(&store, &workload(true), &heard.indices, &bounds) {
            panic!("tiered iteration {iteration}: {problem}");
        }
    }
    assert!(
        evicted > 0,
        "no run evicted a page: the tier was not exercised"
    );
}

/// The oracle is not vacuous: the same check fails once one acknowledged record is removed from
/// a recovered store, and once the client side claims one more acknowledgement than the
/// checkpoint holds.
#[test]
fn the_crash_oracle_catches_a_dropped_acknowledged_write() {
    if child::child_mode(CHILD_ENV).is_some() {
        return;
    }
    let (_dir, store, heard, bounds) = run_and_kill(2, false);
    verify_recovered(&store, &workload(false), &heard.indices, &bounds).expect("untampered");
    // Claim worker 1 was acknowledged one more operation before the request than the
    // checkpoint holds.
    let recovered_point = {
        let info = store.recovery_info().unwrap();
        let id = heard
            .indices
            .iter()
            .find(|(_, &index)| index == 1)
            .unwrap()
            .0;
        info.session_commit_points[id]
    };
    let mut overclaimed = bounds.clone();
    let worker = overclaimed
        .iter_mut()
        .find(|bound| bound.session == 1)
        .unwrap();
    worker.acknowledged_before_request = recovered_point + 1;
    worker.issued = worker.issued.max(recovered_point + 1);
    let error =
        verify_recovered(&store, &workload(false), &heard.indices, &overclaimed).unwrap_err();
    assert!(error.contains("acknowledged serial"), "{error}");
    // Remove one acknowledged record that must be present (most keys are: only a key whose last
    // write by some session was a delete may be absent, so try keys until one is required).
    let mut session = store.start_session();
    for (key, value) in common::read_image(&store, KEYS) {
        assert!(session.delete(&key).unwrap());
        match verify_recovered(&store, &workload(false), &heard.indices, &bounds) {
            Err(error) => {
                assert!(error.contains("missing key"), "{error}");
                return;
            }
            Ok(()) => session.upsert(&key, &value).unwrap(),
        }
    }
    panic!("removing any one record went unnoticed");
}
