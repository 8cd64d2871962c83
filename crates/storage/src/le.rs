//! Fixed-width little-endian fields of on-disk headers and entries, read at a byte offset. Every
//! file format of the project (checkpoint segments, the index checkpoint, the page file's sums,
//! the page store's WAL, DPR headers) decodes its fields with these.
//!
//! Both panic when the slice is shorter than `at` + the field: decoders check a header's length
//! before reading its fields.

/// The little-endian `u32` at `bytes[at..at + 4]`.
#[inline]
pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("a 4-byte slice"))
}

/// The little-endian `u64` at `bytes[at..at + 8]`.
#[inline]
pub fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("an 8-byte slice"))
}
