//! Seeded random command generators for the differential tests (`tests/differential.rs`): a
//! small key space (so commands meet existing keys, keys of the wrong type and missing keys
//! alike) and values that are sometimes integers, floats or empty. Timing-dependent answers
//! (TTL readings, expiry during a run) and orders the two servers legitimately differ on are
//! left out.

use prefixkv_testkit::rng::Rng;

pub const KEYS: &[&str] = &["a", "b", "c", "{x}d"];
pub const FIELDS: &[&str] = &["f", "g", "h"];
pub const VALUES: &[&str] = &[
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

pub fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

pub fn small_int(rng: &mut Rng) -> String {
    (rng.below(41) as i64 - 20).to_string()
}

/// One random command (owned arguments).
pub fn command(rng: &mut Rng) -> Vec<String> {
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

pub const MEMBERS: &[&str] = &["a", "b", "c", "d", "1", "2", "10", "", "\x00z"];
pub const SCORES: &[&str] = &["0", "1", "1.5", "-2", "3", "1e3", "inf", "-inf", "0.1", "x"];
pub const SCORE_BOUNDS: &[&str] = &["-inf", "+inf", "0", "(0", "1", "(1.5", "3", "(3", "x", "("];
pub const LEX_BOUNDS: &[&str] = &["-", "+", "[a", "(a", "[c", "(d", "[1", "a", "[", "("];

/// One random command on lists, sets and sorted sets (and hashes grown into tables: the test sets
/// `hash-max-listpack-entries` to 2 on both servers), over keys also used by strings, so
/// WRONGTYPE and missing keys are met too.
pub fn collection_command(rng: &mut Rng) -> Vec<String> {
    let k = |rng: &mut Rng| pick(rng, KEYS).to_string();
    let m = |rng: &mut Rng| pick(rng, MEMBERS).to_string();
    let s = |text: &str| text.to_string();
    let score = |rng: &mut Rng| pick(rng, SCORES).to_string();
    let bound = |rng: &mut Rng| pick(rng, SCORE_BOUNDS).to_string();
    let lex = |rng: &mut Rng| pick(rng, LEX_BOUNDS).to_string();
    let end = |rng: &mut Rng| s(pick(rng, &["LEFT", "RIGHT", "left", "UP"]));
    let with = |mut args: Vec<String>, rng: &mut Rng, extra: &[&str]| {
        if rng.chance(1, 3) {
            args.push(s(pick(rng, extra)));
        }
        args
    };
    match rng.below(61) {
        0..=3 => {
            let mut args = vec![
                s(pick(rng, &["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"])),
                k(rng),
            ];
            for _ in 0..1 + rng.below(3) {
                args.push(m(rng));
            }
            args
        }
        4 | 5 => with(
            vec![s(pick(rng, &["LPOP", "RPOP"])), k(rng)],
            rng,
            &["0", "1", "2", "5", "-1", "x"],
        ),
        6 => vec![s("LLEN"), k(rng)],
        7 | 8 => vec![s("LRANGE"), k(rng), small_int(rng), small_int(rng)],
        9 => vec![s("LINDEX"), k(rng), small_int(rng)],
        10 => vec![s("LSET"), k(rng), small_int(rng), m(rng)],
        11 => vec![
            s("LINSERT"),
            k(rng),
            s(pick(rng, &["BEFORE", "AFTER", "x"])),
            m(rng),
            m(rng),
        ],
        12 => vec![s("LREM"), k(rng), small_int(rng), m(rng)],
        13 => vec![s("LTRIM"), k(rng), small_int(rng), small_int(rng)],
        14 => {
            let mut args = vec![s("LPOS"), k(rng), m(rng)];
            for _ in 0..rng.below(3) {
                let option = pick(rng, &["RANK", "COUNT", "MAXLEN"]);
                args.extend([s(option), s(pick(rng, &["1", "2", "-1", "0", "-2", "3"]))]);
            }
            args
        }
        15 => vec![s("LMOVE"), k(rng), k(rng), end(rng), end(rng)],
        16 => vec![s("RPOPLPUSH"), k(rng), k(rng)],
        17 => {
            // Blocking forms with a short timeout: an empty key answers null after it.
            match rng.below(3) {
                0 => vec![
                    s(pick(rng, &["BLPOP", "BRPOP"])),
                    k(rng),
                    k(rng),
                    s(pick(rng, &["0.01", "-1", "x"])),
                ],
                1 => vec![s("BLMOVE"), k(rng), k(rng), end(rng), end(rng), s("0.01")],
                _ => vec![s("BRPOPLPUSH"), k(rng), k(rng), s("0.01")],
            }
        }
        18..=20 => {
            let mut args = vec![s(pick(rng, &["SADD", "SREM"])), k(rng)];
            for _ in 0..1 + rng.below(3) {
                args.push(m(rng));
            }
            args
        }
        21 => vec![s("SISMEMBER"), k(rng), m(rng)],
        22 => vec![s("SMISMEMBER"), k(rng), m(rng), m(rng)],
        23 => vec![s("SCARD"), k(rng)],
        24 => vec![s("SMEMBERS"), k(rng)],
        25 => vec![s("SMOVE"), k(rng), k(rng), m(rng)],
        26 => vec![s(pick(rng, &["SINTER", "SUNION", "SDIFF"])), k(rng), k(rng)],
        27 => vec![
            s(pick(rng, &["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"])),
            k(rng),
            k(rng),
            k(rng),
        ],
        28 => with(
            vec![
                s("SINTERCARD"),
                s(pick(rng, &["2", "1", "0", "3"])),
                k(rng),
                k(rng),
            ],
            rng,
            &["LIMIT"],
        ),
        // Deterministic answers only: a count of 0, a missing key, errors.
        29 => vec![
            s(pick(rng, &["SRANDMEMBER", "SPOP"])),
            k(rng),
            s(pick(rng, &["0", "x", "-0"])),
        ],
        30..=33 => {
            let mut args = vec![s("ZADD"), k(rng)];
            for _ in 0..rng.below(3) {
                args.push(s(pick(rng, &["NX", "XX", "GT", "LT", "CH", "INCR"])));
            }
            for _ in 0..1 + rng.below(2) {
                args.extend([score(rng), m(rng)]);
            }
            args
        }
        34 => vec![s("ZINCRBY"), k(rng), score(rng), m(rng)],
        35 => vec![s("ZREM"), k(rng), m(rng), m(rng)],
        36 => vec![s("ZSCORE"), k(rng), m(rng)],
        37 => vec![s("ZMSCORE"), k(rng), m(rng), m(rng)],
        38 => vec![s("ZCARD"), k(rng)],
        39 => vec![s("ZCOUNT"), k(rng), bound(rng), bound(rng)],
        40 => vec![s(pick(rng, &["ZRANK", "ZREVRANK"])), k(rng), m(rng)],
        41 | 42 => with(
            vec![
                s(pick(rng, &["ZRANGE", "ZREVRANGE"])),
                k(rng),
                small_int(rng),
                small_int(rng),
            ],
            rng,
            &["WITHSCORES", "withscores", "REV"],
        ),
        43 | 44 => {
            let mut args = vec![s("ZRANGE"), k(rng)];
            match rng.below(3) {
                0 => args.extend([bound(rng), bound(rng), s("BYSCORE")]),
                1 => {
                    // Lex ranges are specified only when all scores are equal: the `lex` key.
                    args[1] = s("lex");
                    args.extend([lex(rng), lex(rng), s("BYLEX")])
                }
                _ => args.extend([small_int(rng), small_int(rng)]),
            }
            if rng.chance(1, 2) {
                args.push(s("REV"));
            }
            if rng.chance(1, 3) {
                args.extend([s("LIMIT"), small_int(rng), small_int(rng)]);
            }
            if rng.chance(1, 3) {
                args.push(s("WITHSCORES"));
            }
            args
        }
        45 => {
            let mut args = vec![
                s(pick(rng, &["ZRANGEBYSCORE", "ZREVRANGEBYSCORE"])),
                k(rng),
                bound(rng),
                bound(rng),
            ];
            if rng.chance(1, 2) {
                args.push(s("WITHSCORES"));
            }
            if rng.chance(1, 3) {
                args.extend([s("LIMIT"), small_int(rng), small_int(rng)]);
            }
            args
        }
        46 => vec![
            s(pick(rng, &["ZRANGEBYLEX", "ZREVRANGEBYLEX"])),
            s("lex"),
            lex(rng),
            lex(rng),
        ],
        59 => vec![s("ZADD"), s("lex"), s("0"), m(rng), s("0"), m(rng)],
        47 => with(
            vec![s(pick(rng, &["ZPOPMIN", "ZPOPMAX"])), k(rng)],
            rng,
            &["0", "1", "2", "-1", "x"],
        ),
        48 => vec![s("ZREMRANGEBYRANK"), k(rng), small_int(rng), small_int(rng)],
        49 => vec![s("ZREMRANGEBYSCORE"), k(rng), bound(rng), bound(rng)],
        50 => {
            let mut args = vec![
                s(pick(rng, &["ZUNIONSTORE", "ZINTERSTORE"])),
                k(rng),
                s("2"),
                k(rng),
                k(rng),
            ];
            if rng.chance(1, 2) {
                args.extend([s("WEIGHTS"), s(pick(rng, &["1", "2", "-1", "0.5"])), s("3")]);
            }
            if rng.chance(1, 2) {
                args.extend([s("AGGREGATE"), s(pick(rng, &["SUM", "MIN", "MAX", "AVG"]))]);
            }
            args
        }
        51 | 52 => vec![s("HSET"), k(rng), m(rng), m(rng), m(rng), m(rng)],
        53 => vec![s("HDEL"), k(rng), m(rng), m(rng)],
        54 => vec![s(pick(rng, &["HGETALL", "HKEYS", "HVALS", "HLEN"])), k(rng)],
        55 => vec![
            s(pick(rng, &["HGET", "HEXISTS", "HSTRLEN"])),
            k(rng),
            m(rng),
        ],
        56 => vec![s(pick(rng, &["SET", "GET"])), k(rng), m(rng)]
            [..if rng.chance(1, 2) { 3 } else { 2 }]
            .to_vec(),
        57 => vec![s(pick(rng, &["DEL", "TYPE", "EXISTS"])), k(rng)],
        58 => vec![
            s(pick(rng, &["RENAME", "RENAMENX", "COPY"])),
            k(rng),
            k(rng),
        ],
        _ => vec![s("DBSIZE")],
    }
}

pub const ZKEYS: &[&str] = &["za", "zb", "zc", "st", "la", "s", "missing"];

/// Random numkeys and keys for the multi-key sorted-set and list commands (a wrong count
/// sometimes, to compare the errors).
pub fn numkeys_and_keys(rng: &mut Rng, from: &[&str]) -> Vec<String> {
    let count = 1 + rng.below(3) as usize;
    let shown = match rng.below(12) {
        0 => "0".to_string(),
        1 => "x".to_string(),
        2 => "9".to_string(),
        _ => count.to_string(),
    };
    let mut args = vec![shown];
    for _ in 0..count {
        args.push(pick(rng, from).to_string());
    }
    args
}

/// One random command among those issue 29 added (sorted-set algebra, lex ranges, ZRANGESTORE,
/// ZRANDMEMBER with deterministic counts, the MPOP family and the blocking pops on keys that
/// have data or a short timeout), over sorted sets, a set, a list and a string.
pub fn newer_command(rng: &mut Rng) -> Vec<String> {
    let s = |text: &str| text.to_string();
    let z = |rng: &mut Rng| s(pick(rng, &["za", "zb", "zc"]));
    let any = |rng: &mut Rng| s(pick(rng, ZKEYS));
    let m = |rng: &mut Rng| s(pick(rng, &["a", "b", "c", "d", "e"]));
    let lex = |rng: &mut Rng| s(pick(rng, LEX_BOUNDS));
    match rng.below(42) {
        30..=41 => key_command(rng),
        0..=4 => {
            let mut args = vec![s("ZADD"), z(rng)];
            for _ in 0..1 + rng.below(3) {
                args.push(s(pick(rng, &["0", "1", "2", "-1.5", "3", "inf", "0.1"])));
                args.push(m(rng));
            }
            args
        }
        5 => vec![s("SADD"), s("st"), m(rng), m(rng)],
        6 => vec![s("RPUSH"), s(pick(rng, &["la", "lb"])), m(rng), m(rng)],
        7 => vec![s("SET"), s("s"), s("v")],
        8..=10 => {
            let name = pick(rng, &["ZUNION", "ZINTER", "ZDIFF"]);
            let mut args = vec![s(name)];
            args.extend(numkeys_and_keys(rng, ZKEYS));
            if rng.chance(1, 3) {
                args.push(s("WEIGHTS"));
                for _ in 0..args.len().saturating_sub(2).min(3) {
                    args.push(s(pick(rng, &["1", "2", "-1", "0.5", "x"])));
                }
            }
            if rng.chance(1, 3) {
                args.extend([s("AGGREGATE"), s(pick(rng, &["SUM", "MIN", "MAX", "AVG"]))]);
            }
            if rng.chance(1, 2) {
                args.push(s("WITHSCORES"));
            }
            args
        }
        11 | 12 => {
            let name = pick(rng, &["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]);
            let mut args = vec![s(name), s(pick(rng, &["zc", "dst"]))];
            args.extend(numkeys_and_keys(rng, ZKEYS));
            if rng.chance(1, 4) {
                args.extend([s("AGGREGATE"), s(pick(rng, &["MIN", "MAX"]))]);
            }
            if rng.chance(1, 6) {
                args.push(s("WITHSCORES"));
            }
            args
        }
        13 => {
            let mut args = vec![s("ZINTERCARD")];
            args.extend(numkeys_and_keys(rng, ZKEYS));
            if rng.chance(1, 2) {
                args.extend([s("LIMIT"), s(pick(rng, &["0", "1", "2", "-1", "x"]))]);
            }
            args
        }
        14 => vec![
            s("ZLEXCOUNT"),
            s(pick(rng, &["zl", "missing", "s"])),
            lex(rng),
            lex(rng),
        ],
        15 => vec![
            s("ZREMRANGEBYLEX"),
            s(pick(rng, &["zl", "s"])),
            lex(rng),
            lex(rng),
        ],
        16 => vec![s("ZADD"), s("zl"), s("0"), m(rng), s("0"), m(rng)],
        17 | 18 => {
            let mut args = vec![s("ZRANGESTORE"), s(pick(rng, &["dst", "zc"])), any(rng)];
            match rng.below(4) {
                0 => args.extend([small_int(rng), small_int(rng)]),
                1 => args.extend([s("0"), s("(3"), s("BYSCORE")]),
                2 => {
                    // Lex ranges only on a set of equal scores (Redis leaves others undefined).
                    args[2] = s("zl");
                    args.extend([s("[a"), s("+"), s("BYLEX")]);
                }
                _ => args.extend([s("3"), s("-inf"), s("BYSCORE"), s("REV")]),
            }
            if rng.chance(1, 3) {
                args.extend([
                    s("LIMIT"),
                    s(pick(rng, &["0", "1"])),
                    s(pick(rng, &["1", "-1"])),
                ]);
            }
            if rng.chance(1, 8) {
                args.push(s("WITHSCORES"));
            }
            args
        }
        19 => {
            // Counts whose answer does not depend on chance: 0, at least the size, errors.
            let mut args = vec![s("ZRANDMEMBER"), any(rng)];
            args.push(s(pick(rng, &["0", "100", "x"])));
            if rng.chance(1, 2) {
                args.push(s(pick(rng, &["WITHSCORES", "WITHSCORES", "NO"])));
            }
            args
        }
        20 | 21 => {
            let mut args = vec![s("ZMPOP")];
            args.extend(numkeys_and_keys(rng, ZKEYS));
            args.push(s(pick(rng, &["MIN", "MAX", "max", "MID"])));
            if rng.chance(1, 2) {
                args.extend([s("COUNT"), s(pick(rng, &["1", "2", "10", "0", "-1"]))]);
            }
            args
        }
        22 => {
            let mut args = vec![s("LMPOP")];
            args.extend(numkeys_and_keys(rng, &["la", "lb", "s", "missing"]));
            args.push(s(pick(rng, &["LEFT", "RIGHT", "UP"])));
            if rng.chance(1, 2) {
                args.extend([s("COUNT"), s(pick(rng, &["1", "3", "0"]))]);
            }
            args
        }
        23 => vec![
            s(pick(rng, &["BZPOPMIN", "BZPOPMAX"])),
            z(rng),
            any(rng),
            s(pick(rng, &["0.01", "-1", "x"])),
        ],
        24 => {
            let mut args = vec![s("BZMPOP"), s("0.01")];
            args.extend(numkeys_and_keys(rng, ZKEYS));
            args.push(s(pick(rng, &["MIN", "MAX"])));
            args
        }
        25 => {
            let mut args = vec![s("BLMPOP"), s("0.01")];
            args.extend(numkeys_and_keys(rng, &["la", "lb", "s", "missing"]));
            args.push(s(pick(rng, &["LEFT", "RIGHT"])));
            args
        }
        26 => vec![s("ZRANGE"), any(rng), s("0"), s("-1"), s("WITHSCORES")],
        27 => vec![s("LRANGE"), s(pick(rng, &["la", "lb"])), s("0"), s("-1")],
        28 => vec![s("DEL"), any(rng)],
        _ => vec![s("TYPE"), s("dst")],
    }
}

/// The key and database commands of [`newer_command`]: SORT, the strings and hashes SORT's
/// patterns read, SWAPDB, COPY and MOVE across databases, EXPIREAT with its options (absolute
/// times, so EXPIRETIME answers alike), PERSIST and OBJECT FREQ.
pub fn key_command(rng: &mut Rng) -> Vec<String> {
    let s = |text: &str| text.to_string();
    let any = |rng: &mut Rng| s(pick(rng, ZKEYS));
    let m = |rng: &mut Rng| s(pick(rng, &["a", "b", "c", "d", "e"]));
    match rng.below(12) + 30 {
        30..=32 => sort_command(rng),
        33 => vec![
            s("RPUSH"),
            s("ln"),
            small_int(rng),
            s(pick(rng, &["1.5", "-inf", "7"])),
        ],
        34 => vec![
            s("SET"),
            format!("w_{}", m(rng)),
            s(pick(rng, &["1", "-2", "3.5", "x"])),
        ],
        35 => vec![s("HSET"), format!("h_{}", m(rng)), s("f"), small_int(rng)],
        36 => vec![
            s("SWAPDB"),
            s("0"),
            s(pick(rng, &["1", "1", "0", "16", "x"])),
        ],
        37 => {
            let mut args = vec![s("COPY"), any(rng), s(pick(rng, &["dst", "za", "la"]))];
            if rng.chance(1, 2) {
                args.extend([s("DB"), s(pick(rng, &["0", "1", "1", "16"]))]);
            }
            if rng.chance(1, 2) {
                args.push(s("REPLACE"));
            }
            args
        }
        38 => vec![s("MOVE"), any(rng), s(pick(rng, &["1", "0", "x"]))],
        39 => {
            // Absolute times, so EXPIRETIME answers the same on both servers.
            let mut args = vec![
                s(pick(rng, &["EXPIREAT", "PEXPIREAT"])),
                any(rng),
                s(pick(rng, &["4000000000", "4100000000", "4000000000000"])),
            ];
            if rng.chance(2, 3) {
                args.push(s(pick(rng, &["NX", "XX", "GT", "LT", "nx", "YY"])));
            }
            args
        }
        40 => vec![s(pick(rng, &["EXPIRETIME", "PERSIST"])), any(rng)],
        // TOUCH counts the keys that exist (it marks them accessed, which no reply shows).
        _ if rng.chance(1, 2) => vec![s("TOUCH"), any(rng), any(rng)],
        _ => vec![s("OBJECT"), s("FREQ"), any(rng)],
    }
}

/// A random SORT or SORT_RO over lists, a set and sorted sets, with BY and GET patterns on
/// strings `w_*` and hash fields `h_*->f` (ties in ALPHA BY orders are left to chance in Redis,
/// so BY is numeric there).
pub fn sort_command(rng: &mut Rng) -> Vec<String> {
    let s = |text: &str| text.to_string();
    let name = pick(rng, &["SORT", "SORT", "SORT_RO"]);
    let key = pick(rng, &["la", "ln", "st", "za", "zb", "s", "missing"]);
    let mut args = vec![s(name), s(key)];
    let mut alpha = rng.chance(1, 2);
    let mut by = false;
    match rng.below(5) {
        0 => {
            args.extend([s("BY"), s(pick(rng, &["w_*", "h_*->f"]))]);
            by = true;
        }
        // Nothing to sort by: a list's order (a set's and a sorted set's are their hash
        // tables' in Redis).
        // (`ln` only: COPY can make `la` a set or a sorted set.)
        1 if key == "ln" => args.extend([s("BY"), s("nosort")]),
        _ => {}
    }
    if by && alpha {
        alpha = false;
    }
    if rng.chance(1, 3) {
        args.extend([
            s("LIMIT"),
            small_int(rng),
            s(pick(rng, &["1", "2", "-1", "x"])),
        ]);
    }
    for _ in 0..rng.below(3) {
        args.extend([
            s("GET"),
            s(pick(rng, &["#", "w_*", "h_*->f", "nostar", "h_*->"])),
        ]);
    }
    if rng.chance(1, 2) {
        args.push(s(pick(rng, &["ASC", "DESC"])));
    }
    if alpha {
        args.push(s("ALPHA"));
    }
    if rng.chance(1, 4) {
        args.extend([s("STORE"), s(pick(rng, &["dst", "la"]))]);
    }
    if rng.chance(1, 20) {
        args.push(s("BOGUS"));
    }
    args
}
