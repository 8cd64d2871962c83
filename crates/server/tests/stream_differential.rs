//! Differential test of the stream commands: the same seeded command sequences against a real
//! `redis-server` and prefixkv-server, every reply compared exactly after normalizing what is
//! timing-dependent (idle times, seen and delivery times, which are wall-clock readings) and what
//! describes Redis's internal layout (`radix-tree-keys`, `radix-tree-nodes`).
//!
//! Ids are given explicitly (`<ms>-<seq>` and `<ms>-*` from a clock that moves with the steps),
//! so both servers assign the same ids. Idle thresholds are 0 (everything qualifies) or an hour
//! (only entries whose delivery time XCLAIM TIME set to the 1970s qualify), so which entries a
//! claim takes does not depend on how fast the run goes. `~` trimming is left out: Redis trims
//! whole listpack nodes and prefixkv exactly (a documented difference).
//!
//! The sequences run in RESP2, then (half as many seeds) in RESP3. `DIFFERENTIAL_SEEDS` (default
//! 4) and `DIFFERENTIAL_STEPS` (default 1,500) raise the count.

mod common;

use common::{
    assert_same_notifications, notification_subscriber, notifications_of_batch, Raw, Server,
};
use prefixkv_resp::Reply;
use prefixkv_testkit::rng::{env_count, Rng};

const KEYS: &[&str] = &["s1", "s2", "{s}3", "str"];
const GROUPS: &[&str] = &["g1", "g2", "nog"];
const CONSUMERS: &[&str] = &["alice", "bob", "carol"];

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

/// Generates commands; `clock` is the millisecond part new ids use, moved on as steps go.
struct Generator {
    rng: Rng,
    clock: u64,
}

impl Generator {
    /// An id near the clock (often an existing one, sometimes past the end, sometimes bad).
    fn id(&mut self) -> String {
        match self.rng.below(12) {
            0 => "0".into(),
            1 => "bad-id".into(),
            2 => format!("{}", self.clock.saturating_sub(self.rng.below(8))),
            _ => format!(
                "{}-{}",
                self.clock.saturating_sub(self.rng.below(10)),
                self.rng.below(3)
            ),
        }
    }

    fn bound(&mut self, start: bool) -> String {
        match self.rng.below(6) {
            0 => if start { "-" } else { "+" }.into(),
            1 => format!("({}", self.id()),
            _ => self.id(),
        }
    }

    fn command(&mut self) -> Vec<String> {
        let s = |t: &str| t.to_string();
        let rng = &mut self.rng;
        let key = s(pick(rng, KEYS));
        let group = s(pick(rng, GROUPS));
        let consumer = s(pick(rng, CONSUMERS));
        let count = s(pick(rng, &["1", "2", "5", "0", "-1", "x"]));
        let idle = s(pick(rng, &["0", "3600000"]));
        match self.rng.below(30) {
            0..=5 => {
                self.clock += self.rng.below(3);
                let mut args = vec![s("XADD"), key];
                if self.rng.chance(1, 8) {
                    args.push(s("NOMKSTREAM"));
                }
                if self.rng.chance(1, 5) {
                    if self.rng.chance(1, 2) {
                        args.extend([s("MAXLEN"), s(pick(&mut self.rng, &["=", "5", "3"]))]);
                        if args.last().unwrap() == "=" {
                            args.push(s("4"));
                        }
                    } else {
                        let min = format!("{}", self.clock.saturating_sub(6));
                        args.extend([s("MINID"), min]);
                    }
                }
                let id = match self.rng.below(6) {
                    0 => format!("{}-*", self.clock),
                    1 => self.id(),
                    _ => format!("{}-{}", self.clock, self.rng.below(2)),
                };
                args.push(id);
                for _ in 0..1 + self.rng.below(2) {
                    args.extend([
                        s(pick(&mut self.rng, &["f", "g", ""])),
                        s(pick(&mut self.rng, &["v", "1", "\x00x"])),
                    ]);
                }
                if self.rng.chance(1, 20) {
                    args.pop();
                }
                args
            }
            6 | 7 => {
                let name = s(pick(&mut self.rng, &["XRANGE", "XREVRANGE"]));
                let (a, b) = (self.bound(true), self.bound(false));
                let mut args = if name == "XRANGE" {
                    vec![name, key, a, b]
                } else {
                    vec![name, key, b, a]
                };
                if self.rng.chance(1, 2) {
                    args.extend([s("COUNT"), count]);
                }
                args
            }
            8 => vec![s("XLEN"), key],
            9 => {
                let mut args = vec![s("XDEL"), key];
                for _ in 0..1 + self.rng.below(2) {
                    args.push(self.id());
                }
                args
            }
            10 => {
                let mut args = vec![s("XTRIM"), key];
                if self.rng.chance(1, 2) {
                    args.extend([s("MAXLEN"), s(pick(&mut self.rng, &["0", "2", "4", "-1"]))]);
                } else {
                    args.extend([s("MINID"), self.id()]);
                }
                if self.rng.chance(1, 8) {
                    args.extend([s("LIMIT"), s("2")]);
                }
                args
            }
            11 => {
                let mut args = vec![s("XSETID"), key, format!("{}-5", self.clock)];
                if self.rng.chance(1, 3) {
                    args.extend([
                        s("ENTRIESADDED"),
                        s(pick(&mut self.rng, &["0", "100", "-1"])),
                    ]);
                }
                if self.rng.chance(1, 3) {
                    args.extend([s("MAXDELETEDID"), self.id()]);
                }
                self.clock += 1;
                args
            }
            12 => {
                let mut args = vec![s("XREAD")];
                if self.rng.chance(1, 2) {
                    args.extend([s("COUNT"), count]);
                }
                args.extend([s("STREAMS"), key, s(pick(&mut self.rng, KEYS))]);
                let (a, b) = (self.id(), self.id());
                args.extend([a, s(pick(&mut self.rng, &["$", "0", "bad"])), b][..2].to_vec());
                args
            }
            13 | 14 => {
                let sub = pick(
                    &mut self.rng,
                    &[
                        "CREATE",
                        "CREATE",
                        "SETID",
                        "DESTROY",
                        "CREATECONSUMER",
                        "DELCONSUMER",
                    ],
                );
                let mut args = vec![s("XGROUP"), s(sub), key, group];
                match sub {
                    "CREATE" | "SETID" => {
                        let id = if self.rng.chance(1, 3) {
                            s("$")
                        } else {
                            self.id()
                        };
                        args.push(id);
                        if sub == "CREATE" && self.rng.chance(1, 3) {
                            args.push(s("MKSTREAM"));
                        }
                        if self.rng.chance(1, 4) {
                            args.extend([
                                s("ENTRIESREAD"),
                                s(pick(&mut self.rng, &["0", "3", "-1", "-2"])),
                            ]);
                        }
                    }
                    "CREATECONSUMER" | "DELCONSUMER" => args.push(consumer),
                    _ => {}
                }
                args
            }
            15..=17 => {
                let mut args = vec![s("XREADGROUP"), s("GROUP"), group, consumer];
                if self.rng.chance(1, 2) {
                    args.extend([s("COUNT"), s(pick(&mut self.rng, &["1", "2", "3"]))]);
                }
                if self.rng.chance(1, 6) {
                    args.push(s("NOACK"));
                }
                args.extend([s("STREAMS"), key]);
                args.push(s(pick(&mut self.rng, &[">", ">", "0", "$"])));
                args
            }
            18 | 19 => {
                let mut args = vec![s("XACK"), key, group];
                for _ in 0..1 + self.rng.below(3) {
                    args.push(self.id());
                }
                args
            }
            20 => vec![s("XPENDING"), key, group],
            21 => {
                let mut args = vec![s("XPENDING"), key, group];
                if self.rng.chance(1, 3) {
                    args.extend([s("IDLE"), idle]);
                }
                args.extend([self.bound(true), self.bound(false), count]);
                if self.rng.chance(1, 2) {
                    args.push(consumer);
                }
                args
            }
            22 | 23 => {
                let mut args = vec![s("XCLAIM"), key, group, consumer, idle];
                for _ in 0..1 + self.rng.below(2) {
                    args.push(self.id());
                }
                for option in ["JUSTID", "FORCE", "RETRYCOUNT", "TIME", "LASTID", "IDLE"] {
                    if self.rng.chance(1, 6) {
                        args.push(s(option));
                        match option {
                            "RETRYCOUNT" => args.push(s(pick(&mut self.rng, &["3", "-1", "x"]))),
                            "TIME" => args.push(s("1000")),
                            "IDLE" => args.push(s("7200000")),
                            "LASTID" => args.push(self.id()),
                            _ => {}
                        }
                    }
                }
                args
            }
            24 => {
                let mut args = vec![
                    s("XAUTOCLAIM"),
                    key,
                    group,
                    consumer,
                    idle,
                    self.bound(true),
                ];
                if self.rng.chance(1, 2) {
                    args.extend([s("COUNT"), s(pick(&mut self.rng, &["1", "2", "10", "0"]))]);
                }
                if self.rng.chance(1, 3) {
                    args.push(s("JUSTID"));
                }
                args
            }
            25 => match self.rng.below(4) {
                0 => vec![s("XINFO"), s("STREAM"), key],
                1 => vec![s("XINFO"), s("STREAM"), key, s("FULL"), s("COUNT"), s("3")],
                2 => vec![s("XINFO"), s("GROUPS"), key],
                _ => vec![s("XINFO"), s("CONSUMERS"), key, group],
            },
            26 => vec![s(pick(&mut self.rng, &["TYPE", "EXISTS", "OBJECT"])), key]
                .into_iter()
                .flat_map(|a| {
                    if a == "OBJECT" {
                        vec![a, s("ENCODING")]
                    } else {
                        vec![a]
                    }
                })
                .collect(),
            27 => vec![
                s(pick(&mut self.rng, &["COPY", "RENAME", "DEL"])),
                key,
                s(pick(&mut self.rng, KEYS)),
            ],
            28 => vec![s("SET"), s("str"), s("x")],
            _ => vec![s("XINFO"), s("STREAM"), key, s("FULL")],
        }
    }
}

/// Zeroes what depends on the clock or on Redis's memory layout (see the module docs).
fn normalized(args: &[String], reply: Reply) -> Reply {
    fn walk(reply: Reply, pending_rows: bool) -> Reply {
        match reply {
            Reply::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut zero_next = false;
                let row =
                    pending_rows && items.len() == 4 && matches!(items[1], Reply::BulkString(_));
                for (index, item) in items.into_iter().enumerate() {
                    let item = if zero_next || (row && index == 2) {
                        Reply::Integer(0)
                    } else {
                        walk(item, pending_rows)
                    };
                    zero_next = matches!(&item, Reply::BulkString(b) if matches!(
                        &b[..],
                        b"idle" | b"seen-time" | b"radix-tree-keys" | b"radix-tree-nodes"
                    ));
                    out.push(item);
                }
                Reply::Array(out)
            }
            // RESP3 maps (XINFO, XREAD): the same keys zeroed.
            Reply::Map(pairs) => Reply::Map(
                pairs
                    .into_iter()
                    .map(|(key, value)| {
                        let zero = matches!(&key, Reply::BulkString(b) if matches!(
                            &b[..],
                            b"idle" | b"seen-time" | b"radix-tree-keys" | b"radix-tree-nodes"
                        ));
                        let value = if zero {
                            Reply::Integer(0)
                        } else {
                            walk(value, pending_rows)
                        };
                        (walk(key, pending_rows), value)
                    })
                    .collect(),
            ),
            // Delivery times of entries delivered during the run (XCLAIM TIME 1000 stays).
            Reply::Integer(n) if n > 1_000_000_000_000 => Reply::Integer(0),
            other => other,
        }
    }
    let name = args[0].to_ascii_uppercase();
    walk(reply, name == "XPENDING")
}

fn run(redis: &mut Raw, ours: &mut Raw, seed: u64, steps: u64) {
    for raw in [&mut *redis, &mut *ours] {
        assert_eq!(raw.call(&["FLUSHALL"]), Reply::simple("OK"));
    }
    let mut generator = Generator {
        rng: Rng::new(seed),
        clock: 1,
    };
    let mut history: Vec<String> = Vec::new();
    for step in 0..steps {
        let args = generator.command();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let expected = normalized(&args, redis.call(&refs));
        let got = normalized(&args, ours.call(&refs));
        history.push(args.join(" "));
        if expected != got {
            let start = history.len().saturating_sub(15);
            panic!(
                "seed {seed} step {step}: {:?}\n  redis-server: {expected:?}\n  prefixkv:     \
                 {got:?}\n  last commands:\n    {}",
                args,
                history[start..].join("\n    ")
            );
        }
    }
}

#[test]
fn stream_sequences_get_redis_replies() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    for seed in 0..env_count("DIFFERENTIAL_SEEDS", 4) {
        run(
            &mut redis_raw,
            &mut ours_raw,
            7000 + seed,
            env_count("DIFFERENTIAL_STEPS", 1_500),
        );
    }
    // RESP3 (redis-py 8's default): maps for XINFO and XREAD, nulls as `_`.
    for raw in [&mut redis_raw, &mut ours_raw] {
        assert!(matches!(raw.call(&["HELLO", "3"]), Reply::Map(_)));
    }
    for seed in 0..env_count("DIFFERENTIAL_SEEDS", 4).div_ceil(2) {
        run(
            &mut redis_raw,
            &mut ours_raw,
            7500 + seed,
            env_count("DIFFERENTIAL_STEPS", 1_500),
        );
    }
}

/// Over `maxmemory`, the commands Redis marks `denyoom` (XADD, XGROUP CREATE, CREATECONSUMER,
/// XSETID) are refused with OOM on both servers, and the ones consumers need to keep working
/// (XREADGROUP, XACK, XCLAIM, XAUTOCLAIM, XDEL, XTRIM, XGROUP SETID/DELCONSUMER/DESTROY) run.
#[test]
fn over_maxmemory_consumers_keep_working_as_in_redis() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let script: &[&[&str]] = &[
        &["XADD", "s", "1-1", "f", "v"],
        &["XADD", "s", "2-1", "f", "v"],
        &["XADD", "s", "3-1", "f", "v"],
        &["XGROUP", "CREATE", "s", "g", "0"],
        &["CONFIG", "SET", "maxmemory", "1"],
        &["XADD", "s", "4-1", "f", "v"],
        &["XGROUP", "CREATE", "s", "g2", "0"],
        &["XGROUP", "CREATECONSUMER", "s", "g", "x"],
        &["XSETID", "s", "9-9"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
        &["XACK", "s", "g", "1-1"],
        &["XCLAIM", "s", "g", "d", "0", "2-1", "JUSTID"],
        &["XAUTOCLAIM", "s", "g", "e", "0", "0", "JUSTID"],
        &["XDEL", "s", "3-1"],
        &["XTRIM", "s", "MAXLEN", "1"],
        &["XGROUP", "SETID", "s", "g", "0"],
        &["XGROUP", "DELCONSUMER", "s", "g", "c"],
        &["XGROUP", "DESTROY", "s", "g"],
        &["XLEN", "s"],
        &["CONFIG", "SET", "maxmemory", "0"],
    ];
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    let mut refused = 0;
    for args in script {
        let expected = normalized(&[args[0].to_string()], redis_raw.call(args));
        let got = normalized(&[args[0].to_string()], ours_raw.call(args));
        assert_eq!(got, expected, "{args:?}");
        if matches!(&got, Reply::Error(line) if line.starts_with(b"OOM")) {
            refused += 1;
        }
    }
    assert_eq!(
        refused, 4,
        "XADD, XGROUP CREATE and CREATECONSUMER, XSETID are refused"
    );
}

/// Keyspace notifications of stream commands (`xadd`, `xtrim` after a trimming XADD, `xdel`,
/// `xsetid`, the `xgroup-*` events, `xgroup-createconsumer` from XREADGROUP and XCLAIM, `del`): with `notify-keyspace-events KEA` the same generated commands make both servers
/// publish the same messages, in the same order, batch by batch.
#[test]
fn stream_notifications_match_redis() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut writers = vec![redis.raw(), ours.raw()];
    for writer in writers.iter_mut() {
        assert_eq!(
            writer.call(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
            Reply::simple("OK")
        );
    }
    let mut subscribers = vec![
        notification_subscriber(&redis),
        notification_subscriber(&ours),
    ];
    let mut generator = Generator {
        rng: Rng::new(9100),
        clock: 1,
    };
    // The keyevent channels redis-server published on: the comparison covered these events.
    let mut events = std::collections::BTreeSet::new();
    for batch in 0..env_count("DIFFERENTIAL_STEPS", 1_500) / 50 {
        let commands: Vec<Vec<String>> = (0..50).map(|_| generator.command()).collect();
        let seen = notifications_of_batch(&mut writers, &mut subscribers, &commands);
        for (channel, _) in &seen[0] {
            if let Reply::BulkString(channel) = channel {
                let channel = String::from_utf8_lossy(channel);
                if let Some(event) = channel.strip_prefix("__keyevent@0__:") {
                    events.insert(event.to_string());
                }
            }
        }
        assert_same_notifications(&seen, &format!("batch {batch}"), &commands);
    }
    for event in [
        "xadd",
        "xtrim",
        "xdel",
        "xsetid",
        "xgroup-create",
        "xgroup-createconsumer",
        "xgroup-setid",
    ] {
        assert!(
            events.contains(event),
            "no {event} event was compared: {events:?}"
        );
    }
}
