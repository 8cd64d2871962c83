//! Incremental checkpoints of a store with a storage tier (`fold-over` on a tiered store): the
//! log's fold-over onto the page file plus a fuzzy copy of the index, and the recovery that opens
//! them without reading the dataset.
//!
//! # Writing checkpoint v (under the maintenance lock: no compaction moves records meanwhile)
//! 1. `replay_from` = the tail, then an epoch bump: every operation that allocated below it has
//!    finished, its index entry included. Then the index is copied while writers run
//!    (`index::checkpoint`: each entry word read once, so the copy is fuzzy); every change the
//!    copy may miss is made by a record at or above `replay_from`.
//! 2. `switch_at` = the tail; the CPR version switch to v+1 (as every strategy). No record of v+1
//!    lies below `switch_at`. `fold_over` = the tail once the switch ended: every record of v lies
//!    below it. The read-only address moves to `fold_over` and the epoch is bumped: no in-place
//!    writer is left below it, so the bytes below it are final (a v+1 writer copies, `must_copy`).
//! 3. The pages below `fold_over` that are not in the page file yet are written, the last one
//!    partly (its valid bytes end at `fold_over`), and the page file is synced (data, then
//!    checksums). Only what changed since the last eviction or checkpoint is written.
//! 4. The MANIFEST (kind `Incremental`, the addresses above, the index copy's length and CRC, the
//!    live-byte count, the crashed runs' holes still above the begin address) is published.
//!    From then on the page file keeps every segment from this checkpoint's begin page on while
//!    the checkpoint is retained (`DurableTier`).
//!
//! # Recovery from checkpoint v
//! 1. The page file must hold an entry for every page from the begin address's to the
//!    fold-over address's (the last one with at least the fold-over offset's valid bytes); if
//!    not, the checkpoint is refused as corrupt. Pages from the first one above the fold-over
//!    point on are discarded (`PageFile::discard_from`): the new run writes those page numbers.
//! 2. The index copy is loaded; the log resumes at that page with its head there: everything
//!    below is read from the page file on demand.
//! 3. Replay `[replay_from, switch_at)` in address order: each valid record's index entry moves
//!    up to it (newest wins). The copy plus this replay is the index of the moment `switch_at`
//!    was read, and every record there is of v or older.
//! 4. `[switch_at, fold_over)` mixes records of v (of sessions not yet switched) and v+1. Those of
//!    v (and older) are copied to the new tail, in address order, each linked to its key's entry
//!    (the recovery path `apply_recovered`), so that no index entry and no chain reachable from
//!    one ever enters `[switch_at, resume page)`; those of v+1 stay behind, unreachable. That
//!    range becomes a *hole* ([`LogHole`]): log scans (the `snapshot` strategy) skip its records
//!    of versions above v, and later incremental checkpoints carry it until compaction of the
//!    page file moves the begin address past it.
//!
//! Crash argument: before step 4 of writing publishes, the newest published checkpoint is an
//! older one, and nothing it depends on changed: pages below its fold-over point are never
//! rewritten with different bytes (the page file keeps the bytes below a page's trusted valid
//! bytes, its invariant 2), and compaction deletes no segment it needs. A cut during the page
//! flush leaves unsynced pages that no published checkpoint names. After the publish, the
//! checkpoint's pages are synced (step 3 ends before step 4 begins). A cut during recovery's
//! discard or replay leaves the files as a repeated recovery expects: the discard is idempotent
//! and the replay writes only memory.

use std::sync::Arc;
use std::time::Instant;

use super::{publish_image, session_points, switch_version, ImageWritten};
use crate::checkpoint_files::{
    LogHole, ManifestKind, TierImage, VerifiedCheckpoint, INDEX_FILE_NAME,
};
use crate::index::KeyHash;
use crate::log::{FLAG_INVALID, FLAG_STABLE, FLAG_TOMBSTONE};
use crate::report::{CheckpointBreakdown, CheckpointReport};
use crate::shared::{DurableTier, Shared};
use crate::state::Phase;
use crate::{EngineError, Strategy};

/// Writes incremental checkpoint `version` (see the module docs). The caller holds the
/// maintenance lock and publishes REST(v+1) afterwards, as for every strategy.
pub(crate) fn checkpoint(
    shared: &Arc<Shared>,
    version: u64,
    cookie: Vec<u8>,
    started: Instant,
) -> Result<CheckpointReport, EngineError> {
    // Whatever fails before the switch, the switch still runs: the caller's REST(v+1) must
    // follow the phases every session expects.
    let switch = || switch_version(shared, version, Phase::WaitFlush);
    let pending = match shared.checkpoints.begin(version) {
        Ok(pending) => pending,
        Err(error) => {
            switch();
            return Err(error);
        }
    };
    let image_started = Instant::now();
    // 1. Every record below `replay_from` is linked into the index once the bump returns.
    let replay_from = shared.log.tail_address();
    shared.bump_and_wait(None);
    let index_path = pending.path().join(INDEX_FILE_NAME);
    let index = match shared
        .index
        .write_checkpoint(&**shared.checkpoints.disk(), &index_path)
    {
        Ok(index) => index,
        Err(error) => {
            switch();
            return Err(error);
        }
    };
    let index_written = image_started.elapsed();
    // 2. The version switch, then the fold-over point.
    let switch_at = shared.log.tail_address();
    switch();
    let phases = started.elapsed();
    let fold_over = shared.log.tail_address();
    shared.log.shift_read_only(fold_over);
    shared.bump_and_wait(None);
    let points = session_points(shared, version);
    // 3. The pages below the fold-over point, on disk and synced.
    let pages_written = crate::tier::fold_over(shared, fold_over).map_err(|failure| {
        shared
            .log
            .page_file_error("write the log to the storage tier's page file in", failure)
    })?;
    // 4. Publish. Compaction is excluded (the maintenance lock): the begin address is stable.
    let begin = shared.log.begin_address();
    let holes = shared.durable_tier.lock().holes_from(begin);
    let tier = TierImage {
        begin,
        replay_from,
        switch_at,
        fold_over,
        index_bytes: index.bytes,
        index_crc: index.crc,
        live_bytes: shared.live.total(shared.epoch.high_water()),
        holes,
    };
    tracing::debug!(
        version,
        index_ms = index_written.as_secs_f64() * 1e3,
        flushed_from = replay_from,
        fold_over,
        "incremental checkpoint written"
    );
    let image = ImageWritten {
        pending,
        kind: ManifestKind::Incremental,
        segments: Vec::new(),
        breakdown: CheckpointBreakdown {
            index_scan: index_written,
            ..CheckpointBreakdown::default()
        },
        phases,
        image_started,
        tier: Some(tier),
        written_bytes: index.bytes + pages_written,
    };
    publish_image(
        shared,
        Strategy::FoldOver,
        version,
        image,
        points,
        cookie,
        started,
    )
}

/// Loads incremental checkpoint `verified` into a fresh store (no session, no background thread;
/// see the module docs). Returns the index entries loaded plus the records replayed and copied
/// (`RecoveryInfo::records`).
pub(crate) fn recover(
    shared: &Arc<Shared>,
    verified: &VerifiedCheckpoint,
) -> Result<u64, EngineError> {
    let version = verified.version();
    let tier = verified
        .manifest()
        .content
        .tier
        .clone()
        .expect("an incremental manifest has its tier image (checked when decoded)");
    let log = &shared.log;
    let page_bytes = log.page_bytes() as u64;
    let resume_page = tier.fold_over.div_ceil(page_bytes).max(1);
    check_pages(shared, version, &tier, resume_page)?;
    log.page_file().discard_from(resume_page).map_err(|error| {
        log.page_file_error("discard a crashed run's pages from the page file in", error)
    })?;
    let entries = shared.index.load_checkpoint_into(
        &**shared.checkpoints.disk(),
        &verified.dir().join(INDEX_FILE_NAME),
    )?;
    log.resume_at(tier.begin, resume_page);
    {
        let mut durable = shared.durable_tier.lock();
        let hole = LogHole {
            from: tier.switch_at,
            until: resume_page * page_bytes,
            above_version: version,
        };
        for hole in tier.holes.iter().chain(std::iter::once(&hole)) {
            durable.add_hole(*hole).map_err(|detail| {
                EngineError::corrupt(
                    verified.dir(),
                    0,
                    format!("checkpoint v{version}: {detail}"),
                )
            })?;
        }
        durable.retain(version, tier.begin / page_bytes);
    }
    let linked = replay_links(shared, &tier)?;
    let copied = copy_switch_records(shared, &tier, version, verified)?;
    shared.live.set(shared.epoch.high_water(), tier.live_bytes);
    tracing::info!(
        version,
        index_entries = entries,
        replayed = linked,
        copied,
        "recovered an incremental checkpoint"
    );
    Ok(entries + linked + copied)
}

/// Step 1's check: the page file holds every page the checkpoint points into.
fn check_pages(
    shared: &Shared,
    version: u64,
    tier: &TierImage,
    resume_page: u64,
) -> Result<(), EngineError> {
    let file = shared.log.page_file();
    let page_bytes = shared.log.page_bytes() as u64;
    for page in tier.begin / page_bytes..resume_page {
        let needed = (tier.fold_over - page * page_bytes).min(page_bytes);
        let held = file
            .entry(page)
            .map_or(0, |entry| u64::from(entry.valid_bytes));
        if held < needed {
            return Err(EngineError::corrupt(
                file.dir(),
                0,
                format!(
                    "incremental checkpoint v{version} needs {needed} bytes of log page {page} \
                     from the page file, which holds {held}: the page file was damaged or \
                     removed"
                ),
            ));
        }
    }
    Ok(())
}

/// Step 3: the index entries of the records in `[replay_from, switch_at)` move up to them.
fn replay_links(shared: &Arc<Shared>, tier: &TierImage) -> Result<u64, EngineError> {
    let holes = shared.durable_tier.lock().holes_from(0);
    let mut key = Vec::new();
    let mut linked = 0u64;
    let mut failure = None;
    shared.log.scan(tier.replay_from, tier.switch_at, |record| {
        if record.word0() & (FLAG_INVALID | FLAG_STABLE) != 0
            || DurableTier::is_dead(&holes, record.address, record.version())
        {
            return true;
        }
        key.clear();
        record.copy_key(&mut key);
        let mut slot = match shared.index.find_or_create(KeyHash::of(&key), tier.begin) {
            Ok(slot) => slot,
            Err(_) => {
                failure = Some(shared.index_full_error());
                return false;
            }
        };
        // Alone: no other thread changes the entry, but an entry only ever moves up.
        while slot.address() < record.address {
            if slot.compare_exchange(record.address).is_ok() {
                break;
            }
        }
        linked += 1;
        true
    });
    crate::log::release_cold_copies();
    match failure {
        Some(error) => Err(error),
        None => Ok(linked),
    }
}

/// Step 4: the records of the checkpoint's version and older in `[switch_at, fold_over)`,
/// copied to the new tail in address order.
fn copy_switch_records(
    shared: &Arc<Shared>,
    tier: &TierImage,
    version: u64,
    verified: &VerifiedCheckpoint,
) -> Result<u64, EngineError> {
    // Collected first (a scan holds page copies; applying writes and may evict): the range is
    // what the version switch wrote, small.
    let mut records: Vec<(bool, u64, Vec<u8>, Vec<u8>)> = Vec::new();
    shared.log.scan(tier.switch_at, tier.fold_over, |record| {
        let word0 = record.word0();
        if word0 & (FLAG_INVALID | FLAG_STABLE) != 0 || record.version() > version {
            return true;
        }
        let mut key = Vec::new();
        record.copy_key(&mut key);
        let mut value = Vec::new();
        let live = record.read_value(&mut value);
        debug_assert_eq!(live, word0 & FLAG_TOMBSTONE == 0);
        records.push((!live, record.version(), key, value));
        true
    });
    crate::log::release_cold_copies();
    let hint = format!("v{version} (incremental, {})", verified.dir().display());
    for (tombstone, record_version, key, value) in &records {
        shared.apply_recovered(
            crate::checkpoint_files::EntryRef {
                tombstone: *tombstone,
                record_version: *record_version,
                key,
                value,
            },
            false,
            &hint,
        )?;
        crate::log::release_cold_copies();
    }
    Ok(records.len() as u64)
}

/// `Store::open_observed` after an incremental recovery: calls `observe` with every live key's
/// newest value, reading the log in address order (whole pages, sequential) instead of walking
/// each key's chain (a random read per key from the page file). A record is its key's newest
/// when its index entry points at it (no read), or else when a walk from the entry finds no
/// newer record of its key before reaching it: the walk reads only the records above it in its
/// chain, mostly in memory (they are newer). Records the walk never reaches (a crashed run's, in
/// a hole) are not live. Alone, before any session exists.
pub(crate) fn observe_by_scan(shared: &Arc<Shared>, observe: &(dyn Fn(&[u8], &[u8]) + Sync)) {
    let log = &shared.log;
    let begin = log.begin_address();
    let (mut key, mut value) = (Vec::new(), Vec::new());
    log.scan(begin, log.tail_address(), |record| {
        if record.word0() & (FLAG_INVALID | FLAG_STABLE) != 0 || record.is_tombstone() {
            return true;
        }
        key.clear();
        record.copy_key(&mut key);
        let newest = shared.index.find(KeyHash::of(&key)).and_then(|entry| {
            let head = entry.address();
            if head == record.address {
                return Some(head);
            }
            shared
                .find_record(&key, head, begin, crate::state::InvalidVersions::NONE)
                .map(|found| found.address)
        });
        // The chain walk's copies of cold records are done with (`record` is the scan's).
        crate::log::release_cold_copies();
        if newest == Some(record.address) && record.read_value(&mut value) {
            observe(&key, &value);
        }
        true
    });
}
