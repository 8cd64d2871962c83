//! What a rollback's PURGE costs after a long history, for profiling (not a benchmark): loads
//! `keys` keys and rewrites all of them in each of `rounds` versions (a fold-over checkpoint
//! each, all kept), so the log holds `keys * rounds` records; then:
//! 1. `recent` writes and a rollback to the newest checkpoint: PURGE scans from where the
//!    discarded version began (the purge bound), a small part of the log;
//! 2. `recent` writes and a rollback to the oldest checkpoint: PURGE scans almost the whole log,
//!    which is what every PURGE did before the bound;
//! 3. the nested pair: `recent` writes, a rollback to the newest checkpoint and at once another
//!    to an older one, which takes over the first PURGE instead of waiting for it.
//!
//! Prints each rollback's THROW and PURGE times and PURGE's scan. Build with `--release` (debug
//! builds also check the bound by scanning below it).
//! `cargo run --release -p prefixkv-engine --example purge_cost -- [keys] [rounds] [recent] [dir]`

use std::time::{Duration, Instant};

use prefixkv_engine::{PurgeReport, Session, Store, StoreConfig, Strategy};

const WAIT: Duration = Duration::from_secs(120);

fn argument(arguments: &[String], index: usize, default: u64) -> u64 {
    arguments
        .get(index)
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

fn upsert_all(session: &mut Session, round: u64, count: u64) {
    for index in 0..count {
        let key = index.to_be_bytes();
        let value = (round << 32 | index).to_le_bytes();
        session.upsert(&key, &value).expect("upsert");
    }
}

fn checkpoint(store: &Store) -> u64 {
    let token = store.checkpoint(Strategy::FoldOver).expect("checkpoint");
    store.wait_for_commit(token, WAIT).expect("commit").version
}

fn print(label: &str, started: Instant, throw_ms: f64, purge: &PurgeReport, log_bytes: u64) {
    let scanned_bytes = purge.scanned_until - purge.scanned_from;
    println!(
        "{label}: rollback call to PURGE end {:.1} ms (THROW {throw_ms:.2} ms, PURGE {:.1} ms: \
         log pass {:.1} ms, index pass {:.1} ms); scanned {} records, {:.1} MiB of {:.1} MiB of \
         log ({:.1} %), versions {:?}",
        started.elapsed().as_secs_f64() * 1e3,
        purge.duration.as_secs_f64() * 1e3,
        purge.log_pass.as_secs_f64() * 1e3,
        purge.index_pass.as_secs_f64() * 1e3,
        purge.records_scanned,
        scanned_bytes as f64 / (1 << 20) as f64,
        log_bytes as f64 / (1 << 20) as f64,
        100.0 * scanned_bytes as f64 / log_bytes.max(1) as f64,
        purge.versions,
    );
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let keys = argument(&arguments, 1, 250_000);
    let rounds = argument(&arguments, 2, 24);
    let recent = argument(&arguments, 3, keys / 50);
    let dir = arguments.get(4).map_or_else(
        || std::env::temp_dir().join(format!("purge-cost-{}", std::process::id())),
        std::path::PathBuf::from,
    );
    let mut config = StoreConfig::new(&dir);
    config.rollback_ready = true;
    config.index_buckets = (keys as usize / 2).next_power_of_two();
    // Far above the history (about 48 bytes a record): no compaction, the whole history stays.
    config.log_memory_bytes = (keys * (rounds + 8) * 128).max(256 << 20);
    config.keep_checkpoints = rounds as usize + 4;
    let store = Store::open(config).expect("open");
    let mut session = store.start_session();
    let loading = Instant::now();
    let mut versions = Vec::new();
    for round in 0..rounds {
        upsert_all(&mut session, round, keys);
        session.suspend();
        versions.push(checkpoint(&store));
    }
    println!(
        "history: {keys} keys x {rounds} versions in {:.1} s, log {:.1} MiB",
        loading.elapsed().as_secs_f64(),
        store.log_memory_in_use_bytes() as f64 / (1 << 20) as f64
    );
    let newest = *versions.last().unwrap();
    let rolled_back = |session: &mut Session| {
        // The session learns of the rollback once.
        let _ = session.read(b"-", &mut Vec::new());
    };

    upsert_all(&mut session, 100, recent);
    session.suspend();
    let started = Instant::now();
    let report = store.rollback(newest).expect("rollback");
    let purge = store.wait_for_purge(WAIT).expect("purge").expect("a purge");
    print(
        "to the newest checkpoint",
        started,
        report.throw_ms,
        &purge,
        store.log_memory_in_use_bytes(),
    );
    rolled_back(&mut session);

    upsert_all(&mut session, 101, recent);
    session.suspend();
    let started = Instant::now();
    let report = store.rollback(versions[0]).expect("rollback");
    let purge = store.wait_for_purge(WAIT).expect("purge").expect("a purge");
    print(
        "to the oldest checkpoint (about the whole log)",
        started,
        report.throw_ms,
        &purge,
        store.log_memory_in_use_bytes(),
    );
    rolled_back(&mut session);

    // New history in the new world-line, then the nested pair.
    let mut versions = Vec::new();
    for round in 0..4 {
        upsert_all(&mut session, 200 + round, keys);
        session.suspend();
        versions.push(checkpoint(&store));
    }
    upsert_all(&mut session, 300, recent);
    session.suspend();
    let started = Instant::now();
    let first = store.rollback(versions[3]).expect("rollback");
    let running = store.purge_running();
    let second = store.rollback(versions[2]).expect("nested rollback");
    let purge = store.wait_for_purge(WAIT).expect("purge").expect("a purge");
    println!(
        "nested pair: first THROW {:.2} ms, its PURGE still running when the second was called: \
         {running}",
        first.throw_ms
    );
    print(
        "nested pair, from the first call",
        started,
        second.throw_ms,
        &purge,
        store.log_memory_in_use_bytes(),
    );
    drop(session);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
