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
    /// Set by [`KeyCounts::restore`] when the checkpoint's keyspace had no key with an expiry
    /// as far as active expiry knew (its last sweep saw none and none was written since): then
    /// the first sweep need not run until one is (on a storage tier a sweep reads every record
    /// from the page file).
    no_expiry_known: AtomicBool,
}

/// Tag of [`KeyCounts::encode`]'s format: the tag, then for each database its keys and its
/// keys with an expiry (i64, little-endian), then the next collection object id (u64), then
/// whether a key with an expiry may exist that the counts do not show (one byte, 0 or 1).
const ENCODED_TAG: &[u8; 4] = b"KCN1";
/// Bytes of [`KeyCounts::encode`]'s output.
const ENCODED_BYTES: usize = 4 + DATABASES * 16 + 8 + 1;

impl KeyCounts {
    /// The counts and `next_object_id` as bytes (the server's part of a checkpoint's cookie,
    /// taken with no write transaction running: `DurableStore::set_cookie_extra`).
    pub(super) fn encode(&self, next_object_id: u64, ttl_written: bool) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(ENCODED_BYTES);
        bytes.extend_from_slice(ENCODED_TAG);
        for counts in &self.counts {
            bytes.extend_from_slice(&counts.keys.load(Ordering::Relaxed).to_le_bytes());
            bytes.extend_from_slice(&counts.expires.load(Ordering::Relaxed).to_le_bytes());
        }
        bytes.extend_from_slice(&next_object_id.to_le_bytes());
        bytes.push(u8::from(ttl_written));
        bytes
    }

    /// Takes the counts from [`KeyCounts::encode`]'s bytes instead of counting loaded keys
    /// (recovery of a checkpoint whose cookie has them); nothing changes if they are not such
    /// bytes (the error says why). Replayed operations are counted on top, as after loading.
    pub fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        if bytes.len() != ENCODED_BYTES || !bytes.starts_with(ENCODED_TAG) {
            return Err(format!(
                "{} bytes that are not key counts (want {ENCODED_BYTES}, tag {ENCODED_TAG:?})",
                bytes.len()
            ));
        }
        let word = |index: usize| {
            let at = 4 + index * 8;
            i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        if (0..2 * DATABASES).any(|index| word(index) < 0) {
            return Err("negative key counts".into());
        }
        let ttl_written = match bytes[ENCODED_BYTES - 1] {
            0 => false,
            1 => true,
            other => return Err(format!("a flag byte of {other}")),
        };
        for (database, counts) in self.counts.iter().enumerate() {
            counts.keys.store(word(2 * database), Ordering::Relaxed);
            counts
                .expires
                .store(word(2 * database + 1), Ordering::Relaxed);
        }
        let next_object_id = word(2 * DATABASES) as u64;
        self.highest_object_id
            .fetch_max(next_object_id.saturating_sub(1), Ordering::Relaxed);
        let expires: i64 = self
            .counts
            .iter()
            .map(|counts| counts.expires.load(Ordering::Relaxed))
            .sum();
        self.no_expiry_known
            .store(!ttl_written && expires == 0, Ordering::Relaxed);
        Ok(())
    }

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
        let no_expiry_known = self.no_expiry_known.load(Ordering::Relaxed);
        let next_object_id = AtomicU64::new(self.highest_object_id.load(Ordering::Relaxed) + 1);
        Keyspace {
            next_object_id,
            blocked: Default::default(),
            store,
            counts: self,
            sweeping_expires: Default::default(),
            expire_cursor: AtomicU64::new(0),
            expired_keys: AtomicU64::new(0),
            // Unknown after loading unless the checkpoint said none existed; a replayed write
            // with an expiry counts in `expires`, which starts a sweep too.
            ttl_written: AtomicBool::new(!no_expiry_known),
            notifier: Default::default(),
            watches: Watches::default(),
            access: Default::default(),
        }
    }
}
