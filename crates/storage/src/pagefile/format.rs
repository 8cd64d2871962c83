//! The on-disk byte format of the page file: segment names, the sums file header and sums
//! entries. Everything is little-endian; CRC32C is the Castagnoli CRC.
//!
//! ```text
//! log-<first page, 20 digits>.pages   page p at byte (p - first) * page_bytes, no header
//! log-<first page, 20 digits>.sums    header, then entries appended back to back
//!
//! sums header, 32 bytes
//!   0..8    magic b"PKVPSUMS"
//!   8..12   format version, u32 (= 1)
//!   12..16  page_bytes, u32
//!   16..24  first page of the segment, u64 (equals the number in the name)
//!   24..28  pages_per_segment, u32
//!   28..32  CRC32C of bytes 0..28
//! sums entry, 24 bytes
//!   0..8    page, u64 (inside the segment)
//!   8..12   valid_bytes, u32 (at most page_bytes)
//!   12..16  CRC32C of the page's bytes [0, valid_bytes)
//!   16..20  CRC32C of entry bytes 0..16
//!   20..24  reserved, zero
//! ```
//!
//! Invariant the decoders keep: an entry is accepted only if its own CRC matches, its reserved
//! bytes are zero, its page lies in the segment and its `valid_bytes` fits a page, so an entry
//! copied to another segment, a torn entry or an entry from another configuration is never
//! taken for a valid one. The decoders allocate nothing.

use crate::le::{u32_at, u64_at};
use crate::names::NumberedName;

/// Magic bytes at the start of every sums file.
pub const SUMS_MAGIC: [u8; 8] = *b"PKVPSUMS";
/// The version of this byte format, stored in every sums header.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the sums file header in bytes.
pub const SUMS_HEADER_BYTES: usize = 32;
/// Size of one sums entry in bytes.
pub const ENTRY_BYTES: usize = 24;
/// Data file names: `log-<first page, 20 digits>.pages`.
pub const DATA_NAME: NumberedName = NumberedName::new("log-", 20, ".pages");
/// Sums file names: `log-<first page, 20 digits>.sums`.
pub const SUMS_NAME: NumberedName = NumberedName::new("log-", 20, ".sums");

/// The geometry a sums header records (and a page file is opened with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumsHeader {
    /// Bytes per page.
    pub page_bytes: u32,
    /// Pages per segment.
    pub pages_per_segment: u32,
    /// The segment's first page.
    pub first_page: u64,
}

/// Encodes a sums file header.
pub fn encode_header(header: &SumsHeader) -> [u8; SUMS_HEADER_BYTES] {
    let mut bytes = [0u8; SUMS_HEADER_BYTES];
    bytes[0..8].copy_from_slice(&SUMS_MAGIC);
    bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&header.page_bytes.to_le_bytes());
    bytes[16..24].copy_from_slice(&header.first_page.to_le_bytes());
    bytes[24..28].copy_from_slice(&header.pages_per_segment.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decodes a sums file header; the error says what is wrong.
pub fn decode_header(bytes: &[u8]) -> Result<SumsHeader, String> {
    if bytes.len() < SUMS_HEADER_BYTES {
        return Err(format!(
            "sums header is {} bytes, expected {SUMS_HEADER_BYTES}",
            bytes.len()
        ));
    }
    if crc32c::crc32c(&bytes[0..28]) != u32_at(bytes, 28) {
        return Err("sums header CRC32C mismatch".into());
    }
    if bytes[0..8] != SUMS_MAGIC {
        return Err("not a sums file (bad magic bytes)".into());
    }
    let version = u32_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(format!(
            "sums format version {version} is not supported (this build reads {FORMAT_VERSION})"
        ));
    }
    Ok(SumsHeader {
        page_bytes: u32_at(bytes, 12),
        first_page: u64_at(bytes, 16),
        pages_per_segment: u32_at(bytes, 24),
    })
}

/// One sums entry: page `page` holds `valid_bytes` meaningful bytes whose CRC32C is `crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SumsEntry {
    /// The page number.
    pub page: u64,
    /// How many bytes from the page's start are meaningful (and checksummed).
    pub valid_bytes: u32,
    /// CRC32C of the page's bytes `[0, valid_bytes)`.
    pub crc: u32,
}

/// Encodes an entry.
pub fn encode_entry(entry: &SumsEntry) -> [u8; ENTRY_BYTES] {
    let mut bytes = [0u8; ENTRY_BYTES];
    bytes[0..8].copy_from_slice(&entry.page.to_le_bytes());
    bytes[8..12].copy_from_slice(&entry.valid_bytes.to_le_bytes());
    bytes[12..16].copy_from_slice(&entry.crc.to_le_bytes());
    let own = crc32c::crc32c(&bytes[0..16]);
    bytes[16..20].copy_from_slice(&own.to_le_bytes());
    bytes
}

/// Decodes the entry in `bytes` (exactly [`ENTRY_BYTES`]) of the segment described by `header`;
/// the error says why it is not trusted.
pub fn decode_entry(bytes: &[u8], header: &SumsHeader) -> Result<SumsEntry, String> {
    if bytes.len() != ENTRY_BYTES {
        return Err(format!(
            "partial entry: {} of {ENTRY_BYTES} bytes",
            bytes.len()
        ));
    }
    let stored = u32_at(bytes, 16);
    let computed = crc32c::crc32c(&bytes[0..16]);
    if stored != computed {
        return Err(format!(
            "entry CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    if bytes[20..24] != [0; 4] {
        return Err("entry reserved bytes are not zero".into());
    }
    let entry = SumsEntry {
        page: u64_at(bytes, 0),
        valid_bytes: u32_at(bytes, 8),
        crc: u32_at(bytes, 12),
    };
    let inside = entry
        .page
        .checked_sub(header.first_page)
        .is_some_and(|index| index < u64::from(header.pages_per_segment));
    if !inside {
        return Err(format!(
            "entry names page {}, outside the segment starting at page {}",
            entry.page, header.first_page
        ));
    }
    if entry.valid_bytes > header.page_bytes {
        return Err(format!(
            "entry's valid_bytes {} exceed the page size {}",
            entry.valid_bytes, header.page_bytes
        ));
    }
    Ok(entry)
}
