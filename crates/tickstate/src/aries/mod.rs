//! An ARIES baseline (Mohan et al., 1992), the "gold standard" Cao et al. compare against in their
//! TPC-C experiment: a physiological redo/undo write-ahead log with LSNs, fuzzy checkpoints with a
//! dirty page table, and a three-pass recovery (analysis, redo, undo).
//!
//! The database is a vector of 64-bit cells, all in memory, divided into pages of
//! [`CELLS_PER_PAGE`] cells; one mutator runs transactions against it through [`Store`] (as the
//! TPC-C transactions of [`crate::tpcc`] do) while a page writer thread flushes dirty pages and
//! takes checkpoints, back to back ("as often as possible").
//!
//! Files in the database directory:
//! - `aries.db`: the pages, 4 096 bytes each at offset `page × 4096`: page LSN u64, page number
//!   u32, CRC32C u32 (of bytes 0..12 and 16..4096), then [`CELLS_PER_PAGE`] cells. Each page is
//!   written with one aligned 4 KiB `pwrite`, which a process kill cannot tear (the kernel copies
//!   a page-cache page at a time and checks for a fatal signal only between pages); a page torn
//!   by a power loss fails its CRC and recovery stops with an error naming it (there is no
//!   doublewrite buffer).
//! - `aries.master`: magic `PKVARIES`, version u32, CRC32C u32 (of bytes 16..32), cells u64, LSN
//!   of the last complete checkpoint's BEGIN record u64 (0: none yet). Replaced atomically
//!   (write a temporary file, fsync, rename, fsync the directory).
//! - `log/`: the log, a `prefixkv_storage::log::Log`; its LSNs are the ARIES LSNs (records: `record.rs`).
//!
//! Protocol and invariants:
//! - **Write-ahead logging.** The mutator changes a page only under the page's latch, and in the
//!   same critical section appends the UPDATE record and sets the page LSN to its LSN (and the
//!   page's recLSN, if the page was clean). The writer copies a page under its latch (so the copy
//!   and its page LSN agree), clears the recLSN there, and writes the copy only once the log is
//!   durable through the copy's page LSN.
//! - **Fuzzy checkpoints.** The mutator appends its records under the *log latch*, which also
//!   guards the active-transaction table; the writer appends BEGIN_CHECKPOINT and copies that
//!   table under the same latch, so every record before BEGIN is reflected in the copy and in the
//!   recLSNs, and every later one is seen by analysis, which starts at BEGIN. Then it scans the
//!   recLSNs (the dirty page table), appends END_CHECKPOINT with both tables, syncs the log and
//!   points the master record at BEGIN. Pages whose recLSN the writer cleared are durable before
//!   the next checkpoint's scan (it writes and syncs them first), so a checkpoint's dirty page
//!   table covers every page that is not durable.
//! - **Log truncation.** After a checkpoint, log segments wholly before the smallest of its
//!   recLSNs, its active transactions' first LSNs and its BEGIN are deleted.
//! - **Commit.** A transaction is committed when its COMMIT record is durable (group commit: the
//!   log's I/O thread syncs whatever is queued); [`Aries::take_commit_ticket`] hands the ticket of
//!   the newest COMMIT to the caller, who acknowledges in batches.
//! - **Rollback** (in normal processing and for recovery's losers) writes a CLR for every undone
//!   UPDATE, newest first, then END; CLRs are never undone (undo follows their undo-next LSN).

mod files;
mod record;
mod recovery;
mod writer;

pub use files::db_path;
use files::{encode_page, log_path, master_path, write_master};

pub use recovery::{recover, AriesRecoveryReport};

use crate::error::{Result, TickError};
use crate::region::Region;
use crate::sync::{AtomicU64, AtomicU8, Ordering};
use crate::tpcc::Store;
use prefixkv_storage::log::{AppendTicket, Log, LogConfig};
use record::{encode_clr, encode_finish, encode_update, COMMIT, END};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Bytes of a page on disk.
pub const PAGE_BYTES: usize = 4096;
/// Bytes of a page's header (page LSN, page number, CRC).
pub const PAGE_HEADER_BYTES: usize = 16;
/// Cells in a page.
pub const CELLS_PER_PAGE: usize = (PAGE_BYTES - PAGE_HEADER_BYTES) / 8;

const MASTER_MAGIC: [u8; 8] = *b"PKVARIES";
const MASTER_VERSION: u32 = 1;
const MASTER_BYTES: usize = 32;

/// Pages of a database of `cells` cells.
pub fn pages_of(cells: usize) -> usize {
    cells.div_ceil(CELLS_PER_PAGE).max(1)
}

/// How to open an ARIES database.
#[derive(Debug, Clone)]
pub struct AriesConfig {
    /// Cells of the database.
    pub cells: usize,
    /// The log's configuration (group commit with a sync per group by default).
    pub log: LogConfig,
    /// Pin the page writer to this CPU (the paper runs its writer on another core than the
    /// mutator).
    pub writer_cpu: Option<usize>,
}

impl AriesConfig {
    /// `cells` cells, the log's defaults, writer not pinned.
    pub fn new(cells: usize) -> AriesConfig {
        AriesConfig {
            cells,
            log: LogConfig::default(),
            writer_cpu: None,
        }
    }
}

/// Counters of an [`Aries`] database.
#[derive(Debug, Clone, Copy, Default)]
pub struct AriesStats {
    /// Log records the mutator appended (updates, CLRs, commits, ends).
    pub log_records: u64,
    /// Their payload bytes.
    pub log_bytes: u64,
    /// Checkpoints completed (master record written).
    pub checkpoints: u64,
    /// Pages written by the page writer.
    pub pages_flushed: u64,
    /// Times the mutator found a page latched by the writer.
    pub latch_waits: u64,
    /// Transactions committed and rolled back.
    pub commits: u64,
    /// Transactions rolled back.
    pub aborts: u64,
}

/// The active transaction, as the checkpoint sees it (guarded by the log latch).
#[derive(Debug, Clone, Copy)]
struct ActiveTxn {
    txn: u64,
    first_lsn: u64,
    last_lsn: u64,
}

/// State shared by the mutator and the page writer.
struct Shared {
    dir: PathBuf,
    cells: Region<AtomicU64>,
    page_lsn: Region<AtomicU64>,
    /// The dirty page table: the LSN that first dirtied each page since it was last copied for a
    /// flush (0: clean).
    rec_lsn: Region<AtomicU64>,
    latches: Region<AtomicU8>,
    log: Log,
    /// The log latch: held around every append that changes the active-transaction table, and
    /// by the checkpoint around BEGIN and its copy of that table.
    active: Mutex<Option<ActiveTxn>>,
    next_txn: AtomicU64,
    db: File,
    stop: AtomicBool,
    failure: Mutex<Option<String>>,
    checkpoints: AtomicU64,
    pages_flushed: AtomicU64,
    latch_waits: AtomicU64,
}

impl Shared {
    fn pages(&self) -> usize {
        self.page_lsn.cells().len()
    }

    #[inline]
    fn latch(&self, page: usize) -> bool {
        let latch = &self.latches.cells()[page];
        let mut waited = false;
        while latch
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            waited = true;
            std::hint::spin_loop();
        }
        waited
    }

    #[inline]
    fn unlatch(&self, page: usize) {
        self.latches.cells()[page].store(0, Ordering::Release);
    }
}

/// One undoable change of the running transaction: its UPDATE's LSN and prev LSN, where, and the
/// before images (in `Aries::befores`).
struct UndoEntry {
    lsn: u64,
    prev: u64,
    page: u32,
    slot: u16,
    befores: std::ops::Range<usize>,
}

/// An ARIES database: the mutator's handle (`Send`, one mutator: every change takes `&mut self`).
pub struct Aries {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    txn: Option<ActiveTxn>,
    undo: Vec<UndoEntry>,
    befores: Vec<u64>,
    record: Vec<u8>,
    scratch: Vec<u64>,
    commit_ticket: Option<AppendTicket>,
    log_records: u64,
    log_bytes: u64,
    commits: u64,
    aborts: u64,
}

impl Aries {
    /// Create a database in `dir` (which must hold none) with the cells `initial` (a bulk load: the
    /// pages are written and synced directly, unlogged, before the master record makes the
    /// database exist), then start the page writer.
    pub fn create(dir: impl AsRef<Path>, initial: &[u64], config: AriesConfig) -> Result<Aries> {
        let dir = dir.as_ref();
        if initial.len() != config.cells {
            return Err(TickError::Usage(format!(
                "Aries::create: {} initial cells for a database of {}",
                initial.len(),
                config.cells
            )));
        }
        std::fs::create_dir_all(dir)?;
        if master_path(dir).exists() {
            return Err(TickError::Usage(format!(
                "{}: an ARIES database exists already",
                dir.display()
            )));
        }
        let db = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(db_path(dir))?;
        let pages = pages_of(config.cells);
        let mut page = vec![0u8; PAGE_BYTES];
        for number in 0..pages {
            let start = number * CELLS_PER_PAGE;
            let end = (start + CELLS_PER_PAGE).min(initial.len());
            encode_page(number as u32, 0, &initial[start.min(end)..end], &mut page);
            db.write_all_at(&page, (number * PAGE_BYTES) as u64)?;
        }
        db.sync_all()?;
        prefixkv_storage::durable::sync_dir(&prefixkv_storage::RealDisk, dir)?;
        write_master(dir, config.cells, 0)?;
        let page_lsn = vec![0u64; pages];
        let (log, _) = Log::open(log_path(dir), config.log.clone())?;
        Aries::start(dir, initial, &page_lsn, &[], log, 1, db, &config)
    }

    /// Open the database in `dir`: recover it (analysis, redo, undo of the transactions that did
    /// not commit) and start the page writer.
    pub fn open(
        dir: impl AsRef<Path>,
        config: AriesConfig,
    ) -> Result<(Aries, AriesRecoveryReport)> {
        let dir = dir.as_ref();
        let recovered = recovery::recover_inner(dir, config.cells, config.log.clone())?;
        let db = OpenOptions::new()
            .read(true)
            .write(true)
            .open(db_path(dir))?;
        let aries = Aries::start(
            dir,
            &recovered.cells,
            &recovered.page_lsn,
            &recovered.dirty,
            recovered.log,
            recovered.next_txn,
            db,
            &config,
        )?;
        Ok((aries, recovered.report))
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        dir: &Path,
        cells: &[u64],
        page_lsn: &[u64],
        dirty: &[(u32, u64)],
        log: Log,
        next_txn: u64,
        db: File,
        config: &AriesConfig,
    ) -> Result<Aries> {
        let pages = pages_of(config.cells);
        let shared = Shared {
            dir: dir.to_path_buf(),
            cells: Region::new(config.cells, false)?,
            page_lsn: Region::new(pages, false)?,
            rec_lsn: Region::new(pages, false)?,
            latches: Region::new(pages, false)?,
            log,
            active: Mutex::new(None),
            next_txn: AtomicU64::new(next_txn),
            db,
            stop: AtomicBool::new(false),
            failure: Mutex::new(None),
            checkpoints: AtomicU64::new(0),
            pages_flushed: AtomicU64::new(0),
            latch_waits: AtomicU64::new(0),
        };
        for (cell, value) in shared.cells.cells().iter().zip(cells) {
            cell.store(*value, Ordering::Relaxed);
        }
        for (cell, value) in shared.page_lsn.cells().iter().zip(page_lsn) {
            cell.store(*value, Ordering::Relaxed);
        }
        for &(page, rec_lsn) in dirty {
            shared.rec_lsn.cells()[page as usize].store(rec_lsn, Ordering::Relaxed);
        }
        let shared = Arc::new(shared);
        let writer = {
            let shared = Arc::clone(&shared);
            let cpu = config.writer_cpu;
            std::thread::Builder::new()
                .name("aries-writer".into())
                .spawn(move || writer::run_writer(shared, cpu))?
        };
        Ok(Aries {
            shared,
            writer: Some(writer),
            txn: None,
            undo: Vec::new(),
            befores: Vec::new(),
            record: Vec::new(),
            scratch: Vec::new(),
            commit_ticket: None,
            log_records: 0,
            log_bytes: 0,
            commits: 0,
            aborts: 0,
        })
    }

    /// Cells of the database.
    pub fn cells(&self) -> usize {
        self.shared.cells.cells().len()
    }

    /// Cell `index`.
    #[inline]
    pub fn read(&self, index: usize) -> u64 {
        self.shared.cells.cells()[index].load(Ordering::Relaxed)
    }

    /// The ticket of the newest COMMIT since the last call (its durability acknowledges every
    /// transaction committed before it too: the log is written in LSN order).
    pub fn take_commit_ticket(&mut self) -> Option<AppendTicket> {
        self.commit_ticket.take()
    }

    /// Make every record appended so far durable.
    pub fn sync_log(&self) -> Result<()> {
        self.shared.log.flush_and_sync()?;
        Ok(())
    }

    /// Whether the page writer stopped on an error (then the error).
    pub fn writer_failure(&self) -> Option<String> {
        self.shared
            .failure
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// Counters.
    pub fn stats(&self) -> AriesStats {
        AriesStats {
            log_records: self.log_records,
            log_bytes: self.log_bytes,
            checkpoints: self.shared.checkpoints.load(Ordering::Relaxed),
            pages_flushed: self.shared.pages_flushed.load(Ordering::Relaxed),
            latch_waits: self.shared.latch_waits.load(Ordering::Relaxed),
            commits: self.commits,
            aborts: self.aborts,
        }
    }

    /// Stop the page writer (after the page it is writing), make the log durable and close it.
    /// No final checkpoint: the next open recovers from the last one, as after a crash.
    pub fn close(mut self) -> Result<()> {
        self.stop_writer();
        if let Some(failure) = self.writer_failure() {
            return Err(TickError::WriterFailed(failure));
        }
        self.shared.log.flush_and_sync()?;
        Ok(())
    }

    fn stop_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            self.shared.stop.store(true, Ordering::Release);
            writer.thread().unpark();
            if writer.join().is_err() {
                *self
                    .shared
                    .failure
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner()) =
                    Some("page writer thread panicked".into());
            }
        }
    }

    /// Append `self.record` for the running transaction under the log latch, running `then`
    /// (page LSN and recLSN updates) inside the latch. Returns the LSN.
    fn append_logged(&mut self, then: impl FnOnce(u64)) -> Result<u64> {
        let txn = self.txn.as_mut().expect("inside a transaction");
        let mut active = self
            .shared
            .active
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let ticket = self.shared.log.append(&self.record)?;
        let lsn = ticket.lsn();
        then(lsn);
        if txn.first_lsn == 0 {
            txn.first_lsn = lsn;
        }
        txn.last_lsn = lsn;
        *active = Some(*txn);
        drop(active);
        self.log_records += 1;
        self.log_bytes += self.record.len() as u64;
        Ok(lsn)
    }

    /// Change cells `slot..` of `page` to `values` under the page latch, logging an UPDATE (with
    /// `befores` = the old values) or a CLR.
    fn change_page(
        &mut self,
        page: usize,
        slot: usize,
        values: &[u64],
        clr_undo_next: Option<u64>,
    ) -> Result<u64> {
        let shared = Arc::clone(&self.shared);
        if shared.latch(page) {
            shared.latch_waits.fetch_add(1, Ordering::Relaxed);
        }
        let base = page * CELLS_PER_PAGE + slot;
        let cells = &shared.cells.cells()[base..base + values.len()];
        let txn = self.txn.expect("inside a transaction");
        match clr_undo_next {
            None => {
                self.scratch.clear();
                self.scratch
                    .extend(cells.iter().map(|cell| cell.load(Ordering::Relaxed)));
                encode_update(
                    txn.txn,
                    txn.last_lsn,
                    page as u32,
                    slot as u16,
                    &self.scratch,
                    values,
                    &mut self.record,
                );
            }
            Some(undo_next) => {
                encode_clr(
                    txn.txn,
                    txn.last_lsn,
                    undo_next,
                    page as u32,
                    slot as u16,
                    values,
                    &mut self.record,
                );
            }
        }
        let appended = self.append_logged(|lsn| {
            for (cell, value) in cells.iter().zip(values) {
                cell.store(*value, Ordering::Relaxed);
            }
            shared.page_lsn.cells()[page].store(lsn, Ordering::Relaxed);
            let rec_lsn = &shared.rec_lsn.cells()[page];
            if rec_lsn.load(Ordering::Relaxed) == 0 {
                rec_lsn.store(lsn, Ordering::Relaxed);
            }
        });
        shared.unlatch(page);
        appended
    }

    fn finish(&mut self, kind: u8) -> Result<()> {
        let txn = self.txn.expect("inside a transaction");
        encode_finish(kind, txn.txn, txn.last_lsn, &mut self.record);
        let mut active = self
            .shared
            .active
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let ticket = self.shared.log.append(&self.record)?;
        *active = None;
        drop(active);
        self.log_records += 1;
        self.log_bytes += self.record.len() as u64;
        if kind == COMMIT {
            self.commit_ticket = Some(ticket);
        }
        self.txn = None;
        self.undo.clear();
        self.befores.clear();
        Ok(())
    }

    fn try_set_row(&mut self, index: usize, values: &[u64]) -> Result<()> {
        let mut done = 0;
        while done < values.len() {
            let cell = index + done;
            let (page, slot) = (cell / CELLS_PER_PAGE, cell % CELLS_PER_PAGE);
            let run = (CELLS_PER_PAGE - slot).min(values.len() - done);
            let prev = self.txn.expect("inside a transaction").last_lsn;
            let lsn = self.change_page(page, slot, &values[done..done + run], None)?;
            let start = self.befores.len();
            self.befores.extend_from_slice(&self.scratch);
            self.undo.push(UndoEntry {
                lsn,
                prev,
                page: page as u32,
                slot: slot as u16,
                befores: start..self.befores.len(),
            });
            done += run;
        }
        Ok(())
    }

    fn try_abort(&mut self) -> Result<()> {
        while let Some(entry) = self.undo.pop() {
            let befores: Vec<u64> = self.befores[entry.befores.clone()].to_vec();
            debug_assert!(entry.lsn > entry.prev);
            self.change_page(
                entry.page as usize,
                entry.slot as usize,
                &befores,
                Some(entry.prev),
            )?;
        }
        self.aborts += 1;
        self.finish(END)
    }
}

/// A failed log append or a stopped writer inside a transaction is not recoverable in place: the
/// mutator stops (the database recovers on the next open).
fn fatal(error: TickError) -> ! {
    panic!("ARIES: {error}; reopen the database to recover")
}

impl Store for Aries {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self.read(index)
    }

    fn set_row(&mut self, index: usize, values: &[u64]) {
        self.try_set_row(index, values)
            .unwrap_or_else(|error| fatal(error));
    }

    fn begin(&mut self) {
        assert!(self.txn.is_none(), "begin inside a transaction");
        let txn = self.shared.next_txn.fetch_add(1, Ordering::Relaxed);
        self.txn = Some(ActiveTxn {
            txn,
            first_lsn: 0,
            last_lsn: 0,
        });
    }

    fn commit(&mut self) {
        let txn = self.txn.expect("commit outside a transaction");
        if txn.first_lsn == 0 {
            // Read-only: nothing to log.
            self.txn = None;
        } else {
            self.finish(COMMIT).unwrap_or_else(|error| fatal(error));
        }
        self.commits += 1;
    }

    fn abort(&mut self) {
        let txn = self.txn.expect("abort outside a transaction");
        if txn.first_lsn == 0 {
            self.txn = None;
            self.aborts += 1;
            return;
        }
        self.try_abort().unwrap_or_else(|error| fatal(error));
    }
}

impl Drop for Aries {
    fn drop(&mut self) {
        self.stop_writer();
    }
}
