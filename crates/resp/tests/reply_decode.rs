//! Reply decoder: every type, every error path, incremental feeding.

use bytes::{Bytes, BytesMut};
use prefixkv_resp::{parse_reply, Limits, ProtocolError, Reply};

fn decode(input: &[u8]) -> Result<Option<Reply>, ProtocolError> {
    decode_with(input, Limits::default())
}

fn decode_with(input: &[u8], limits: Limits) -> Result<Option<Reply>, ProtocolError> {
    let mut buffer = BytesMut::from(input);
    let result = parse_reply(&mut buffer, limits);
    if let Ok(Some(_)) = result {
        assert!(buffer.is_empty(), "left {:?}", buffer);
    }
    result
}

fn bulk(text: &str) -> Reply {
    Reply::bulk(text)
}

#[test]
fn every_type() {
    let cases: Vec<(&[u8], Reply)> = vec![
        (b"+OK\r\n", Reply::simple("OK")),
        (b"+\r\n", Reply::simple("")),
        (b"-ERR no\r\n", Reply::error("ERR no")),
        (b":0\r\n", Reply::Integer(0)),
        (b":-9223372036854775808\r\n", Reply::Integer(i64::MIN)),
        (b":+5\r\n", Reply::Integer(5)),
        (b"$3\r\nfoo\r\n", bulk("foo")),
        (b"$0\r\n\r\n", bulk("")),
        (b"$2\r\n\r\n\r\n", bulk("\r\n")),
        (b"$-1\r\n", Reply::NullBulkString),
        (b"*-1\r\n", Reply::NullArray),
        (b"_\r\n", Reply::Null),
        (b"*0\r\n", Reply::Array(vec![])),
        (
            b"*2\r\n:1\r\n*1\r\n$1\r\na\r\n",
            Reply::Array(vec![Reply::Integer(1), Reply::Array(vec![bulk("a")])]),
        ),
        (
            b"%1\r\n+k\r\n:1\r\n",
            Reply::Map(vec![(Reply::simple("k"), Reply::Integer(1))]),
        ),
        (b"%0\r\n", Reply::Map(vec![])),
        (
            b"~2\r\n:1\r\n:2\r\n",
            Reply::Set(vec![Reply::Integer(1), Reply::Integer(2)]),
        ),
        (
            b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n",
            Reply::Push(vec![bulk("message"), bulk("x")]),
        ),
        (b",1.5\r\n", Reply::Double(1.5)),
        (b",-2\r\n", Reply::Double(-2.0)),
        (b",1e21\r\n", Reply::Double(1e21)),
        (b",inf\r\n", Reply::Double(f64::INFINITY)),
        (b",-inf\r\n", Reply::Double(f64::NEG_INFINITY)),
        (b"#t\r\n", Reply::Boolean(true)),
        (b"#f\r\n", Reply::Boolean(false)),
        (
            b"(-12345678901234567890123\r\n",
            Reply::BigNumber(Bytes::from_static(b"-12345678901234567890123")),
        ),
        (
            b"=15\r\ntxt:Some string\r\n",
            Reply::VerbatimString {
                format: *b"txt",
                text: Bytes::from_static(b"Some string"),
            },
        ),
        (
            b"!8\r\nERR a\r\nb\r\n",
            Reply::BlobError(Bytes::from_static(b"ERR a\r\nb")),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            decode(input),
            Ok(Some(expected)),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    match decode(b",nan\r\n") {
        Ok(Some(Reply::Double(value))) => assert!(value.is_nan()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn incomplete_frames_wait() {
    let frame: &[u8] = b"*3\r\n$3\r\nfoo\r\n%1\r\n+a\r\n,1.5\r\n=8\r\ntxt:abcd\r\n";
    for cut in 0..frame.len() {
        let mut buffer = BytesMut::from(&frame[..cut]);
        assert_eq!(
            parse_reply(&mut buffer, Limits::default()),
            Ok(None),
            "cut at {cut}"
        );
        assert_eq!(buffer.len(), cut, "nothing consumed");
    }
    assert!(decode(frame).unwrap().is_some());
}

#[test]
fn consumes_exactly_one_reply() {
    let mut buffer = BytesMut::from(&b"+a\r\n:1\r\n"[..]);
    assert_eq!(
        parse_reply(&mut buffer, Limits::default()),
        Ok(Some(Reply::simple("a")))
    );
    assert_eq!(&buffer[..], b":1\r\n");
}

#[test]
fn malformed_frames() {
    let cases: Vec<(&[u8], ProtocolError)> = vec![
        (b"x\r\n", ProtocolError::UnknownReplyType(b'x')),
        (b":1x\r\n", ProtocolError::InvalidLine("integer")),
        (b":\r\n", ProtocolError::InvalidLine("integer")),
        (b":+-1\r\n", ProtocolError::InvalidLine("integer")),
        (b",abc\r\n", ProtocolError::InvalidLine("double")),
        (b",infinity\r\n", ProtocolError::InvalidLine("double")),
        (b",\r\n", ProtocolError::InvalidLine("double")),
        (b"#x\r\n", ProtocolError::InvalidLine("boolean")),
        (b"_x\r\n", ProtocolError::InvalidLine("null")),
        (b"(12a\r\n", ProtocolError::InvalidLine("big number")),
        (b"(\r\n", ProtocolError::InvalidLine("big number")),
        (b"$-2\r\n", ProtocolError::InvalidBulkLength),
        (b"$x\r\n", ProtocolError::InvalidBulkLength),
        (b"!-1\r\n", ProtocolError::InvalidBulkLength),
        (b"$3\r\nfooxx", ProtocolError::ExpectedCrlf),
        (b"*-2\r\n", ProtocolError::InvalidMultibulkLength),
        (b"%-1\r\n", ProtocolError::InvalidMultibulkLength),
        (b"*x\r\n", ProtocolError::InvalidMultibulkLength),
        (
            b"=3\r\ntxt\r\n",
            ProtocolError::InvalidLine("verbatim string"),
        ),
        (
            b"=5\r\ntxt-a\r\n",
            ProtocolError::InvalidLine("verbatim string"),
        ),
        (b"+a\nb\r\n", ProtocolError::ExpectedCrlf),
        (b"+a\rb\r\n", ProtocolError::ExpectedCrlf),
        (b"$?\r\n", ProtocolError::Unsupported(b'$')),
        (b"*?\r\n", ProtocolError::Unsupported(b'*')),
        (
            b"|1\r\n+a\r\n+b\r\n+c\r\n",
            ProtocolError::Unsupported(b'|'),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            decode(input),
            Err(expected),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn limits() {
    let limits = Limits {
        proto_max_bulk_len: 4,
        max_multibulk_len: 2,
        max_inline_len: 8,
        max_nesting_depth: 3,
    };
    assert!(decode_with(b"$4\r\nabcd\r\n", limits).unwrap().is_some());
    assert_eq!(
        decode_with(b"$5\r\n", limits),
        Err(ProtocolError::InvalidBulkLength)
    );
    assert!(decode_with(b"*2\r\n:1\r\n:2\r\n", limits)
        .unwrap()
        .is_some());
    assert_eq!(
        decode_with(b"*3\r\n", limits),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    assert_eq!(
        decode_with(b"%3\r\n", limits),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    assert!(decode_with(b"+12345678\r\n", limits).unwrap().is_some());
    assert_eq!(
        decode_with(b"+123456789", limits),
        Err(ProtocolError::InvalidLine("over-long"))
    );
    assert_eq!(
        decode_with(b"*123456789", limits),
        Err(ProtocolError::TooBigMultibulkCount)
    );
    assert_eq!(
        decode_with(b"$123456789", limits),
        Err(ProtocolError::TooBigBulkCount)
    );
    assert!(decode_with(b"*1\r\n*1\r\n*1\r\n:1\r\n", limits)
        .unwrap()
        .is_some());
    assert_eq!(
        decode_with(b"*1\r\n*1\r\n*1\r\n*1\r\n", limits),
        Err(ProtocolError::TooDeep)
    );
}

#[test]
fn deep_nesting_within_the_limit_does_not_recurse() {
    let depth = 100_000;
    let mut frame = b"*1\r\n".repeat(depth);
    frame.extend_from_slice(b":7\r\n");
    let limits = Limits {
        max_nesting_depth: depth,
        ..Limits::default()
    };
    let mut reply = decode_with(&frame, limits).unwrap().unwrap();
    // Unnest by hand: the derived Drop of a 100k-deep tree would recurse.
    let mut levels = 0;
    while let Reply::Array(mut elements) = reply {
        reply = elements.pop().unwrap();
        levels += 1;
    }
    assert_eq!(levels, depth);
    assert_eq!(reply, Reply::Integer(7));
}

#[test]
fn strings_are_zero_copy() {
    let mut buffer = BytesMut::from(&b"*1\r\n$5\r\nhello\r\n"[..]);
    let start = buffer.as_ptr() as usize;
    let Some(Reply::Array(elements)) = parse_reply(&mut buffer, Limits::default()).unwrap() else {
        panic!("not an array");
    };
    let Reply::BulkString(bytes) = &elements[0] else {
        panic!("not a bulk string")
    };
    assert_eq!(bytes.as_ptr() as usize, start + 8);
}

#[test]
fn reply_parser_resumes_a_large_reply_fed_in_small_reads() {
    use prefixkv_resp::{Encoder, Protocol, ReplyParser};
    let encoder = Encoder::new(Protocol::Resp3);
    let mut wire = BytesMut::new();
    let elements = 50_000;
    encoder.array_header(&mut wire, elements);
    for index in 0..elements {
        encoder.bulk_string(&mut wire, format!("value:{index}").as_bytes());
    }
    encoder.simple_string(&mut wire, b"next");
    let expected = decode_with(&wire[..wire.len() - 7], Limits::default())
        .unwrap()
        .unwrap();

    let mut parser = ReplyParser::new(Limits::default());
    let mut buffer = BytesMut::new();
    let mut replies = Vec::new();
    // 7-byte reads: the stateless decoder would re-walk the array ~100,000 times.
    for chunk in wire.chunks(7) {
        buffer.extend_from_slice(chunk);
        while let Some(reply) = parser.parse(&mut buffer).unwrap() {
            replies.push(reply);
        }
    }
    assert_eq!(replies, vec![expected, Reply::simple("next")]);
    assert!(buffer.is_empty());
}
