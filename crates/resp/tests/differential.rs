//! Differential tests against the `redis-protocol` crate (6.x) as an oracle.
//!
//! Valid frames (generated, then encoded by our encoder) must decode to the same value and the
//! same length with both decoders. Corrupted frames must give the same outcome (same value and
//! length, both incomplete, or both an error) unless the disagreement is one of the documented
//! deliberate differences, each recognised below by a narrow test on the input or the outcome:
//!
//! - we check the CRLF after a bulk payload and reject lone CR or LF inside lines (the oracle
//!   skips two bytes / reads to the first CRLF): our error is `ExpectedCrlf`;
//! - our lengths and counts use Redis's strict integer syntax (no leading zeros, `+` or `-0`),
//!   the oracle Rust's `parse`: our error is an invalid length, or an invalid integer line;
//! - we accept any 3-byte verbatim format, the oracle only `txt` and `mkd`;
//! - the oracle rejects sets and map keys holding aggregates, and non-UTF-8 simple errors;
//! - we reject `_` with content, non-digit big numbers and Rust-only double spellings
//!   (`infinity`, `NaN`): our error is `InvalidLine`;
//! - we accept the RESP2 nulls `$-1` and `*-1` in RESP3 too;
//! - we do not implement attributes (`|`) and streamed types (`?`), nor RESP3 `HELLO` frames;
//! - decoding RESP2 we also accept RESP3 types (the oracle's RESP2 decoder rejects them).

mod common;

use bytes::{Bytes, BytesMut};
use common::*;
use prefixkv_resp::{parse_reply, Limits, Protocol, ProtocolError, Reply};
use proptest::prelude::*;
use redis_protocol::resp2::types::OwnedFrame as Resp2Frame;
use redis_protocol::resp3::types::{OwnedFrame as Resp3Frame, VerbatimStringFormat};

/// The oracle has no limits; neither do we here (beyond what fits in memory).
fn open_limits() -> Limits {
    Limits {
        max_nesting_depth: 10_000,
        ..Limits::default()
    }
}

/// Canonical text of a value: kinds that are equal across the two libraries spell the same,
/// and maps and sets are sorted (the oracle keeps them in hash order).
fn canon_ours(reply: &Reply) -> String {
    match reply {
        Reply::SimpleString(text) => format!("simple{:?}", &text[..]),
        Reply::Error(text) => format!("error{:?}", &text[..]),
        Reply::Integer(value) => format!("int{value}"),
        Reply::BulkString(bytes) => format!("bulk{:?}", &bytes[..]),
        Reply::NullBulkString | Reply::NullArray | Reply::Null => "null".to_owned(),
        Reply::Array(elements) => format!("array[{}]", list(elements.iter().map(canon_ours))),
        Reply::Push(elements) => format!("push[{}]", list(elements.iter().map(canon_ours))),
        Reply::Set(elements) => format!("set[{}]", sorted(elements.iter().map(canon_ours))),
        Reply::Map(pairs) => format!(
            "map[{}]",
            sorted(pairs.iter().map(|(key, value)| format!(
                "{}=>{}",
                canon_ours(key),
                canon_ours(value)
            )))
        ),
        Reply::Double(value) => canon_double(*value),
        Reply::Boolean(value) => format!("bool{value}"),
        Reply::VerbatimString { format, text } => format!("verbatim{:?}{:?}", format, &text[..]),
        Reply::BigNumber(digits) => format!("big{:?}", &digits[..]),
        Reply::BlobError(text) => format!("bloberror{:?}", &text[..]),
    }
}

fn canon_resp3(frame: &Resp3Frame) -> String {
    match frame {
        Resp3Frame::SimpleString { data, .. } => format!("simple{:?}", &data[..]),
        Resp3Frame::SimpleError { data, .. } => format!("error{:?}", data.as_bytes()),
        Resp3Frame::Number { data, .. } => format!("int{data}"),
        Resp3Frame::BlobString { data, .. } => format!("bulk{:?}", &data[..]),
        Resp3Frame::Null => "null".to_owned(),
        Resp3Frame::Array { data, .. } => format!("array[{}]", list(data.iter().map(canon_resp3))),
        Resp3Frame::Push { data, .. } => format!("push[{}]", list(data.iter().map(canon_resp3))),
        Resp3Frame::Set { data, .. } => format!("set[{}]", sorted(data.iter().map(canon_resp3))),
        Resp3Frame::Map { data, .. } => format!(
            "map[{}]",
            sorted(data.iter().map(|(key, value)| format!(
                "{}=>{}",
                canon_resp3(key),
                canon_resp3(value)
            )))
        ),
        Resp3Frame::Double { data, .. } => canon_double(*data),
        Resp3Frame::Boolean { data, .. } => format!("bool{data}"),
        Resp3Frame::VerbatimString { data, format, .. } => {
            let format = match format {
                VerbatimStringFormat::Text => *b"txt",
                VerbatimStringFormat::Markdown => *b"mkd",
            };
            format!("verbatim{:?}{:?}", format, &data[..])
        }
        Resp3Frame::BigNumber { data, .. } => format!("big{:?}", &data[..]),
        Resp3Frame::BlobError { data, .. } => format!("bloberror{:?}", &data[..]),
        other => format!("unsupported{other:?}"),
    }
}

fn canon_resp2(frame: &Resp2Frame) -> String {
    match frame {
        Resp2Frame::SimpleString(data) => format!("simple{:?}", &data[..]),
        Resp2Frame::Error(data) => format!("error{:?}", data.as_bytes()),
        Resp2Frame::Integer(value) => format!("int{value}"),
        Resp2Frame::BulkString(data) => format!("bulk{:?}", &data[..]),
        Resp2Frame::Null => "null".to_owned(),
        Resp2Frame::Array(data) => format!("array[{}]", list(data.iter().map(canon_resp2))),
    }
}

fn canon_double(value: f64) -> String {
    if value.is_nan() {
        "double-nan".to_owned()
    } else {
        format!("double{value:?}")
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(",")
}

fn sorted(items: impl Iterator<Item = String>) -> String {
    let mut items: Vec<String> = items.collect();
    items.sort();
    items.dedup();
    items.join(",")
}

/// Outcome of one decode: the canonical value and bytes consumed, incomplete, or an error.
#[derive(Debug, PartialEq)]
enum Outcome<E> {
    Value(String, usize),
    Incomplete,
    Error(E),
}

fn ours(input: &[u8]) -> Outcome<ProtocolError> {
    let mut buffer = BytesMut::from(input);
    match parse_reply(&mut buffer, open_limits()) {
        Ok(Some(reply)) => Outcome::Value(canon_ours(&reply), input.len() - buffer.len()),
        Ok(None) => Outcome::Incomplete,
        Err(error) => Outcome::Error(error),
    }
}

fn ours_reply(input: &[u8]) -> Option<Reply> {
    parse_reply(&mut BytesMut::from(input), open_limits())
        .ok()
        .flatten()
}

fn oracle(input: &[u8], protocol: Protocol) -> Outcome<String> {
    let result = match protocol {
        Protocol::Resp2 => redis_protocol::resp2::decode::decode(input)
            .map(|decoded| decoded.map(|(frame, len)| (canon_resp2(&frame), len))),
        Protocol::Resp3 => redis_protocol::resp3::decode::complete::decode(input)
            .map(|decoded| decoded.map(|(frame, len)| (canon_resp3(&frame), len))),
    };
    match result {
        Ok(Some((value, len))) => Outcome::Value(value, len),
        Ok(None) => Outcome::Incomplete,
        Err(error) => Outcome::Error(format!("{error:?}")),
    }
}

/// A reply the oracle represents the same way we do: verbatim formats `txt`/`mkd`, UTF-8
/// errors, hashable set members and map keys, no NaN.
fn agreeable_reply() -> impl Strategy<Value = Reply> {
    let text = "[a-zA-Z0-9 :_-]{0,12}".prop_map(Bytes::from);
    let leaf = prop_oneof![
        text.clone().prop_map(Reply::SimpleString),
        text.clone().prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        bytes_strategy(40).prop_map(Reply::BulkString),
        Just(Reply::NullBulkString),
        Just(Reply::NullArray),
        Just(Reply::Null),
        any::<f64>()
            .prop_filter("NaN", |value| !value.is_nan())
            .prop_map(Reply::Double),
        Just(Reply::Double(f64::INFINITY)),
        Just(Reply::Double(f64::NEG_INFINITY)),
        any::<bool>().prop_map(Reply::Boolean),
        (
            prop_oneof![Just(*b"txt"), Just(*b"mkd")],
            bytes_strategy(20)
        )
            .prop_map(|(format, text)| Reply::VerbatimString { format, text }),
        "-?[0-9]{1,40}".prop_map(|digits| Reply::BigNumber(Bytes::from(digits))),
        bytes_strategy(20).prop_map(Reply::BlobError),
    ];
    let hashable = leaf.clone();
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Reply::Array),
            proptest::collection::vec((hashable.clone(), inner.clone()), 0..4).prop_map(|pairs| {
                // Distinct keys: the oracle's hash map would merge repeated ones.
                let mut keys = std::collections::HashSet::new();
                Reply::Map(
                    pairs
                        .into_iter()
                        .filter(|(key, _)| keys.insert(canon_ours(key)))
                        .collect(),
                )
            }),
            proptest::collection::vec(hashable.clone(), 0..6).prop_map(Reply::Set),
            proptest::collection::vec(inner, 0..6).prop_map(Reply::Push),
        ]
    })
}

/// RESP2-only replies (what a RESP2 server sends).
fn resp2_reply() -> impl Strategy<Value = Reply> {
    let text = "[a-zA-Z0-9 :_-]{0,12}".prop_map(Bytes::from);
    let leaf = prop_oneof![
        text.clone().prop_map(Reply::SimpleString),
        text.prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        bytes_strategy(40).prop_map(Reply::BulkString),
        Just(Reply::NullBulkString),
        Just(Reply::NullArray),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Reply::Array)
    })
}

/// `true` if `reply` holds something the oracle rejects by design.
fn oracle_rejects(reply: &Reply, protocol: Protocol) -> bool {
    let unhashable = |element: &Reply| {
        matches!(
            element,
            Reply::Array(_) | Reply::Map(_) | Reply::Set(_) | Reply::Push(_)
        )
    };
    match reply {
        Reply::VerbatimString { format, .. } => {
            protocol == Protocol::Resp2 || !matches!(format, b"txt" | b"mkd")
        }
        Reply::Error(text) => std::str::from_utf8(text).is_err(),
        // Decoded from `$-1` / `*-1`, which the oracle's RESP3 decoder rejects.
        Reply::NullBulkString | Reply::NullArray => protocol == Protocol::Resp3,
        Reply::Null
        | Reply::Double(_)
        | Reply::Boolean(_)
        | Reply::BigNumber(_)
        | Reply::BlobError(_) => protocol == Protocol::Resp2,
        Reply::Array(elements) => elements
            .iter()
            .any(|element| oracle_rejects(element, protocol)),
        Reply::Push(elements) | Reply::Set(elements) => {
            protocol == Protocol::Resp2
                || (matches!(reply, Reply::Set(_)) && elements.iter().any(unhashable))
                || elements
                    .iter()
                    .any(|element| oracle_rejects(element, protocol))
        }
        Reply::Map(pairs) => {
            protocol == Protocol::Resp2
                || pairs.iter().any(|(key, value)| {
                    unhashable(key)
                        || oracle_rejects(key, protocol)
                        || oracle_rejects(value, protocol)
                })
        }
        _ => false,
    }
}

fn has_repeated_map_keys(reply: &Reply) -> bool {
    match reply {
        Reply::Map(pairs) => {
            let mut keys: Vec<String> = pairs.iter().map(|(key, _)| canon_ours(key)).collect();
            keys.sort();
            keys.dedup();
            keys.len() < pairs.len()
                || pairs
                    .iter()
                    .any(|(key, value)| has_repeated_map_keys(key) || has_repeated_map_keys(value))
        }
        Reply::Array(elements) | Reply::Set(elements) | Reply::Push(elements) => {
            elements.iter().any(has_repeated_map_keys)
        }
        _ => false,
    }
}

/// `true` if our error is one of the deliberate strictness differences.
fn we_are_stricter(error: &ProtocolError, protocol: Protocol) -> bool {
    match error {
        ProtocolError::ExpectedCrlf
        | ProtocolError::InvalidBulkLength
        | ProtocolError::InvalidMultibulkLength => true,
        ProtocolError::InvalidLine(_) => true,
        ProtocolError::Unsupported(_) => true,
        // `H`: a HELLO frame; `;` and `.`: chunks and end of a streamed string.
        ProtocolError::UnknownReplyType(b'H' | b';' | b'.') => protocol == Protocol::Resp3,
        _ => false,
    }
}

/// Checks one input; returns `true` if both decoders agreed exactly.
fn check(input: &[u8], protocol: Protocol) -> Result<bool, TestCaseError> {
    let ours_outcome = ours(input);
    let oracle_outcome = oracle(input, protocol);
    let agreed = match (&ours_outcome, &oracle_outcome) {
        (Outcome::Value(a, a_len), Outcome::Value(b, b_len)) => {
            if has_repeated_map_keys(&ours_reply(input).expect("decoded above")) {
                // The oracle's hash map keeps one value per key: only the length compares.
                prop_assert_eq!(a_len, b_len);
                return Ok(false);
            }
            prop_assert_eq!(
                (a, a_len),
                (b, b_len),
                "input {:?}",
                String::from_utf8_lossy(input)
            );
            true
        }
        (Outcome::Incomplete, Outcome::Incomplete) | (Outcome::Error(_), Outcome::Error(_)) => true,
        (Outcome::Value(..), Outcome::Error(_)) => {
            let reply = ours_reply(input).expect("decoded above");
            prop_assert!(
                oracle_rejects(&reply, protocol),
                "oracle rejected {:?} = {:?}: {:?}",
                String::from_utf8_lossy(input),
                reply,
                oracle_outcome
            );
            false
        }
        (Outcome::Error(error), Outcome::Value(..) | Outcome::Incomplete) => {
            prop_assert!(
                we_are_stricter(error, protocol),
                "we rejected {:?} with {:?}, oracle: {:?}",
                String::from_utf8_lossy(input),
                error,
                oracle_outcome
            );
            false
        }
        (Outcome::Incomplete, Outcome::Error(oracle_error)) => {
            // The oracle validates some fields before the frame is complete (verbatim format,
            // map keys, RESP3 types in RESP2): completing the input must make us disagree for
            // one of the reasons above, which the complete-frame cases check.
            prop_assert!(
                oracle_error.contains("format")
                    || oracle_error.contains("key")
                    || oracle_error.contains("hash")
                    || oracle_error.contains("frame type")
                    || oracle_error.contains("Invalid")
                    || oracle_error.contains("prefix")
                    || oracle_error.contains("utf-8"),
                "we wait on {:?}, oracle: {}",
                String::from_utf8_lossy(input),
                oracle_error
            );
            false
        }
        (Outcome::Value(..), Outcome::Incomplete) | (Outcome::Incomplete, Outcome::Value(..)) => {
            prop_assert!(
                false,
                "{:?}: we {:?}, oracle {:?}",
                String::from_utf8_lossy(input),
                ours_outcome,
                oracle_outcome
            );
            false
        }
    };
    Ok(agreed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(), ..ProptestConfig::default() })]

    #[test]
    fn valid_resp3_frames_decode_identically(reply in agreeable_reply()) {
        let encoded = reply.to_bytes(Protocol::Resp3);
        prop_assert!(check(&encoded, Protocol::Resp3)?, "disagreed on {:?}", reply);
        // Every proper prefix is incomplete for both.
        for cut in [1, encoded.len() / 2, encoded.len() - 1] {
            prop_assert_eq!(ours(&encoded[..cut]), Outcome::Incomplete);
            prop_assert_eq!(oracle(&encoded[..cut], Protocol::Resp3), Outcome::Incomplete);
        }
    }

    #[test]
    fn valid_resp2_frames_decode_identically(reply in resp2_reply()) {
        let encoded = reply.to_bytes(Protocol::Resp2);
        prop_assert!(check(&encoded, Protocol::Resp2)?, "disagreed on {:?}", reply);
    }

    #[test]
    fn corrupted_frames_agree_or_differ_only_by_design(
        reply in agreeable_reply(),
        protocol in prop_oneof![Just(Protocol::Resp2), Just(Protocol::Resp3)],
        edits in edit_strategy(),
    ) {
        let input = mutate(&reply.to_bytes(protocol), &edits);
        check(&input, protocol)?;
    }
}

/// Guards against a vacuous corrupted-frame test: most corrupted inputs must still get the
/// same outcome from both decoders (not just an excused disagreement).
#[test]
fn corrupted_frames_mostly_agree_exactly() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = (agreeable_reply(), edit_strategy());
    let (mut agreed, total) = (0, 400);
    for _ in 0..total {
        let (reply, edits) = strategy.new_tree(&mut runner).unwrap().current();
        let input = mutate(&reply.to_bytes(Protocol::Resp3), &edits);
        if check(&input, Protocol::Resp3).unwrap() {
            agreed += 1;
        }
    }
    assert!(
        agreed * 2 > total,
        "only {agreed} of {total} corrupted inputs agreed exactly"
    );
}
