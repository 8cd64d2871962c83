//! ARIES log records: the payloads of `prefixkv_storage::log` records, whose LSNs are the ARIES LSNs.
//!
//! Encoding (little-endian), kind u8 first:
//!
//! | kind | fields |
//! |---|---|
//! | 1 UPDATE | txn u64, prev LSN u64, page u32, slot u16, n u16, n × (before u64, after u64) |
//! | 2 CLR | txn u64, prev LSN u64, undo-next LSN u64, page u32, slot u16, n u16, n × value u64 |
//! | 3 COMMIT | txn u64, prev LSN u64 |
//! | 4 END | txn u64, prev LSN u64 (a rollback finished) |
//! | 5 BEGIN_CHECKPOINT | – |
//! | 6 END_CHECKPOINT | begin LSN u64, next txn u64, a u32, a × (txn u64, last LSN u64, first LSN u64), d u32, d × (page u32, recLSN u64) |
//!
//! UPDATE and CLR are physiological: they name one page and a run of cells (slots) in it. An
//! UPDATE carries before and after images (redo and undo); a CLR carries the values its undo wrote
//! (redo only) and the LSN to undo next. Decoding checks every length and every page and slot
//! against the database's size.

use super::CELLS_PER_PAGE;

pub(super) const UPDATE: u8 = 1;
pub(super) const CLR: u8 = 2;
pub(super) const COMMIT: u8 = 3;
pub(super) const END: u8 = 4;
pub(super) const BEGIN_CHECKPOINT: u8 = 5;
pub(super) const END_CHECKPOINT: u8 = 6;

/// A decoded log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Record {
    Update {
        txn: u64,
        prev: u64,
        page: u32,
        slot: u16,
        /// (before, after) per cell.
        images: Vec<(u64, u64)>,
    },
    Clr {
        txn: u64,
        prev: u64,
        undo_next: u64,
        page: u32,
        slot: u16,
        values: Vec<u64>,
    },
    Commit {
        txn: u64,
    },
    End {
        txn: u64,
    },
    BeginCheckpoint,
    EndCheckpoint {
        begin: u64,
        next_txn: u64,
        /// (txn, last LSN, first LSN) of the active transactions.
        active: Vec<(u64, u64, u64)>,
        /// (page, recLSN) of the dirty pages.
        dirty: Vec<(u32, u64)>,
    },
}

/// Encode an UPDATE of cells `slot..slot + afters.len()` of `page` into `out`.
pub(super) fn encode_update(
    txn: u64,
    prev: u64,
    page: u32,
    slot: u16,
    befores: &[u64],
    afters: &[u64],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.push(UPDATE);
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(&prev.to_le_bytes());
    out.extend_from_slice(&page.to_le_bytes());
    out.extend_from_slice(&slot.to_le_bytes());
    out.extend_from_slice(&(afters.len() as u16).to_le_bytes());
    for (before, after) in befores.iter().zip(afters) {
        out.extend_from_slice(&before.to_le_bytes());
        out.extend_from_slice(&after.to_le_bytes());
    }
}

/// Encode a CLR that wrote `values` into cells `slot..` of `page`.
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_clr(
    txn: u64,
    prev: u64,
    undo_next: u64,
    page: u32,
    slot: u16,
    values: &[u64],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.push(CLR);
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(&prev.to_le_bytes());
    out.extend_from_slice(&undo_next.to_le_bytes());
    out.extend_from_slice(&page.to_le_bytes());
    out.extend_from_slice(&slot.to_le_bytes());
    out.extend_from_slice(&(values.len() as u16).to_le_bytes());
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// Encode a COMMIT or END of `txn`.
pub(super) fn encode_finish(kind: u8, txn: u64, prev: u64, out: &mut Vec<u8>) {
    out.clear();
    out.push(kind);
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(&prev.to_le_bytes());
}

/// Encode an END_CHECKPOINT.
pub(super) fn encode_end_checkpoint(
    begin: u64,
    next_txn: u64,
    active: &[(u64, u64, u64)],
    dirty: &[(u32, u64)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(25 + active.len() * 24 + dirty.len() * 12);
    out.push(END_CHECKPOINT);
    out.extend_from_slice(&begin.to_le_bytes());
    out.extend_from_slice(&next_txn.to_le_bytes());
    out.extend_from_slice(&(active.len() as u32).to_le_bytes());
    for (txn, last, first) in active {
        out.extend_from_slice(&txn.to_le_bytes());
        out.extend_from_slice(&last.to_le_bytes());
        out.extend_from_slice(&first.to_le_bytes());
    }
    out.extend_from_slice(&(dirty.len() as u32).to_le_bytes());
    for (page, rec_lsn) in dirty {
        out.extend_from_slice(&page.to_le_bytes());
        out.extend_from_slice(&rec_lsn.to_le_bytes());
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let end = self.at + N;
        let bytes = self.bytes.get(self.at..end).ok_or_else(|| {
            format!(
                "record of {} bytes ends inside a field at offset {}",
                self.bytes.len(),
                self.at
            )
        })?;
        self.at = end;
        Ok(bytes.try_into().expect("N bytes"))
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    /// A count of items of `item_bytes` each that must fit in the rest of the record (so a
    /// damaged count cannot make us allocate more than the record's size).
    fn count(&mut self, wide: bool, item_bytes: usize) -> Result<usize, String> {
        let count = if wide {
            self.u32()? as usize
        } else {
            self.u16()? as usize
        };
        if count * item_bytes > self.bytes.len() - self.at {
            return Err(format!(
                "{count} items of {item_bytes} bytes but {} bytes left",
                self.bytes.len() - self.at
            ));
        }
        Ok(count)
    }
    fn page_and_slot(&mut self, pages: usize) -> Result<(u32, u16), String> {
        let page = self.u32()?;
        let slot = self.u16()?;
        if page as usize >= pages {
            return Err(format!("page {page} of {pages}"));
        }
        Ok((page, slot))
    }
}

fn check_run(slot: u16, count: usize) -> Result<(), String> {
    if count == 0 || slot as usize + count > CELLS_PER_PAGE {
        return Err(format!(
            "cells {slot}..{} outside a page of {CELLS_PER_PAGE}",
            slot as usize + count
        ));
    }
    Ok(())
}

/// Decode a record of a database of `pages` pages.
pub(super) fn decode(bytes: &[u8], pages: usize) -> Result<Record, String> {
    let (&kind, _) = bytes.split_first().ok_or("empty record")?;
    let mut reader = Reader { bytes, at: 1 };
    let record = match kind {
        UPDATE => {
            let txn = reader.u64()?;
            let prev = reader.u64()?;
            let (page, slot) = reader.page_and_slot(pages)?;
            let count = reader.count(false, 16)?;
            check_run(slot, count)?;
            let images = (0..count)
                .map(|_| Ok((reader.u64()?, reader.u64()?)))
                .collect::<Result<_, String>>()?;
            Record::Update {
                txn,
                prev,
                page,
                slot,
                images,
            }
        }
        CLR => {
            let txn = reader.u64()?;
            let prev = reader.u64()?;
            let undo_next = reader.u64()?;
            let (page, slot) = reader.page_and_slot(pages)?;
            let count = reader.count(false, 8)?;
            check_run(slot, count)?;
            let values = (0..count)
                .map(|_| reader.u64())
                .collect::<Result<_, String>>()?;
            Record::Clr {
                txn,
                prev,
                undo_next,
                page,
                slot,
                values,
            }
        }
        COMMIT | END => {
            let txn = reader.u64()?;
            let _prev = reader.u64()?;
            if kind == COMMIT {
                Record::Commit { txn }
            } else {
                Record::End { txn }
            }
        }
        BEGIN_CHECKPOINT => Record::BeginCheckpoint,
        END_CHECKPOINT => {
            let begin = reader.u64()?;
            let next_txn = reader.u64()?;
            let count = reader.count(true, 24)?;
            let active = (0..count)
                .map(|_| Ok((reader.u64()?, reader.u64()?, reader.u64()?)))
                .collect::<Result<_, String>>()?;
            let count = reader.count(true, 12)?;
            let dirty = (0..count)
                .map(|_| {
                    let page = reader.u32()?;
                    if page as usize >= pages {
                        return Err(format!("dirty page {page} of {pages}"));
                    }
                    Ok((page, reader.u64()?))
                })
                .collect::<Result<_, String>>()?;
            Record::EndCheckpoint {
                begin,
                next_txn,
                active,
                dirty,
            }
        }
        other => return Err(format!("unknown record kind {other}")),
    };
    if reader.at != bytes.len() {
        return Err(format!(
            "{} bytes after the record",
            bytes.len() - reader.at
        ));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_round_trip() {
        let mut out = Vec::new();
        encode_update(7, 3, 2, 508, &[1, 2], &[3, 4], &mut out);
        assert_eq!(
            decode(&out, 3),
            Ok(Record::Update {
                txn: 7,
                prev: 3,
                page: 2,
                slot: 508,
                images: vec![(1, 3), (2, 4)]
            })
        );
        encode_clr(7, 9, 3, 0, 1, &[5], &mut out);
        assert!(matches!(
            decode(&out, 1),
            Ok(Record::Clr { undo_next: 3, .. })
        ));
        encode_finish(COMMIT, 7, 9, &mut out);
        assert_eq!(decode(&out, 1), Ok(Record::Commit { txn: 7 }));
        let bytes = encode_end_checkpoint(10, 8, &[(7, 9, 2)], &[(0, 4)]);
        assert!(matches!(
            decode(&bytes, 1),
            Ok(Record::EndCheckpoint { begin: 10, .. })
        ));
        // A run past the page's end, a page past the database, a short record: refused.
        encode_update(7, 3, 2, 509, &[1, 2], &[3, 4], &mut out);
        assert!(decode(&out, 3).unwrap_err().contains("outside a page"));
        encode_update(7, 3, 3, 0, &[1], &[3], &mut out);
        assert!(decode(&out, 3).unwrap_err().contains("page 3 of 3"));
        assert!(decode(&out[..out.len() - 1], 4).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes, 10);
        }
    }
}
