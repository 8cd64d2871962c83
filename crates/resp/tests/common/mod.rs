//! Generators and helpers shared by the property tests.

#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use prefixkv_resp::{
    format_double, parse_reply, Encoder, Limits, Protocol, ProtocolError, Reply, ReplyParser,
    RequestParser,
};
use proptest::prelude::*;

pub fn bytes_strategy(max_len: usize) -> impl Strategy<Value = Bytes> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..max_len),
        "[a-zA-Z0-9 :_\r\n-]{0,12}".prop_map(String::into_bytes),
    ]
    .prop_map(Bytes::from)
}

fn double_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("NaN never compares equal", |value| !value.is_nan()),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        (-1_000_000i64..1_000_000).prop_map(|value| value as f64 / 8.0),
    ]
}

/// Any reply value (NaN excluded, since it never equals itself).
pub fn reply_strategy() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        bytes_strategy(16).prop_map(Reply::SimpleString),
        bytes_strategy(16).prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        bytes_strategy(40).prop_map(Reply::BulkString),
        Just(Reply::NullBulkString),
        Just(Reply::NullArray),
        Just(Reply::Null),
        double_strategy().prop_map(Reply::Double),
        any::<bool>().prop_map(Reply::Boolean),
        (any::<[u8; 3]>(), bytes_strategy(20))
            .prop_map(|(format, text)| Reply::VerbatimString { format, text }),
        "-?[0-9]{1,40}".prop_map(|digits| Reply::BigNumber(Bytes::from(digits))),
        bytes_strategy(20).prop_map(Reply::BlobError),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Reply::Array),
            proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Reply::Map),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Reply::Set),
            proptest::collection::vec(inner, 0..6).prop_map(Reply::Push),
        ]
    })
}

fn sanitized(text: &Bytes) -> Bytes {
    text.iter()
        .map(|&byte| {
            if byte == b'\r' || byte == b'\n' {
                b' '
            } else {
                byte
            }
        })
        .collect::<Vec<u8>>()
        .into()
}

/// What decoding `reply`'s encoding in `protocol` must give back.
pub fn expected_after_round_trip(reply: &Reply, protocol: Protocol) -> Reply {
    let map_all = |elements: &[Reply]| -> Vec<Reply> {
        elements
            .iter()
            .map(|element| expected_after_round_trip(element, protocol))
            .collect()
    };
    match (reply, protocol) {
        (Reply::SimpleString(text), _) => Reply::SimpleString(sanitized(text)),
        (Reply::Error(text), _) => Reply::Error(sanitized(text)),
        (Reply::Array(elements), _) => Reply::Array(map_all(elements)),
        (Reply::NullBulkString | Reply::NullArray, Protocol::Resp3) => Reply::Null,
        (Reply::Null, Protocol::Resp2) => Reply::NullBulkString,
        (Reply::Map(pairs), Protocol::Resp3) => Reply::Map(
            pairs
                .iter()
                .map(|(key, value)| {
                    (
                        expected_after_round_trip(key, protocol),
                        expected_after_round_trip(value, protocol),
                    )
                })
                .collect(),
        ),
        (Reply::Map(pairs), Protocol::Resp2) => Reply::Array(
            pairs
                .iter()
                .flat_map(|(key, value)| [key, value])
                .map(|element| expected_after_round_trip(element, protocol))
                .collect(),
        ),
        (Reply::Set(elements), Protocol::Resp3) => Reply::Set(map_all(elements)),
        (Reply::Push(elements), Protocol::Resp3) => Reply::Push(map_all(elements)),
        (Reply::Set(elements) | Reply::Push(elements), Protocol::Resp2) => {
            Reply::Array(map_all(elements))
        }
        (Reply::Double(value), Protocol::Resp2) => {
            Reply::BulkString(Bytes::from(format_double(*value)))
        }
        (Reply::Boolean(value), Protocol::Resp2) => Reply::Integer(i64::from(*value)),
        (Reply::VerbatimString { text, .. }, Protocol::Resp2) => Reply::BulkString(text.clone()),
        (Reply::BigNumber(digits), Protocol::Resp2) => Reply::BulkString(digits.clone()),
        (Reply::BlobError(text), Protocol::Resp2) => Reply::Error(sanitized(text)),
        (other, _) => other.clone(),
    }
}

/// Limits generous enough for every generated value.
pub fn test_limits() -> Limits {
    Limits::default()
}

/// Decodes replies from `input` fed in chunks ending at `cuts` (sorted offsets), until the
/// input is exhausted or an error. Returns the replies and the outcome (bytes left, or error).
/// Fed whole (no cuts) it uses the stateless `parse_reply`; split, a resuming `ReplyParser`,
/// so comparing the two also compares the two decoders.
pub fn decode_replies_in_chunks(
    input: &[u8],
    cuts: &[usize],
) -> (Vec<Reply>, Result<usize, ProtocolError>) {
    let mut parser = ReplyParser::new(test_limits());
    let stateless = cuts.is_empty();
    let mut buffer = BytesMut::new();
    let mut replies = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(fed, input.len());
        buffer.extend_from_slice(&input[fed..cut]);
        fed = cut;
        loop {
            let result = if stateless {
                parse_reply(&mut buffer, test_limits())
            } else {
                parser.parse(&mut buffer)
            };
            match result {
                Ok(Some(reply)) => replies.push(reply),
                Ok(None) => break,
                Err(error) => return (replies, Err(error)),
            }
        }
    }
    (replies, Ok(buffer.len()))
}

/// Same for requests.
pub fn parse_requests_in_chunks(
    input: &[u8],
    cuts: &[usize],
    limits: Limits,
) -> (Vec<Vec<Bytes>>, Result<usize, ProtocolError>) {
    let mut parser = RequestParser::new(limits);
    let mut buffer = BytesMut::new();
    let mut commands = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(fed, input.len());
        buffer.extend_from_slice(&input[fed..cut]);
        fed = cut;
        loop {
            match parser.parse(&mut buffer) {
                Ok(Some(command)) => commands.push(command.args),
                Ok(None) => break,
                Err(error) => return (commands, Err(error)),
            }
        }
    }
    (commands, Ok(buffer.len()))
}

pub fn encode_all(replies: &[Reply], protocol: Protocol) -> BytesMut {
    let encoder = Encoder::new(protocol);
    let mut out = BytesMut::new();
    replies
        .iter()
        .for_each(|reply| encoder.reply(&mut out, reply));
    out
}

/// Sorted cut points within `0..=len`.
pub fn cuts_strategy() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(0usize..400, 0..12).prop_map(|mut cuts| {
        cuts.sort_unstable();
        cuts
    })
}

/// Random small edits of `input`: flip, insert or delete bytes.
pub fn mutate(input: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut output = input.to_vec();
    for &(position, kind, byte) in edits {
        if output.is_empty() {
            output.push(byte);
            continue;
        }
        let position = position % (output.len() + 1);
        match kind % 3 {
            0 if position < output.len() => output[position] = byte,
            1 => output.insert(position, byte),
            _ if position < output.len() => {
                output.remove(position);
            }
            _ => output.push(byte),
        }
    }
    output
}

/// Bytes likely to matter to a RESP parser, to make mutations interesting.
pub fn edit_strategy() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    let byte = prop_oneof![
        any::<u8>(),
        proptest::sample::select(b"\r\n*$+-:_,#(=!%~>|?0123456789 \"'\\x".to_vec()),
    ];
    proptest::collection::vec((any::<usize>(), any::<u8>(), byte), 1..4)
}

/// Cases per property: `PROPTEST_CASES` from the environment, 512 by default.
pub fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(512)
}
