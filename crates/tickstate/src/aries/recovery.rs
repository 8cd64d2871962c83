//! ARIES restart: load the pages, then analysis (from the last checkpoint's BEGIN: which
//! transactions were active, which pages may be stale and from which LSN), redo (repeat history
//! from the smallest recLSN, skipping what a page already holds by its page LSN), undo (roll the
//! losers back newest first, writing CLRs, then END), and a log sync.
//!
//! The records recovery needs are those from the smallest of the redo LSN, the losers' first LSNs
//! and the checkpoint's BEGIN; the page writer never truncates the log past them, and recovery
//! fails with an error naming the LSN if they are gone.

use super::files::{decode_page, log_path, read_master};
use super::record::{self, Record};
use super::{db_path, pages_of, CELLS_PER_PAGE, PAGE_BYTES};
use crate::error::{Result, TickError};
use prefixkv_storage::log::{Log, LogConfig};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// What ARIES recovery found and did.
#[derive(Debug, Clone, Default)]
pub struct AriesRecoveryReport {
    /// BEGIN LSN of the checkpoint analysis started from (0: none, the start of the log).
    pub checkpoint_lsn: u64,
    /// LSN redo started at (0: nothing to redo).
    pub redo_lsn: u64,
    /// Log records read.
    pub records_read: u64,
    /// Changes redone (records whose page did not hold them yet).
    pub records_redone: u64,
    /// Transactions rolled back (losers: active at the crash, not committed).
    pub losers: u64,
    /// UPDATE records undone (one CLR each).
    pub records_undone: u64,
    /// Time to read and verify the pages.
    pub load_time: Duration,
    /// Time for analysis, redo and undo.
    pub restart_time: Duration,
}

pub(super) struct Recovered {
    pub(super) cells: Vec<u64>,
    pub(super) page_lsn: Vec<u64>,
    /// Pages changed by redo or undo that the database file does not hold yet (page, recLSN).
    pub(super) dirty: Vec<(u32, u64)>,
    pub(super) log: Log,
    pub(super) next_txn: u64,
    pub(super) report: AriesRecoveryReport,
}

/// Recover the database of `cells` cells in `dir` and return its cells (the log is left with the
/// losers' CLRs and ENDs, durable).
pub fn recover(dir: &Path, cells: usize) -> Result<(Vec<u64>, AriesRecoveryReport)> {
    let recovered = recover_inner(dir, cells, LogConfig::default())?;
    recovered.log.close()?;
    Ok((recovered.cells, recovered.report))
}

fn bad_record(lsn: u64, reason: String) -> TickError {
    TickError::BadLogRecord { lsn, reason }
}

fn load_pages(dir: &Path, cells: usize) -> Result<(Vec<u64>, Vec<u64>)> {
    let pages = pages_of(cells);
    let path = db_path(dir);
    let file = std::fs::File::open(&path)?;
    let length = file.metadata()?.len();
    if length != (pages * PAGE_BYTES) as u64 {
        return Err(TickError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: {length} bytes, but a database of {cells} cells has {pages} pages of {PAGE_BYTES}",
                path.display()
            ),
        )));
    }
    let mut values = vec![0u64; pages * CELLS_PER_PAGE];
    let mut page_lsn = vec![0u64; pages];
    let mut buffer = vec![0u8; PAGE_BYTES * 64];
    for first in (0..pages).step_by(64) {
        let count = 64.min(pages - first);
        let bytes = &mut buffer[..count * PAGE_BYTES];
        file.read_exact_at(bytes, (first * PAGE_BYTES) as u64)?;
        for index in 0..count {
            let number = first + index;
            let page = &bytes[index * PAGE_BYTES..(index + 1) * PAGE_BYTES];
            let target = &mut values[number * CELLS_PER_PAGE..(number + 1) * CELLS_PER_PAGE];
            page_lsn[number] = decode_page(number as u32, page, target).map_err(|reason| {
                TickError::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: page {number} at offset {}: {reason}",
                        path.display(),
                        number * PAGE_BYTES
                    ),
                ))
            })?;
        }
    }
    values.truncate(cells);
    Ok((values, page_lsn))
}

/// The analysis pass's result.
#[derive(Default)]
struct Analysis {
    /// Losers so far: txn → (last LSN, first LSN).
    active: HashMap<u64, (u64, u64)>,
    finished: HashSet<u64>,
    /// page → recLSN.
    dirty: HashMap<u32, u64>,
    next_txn: u64,
}

impl Analysis {
    fn touch(&mut self, txn: u64, lsn: u64, page: u32) {
        // Every change after the checkpoint may be missing from its page: into the dirty page
        // table whoever made it.
        self.dirty.entry(page).or_insert(lsn);
        self.next_txn = self.next_txn.max(txn + 1);
        if !self.finished.contains(&txn) {
            let entry = self.active.entry(txn).or_insert((lsn, lsn));
            entry.0 = entry.0.max(lsn);
            entry.1 = entry.1.min(lsn);
        }
    }

    fn record(&mut self, lsn: u64, record: &Record, checkpoint: u64) {
        match record {
            Record::Update { txn, page, .. } | Record::Clr { txn, page, .. } => {
                self.touch(*txn, lsn, *page)
            }
            Record::Commit { txn } | Record::End { txn } => {
                self.active.remove(txn);
                self.finished.insert(*txn);
                self.next_txn = self.next_txn.max(txn + 1);
            }
            Record::BeginCheckpoint => {}
            Record::EndCheckpoint {
                begin,
                next_txn,
                active,
                dirty,
            } if *begin == checkpoint => {
                self.next_txn = self.next_txn.max(*next_txn);
                for &(txn, last, first) in active {
                    if !self.finished.contains(&txn) {
                        let entry = self.active.entry(txn).or_insert((last, first));
                        entry.0 = entry.0.max(last);
                        entry.1 = entry.1.min(first);
                    }
                }
                for &(page, rec_lsn) in dirty {
                    let entry = self.dirty.entry(page).or_insert(rec_lsn);
                    *entry = (*entry).min(rec_lsn);
                }
            }
            Record::EndCheckpoint { .. } => {}
        }
    }
}

pub(super) fn recover_inner(dir: &Path, cells: usize, log_config: LogConfig) -> Result<Recovered> {
    let (master_cells, checkpoint) = read_master(dir)?;
    if master_cells != cells as u64 {
        return Err(TickError::Usage(format!(
            "{}: the database has {master_cells} cells, not {cells}",
            dir.display()
        )));
    }
    let started = Instant::now();
    let (mut values, mut page_lsn) = load_pages(dir, cells)?;
    let mut report = AriesRecoveryReport {
        checkpoint_lsn: checkpoint,
        load_time: started.elapsed(),
        ..AriesRecoveryReport::default()
    };
    let started = Instant::now();
    let pages = pages_of(cells);
    let (log, _) = Log::open(log_path(dir), log_config)?;
    let start = checkpoint.max(1);
    if log.next_lsn() > log.oldest_lsn() && log.oldest_lsn() > start {
        return Err(bad_record(
            log.oldest_lsn(),
            format!("the log starts after LSN {start}, where analysis must start"),
        ));
    }
    // Analysis.
    let mut analysis = Analysis {
        next_txn: 1,
        ..Analysis::default()
    };
    for item in log.replay(start.max(log.oldest_lsn()))? {
        let (lsn, payload) = item?;
        let decoded = record::decode(&payload, pages).map_err(|reason| bad_record(lsn, reason))?;
        analysis.record(lsn, &decoded, checkpoint);
    }
    // Redo and undo need records from here on.
    let redo_lsn = analysis.dirty.values().copied().min();
    let from = analysis
        .active
        .values()
        .map(|(_, first)| *first)
        .chain(redo_lsn)
        .chain([start])
        .min()
        .expect("start is there");
    if log.next_lsn() > log.oldest_lsn() && log.oldest_lsn() > from {
        return Err(bad_record(
            log.oldest_lsn(),
            format!("the log starts after LSN {from}, which redo or undo needs"),
        ));
    }
    let mut records: BTreeMap<u64, Record> = BTreeMap::new();
    for item in log.replay(from.max(log.oldest_lsn()))? {
        let (lsn, payload) = item?;
        let decoded = record::decode(&payload, pages).map_err(|reason| bad_record(lsn, reason))?;
        if matches!(decoded, Record::Update { .. } | Record::Clr { .. }) {
            records.insert(lsn, decoded);
        }
        report.records_read += 1;
    }
    // Redo: repeat history.
    if let Some(redo_lsn) = redo_lsn {
        report.redo_lsn = redo_lsn;
        for (&lsn, record) in records.range(redo_lsn..) {
            let (page, slot, after): (u32, u16, Vec<u64>) = match record {
                Record::Update {
                    page, slot, images, ..
                } => (
                    *page,
                    *slot,
                    images.iter().map(|(_, after)| *after).collect(),
                ),
                Record::Clr {
                    page, slot, values, ..
                } => (*page, *slot, values.clone()),
                _ => unreachable!("only updates and CLRs are kept"),
            };
            let rec_lsn = analysis.dirty.get(&page).copied();
            if rec_lsn.is_none_or(|rec_lsn| lsn < rec_lsn) || page_lsn[page as usize] >= lsn {
                continue;
            }
            write_cells(&mut values, page, slot, &after)?;
            page_lsn[page as usize] = lsn;
            report.records_redone += 1;
        }
    }
    // Undo the losers, newest change first.
    let mut pending: BinaryHeap<(u64, u64)> = analysis
        .active
        .iter()
        .map(|(&txn, &(last, _))| (last, txn))
        .collect();
    let mut last_of: HashMap<u64, u64> = analysis
        .active
        .iter()
        .map(|(&txn, &(last, _))| (txn, last))
        .collect();
    report.losers = last_of.len() as u64;
    let mut buffer = Vec::new();
    while let Some((lsn, txn)) = pending.pop() {
        let record = records.get(&lsn).ok_or_else(|| {
            bad_record(
                lsn,
                format!("transaction {txn} needs it for undo, but it is not in the log"),
            )
        })?;
        let next = match record {
            Record::Update {
                txn: owner,
                prev,
                page,
                slot,
                images,
            } => {
                if *owner != txn {
                    return Err(bad_record(
                        lsn,
                        format!("belongs to transaction {owner}, not {txn}"),
                    ));
                }
                let befores: Vec<u64> = images.iter().map(|(before, _)| *before).collect();
                write_cells(&mut values, *page, *slot, &befores)?;
                record::encode_clr(
                    txn,
                    last_of[&txn],
                    *prev,
                    *page,
                    *slot,
                    &befores,
                    &mut buffer,
                );
                let clr = log.append(&buffer)?.lsn();
                page_lsn[*page as usize] = clr;
                analysis.dirty.entry(*page).or_insert(clr);
                last_of.insert(txn, clr);
                report.records_undone += 1;
                *prev
            }
            Record::Clr { undo_next, .. } => *undo_next,
            _ => unreachable!("only updates and CLRs are kept"),
        };
        if next == 0 {
            record::encode_finish(record::END, txn, last_of[&txn], &mut buffer);
            log.append(&buffer)?.lsn();
        } else {
            pending.push((next, txn));
        }
    }
    log.flush_and_sync()?;
    report.restart_time = started.elapsed();
    let mut dirty: Vec<(u32, u64)> = analysis.dirty.into_iter().collect();
    dirty.sort_unstable();
    Ok(Recovered {
        cells: values,
        page_lsn,
        dirty,
        log,
        next_txn: analysis.next_txn,
        report,
    })
}

fn write_cells(values: &mut [u64], page: u32, slot: u16, run: &[u64]) -> Result<()> {
    let start = page as usize * CELLS_PER_PAGE + slot as usize;
    let length = values.len();
    let target = values.get_mut(start..start + run.len()).ok_or_else(|| {
        TickError::Usage(format!(
            "a log record writes cells {start}..{} of a database of {length}",
            start + run.len()
        ))
    })?;
    target.copy_from_slice(run);
    Ok(())
}
