//! The page writer thread: flush every dirty page (write-ahead rule first), sync, take a fuzzy
//! checkpoint, truncate the log; again, as often as possible, until stopped.

use super::files::{encode_page, write_master};
use super::{record, Shared, CELLS_PER_PAGE, PAGE_BYTES};
use crate::error::Result;
use crate::sync::Ordering;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

/// Pages the writer copies before one log sync and their writes (1 MiB).
const FLUSH_BATCH_PAGES: usize = 256;

/// The page writer: flush the dirty pages, then take a fuzzy checkpoint; again, until stopped.
pub(super) fn run_writer(shared: Arc<Shared>, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        if let Err(error) = crate::pin_current_thread(cpu) {
            eprintln!("aries: could not pin the page writer to CPU {cpu}: {error}");
        }
    }
    let mut batch = FlushBatch {
        bytes: vec![0u8; FLUSH_BATCH_PAGES * PAGE_BYTES],
        pages: Vec::with_capacity(FLUSH_BATCH_PAGES),
        cells: vec![0u64; CELLS_PER_PAGE],
    };
    let mut last_checkpoint_next_lsn = 0;
    while !shared.stop.load(Ordering::Acquire) {
        let result = flush_dirty_pages(&shared, &mut batch).and_then(|flushed| {
            // Nothing new since the last checkpoint: rest a moment instead of syncing an
            // unchanged state over and over.
            let next_lsn = shared.log.next_lsn();
            if flushed == 0 && next_lsn == last_checkpoint_next_lsn {
                std::thread::park_timeout(Duration::from_millis(1));
                return Ok(());
            }
            checkpoint(&shared)?;
            last_checkpoint_next_lsn = shared.log.next_lsn();
            Ok(())
        });
        if let Err(error) = result {
            *shared
                .failure
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = Some(error.to_string());
            return;
        }
    }
}

/// Page copies waiting for one log sync: encoded pages back to back, and their numbers.
struct FlushBatch {
    bytes: Vec<u8>,
    pages: Vec<usize>,
    cells: Vec<u64>,
}

/// Write every dirty page, then sync the database file. Returns the pages written. Pages are
/// copied (under their latches) in batches; one log sync through the newest page LSN of a batch
/// precedes its writes (the write-ahead rule, at one sync per batch instead of one per page).
fn flush_dirty_pages(shared: &Shared, batch: &mut FlushBatch) -> Result<u64> {
    let mut flushed = 0;
    let mut newest_lsn = 0;
    batch.pages.clear();
    for number in 0..shared.pages() {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if shared.rec_lsn.cells()[number].load(Ordering::Relaxed) == 0 {
            continue;
        }
        let start = number * CELLS_PER_PAGE;
        let end = (start + CELLS_PER_PAGE).min(shared.cells.cells().len());
        shared.latch(number);
        for (to, from) in batch
            .cells
            .iter_mut()
            .zip(&shared.cells.cells()[start..end])
        {
            *to = from.load(Ordering::Relaxed);
        }
        let lsn = shared.page_lsn.cells()[number].load(Ordering::Relaxed);
        shared.rec_lsn.cells()[number].store(0, Ordering::Relaxed);
        shared.unlatch(number);
        let slot = batch.pages.len();
        encode_page(
            number as u32,
            lsn,
            &batch.cells[..end - start],
            &mut batch.bytes[slot * PAGE_BYTES..(slot + 1) * PAGE_BYTES],
        );
        batch.pages.push(number);
        newest_lsn = newest_lsn.max(lsn);
        if batch.pages.len() == FLUSH_BATCH_PAGES {
            flushed += write_batch(shared, batch, newest_lsn)?;
            newest_lsn = 0;
        }
    }
    flushed += write_batch(shared, batch, newest_lsn)?;
    if flushed > 0 {
        shared.db.sync_data()?;
        shared.pages_flushed.fetch_add(flushed, Ordering::Relaxed);
    }
    Ok(flushed)
}

/// The write-ahead rule for the batch (log durable through its newest page LSN), then its
/// writes, one aligned 4 KiB `pwrite` per page.
fn write_batch(shared: &Shared, batch: &mut FlushBatch, newest_lsn: u64) -> Result<u64> {
    if batch.pages.is_empty() {
        return Ok(0);
    }
    if shared.log.durable_lsn() < newest_lsn {
        shared.log.flush_and_sync()?;
    }
    for (slot, number) in batch.pages.iter().enumerate() {
        shared.db.write_all_at(
            &batch.bytes[slot * PAGE_BYTES..(slot + 1) * PAGE_BYTES],
            (number * PAGE_BYTES) as u64,
        )?;
    }
    let written = batch.pages.len() as u64;
    batch.pages.clear();
    Ok(written)
}

/// A fuzzy checkpoint: BEGIN and the active-transaction table under the log latch, then the dirty
/// page table, END, log sync, master record, log truncation.
fn checkpoint(shared: &Shared) -> Result<()> {
    let (begin, active) = {
        let active = shared
            .active
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let begin = shared.log.append(&[record::BEGIN_CHECKPOINT])?.lsn();
        (begin, *active)
    };
    let next_txn = shared.next_txn.load(Ordering::Relaxed);
    let active: Vec<(u64, u64, u64)> = active
        .filter(|txn| txn.first_lsn != 0)
        .map(|txn| (txn.txn, txn.last_lsn, txn.first_lsn))
        .into_iter()
        .collect();
    let dirty: Vec<(u32, u64)> = shared
        .rec_lsn
        .cells()
        .iter()
        .enumerate()
        .filter_map(|(page, lsn)| {
            let lsn = lsn.load(Ordering::Relaxed);
            (lsn != 0).then_some((page as u32, lsn))
        })
        .collect();
    let end = record::encode_end_checkpoint(begin, next_txn, &active, &dirty);
    shared.log.append(&end)?.lsn();
    shared.log.flush_and_sync()?;
    write_master(&shared.dir, shared.cells.cells().len(), begin)?;
    shared.checkpoints.fetch_add(1, Ordering::Relaxed);
    let keep_from = dirty
        .iter()
        .map(|(_, lsn)| *lsn)
        .chain(active.iter().map(|(_, _, first)| *first))
        .chain([begin])
        .min()
        .expect("begin is there");
    shared.log.truncate_through(keep_from - 1)?;
    Ok(())
}
