//! Shared test helpers: small store configs, the client side of the testkit workloads (each
//! session's issued and acknowledged serials, recorded by the test, never read from the store),
//! and recovery checks through `prefixkv_testkit::oracle`.

#![allow(dead_code)]

pub mod tier;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use prefixkv_engine::{EngineError, Session, SessionId, Store, StoreConfig};
use prefixkv_testkit::oracle::{self, Op, PointBounds, WorkloadSpec};

#[allow(unused_imports)] // not every test binary that includes this module scales by env
pub use prefixkv_testkit::env_count;

pub fn small_config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = 1 << 12;
    config.log_memory_bytes = 8 << 20;
    config.log_page_bytes = 64 << 10;
    config.flusher_threads = 3;
    config
}

/// The engine tests' workload on `keys` keys: workers read 45 %, delete 10 %, upsert 45 %.
pub fn spec(keys: u64, seed: u64) -> WorkloadSpec {
    WorkloadSpec {
        keys,
        read_percent: 45,
        delete_percent: 10,
        cycle: 0,
        zipfian: false,
        seed,
    }
}

/// Runs operation `serial` of session `index` of `spec` on `session` (whose next serial it must
/// be). `value` is scratch space for reads.
pub fn apply(
    session: &mut Session,
    spec: &WorkloadSpec,
    index: u32,
    serial: u64,
    value: &mut Vec<u8>,
) -> Result<(), EngineError> {
    debug_assert_eq!(session.serial() + 1, serial, "ops run in serial order");
    match oracle::op_at(spec, index, serial) {
        Op::Read(key) => {
            session.read(&oracle::encode_key(key), value)?;
        }
        Op::Upsert(key) => {
            session.upsert(
                &oracle::encode_key(key),
                &oracle::encode_value(index, serial),
            )?;
        }
        Op::Delete(key) => {
            session.delete(&oracle::encode_key(key))?;
        }
    }
    Ok(())
}

/// Runs the loader (session index 0): upserts every key once.
pub fn load(store: &Arc<Store>, spec: &WorkloadSpec) -> Session {
    let mut loader = store.start_session();
    let mut scratch = Vec::new();
    for serial in 1..=spec.keys {
        apply(
            &mut loader,
            spec,
            oracle::LOADER_SESSION,
            serial,
            &mut scratch,
        )
        .unwrap();
    }
    loader.suspend();
    loader
}

/// Every (key, value) of keys `0..keys`, read through a fresh session.
pub fn read_image(store: &Arc<Store>, keys: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut reader = store.start_session();
    let mut image = Vec::new();
    let mut out = Vec::new();
    for key in 0..keys {
        let key = oracle::encode_key(key);
        if reader.read(&key, &mut out).unwrap() {
            image.push((key.to_vec(), out.clone()));
        }
    }
    image
}

/// Checks a recovered store: the CPR points it reports (mapped from session ids to the indices
/// their values encode by `indices`) against the client-side `bounds`, then its whole image
/// against the state those points name.
pub fn verify_recovered(
    store: &Arc<Store>,
    spec: &WorkloadSpec,
    indices: &BTreeMap<SessionId, u32>,
    bounds: &[PointBounds],
) -> Result<(), String> {
    let info = store
        .recovery_info()
        .ok_or("nothing was recovered although a checkpoint was published")?;
    let mut reported = Vec::new();
    for (id, point) in &info.session_commit_points {
        match indices.get(id) {
            Some(&index) => reported.push((index, *point)),
            None if *point == 0 => {}
            None => return Err(format!("recovered unknown session {id} at point {point}")),
        }
    }
    oracle::verify_recovery(spec, &reported, bounds, read_image(store, spec.keys))
        .map(|_| ())
        .map_err(|problem| format!("recovered v{}: {problem}", info.version))
}

/// Point bounds from two snapshots of client-side counters, indexed by session index:
/// `acknowledged` taken before the checkpoint was requested, `issued` taken after it was
/// recovered (or after the writer died).
pub fn bounds(acknowledged: &[u64], issued: &[u64]) -> Vec<PointBounds> {
    assert_eq!(acknowledged.len(), issued.len());
    acknowledged
        .iter()
        .zip(issued)
        .enumerate()
        .map(|(index, (&acknowledged, &issued))| PointBounds {
            session: index as u32,
            acknowledged_before_request: acknowledged,
            issued,
        })
        .collect()
}
