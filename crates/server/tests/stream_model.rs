//! Model test of streams and consumer groups through a real server: seeded random XADD (with
//! exact trimming), XDEL, XTRIM, XRANGE, XREADGROUP (new and history), XACK, XCLAIM and XPENDING
//! on one stream with two groups, each reply checked against a simple in-memory model; in the
//! middle of each round a checkpoint (SAVE), more operations, a SIGKILL and a restart
//! (`always`), after which the whole stream, every pending list and every consumer's count are
//! read back and compared with the model.
//!
//! Entries are large now and then (20 KiB: tree nodes split by bytes) and the stream grows to a
//! few thousand entries (a tree several levels deep), with trims and deletes shrinking it again.
//! `MODEL_SEED` replays a run; `MODEL_ROUNDS` (default 2) and `MODEL_STEPS` (default 1,500 per
//! half round) scale it.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Raw, Server};
use prefixkv_resp::Reply;
use prefixkv_testkit::env_count;
use prefixkv_testkit::rng::Rng;

const KEY: &str = "s";
const GROUPS: &[&str] = &["g0", "g1"];
const CONSUMERS: &[&str] = &["c0", "c1", "c2"];

/// A pending entry: owner and delivery count.
type Pel = BTreeMap<u64, (String, u64)>;

#[derive(Default, Debug)]
struct Group {
    last: u64,
    pel: Pel,
}

/// The model: entry ids are `<n>-0` with `n` growing, so an id is its number.
#[derive(Default, Debug)]
struct Model {
    entries: BTreeMap<u64, String>,
    next: u64,
    groups: BTreeMap<String, Group>,
}

fn id(n: u64) -> String {
    format!("{n}-0")
}

fn parse_id(reply: &Reply) -> u64 {
    match reply {
        Reply::BulkString(b) => {
            let text = std::str::from_utf8(b).unwrap();
            let (ms, seq) = text.split_once('-').unwrap();
            assert_eq!(seq, "0", "{text}");
            ms.parse().unwrap()
        }
        other => panic!("expected an id, got {other:?}"),
    }
}

fn int(reply: &Reply) -> i64 {
    match reply {
        Reply::Integer(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// `[[id, [f, v]], ...]` as (id, value) pairs; a null entry (deleted) as `None`.
fn entries(reply: &Reply) -> Vec<(u64, Option<String>)> {
    let Reply::Array(items) = reply else {
        panic!("expected entries, got {reply:?}")
    };
    items
        .iter()
        .map(|item| {
            let Reply::Array(pair) = item else {
                panic!("expected an entry, got {item:?}")
            };
            let value = match &pair[1] {
                Reply::Array(fields) => match &fields[..] {
                    [Reply::BulkString(f), Reply::BulkString(v)] if &f[..] == b"f" => {
                        Some(String::from_utf8_lossy(v).into_owned())
                    }
                    other => panic!("unexpected fields {other:?}"),
                },
                Reply::NullArray | Reply::Null => None,
                other => panic!("unexpected fields {other:?}"),
            };
            (parse_id(&pair[0]), value)
        })
        .collect()
}

fn value(rng: &mut Rng) -> String {
    if rng.chance(1, 150) {
        return format!("big{}:{}", rng.below(1000), "x".repeat(20_000));
    }
    format!("v{}", rng.below(100_000))
}

/// An id near the stream's (existing or not).
fn some_id(model: &Model, rng: &mut Rng) -> u64 {
    model
        .next
        .saturating_sub(rng.below(model.next.min(400) + 1))
}

fn step(raw: &mut Raw, model: &mut Model, rng: &mut Rng) {
    let group = GROUPS[rng.below(2) as usize];
    let consumer = CONSUMERS[rng.below(3) as usize];
    match rng.below(20) {
        0..=6 => {
            model.next += 1 + rng.below(2);
            let v = value(rng);
            let n = model.next;
            model.entries.insert(n, v.clone());
            let mut args = vec!["XADD".to_string(), KEY.into()];
            if rng.chance(1, 10) {
                let max = 1500 + rng.below(1500);
                args.extend(["MAXLEN".into(), "=".into(), max.to_string()]);
                while model.entries.len() as u64 > max {
                    model.entries.pop_first();
                }
            }
            args.extend([id(n), "f".into(), v]);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(parse_id(&raw.call(&refs)), n);
        }
        7 => {
            let n = some_id(model, rng);
            let expected = i64::from(model.entries.remove(&n).is_some());
            assert_eq!(int(&raw.call(&["XDEL", KEY, &id(n)])), expected, "XDEL {n}");
        }
        8 if rng.chance(1, 4) => {
            let min = some_id(model, rng).saturating_sub(500);
            let before = model.entries.len();
            model.entries.retain(|&n, _| n >= min);
            let removed = (before - model.entries.len()) as i64;
            assert_eq!(int(&raw.call(&["XTRIM", KEY, "MINID", &id(min)])), removed);
        }
        9 | 10 => {
            let (a, b) = (some_id(model, rng), some_id(model, rng));
            let (start, end) = (a.min(b), a.max(b));
            let count = 1 + rng.below(50);
            let reply = raw.call(&[
                "XRANGE",
                KEY,
                &id(start),
                &id(end),
                "COUNT",
                &count.to_string(),
            ]);
            let expected: Vec<(u64, Option<String>)> = model
                .entries
                .range(start..=end)
                .take(count as usize)
                .map(|(n, v)| (*n, Some(v.clone())))
                .collect();
            if model.entries.is_empty() && model.next == 0 {
                return;
            }
            assert_eq!(entries(&reply), expected, "XRANGE {start} {end} {count}");
        }
        11..=13 if model.groups.contains_key(group) => {
            let count = 1 + rng.below(20);
            let reply = raw.call(&[
                "XREADGROUP",
                "GROUP",
                group,
                consumer,
                "COUNT",
                &count.to_string(),
                "STREAMS",
                KEY,
                ">",
            ]);
            let g = model.groups.get_mut(group).unwrap();
            let new: Vec<(u64, Option<String>)> = model
                .entries
                .range(g.last + 1..)
                .take(count as usize)
                .map(|(n, v)| (*n, Some(v.clone())))
                .collect();
            if new.is_empty() {
                assert_eq!(reply, Reply::NullArray);
                return;
            }
            let Reply::Array(streams) = &reply else {
                panic!("{reply:?}")
            };
            let Reply::Array(pair) = &streams[0] else {
                panic!("{reply:?}")
            };
            assert_eq!(entries(&pair[1]), new, "XREADGROUP > {group} {consumer}");
            for (n, _) in new {
                g.last = n;
                g.pel.insert(n, (consumer.to_string(), 1));
            }
        }
        14 if model.groups.contains_key(group) => {
            let reply = raw.call(&[
                "XREADGROUP",
                "GROUP",
                group,
                consumer,
                "COUNT",
                "30",
                "STREAMS",
                KEY,
                "0",
            ]);
            let g = model.groups.get_mut(group).unwrap();
            let mut expected = Vec::new();
            for (n, (owner, deliveries)) in g.pel.iter_mut() {
                if owner != consumer || expected.len() == 30 {
                    continue;
                }
                let entry = model.entries.get(n).cloned();
                if entry.is_some() {
                    *deliveries += 1;
                }
                expected.push((*n, entry));
            }
            let Reply::Array(streams) = &reply else {
                panic!("{reply:?}")
            };
            let Reply::Array(pair) = &streams[0] else {
                panic!("{reply:?}")
            };
            assert_eq!(
                entries(&pair[1]),
                expected,
                "XREADGROUP 0 {group} {consumer}"
            );
        }
        15 if model.groups.contains_key(group) => {
            let g = model.groups.get_mut(group).unwrap();
            let ids: Vec<u64> = (0..3)
                .map(|_| pending_or_near(&g.pel, model.next, rng))
                .collect();
            let mut acked = 0;
            for n in &ids {
                if g.pel.remove(n).is_some() {
                    acked += 1;
                }
            }
            let mut args = vec!["XACK".to_string(), KEY.into(), group.into()];
            args.extend(ids.iter().map(|n| id(*n)));
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(int(&raw.call(&refs)), acked, "{args:?}");
        }
        16 if model.groups.contains_key(group) => {
            let g = model.groups.get_mut(group).unwrap();
            let ids: Vec<u64> = (0..2)
                .map(|_| pending_or_near(&g.pel, model.next, rng))
                .collect();
            let mut expected = Vec::new();
            for n in &ids {
                if !model.entries.contains_key(n) {
                    g.pel.remove(n);
                } else if let Some((owner, deliveries)) = g.pel.get_mut(n) {
                    *owner = consumer.to_string();
                    *deliveries += 1;
                    expected.push(*n);
                }
            }
            let mut args = vec![
                "XCLAIM".to_string(),
                KEY.into(),
                group.into(),
                consumer.into(),
                "0".into(),
            ];
            args.extend(ids.iter().map(|n| id(*n)));
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let got: Vec<u64> = entries(&raw.call(&refs))
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            assert_eq!(got, expected, "{args:?}");
        }
        17 if !model.groups.contains_key(group) => {
            let start = some_id(model, rng);
            let reply = raw.call(&["XGROUP", "CREATE", KEY, group, &id(start), "MKSTREAM"]);
            assert_eq!(reply, Reply::simple("OK"));
            model.groups.insert(
                group.to_string(),
                Group {
                    last: start,
                    pel: Pel::new(),
                },
            );
        }
        18 if model.groups.contains_key(group) && rng.chance(1, 10) => {
            assert_eq!(int(&raw.call(&["XGROUP", "DESTROY", KEY, group])), 1);
            model.groups.remove(group);
        }
        _ => {
            let len = model.entries.len() as i64;
            if model.next > 0 {
                assert_eq!(int(&raw.call(&["XLEN", KEY])), len);
            }
        }
    }
}

/// Mostly a pending id of `pel`, sometimes one near the stream's end.
fn pending_or_near(pel: &Pel, next: u64, rng: &mut Rng) -> u64 {
    if !pel.is_empty() && rng.chance(2, 3) {
        return *pel
            .keys()
            .nth(rng.below(pel.len() as u64) as usize)
            .unwrap();
    }
    next.saturating_sub(rng.below(next.min(400) + 1))
}

/// Reads the whole stream and every group back and compares them with the model.
fn compare_all(raw: &mut Raw, model: &Model, when: &str) {
    let all = raw.call(&["XRANGE", KEY, "-", "+"]);
    let expected: Vec<(u64, Option<String>)> = model
        .entries
        .iter()
        .map(|(n, v)| (*n, Some(v.clone())))
        .collect();
    assert_eq!(entries(&all), expected, "{when}: the entries");
    for (name, group) in &model.groups {
        let reply = raw.call(&["XPENDING", KEY, name, "-", "+", "1000000"]);
        let Reply::Array(rows) = reply else {
            panic!("{when}: {reply:?}")
        };
        let got: Vec<(u64, String, i64)> = rows
            .iter()
            .map(|row| {
                let Reply::Array(cells) = row else {
                    panic!("{row:?}")
                };
                let Reply::BulkString(owner) = &cells[1] else {
                    panic!("{row:?}")
                };
                (
                    parse_id(&cells[0]),
                    String::from_utf8_lossy(owner).into_owned(),
                    int(&cells[3]),
                )
            })
            .collect();
        let want: Vec<(u64, String, i64)> = group
            .pel
            .iter()
            .map(|(n, (owner, deliveries))| (*n, owner.clone(), *deliveries as i64))
            .collect();
        assert_eq!(got, want, "{when}: the pending list of {name}");
        // Each consumer's own view holds exactly its entries.
        let owners: BTreeSet<&String> = group.pel.values().map(|(o, _)| o).collect();
        for owner in owners {
            let reply = raw.call(&["XPENDING", KEY, name, "-", "+", "1000000", owner]);
            let Reply::Array(rows) = reply else {
                panic!("{when}: {reply:?}")
            };
            let mine = group.pel.values().filter(|(o, _)| o == owner).count();
            assert_eq!(rows.len(), mine, "{when}: {owner}'s pending list in {name}");
        }
    }
}

#[test]
fn streams_match_their_model_across_checkpoints_and_kills() {
    let mut rng = Rng::from_env("MODEL_SEED");
    let rounds = env_count("MODEL_ROUNDS", 2);
    let steps = env_count("MODEL_STEPS", 1_500);
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        "always",
        "--checkpoint-interval",
        "200",
        "--engine-memory",
        "256mb",
    ];
    let mut server = Server::start(dir.path(), &flags);
    let mut model = Model::default();
    for round in 0..rounds {
        let mut raw = server.raw();
        for half in 0..2 {
            for _ in 0..steps {
                step(&mut raw, &mut model, &mut rng);
            }
            if half == 0 {
                assert_eq!(raw.call(&["SAVE"]), Reply::simple("OK"));
            }
        }
        compare_all(&mut raw, &model, &format!("round {round} before the kill"));
        eprintln!(
            "round {round}: {} entries, pending {:?}",
            model.entries.len(),
            model
                .groups
                .values()
                .map(|g| g.pel.len())
                .collect::<Vec<_>>()
        );
        server.kill();
        server = Server::start(dir.path(), &flags);
        let mut raw = server.raw();
        compare_all(
            &mut raw,
            &model,
            &format!("round {round} after the restart"),
        );
    }
    // The comparison is not vacuous: an entry removed behind the model's back is caught.
    let mut raw = server.raw();
    let (&victim, _) = model.entries.iter().next().expect("the stream has entries");
    assert_eq!(int(&raw.call(&["XDEL", KEY, &id(victim)])), 1);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        compare_all(&mut raw, &model, "tampered")
    }));
    assert!(caught.is_err(), "a deleted entry must fail the comparison");
}

/// An entry, a consumer name or a group name too large for one engine record (the log's 4 MiB
/// pages) is refused with the engine's error and changes nothing: a new key is not created,
/// the stream, its group and its pending list read back as before, and everything keeps working.
#[test]
fn a_refused_entry_or_name_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "256mb"]);
    let mut raw = server.raw();
    let big = "x".repeat(5 << 20);
    let too_large = |reply: Reply| match reply {
        Reply::Error(line) => assert!(line.starts_with(b"ERR value too large"), "{line:?}"),
        other => panic!("expected a refusal, got {other:?}"),
    };
    too_large(raw.call(&["XADD", "fresh", "1-1", "f", &big]));
    assert_eq!(int(&raw.call(&["EXISTS", "fresh"])), 0);
    for n in 1..=3 {
        raw.call(&["XADD", KEY, &id(n), "f", "v"]);
    }
    raw.call(&["XGROUP", "CREATE", KEY, "g", "0"]);
    raw.call(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "COUNT",
        "1",
        "STREAMS",
        KEY,
        ">",
    ]);
    let before: Vec<Reply> = [
        &["XRANGE", KEY, "-", "+"][..],
        &["XPENDING", KEY, "g"],
        &["XINFO", "GROUPS", KEY],
    ]
    .iter()
    .map(|args| raw.call(args))
    .collect();
    too_large(raw.call(&["XADD", KEY, &id(4), "f", &big]));
    too_large(raw.call(&["XREADGROUP", "GROUP", "g", &big, "STREAMS", KEY, ">"]));
    too_large(raw.call(&["XGROUP", "CREATECONSUMER", KEY, "g", &big]));
    too_large(raw.call(&["XCLAIM", KEY, "g", &big, "0", &id(1)]));
    too_large(raw.call(&["XGROUP", "CREATE", KEY, &big, "0"]));
    let after: Vec<Reply> = [
        &["XRANGE", KEY, "-", "+"][..],
        &["XPENDING", KEY, "g"],
        &["XINFO", "GROUPS", KEY],
    ]
    .iter()
    .map(|args| raw.call(args))
    .collect();
    assert_eq!(after, before);
    // And it keeps working.
    assert_eq!(parse_id(&raw.call(&["XADD", KEY, &id(5), "f", "v"])), 5);
    let reply = raw.call(&["XREADGROUP", "GROUP", "g", "d", "STREAMS", KEY, ">"]);
    let Reply::Array(streams) = &reply else {
        panic!("{reply:?}")
    };
    let Reply::Array(pair) = &streams[0] else {
        panic!("{reply:?}")
    };
    let got: Vec<u64> = entries(&pair[1]).into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, [2, 3, 5]);
    assert_eq!(int(&raw.call(&["XACK", KEY, "g", &id(1), &id(2)])), 2);
}
