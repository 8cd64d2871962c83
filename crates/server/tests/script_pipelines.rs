//! Pipelines of scripts: a connection hands a run of script commands in one read over to the
//! script thread as one job (`run_scripts` in connection.rs). What must not change: replies in
//! request order, each script's own effects, CLIENT REPLY SKIP per script, errors of the
//! commands in the run, and BUSY / SCRIPT KILL for other clients (on any request thread) while
//! a long script of the run runs.

mod common;

use common::{encode_request, wait_busy, Raw, Server};
use prefixkv_resp::Reply;

const INCR_SCRIPT: &str =
    "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('EXPIRE', KEYS[1], 60) end return n";

fn bulk(text: &str) -> Reply {
    Reply::BulkString(text.as_bytes().to_vec().into())
}

fn load(raw: &mut Raw, body: &str) -> String {
    match raw.call(&["SCRIPT", "LOAD", body]) {
        Reply::BulkString(sha) => String::from_utf8(sha.to_vec()).unwrap(),
        other => panic!("SCRIPT LOAD: {other:?}"),
    }
}

fn pipeline(raw: &mut Raw, commands: &[Vec<&str>]) {
    let mut out = Vec::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
        encode_request(&mut out, &args);
    }
    raw.send_bytes(&out).unwrap();
}

#[test]
fn a_pipeline_of_scripts_answers_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut raw = server.raw();
    let incr = load(&mut raw, INCR_SCRIPT);
    let get = load(&mut raw, "return redis.call('GET', KEYS[1])");
    let mut commands: Vec<Vec<&str>> = Vec::new();
    let mut expected = Vec::new();
    for round in 1..=7 {
        commands.push(vec!["EVALSHA", &incr, "1", "counter"]);
        expected.push(Reply::Integer(round));
    }
    // A SET in the middle ends a run of scripts; the next script sees it.
    commands.push(vec!["SET", "counter", "100"]);
    expected.push(Reply::SimpleString("OK".into()));
    commands.push(vec!["EVALSHA", &get, "1", "counter"]);
    expected.push(bulk("100"));
    commands.push(vec!["EVALSHA", &incr, "1", "counter"]);
    expected.push(Reply::Integer(101));
    // Errors inside a run: an unknown script, a wrong key count, a failing script.
    commands.push(vec![
        "EVALSHA",
        "0000000000000000000000000000000000000000",
        "0",
    ]);
    expected.push(Reply::Error(
        "NOSCRIPT No matching script. Please use EVAL.".into(),
    ));
    commands.push(vec!["EVALSHA", &incr, "2", "counter"]);
    expected.push(Reply::Error(
        "ERR Number of keys can't be greater than number of args".into(),
    ));
    commands.push(vec![
        "EVAL",
        "return redis.call('INCR', KEYS[1])",
        "1",
        "text",
    ]);
    commands.push(vec!["EVALSHA", &incr, "1", "counter"]);
    expected.push(Reply::Integer(102));
    // The replies of the scripts of the run and of the command after it, in order.
    commands.push(vec!["EVALSHA", &incr, "1", "other"]);
    expected.push(Reply::Integer(1));
    commands.push(vec!["GET", "counter"]);
    expected.push(bulk("102"));
    raw.call(&["SET", "text", "not a number"]);
    pipeline(&mut raw, &commands);
    for (index, want) in expected.iter().enumerate() {
        let got = raw.read().expect("a reply");
        if index == 12 {
            // The EVAL whose INCR fails comes before it.
            match &got {
                Reply::Error(line) => assert!(
                    line.starts_with(b"ERR value is not an integer or out of range"),
                    "{got:?}"
                ),
                other => panic!("the failing script: {other:?}"),
            }
            let next = raw.read().expect("a reply");
            assert_eq!(&next, want, "reply {index}");
            continue;
        }
        assert_eq!(&got, want, "reply {index}");
    }
    assert_eq!(raw.call(&["TTL", "other"]), Reply::Integer(60));
    assert_eq!(raw.call(&["PING"]), Reply::SimpleString("PONG".into()));
}

#[test]
fn client_reply_skip_drops_one_script_reply_of_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut raw = server.raw();
    let incr = load(&mut raw, INCR_SCRIPT);
    let run = |raw: &mut Raw| {
        pipeline(
            raw,
            &[
                vec!["EVALSHA", &incr, "1", "k"],
                vec!["CLIENT", "REPLY", "SKIP"],
                vec!["EVALSHA", &incr, "1", "k"],
                vec!["EVALSHA", &incr, "1", "k"],
                vec!["EVALSHA", &incr, "1", "k"],
            ],
        )
    };
    run(&mut raw);
    // The second script's reply (2) is dropped; the ones around it are not.
    for want in [1, 3, 4] {
        assert_eq!(raw.read(), Some(Reply::Integer(want)));
    }
    assert_eq!(raw.call(&["GET", "k"]), bulk("4"));
}

#[test]
fn a_long_script_in_a_run_is_busy_for_others_and_killable() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--busy-reply-threshold", "100"]);
    // Accepted in turn over the two request threads: `third` shares `pipelined`'s thread.
    let mut pipelined = server.raw();
    let mut second = server.raw();
    let mut third = server.raw();
    let incr = load(&mut second, INCR_SCRIPT);
    pipeline(
        &mut pipelined,
        &[
            vec!["EVALSHA", &incr, "1", "before"],
            vec!["EVAL", "local i = 0 while true do i = i + 1 end", "0"],
            vec!["EVALSHA", &incr, "1", "after"],
        ],
    );
    let busy =
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
    assert_eq!(wait_busy(&mut third), busy);
    assert_eq!(wait_busy(&mut second), busy);
    assert_eq!(
        third.call(&["SCRIPT", "KILL"]),
        Reply::SimpleString("OK".into())
    );
    assert_eq!(pipelined.read(), Some(Reply::Integer(1)));
    match pipelined.read() {
        Some(Reply::Error(line)) => assert!(
            line.starts_with(b"ERR Script killed by user with SCRIPT KILL..."),
            "{line:?}"
        ),
        other => panic!("the killed script: {other:?}"),
    }
    // The script after the killed one still ran.
    assert_eq!(pipelined.read(), Some(Reply::Integer(1)));
    assert_eq!(second.call(&["GET", "after"]), bulk("1"));
    assert_eq!(third.call(&["PING"]), Reply::SimpleString("PONG".into()));
}
