//! Server side: incremental parsing of client requests into [`Command`]s.
//!
//! Accepted forms (what Redis accepts, except that we check the CRLFs Redis skips without
//! looking and apply line limits independently of read boundaries; see `docs/resp.md`):
//!
//! - Multibulk: `*<count>\r\n` then `count` times `$<len>\r\n<len bytes>\r\n`. A count of zero or
//!   less is an empty request that is consumed and skipped.
//! - Inline: any request not starting with `*` is one line ending in `\n` (an optional `\r`
//!   before it is dropped), split by the quoting rules of the `inline` module. A blank line is
//!   skipped. A NUL byte before the newline is `too big inline request` (see `parse_inline`).
//!
//! Incremental and linear: the parser remembers how far it got inside a partly received request
//! (offsets into the caller's buffer), so bytes are examined a bounded number of times however
//! the stream is split (once by the state machine, plus once by the one-pass attempt made at a
//! request's start: `take_whole_multibulk`, which only takes requests that have wholly arrived in
//! the usual form and leaves everything else, errors included, to the state machine), and the
//! buffer is consumed only when a whole command is there. The caller must therefore
//! only *append* to the buffer between calls until a command is returned (the usual
//! read-into-`BytesMut` loop does this).
//!
//! Bounded: a header or inline line is searched only within `max_inline_len` bytes; counts and
//! lengths are checked against [`Limits`] before use; nothing is allocated from a claimed size.
//! The argument list grows with arguments actually received (its initial capacity is capped at
//! `INITIAL_ARGUMENTS_CAPACITY`), and a bulk argument is never reserved for: the caller's buffer
//! grows with the bytes that arrive, and the argument becomes a zero-copy slice of it.
//!
//! Determinism: the limit checks depend only on the bytes of the request, never on how they were
//! split into reads (a line is too long iff its terminator is not within `max_inline_len` bytes),
//! so splitting a stream anywhere gives the same commands and the same error.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::inline::split_inline;
use crate::number::parse_i64;
use crate::{Limits, ProtocolError};

/// Largest argument-list capacity reserved from a claimed `*<count>` before the arguments arrive.
const INITIAL_ARGUMENTS_CAPACITY: usize = 64;

/// Largest argument-range capacity kept between commands: one huge MSET must not pin its
/// bookkeeping for the rest of the connection's life.
const RETAINED_ARGUMENTS_CAPACITY: usize = 1024;

/// One client request: the command name and its arguments, as zero-copy slices of the read
/// buffer (copies only for inline arguments with quotes or escapes). Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// `args[0]` is the command name, as sent (any case).
    pub args: Vec<Bytes>,
}

impl Command {
    /// The command name as sent (compare case-insensitively).
    pub fn name(&self) -> &[u8] {
        &self.args[0]
    }
}

/// Where the parser is inside the request at the front of the buffer.
#[derive(Clone, Debug)]
enum State {
    /// At the start of a request. `scanned_len` bytes of its first line are known not to hold
    /// the terminator (so the search resumes there).
    RequestStart { scanned_len: usize },
    /// Inside a multibulk request whose header and first arguments are parsed.
    Multibulk {
        /// Arguments not yet parsed.
        arguments_remaining: usize,
        /// Bytes of the buffer consumed by the parsed header and arguments.
        parsed_len: usize,
        /// Length announced by the `$<len>` line just parsed, when its payload has not arrived.
        bulk_len: Option<usize>,
        /// Bytes of the current `$<len>` line known not to hold its terminator.
        scanned_len: usize,
    },
    /// A protocol error happened; the stream cannot be resynchronised.
    Failed(ProtocolError),
}

/// Incremental request parser for one connection. See the module docs for the accepted syntax.
#[derive(Clone, Debug)]
pub struct RequestParser {
    limits: Limits,
    state: State,
    /// Byte ranges (in the buffer) of the arguments parsed so far; reused across commands.
    argument_ranges: Vec<Range<usize>>,
}

impl RequestParser {
    /// A parser enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: State::RequestStart { scanned_len: 0 },
            argument_ranges: Vec::new(),
        }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// `true` when part of a request has been parsed and the rest is awaited.
    pub fn is_mid_request(&self) -> bool {
        match self.state {
            State::RequestStart { scanned_len } => scanned_len > 0,
            State::Multibulk { .. } => true,
            State::Failed(_) => false,
        }
    }

    /// Parses the next command at the front of `buffer`.
    ///
    /// Returns `Ok(None)` when more bytes are needed (nothing is removed from `buffer`; append
    /// to it and call again), `Ok(Some(command))` after removing exactly that command's bytes
    /// (and any empty requests before it), or an error, after which the connection must be
    /// closed (every later call returns the same error).
    ///
    /// # Panics
    ///
    /// If bytes already parsed were removed from `buffer` between calls while a request was
    /// incomplete (a caller bug).
    pub fn parse(&mut self, buffer: &mut BytesMut) -> Result<Option<Command>, ProtocolError> {
        let mut args = Vec::new();
        Ok(self
            .parse_into(buffer, &mut args)?
            .then_some(Command { args }))
    }

    /// [`RequestParser::parse`] into a caller's argument list, so a connection can reuse the
    /// lists of the commands it ran instead of allocating one per command: `args` is cleared,
    /// then on `Ok(true)` holds the command's arguments (never empty); on `Ok(false)` (more bytes
    /// needed) and on an error it is left empty. Same bytes consumed, same errors as `parse`.
    pub fn parse_into(
        &mut self,
        buffer: &mut BytesMut,
        args: &mut Vec<Bytes>,
    ) -> Result<bool, ProtocolError> {
        args.clear();
        let result = self.parse_inner(buffer, args);
        if let Err(error) = &result {
            args.clear();
            self.state = State::Failed(error.clone());
        }
        result
    }

    fn parse_inner(
        &mut self,
        buffer: &mut BytesMut,
        args: &mut Vec<Bytes>,
    ) -> Result<bool, ProtocolError> {
        loop {
            match self.state {
                State::Failed(ref error) => return Err(error.clone()),
                State::RequestStart { scanned_len } => {
                    assert!(
                        scanned_len <= buffer.len(),
                        "request buffer shrank under a partly parsed request"
                    );
                    match buffer.first() {
                        None => return Ok(false),
                        Some(b'*') => {
                            if self.take_whole_multibulk(buffer, args) {
                                return Ok(true);
                            }
                            if !self.start_multibulk(buffer, scanned_len)? {
                                return Ok(false);
                            }
                        }
                        Some(_) => match self.parse_inline(buffer, scanned_len)? {
                            InlineOutcome::Incomplete => return Ok(false),
                            InlineOutcome::Blank => {}
                            InlineOutcome::Command(mut command) => {
                                args.append(&mut command.args);
                                return Ok(true);
                            }
                        },
                    }
                }
                State::Multibulk { .. } => return self.continue_multibulk(buffer, args),
            }
        }
    }

    /// Parses a `*<count>` line. Returns `false` if it is incomplete; on `true` the state is
    /// either a new multibulk request or (empty request consumed) the start of the next one.
    fn start_multibulk(
        &mut self,
        buffer: &mut BytesMut,
        scanned_len: usize,
    ) -> Result<bool, ProtocolError> {
        let line = find_line(
            buffer,
            1,
            scanned_len.saturating_sub(1),
            self.limits.max_inline_len,
            ProtocolError::TooBigMultibulkCount,
        )?;
        let (digits_end, line_end) = match line {
            Line::Incomplete { scanned_len } => {
                self.state = State::RequestStart {
                    scanned_len: scanned_len + 1,
                };
                return Ok(false);
            }
            Line::Complete {
                content_end,
                line_end,
            } => (content_end, line_end),
        };
        let count =
            parse_i64(&buffer[1..digits_end]).ok_or(ProtocolError::InvalidMultibulkLength)?;
        if count > 0 && count as u64 > self.limits.max_multibulk_len as u64 {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        if count <= 0 {
            // Redis skips empty multibulk requests (`*0`, `*-1`) silently.
            let _ = buffer.split_to(line_end);
            self.state = State::RequestStart { scanned_len: 0 };
            return Ok(true);
        }
        let count = count as usize;
        self.argument_ranges.clear();
        self.argument_ranges
            .reserve(count.min(INITIAL_ARGUMENTS_CAPACITY));
        self.state = State::Multibulk {
            arguments_remaining: count,
            parsed_len: line_end,
            bulk_len: None,
            scanned_len: 0,
        };
        Ok(true)
    }

    /// The usual case in one pass: a multibulk request that has wholly arrived, every header a
    /// plain number within the limits, every payload followed by its CRLF. Takes it (as
    /// `start_multibulk` and `continue_multibulk` would, to the byte) and returns `true`; for
    /// anything else (incomplete, an error, an empty request) returns `false` having changed
    /// nothing but the scratch `argument_ranges`, and the state machine parses it (reporting
    /// any error exactly as before). A request is tried here only from its start, so at most
    /// once before the state machine takes over: parsing stays linear.
    fn take_whole_multibulk(&mut self, buffer: &mut BytesMut, args: &mut Vec<Bytes>) -> bool {
        let limits = self.limits;
        let header = |at: usize| match digits_line(buffer, at, limits.max_inline_len) {
            Some(Line::Complete {
                content_end,
                line_end,
            }) => parse_i64(&buffer[at..content_end]).map(|value| (value, line_end)),
            _ => None,
        };
        let Some((count, mut at)) = header(1) else {
            return false;
        };
        if count <= 0 || count as u64 > limits.max_multibulk_len as u64 {
            return false;
        }
        self.argument_ranges.clear();
        for _ in 0..count {
            if buffer.get(at) != Some(&b'$') {
                return false;
            }
            let Some((len, payload_start)) = header(at + 1) else {
                return false;
            };
            if len < 0 || len as u64 > limits.proto_max_bulk_len as u64 {
                return false;
            }
            let Some(payload_end) = payload_start.checked_add(len as usize) else {
                return false;
            };
            if buffer.get(payload_end..payload_end.saturating_add(2)) != Some(&b"\r\n"[..]) {
                return false;
            }
            self.argument_ranges.push(payload_start..payload_end);
            at = payload_end + 2;
        }
        let request = buffer.split_to(at).freeze();
        // The header may have been seen incomplete before (its scanned length is stale now).
        self.state = State::RequestStart { scanned_len: 0 };
        args.extend(
            self.argument_ranges
                .iter()
                .map(|range| request.slice(range.clone())),
        );
        if self.argument_ranges.capacity() > RETAINED_ARGUMENTS_CAPACITY {
            self.argument_ranges = Vec::new();
        }
        true
    }

    fn continue_multibulk(
        &mut self,
        buffer: &mut BytesMut,
        args: &mut Vec<Bytes>,
    ) -> Result<bool, ProtocolError> {
        let State::Multibulk {
            ref mut arguments_remaining,
            ref mut parsed_len,
            ref mut bulk_len,
            ref mut scanned_len,
        } = self.state
        else {
            unreachable!("continue_multibulk called outside a multibulk request");
        };
        assert!(
            *parsed_len <= buffer.len(),
            "request buffer shrank under a partly parsed request"
        );
        while *arguments_remaining > 0 {
            let len = match *bulk_len {
                Some(len) => len,
                None => {
                    let Some(&first) = buffer.get(*parsed_len) else {
                        return Ok(false);
                    };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedDollar(first));
                    }
                    let digits_start = *parsed_len + 1;
                    let line = find_line(
                        buffer,
                        digits_start,
                        *scanned_len,
                        self.limits.max_inline_len,
                        ProtocolError::TooBigBulkCount,
                    )?;
                    let (digits_end, line_end) = match line {
                        Line::Incomplete {
                            scanned_len: scanned,
                        } => {
                            *scanned_len = scanned;
                            return Ok(false);
                        }
                        Line::Complete {
                            content_end,
                            line_end,
                        } => (content_end, line_end),
                    };
                    let len = parse_i64(&buffer[digits_start..digits_end])
                        .filter(|&len| {
                            len >= 0 && len as u64 <= self.limits.proto_max_bulk_len as u64
                        })
                        .ok_or(ProtocolError::InvalidBulkLength)?
                        as usize;
                    *scanned_len = 0;
                    *parsed_len = line_end;
                    *bulk_len = Some(len);
                    len
                }
            };
            // Wait for the payload and its CRLF without reserving anything: the caller's
            // buffer grows only with bytes that arrive.
            let available = buffer.len() - *parsed_len;
            if available < len.saturating_add(2) {
                return Ok(false);
            }
            let payload_end = *parsed_len + len;
            if &buffer[payload_end..payload_end + 2] != b"\r\n" {
                return Err(ProtocolError::ExpectedCrlf);
            }
            self.argument_ranges.push(*parsed_len..payload_end);
            *parsed_len = payload_end + 2;
            *bulk_len = None;
            *arguments_remaining -= 1;
        }
        let request = buffer.split_to(*parsed_len).freeze();
        self.state = State::RequestStart { scanned_len: 0 };
        args.extend(
            self.argument_ranges
                .iter()
                .map(|range| request.slice(range.clone())),
        );
        debug_assert!(!args.is_empty());
        if self.argument_ranges.capacity() > RETAINED_ARGUMENTS_CAPACITY {
            self.argument_ranges = Vec::new();
        }
        Ok(true)
    }

    fn parse_inline(
        &mut self,
        buffer: &mut BytesMut,
        scanned_len: usize,
    ) -> Result<InlineOutcome, ProtocolError> {
        let max_len = self.limits.max_inline_len;
        // The line may be at most `max_len` bytes before its `\n`.
        let window_end = buffer.len().min(max_len.saturating_add(1));
        let resume = scanned_len.min(window_end);
        let found =
            memchr::memchr2(b'\n', 0, &buffer[resume..window_end]).map(|offset| offset + resume);
        if let Some(position) = found {
            if buffer[position] == 0 {
                // Redis finds the newline with `strchr`, which stops at a NUL: such a request
                // never completes and Redis closes the connection with this error once 64 KiB
                // are buffered. We give the same error without the wait.
                return Err(ProtocolError::TooBigInline);
            }
        }
        let Some(newline) = found else {
            if buffer.len() > max_len {
                return Err(ProtocolError::TooBigInline);
            }
            self.state = State::RequestStart {
                scanned_len: buffer.len(),
            };
            return Ok(InlineOutcome::Incomplete);
        };
        self.state = State::RequestStart { scanned_len: 0 };
        let mut line = buffer.split_to(newline + 1).freeze();
        line.truncate(newline);
        if line.last() == Some(&b'\r') {
            line.truncate(newline - 1);
        }
        let args = split_inline(&line)?;
        if args.is_empty() {
            Ok(InlineOutcome::Blank)
        } else {
            Ok(InlineOutcome::Command(Command { args }))
        }
    }
}

enum InlineOutcome {
    Incomplete,
    Blank,
    Command(Command),
}

#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// No terminator yet; the first `scanned_len` bytes after the start hold no `\r`.
    Incomplete { scanned_len: usize },
    /// The content is `start..content_end`; the line with its CRLF ends at `line_end`.
    Complete { content_end: usize, line_end: usize },
}

/// Finds the CRLF ending the header line whose content starts at `start`, searching at most
/// `max_len + 1` content bytes (so a line over `max_len` is `too_long`, however it was split).
/// The first `scanned_len` content bytes are already known to hold no `\r`.
fn find_line(
    buffer: &[u8],
    start: usize,
    scanned_len: usize,
    max_len: usize,
    too_long: ProtocolError,
) -> Result<Line, ProtocolError> {
    match digits_line(buffer, start, max_len) {
        Some(line) => Ok(line),
        None => search_line(buffer, start, scanned_len, max_len, too_long),
    }
}

/// [`find_line`] by searching for the `\r`.
fn search_line(
    buffer: &[u8],
    start: usize,
    scanned_len: usize,
    max_len: usize,
    too_long: ProtocolError,
) -> Result<Line, ProtocolError> {
    let available = &buffer[start.min(buffer.len())..];
    let window = &available[..available.len().min(max_len.saturating_add(1))];
    let resume = scanned_len.min(window.len());
    match memchr::memchr(b'\r', &window[resume..]) {
        None if available.len() > max_len => Err(too_long),
        None => Ok(Line::Incomplete {
            scanned_len: window.len(),
        }),
        Some(offset) => {
            let content_end = start + resume + offset;
            if content_end - start > max_len {
                return Err(too_long);
            }
            match buffer.get(content_end + 1) {
                // The `\r` is the last byte so far: rescan it next time (it is cheap).
                None => Ok(Line::Incomplete {
                    scanned_len: content_end - start,
                }),
                Some(b'\n') => Ok(Line::Complete {
                    content_end,
                    line_end: content_end + 2,
                }),
                Some(_) => Err(ProtocolError::ExpectedCrlf),
            }
        }
    }
}

/// The usual header line, found without a search: an optional `-` and at most 20 digits, then
/// CRLF, within `max_len` content bytes. Such a line's first `\r` is the one after the digits,
/// so this is exactly what the search in [`find_line`] would return; `None` for anything else
/// (incomplete, longer, other bytes), which the search then handles.
fn digits_line(buffer: &[u8], start: usize, max_len: usize) -> Option<Line> {
    let content = buffer.get(start..)?;
    let sign = usize::from(content.first() == Some(&b'-'));
    // A plain loop: this runs for every header line, and the iterator chain cost twice as much.
    let mut end = sign;
    while end < content.len() && content[end].is_ascii_digit() {
        end += 1;
        if end - sign > 20 {
            return None;
        }
    }
    if end > max_len || content.get(end) != Some(&b'\r') || content.get(end + 1) != Some(&b'\n') {
        return None;
    }
    Some(Line::Complete {
        content_end: start + end,
        line_end: start + end + 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path returns a line only where the search returns that same line, for header
    /// contents around every boundary it checks (sign, digit count, `max_len`, CRLF).
    #[test]
    fn digits_lines_are_what_the_search_finds() {
        let contents: &[&[u8]] = &[
            b"",
            b"0",
            b"3",
            b"-",
            b"-0",
            b"-1",
            b"007",
            b"12a",
            b"1-2",
            b"--1",
            b" 1",
            b"12345678901234567890",
            b"123456789012345678901",
            b"-12345678901234567890",
            b"-123456789012345678901",
            b"9223372036854775808",
            b"1\r2",
        ];
        let tails: &[&[u8]] = &[b"\r\n", b"\r", b"", b"\rx", b"\n", b"\r\nrest"];
        let mut fast_hits = 0;
        for content in contents {
            for tail in tails {
                for max_len in [0, 1, 2, 3, 19, 20, 21, 22, 64] {
                    for prefix in [&b""[..], b"$", b"*3\r\n$"] {
                        let buffer = [prefix, content, tail].concat();
                        let start = prefix.len();
                        let searched =
                            search_line(&buffer, start, 0, max_len, ProtocolError::TooBigBulkCount);
                        if let Some(line) = digits_line(&buffer, start, max_len) {
                            fast_hits += 1;
                            assert_eq!(Ok(line), searched, "{buffer:?} max_len {max_len}");
                        }
                    }
                }
            }
        }
        assert!(fast_hits > 0);
    }
}
