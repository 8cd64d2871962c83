//! Client side: decoding one RESP2 or RESP3 reply.
//!
//! Two passes over the buffer, neither recursive:
//!
//! 1. `Walk::advance` walks the frame's headers with an explicit stack of "elements still expected"
//!    per open aggregate, validating every header against [`Limits`], and returns the frame's
//!    length once all of it is in the buffer (or `None`). It allocates only the stack, whose
//!    depth is at most `max_nesting_depth`.
//! 2. `build` runs only on a complete frame, split off the buffer and frozen, and builds the
//!    [`Reply`] with zero-copy slices. Only here are vectors sized from counts, which is safe
//!    because every element takes at least 3 bytes of the (complete, received) frame: a count
//!    can no longer claim more than the bytes that arrived.
//!
//! [`ReplyParser`] keeps the walk's state between calls, so a partial frame is walked on from
//! where it stopped; [`parse_reply`] is the stateless form (it re-walks a partial frame, touching
//! only headers, since bulk payloads are skipped by length).
//!
//! Accepted: every RESP2 and RESP3 type Redis sends (see [`Reply`]), plus the RESP2 nulls
//! `$-1`/`*-1` in either protocol. Not implemented (rejected with
//! [`ProtocolError::Unsupported`]): RESP3 attributes (`|`) and streamed strings and aggregates
//! (`$?`, `*?`), which Redis never sends.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::encode::is_big_number;
use crate::number::parse_i64;
use crate::{Limits, ProtocolError, Reply};

/// Decodes the reply at the front of `buffer`.
///
/// Returns `Ok(None)` if the reply is not complete yet (nothing is removed), or the reply after
/// removing exactly its bytes. An error means the stream is unusable.
///
/// Stateless: a partial reply is walked again from its start on the next call. For a stream of
/// possibly large replies (a proxy, a load generator) use a [`ReplyParser`], which resumes.
pub fn parse_reply(buffer: &mut BytesMut, limits: Limits) -> Result<Option<Reply>, ProtocolError> {
    ReplyParser::new(limits).parse(buffer)
}

/// Incremental reply decoder for one connection: [`parse_reply`] that remembers how far it got
/// in a partly received reply, so each byte of a large reply is examined about once however it
/// is split into reads.
#[derive(Clone, Debug)]
pub struct ReplyParser {
    limits: Limits,
    walk: Walk,
}

impl ReplyParser {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            walk: Walk::default(),
        }
    }

    /// Decodes the reply at the front of `buffer`: `Ok(None)` if it is incomplete (nothing is
    /// removed; append to `buffer` and call again), or the reply after removing exactly its
    /// bytes. After an error the stream is unusable.
    ///
    /// # Panics
    ///
    /// If bytes were removed from `buffer` between calls while a reply was incomplete (a caller
    /// bug: only appending is allowed then).
    pub fn parse(&mut self, buffer: &mut BytesMut) -> Result<Option<Reply>, ProtocolError> {
        assert!(
            self.walk.position <= buffer.len(),
            "reply buffer shrank under a partly decoded reply"
        );
        let Some(frame_len) = self.walk.advance(buffer, &self.limits)? else {
            return Ok(None);
        };
        self.walk.position = 0;
        debug_assert!(self.walk.open.is_empty());
        let frame = buffer.split_to(frame_len).freeze();
        Ok(Some(build(&frame, &self.limits)?))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AggregateKind {
    Array,
    Set,
    Push,
    Map,
}

/// One frame header, with ranges into the buffer for its payload.
#[derive(Debug)]
enum Header {
    SimpleString(Range<usize>),
    Error(Range<usize>),
    Integer(i64),
    BulkString(Range<usize>),
    NullBulkString,
    NullArray,
    Null,
    Double(f64),
    Boolean(bool),
    BigNumber(Range<usize>),
    VerbatimString {
        format: [u8; 3],
        text: Range<usize>,
    },
    BlobError(Range<usize>),
    /// `count` elements follow (for a map, `count` pairs).
    Aggregate {
        kind: AggregateKind,
        count: usize,
    },
}

/// Reads the header of the frame starting at `start`. Returns it and where the next frame
/// starts, or `None` if the header (or a string payload) is incomplete.
fn read_header(
    buffer: &[u8],
    start: usize,
    limits: &Limits,
) -> Result<Option<(Header, usize)>, ProtocolError> {
    let Some(&kind) = buffer.get(start) else {
        return Ok(None);
    };
    let Some((content, next)) = read_line(buffer, start + 1, limits, kind)? else {
        return Ok(None);
    };
    let text = &buffer[content.clone()];
    let header = match kind {
        b'+' => Header::SimpleString(content),
        b'-' => Header::Error(content),
        b':' => Header::Integer(parse_integer(text).ok_or(ProtocolError::InvalidLine("integer"))?),
        b',' => Header::Double(parse_double(text).ok_or(ProtocolError::InvalidLine("double"))?),
        b'#' => match text {
            b"t" => Header::Boolean(true),
            b"f" => Header::Boolean(false),
            _ => return Err(ProtocolError::InvalidLine("boolean")),
        },
        b'_' if text.is_empty() => Header::Null,
        b'_' => return Err(ProtocolError::InvalidLine("null")),
        b'(' if is_big_number(text) => Header::BigNumber(content),
        b'(' => return Err(ProtocolError::InvalidLine("big number")),
        b'$' | b'!' | b'=' => {
            if text == b"?" {
                return Err(ProtocolError::Unsupported(kind));
            }
            if kind == b'$' && text == b"-1" {
                return Ok(Some((Header::NullBulkString, next)));
            }
            let len = parse_i64(text)
                .filter(|&len| len >= 0 && len as u64 <= limits.proto_max_bulk_len as u64)
                .ok_or(ProtocolError::InvalidBulkLength)? as usize;
            if buffer.len() - next < len.saturating_add(2) {
                return Ok(None);
            }
            let payload = next..next + len;
            if &buffer[payload.end..payload.end + 2] != b"\r\n" {
                return Err(ProtocolError::ExpectedCrlf);
            }
            let after = payload.end + 2;
            let header = match kind {
                b'$' => Header::BulkString(payload),
                b'!' => Header::BlobError(payload),
                _ => {
                    let bytes = &buffer[payload.clone()];
                    if len < 4 || bytes[3] != b':' {
                        return Err(ProtocolError::InvalidLine("verbatim string"));
                    }
                    Header::VerbatimString {
                        format: [bytes[0], bytes[1], bytes[2]],
                        text: payload.start + 4..payload.end,
                    }
                }
            };
            return Ok(Some((header, after)));
        }
        b'*' | b'~' | b'>' | b'%' => {
            if text == b"?" {
                return Err(ProtocolError::Unsupported(kind));
            }
            if kind == b'*' && text == b"-1" {
                return Ok(Some((Header::NullArray, next)));
            }
            let count = parse_i64(text)
                .filter(|&count| count >= 0 && count as u64 <= limits.max_multibulk_len as u64)
                .ok_or(ProtocolError::InvalidMultibulkLength)? as usize;
            let kind = match kind {
                b'*' => AggregateKind::Array,
                b'~' => AggregateKind::Set,
                b'>' => AggregateKind::Push,
                _ => AggregateKind::Map,
            };
            Header::Aggregate { kind, count }
        }
        b'|' => return Err(ProtocolError::Unsupported(kind)),
        other => return Err(ProtocolError::UnknownReplyType(other)),
    };
    Ok(Some((header, next)))
}

/// Finds the line starting at `start`: its content range and where the next byte after its
/// CRLF is. The content must hold no CR or LF and be at most `max_inline_len` bytes.
fn read_line(
    buffer: &[u8],
    start: usize,
    limits: &Limits,
    kind: u8,
) -> Result<Option<(Range<usize>, usize)>, ProtocolError> {
    let available = &buffer[start.min(buffer.len())..];
    let window = &available[..available.len().min(limits.max_inline_len.saturating_add(1))];
    let too_long = || match kind {
        b'$' | b'!' | b'=' => ProtocolError::TooBigBulkCount,
        b'*' | b'~' | b'>' | b'%' => ProtocolError::TooBigMultibulkCount,
        _ => ProtocolError::InvalidLine("over-long"),
    };
    match memchr::memchr2(b'\r', b'\n', window) {
        None if available.len() > limits.max_inline_len => Err(too_long()),
        None => Ok(None),
        Some(offset) if window[offset] == b'\n' => Err(ProtocolError::ExpectedCrlf),
        Some(offset) => match available.get(offset + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((start..start + offset, start + offset + 2))),
            Some(_) => Err(ProtocolError::ExpectedCrlf),
        },
    }
}

/// RESP3 allows an explicit `+` sign on integers; otherwise Redis's strict form.
fn parse_integer(text: &[u8]) -> Option<i64> {
    match text.strip_prefix(b"+") {
        Some(rest) if rest.first() != Some(&b'-') => parse_i64(rest),
        Some(_) => None,
        None => parse_i64(text),
    }
}

fn parse_double(text: &[u8]) -> Option<f64> {
    match text {
        b"inf" | b"+inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        b"nan" | b"-nan" => Some(f64::NAN),
        _ => {
            // Only plain decimal syntax: Rust would also accept `infinity` or `NaN` spellings.
            let plain = text
                .iter()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'));
            if !plain || text.is_empty() {
                return None;
            }
            std::str::from_utf8(text).ok()?.parse().ok()
        }
    }
}

/// Pass 1 state: how far the walk over a partly received frame got. Resuming it makes a large
/// reply arriving in many reads cost one walk, not one per read.
#[derive(Clone, Debug, Default)]
struct Walk {
    /// Start of the next header to read.
    position: usize,
    /// Elements still expected by each open aggregate, innermost last.
    open: Vec<usize>,
}

impl Walk {
    /// Walks on from where the last call stopped; returns the frame's length once it is all in
    /// `buffer`. On `None` the state points at the first incomplete header.
    fn advance(&mut self, buffer: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
        loop {
            let Some((header, next)) = read_header(buffer, self.position, limits)? else {
                return Ok(None);
            };
            self.position = next;
            if let Header::Aggregate { kind, count } = header {
                let elements = element_count(kind, count);
                if elements > 0 {
                    if self.open.len() >= limits.max_nesting_depth {
                        return Err(ProtocolError::TooDeep);
                    }
                    self.open.push(elements);
                    continue;
                }
            }
            // One element finished: close every aggregate it completes.
            loop {
                match self.open.last_mut() {
                    None => return Ok(Some(self.position)),
                    Some(remaining) => {
                        *remaining -= 1;
                        if *remaining > 0 {
                            break;
                        }
                        self.open.pop();
                    }
                }
            }
        }
    }
}

fn element_count(kind: AggregateKind, count: usize) -> usize {
    match kind {
        AggregateKind::Map => count * 2,
        _ => count,
    }
}

/// An aggregate being built in pass 2.
struct Partial {
    kind: AggregateKind,
    expected: usize,
    elements: Vec<Reply>,
}

/// Pass 2: builds the reply of a complete frame (validated by pass 1).
fn build(frame: &Bytes, limits: &Limits) -> Result<Reply, ProtocolError> {
    let mut open: Vec<Partial> = Vec::new();
    let mut position = 0;
    loop {
        let (header, next) =
            read_header(frame, position, limits)?.ok_or(ProtocolError::InvalidLine("truncated"))?;
        position = next;
        let mut finished = match header {
            Header::SimpleString(range) => Reply::SimpleString(frame.slice(range)),
            Header::Error(range) => Reply::Error(frame.slice(range)),
            Header::Integer(value) => Reply::Integer(value),
            Header::BulkString(range) => Reply::BulkString(frame.slice(range)),
            Header::NullBulkString => Reply::NullBulkString,
            Header::NullArray => Reply::NullArray,
            Header::Null => Reply::Null,
            Header::Double(value) => Reply::Double(value),
            Header::Boolean(value) => Reply::Boolean(value),
            Header::BigNumber(range) => Reply::BigNumber(frame.slice(range)),
            Header::VerbatimString { format, text } => Reply::VerbatimString {
                format,
                text: frame.slice(text),
            },
            Header::BlobError(range) => Reply::BlobError(frame.slice(range)),
            Header::Aggregate { kind, count } => {
                let expected = element_count(kind, count);
                // Safe to pre-size: the frame is complete and each element takes >= 3 bytes.
                debug_assert!(expected * 3 <= frame.len());
                if expected > 0 {
                    open.push(Partial {
                        kind,
                        expected,
                        elements: Vec::with_capacity(expected),
                    });
                    continue;
                }
                finish(kind, Vec::new())
            }
        };
        loop {
            let Some(parent) = open.last_mut() else {
                return Ok(finished);
            };
            parent.elements.push(finished);
            if parent.elements.len() < parent.expected {
                break;
            }
            let Partial { kind, elements, .. } = open.pop().expect("parent exists");
            finished = finish(kind, elements);
        }
    }
}

fn finish(kind: AggregateKind, elements: Vec<Reply>) -> Reply {
    match kind {
        AggregateKind::Array => Reply::Array(elements),
        AggregateKind::Set => Reply::Set(elements),
        AggregateKind::Push => Reply::Push(elements),
        AggregateKind::Map => {
            debug_assert!(elements.len().is_multiple_of(2));
            let mut pairs = Vec::with_capacity(elements.len() / 2);
            let mut elements = elements.into_iter();
            while let (Some(key), Some(value)) = (elements.next(), elements.next()) {
                pairs.push((key, value));
            }
            Reply::Map(pairs)
        }
    }
}
