//! Crash tests for streams and consumer groups.
//!
//! - SIGKILL during XADD / XREADGROUP / XACK traffic (`checkpoint` mode: recovery keeps a prefix
//!   of each connection's writes): after the restart each writer's stream and its group's
//!   pending list, and a string key it sets between them, must be exactly the state after some
//!   prefix of the commands that writer sent (so the stream is a prefix of what was
//!   acknowledged, plus at most the command in flight), and every pending entry exists in the
//!   recovered stream.
//! - An empty stream, a group with nothing pending and a consumer with nothing pending survive a
//!   restart, and objects created after it never share their ids (their records would collide).
//!
//! `CRASH_WRITERS` (default 3) scales the first test.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Raw, Server};
use prefixkv_resp::Reply;
use prefixkv_testkit::env_count;

/// One writer's model: entry numbers (id `<n>-1`), the group's delivered mark, pending numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    entries: Vec<u64>,
    delivered: usize,
    pending: BTreeSet<u64>,
    /// The writer's string key (`SET w{w}:last n`): the prefix holds across types.
    last: Option<u64>,
}

/// A writer's command.
#[derive(Clone, Debug)]
enum Op {
    Add(u64),
    /// XREADGROUP ... COUNT 2 ... >
    Read,
    /// XACK of these numbers.
    Ack(Vec<u64>),
    /// SET of the writer's string key.
    Set(u64),
}

impl State {
    /// Applies `op`; the numbers a Read delivers.
    fn apply(&mut self, op: &Op) -> Vec<u64> {
        match op {
            Op::Add(n) => {
                self.entries.push(*n);
                Vec::new()
            }
            Op::Read => {
                let end = (self.delivered + 2).min(self.entries.len());
                let got = self.entries[self.delivered..end].to_vec();
                self.delivered = end;
                self.pending.extend(&got);
                got
            }
            Op::Ack(ids) => {
                for n in ids {
                    self.pending.remove(n);
                }
                Vec::new()
            }
            Op::Set(n) => {
                self.last = Some(*n);
                Vec::new()
            }
        }
    }
}

fn id(n: u64) -> String {
    format!("{n}-1")
}

fn number(reply: &Reply) -> u64 {
    match reply {
        Reply::BulkString(b) => {
            let text = std::str::from_utf8(b).unwrap();
            text.strip_suffix("-1").unwrap().parse().unwrap()
        }
        other => panic!("expected an id, got {other:?}"),
    }
}

/// The ids of `[[id, fields], ...]` (or of XPENDING rows `[id, consumer, idle, count]`).
fn ids(reply: &Reply) -> Vec<u64> {
    let Reply::Array(items) = reply else {
        panic!("expected an array, got {reply:?}")
    };
    items
        .iter()
        .map(|item| match item {
            Reply::Array(cells) => number(&cells[0]),
            other => panic!("expected a row, got {other:?}"),
        })
        .collect()
}

/// What a writer sent: its ops in order, and how many got their reply.
struct Log {
    ops: Vec<Op>,
    acknowledged: usize,
}

/// Runs writer `w` until its connection fails (the kill): XADD mostly, XREADGROUP and XACK
/// now and then, each reply checked against the model.
fn writer(port: u16, w: u64, progress: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> Log {
    let key = format!("w{w}");
    let mut raw = Raw::connect(port).unwrap();
    raw.stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut log = Log {
        ops: Vec::new(),
        acknowledged: 0,
    };
    let mut state = State::default();
    let mut next = 1;
    let mut step = 0u64;
    while !stop.load(Ordering::Relaxed) {
        step += 1;
        let op = match step % 7 {
            3 | 6 => Op::Read,
            4 => Op::Set(step),
            5 if !state.pending.is_empty() => {
                Op::Ack(state.pending.iter().take(2).copied().collect())
            }
            _ => {
                next += 1 + step % 3;
                Op::Add(next)
            }
        };
        let args: Vec<String> = match &op {
            Op::Add(n) => vec![
                "XADD".into(),
                key.clone(),
                id(*n),
                "f".into(),
                n.to_string(),
            ],
            Op::Read => [
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "COUNT",
                "2",
                "STREAMS",
                &key,
                ">",
            ]
            .map(String::from)
            .to_vec(),
            Op::Ack(ns) => {
                let mut args = vec!["XACK".to_string(), key.clone(), "g".into()];
                args.extend(ns.iter().map(|n| id(*n)));
                args
            }
            Op::Set(n) => vec!["SET".into(), format!("{key}:last"), n.to_string()],
        };
        log.ops.push(op.clone());
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        raw.send(&refs);
        let Some(reply) = raw.read() else {
            return log;
        };
        let delivered = state.apply(&op);
        match &op {
            Op::Add(n) => assert_eq!(number(&reply), *n),
            Op::Read if delivered.is_empty() => assert_eq!(reply, Reply::NullArray),
            Op::Read => {
                let Reply::Array(streams) = &reply else {
                    panic!("{reply:?}")
                };
                let Reply::Array(pair) = &streams[0] else {
                    panic!("{reply:?}")
                };
                assert_eq!(ids(&pair[1]), delivered);
            }
            Op::Ack(ns) => assert_eq!(reply, Reply::Integer(ns.len() as i64)),
            Op::Set(_) => assert_eq!(reply, Reply::simple("OK")),
        }
        log.acknowledged += 1;
        progress.fetch_add(1, Ordering::Relaxed);
    }
    log
}

#[test]
fn a_kill_under_stream_traffic_recovers_a_prefix_with_its_pending_entries() {
    let writers = env_count("CRASH_WRITERS", 3);
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        "checkpoint",
        "--checkpoint-interval",
        "50",
        "--engine-memory",
        "64mb",
    ];
    let mut server = Server::start(dir.path(), &flags);
    let mut setup = server.raw();
    for w in 0..writers {
        let reply = setup.call(&["XGROUP", "CREATE", &format!("w{w}"), "g", "0", "MKSTREAM"]);
        assert_eq!(reply, Reply::simple("OK"));
    }
    // The groups must be in a checkpoint before the kill (checkpoint mode keeps what one holds).
    assert_eq!(setup.call(&["SAVE"]), Reply::simple("OK"));
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Vec<Arc<AtomicU64>> = (0..writers).map(|_| Arc::default()).collect();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (port, done, stop) = (server.port, progress[w as usize].clone(), stop.clone());
            std::thread::spawn(move || writer(port, w, done, stop))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while progress.iter().any(|p| p.load(Ordering::Relaxed) < 600) {
        assert!(Instant::now() < deadline, "the writers made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Two more checkpoints taken under the traffic, so recovery has some of it to keep.
    let done: u64 = setup
        .info_field("persistence", "checkpoints_completed")
        .parse()
        .unwrap();
    server.wait_for_checkpoints(done + 2);
    server.kill();
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<Log> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let restarted = Server::start(dir.path(), &flags);
    let mut raw = restarted.raw();
    for (w, log) in logs.iter().enumerate() {
        let key = format!("w{w}");
        let entries = ids(&raw.call(&["XRANGE", &key, "-", "+"]));
        let pending = ids(&raw.call(&["XPENDING", &key, "g", "-", "+", "1000000"]));
        let last = match raw.call(&["GET", &format!("{key}:last")]) {
            Reply::BulkString(b) => Some(std::str::from_utf8(&b).unwrap().parse().unwrap()),
            _ => None,
        };
        let recovered = State {
            entries: entries.clone(),
            delivered: 0,
            pending: pending.iter().copied().collect(),
            last,
        };
        for n in &pending {
            assert!(
                entries.contains(n),
                "writer {w}: pending {n} is not in the stream"
            );
        }
        // The state after some prefix of what the writer sent (acknowledged, or one more).
        let mut state = State::default();
        let mut matched = None;
        for prefix in 0..=log.ops.len() {
            if prefix > 0 {
                state.apply(&log.ops[prefix - 1]);
            }
            if state.entries == recovered.entries
                && state.pending == recovered.pending
                && state.last == recovered.last
            {
                matched = Some(prefix);
            }
        }
        let prefix = matched.unwrap_or_else(|| {
            panic!(
                "writer {w}: recovered {} entries and {} pending entries, the state of no prefix \
                 of its {} commands",
                entries.len(),
                pending.len(),
                log.ops.len()
            )
        });
        eprintln!(
            "writer {w}: {} commands acknowledged, recovered the state after {prefix} ({} entries, {} pending)",
            log.acknowledged,
            entries.len(),
            pending.len()
        );
        assert!(prefix > 0, "writer {w}: recovered nothing of its traffic");
    }
}

#[test]
fn empty_streams_groups_and_consumers_keep_their_ids_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--appendfsync", "always", "--engine-memory", "64mb"];
    let mut server = Server::start(dir.path(), &flags);
    let mut raw = server.raw();
    raw.call(&["XGROUP", "CREATE", "old", "g", "$", "MKSTREAM"]);
    assert_eq!(
        raw.call(&["XGROUP", "CREATECONSUMER", "old", "g", "c"]),
        Reply::Integer(1)
    );
    server.kill();
    server = Server::start(dir.path(), &flags);
    let mut raw = server.raw();
    // New objects after the restart, each with records of its own.
    for k in 0..20 {
        let key = format!("new{k}");
        // One entry: its tree's node 1 is live (a second write would have moved it).
        raw.call(&["XADD", &key, "1-1", "k", &key]);
        raw.call(&["XGROUP", "CREATE", &key, "g", "0"]);
        raw.call(&["XREADGROUP", "GROUP", "g", "x", "STREAMS", &key, ">"]);
    }
    // The old, empty structures get records now.
    raw.call(&["XADD", "old", "1-1", "f", "v"]);
    let reply = raw.call(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "old", ">"]);
    assert_eq!(
        ids(&match reply {
            Reply::Array(mut s) => match s.remove(0) {
                Reply::Array(mut pair) => pair.remove(1),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }),
        [1]
    );
    for k in 0..20 {
        let key = format!("new{k}");
        assert_eq!(ids(&raw.call(&["XRANGE", &key, "-", "+"])), [1], "{key}");
        assert_eq!(
            ids(&raw.call(&["XPENDING", &key, "g", "-", "+", "10", "x"])),
            [1]
        );
    }
    assert_eq!(
        ids(&raw.call(&["XPENDING", "old", "g", "-", "+", "10", "c"])),
        [1]
    );
}
