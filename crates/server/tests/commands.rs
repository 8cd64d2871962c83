//! Every command through redis-rs in RESP2 and RESP3, plus exact error lines through a raw
//! client.

mod common;

use common::Server;
use prefixkv_resp::Reply;
use redis::{Commands, Value};

fn start() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--engine-memory", "64mb", "--appendfsync", "everysec"],
    );
    (dir, server)
}

fn run_strings(con: &mut redis::Connection) {
    let _: () = redis::cmd("FLUSHALL").query(con).unwrap();
    let _: () = con.set("s", "hello").unwrap();
    assert_eq!(con.get::<_, String>("s").unwrap(), "hello");
    assert_eq!(con.get::<_, Option<String>>("missing").unwrap(), None);
    // SET options.
    assert_eq!(
        redis::cmd("SET")
            .arg("s")
            .arg("x")
            .arg("NX")
            .query::<Option<String>>(con)
            .unwrap(),
        None
    );
    assert_eq!(
        redis::cmd("SET")
            .arg("new")
            .arg("1")
            .arg("XX")
            .query::<Option<String>>(con)
            .unwrap(),
        None
    );
    assert_eq!(
        redis::cmd("SET")
            .arg("s")
            .arg("world")
            .arg("GET")
            .query::<Option<String>>(con)
            .unwrap(),
        Some("hello".into())
    );
    let _: () = redis::cmd("SET")
        .arg("e")
        .arg("v")
        .arg("EX")
        .arg(100)
        .query(con)
        .unwrap();
    let ttl: i64 = con.ttl("e").unwrap();
    assert!((99..=100).contains(&ttl), "{ttl}");
    let _: () = redis::cmd("SET")
        .arg("e")
        .arg("v2")
        .arg("KEEPTTL")
        .query(con)
        .unwrap();
    assert!(con.pttl::<_, i64>("e").unwrap() > 90_000);
    let _: () = redis::cmd("SET").arg("e").arg("v3").query(con).unwrap();
    assert_eq!(con.ttl::<_, i64>("e").unwrap(), -1);
    let _: () = redis::cmd("SET")
        .arg("p")
        .arg("v")
        .arg("PX")
        .arg(100_000)
        .query(con)
        .unwrap();
    assert!(con.pttl::<_, i64>("p").unwrap() > 90_000);
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1000) as i64;
    let _: () = redis::cmd("SET")
        .arg("q")
        .arg("v")
        .arg("EXAT")
        .arg(far)
        .query(con)
        .unwrap();
    assert_eq!(
        redis::cmd("EXPIRETIME").arg("q").query::<i64>(con).unwrap(),
        far
    );
    let _: () = redis::cmd("SET")
        .arg("q")
        .arg("v")
        .arg("PXAT")
        .arg(far * 1000)
        .query(con)
        .unwrap();
    assert_eq!(
        redis::cmd("PEXPIRETIME")
            .arg("q")
            .query::<i64>(con)
            .unwrap(),
        far * 1000
    );
    // GETSET, GETDEL, GETEX.
    assert_eq!(
        redis::cmd("GETSET")
            .arg("s")
            .arg("again")
            .query::<String>(con)
            .unwrap(),
        "world"
    );
    assert_eq!(
        redis::cmd("GETDEL").arg("s").query::<String>(con).unwrap(),
        "again"
    );
    assert!(!con.exists::<_, bool>("s").unwrap());
    let _: () = con.set("g", "v").unwrap();
    assert_eq!(
        redis::cmd("GETEX")
            .arg("g")
            .arg("EX")
            .arg(50)
            .query::<String>(con)
            .unwrap(),
        "v"
    );
    assert!(con.ttl::<_, i64>("g").unwrap() > 40);
    assert_eq!(
        redis::cmd("GETEX")
            .arg("g")
            .arg("PERSIST")
            .query::<String>(con)
            .unwrap(),
        "v"
    );
    assert_eq!(con.ttl::<_, i64>("g").unwrap(), -1);
    // SETNX / SETEX / PSETEX.
    assert_eq!(
        redis::cmd("SETNX")
            .arg("nx")
            .arg("1")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("SETNX")
            .arg("nx")
            .arg("2")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    let _: () = redis::cmd("SETEX")
        .arg("sx")
        .arg(10)
        .arg("v")
        .query(con)
        .unwrap();
    assert!(con.ttl::<_, i64>("sx").unwrap() > 5);
    let _: () = redis::cmd("PSETEX")
        .arg("psx")
        .arg(10_000)
        .arg("v")
        .query(con)
        .unwrap();
    assert!(con.pttl::<_, i64>("psx").unwrap() > 5_000);
    // MSET / MSETNX / MGET.
    let _: () = redis::cmd("MSET")
        .arg("m1")
        .arg("a")
        .arg("m2")
        .arg("b")
        .query(con)
        .unwrap();
    assert_eq!(
        redis::cmd("MSETNX")
            .arg("m1")
            .arg("x")
            .arg("m3")
            .arg("c")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("MSETNX")
            .arg("m3")
            .arg("c")
            .arg("m4")
            .arg("d")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg("m1")
        .arg("m2")
        .arg("nope")
        .arg("m4")
        .query(con)
        .unwrap();
    assert_eq!(
        got,
        vec![Some("a".into()), Some("b".into()), None, Some("d".into())]
    );
    // Counters.
    assert_eq!(con.incr::<_, _, i64>("n", 1).unwrap(), 1);
    assert_eq!(redis::cmd("INCR").arg("n").query::<i64>(con).unwrap(), 2);
    assert_eq!(redis::cmd("DECR").arg("n").query::<i64>(con).unwrap(), 1);
    assert_eq!(
        redis::cmd("INCRBY")
            .arg("n")
            .arg(10)
            .query::<i64>(con)
            .unwrap(),
        11
    );
    assert_eq!(
        redis::cmd("DECRBY")
            .arg("n")
            .arg(5)
            .query::<i64>(con)
            .unwrap(),
        6
    );
    assert_eq!(
        redis::cmd("INCRBYFLOAT")
            .arg("f")
            .arg("10.5")
            .query::<String>(con)
            .unwrap(),
        "10.5"
    );
    assert_eq!(
        redis::cmd("INCRBYFLOAT")
            .arg("f")
            .arg("0.5")
            .query::<String>(con)
            .unwrap(),
        "11"
    );
    // APPEND, STRLEN, SETRANGE, GETRANGE.
    assert_eq!(
        redis::cmd("APPEND")
            .arg("ap")
            .arg("Hello")
            .query::<i64>(con)
            .unwrap(),
        5
    );
    assert_eq!(
        redis::cmd("APPEND")
            .arg("ap")
            .arg(" World")
            .query::<i64>(con)
            .unwrap(),
        11
    );
    assert_eq!(
        redis::cmd("STRLEN").arg("ap").query::<i64>(con).unwrap(),
        11
    );
    assert_eq!(
        redis::cmd("SETRANGE")
            .arg("ap")
            .arg(6)
            .arg("Redis")
            .query::<i64>(con)
            .unwrap(),
        11
    );
    assert_eq!(con.get::<_, String>("ap").unwrap(), "Hello Redis");
    assert_eq!(
        redis::cmd("GETRANGE")
            .arg("ap")
            .arg(0)
            .arg(4)
            .query::<String>(con)
            .unwrap(),
        "Hello"
    );
    assert_eq!(
        redis::cmd("GETRANGE")
            .arg("ap")
            .arg(-5)
            .arg(-1)
            .query::<String>(con)
            .unwrap(),
        "Redis"
    );
    assert_eq!(
        redis::cmd("SETRANGE")
            .arg("pad")
            .arg(3)
            .arg("x")
            .query::<i64>(con)
            .unwrap(),
        4
    );
    assert_eq!(con.get::<_, Vec<u8>>("pad").unwrap(), b"\0\0\0x");
}

fn run_keys(con: &mut redis::Connection) {
    let _: () = redis::cmd("FLUSHDB").query(con).unwrap();
    for i in 0..50 {
        let _: () = con.set(format!("key:{i}"), i).unwrap();
    }
    let _: () = con.hset("hash", "f", "v").unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(con).unwrap(), 51);
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("key:1")
            .arg("key:1")
            .arg("nope")
            .query::<i64>(con)
            .unwrap(),
        2
    );
    assert_eq!(
        redis::cmd("TYPE")
            .arg("key:1")
            .query::<String>(con)
            .unwrap(),
        "string"
    );
    assert_eq!(
        redis::cmd("TYPE").arg("hash").query::<String>(con).unwrap(),
        "hash"
    );
    assert_eq!(
        redis::cmd("TYPE").arg("nope").query::<String>(con).unwrap(),
        "none"
    );
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("key:1*").query(con).unwrap();
    keys.sort();
    assert_eq!(keys.len(), 11);
    // SCAN visits every key exactly as a set.
    let mut cursor = 0u64;
    let mut seen = std::collections::HashSet::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(7)
            .query(con)
            .unwrap();
        seen.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(seen.len(), 51);
    let (_, hashes): (u64, Vec<String>) = {
        let mut cursor = 0u64;
        let mut all = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("*")
                .arg("TYPE")
                .arg("hash")
                .arg("COUNT")
                .arg(1000)
                .query(con)
                .unwrap();
            all.extend(batch);
            cursor = next;
            if cursor == 0 {
                break (0, all);
            }
        }
    };
    assert_eq!(hashes, vec!["hash".to_string()]);
    // Expiry family.
    assert_eq!(
        redis::cmd("EXPIRE")
            .arg("key:1")
            .arg(100)
            .arg("XX")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("EXPIRE")
            .arg("key:1")
            .arg(100)
            .arg("NX")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("EXPIRE")
            .arg("key:1")
            .arg(50)
            .arg("GT")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("EXPIRE")
            .arg("key:1")
            .arg(50)
            .arg("LT")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("PEXPIRE")
            .arg("key:2")
            .arg(100_000)
            .query::<i64>(con)
            .unwrap(),
        1
    );
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 500) as i64;
    assert_eq!(
        redis::cmd("EXPIREAT")
            .arg("key:3")
            .arg(at)
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("EXPIRETIME")
            .arg("key:3")
            .query::<i64>(con)
            .unwrap(),
        at
    );
    assert_eq!(
        redis::cmd("PEXPIREAT")
            .arg("key:4")
            .arg(at * 1000)
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("PEXPIRETIME")
            .arg("key:4")
            .query::<i64>(con)
            .unwrap(),
        at * 1000
    );
    assert_eq!(redis::cmd("TTL").arg("nope").query::<i64>(con).unwrap(), -2);
    assert_eq!(
        redis::cmd("PERSIST")
            .arg("key:4")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("PERSIST")
            .arg("key:4")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("TTL").arg("key:4").query::<i64>(con).unwrap(),
        -1
    );
    // A past expiry deletes.
    assert_eq!(
        redis::cmd("EXPIRE")
            .arg("key:5")
            .arg(-1)
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert!(!con.exists::<_, bool>("key:5").unwrap());
    // Lazy and active expiry: a key with 1 ms TTL disappears from reads and from DBSIZE.
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(1)
        .query(con)
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let gone = con.get::<_, Option<String>>("short").unwrap().is_none();
        let size: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        if gone && size == 50 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "active expiry did not remove the key"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // RENAME / RENAMENX / RANDOMKEY / DEL / UNLINK.
    let _: () = redis::cmd("RENAME")
        .arg("key:6")
        .arg("renamed")
        .query(con)
        .unwrap();
    assert_eq!(con.get::<_, String>("renamed").unwrap(), "6");
    assert_eq!(
        redis::cmd("RENAMENX")
            .arg("renamed")
            .arg("key:7")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("RENAMENX")
            .arg("renamed")
            .arg("fresh")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    let random: Option<String> = redis::cmd("RANDOMKEY").query(con).unwrap();
    assert!(random.is_some());
    assert_eq!(
        redis::cmd("DEL")
            .arg("fresh")
            .arg("key:7")
            .arg("nope")
            .query::<i64>(con)
            .unwrap(),
        2
    );
    assert_eq!(
        redis::cmd("UNLINK").arg("key:8").query::<i64>(con).unwrap(),
        1
    );
    // SELECT isolates databases.
    let _: () = redis::cmd("SELECT").arg(3).query(con).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(con).unwrap(), 0);
    assert_eq!(
        redis::cmd("RANDOMKEY")
            .query::<Option<String>>(con)
            .unwrap(),
        None
    );
    let _: () = con.set("key:1", "other").unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(con).unwrap();
    assert_eq!(con.get::<_, String>("key:1").unwrap(), "1");
    let _: () = redis::cmd("FLUSHALL").query(con).unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(con).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(con).unwrap(), 0);
    let _: () = redis::cmd("SELECT").arg(0).query(con).unwrap();
}

fn run_hashes(con: &mut redis::Connection, resp3: bool) {
    let _: () = redis::cmd("FLUSHDB").query(con).unwrap();
    assert_eq!(
        redis::cmd("HSET")
            .arg("h")
            .arg("a")
            .arg("1")
            .arg("b")
            .arg("2")
            .query::<i64>(con)
            .unwrap(),
        2
    );
    assert_eq!(
        redis::cmd("HSET")
            .arg("h")
            .arg("a")
            .arg("9")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    let _: () = redis::cmd("HMSET")
        .arg("h")
        .arg("c")
        .arg("3")
        .query(con)
        .unwrap();
    assert_eq!(
        redis::cmd("HGET")
            .arg("h")
            .arg("a")
            .query::<String>(con)
            .unwrap(),
        "9"
    );
    assert_eq!(
        redis::cmd("HGET")
            .arg("h")
            .arg("zz")
            .query::<Option<String>>(con)
            .unwrap(),
        None
    );
    let got: Vec<Option<String>> = redis::cmd("HMGET")
        .arg("h")
        .arg("a")
        .arg("zz")
        .arg("c")
        .query(con)
        .unwrap();
    assert_eq!(got, vec![Some("9".into()), None, Some("3".into())]);
    let all: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg("h").query(con).unwrap();
    assert_eq!(all.len(), 3);
    let raw: Value = redis::cmd("HGETALL").arg("h").query(con).unwrap();
    if resp3 {
        assert!(matches!(raw, Value::Map(_)), "{raw:?}");
    } else {
        assert!(
            matches!(raw, Value::Array(ref a) if a.len() == 6),
            "{raw:?}"
        );
    }
    assert_eq!(
        redis::cmd("HEXISTS")
            .arg("h")
            .arg("b")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(redis::cmd("HLEN").arg("h").query::<i64>(con).unwrap(), 3);
    assert_eq!(
        redis::cmd("HINCRBY")
            .arg("h")
            .arg("b")
            .arg(5)
            .query::<i64>(con)
            .unwrap(),
        7
    );
    assert_eq!(
        redis::cmd("HKEYS")
            .arg("h")
            .query::<Vec<String>>(con)
            .unwrap(),
        vec!["a", "b", "c"]
    );
    assert_eq!(
        redis::cmd("HVALS")
            .arg("h")
            .query::<Vec<String>>(con)
            .unwrap(),
        vec!["9", "7", "3"]
    );
    assert_eq!(
        redis::cmd("HSETNX")
            .arg("h")
            .arg("a")
            .arg("x")
            .query::<i64>(con)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("HSETNX")
            .arg("h")
            .arg("d")
            .arg("four")
            .query::<i64>(con)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("HSTRLEN")
            .arg("h")
            .arg("d")
            .query::<i64>(con)
            .unwrap(),
        4
    );
    assert_eq!(
        redis::cmd("HDEL")
            .arg("h")
            .arg("a")
            .arg("b")
            .arg("zz")
            .query::<i64>(con)
            .unwrap(),
        2
    );
    assert_eq!(
        redis::cmd("HDEL")
            .arg("h")
            .arg("c")
            .arg("d")
            .query::<i64>(con)
            .unwrap(),
        2
    );
    assert!(
        !con.exists::<_, bool>("h").unwrap(),
        "an emptied hash is deleted"
    );
}

fn run_server(con: &mut redis::Connection, resp3: bool) {
    let pong: String = redis::cmd("PING").query(con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        redis::cmd("PING").arg("hi").query::<String>(con).unwrap(),
        "hi"
    );
    assert_eq!(
        redis::cmd("ECHO").arg("x").query::<String>(con).unwrap(),
        "x"
    );
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(con).unwrap();
    assert!(id > 0);
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("tester")
        .query(con)
        .unwrap();
    assert_eq!(
        redis::cmd("CLIENT")
            .arg("GETNAME")
            .query::<String>(con)
            .unwrap(),
        "tester"
    );
    let _: () = redis::cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-NAME")
        .arg("mine")
        .query(con)
        .unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    assert!(
        list.contains("name=tester") && list.contains("lib-name=mine"),
        "{list}"
    );
    let info: String = redis::cmd("CLIENT").arg("INFO").query(con).unwrap();
    assert!(info.contains(&format!("id={id} ")), "{info}");
    let info: String = redis::cmd("INFO").query(con).unwrap();
    for section in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Keyspace",
    ] {
        assert!(info.contains(section), "{section} missing");
    }
    let persistence: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
    assert!(
        persistence.contains("durability:everysec")
            && persistence.contains("durability_guarantee:")
    );
    for mode in ["none", "checkpoint", "everysec", "always"] {
        assert!(
            persistence.contains(&format!("durability_mode_{mode}:")),
            "{mode} statement missing"
        );
    }
    let config: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("max*")
        .query(con)
        .unwrap();
    assert_eq!(config.get("maxmemory").map(String::as_str), Some("0"));
    assert!(config.contains_key("maxclients"));
    let all: std::collections::HashMap<String, String> =
        redis::cmd("CONFIG").arg("GET").arg("*").query(con).unwrap();
    assert!(all.len() > 10 && all["appendfsync"] == "everysec");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg("500")
        .query(con)
        .unwrap();
    let config: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxclients")
        .query(con)
        .unwrap();
    assert_eq!(config["maxclients"], "500");
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
    let count: i64 = redis::cmd("COMMAND").arg("COUNT").query(con).unwrap();
    assert!(count > 70);
    let list: Vec<String> = redis::cmd("COMMAND").arg("LIST").query(con).unwrap();
    assert_eq!(list.len() as i64, count);
    let info: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("get")
        .arg("nosuch")
        .query(con)
        .unwrap();
    match info {
        Value::Array(items) => {
            assert_eq!(items.len(), 2);
            assert!(matches!(items[1], Value::Nil));
        }
        other => panic!("{other:?}"),
    }
    let docs: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("set")
        .query(con)
        .unwrap();
    assert!(!matches!(docs, Value::Nil));
    let _: Value = redis::cmd("COMMAND").query(con).unwrap();
    let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(con).unwrap();
    let time: Vec<String> = redis::cmd("TIME").query(con).unwrap();
    assert_eq!(time.len(), 2);
    // Persistence commands.
    let _: () = con.set("durable", "yes").unwrap();
    let point: Vec<i64> = redis::cmd("PREFIXKV.COMMITPOINT").query(con).unwrap();
    assert!(point[0] >= 1 && point[1] <= point[0]);
    let waited: Vec<i64> = redis::cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(0)
        .query(con)
        .unwrap();
    assert_eq!(waited, vec![1, 0]);
    let point: Vec<i64> = redis::cmd("PREFIXKV.COMMITPOINT").query(con).unwrap();
    assert_eq!(point[0], point[1], "after WAITAOF every write is durable");
    let _: () = redis::cmd("SAVE").query(con).unwrap();
    let last: i64 = redis::cmd("LASTSAVE").query(con).unwrap();
    assert!(last > 1_600_000_000);
    // The periodic checkpoint may be running (the writes above trigger it): BGSAVE then answers
    // as Redis does while a save runs; try again, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match redis::cmd("BGSAVE").query::<String>(con) {
            Ok(text) => {
                assert_eq!(text, "Background saving started");
                break;
            }
            Err(error) if error.to_string().contains("already in progress") => {
                assert!(std::time::Instant::now() < deadline, "BGSAVE never started");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(error) => panic!("BGSAVE: {error}"),
        }
    }
    // Wait (bounded) for the background checkpoint to finish, then BGREWRITEAOF.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match redis::cmd("BGREWRITEAOF").query::<String>(con) {
            Ok(text) => {
                assert_eq!(text, "Background append only file rewriting started");
                break;
            }
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(error) => panic!("{error}"),
        }
    }
    // The rewrite runs in the background too; wait (bounded) until it ends, so the next
    // protocol's BGSAVE does not meet it still running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
        if info.contains("rdb_bgsave_in_progress:0") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the background rewrite did not end within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = resp3;
}

#[test]
fn every_command_in_resp2_and_resp3() {
    let (_dir, server) = start();
    for resp3 in [false, true] {
        let mut con = server.connect(resp3);
        run_strings(&mut con);
        run_keys(&mut con);
        run_hashes(&mut con, resp3);
        run_server(&mut con, resp3);
    }
}

#[test]
fn hello_switches_protocol_and_returns_a_map() {
    let (_dir, server) = start();
    let mut raw = server.raw();
    match raw.call(&["HELLO", "3", "SETNAME", "me"]) {
        Reply::Map(pairs) => {
            assert!(pairs
                .iter()
                .any(|(k, v)| *k == Reply::bulk("proto") && *v == Reply::Integer(3)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(raw.call(&["GET", "missing"]), Reply::Null);
    assert_eq!(raw.call(&["CLIENT", "GETNAME"]), Reply::bulk("me"));
    match raw.call(&["HELLO", "2"]) {
        Reply::Array(items) => assert_eq!(items.len(), 14),
        other => panic!("{other:?}"),
    }
    assert_eq!(raw.call(&["GET", "missing"]), Reply::NullBulkString);
    assert_eq!(
        raw.error(&["HELLO", "4"]),
        "NOPROTO unsupported protocol version"
    );
    assert_eq!(raw.call(&["RESET"]), Reply::SimpleString("RESET".into()));
    assert_eq!(raw.call(&["CLIENT", "GETNAME"]), Reply::NullBulkString);
}

#[test]
fn error_lines_match_redis() {
    let (_dir, server) = start();
    let mut raw = server.raw();
    assert_eq!(
        raw.error(&["NOSUCH", "a", "b"]),
        "ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' "
    );
    assert_eq!(
        raw.error(&["GET"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        raw.error(&["SET", "k", "v", "NX", "XX"]),
        "ERR syntax error"
    );
    assert_eq!(
        raw.error(&["SET", "k", "v", "EX", "0"]),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        raw.error(&["SET", "k", "v", "EX", "x"]),
        "ERR value is not an integer or out of range"
    );
    raw.call(&["SET", "k", "v"]);
    assert_eq!(
        raw.error(&["INCR", "k"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        raw.error(&["INCRBYFLOAT", "k", "1"]),
        "ERR value is not a valid float"
    );
    raw.call(&["SET", "big", "9223372036854775807"]);
    assert_eq!(
        raw.error(&["INCR", "big"]),
        "ERR increment or decrement would overflow"
    );
    raw.call(&["HSET", "h", "f", "v"]);
    assert_eq!(
        raw.error(&["GET", "h"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(
        raw.error(&["HGET", "k", "f"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(
        raw.error(&["HINCRBY", "h", "f", "1"]),
        "ERR hash value is not an integer"
    );
    assert_eq!(raw.error(&["SELECT", "16"]), "ERR DB index is out of range");
    assert_eq!(raw.error(&["RENAME", "nope", "x"]), "ERR no such key");
    assert_eq!(
        raw.error(&["SETRANGE", "k", "-1", "x"]),
        "ERR offset is out of range"
    );
    assert_eq!(
        raw.error(&["EXPIRE", "k", "10", "NX", "XX"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        raw.error(&["EXPIRE", "k", "10", "GT", "LT"]),
        "ERR GT and LT options at the same time are not compatible"
    );
    assert_eq!(raw.error(&["SCAN", "abc"]), "ERR invalid cursor");
    assert_eq!(
        raw.error(&["CLIENT", "NOPE"]),
        "ERR unknown subcommand 'NOPE'. Try CLIENT HELP."
    );
    assert_eq!(
        raw.error(&["CONFIG", "SET", "nope", "1"]),
        "ERR Unknown option or number of arguments for CONFIG SET - 'nope'"
    );
    assert!(raw
        .error(&["CONFIG", "SET", "appendfsync", "always"])
        .starts_with("ERR CONFIG SET failed"));
    assert_eq!(raw.error(&["AUTH", "x"]), "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    assert_eq!(
        raw.error(&["MSET", "a"]),
        "ERR wrong number of arguments for 'mset' command"
    );
    // The connection still works after errors; QUIT closes it after +OK.
    assert_eq!(raw.call(&["PING"]), Reply::SimpleString("PONG".into()));
    assert_eq!(raw.call(&["QUIT"]), Reply::SimpleString("OK".into()));
    assert!(raw.read().is_none());
}

#[test]
fn pipelined_requests_run_in_order() {
    let (_dir, server) = start();
    let mut con = server.connect(false);
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("INCR").arg("counter");
        pipe.cmd("SET").arg(format!("p:{i}")).arg(i).ignore();
    }
    let counts: Vec<i64> = pipe.query(&mut con).unwrap();
    assert_eq!(counts, (1..=1000).collect::<Vec<i64>>());
    // Raw pipeline written in one go, including an inline command.
    let mut raw = server.raw();
    use std::io::Write;
    raw.stream
        .write_all(
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\nGET x\r\n*2\r\n$4\r\nINCR\r\n$1\r\nx\r\n",
        )
        .unwrap();
    assert_eq!(raw.read(), Some(Reply::SimpleString("OK".into())));
    assert_eq!(raw.read(), Some(Reply::bulk("1")));
    assert_eq!(raw.read(), Some(Reply::Integer(2)));
}
