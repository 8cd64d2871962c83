//! STAND-IN for engine-files' checkpoint file module, with the contract's signatures
//! (`/work/briefs/engine-api.md`). It is replaced by engine-files' version at merge; it exists so
//! engine-core compiles and its tests write and recover real files.
//!
//! Checkpoint file format: described by engine-files' real module (this stand-in uses a simple
//! format: segment = entries `[kind u8][record_version u64][key_len u32][value_len u32][key][value]`
//! (little-endian) with the whole-file CRC32C kept in the MANIFEST; MANIFEST = `key value` text
//! lines ending in `crc32c <hex>` over the preceding bytes). Publish: segments fsynced, MANIFEST
//! written + fsynced, `v….tmp` renamed to `v…`, parent directory fsynced.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::EngineError;

/// Largest key or value a segment entry may declare (bounds allocations while decoding).
const MAX_FIELD_BYTES: u32 = 1 << 30;

/// How recovery applies a checkpoint's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestKind {
    /// Each key at most once over all segments; load in parallel.
    KeyUnique,
    /// Log records in address order; apply in order, last wins.
    LogOrdered,
}

/// What the engine records in a manifest.
#[derive(Clone, Debug)]
pub struct ManifestContent {
    /// Checkpoint version.
    pub version: u64,
    /// Strategy name.
    pub strategy: String,
    /// Entry semantics.
    pub kind: ManifestKind,
    /// (session id, CPR serial).
    pub session_points: Vec<(u64, u64)>,
    /// The next session id to hand out after recovery.
    pub next_session_id: u64,
    /// Wall-clock creation time.
    pub created_unix_ms: u64,
}

/// One finished segment.
#[derive(Clone, Debug)]
pub struct SegmentSummary {
    /// File name inside the checkpoint directory.
    pub file_name: String,
    /// Number of entries.
    pub entries: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// CRC32C of the whole file.
    pub crc32c: u32,
}

/// A parsed manifest: content plus segment summaries.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// What the engine recorded.
    pub content: ManifestContent,
    /// Segments in order.
    pub segments: Vec<SegmentSummary>,
}

/// One decoded entry.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'a> {
    /// Deletion marker.
    pub tombstone: bool,
    /// Version of the record the entry came from.
    pub record_version: u64,
    /// Key bytes.
    pub key: &'a [u8],
    /// Value bytes (empty for tombstones).
    pub value: &'a [u8],
}

/// The `dir/checkpoints` root.
#[derive(Debug)]
pub struct CheckpointDirectory {
    root: PathBuf,
}

/// A checkpoint being written (`v….tmp`).
#[derive(Debug)]
pub struct PendingCheckpoint {
    root: PathBuf,
    temporary: PathBuf,
    version: u64,
}

/// A durable checkpoint.
#[derive(Debug, Clone)]
pub struct PublishedCheckpoint {
    /// Its directory.
    pub dir: PathBuf,
    /// Total segment bytes.
    pub bytes: u64,
}

/// Writes one segment file.
pub struct SegmentWriter {
    path: PathBuf,
    file_name: String,
    out: BufWriter<File>,
    entries: u64,
    bytes: u64,
    crc: u32,
}

/// A checkpoint whose manifest and segments verified.
#[derive(Debug)]
pub struct VerifiedCheckpoint {
    dir: PathBuf,
    manifest: Manifest,
    fell_back: Option<String>,
}

fn dir_name(version: u64) -> String {
    format!("v{version:020}")
}

fn sync_dir(path: &Path) -> Result<(), EngineError> {
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(|error| EngineError::io("fsync directory", path, error))
}

impl CheckpointDirectory {
    /// Opens (creating) the root and removes stale `*.tmp` directories.
    pub fn open(root: &Path) -> Result<Self, EngineError> {
        fs::create_dir_all(root)
            .map_err(|error| EngineError::io("create checkpoint root", root, error))?;
        let listing =
            fs::read_dir(root).map_err(|error| EngineError::io("list checkpoints", root, error))?;
        for entry in listing {
            let entry = entry.map_err(|error| EngineError::io("list checkpoints", root, error))?;
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                fs::remove_dir_all(entry.path()).map_err(|error| {
                    EngineError::io("remove stale checkpoint", entry.path(), error)
                })?;
            }
        }
        Ok(CheckpointDirectory {
            root: root.to_path_buf(),
        })
    }

    fn published_versions(&self) -> Result<Vec<u64>, EngineError> {
        let listing = fs::read_dir(&self.root)
            .map_err(|error| EngineError::io("list checkpoints", &self.root, error))?;
        let mut versions = Vec::new();
        for entry in listing {
            let entry =
                entry.map_err(|error| EngineError::io("list checkpoints", &self.root, error))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(digits) = name.strip_prefix('v') {
                if digits.len() == 20 {
                    if let Ok(version) = digits.parse::<u64>() {
                        versions.push(version);
                    }
                }
            }
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// Starts checkpoint `version` in a temporary directory.
    pub fn begin(&self, version: u64) -> Result<PendingCheckpoint, EngineError> {
        let temporary = self.root.join(format!("{}.tmp", dir_name(version)));
        if temporary.exists() {
            fs::remove_dir_all(&temporary)
                .map_err(|error| EngineError::io("remove stale checkpoint", &temporary, error))?;
        }
        fs::create_dir(&temporary)
            .map_err(|error| EngineError::io("create checkpoint dir", &temporary, error))?;
        Ok(PendingCheckpoint {
            root: self.root.clone(),
            temporary,
            version,
        })
    }

    /// The newest checkpoint that verifies; older ones are tried if newer ones fail.
    pub fn select_for_recovery(&self) -> Result<Option<VerifiedCheckpoint>, EngineError> {
        let versions = self.published_versions()?;
        let mut failures = Vec::new();
        for version in versions.iter().rev() {
            let dir = self.root.join(dir_name(*version));
            match verify(&dir) {
                Ok(manifest) => {
                    let fell_back = (!failures.is_empty())
                        .then(|| format!("{}; recovered v{version}", failures.join("; ")));
                    return Ok(Some(VerifiedCheckpoint {
                        dir,
                        manifest,
                        fell_back,
                    }));
                }
                Err(error) => failures.push(format!(
                    "checkpoint v{version} failed verification ({error})"
                )),
            }
        }
        if failures.is_empty() {
            return Ok(None);
        }
        Err(EngineError::Corrupt {
            path: self.root.clone(),
            offset: 0,
            detail: format!(
                "no checkpoint verifies: {}; move the damaged directories aside to start empty",
                failures.join("; ")
            ),
        })
    }

    /// Keeps the newest `keep` published checkpoints.
    pub fn prune(&self, keep: usize) -> Result<(), EngineError> {
        let versions = self.published_versions()?;
        let excess = versions.len().saturating_sub(keep);
        for version in &versions[..excess] {
            let dir = self.root.join(dir_name(*version));
            fs::remove_dir_all(&dir)
                .map_err(|error| EngineError::io("prune checkpoint", &dir, error))?;
        }
        Ok(())
    }

    /// The newest published version, if any.
    pub fn newest_published_version(&self) -> Option<u64> {
        self.published_versions().ok()?.last().copied()
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, EngineError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .map_err(|error| EngineError::io("read", path, error))?;
    Ok(bytes)
}

fn corrupt(path: &Path, offset: u64, detail: impl Into<String>) -> EngineError {
    EngineError::Corrupt {
        path: path.to_path_buf(),
        offset,
        detail: detail.into(),
    }
}

fn verify(dir: &Path) -> Result<Manifest, EngineError> {
    let manifest = read_manifest(dir)?;
    for segment in &manifest.segments {
        let path = dir.join(&segment.file_name);
        let bytes = read_file(&path)?;
        if bytes.len() as u64 != segment.bytes || crc32c::crc32c(&bytes) != segment.crc32c {
            return Err(corrupt(
                &path,
                0,
                "segment size or CRC32C does not match the MANIFEST",
            ));
        }
    }
    Ok(manifest)
}

fn read_manifest(dir: &Path) -> Result<Manifest, EngineError> {
    let path = dir.join("MANIFEST");
    let bytes = read_file(&path)?;
    let text =
        std::str::from_utf8(&bytes).map_err(|_| corrupt(&path, 0, "MANIFEST is not UTF-8"))?;
    let body_end = text
        .rfind("crc32c ")
        .ok_or_else(|| corrupt(&path, 0, "MANIFEST has no crc32c line"))?;
    let stored = u32::from_str_radix(text[body_end + 7..].trim(), 16)
        .map_err(|_| corrupt(&path, body_end as u64, "bad crc32c line"))?;
    if crc32c::crc32c(&text.as_bytes()[..body_end]) != stored {
        return Err(corrupt(&path, body_end as u64, "MANIFEST CRC32C mismatch"));
    }
    let mut content = ManifestContent {
        version: 0,
        strategy: String::new(),
        kind: ManifestKind::KeyUnique,
        session_points: Vec::new(),
        next_session_id: 0,
        created_unix_ms: 0,
    };
    let mut segments = Vec::new();
    for line in text[..body_end].lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let number = |index: usize| -> Result<u64, EngineError> {
            fields
                .get(index)
                .and_then(|field| field.parse().ok())
                .ok_or_else(|| corrupt(&path, 0, format!("bad MANIFEST line {line:?}")))
        };
        match fields[0] {
            "version" => content.version = number(1)?,
            "strategy" => content.strategy = fields.get(1).unwrap_or(&"").to_string(),
            "kind" => {
                content.kind = if fields.get(1) == Some(&"log-ordered") {
                    ManifestKind::LogOrdered
                } else {
                    ManifestKind::KeyUnique
                }
            }
            "session" => content.session_points.push((number(1)?, number(2)?)),
            "next_session_id" => content.next_session_id = number(1)?,
            "created_unix_ms" => content.created_unix_ms = number(1)?,
            "segment" => segments.push(SegmentSummary {
                file_name: fields.get(1).unwrap_or(&"").to_string(),
                entries: number(2)?,
                bytes: number(3)?,
                crc32c: number(4)? as u32,
            }),
            _ => return Err(corrupt(&path, 0, format!("unknown MANIFEST line {line:?}"))),
        }
    }
    Ok(Manifest { content, segments })
}

impl PendingCheckpoint {
    /// A writer for segment `index`.
    pub fn segment_writer(&self, index: u32) -> Result<SegmentWriter, EngineError> {
        let file_name = format!("segment-{index:04}");
        let path = self.temporary.join(&file_name);
        let file =
            File::create(&path).map_err(|error| EngineError::io("create segment", &path, error))?;
        Ok(SegmentWriter {
            path,
            file_name,
            out: BufWriter::with_capacity(1 << 20, file),
            entries: 0,
            bytes: 0,
            crc: 0,
        })
    }

    /// Writes the MANIFEST and atomically publishes the checkpoint.
    pub fn publish(
        self,
        manifest: ManifestContent,
        segments: Vec<SegmentSummary>,
    ) -> Result<PublishedCheckpoint, EngineError> {
        debug_assert_eq!(manifest.version, self.version);
        let mut text = String::new();
        text.push_str(&format!(
            "version {}\nstrategy {}\n",
            manifest.version, manifest.strategy
        ));
        text.push_str(match manifest.kind {
            ManifestKind::KeyUnique => "kind key-unique\n",
            ManifestKind::LogOrdered => "kind log-ordered\n",
        });
        for (session, serial) in &manifest.session_points {
            text.push_str(&format!("session {session} {serial}\n"));
        }
        text.push_str(&format!(
            "next_session_id {}\ncreated_unix_ms {}\n",
            manifest.next_session_id, manifest.created_unix_ms
        ));
        let mut bytes = 0;
        for segment in &segments {
            bytes += segment.bytes;
            text.push_str(&format!(
                "segment {} {} {} {}\n",
                segment.file_name, segment.entries, segment.bytes, segment.crc32c
            ));
        }
        let crc = crc32c::crc32c(text.as_bytes());
        text.push_str(&format!("crc32c {crc:08x}\n"));
        let path = self.temporary.join("MANIFEST");
        File::create(&path)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())?;
                file.sync_all()
            })
            .map_err(|error| EngineError::io("write MANIFEST", &path, error))?;
        sync_dir(&self.temporary)?;
        let final_dir = self.root.join(dir_name(self.version));
        fs::rename(&self.temporary, &final_dir)
            .map_err(|error| EngineError::io("publish checkpoint", &final_dir, error))?;
        sync_dir(&self.root)?;
        Ok(PublishedCheckpoint {
            dir: final_dir,
            bytes,
        })
    }
}

impl SegmentWriter {
    fn write_entry(
        &mut self,
        kind: u8,
        record_version: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), EngineError> {
        let mut header = [0u8; 17];
        header[0] = kind;
        header[1..9].copy_from_slice(&record_version.to_le_bytes());
        header[9..13].copy_from_slice(&(key.len() as u32).to_le_bytes());
        header[13..17].copy_from_slice(&(value.len() as u32).to_le_bytes());
        for part in [&header[..], key, value] {
            self.crc = crc32c::crc32c_append(self.crc, part);
            self.out
                .write_all(part)
                .map_err(|error| EngineError::io("write segment", &self.path, error))?;
            self.bytes += part.len() as u64;
        }
        self.entries += 1;
        Ok(())
    }

    /// Appends a value entry.
    pub fn put(
        &mut self,
        record_version: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), EngineError> {
        self.write_entry(0, record_version, key, value)
    }

    /// Appends a deletion entry.
    pub fn tombstone(&mut self, record_version: u64, key: &[u8]) -> Result<(), EngineError> {
        self.write_entry(1, record_version, key, &[])
    }

    /// Flushes and fsyncs the segment.
    pub fn finish(self) -> Result<SegmentSummary, EngineError> {
        let path = self.path;
        let file = self
            .out
            .into_inner()
            .map_err(|error| EngineError::io("flush segment", &path, error.into_error()))?;
        file.sync_all()
            .map_err(|error| EngineError::io("fsync segment", &path, error))?;
        Ok(SegmentSummary {
            file_name: self.file_name,
            entries: self.entries,
            bytes: self.bytes,
            crc32c: self.crc,
        })
    }
}

fn decode_segment(
    path: &Path,
    bytes: &[u8],
    sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
) -> Result<u64, EngineError> {
    let mut offset = 0usize;
    let mut count = 0;
    while offset < bytes.len() {
        if bytes.len() - offset < 17 {
            return Err(corrupt(path, offset as u64, "truncated entry header"));
        }
        let header = &bytes[offset..offset + 17];
        let kind = header[0];
        let record_version = u64::from_le_bytes(header[1..9].try_into().expect("8 bytes"));
        let key_len = u32::from_le_bytes(header[9..13].try_into().expect("4 bytes"));
        let value_len = u32::from_le_bytes(header[13..17].try_into().expect("4 bytes"));
        if kind > 1 || key_len > MAX_FIELD_BYTES || value_len > MAX_FIELD_BYTES {
            return Err(corrupt(path, offset as u64, "bad entry header"));
        }
        let start = offset + 17;
        let end = start + key_len as usize + value_len as usize;
        if end > bytes.len() {
            return Err(corrupt(
                path,
                offset as u64,
                "entry runs past the end of the segment",
            ));
        }
        sink(EntryRef {
            tombstone: kind == 1,
            record_version,
            key: &bytes[start..start + key_len as usize],
            value: &bytes[start + key_len as usize..end],
        })?;
        count += 1;
        offset = end;
    }
    Ok(count)
}

impl VerifiedCheckpoint {
    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Why newer checkpoints were skipped, if they were.
    pub fn fell_back(&self) -> Option<&str> {
        self.fell_back.as_deref()
    }

    fn load_segment(
        &self,
        segment: &SegmentSummary,
        sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
    ) -> Result<u64, EngineError> {
        let path = self.dir.join(&segment.file_name);
        let bytes = read_file(&path)?;
        if crc32c::crc32c(&bytes) != segment.crc32c {
            return Err(corrupt(
                &path,
                0,
                "segment CRC32C changed since verification",
            ));
        }
        decode_segment(&path, &bytes, sink)
    }

    /// Loads KeyUnique segments on `threads` threads.
    pub fn load_parallel(
        &self,
        threads: usize,
        sink: &(dyn Fn(EntryRef<'_>) -> Result<(), EngineError> + Sync),
    ) -> Result<u64, EngineError> {
        let threads = threads.clamp(1, self.manifest.segments.len().max(1));
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    scope.spawn(move || -> Result<u64, EngineError> {
                        let mut total = 0;
                        for segment in self.manifest.segments.iter().skip(thread).step_by(threads) {
                            total += self.load_segment(segment, &mut |entry| sink(entry))?;
                        }
                        Ok(total)
                    })
                })
                .collect();
            let mut total = 0;
            for handle in handles {
                total += handle.join().expect("loader thread panicked")?;
            }
            Ok(total)
        })
    }

    /// Loads LogOrdered segments in order.
    pub fn load_in_order(
        &self,
        sink: &mut dyn FnMut(EntryRef<'_>) -> Result<(), EngineError>,
    ) -> Result<u64, EngineError> {
        let mut total = 0;
        for segment in &self.manifest.segments {
            total += self.load_segment(segment, sink)?;
        }
        Ok(total)
    }
}
