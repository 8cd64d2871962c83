//! The on-disk byte format of the log: segment file names, the segment header and record frames.
//! (The magic says `PKVOPLOG` and the extension `.oplog` for every log, the operation log's and
//! Raft's alike: the format is that of the operation log it started as.)
//!
//! Everything is little-endian. A segment file is named `<first_lsn as 20 decimal digits>.oplog`
//! (zero-padded so that lexical order is LSN order) and holds:
//!
//! ```text
//! segment header, 32 bytes
//!   0..8    magic  b"PKVOPLOG"
//!   8..12   format version, u32 (= 1)
//!   12..16  reserved, u32, zero
//!   16..24  first LSN of the segment, u64 (equals the LSN in the file name)
//!   24..28  reserved, u32, zero
//!   28..32  CRC32C of bytes 0..28, u32
//! then zero or more record frames, back to back
//!   0..4    payload length in bytes, u32 (at most the configured max record size)
//!   4..8    CRC32C of (bytes 0..4 ++ bytes 8..16 ++ payload), u32
//!   8..16   LSN, u64 (the segment's first LSN for the first frame, then +1 per frame)
//!   16..    payload
//! ```
//!
//! Invariants the decoder checks: the header CRC and magic/version; each frame's length is at
//! most `max_record_bytes` (checked *before* anything of that size is allocated or read); each
//! frame's CRC; and LSNs dense from the header's first LSN. The CRC covers the length and the LSN,
//! so a frame whose length field was damaged cannot be mistaken for a shorter valid frame, and a
//! valid frame written at the wrong place cannot be mistaken for its neighbour.
//!
//! The decoder never allocates more than `max_record_bytes` for a payload, whatever the input.

use crate::names::NumberedName;
use std::io::{self, Read};

/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"PKVOPLOG";
/// The version of this byte format, stored in every segment header.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the segment header in bytes.
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Size of a record frame's header (length, CRC, LSN) in bytes.
pub const FRAME_HEADER_BYTES: usize = 16;
/// File name extension of segment files.
pub const SEGMENT_EXTENSION: &str = "oplog";

/// Segment file names: the first LSN, 20 digits, then `.oplog`.
pub const SEGMENT_NAME: NumberedName = NumberedName::new("", 20, ".oplog");

/// The file name of the segment whose first record has LSN `first_lsn`.
pub fn segment_file_name(first_lsn: u64) -> String {
    SEGMENT_NAME.format(first_lsn)
}

/// Parses a segment file name back into its first LSN; `None` for any other name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    SEGMENT_NAME.parse(name)
}

/// Encodes the 32-byte header of a segment whose first record will have LSN `first_lsn`.
pub fn encode_segment_header(first_lsn: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Why a segment header was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than [`SEGMENT_HEADER_BYTES`] bytes.
    Short {
        /// How many bytes there were.
        available: usize,
    },
    /// The CRC over bytes 0..28 does not match.
    BadChecksum,
    /// The magic bytes are not [`SEGMENT_MAGIC`].
    BadMagic,
    /// A format version this code does not read.
    UnsupportedVersion(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Short { available } => {
                write!(
                    f,
                    "segment header is {available} bytes, expected {SEGMENT_HEADER_BYTES}"
                )
            }
            HeaderError::BadChecksum => write!(f, "segment header CRC32C mismatch"),
            HeaderError::BadMagic => write!(f, "not a log segment (bad magic bytes)"),
            HeaderError::UnsupportedVersion(v) => {
                write!(f, "segment format version {v} is not supported (this build reads {FORMAT_VERSION})")
            }
        }
    }
}

/// Decodes a segment header, returning its first LSN.
pub fn decode_segment_header(bytes: &[u8]) -> Result<u64, HeaderError> {
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return Err(HeaderError::Short {
            available: bytes.len(),
        });
    }
    let stored_crc = u32::from_le_bytes(bytes[28..32].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[0..28]) != stored_crc {
        return Err(HeaderError::BadChecksum);
    }
    if bytes[0..8] != SEGMENT_MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(HeaderError::UnsupportedVersion(version));
    }
    Ok(u64::from_le_bytes(
        bytes[16..24].try_into().expect("8 bytes"),
    ))
}

/// The CRC32C a frame stores: over the length field, the LSN field and the payload.
fn frame_checksum(length_field: [u8; 4], lsn: u64, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&length_field);
    let crc = crc32c::crc32c_append(crc, &lsn.to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

/// Appends the frame of record `lsn` with `payload` to `out`. The caller has checked the payload
/// length against its max record size (and therefore against `u32`).
pub fn encode_frame(lsn: u64, payload: &[u8], out: &mut Vec<u8>) {
    let length =
        u32::try_from(payload.len()).expect("payload length checked against max_record_bytes");
    let length_field = length.to_le_bytes();
    let crc = frame_checksum(length_field, lsn, payload);
    out.reserve(FRAME_HEADER_BYTES + payload.len());
    out.extend_from_slice(&length_field);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Size of the frame of a `payload_bytes`-byte record.
pub fn frame_bytes(payload_bytes: usize) -> usize {
    FRAME_HEADER_BYTES + payload_bytes
}

/// Why decoding the frame at some offset failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The input ended inside the frame (`available` of the `needed` bytes exist).
    Truncated {
        /// Bytes the frame needs (the header alone when its length could not be read).
        needed: u64,
        /// Bytes there were.
        available: u64,
    },
    /// The length field exceeds the max record size: corruption, nothing was allocated.
    TooLarge {
        /// The stored length.
        length: u32,
        /// The configured limit.
        max_record_bytes: u32,
    },
    /// The CRC does not match the frame's bytes.
    BadChecksum {
        /// The CRC stored in the frame.
        stored: u32,
        /// The CRC of the bytes as read.
        computed: u32,
    },
    /// The frame is intact but carries the wrong LSN (LSNs are dense within a segment).
    WrongLsn {
        /// The LSN the position implies.
        expected: u64,
        /// The LSN in the frame.
        found: u64,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Truncated { needed, available } => {
                write!(f, "record truncated: needs {needed} bytes, file has {available}")
            }
            FrameError::TooLarge { length, max_record_bytes } => write!(
                f,
                "record length {length} exceeds the max record size {max_record_bytes} (corrupt length field)"
            ),
            FrameError::BadChecksum { stored, computed } => {
                write!(f, "record CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})")
            }
            FrameError::WrongLsn { expected, found } => {
                write!(f, "record carries LSN {found} where LSN {expected} belongs")
            }
        }
    }
}

/// Reads `buf.len()` bytes unless the input ends first; returns how many were read.
fn read_up_to<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// One outcome of [`FrameReader::next_frame`].
#[derive(Debug)]
pub enum NextFrame {
    /// A valid frame; its payload is in [`FrameReader::payload`].
    Record {
        /// The record's LSN.
        lsn: u64,
    },
    /// The input ended exactly at a frame boundary.
    End,
    /// The frame starting at `offset` is bad; the reader must not be used further.
    Bad {
        /// Byte offset of the bad frame from the start of the input.
        offset: u64,
        /// What is wrong with it.
        error: FrameError,
        /// The frame's length field when it was within limits, so a caller can look past it.
        length: Option<u32>,
    },
}

/// Decodes frames one by one from a reader positioned just after a segment header.
///
/// Offsets are reported relative to the start of the segment file (the header included).
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    offset: u64,
    next_lsn: u64,
    max_record_bytes: u32,
    payload: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    /// Starts decoding at file offset `offset`, expecting LSN `next_lsn` first.
    pub fn new(reader: R, offset: u64, next_lsn: u64, max_record_bytes: u32) -> Self {
        FrameReader {
            reader,
            offset,
            next_lsn,
            max_record_bytes,
            payload: Vec::new(),
        }
    }

    /// File offset of the next frame (the end of the valid prefix so far).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The LSN the next frame must carry.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// The payload of the last [`NextFrame::Record`].
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Takes the payload of the last [`NextFrame::Record`] out of the reader.
    pub fn take_payload(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.payload)
    }

    /// Decodes the next frame. I/O errors are returned as `Err`; decode problems as
    /// [`NextFrame::Bad`].
    pub fn next_frame(&mut self) -> io::Result<NextFrame> {
        let start = self.offset;
        let mut header = [0u8; FRAME_HEADER_BYTES];
        let got = read_up_to(&mut self.reader, &mut header)?;
        if got == 0 {
            return Ok(NextFrame::End);
        }
        if got < FRAME_HEADER_BYTES {
            let error = FrameError::Truncated {
                needed: FRAME_HEADER_BYTES as u64,
                available: got as u64,
            };
            return Ok(NextFrame::Bad {
                offset: start,
                error,
                length: None,
            });
        }
        let length_field: [u8; 4] = header[0..4].try_into().expect("4 bytes");
        let length = u32::from_le_bytes(length_field);
        let stored = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let lsn = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        if length > self.max_record_bytes {
            let error = FrameError::TooLarge {
                length,
                max_record_bytes: self.max_record_bytes,
            };
            return Ok(NextFrame::Bad {
                offset: start,
                error,
                length: None,
            });
        }
        // Bounded by max_record_bytes, checked above.
        self.payload.clear();
        self.payload.resize(length as usize, 0);
        let got = read_up_to(&mut self.reader, &mut self.payload)?;
        if got < length as usize {
            let error = FrameError::Truncated {
                needed: (FRAME_HEADER_BYTES + length as usize) as u64,
                available: (FRAME_HEADER_BYTES + got) as u64,
            };
            return Ok(NextFrame::Bad {
                offset: start,
                error,
                length: Some(length),
            });
        }
        let computed = frame_checksum(length_field, lsn, &self.payload);
        if computed != stored {
            let error = FrameError::BadChecksum { stored, computed };
            return Ok(NextFrame::Bad {
                offset: start,
                error,
                length: Some(length),
            });
        }
        if lsn != self.next_lsn {
            let error = FrameError::WrongLsn {
                expected: self.next_lsn,
                found: lsn,
            };
            return Ok(NextFrame::Bad {
                offset: start,
                error,
                length: Some(length),
            });
        }
        self.offset += frame_bytes(length as usize) as u64;
        self.next_lsn += 1;
        Ok(NextFrame::Record { lsn })
    }
}

/// What decoding a whole in-memory segment image found (used by the fuzz target and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentImage {
    /// First LSN from the header.
    pub first_lsn: u64,
    /// The valid records, in order.
    pub records: Vec<(u64, Vec<u8>)>,
    /// Offset where the valid prefix ends.
    pub valid_bytes: u64,
    /// The first bad frame, if decoding stopped before the end.
    pub stopped_at: Option<(u64, FrameError)>,
}

/// Decodes a complete segment image held in memory: header, then frames until the end or the
/// first bad frame. Never panics and never allocates more than `max_record_bytes` per record.
pub fn decode_segment_image(
    bytes: &[u8],
    max_record_bytes: u32,
) -> Result<SegmentImage, HeaderError> {
    let first_lsn = decode_segment_header(bytes)?;
    let mut reader = FrameReader::new(
        &bytes[SEGMENT_HEADER_BYTES..],
        SEGMENT_HEADER_BYTES as u64,
        first_lsn,
        max_record_bytes,
    );
    let mut records = Vec::new();
    let stopped_at = loop {
        match reader.next_frame().expect("reading a slice cannot fail") {
            NextFrame::Record { lsn } => records.push((lsn, reader.take_payload())),
            NextFrame::End => break None,
            NextFrame::Bad { offset, error, .. } => break Some((offset, error)),
        }
    };
    Ok(SegmentImage {
        first_lsn,
        records,
        valid_bytes: reader.offset(),
        stopped_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_sort_by_lsn() {
        assert_eq!(segment_file_name(1), "00000000000000000001.oplog");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("1.oplog"), None);
        assert_eq!(parse_segment_file_name("0000000000000000000a.oplog"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let header = encode_segment_header(42);
        assert_eq!(decode_segment_header(&header), Ok(42));
        let mut damaged = header;
        damaged[17] ^= 1;
        assert_eq!(
            decode_segment_header(&damaged),
            Err(HeaderError::BadChecksum)
        );
        assert_eq!(
            decode_segment_header(&header[..10]),
            Err(HeaderError::Short { available: 10 })
        );
    }

    #[test]
    fn oversized_length_is_rejected_before_allocation() {
        let mut image = encode_segment_header(1).to_vec();
        image.extend_from_slice(&u32::MAX.to_le_bytes());
        image.extend_from_slice(&[0u8; 12]);
        let decoded = decode_segment_image(&image, 1024).unwrap();
        assert!(matches!(
            decoded.stopped_at,
            Some((
                32,
                FrameError::TooLarge {
                    length: u32::MAX,
                    ..
                }
            ))
        ));
    }
}
