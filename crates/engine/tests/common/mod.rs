//! Shared test helpers: small store configs, a deterministic per-session workload and a
//! prefix-consistency verifier (a local stand-in for engine-files' `oracle`, same rules).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use prefixkv_engine::{Store, StoreConfig};

pub fn small_config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = 1 << 12;
    config.log_memory_bytes = 8 << 20;
    config.log_page_bytes = 64 << 10;
    config.flusher_threads = 3;
    config
}

/// Count from an environment variable, or `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read(u64),
    Upsert(u64),
    Delete(u64),
}

fn mix(mut value: u64) -> u64 {
    value ^= value >> 33;
    value = value.wrapping_mul(0xff51afd7ed558ccd);
    value ^= value >> 33;
    value = value.wrapping_mul(0xc4ceb9fe1a85ec53);
    value ^ (value >> 33)
}

/// Session 0 is the loader (`Upsert(n - 1)` for n in 1..=keys); workers 1.. read 45 %, upsert
/// 45 %, delete 10 %.
pub fn op_at(keys: u64, session_index: u32, serial: u64) -> Op {
    if session_index == 0 {
        return if serial <= keys {
            Op::Upsert(serial - 1)
        } else {
            Op::Read(0)
        };
    }
    let hash = mix(((session_index as u64) << 48) ^ serial);
    let key = hash % keys;
    match (hash >> 40) % 20 {
        0..=8 => Op::Read(key),
        9..=17 => Op::Upsert(key),
        _ => Op::Delete(key),
    }
}

pub fn encode_value(session_index: u32, serial: u64) -> [u8; 8] {
    (((session_index as u64) << 48) | serial).to_be_bytes()
}

pub fn decode_value(value: &[u8]) -> (u32, u64) {
    let word = u64::from_be_bytes(value.try_into().expect("8-byte value"));
    ((word >> 48) as u32, word & ((1 << 48) - 1))
}

/// Checks an image against the per-session prefixes `(session index, cpr point)`: every key's
/// state must be the last write (upsert or delete) of one session within its prefix; a present
/// value (s, n) must be s's last write of that key within s's prefix; a key no session wrote
/// within its prefix must be absent.
pub fn verify_image(
    keys: u64,
    sessions: &[(u32, u64)],
    image: &BTreeMap<u64, Vec<u8>>,
) -> Result<(), String> {
    // key -> session index -> (serial of last write within the prefix, was it a delete)
    let mut last: HashMap<u64, HashMap<u32, (u64, bool)>> = HashMap::new();
    let points: HashMap<u32, u64> = sessions.iter().copied().collect();
    for &(session, point) in sessions {
        for serial in 1..=point {
            match op_at(keys, session, serial) {
                Op::Upsert(key) => {
                    last.entry(key)
                        .or_default()
                        .insert(session, (serial, false));
                }
                Op::Delete(key) => {
                    last.entry(key).or_default().insert(session, (serial, true));
                }
                Op::Read(_) => {}
            }
        }
    }
    for (key, value) in image {
        let (session, serial) = decode_value(value);
        let point = *points
            .get(&session)
            .ok_or_else(|| format!("key {key}: value from unknown session {session}"))?;
        if serial > point {
            return Err(format!(
                "key {key}: value ({session}, {serial}) is after the CPR point {point}"
            ));
        }
        if op_at(keys, session, serial) != Op::Upsert(*key) {
            return Err(format!(
                "key {key}: session {session} op {serial} was not an upsert of it"
            ));
        }
        let (newest, _) = last[key][&session];
        if newest != serial {
            return Err(format!(
                "key {key}: session {session} wrote it again at {newest} (<= point {point}) but the image holds {serial}"
            ));
        }
    }
    for (key, writers) in &last {
        if !image.contains_key(key) && !writers.values().any(|(_, delete)| *delete) {
            return Err(format!(
                "key {key}: upserted within the prefixes, never deleted, but missing"
            ));
        }
    }
    Ok(())
}

/// Reads keys `0..keys` (8-byte big-endian) through a fresh session: the image `verify_image` checks.
#[allow(dead_code)] // not every test binary that includes this module reads images
pub fn read_image(store: &std::sync::Arc<Store>, keys: u64) -> BTreeMap<u64, Vec<u8>> {
    let mut reader = store.start_session();
    let mut image = BTreeMap::new();
    let mut out = Vec::new();
    for key in 0..keys {
        if reader.read(&key.to_be_bytes(), &mut out).unwrap() {
            image.insert(key, out.clone());
        }
    }
    image
}

/// Verifies a recovered store against the CPR points it reports: `indices` maps each recovered
/// session id to the index its writes encode, and `points` is the recovered commit point of each.
#[allow(dead_code)] // not every test binary that includes this module verifies recoveries
pub fn verify_recovered(
    store: &std::sync::Arc<Store>,
    keys: u64,
    indices: &BTreeMap<prefixkv_engine::SessionId, u32>,
    points: &BTreeMap<prefixkv_engine::SessionId, u64>,
) -> Result<(), String> {
    let sessions: Vec<(u32, u64)> = points
        .iter()
        .map(|(id, point)| (indices[id], *point))
        .collect();
    verify_image(keys, &sessions, &read_image(store, keys))
        .map_err(|problem| format!("{problem}; points {sessions:?}"))
}
