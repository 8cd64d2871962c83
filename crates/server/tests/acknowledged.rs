//! Acknowledged writes across SIGKILL, judged only by what the clients were told: writers on
//! several connections under load (`common::load`: each write its own key, a value naming the
//! writer and the write), the server killed with SIGKILL, restarted on the same directory, and
//! every write of every writer read back and checked with the prefix oracle
//! (`prefixkv_testkit::acknowledged`).
//!
//! - `always`: no acknowledged write is lost, over `SERVER_CRASH_KILLS` kills in a row (default
//!   3; the stress run uses 100), each restart also re-checking every write of the earlier rounds
//!   and DBSIZE (nothing the writers did not send). `SERVER_CRASH_WRITERS` (default 3) sets the
//!   connections, `SERVER_CRASH_SEED` replays a run (batch sizes and kill points).
//! - `everysec`: what is lost is a suffix of each connection's acknowledged writes (asserted); its
//!   size and how long before the kill it had been acknowledged are printed. A SIGKILL is a
//!   process crash, which docs/server.md promises loses nothing in `everysec`: asserted too.
//! - The oracle fails on tampered input: a test-only proxy that answers `+OK` to one SET itself
//!   without forwarding it, and a key deleted after the restart.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::load::{self, WriterLog, Writers};
use common::{encode_request, Raw, Server};
use prefixkv_resp::{Limits, Protocol, Reply, RequestParser};
use prefixkv_testkit::env_count;
use prefixkv_testkit::rng::Rng;

fn flags(mode: &str) -> [&str; 6] {
    [
        "--appendfsync",
        mode,
        "--checkpoint-interval",
        "100",
        "--engine-memory",
        "64mb",
    ]
}

/// Writers `ids` on `port` (the server's, or a proxy's) until each has `at_least` acknowledged
/// writes, then SIGKILL the server while they keep writing; their logs and the kill's instant.
fn load_then_kill(
    server: &mut Server,
    port: u16,
    ids: std::ops::Range<u64>,
    seed: u64,
    at_least: u64,
) -> (Vec<WriterLog>, Instant) {
    let writers = Writers::start(port, ids, seed);
    writers.wait_acknowledged(at_least);
    load::kill_under_load(server, writers)
}

fn dbsize(port: u16) -> u64 {
    match Raw::connect(port).unwrap().call(&["DBSIZE"]) {
        Reply::Integer(n) => n as u64,
        other => panic!("DBSIZE: {other:?}"),
    }
}

#[test]
fn always_keeps_every_acknowledged_write_across_kills() {
    let kills = env_count("SERVER_CRASH_KILLS", 3);
    let writers = env_count("SERVER_CRASH_WRITERS", 3);
    let mut rng = Rng::from_env("SERVER_CRASH_SEED");
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &flags("always"));
    let mut history: Vec<WriterLog> = Vec::new();
    let mut recovered: Vec<u64> = Vec::new();
    let mut acknowledged_total = 0;
    let started = Instant::now();
    for kill in 0..kills {
        let port = server.port;
        let at_least = rng.in_range(1..400);
        let ids = kill * writers..(kill + 1) * writers;
        let (logs, _) = load_then_kill(&mut server, port, ids, rng.next_u64(), at_least);
        server = Server::start(dir.path(), &flags("always"));
        let recoveries = load::check_writers(server.port, &logs)
            .and_then(|r| load::require_no_loss(&logs, &r).map(|()| r))
            .unwrap_or_else(|error| panic!("kill {kill}: {error}"));
        // Every earlier round's writes are still exactly as they were recovered.
        let earlier = load::check_writers(server.port, &history)
            .unwrap_or_else(|error| panic!("kill {kill}, earlier rounds: {error}"));
        for ((log, before), now) in history.iter().zip(&recovered).zip(&earlier) {
            assert_eq!(
                now.recovered, *before,
                "kill {kill}: writer {} had {before} writes recovered before, now {}",
                log.id, now.recovered
            );
        }
        acknowledged_total += logs.iter().map(|l| l.acknowledged).sum::<u64>();
        recovered.extend(recoveries.iter().map(|r| r.recovered));
        history.extend(logs);
        let expected: u64 = recovered.iter().sum();
        assert_eq!(
            dbsize(server.port),
            expected,
            "kill {kill}: DBSIZE differs from the writes recovered"
        );
    }
    eprintln!(
        "always: {kills} kills, {acknowledged_total} acknowledged writes, none lost ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

/// `always` with writes to every type (`load::Shape::Mixed`): after a SIGKILL, every
/// acknowledged write is there, in lists, sets, sorted sets and hashes (grown past the small-hash
/// thresholds, so stored as records) as in strings.
#[test]
fn always_keeps_every_acknowledged_write_of_every_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_env("SERVER_CRASH_SEED");
    let mut server = Server::start(dir.path(), &flags("always"));
    let writers = Writers::start_shaped(
        server.port,
        0..env_count("SERVER_CRASH_WRITERS", 3),
        rng.next_u64(),
        load::Shape::Mixed,
    );
    // Past 5 * 512 writes, each writer's hash holds more than hash-max-listpack-entries (512)
    // fields, so it lives in records.
    writers.wait_acknowledged(2700 + rng.in_range(0..300));
    let (logs, _) = load::kill_under_load(&mut server, writers);
    let restarted = Server::start(dir.path(), &flags("always"));
    let recoveries = load::check_writers(restarted.port, &logs)
        .and_then(|r| load::require_no_loss(&logs, &r).map(|()| r))
        .unwrap_or_else(|error| panic!("{error}"));
    let mut raw = restarted.raw();
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "hash:0"]),
        Reply::bulk("hashtable"),
        "the hash grew into records"
    );
    // The oracle is not vacuous: a list element removed after the restart is a hole.
    assert!(recoveries[0].recovered > 10);
    raw.call(&["LPOP", "list:0"]);
    let error = load::check_writers(restarted.port, &logs).expect_err("a removed element");
    assert!(error.contains("writer 0"), "{error}");
}

#[test]
fn everysec_loses_at_most_a_suffix_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_env("SERVER_CRASH_SEED");
    let mut server = Server::start(dir.path(), &flags("everysec"));
    let port = server.port;
    let writers = Writers::start(
        port,
        0..env_count("SERVER_CRASH_WRITERS", 3),
        rng.next_u64(),
    );
    // A few checkpoints (and oplog truncations) first, so the kill lands after some.
    server.wait_for_checkpoints(3);
    writers.wait_acknowledged(rng.in_range(1..300));
    let (logs, killed_at) = load::kill_under_load(&mut server, writers);
    let restarted = Server::start(dir.path(), &flags("everysec"));
    // The suffix property: a violation is an error here whatever was lost.
    let recoveries = load::check_writers(restarted.port, &logs).unwrap_or_else(|e| panic!("{e}"));
    let (lost, window) = load::loss_window(&logs, &recoveries, killed_at);
    let acknowledged: u64 = logs.iter().map(|l| l.acknowledged).sum();
    eprintln!(
        "everysec after SIGKILL: {acknowledged} acknowledged writes, {lost} lost, \
         acknowledged within {} ms before the kill",
        window.as_millis()
    );
    // docs/server.md: "a process crash loses no acknowledged write".
    load::require_no_loss(&logs, &recoveries).unwrap_or_else(|e| panic!("{e}"));
}

/// A test-only TCP proxy between writers and the server. It relays in lockstep (one request,
/// then its reply), except the `SET` of one key, which it answers `+OK` itself without forwarding:
/// the client is told of a write the server never saw.
struct SwallowingProxy {
    port: u16,
    swallowed: Arc<AtomicBool>,
}

impl SwallowingProxy {
    /// Listens on a free loopback port and relays the next `connections` connections to
    /// `upstream`.
    fn start(upstream: u16, connections: usize, key: String) -> SwallowingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let swallowed = Arc::new(AtomicBool::new(false));
        let flag = swallowed.clone();
        std::thread::spawn(move || {
            for _ in 0..connections {
                let Ok((client, _)) = listener.accept() else {
                    return;
                };
                let (key, flag) = (key.clone(), flag.clone());
                std::thread::spawn(move || relay(client, upstream, &key, &flag));
            }
        });
        SwallowingProxy { port, swallowed }
    }
}

/// Relays one connection until either side closes or fails.
fn relay(mut client: TcpStream, upstream: u16, key: &str, swallowed: &AtomicBool) {
    let Ok(mut server) = Raw::connect(upstream) else {
        return;
    };
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut parser = RequestParser::new(Limits::default());
    let mut input = BytesMut::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        let command = match parser.parse(&mut input) {
            Ok(Some(command)) => command,
            Ok(None) => match client.read(&mut chunk) {
                Ok(read) if read > 0 => {
                    input.extend_from_slice(&chunk[..read]);
                    continue;
                }
                _ => return,
            },
            Err(_) => return,
        };
        let reply = if command.args.len() >= 2
            && command.args[0].eq_ignore_ascii_case(b"SET")
            && command.args[1].as_ref() == key.as_bytes()
        {
            swallowed.store(true, Ordering::SeqCst);
            Reply::simple("OK")
        } else {
            let mut request = Vec::new();
            let args: Vec<&[u8]> = command.args.iter().map(|a| a.as_ref()).collect();
            encode_request(&mut request, &args);
            if server.send_bytes(&request).is_err() {
                return;
            }
            match server.read() {
                Some(reply) => reply,
                None => return,
            }
        };
        if client.write_all(&reply.to_bytes(Protocol::Resp2)).is_err() {
            return;
        }
    }
}

#[test]
fn oracle_reports_a_set_a_proxy_acknowledged_but_swallowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &flags("always"));
    let victim = load::key(0, 20);
    let proxy = SwallowingProxy::start(server.port, 2, victim.clone());
    let (logs, _) = load_then_kill(&mut server, proxy.port, 0..2, 7, 40);
    assert!(
        proxy.swallowed.load(Ordering::SeqCst),
        "the proxy swallowed nothing"
    );
    let restarted = Server::start(dir.path(), &flags("always"));
    let error = load::check_writers(restarted.port, &logs)
        .and_then(|r| load::require_no_loss(&logs, &r))
        .expect_err("the oracle must see the swallowed write");
    eprintln!("tampered (proxy): {error}");
    assert!(error.contains(&victim), "{error}");
}

#[test]
fn oracle_reports_an_acknowledged_key_removed_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &flags("always"));
    let port = server.port;
    let (logs, _) = load_then_kill(&mut server, port, 0..2, 11, 40);
    let restarted = Server::start(dir.path(), &flags("always"));
    let recoveries = load::check_writers(restarted.port, &logs).unwrap();
    load::require_no_loss(&logs, &recoveries).unwrap();
    // Tamper: remove writer 1's last acknowledged write, and its in-flight writes that the
    // server may have kept, so that what is missing is a suffix (a lost write, not a hole).
    let log = &logs[1];
    let victim = load::key(1, log.acknowledged - 1);
    let mut raw = restarted.raw();
    assert_eq!(
        raw.call(&["DEL", &victim]),
        Reply::Integer(1),
        "{victim} was there before the tampering"
    );
    for write in log.acknowledged..log.issued {
        raw.call(&["DEL", &load::key(1, write)]);
    }
    let error = load::check_writers(restarted.port, &logs)
        .and_then(|r| load::require_no_loss(&logs, &r))
        .expect_err("the oracle must see the removed key");
    eprintln!("tampered (DEL after restart): {error}");
    assert!(error.contains(&victim), "{error}");
}
