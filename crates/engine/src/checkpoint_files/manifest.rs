//! The MANIFEST of a checkpoint: what the checkpoint is and which segment files make it up.
//!
//! Layout (little-endian; see the parent module for the whole format):
//!
//! ```text
//! offset        size  field
//! 0             8     magic "PKVMANIF"
//! 8             4     format version (1)
//! 12            8     body length B in bytes (at most MAX_MANIFEST_BYTES)
//! 20            B     body: UTF-8 JSON of `Manifest`
//! 20+B          4     CRC32C of bytes [0, 20+B)
//! 24+B          8     total file length (32+B), repeated so that truncation is caught early
//! ```
//!
//! Invariants: the decoder checks the file length against both recorded lengths and the CRC before
//! it parses any JSON, and checks the parsed content for internal consistency (segment names,
//! increasing indices, plausible sizes) before anyone trusts it to name files.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::segment::{
    segment_file_name, SegmentSummary, ENTRY_HEADER_BYTES, SEGMENT_FOOTER_BYTES,
    SEGMENT_HEADER_BYTES,
};
use crate::error::EngineError;

/// First 8 bytes of a MANIFEST.
pub const MANIFEST_MAGIC: [u8; 8] = *b"PKVMANIF";
/// Version of the MANIFEST layout.
pub const MANIFEST_FORMAT_VERSION: u32 = 1;
/// Largest MANIFEST body accepted; a checkpoint with more segments than fit is refused.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
const MANIFEST_HEADER_BYTES: u64 = 20;
const MANIFEST_TRAILER_BYTES: u64 = 12;

/// How recovery must combine the entries of the segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ManifestKind {
    /// Each key appears at most once over all segments; segments load in parallel, in any order.
    KeyUnique,
    /// Log records in address order, segment i before i+1; applied in order, last one wins.
    LogOrdered,
    /// A `LogOrdered` delta: only the records of versions in `(base, version]`, in address order,
    /// applied in order on top of the image of checkpoint `base` (itself full or a delta). A
    /// separate kind rather than a field, so that a build that does not know deltas refuses the
    /// checkpoint (an unknown variant fails to parse) instead of loading it as a whole image.
    LogDelta {
        /// The checkpoint this one applies on top of (a smaller version).
        base: u64,
    },
    /// An incremental checkpoint of a store with a storage tier: no segments; the log's pages
    /// below the fold-over address are in the store's page file, and the checkpoint directory
    /// holds a fuzzy copy of the index ([`INDEX_FILE_NAME`](super::INDEX_FILE_NAME)).
    /// [`ManifestContent::tier`] says where (the engine's `checkpoint/incremental.rs` says how).
    Incremental,
}

/// Where an [`ManifestKind::Incremental`] checkpoint's state is: log addresses (the log's own
/// numbering, page number times page size plus offset) and the index copy's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierImage {
    /// The log's begin address: the page file holds every page from this one's up to the
    /// fold-over address.
    pub begin: u64,
    /// The tail before the index copy started: every record below it is linked into the copy.
    pub replay_from: u64,
    /// The tail before the version switch started: no record of a later version lies below it.
    pub switch_at: u64,
    /// The tail once the switch ended: every record of the checkpoint's version lies below it.
    pub fold_over: u64,
    /// The index copy's length in bytes.
    pub index_bytes: u64,
    /// CRC32C of the whole index copy.
    pub index_crc: u32,
    /// The store's count of live bytes when the checkpoint was taken (compaction's trigger;
    /// recovery starts from it instead of reading every record to count them).
    #[serde(default)]
    pub live_bytes: u64,
    /// Log ranges that hold records of crashed runs which no recovered state contains, still at
    /// or above `begin`: log scans skip them (records of a version above `above_version`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holes: Vec<LogHole>,
}

/// A log range `[from, until)` in which records of versions above `above_version` belong to a run
/// that crashed before any checkpoint held them (written after the fold-over point a recovery
/// restarted from, or by the version switch that ended there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHole {
    /// First address of the range.
    pub from: u64,
    /// First address past the range.
    pub until: u64,
    /// Records of this version and below in the range are part of the recovered state.
    pub above_version: u64,
}

impl LogHole {
    /// Whether a record of `version` at `address` is one of the hole's dead records.
    pub fn holds(&self, address: u64, version: u64) -> bool {
        address >= self.from && address < self.until && version > self.above_version
    }
}

/// Most holes a checkpoint carries: one per recovery from an incremental checkpoint whose range
/// is still above the log's begin address (compaction of the page file moves past them).
pub const MAX_LOG_HOLES: usize = 1024;

/// What the engine says about a checkpoint; stored in its MANIFEST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestContent {
    /// Checkpoint version (equal to the number in the directory name).
    pub version: u64,
    /// The strategy that produced it, by its display name.
    pub strategy: String,
    /// How the segments combine into an image.
    pub kind: ManifestKind,
    /// (session id, CPR serial) of every session covered by the checkpoint.
    pub session_points: Vec<(u64, u64)>,
    /// The next session id to hand out after recovering this checkpoint.
    pub next_session_id: u64,
    /// Wall-clock creation time, milliseconds since the Unix epoch (informational only).
    pub created_unix_ms: u64,
    /// The application's commit cookie, given with the checkpoint request and returned by
    /// recovery (FASTER's commit cookie): state of the caller's own that must travel with the
    /// checkpoint, such as the operation-log position it covers. At most
    /// [`MAX_COOKIE_BYTES`]. Absent in manifests written before cookies existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookie: Vec<u8>,
    /// For an [`ManifestKind::Incremental`] checkpoint (and only for one): where its state is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<TierImage>,
}

/// Largest commit cookie a checkpoint carries.
pub const MAX_COOKIE_BYTES: usize = 64 << 10;

/// A decoded MANIFEST: the content plus the segment summaries, sorted by index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// What the engine recorded.
    pub content: ManifestContent,
    /// One summary per segment file, in increasing index order.
    pub segments: Vec<SegmentSummary>,
}

impl Manifest {
    /// Total number of entries over all segments.
    pub fn entries(&self) -> u64 {
        self.segments.iter().map(|segment| segment.entries).sum()
    }

    /// Total bytes of all segment files.
    pub fn segment_bytes(&self) -> u64 {
        self.segments.iter().map(|segment| segment.bytes).sum()
    }

    /// Checks the rules every valid manifest obeys; `Err` holds the first broken rule.
    pub(crate) fn check_consistency(&self) -> Result<(), String> {
        if self.content.version == 0 {
            return Err("checkpoint version 0 is never written (versions start at 1)".into());
        }
        if let ManifestKind::LogDelta { base } = self.content.kind {
            if base == 0 || base >= self.content.version {
                return Err(format!(
                    "delta checkpoint v{} names base v{base}: a base is a smaller, nonzero version",
                    self.content.version
                ));
            }
        }
        match (&self.content.kind, &self.content.tier) {
            (ManifestKind::Incremental, Some(tier)) => {
                if !self.segments.is_empty() {
                    return Err("an incremental checkpoint lists segments".into());
                }
                if !(tier.begin <= tier.replay_from
                    && tier.replay_from <= tier.switch_at
                    && tier.switch_at <= tier.fold_over)
                {
                    return Err(format!(
                        "incremental checkpoint addresses out of order: begin {}, replay from {}, \
                         switch at {}, fold-over {}",
                        tier.begin, tier.replay_from, tier.switch_at, tier.fold_over
                    ));
                }
                if tier.holes.len() > MAX_LOG_HOLES
                    || tier
                        .holes
                        .iter()
                        .any(|hole| hole.from > hole.until || hole.until > tier.fold_over)
                {
                    return Err(format!(
                        "{} log holes, or one outside the log below the fold-over address",
                        tier.holes.len()
                    ));
                }
            }
            (ManifestKind::Incremental, None) => {
                return Err("an incremental checkpoint without its tier image".into());
            }
            (_, Some(_)) => {
                return Err("a tier image in a checkpoint that is not incremental".into())
            }
            (_, None) => {}
        }
        if self.content.cookie.len() > MAX_COOKIE_BYTES {
            return Err(format!(
                "the commit cookie is {} bytes, more than the {MAX_COOKIE_BYTES} a checkpoint carries",
                self.content.cookie.len()
            ));
        }
        let mut previous_index: Option<u32> = None;
        for segment in &self.segments {
            if previous_index.is_some_and(|previous| segment.index <= previous) {
                return Err(format!(
                    "segment indices are not strictly increasing at segment {}",
                    segment.index
                ));
            }
            previous_index = Some(segment.index);
            if segment.file_name != segment_file_name(segment.index) {
                return Err(format!(
                    "segment {} has file name {:?}, expected {:?}",
                    segment.index,
                    segment.file_name,
                    segment_file_name(segment.index)
                ));
            }
            let minimum_bytes = SEGMENT_HEADER_BYTES + SEGMENT_FOOTER_BYTES;
            let entry_bytes = segment.bytes.checked_sub(minimum_bytes).ok_or_else(|| {
                format!(
                    "segment {} is recorded as {} bytes, below the minimum",
                    segment.index, segment.bytes
                )
            })?;
            if segment.entries > entry_bytes / ENTRY_HEADER_BYTES {
                return Err(format!(
                    "segment {} is recorded with {} entries, more than {} bytes can hold",
                    segment.index, segment.entries, segment.bytes
                ));
            }
        }
        Ok(())
    }
}

/// Encodes a manifest into the MANIFEST file bytes.
pub fn encode_manifest(manifest: &Manifest) -> Vec<u8> {
    let body = serde_json::to_vec_pretty(manifest).expect("a manifest always serialises to JSON");
    let total_bytes = MANIFEST_HEADER_BYTES + body.len() as u64 + MANIFEST_TRAILER_BYTES;
    let mut bytes = Vec::with_capacity(total_bytes as usize);
    bytes.extend_from_slice(&MANIFEST_MAGIC);
    bytes.extend_from_slice(&MANIFEST_FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&body);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes.extend_from_slice(&total_bytes.to_le_bytes());
    debug_assert_eq!(bytes.len() as u64, total_bytes);
    bytes
}

/// Decodes and checks MANIFEST bytes; `path` names the file in errors.
pub fn decode_manifest_bytes(bytes: &[u8], path: &Path) -> Result<Manifest, EngineError> {
    let corrupt = |offset: u64, detail: String| EngineError::corrupt(path, offset, detail);
    let file_bytes = bytes.len() as u64;
    if file_bytes < MANIFEST_HEADER_BYTES + MANIFEST_TRAILER_BYTES {
        return Err(corrupt(
            0,
            format!("MANIFEST is {file_bytes} bytes, too short to be valid (truncated)"),
        ));
    }
    if bytes[0..8] != MANIFEST_MAGIC {
        return Err(corrupt(
            0,
            "bad magic number: not a prefixkv MANIFEST".into(),
        ));
    }
    let format_version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let body_bytes = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let expected_file_bytes =
        body_bytes.checked_add(MANIFEST_HEADER_BYTES + MANIFEST_TRAILER_BYTES);
    if body_bytes > MAX_MANIFEST_BYTES || expected_file_bytes != Some(file_bytes) {
        return Err(corrupt(
            12,
            format!(
                "MANIFEST records a body of {body_bytes} bytes but the file is {file_bytes} bytes \
                 (truncated or overwritten)"
            ),
        ));
    }
    let trailer_at = (MANIFEST_HEADER_BYTES + body_bytes) as usize;
    let stored_crc = u32::from_le_bytes(bytes[trailer_at..trailer_at + 4].try_into().expect("4"));
    let stored_total = u64::from_le_bytes(
        bytes[trailer_at + 4..trailer_at + 12]
            .try_into()
            .expect("8"),
    );
    if stored_total != file_bytes {
        return Err(corrupt(
            trailer_at as u64 + 4,
            format!(
                "MANIFEST trailer records {stored_total} bytes, the file is {file_bytes} bytes"
            ),
        ));
    }
    let actual_crc = crc32c::crc32c(&bytes[..trailer_at]);
    if actual_crc != stored_crc {
        return Err(corrupt(
            trailer_at as u64,
            format!(
                "MANIFEST checksum mismatch (recorded {stored_crc:#010x}, computed \
                 {actual_crc:#010x}): the file was modified after it was written"
            ),
        ));
    }
    // Checked after the CRC so that a damaged version field reads as damage, not as a new format.
    if format_version != MANIFEST_FORMAT_VERSION {
        return Err(corrupt(
            8,
            format!(
                "MANIFEST format version {format_version} is not supported (this build reads \
                 version {MANIFEST_FORMAT_VERSION}); use a matching prefixkv build"
            ),
        ));
    }
    let body = &bytes[MANIFEST_HEADER_BYTES as usize..trailer_at];
    let manifest: Manifest = serde_json::from_slice(body).map_err(|error| {
        corrupt(
            MANIFEST_HEADER_BYTES,
            format!("MANIFEST body is not a valid manifest: {error}"),
        )
    })?;
    manifest.check_consistency().map_err(|detail| {
        corrupt(
            MANIFEST_HEADER_BYTES,
            format!("inconsistent MANIFEST: {detail}"),
        )
    })?;
    Ok(manifest)
}
