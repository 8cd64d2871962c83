//! Protocol errors, with Redis's own wording.
//!
//! The `Display` text of each error is the exact line Redis writes before closing the connection
//! (without the leading `-` and trailing CRLF), so a server can send `-{error}\r\n` and close.
//! Errors Redis does not have (we are stricter in a few places, and the reply decoder has its own
//! cases) follow the same `ERR Protocol error: ...` pattern.

/// A malformed or over-limit request or reply. The stream cannot be resynchronised after one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// `*<count>` is not a number, or exceeds [`crate::Limits::max_multibulk_len`].
    #[error("ERR Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// `$<len>` is not a number, is negative (in a request), or exceeds
    /// [`crate::Limits::proto_max_bulk_len`].
    #[error("ERR Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// The `*<count>` line is longer than [`crate::Limits::max_inline_len`].
    #[error("ERR Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// A `$<len>` line is longer than [`crate::Limits::max_inline_len`].
    #[error("ERR Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An inline command line is longer than [`crate::Limits::max_inline_len`], or holds a NUL
    /// byte (which hides its newline from Redis, so Redis ends with this error too).
    #[error("ERR Protocol error: too big inline request")]
    TooBigInline,
    /// An argument of a multibulk request does not start with `$`.
    #[error("ERR Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    /// An inline command has an unterminated quote, or a closing quote followed by something
    /// other than a space.
    #[error("ERR Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A header line's `\r` is not followed by `\n`, or a bulk payload is not followed by CRLF.
    /// (Redis skips these two bytes without looking; we check them.)
    #[error("ERR Protocol error: expected CRLF")]
    ExpectedCrlf,
    /// Reply decoder: the first byte of a frame is not a known RESP2/RESP3 type.
    #[error("ERR Protocol error: unknown reply type '{}'", char::from(*.0))]
    UnknownReplyType(u8),
    /// Reply decoder: a line-valued frame (simple string, error, integer, double, boolean, big
    /// number) is malformed, or longer than [`crate::Limits::max_inline_len`].
    #[error("ERR Protocol error: invalid {0} reply")]
    InvalidLine(&'static str),
    /// Reply decoder: aggregates nest deeper than [`crate::Limits::max_nesting_depth`].
    #[error("ERR Protocol error: reply nested too deeply")]
    TooDeep,
    /// Reply decoder: a RESP3 streamed string or aggregate (`$?`, `*?`), or an attribute (`|`);
    /// Redis never sends these and this decoder does not implement them.
    #[error("ERR Protocol error: unsupported reply type '{}'", char::from(*.0))]
    Unsupported(u8),
}
