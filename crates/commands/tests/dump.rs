//! `prefixkv_commands::dump`: every type's whole value (elements, expiry, a stream's groups,
//! pending lists and consumers) survives a dump and a restore under another key, element for
//! element, and the restored key is independent of the source (fresh object ids).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prefixkv_commands::commands::{execute, Client};
use prefixkv_commands::host::NoHost;
use prefixkv_commands::keyspace::{self, Keyspace};
use prefixkv_commands::settings::{Durability, Settings};
use prefixkv_commands::state::Server;
use prefixkv_store::{DurableStore, Options};

fn server(dir: &std::path::Path) -> Arc<Server> {
    let mut options = Options::new(dir, Durability::None);
    options.engine.index_buckets = 1 << 10;
    options.engine.log_memory_bytes = 8 << 20;
    options.engine.log_page_bytes = 64 << 10;
    let (store, _) = DurableStore::open(options).unwrap();
    let keyspace = Arc::new(Keyspace::counting().with_store(store));
    Server::new(Settings::default(), keyspace, Arc::new(NoHost))
}

fn run(server: &Server, args: &[&str]) -> String {
    let args: Vec<Bytes> = args
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    let mut out = BytesMut::new();
    let mut client = Client::new(1, true, Durability::None);
    keyspace::with_session(&server.keyspace.store, |session| {
        execute(server, &mut client, session, &args, &mut out)
    });
    String::from_utf8_lossy(&out).into_owned()
}

fn dump(server: &Server, key: &str, limit: usize) -> Result<Option<Vec<u8>>, String> {
    keyspace::with_session(&server.keyspace.store, |session| {
        let mut txn = server.keyspace.begin(session, 0, &[key.as_bytes()]);
        let dumped = prefixkv_commands::dump::dump(&mut txn, 0, key.as_bytes(), limit);
        txn.commit().unwrap();
        dumped.map_err(|e| e.to_string())
    })
}

fn restore(server: &Server, key: &str, bytes: &[u8], replace: bool) -> Result<bool, String> {
    keyspace::with_session(&server.keyspace.store, |session| {
        let mut txn = server.keyspace.begin(session, 0, &[key.as_bytes()]);
        let restored =
            prefixkv_commands::dump::restore(&mut txn, 0, key.as_bytes(), bytes, replace);
        txn.commit().unwrap();
        restored.map_err(|e| e.to_string())
    })
}

/// Fills one key of every type (a large hash too), with a TTL on the list.
fn fill(server: &Server) {
    run(server, &["SET", "s", "hello"]);
    for i in 0..300 {
        run(server, &["RPUSH", "l", &format!("e{i}")]);
    }
    run(server, &["PEXPIRE", "l", "600000"]);
    run(server, &["HSET", "h", "a", "1", "b", "2"]);
    for i in 0..200 {
        run(server, &["HSET", "H", &format!("f{i}"), &format!("v{i}")]);
        run(server, &["SADD", "S", &format!("m{i}")]);
        run(
            server,
            &["ZADD", "z", &format!("{}", i % 17), &format!("m{i}")],
        );
    }
    for i in 1..=20 {
        run(
            server,
            &["XADD", "x", &format!("{i}-1"), "f", &format!("{i}")],
        );
    }
    run(server, &["XGROUP", "CREATE", "x", "g", "0"]);
    run(
        server,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "COUNT",
            "5",
            "STREAMS",
            "x",
            ">",
        ],
    );
    run(
        server,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "COUNT",
            "3",
            "STREAMS",
            "x",
            ">",
        ],
    );
    run(server, &["XACK", "x", "g", "2-1"]);
    run(server, &["XGROUP", "CREATE", "x", "empty", "$"]);
    run(server, &["XDEL", "x", "15-1"]);
}

/// Everything a key holds, as the commands report it.
fn view(server: &Server, key: &str) -> Vec<String> {
    let kind = run(server, &["TYPE", key]);
    let mut out = vec![kind.clone()];
    let sorted = |reply: String| {
        let mut lines: Vec<String> = reply.lines().map(str::to_owned).collect();
        lines.sort();
        lines.join("|")
    };
    match kind.trim() {
        "+string" => out.push(run(server, &["GET", key])),
        "+list" => out.push(run(server, &["LRANGE", key, "0", "-1"])),
        "+hash" => out.push(sorted(run(server, &["HGETALL", key]))),
        "+set" => out.push(sorted(run(server, &["SMEMBERS", key]))),
        "+zset" => out.push(run(server, &["ZRANGE", key, "0", "-1", "WITHSCORES"])),
        "+stream" => {
            out.push(run(server, &["XRANGE", key, "-", "+"]));
            out.push(run(server, &["XINFO", "STREAM", key]));
            // FULL reports delivery times and seen times, all of which must survive too.
            out.push(run(server, &["XINFO", "STREAM", key, "FULL"]));
            // XPENDING's summary form: the extended form's idle times are "now" minus the
            // delivery time, which moves between the two views (the delivery times themselves
            // are compared through XINFO STREAM FULL above).
            out.push(run(server, &["XPENDING", key, "g"]));
        }
        other => panic!("unexpected type {other}"),
    }
    out
}

#[test]
fn every_type_round_trips_element_for_element() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    fill(&server);
    for key in ["s", "l", "h", "H", "S", "z", "x"] {
        let bytes = dump(&server, key, 1 << 20)
            .unwrap()
            .expect("the key exists");
        let copy = format!("{key}-copy");
        assert!(restore(&server, &copy, &bytes, false).unwrap());
        assert_eq!(view(&server, key), view(&server, &copy), "key {key}");
        // The copy is independent: deleting the source leaves it whole.
        let before = view(&server, &copy);
        run(&server, &["DEL", key]);
        assert_eq!(view(&server, &copy), before, "key {key}");
        assert!(restore(&server, key, &bytes, false).unwrap());
    }
    let ttl: i64 = run(&server, &["PTTL", "l-copy"])[1..]
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 500_000 && ttl <= 600_000, "{ttl}");
    assert_eq!(run(&server, &["PTTL", "z-copy"]), ":-1\r\n");
    // The restored stream's group works: a new read delivers past the pending entries.
    let read = run(
        &server,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "carol",
            "COUNT",
            "1",
            "STREAMS",
            "x-copy",
            ">",
        ],
    );
    assert!(read.contains("9-1"), "{read}");
}

#[test]
fn restore_refuses_an_existing_key_unless_replacing_and_damage_always() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    fill(&server);
    let bytes = dump(&server, "S", 1 << 20).unwrap().unwrap();
    let busy = restore(&server, "l", &bytes, false).unwrap_err();
    assert!(busy.starts_with("BUSYKEY"), "{busy}");
    assert!(restore(&server, "l", &bytes, true).unwrap());
    assert_eq!(view(&server, "l"), view(&server, "S"));
    let mut damaged = bytes.clone();
    damaged[20] ^= 1;
    assert!(restore(&server, "new", &damaged, false).is_err());
    assert!(restore(&server, "new", &bytes[..bytes.len() - 1], false).is_err());
    assert_eq!(run(&server, &["EXISTS", "new"]), ":0\r\n");
    // Beyond the limit: a clear error, not a partial form.
    let error = dump(&server, "H", 1000).unwrap_err();
    assert!(error.contains("limit of 1000 bytes"), "{error}");
    assert_eq!(dump(&server, "missing", 1000).unwrap(), None);
}
