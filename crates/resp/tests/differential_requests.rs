//! Differential test of the request parser against `redis-protocol`'s RESP2 decoder.
//!
//! A multibulk request is a RESP2 array of bulk strings, so for input starting with `*` the two
//! must agree: where the oracle decodes an array of bulk strings, we return the same arguments
//! after consuming the same bytes; where it needs more bytes, so do we; where it fails, we fail.
//! Deliberate differences (ours is the stricter side, matching Redis): lengths in Redis's strict
//! integer syntax, the CRLF after a payload is checked, and a request element that is not a bulk
//! string (`:1`, `$-1`, a nested array) is an error for us, a value for the oracle. A request
//! with a count of zero or less is skipped by us (as by Redis) and not compared.

mod common;

use bytes::{Bytes, BytesMut};
use common::*;
use prefixkv_resp::{Encoder, Limits, Protocol, ProtocolError, RequestParser};
use proptest::prelude::*;
use redis_protocol::resp2::types::OwnedFrame;

#[derive(Debug, PartialEq)]
enum Outcome<E> {
    Command(Vec<Vec<u8>>, usize),
    Incomplete,
    Error(E),
}

fn ours(input: &[u8]) -> Outcome<ProtocolError> {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::from(input);
    match parser.parse(&mut buffer) {
        Ok(Some(command)) => Outcome::Command(
            command.args.iter().map(|arg| arg.to_vec()).collect(),
            input.len() - buffer.len(),
        ),
        Ok(None) => Outcome::Incomplete,
        Err(error) => Outcome::Error(error),
    }
}

/// The oracle's view, or `None` when it decodes something that is not a request (an empty
/// array, a null, an array holding other types): then only our being an error is checked.
fn oracle(input: &[u8]) -> Option<Outcome<String>> {
    match redis_protocol::resp2::decode::decode(input) {
        Ok(Some((OwnedFrame::Array(elements), len))) if !elements.is_empty() => {
            let mut args = Vec::new();
            for element in elements {
                match element {
                    OwnedFrame::BulkString(bytes) => args.push(bytes),
                    _ => return None,
                }
            }
            Some(Outcome::Command(args, len))
        }
        Ok(Some(_)) => None,
        Ok(None) => Some(Outcome::Incomplete),
        Err(error) => Some(Outcome::Error(format!("{error:?}"))),
    }
}

fn stricter(error: &ProtocolError) -> bool {
    matches!(
        error,
        ProtocolError::ExpectedCrlf
            | ProtocolError::InvalidBulkLength
            | ProtocolError::InvalidMultibulkLength
            | ProtocolError::ExpectedDollar(_)
    )
}

fn request_bytes(commands: &[Vec<Bytes>]) -> Vec<u8> {
    let encoder = Encoder::new(Protocol::Resp2);
    let mut wire = BytesMut::new();
    for args in commands {
        encoder.array_header(&mut wire, args.len());
        args.iter()
            .for_each(|arg| encoder.bulk_string(&mut wire, arg));
    }
    wire.to_vec()
}

fn empty_request_header(input: &[u8]) -> bool {
    let Some(line_end) = input.windows(2).position(|pair| pair == b"\r\n") else {
        return false;
    };
    std::str::from_utf8(&input[1..line_end])
        .ok()
        .and_then(|count| count.parse::<i64>().ok())
        .is_some_and(|count| count <= 0)
}

fn check(input: &[u8]) -> Result<bool, TestCaseError> {
    if input.first() != Some(&b'*') {
        return Ok(false);
    }
    if empty_request_header(input) {
        // `*0`, `*-1`, `*-5`: Redis (and we) skip the request and parse what follows as the
        // next one; the oracle has no such notion.
        return Ok(false);
    }
    let ours = ours(input);
    let Some(oracle) = oracle(input) else {
        // Not a request for the oracle: an empty request (skipped by us, like Redis) or
        // elements other than bulk strings (an error for us).
        let empty_request = matches!(
            redis_protocol::resp2::decode::decode(input),
            Ok(Some((OwnedFrame::Array(ref elements), _))) if elements.is_empty()
        ) || matches!(
            redis_protocol::resp2::decode::decode(input),
            Ok(Some((OwnedFrame::Null, _)))
        );
        prop_assert!(
            empty_request || matches!(ours, Outcome::Error(_)),
            "{:?}: we {:?}",
            String::from_utf8_lossy(input),
            ours
        );
        return Ok(false);
    };
    match (&ours, &oracle) {
        (Outcome::Command(a, a_len), Outcome::Command(b, b_len)) => {
            prop_assert_eq!((a, a_len), (b, b_len));
            Ok(true)
        }
        (Outcome::Incomplete, Outcome::Incomplete) | (Outcome::Error(_), Outcome::Error(_)) => {
            Ok(true)
        }
        (Outcome::Error(error), _) if stricter(error) => Ok(false),
        _ => {
            prop_assert!(
                false,
                "{:?}: we {:?}, oracle {:?}",
                String::from_utf8_lossy(input),
                ours,
                oracle
            );
            Ok(false)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(), ..ProptestConfig::default() })]

    #[test]
    fn valid_requests_parse_like_the_oracle(
        commands in proptest::collection::vec(proptest::collection::vec(bytes_strategy(30), 1..6), 1..3),
    ) {
        let input = request_bytes(&commands);
        prop_assert!(check(&input)?);
        for cut in 1..input.len().min(40) {
            prop_assert!(check(&input[..cut])?);
        }
    }

    #[test]
    fn corrupted_requests_agree_or_we_are_stricter(
        commands in proptest::collection::vec(proptest::collection::vec(bytes_strategy(30), 1..6), 1..3),
        edits in edit_strategy(),
    ) {
        check(&mutate(&request_bytes(&commands), &edits))?;
    }
}
