//! Verification of a `cpr` cell: the recovered (or live) image against what the bench's own
//! sessions were acknowledged, never against what the store reports about itself.
//!
//! The rule itself (values name a session and serial; each key holds a session's last upsert
//! within its CPR point) is shared with `ycsb` in [`crate::workload::stamp_rule`]; a `cpr` cell is
//! one run of worker sessions after the loader. This module adds what is `cpr`'s own: the
//! client-side bounds a recovered checkpoint's CPR points are held to
//! (`oracle::check_points`): between what each session had been acknowledged before the
//! checkpoint was requested, as the workers' own counters said, and what it issued.

use prefixkv_testkit::oracle::{self, PointBounds, LOADER_SESSION};

use super::measure::ClientRecord;
pub(super) use crate::workload::stamp_rule::{verify, History, ReadKey, RunLog};

/// The client-side bounds of every session's CPR point in the recovered checkpoint `version`:
/// the loader was acknowledged every key before any checkpoint; a worker was acknowledged at
/// least what its counter said when `version` was requested, and issued exactly its final serial.
pub(super) fn recovery_bounds(
    keys: u64,
    record: &ClientRecord,
    version: u64,
) -> std::result::Result<Vec<PointBounds>, String> {
    let acknowledged = record
        .acknowledged_at_request
        .get(&version)
        .ok_or_else(|| format!("recovered checkpoint v{version}, which was never requested"))?;
    let mut bounds = vec![PointBounds {
        session: LOADER_SESSION,
        acknowledged_before_request: keys,
        issued: keys,
    }];
    for &(session, issued) in &record.final_serials {
        let acknowledged_before_request = acknowledged
            .iter()
            .find(|(index, _)| *index == session)
            .map_or(0, |&(_, serial)| serial);
        bounds.push(PointBounds {
            session,
            acknowledged_before_request,
            issued,
        });
    }
    Ok(bounds)
}

/// [`verify`] with the reported points first checked against the client-side bounds.
pub(super) fn verify_recovery(
    history: &History<'_>,
    reported: &[(u32, u64)],
    bounds: &[PointBounds],
    read: &mut ReadKey<'_>,
) -> (bool, String) {
    match oracle::check_points(reported, bounds) {
        Err(problem) => (false, problem),
        Ok(points) => verify(history, &points, read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::cpr::cell::load_engine;
    use crate::workload::maps::{run_engine_chunk, PREFETCH_AHEAD};
    use crate::workload::operations::{encode_key, key, Cursor, Kind, OperationMix, Operations};
    use crate::workload::stamp_rule::engine_reader;
    use crate::workload::KeyDistribution;
    use prefixkv_engine::{Store, StoreConfig, Strategy};
    use std::collections::HashMap;
    use std::time::Duration;

    /// The bench's recovery check is not vacuous: on a real recovered checkpoint it passes, and it
    /// fails once one acknowledged record is removed, and once a client had been acknowledged more
    /// than the checkpoint's point holds.
    #[test]
    fn verify_recovery_catches_a_dropped_acknowledged_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(dir.path().to_path_buf());
        config.index_buckets = 1 << 10;
        config.log_memory_bytes = 64 << 20;
        let keys = 2_000;
        let mix = OperationMix {
            read_percent: 50,
            write: Kind::Upsert,
        };
        let operations = Operations::generate(mix, KeyDistribution::Uniform, keys, 5_000, 5);
        let cursor = Cursor::new(&operations);
        let mut indices = HashMap::new();
        let mut log = Vec::new();
        let mut worker_ops = 0;
        {
            let store = Store::open(config.clone()).unwrap();
            let mut loader = load_engine(&store, keys).unwrap();
            indices.insert(loader.id(), 0u32);
            let mut worker = store.start_session();
            indices.insert(worker.id(), 1u32);
            let mut value = Vec::new();
            for _ in 0..3 {
                // Three chunks: the third wraps around the 5,000 operations.
                let chunk = cursor.take(1, worker_ops + 1);
                run_engine_chunk(&mut worker, &mut value, &chunk, PREFETCH_AHEAD).unwrap();
                worker_ops += chunk.len();
                log.push(chunk.position);
            }
            loader.suspend();
            worker.suspend();
            let token = store.checkpoint(Strategy::Persian).unwrap();
            store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
        }
        let recovered = Store::open(config).unwrap();
        let reported: Vec<(u32, u64)> = recovered
            .recovery_info()
            .unwrap()
            .session_commit_points
            .iter()
            .map(|(id, point)| (indices[id], *point))
            .collect();
        let bounds = |worker_acknowledged| {
            vec![
                PointBounds {
                    session: 0,
                    acknowledged_before_request: keys,
                    issued: keys,
                },
                PointBounds {
                    session: 1,
                    acknowledged_before_request: worker_acknowledged,
                    issued: worker_ops + 1,
                },
            ]
        };
        let chunk_logs = [(1u32, log)];
        let history = History {
            keys,
            runs: vec![RunLog {
                operations: &operations,
                chunk_logs: &chunk_logs,
            }],
        };
        let mut reader = recovered.start_session();
        let mut read = engine_reader(&mut reader);
        let (ok, detail) = verify_recovery(&history, &reported, &bounds(worker_ops), &mut read);
        assert!(ok, "{detail}");
        let (ok, detail) = verify_recovery(&history, &reported, &bounds(worker_ops + 1), &mut read);
        assert!(!ok && detail.contains("acknowledged serial"), "{detail}");
        drop(read);
        reader.delete(&encode_key(key(7))).unwrap();
        let mut read = engine_reader(&mut reader);
        let (ok, detail) = verify_recovery(&history, &reported, &bounds(worker_ops), &mut read);
        assert!(!ok && detail.contains("missing key 7"), "{detail}");
    }
}
