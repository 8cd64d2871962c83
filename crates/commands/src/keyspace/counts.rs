//! Key counts per database, gathered while recovery loads and kept by the keyspace (the
//! invariants on `counts[db]` are the keyspace module's).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use prefixkv_store::DurableStore;

use super::{split_key, Keyspace, Watches, DATABASES};
use crate::value;

/// Per-database counts (see the module invariants).
#[derive(Default)]
pub(super) struct Counts {
    pub(super) keys: AtomicI64,
    pub(super) expires: AtomicI64,
}

/// Key counts per database, gathered while recovery loads (before the store exists) and kept
/// by the keyspace afterwards.
#[derive(Default)]
pub struct KeyCounts {
    pub(super) counts: [Counts; DATABASES],
    /// The highest object id of any collection record recovery met (ids are given out above it).
    highest_object_id: AtomicU64,
}

impl KeyCounts {
    /// Counts one key recovery loaded from the checkpoint (called from recovery threads).
    /// A key that is not the server's (another database byte, a damaged value) is an error.
    pub fn count_loaded(&self, engine_key: &[u8], encoded: &[u8]) -> Result<(), String> {
        if let Some(id) = prefixkv_collections::object_of(engine_key) {
            self.highest_object_id.fetch_max(id, Ordering::Relaxed);
            return Ok(());
        }
        if engine_key == crate::scripting::FUNCTIONS_KEY {
            // The function libraries (`crate::scripting`): not a user key, read at start.
            return Ok(());
        }
        let (database, _) = split_key(engine_key)
            .ok_or_else(|| format!("engine key {engine_key:02x?} is not in a database 0..15"))?;
        let (_, expire) = value::decode_header(encoded).map_err(|m| m.0.to_string())?;
        let counts = &self.counts[database as usize];
        counts.keys.fetch_add(1, Ordering::Relaxed);
        if expire != 0 {
            counts.expires.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Counts one operation recovery replayed from the oplog.
    pub fn count_replayed(&self, engine_key: &[u8], put: Option<&[u8]>, existed: bool) {
        if let Some(id) = prefixkv_collections::object_of(engine_key) {
            self.highest_object_id.fetch_max(id, Ordering::Relaxed);
            return;
        }
        if let Some((database, _)) = split_key(engine_key) {
            self.count_write(database, put.is_some(), existed);
            if put.is_some_and(|v| value::decode_header(v).is_ok_and(|(_, e)| e != 0)) {
                self.counts[database as usize]
                    .expires
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(super) fn count_write(&self, database: u8, present_after: bool, existed: bool) {
        let delta = i64::from(present_after) - i64::from(existed);
        if delta != 0 {
            self.counts[database as usize]
                .keys
                .fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Number of keys in `database` (including expired keys not yet removed, as Redis).
    pub fn dbsize(&self, database: u8) -> u64 {
        self.counts[database as usize]
            .keys
            .load(Ordering::Relaxed)
            .max(0) as u64
    }

    /// Keys with an expiry in `database` (see [`Keyspace::expires_count`]).
    pub(super) fn expires(&self, database: u8) -> u64 {
        self.counts[database as usize]
            .expires
            .load(Ordering::Relaxed)
            .max(0) as u64
    }

    /// The keyspace over the opened store, keeping these counts.
    pub fn with_store(self, store: Arc<DurableStore>) -> Keyspace {
        let next_object_id = AtomicU64::new(self.highest_object_id.load(Ordering::Relaxed) + 1);
        Keyspace {
            next_object_id,
            blocked: Default::default(),
            store,
            counts: self,
            sweeping_expires: Default::default(),
            expire_cursor: AtomicU64::new(0),
            expired_keys: AtomicU64::new(0),
            ttl_written: AtomicBool::new(true),
            notifier: Default::default(),
            watches: Watches::default(),
            access: Default::default(),
        }
    }
}
