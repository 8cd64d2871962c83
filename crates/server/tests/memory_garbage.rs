//! Garbage stays bounded by default (`engine-compact-dead-fraction`, 0.5): a sorted set's ZADDs
//! rewrite a path of tree nodes each (copy-on-write), leaving dead records in the engine's log.
//! With the default the log's pages in use come back to about twice the live bytes (compaction
//! on garbage); with the trigger off (0) they grow until half the `engine-memory` budget.

mod common;

use std::time::{Duration, Instant};

use common::{Raw, Server};
use prefixkv_resp::Reply;

const MIB: u64 = 1 << 20;
/// The server's log page (`persistence::store_options`).
const PAGE: u64 = 4 * MIB;
const ZADDS: usize = 20_000;

fn field(raw: &mut Raw, name: &str) -> u64 {
    raw.info_field("memory", name).parse().unwrap()
}

/// Loads [`ZADDS`] members into one sorted set in pipelined batches; the largest
/// `engine_log_memory_in_use` seen between batches.
fn load(raw: &mut Raw) -> u64 {
    let mut peak = 0;
    for batch in 0..ZADDS / 500 {
        for i in batch * 500..(batch + 1) * 500 {
            let score = i.to_string();
            let member = format!("m:{i:010}");
            raw.send(&[b"ZADD", b"z", score.as_bytes(), member.as_bytes()]);
        }
        for _ in 0..500 {
            assert_eq!(raw.read(), Some(Reply::Integer(1)));
        }
        peak = peak.max(field(raw, "engine_log_memory_in_use"));
    }
    assert_eq!(raw.call(&["ZCARD", "z"]), Reply::Integer(ZADDS as i64));
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
