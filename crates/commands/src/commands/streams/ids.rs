//! Stream entry ids (`<ms>-<seq>`, two unsigned 64-bit numbers) and how commands spell them:
//! explicit ids, `-` and `+`, exclusive `(` bounds, XADD's `*` and `<ms>-*`.
//!
//! An id's stored form ([`StreamId::key`]) is 16 big-endian bytes, so ids compare as their bytes
//! do: the entries tree and the pending-entries trees are ordered by it.

use std::fmt;

use crate::error::{CommandError, CommandResult};

/// A stream entry id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
}

/// Bytes of a stored id.
pub const ID_BYTES: usize = 16;

impl StreamId {
    /// `0-0`, the smallest id.
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The largest id.
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// An id from its parts.
    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The stored form: big-endian ms then seq, ordered as the ids.
    pub fn key(self) -> [u8; ID_BYTES] {
        let mut out = [0u8; ID_BYTES];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    /// The id at the front of a stored entry, if it is long enough.
    pub fn from_key(bytes: &[u8]) -> Option<StreamId> {
        let (ms, rest) = bytes.split_first_chunk::<8>()?;
        let (seq, _) = rest.split_first_chunk::<8>()?;
        Some(StreamId::new(
            u64::from_be_bytes(*ms),
            u64::from_be_bytes(*seq),
        ))
    }

    /// The next id, `None` after [`StreamId::MAX`].
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous id, `None` before [`StreamId::MIN`].
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    /// Whether this is `0-0`.
    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The id spelled `<ms>-<seq>` (as [`fmt::Display`] spells it) in `buf`, without allocating:
    /// every XADD replies with its id.
    pub fn text(self, buf: &mut [u8; ID_TEXT_BYTES]) -> &[u8] {
        // Written backwards from the end: seq's digits, the dash, ms's digits.
        fn digits(mut value: u64, buf: &mut [u8], mut end: usize) -> usize {
            loop {
                end -= 1;
                buf[end] = b'0' + (value % 10) as u8;
                value /= 10;
                if value == 0 {
                    return end;
                }
            }
        }
        let dash = digits(self.seq, buf, ID_TEXT_BYTES) - 1;
        buf[dash] = b'-';
        let start = digits(self.ms, buf, dash);
        &buf[start..]
    }
}

/// The longest spelled id: two 20-digit numbers and a dash.
pub const ID_TEXT_BYTES: usize = 41;

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Redis's line for an id that does not parse.
pub fn invalid_id() -> CommandError {
    CommandError::err("Invalid stream ID specified as stream command argument")
}

/// An unsigned number as Redis's `string2ull` takes it: decimal digits (leading zeros allowed).
fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Longest id argument Redis reads (its parse buffer).
const MAX_ID_CHARS: usize = 127;

/// How an id argument may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// `<ms>` alone means `<ms>-0` (start bounds, XADD, XREAD, group ids).
    SeqZero,
    /// `<ms>` alone means `<ms>-<max>` (end bounds).
    SeqMax,
}

/// Parses an id: `<ms>-<seq>`, or `<ms>` with the sequence `missing` gives; `-` and `+` are the
/// smallest and largest ids unless `strict` (XADD, XDEL, XACK, XSETID refuse them).
pub fn parse_id(argument: &[u8], missing: Missing, strict: bool) -> CommandResult<StreamId> {
    match argument {
        b"-" if !strict => return Ok(StreamId::MIN),
        b"+" if !strict => return Ok(StreamId::MAX),
        _ => {}
    }
    if argument.len() > MAX_ID_CHARS {
        return Err(invalid_id());
    }
    let (ms, seq) = match argument.iter().position(|&b| b == b'-') {
        Some(dash) => {
            let ms = parse_u64(&argument[..dash]).ok_or_else(invalid_id)?;
            let seq = parse_u64(&argument[dash + 1..]).ok_or_else(invalid_id)?;
            (ms, seq)
        }
        None => {
            let ms = parse_u64(argument).ok_or_else(invalid_id)?;
            let seq = match missing {
                Missing::SeqZero => 0,
                Missing::SeqMax => u64::MAX,
            };
            (ms, seq)
        }
    };
    Ok(StreamId::new(ms, seq))
}

/// Parses a range bound (XRANGE, XREVRANGE, XPENDING, XAUTOCLAIM): an id, `-`, `+`, or `(` and
/// an id for an exclusive bound; `start` says which side (errors name it as Redis does).
pub fn parse_bound(argument: &[u8], start: bool) -> CommandResult<StreamId> {
    let missing = if start {
        Missing::SeqZero
    } else {
        Missing::SeqMax
    };
    match argument.strip_prefix(b"(") {
        Some(rest) if !rest.is_empty() => {
            let id = parse_id(rest, missing, false)?;
            let moved = if start { id.next() } else { id.prev() };
            moved.ok_or_else(|| {
                CommandError::err(if start {
                    "invalid start ID for the interval"
                } else {
                    "invalid end ID for the interval"
                })
            })
        }
        _ => parse_id(argument, missing, false),
    }
}

/// What XADD's id argument asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddId {
    /// `*`: the current time, or after the last id.
    Auto,
    /// `<ms>-*`: that millisecond, the next sequence number in it.
    AutoSeq(u64),
    /// An explicit id.
    Explicit(StreamId),
}

/// Parses XADD's id argument.
pub fn parse_add_id(argument: &[u8]) -> CommandResult<AddId> {
    if argument == b"*" {
        return Ok(AddId::Auto);
    }
    if let Some(ms) = argument.strip_suffix(b"-*") {
        if argument.len() > MAX_ID_CHARS {
            return Err(invalid_id());
        }
        return parse_u64(ms).map(AddId::AutoSeq).ok_or_else(invalid_id);
    }
    parse_id(argument, Missing::SeqZero, true).map(AddId::Explicit)
}

/// The id XADD gives a new entry after `last` at time `now_ms`, as Redis does.
pub fn resolve_add_id(wanted: AddId, last: StreamId, now_ms: u64) -> CommandResult<StreamId> {
    let too_small = || {
        CommandError::err(
            "The ID specified in XADD is equal or smaller than the target stream top item",
        )
    };
    match wanted {
        AddId::Auto => {
            if now_ms > last.ms {
                Ok(StreamId::new(now_ms, 0))
            } else {
                last.next().ok_or_else(exhausted)
            }
        }
        AddId::AutoSeq(ms) => {
            if ms > last.ms {
                Ok(StreamId::new(ms, 0))
            } else if ms == last.ms && last.seq < u64::MAX {
                Ok(StreamId::new(ms, last.seq + 1))
            } else {
                Err(too_small())
            }
        }
        AddId::Explicit(id) => {
            if id.is_zero() {
                Err(CommandError::err(
                    "The ID specified in XADD must be greater than 0-0",
                ))
            } else if id <= last {
                Err(too_small())
            } else {
                Ok(id)
            }
        }
    }
}

/// Redis's line when a stream's last id is the largest there is.
pub fn exhausted() -> CommandError {
    CommandError::err("The stream has exhausted the last possible ID, unable to add more items")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_order_as_redis() {
        assert_eq!(
            parse_id(b"5", Missing::SeqZero, true).unwrap(),
            StreamId::new(5, 0)
        );
        assert_eq!(
            parse_id(b"5", Missing::SeqMax, false).unwrap(),
            StreamId::new(5, u64::MAX)
        );
        assert_eq!(
            parse_id(b"007-3", Missing::SeqZero, true).unwrap(),
            StreamId::new(7, 3)
        );
        assert!(parse_id(b"-", Missing::SeqZero, true).is_err());
        assert_eq!(
            parse_id(b"+", Missing::SeqZero, false).unwrap(),
            StreamId::MAX
        );
        for bad in [
            &b"1-"[..],
            b"-1",
            b"a",
            b"1-2-3",
            b"",
            b"1.5",
            b"18446744073709551616",
        ] {
            assert!(parse_id(bad, Missing::SeqZero, false).is_err(), "{bad:?}");
        }
        assert_eq!(parse_bound(b"(1-1", true).unwrap(), StreamId::new(1, 2));
        assert_eq!(
            parse_bound(b"(1-0", false).unwrap(),
            StreamId::new(0, u64::MAX)
        );
        assert!(parse_bound(b"(-", false).is_err());
        assert!(parse_bound(b"(+", true).is_err());
        let a = StreamId::new(1, u64::MAX);
        let b = StreamId::new(2, 0);
        assert!(a.key() < b.key());
        assert_eq!(a.next(), Some(b));
        assert_eq!(b.prev(), Some(a));
        assert_eq!(StreamId::from_key(&b.key()), Some(b));
    }

    #[test]
    fn ids_spell_as_display() {
        let mut buf = [0u8; super::ID_TEXT_BYTES];
        for id in [
            StreamId::MIN,
            StreamId::MAX,
            StreamId::new(1, 0),
            StreamId::new(0, 9),
            StreamId::new(1_700_000_000_123, 42),
            StreamId::new(10, 100),
        ] {
            assert_eq!(id.text(&mut buf), id.to_string().as_bytes());
        }
    }

    #[test]
    fn xadd_ids_resolve_as_redis() {
        let last = StreamId::new(10, 5);
        assert_eq!(
            resolve_add_id(AddId::Auto, last, 20).unwrap(),
            StreamId::new(20, 0)
        );
        assert_eq!(
            resolve_add_id(AddId::Auto, last, 3).unwrap(),
            StreamId::new(10, 6)
        );
        assert_eq!(
            resolve_add_id(AddId::AutoSeq(10), last, 0).unwrap(),
            StreamId::new(10, 6)
        );
        assert_eq!(
            resolve_add_id(AddId::AutoSeq(0), StreamId::MIN, 0).unwrap(),
            StreamId::new(0, 1)
        );
        assert!(resolve_add_id(AddId::AutoSeq(9), last, 0).is_err());
        assert!(resolve_add_id(AddId::Explicit(last), last, 0).is_err());
        assert!(resolve_add_id(AddId::Explicit(StreamId::MIN), StreamId::MIN, 0).is_err());
        assert!(resolve_add_id(AddId::Auto, StreamId::MAX, 0).is_err());
        assert_eq!(parse_add_id(b"5-*").unwrap(), AddId::AutoSeq(5));
        assert!(parse_add_id(b"-*").is_err());
    }
}
