//! prefixkv-resp: the RESP2/RESP3 codec of the prefixkv Redis-compatible server.
//!
//! Three parts, all working on [`bytes::BytesMut`] buffers:
//!
//! - [`RequestParser`]: server side. Parses the requests a Redis client sends (arrays of bulk
//!   strings, and inline commands with Redis's quoting rules) incrementally into [`Command`]s whose
//!   arguments are zero-copy [`bytes::Bytes`] slices of the read buffer.
//! - [`Encoder`] and [`Reply::encode`]: server side. Writes replies in RESP2 or RESP3
//!   ([`Protocol`]), mapping RESP3-only types to their RESP2 forms the way Redis does. The
//!   [`Encoder`] also writes array headers and bulk strings directly, for hot paths (GET, MGET)
//!   that should not build a [`Reply`] tree.
//! - [`parse_reply`] and [`ReplyParser`]: client side (tests, proxies). Decode one RESP2 or RESP3
//!   reply; the parser keeps its progress through a partly received reply between calls.
//!
//! Invariants every part keeps:
//!
//! - Bounded: every length or count read from the peer is checked against [`Limits`] before it is
//!   used, and no allocation is ever sized by a claimed length. Buffers grow only with bytes that
//!   actually arrived; a vector is pre-sized by a claimed count only up to a small cap, or (reply
//!   decoder) only after the whole frame is known to be in the buffer.
//! - Incremental: a parser returns `Ok(None)` while bytes are missing and consumes nothing
//!   observable; once a frame is complete it consumes exactly that frame. Feeding the same bytes
//!   split at any points gives the same results.
//! - Errors are final: a [`ProtocolError`] means the stream cannot be resynchronised; the server
//!   writes the error's `Display` text as an error reply and closes the connection, as Redis does.
//!
//! ```
//! use bytes::BytesMut;
//! use prefixkv_resp::{parse_reply, Encoder, Limits, Protocol, Reply, RequestParser};
//!
//! // Server: parse pipelined requests as they arrive.
//! let mut parser = RequestParser::new(Limits::default());
//! let mut read_buffer = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\nPING\r\n*1\r\n$4"[..]);
//! let get = parser.parse(&mut read_buffer)?.expect("complete");
//! assert_eq!(get.args, [&b"GET"[..], b"key"]);
//! let ping = parser.parse(&mut read_buffer)?.expect("complete (inline)");
//! assert_eq!(ping.name(), b"PING");
//! assert_eq!(parser.parse(&mut read_buffer)?, None); // waits for the rest
//!
//! // Server: reply, in the connection's protocol.
//! let mut write_buffer = BytesMut::new();
//! let encoder = Encoder::new(Protocol::Resp3);
//! encoder.null_bulk_string(&mut write_buffer);
//! Reply::Map(vec![(Reply::bulk("proto"), Reply::Integer(3))]).encode(Protocol::Resp3, &mut write_buffer);
//! assert_eq!(&write_buffer[..], b"_\r\n%1\r\n$5\r\nproto\r\n:3\r\n");
//!
//! // Client: decode the replies.
//! assert_eq!(parse_reply(&mut write_buffer, Limits::default())?, Some(Reply::Null));
//! assert!(matches!(parse_reply(&mut write_buffer, Limits::default())?, Some(Reply::Map(_))));
//! # Ok::<(), prefixkv_resp::ProtocolError>(())
//! ```
//!
//! The accepted syntax, the limits, the exact error strings and the RESP2/RESP3 mapping are
//! documented in `docs/resp.md`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod decode;
mod encode;
mod error;
mod inline;
mod limits;
mod number;
mod reply;
mod request;

pub use decode::{parse_reply, ReplyParser};
pub use encode::{format_double, Encoder};
pub use error::ProtocolError;
pub use limits::Limits;
pub use reply::{Protocol, Reply};
pub use request::{Command, RequestParser};
