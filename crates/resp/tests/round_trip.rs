//! Property tests: encode then decode gives the value back (modulo the documented RESP2/RESP3
//! mappings), and feeding any byte stream split at any points gives the same results as
//! feeding it whole, for valid and for corrupted input alike.

mod common;

use bytes::Bytes;
use common::*;
use prefixkv_resp::{Encoder, Limits, Protocol, Reply};
use proptest::prelude::*;

fn protocol_strategy() -> impl Strategy<Value = Protocol> {
    prop_oneof![Just(Protocol::Resp2), Just(Protocol::Resp3)]
}

/// A request argument list and its inline spelling with Redis's double-quote escapes.
fn quote_inline(args: &[Bytes]) -> Vec<u8> {
    let mut line = Vec::new();
    for arg in args {
        line.push(b'"');
        for &byte in arg.iter() {
            match byte {
                b'"' | b'\\' => line.extend_from_slice(&[b'\\', byte]),
                b' '..=b'~' => line.push(byte),
                _ => line.extend_from_slice(format!("\\x{byte:02x}").as_bytes()),
            }
        }
        line.extend_from_slice(b"\" ");
    }
    line.extend_from_slice(b"\r\n");
    line
}

fn command_strategy() -> impl Strategy<Value = Vec<Bytes>> {
    proptest::collection::vec(bytes_strategy(24), 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(), ..ProptestConfig::default() })]

    #[test]
    fn reply_round_trip(replies in proptest::collection::vec(reply_strategy(), 1..4),
                        protocol in protocol_strategy(),
                        cuts in cuts_strategy()) {
        let encoded = encode_all(&replies, protocol);
        let expected: Vec<Reply> =
            replies.iter().map(|reply| expected_after_round_trip(reply, protocol)).collect();
        let (whole, outcome) = decode_replies_in_chunks(&encoded, &[]);
        prop_assert_eq!(&whole, &expected);
        prop_assert_eq!(outcome, Ok(0));
        let (split, outcome) = decode_replies_in_chunks(&encoded, &cuts);
        prop_assert_eq!(&split, &expected);
        prop_assert_eq!(outcome, Ok(0));
    }

    #[test]
    fn request_round_trip(commands in proptest::collection::vec((command_strategy(), any::<bool>()), 1..6),
                          cuts in cuts_strategy()) {
        let encoder = Encoder::new(Protocol::Resp2);
        let mut wire = bytes::BytesMut::new();
        for (args, inline) in &commands {
            if *inline {
                wire.extend_from_slice(&quote_inline(args));
            } else {
                encoder.array_header(&mut wire, args.len());
                args.iter().for_each(|arg| encoder.bulk_string(&mut wire, arg));
            }
        }
        let expected: Vec<Vec<Bytes>> = commands.into_iter().map(|(args, _)| args).collect();
        let (parsed, outcome) = parse_requests_in_chunks(&wire, &cuts, Limits::default());
        prop_assert_eq!(parsed, expected);
        prop_assert_eq!(outcome, Ok(0));
    }

    #[test]
    fn corrupted_replies_split_anywhere_decode_the_same(
        replies in proptest::collection::vec(reply_strategy(), 1..3),
        protocol in protocol_strategy(),
        edits in edit_strategy(),
        cuts in cuts_strategy(),
    ) {
        let input = mutate(&encode_all(&replies, protocol), &edits);
        let whole = decode_replies_in_chunks(&input, &[]);
        let split = decode_replies_in_chunks(&input, &cuts);
        prop_assert_eq!(nan_free(whole), nan_free(split));
    }

    #[test]
    fn corrupted_requests_split_anywhere_parse_the_same(
        commands in proptest::collection::vec(command_strategy(), 1..4),
        inline in any::<bool>(),
        edits in edit_strategy(),
        cuts in cuts_strategy(),
        max_inline_len in prop_oneof![Just(Limits::DEFAULT_MAX_INLINE_LEN), 1usize..40],
    ) {
        let encoder = Encoder::new(Protocol::Resp2);
        let mut wire = bytes::BytesMut::new();
        for args in &commands {
            if inline {
                wire.extend_from_slice(&quote_inline(args));
            } else {
                encoder.array_header(&mut wire, args.len());
                args.iter().for_each(|arg| encoder.bulk_string(&mut wire, arg));
            }
        }
        let input = mutate(&wire, &edits);
        let limits = Limits { max_inline_len, proto_max_bulk_len: 30, max_multibulk_len: 5, ..Limits::default() };
        let whole = parse_requests_in_chunks(&input, &[], limits);
        let split = parse_requests_in_chunks(&input, &cuts, limits);
        prop_assert_eq!(&whole, &split);
        let reused = parse_requests_into_in_chunks(&input, &cuts, limits);
        prop_assert_eq!(&whole, &reused);
    }
}

/// [`parse_requests_in_chunks`] with `parse_into` and one argument list reused for every
/// command (left dirty between calls, as a connection's recycled lists are not).
fn parse_requests_into_in_chunks(
    input: &[u8],
    cuts: &[usize],
    limits: Limits,
) -> (Vec<Vec<Bytes>>, Result<usize, prefixkv_resp::ProtocolError>) {
    let mut parser = prefixkv_resp::RequestParser::new(limits);
    let mut buffer = bytes::BytesMut::new();
    let mut args = vec![Bytes::from_static(b"stale")];
    let mut commands = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(fed, input.len());
        buffer.extend_from_slice(&input[fed..cut]);
        fed = cut;
        loop {
            match parser.parse_into(&mut buffer, &mut args) {
                Ok(true) => commands.push(args.clone()),
                Ok(false) => {
                    assert!(args.is_empty(), "an incomplete request leaves no arguments");
                    break;
                }
                Err(error) => {
                    assert!(args.is_empty(), "an error leaves no arguments");
                    return (commands, Err(error));
                }
            }
        }
    }
    (commands, Ok(buffer.len()))
}

/// Debug text of a decode outcome, so that a NaN produced by a mutation compares equal.
fn nan_free<T: std::fmt::Debug>(value: T) -> String {
    format!("{value:?}")
}
