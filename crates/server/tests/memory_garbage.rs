//! Garbage stays bounded by default (`engine-compact-dead-fraction`, 0.5): overwrites that grow
//! a value past its record's capacity leave a dead record each in the engine's log (sorted-set
//! ZADDs no longer do: tree nodes are rewritten in place). With the default the log's pages in
//! use come back to about twice the live bytes (compaction on garbage); with the trigger off (0)
//! they grow until half the `engine-memory` budget.

mod common;

use std::time::{Duration, Instant};

use common::{Raw, Server};
use prefixkv_resp::Reply;

const MIB: u64 = 1 << 20;
/// The server's log page (`persistence::store_options`).
const PAGE: u64 = 4 * MIB;
const WRITES: usize = 20_000;
/// Keys the writes go round.
const KEYS: usize = 200;

fn field(raw: &mut Raw, name: &str) -> u64 {
    raw.info_field("memory", name).parse().unwrap()
}

/// Sends [`WRITES`] SETs in pipelined batches, round the [`KEYS`] keys, each value a word longer
/// than the key's last one (so no write fits its record in place: ~48 MB of dead records for
/// ~0.5 MB live); the largest `engine_log_memory_in_use` seen between batches.
fn load(raw: &mut Raw) -> u64 {
    let mut peak = 0;
    for batch in 0..WRITES / 500 {
        for i in batch * 500..(batch + 1) * 500 {
            let key = format!("g:{}", i % KEYS);
            let value = vec![b'v'; 2000 + i / KEYS * 8];
            raw.send(&[b"SET", key.as_bytes(), &value]);
        }
        for _ in 0..500 {
            assert_eq!(raw.read(), Some(Reply::SimpleString("OK".into())));
        }
        peak = peak.max(field(raw, "engine_log_memory_in_use"));
    }
    assert_eq!(raw.call(&["DBSIZE"]), Reply::Integer(KEYS as i64));
    peak
}

fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
    let mut args = vec!["--engine-memory", "64mb", "--appendfsync", "none"];
    args.extend_from_slice(extra);
    Server::start(dir, &args)
}

#[test]
fn the_default_compacts_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "engine-compact-dead-fraction"]),
        Reply::Array(vec![
            Reply::BulkString("engine-compact-dead-fraction".into()),
            Reply::BulkString("0.5".into()),
        ])
    );
    let peak = load(&mut raw);
    let live = field(&mut raw, "used_memory_dataset");
    println!("default: peak log pages in use {peak}, live {live}");
    // Compaction on garbage stops once at most half the pages are dead, and never runs below
    // four pages; a page or two more for the tail and the copies in flight.
    let bound = (2 * live + 2 * PAGE).max(6 * PAGE);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let in_use = field(&mut raw, "engine_log_memory_in_use");
        if in_use <= bound {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "log pages in use {in_use} still above {bound} (live {live}) after 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn without_the_garbage_trigger_the_log_fills_half_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &["--engine-compact-dead-fraction", "0"]);
    let mut raw = server.raw();
    let peak = load(&mut raw);
    let live = field(&mut raw, "used_memory_dataset");
    println!("off: peak log pages in use {peak}, live {live}");
    assert!(
        peak >= 28 * MIB && peak > 4 * live,
        "peak log pages in use {peak} (live {live}): the garbage should have piled up"
    );
}
