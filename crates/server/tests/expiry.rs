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
