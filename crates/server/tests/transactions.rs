//! MULTI / EXEC / DISCARD: reply shapes and errors as Redis gives them, and isolation of EXEC
//! from other clients' writes.

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

    // WATCH is refused with a message that says why; UNWATCH has nothing to forget.
    assert!(raw.error(&["WATCH", "a"]).contains("not supported"));
    assert_eq!(raw.call(&["UNWATCH"]), ok());
    assert_eq!(raw.call(&["MULTI"]), ok());
    assert_eq!(
        raw.error(&["WATCH", "a"]),
        "ERR WATCH inside MULTI is not allowed"
    );
    assert_eq!(raw.call(&["EXEC"]), Reply::Array(vec![]));
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
