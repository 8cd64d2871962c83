//! The database directory's files: page encoding of `aries.db` and the master record (formats in
//! the parent module's documentation).

use super::{MASTER_BYTES, MASTER_MAGIC, MASTER_VERSION, PAGE_HEADER_BYTES};
use crate::error::{Result, TickError};
use std::path::{Path, PathBuf};

/// The database file in `dir`.
pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("aries.db")
}

pub(super) fn master_path(dir: &Path) -> PathBuf {
    dir.join("aries.master")
}

pub(super) fn log_path(dir: &Path) -> PathBuf {
    dir.join("log")
}

/// Encode page `number` with page LSN `lsn` and `cells` (fewer than a page: zero padded).
pub(super) fn encode_page(number: u32, lsn: u64, cells: &[u64], out: &mut [u8]) {
    out.fill(0);
    out[0..8].copy_from_slice(&lsn.to_le_bytes());
    out[8..12].copy_from_slice(&number.to_le_bytes());
    for (index, value) in cells.iter().enumerate() {
        let at = PAGE_HEADER_BYTES + index * 8;
        out[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[0..12]), &out[PAGE_HEADER_BYTES..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Decode a page read from disk: its page LSN, after checking its number and CRC.
pub(super) fn decode_page(
    number: u32,
    bytes: &[u8],
    cells: &mut [u64],
) -> std::result::Result<u64, String> {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[0..12]), &bytes[PAGE_HEADER_BYTES..]);
    let stored = u32::from_le_bytes(bytes[12..16].try_into().expect("4"));
    if crc != stored {
        return Err(format!(
            "CRC {crc:#010x} does not match the stored {stored:#010x} (torn or damaged page)"
        ));
    }
    let stored_number = u32::from_le_bytes(bytes[8..12].try_into().expect("4"));
    if stored_number != number {
        return Err(format!("holds page {stored_number}"));
    }
    for (index, cell) in cells.iter_mut().enumerate() {
        let at = PAGE_HEADER_BYTES + index * 8;
        *cell = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
    }
    Ok(u64::from_le_bytes(bytes[0..8].try_into().expect("8")))
}

pub(super) fn write_master(dir: &Path, cells: usize, begin_lsn: u64) -> std::io::Result<()> {
    let mut bytes = [0u8; MASTER_BYTES];
    bytes[0..8].copy_from_slice(&MASTER_MAGIC);
    bytes[8..12].copy_from_slice(&MASTER_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&(cells as u64).to_le_bytes());
    bytes[24..32].copy_from_slice(&begin_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[16..32]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    // Temp file, fsync, rename, directory fsync: the storage layer's one durable write.
    prefixkv_storage::durable::write_file_durably(
        &prefixkv_storage::RealDisk,
        &master_path(dir),
        &bytes,
    )
}

/// The master record: (cells, BEGIN LSN of the last checkpoint).
pub(super) fn read_master(dir: &Path) -> Result<(u64, u64)> {
    let path = master_path(dir);
    let bytes = std::fs::read(&path).map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!(
                "{}: {error} (not an ARIES database, or its creation did not finish)",
                path.display()
            ),
        )
    })?;
    let invalid = |what: &str| {
        TickError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        ))
    };
    if bytes.len() != MASTER_BYTES || bytes[0..8] != MASTER_MAGIC {
        return Err(invalid("not an ARIES master record"));
    }
    if u32::from_le_bytes(bytes[8..12].try_into().expect("4")) != MASTER_VERSION {
        return Err(invalid("unknown version"));
    }
    if crc32c::crc32c(&bytes[16..32]) != u32::from_le_bytes(bytes[12..16].try_into().expect("4")) {
        return Err(invalid("checksum mismatch"));
    }
    Ok((
        u64::from_le_bytes(bytes[16..24].try_into().expect("8")),
        u64::from_le_bytes(bytes[24..32].try_into().expect("8")),
    ))
}
