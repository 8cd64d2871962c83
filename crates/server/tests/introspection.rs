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
fn object_encoding_reports_the_content_rule() {
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
