//! What the differential test cannot compare with Redis reply for reply: HRANDFIELD's random
//! picks (checked against its rules: distinct for a positive count, repeats allowed for a
//! negative one, values beside their fields, RESP3 pairs) and OBJECT ENCODING, whose Redis
//! answer depends on a value's history (checked against the content rule we document).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::Server;
use prefixkv_resp::Reply;

fn bulk_text(reply: &Reply) -> String {
    match reply {
        Reply::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("expected a bulk string, got {other:?}"),
    }
}

fn array(reply: Reply) -> Vec<Reply> {
    match reply {
        Reply::Array(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

#[test]
fn hrandfield_follows_its_rules_in_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut raw = server.raw();
    let fields: BTreeMap<String, String> =
        (0..5).map(|i| (format!("f{i}"), format!("v{i}"))).collect();
    for (field, value) in &fields {
        raw.call(&["HSET", "h", field, value]);
    }
    let one = bulk_text(&raw.call(&["HRANDFIELD", "h"]));
    assert!(fields.contains_key(&one), "{one}");
    let distinct: Vec<String> = array(raw.call(&["HRANDFIELD", "h", "3"]))
        .iter()
        .map(bulk_text)
        .collect();
    assert_eq!(distinct.len(), 3);
    assert_eq!(
        distinct.iter().collect::<BTreeSet<_>>().len(),
        3,
        "{distinct:?}"
    );
    let all: BTreeSet<String> = array(raw.call(&["HRANDFIELD", "h", "50"]))
        .iter()
        .map(bulk_text)
        .collect();
    assert_eq!(all, fields.keys().cloned().collect());
    let repeated = array(raw.call(&["HRANDFIELD", "h", "-40"]));
    assert_eq!(repeated.len(), 40);
    assert!(repeated.iter().all(|r| fields.contains_key(&bulk_text(r))));
    let flat = array(raw.call(&["HRANDFIELD", "h", "-4", "WITHVALUES"]));
    assert_eq!(flat.len(), 8);
    for pair in flat.chunks(2) {
        assert_eq!(fields[&bulk_text(&pair[0])], bulk_text(&pair[1]));
    }
    assert!(raw
        .error(&["HRANDFIELD", "h", "-100000000000", "WITHVALUES"])
        .contains("client-output-buffer-limit"));
    assert!(matches!(raw.call(&["HELLO", "3"]), Reply::Map(_)));
    let pairs = array(raw.call(&["HRANDFIELD", "h", "2", "WITHVALUES"]));
    assert_eq!(pairs.len(), 2);
    for pair in pairs {
        let pair = array(pair);
        assert_eq!(fields[&bulk_text(&pair[0])], bulk_text(&pair[1]));
    }
}

#[test]
fn object_encoding_reports_how_values_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut raw = server.raw();
    let long = "x".repeat(45);
    let cases = [
        ("12345", "int"),
        ("-7", "int"),
        ("007", "embstr"),
        ("abc", "embstr"),
        (long.as_str(), "raw"),
    ];
    for (value, encoding) in cases {
        raw.call(&["SET", "s", value]);
        assert_eq!(
            raw.call(&["OBJECT", "ENCODING", "s"]),
            Reply::bulk(encoding),
            "{value}"
        );
    }
    raw.call(&["HSET", "h", "f", "v"]);
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "h"]),
        Reply::bulk("listpack")
    );
    raw.call(&["HSET", "h", "big", &"y".repeat(65)]);
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "h"]),
        Reply::bulk("hashtable")
    );
    // The thresholds are CONFIG names (Redis's older ziplist names too) and decide the answer.
    assert_eq!(
        raw.call(&["CONFIG", "GET", "hash-max-ziplist-entries"]),
        Reply::Array(vec![
            Reply::bulk("hash-max-ziplist-entries"),
            Reply::bulk("512")
        ])
    );
    // As in Redis, a hash that became a table stays one.
    raw.call(&["HDEL", "h", "big"]);
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "h"]),
        Reply::bulk("hashtable")
    );
    assert_eq!(
        raw.call(&["HGETALL", "h"]),
        Reply::Array(vec![Reply::bulk("f"), Reply::bulk("v")])
    );
    raw.call(&["CONFIG", "SET", "hash-max-ziplist-entries", "0"]);
    raw.call(&["HSET", "h2", "f", "v"]);
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "h2"]),
        Reply::bulk("hashtable")
    );
    for (command, key, encoding) in [("RPUSH", "l", "quicklist"), ("SADD", "st", "hashtable")] {
        raw.call(&[command, key, "m"]);
        assert_eq!(
            raw.call(&["OBJECT", "ENCODING", key]),
            Reply::bulk(encoding)
        );
    }
    raw.call(&["ZADD", "z", "1", "m"]);
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "z"]),
        Reply::bulk("skiplist")
    );
    assert_eq!(
        raw.call(&["CONFIG", "GET", "hash-max-listpack-entries"]),
        Reply::Array(vec![
            Reply::bulk("hash-max-listpack-entries"),
            Reply::bulk("0")
        ])
    );
    raw.call(&["CONFIG", "SET", "zset-max-listpack-entries", "7"]);
    assert_eq!(
        raw.call(&["CONFIG", "GET", "zset-max-listpack-entries"]),
        Reply::Array(vec![
            Reply::bulk("zset-max-listpack-entries"),
            Reply::bulk("7")
        ])
    );
    assert!(raw
        .error(&["CONFIG", "SET", "set-max-intset-entries", "many"])
        .contains("couldn't be parsed into an integer"));
    assert_eq!(raw.call(&["OBJECT", "REFCOUNT", "h"]), Reply::Integer(1));
    assert_eq!(
        raw.call(&["OBJECT", "ENCODING", "missing"]),
        Reply::NullBulkString
    );
    assert_eq!(
        raw.error(&["OBJECT", "ENCODING"]),
        "ERR wrong number of arguments for 'object|encoding' command"
    );
}

/// INFO commandstats counts what the client did: calls, failed calls (an error reply) and
/// rejected calls (refused before running); latencystats has a line for each command that ran;
/// CONFIG RESETSTAT empties both.
#[test]
fn commandstats_count_what_the_client_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut raw = server.raw();
    raw.call(&["CONFIG", "RESETSTAT"]);
    for i in 0..5 {
        raw.call(&["SET", &format!("k{i}"), "text"]);
    }
    for _ in 0..3 {
        raw.call(&["GET", "k1"]);
    }
    raw.error(&["INCR", "k1"]);
    raw.error(&["INCR", "k2"]);
    raw.error(&["GET"]);
    let info = match raw.call(&["INFO", "commandstats"]) {
        Reply::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("{other:?}"),
    };
    let line = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("no cmdstat_{name} in {info}"))
            .to_string()
    };
    assert!(line("set").contains("calls=5,"), "{}", line("set"));
    assert!(line("set").ends_with("rejected_calls=0,failed_calls=0"));
    assert!(line("get").contains("calls=3,"), "{}", line("get"));
    assert!(line("get").ends_with("rejected_calls=1,failed_calls=0"));
    assert!(line("incr").contains("calls=2,"));
    assert!(line("incr").ends_with("failed_calls=2"));
    let latency = match raw.call(&["INFO", "latencystats"]) {
        Reply::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("{other:?}"),
    };
    assert!(
        latency.contains("latency_percentiles_usec_set:p50="),
        "{latency}"
    );
    raw.call(&["CONFIG", "RESETSTAT"]);
    let info = match raw.call(&["INFO", "commandstats"]) {
        Reply::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("{other:?}"),
    };
    assert!(!info.contains("cmdstat_set:"), "{info}");
}

/// SLOWLOG keeps the commands at or over the threshold, newest first, shortened as Redis does,
/// at most slowlog-max-len of them; a negative threshold turns it off.
#[test]
fn slowlog_keeps_what_was_slow_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "slowlog-*"]),
        Reply::Array(vec![
            Reply::bulk("slowlog-log-slower-than"),
            Reply::bulk("10000"),
            Reply::bulk("slowlog-max-len"),
            Reply::bulk("128"),
        ])
    );
    raw.call(&[
        "CONFIG",
        "SET",
        "slowlog-log-slower-than",
        "0",
        "slowlog-max-len",
        "3",
    ]);
    raw.call(&["SLOWLOG", "RESET"]);
    let long = "v".repeat(200);
    raw.call(&["SET", "a", &long]);
    raw.call(&["GET", "a"]);
    let entries = array(raw.call(&["SLOWLOG", "GET", "2"]));
    assert_eq!(entries.len(), 2);
    let newest = array(entries[0].clone());
    assert_eq!(newest.len(), 6);
    assert_eq!(
        newest[3],
        Reply::Array(vec![Reply::bulk("GET"), Reply::bulk("a")])
    );
    let older = array(array(entries[1].clone())[3].clone());
    assert_eq!(
        bulk_text(&older[2]),
        format!("{}... (72 more bytes)", "v".repeat(128))
    );
    for _ in 0..5 {
        raw.call(&["PING"]);
    }
    assert_eq!(raw.call(&["SLOWLOG", "LEN"]), Reply::Integer(3));
    raw.call(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    raw.call(&["SLOWLOG", "RESET"]);
    raw.call(&["SET", "b", "1"]);
    assert_eq!(raw.call(&["SLOWLOG", "LEN"]), Reply::Integer(0));
    assert!(raw
        .error(&["CONFIG", "SET", "slowlog-max-len", "100000000"])
        .contains("between 0 and"));
}

/// One HTTP request to the metrics endpoint; (status line, body).
fn scrape(port: u16, request_line: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(stream, "{request_line}\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The Prometheus endpoint counts what the client sent, every sample line is `name{labels}
/// value` with a declared family, and other paths and methods are refused.
#[test]
fn the_metrics_endpoint_serves_prometheus_text() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = common::free_port();
    let server = Server::start(
        dir.path(),
        &[
            "--engine-memory",
            "64mb",
            "--metrics-port",
            &metrics_port.to_string(),
        ],
    );
    let mut raw = server.raw();
    for i in 0..4 {
        raw.call(&["SET", &format!("k{i}"), "v"]);
    }
    raw.error(&["INCR", "k0"]);
    raw.call(&["SAVE"]);
    let (status, body) = scrape(metrics_port, "GET /metrics HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let mut declared = BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            declared.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (name_and_labels, value) = line.rsplit_once(' ').expect("a sample line");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value of {line}"));
        let name = name_and_labels.split('{').next().unwrap();
        let family = name.trim_end_matches("_sum").trim_end_matches("_count");
        assert!(declared.contains(family), "{name} has no TYPE line");
    }
    assert!(
        body.contains("prefixkv_commands_total{cmd=\"set\"} 4\n"),
        "{body}"
    );
    assert!(body.contains("prefixkv_command_failed_total{cmd=\"incr\"} 1\n"));
    assert!(body.contains("prefixkv_command_latency_seconds_count{cmd=\"set\"} 4\n"));
    assert!(body.contains("prefixkv_keyspace_keys{db=\"0\"} 4\n"));
    let checkpoints: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("prefixkv_checkpoints_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        checkpoints >= 1.0,
        "SAVE completed a checkpoint: {checkpoints}"
    );
    assert!(body.contains("prefixkv_oplog_syncs_total "));
    assert_eq!(
        scrape(metrics_port, "GET / HTTP/1.1").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        scrape(metrics_port, "POST /metrics HTTP/1.1").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
}
