//! WAL file I/O: recovery scan, frame appends, frame reads, header (re)writes.
//!
//! Crash-safety argument for recovery: a frame counts only if its salts match the header and its
//! checksum continues the chain from the header through every earlier frame, and only frames up
//! to the last valid commit frame are replayed. A crash can leave a torn tail (chain breaks), or
//! frames of an older generation after a restart (salts differ): both end the scan. Because the
//! header of a new generation is written and fsynced before its first frame (see
//! `store::write_new_header`), an old header is never followed by new frames.

use crate::error::{io_error, Result};
use crate::format::{
    decode_frame, frame_offset, FrameDefect, WalHeader, FRAME_HEADER_BYTES, WAL_HEADER_BYTES,
};
use prefixkv_storage::DiskFile;
use std::collections::HashMap;
use std::path::Path;

/// What recovery found in the WAL, for the caller to log or check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Frames replayed (up to and including the last valid commit frame).
    pub frames_replayed: u64,
    /// Valid frames after the last commit frame (an unfinished transaction), ignored.
    pub uncommitted_frames_dropped: u64,
    /// Bytes of the WAL file after the replayed frames that were ignored.
    pub bytes_ignored: u64,
    /// Why the scan stopped before the end of the file, if it did (offset and defect).
    pub stopped_because: Option<String>,
}

/// The state rebuilt from a WAL file.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub header: Option<(WalHeader, u32)>,
    pub max_frame: u64,
    pub last_checksum: u32,
    pub db_size_pages: Option<u32>,
    pub index: HashMap<u32, Vec<u64>>,
    pub frame_pages: Vec<u32>,
    pub report: RecoveryReport,
}

/// Scans the WAL file and rebuilds the frame index, stopping at the first invalid frame.
pub(crate) fn recover(file: &dyn DiskFile, path: &Path, page_size_bytes: u32) -> Result<Recovered> {
    let length_bytes = file
        .len()
        .map_err(|e| io_error("reading the size of", path, e))?;
    let mut recovered = Recovered {
        header: None,
        max_frame: 0,
        last_checksum: 0,
        db_size_pages: None,
        index: HashMap::new(),
        frame_pages: Vec::new(),
        report: RecoveryReport::default(),
    };
    if length_bytes == 0 {
        return Ok(recovered);
    }
    let mut header_bytes = [0u8; WAL_HEADER_BYTES];
    let header = if length_bytes >= WAL_HEADER_BYTES as u64 {
        file.read_exact_at(&mut header_bytes, 0)
            .map_err(|e| io_error("reading the header of", path, e))?;
        WalHeader::decode(&header_bytes)
    } else {
        WalHeader::decode(&header_bytes[..length_bytes as usize])
    };
    let (header, header_checksum) = match header {
        Ok(decoded) => decoded,
        Err(defect) => {
            // A header that never became durable: its log generation has no durable frames
            // (the header is fsynced before the first frame), so the log is empty.
            recovered.report.bytes_ignored = length_bytes;
            recovered.report.stopped_because = Some(format!(
                "offset 0: WAL header invalid ({defect}); log treated as empty"
            ));
            return Ok(recovered);
        }
    };
    if header.page_size_bytes != page_size_bytes {
        return Err(crate::Error::Mismatch {
            path: path.to_path_buf(),
            message: format!(
                "the WAL was written with {}-byte pages but the store was opened with {page_size_bytes}-byte pages; \
                 reopen with page_size_bytes = {}",
                header.page_size_bytes, header.page_size_bytes
            ),
        });
    }
    recovered.header = Some((header, header_checksum));
    recovered.last_checksum = header_checksum;
    let frame_bytes = FRAME_HEADER_BYTES + page_size_bytes as usize;
    let mut buffer = vec![0u8; frame_bytes];
    let mut chain = header_checksum;
    let mut pending: Vec<(u32, u64)> = Vec::new();
    let mut frame_id = 1u64;
    loop {
        let offset = frame_offset(frame_id, page_size_bytes);
        if offset >= length_bytes {
            break;
        }
        if offset + frame_bytes as u64 > length_bytes {
            let defect = FrameDefect::Truncated {
                got: (length_bytes - offset) as usize,
                need: frame_bytes,
            };
            recovered.report.stopped_because =
                Some(format!("frame {frame_id} at offset {offset}: {defect}"));
            break;
        }
        file.read_exact_at(&mut buffer, offset).map_err(|e| {
            io_error(
                format!("reading frame {frame_id} (offset {offset}) of"),
                path,
                e,
            )
        })?;
        match decode_frame(&buffer, &header, chain) {
            Ok((frame, checksum)) => {
                chain = checksum;
                pending.push((frame.page_number, frame_id));
                if frame.commit_size_pages != 0 {
                    for (page, id) in pending.drain(..) {
                        recovered.index.entry(page).or_default().push(id);
                        recovered.frame_pages.push(page);
                    }
                    recovered.max_frame = frame_id;
                    recovered.last_checksum = checksum;
                    recovered.db_size_pages = Some(frame.commit_size_pages);
                }
            }
            Err(defect) => {
                recovered.report.stopped_because =
                    Some(format!("frame {frame_id} at offset {offset}: {defect}"));
                break;
            }
        }
        frame_id += 1;
    }
    recovered.report.frames_replayed = recovered.max_frame;
    recovered.report.uncommitted_frames_dropped = pending.len() as u64;
    let end_of_replayed = if recovered.max_frame == 0 {
        WAL_HEADER_BYTES as u64
    } else {
        frame_offset(recovered.max_frame + 1, page_size_bytes)
    };
    recovered.report.bytes_ignored = length_bytes.saturating_sub(end_of_replayed);
    debug_assert_eq!(recovered.frame_pages.len() as u64, recovered.max_frame);
    Ok(recovered)
}

/// Reads the page image of frame `frame_id` into `page` (exactly one page long).
pub(crate) fn read_frame_page(
    file: &dyn DiskFile,
    path: &Path,
    frame_id: u64,
    page: &mut [u8],
) -> Result<()> {
    let offset = frame_offset(frame_id, page.len() as u32) + FRAME_HEADER_BYTES as u64;
    file.read_exact_at(page, offset).map_err(|e| {
        io_error(
            format!("reading frame {frame_id} (offset {offset}) of"),
            path,
            e,
        )
    })
}
