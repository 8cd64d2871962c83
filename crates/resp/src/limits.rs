//! Limits a peer cannot exceed.
//!
//! Every length or count the peer sends is compared with these before it is used. None of them
//! is ever used as an allocation size: they bound how much work and memory a peer can make us
//! spend by *sending* bytes, never by *claiming* sizes.

/// Limits applied to untrusted input by [`crate::RequestParser`] and [`crate::parse_reply`].
///
/// `Limits::default()` matches Redis's defaults where Redis has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted bulk string, in bytes (Redis `proto-max-bulk-len`, default 512 MiB).
    /// A larger `$<len>` is rejected with `ERR Protocol error: invalid bulk length`.
    pub proto_max_bulk_len: usize,
    /// Largest accepted element count of one array (requests: arguments per command; replies:
    /// elements of one aggregate, or pairs of one map). Default 1,048,576, which is Redis's limit
    /// for unauthenticated clients (authenticated Redis clients may send up to `INT_MAX`;
    /// Dragonfly's default is 65,536). A larger `*<count>` is rejected with
    /// `ERR Protocol error: invalid multibulk length`.
    pub max_multibulk_len: usize,
    /// Longest inline command line, and longest count/length header line, in bytes (Redis
    /// `PROTO_INLINE_MAX_SIZE`, 64 KiB). For the reply decoder it also bounds simple strings,
    /// simple errors, integers, doubles and big numbers.
    pub max_inline_len: usize,
    /// Deepest nesting of aggregates the reply decoder accepts (requests never nest). Default 128;
    /// Redis's own replies nest at most a handful of levels.
    pub max_nesting_depth: usize,
}

impl Limits {
    /// Redis's default `proto-max-bulk-len`: 512 MiB.
    pub const DEFAULT_PROTO_MAX_BULK_LEN: usize = 512 * 1024 * 1024;
    /// Default maximum element count of one array: 1,048,576.
    pub const DEFAULT_MAX_MULTIBULK_LEN: usize = 1024 * 1024;
    /// Redis's `PROTO_INLINE_MAX_SIZE`: 64 KiB.
    pub const DEFAULT_MAX_INLINE_LEN: usize = 64 * 1024;
    /// Default maximum nesting depth of decoded replies.
    pub const DEFAULT_MAX_NESTING_DEPTH: usize = 128;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            proto_max_bulk_len: Self::DEFAULT_PROTO_MAX_BULK_LEN,
            max_multibulk_len: Self::DEFAULT_MAX_MULTIBULK_LEN,
            max_inline_len: Self::DEFAULT_MAX_INLINE_LEN,
            max_nesting_depth: Self::DEFAULT_MAX_NESTING_DEPTH,
        }
    }
}
