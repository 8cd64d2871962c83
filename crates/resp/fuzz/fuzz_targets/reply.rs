//! Arbitrary bytes into the reply decoder, fed whole and in chunks.
//!
//! Asserts: no panic; a decoded reply consumed between 1 byte and what was buffered; feeding in
//! chunks gives the same replies and outcome as feeding whole; re-encoding a decoded reply in
//! RESP3 and decoding that gives a reply whose RESP3 encoding is the same bytes (encoding is
//! stable after one normalisation).

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use prefixkv_resp::{parse_reply, Limits, Protocol, ProtocolError, ReplyParser};

/// Replies as their RESP3 encodings (so NaN compares equal to itself).
type Outcome = (Vec<Vec<u8>>, Result<usize, ProtocolError>);

/// Feeds `input` in chunks of `chunk_len` to a resuming `ReplyParser`, or (`stateless`) to
/// `parse_reply`, so comparing the two runs also compares the two decoders.
fn run(input: &[u8], chunk_len: usize, limits: Limits, stateless: bool) -> Outcome {
    let mut parser = ReplyParser::new(limits);
    let mut buffer = BytesMut::new();
    let mut replies = Vec::new();
    for chunk in input.chunks(chunk_len.max(1)) {
        buffer.extend_from_slice(chunk);
        loop {
            let before_len = buffer.len();
            let result = if stateless {
                parse_reply(&mut buffer, limits)
            } else {
                parser.parse(&mut buffer)
            };
            match result {
                Ok(Some(reply)) => {
                    let consumed = before_len - buffer.len();
                    assert!(consumed >= 1 && consumed <= before_len);
                    let encoded = reply.to_bytes(Protocol::Resp3);
                    let mut again = encoded.clone();
                    let decoded = parse_reply(&mut again, Limits::default())
                        .expect("our own encoding decodes")
                        .expect("our own encoding is complete");
                    assert!(again.is_empty());
                    assert_eq!(decoded.to_bytes(Protocol::Resp3), encoded);
                    // RESP2 encoding of anything decoded must decode too.
                    let mut resp2 = reply.to_bytes(Protocol::Resp2);
                    assert!(parse_reply(&mut resp2, Limits::default())
                        .expect("RESP2 decodes")
                        .is_some());
                    replies.push(encoded.to_vec());
                }
                Ok(None) => {
                    assert_eq!(buffer.len(), before_len);
                    break;
                }
                Err(error) => return (replies, Err(error)),
            }
        }
    }
    (replies, Ok(buffer.len()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let limits = if control & 0x80 != 0 {
        Limits {
            proto_max_bulk_len: 64,
            max_multibulk_len: 8,
            max_inline_len: 32,
            max_nesting_depth: 4,
        }
    } else {
        Limits::default()
    };
    let chunk_len = usize::from(control & 0x7f) + 1;
    let whole = run(input, input.len(), limits, true);
    let split = run(input, chunk_len, limits, false);
    assert_eq!(whole, split);
});
