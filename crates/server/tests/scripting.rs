//! Scripting against redis-server 7.0.15: the same script texts and inputs to both servers,
//! every reply compared exactly, in RESP2 and in RESP3 (conversion rules both ways, errors and
//! their `script: ..., on @user_script:N.` suffix, pcall, error_reply, status_reply, sha1hex,
//! math.random's sequence, EVALSHA/NOSCRIPT, SCRIPT EXISTS/FLUSH, FUNCTION LOAD/LIST/FCALL/DELETE,
//! flags, the sandbox). Then what needs one server only: BUSY and SCRIPT KILL, FUNCTION KILL,
//! SHUTDOWN NOSAVE of an unkillable script, functions surviving SIGKILL (the script cache not),
//! a script's writes never interleaved with another client's, and memory limits.

#[path = "scripting/cases.rs"]
mod cases;
mod common;

use std::time::Duration;

use common::{wait_busy, Raw, Server};
use prefixkv_resp::Reply;

fn reset(raw: &mut Raw) {
    for command in [
        &["FLUSHDB"][..],
        &["SCRIPT", "FLUSH"],
        &["FUNCTION", "FLUSH"],
    ] {
        let reply = raw.call(command);
        assert_eq!(reply, Reply::SimpleString("OK".into()), "{command:?}");
    }
}

/// A reply with its unordered parts sorted: FUNCTION LIST's libraries and each library's
/// functions come out of hash tables in redis-server (no order is promised).
fn normalized(reply: Reply) -> Reply {
    fn sort(elements: &mut [Reply]) {
        elements.sort_by_key(|element| format!("{element:?}"));
    }
    match reply {
        Reply::Array(mut elements) => {
            let mut index = 0;
            while index + 1 < elements.len() {
                if elements[index] == Reply::BulkString("functions".into()) {
                    if let Reply::Array(functions) = &mut elements[index + 1] {
                        sort(functions);
                    }
                }
                index += 1;
            }
            let mut elements: Vec<Reply> = elements.into_iter().map(normalized).collect();
            sort(&mut elements);
            Reply::Array(elements)
        }
        Reply::Map(pairs) => Reply::Map(
            pairs
                .into_iter()
                .map(|(key, value)| {
                    let value = match (&key, value) {
                        (Reply::BulkString(k), Reply::Array(mut functions)) if k == "functions" => {
                            sort(&mut functions);
                            Reply::Array(functions)
                        }
                        (_, value) => value,
                    };
                    (key, value)
                })
                .collect(),
        ),
        other => other,
    }
}

fn call_bytes(raw: &mut Raw, args: &[&str]) -> Reply {
    let reply = raw.call(args);
    if args.len() >= 2 && args[0] == "FUNCTION" && args[1] == "LIST" {
        normalized(reply)
    } else {
        reply
    }
}

#[test]
fn scripts_answer_as_redis_does() {
    let redis_dir = tempfile::tempdir().unwrap();
    let ours_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let ours = Server::start(ours_dir.path(), &[]);
    let mut failures = Vec::new();
    for resp3 in [false, true] {
        let mut expected = redis.raw();
        let mut actual = ours.raw();
        if resp3 {
            expected.call(&["HELLO", "3"]);
            actual.call(&["HELLO", "3"]);
        }
        for (index, case) in cases::CASES.iter().enumerate() {
            reset(&mut expected);
            reset(&mut actual);
            for command in case.iter() {
                let want = call_bytes(&mut expected, command);
                let got = call_bytes(&mut actual, command);
                if want != got {
                    failures.push(format!(
                        "case {index} (resp3: {resp3}) {command:?}\n  redis-server: {want:?}\n  prefixkv:     {got:?}"
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn text(reply: &Reply) -> String {
    match reply {
        Reply::Error(line) | Reply::BulkString(line) | Reply::SimpleString(line) => {
            String::from_utf8_lossy(line).into_owned()
        }
        other => format!("{other:?}"),
    }
}

#[test]
fn busy_scripts_are_killed_or_shut_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--busy-reply-threshold", "100"]);
    let mut looping = server.raw();
    let mut other = server.raw();
    assert_eq!(
        other.call(&["CONFIG", "GET", "busy-reply-threshold"]),
        Reply::Array(vec![
            Reply::BulkString("busy-reply-threshold".into()),
            Reply::BulkString("100".into())
        ])
    );
    assert_eq!(
        text(&other.call(&["SCRIPT", "KILL"])),
        "NOTBUSY No scripts in execution right now."
    );

    // A read-only loop: BUSY for the others, then SCRIPT KILL ends it.
    looping.send(&[b"EVAL", b"local i = 0 while true do i = i + 1 end", b"0"]);
    assert_eq!(
        wait_busy(&mut other),
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    assert_eq!(
        text(&other.call(&["GET", "x"])),
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    assert_eq!(
        text(&other.call(&["FUNCTION", "KILL"])),
        "NOTBUSY No scripts in execution right now."
    );
    assert_eq!(
        other.call(&["SCRIPT", "KILL"]),
        Reply::SimpleString("OK".into())
    );
    let killed = text(&looping.read().expect("the killed script's reply"));
    assert!(
        killed.starts_with("ERR Script killed by user with SCRIPT KILL... script: "),
        "{killed}"
    );
    assert_eq!(other.call(&["PING"]), Reply::SimpleString("PONG".into()));
    assert_eq!(looping.call(&["PING"]), Reply::SimpleString("PONG".into()));

    // A script that catches the kill error in a loop is still stopped.
    looping.send(&[
        b"EVAL",
        b"while true do pcall(function() while true do end end) end",
        b"0",
    ]);
    wait_busy(&mut other);
    assert_eq!(
        other.call(&["SCRIPT", "KILL"]),
        Reply::SimpleString("OK".into())
    );
    assert!(text(&looping.read().unwrap()).contains("Script killed"));

    // A loop inside a coroutine (Lua 5.1 hooks are per coroutine).
    looping.send(&[
        b"EVAL",
        b"local co = coroutine.wrap(function() while true do end end) co()",
        b"0",
    ]);
    wait_busy(&mut other);
    assert_eq!(
        other.call(&["SCRIPT", "KILL"]),
        Reply::SimpleString("OK".into())
    );
    assert!(text(&looping.read().unwrap()).contains("Script killed"));

    // FUNCTION LOAD stops a library's top level after 500 ms, however it loops.
    for code in [
        "#!lua name=l1\nlocal co = coroutine.wrap(function() while true do end end) co()",
        "#!lua name=l2\nwhile true do pcall(function() while true do end end) end",
    ] {
        assert_eq!(
            text(&other.call(&["FUNCTION", "LOAD", code])),
            "ERR Error registering functions: ERR FUNCTION LOAD timeout"
        );
    }

    // A function: FUNCTION KILL, and the BUSY line names it.
    other.call(&["FUNCTION", "LOAD", "#!lua name=spin\nredis.register_function{function_name='spin', callback=function() while true do end end, flags={'no-writes'}}"]);
    looping.send(&[b"FCALL", b"spin", b"0"]);
    assert_eq!(
        wait_busy(&mut other),
        "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
    );
    match other.call(&["FUNCTION", "STATS"]) {
        Reply::Array(fields) => assert!(format!("{fields:?}").contains("spin"), "{fields:?}"),
        other => panic!("FUNCTION STATS: {other:?}"),
    }
    assert_eq!(
        text(&other.call(&["SCRIPT", "KILL"])),
        "NOTBUSY No scripts in execution right now."
    );
    assert_eq!(
        other.call(&["FUNCTION", "KILL"]),
        Reply::SimpleString("OK".into())
    );
    assert!(text(&looping.read().unwrap()).contains("Script killed"));

    // A script that wrote cannot be killed; SHUTDOWN NOSAVE ends the server.
    looping.send(&[
        b"EVAL",
        b"redis.call('set', 'x', '1') while true do end",
        b"0",
    ]);
    wait_busy(&mut other);
    assert!(text(&other.call(&["SCRIPT", "KILL"]))
        .starts_with("UNKILLABLE Sorry the script already executed write commands"));
    assert!(
        text(&other.call(&["SHUTDOWN"])).starts_with("BUSY"),
        "SHUTDOWN without NOSAVE is refused"
    );
    other.send(&[b"SHUTDOWN", b"NOSAVE"]);
    assert!(
        other.read().is_none(),
        "the connection closes as the server exits"
    );
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("the server exited");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_command_sent_during_a_short_script_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut scripting = server.raw();
    let mut other = server.raw();
    // The script writes `c` twice around a busy loop; a client's write of `c` sent meanwhile
    // runs before or after the script, never between its two writes.
    for round in 0..20 {
        scripting.send(&[
            b"EVAL",
            b"redis.call('set', 'c', 'first') local i = 0 while i < 200000 do i = i + 1 end \
              local seen = redis.call('get', 'c') redis.call('set', 'c', 'second') return seen",
            b"0",
        ]);
        let during = other.call(&["SET", "c", "other"]);
        assert_eq!(during, Reply::SimpleString("OK".into()));
        assert_eq!(
            scripting.read().unwrap(),
            Reply::BulkString("first".into()),
            "round {round}: another client's write landed inside the script"
        );
        let after = text(&other.call(&["GET", "c"]));
        assert!(after == "other" || after == "second", "{after}");
    }
}

#[test]
fn scripts_never_interleave_with_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let port = server.port;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut raw = Raw::connect(port).unwrap();
                for _ in 0..250 {
                    let reply = raw.call(&[
                        "EVAL",
                        "local a = redis.call('incr', KEYS[1]) local b = redis.call('incr', KEYS[2]) return {a, b}",
                        "2",
                        "a",
                        "b",
                    ]);
                    match reply {
                        Reply::Array(pair) => assert_eq!(pair[0], pair[1], "interleaved"),
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut raw = server.raw();
    assert_eq!(raw.call(&["GET", "a"]), Reply::BulkString("1000".into()));
    assert_eq!(raw.call(&["GET", "b"]), Reply::BulkString("1000".into()));
}

/// In `checkpoint` mode a script's write is durable only once a checkpoint covers the script
/// thread's session, whatever this connection's own session has checkpointed: PREFIXKV.COMMITPOINT
/// counts it durable after the next SAVE, not before (the serials of the two sessions are not
/// comparable; comparing them claimed the script durable at once).
#[test]
fn a_script_is_durable_only_after_a_checkpoint_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--appendfsync",
            "checkpoint",
            "--checkpoint-interval",
            "3600000",
        ],
    );
    let mut raw = server.raw();
    let counts = |raw: &mut Raw| match raw.call(&["PREFIXKV.COMMITPOINT"]) {
        Reply::Array(counts) => (counts[0].clone(), counts[1].clone()),
        other => panic!("{other:?}"),
    };
    // This connection's session gets well ahead of the script thread's.
    for i in 0..50 {
        raw.call(&["SET", &format!("k{i}"), "v"]);
    }
    assert_eq!(raw.call(&["SAVE"]), Reply::SimpleString("OK".into()));
    assert_eq!(counts(&mut raw), (Reply::Integer(50), Reply::Integer(50)));
    raw.call(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "s"]);
    assert_eq!(
        counts(&mut raw),
        (Reply::Integer(51), Reply::Integer(50)),
        "a script's write claimed durable before any checkpoint covered it"
    );
    assert_eq!(raw.call(&["SAVE"]), Reply::SimpleString("OK".into()));
    assert_eq!(counts(&mut raw), (Reply::Integer(51), Reply::Integer(51)));
}

#[test]
fn a_script_is_one_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--appendfsync", "always"]);
    let mut raw = server.raw();
    let writes = |raw: &mut Raw| match raw.call(&["PREFIXKV.COMMITPOINT"]) {
        Reply::Array(counts) => counts[0].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(writes(&mut raw), Reply::Integer(0));
    raw.call(&[
        "EVAL",
        "redis.call('set', 'a', 1) redis.call('set', 'b', 2) redis.call('incr', 'a')",
        "0",
    ]);
    assert_eq!(writes(&mut raw), Reply::Integer(1));
    raw.call(&["EVAL", "return redis.call('get', 'a')", "0"]);
    assert_eq!(
        writes(&mut raw),
        Reply::Integer(1),
        "a script that did not write"
    );
    // Pipelined with other commands, scripts answer in order.
    let mut batch = Vec::new();
    for command in [
        &[&b"SET"[..], b"p", b"1"][..],
        &[b"EVAL", b"return redis.call('incr', KEYS[1])", b"1", b"p"],
        &[b"GET", b"p"],
        &[
            b"EVAL",
            b"return redis.call('get', KEYS[1]) .. '!'",
            b"1",
            b"p",
        ],
        &[
            b"EVALSHA",
            b"ffffffffffffffffffffffffffffffffffffffff",
            b"0",
        ],
        &[b"INCR", b"p"],
    ] {
        common::encode_request(&mut batch, command);
    }
    raw.send_bytes(&batch).unwrap();
    let replies: Vec<Reply> = (0..6).map(|_| raw.read().unwrap()).collect();
    assert_eq!(
        replies,
        vec![
            Reply::SimpleString("OK".into()),
            Reply::Integer(2),
            Reply::BulkString("2".into()),
            Reply::BulkString("2!".into()),
            Reply::Error("NOSCRIPT No matching script. Please use EVAL.".into()),
            Reply::Integer(3),
        ]
    );
}

#[test]
fn memory_of_scripts_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--lua-memory-limit", "4mb"]);
    let mut raw = server.raw();
    let reply = text(&raw.call(&[
        "EVAL",
        "local t = {} for i = 1, 10000000 do t[i] = i end return #t",
        "0",
    ]));
    assert!(reply.contains("not enough memory"), "{reply}");
    assert_eq!(raw.call(&["EVAL", "return 7", "0"]), Reply::Integer(7));
    let reply = text(&raw.call(&["EVAL", "return string.rep('x', 100000000)", "0"]));
    assert!(reply.contains("not enough memory"), "{reply}");
    assert_eq!(
        text(&raw.call(&["CONFIG", "SET", "lua-memory-limit", "1kb"])),
        "ERR CONFIG SET failed (possibly related to argument 'lua-memory-limit') - argument must be at least 1mb"
    );
    // The script cache is bounded too: old scripts are dropped (EVALSHA then answers NOSCRIPT).
    let first = text(&raw.call(&["SCRIPT", "LOAD", "return 'first'"]));
    let filler = format!("return '{}'", "y".repeat(1 << 20));
    for index in 0..6 {
        raw.call(&["SCRIPT", "LOAD", &format!("{filler} -- {index}")]);
    }
    assert_eq!(
        raw.call(&["SCRIPT", "EXISTS", &first]),
        Reply::Array(vec![Reply::Integer(0)])
    );
}

#[test]
fn functions_survive_a_crash_and_the_script_cache_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--appendfsync", "always"]);
    let mut raw = server.raw();
    raw.call(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=first\nredis.register_function('one', function() return 1 end)",
    ]);
    assert_eq!(raw.call(&["SAVE"]), Reply::SimpleString("OK".into()));
    raw.call(&["FUNCTION", "LOAD", "#!lua name=second\nredis.register_function('two', function(keys) return redis.call('incr', keys[1]) end)"]);
    raw.call(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=gone\nredis.register_function('three', function() return 3 end)",
    ]);
    raw.call(&["FUNCTION", "DELETE", "gone"]);
    let sha = text(&raw.call(&["SCRIPT", "LOAD", "return 'cached'"]));
    raw.call(&["SET", "user", "key"]);
    server.kill();
    let server = Server::start(dir.path(), &["--appendfsync", "always"]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FCALL", "one", "0"]), Reply::Integer(1));
    assert_eq!(raw.call(&["FCALL", "two", "1", "n"]), Reply::Integer(1));
    assert_eq!(
        text(&raw.call(&["FCALL", "three", "0"])),
        "ERR Function not found"
    );
    assert_eq!(
        raw.call(&["SCRIPT", "EXISTS", &sha]),
        Reply::Array(vec![Reply::Integer(0)])
    );
    // The libraries' record is not a key.
    assert_eq!(raw.call(&["DBSIZE"]), Reply::Integer(2));
    match raw.call(&["KEYS", "*"]) {
        Reply::Array(mut keys) => {
            keys.sort_by_key(|key| format!("{key:?}"));
            assert_eq!(
                keys,
                vec![
                    Reply::BulkString("n".into()),
                    Reply::BulkString("user".into())
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    // DUMP and RESTORE carry the libraries.
    let payload = match raw.call(&["FUNCTION", "DUMP"]) {
        Reply::BulkString(payload) => payload,
        other => panic!("{other:?}"),
    };
    raw.call(&["FUNCTION", "FLUSH"]);
    assert_eq!(
        text(&raw.call(&["FCALL", "one", "0"])),
        "ERR Function not found"
    );
    raw.send(&[b"FUNCTION", b"RESTORE", &payload]);
    assert_eq!(raw.read().unwrap(), Reply::SimpleString("OK".into()));
    assert_eq!(raw.call(&["FCALL", "one", "0"]), Reply::Integer(1));
    let mut damaged = payload.to_vec();
    let last = damaged.len() - 5;
    damaged[last] ^= 1;
    raw.send(&[b"FUNCTION", b"RESTORE", &damaged, b"REPLACE"]);
    assert_eq!(
        text(&raw.read().unwrap()),
        "ERR DUMP payload version or checksum are wrong"
    );
}

/// One random Lua expression that calls a command through `redis.call` or `redis.pcall` (its
/// reply converted to Lua), or builds a value to return (converted back).
fn random_statement(rng: &mut prefixkv_testkit::rng::Rng) -> String {
    const KEYS: &[&str] = &["'a'", "'b'", "'h'", "'l'", "'z'", "'s'"];
    const VALUES: &[&str] = &[
        "'1'", "'x'", "'-3'", "'2.5'", "''", "7", "0.1", "1e20", "-2",
    ];
    let pick = |rng: &mut prefixkv_testkit::rng::Rng, from: &[&'static str]| {
        from[rng.below(from.len() as u64) as usize]
    };
    let k = pick(rng, KEYS);
    let v = pick(rng, VALUES);
    let w = pick(rng, VALUES);
    let call = match rng.below(26) {
        0 => format!("'set', {k}, {v}"),
        1 => format!("'get', {k}"),
        2 => format!("'incr', {k}"),
        // (Not INCRBYFLOAT: Redis adds in long double, a documented difference.)
        3 => format!("'incrby', {k}, {v}"),
        4 => format!("'lpush', {k}, {v}, {w}"),
        5 => format!("'lrange', {k}, 0, -1"),
        6 => format!("'hset', {k}, {v}, {w}"),
        7 => format!("'hget', {k}, {v}"),
        8 => format!("'hincrby', {k}, 'f', {v}"),
        9 => format!("'zadd', {k}, {v}, {w}"),
        10 => format!("'zrange', {k}, 0, -1, 'withscores'"),
        11 => format!("'zscore', {k}, {w}"),
        12 => format!("'sadd', {k}, {v}"),
        13 => format!("'scard', {k}"),
        14 => format!("'sismember', {k}, {v}"),
        15 => format!("'del', {k}"),
        16 => format!("'exists', {k}, 'a', 'b'"),
        17 => format!("'type', {k}"),
        18 => format!("'mget', {k}, 'a', 'nokey'"),
        19 => format!("'expire', {k}, 100"),
        20 => format!("'ttl', {k}"),
        21 => format!("'zincrby', {k}, {v}, 'm'"),
        22 => format!("'lpop', {k}"),
        23 => format!("'getrange', {k}, 0, 1"),
        24 => format!("'strlen', {k}"),
        _ => format!("'zrank', {k}, {v}"),
    };
    let function = if rng.chance(1, 4) { "call" } else { "pcall" };
    match rng.below(10) {
        0 => format!("{{{v}, {w}, {{{v}}}, true, false}}"),
        1 => format!("{{ok = tostring({v})}}"),
        2 => format!("redis.error_reply(tostring({v}))"),
        3 => format!("type(redis.{function}({call}))"),
        _ => format!("redis.{function}({call})"),
    }
}

#[test]
fn random_scripts_answer_as_redis_does() {
    let redis_dir = tempfile::tempdir().unwrap();
    let ours_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    let ours = Server::start(ours_dir.path(), &[]);
    let seed = prefixkv_testkit::rng::env_count("SCRIPTING_SEED", 29);
    let count = prefixkv_testkit::rng::env_count("SCRIPTING_SCRIPTS", 400);
    let mut rng = prefixkv_testkit::rng::Rng::new(seed);
    let mut failures = Vec::new();
    for resp3 in [false, true] {
        let mut expected = redis.raw();
        let mut actual = ours.raw();
        if resp3 {
            expected.call(&["HELLO", "3"]);
            actual.call(&["HELLO", "3"]);
        }
        reset(&mut expected);
        reset(&mut actual);
        for index in 0..count {
            let mut script = String::new();
            if rng.chance(1, 3) {
                script.push_str("redis.setresp(3) ");
            }
            script.push_str("local r = {} ");
            for _ in 0..rng.in_range(1..5) {
                script.push_str(&format!("r[#r + 1] = {} ", random_statement(&mut rng)));
            }
            script.push_str(if rng.chance(1, 2) {
                "return r"
            } else {
                "return r[#r]"
            });
            let command = ["EVAL", script.as_str(), "0"];
            let want = expected.call(&command);
            let got = actual.call(&command);
            if want != got {
                failures.push(format!(
                    "seed {seed} script {index} (resp3: {resp3}): {script}\n  redis-server: {want:?}\n  prefixkv:     {got:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn scripts_count_in_commandstats_and_slowlog() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--slowlog-log-slower-than", "0"]);
    let mut raw = server.raw();
    raw.call(&["CONFIG", "RESETSTAT"]);
    raw.call(&["SLOWLOG", "RESET"]);
    raw.call(&["EVAL", "return redis.call('set', 'k', 'v')", "0"]);
    raw.call(&["EVAL", "error('no')", "0"]);
    let stats = match raw.call(&["INFO", "commandstats"]) {
        Reply::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("{other:?}"),
    };
    let eval = stats
        .lines()
        .find(|line| line.starts_with("cmdstat_eval:"))
        .unwrap_or_else(|| panic!("{stats}"));
    assert!(
        eval.contains("calls=2,") && eval.contains("failed_calls=1"),
        "{eval}"
    );
    assert!(
        stats.contains("cmdstat_set:calls=1,"),
        "the script's SET: {stats}"
    );
    match raw.call(&["SLOWLOG", "GET", "-1"]) {
        Reply::Array(entries) => {
            let listed = format!("{entries:?}");
            assert!(listed.contains("error('no')"), "{listed}");
        }
        other => panic!("{other:?}"),
    }
}
