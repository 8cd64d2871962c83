//! Startup recovery and checkpoints (periodic, SAVE, BGSAVE, BGREWRITEAOF, SHUTDOWN): the
//! server's configuration of `prefixkv-store`, which owns every durability rule (log order,
//! the checkpoint's covered log position, replay, truncation; `docs/store.md`). What remains
//! here is when to checkpoint and what INFO reports about it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use prefixkv_engine::StoreConfig;
use prefixkv_store::{DurableStore, Observers, Options, StoreError};

use crate::config::{Config, Durability};
use prefixkv_commands::keyspace::{self, Keyspace};

/// What the last checkpoint did.
#[derive(Clone, Debug, Default)]
pub struct CheckpointSummary {
    /// Engine version.
    pub version: u64,
    /// Duration in ms.
    pub duration_ms: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Records written.
    pub records: u64,
    /// Oplog LSN covered.
    pub covered_lsn: Option<u64>,
    /// Where its time went (the engine's measurement), for INFO.
    pub breakdown: prefixkv_engine::CheckpointBreakdown,
}

/// Checkpoint control shared by the periodic loop and the commands.
pub struct Persistence {
    /// The keyspace.
    pub keyspace: Arc<Keyspace>,
    /// Durability mode.
    pub durability: Durability,
    dir: PathBuf,
    run_lock: Mutex<()>,
    /// A BGSAVE/BGREWRITEAOF thread is running.
    pub background_running: AtomicBool,
    /// Unix seconds of the last successful checkpoint (startup time if none).
    pub last_save_unix: AtomicU64,
    /// Successful checkpoints since start.
    pub checkpoints_done: AtomicU64,
    /// The last checkpoint's figures.
    pub last_checkpoint: Mutex<Option<CheckpointSummary>>,
    /// The last checkpoint error, if the last attempt failed.
    pub last_error: Mutex<Option<String>>,
    /// What startup loaded, for INFO.
    pub loaded: Mutex<String>,
    shutdown: AtomicBool,
}

/// The engine's log page (`StoreConfig::log_page_bytes`): a record (a whole encoded value) must
/// fit one, so it bounds a value's size (docs/server.md, "Limits").
pub const LOG_PAGE_BYTES: usize = 4 << 20;
/// The smallest `engine-memory`: the engine's log needs at least 8 pages in its budget
/// (`StoreConfig::log_memory_bytes`, checked by `Store::open`).
pub const MIN_ENGINE_MEMORY_BYTES: u64 = 8 * LOG_PAGE_BYTES as u64;

fn store_options(config: &Config) -> Options {
    let mut options = Options::new(config.dir.clone(), config.settings.durability);
    options.engine = StoreConfig {
        log_memory_bytes: config.settings.engine_memory_bytes,
        index_buckets: config.engine_index_buckets as usize,
        log_page_bytes: LOG_PAGE_BYTES,
        checkpoint_write_bytes_per_s: (config.checkpoint_rate_bytes_per_s != 0)
            .then_some(config.checkpoint_rate_bytes_per_s),
        checkpoint_thread_nice: config.checkpoint_nice,
        checkpoint_thread_priority: config.checkpoint_priority,
        checkpoint_idle_floor_bytes_per_s: config.checkpoint_idle_floor_bytes_per_s,
        checkpoint_direct_io: config.checkpoint_direct_io,
        // `storage-tier`: the log's oldest pages go to a page file in `dir/log` at the budget,
        // so the data may exceed `engine-memory`.
        storage_tier: config.storage_tier,
        // Deletes and rewritten records (a cache's evictions, collections' buckets and tree
        // nodes) leave dead records that only compaction frees: compaction also runs on garbage
        // (`engine-compact-dead-fraction`; 0 turns that off), so the process stays near its data
        // (and with maxmemory near the limit, `prefixkv_commands::evict`). Never with the
        // storage tier: in-memory garbage compaction does not run on a tiered log yet (its old
        // pages are evicted to the page file instead) and the engine refuses the combination;
        // `Config::resolve` already refused an explicit non-zero fraction with the tier.
        compact_dead_fraction: (!config.storage_tier && config.engine_compact_dead_fraction > 0.0)
            .then_some(config.engine_compact_dead_fraction),
        // Keys loaded by recovery count as accessed at start (their words are not stored).
        access_stamp: {
            let clock = prefixkv_commands::evict::AccessClock::default();
            clock.configure(config.settings.eviction.policy.is_lfu(), 0, 0);
            clock.stamp(prefixkv_commands::keyspace::now_ms())
        },
        ..StoreConfig::new(config.dir.clone())
    };
    if config.storage_tier {
        // On a tiered log fold-over is the incremental checkpoint: it writes the pages not yet
        // in the page file and a copy of the index, where Persian would read every evicted key
        // back from the disk (docs/engine.md, "Incremental checkpoints").
        options.strategy = prefixkv_engine::Strategy::FoldOver;
    }
    options
}

/// Opens the store (checkpoint + oplog replay, counting keys as they load) and returns the
/// keyspace and a one-line report of what was loaded.
pub fn recover(config: &Config) -> anyhow::Result<(Keyspace, String)> {
    let failure: Mutex<Option<String>> = Mutex::new(None);
    // The keyspace needs the store, which recovery builds, so counts are gathered first.
    let counts = Keyspace::counting();
    let opened = DurableStore::open_observed(
        store_options(config),
        Observers {
            loaded: &|key, value| {
                if let Err(detail) = counts.count_loaded(key, value) {
                    failure.lock().get_or_insert(detail);
                }
            },
            replayed: &mut |key, value, existed| counts.count_replayed(key, value, existed),
            // An incremental checkpoint (storage tier) carries the counts in its cookie, so the
            // restart reads no record to count keys.
            cookie_suffices: Some(&|extra| match counts.restore(extra) {
                Ok(()) => true,
                Err(detail) => {
                    tracing::warn!("the checkpoint's cookie has no key counts ({detail}): counting keys by a scan");
                    false
                }
            }),
        },
    );
    let (store, recovered) = match opened {
        Ok(opened) => opened,
        Err(StoreError::Storage(detail)) => anyhow::bail!(
            "{detail}; another prefixkv-server is probably using {} (stop it or choose another --dir)",
            config.dir.display()
        ),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("recovering the store in {}", config.dir.display()))
        }
    };
    if let Some(detail) = failure.into_inner() {
        anyhow::bail!(
            "the checkpoint in {} holds a key the server cannot read: {detail}",
            config.dir.display()
        );
    }
    let keys: u64 = (0..keyspace::DATABASES as u8)
        .map(|db| counts.dbsize(db))
        .sum();
    let keyspace = counts.with_store(store);
    Ok((keyspace, format!("{recovered}; {keys} keys")))
}

impl Persistence {
    /// Wraps the recovered keyspace; every later checkpoint carries its key counts in its
    /// cookie ([`recover`] reads them back from an incremental one).
    pub fn new(keyspace: Arc<Keyspace>, config: &Config, loaded: String) -> Persistence {
        let weak = Arc::downgrade(&keyspace);
        keyspace.store.set_cookie_extra(Box::new(move || {
            weak.upgrade()
                .map(|keyspace| keyspace.cookie_counts())
                .unwrap_or_default()
        }));
        Persistence {
            keyspace,
            durability: config.settings.durability,
            dir: config.dir.clone(),
            run_lock: Mutex::new(()),
            background_running: AtomicBool::new(false),
            last_save_unix: AtomicU64::new(keyspace::now_ms() / 1000),
            checkpoints_done: AtomicU64::new(0),
            last_checkpoint: Mutex::new(None),
            last_error: Mutex::new(None),
            loaded: Mutex::new(loaded),
            shutdown: AtomicBool::new(false),
        }
    }

    /// Whether a checkpoint is running now.
    pub fn checkpoint_running(&self) -> bool {
        self.run_lock.is_locked()
    }

    /// Takes a checkpoint and waits for it (the store records the oplog position it covers and
    /// truncates the oplog behind the oldest checkpoint kept). Blocking: call from a plain
    /// thread or `spawn_blocking`.
    pub fn checkpoint_now(&self) -> Result<CheckpointSummary, String> {
        let _running = self.run_lock.lock();
        let result = self
            .keyspace
            .store
            .checkpoint()
            .map(|done| CheckpointSummary {
                version: done.report.version,
                duration_ms: done.report.duration.as_millis() as u64,
                bytes: done.report.bytes,
                records: done.report.records,
                covered_lsn: done.covered_lsn,
                breakdown: done.report.breakdown,
            })
            .map_err(|error| format!("checkpoint in {} failed: {error}", self.dir.display()));
        match &result {
            Ok(summary) => {
                *self.last_checkpoint.lock() = Some(summary.clone());
                *self.last_error.lock() = None;
                self.checkpoints_done.fetch_add(1, Ordering::Relaxed);
                self.last_save_unix
                    .store(keyspace::now_ms() / 1000, Ordering::Relaxed);
            }
            Err(error) => *self.last_error.lock() = Some(error.clone()),
        }
        result
    }

    /// Starts the periodic checkpoint thread (modes that checkpoint periodically): every
    /// interval, when writes happened since the last one.
    pub fn start_periodic(self: &Arc<Self>, interval_ms: u64) -> std::io::Result<()> {
        if !self.durability.checkpoints_periodically() {
            return Ok(());
        }
        let persistence = self.clone();
        std::thread::Builder::new()
            .name("prefixkv-checkpointer".into())
            .spawn(move || {
                let mut seen_writes = 0;
                while !persistence.shutdown.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(interval_ms));
                    let writes = persistence.keyspace.writes();
                    if writes == seen_writes {
                        continue;
                    }
                    seen_writes = writes;
                    if let Err(error) = persistence.checkpoint_now() {
                        tracing::error!("periodic {error}");
                    }
                }
            })?;
        Ok(())
    }

    /// Makes everything durable for SHUTDOWN: syncs the oplog; checkpoints when `save`.
    pub fn shutdown(&self, save: bool) -> Result<(), String> {
        self.shutdown.store(true, Ordering::Relaxed);
        self.keyspace
            .store
            .sync()
            .map_err(|e| format!("oplog sync failed: {e}"))?;
        if save {
            self.checkpoint_now()?;
        }
        Ok(())
    }

    /// Starts a background checkpoint thread (BGSAVE, BGREWRITEAOF) unless one runs; whether
    /// it started.
    pub fn start_background(self: &Arc<Self>) -> bool {
        if self.checkpoint_running() || self.background_running.swap(true, Ordering::SeqCst) {
            return false;
        }
        let worker = self.clone();
        let spawned = std::thread::Builder::new()
            .name("prefixkv-bgsave".into())
            .spawn(move || {
                if let Err(error) = worker.checkpoint_now() {
                    tracing::error!("background {error}");
                }
                worker.background_running.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.background_running.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Flags;

    fn engine_config(flags: Flags) -> StoreConfig {
        store_options(&Config::resolve(flags).unwrap()).engine
    }

    #[test]
    fn the_storage_tier_reaches_the_engine_without_garbage_compaction() {
        let tiered = engine_config(Flags {
            storage_tier: Some("yes".into()),
            maxmemory: Some("100mb".into()),
            ..Flags::default()
        });
        assert!(tiered.storage_tier);
        assert_eq!(tiered.compact_dead_fraction, None);
        let plain = engine_config(Flags::default());
        assert!(!plain.storage_tier);
        assert_eq!(
            plain.compact_dead_fraction,
            Some(crate::config::COMPACT_DEAD_FRACTION)
        );
    }
}
