//! The versioned-RDB manifest: names one committed version of a shard and checksums its RDB.
//!
//! A shard's `versions/` directory is a `prefixkv_storage::Catalog` (layout, publishing and the
//! crash-safety argument: `docs/storage.md`, "Version catalog"). Version `v` is the directory
//! `v<v, 20 digits>/` holding
//! - `dump.rdb`: Redis's RDB of that version, as BGSAVE wrote (and fsynced) it;
//! - `MANIFEST`: this record.
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
//! Crash safety: both files are written (and synced) inside the catalog's `v….tmp` draft, which
//! the catalog publishes with one rename and a directory fsync. A version therefore exists whole
//! or not at all; its manifest's own CRC and the RDB's CRC are still checked before a version is
//! listed ([`read_verified`]) or loaded (the state object's restore).

use std::path::{Path, PathBuf};

use prefixkv_dpr::state_object::StateObjectError;
use prefixkv_dpr::Version;
use prefixkv_storage::catalog::VERSION_NAME;
use prefixkv_storage::{durable, Disk};

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

/// Name of the RDB file in a version's directory.
pub const RDB_FILE: &str = "dump.rdb";
/// Name of the manifest in a version's directory.
pub const MANIFEST_FILE: &str = "MANIFEST";

/// The directory of `version` in the catalog at `directory`.
pub fn version_dir(directory: &Path, version: Version) -> PathBuf {
    directory.join(VERSION_NAME.format(version))
}

/// The RDB of `version` in the catalog at `directory`.
pub fn rdb_path(directory: &Path, version: Version) -> PathBuf {
    version_dir(directory, version).join(RDB_FILE)
}

/// The manifest of `version` in the catalog at `directory`.
pub fn manifest_path(directory: &Path, version: Version) -> PathBuf {
    version_dir(directory, version).join(MANIFEST_FILE)
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StateObjectError + '_ {
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
    pub fn read(disk: &dyn Disk, path: &Path) -> Result<Self, StateObjectError> {
        let limit = (FIXED_BYTES + MAX_METADATA_BYTES + 4) as u64;
        match durable::read_file(disk, path, limit) {
            Ok(Some(bytes)) => Self::decode(&bytes, path),
            Ok(None) => Err(corrupt(path, 0, "the version has no manifest")),
            Err(error) if error.kind() == std::io::ErrorKind::InvalidData => {
                Err(corrupt(path, 0, error.to_string()))
            }
            Err(error) => Err(io_error(path)(error)),
        }
    }
}

/// The manifest of `version` in the catalog at `directory`, if it verifies and names that
/// version; why not otherwise (the caller logs it and treats the version as absent).
pub fn read_verified(
    disk: &dyn Disk,
    directory: &Path,
    version: Version,
) -> Result<Manifest, StateObjectError> {
    let path = manifest_path(directory, version);
    let manifest = Manifest::read(disk, &path)?;
    if manifest.version != version {
        return Err(corrupt(
            &path,
            8,
            format!("manifest names version {}", manifest.version),
        ));
    }
    Ok(manifest)
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
    fn paths_name_the_version_directory() {
        let dir = Path::new("/x");
        assert_eq!(
            manifest_path(dir, 42),
            Path::new("/x/v00000000000000000042/MANIFEST")
        );
        assert_eq!(
            rdb_path(dir, 42),
            Path::new("/x/v00000000000000000042/dump.rdb")
        );
    }
}
