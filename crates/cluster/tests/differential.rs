//! The server's differential test against a one-worker cluster: the cases of
//! `crates/server/tests/common/differential.rs` (included by path, with its generators), sent as
//! plain RESP to the worker's port and to a `redis-server --cluster-enabled yes` that owns every
//! slot, every reply compared exactly. A Redis user moving to the cluster gets Redis Cluster's
//! answers.
//!
//! Each generated command is adapted for both sides alike ([`for_cluster`]):
//! - every key (as `COMMAND GETKEYS` finds them) gets the hash tag `{t}`, so a multi-key command
//!   runs on one slot instead of answering `-CROSSSLOT` (a key that already has a tag keeps it
//!   after the new one, which decides the slot);
//! - the commands a worker refuses by design (docs/cluster.md, "What a worker serves") are
//!   skipped: SELECT/SWAPDB/MOVE (one database), the blocking forms (a worker cannot wait inside
//!   a DPR batch; a blocking command that would not block answers as its plain form, which the
//!   generators also send), SAVE/BGSAVE and SUBSCRIBE (which the generators never send).
//!
//! Fails (never skips) without `redis-server` on PATH.

mod common;

#[allow(dead_code)]
#[path = "../../server/tests/common/generators.rs"]
mod generators;

#[allow(dead_code)]
#[path = "../../server/tests/common/differential.rs"]
mod differential;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use differential::Endpoint;
use prefixkv_cluster::LocalCluster;
use prefixkv_commands::commands::getkeys::key_positions;
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_resp::Reply;

/// A plain RESP connection as one side of a comparison.
struct Plain(RedisConnection);

impl Plain {
    fn connect(address: SocketAddr) -> Plain {
        Plain(RedisConnection::connect(address, Duration::from_secs(30)).unwrap())
    }
}

impl Endpoint for Plain {
    fn call(&mut self, args: &[&str]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.0.command(&args).expect("a reply")
    }
}

/// The commands a worker refuses by design (docs/cluster.md): one database, no waiting inside a
/// DPR batch.
const REFUSED_BY_DESIGN: &[&str] = &[
    "SELECT",
    "SWAPDB",
    "MOVE",
    "BLPOP",
    "BRPOP",
    "BLMOVE",
    "BRPOPLPUSH",
    "BLMPOP",
    "BZPOPMIN",
    "BZPOPMAX",
    "BZMPOP",
];

/// A generated command as both sides of the cluster comparison get it (see the module docs).
fn for_cluster(mut args: Vec<String>) -> Option<Vec<String>> {
    let name = args[0].to_ascii_uppercase();
    if REFUSED_BY_DESIGN.contains(&name.as_str()) {
        return None;
    }
    let bytes: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.clone())).collect();
    // No keys found (a wrong arity or numkeys): sent as is, for the error both give.
    if let Ok(positions) = key_positions(&bytes) {
        for position in positions {
            args[position] = format!("{{t}}{}", args[position]);
        }
    }
    Some(args)
}

/// A redis-server in cluster mode owning all 16384 slots, killed on drop.
struct RedisCluster {
    child: Child,
    port: u16,
}

impl RedisCluster {
    fn start(directory: &Path) -> RedisCluster {
        for _attempt in 0..5 {
            // From below the kernel's ephemeral range (`testkit::net`: no other test's probe of
            // port 0 can take it before redis-server binds it); its cluster bus listens on
            // port + 10000, which must be a port too (testkit's ports are below 32768).
            let port = prefixkv_testkit::net::free_port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(directory.join(format!("nodes-{port}.conf")))
                .arg("--dir")
                .arg(directory)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("cannot run redis-server: ./scripts/test installs Debian's redis-server");
            let mut server = RedisCluster { child, port };
            if let Some(mut connection) = server.connect_within(Duration::from_secs(30)) {
                server.own_every_slot(&mut connection);
                return server;
            }
        }
        panic!("redis-server did not start");
    }

    /// A connection once it answers PING, or `None` if the process exits or 30 s pass.
    fn connect_within(&mut self, timeout: Duration) -> Option<Plain> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_status)) = self.child.try_wait() {
                return None;
            }
            let address = SocketAddr::from(([127, 0, 0, 1], self.port));
            if let Ok(mut connection) = RedisConnection::connect(address, Duration::from_secs(10)) {
                // Any I/O error means "not ready" (CI once saw the PING reset: another listener
                // had the port), and a PONG counts only while our own child still runs (one that
                // lost the port exits on its failed bind).
                let ponged = connection
                    .command(&[b"PING".as_slice()])
                    .is_ok_and(|reply| reply == Reply::simple("PONG"));
                if ponged && matches!(self.child.try_wait(), Ok(None)) {
                    return Some(Plain(connection));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `CLUSTER ADDSLOTSRANGE 0 16383`, then waits (at most 30 s) for `cluster_state:ok`.
    fn own_every_slot(&self, connection: &mut Plain) {
        let reply = connection.call(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        assert_eq!(reply, Reply::simple("OK"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Reply::BulkString(info) = connection.call(&["CLUSTER", "INFO"]) else {
                panic!("CLUSTER INFO is a bulk string");
            };
            if String::from_utf8_lossy(&info).contains("cluster_state:ok") {
                return;
            }
            assert!(Instant::now() < deadline, "cluster_state never ok");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn connect(&self) -> Plain {
        Plain::connect(SocketAddr::from(([127, 0, 0, 1], self.port)))
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-worker prefixkv cluster (the launcher's processes) and a redis-server cluster, with
/// the directory both keep their files in.
struct Both {
    redis: RedisCluster,
    cluster: LocalCluster,
    _directory: tempfile::TempDir,
}

impl Both {
    fn start() -> Both {
        let directory = tempfile::tempdir().unwrap();
        let redis_dir = directory.path().join("redis");
        std::fs::create_dir(&redis_dir).unwrap();
        let redis = RedisCluster::start(&redis_dir);
        let cluster = common::small_cluster(directory.path(), 1);
        Both {
            redis,
            cluster,
            _directory: directory,
        }
    }

    /// A connection to redis-server and one to the worker.
    fn connections(&self) -> (Plain, Plain) {
        (
            self.redis.connect(),
            Plain::connect(self.cluster.addresses()[0]),
        )
    }
}

#[test]
fn random_command_sequences_get_redis_cluster_replies() {
    let both = Both::start();
    let (mut redis, mut ours) = both.connections();
    differential::random_command_sequences(&mut redis, &mut ours, &for_cluster);
}

#[test]
fn collection_sequences_get_redis_cluster_replies() {
    let both = Both::start();
    let (mut redis, mut ours) = both.connections();
    differential::collection_sequences(&mut redis, &mut ours, &for_cluster);
}

/// In RESP2 only: a worker's plain RESP connections speak RESP2 (`HELLO 3` is answered
/// `-NOPROTO`, a documented limit of the cluster: docs/cluster.md).
#[test]
fn newer_command_sequences_get_redis_cluster_replies() {
    let both = Both::start();
    let (mut redis, mut ours) = both.connections();
    differential::newer_command_sequences(&mut redis, &mut ours, &for_cluster, &["2"]);
}

/// The comparison is not vacuous here either: a tampered reply of the worker fails the run.
#[test]
fn a_differing_reply_is_caught() {
    let both = Both::start();
    let (mut redis, mut ours) = both.connections();
    differential::a_differing_reply_is_caught(&mut redis, &mut ours, &for_cluster);
}

/// COMMAND GETKEYS on the worker answers as on a Redis Cluster node.
#[test]
fn command_getkeys_matches_redis_cluster() {
    let both = Both::start();
    let (mut redis, mut ours) = both.connections();
    differential::getkeys_cases(&mut redis, &mut ours);
}

/// The adaptation tags every key and keeps everything else.
#[test]
fn keys_get_one_hash_tag() {
    let adapted = |args: &[&str]| for_cluster(args.iter().map(|a| a.to_string()).collect());
    assert_eq!(
        adapted(&["MSET", "a", "1", "{x}d", "2"]).unwrap(),
        ["MSET", "{t}a", "1", "{t}{x}d", "2"]
    );
    assert_eq!(
        adapted(&["ZUNIONSTORE", "dst", "2", "a", "b", "WEIGHTS", "1", "2"]).unwrap(),
        [
            "ZUNIONSTORE",
            "{t}dst",
            "2",
            "{t}a",
            "{t}b",
            "WEIGHTS",
            "1",
            "2"
        ]
    );
    assert_eq!(adapted(&["LMPOP", "9", "a"]).unwrap(), ["LMPOP", "9", "a"]);
    assert_eq!(adapted(&["BLPOP", "a", "0.01"]), None);
}
