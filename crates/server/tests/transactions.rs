//! MULTI / EXEC / DISCARD / WATCH: reply shapes and errors as Redis gives them, isolation of EXEC
//! from other clients' writes, and WATCH's optimistic locking judged from the clients' side
//! (concurrent read-modify-write increments through redis-rs's WATCH retry loop lose none).

mod common;

use common::Server;
use prefixkv_resp::Reply;

fn ok() -> Reply {
    Reply::SimpleString("OK".into())
}

fn queued() -> Reply {
    Reply::SimpleString("QUEUED".into())
}

#[test]
fn exec_runs_the_queue_and_errors_follow_redis() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut raw = server.raw();

    assert_eq!(raw.error(&["EXEC"]), "ERR EXEC without MULTI");
    assert_eq!(raw.error(&["DISCARD"]), "ERR DISCARD without MULTI");

    assert_eq!(raw.call(&["MULTI"]), ok());
    assert_eq!(raw.error(&["MULTI"]), "ERR MULTI calls can not be nested");
    assert_eq!(raw.call(&["SET", "a", "1"]), queued());
    assert_eq!(raw.call(&["INCR", "a"]), queued());
    assert_eq!(raw.call(&["SET", "s", "text"]), queued());
    assert_eq!(raw.call(&["INCR", "s"]), queued());
    assert_eq!(raw.call(&["GET", "a"]), queued());
    // An error while running is one element; the other commands still ran.
    assert_eq!(
        raw.call(&["EXEC"]),
        Reply::Array(vec![
            ok(),
            Reply::Integer(2),
            ok(),
            Reply::Error("ERR value is not an integer or out of range".into()),
            Reply::bulk("2"),
        ])
    );

    // A command refused while queuing aborts the whole transaction; nothing runs.
    assert_eq!(raw.call(&["MULTI"]), ok());
    assert_eq!(raw.call(&["SET", "a", "100"]), queued());
    assert!(raw
        .error(&["NOSUCHCOMMAND"])
        .starts_with("ERR unknown command"));
    assert!(raw
        .error(&["GET"])
        .starts_with("ERR wrong number of arguments"));
    assert_eq!(
        raw.error(&["SAVE"]),
        "ERR Command not allowed inside a transaction"
    );
    assert_eq!(
        raw.error(&["EXEC"]),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(raw.call(&["GET", "a"]), Reply::bulk("2"));

    // DISCARD drops the queue; RESET leaves MULTI too.
    assert_eq!(raw.call(&["MULTI"]), ok());
    assert_eq!(raw.call(&["SET", "a", "200"]), queued());
    assert_eq!(raw.call(&["DISCARD"]), ok());
    assert_eq!(raw.call(&["GET", "a"]), Reply::bulk("2"));
    assert_eq!(raw.call(&["MULTI"]), ok());
    assert_eq!(raw.call(&["SET", "a", "300"]), queued());
    assert_eq!(raw.call(&["RESET"]), Reply::SimpleString("RESET".into()));
    assert_eq!(raw.error(&["EXEC"]), "ERR EXEC without MULTI");
    assert_eq!(raw.call(&["GET", "a"]), Reply::bulk("2"));

    // WATCH's errors; UNWATCH inside MULTI is queued, as in Redis.
    assert_eq!(
        raw.error(&["WATCH"]),
        "ERR wrong number of arguments for 'watch' command"
    );
    assert_eq!(raw.call(&["UNWATCH"]), ok());
    assert_eq!(raw.call(&["MULTI"]), ok());
    assert_eq!(
        raw.error(&["WATCH", "a"]),
        "ERR WATCH inside MULTI is not allowed"
    );
    assert_eq!(raw.call(&["UNWATCH"]), queued());
    assert_eq!(raw.call(&["EXEC"]), Reply::Array(vec![ok()]));
}

/// WATCH as Redis has it: a write to a watched key by another client or by the watcher itself,
/// its deletion by FLUSHDB or its expiry aborts EXEC (a null array: RESP2 `*-1`, RESP3 `_`) and
/// runs none of the queue; UNWATCH, EXEC and DISCARD forget the watches; a write to another key
/// or database does not abort.
#[test]
fn watch_aborts_exec_exactly_when_a_watched_key_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    for resp3 in [false, true] {
        let mut raw = server.raw();
        if resp3 {
            assert!(matches!(raw.call(&["HELLO", "3"]), Reply::Map(_)));
        }
        let mut other = server.raw();
        let aborted = |raw: &mut common::Raw| {
            assert_eq!(raw.call(&["MULTI"]), ok());
            assert_eq!(raw.call(&["SET", "ran", "yes"]), queued());
            let reply = match raw.call(&["EXEC"]) {
                // The null array: `*-1` in RESP2, `_` in RESP3.
                Reply::NullArray if !resp3 => Reply::Null,
                Reply::NullArray => panic!("RESP3 answers an aborted EXEC with `_`"),
                Reply::Null if !resp3 => panic!("RESP2 answers an aborted EXEC with `*-1`"),
                other => other,
            };
            let ran = i64::from(reply != Reply::Null);
            assert_eq!(raw.call(&["DEL", "ran"]), Reply::Integer(ran));
            reply
        };
        let ran = Reply::Array(vec![ok()]);

        // Another client's write, to a key that existed or not.
        raw.call(&["SET", "k", "1"]);
        assert_eq!(raw.call(&["WATCH", "k", "absent"]), ok());
        assert_eq!(other.call(&["SET", "k", "2"]), ok());
        assert_eq!(aborted(&mut raw), Reply::Null, "resp3={resp3}");
        assert_eq!(raw.call(&["WATCH", "absent"]), ok());
        assert_eq!(other.call(&["SET", "absent", "now"]), ok());
        assert_eq!(aborted(&mut raw), Reply::Null);
        other.call(&["DEL", "absent"]);
        // EXEC forgot the watches: the same write no longer aborts.
        assert_eq!(other.call(&["SET", "k", "3"]), ok());
        assert_eq!(aborted(&mut raw), ran);

        // Untouched, or touched elsewhere (another key, the same key in another database).
        assert_eq!(raw.call(&["WATCH", "k"]), ok());
        other.call(&["SET", "k2", "x"]);
        other.call(&["SELECT", "1"]);
        other.call(&["SET", "k", "x"]);
        other.call(&["SELECT", "0"]);
        other.call(&["DEL", "nothing-here"]);
        assert_eq!(aborted(&mut raw), ran);

        // The watcher's own write; UNWATCH and DISCARD forget.
        assert_eq!(raw.call(&["WATCH", "k"]), ok());
        raw.call(&["INCR", "k"]);
        assert_eq!(aborted(&mut raw), Reply::Null);
        assert_eq!(raw.call(&["WATCH", "k"]), ok());
        assert_eq!(raw.call(&["UNWATCH"]), ok());
        other.call(&["INCR", "k"]);
        assert_eq!(aborted(&mut raw), ran);
        assert_eq!(raw.call(&["WATCH", "k"]), ok());
        assert_eq!(raw.call(&["MULTI"]), ok());
        assert_eq!(raw.call(&["DISCARD"]), ok());
        other.call(&["INCR", "k"]);
        assert_eq!(aborted(&mut raw), ran);

        // FLUSHDB deletes a watched key; expiry too.
        assert_eq!(raw.call(&["WATCH", "k"]), ok());
        other.call(&["FLUSHDB"]);
        assert_eq!(aborted(&mut raw), Reply::Null);
        raw.call(&["SET", "k", "v", "PX", "40"]);
        assert_eq!(raw.call(&["WATCH", "k"]), ok());
        // Wait until the key's time has passed, without a command that would touch it.
        let expires_at_ms = match other.call(&["PEXPIRETIME", "k"]) {
            Reply::Integer(ms) if ms > 0 => ms as u128,
            reply => panic!("PEXPIRETIME k: {reply:?}"),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            <= expires_at_ms
        {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(aborted(&mut raw), Reply::Null);
        // A key already expired when it was watched is no write after WATCH.
        raw.call(&["SET", "gone", "v", "PX", "1"]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(raw.call(&["WATCH", "gone"]), ok());
        assert_eq!(aborted(&mut raw), ran);
    }
    // A connection that closes while watching leaves no registration behind.
    let mut observer = server.raw();
    let mut leaving = server.raw();
    assert_eq!(leaving.call(&["WATCH", "a", "b", "a"]), ok());
    assert_eq!(observer.info_field("clients", "total_watched_keys"), "2");
    drop(leaving);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while observer.info_field("clients", "total_watched_keys") != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "watches outlived the connection"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Optimistic locking from the clients' side: four clients each add 1 to one counter 150 times
/// with redis-rs's WATCH / GET / MULTI / SET / EXEC retry loop. A lost update (an EXEC that ran
/// although another client's SET came between its GET and its EXEC) leaves the counter short.
#[test]
fn concurrent_read_modify_write_through_watch_loses_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (clients, increments) = (4, 150);
    std::thread::scope(|scope| {
        for _ in 0..clients {
            let mut connection = server.connect(false);
            scope.spawn(move || {
                for _ in 0..increments {
                    let _: () = redis::transaction(&mut connection, &["counter"], |con, pipe| {
                        let value: Option<i64> = redis::cmd("GET").arg("counter").query(con)?;
                        pipe.set("counter", value.unwrap_or(0) + 1)
                            .ignore()
                            .query(con)
                    })
                    .unwrap();
                }
            });
        }
    });
    let mut connection = server.connect(false);
    let total: i64 = redis::cmd("GET")
        .arg("counter")
        .query(&mut connection)
        .unwrap();
    assert_eq!(total, clients * increments, "updates were lost");
}

#[test]
fn redis_rs_atomic_pipelines_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    for resp3 in [false, true] {
        let mut connection = server.connect(resp3);
        let (first, second): (i64, i64) = redis::pipe()
            .atomic()
            .incr("counter", 1)
            .incr("counter", 10)
            .query(&mut connection)
            .unwrap();
        assert_eq!(second - first, 10);
    }
}

/// Writers keep `a` and `b` equal inside EXEC only; readers check them inside EXEC. Without
/// isolation a reader's EXEC could run between a writer's two INCRs and see `a = b + 1`.
#[test]
fn exec_is_isolated_from_other_clients_writes() {
    let dir = tempfile::tempdir().unwrap();
    // The test helper starts the server with 2 request threads, so the clients run in parallel.
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let rounds = 300;
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let mut connection = server.connect(false);
            scope.spawn(move || {
                for _ in 0..rounds {
                    let _: (i64, i64) = redis::pipe()
                        .atomic()
                        .incr("a", 1)
                        .incr("b", 1)
                        .query(&mut connection)
                        .unwrap();
                }
            });
        }
        for _ in 0..2 {
            let mut connection = server.connect(false);
            scope.spawn(move || {
                for _ in 0..rounds {
                    let (a, b): (Option<i64>, Option<i64>) = redis::pipe()
                        .atomic()
                        .get("a")
                        .get("b")
                        .query(&mut connection)
                        .unwrap();
                    assert_eq!(a, b, "a reader saw half of a writer's EXEC");
                }
            });
        }
    });
    let mut connection = server.connect(false);
    let (a, b): (i64, i64) = redis::pipe()
        .get("a")
        .get("b")
        .query(&mut connection)
        .unwrap();
    assert_eq!((a, b), (2 * rounds, 2 * rounds));
}

/// Readers outside any transaction never see part of an EXEC: while writers run `MULTI; INCR a;
/// INCR b; EXEC`, a single `MGET a b` always finds
/// `a == b`. Before reads took the exec gate shared, an MGET running between the EXEC's two
/// INCRs saw `a = b + 1` within a few hundred rounds.
#[test]
fn plain_reads_never_see_part_of_an_exec() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let rounds = 1000;
    let done = AtomicBool::new(false);
    let reads = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let mut connection = server.connect(false);
                scope.spawn(move || {
                    for _ in 0..rounds {
                        let _: (i64, i64) = redis::pipe()
                            .atomic()
                            .incr("a", 1)
                            .incr("b", 1)
                            .query(&mut connection)
                            .unwrap();
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            let mut connection = server.connect(false);
            let (done, reads) = (&done, &reads);
            scope.spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    let (a, b): (Option<i64>, Option<i64>) = redis::cmd("MGET")
                        .arg("a")
                        .arg("b")
                        .query(&mut connection)
                        .unwrap();
                    reads.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(a, b, "an MGET saw half of a writer's EXEC");
                }
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    assert!(reads.load(Ordering::Relaxed) > 0, "no read ran");
    let mut connection = server.connect(false);
    let (a, b): (i64, i64) = redis::pipe()
        .get("a")
        .get("b")
        .query(&mut connection)
        .unwrap();
    assert_eq!((a, b), (2 * rounds, 2 * rounds));
}

/// The writes inside an EXEC are acknowledged with the EXEC's oplog group: in `always` (no
/// checkpoint taken) EXEC's reply came after the group's sync, so PREFIXKV.COMMITPOINT counts
/// each of them durable at once, and WAITAOF returns at once. (Had their marks kept no log
/// position, only a checkpoint could make them durable.)
#[test]
fn writes_inside_exec_are_durable_with_the_exec() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--appendfsync",
            "always",
            "--checkpoint-interval",
            "3600000",
            "--engine-memory",
            "64mb",
        ],
    );
    let mut connection = server.connect(false);
    let _: (String, String, i64) = redis::pipe()
        .atomic()
        .set("x", "1")
        .set("y", "2")
        .incr("z", 1)
        .query(&mut connection)
        .unwrap();
    let (writes, durable): (i64, i64) = redis::cmd("PREFIXKV.COMMITPOINT")
        .query(&mut connection)
        .unwrap();
    assert_eq!((writes, durable), (3, 3));
    let waited: (i64, i64) = redis::cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(5000)
        .query(&mut connection)
        .unwrap();
    assert_eq!(waited, (1, 0));
}
