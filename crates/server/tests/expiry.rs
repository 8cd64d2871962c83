//! Active expiry, as Redis's `expire.tcl` checks it: keys with a short TTL leave DBSIZE without
//! any command reading them (run against redis-server and prefixkv-server alike). The wait is
//! bounded by a deadline on the condition, never a sleep that decides the outcome.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use prefixkv_resp::Reply;

fn expire_without_reads(server: &Server) {
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLUSHALL"]), Reply::simple("OK"));
    for key in ["key1", "key2", "key3"] {
        assert_eq!(raw.call(&["PSETEX", key, "500", "a"]), Reply::simple("OK"));
    }
    assert_eq!(raw.call(&["SET", "kept", "v"]), Reply::simple("OK"));
    assert_eq!(raw.call(&["DBSIZE"]), Reply::Integer(4));
    let deadline = Instant::now() + Duration::from_secs(30);
    while raw.call(&["DBSIZE"]) != Reply::Integer(1) {
        assert!(Instant::now() < deadline, "keys did not actively expire");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(raw.call(&["GET", "kept"]), Reply::bulk("v"));
    assert_eq!(raw.info_field("stats", "expired_keys"), "3");
}

#[test]
fn keys_expire_without_being_read() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    expire_without_reads(&redis);
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    expire_without_reads(&ours);
}

/// `notify-keyspace-events Ex`: a key removed by active expiry (never read) publishes
/// `expired` on `__keyevent@0__:expired`; with `n`, a created key publishes `new` first.
#[test]
fn expiry_publishes_expired_events() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    for server in [&redis, &ours] {
        let mut writer = server.raw();
        let reply = writer.call(&["CONFIG", "SET", "notify-keyspace-events", "Exn"]);
        assert_eq!(reply, Reply::simple("OK"));
        let mut subscriber = server.raw();
        subscriber
            .stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        subscriber.send(&[b"PSUBSCRIBE", b"__keyevent@0__:*"]);
        subscriber.read().unwrap();
        assert_eq!(
            writer.call(&["PSETEX", "soon", "100", "v"]),
            Reply::simple("OK")
        );
        let mut events = Vec::new();
        while events.len() < 2 {
            match subscriber.read() {
                Some(Reply::Array(items)) => events.push((items[2].clone(), items[3].clone())),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            events,
            [
                (Reply::bulk("__keyevent@0__:new"), Reply::bulk("soon")),
                (Reply::bulk("__keyevent@0__:expired"), Reply::bulk("soon")),
            ]
        );
    }
}
