//! Double-backup image files.
//!
//! Two files, `image-0.tsimg` and `image-1.tsimg`, written alternately. Each holds one full image:
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 8·words | the cells, u64 little-endian |
//! | 8·words | 48 | footer |
//!
//! Footer (little-endian): magic `PKVTICK1` (8), format version u32 = 1, complete flag u32
//! (1 = complete, 0 = being rewritten), tick u64, marker LSN u64 (the oplog LSN of this tick's
//! point-of-consistency record: replay resumes after it), words u64, CRC32C of the cell bytes
//! u32, CRC32C of footer bytes 0..44 u32.
//!
//! Writing an image into a file (the other file holds the newest complete image, untouched):
//! 1. write the footer with complete = 0, fdatasync: the file stops being a valid image before
//!    any of its cells change;
//! 2. write all cells; fdatasync, so the cells are durable before anything claims them;
//! 3. write the footer with complete = 1; fdatasync.
//!
//! A crash at any point leaves the other file's image valid, and this file either invalid
//! (footer incomplete, or CRC mismatch) or complete. Recovery takes the newest file whose footer
//! CRC, complete flag, size and cell CRC all verify.
//!
//! The files are created (at their full size, synced) and their names made durable with a
//! directory fsync before the first image is written into either; after that they are only
//! overwritten in place, so no directory entry changes while images are written. All I/O goes
//! through the storage layer's `Disk` (`Config::disk`), whose rules (`docs/storage.md`) the
//! argument above relies on: written bytes are durable only after the file's sync returned, and
//! a failed sync is never retried (the writer stops).

use prefixkv_storage::{Disk, OpenMode};
use std::io;
use std::path::{Path, PathBuf};

/// Footer magic.
pub const FOOTER_MAGIC: [u8; 8] = *b"PKVTICK1";
/// Footer size in bytes.
pub const FOOTER_BYTES: usize = 48;
/// Format version.
pub const FORMAT_VERSION: u32 = 1;

/// The decoded footer of an image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Whether the image was completely written.
    pub complete: bool,
    /// Tick of the point of consistency the image captures.
    pub tick: u64,
    /// LSN of that tick's point-of-consistency record in the logical log (0: none).
    pub marker_lsn: u64,
    /// Number of cells.
    pub words: u64,
    /// CRC32C of the cell bytes.
    pub data_crc: u32,
}

/// The path of image file `slot` (0 or 1) in `dir`.
pub fn image_path(dir: &Path, slot: usize) -> PathBuf {
    assert!(slot < 2);
    dir.join(format!("image-{slot}.tsimg"))
}

/// Encode a footer.
pub fn encode_footer(footer: &Footer) -> [u8; FOOTER_BYTES] {
    let mut bytes = [0u8; FOOTER_BYTES];
    bytes[0..8].copy_from_slice(&FOOTER_MAGIC);
    bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(footer.complete as u32).to_le_bytes());
    bytes[16..24].copy_from_slice(&footer.tick.to_le_bytes());
    bytes[24..32].copy_from_slice(&footer.marker_lsn.to_le_bytes());
    bytes[32..40].copy_from_slice(&footer.words.to_le_bytes());
    bytes[40..44].copy_from_slice(&footer.data_crc.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[0..44]);
    bytes[44..48].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Why a footer does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FooterError {
    /// Not our magic number.
    Magic,
    /// The footer's own CRC does not match (torn or damaged footer).
    Checksum,
    /// A format version this code does not know.
    Version(u32),
    /// The complete flag is neither 0 nor 1.
    Flag(u32),
}

/// Decode a footer (checks magic, CRC and version; not the complete flag).
pub fn decode_footer(bytes: &[u8; FOOTER_BYTES]) -> Result<Footer, FooterError> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    if bytes[0..8] != FOOTER_MAGIC {
        return Err(FooterError::Magic);
    }
    if crc32c::crc32c(&bytes[0..44]) != u32_at(44) {
        return Err(FooterError::Checksum);
    }
    if u32_at(8) != FORMAT_VERSION {
        return Err(FooterError::Version(u32_at(8)));
    }
    let complete = match u32_at(12) {
        0 => false,
        1 => true,
        other => return Err(FooterError::Flag(other)),
    };
    Ok(Footer {
        complete,
        tick: u64_at(16),
        marker_lsn: u64_at(24),
        words: u64_at(32),
        data_crc: u32_at(40),
    })
}

/// View cells as bytes (little-endian hosts only: the file format is little-endian).
pub(crate) fn words_as_bytes(words: &[u64]) -> &[u8] {
    const {
        assert!(
            cfg!(target_endian = "little"),
            "image files are little-endian"
        )
    };
    // SAFETY: u64 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

/// Mutable view of cells as bytes.
pub(crate) fn words_as_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: as above; every byte pattern is a valid u64.
    unsafe {
        std::slice::from_raw_parts_mut(
            words.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(words),
        )
    }
}

/// What an image file holds.
#[derive(Debug)]
pub enum ImageCheck {
    /// The file does not exist.
    Missing,
    /// The file exists but is not a valid image; the reason names what failed.
    Invalid(String),
    /// A verified image.
    Valid {
        /// Its footer.
        footer: Footer,
        /// Its cells.
        cells: Vec<u64>,
    },
}

/// Read and verify the image in `path` on `disk`, which must hold `words` cells.
///
/// A file for a different number of cells is an error (the caller's configuration does not match
/// the directory), not an invalid image: silently ignoring it could recover an old state.
pub fn read_image(disk: &dyn Disk, path: &Path, words: usize) -> io::Result<ImageCheck> {
    let file = match disk.open(path, OpenMode::Read) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(ImageCheck::Missing),
        Err(error) => return Err(prefixkv_storage::io::context(error, "opening", path)),
    };
    let data_bytes = words as u64 * 8;
    let length = file.len()?;
    if length < FOOTER_BYTES as u64 {
        return Ok(ImageCheck::Invalid(format!(
            "{}: {length} bytes, shorter than a footer",
            path.display()
        )));
    }
    let mut footer_bytes = [0u8; FOOTER_BYTES];
    file.read_exact_at(&mut footer_bytes, length - FOOTER_BYTES as u64)?;
    let footer = match decode_footer(&footer_bytes) {
        Ok(footer) => footer,
        Err(error) => {
            return Ok(ImageCheck::Invalid(format!(
                "{}: footer at offset {} does not decode: {error:?}",
                path.display(),
                length - FOOTER_BYTES as u64
            )))
        }
    };
    if footer.words != words as u64 || length != data_bytes + FOOTER_BYTES as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: image of {} cells ({length} bytes) but the state has {words} cells; \
                 open the directory with the configuration that wrote it, or move the files away",
                path.display(),
                footer.words
            ),
        ));
    }
    if !footer.complete {
        return Ok(ImageCheck::Invalid(format!(
            "{}: image for tick {} was not completely written (crash during the write)",
            path.display(),
            footer.tick
        )));
    }
    let mut cells = vec![0u64; words];
    file.read_exact_at(words_as_bytes_mut(&mut cells), 0)?;
    let crc = crc32c::crc32c(words_as_bytes(&cells));
    if crc != footer.data_crc {
        return Ok(ImageCheck::Invalid(format!(
            "{}: cell checksum {crc:#010x} does not match footer {:#010x} (damaged image)",
            path.display(),
            footer.data_crc
        )));
    }
    Ok(ImageCheck::Valid { footer, cells })
}
