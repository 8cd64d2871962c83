//! Security and limits: AUTH/NOAUTH, protected mode, maxclients, oversized bulk lengths,
//! the query buffer limit, maxmemory.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::Server;
use prefixkv_resp::Reply;

#[test]
fn requirepass_gates_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--requirepass", "s3cret", "--engine-memory", "64mb"],
    );
    let mut raw = server.raw();
    assert_eq!(raw.error(&["GET", "k"]), "NOAUTH Authentication required.");
    assert_eq!(
        raw.error(&["AUTH", "wrong"]),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert!(raw
        .error(&["HELLO", "3"])
        .starts_with("NOAUTH HELLO must be called"));
    assert!(matches!(
        raw.call(&["HELLO", "3", "AUTH", "default", "s3cret"]),
        Reply::Map(_)
    ));
    assert_eq!(
        raw.call(&["SET", "k", "v"]),
        Reply::SimpleString("OK".into())
    );
    let mut second = server.raw();
    assert_eq!(
        second.call(&["AUTH", "s3cret"]),
        Reply::SimpleString("OK".into())
    );
    assert_eq!(second.call(&["GET", "k"]), Reply::bulk("v"));
    // RESET drops authentication.
    assert_eq!(second.call(&["RESET"]), Reply::SimpleString("RESET".into()));
    assert_eq!(
        second.error(&["GET", "k"]),
        "NOAUTH Authentication required."
    );
    // redis-rs with a password in the URL (it pipelines CLIENT SETINFO after AUTH).
    let client =
        redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", server.port)).unwrap();
    let mut con = client.get_connection().unwrap();
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "v");
}

#[test]
fn non_loopback_bind_without_password_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = common::failed_start(&["--bind", "0.0.0.0", "--port", "0"], dir.path());
    assert!(
        text.contains("without a password") && text.contains("protected-mode no"),
        "{text}"
    );
}

#[test]
fn maxclients_refuses_extra_connections() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--maxclients", "2", "--engine-memory", "64mb"],
    );
    // The harness's readiness probe may still count as a client for a moment after it closed,
    // so a refused connection is retried (bounded) until the server saw the probe go.
    let connect_admitted = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut raw = server.raw();
            if raw.call(&["PING"]) == Reply::SimpleString("PONG".into()) {
                return raw;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no connection admitted"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let _first = connect_admitted();
    let _second = connect_admitted();
    let mut third = server.raw();
    assert_eq!(
        third.read(),
        Some(Reply::Error("ERR max number of clients reached".into()))
    );
    assert!(third.read().is_none());
}

#[test]
fn oversized_bulk_length_is_refused_without_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--proto-max-bulk-len", "1mb", "--engine-memory", "64mb"],
    );
    // Far over any limit: refused at the header, before any payload arrives.
    let mut raw = server.raw();
    raw.stream
        .write_all(b"*2\r\n$3\r\nGET\r\n$99999999999\r\n")
        .unwrap();
    assert_eq!(
        raw.read(),
        Some(Reply::Error(
            "ERR Protocol error: invalid bulk length".into()
        ))
    );
    assert!(raw.read().is_none(), "the connection is closed");
    // Just over the configured 1 MiB.
    let mut raw = server.raw();
    raw.stream
        .write_all(format!("*2\r\n$3\r\nGET\r\n${}\r\n", (1 << 20) + 1).as_bytes())
        .unwrap();
    assert_eq!(
        raw.read(),
        Some(Reply::Error(
            "ERR Protocol error: invalid bulk length".into()
        ))
    );
    let mut raw = server.raw();
    raw.stream.write_all(b"*99999999999\r\n").unwrap();
    assert_eq!(
        raw.read(),
        Some(Reply::Error(
            "ERR Protocol error: invalid multibulk length".into()
        ))
    );
    // The server is fine afterwards.
    assert_eq!(
        server.raw().call(&["PING"]),
        Reply::SimpleString("PONG".into())
    );
}

#[test]
fn query_buffer_limit_closes_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--client-query-buffer-limit",
            "256kb",
            "--engine-memory",
            "64mb",
        ],
    );
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // One bulk of 1 MiB (allowed by proto-max-bulk-len) exceeds the 256 KiB query buffer.
    stream
        .write_all(format!("*2\r\n$4\r\nECHO\r\n${}\r\n", 1 << 20).as_bytes())
        .unwrap();
    let chunk = vec![b'x'; 64 << 10];
    let mut closed = false;
    for _ in 0..16 {
        if stream.write_all(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    if !closed {
        let mut buffer = [0u8; 16];
        closed = matches!(stream.read(&mut buffer), Ok(0) | Err(_));
    }
    assert!(
        closed,
        "the server must close a connection over the query buffer limit"
    );
}

#[test]
fn maxmemory_refuses_writes_with_oom() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["SET", "k", "v"]),
        Reply::SimpleString("OK".into())
    );
    assert_eq!(
        raw.call(&["CONFIG", "SET", "maxmemory", "1"]),
        Reply::SimpleString("OK".into())
    );
    assert_eq!(
        raw.error(&["SET", "k2", "v"]),
        "OOM command not allowed when used memory > 'maxmemory'."
    );
    assert_eq!(raw.call(&["GET", "k"]), Reply::bulk("v"));
    assert_eq!(raw.call(&["DEL", "k"]), Reply::Integer(1));
    assert_eq!(
        raw.call(&["CONFIG", "SET", "maxmemory", "0"]),
        Reply::SimpleString("OK".into())
    );
    assert_eq!(
        raw.call(&["SET", "k2", "v"]),
        Reply::SimpleString("OK".into())
    );
}

#[test]
fn values_up_to_about_4_mib_work_and_larger_ones_get_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut connection = server.connect(false);
    let big = vec![b'x'; 3 << 20];
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query::<()>(&mut connection)
        .unwrap();
    let read: Vec<u8> = redis::cmd("GET").arg("big").query(&mut connection).unwrap();
    assert_eq!(read.len(), big.len());
    assert!(read == big);
    let error = redis::cmd("SET")
        .arg("big")
        .arg(vec![b'y'; 5 << 20])
        .query::<()>(&mut connection)
        .unwrap_err();
    assert!(error.to_string().contains("value too large"), "{error}");
    // The refused write left the old value in place.
    let read: Vec<u8> = redis::cmd("GET").arg("big").query(&mut connection).unwrap();
    assert!(read == big);
}
