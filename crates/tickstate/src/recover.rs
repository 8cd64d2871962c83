//! Recovery: the newest verified image, then the logical log after it.
//!
//! Logical log records (payloads of `prefixkv_storage::log` records), little-endian:
//!
//! | kind (u8) | then | meaning |
//! |---|---|---|
//! | 0 `ACTION` | tick u64, action bytes | an input of tick `tick` (the tick being computed) |
//! | 1 `POINT` | tick u64 | tick `tick` reached its point of consistency |
//! | 2 `ABORT` | tick u64 | discard the actions of `tick` logged so far (written on reopen) |
//!
//! A tick's actions are applied only once its `POINT` record is read: a crash in the middle of
//! a tick recovers the state at the previous point of consistency, never a half-applied tick.
//! On reopen after such a crash the orphaned actions are cancelled with an `ABORT` record, since
//! the application will compute that tick number again with other actions.
//!
//! Recovery reads (and the log's open repairs) through the storage layer's `Disk`: [`recover`]
//! on the real disk, [`recover_on`] on any (the simulated one in power-cut tests).

use crate::error::{Result, TickError};
use crate::image::{image_path, read_image, ImageCheck};
use prefixkv_storage::log::{Log, LogConfig};
use prefixkv_storage::{real_disk, Disk};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const RECORD_ACTION: u8 = 0;
pub(crate) const RECORD_POINT: u8 = 1;
pub(crate) const RECORD_ABORT: u8 = 2;

/// Encode a log record.
pub(crate) fn encode_record(kind: u8, tick: u64, action: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.push(kind);
    out.extend_from_slice(&tick.to_le_bytes());
    out.extend_from_slice(action);
}

/// The subdirectory of a tick-state directory that holds the logical log.
pub fn log_dir(dir: &Path) -> std::path::PathBuf {
    dir.join("log")
}

/// What recovery found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Tick of the image loaded, if any.
    pub image_tick: Option<u64>,
    /// Image slot (0 or 1) loaded, when the image came from the double-backup files.
    pub image_slot: Option<usize>,
    /// Whether the image came from the WAL-backed store (`image.pkvpages`).
    pub image_from_wal_store: bool,
    /// Why image files were skipped (torn or damaged), one line each.
    pub skipped_images: Vec<String>,
    /// Ticks replayed from the log.
    pub ticks_replayed: u64,
    /// Actions applied.
    pub actions_replayed: u64,
    /// Actions of an unfinished tick at the end of the log, not applied.
    pub actions_discarded: u64,
    /// Time to read and verify the image.
    pub image_load_time: Duration,
    /// Time to replay the log.
    pub replay_time: Duration,
}

/// Result of recovery with the log still open (for [`crate::TickState::open`]).
pub(crate) struct Recovered {
    pub(crate) cells: Vec<u64>,
    pub(crate) tick: u64,
    /// The double-backup slot holding the newest image and its marker LSN, if the image loaded
    /// came from the double-backup files.
    pub(crate) newest_image: Option<(usize, u64)>,
    /// Marker LSN of the image loaded (either store; 0 if none).
    pub(crate) newest_marker_lsn: u64,
    /// The WAL-backed store, if it exists (opened and recovered while reading it).
    pub(crate) wal_store: Option<prefixkv_pagestore::PageStore>,
    pub(crate) log: Option<Log>,
    pub(crate) report: RecoveryReport,
}

/// Recover the state of `words` cells kept in `dir`: load the newest image whose footer and
/// checksum verify (or all zeros at tick 0 if there is none), then apply the actions of every
/// later tick whose point of consistency is in the log, calling `apply(state, tick, action)` in
/// log order. Returns the state, the tick it is consistent at, and a report.
pub fn recover(
    dir: &Path,
    words: usize,
    apply: impl FnMut(&mut [u64], u64, &[u8]),
) -> Result<(Vec<u64>, u64, RecoveryReport)> {
    recover_on(&real_disk(), dir, words, apply)
}

/// [`recover`] on `disk`.
pub fn recover_on(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    words: usize,
    apply: impl FnMut(&mut [u64], u64, &[u8]),
) -> Result<(Vec<u64>, u64, RecoveryReport)> {
    let recovered = recover_inner(disk, dir, words, Some(LogConfig::default()), apply)?;
    if let Some(log) = recovered.log {
        log.close()?;
    }
    Ok((recovered.cells, recovered.tick, recovered.report))
}

pub(crate) fn recover_inner(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    words: usize,
    log_config: Option<LogConfig>,
    mut apply: impl FnMut(&mut [u64], u64, &[u8]),
) -> Result<Recovered> {
    let mut report = RecoveryReport::default();
    let started = Instant::now();
    let mut best: Option<(usize, crate::image::Footer, Vec<u64>)> = None;
    for slot in 0..2 {
        match read_image(&**disk, &image_path(dir, slot), words)? {
            ImageCheck::Missing => {}
            ImageCheck::Invalid(reason) => report.skipped_images.push(reason),
            ImageCheck::Valid { footer, cells } => {
                if best
                    .as_ref()
                    .is_none_or(|(_, best, _)| footer.tick > best.tick)
                {
                    best = Some((slot, footer, cells));
                }
            }
        }
    }
    // The WAL-backed store competes with the double-backup files: a directory may have been
    // written with either (or both, if the configuration changed); the newest tick wins.
    let (wal_check, wal_store) = crate::wal_store::open_and_read(disk, dir, words)?;
    let mut from_wal_store = false;
    match wal_check {
        ImageCheck::Missing => {}
        ImageCheck::Invalid(reason) => report.skipped_images.push(reason),
        ImageCheck::Valid { footer, cells } => {
            if best
                .as_ref()
                .is_none_or(|(_, best, _)| footer.tick > best.tick)
            {
                best = Some((usize::MAX, footer, cells));
                from_wal_store = true;
            }
        }
    }
    report.image_load_time = started.elapsed();
    let (mut cells, mut tick, from_lsn, newest_image, newest_marker_lsn) = match best {
        Some((slot, footer, cells)) => {
            report.image_tick = Some(footer.tick);
            report.image_from_wal_store = from_wal_store;
            let double_backup_slot = (!from_wal_store).then_some(slot);
            report.image_slot = double_backup_slot;
            (
                cells,
                footer.tick,
                footer.marker_lsn + 1,
                double_backup_slot.map(|slot| (slot, footer.marker_lsn)),
                footer.marker_lsn,
            )
        }
        None => (vec![0; words], 0, 1, None, 0),
    };
    let Some(log_config) = log_config else {
        return Ok(Recovered {
            cells,
            tick,
            newest_image,
            newest_marker_lsn,
            wal_store,
            log: None,
            report,
        });
    };
    let replay_started = Instant::now();
    let (log, _open_report) = Log::open_on(Arc::clone(disk), log_dir(dir), log_config)?;
    if newest_marker_lsn > 0 && log.oldest_lsn() > from_lsn && log.next_lsn() > log.oldest_lsn() {
        return Err(TickError::BadLogRecord {
            lsn: log.oldest_lsn(),
            reason: format!("the log starts after LSN {from_lsn}, which the newest image needs; records are missing"),
        });
    }
    let mut pending: Vec<Vec<u8>> = Vec::new();
    for record in log.replay(from_lsn.max(log.oldest_lsn()))? {
        let (lsn, payload) = record?;
        if payload.len() < 9 {
            return Err(TickError::BadLogRecord {
                lsn,
                reason: format!("{} bytes, shorter than a header", payload.len()),
            });
        }
        let record_tick = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
        let expected = tick + 1;
        match payload[0] {
            RECORD_ACTION | RECORD_POINT | RECORD_ABORT if record_tick != expected => {
                return Err(TickError::BadLogRecord {
                    lsn,
                    reason: format!(
                        "record for tick {record_tick} where tick {expected} was expected"
                    ),
                });
            }
            RECORD_ACTION => pending.push(payload[9..].to_vec()),
            RECORD_ABORT => pending.clear(),
            RECORD_POINT => {
                for action in pending.drain(..) {
                    apply(&mut cells, expected, &action);
                    report.actions_replayed += 1;
                }
                tick = expected;
                report.ticks_replayed += 1;
            }
            other => {
                return Err(TickError::BadLogRecord {
                    lsn,
                    reason: format!("unknown record kind {other}"),
                })
            }
        }
    }
    report.actions_discarded = pending.len() as u64;
    report.replay_time = replay_started.elapsed();
    if !pending.is_empty() {
        let mut record = Vec::new();
        encode_record(RECORD_ABORT, tick + 1, &[], &mut record);
        log.append(&record)?.wait()?;
    }
    Ok(Recovered {
        cells,
        tick,
        newest_image,
        newest_marker_lsn,
        wal_store,
        log: Some(log),
        report,
    })
}
