//! A pipeline runs as batches (`connection` module docs): replies come in order with the values
//! commands run one by one would give, with commands that end a batch (MULTI/EXEC, a script, a
//! blocking pop) in the middle, and two connections pipelining to one hot key from the server's
//! two request threads lose no increment.

mod common;

use common::{encode_request, small_server, Raw};
use prefixkv_resp::Reply;

fn ok() -> Reply {
    Reply::SimpleString("OK".into())
}

/// Sends `requests` with one write and reads one reply per request.
fn pipeline(raw: &mut Raw, requests: &[&[&str]]) -> Vec<Reply> {
    let mut out = Vec::new();
    for request in requests {
        let args: Vec<&[u8]> = request.iter().map(|a| a.as_bytes()).collect();
        encode_request(&mut out, &args);
    }
    raw.send_bytes(&out).unwrap();
    requests
        .iter()
        .map(|request| {
            raw.read()
                .unwrap_or_else(|| panic!("no reply to {request:?}"))
        })
        .collect()
}

#[test]
fn a_pipeline_mixing_keys_multi_scripts_and_a_blocking_pop_answers_in_order() {
    let (_dir, server) = small_server();
    let mut raw = server.raw();
    let script = "return redis.call('INCR', KEYS[1])";
    let replies = pipeline(
        &mut raw,
        &[
            &["SET", "a", "1"],
            &["INCR", "a"],
            &["SET", "b", "x"],
            &["APPEND", "b", "y"],
            &["INCR", "a"],
            &["RPUSH", "list", "one", "two"],
            &["MULTI"],
            &["INCR", "a"],
            &["GET", "b"],
            &["EXEC"],
            &["GET", "a"],
            &["EVAL", script, "1", "a"],
            &["INCR", "a"],
            &["BLPOP", "list", "0"],
            &["LPOP", "list"],
            &["BLPOP", "list", "0.05"],
            &["GET", "a"],
            &["MGET", "a", "b", "missing"],
        ],
    );
    let bulk = |text: &str| Reply::bulk(text);
    assert_eq!(
        replies,
        vec![
            ok(),
            Reply::Integer(2),
            ok(),
            Reply::Integer(2),
            Reply::Integer(3),
            Reply::Integer(2),
            ok(),
            Reply::SimpleString("QUEUED".into()),
            Reply::SimpleString("QUEUED".into()),
            Reply::Array(vec![Reply::Integer(4), bulk("xy")]),
            bulk("4"),
            Reply::Integer(5),
            Reply::Integer(6),
            Reply::Array(vec![bulk("list"), bulk("one")]),
            bulk("two"),
            Reply::NullArray,
            bulk("6"),
            Reply::Array(vec![bulk("6"), bulk("xy"), Reply::NullBulkString]),
        ]
    );
}

#[test]
fn a_pipeline_longer_than_a_batch_keeps_its_order() {
    let (_dir, server) = small_server();
    let mut raw = server.raw();
    // Several batches' worth, with a key written and read back across batch boundaries.
    let count = 3 * prefixkv_store::BATCH_MAX_COMMANDS + 7;
    let values: Vec<String> = (0..count).map(|n| n.to_string()).collect();
    let mut requests: Vec<Vec<&str>> = Vec::new();
    for value in &values {
        requests.push(vec!["SET", "k", value]);
        requests.push(vec!["GET", "k"]);
        requests.push(vec!["RPUSH", "order", value]);
    }
    let borrowed: Vec<&[&str]> = requests.iter().map(Vec::as_slice).collect();
    let replies = pipeline(&mut raw, &borrowed);
    for (n, value) in values.iter().enumerate() {
        assert_eq!(replies[3 * n], ok());
        assert_eq!(replies[3 * n + 1], Reply::bulk(value.as_str()));
        assert_eq!(replies[3 * n + 2], Reply::Integer(n as i64 + 1));
    }
    let Reply::Array(order) = raw.call(&["LRANGE", "order", "0", "-1"]) else {
        panic!("LRANGE");
    };
    let expected: Vec<Reply> = values.iter().map(|v| Reply::bulk(v.as_str())).collect();
    assert_eq!(order, expected);
}

#[test]
fn two_connections_pipelining_to_one_hot_key_lose_no_increment() {
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 150;
    let (_dir, server) = small_server();
    let port = server.port;
    // The test server runs `--threads 2`: two connections land on both request threads.
    let workers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut raw = Raw::connect(port).unwrap();
                let mut out = Vec::new();
                for _ in 0..PER_ROUND {
                    encode_request(&mut out, &[b"INCR", b"hot"]);
                    encode_request(&mut out, &[b"LPUSH", b"hotlist", b"x"]);
                }
                for _ in 0..ROUNDS {
                    raw.send_bytes(&out).unwrap();
                    for _ in 0..2 * PER_ROUND {
                        let reply = raw.read().expect("a reply");
                        assert!(matches!(reply, Reply::Integer(_)), "{reply:?}");
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let mut raw = server.raw();
    let total = (2 * ROUNDS * PER_ROUND) as i64;
    assert_eq!(
        raw.call(&["GET", "hot"]),
        Reply::bulk(total.to_string().as_str())
    );
    assert_eq!(raw.call(&["LLEN", "hotlist"]), Reply::Integer(total));
}
