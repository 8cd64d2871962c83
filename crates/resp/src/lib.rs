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
//! - [`parse_reply`]: client side (tests, proxies). Decodes one RESP2 or RESP3 reply.
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

pub use decode::parse_reply;
pub use encode::{format_double, Encoder};
pub use error::ProtocolError;
pub use limits::Limits;
pub use reply::{Protocol, Reply};
pub use request::{Command, RequestParser};
