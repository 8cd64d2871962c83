//! Request parser: every accepted form and every error path, plus incremental feeding.

use bytes::{Bytes, BytesMut};
use prefixkv_resp::{Command, Limits, ProtocolError, RequestParser};

fn args(command: &Command) -> Vec<&[u8]> {
    command.args.iter().map(|arg| &arg[..]).collect()
}

/// Parses everything in `input`, returning the commands and the final outcome (`Ok` with the
/// bytes left over, or the error).
fn parse_all(input: &[u8], limits: Limits) -> (Vec<Vec<Vec<u8>>>, Result<usize, ProtocolError>) {
    let mut parser = RequestParser::new(limits);
    let mut buffer = BytesMut::from(input);
    let mut commands = Vec::new();
    loop {
        match parser.parse(&mut buffer) {
            Ok(Some(command)) => commands.push(command.args.iter().map(|a| a.to_vec()).collect()),
            Ok(None) => return (commands, Ok(buffer.len())),
            Err(error) => return (commands, Err(error)),
        }
    }
}

fn error_of(input: &[u8], limits: Limits) -> ProtocolError {
    parse_all(input, limits)
        .1
        .expect_err("expected a protocol error")
}

#[test]
fn multibulk_set() {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer =
        BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n*1\r\n$4\r\nPING\r\n"[..]);
    let command = parser.parse(&mut buffer).unwrap().unwrap();
    assert_eq!(args(&command), [&b"SET"[..], b"key", b"value"]);
    assert_eq!(command.name(), b"SET");
    assert_eq!(
        &buffer[..],
        b"*1\r\n$4\r\nPING\r\n",
        "consumes exactly one command"
    );
    let command = parser.parse(&mut buffer).unwrap().unwrap();
    assert_eq!(args(&command), [&b"PING"[..]]);
    assert!(buffer.is_empty());
    assert_eq!(parser.parse(&mut buffer), Ok(None));
}

#[test]
fn binary_and_empty_arguments() {
    let (commands, rest) = parse_all(
        b"*3\r\n$0\r\n\r\n$2\r\n\r\n\r\n$3\r\n\0\xff*\r\n",
        Limits::default(),
    );
    assert_eq!(
        commands,
        vec![vec![b"".to_vec(), b"\r\n".to_vec(), b"\0\xff*".to_vec()]]
    );
    assert_eq!(rest, Ok(0));
}

#[test]
fn arguments_are_zero_copy_slices_of_the_buffer() {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"[..]);
    let start = buffer.as_ptr() as usize;
    let command = parser.parse(&mut buffer).unwrap().unwrap();
    assert_eq!(command.args[0].as_ptr() as usize, start + 8);
    assert_eq!(command.args[1].as_ptr() as usize, start + 17);
}

#[test]
fn empty_multibulk_requests_are_skipped() {
    let (commands, rest) = parse_all(
        b"*0\r\n*-1\r\n*-7\r\n*1\r\n$4\r\nPING\r\n",
        Limits::default(),
    );
    assert_eq!(commands, vec![vec![b"PING".to_vec()]]);
    assert_eq!(rest, Ok(0));
}

#[test]
fn inline_commands() {
    let (commands, rest) = parse_all(
        b"PING\r\nset k \"a b\"\n\r\n   \nget 'x'\r\nECHO",
        Limits::default(),
    );
    assert_eq!(
        commands,
        vec![
            vec![b"PING".to_vec()],
            vec![b"set".to_vec(), b"k".to_vec(), b"a b".to_vec()],
            vec![b"get".to_vec(), b"x".to_vec()],
        ]
    );
    assert_eq!(rest, Ok(4), "an unterminated inline line waits");
}

#[test]
fn inline_and_multibulk_interleave() {
    let (commands, _) = parse_all(b"PING\n*1\r\n$4\r\nPING\r\nPING\n", Limits::default());
    assert_eq!(commands.len(), 3);
}

#[test]
fn multibulk_length_errors() {
    let limits = Limits {
        max_multibulk_len: 10,
        ..Limits::default()
    };
    for input in [
        &b"*x\r\n"[..],
        b"*\r\n",
        b"*+1\r\n",
        b"*01\r\n",
        b"*-0\r\n",
        b"*11\r\n",
        b"*99999999999999999999\r\n",
    ] {
        assert_eq!(
            error_of(input, limits),
            ProtocolError::InvalidMultibulkLength,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert_eq!(
        parse_all(b"*10\r\n", limits).1,
        Ok(5),
        "the limit itself is accepted"
    );
}

#[test]
fn bulk_length_errors() {
    let limits = Limits {
        proto_max_bulk_len: 100,
        ..Limits::default()
    };
    for input in [
        &b"*1\r\n$x\r\n"[..],
        b"*1\r\n$\r\n",
        b"*1\r\n$-1\r\n",
        b"*1\r\n$-5\r\n",
        b"*1\r\n$101\r\n",
        b"*1\r\n$01\r\n",
    ] {
        assert_eq!(
            error_of(input, limits),
            ProtocolError::InvalidBulkLength,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert_eq!(parse_all(b"*1\r\n$100\r\n", limits).1, Ok(10));
}

#[test]
fn expected_dollar() {
    let error = error_of(b"*2\r\n$3\r\nGET\r\n:3\r\n", Limits::default());
    assert_eq!(error, ProtocolError::ExpectedDollar(b':'));
    assert_eq!(
        error.to_string(),
        "ERR Protocol error: expected '$', got ':'"
    );
}

#[test]
fn missing_crlf_is_rejected() {
    assert_eq!(
        error_of(b"*1\r\n$3\r\nGETxx", Limits::default()),
        ProtocolError::ExpectedCrlf
    );
    assert_eq!(
        error_of(b"*1\rx", Limits::default()),
        ProtocolError::ExpectedCrlf
    );
    assert_eq!(
        error_of(b"*1\r\n$3\rx", Limits::default()),
        ProtocolError::ExpectedCrlf
    );
}

#[test]
fn too_big_lines() {
    let limits = Limits {
        max_inline_len: 16,
        ..Limits::default()
    };
    let long_line = [b'a'; 17];
    assert_eq!(error_of(&long_line, limits), ProtocolError::TooBigInline);
    let mut with_newline = long_line.to_vec();
    with_newline.push(b'\n');
    assert_eq!(error_of(&with_newline, limits), ProtocolError::TooBigInline);
    // Exactly the limit is fine, with or without its newline yet.
    assert_eq!(parse_all(&[b'a'; 16], limits).1, Ok(16));
    assert_eq!(parse_all(b"aaaaaaaaaaaaaaaa\n", limits).0.len(), 1);

    let mut count_line = b"*".to_vec();
    count_line.extend([b'1'; 17]);
    assert_eq!(
        error_of(&count_line, limits),
        ProtocolError::TooBigMultibulkCount
    );
    let mut bulk_line = b"*1\r\n$".to_vec();
    bulk_line.extend([b'1'; 17]);
    assert_eq!(error_of(&bulk_line, limits), ProtocolError::TooBigBulkCount);
}

#[test]
fn unbalanced_quotes() {
    let error = error_of(b"set k \"abc\r\n", Limits::default());
    assert_eq!(error, ProtocolError::UnbalancedQuotes);
    assert_eq!(
        error.to_string(),
        "ERR Protocol error: unbalanced quotes in request"
    );
}

#[test]
fn errors_are_sticky() {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::from(&b"*x\r\n"[..]);
    assert!(parser.parse(&mut buffer).is_err());
    buffer.clear();
    buffer.extend_from_slice(b"PING\r\n");
    assert_eq!(
        parser.parse(&mut buffer),
        Err(ProtocolError::InvalidMultibulkLength)
    );
}

#[test]
fn redis_error_texts() {
    let cases = [
        (
            ProtocolError::InvalidMultibulkLength,
            "ERR Protocol error: invalid multibulk length",
        ),
        (
            ProtocolError::InvalidBulkLength,
            "ERR Protocol error: invalid bulk length",
        ),
        (
            ProtocolError::TooBigInline,
            "ERR Protocol error: too big inline request",
        ),
        (
            ProtocolError::TooBigMultibulkCount,
            "ERR Protocol error: too big mbulk count string",
        ),
        (
            ProtocolError::TooBigBulkCount,
            "ERR Protocol error: too big bulk count string",
        ),
        (
            ProtocolError::ExpectedDollar(b'x'),
            "ERR Protocol error: expected '$', got 'x'",
        ),
        (
            ProtocolError::UnbalancedQuotes,
            "ERR Protocol error: unbalanced quotes in request",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
}

#[test]
fn byte_at_a_time_gives_the_same_commands() {
    let input: &[u8] =
        b"*3\r\n$3\r\nSET\r\n$10\r\nkey:000001\r\n$4\r\n\r\n\r\n\r\nPING\r\nset a \"b\\x41\"\n*0\r\n*1\r\n$4\r\nQUIT\r\n";
    let (expected, _) = parse_all(input, Limits::default());
    assert_eq!(expected.len(), 4);
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::new();
    let mut commands = Vec::new();
    for &byte in input {
        buffer.extend_from_slice(&[byte]);
        while let Some(command) = parser.parse(&mut buffer).unwrap() {
            commands.push(command.args.iter().map(|a| a.to_vec()).collect::<Vec<_>>());
        }
    }
    assert_eq!(commands, expected);
    assert!(!parser.is_mid_request());
}

#[test]
fn large_bulk_waits_without_consuming() {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$100000\r\n"[..]);
    assert_eq!(parser.parse(&mut buffer), Ok(None));
    assert!(parser.is_mid_request());
    let value = vec![b'v'; 100_000];
    for chunk in value.chunks(4096) {
        assert_eq!(parser.parse(&mut buffer), Ok(None));
        buffer.extend_from_slice(chunk);
    }
    assert_eq!(parser.parse(&mut buffer), Ok(None), "CRLF still missing");
    buffer.extend_from_slice(b"\r\n");
    let command = parser.parse(&mut buffer).unwrap().unwrap();
    assert_eq!(command.args[1], Bytes::from(value));
    assert!(buffer.is_empty());
}

#[test]
fn many_arguments_fed_in_small_reads() {
    let arguments = 100_000;
    let mut wire = format!("*{}\r\n", arguments + 1).into_bytes();
    wire.extend_from_slice(b"$4\r\nMSET\r\n");
    for index in 0..arguments {
        let argument = format!("k{index}");
        wire.extend_from_slice(format!("${}\r\n{argument}\r\n", argument.len()).as_bytes());
    }
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::new();
    let mut commands = Vec::new();
    // 5-byte reads: the parser resumes where it stopped instead of re-parsing the request.
    for chunk in wire.chunks(5) {
        buffer.extend_from_slice(chunk);
        while let Some(command) = parser.parse(&mut buffer).unwrap() {
            commands.push(command);
        }
    }
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0].args.len(), arguments + 1);
    assert_eq!(
        &commands[0].args[arguments][..],
        format!("k{}", arguments - 1).as_bytes()
    );
}
