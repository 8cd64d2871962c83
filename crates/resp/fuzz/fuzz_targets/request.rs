//! Arbitrary bytes into the request parser, fed whole and in chunks.
//!
//! Asserts: no panic; a returned command consumed between 1 byte and what was buffered and has
//! at least one argument whose total size is bounded by the bytes consumed; the parser never
//! grows the buffer; feeding in chunks gives the same commands and outcome as feeding whole.
//! The first input byte picks the chunk size and small limits, so limit paths are reached.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use prefixkv_resp::{Limits, ProtocolError, RequestParser};

type Outcome = (Vec<Vec<Vec<u8>>>, Result<usize, ProtocolError>);

fn run(input: &[u8], chunk_len: usize, limits: Limits) -> Outcome {
    let mut parser = RequestParser::new(limits);
    let mut buffer = BytesMut::new();
    let mut commands = Vec::new();
    for chunk in input.chunks(chunk_len.max(1)) {
        buffer.extend_from_slice(chunk);
        loop {
            let before_len = buffer.len();
            let before_capacity = buffer.capacity();
            match parser.parse(&mut buffer) {
                Ok(Some(command)) => {
                    let consumed = before_len - buffer.len();
                    assert!(consumed >= 1 && consumed <= before_len);
                    assert!(!command.args.is_empty());
                    let argument_bytes: usize = command.args.iter().map(|arg| arg.len()).sum();
                    assert!(argument_bytes <= consumed);
                    commands.push(command.args.iter().map(|arg| arg.to_vec()).collect());
                }
                Ok(None) => {
                    assert!(buffer.len() <= before_len);
                    assert!(buffer.capacity() <= before_capacity);
                    break;
                }
                Err(error) => return (commands, Err(error)),
            }
        }
    }
    (commands, Ok(buffer.len()))
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
            ..Limits::default()
        }
    } else {
        Limits::default()
    };
    let chunk_len = usize::from(control & 0x7f) + 1;
    let whole = run(input, input.len(), limits);
    let split = run(input, chunk_len, limits);
    assert_eq!(whole, split);
});
