//! Opening a page file: list the segments, read every sums file (never the data), keep the
//! newest valid entry per page, cut torn tails, and repair the leftovers a power cut can leave
//! in the middle of a segment's creation or removal (see the module docs of [`super`]).

use super::format::{self, SumsEntry, SumsHeader, ENTRY_BYTES, SUMS_HEADER_BYTES};
use super::{Inner, PageFile, PageFileConfig, PageFileError, Result, Segment};
use crate::io::{Disk, DiskFile, OpenMode};
use crate::lock::DirLock;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Entries read from a sums file per read call (bounds the buffer whatever the file's length).
const ENTRIES_PER_CHUNK: usize = 2730;

/// A sums file whose entries ended in one that failed its checks (a write a power cut tore, or
/// damage): it and everything after it were dropped, and the file was cut there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornSums {
    /// The sums file.
    pub path: PathBuf,
    /// Byte offset of the first dropped entry.
    pub offset: u64,
    /// Bytes dropped (from `offset` to the old end of the file).
    pub dropped_bytes: u64,
    /// Why the entry at `offset` was not trusted.
    pub reason: String,
}

/// What [`PageFile::open`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageFileOpened {
    /// Segments (first page of each), oldest first.
    pub segments: Vec<u64>,
    /// Pages with a trusted entry.
    pub trusted_pages: u64,
    /// Sums files with a torn tail (cut and synced before the open returned).
    pub torn: Vec<TornSums>,
    /// Segments whose sums file was missing or held only a torn header (a creation a power cut
    /// interrupted: no entry of theirs was ever synced); given a fresh sums file.
    pub repaired_creations: Vec<u64>,
    /// Sums files whose data file was missing (a removal a power cut interrupted); deleted.
    pub removed_leftovers: Vec<u64>,
    /// Directory entries that are not page file names (ignored; `LOCK` is ours).
    pub ignored: Vec<String>,
    /// Whether writes go out with `O_DIRECT`: false when not asked for, or when the file system
    /// refused it for an existing segment (then they are buffered). With no segment yet, whether
    /// it was asked for ([`PageFile::direct_io`] tells once segments exist).
    pub direct_io: bool,
    /// Whether reads go out with `O_DIRECT`, decided like `direct_io` for the segments' read
    /// handles ([`PageFile::direct_reads`]).
    pub direct_reads: bool,
}

impl PageFile {
    /// Opens (creating durably if missing) the page file in `dir` on `disk` and takes the
    /// directory's lock. Reads every sums file, cuts torn tails, repairs interrupted creations
    /// and removals (all made durable before it returns), and reports what it found. Data is
    /// not read. Files made with another `page_bytes` or `pages_per_segment` are an error.
    pub fn open(
        disk: Arc<dyn Disk>,
        dir: &Path,
        config: PageFileConfig,
    ) -> Result<(PageFile, PageFileOpened)> {
        config.validate()?;
        crate::durable::create_dir_all_durably(disk.as_ref(), dir)
            .map_err(|e| PageFileError::io("creating the page file directory", e))?;
        let lock = DirLock::acquire(disk.as_ref(), dir).map_err(|e| PageFileError::Locked {
            dir: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let file = PageFile {
            disk,
            dir: dir.to_path_buf(),
            config,
            inner: Mutex::new(Inner {
                segments: BTreeMap::new(),
                latest: HashMap::new(),
                dir_dirty: 0,
                failed: None,
                staging: Vec::new(),
            }),
            _lock: lock,
        };
        let opened = file.scan()?;
        Ok((file, opened))
    }

    fn scan(&self) -> Result<PageFileOpened> {
        let mut opened = PageFileOpened::default();
        let entries = self
            .disk
            .list(&self.dir)
            .map_err(|e| PageFileError::io(format!("listing {}", self.dir.display()), e))?;
        let (mut data, mut sums) = (BTreeSet::new(), BTreeSet::new());
        for entry in entries {
            let name = &entry.name;
            let parsed = (format::DATA_NAME.parse(name), format::SUMS_NAME.parse(name));
            match parsed {
                (Some(first), _) if !entry.is_dir => data.insert(first),
                (_, Some(first)) if !entry.is_dir => sums.insert(first),
                _ => {
                    if name != crate::lock::LOCK_FILE_NAME {
                        opened.ignored.push(name.clone());
                    }
                    continue;
                }
            };
        }
        let per = u64::from(self.config.pages_per_segment);
        if let Some(first) = data.iter().chain(&sums).find(|first| *first % per != 0) {
            return Err(PageFileError::InvalidConfig(format!(
                "{} holds a segment starting at page {first}, not a multiple of \
                 pages_per_segment {per}: it was made with another configuration",
                self.dir.display()
            )));
        }
        let mut dir_changed = false;
        for first in sums.difference(&data) {
            let path = self.sums_path(*first);
            self.disk
                .remove_file(&path)
                .map_err(|e| PageFileError::io(format!("removing {}", path.display()), e))?;
            opened.removed_leftovers.push(*first);
            dir_changed = true;
        }
        let mut inner = self.inner.lock();
        for first in &data {
            let (segment, latest, created) = self.open_segment(*first, &mut opened)?;
            dir_changed |= created;
            opened.trusted_pages += latest.len() as u64;
            inner.latest.extend(latest.into_iter().map(|e| (e.page, e)));
            inner.segments.insert(*first, segment);
            opened.segments.push(*first);
        }
        if dir_changed {
            crate::durable::sync_dir(self.disk.as_ref(), &self.dir)
                .map_err(|e| PageFileError::io("repairing the page file directory", e))?;
        }
        opened.direct_io = self.config.direct_io && inner.segments.values().all(|s| s.direct);
        opened.direct_reads =
            self.config.direct_io && inner.segments.values().all(|s| s.reader.direct());
        Ok(opened)
    }

    /// Opens segment `first` and reads its sums file; returns the segment, the newest entry of
    /// each of its pages, and whether its sums file had to be created.
    fn open_segment(
        &self,
        first: u64,
        opened: &mut PageFileOpened,
    ) -> Result<(Segment, Vec<SumsEntry>, bool)> {
        let data = self.data_path(first);
        let sums_path = self.sums_path(first);
        let open = |path: &Path, mode| {
            self.disk
                .open(path, mode)
                .map_err(|e| PageFileError::io(format!("opening {}", path.display()), e))
        };
        let writer = open(&data, OpenMode::ReadWrite)?;
        // Read-only: nothing writes through it (the write handle is `writer`).
        let reader = self.read_handle(open(&data, OpenMode::Read)?)?;
        let sums = open(&sums_path, OpenMode::Create)?;
        let io = |e| PageFileError::io(format!("reading {}", sums_path.display()), e);
        let len = sums.len().map_err(io)?;
        let mut head = [0u8; SUMS_HEADER_BYTES];
        let head_len = (len as usize).min(SUMS_HEADER_BYTES);
        sums.read_exact_at(&mut head[..head_len], 0).map_err(io)?;
        let expected = self.header(first);
        let (header, created) = match format::decode_header(&head[..head_len]) {
            Ok(header) => (header, false),
            // The header is synced before any entry is written: a file no longer than a header
            // whose header fails is a creation a cut interrupted, and nothing in it was synced.
            Err(_) if len <= SUMS_HEADER_BYTES as u64 => {
                let bytes = format::encode_header(&expected);
                sums.set_len(0)
                    .and_then(|()| sums.write_all_at(&bytes, 0))
                    .and_then(|()| sums.sync_data())
                    .map_err(|e| {
                        PageFileError::io(format!("rewriting {}", sums_path.display()), e)
                    })?;
                opened.repaired_creations.push(first);
                (expected, true)
            }
            Err(reason) => {
                return Err(PageFileError::CorruptSums {
                    path: sums_path,
                    reason,
                })
            }
        };
        if header != expected {
            return Err(PageFileError::InvalidConfig(format!(
                "{} was made with {header:?}, the page file is opened with {expected:?}",
                sums_path.display()
            )));
        }
        let (latest, sums_len) = self.read_entries(&sums, &header, len, opened)?;
        let direct = self.enable_direct(&writer)?;
        let segment = Segment {
            writer,
            reader,
            sums,
            sums_len,
            pending: Vec::new(),
            direct,
        };
        Ok((segment, latest.into_values().collect(), created))
    }

    /// Reads the entries of a sums file in bounded chunks; keeps the newest valid one per page;
    /// on the first entry that fails, cuts the file there (synced) and reports a torn tail.
    /// Returns the entries and the trusted length.
    fn read_entries(
        &self,
        sums: &Arc<dyn DiskFile>,
        header: &SumsHeader,
        len: u64,
        opened: &mut PageFileOpened,
    ) -> Result<(HashMap<u64, SumsEntry>, u64)> {
        let path = sums.path().to_path_buf();
        let mut latest = HashMap::new();
        let mut at = SUMS_HEADER_BYTES as u64;
        let mut chunk = vec![0u8; ENTRIES_PER_CHUNK * ENTRY_BYTES];
        let mut torn = None;
        'chunks: while at < len {
            let want = ((len - at) as usize).min(chunk.len());
            sums.read_exact_at(&mut chunk[..want], at)
                .map_err(|e| PageFileError::io(format!("reading {}", path.display()), e))?;
            for bytes in chunk[..want].chunks(ENTRY_BYTES) {
                match format::decode_entry(bytes, header) {
                    Ok(entry) => {
                        latest.insert(entry.page, entry);
                        at += ENTRY_BYTES as u64;
                    }
                    Err(reason) => {
                        torn = Some(reason);
                        break 'chunks;
                    }
                }
            }
        }
        if let Some(reason) = torn {
            sums.set_len(at)
                .and_then(|()| sums.sync_data())
                .map_err(|e| {
                    PageFileError::io(format!("cutting the torn tail of {}", path.display()), e)
                })?;
            opened.torn.push(TornSums {
                path,
                offset: at,
                dropped_bytes: len - at,
                reason,
            });
        }
        Ok((latest, at))
    }
}
