//! The DPR header piggybacked on every batch (session → worker) and every response
//! (worker → session).
//!
//! Layout (format version 1), all integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"DPRH"` |
//! | 4 | 2 | format version (1) |
//! | 6 | 1 | kind: 1 request, 2 response, 3 rollback (the receiver is on an old world-line) |
//! | 7 | 1 | flags, must be 0 in version 1 |
//! | 8 | 8 | world-line |
//! | 16 | 8 | version: the sender's `Vs` (request) or the version the batch ran in (response) |
//! | 24 | 8 | sender id: session id (request) or worker id (response) |
//! | 32 | 8 | batch sequence number (the first operation's sequence number in the batch) |
//! | 40 | 4 | dependency count `n` |
//! | 44 | 4 | CRC32C of bytes `[0, 44)` followed by the `n` pairs (this field excluded) |
//! | 48 | 16·n | `n` pairs (worker u64, version u64) |
//!
//! Invariant: [`DprHeader::decode`] never trusts a field before checking it. The dependency count is
//! compared with the caller's maximum and with the bytes actually present *before* anything is
//! allocated, so a hostile count cannot make us allocate; the checksum is verified before the pairs
//! are returned. A malformed header is an error naming the offset and the problem.

use prefixkv_storage::le::u64_at;

use crate::{Version, WorkerId, WorkerVersion, WorldLine};

/// Header magic.
pub const MAGIC: [u8; 4] = *b"DPRH";
/// The only format version this code writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the fixed part in bytes.
pub const FIXED_LEN_BYTES: usize = 48;
/// Size of one (worker, version) pair in bytes.
pub const PAIR_LEN_BYTES: usize = 16;
/// A sensible default for [`DprHeader::decode`]'s `max_dependencies`.
pub const DEFAULT_MAX_DEPENDENCIES: u32 = 4096;

/// What a header is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderKind {
    /// A batch from a session to a worker.
    Request = 1,
    /// A worker's answer to a batch it executed.
    Response = 2,
    /// A worker's answer to a batch from an older world-line: the batch was not executed and the
    /// header carries the worker's (newer) world-line.
    Rollback = 3,
}

impl HeaderKind {
    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Request),
            2 => Some(Self::Response),
            3 => Some(Self::Rollback),
            _ => None,
        }
    }
}

/// A decoded header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DprHeader {
    /// Request, response or rollback.
    pub kind: HeaderKind,
    /// The sender's world-line.
    pub world_line: WorldLine,
    /// `Vs` in a request; the executed-in version in a response.
    pub version: Version,
    /// Session id (request) or worker id (response).
    pub sender: u64,
    /// Sequence number of the batch's first operation.
    pub batch_sequence: u64,
    /// Dependencies: in a request, the worker-versions the batch depends on.
    pub dependencies: Vec<WorkerVersion>,
}

/// Why a header was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer bytes than the fixed part or than the pairs the count announces.
    #[error("DPR header truncated: need {needed_bytes} bytes, got {available_bytes} (at offset {offset})")]
    Truncated {
        /// Offset where the missing data starts.
        offset: usize,
        /// Bytes needed in total.
        needed_bytes: usize,
        /// Bytes available.
        available_bytes: usize,
    },
    /// The first four bytes are not `DPRH`.
    #[error("DPR header: bad magic {found:02x?} at offset 0 (not a DPR header, or the stream is out of sync)")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A format version this code does not understand.
    #[error("DPR header: unsupported format version {found} at offset 4 (this build reads version {FORMAT_VERSION}; upgrade the reader)")]
    UnsupportedFormat {
        /// The version found.
        found: u16,
    },
    /// Unknown kind byte.
    #[error("DPR header: unknown kind {found} at offset 6")]
    BadKind {
        /// The byte found.
        found: u8,
    },
    /// Reserved flags set.
    #[error("DPR header: reserved flags {found:#04x} set at offset 7")]
    BadFlags {
        /// The byte found.
        found: u8,
    },
    /// More dependencies than the configured maximum.
    #[error(
        "DPR header: dependency count {count} at offset 40 exceeds the configured maximum {max}"
    )]
    TooManyDependencies {
        /// Count found.
        count: u32,
        /// Configured maximum.
        max: u32,
    },
    /// Checksum mismatch.
    #[error("DPR header: CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x}); the header is corrupt")]
    BadChecksum {
        /// Stored checksum.
        stored: u32,
        /// Computed checksum.
        computed: u32,
    },
    /// The encoder was asked to write more pairs than fit the count field.
    #[error("DPR header: {count} dependencies do not fit the u32 count field")]
    CountOverflow {
        /// The number of dependencies.
        count: usize,
    },
}

impl DprHeader {
    /// The smallest version a request may run in (§3.2's rule): its `Vs`, or a larger
    /// dependency. A well-behaved session sends `Vs` >= every dependency; taking the maximum keeps
    /// the Lamport invariant even for a sender that does not.
    pub fn version_floor(&self) -> Version {
        self.dependencies
            .iter()
            .map(|dependency| dependency.version)
            .fold(self.version, Version::max)
    }

    /// Encoded size of this header in bytes.
    pub fn encoded_len_bytes(&self) -> usize {
        FIXED_LEN_BYTES + PAIR_LEN_BYTES * self.dependencies.len()
    }

    /// Appends the encoded header to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), HeaderError> {
        let count =
            u32::try_from(self.dependencies.len()).map_err(|_| HeaderError::CountOverflow {
                count: self.dependencies.len(),
            })?;
        let start = out.len();
        out.reserve(self.encoded_len_bytes());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.push(self.kind as u8);
        out.push(0);
        out.extend_from_slice(&self.world_line.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.batch_sequence.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for dependency in &self.dependencies {
            out.extend_from_slice(&dependency.worker.to_le_bytes());
            out.extend_from_slice(&dependency.version.to_le_bytes());
        }
        let encoded = &mut out[start..];
        let checksum = checksum(encoded);
        encoded[44..48].copy_from_slice(&checksum.to_le_bytes());
        debug_assert_eq!(out.len() - start, self.encoded_len_bytes());
        Ok(())
    }

    /// Encodes into a fresh buffer.
    pub fn encode(&self) -> Result<Vec<u8>, HeaderError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Decodes a header from the front of `bytes`; returns it and the number of bytes consumed (the
    /// payload follows). Rejects more than `max_dependencies` pairs.
    pub fn decode(bytes: &[u8], max_dependencies: u32) -> Result<(Self, usize), HeaderError> {
        if bytes.len() < FIXED_LEN_BYTES {
            return Err(HeaderError::Truncated {
                offset: bytes.len(),
                needed_bytes: FIXED_LEN_BYTES,
                available_bytes: bytes.len(),
            });
        }
        let magic: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(HeaderError::BadMagic { found: magic });
        }
        let format = u16::from_le_bytes([bytes[4], bytes[5]]);
        if format != FORMAT_VERSION {
            return Err(HeaderError::UnsupportedFormat { found: format });
        }
        let kind =
            HeaderKind::from_byte(bytes[6]).ok_or(HeaderError::BadKind { found: bytes[6] })?;
        if bytes[7] != 0 {
            return Err(HeaderError::BadFlags { found: bytes[7] });
        }
        let count = u32::from_le_bytes(bytes[40..44].try_into().expect("4 bytes"));
        if count > max_dependencies {
            return Err(HeaderError::TooManyDependencies {
                count,
                max: max_dependencies,
            });
        }
        // `count <= max_dependencies <= u32::MAX`, so this cannot overflow usize on 64-bit targets;
        // checked arithmetic keeps 32-bit targets honest too.
        let total = (count as usize)
            .checked_mul(PAIR_LEN_BYTES)
            .and_then(|pairs| pairs.checked_add(FIXED_LEN_BYTES))
            .ok_or(HeaderError::TooManyDependencies {
                count,
                max: max_dependencies,
            })?;
        if bytes.len() < total {
            return Err(HeaderError::Truncated {
                offset: bytes.len(),
                needed_bytes: total,
                available_bytes: bytes.len(),
            });
        }
        let stored = u32::from_le_bytes(bytes[44..48].try_into().expect("4 bytes"));
        let computed = checksum(&bytes[..total]);
        if stored != computed {
            return Err(HeaderError::BadChecksum { stored, computed });
        }
        // Allocation bounded by the checked count, which is backed by bytes actually present.
        let mut dependencies = Vec::with_capacity(count as usize);
        for index in 0..count as usize {
            let offset = FIXED_LEN_BYTES + index * PAIR_LEN_BYTES;
            dependencies.push(WorkerVersion {
                worker: u64_at(bytes, offset) as WorkerId,
                version: u64_at(bytes, offset + 8),
            });
        }
        Ok((
            Self {
                kind,
                world_line: u64_at(bytes, 8),
                version: u64_at(bytes, 16),
                sender: u64_at(bytes, 24),
                batch_sequence: u64_at(bytes, 32),
                dependencies,
            },
            total,
        ))
    }
}

/// CRC32C over `encoded` with the checksum field (bytes 44..48) treated as absent.
fn checksum(encoded: &[u8]) -> u32 {
    let head = crc32c::crc32c(&encoded[..44]);
    crc32c::crc32c_append(head, &encoded[48..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_count_is_rejected_before_allocation() {
        let header = DprHeader {
            kind: HeaderKind::Request,
            world_line: 1,
            version: 2,
            sender: 3,
            batch_sequence: 4,
            dependencies: vec![],
        };
        let mut bytes = header.encode().unwrap();
        bytes[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            DprHeader::decode(&bytes, u32::MAX),
            Err(HeaderError::Truncated { .. })
        ));
        assert!(matches!(
            DprHeader::decode(&bytes, 16),
            Err(HeaderError::TooManyDependencies { .. })
        ));
    }
}
