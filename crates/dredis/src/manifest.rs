//! The versioned-RDB manifest: names one committed version of a shard and checksums its RDB.
//!
//! Files per shard, in its `versions/` directory:
//! - `v<version, 20 digits>.rdb`: Redis's RDB of that version, as BGSAVE wrote it;
//! - `v<version, 20 digits>.manifest`: this record.
//!
//! Manifest format (format version 1, little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `DRDM` |
//! | 4 | 2 | format version = 1 |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 8 | DPR version |
//! | 16 | 8 | RDB length in bytes |
//! | 24 | 4 | CRC32C of the RDB |
//! | 28 | 4 | metadata length `m` (≤ [`MAX_METADATA_BYTES`]) |
//! | 32 | m | metadata (the worker's world-line and dependency set) |
//! | 32+m | 4 | CRC32C of bytes 0..32+m |
//!
//! Crash safety: the RDB is renamed into `versions/` first, then the manifest is written to a
//! temporary file, fsynced, renamed, and the directory fsynced. A version exists only once its
//! manifest is durable and verifies, so a crash at any point leaves either no version or a whole
//! one; an RDB without a manifest is garbage, removed by the next restore.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use prefixkv_dpr::state_object::StateObjectError;
use prefixkv_dpr::Version;

const MAGIC: &[u8; 4] = b"DRDM";
const FORMAT_VERSION: u16 = 1;
const FIXED_BYTES: usize = 32;
/// Largest metadata accepted in a manifest (a dependency set of 64 Ki workers).
pub const MAX_METADATA_BYTES: usize = 1 << 20;

/// A decoded manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The DPR version.
    pub version: Version,
    /// Length of the RDB file.
    pub rdb_bytes: u64,
    /// CRC32C of the RDB file.
    pub rdb_crc32c: u32,
    /// The worker's metadata.
    pub metadata: Vec<u8>,
}

/// `v<20 digits>.rdb` in `directory`.
pub fn rdb_path(directory: &Path, version: Version) -> PathBuf {
    directory.join(format!("v{version:020}.rdb"))
}

/// `v<20 digits>.manifest` in `directory`.
pub fn manifest_path(directory: &Path, version: Version) -> PathBuf {
    directory.join(format!("v{version:020}.manifest"))
}

/// Parses a `v<digits>.<extension>` file name.
pub fn parse_name(name: &str, extension: &str) -> Option<Version> {
    name.strip_prefix('v')?
        .strip_suffix(extension)?
        .strip_suffix('.')?
        .parse()
        .ok()
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StateObjectError + '_ {
    move |source| StateObjectError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> StateObjectError {
    StateObjectError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

impl Manifest {
    /// Encodes the manifest.
    pub fn encode(&self) -> Result<Vec<u8>, StateObjectError> {
        if self.metadata.len() > MAX_METADATA_BYTES {
            return Err(StateObjectError::TooLarge {
                what: "manifest metadata",
                length_bytes: self.metadata.len(),
            });
        }
        let mut out = Vec::with_capacity(FIXED_BYTES + self.metadata.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.rdb_bytes.to_le_bytes());
        out.extend_from_slice(&self.rdb_crc32c.to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.metadata);
        let checksum = crc32c::crc32c(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        Ok(out)
    }

    /// Decodes a manifest read from `path` (named in errors).
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self, StateObjectError> {
        if bytes.len() < FIXED_BYTES + 4 {
            return Err(corrupt(
                path,
                bytes.len() as u64,
                format!("manifest of {} bytes is shorter than 36", bytes.len()),
            ));
        }
        if &bytes[0..4] != MAGIC {
            return Err(corrupt(path, 0, "bad magic (not a D-Redis manifest)"));
        }
        let format = u16::from_le_bytes([bytes[4], bytes[5]]);
        if format != FORMAT_VERSION {
            return Err(corrupt(path, 4, format!("unknown format version {format}")));
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        let metadata_len = u32_at(28) as usize;
        if metadata_len > MAX_METADATA_BYTES || bytes.len() != FIXED_BYTES + metadata_len + 4 {
            return Err(corrupt(
                path,
                28,
                format!(
                    "metadata length {metadata_len} does not match the file length {}",
                    bytes.len()
                ),
            ));
        }
        let body_end = FIXED_BYTES + metadata_len;
        if crc32c::crc32c(&bytes[..body_end]) != u32_at(body_end) {
            return Err(corrupt(path, body_end as u64, "manifest checksum mismatch"));
        }
        Ok(Self {
            version: u64_at(8),
            rdb_bytes: u64_at(16),
            rdb_crc32c: u32_at(24),
            metadata: bytes[FIXED_BYTES..body_end].to_vec(),
        })
    }

    /// Reads and verifies the manifest at `path` (size-checked before reading).
    pub fn read(path: &Path) -> Result<Self, StateObjectError> {
        let file = File::open(path).map_err(io_error(path))?;
        let length = file.metadata().map_err(io_error(path))?.len();
        if length > (FIXED_BYTES + MAX_METADATA_BYTES + 4) as u64 {
            return Err(corrupt(
                path,
                0,
                format!("manifest of {length} bytes is too large"),
            ));
        }
        let mut bytes = Vec::with_capacity(length as usize);
        file.take(length)
            .read_to_end(&mut bytes)
            .map_err(io_error(path))?;
        Self::decode(&bytes, path)
    }

    /// Writes the manifest durably into `directory` (temporary file, fsync, rename, directory fsync).
    pub fn write(&self, directory: &Path) -> Result<(), StateObjectError> {
        let bytes = self.encode()?;
        let final_path = manifest_path(directory, self.version);
        let temporary = final_path.with_extension("manifest.tmp");
        let mut file = File::create(&temporary).map_err(io_error(&temporary))?;
        file.write_all(&bytes).map_err(io_error(&temporary))?;
        file.sync_all().map_err(io_error(&temporary))?;
        drop(file);
        fs::rename(&temporary, &final_path).map_err(io_error(&final_path))?;
        sync_directory(directory)
    }
}

/// Fsyncs a directory so renames and unlinks in it are durable.
pub fn sync_directory(directory: &Path) -> Result<(), StateObjectError> {
    File::open(directory)
        .and_then(|d| d.sync_all())
        .map_err(io_error(directory))
}

/// Streams a file, returning (length, CRC32C), and fsyncs it.
pub fn checksum_file(path: &Path) -> Result<(u64, u32), StateObjectError> {
    let mut file = File::open(path).map_err(io_error(path))?;
    let mut buffer = vec![0u8; 256 * 1024];
    let (mut length, mut crc) = (0u64, 0u32);
    loop {
        let n = file.read(&mut buffer).map_err(io_error(path))?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buffer[..n]);
        length += n as u64;
    }
    file.sync_all().map_err(io_error(path))?;
    Ok((length, crc))
}

/// Every version in `directory` whose manifest verifies, ascending. Files that do not verify are
/// logged and skipped (left in place for inspection).
pub fn list_versions(directory: &Path) -> Result<Vec<Version>, StateObjectError> {
    let mut versions = Vec::new();
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(versions),
        Err(error) => return Err(io_error(directory)(error)),
    };
    for entry in entries {
        let entry = entry.map_err(io_error(directory))?;
        let name = entry.file_name();
        let Some(version) = name.to_str().and_then(|n| parse_name(n, "manifest")) else {
            continue;
        };
        match Manifest::read(&entry.path()) {
            Ok(manifest) if manifest.version == version => versions.push(version),
            Ok(manifest) => {
                tracing::warn!(path = %entry.path().display(), inner = manifest.version, "manifest names another version; ignored")
            }
            Err(error) => tracing::warn!(%error, "ignoring an unreadable manifest"),
        }
    }
    versions.sort_unstable();
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_and_bit_flips(version in any::<u64>(), metadata in proptest::collection::vec(any::<u8>(), 0..64), flip in any::<usize>()) {
            let manifest = Manifest { version, rdb_bytes: 123, rdb_crc32c: 456, metadata };
            let bytes = manifest.encode().unwrap();
            prop_assert_eq!(Manifest::decode(&bytes, Path::new("m")).unwrap(), manifest);
            let mut flipped = bytes.clone();
            let bit = flip % (flipped.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Manifest::decode(&flipped, Path::new("m")).is_err());
            for cut in 0..bytes.len() {
                prop_assert!(Manifest::decode(&bytes[..cut], Path::new("m")).is_err());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Manifest::decode(&bytes, Path::new("m"));
        }
    }

    #[test]
    fn names_parse() {
        let dir = Path::new("/x");
        let p = manifest_path(dir, 42);
        assert_eq!(
            parse_name(p.file_name().unwrap().to_str().unwrap(), "manifest"),
            Some(42)
        );
        assert_eq!(parse_name("v12.rdb", "manifest"), None);
    }
}
