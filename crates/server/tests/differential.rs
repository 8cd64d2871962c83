//! Differential test: the same seeded command sequences against a real `redis-server` and
//! prefixkv-server, every reply compared exactly (values, integers, nulls, array shapes and error
//! lines). Redis is the reference, so this checks what no model written by us can: that a Redis
//! user gets Redis's answers.
//!
//! The generator draws from a small key space (so commands meet existing keys, keys of the wrong
//! type and missing keys alike) and values that are sometimes integers, floats or empty. It
//! leaves out what is timing-dependent (TTL readings, expiry that passes during the run) and what
//! the two servers legitimately order differently (KEYS, SCAN, RANDOMKEY).
//!
//! `DIFFERENTIAL_SEEDS` (default 4) and `DIFFERENTIAL_STEPS` (default 2,500) raise the count; a
//! failure names its seed, step and the commands before it.

mod common;

use common::{Raw, Server};
use prefixkv_resp::Reply;
use prefixkv_testkit::rng::{env_count, Rng};

const KEYS: &[&str] = &["a", "b", "c", "{x}d"];
const FIELDS: &[&str] = &["f", "g", "h"];
const VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "12",
    "-5",
    "3.5",
    "abc",
    "xyz",
    "9223372036854775807",
    "\x00\x7f",
];

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

fn small_int(rng: &mut Rng) -> String {
    (rng.below(41) as i64 - 20).to_string()
}

/// One random command (owned arguments).
fn command(rng: &mut Rng) -> Vec<String> {
    let k = |rng: &mut Rng| pick(rng, KEYS).to_string();
    let v = |rng: &mut Rng| pick(rng, VALUES).to_string();
    let f = |rng: &mut Rng| pick(rng, FIELDS).to_string();
    let s = |text: &str| text.to_string();
    match rng.below(49) {
        0 => vec![s("SET"), k(rng), v(rng)],
        1 => {
            let option = pick(rng, &["NX", "XX", "GET", "KEEPTTL", "EX"]);
            let mut args = vec![s("SET"), k(rng), v(rng), s(option)];
            if option == "EX" {
                args.push(s("1000"));
            }
            args
        }
        2 => vec![s("GET"), k(rng)],
        3 => vec![s("GETSET"), k(rng), v(rng)],
        4 => vec![s("GETDEL"), k(rng)],
        5 => vec![s("SETNX"), k(rng), v(rng)],
        6 => vec![s("MSET"), k(rng), v(rng), k(rng), v(rng)],
        7 => vec![s("MSETNX"), k(rng), v(rng), k(rng), v(rng)],
        8 => vec![s("MGET"), k(rng), k(rng), k(rng)],
        9 => vec![s(pick(rng, &["INCR", "DECR"])), k(rng)],
        10 => vec![s(pick(rng, &["INCRBY", "DECRBY"])), k(rng), small_int(rng)],
        // On keys of their own: Redis adds in long double and prefixkv in f64, so a float added
        // to an integer past 2^53 (which the other commands make) is a documented difference.
        11 => vec![
            s("INCRBYFLOAT"),
            s(pick(rng, &["fl", "fl2"])),
            s(pick(rng, &["1.5", "-2", "0.25", "abc", "1e3"])),
        ],
        12 => vec![s("APPEND"), k(rng), v(rng)],
        13 => vec![s("STRLEN"), k(rng)],
        14 => vec![s("SETRANGE"), k(rng), rng.below(8).to_string(), v(rng)],
        15 => vec![s("GETRANGE"), k(rng), small_int(rng), small_int(rng)],
        16 => vec![s("DEL"), k(rng), k(rng)],
        17 => vec![s("EXISTS"), k(rng), k(rng)],
        18 => vec![s("TYPE"), k(rng)],
        19 => vec![s(pick(rng, &["RENAME", "RENAMENX"])), k(rng), k(rng)],
        20 => vec![s("PERSIST"), k(rng)],
        21 => {
            let mut args = vec![s("EXPIRE"), k(rng), s(pick(rng, &["1000", "2000"]))];
            // Not GT/LT: comparing two relative expiries set a millisecond apart depends on
            // whether the clock moved in between.
            if rng.chance(1, 2) {
                args.push(s(pick(rng, &["NX", "XX"])));
            }
            args
        }
        22 => vec![s("HSET"), k(rng), f(rng), v(rng), f(rng), v(rng)],
        23 => vec![s("HGET"), k(rng), f(rng)],
        24 => vec![s("HDEL"), k(rng), f(rng), f(rng)],
        25 => vec![s("HLEN"), k(rng)],
        26 => vec![s("HEXISTS"), k(rng), f(rng)],
        27 => vec![s("HINCRBY"), k(rng), f(rng), small_int(rng)],
        28 => vec![s("HSETNX"), k(rng), f(rng), v(rng)],
        29 => vec![s("HSTRLEN"), k(rng), f(rng)],
        30 => vec![s("HMGET"), k(rng), f(rng), f(rng)],
        31 => vec![s(pick(rng, &["HGETALL", "HKEYS", "HVALS"])), k(rng)],
        32 => vec![
            s(pick(rng, &["GET", "TYPE", "STRLEN"])),
            s(pick(rng, &["fl", "fl2"])),
        ],
        33 => vec![
            s("SETBIT"),
            k(rng),
            rng.below(48).to_string(),
            s(pick(rng, &["0", "1"])),
        ],
        34 => vec![s("GETBIT"), k(rng), rng.below(64).to_string()],
        35 => {
            let mut args = vec![s("BITCOUNT"), k(rng)];
            if rng.chance(2, 3) {
                args.extend([small_int(rng), small_int(rng)]);
                if rng.chance(1, 2) {
                    args.push(s(pick(rng, &["BYTE", "BIT", "bit"])));
                }
            }
            args
        }
        36 => {
            let mut args = vec![s("BITPOS"), k(rng), s(pick(rng, &["0", "1"]))];
            let extra = rng.below(4);
            if extra >= 1 {
                args.push(small_int(rng));
            }
            if extra >= 2 {
                args.push(small_int(rng));
            }
            if extra >= 3 {
                args.push(s(pick(rng, &["BYTE", "BIT"])));
            }
            args
        }
        37 => match pick(rng, &["AND", "OR", "XOR", "NOT"]) {
            "NOT" => vec![s("BITOP"), s("NOT"), k(rng), k(rng)],
            op => vec![s("BITOP"), s(op), k(rng), k(rng), k(rng)],
        },
        38 => {
            let mut args = vec![s("COPY"), k(rng), k(rng)];
            if rng.chance(1, 2) {
                args.extend([s("DB"), s(pick(rng, &["0", "1", "16", "x"]))]);
            }
            if rng.chance(1, 2) {
                args.push(s(pick(rng, &["REPLACE", "replace", "BOGUS"])));
            }
            args
        }
        39 => vec![
            s("MOVE"),
            k(rng),
            s(pick(rng, &["0", "1", "2", "16", "-1", "x"])),
        ],
        // Floats on a hash of their own, for the same reason as INCRBYFLOAT.
        40 => vec![
            s("HINCRBYFLOAT"),
            s("fh"),
            f(rng),
            s(pick(rng, &["1.5", "-2", "0.25", "abc", "1e3"])),
        ],
        41 => vec![s("HGETALL"), s("fh")],
        42 => {
            let mut args = vec![s("HSCAN"), k(rng), s(pick(rng, &["0", "x"]))];
            if rng.chance(1, 2) {
                args.extend([s("MATCH"), s(pick(rng, &["f*", "[gh]", "*"]))]);
            }
            if rng.chance(1, 3) {
                args.extend([s("COUNT"), s(pick(rng, &["10", "0"]))]);
            }
            args
        }
        // Only HRANDFIELD's deterministic answers: count 0, errors, missing or wrong keys.
        43 => vec![s("HRANDFIELD"), k(rng), s(pick(rng, &["0", "x"]))],
        44 => vec![s("HRANDFIELD"), s("missing"), s(pick(rng, &["3", "-3"]))],
        45 => {
            let sub = pick(rng, &["FREQ", "IDLETIME", "REFCOUNT", "ENCODING", "NOPE"]);
            // Missing keys only for the history-dependent answers.
            vec![s("OBJECT"), s(sub), s("missing")]
        }
        46 | 47 => {
            let mut args = vec![s("LCS"), k(rng), k(rng)];
            match rng.below(4) {
                0 => args.push(s("LEN")),
                1 => {
                    args.push(s("IDX"));
                    if rng.chance(1, 2) {
                        args.extend([s("MINMATCHLEN"), s(pick(rng, &["0", "1", "2", "-1"]))]);
                    }
                    if rng.chance(1, 2) {
                        args.push(s("WITHMATCHLEN"));
                    }
                }
                2 => args.extend([s("LEN"), s("IDX")]),
                _ => {}
            }
            args
        }
        _ => vec![s("DBSIZE")],
    }
}

/// Runs `steps` commands of `seed` against both servers; the first differing reply fails.
/// `tamper` sees each of our replies with its step before the comparison (identity in the real
/// test).
fn run_seed(
    redis: &mut Raw,
    ours: &mut Raw,
    seed: u64,
    steps: u64,
    tamper: &dyn Fn(u64, Reply) -> Reply,
) {
    for raw in [&mut *redis, &mut *ours] {
        assert_eq!(raw.call(&["FLUSHALL"]), Reply::simple("OK"));
    }
    let mut rng = Rng::new(seed);
    let mut history: Vec<Vec<String>> = Vec::new();
    for step in 0..steps {
        let args = command(&mut rng);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let expected = redis.call(&refs);
        let got = tamper(step, ours.call(&refs));
        history.push(args);
        if expected != got {
            let recent: Vec<String> = history
                .iter()
                .rev()
                .take(12)
                .rev()
                .map(|args| args.join(" "))
                .collect();
            panic!(
                "seed {seed} step {step}: {:?}\n  redis-server: {expected:?}\n  prefixkv:     \
                 {got:?}\n  last commands:\n    {}",
                history.last().unwrap(),
                recent.join("\n    ")
            );
        }
    }
}

#[test]
fn random_command_sequences_get_redis_replies() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    let seeds = env_count("DIFFERENTIAL_SEEDS", 4);
    let steps = env_count("DIFFERENTIAL_STEPS", 2_500);
    for seed in 0..seeds {
        run_seed(&mut redis_raw, &mut ours_raw, seed, steps, &|_, reply| {
            reply
        });
    }
}

/// The comparison is not vacuous: one reply changed on its way to the test (an integer off by
/// one, a bulk string with a byte more, a null for a value) fails the run at that step.
#[test]
fn a_differing_reply_is_caught() {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let (mut redis_raw, mut ours_raw) = (redis.raw(), ours.raw());
    let tampers: [fn(Reply) -> Reply; 3] = [
        |reply| match reply {
            Reply::Integer(n) => Reply::Integer(n + 1),
            other => other,
        },
        |reply| match reply {
            Reply::BulkString(bytes) => Reply::bulk([&bytes[..], b"!"].concat()),
            other => other,
        },
        |reply| match reply {
            Reply::BulkString(_) => Reply::NullBulkString,
            other => other,
        },
    ];
    for tamper in tampers {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_seed(&mut redis_raw, &mut ours_raw, 1, 400, &|step, reply| {
                if step >= 200 {
                    tamper(reply)
                } else {
                    reply
                }
            })
        }));
        let message = *result
            .expect_err("a tampered reply must fail the comparison")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("seed 1 step 2"), "{message}");
    }
}
