//! Recovery: loading the newest checkpoint that verifies into a fresh store, before any session
//! exists (single-threaded per key), and registering the sessions it records.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{RecoveryInfo, Store};
use crate::checkpoint_files::{EntryRef, ManifestKind};
use crate::cpr_points::SessionShared;
use crate::index::KeyHash;
use crate::log::{NewRecord, Record, FLAG_INVALID, FLAG_TOMBSTONE};
use crate::shared::{Located, Shared};
use crate::state::{InvalidVersions, Phase};
use crate::{EngineError, SessionId};

impl Shared {
    /// Applies one recovered entry (single-threaded per key; no sessions exist yet).
    pub(crate) fn apply_recovered(
        self: &Arc<Self>,
        entry: EntryRef<'_>,
        unique: bool,
        path_hint: &str,
    ) -> Result<(), EngineError> {
        let hash = KeyHash::of(entry.key);
        let out_of_memory = || EngineError::OutOfMemory {
            detail: format!(
                "checkpoint {path_hint} does not fit the log budget of {} bytes",
                self.config.log_memory_bytes
            ),
        };
        loop {
            let Located {
                entry: mut slot,
                record: existing,
                ..
            } = self.locate_or_create(hash, entry.key, InvalidVersions::NONE, false)?;
            let head = slot.address();
            if let Some(existing) = existing {
                if unique {
                    return Err(EngineError::Corrupt {
                        path: path_hint.into(),
                        offset: 0,
                        detail: format!(
                            "key {:?} appears twice in a key-unique checkpoint; the checkpoint is damaged",
                            String::from_utf8_lossy(entry.key)
                        ),
                    });
                }
                // A record below the read-only address may be on disk (a storage tier evicts
                // as recovery loads): write a newer record instead of changing it in place.
                let mutable = existing.address >= self.log.read_only_address();
                let mut guard = existing.lock();
                if entry.tombstone && mutable {
                    guard.set_tombstone(true);
                    guard.set_version(entry.record_version);
                    return Ok(());
                }
                if mutable && !entry.tombstone && guard.fits(entry.value.len()) {
                    guard.write_value(entry.value);
                    guard.set_tombstone(false);
                    guard.set_version(entry.record_version);
                    return Ok(());
                }
                drop(guard);
            } else if entry.tombstone {
                return Ok(());
            }
            let written = self.log.write_new(
                &NewRecord {
                    previous: head,
                    flags: if entry.tombstone { FLAG_TOMBSTONE } else { 0 },
                    version: entry.record_version,
                    key: entry.key,
                    value: if entry.tombstone { &[] } else { entry.value },
                    capacity_words: if entry.tombstone {
                        0
                    } else {
                        crate::log::words_for(entry.value.len())
                    },
                    access: self.access_stamp.load(Ordering::Relaxed),
                },
                true,
            );
            let address = match written {
                Ok(address) => address,
                Err(_) if self.log.is_tiered() => {
                    // Alone (one loading thread, no session, no eviction thread yet): evict a
                    // chunk ourselves and try again.
                    match crate::tier::evict_once(self, crate::tier::chunk_pages(self)) {
                        Ok(true) => continue,
                        Ok(false) => return Err(out_of_memory()),
                        Err(failure) => {
                            return Err(EngineError::OutOfMemory {
                                detail: format!(
                                    "recovery could not evict to the storage tier: {failure}"
                                ),
                            })
                        }
                    }
                }
                Err(_) => return Err(out_of_memory()),
            };
            if slot.compare_exchange(address).is_ok() {
                return Ok(());
            }
            self.log.record(address).set_flags(FLAG_INVALID);
        }
    }

    /// Calls `observe` for the newest live record of every key (single-threaded; recovery only,
    /// before any session exists).
    pub(super) fn observe_all(&self, observe: &(dyn Fn(&[u8], &[u8]) + Sync)) {
        let begin = self.log.begin_address();
        let mut heads = Vec::new();
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let buckets = self.index.bucket_count();
        let mut start = 0;
        while start < buckets {
            let end = (start + 4096).min(buckets);
            heads.clear();
            self.index
                .for_each_entry(start..end, |head| heads.push(head));
            // The previous chunk's records read from the storage tier (`log::cold`).
            crate::log::release_cold_copies();
            for &head in &heads {
                let mut settled: Vec<Record<'_>> = Vec::new();
                let mut address = head;
                while address >= begin && address != 0 {
                    let record = self.log.record(address);
                    address = record.previous();
                    if record.word0() & FLAG_INVALID != 0
                        || settled.iter().any(|other| other.same_key(&record))
                    {
                        continue;
                    }
                    settled.push(record);
                    if record.read_value(&mut value) {
                        key.clear();
                        record.copy_key(&mut key);
                        observe(&key, &value);
                    }
                }
            }
            start = end;
        }
    }
}

impl Store {
    pub(super) fn recover(
        shared: &Arc<Shared>,
        observe: Option<&super::Observer<'_>>,
        cookie_suffices: Option<&super::CookieSuffices<'_>>,
    ) -> Result<Option<RecoveryInfo>, EngineError> {
        let selected = shared.checkpoints.select_for_recovery()?;
        let incremental = selected
            .as_ref()
            .is_some_and(|verified| verified.manifest().content.kind == ManifestKind::Incremental);
        if shared.log.is_tiered() && !incremental {
            // The log is rebuilt in memory: no earlier page is needed.
            crate::tier::clear(shared)?;
        }
        let Some(verified) = selected else {
            return Ok(None);
        };
        let content = verified.manifest().content.clone();
        let version = content.version;
        let hint = format!("v{version}");
        let records = match content.kind {
            ManifestKind::Incremental => {
                if !shared.log.is_tiered() {
                    return Err(EngineError::InvalidArgument(format!(
                        "checkpoint v{version} in {} is incremental: its log is in a storage \
                         tier's page file; open the store with storage_tier on",
                        verified.dir().display()
                    )));
                }
                let records = crate::checkpoint::incremental::recover(shared, &verified)?;
                let suffices = cookie_suffices.is_some_and(|suffices| suffices(&content.cookie));
                if let (Some(observe), false) = (observe, suffices) {
                    crate::checkpoint::incremental::observe_by_scan(shared, observe);
                }
                records
            }
            ManifestKind::KeyUnique => {
                // With a storage tier one thread loads: it evicts as it goes, and eviction frees
                // pages that other loading threads (which hold no epoch protection) could be in.
                let threads = if shared.log.is_tiered() {
                    1
                } else {
                    shared.config.flusher_threads
                };
                verified.load_parallel(threads, &|entry| {
                    if entry.tombstone {
                        return Ok(());
                    }
                    shared.apply_recovered(entry, true, &hint)?;
                    if let Some(observe) = observe {
                        observe(entry.key, entry.value);
                    }
                    Ok(())
                })?
            }
            ManifestKind::LogOrdered | ManifestKind::LogDelta { .. } => {
                let records = verified.load_image_in_order(&mut |entry| {
                    shared.apply_recovered(entry, false, &hint)
                })?;
                if let Some(observe) = observe {
                    shared.observe_all(observe);
                }
                records
            }
        };
        if content.kind != ManifestKind::Incremental {
            // Alone: no session or background thread exists yet. (An incremental recovery set
            // the count from its checkpoint: a recount would read every record from the page
            // file.)
            let live = shared.recount_live_bytes(InvalidVersions::NONE);
            shared.live.set(shared.epoch.high_water(), live);
        }
        shared.state.store_phase(Phase::Rest, version + 1);
        shared.rollback.record_published(
            version,
            content
                .session_points
                .iter()
                .map(|(id, point)| (SessionId(*id), *point))
                .collect(),
        );
        let mut max_id = 0;
        let mut points = BTreeMap::new();
        {
            let mut sessions = shared.sessions.lock();
            for (id, point) in &content.session_points {
                max_id = max_id.max(*id);
                points.insert(SessionId(*id), *point);
                sessions.insert(
                    *id,
                    Arc::new(SessionShared::recovered(
                        SessionId(*id),
                        version + 1,
                        *point,
                    )),
                );
            }
        }
        shared
            .sessions
            .set_next_id(content.next_session_id.max(max_id + 1));
        Ok(Some(RecoveryInfo {
            version,
            session_commit_points: points,
            records,
            fell_back: verified.fell_back().map(str::to_string),
            cookie: content.cookie,
        }))
    }
}
