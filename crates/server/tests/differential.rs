//! Differential test: the same seeded command sequences against a real `redis-server` and
//! prefixkv-server, every reply compared exactly (values, integers, nulls, array shapes and error
//! lines). Redis is the reference, so this checks what no model written by us can: that a Redis
//! user gets Redis's answers.
//!
//! The generator draws from a small key space (so commands meet existing keys, keys of the wrong
//! type and missing keys alike) and values that are sometimes integers, floats or empty. It
//! leaves out what is timing-dependent (TTL readings, expiry that passes during the run) and what
//! the two servers legitimately order differently (KEYS, SCAN, RANDOMKEY).
//!
//! `DIFFERENTIAL_SEEDS` (default 4) and `DIFFERENTIAL_STEPS` (default 2,500) raise the count; a
//! failure names its seed, step and the commands before it.
//!
//! The cases are in `common/differential.rs`, shared with the cluster's differential test
//! (`crates/cluster/tests/differential.rs`, a one-worker cluster against a redis-server in
//! cluster mode); here every command runs as generated.

mod common;

use common::differential::{self, as_generated, Endpoint};
use common::generators::{collection_command, command, newer_command};
use common::{
    assert_same_notifications, notification_subscriber, notifications_of_batch, Raw, Server,
};
use prefixkv_resp::Reply;
use prefixkv_testkit::rng::Rng;

impl Endpoint for Raw {
    fn call(&mut self, args: &[&str]) -> Reply {
        Raw::call(self, args)
    }
}

/// A redis-server and a prefixkv-server (64 MB engine), each in a directory kept with it.
fn both() -> [(tempfile::TempDir, Server); 2] {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    [(redis_dir, redis), (dir, ours)]
}

#[test]
fn random_command_sequences_get_redis_replies() {
    let [(_, redis), (_, ours)] = both();
    differential::random_command_sequences(&mut redis.raw(), &mut ours.raw(), &as_generated);
}

#[test]
fn collection_sequences_get_redis_replies() {
    let [(_, redis), (_, ours)] = both();
    differential::collection_sequences(&mut redis.raw(), &mut ours.raw(), &as_generated);
}

/// The comparison is not vacuous: one reply changed on its way to the test fails the run.
#[test]
fn a_differing_reply_is_caught() {
    let [(_, redis), (_, ours)] = both();
    differential::a_differing_reply_is_caught(&mut redis.raw(), &mut ours.raw(), &as_generated);
}

/// The commands issue 29 added, compared in RESP2 and then in RESP3.
#[test]
fn newer_command_sequences_get_redis_replies() {
    let [(_, redis), (_, ours)] = both();
    let (mut redis, mut ours) = (redis.raw(), ours.raw());
    differential::newer_command_sequences(&mut redis, &mut ours, &as_generated, &["2", "3"]);
}

/// COMMAND GETKEYS: one command of each key-spec shape, and the errors.
#[test]
fn command_getkeys_matches_redis() {
    let [(_, redis), (_, ours)] = both();
    differential::getkeys_cases(&mut redis.raw(), &mut ours.raw());
}

/// CLIENT REPLY OFF, ON and SKIP: the same pipelined requests to both servers give the same
/// reply stream (OFF and SKIP answer nothing, SKIP drops exactly the next reply, a blocking
/// command's timeout included).
#[test]
fn client_reply_modes_match_redis() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let requests: &[&[&str]] = &[
        &["CLIENT", "REPLY", "OFF"],
        &["SET", "k", "1"],
        &["GET", "k"],
        &["GET", "nokey", "extra"],
        &["CLIENT", "REPLY", "ON"],
        &["GET", "k"],
        &["CLIENT", "REPLY", "SKIP"],
        &["INCR", "k"],
        &["GET", "k"],
        &["CLIENT", "REPLY", "MAYBE"],
        // A script's reply (answered by the script thread) obeys SKIP and OFF too.
        &["CLIENT", "REPLY", "SKIP"],
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "k"],
        &["CLIENT", "REPLY", "OFF"],
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "k"],
        &["CLIENT", "REPLY", "ON"],
        &["GET", "k"],
        // A skipped blocking command times out without a reply.
        &["CLIENT", "REPLY", "SKIP"],
        &["BLPOP", "nokey", "0.05"],
        &["PING"],
    ];
    let mut streams = Vec::new();
    for server in [&redis, &ours] {
        let mut raw = server.raw();
        for request in requests {
            let args: Vec<&[u8]> = request.iter().map(|a| a.as_bytes()).collect();
            raw.send(&args);
        }
        let replies: Vec<Reply> = (0..7).map(|_| raw.read().unwrap()).collect();
        streams.push(replies);
    }
    assert_eq!(
        streams[1][..3],
        [Reply::simple("OK"), Reply::bulk("1"), Reply::bulk("2")],
        "ours: {:?}",
        streams[1]
    );
    assert_eq!(streams[0], streams[1]);
}

/// MEMORY USAGE: null for a missing key, Redis's errors, and an estimate that grows with the
/// value for every type (the numbers themselves are prefixkv's own: docs/server.md).
#[test]
fn memory_usage_estimates_and_errors() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    for args in [
        &["MEMORY", "USAGE", "missing"][..],
        &["MEMORY", "USAGE", "k", "SAMPLES", "-1"],
        &["MEMORY", "USAGE", "k", "SAMPLES"],
        &["MEMORY", "USAGE"],
        &["MEMORY", "NOPE"],
    ] {
        assert_eq!(ours_raw.call(args), redis_raw.call(args), "{args:?}");
    }
    let usage = |raw: &mut common::Raw, key: &str| match raw
        .call(&["MEMORY", "USAGE", key, "SAMPLES", "0"])
    {
        Reply::Integer(n) => n,
        other => panic!("{other:?}"),
    };
    let big = "x".repeat(1000);
    for (fill, key) in [
        (&["SET", "s1", "a"][..], "s1"),
        (&["RPUSH", "l1", "a"], "l1"),
        (&["SADD", "t1", "a"], "t1"),
        (&["ZADD", "z1", "1", "a"], "z1"),
    ] {
        ours_raw.call(fill);
        let small = usage(&mut ours_raw, key);
        let mut grow: Vec<&str> = fill.to_vec();
        if let Some(last) = grow.last_mut() {
            *last = &big;
        }
        if fill[0] != "SET" {
            ours_raw.call(&grow);
        } else {
            ours_raw.call(&["SET", "s1", &big]);
        }
        let larger = usage(&mut ours_raw, key);
        assert!(
            small > key.len() as i64 && larger >= small + 999,
            "{key}: {small} then {larger}"
        );
    }
}

/// Keyspace notifications: with `notify-keyspace-events KEA` the same generated commands make
/// both servers publish the same messages, in the same order (compared per batch of steps).
#[test]
fn keyspace_notifications_match_redis() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut writers = vec![redis.raw(), ours.raw()];
    let mut subscribers = vec![
        notification_subscriber(&redis),
        notification_subscriber(&ours),
    ];
    // Every class with both channels, then masks: list events on the keyspace channel only;
    // generic, string and sorted-set events and `new` on the keyevent channel only; all with
    // `new`.
    let passes = [
        ("KEA", "AKE"),
        ("Kl", "lK"),
        ("Eg$zn", "g$znE"),
        ("AKEn", "AKE"),
    ];
    for (pass, (flags, shown)) in passes.into_iter().enumerate() {
        for writer in writers.iter_mut() {
            let reply = writer.call(&["CONFIG", "SET", "notify-keyspace-events", flags]);
            assert_eq!(reply, Reply::simple("OK"));
            assert_eq!(
                writer.call(&["CONFIG", "GET", "notify-keyspace-events"]),
                Reply::Array(vec![
                    Reply::bulk("notify-keyspace-events"),
                    Reply::bulk(shown)
                ])
            );
        }
        compare_notifications(&mut writers, &mut subscribers, pass);
    }
}

/// Runs batches of the three generators' commands on both writers and compares what the two
/// subscribers receive, batch by batch.
fn compare_notifications(writers: &mut [Raw], subscribers: &mut [Raw], pass: usize) {
    let generators: [fn(&mut Rng) -> Vec<String>; 3] = [command, collection_command, newer_command];
    for (round, generate) in generators.into_iter().enumerate() {
        let mut rng = Rng::new(3000 + 10 * pass as u64 + round as u64);
        for batch in 0..10 {
            let commands: Vec<Vec<String>> = (0..30).map(|_| generate(&mut rng)).collect();
            let seen = notifications_of_batch(writers, subscribers, &commands);
            let at = format!("pass {pass} generator {round} batch {batch}");
            assert_same_notifications(&seen, &at, &commands);
        }
    }
}
