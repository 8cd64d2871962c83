//! Replay: an iterator of `(lsn, payload)` from a starting LSN up to the records written when
//! the replay began.
//!
//! Invariant: the iterator never decodes a frame past the `through` LSN snapshot, so reading the
//! active segment while the I/O thread appends to it never sees a half-written frame. Every
//! frame is CRC-checked again; a bad one is an error naming the file and offset.

use super::error::{LogError, Result};
use super::format::{FrameReader, NextFrame, SEGMENT_HEADER_BYTES};
use super::recovery::SegmentMeta;
use crate::io::{Disk, FileReader, OpenMode};
use std::io::BufReader;
use std::sync::Arc;

/// Iterator over `(lsn, payload)` in LSN order; see [`super::Log::replay`].
pub struct Replay {
    disk: Arc<dyn Disk>,
    segments: Vec<SegmentMeta>,
    /// Index of the next segment to open.
    next_segment: usize,
    reader: Option<(FrameReader<BufReader<FileReader>>, usize)>,
    from_lsn: u64,
    through_lsn: u64,
    max_record_bytes: u32,
    finished: bool,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("from_lsn", &self.from_lsn)
            .field("through_lsn", &self.through_lsn)
            .finish()
    }
}

impl Replay {
    pub(crate) fn new(
        disk: Arc<dyn Disk>,
        segments: Vec<SegmentMeta>,
        from_lsn: u64,
        through_lsn: u64,
        max_record_bytes: u32,
    ) -> Result<Replay> {
        let from_lsn = from_lsn.max(1);
        let oldest = segments.first().map_or(1, |s| s.first_lsn);
        if from_lsn < oldest {
            return Err(LogError::Truncated {
                requested: from_lsn,
                oldest_retained: oldest,
            });
        }
        // Start at the last segment that begins at or before `from_lsn`.
        let next_segment = segments
            .iter()
            .rposition(|s| s.first_lsn <= from_lsn)
            .unwrap_or(0);
        Ok(Replay {
            disk,
            segments,
            next_segment,
            reader: None,
            from_lsn,
            through_lsn,
            max_record_bytes,
            finished: false,
        })
    }

    /// The last LSN this replay will return (the written LSN when it started).
    pub fn through_lsn(&self) -> u64 {
        self.through_lsn
    }

    fn open_next(&mut self, expected_lsn: Option<u64>) -> Result<bool> {
        let Some(segment) = self.segments.get(self.next_segment) else {
            return Ok(false);
        };
        if let Some(expected) = expected_lsn {
            if segment.first_lsn != expected {
                return Err(LogError::Corrupt {
                    path: segment.path.clone(),
                    offset: 0,
                    reason: format!(
                        "segment starts at LSN {} but LSN {expected} was expected",
                        segment.first_lsn
                    ),
                });
            }
        }
        let file = self.disk.open(&segment.path, OpenMode::Read).map_err(|e| {
            LogError::io(
                format!(
                    "opening log segment {} for replay (was it truncated meanwhile?)",
                    segment.path.display()
                ),
                e,
            )
        })?;
        let reader = FrameReader::new(
            BufReader::new(FileReader::new(file, SEGMENT_HEADER_BYTES as u64)),
            SEGMENT_HEADER_BYTES as u64,
            segment.first_lsn,
            self.max_record_bytes,
        );
        self.reader = Some((reader, self.next_segment));
        self.next_segment += 1;
        Ok(true)
    }

    fn step(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        loop {
            let Some((reader, index)) = self.reader.as_mut() else {
                if !self.open_next(None)? {
                    return Ok(None);
                }
                continue;
            };
            if reader.next_lsn() > self.through_lsn {
                return Ok(None);
            }
            let index = *index;
            let path = |segments: &[SegmentMeta]| segments[index].path.clone();
            let next = reader.next_frame().map_err(|e| {
                LogError::io(
                    format!("reading {}", self.segments[index].path.display()),
                    e,
                )
            })?;
            match next {
                NextFrame::Record { lsn } => {
                    if lsn >= self.from_lsn {
                        return Ok(Some((lsn, reader.take_payload())));
                    }
                }
                NextFrame::End => {
                    let expected = reader.next_lsn();
                    self.reader = None;
                    if !self.open_next(Some(expected))? {
                        return Err(LogError::Corrupt {
                            path: path(&self.segments),
                            offset: 0,
                            reason: format!("log ends before LSN {expected}, which was written"),
                        });
                    }
                }
                NextFrame::Bad { offset, error, .. } => {
                    return Err(LogError::Corrupt {
                        path: path(&self.segments),
                        offset,
                        reason: error.to_string(),
                    })
                }
            }
        }
    }
}

impl Iterator for Replay {
    type Item = Result<(u64, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        match self.step() {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => {
                self.finished = true;
                None
            }
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}
