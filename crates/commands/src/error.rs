//! The errors a command answers: [`CommandError`], one variant per kind of Redis error line.
//!
//! Invariants:
//! - `Display` writes exactly the line the client receives after the `-` (Redis's wording,
//!   byte for byte: `tests/differential.rs` compares it with redis-server's), and that line is
//!   one line: every constructor that takes text from a client or a lower layer replaces `\r`
//!   and `\n` with spaces, as the RESP encoder would, so what `Display` writes is what is sent.
//! - [`CommandError::code`] is the line's first word (`ERR`, `WRONGTYPE`, `NOAUTH`, ...), the
//!   prefix Redis's `INFO errorstats` groups by.
//! - A line that more than one place answers has its own variant; [`CommandError::Other`] holds
//!   only one-off lines, so a wording shared by several commands is written once.

use std::borrow::Cow;

use bytes::Bytes;
use prefixkv_engine::EngineError;
use prefixkv_store::StoreError;

/// Why a command failed, as the Redis error line it answers (see the module invariants).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A malformed option list or a bad option combination.
    #[error("ERR syntax error")]
    Syntax,
    /// An argument (or a stored value an integer command reads) is not a 64-bit integer.
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    /// An argument (or a stored value INCRBYFLOAT reads) is not a float.
    #[error("ERR value is not a valid float")]
    NotFloat,
    /// A count that must not be negative is (LPOP, SPOP, ZPOPMIN).
    #[error("ERR value is out of range, must be positive")]
    NotPositive,
    /// An integer increment left the 64-bit range.
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    /// A float increment produced NaN or an infinity (INCRBYFLOAT, HINCRBYFLOAT).
    #[error("ERR increment would produce NaN or Infinity")]
    NotFinite,
    /// The key holds another type than the command works on.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// The command (or `command|subcommand`) got a number of arguments it does not take.
    #[error("ERR wrong number of arguments for '{command}' command")]
    WrongArity {
        /// The command's name as Redis spells it in this line (`get`, `client|setname`).
        command: Cow<'static, str>,
    },
    /// No such command. Built by [`CommandError::unknown_command`].
    #[error("ERR unknown command '{name}', with args beginning with: {args}")]
    UnknownCommand {
        /// The command name sent, at most 128 characters.
        name: String,
        /// The first arguments, each quoted and followed by a space, as Redis lists them.
        args: String,
    },
    /// A container command (CLIENT, CONFIG, ...) got a subcommand it does not have.
    #[error("ERR unknown subcommand '{subcommand}'. Try {command} HELP.")]
    UnknownSubcommand {
        /// The container command, upper-case (`CLIENT`).
        command: &'static str,
        /// The subcommand sent.
        subcommand: String,
    },
    /// A command other than AUTH, HELLO, QUIT or RESET before authentication.
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    /// AUTH or HELLO AUTH with a wrong user or password.
    #[error("WRONGPASS invalid username-password pair or user is disabled.")]
    WrongPass,
    /// A write over `maxmemory`, or the engine out of memory for it.
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    OutOfMemory,
    /// OBJECT FREQ while the policy is not an LFU one (Redis's text).
    #[error(
        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note \
         that when switching between policies at runtime LRU and LFU data will take some time to \
         adjust."
    )]
    FreqWithoutLfu,
    /// OBJECT IDLETIME while the policy is an LFU one (Redis's text).
    #[error(
        "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when \
         switching between policies at runtime LRU and LFU data will take some time to adjust."
    )]
    IdleTimeUnderLfu,
    /// A SCAN-family cursor that is not an unsigned integer, or is past the index.
    #[error("ERR invalid cursor")]
    InvalidCursor,
    /// An expiry that is not positive, or overflows, in the named command.
    #[error("ERR invalid expire time in '{command}' command")]
    InvalidExpireTime {
        /// The command, lower-case, as the client sent it.
        command: String,
    },
    /// A database number outside 0..16 (SELECT, MOVE, COPY ... DB).
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    /// The key a command must find is missing (RENAME, LSET).
    #[error("ERR no such key")]
    NoSuchKey,
    /// COPY or MOVE onto the key itself.
    #[error("ERR source and destination objects are the same")]
    SameObject,
    /// A client name with a space, a newline or a non-printable byte.
    #[error("ERR Client names cannot contain spaces, newlines or special characters.")]
    InvalidClientName,
    /// A negative timeout (blocking pops, WAITAOF).
    #[error("ERR timeout is negative")]
    NegativeTimeout,
    /// A random-pick count whose reply could not fit the output buffer limit (HRANDFIELD,
    /// SRANDMEMBER): refused before anything is built.
    #[error(
        "ERR count is out of range: its reply would exceed client-output-buffer-limit \
         ({limit_bytes} bytes)"
    )]
    ReplyTooLarge {
        /// `client-output-buffer-limit` in bytes.
        limit_bytes: u64,
    },
    /// A stored value or collection record does not decode.
    #[error("ERR stored value is damaged: {0}")]
    Damaged(Cow<'static, str>),
    /// A value too large for one engine record.
    #[error(
        "ERR value too large: {value_bytes} bytes stored for this key, at most \
         {max_value_bytes} fit; split the value across several keys"
    )]
    ValueTooLarge {
        /// The value's size.
        value_bytes: usize,
        /// The largest value that fits with this key.
        max_value_bytes: usize,
    },
    /// The engine refused or failed in a way that is not the client's doing.
    #[error("ERR engine failure: {0}")]
    EngineFailure(String),
    /// The operation log refused an append (after a failed sync it refuses every one).
    #[error("ERR oplog append failed: {0}")]
    OplogFailure(String),
    /// The engine's or store's own one-line message (an argument the engine refuses, a storage
    /// refusal), passed through.
    #[error("ERR {0}")]
    Store(String),
    /// A checkpoint or an oplog sync that SAVE or WAITAOF waited for failed.
    #[error("ERR {0}")]
    Persistence(String),
    /// A command queued in MULTI was refused: EXEC runs nothing.
    #[error("EXECABORT Transaction discarded because of previous errors.")]
    ExecAbort,
    /// A RESP2 connection holding subscriptions sent a command it may not run.
    #[error(
        "ERR Can't execute '{command}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
         RESET are allowed in this context"
    )]
    SubscribedContext {
        /// The command, lower-case.
        command: String,
    },
    /// A script (or function) of another client runs past `busy-reply-threshold`.
    #[error(
        "BUSY Redis is busy running a script. You can only call {} KILL or SHUTDOWN NOSAVE.",
        if *function { "FUNCTION" } else { "SCRIPT" }
    )]
    Busy {
        /// The busy script is a function (FUNCTION KILL stops it).
        function: bool,
    },
    /// EVALSHA of a SHA-1 the script cache does not hold.
    #[error("NOSCRIPT No matching script. Please use EVAL.")]
    NoScript,
    /// SCRIPT KILL or FUNCTION KILL with no such script running.
    #[error("NOTBUSY No scripts in execution right now.")]
    NotBusy,
    /// SCRIPT KILL or FUNCTION KILL of a script that has written.
    #[error(
        "UNKILLABLE Sorry the script already executed write commands against the dataset. You \
         can either wait the script termination or kill the server in a hard way using the \
         SHUTDOWN NOSAVE command."
    )]
    Unkillable,
    /// A line only one place answers: its code (the first word) and the rest.
    #[error("{code} {message}")]
    Other {
        /// The first word (`ERR`, `NOPROTO`, ...).
        code: &'static str,
        /// The rest of the line, one line.
        message: Cow<'static, str>,
    },
}

/// Result of a command step: `Err` is the error line it answers.
pub type CommandResult<T = ()> = Result<T, CommandError>;

/// Command names and arguments longer than this many characters are cut in an unknown-command
/// line (Redis's limit).
const QUOTED_MAX_CHARS: usize = 128;
/// An unknown-command line stops listing arguments once it passed this many bytes (Redis's).
const UNKNOWN_COMMAND_MAX_BYTES: usize = 1024;

impl CommandError {
    /// The line's first word: `ERR`, `WRONGTYPE`, `NOAUTH`, `WRONGPASS`, `OOM`, `EXECABORT`, or
    /// a one-off line's own (`NOPROTO`).
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::WrongType => "WRONGTYPE",
            CommandError::NoAuth => "NOAUTH",
            CommandError::WrongPass => "WRONGPASS",
            CommandError::OutOfMemory => "OOM",
            CommandError::ExecAbort => "EXECABORT",
            CommandError::Other { code, .. } => code,
            CommandError::Busy { .. } => "BUSY",
            CommandError::NoScript => "NOSCRIPT",
            CommandError::NotBusy => "NOTBUSY",
            CommandError::Unkillable => "UNKILLABLE",
            _ => "ERR",
        }
    }

    /// A one-off `ERR` line: `message` is the text after `ERR `.
    pub fn err(message: impl Into<Cow<'static, str>>) -> CommandError {
        CommandError::other("ERR", message)
    }

    /// A one-off line with its own code (`NOPROTO`, `NOAUTH`); `message` is made one line.
    pub fn other(code: &'static str, message: impl Into<Cow<'static, str>>) -> CommandError {
        let message = message.into();
        let message = if message.contains(['\r', '\n']) {
            Cow::Owned(one_line(&message))
        } else {
            message
        };
        CommandError::Other { code, message }
    }

    /// Wrong number of arguments for `command` (or `command|subcommand`).
    pub fn arity(command: impl Into<Cow<'static, str>>) -> CommandError {
        CommandError::WrongArity {
            command: command.into(),
        }
    }

    /// An invalid expiry in `command`.
    pub fn invalid_expire_time(command: &str) -> CommandError {
        CommandError::InvalidExpireTime {
            command: command.to_string(),
        }
    }

    /// An unknown subcommand `argument` of `command` (upper-case, as in `Try CLIENT HELP.`).
    pub fn unknown_subcommand(command: &'static str, argument: &[u8]) -> CommandError {
        CommandError::UnknownSubcommand {
            command,
            subcommand: one_line(&String::from_utf8_lossy(argument)),
        }
    }

    /// Redis's line for an unknown command `args[0]`: the name and then the arguments, each cut
    /// at 128 characters, until the line passes 1024 bytes.
    pub fn unknown_command(args: &[Bytes]) -> CommandError {
        let name = one_line(&cut(&String::from_utf8_lossy(&args[0])));
        // The bytes of the line before the arguments: Redis's length check counts them.
        let prefix =
            "ERR unknown command '".len() + name.len() + "', with args beginning with: ".len();
        let mut listed = String::new();
        for argument in args.iter().skip(1) {
            if prefix + listed.len() > UNKNOWN_COMMAND_MAX_BYTES {
                break;
            }
            listed.push('\'');
            listed.push_str(&one_line(&cut(&String::from_utf8_lossy(argument))));
            listed.push_str("' ");
        }
        CommandError::UnknownCommand { name, args: listed }
    }

    /// A stored value that does not decode, and why.
    pub fn damaged(detail: impl Into<Cow<'static, str>>) -> CommandError {
        CommandError::Damaged(detail.into())
    }

    /// A failed checkpoint or oplog sync, with its message made one line.
    pub fn persistence(message: &str) -> CommandError {
        CommandError::Persistence(one_line(message))
    }
}

/// Replaces line breaks with spaces, as the RESP encoder does in an error line.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

fn cut(text: &str) -> String {
    text.chars().take(QUOTED_MAX_CHARS).collect()
}

impl From<EngineError> for CommandError {
    fn from(error: EngineError) -> CommandError {
        match error {
            EngineError::OutOfMemory { .. } => CommandError::OutOfMemory,
            EngineError::RecordTooLarge {
                value_bytes,
                max_value_bytes,
                ..
            } => CommandError::ValueTooLarge {
                value_bytes,
                max_value_bytes,
            },
            EngineError::InvalidArgument(text) => CommandError::Store(one_line(&text)),
            other => CommandError::EngineFailure(one_line(&other.to_string())),
        }
    }
}

impl From<StoreError> for CommandError {
    fn from(error: StoreError) -> CommandError {
        match error {
            StoreError::Engine(error) => error.into(),
            StoreError::Oplog(error) => CommandError::OplogFailure(one_line(&error.to_string())),
            other => CommandError::Store(one_line(&other.to_string())),
        }
    }
}

impl From<prefixkv_collections::Error> for CommandError {
    fn from(error: prefixkv_collections::Error) -> CommandError {
        match error {
            prefixkv_collections::Error::Store(error) => error.into(),
            prefixkv_collections::Error::Corrupt(detail) => {
                CommandError::Damaged(one_line(&detail).into())
            }
        }
    }
}

impl From<crate::value::Malformed> for CommandError {
    fn from(malformed: crate::value::Malformed) -> CommandError {
        CommandError::Damaged(malformed.0.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_redis_s_and_start_with_their_code() {
        let cases = [
            (CommandError::Syntax, "ERR syntax error"),
            (
                CommandError::WrongType,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (
                CommandError::arity("client|setname"),
                "ERR wrong number of arguments for 'client|setname' command",
            ),
            (
                CommandError::OutOfMemory,
                "OOM command not allowed when used memory > 'maxmemory'.",
            ),
            (
                CommandError::ExecAbort,
                "EXECABORT Transaction discarded because of previous errors.",
            ),
            (
                CommandError::unknown_subcommand("OBJECT", b"x\r\ny"),
                "ERR unknown subcommand 'x  y'. Try OBJECT HELP.",
            ),
            (
                CommandError::other("NOPROTO", "unsupported protocol version"),
                "NOPROTO unsupported protocol version",
            ),
            (
                CommandError::ReplyTooLarge { limit_bytes: 16 },
                "ERR count is out of range: its reply would exceed client-output-buffer-limit \
                 (16 bytes)",
            ),
        ];
        for (error, line) in cases {
            assert_eq!(error.to_string(), line);
            assert!(line.starts_with(&format!("{} ", error.code())), "{line}");
        }
    }

    #[test]
    fn unknown_command_lines_are_cut_as_redis_cuts_them() {
        let args: Vec<Bytes> = [&b"foo"[..], b"a", b"b\nc"]
            .map(Bytes::from_static)
            .to_vec();
        assert_eq!(
            CommandError::unknown_command(&args).to_string(),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b c' "
        );
        let long = Bytes::from(vec![b'x'; 300]);
        let mut args = vec![Bytes::from_static(b"nope")];
        args.extend(std::iter::repeat_n(long, 20));
        let line = CommandError::unknown_command(&args).to_string();
        // Eight quoted 128-character arguments pass 1024 bytes; the ninth is not listed.
        assert_eq!(line.matches(&"x".repeat(128)).count(), 8);
        assert!(!line.contains(&"x".repeat(129)));
    }

    #[test]
    fn one_off_lines_are_one_line() {
        assert_eq!(
            CommandError::err("a\r\nb").to_string(),
            "ERR a  b",
            "the encoder would send spaces: Display says so too"
        );
    }
}
