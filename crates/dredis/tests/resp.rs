//! Plain RESP on the proxy port: a raw RESP client (and `redis-cli`) talk to a proxy without any
//! D-Redis library; each connection is a DPR session the proxy keeps. Commands work (pipelined,
//! inline), `PREFIXKV.COMMITPOINT` advances, and after a `redis-server` is SIGKILLed the
//! connection's next command gets the `-ROLLBACK` error naming a surviving prefix that contains
//! everything the connection was told was committed; the data agrees with it; and the connection
//! continues on the new world-line.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_resp::Reply;

/// A plain RESP connection that counts the sequence numbers the proxy gives its commands.
struct Plain {
    connection: RedisConnection,
    /// Key written by each sequence number (None: not a SET of ours).
    writes: BTreeMap<u64, Option<String>>,
    next_sequence: u64,
}

/// `PREFIXKV.COMMITPOINT`'s reply as a map.
#[derive(Debug)]
struct Point {
    until_sequence: i64,
    world_line: i64,
    last_sequence: i64,
    all_committed: bool,
    excluded: usize,
}

impl Plain {
    fn connect(address: SocketAddr) -> Self {
        Self {
            connection: RedisConnection::connect(address, Duration::from_secs(30)).unwrap(),
            writes: BTreeMap::new(),
            next_sequence: 0,
        }
    }

    fn set(&mut self, key: &str) -> Reply {
        let reply = self
            .connection
            .command(&[b"SET", key.as_bytes(), format!("v-{key}").as_bytes()])
            .unwrap();
        self.writes
            .insert(self.next_sequence, Some(key.to_string()));
        self.next_sequence += 1;
        reply
    }

    fn get(&mut self, key: &str) -> Reply {
        let reply = self.connection.command(&[b"GET", key.as_bytes()]).unwrap();
        self.writes.insert(self.next_sequence, None);
        self.next_sequence += 1;
        reply
    }

    fn commit_point(&mut self) -> Point {
        let reply = self.connection.command(&[b"PREFIXKV.COMMITPOINT"]).unwrap();
        let Reply::Array(items) = reply else {
            panic!("PREFIXKV.COMMITPOINT replied {reply:?}")
        };
        let mut fields = BTreeMap::new();
        for pair in items.chunks(2) {
            let Reply::BulkString(name) = &pair[0] else {
                panic!("field name {:?}", pair[0])
            };
            fields.insert(String::from_utf8_lossy(name).into_owned(), pair[1].clone());
        }
        let integer = |name: &str| match fields.get(name) {
            Some(Reply::Integer(value)) => *value,
            other => panic!("{name}: {other:?}"),
        };
        let excluded = match fields.get("excluded") {
            Some(Reply::Array(ranges)) => ranges.len(),
            other => panic!("excluded: {other:?}"),
        };
        Point {
            until_sequence: integer("until_sequence"),
            world_line: integer("world_line"),
            last_sequence: integer("last_sequence"),
            all_committed: integer("all_committed") == 1,
            excluded,
        }
    }

    fn wait_all_committed(&mut self) -> Point {
        let deadline = Instant::now() + WAIT;
        loop {
            let point = self.commit_point();
            if point.all_committed {
                return point;
            }
            assert!(Instant::now() < deadline, "not all committed: {point:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Parses `commands up to sequence S survived` (Some(S)) / `no command survived` (None) and the
/// uncertain sequence numbers out of a `-ROLLBACK` line.
fn parse_rollback(line: &str) -> (Option<u64>, Vec<u64>) {
    assert!(line.starts_with("ROLLBACK world-line "), "{line}");
    let survived = line
        .split_once("commands up to sequence ")
        .map(|(_, rest)| rest.split(' ').next().unwrap().parse().unwrap());
    if survived.is_none() {
        assert!(line.contains("no command survived"), "{line}");
    }
    let mut uncertain = Vec::new();
    for marker in ["(sequences ", "(sequence "] {
        // Only the list after "may or may not have survived" (the request's own note repeats it).
        if let Some((_, rest)) = line
            .split_once("may or may not have survived ")
            .and_then(|(_, rest)| rest.split_once(marker))
        {
            let list = rest.split(')').next().unwrap();
            for item in list.split(", ") {
                match item.split_once("..") {
                    Some((a, b)) => {
                        uncertain.extend(a.parse::<u64>().unwrap()..=b.parse().unwrap())
                    }
                    None => uncertain.push(item.parse().unwrap()),
                }
            }
        }
    }
    (survived, uncertain)
}

#[test]
fn plain_resp_connections_are_dpr_sessions() {
    let (_directory, cluster) = start_cluster(2);
    let proxies = cluster.proxy_addresses();
    let mut plain = Plain::connect(proxies[0]);
    let mut other = Plain::connect(proxies[1]);

    // Inline commands work (forwarded, so they are sequence 0).
    plain.connection.send_raw(b"PING\r\n").unwrap();
    assert_eq!(
        plain.connection.read_reply().unwrap(),
        Reply::simple("PONG")
    );
    plain.writes.insert(0, None);
    plain.next_sequence = 1;
    let first = plain.commit_point();
    assert_eq!(first.last_sequence, 0);

    // A pipelined run: one write, 100 SETs, 100 replies in order.
    let mut pipeline = Vec::new();
    for i in 0..100 {
        let key = format!("a{i}");
        prefixkv_dprnet::connection::encode_command(
            &mut pipeline,
            &[b"SET", key.as_bytes(), format!("v-{key}").as_bytes()],
        );
        plain.writes.insert(plain.next_sequence, Some(key));
        plain.next_sequence += 1;
    }
    plain.connection.send_raw(&pipeline).unwrap();
    for _ in 0..100 {
        assert_eq!(plain.connection.read_reply().unwrap(), Reply::simple("OK"));
    }
    assert_eq!(plain.get("a7"), Reply::bulk("v-a7"));
    let point = plain.wait_all_committed();
    assert_eq!(point.until_sequence, 102);
    assert_eq!(point.last_sequence, 101);
    assert_eq!(point.excluded, 0);

    // Refused and local commands.
    match plain.connection.command(&[b"SELECT", b"1"]).unwrap() {
        Reply::Error(text) => assert!(text.starts_with(b"ERR D-Redis: SELECT")),
        other => panic!("SELECT replied {other:?}"),
    }
    // Bounded: a bulk length above the limit is refused before anything is sized from it.
    {
        let mut hostile = RedisConnection::connect(proxies[0], Duration::from_secs(5)).unwrap();
        hostile
            .send_raw(b"*2\r\n$3\r\nGET\r\n$999999999999\r\n")
            .unwrap();
        assert_eq!(
            hostile.read_reply().unwrap(),
            Reply::error("ERR Protocol error: invalid bulk length")
        );
    }

    // More writes on both connections; the last ones are probably not committed yet.
    for i in 0..200 {
        assert_eq!(plain.set(&format!("b{i}")), Reply::simple("OK"));
        assert_eq!(other.set(&format!("c{i}")), Reply::simple("OK"));
    }
    let acknowledged = [plain.commit_point(), other.commit_point()];
    let world_line = acknowledged[0].world_line;

    let pid = cluster.redis_pids()[0].expect("redis running");
    kill(pid);

    // Shard 0's connection asks at once (its command may be cut off by the failure, or find the
    // rollback done); shard 1's once every shard restored (before that, a command there still
    // runs on the old world-line, and is then reported lost).
    for (index, (connection, told)) in [
        (&mut plain, &acknowledged[0]),
        (&mut other, &acknowledged[1]),
    ]
    .into_iter()
    .enumerate()
    {
        if index == 1 {
            wait_until("every shard on the new world-line", || {
                let state = cluster.cluster_state().unwrap();
                state.world_line as i64 > world_line
                    && cluster
                        .proxy_world_lines()
                        .iter()
                        .all(|&w| w == state.world_line)
            });
        }
        let reply = connection.connection.command(&[b"GET", b"a0"]).unwrap();
        let Reply::Error(line) = reply else {
            panic!("the first command after the failure replied {reply:?}")
        };
        let line = String::from_utf8_lossy(&line).into_owned();
        eprintln!("{line}");
        let (survived, uncertain) = parse_rollback(&line);
        // Everything the connection was told was committed survived.
        let survived_until = survived.map_or(0, |s| s as i64 + 1);
        assert!(
            survived_until >= told.until_sequence,
            "committed until {} but only {survived_until} survived: {line}",
            told.until_sequence
        );
        // Resynchronise the sequence numbers (the failed GET may or may not have one).
        let point = connection.commit_point();
        assert!(point.world_line > world_line, "{point:?}");
        connection.next_sequence = (point.last_sequence + 1) as u64;
        // The data is exactly the surviving prefix: earlier SETs present, later ones gone.
        let writes: Vec<(u64, String)> = connection
            .writes
            .iter()
            .filter_map(|(&s, k)| k.clone().map(|k| (s, k)))
            .collect();
        let (mut present, mut absent) = (0, 0);
        for (sequence, key) in writes {
            if uncertain.contains(&sequence) {
                continue;
            }
            let value = connection.get(&key);
            if (sequence as i64) < survived_until {
                assert_eq!(
                    value,
                    Reply::bulk(format!("v-{key}")),
                    "{key} (sequence {sequence})"
                );
                present += 1;
            } else {
                assert!(
                    matches!(value, Reply::NullBulkString | Reply::Null),
                    "{key} (sequence {sequence}) should be lost: {value:?}"
                );
                absent += 1;
            }
        }
        eprintln!(
            "{present} writes survived, {absent} lost, {} uncertain",
            uncertain.len()
        );
        // The connection continues on the new world-line.
        assert_eq!(connection.set("after"), Reply::simple("OK"));
        let point = connection.wait_all_committed();
        assert!(point.world_line > world_line);
    }
    cluster.shutdown();
}

#[test]
fn redis_cli_talks_to_a_proxy() {
    let (_directory, cluster) = start_cluster(1);
    let port = cluster.proxy_addresses()[0].port().to_string();
    let cli = |args: &[&str]| {
        let output = std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .expect("redis-cli (install redis-tools)");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(cli(&["SET", "k", "v"]).trim(), "OK");
    assert_eq!(cli(&["GET", "k"]).trim(), "v");
    let point = cli(&["PREFIXKV.COMMITPOINT"]);
    assert!(point.starts_with("until_sequence\n"), "{point}");
    assert!(point.contains("world_line\n"), "{point}");
    cluster.shutdown();
}
