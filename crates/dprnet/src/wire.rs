//! The client ⇄ worker framing (a D-Redis proxy or a cluster worker): a DPR header plus a RESP payload, length-prefixed.
//!
//! Protocol detection: a framed client sends [`FRAMED_PREAMBLE`] (8 bytes, starting with NUL) once,
//! right after connecting, then frames. A proxy reads the first byte of every connection: NUL
//! means the framed protocol (the next 7 bytes must complete the preamble), anything else plain
//! RESP. The choice is unambiguous because no RESP request starts with NUL: a multibulk request
//! starts with `*`, and an inline request holding a NUL byte is a protocol error in Redis (and in
//! `prefixkv_resp`), so no RESP client ever sends one.
//!
//! Request frame (client → proxy), all integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `body_len`: bytes after this field |
//! | 4 | 4 | `command_count`: RESP commands in the payload (≥ 1) |
//! | 8 | h | DPR request header (`prefixkv_dpr::DprHeader`, self-delimiting, CRC32C-checked) |
//! | 8+h | rest | the commands, RESP arrays of bulk strings, back to back |
//!
//! Response frame (proxy → client):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `body_len` |
//! | 4 | 1 | status: 0 = header follows, 1 = error text follows |
//! | 5 | … | status 0: DPR header (kind `Response` then one RESP reply per command, or kind `Rollback` and nothing else); status 1: UTF-8 error text |
//!
//! Invariants: `body_len` is checked against the receiver's `max_frame_bytes` before any buffer is
//! sized from it, so a peer can make us allocate only what it actually sends, up to that limit;
//! `command_count` is checked against `max_commands` and, by the proxy, against the commands
//! actually present in the payload (a mismatch would desynchronise the Redis connection).

use std::io::{self, Read, Write};

use bytes::BytesMut;
use prefixkv_dpr::{DprHeader, HeaderError};
use prefixkv_resp::{Command, Limits, RequestParser};

/// What a framed client sends once, first, on every connection (see the module docs).
pub const FRAMED_PREAMBLE: [u8; 8] = *b"\0DREDIS\x01";

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;
/// Default largest frame body accepted, in bytes (16 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// Default largest number of commands in one batch.
pub const DEFAULT_MAX_COMMANDS: u32 = 4096;
/// Default largest number of dependencies in a request header.
pub const DEFAULT_MAX_DEPENDENCIES: u32 = 1024;

/// Errors decoding a frame.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed.
    #[error("connection I/O: {0}")]
    Io(#[from] io::Error),
    /// The announced body is larger than allowed.
    #[error("frame at stream offset {stream_offset}: body of {body_bytes} bytes exceeds the limit of {max_bytes} bytes; raise --max-frame-bytes or send smaller batches")]
    FrameTooLarge {
        /// Where the frame started in the stream.
        stream_offset: u64,
        /// Announced body length.
        body_bytes: usize,
        /// The limit.
        max_bytes: usize,
    },
    /// The body is too short for its fixed fields.
    #[error(
        "frame at stream offset {stream_offset}: body of {body_bytes} bytes is too short ({what})"
    )]
    Truncated {
        /// Where the frame started.
        stream_offset: u64,
        /// Body length.
        body_bytes: usize,
        /// What was missing.
        what: &'static str,
    },
    /// The command count is zero or above the limit.
    #[error("frame at stream offset {stream_offset}: command count {count} is outside 1..={max}")]
    BadCommandCount {
        /// Where the frame started.
        stream_offset: u64,
        /// Announced count.
        count: u32,
        /// The limit.
        max: u32,
    },
    /// The DPR header did not decode.
    #[error("frame at stream offset {stream_offset}: DPR header at body offset {header_offset}: {source}")]
    Header {
        /// Where the frame started.
        stream_offset: u64,
        /// Offset of the header inside the body.
        header_offset: usize,
        /// The decoder's error.
        source: HeaderError,
    },
    /// An unknown response status byte.
    #[error("frame at stream offset {stream_offset}: unknown response status {status}")]
    BadStatus {
        /// Where the frame started.
        stream_offset: u64,
        /// The byte.
        status: u8,
    },
}

/// A decoded request frame.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestFrame {
    /// Commands announced.
    pub command_count: u32,
    /// The DPR header.
    pub header: DprHeader,
    /// The RESP commands, unparsed.
    pub payload: Vec<u8>,
}

/// A decoded response frame.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseFrame {
    /// A DPR header (`Response` or `Rollback`) and, for `Response`, the raw RESP replies.
    Header {
        /// The header.
        header: DprHeader,
        /// Raw RESP replies (empty for `Rollback`).
        replies: Vec<u8>,
    },
    /// The proxy could not run the batch (its Redis failed, a malformed frame, ...). Whether the
    /// commands ran is unknown.
    Error(String),
}

/// Limits applied when reading frames.
#[derive(Clone, Copy, Debug)]
pub struct FrameLimits {
    /// Largest body accepted.
    pub max_frame_bytes: usize,
    /// Largest command count accepted.
    pub max_commands: u32,
    /// Largest dependency count in a header.
    pub max_dependencies: u32,
    /// Limits of plain RESP connections (bulk length, array length, inline line length), checked
    /// by `prefixkv_resp`'s parser before anything is sized from them. A pipelined run of
    /// commands is also cut into batches of at most `max_commands` commands and about
    /// `max_frame_bytes` bytes.
    pub resp: Limits,
}

impl Default for FrameLimits {
    fn default() -> Self {
        Self {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_commands: DEFAULT_MAX_COMMANDS,
            max_dependencies: DEFAULT_MAX_DEPENDENCIES,
            resp: Limits {
                // A single argument may not exceed what a framed batch may hold.
                proto_max_bulk_len: DEFAULT_MAX_FRAME_BYTES,
                ..Limits::default()
            },
        }
    }
}

fn body_len(length: usize, stream_offset: u64, limits: &FrameLimits) -> Result<u32, WireError> {
    if length > limits.max_frame_bytes || length > u32::MAX as usize {
        return Err(WireError::FrameTooLarge {
            stream_offset,
            body_bytes: length,
            max_bytes: limits.max_frame_bytes,
        });
    }
    Ok(length as u32)
}

/// Encodes a request frame into `out` (appending).
pub fn encode_request(
    out: &mut Vec<u8>,
    header: &DprHeader,
    command_count: u32,
    payload: &[u8],
) -> Result<(), HeaderError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&command_count.to_le_bytes());
    header.encode_into(out)?;
    out.extend_from_slice(payload);
    let body = (out.len() - start - LENGTH_PREFIX_BYTES) as u32;
    out[start..start + 4].copy_from_slice(&body.to_le_bytes());
    Ok(())
}

/// Encodes a response frame into `out` (appending).
pub fn encode_response(out: &mut Vec<u8>, frame: &ResponseFrame) -> Result<(), HeaderError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    match frame {
        ResponseFrame::Header { header, replies } => {
            out.push(0);
            header.encode_into(out)?;
            out.extend_from_slice(replies);
        }
        ResponseFrame::Error(text) => {
            out.push(1);
            out.extend_from_slice(text.as_bytes());
        }
    }
    let body = (out.len() - start - LENGTH_PREFIX_BYTES) as u32;
    out[start..start + 4].copy_from_slice(&body.to_le_bytes());
    Ok(())
}

/// Decodes a request body (the bytes after the length prefix).
pub fn decode_request_body(
    body: &[u8],
    stream_offset: u64,
    limits: &FrameLimits,
) -> Result<RequestFrame, WireError> {
    if body.len() < 4 {
        return Err(WireError::Truncated {
            stream_offset,
            body_bytes: body.len(),
            what: "command count",
        });
    }
    let command_count = u32::from_le_bytes(body[0..4].try_into().expect("4 bytes"));
    if command_count == 0 || command_count > limits.max_commands {
        return Err(WireError::BadCommandCount {
            stream_offset,
            count: command_count,
            max: limits.max_commands,
        });
    }
    let (header, header_bytes) =
        DprHeader::decode(&body[4..], limits.max_dependencies).map_err(|source| {
            WireError::Header {
                stream_offset,
                header_offset: 4,
                source,
            }
        })?;
    Ok(RequestFrame {
        command_count,
        header,
        payload: body[4 + header_bytes..].to_vec(),
    })
}

/// Decodes a response body (the bytes after the length prefix).
pub fn decode_response_body(
    body: &[u8],
    stream_offset: u64,
    limits: &FrameLimits,
) -> Result<ResponseFrame, WireError> {
    let Some((&status, rest)) = body.split_first() else {
        return Err(WireError::Truncated {
            stream_offset,
            body_bytes: 0,
            what: "status",
        });
    };
    match status {
        0 => {
            let (header, header_bytes) =
                DprHeader::decode(rest, limits.max_dependencies).map_err(|source| {
                    WireError::Header {
                        stream_offset,
                        header_offset: 1,
                        source,
                    }
                })?;
            Ok(ResponseFrame::Header {
                header,
                replies: rest[header_bytes..].to_vec(),
            })
        }
        1 => Ok(ResponseFrame::Error(
            String::from_utf8_lossy(rest).into_owned(),
        )),
        status => Err(WireError::BadStatus {
            stream_offset,
            status,
        }),
    }
}

/// Reads frames from a stream, tracking the stream offset for error messages.
pub struct FrameReader<R> {
    inner: R,
    stream_offset: u64,
    limits: FrameLimits,
    body: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    /// A reader over `inner`.
    pub fn new(inner: R, limits: FrameLimits) -> Self {
        Self {
            inner,
            stream_offset: 0,
            limits,
            body: Vec::new(),
        }
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// Reads the next body. `Ok(None)` on a clean end of stream before a frame starts.
    fn read_body(&mut self) -> Result<Option<u64>, WireError> {
        let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
        let mut filled = 0;
        while filled < prefix.len() {
            match self.inner.read(&mut prefix[filled..]) {
                Ok(0) if filled == 0 => return Ok(None),
                Ok(0) => return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => filled += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error.into()),
            }
        }
        let start = self.stream_offset;
        let length = u32::from_le_bytes(prefix) as usize;
        body_len(length, start, &self.limits)?;
        // Grow only to what was announced *and* is within the limit; bytes are then read into it.
        self.body.clear();
        self.body.resize(length, 0);
        self.inner.read_exact(&mut self.body)?;
        self.stream_offset += (LENGTH_PREFIX_BYTES + length) as u64;
        Ok(Some(start))
    }

    /// Reads one request frame; `Ok(None)` at a clean end of stream.
    pub fn read_request(&mut self) -> Result<Option<RequestFrame>, WireError> {
        match self.read_body()? {
            None => Ok(None),
            Some(start) => decode_request_body(&self.body, start, &self.limits).map(Some),
        }
    }

    /// Reads one response frame; `Ok(None)` at a clean end of stream.
    pub fn read_response(&mut self) -> Result<Option<ResponseFrame>, WireError> {
        match self.read_body()? {
            None => Ok(None),
            Some(start) => decode_response_body(&self.body, start, &self.limits).map(Some),
        }
    }
}

/// Parses a request frame's payload into its RESP commands, which must be exactly the
/// `command_count` the frame announces: a mismatch would desynchronise whatever runs them (a
/// pooled Redis connection, a worker's replies), so the frame is refused with the reason.
pub fn frame_commands(frame: &RequestFrame) -> Result<Vec<Command>, String> {
    let mut parser = RequestParser::new(Limits::default());
    let mut buffer = BytesMut::from(&frame.payload[..]);
    let mut commands = Vec::with_capacity(frame.command_count as usize);
    while !buffer.is_empty() {
        match parser.parse(&mut buffer) {
            Ok(Some(command)) => commands.push(command),
            Ok(None) => {
                return Err(format!(
                    "payload ends inside a command after {} whole commands",
                    commands.len()
                ))
            }
            Err(error) => return Err(format!("payload command {}: {error}", commands.len())),
        }
    }
    if commands.len() != frame.command_count as usize {
        return Err(format!(
            "frame announces {} commands but its payload holds {}",
            frame.command_count,
            commands.len()
        ));
    }
    Ok(commands)
}

/// Writes all of `bytes` (a helper so callers need not import `Write`).
pub fn write_all(writer: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    writer.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_dpr::{HeaderKind, WorkerVersion};
    use proptest::prelude::*;

    fn header(dependencies: usize) -> DprHeader {
        DprHeader {
            kind: HeaderKind::Request,
            world_line: 3,
            version: 7,
            sender: 11,
            batch_sequence: 42,
            dependencies: (0..dependencies as u64)
                .map(|w| WorkerVersion::new(w, w + 1))
                .collect(),
        }
    }

    proptest! {
        #[test]
        fn request_round_trips(deps in 0usize..8, count in 1u32..100, payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut out = Vec::new();
            encode_request(&mut out, &header(deps), count, &payload).unwrap();
            let mut reader = FrameReader::new(&out[..], FrameLimits::default());
            let frame = reader.read_request().unwrap().unwrap();
            prop_assert_eq!(frame.command_count, count);
            prop_assert_eq!(frame.header, header(deps));
            prop_assert_eq!(frame.payload, payload);
            prop_assert!(reader.read_request().unwrap().is_none());
        }

        #[test]
        fn arbitrary_request_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_request_body(&bytes, 0, &FrameLimits::default());
            let _ = decode_response_body(&bytes, 0, &FrameLimits::default());
            let mut reader = FrameReader::new(&bytes[..], FrameLimits { max_frame_bytes: 256, ..FrameLimits::default() });
            while let Ok(Some(_)) = reader.read_request() {}
        }

        #[test]
        fn truncated_requests_are_rejected(deps in 0usize..4, cut in 0usize..64) {
            let mut out = Vec::new();
            encode_request(&mut out, &header(deps), 1, b"").unwrap();
            let body = &out[4..];
            let cut = cut.min(body.len().saturating_sub(1));
            prop_assert!(decode_request_body(&body[..cut], 0, &FrameLimits::default()).is_err());
        }
    }

    #[test]
    fn oversized_frame_is_rejected_before_allocation() {
        let bytes = u32::MAX.to_le_bytes();
        let mut reader = FrameReader::new(&bytes[..], FrameLimits::default());
        assert!(matches!(
            reader.read_request(),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn response_round_trips() {
        let mut out = Vec::new();
        let frame = ResponseFrame::Header {
            header: header(2),
            replies: b"+OK\r\n".to_vec(),
        };
        encode_response(&mut out, &frame).unwrap();
        encode_response(&mut out, &ResponseFrame::Error("redis down".into())).unwrap();
        let mut reader = FrameReader::new(&out[..], FrameLimits::default());
        assert_eq!(reader.read_response().unwrap().unwrap(), frame);
        assert_eq!(
            reader.read_response().unwrap().unwrap(),
            ResponseFrame::Error("redis down".into())
        );
    }
}
