//! Model test of every collection type through a real server: seeded random operations on lists,
//! sets, sorted sets and hashes, each reply checked against a model kept by the test from what
//! the server acknowledged, and in the middle of each round a checkpoint (SAVE), more
//! operations, a SIGKILL and a restart (`always`: the restart replays the log after the
//! checkpoint), after which every key is read back whole and compared with the model.
//!
//! Sizes are chosen so the structures take their larger shapes: lists and sorted sets of a few
//! thousand entries (trees several levels deep), elements of up to 20 KiB (nodes split by
//! bytes), hashes far past the small-hash threshold (tables of many buckets), and removals that
//! shrink them again. `MODEL_SEED` replays a run, `MODEL_ROUNDS` (default 3) and `MODEL_STEPS`
//! (default 1,500 per half round) scale it.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use common::{Raw, Server};
use prefixkv_resp::Reply;
use prefixkv_testkit::env_count;
use prefixkv_testkit::rng::Rng;

#[derive(Debug, Clone)]
enum Value {
    List(VecDeque<String>),
    Set(BTreeSet<String>),
    ZSet(BTreeMap<String, i64>),
    Hash(BTreeMap<String, String>),
}

const KEYS: &[&str] = &["l0", "l1", "s0", "s1", "z0", "z1", "h0", "h1"];

fn element(rng: &mut Rng) -> String {
    if rng.chance(1, 200) {
        // A large element: nodes and buckets split by bytes.
        let n = rng.below(1000);
        return format!("big{n}:{}", "x".repeat(20_000));
    }
    format!("e{}", rng.below(3000))
}

fn int(reply: &Reply) -> i64 {
    match reply {
        Reply::Integer(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn bulk(reply: &Reply) -> Option<String> {
    match reply {
        Reply::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Reply::NullBulkString | Reply::Null => None,
        other => panic!("expected a bulk string, got {other:?}"),
    }
}

fn strings(reply: Reply) -> Vec<String> {
    match reply {
        Reply::Array(items) | Reply::Set(items) => items.iter().map(|i| bulk(i).unwrap()).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// One random operation on `key`, applied to the server and the model; panics on a reply the
/// model does not predict.
fn step(raw: &mut Raw, model: &mut HashMap<String, Value>, rng: &mut Rng, key: &str) {
    match &key[..1] {
        "l" => list_step(raw, model, rng, key),
        "s" => set_step(raw, model, rng, key),
        "z" => zset_step(raw, model, rng, key),
        _ => hash_step(raw, model, rng, key),
    }
    // An emptied collection is no key at all.
    let empty = match model.get(key) {
        Some(Value::List(l)) => l.is_empty(),
        Some(Value::Set(s)) => s.is_empty(),
        Some(Value::ZSet(z)) => z.is_empty(),
        Some(Value::Hash(h)) => h.is_empty(),
        None => false,
    };
    if empty {
        model.remove(key);
    }
}

fn list_step(raw: &mut Raw, model: &mut HashMap<String, Value>, rng: &mut Rng, key: &str) {
    let Value::List(list) = model
        .entry(key.to_string())
        .or_insert_with(|| Value::List(VecDeque::new()))
    else {
        unreachable!("list keys hold lists")
    };
    match rng.below(8) {
        0..=2 => {
            let left = rng.chance(1, 2);
            let count = if rng.chance(1, 10) {
                200
            } else {
                1 + rng.below(3)
            };
            let elements: Vec<String> = (0..count).map(|_| element(rng)).collect();
            let mut args = vec![if left { "LPUSH" } else { "RPUSH" }, key];
            args.extend(elements.iter().map(String::as_str));
            for e in &elements {
                if left {
                    list.push_front(e.clone());
                } else {
                    list.push_back(e.clone());
                }
            }
            assert_eq!(int(&raw.call(&args)), list.len() as i64, "{args:?}");
        }
        3 => {
            let left = rng.chance(1, 2);
            let count = rng.below(4);
            let reply = raw.call(&[if left { "LPOP" } else { "RPOP" }, key, &count.to_string()]);
            let expected: Vec<String> = (0..count)
                .map_while(|_| {
                    if left {
                        list.pop_front()
                    } else {
                        list.pop_back()
                    }
                })
                .collect();
            match reply {
                Reply::NullArray | Reply::Null => assert!(expected.is_empty() && list.is_empty()),
                reply => assert_eq!(strings(reply), expected, "{key} pop {count}"),
            }
        }
        4 if !list.is_empty() => {
            let index = rng.below(list.len() as u64);
            let value = element(rng);
            let reply = raw.call(&["LSET", key, &index.to_string(), &value]);
            assert_eq!(reply, Reply::simple("OK"));
            list[index as usize] = value;
        }
        5 if !list.is_empty() => {
            let pivot = list[rng.below(list.len() as u64) as usize].clone();
            let value = element(rng);
            let after = rng.chance(1, 2);
            let reply = raw.call(&[
                "LINSERT",
                key,
                if after { "AFTER" } else { "BEFORE" },
                &pivot,
                &value,
            ]);
            let at = list.iter().position(|e| *e == pivot).unwrap() + usize::from(after);
            list.insert(at, value);
            assert_eq!(int(&reply), list.len() as i64);
        }
        6 if !list.is_empty() => {
            let target = list[rng.below(list.len() as u64) as usize].clone();
            let count = rng.below(5) as i64 - 2;
            let reply = raw.call(&["LREM", key, &count.to_string(), &target]);
            let mut removed = 0;
            let limit = if count == 0 {
                usize::MAX
            } else {
                count.unsigned_abs() as usize
            };
            if count >= 0 {
                while removed < limit {
                    let Some(at) = list.iter().position(|e| *e == target) else {
                        break;
                    };
                    list.remove(at);
                    removed += 1;
                }
            } else {
                while removed < limit {
                    let Some(at) = list.iter().rposition(|e| *e == target) else {
                        break;
                    };
                    list.remove(at);
                    removed += 1;
                }
            }
            assert_eq!(int(&reply), removed as i64);
        }
        _ => {
            // Trim a little off both ends (keeps lists growing overall).
            let len = list.len() as i64;
            let (start, stop) = (rng.below(3) as i64, len - 1 - rng.below(3) as i64);
            assert_eq!(
                raw.call(&["LTRIM", key, &start.to_string(), &stop.to_string()]),
                Reply::simple("OK")
            );
            // Redis's indexes: a negative stop counts from the end (on a short list `len - 1 - 2`
            // can be -1, the last element).
            let stop = if stop < 0 { stop + len } else { stop };
            let kept: VecDeque<String> = list
                .iter()
                .enumerate()
                .filter(|(i, _)| (*i as i64) >= start && (*i as i64) <= stop)
                .map(|(_, e)| e.clone())
                .collect();
            *list = kept;
        }
    }
}

fn set_step(raw: &mut Raw, model: &mut HashMap<String, Value>, rng: &mut Rng, key: &str) {
    let Value::Set(set) = model
        .entry(key.to_string())
        .or_insert_with(|| Value::Set(BTreeSet::new()))
    else {
        unreachable!("set keys hold sets")
    };
    let count = if rng.chance(1, 10) {
        100
    } else {
        1 + rng.below(3)
    };
    let members: Vec<String> = (0..count).map(|_| element(rng)).collect();
    let add = rng.below(3) != 0;
    let mut args = vec![if add { "SADD" } else { "SREM" }, key];
    args.extend(members.iter().map(String::as_str));
    let changed = members
        .iter()
        .filter(|m| {
            if add {
                set.insert((*m).clone())
            } else {
                set.remove(*m)
            }
        })
        .count();
    assert_eq!(int(&raw.call(&args)), changed as i64, "{:?}", &args[..2]);
    let probe = element(rng);
    assert_eq!(
        int(&raw.call(&["SISMEMBER", key, &probe])),
        i64::from(set.contains(&probe))
    );
}

fn zset_step(raw: &mut Raw, model: &mut HashMap<String, Value>, rng: &mut Rng, key: &str) {
    let Value::ZSet(zset) = model
        .entry(key.to_string())
        .or_insert_with(|| Value::ZSet(BTreeMap::new()))
    else {
        unreachable!("sorted-set keys hold sorted sets")
    };
    match rng.below(5) {
        0 | 1 => {
            let count = if rng.chance(1, 10) {
                100
            } else {
                1 + rng.below(3)
            };
            let mut args = vec!["ZADD".to_string(), key.to_string()];
            let mut added = 0;
            let mut batch = BTreeMap::new();
            for _ in 0..count {
                let (score, member) = (rng.below(500) as i64 - 250, element(rng));
                batch.insert(member.clone(), score);
                args.extend([score.to_string(), member]);
            }
            for (member, score) in batch {
                added += i64::from(zset.insert(member, score).is_none());
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(int(&raw.call(&refs)), added);
        }
        2 => {
            let member = element(rng);
            let by = rng.below(7) as i64 - 3;
            let reply = raw.call(&["ZINCRBY", key, &by.to_string(), &member]);
            let score = zset.entry(member).or_insert(0);
            *score += by;
            assert_eq!(bulk(&reply), Some(score.to_string()));
        }
        3 => {
            let member = element(rng);
            assert_eq!(
                int(&raw.call(&["ZREM", key, &member])),
                i64::from(zset.remove(&member).is_some())
            );
        }
        _ => {
            // ZRANK of a random member, checked against the model's order.
            let member = element(rng);
            let reply = raw.call(&["ZRANK", key, &member]);
            let rank = zset.get(&member).map(|score| {
                zset.iter()
                    .filter(|(m, s)| (**s, m.as_str()) < (*score, member.as_str()))
                    .count() as i64
            });
            match rank {
                Some(rank) => assert_eq!(int(&reply), rank, "ZRANK {key} {member}"),
                None => assert!(
                    matches!(reply, Reply::NullBulkString | Reply::Null),
                    "{reply:?}"
                ),
            }
        }
    }
}

fn hash_step(raw: &mut Raw, model: &mut HashMap<String, Value>, rng: &mut Rng, key: &str) {
    let Value::Hash(hash) = model
        .entry(key.to_string())
        .or_insert_with(|| Value::Hash(BTreeMap::new()))
    else {
        unreachable!("hash keys hold hashes")
    };
    if rng.below(3) != 0 {
        let count = if rng.chance(1, 10) {
            100
        } else {
            1 + rng.below(3)
        };
        let mut args = vec!["HSET".to_string(), key.to_string()];
        let mut batch = BTreeMap::new();
        for _ in 0..count {
            let (field, value) = (element(rng), element(rng));
            batch.insert(field.clone(), value.clone());
            args.extend([field, value]);
        }
        let added = batch
            .into_iter()
            .filter(|(f, v)| hash.insert(f.clone(), v.clone()).is_none())
            .count();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(int(&raw.call(&refs)), added as i64);
    } else {
        let field = element(rng);
        assert_eq!(
            int(&raw.call(&["HDEL", key, &field])),
            i64::from(hash.remove(&field).is_some())
        );
    }
    let field = element(rng);
    assert_eq!(
        bulk(&raw.call(&["HGET", key, &field])),
        hash.get(&field).cloned()
    );
}

/// Reads every key back whole and compares it with the model.
fn compare_all(raw: &mut Raw, model: &HashMap<String, Value>, when: &str) {
    for key in KEYS {
        let expected = model.get(*key);
        match (&key[..1], expected) {
            (_, None) => assert_eq!(
                int(&raw.call(&["EXISTS", key])),
                0,
                "{when}: {key} should not exist"
            ),
            ("l", Some(Value::List(list))) => {
                let got = strings(raw.call(&["LRANGE", key, "0", "-1"]));
                assert!(
                    got.iter().eq(list.iter()),
                    "{when}: {key} differs ({} vs {} elements)",
                    got.len(),
                    list.len()
                );
                assert_eq!(int(&raw.call(&["LLEN", key])), list.len() as i64);
            }
            ("s", Some(Value::Set(set))) => {
                let got: BTreeSet<String> =
                    strings(raw.call(&["SMEMBERS", key])).into_iter().collect();
                assert_eq!(&got, set, "{when}: {key}");
                assert_eq!(int(&raw.call(&["SCARD", key])), set.len() as i64);
            }
            ("z", Some(Value::ZSet(zset))) => {
                let got = strings(raw.call(&["ZRANGE", key, "0", "-1", "WITHSCORES"]));
                let mut expected: Vec<(i64, &String)> = zset.iter().map(|(m, s)| (*s, m)).collect();
                expected.sort();
                let expected: Vec<String> = expected
                    .into_iter()
                    .flat_map(|(s, m)| [m.clone(), s.to_string()])
                    .collect();
                assert_eq!(got, expected, "{when}: {key}");
            }
            ("h", Some(Value::Hash(hash))) => {
                let got = strings(raw.call(&["HGETALL", key]));
                let got: BTreeMap<String, String> = got
                    .chunks(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect();
                assert_eq!(&got, hash, "{when}: {key}");
            }
            (_, Some(other)) => panic!("{key} holds {other:?} in the model"),
        }
    }
}

#[test]
fn every_type_matches_its_model_across_checkpoints_and_kills() {
    let mut rng = Rng::from_env("MODEL_SEED");
    let rounds = env_count("MODEL_ROUNDS", 3);
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
    let mut model: HashMap<String, Value> = HashMap::new();
    for round in 0..rounds {
        let mut raw = server.raw();
        for half in 0..2 {
            for _ in 0..steps {
                let key = KEYS[rng.below(KEYS.len() as u64) as usize];
                step(&mut raw, &mut model, &mut rng, key);
            }
            if half == 0 {
                assert_eq!(raw.call(&["SAVE"]), Reply::simple("OK"));
            }
        }
        compare_all(&mut raw, &model, &format!("round {round} before the kill"));
        server.kill();
        server = Server::start(dir.path(), &flags);
        let mut raw = server.raw();
        compare_all(
            &mut raw,
            &model,
            &format!("round {round} after the restart"),
        );
        let keys = int(&raw.call(&["DBSIZE"]));
        assert_eq!(
            keys,
            model.len() as i64,
            "round {round}: DBSIZE counts collection keys only"
        );
    }
    // The comparison is not vacuous: one element changed behind the model's back is caught.
    let mut raw = server.raw();
    let victim = KEYS
        .iter()
        .find(|k| k.starts_with('l') && model.contains_key(**k))
        .unwrap();
    raw.call(&["LSET", victim, "0", "tampered"]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        compare_all(&mut raw, &model, "tampered")
    }));
    assert!(
        caught.is_err(),
        "a changed list element must fail the comparison"
    );
}

/// An element too large for one engine record (the log's 4 MiB pages) is refused with the
/// engine's error; what the command did before it stays, and the collection stays consistent:
/// every element reads back, the lengths agree, and it keeps working. Without writing the
/// header back after a failed step, the earlier steps' records and the old header disagree.
#[test]
fn a_refused_element_leaves_every_type_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "256mb"]);
    let mut raw = server.raw();
    let huge = "x".repeat(5 << 20);
    raw.call(&["CONFIG", "SET", "hash-max-listpack-entries", "4"]);
    for i in 0..300 {
        let element = format!("e{i}");
        raw.call(&["RPUSH", "l", &element]);
        raw.call(&["SADD", "s", &element]);
        raw.call(&["ZADD", "z", &i.to_string(), &element]);
        raw.call(&["HSET", "h", &element, "v"]);
    }
    let commands: [Vec<&str>; 4] = [
        vec!["RPUSH", "l", "a", "b", &huge, "c"],
        vec!["SADD", "s", "a", "b", &huge, "c"],
        vec![
            "ZADD", "z", "1000", "a", "1001", "b", "1002", &huge, "1003", "c",
        ],
        vec!["HSET", "h", "a", "1", "b", "2", &huge, "3", "c", "4"],
    ];
    for args in &commands {
        let error = raw.error(args);
        assert!(
            error.starts_with("ERR value too large"),
            "{}: {error}",
            args[0]
        );
    }
    let list = strings(raw.call(&["LRANGE", "l", "0", "-1"]));
    assert_eq!(list.len() as i64, int(&raw.call(&["LLEN", "l"])));
    assert_eq!(
        &list[300..],
        ["a", "b"],
        "the pushes before the refused one stay"
    );
    let set = strings(raw.call(&["SMEMBERS", "s"]));
    assert_eq!(set.len() as i64, int(&raw.call(&["SCARD", "s"])));
    assert!(set.contains(&"a".to_string()) && !set.contains(&"c".to_string()));
    let zset = strings(raw.call(&["ZRANGE", "z", "0", "-1"]));
    assert_eq!(zset.len() as i64, int(&raw.call(&["ZCARD", "z"])));
    assert_eq!(int(&raw.call(&["ZRANK", "z", "b"])), 301);
    let hash = strings(raw.call(&["HGETALL", "h"]));
    assert_eq!(hash.len() as i64 / 2, int(&raw.call(&["HLEN", "h"])));
    // Every type keeps working after the refusal.
    for args in [
        vec!["RPUSH", "l", "d"],
        vec!["SADD", "s", "d"],
        vec!["ZADD", "z", "5", "d"],
        vec!["HSET", "h", "d", "5"],
    ] {
        assert_eq!(
            int(&raw.call(&args)),
            if args[0] == "RPUSH" { 303 } else { 1 }
        );
    }
}
