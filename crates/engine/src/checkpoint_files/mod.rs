//! Checkpoint files: segment files plus a MANIFEST per checkpoint directory, published atomically,
//! verified end to end on recovery.
//!
//! # Directory layout
//!
//! ```text
//! <root>/                                   usually <store dir>/checkpoints
//!   v00000000000000000007/                  a published checkpoint (version 7)
//!     MANIFEST
//!     segment-000000.seg  segment-000001.seg  ...
//!   v00000000000000000008.tmp/              a checkpoint being written (or left by a crash)
//!   v00000000000000000005.deleting/         a checkpoint being pruned (or left by a crash)
//!   v00000000000000000009.corrupt/          failed verification; moved aside by a recovery that
//!                                           fell back to an older checkpoint; kept for inspection
//! ```
//!
//! # Segment file (all integers little-endian)
//!
//! ```text
//! offset  size  field
//! header (32 bytes)
//! 0       8     magic "PKVSEG01"
//! 8       4     format version (1)
//! 12      4     segment index
//! 16      8     checkpoint version
//! 24      4     reserved, zero
//! 28      4     CRC32C of header bytes [0, 28)
//! entries, repeated, starting at offset 32
//! +0      1     kind: 1 = put, 2 = tombstone
//! +1      8     record version
//! +9      4     key length K   (<= DecodeLimits::max_key_bytes, default 64 KiB)
//! +13     4     value length V (<= DecodeLimits::max_value_bytes, default 512 MiB; 0 for a tombstone)
//! +17     K     key
//! +17+K   V     value
//! footer (last 32 bytes of the file; B = its offset = file length - 32)
//! B+0     8     entry count
//! B+8     8     body length (= B)
//! B+16    4     CRC32C of bytes [0, B)   (header and all entries)
//! B+20    4     CRC32C of footer bytes [B, B+20)
//! B+24    8     magic "PKVSEGND"
//! ```
//!
//! The MANIFEST layout is in [`manifest`]: magic, format version, body length, a JSON body holding
//! [`ManifestContent`] and one [`SegmentSummary`] (index, file name, entries, bytes, CRC32C) per
//! segment, then a CRC32C of everything before it and the total length again.
//!
//! A delta checkpoint ([`ManifestKind::LogDelta`]) holds only the log records of the versions
//! above its base, another published checkpoint; recovery verifies and loads the whole chain down
//! to a full image (`recovery` module), so a delta is usable exactly while its bases are.
//!
//! # Publishing, and why a crash never leaves a half checkpoint that recovery would use
//!
//! Directories, publication, selection, quarantine and pruning are the storage crate's version
//! catalog (`prefixkv_storage::catalog`, whose argument this restates for checkpoints); every
//! file goes through the store's [`prefixkv_storage::Disk`] (`StoreConfig::disk`).
//!
//! 1. [`CheckpointDirectory::begin`] creates `v{version:020}.tmp`. Nothing reads `.tmp` directories;
//!    [`CheckpointDirectory::open`] deletes them as unfinished.
//! 2. Each flusher streams its [`SegmentWriter`] and calls [`SegmentWriter::finish`], which writes the
//!    footer and fdatasyncs the file.
//! 3. [`PendingCheckpoint::publish`] writes `MANIFEST` into the `.tmp` directory and fsyncs it, fsyncs
//!    the `.tmp` directory (so the directory entries of MANIFEST and every segment are durable), renames
//!    `v….tmp` to `v…` and fsyncs the root directory (so the rename is durable).
//!
//! A crash before the rename leaves only a `.tmp` directory: invisible to recovery. Once the rename
//! is on disk, every byte it points at was fsynced before it, so the checkpoint is complete. rename(2)
//! of a directory is atomic, so there is no state in between. A crash after the rename but before
//! the root fsync may lose the rename on power failure: the checkpoint then never existed, and the
//! engine has not yet told anyone that it did (publish had not returned).
//!
//! Recovery does not trust this argument alone: [`CheckpointDirectory::select_for_recovery`] checks
//! the MANIFEST CRC, then every segment's length, header, every entry's framing, the CRC32C of the
//! whole body and the footer, against the MANIFEST. The newest checkpoint that passes every check is
//! used; if a newer one failed, the result says which file and why (`fell_back`) and the failed
//! directory is renamed to `v….corrupt`, so that the next checkpoint can take its version number and
//! pruning never keeps it in place of a good one. If checkpoints
//! exist and none passes, recovery refuses with an error naming every file and problem, rather than
//! start from an empty or partial image.
//!
//! Pruning renames `v…` to `v….deleting` (atomic, fsynced) before deleting its files, so a crash in
//! the middle of a deletion never leaves a published-looking directory with files missing.

mod directory;
pub mod manifest;
pub mod pacer;
mod recovery;
pub mod segment;
mod segment_writer;

pub use directory::{CheckpointDirectory, PendingCheckpoint, PublishedCheckpoint};
pub use manifest::{
    decode_manifest_bytes, encode_manifest, LogHole, Manifest, ManifestContent, ManifestKind,
    TierImage, MAX_COOKIE_BYTES, MAX_LOG_HOLES,
};
pub use recovery::VerifiedCheckpoint;
pub use segment::{
    decode_segment_bytes, DecodeLimits, Entry, EntryRef, SegmentDecoder, SegmentSummary, WriteTimes,
};
pub use segment_writer::SegmentWriter;

/// Name of the manifest file inside a checkpoint directory.
pub const MANIFEST_FILE_NAME: &str = "MANIFEST";
/// The index copy of an incremental checkpoint ([`ManifestKind::Incremental`]).
pub const INDEX_FILE_NAME: &str = "INDEX";
