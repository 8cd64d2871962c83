//! Opening a log directory: list the segments, validate every header and frame, classify the
//! first bad bytes as a torn tail or as corruption, and cut the log back to its valid prefix.
//!
//! Crash-safety argument (see also `docs/storage.md`):
//! - Every segment except the last was fully written and `fdatasync`ed before the next segment
//!   was created (the I/O thread syncs on roll, see `io_thread.rs`). So a crash can only leave
//!   unfinished bytes in the *last* segment. A bad frame in an earlier segment is therefore
//!   corruption, never a torn write, and is an error unless the caller asked for `repair`.
//! - In the last segment, the first bad frame starts a torn tail: the bytes of group writes that
//!   had not been synced when the machine stopped (and therefore were never acknowledged under
//!   `always`). It is dropped, with everything after it, and reported: point-in-time recovery.
//!   The bytes after it may still hold intact frames: a power cut keeps any subset of the unsynced
//!   sectors (the page cache writes them back in no particular order), so a damaged frame
//!   followed by an intact successor is what an interrupted group can leave, not proof of
//!   corruption. (An earlier version refused to open on that pattern; the simulated disk's power
//!   cuts showed it refusing logs that had lost nothing acknowledged.) What a power cut loses is
//!   whole sectors of fresh space, which read back as zeros, so such a damaged frame ends in
//!   zeros from a sector boundary on. A damaged frame with an intact successor and no lost sector
//!   had its bytes changed after they were written: corruption, an error unless `repair`.
//! - A frame whose CRC is valid but whose LSN is wrong is corruption wherever it is: every
//!   truncation is synced before the next append, so no stale frame can survive at a position.
//! - Truncation of the tail is made durable (`sync_all`) before any new append can land, so
//!   a later crash cannot resurrect the dropped bytes between new records.

use super::error::{LogError, Result};
use super::format::{
    decode_segment_header, encode_segment_header, parse_segment_file_name, FrameError, FrameReader,
    NextFrame, SEGMENT_EXTENSION, SEGMENT_HEADER_BYTES,
};
use crate::io::{Disk, DiskFile, FileReader, OpenMode};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One segment file of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentMeta {
    pub first_lsn: u64,
    pub path: PathBuf,
}

/// A torn record at the end of the last segment, dropped when the log was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file (always the newest one).
    pub segment: PathBuf,
    /// Where the torn bytes started; the file was truncated to this length.
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes_dropped: u64,
    /// Whether an intact frame with the next LSN followed the damage: unsynced sectors that
    /// reached the disk out of order at a power cut, or (if the log was synced there) bytes
    /// changed after they were written.
    pub intact_frame_after: bool,
}

/// What `repair: true` cut away at a corrupt record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The segment holding the corruption.
    pub segment: PathBuf,
    /// Offset of the corrupt header or frame; the segment was truncated here.
    pub offset: u64,
    /// What was wrong there.
    pub reason: String,
    /// Bytes dropped from that segment.
    pub bytes_dropped: u64,
    /// Later segments that were deleted because they followed the corruption.
    pub segments_deleted: Vec<PathBuf>,
}

/// The outcome of validating a log directory.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Surviving segments in LSN order; never empty.
    pub segments: Vec<SegmentMeta>,
    /// Valid length of the last segment (new appends go here).
    pub last_segment_bytes: u64,
    /// The LSN the next append gets.
    pub next_lsn: u64,
    /// Records found.
    pub records: u64,
    pub torn_tail: Option<TornTail>,
    pub repair: Option<Repair>,
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> LogError {
    move |source| LogError::io(context, source)
}

/// Lists `*.oplog` files of `dir` sorted by first LSN; other files are left alone.
pub(crate) fn list_segments(disk: &dyn Disk, dir: &Path) -> Result<Vec<SegmentMeta>> {
    let mut segments = Vec::new();
    let entries = disk
        .list(dir)
        .map_err(io_error(format!("listing log directory {}", dir.display())))?;
    for entry in entries {
        let name = entry.name;
        if !name.ends_with(&format!(".{SEGMENT_EXTENSION}")) {
            continue;
        }
        let Some(first_lsn) = parse_segment_file_name(&name) else {
            return Err(LogError::Inconsistent {
                dir: dir.to_path_buf(),
                reason: format!(
                    "file {name} has the segment extension but not a segment name (20 digits); move it away"
                ),
            });
        };
        segments.push(SegmentMeta {
            first_lsn,
            path: dir.join(name),
        });
    }
    segments.sort_by_key(|s| s.first_lsn);
    Ok(segments)
}

/// `fsync` of a directory, so that file creations, deletions and renames in it are durable.
pub(crate) fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<()> {
    crate::durable::sync_dir(disk, dir)
        .map_err(io_error(format!("syncing log directory {}", dir.display())))
}

/// Creates an empty segment (header only) and makes it durable, directory entry included.
/// Returns the segment and its open file.
pub(crate) fn create_segment(
    disk: &dyn Disk,
    dir: &Path,
    first_lsn: u64,
) -> Result<(SegmentMeta, Arc<dyn DiskFile>)> {
    let path = dir.join(super::format::segment_file_name(first_lsn));
    let file = disk
        .open(&path, OpenMode::CreateNew)
        .map_err(io_error(format!("creating log segment {}", path.display())))?;
    file.write_all_at(&encode_segment_header(first_lsn), 0)
        .and_then(|()| file.sync_all())
        .map_err(io_error(format!(
            "writing the header of log segment {}",
            path.display()
        )))?;
    sync_dir(disk, dir)?;
    Ok((SegmentMeta { first_lsn, path }, file))
}

fn open_segment(disk: &dyn Disk, path: &Path, mode: OpenMode) -> Result<Arc<dyn DiskFile>> {
    disk.open(path, mode)
        .map_err(io_error(format!("opening log segment {}", path.display())))
}

/// Truncates `path` to `length` bytes durably.
pub(crate) fn truncate_file(disk: &dyn Disk, path: &Path, length: u64) -> Result<()> {
    let file = open_segment(disk, path, OpenMode::ReadWrite)?;
    file.set_len(length)
        .and_then(|()| file.sync_all())
        .map_err(io_error(format!(
            "truncating {} to {length} bytes",
            path.display()
        )))
}

/// Overwrites the header of `path` with a fresh one for `first_lsn` and cuts the file after it.
fn reset_segment(disk: &dyn Disk, path: &Path, first_lsn: u64) -> Result<()> {
    let file = open_segment(disk, path, OpenMode::ReadWrite)?;
    file.set_len(0)
        .and_then(|()| file.write_all_at(&encode_segment_header(first_lsn), 0))
        .and_then(|()| file.sync_all())
        .map_err(io_error(format!(
            "rewriting the header of {}",
            path.display()
        )))
}

/// Is there a valid frame carrying `lsn` at `offset` of `path`? (Evidence of corruption, see the
/// module comment.)
fn valid_frame_at(
    disk: &dyn Disk,
    path: &Path,
    offset: u64,
    lsn: u64,
    max_record_bytes: u32,
) -> Result<bool> {
    let file = open_segment(disk, path, OpenMode::Read)?;
    let reader = BufReader::new(FileReader::new(file, offset));
    let mut reader = FrameReader::new(reader, offset, lsn, max_record_bytes);
    let next = reader
        .next_frame()
        .map_err(io_error(format!("reading {}", path.display())))?;
    Ok(matches!(next, NextFrame::Record { .. }))
}

/// The smallest unit a power cut loses: a 512-byte sector at a 512-aligned file offset (a 4 KiB
/// page or sector is eight of them).
const LOST_UNIT_BYTES: u64 = 512;

/// Whether the frame at `[start, end)` looks like what a power cut leaves of a group write
/// whose later sectors never reached the disk: its bytes from some 512-aligned offset (or from
/// its start) to its end are all zero. The log only appends to fresh space, so a lost sector
/// reads back as zeros; a frame with every sector present but a failing checksum was changed
/// after it was written. Group writes are whole frames, so a damaged write's first frame is the
/// one the scan stops at, and its lost part runs to its end.
fn ends_in_lost_sectors(disk: &dyn Disk, path: &Path, start: u64, end: u64) -> Result<bool> {
    debug_assert!(start < end);
    let file = open_segment(disk, path, OpenMode::Read)?;
    let mut bytes = vec![0u8; (end - start) as usize];
    file.read_exact_at(&mut bytes, start)
        .map_err(io_error(format!("reading {}", path.display())))?;
    let nonzero_end = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1) as u64;
    let zeros_from = start + nonzero_end;
    if zeros_from == start {
        return Ok(true);
    }
    // The first sector boundary at or after the last non-zero byte must lie inside the frame.
    let boundary = zeros_from.div_ceil(LOST_UNIT_BYTES) * LOST_UNIT_BYTES;
    Ok(boundary < end)
}

enum SegmentProblem {
    /// The segment's header is bad (offset 0).
    Header(String),
    /// A frame is bad.
    Frame {
        offset: u64,
        error: FrameError,
        length: Option<u32>,
    },
}

struct SegmentScan {
    records: u64,
    valid_bytes: u64,
    file_bytes: u64,
    problem: Option<SegmentProblem>,
}

fn scan_segment(
    disk: &dyn Disk,
    segment: &SegmentMeta,
    max_record_bytes: u32,
) -> Result<SegmentScan> {
    let path = &segment.path;
    let file = open_segment(disk, path, OpenMode::Read)?;
    let file_bytes = file
        .len()
        .map_err(io_error(format!("reading the size of {}", path.display())))?;
    let mut reader = BufReader::new(FileReader::new(file, 0));
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    let mut got = 0;
    while got < header.len() {
        match reader.read(&mut header[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LogError::io(format!("reading {}", path.display()), e)),
        }
    }
    let header_problem = match decode_segment_header(&header[..got]) {
        Err(e) => Some(e.to_string()),
        Ok(lsn) if lsn != segment.first_lsn => Some(format!(
            "header says first LSN {lsn} but the file name says {}",
            segment.first_lsn
        )),
        Ok(_) => None,
    };
    if let Some(reason) = header_problem {
        return Ok(SegmentScan {
            records: 0,
            valid_bytes: 0,
            file_bytes,
            problem: Some(SegmentProblem::Header(reason)),
        });
    }
    let mut frames = FrameReader::new(
        reader,
        SEGMENT_HEADER_BYTES as u64,
        segment.first_lsn,
        max_record_bytes,
    );
    let mut records = 0;
    loop {
        match frames
            .next_frame()
            .map_err(io_error(format!("reading log segment {}", path.display())))?
        {
            NextFrame::Record { .. } => records += 1,
            NextFrame::End => {
                return Ok(SegmentScan {
                    records,
                    valid_bytes: frames.offset(),
                    file_bytes,
                    problem: None,
                })
            }
            NextFrame::Bad {
                offset,
                error,
                length,
            } => {
                return Ok(SegmentScan {
                    records,
                    valid_bytes: offset,
                    file_bytes,
                    problem: Some(SegmentProblem::Frame {
                        offset,
                        error,
                        length,
                    }),
                })
            }
        }
    }
}

/// Validates the log in `dir` (creating the first segment of an empty log) and cuts it back to
/// its valid prefix as described in the module comment.
pub(crate) fn recover(
    disk: &dyn Disk,
    dir: &Path,
    max_record_bytes: u32,
    repair: bool,
    first_lsn: u64,
) -> Result<Recovered> {
    let mut segments = list_segments(disk, dir)?;
    if segments.is_empty() {
        let (first, _) = create_segment(disk, dir, first_lsn)?;
        return Ok(Recovered {
            segments: vec![first],
            last_segment_bytes: SEGMENT_HEADER_BYTES as u64,
            next_lsn: first_lsn,
            records: 0,
            torn_tail: None,
            repair: None,
        });
    }
    let mut records = 0u64;
    let mut torn_tail = None;
    let mut repair_report = None;
    let mut next_lsn = segments[0].first_lsn;
    let mut last_segment_bytes = 0;
    let mut index = 0;
    while index < segments.len() {
        let segment = segments[index].clone();
        if segment.first_lsn != next_lsn {
            return Err(LogError::Inconsistent {
                dir: dir.to_path_buf(),
                reason: format!(
                    "segment {} starts at LSN {} but the previous segment ends before LSN {next_lsn} \
                     (a segment file is missing or was copied in)",
                    segment.path.display(),
                    segment.first_lsn
                ),
            });
        }
        let is_last = index + 1 == segments.len();
        let scan = scan_segment(disk, &segment, max_record_bytes)?;
        let mut intact_frame_after = false;
        records += scan.records;
        next_lsn += scan.records;
        last_segment_bytes = scan.valid_bytes;
        let Some(problem) = scan.problem else {
            index += 1;
            continue;
        };
        // Decide torn tail vs corruption.
        let (offset, reason, torn) = match problem {
            SegmentProblem::Header(reason) => {
                // A crash while a new segment was being created leaves a short or half-written
                // header and nothing else.
                let torn = is_last && scan.file_bytes <= SEGMENT_HEADER_BYTES as u64;
                (0, reason, torn)
            }
            SegmentProblem::Frame {
                offset,
                error,
                length,
            } => {
                let mut torn = is_last && !matches!(error, FrameError::WrongLsn { .. });
                let mut reason = error.to_string();
                if torn {
                    if let Some(length) = length {
                        let successor = offset + super::format::frame_bytes(length as usize) as u64;
                        intact_frame_after = successor < scan.file_bytes
                            && valid_frame_at(
                                disk,
                                &segment.path,
                                successor,
                                next_lsn + 1,
                                max_record_bytes,
                            )?;
                        if intact_frame_after
                            && !ends_in_lost_sectors(disk, &segment.path, offset, successor)?
                        {
                            // Every byte of the frame reached the disk (no lost sector) and yet
                            // it fails its check while its successor passes: bytes changed after
                            // they were written. Dropping the tail here would silently discard
                            // intact, possibly acknowledged, records.
                            torn = false;
                            reason = format!(
                                "{reason}; an intact record follows it and no sector of the damaged \
                                 record was lost, so this is corruption, not a torn write"
                            );
                        }
                    }
                }
                (offset, reason, torn)
            }
        };
        let dropped = scan.file_bytes.saturating_sub(offset);
        if torn {
            tracing::warn!(segment = %segment.path.display(), offset, bytes_dropped = dropped, %reason,
                intact_frame_after, "log: dropping a torn tail at the end of the log");
            torn_tail = Some(TornTail {
                segment: segment.path.clone(),
                offset,
                bytes_dropped: dropped,
                intact_frame_after,
            });
        } else if repair {
            let deleted: Vec<PathBuf> = segments[index + 1..]
                .iter()
                .map(|s| s.path.clone())
                .collect();
            tracing::warn!(segment = %segment.path.display(), offset, bytes_dropped = dropped, %reason,
                segments_deleted = deleted.len(), "log: repair truncates the log at a corrupt record");
            repair_report = Some(Repair {
                segment: segment.path.clone(),
                offset,
                reason,
                bytes_dropped: dropped,
                segments_deleted: deleted.clone(),
            });
            // Newest first, so that a crash during repair leaves a dense prefix of segments.
            for path in deleted.iter().rev() {
                disk.remove_file(path)
                    .map_err(io_error(format!("deleting {}", path.display())))?;
            }
            sync_dir(disk, dir)?;
            segments.truncate(index + 1);
        } else {
            return Err(LogError::Corrupt {
                path: segment.path.clone(),
                offset,
                reason,
            });
        }
        if offset == 0 {
            reset_segment(disk, &segment.path, segment.first_lsn)?;
            last_segment_bytes = SEGMENT_HEADER_BYTES as u64;
        } else {
            truncate_file(disk, &segment.path, offset)?;
        }
        break;
    }
    debug_assert!(last_segment_bytes >= SEGMENT_HEADER_BYTES as u64);
    Ok(Recovered {
        segments,
        last_segment_bytes,
        next_lsn,
        records,
        torn_tail,
        repair: repair_report,
    })
}
