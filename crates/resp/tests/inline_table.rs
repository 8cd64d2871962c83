//! Inline commands and protocol errors against a table of Redis's own behaviour.
//!
//! Every row was recorded from Redis 7.0.15 (Debian 12's `redis-server`) by sending
//! `RPUSH t <line>` inline and reading back `LRANGE t 0 -1`, or by sending the raw bytes and
//! reading the error reply. Rows where we deliberately differ say so.

use bytes::BytesMut;
use prefixkv_resp::{Limits, ProtocolError, RequestParser};

const UNBALANCED: &str = "ERR Protocol error: unbalanced quotes in request";

/// The arguments Redis pushed, or its error text.
type RedisOutcome = Result<&'static [&'static [u8]], &'static str>;

/// (line after `RPUSH t `, what Redis did).
const INLINE_TABLE: &[(&[u8], RedisOutcome)] = &[
    (b"set  a\tb", Ok(&[b"set", b"a", b"b"])),
    (b"\"a b\" c", Ok(&[b"a b", b"c"])),
    (
        br#""\x41\x7a\n\r\t\b\a\q\"\\""#,
        Ok(&[b"Az\n\r\t\x08\x07q\"\\"]),
    ),
    (br#""\x4g""#, Ok(&[b"x4g"])),
    (br#""\xZZ""#, Ok(&[b"xZZ"])),
    (br#""\x00""#, Ok(&[b"\0"])),
    (br"'a\'b\n'", Ok(&[br"a'b\n"])),
    (br"'\x41'", Ok(&[br"\x41"])),
    (b"ab\"c d\" e", Ok(&[b"abc d", b"e"])),
    (b"\"\" x", Ok(&[b"", b"x"])),
    (b"'' x", Ok(&[b"", b"x"])),
    (b"x\"y\"", Ok(&[b"xy"])),
    (b"\x0bx", Ok(&[b"x"])),
    (b"a\x0bb", Ok(&[b"a\x0bb"])),
    (b"a\x0cb", Ok(&[b"a\x0cb"])),
    (b"\"a\"\x0bb", Ok(&[b"a", b"b"])),
    (b"a\rb", Ok(&[b"a", b"b"])),
    (b"\"abc", Err(UNBALANCED)),
    (b"'abc", Err(UNBALANCED)),
    (b"\"a\"b", Err(UNBALANCED)),
    (b"'a'b", Err(UNBALANCED)),
    (br#""abc\"#, Err(UNBALANCED)),
    (br#""x"'y'"#, Err(UNBALANCED)),
    (br"'\\'", Err(UNBALANCED)),
    (br#""\""#, Err(UNBALANCED)),
    // Redis never answers these (its `strchr` stops at the NUL, so the newline is never seen)
    // and closes the connection with this error once 64 KiB are buffered; we reply at once.
    (
        b"a\x00b c",
        Err("ERR Protocol error: too big inline request"),
    ),
    (
        b"\"a\x00\"",
        Err("ERR Protocol error: too big inline request"),
    ),
];

fn run(input: &[u8]) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::from(input);
    let mut commands = Vec::new();
    loop {
        match parser.parse(&mut buffer) {
            Ok(Some(command)) => {
                commands.push(command.args.iter().map(|arg| arg.to_vec()).collect())
            }
            Ok(None) => return (commands, None),
            Err(error) => return (commands, Some(error)),
        }
    }
}

#[test]
fn inline_lines_split_as_redis_splits_them() {
    for &(line, expected) in INLINE_TABLE {
        let mut input = b"RPUSH t ".to_vec();
        input.extend_from_slice(line);
        input.extend_from_slice(b"\r\n");
        let (commands, error) = run(&input);
        match expected {
            Ok(args) => {
                assert_eq!(error, None, "{:?}", String::from_utf8_lossy(line));
                let mut expected_args = vec![b"RPUSH".to_vec(), b"t".to_vec()];
                expected_args.extend(args.iter().map(|arg| arg.to_vec()));
                assert_eq!(
                    commands,
                    vec![expected_args],
                    "{:?}",
                    String::from_utf8_lossy(line)
                );
            }
            Err(text) => {
                assert!(commands.is_empty());
                assert_eq!(
                    error.map(|error| error.to_string()).as_deref(),
                    Some(text),
                    "{:?}",
                    String::from_utf8_lossy(line)
                );
            }
        }
    }
}

/// (raw bytes, Redis's reply: the commands it ran, or its protocol error).
#[test]
fn protocol_errors_match_redis() {
    let mut too_big_inline = vec![b'A'; 70_000];
    let mut too_big_count = b"*".to_vec();
    too_big_count.extend([b'1'; 70_000]);
    let mut too_big_bulk_count = b"*1\r\n$".to_vec();
    too_big_bulk_count.extend([b'1'; 70_000]);
    let cases: Vec<(&[u8], &str)> = vec![
        (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
        (
            b"*01\r\n$4\r\nPING\r\n",
            "ERR Protocol error: invalid multibulk length",
        ),
        (
            b"*3000000000\r\n",
            "ERR Protocol error: invalid multibulk length",
        ),
        (b"*1\r\n$x\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"),
        (
            b"*1\r\n$600000000\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (
            b"*1\r\n$+4\r\nPING\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (
            b"*1\r\n$04\r\nPING\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (b"*1\r\n:3\r\n", "ERR Protocol error: expected '$', got ':'"),
        (
            &too_big_inline,
            "ERR Protocol error: too big inline request",
        ),
        (
            &too_big_count,
            "ERR Protocol error: too big mbulk count string",
        ),
        (
            &too_big_bulk_count,
            "ERR Protocol error: too big bulk count string",
        ),
    ];
    for (input, text) in cases {
        let (commands, error) = run(input);
        assert!(commands.is_empty());
        assert_eq!(
            error.map(|error| error.to_string()).as_deref(),
            Some(text),
            "{:?}",
            String::from_utf8_lossy(&input[..input.len().min(20)])
        );
    }
    too_big_inline.truncate(65_536);
    assert_eq!(
        run(&too_big_inline),
        (vec![], None),
        "exactly 64 KiB still waits"
    );
}

#[test]
fn skipped_requests_match_redis() {
    // Redis answers a single +PONG to each of these.
    for input in [&b"*0\r\n*-5\r\nPING\r\n"[..], b"\r\n\nPING\n"] {
        assert_eq!(run(input), (vec![vec![b"PING".to_vec()]], None));
    }
}

#[test]
fn stricter_than_redis_on_crlf() {
    // Redis skips the two bytes after a payload or a header's `\r` without looking (it runs
    // `foo` then PING for the first input, PING for the second); we close the connection.
    for input in [
        &b"*1\r\n$3\r\nfooXY*1\r\n$4\r\nPING\r\n"[..],
        b"*1\rX$4\r\nPING\r\n",
    ] {
        assert_eq!(run(input), (vec![], Some(ProtocolError::ExpectedCrlf)));
    }
}
