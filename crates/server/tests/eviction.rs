//! Eviction (`maxmemory-policy`), checked against a model per policy and against redis-server
//! where Redis is deterministic.
//!
//! The model tests give the server `maxmemory` = its used memory when empty + [`BUDGET`],
//! `maxmemory-samples` above the number of keys (so each sampling round sees every key and the
//! choice is exact) and tenacity 100 (no time budget, so every write evicts until it fits).
//! Each then checks (a) `used_memory` before a write is within maxmemory, and after it within
//! one write's bytes of it; (b) only keys the policy may evict disappeared; (c) the policy's
//! order; (d) `evicted_keys` and the `evicted` notifications name exactly the keys that
//! disappeared; (e) OOM once nothing is evictable.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{notification_subscriber, notifications_until_marker, Raw, Server};
use prefixkv_resp::Reply;

/// Bytes of data the model tests allow above the empty server's used memory.
const BUDGET: u64 = 40_000;
/// How far one write may take used memory past maxmemory (eviction runs before a write, as in
/// Redis): a 500-byte value's record with its index share, rounded up generously.
const ONE_WRITE: u64 = 4096;
/// Keys written before the limit is reached.
const OLD_KEYS: usize = 40;

fn value() -> String {
    "v".repeat(500)
}

fn int(reply: Reply) -> i64 {
    match reply {
        Reply::Integer(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn used(raw: &mut Raw) -> u64 {
    raw.info_field("memory", "used_memory").parse().unwrap()
}

fn evicted_keys(raw: &mut Raw) -> u64 {
    raw.info_field("stats", "evicted_keys").parse().unwrap()
}

/// A server under `policy` with notifications of evictions on.
fn cache(policy: &str, dir: &std::path::Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--engine-memory",
        "64mb",
        "--maxmemory-policy",
        policy,
        "--maxmemory-samples",
        "1000",
        "--maxmemory-eviction-tenacity",
        "100",
    ];
    args.extend_from_slice(extra);
    Server::start(dir, &args)
}

/// What a fill past the limit saw.
struct Filled {
    /// Keys written before the limit (old) in order, with whether they have a TTL.
    old: Vec<(String, bool)>,
    /// The `evicted` notifications' keys, in order.
    evicted: Vec<String>,
    /// Whether a write was refused with OOM (the fill stops there).
    refused: bool,
}

/// Writes [`OLD_KEYS`] keys (`old:i`, a TTL of `ttl(i)` seconds where it is `Some`), runs
/// `access`, sets maxmemory, then writes new keys without TTL until `stop_after` evictions or an
/// OOM, checking (a), (d) and that no key was lost but the evicted ones.
fn fill(
    policy: &str,
    ttl: impl Fn(usize) -> Option<u64>,
    access: impl FnOnce(&mut Raw),
    stop_after: u64,
) -> Filled {
    let dir = tempfile::tempdir().unwrap();
    let server = cache(policy, dir.path(), &[]);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "SET", "notify-keyspace-events", "Ee"]),
        Reply::SimpleString("OK".into())
    );
    let mut subscriber = notification_subscriber(&server);
    let limit = used(&mut raw) + BUDGET;
    let value = value();
    let mut old = Vec::new();
    for i in 0..OLD_KEYS {
        let key = format!("old:{i}");
        let reply = match ttl(i) {
            Some(seconds) => raw.call(&["SET", &key, &value, "EX", &seconds.to_string()]),
            None => raw.call(&["SET", &key, &value]),
        };
        assert_eq!(reply, Reply::SimpleString("OK".into()));
        old.push((key, ttl(i).is_some()));
    }
    access(&mut raw);
    let limit_text = limit.to_string();
    raw.call(&["CONFIG", "SET", "maxmemory", &limit_text]);
    assert_eq!(evicted_keys(&mut raw), 0, "the old keys fit");
    let mut written = Vec::new();
    let mut refused = false;
    for i in 0..400 {
        let key = format!("new:{i}");
        match raw.call(&["SET", &key, &value]) {
            Reply::SimpleString(_) => written.push(key),
            Reply::Error(line) => {
                assert!(line.starts_with(b"OOM "), "{line:?}");
                refused = true;
                break;
            }
            other => panic!("SET: {other:?}"),
        }
        let now = used(&mut raw);
        assert!(
            now <= limit + ONE_WRITE,
            "used_memory {now} after a write, maxmemory {limit}"
        );
        if evicted_keys(&mut raw) >= stop_after {
            break;
        }
    }
    let before_next = used(&mut raw);
    if !refused {
        // The next write would evict first: memory only exceeds the limit by the last write.
        assert!(before_next <= limit + ONE_WRITE);
    }
    raw.call(&["PUBLISH", "marker", "end"]);
    let evicted: Vec<String> = notifications_until_marker(&mut subscriber)
        .into_iter()
        .filter(|(channel, _)| *channel == Reply::bulk("__keyevent@0__:evicted"))
        .map(|(_, key)| match key {
            Reply::BulkString(key) => String::from_utf8(key.to_vec()).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    let all = old.iter().map(|(k, _)| k.clone()).chain(written);
    let mut disappeared = BTreeSet::new();
    for key in all {
        if int(raw.call(&["EXISTS", &key])) == 0 {
            disappeared.insert(key);
        }
    }
    let notified: BTreeSet<String> = evicted.iter().cloned().collect();
    assert_eq!(
        notified.len(),
        evicted.len(),
        "a key evicted twice: {evicted:?}"
    );
    assert_eq!(
        notified, disappeared,
        "the evicted events name exactly the keys gone"
    );
    assert_eq!(evicted_keys(&mut raw), disappeared.len() as u64);
    Filled {
        old,
        evicted,
        refused,
    }
}

fn has_ttl(filled: &Filled, key: &str) -> bool {
    filled.old.iter().any(|(k, ttl)| k == key && *ttl)
}

#[test]
fn allkeys_lru_evicts_the_least_recently_used_first() {
    let hot: Vec<String> = (0..OLD_KEYS)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("old:{i}"))
        .collect();
    let hot_keys = hot.clone();
    let filled = fill(
        "allkeys-lru",
        |_| None,
        move |raw| {
            // The LRU clock counts seconds: wait (bounded) until the newest old key, and so
            // every old key, is a second idle, then read the hot ones, which makes them
            // strictly younger than the cold ones.
            let newest = format!("old:{}", OLD_KEYS - 1);
            let deadline = Instant::now() + Duration::from_secs(10);
            while int(raw.call(&["OBJECT", "IDLETIME", &newest])) < 1 {
                assert!(Instant::now() < deadline, "the LRU clock did not advance");
                std::thread::sleep(Duration::from_millis(50));
            }
            for key in &hot_keys {
                assert_eq!(raw.call(&["GET", key]), Reply::bulk(value()));
                assert_eq!(int(raw.call(&["OBJECT", "IDLETIME", key])), 0);
            }
        },
        10,
    );
    assert!(filled.evicted.len() >= 10);
    for key in &filled.evicted {
        assert!(
            !hot.contains(key) && key.starts_with("old:"),
            "evicted {key}: {:?}",
            filled.evicted
        );
    }
}

#[test]
fn allkeys_lfu_evicts_rarely_read_keys_before_hot_ones() {
    let hot: Vec<String> = (0..OLD_KEYS)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("old:{i}"))
        .collect();
    let hot_keys = hot.clone();
    let filled = fill(
        "allkeys-lfu",
        |_| None,
        move |raw| {
            // Factor 0: every access counts; no decay while the test runs.
            raw.call(&[
                "CONFIG",
                "SET",
                "lfu-log-factor",
                "0",
                "lfu-decay-time",
                "0",
            ]);
            for key in &hot_keys {
                for _ in 0..5 {
                    raw.call(&["GET", key]);
                }
                assert_eq!(int(raw.call(&["OBJECT", "FREQ", key])), 10);
            }
            assert_eq!(int(raw.call(&["OBJECT", "FREQ", "old:0"])), 5);
        },
        10,
    );
    assert!(filled.evicted.len() >= 10);
    for key in &filled.evicted {
        assert!(
            !hot.contains(key),
            "evicted hot {key}: {:?}",
            filled.evicted
        );
    }
}

#[test]
fn allkeys_random_evicts_and_counts() {
    let filled = fill("allkeys-random", |_| None, |_| {}, 10);
    assert!(filled.evicted.len() >= 10 && !filled.refused);
}

/// Every volatile policy: only keys with a TTL go, then writes are refused.
#[test]
fn volatile_policies_evict_only_keys_with_a_ttl_then_refuse() {
    for policy in ["volatile-lru", "volatile-lfu", "volatile-random"] {
        let filled = fill(
            policy,
            |i| i.is_multiple_of(2).then_some(10_000),
            |_| {},
            u64::MAX,
        );
        assert!(
            filled.refused,
            "{policy}: no OOM once the keys with a TTL were gone"
        );
        let with_ttl = filled.old.iter().filter(|(_, ttl)| *ttl).count();
        assert_eq!(
            filled.evicted.len(),
            with_ttl,
            "{policy}: {:?}",
            filled.evicted
        );
        for key in &filled.evicted {
            assert!(
                has_ttl(&filled, key),
                "{policy} evicted {key} without a TTL"
            );
        }
    }
}

#[test]
fn volatile_ttl_evicts_the_nearest_expiry_first() {
    // Distinct TTLs in an order unrelated to the names.
    let ttl = |i: usize| {
        i.is_multiple_of(2)
            .then(|| 1_000 + ((i * 7) % OLD_KEYS) as u64 * 10)
    };
    let filled = fill("volatile-ttl", ttl, |_| {}, u64::MAX);
    assert!(filled.refused);
    let mut by_ttl: Vec<(u64, String)> = (0..OLD_KEYS)
        .filter_map(|i| ttl(i).map(|t| (t, format!("old:{i}"))))
        .collect();
    by_ttl.sort();
    let expected: Vec<String> = by_ttl.into_iter().map(|(_, key)| key).collect();
    assert_eq!(filled.evicted, expected, "eviction order is TTL order");
}

/// Replies that redis-server gives deterministically, compared with ours.
#[test]
fn settings_object_touch_and_oom_match_redis() {
    let mut seen: Vec<Vec<Reply>> = Vec::new();
    common::clients::for_both_servers(|_, port| {
        let mut raw = Raw::connect(port).unwrap();
        let replies = std::cell::RefCell::new(Vec::new());
        let call = |raw: &mut Raw, args: &[&str]| replies.borrow_mut().push(raw.call(args));
        call(&mut raw, &["FLUSHALL"]);
        call(&mut raw, &["CONFIG", "GET", "maxmemory-policy"]);
        call(&mut raw, &["CONFIG", "GET", "maxmemory-samples"]);
        call(&mut raw, &["CONFIG", "GET", "maxmemory-eviction-tenacity"]);
        // One name per call: a pattern's order is Redis's dict order.
        call(&mut raw, &["CONFIG", "GET", "lfu-log-factor"]);
        call(&mut raw, &["CONFIG", "GET", "lfu-decay-time"]);
        call(&mut raw, &["CONFIG", "SET", "maxmemory-policy", "lru"]);
        call(&mut raw, &["CONFIG", "SET", "maxmemory-samples", "0"]);
        call(
            &mut raw,
            &["CONFIG", "SET", "maxmemory-eviction-tenacity", "101"],
        );
        call(&mut raw, &["CONFIG", "SET", "lfu-log-factor", "x"]);
        call(&mut raw, &["CONFIG", "SET", "lfu-decay-time", "-1"]);
        call(&mut raw, &["SET", "a", "hello"]);
        // Idle seconds right after the write: 0, or 1 when a clock second (Redis's LRU clock is
        // cached and ticks 10 times a second) passed in between, on either server. Checked as a
        // bound and compared as "small", so a second boundary cannot fail the comparison.
        match raw.call(&["OBJECT", "IDLETIME", "a"]) {
            Reply::Integer(idle) if (0..=2).contains(&idle) => {
                replies.borrow_mut().push(Reply::Integer(0))
            }
            other => replies.borrow_mut().push(other),
        }
        call(&mut raw, &["OBJECT", "FREQ", "a"]);
        call(&mut raw, &["OBJECT", "FREQ", "missing"]);
        call(
            &mut raw,
            &["CONFIG", "SET", "maxmemory-policy", "ALLKEYS-LFU"],
        );
        call(&mut raw, &["CONFIG", "GET", "maxmemory-policy"]);
        call(&mut raw, &["SET", "b", "hello"]);
        call(&mut raw, &["OBJECT", "FREQ", "b"]);
        call(&mut raw, &["OBJECT", "IDLETIME", "b"]);
        call(&mut raw, &["TOUCH", "a", "b", "missing"]);
        call(&mut raw, &["TOUCH"]);
        call(&mut raw, &["SET", "c", "hello"]);
        // noeviction over maxmemory: OOM, nothing lost.
        call(
            &mut raw,
            &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        );
        call(&mut raw, &["CONFIG", "SET", "maxmemory", "1"]);
        call(&mut raw, &["SET", "d", "hello"]);
        call(&mut raw, &["DBSIZE"]);
        // A volatile policy with no key holding a TTL: OOM, nothing lost.
        call(
            &mut raw,
            &["CONFIG", "SET", "maxmemory-policy", "volatile-lru"],
        );
        call(&mut raw, &["SET", "d", "hello"]);
        call(&mut raw, &["DBSIZE"]);
        // An allkeys policy that cannot get under the limit: every key goes, then OOM.
        call(
            &mut raw,
            &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
        );
        call(&mut raw, &["SET", "d", "hello"]);
        call(&mut raw, &["DBSIZE"]);
        call(&mut raw, &["DEL", "a"]);
        call(&mut raw, &["CONFIG", "SET", "maxmemory", "0"]);
        let mut replies = replies.into_inner();
        let evicted = raw.info_field("stats", "evicted_keys");
        replies.push(Reply::bulk(evicted));
        for field in [
            "used_memory",
            "used_memory_human",
            "used_memory_rss",
            "used_memory_peak",
            "used_memory_dataset",
            "used_memory_overhead",
            "mem_fragmentation_ratio",
            "maxmemory_human",
        ] {
            raw.info_field("memory", field);
        }
        replies.push(Reply::bulk(raw.info_field("memory", "maxmemory_policy")));
        seen.push(replies);
    });
    assert_eq!(seen[0].len(), seen[1].len());
    for (i, (redis, ours)) in seen[0].iter().zip(&seen[1]).enumerate() {
        assert_eq!(redis, ours, "reply {i}");
    }
}

/// An evicted key is a logged delete: after a checkpoint that holds it, its eviction, and a
/// SIGKILL, recovery (checkpoint + log replay) does not bring it back; the others stay.
#[test]
fn an_evicted_key_stays_gone_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--appendfsync", "always"];
    let mut server = cache("allkeys-random", dir.path(), &args);
    let mut raw = server.raw();
    let limit = used(&mut raw) + BUDGET;
    let value = value();
    let mut keys = Vec::new();
    for i in 0..OLD_KEYS {
        let key = format!("old:{i}");
        raw.call(&["SET", &key, &value]);
        keys.push(key);
    }
    assert_eq!(raw.call(&["SAVE"]), Reply::SimpleString("OK".into()));
    raw.call(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let mut i = 0;
    while evicted_keys(&mut raw) < 10 {
        let key = format!("new:{i}");
        assert_eq!(
            raw.call(&["SET", &key, &value]),
            Reply::SimpleString("OK".into())
        );
        keys.push(key);
        i += 1;
        assert!(i < 400, "no eviction");
    }
    let present: Vec<bool> = keys
        .iter()
        .map(|k| int(raw.call(&["EXISTS", k])) == 1)
        .collect();
    assert!(present.iter().filter(|p| !**p).count() >= 10);
    server.kill();
    let restarted = cache("allkeys-random", dir.path(), &args);
    let mut raw = restarted.raw();
    for (key, was_present) in keys.iter().zip(present) {
        let now = int(raw.call(&["EXISTS", key])) == 1;
        assert_eq!(now, was_present, "{key} after the restart");
    }
}
