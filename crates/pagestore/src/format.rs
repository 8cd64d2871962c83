//! On-disk formats: the WAL header and the WAL frame header, and their checksums.
//!
//! All integers are little-endian. Page numbers are 1-based (page `n` lives at byte
//! `(n - 1) * page_size` of the database file); frame ids are 1-based (frame `f` starts at byte
//! `WAL_HEADER_BYTES + (f - 1) * (FRAME_HEADER_BYTES + page_size)` of the WAL file).
//!
//! WAL header (`WAL_HEADER_BYTES` = 32):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"PKVW"` |
//! | 4 | 4 | format version (`WAL_FORMAT_VERSION`) |
//! | 8 | 4 | page size in bytes (a power of two in 512..=65536) |
//! | 12 | 4 | checkpoint sequence (incremented at every log restart) |
//! | 16 | 4 | salt 1 (incremented at every log restart) |
//! | 20 | 4 | salt 2 (random at every log restart) |
//! | 24 | 4 | reserved, zero |
//! | 28 | 4 | CRC32C of bytes 0..28 |
//!
//! Frame (`FRAME_HEADER_BYTES` = 24, then one page):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | page number (>= 1) |
//! | 4 | 4 | commit marker: database size in pages after this commit, or 0 if not a commit's last frame |
//! | 8 | 4 | salt 1 (copied from the header) |
//! | 12 | 4 | salt 2 (copied from the header) |
//! | 16 | 4 | reserved, zero |
//! | 20 | 4 | cumulative checksum |
//! | 24 | page size | the page image |
//!
//! The cumulative checksum of frame `f` is `crc32c_append(c(f-1), frame_header[0..20] ++ page)`
//! with `c(0)` = the header's checksum. A frame is valid only if its salts equal the header's and
//! its checksum continues the chain; so a torn frame, a frame of an older log generation (left
//! behind by a restart), and every frame after either of them, are all rejected by recovery.

use prefixkv_storage::le::u32_at;

/// Size of the WAL header in bytes.
pub const WAL_HEADER_BYTES: usize = 32;
/// Size of a frame header in bytes (the page image follows).
pub const FRAME_HEADER_BYTES: usize = 24;
/// The WAL magic number.
pub const WAL_MAGIC: [u8; 4] = *b"PKVW";
/// The WAL format version this code writes and reads.
pub const WAL_FORMAT_VERSION: u32 = 1;
/// Smallest supported page size in bytes.
pub const MIN_PAGE_SIZE_BYTES: u32 = 512;
/// Largest supported page size in bytes (bounds every allocation sized by a header field).
pub const MAX_PAGE_SIZE_BYTES: u32 = 65_536;

/// The decoded WAL header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalHeader {
    /// Page size in bytes.
    pub page_size_bytes: u32,
    /// Checkpoint sequence: incremented at every log restart.
    pub checkpoint_sequence: u32,
    /// Salt 1: incremented at every log restart, so frames of older generations stop matching.
    pub salt1: u32,
    /// Salt 2: random at every log restart.
    pub salt2: u32,
}

/// Why a WAL header did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderDefect {
    /// Fewer than `WAL_HEADER_BYTES` bytes.
    #[error("the WAL header is truncated ({0} bytes, need 32)")]
    Truncated(usize),
    /// Wrong magic number: not a prefixkv WAL.
    #[error("bad magic {0:02x?} (expected \"PKVW\"): not a prefixkv pagestore WAL")]
    BadMagic([u8; 4]),
    /// A format version this code does not know.
    #[error("unsupported WAL format version {0} (this build reads version 1)")]
    BadVersion(u32),
    /// Page size outside the supported range or not a power of two.
    #[error("unsupported page size {0} (need a power of two in 512..=65536)")]
    BadPageSize(u32),
    /// Reserved bytes were not zero.
    #[error("reserved header bytes are not zero")]
    BadReserved,
    /// The header checksum does not match.
    #[error("WAL header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadChecksum {
        /// Checksum in the file.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
}

impl WalHeader {
    /// Encodes the header; returns the bytes and the header checksum (the chain's start).
    pub fn encode(&self) -> ([u8; WAL_HEADER_BYTES], u32) {
        let mut bytes = [0u8; WAL_HEADER_BYTES];
        bytes[0..4].copy_from_slice(&WAL_MAGIC);
        bytes[4..8].copy_from_slice(&WAL_FORMAT_VERSION.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.page_size_bytes.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.checkpoint_sequence.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.salt1.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.salt2.to_le_bytes());
        let checksum = crc32c::crc32c(&bytes[0..28]);
        bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
        (bytes, checksum)
    }

    /// Decodes and validates a header; returns it and its checksum.
    pub fn decode(bytes: &[u8]) -> Result<(WalHeader, u32), HeaderDefect> {
        if bytes.len() < WAL_HEADER_BYTES {
            return Err(HeaderDefect::Truncated(bytes.len()));
        }
        let magic: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
        if magic != WAL_MAGIC {
            return Err(HeaderDefect::BadMagic(magic));
        }
        let stored = u32_at(bytes, 28);
        let computed = crc32c::crc32c(&bytes[0..28]);
        if stored != computed {
            return Err(HeaderDefect::BadChecksum { stored, computed });
        }
        let version = u32_at(bytes, 4);
        if version != WAL_FORMAT_VERSION {
            return Err(HeaderDefect::BadVersion(version));
        }
        let page_size_bytes = u32_at(bytes, 8);
        if !valid_page_size(page_size_bytes) {
            return Err(HeaderDefect::BadPageSize(page_size_bytes));
        }
        if u32_at(bytes, 24) != 0 {
            return Err(HeaderDefect::BadReserved);
        }
        let header = WalHeader {
            page_size_bytes,
            checkpoint_sequence: u32_at(bytes, 12),
            salt1: u32_at(bytes, 16),
            salt2: u32_at(bytes, 20),
        };
        Ok((header, stored))
    }
}

/// True for the page sizes this crate supports.
pub fn valid_page_size(page_size_bytes: u32) -> bool {
    page_size_bytes.is_power_of_two()
        && (MIN_PAGE_SIZE_BYTES..=MAX_PAGE_SIZE_BYTES).contains(&page_size_bytes)
}

/// The decoded header of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Page number (1-based).
    pub page_number: u32,
    /// Database size in pages after the commit this frame ends, or 0.
    pub commit_size_pages: u32,
}

/// Why a frame was rejected (recovery stops at the first such frame).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameDefect {
    /// Fewer bytes than a frame.
    #[error("the frame is truncated ({got} bytes, need {need})")]
    Truncated {
        /// Bytes available.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Salts differ from the header's: a frame from an older log generation.
    #[error("salts differ from the header's (a frame of an older log generation)")]
    SaltMismatch,
    /// The checksum chain breaks here (a torn or corrupted frame).
    #[error("checksum chain breaks (stored {stored:#010x}, computed {computed:#010x})")]
    BadChecksum {
        /// Checksum in the file.
        stored: u32,
        /// Checksum continuing the chain.
        computed: u32,
    },
    /// Page number 0 or reserved bytes not zero.
    #[error("malformed frame header (page number 0 or reserved bytes set)")]
    Malformed,
}

/// Encodes a frame header for `page` and returns it with the new cumulative checksum.
pub fn encode_frame(
    header: &FrameHeader,
    wal: &WalHeader,
    previous_checksum: u32,
    page: &[u8],
) -> ([u8; FRAME_HEADER_BYTES], u32) {
    debug_assert!(header.page_number >= 1);
    debug_assert_eq!(page.len(), wal.page_size_bytes as usize);
    let mut bytes = [0u8; FRAME_HEADER_BYTES];
    bytes[0..4].copy_from_slice(&header.page_number.to_le_bytes());
    bytes[4..8].copy_from_slice(&header.commit_size_pages.to_le_bytes());
    bytes[8..12].copy_from_slice(&wal.salt1.to_le_bytes());
    bytes[12..16].copy_from_slice(&wal.salt2.to_le_bytes());
    let checksum = crc32c::crc32c_append(
        crc32c::crc32c_append(previous_checksum, &bytes[0..20]),
        page,
    );
    bytes[20..24].copy_from_slice(&checksum.to_le_bytes());
    (bytes, checksum)
}

/// Decodes and validates one whole frame (`FRAME_HEADER_BYTES` + page size bytes) against the
/// header's salts and the chain so far; returns the header and the new cumulative checksum.
pub fn decode_frame(
    frame: &[u8],
    wal: &WalHeader,
    previous_checksum: u32,
) -> Result<(FrameHeader, u32), FrameDefect> {
    let need = FRAME_HEADER_BYTES + wal.page_size_bytes as usize;
    if frame.len() < need {
        return Err(FrameDefect::Truncated {
            got: frame.len(),
            need,
        });
    }
    if u32_at(frame, 8) != wal.salt1 || u32_at(frame, 12) != wal.salt2 {
        return Err(FrameDefect::SaltMismatch);
    }
    let stored = u32_at(frame, 20);
    let computed = crc32c::crc32c_append(
        crc32c::crc32c_append(previous_checksum, &frame[0..20]),
        &frame[FRAME_HEADER_BYTES..need],
    );
    if stored != computed {
        return Err(FrameDefect::BadChecksum { stored, computed });
    }
    let page_number = u32_at(frame, 0);
    if page_number == 0 || u32_at(frame, 16) != 0 {
        return Err(FrameDefect::Malformed);
    }
    Ok((
        FrameHeader {
            page_number,
            commit_size_pages: u32_at(frame, 4),
        },
        computed,
    ))
}

/// Byte offset of frame `frame_id` (1-based) in the WAL file.
pub fn frame_offset(frame_id: u64, page_size_bytes: u32) -> u64 {
    debug_assert!(frame_id >= 1);
    WAL_HEADER_BYTES as u64 + (frame_id - 1) * (FRAME_HEADER_BYTES as u64 + page_size_bytes as u64)
}
