//! Reply encoding, RESP2 and RESP3.
//!
//! [`Encoder`] writes into a `BytesMut` either a whole [`Reply`] tree or, for hot paths, one
//! piece at a time (an array header, then bulk strings), so that a GET or MGET never builds a
//! tree. The RESP2 forms of RESP3-only types follow Redis (`docs/resp.md` has the table).
//!
//! Invariant: every method writes one complete frame (or one aggregate header, after which the
//! caller writes exactly the announced number of elements). Simple strings and errors cannot
//! carry CR or LF; the encoder replaces them by spaces, as Redis does for error messages, rather
//! than emitting a frame that would desynchronise the client.

use bytes::{BufMut, BytesMut};

use crate::{Protocol, Reply};

const CRLF: &[u8] = b"\r\n";

/// Writes replies in one protocol version. Cheap to copy; a connection keeps one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoder {
    protocol: Protocol,
}

impl Encoder {
    /// An encoder for `protocol`.
    pub fn new(protocol: Protocol) -> Self {
        Self { protocol }
    }

    /// The protocol this encoder writes.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Writes a whole reply tree.
    pub fn reply(&self, out: &mut BytesMut, reply: &Reply) {
        match reply {
            Reply::SimpleString(text) => self.simple_string(out, text),
            Reply::Error(text) => self.error(out, text),
            Reply::Integer(value) => self.integer(out, *value),
            Reply::BulkString(bytes) => self.bulk_string(out, bytes),
            Reply::NullBulkString => self.null_bulk_string(out),
            Reply::Array(elements) => {
                self.array_header(out, elements.len());
                elements.iter().for_each(|element| self.reply(out, element));
            }
            Reply::NullArray => self.null_array(out),
            Reply::Null => self.null(out),
            Reply::Map(pairs) => {
                self.map_header(out, pairs.len());
                for (key, value) in pairs {
                    self.reply(out, key);
                    self.reply(out, value);
                }
            }
            Reply::Set(elements) => {
                self.set_header(out, elements.len());
                elements.iter().for_each(|element| self.reply(out, element));
            }
            Reply::Double(value) => self.double(out, *value),
            Reply::Boolean(value) => self.boolean(out, *value),
            Reply::VerbatimString { format, text } => self.verbatim_string(out, *format, text),
            Reply::BigNumber(digits) => self.big_number(out, digits),
            Reply::Push(elements) => {
                self.push_header(out, elements.len());
                elements.iter().for_each(|element| self.reply(out, element));
            }
            Reply::BlobError(text) => self.blob_error(out, text),
        }
    }

    /// `+text`; CR and LF in `text` become spaces.
    pub fn simple_string(&self, out: &mut BytesMut, text: &[u8]) {
        write_line(out, b'+', text);
    }

    /// `-text` (the text includes the error code, e.g. `ERR syntax error`); CR and LF become
    /// spaces.
    pub fn error(&self, out: &mut BytesMut, text: &[u8]) {
        write_line(out, b'-', text);
    }

    /// `:value`.
    pub fn integer(&self, out: &mut BytesMut, value: i64) {
        write_header(out, b':', value);
    }

    /// `$len` and the bytes.
    pub fn bulk_string(&self, out: &mut BytesMut, bytes: &[u8]) {
        out.reserve(bytes.len() + 16);
        write_header(out, b'$', bytes.len() as i64);
        out.put_slice(bytes);
        out.put_slice(CRLF);
    }

    /// A missing string (GET of an absent key): RESP2 `$-1`, RESP3 `_`.
    pub fn null_bulk_string(&self, out: &mut BytesMut) {
        self.null(out);
    }

    /// A missing array (e.g. BLPOP timing out): RESP2 `*-1`, RESP3 `_`.
    pub fn null_array(&self, out: &mut BytesMut) {
        match self.protocol {
            Protocol::Resp2 => out.put_slice(b"*-1\r\n"),
            Protocol::Resp3 => out.put_slice(b"_\r\n"),
        }
    }

    /// RESP3 null `_`; RESP2 `$-1`.
    pub fn null(&self, out: &mut BytesMut) {
        match self.protocol {
            Protocol::Resp2 => out.put_slice(b"$-1\r\n"),
            Protocol::Resp3 => out.put_slice(b"_\r\n"),
        }
    }

    /// `*len`; the caller then writes `len` elements.
    pub fn array_header(&self, out: &mut BytesMut, len: usize) {
        write_header(out, b'*', len as i64);
    }

    /// RESP3 `%pairs`, RESP2 `*(2 x pairs)`; the caller then writes key, value, key, value...
    pub fn map_header(&self, out: &mut BytesMut, pairs: usize) {
        match self.protocol {
            Protocol::Resp2 => write_header(out, b'*', (pairs as i64).saturating_mul(2)),
            Protocol::Resp3 => write_header(out, b'%', pairs as i64),
        }
    }

    /// RESP3 `~len`, RESP2 `*len`; the caller then writes `len` elements.
    pub fn set_header(&self, out: &mut BytesMut, len: usize) {
        let prefix = match self.protocol {
            Protocol::Resp2 => b'*',
            Protocol::Resp3 => b'~',
        };
        write_header(out, prefix, len as i64);
    }

    /// RESP3 `>len`, RESP2 `*len`; the caller then writes `len` elements.
    pub fn push_header(&self, out: &mut BytesMut, len: usize) {
        let prefix = match self.protocol {
            Protocol::Resp2 => b'*',
            Protocol::Resp3 => b'>',
        };
        write_header(out, prefix, len as i64);
    }

    /// RESP3 `,text`, RESP2 a bulk string of the text; the text is as [`format_double`].
    pub fn double(&self, out: &mut BytesMut, value: f64) {
        let mut buffer = ryu::Buffer::new();
        let text = double_text(value, &mut buffer);
        match self.protocol {
            Protocol::Resp2 => self.bulk_string(out, text.as_bytes()),
            Protocol::Resp3 => {
                out.put_u8(b',');
                out.put_slice(text.as_bytes());
                out.put_slice(CRLF);
            }
        }
    }

    /// RESP3 `#t`/`#f`, RESP2 `:1`/`:0`.
    pub fn boolean(&self, out: &mut BytesMut, value: bool) {
        match (self.protocol, value) {
            (Protocol::Resp2, true) => out.put_slice(b":1\r\n"),
            (Protocol::Resp2, false) => out.put_slice(b":0\r\n"),
            (Protocol::Resp3, true) => out.put_slice(b"#t\r\n"),
            (Protocol::Resp3, false) => out.put_slice(b"#f\r\n"),
        }
    }

    /// RESP3 `=len` + `format:text`, RESP2 a bulk string of `text`.
    pub fn verbatim_string(&self, out: &mut BytesMut, format: [u8; 3], text: &[u8]) {
        match self.protocol {
            Protocol::Resp2 => self.bulk_string(out, text),
            Protocol::Resp3 => {
                out.reserve(text.len() + 20);
                write_header(out, b'=', text.len() as i64 + 4);
                out.put_slice(&format);
                out.put_u8(b':');
                out.put_slice(text);
                out.put_slice(CRLF);
            }
        }
    }

    /// RESP3 `(digits`, RESP2 a bulk string of the digits. `digits` must be an optional `-`
    /// followed by decimal digits (checked in debug builds).
    pub fn big_number(&self, out: &mut BytesMut, digits: &[u8]) {
        debug_assert!(is_big_number(digits), "not a big number: {digits:?}");
        match self.protocol {
            Protocol::Resp2 => self.bulk_string(out, digits),
            Protocol::Resp3 => write_line(out, b'(', digits),
        }
    }

    /// RESP3 `!len` + the text, RESP2 a simple error (CR and LF become spaces).
    pub fn blob_error(&self, out: &mut BytesMut, text: &[u8]) {
        match self.protocol {
            Protocol::Resp2 => self.error(out, text),
            Protocol::Resp3 => {
                out.reserve(text.len() + 16);
                write_header(out, b'!', text.len() as i64);
                out.put_slice(text);
                out.put_slice(CRLF);
            }
        }
    }
}

/// The text Redis uses for a double: `inf`, `-inf`, `nan`, or the shortest decimal that parses
/// back to the same value (`1.5`, `3`, `-0`, `1e21`, `1.5e-7`).
pub fn format_double(value: f64) -> String {
    double_text(value, &mut ryu::Buffer::new()).to_owned()
}

fn double_text(value: f64, buffer: &mut ryu::Buffer) -> &str {
    if value.is_nan() {
        return "nan";
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" };
    }
    let text = buffer.format_finite(value);
    // ryu writes integral values as `3.0`; Redis writes `3`.
    text.strip_suffix(".0").unwrap_or(text)
}

/// `true` for an optional `-` followed by one or more decimal digits.
pub(crate) fn is_big_number(text: &[u8]) -> bool {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

fn write_header(out: &mut BytesMut, prefix: u8, value: i64) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(value).as_bytes();
    out.reserve(digits.len() + 3);
    out.put_u8(prefix);
    out.put_slice(digits);
    out.put_slice(CRLF);
}

fn write_line(out: &mut BytesMut, prefix: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(prefix);
    if memchr::memchr2(b'\r', b'\n', text).is_none() {
        out.put_slice(text);
    } else {
        out.extend(text.iter().map(|&byte| match byte {
            b'\r' | b'\n' => b' ',
            other => other,
        }));
    }
    out.put_slice(CRLF);
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn both(reply: Reply) -> (String, String) {
        let resp2 = reply.to_bytes(Protocol::Resp2);
        let resp3 = reply.to_bytes(Protocol::Resp3);
        (
            String::from_utf8_lossy(&resp2).into_owned(),
            String::from_utf8_lossy(&resp3).into_owned(),
        )
    }

    fn same(reply: Reply, wire: &str) {
        assert_eq!(both(reply), (wire.to_owned(), wire.to_owned()));
    }

    #[test]
    fn types_common_to_both_protocols() {
        same(Reply::simple("OK"), "+OK\r\n");
        same(Reply::error("ERR bad"), "-ERR bad\r\n");
        same(Reply::Integer(-42), ":-42\r\n");
        same(Reply::Integer(i64::MIN), ":-9223372036854775808\r\n");
        same(Reply::bulk("hello"), "$5\r\nhello\r\n");
        same(Reply::bulk(""), "$0\r\n\r\n");
        same(
            Reply::Array(vec![Reply::Integer(1), Reply::bulk("a")]),
            "*2\r\n:1\r\n$1\r\na\r\n",
        );
        same(Reply::Array(vec![]), "*0\r\n");
    }

    #[test]
    fn line_types_cannot_carry_line_breaks() {
        same(Reply::error("ERR a\r\nb"), "-ERR a  b\r\n");
        same(Reply::simple("x\ny"), "+x y\r\n");
    }

    #[test]
    fn resp3_types_and_their_resp2_forms() {
        let cases = [
            (Reply::Null, "$-1\r\n", "_\r\n"),
            (Reply::NullBulkString, "$-1\r\n", "_\r\n"),
            (Reply::NullArray, "*-1\r\n", "_\r\n"),
            (Reply::Boolean(true), ":1\r\n", "#t\r\n"),
            (Reply::Boolean(false), ":0\r\n", "#f\r\n"),
            (Reply::Double(1.5), "$3\r\n1.5\r\n", ",1.5\r\n"),
            (Reply::Double(f64::INFINITY), "$3\r\ninf\r\n", ",inf\r\n"),
            (
                Reply::Double(f64::NEG_INFINITY),
                "$4\r\n-inf\r\n",
                ",-inf\r\n",
            ),
            (Reply::Double(f64::NAN), "$3\r\nnan\r\n", ",nan\r\n"),
            (
                Reply::BigNumber(Bytes::from_static(b"-123456789012345678901234567890")),
                "$31\r\n-123456789012345678901234567890\r\n",
                "(-123456789012345678901234567890\r\n",
            ),
            (
                Reply::VerbatimString {
                    format: *b"txt",
                    text: Bytes::from_static(b"Some string"),
                },
                "$11\r\nSome string\r\n",
                "=15\r\ntxt:Some string\r\n",
            ),
            (
                Reply::Map(vec![(Reply::bulk("k"), Reply::Integer(1))]),
                "*2\r\n$1\r\nk\r\n:1\r\n",
                "%1\r\n$1\r\nk\r\n:1\r\n",
            ),
            (
                Reply::Set(vec![Reply::bulk("m")]),
                "*1\r\n$1\r\nm\r\n",
                "~1\r\n$1\r\nm\r\n",
            ),
            (
                Reply::Push(vec![Reply::bulk("message")]),
                "*1\r\n$7\r\nmessage\r\n",
                ">1\r\n$7\r\nmessage\r\n",
            ),
            (
                Reply::BlobError(Bytes::from_static(b"SYNTAX a\r\nb")),
                "-SYNTAX a  b\r\n",
                "!11\r\nSYNTAX a\r\nb\r\n",
            ),
        ];
        for (reply, resp2, resp3) in cases {
            assert_eq!(
                both(reply.clone()),
                (resp2.to_owned(), resp3.to_owned()),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn doubles_are_shortest_round_trip() {
        for (value, text) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (3.0, "3"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e21, "1e21"),
            (1.5e-7, "1.5e-7"),
            (123456789.125, "123456789.125"),
            (f64::MAX, "1.7976931348623157e308"),
        ] {
            assert_eq!(format_double(value), text);
            assert_eq!(text.parse::<f64>().unwrap().to_bits(), value.to_bits());
        }
    }

    #[test]
    fn streaming_matches_tree() {
        let encoder = Encoder::new(Protocol::Resp2);
        let mut streamed = BytesMut::new();
        encoder.array_header(&mut streamed, 3);
        encoder.bulk_string(&mut streamed, b"v1");
        encoder.null_bulk_string(&mut streamed);
        encoder.bulk_string(&mut streamed, b"v3");
        let tree = Reply::Array(vec![
            Reply::bulk("v1"),
            Reply::NullBulkString,
            Reply::bulk("v3"),
        ]);
        assert_eq!(streamed, tree.to_bytes(Protocol::Resp2));
    }
}
