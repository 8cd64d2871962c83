//! Forgetting the pages from one page on: what a restart does with the pages a crashed run wrote
//! after the last state it recovers, so that the new run can write those page numbers again.
//!
//! Why it is needed: a page is written again only with at least as many valid bytes, and the
//! bytes below the previous write's valid bytes are kept as they are in the file (the module
//! invariant 2 of [`super`]). A new run that reuses page p after a crash must therefore not find
//! the crashed run's entry for p: its own, shorter write of p would be merged with the old bytes.
//!
//! How, durably: segments that start at or after the page are deleted (data, then sums, then a
//! directory sync, as [`PageFile::remove_before`] does); the segment that holds the page gets a
//! new sums file with only the newest entry of each page below it, written beside and renamed
//! over the old one (`durable::write_file_durably`: temp, fsync, rename, directory fsync). A cut
//! before the rename leaves the old sums file (the call is repeated by the next restart); after
//! it, the new one. Either way no entry of a kept page changes, and an entry of a page at or
//! after the discarded one survives only until the call completes. The data bytes of discarded
//! pages stay in the file until overwritten; nothing trusts them without an entry.

use super::format::{self, ENTRY_BYTES, SUMS_HEADER_BYTES};
use super::{PageFile, PageFileError, Result};
use crate::io::OpenMode;

impl PageFile {
    /// Forgets every page at or after `page` (durably; see the module docs) and returns how many
    /// pages lost their entry. Unsynced writes must not be pending: it is meant for a restart,
    /// before the file is written. A failure fails the page file.
    pub fn discard_from(&self, page: u64) -> Result<usize> {
        let mut inner = self.inner.lock();
        inner.check_alive()?;
        if inner
            .segments
            .values()
            .any(|segment| !segment.pending.is_empty())
        {
            return Err(PageFileError::Invalid(
                "discard_from with unsynced writes pending: sync first".into(),
            ));
        }
        let discarded = inner.latest.keys().filter(|p| **p >= page).count();
        if discarded == 0 {
            return Ok(0);
        }
        let per = u64::from(self.config.pages_per_segment);
        let doomed: Vec<u64> = inner
            .segments
            .keys()
            .copied()
            .filter(|first| *first >= page)
            .collect();
        let straddling = inner
            .segments
            .keys()
            .copied()
            .find(|first| *first < page && page < first.saturating_add(per));
        let result = (|| -> Result<()> {
            for first in &doomed {
                inner.segments.remove(first);
                for path in [self.data_path(*first), self.sums_path(*first)] {
                    self.disk.remove_file(&path).map_err(|e| {
                        PageFileError::io(format!("removing {}", path.display()), e)
                    })?;
                }
            }
            if !doomed.is_empty() {
                crate::durable::sync_dir(self.disk.as_ref(), &self.dir)
                    .map_err(|e| PageFileError::io("discarding segments", e))?;
            }
            let Some(first) = straddling else {
                return Ok(());
            };
            let mut kept: Vec<_> = inner
                .latest
                .values()
                .filter(|entry| entry.page >= first && entry.page < page)
                .copied()
                .collect();
            kept.sort_unstable_by_key(|entry| entry.page);
            let mut bytes = Vec::with_capacity(SUMS_HEADER_BYTES + kept.len() * ENTRY_BYTES);
            bytes.extend_from_slice(&format::encode_header(&self.header(first)));
            for entry in &kept {
                bytes.extend_from_slice(&format::encode_entry(entry));
            }
            let path = self.sums_path(first);
            crate::durable::write_file_durably(self.disk.as_ref(), &path, &bytes)
                .map_err(|e| PageFileError::io(format!("rewriting {}", path.display()), e))?;
            let sums = self
                .disk
                .open(&path, OpenMode::ReadWrite)
                .map_err(|e| PageFileError::io(format!("opening {}", path.display()), e))?;
            let segment = inner
                .segments
                .get_mut(&first)
                .expect("the straddling segment is open");
            segment.sums = sums;
            segment.sums_len = bytes.len() as u64;
            Ok(())
        })();
        inner.latest.retain(|p, _| *p < page);
        if let Err(error) = &result {
            inner.failed = Some(error.to_string());
        }
        result.map(|()| discarded)
    }
}
