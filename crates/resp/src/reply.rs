//! The reply value tree and the protocol version it is written in.

use bytes::{Bytes, BytesMut};

use crate::Encoder;

/// The protocol version a connection speaks: RESP2 until the client sends `HELLO 3`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// RESP2: RESP3-only types are written in their RESP2 forms (see [`Reply`]).
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// One RESP2 or RESP3 reply.
///
/// Each variant documents its RESP3 wire form and, when it differs, the RESP2 form the encoder
/// writes instead (the same mapping Redis uses). Decoding a RESP2 encoding therefore gives the
/// RESP2 variant, not the original one (a `Map` comes back as a flat `Array`).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+text`. The encoder replaces CR and LF in the text by spaces.
    SimpleString(Bytes),
    /// `-CODE message`, the whole line after `-`. The encoder replaces CR and LF by spaces.
    Error(Bytes),
    /// `:n`.
    Integer(i64),
    /// `$len` then the bytes.
    BulkString(Bytes),
    /// RESP2 `$-1`; RESP3 `_` (so it decodes back as [`Reply::Null`]).
    NullBulkString,
    /// `*len` then the elements.
    Array(Vec<Reply>),
    /// RESP2 `*-1`; RESP3 `_` (so it decodes back as [`Reply::Null`]).
    NullArray,
    /// RESP3 `_`; RESP2 `$-1`.
    Null,
    /// RESP3 `%pairs` then key, value, key, value...; RESP2 an array of 2 x pairs elements.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~len`; RESP2 an array.
    Set(Vec<Reply>),
    /// RESP3 `,value` (`inf`, `-inf`, `nan`, or the shortest decimal that round-trips);
    /// RESP2 a bulk string of the same text.
    Double(f64),
    /// RESP3 `#t` / `#f`; RESP2 the integer 1 / 0.
    Boolean(bool),
    /// RESP3 `=len` then `fmt:` and the text (`fmt` is 3 bytes such as `txt` or `mkd`);
    /// RESP2 a bulk string of the text alone.
    VerbatimString {
        /// The 3-byte format, e.g. `txt`.
        format: [u8; 3],
        /// The text, without the `fmt:` prefix.
        text: Bytes,
    },
    /// RESP3 `(digits`; RESP2 a bulk string of the digits. Holds an optional `-` and decimal
    /// digits.
    BigNumber(Bytes),
    /// RESP3 `>len` (out-of-band data, e.g. pub/sub messages); RESP2 an array.
    Push(Vec<Reply>),
    /// RESP3 `!len` then the error text; RESP2 a simple error (CR and LF replaced by spaces).
    BlobError(Bytes),
}

impl Reply {
    /// Appends this reply's encoding in `protocol` to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        Encoder::new(protocol).reply(out, self);
    }

    /// This reply's encoding in `protocol`, as a new buffer.
    pub fn to_bytes(&self, protocol: Protocol) -> BytesMut {
        let mut out = BytesMut::new();
        self.encode(protocol, &mut out);
        out
    }

    /// A simple string reply from static text, e.g. `Reply::simple("OK")`.
    pub fn simple(text: &'static str) -> Self {
        Reply::SimpleString(Bytes::from_static(text.as_bytes()))
    }

    /// An error reply from static text, e.g. `Reply::error("ERR syntax error")`.
    pub fn error(text: &'static str) -> Self {
        Reply::Error(Bytes::from_static(text.as_bytes()))
    }

    /// A bulk string reply holding a copy of `bytes`.
    pub fn bulk(bytes: impl AsRef<[u8]>) -> Self {
        Reply::BulkString(Bytes::copy_from_slice(bytes.as_ref()))
    }
}
