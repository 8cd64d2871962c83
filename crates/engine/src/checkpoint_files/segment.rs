//! Segment files: the entries of one checkpoint, written by one flusher thread.
//!
//! The byte layout is documented in the parent module (`checkpoint_files`). This module holds the
//! decoder, which is shared by verification, loading, the property tests and the fuzz target, so
//! there is exactly one parser of the format; the writer is in `segment_writer`.
//!
//! Invariants:
//! - The decoder never allocates more than `DecodeLimits` allows, and never more than the bytes
//!   that remain before the footer: a length read from disk is checked before it sizes a buffer.
//! - The decoder reports success only after the footer's entry count, body length and CRC32C all
//!   match what it read; entries handed out before that are provisional and callers discard them
//!   when `next_entry` later fails.

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use prefixkv_storage::le::{u32_at, u64_at};
use prefixkv_storage::{Disk, FileReader, NumberedName, OpenMode};

use serde::{Deserialize, Serialize};

use crate::error::EngineError;

/// First 8 bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"PKVSEG01";
/// Last 8 bytes of every segment file.
pub const SEGMENT_FOOTER_MAGIC: [u8; 8] = *b"PKVSEGND";
/// Version of the segment layout; bumped on any incompatible change.
pub const SEGMENT_FORMAT_VERSION: u32 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_BYTES: u64 = 32;
/// Size of the fixed part of an entry (kind, record version, key length, value length).
pub const ENTRY_HEADER_BYTES: u64 = 17;
/// Size of the segment footer.
pub const SEGMENT_FOOTER_BYTES: u64 = 32;
/// Buffer of the streaming reader used by verification and loading.
const READ_BUFFER_BYTES: usize = 1 << 20;

pub(super) const KIND_PUT: u8 = 1;
pub(super) const KIND_TOMBSTONE: u8 = 2;

/// Upper bounds that the decoder enforces on lengths read from disk (and that the writer enforces
/// on what it is given, so that everything written can be read back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest key accepted, in bytes.
    pub max_key_bytes: u32,
    /// Largest value accepted, in bytes.
    pub max_value_bytes: u32,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_key_bytes: 64 << 10,
            max_value_bytes: 512 << 20,
        }
    }
}

/// What the writer reports about a finished, fsynced segment; recorded in the MANIFEST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentSummary {
    /// Segment index within its checkpoint (also written in the segment header).
    pub index: u32,
    /// File name inside the checkpoint directory, always [`segment_file_name`]`(index)`.
    pub file_name: String,
    /// Number of entries.
    pub entries: u64,
    /// Total file length in bytes, header and footer included.
    pub bytes: u64,
    /// CRC32C (Castagnoli) of every byte before the footer.
    pub crc32c: u32,
}

/// Where one segment writer's time went, measured around whole buffers (one clock read per
/// megabyte written, so measuring costs nothing next to the work). Used for the checkpoint
/// breakdown in [`crate::CheckpointReport`]; never written to disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteTimes {
    /// Computing the body's CRC32C.
    pub crc: Duration,
    /// Waiting for the segment's I/O thread: to take a free buffer while both were in flight, and
    /// at the end for the last writes. With direct I/O that is the device's time not hidden behind
    /// the scan; through the page cache, mostly the kernel's copy into cache pages.
    pub write: Duration,
    /// Asleep in the checkpoint's write pacer.
    pub pacing: Duration,
    /// In the final `fdatasync`.
    pub sync: Duration,
}

impl WriteTimes {
    /// Adds `other` to `self`, field by field.
    pub fn add(&mut self, other: &WriteTimes) {
        self.crc += other.crc;
        self.write += other.write;
        self.pacing += other.pacing;
        self.sync += other.sync;
    }

    /// The sum of every field.
    pub fn total(&self) -> Duration {
        self.crc + self.write + self.pacing + self.sync
    }
}

/// Segment file names: `segment-`, the index (at least 6 digits), `.seg`.
pub const SEGMENT_NAME: NumberedName = NumberedName::new("segment-", 6, ".seg");

/// The file name of segment `index`.
pub fn segment_file_name(index: u32) -> String {
    SEGMENT_NAME.format(u64::from(index))
}

/// One decoded entry, borrowing the decoder's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// True for a deletion marker (its value is empty).
    pub tombstone: bool,
    /// The version of the record this entry was taken from.
    pub record_version: u64,
    /// The key.
    pub key: &'a [u8],
    /// The value (empty for a tombstone).
    pub value: &'a [u8],
}

/// An owned entry, as returned by [`decode_segment_bytes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// True for a deletion marker.
    pub tombstone: bool,
    /// The version of the record this entry was taken from.
    pub record_version: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty for a tombstone).
    pub value: Vec<u8>,
}

impl Entry {
    /// Borrows this entry as an [`EntryRef`].
    pub fn entry_ref(&self) -> EntryRef<'_> {
        EntryRef {
            tombstone: self.tombstone,
            record_version: self.record_version,
            key: &self.key,
            value: &self.value,
        }
    }
}

/// The header fields of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Version of the checkpoint the segment belongs to.
    pub checkpoint_version: u64,
    /// Index of the segment within its checkpoint.
    pub segment_index: u32,
}

/// What the footer of a fully verified segment says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFooter {
    /// Number of entries.
    pub entries: u64,
    /// Bytes before the footer (header plus entries).
    pub body_bytes: u64,
    /// CRC32C of those bytes.
    pub crc32c: u32,
}

pub(super) fn encode_header(header: SegmentHeader) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES as usize];
    bytes[0..8].copy_from_slice(&SEGMENT_MAGIC);
    bytes[8..12].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&header.segment_index.to_le_bytes());
    bytes[16..24].copy_from_slice(&header.checkpoint_version.to_le_bytes());
    // 24..28 reserved, zero.
    let crc = crc32c::crc32c(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    bytes
}

pub(super) fn encode_footer(footer: SegmentFooter) -> [u8; SEGMENT_FOOTER_BYTES as usize] {
    let mut bytes = [0u8; SEGMENT_FOOTER_BYTES as usize];
    bytes[0..8].copy_from_slice(&footer.entries.to_le_bytes());
    bytes[8..16].copy_from_slice(&footer.body_bytes.to_le_bytes());
    bytes[16..20].copy_from_slice(&footer.crc32c.to_le_bytes());
    let footer_crc = crc32c::crc32c(&bytes[0..20]);
    bytes[20..24].copy_from_slice(&footer_crc.to_le_bytes());
    bytes[24..32].copy_from_slice(&SEGMENT_FOOTER_MAGIC);
    bytes
}

/// Decodes a segment from any reader, one entry at a time, verifying as it goes.
pub struct SegmentDecoder<R: Read> {
    reader: R,
    path: PathBuf,
    limits: DecodeLimits,
    header: SegmentHeader,
    /// Offset of the footer (file length minus the footer size).
    body_end: u64,
    /// Offset of the next unread byte.
    offset: u64,
    crc: u32,
    entries: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    footer: Option<SegmentFooter>,
}

impl<R: Read> SegmentDecoder<R> {
    /// Reads and checks the header of a segment of `file_bytes` bytes. `path` names the source in
    /// errors.
    pub fn new(
        reader: R,
        file_bytes: u64,
        path: &Path,
        limits: DecodeLimits,
    ) -> Result<SegmentDecoder<R>, EngineError> {
        let minimum = SEGMENT_HEADER_BYTES + SEGMENT_FOOTER_BYTES;
        if file_bytes < minimum {
            return Err(EngineError::corrupt(
                path,
                0,
                format!(
                    "segment file is {file_bytes} bytes, shorter than the {minimum} bytes of \
                     header and footer (truncated or never finished)"
                ),
            ));
        }
        let mut decoder = SegmentDecoder {
            reader,
            path: path.to_path_buf(),
            limits,
            header: SegmentHeader {
                checkpoint_version: 0,
                segment_index: 0,
            },
            body_end: file_bytes - SEGMENT_FOOTER_BYTES,
            offset: 0,
            crc: 0,
            entries: 0,
            key: Vec::new(),
            value: Vec::new(),
            footer: None,
        };
        let mut bytes = [0u8; SEGMENT_HEADER_BYTES as usize];
        decoder.read_body(&mut bytes)?;
        if bytes[0..8] != SEGMENT_MAGIC {
            return Err(decoder.corrupt_at(0, "bad magic number: not a prefixkv segment file"));
        }
        let stored_crc = u32_at(&bytes, 28);
        if crc32c::crc32c(&bytes[0..28]) != stored_crc {
            return Err(decoder.corrupt_at(0, "segment header checksum mismatch"));
        }
        let format_version = u32_at(&bytes, 8);
        if format_version != SEGMENT_FORMAT_VERSION {
            return Err(decoder.corrupt_at(
                8,
                &format!(
                    "segment format version {format_version} is not supported (this build reads \
                     version {SEGMENT_FORMAT_VERSION}); use a matching prefixkv build"
                ),
            ));
        }
        if u32_at(&bytes, 24) != 0 {
            return Err(decoder.corrupt_at(24, "reserved header field is not zero"));
        }
        decoder.header = SegmentHeader {
            segment_index: u32_at(&bytes, 12),
            checkpoint_version: u64_at(&bytes, 16),
        };
        Ok(decoder)
    }

    /// The verified header.
    pub fn header(&self) -> SegmentHeader {
        self.header
    }

    /// The next entry, or `None` after the footer has been read and verified.
    pub fn next_entry(&mut self) -> Result<Option<EntryRef<'_>>, EngineError> {
        if self.footer.is_some() {
            return Ok(None);
        }
        if self.offset == self.body_end {
            self.read_footer()?;
            return Ok(None);
        }
        let entry_offset = self.offset;
        let remaining = self.body_end - self.offset;
        if remaining < ENTRY_HEADER_BYTES {
            return Err(self.corrupt_at(
                entry_offset,
                &format!("{remaining} stray bytes before the footer, too few for an entry header"),
            ));
        }
        let mut header = [0u8; ENTRY_HEADER_BYTES as usize];
        self.read_body(&mut header)?;
        let kind = header[0];
        let record_version = u64_at(&header, 1);
        let key_bytes = u32_at(&header, 9);
        let value_bytes = u32_at(&header, 13);
        let tombstone = match kind {
            KIND_PUT => false,
            KIND_TOMBSTONE => true,
            other => {
                return Err(self.corrupt_at(entry_offset, &format!("unknown entry kind {other}")));
            }
        };
        if key_bytes > self.limits.max_key_bytes {
            return Err(self.corrupt_at(
                entry_offset + 9,
                &format!(
                    "key length {key_bytes} exceeds the limit of {}",
                    self.limits.max_key_bytes
                ),
            ));
        }
        if value_bytes > self.limits.max_value_bytes {
            return Err(self.corrupt_at(
                entry_offset + 13,
                &format!(
                    "value length {value_bytes} exceeds the limit of {}",
                    self.limits.max_value_bytes
                ),
            ));
        }
        if tombstone && value_bytes != 0 {
            return Err(self.corrupt_at(entry_offset + 13, "tombstone with a non-empty value"));
        }
        let payload_bytes = u64::from(key_bytes) + u64::from(value_bytes);
        if payload_bytes > self.body_end - self.offset {
            return Err(self.corrupt_at(
                entry_offset,
                &format!(
                    "entry claims {payload_bytes} bytes of key and value but only {} remain \
                     before the footer",
                    self.body_end - self.offset
                ),
            ));
        }
        // Both lengths are now bounded by the limits and by the bytes actually present.
        let mut key = std::mem::take(&mut self.key);
        let mut value = std::mem::take(&mut self.value);
        key.resize(key_bytes as usize, 0);
        value.resize(value_bytes as usize, 0);
        let read = self
            .read_body(&mut key)
            .and_then(|()| self.read_body(&mut value));
        self.key = key;
        self.value = value;
        read?;
        self.entries += 1;
        Ok(Some(EntryRef {
            tombstone,
            record_version,
            key: &self.key,
            value: &self.value,
        }))
    }

    /// Decodes every remaining entry, calling `sink` for each, and returns the verified footer.
    pub fn for_each(
        mut self,
        sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
    ) -> Result<SegmentFooter, EngineError> {
        while let Some(entry) = self.next_entry()? {
            sink(entry)?;
        }
        Ok(self
            .footer
            .expect("next_entry returns None only after verifying the footer"))
    }

    fn read_footer(&mut self) -> Result<(), EngineError> {
        debug_assert_eq!(self.offset, self.body_end);
        let mut bytes = [0u8; SEGMENT_FOOTER_BYTES as usize];
        self.reader
            .read_exact(&mut bytes)
            .map_err(|source| self.read_error(source))?;
        let footer_offset = self.body_end;
        if bytes[24..32] != SEGMENT_FOOTER_MAGIC {
            return Err(self.corrupt_at(
                footer_offset + 24,
                "bad footer magic: the segment was truncated or never finished",
            ));
        }
        if crc32c::crc32c(&bytes[0..20]) != u32_at(&bytes, 20) {
            return Err(self.corrupt_at(footer_offset, "segment footer checksum mismatch"));
        }
        let footer = SegmentFooter {
            entries: u64_at(&bytes, 0),
            body_bytes: u64_at(&bytes, 8),
            crc32c: u32_at(&bytes, 16),
        };
        if footer.body_bytes != self.body_end {
            return Err(self.corrupt_at(
                footer_offset + 8,
                &format!(
                    "footer records {} bytes before it but it sits at offset {}: the file was \
                     truncated or extended",
                    footer.body_bytes, self.body_end
                ),
            ));
        }
        if footer.crc32c != self.crc {
            return Err(self.corrupt_at(
                footer_offset + 16,
                &format!(
                    "checksum mismatch: footer records CRC32C {:#010x}, content has {:#010x}; \
                     the segment was modified after it was written",
                    footer.crc32c, self.crc
                ),
            ));
        }
        if footer.entries != self.entries {
            return Err(self.corrupt_at(
                footer_offset,
                &format!(
                    "footer records {} entries, decoded {}",
                    footer.entries, self.entries
                ),
            ));
        }
        // Anything after the footer would mean the length we were given is wrong.
        let mut probe = [0u8; 1];
        match self.reader.read(&mut probe) {
            Ok(0) => {}
            Ok(_) => {
                return Err(self.corrupt_at(
                    footer_offset + SEGMENT_FOOTER_BYTES,
                    "bytes after the footer: the file grew after it was written",
                ));
            }
            Err(source) => return Err(self.read_error(source)),
        }
        self.footer = Some(footer);
        Ok(())
    }

    fn read_body(&mut self, buffer: &mut [u8]) -> Result<(), EngineError> {
        debug_assert!(self.offset + buffer.len() as u64 <= self.body_end);
        self.reader
            .read_exact(buffer)
            .map_err(|source| self.read_error(source))?;
        self.crc = crc32c::crc32c_append(self.crc, buffer);
        self.offset += buffer.len() as u64;
        Ok(())
    }

    fn read_error(&self, source: std::io::Error) -> EngineError {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            self.corrupt_at(
                self.offset,
                "the file ended early: it shrank while being read",
            )
        } else {
            EngineError::io(
                format!("read segment file at offset {}", self.offset),
                &self.path,
                source,
            )
        }
    }

    fn corrupt_at(&self, offset: u64, detail: &str) -> EngineError {
        EngineError::corrupt(&self.path, offset, detail)
    }
}

/// Decodes a whole in-memory segment (used by tests and the fuzz target). Returns the header, the
/// entries and the verified footer, or the first problem found.
pub fn decode_segment_bytes(
    bytes: &[u8],
    limits: DecodeLimits,
) -> Result<(SegmentHeader, Vec<Entry>, SegmentFooter), EngineError> {
    let mut decoder =
        SegmentDecoder::new(bytes, bytes.len() as u64, Path::new("<memory>"), limits)?;
    let header = decoder.header();
    let mut entries = Vec::new();
    while let Some(entry) = decoder.next_entry()? {
        entries.push(Entry {
            tombstone: entry.tombstone,
            record_version: entry.record_version,
            key: entry.key.to_vec(),
            value: entry.value.to_vec(),
        });
    }
    let footer = decoder.footer.expect("footer verified at the end");
    Ok((header, entries, footer))
}

/// Opens `directory/summary.file_name` and decodes it with a bounded streaming reader, checking
/// the header against the expected checkpoint version and index and the footer against `summary`.
pub(crate) fn read_segment_file(
    disk: &dyn Disk,
    directory: &Path,
    summary: &SegmentSummary,
    checkpoint_version: u64,
    limits: DecodeLimits,
    sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
) -> Result<u64, EngineError> {
    let path = directory.join(&summary.file_name);
    let file = match disk.open(&path, OpenMode::Read) {
        Ok(file) => file,
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(EngineError::corrupt(
                &path,
                0,
                "segment file listed in MANIFEST is missing",
            ));
        }
        Err(source) => return Err(EngineError::io("open segment file", &path, source)),
    };
    let file_bytes = file
        .len()
        .map_err(|source| EngineError::io("stat segment file", &path, source))?;
    if file_bytes != summary.bytes {
        return Err(EngineError::corrupt(
            &path,
            file_bytes.min(summary.bytes),
            format!(
                "segment file is {file_bytes} bytes but MANIFEST records {} bytes (truncated or \
                 overwritten)",
                summary.bytes
            ),
        ));
    }
    let reader = BufReader::with_capacity(READ_BUFFER_BYTES, FileReader::new(file, 0));
    let decoder = SegmentDecoder::new(reader, file_bytes, &path, limits)?;
    let header = decoder.header();
    if header.checkpoint_version != checkpoint_version || header.segment_index != summary.index {
        return Err(EngineError::corrupt(
            &path,
            12,
            format!(
                "segment header says checkpoint v{} segment {}, MANIFEST expects v{} segment {}: \
                 the file belongs to another checkpoint",
                header.checkpoint_version, header.segment_index, checkpoint_version, summary.index
            ),
        ));
    }
    let footer = decoder.for_each(sink)?;
    if footer.entries != summary.entries || footer.crc32c != summary.crc32c {
        return Err(EngineError::corrupt(
            &path,
            footer.body_bytes,
            format!(
                "segment footer ({} entries, CRC32C {:#010x}) disagrees with MANIFEST ({} entries, \
                 CRC32C {:#010x})",
                footer.entries, footer.crc32c, summary.entries, summary.crc32c
            ),
        ));
    }
    Ok(footer.entries)
}
