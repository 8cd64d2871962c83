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

mod common;

use common::generators::{collection_command, command, newer_command};
use common::{
    assert_same_notifications, notification_subscriber, notifications_of_batch, Raw, Server,
};
use prefixkv_resp::Reply;
use prefixkv_testkit::rng::{env_count, Rng};

/// Replies whose order Redis leaves to its hash tables, sorted so both servers compare: the
/// elements of a set-like reply, the (field, value) pairs of HGETALL.
fn normalized(args: &[String], reply: Reply) -> Reply {
    let name = args[0].to_ascii_uppercase();
    let sort = |mut items: Vec<Reply>| {
        items.sort_by_key(|item| format!("{item:?}"));
        items
    };
    match (name.as_str(), reply) {
        (
            "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "HKEYS" | "HVALS" | "ZRANDMEMBER",
            Reply::Array(items),
        ) => Reply::Array(sort(items)),
        ("HGETALL", Reply::Array(items)) => {
            let mut pairs: Vec<Vec<Reply>> = items.chunks(2).map(|p| p.to_vec()).collect();
            pairs.sort_by_key(|pair| format!("{pair:?}"));
            Reply::Array(pairs.concat())
        }
        (_, reply) => reply,
    }
}

/// Runs `steps` commands of `seed` against both servers; the first differing reply fails.
/// `tamper` sees each of our replies with its step before the comparison (identity in the real
/// test).
fn run_seed(
    redis: &mut Raw,
    ours: &mut Raw,
    seed: u64,
    steps: u64,
    tamper: &dyn Fn(u64, Reply) -> Reply,
) {
    run_generated(redis, ours, seed, steps, command, tamper)
}

fn run_generated(
    redis: &mut Raw,
    ours: &mut Raw,
    seed: u64,
    steps: u64,
    generate: fn(&mut Rng) -> Vec<String>,
    tamper: &dyn Fn(u64, Reply) -> Reply,
) {
    for raw in [&mut *redis, &mut *ours] {
        assert_eq!(raw.call(&["FLUSHALL"]), Reply::simple("OK"));
    }
    let mut rng = Rng::new(seed);
    let mut history: Vec<Vec<String>> = Vec::new();
    for step in 0..steps {
        let args = generate(&mut rng);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let expected = normalized(&args, redis.call(&refs));
        let got = normalized(&args, tamper(step, ours.call(&refs)));
        history.push(args);
        if expected != got {
            let recent: Vec<String> = history
                .iter()
                .rev()
                .take(12)
                .rev()
                .map(|args| args.join(" "))
                .collect();
            panic!(
                "seed {seed} step {step}: {:?}\n  redis-server: {expected:?}\n  prefixkv:     \
                 {got:?}\n  last commands:\n    {}",
                history.last().unwrap(),
                recent.join("\n    ")
            );
        }
    }
}

#[test]
fn random_command_sequences_get_redis_replies() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    let seeds = env_count("DIFFERENTIAL_SEEDS", 4);
    let steps = env_count("DIFFERENTIAL_STEPS", 2_500);
    for seed in 0..seeds {
        run_seed(&mut redis_raw, &mut ours_raw, seed, steps, &|_, reply| {
            reply
        });
    }
}

#[test]
fn collection_sequences_get_redis_replies() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    // Small hashes become tables after 2 fields, so the record-stored hash is compared too.
    for raw in [&mut redis_raw, &mut ours_raw] {
        let reply = raw.call(&["CONFIG", "SET", "hash-max-listpack-entries", "2"]);
        assert_eq!(reply, Reply::simple("OK"));
    }
    let seeds = env_count("DIFFERENTIAL_SEEDS", 4);
    let steps = env_count("DIFFERENTIAL_STEPS", 2_500);
    for seed in 0..seeds {
        run_generated(
            &mut redis_raw,
            &mut ours_raw,
            1000 + seed,
            steps,
            collection_command,
            &|_, reply| reply,
        );
    }
}

/// The comparison is not vacuous: one reply changed on its way to the test (an integer off by
/// one, a bulk string with a byte more, a null for a value) fails the run at that step.
#[test]
fn a_differing_reply_is_caught() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    let tampers: [fn(Reply) -> Reply; 3] = [
        |reply| match reply {
            Reply::Integer(n) => Reply::Integer(n + 1),
            other => other,
        },
        |reply| match reply {
            Reply::BulkString(bytes) => Reply::bulk([&bytes[..], b"!"].concat()),
            other => other,
        },
        |reply| match reply {
            Reply::BulkString(_) => Reply::NullBulkString,
            other => other,
        },
    ];
    for tamper in tampers {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_seed(&mut redis_raw, &mut ours_raw, 1, 400, &|step, reply| {
                if step >= 200 {
                    tamper(reply)
                } else {
                    reply
                }
            })
        }));
        let message = *result
            .expect_err("a tampered reply must fail the comparison")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("seed 1 step 2"), "{message}");
    }
}

/// The commands issue 29 added, compared in RESP2 and then in RESP3 (scores as doubles, pairs
/// nested).
#[test]
fn newer_command_sequences_get_redis_replies() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    let seeds = env_count("DIFFERENTIAL_SEEDS", 4);
    let steps = env_count("DIFFERENTIAL_STEPS", 2_500);
    for protocol in ["2", "3"] {
        for raw in [&mut redis_raw, &mut ours_raw] {
            assert!(matches!(
                raw.call(&["HELLO", protocol]),
                Reply::Map(_) | Reply::Array(_)
            ));
        }
        for seed in 0..seeds {
            run_generated(
                &mut redis_raw,
                &mut ours_raw,
                2000 + seed,
                steps,
                newer_command,
                &|_, reply| reply,
            );
        }
    }
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
