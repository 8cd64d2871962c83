//! Verification of a `cpr` cell: the recovered checkpoint against what the bench's own
//! sessions were acknowledged (see `prefixkv_testkit::oracle`), never against what the store
//! reports about itself.

use super::Measured;
use anyhow::Result;
use prefixkv_testkit::oracle::{self, PointBounds, WorkloadSpec};

/// The client-side bounds of every session's CPR point in the recovered checkpoint `version`:
/// the loader was acknowledged every key before any checkpoint; a worker was acknowledged at
/// least what its counter said when `version` was requested, and issued exactly its final serial.
pub(super) fn recovery_bounds(
    spec: &WorkloadSpec,
    measured: &Measured,
    version: u64,
) -> std::result::Result<Vec<PointBounds>, String> {
    let acknowledged = measured
        .acknowledged_at_request
        .get(&version)
        .ok_or_else(|| format!("recovered checkpoint v{version}, which was never requested"))?;
    let mut bounds = vec![PointBounds {
        session: oracle::LOADER_SESSION,
        acknowledged_before_request: spec.keys,
        issued: spec.keys,
    }];
    for &(session, issued) in &measured.final_serials {
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

/// [`verify`] with the points first checked against the client-side bounds.
pub(super) fn verify_recovery(
    spec: &WorkloadSpec,
    reported: &[(u32, u64)],
    bounds: &[PointBounds],
    read: &mut ReadKey<'_>,
) -> (bool, String) {
    match oracle::check_points(reported, bounds) {
        Err(problem) => (false, problem),
        Ok(points) => verify(spec, &points, read),
    }
}

/// Reads one key of an image: `Ok(None)` when absent.
pub(super) type ReadKey<'a> = dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>> + 'a;

/// Checks the image against the oracle by reading every key of the key space. The points must be
/// known to the client side (final serials) or checked against it ([`verify_recovery`]).
pub(super) fn verify(
    spec: &WorkloadSpec,
    points: &[(u32, u64)],
    read: &mut ReadKey<'_>,
) -> (bool, String) {
    let mut image = Vec::with_capacity(spec.keys as usize);
    for key in 0..spec.keys {
        let key = key.to_be_bytes();
        match read(&key) {
            Ok(Some(value)) => image.push((key.to_vec(), value)),
            Ok(None) => {}
            Err(error) => {
                return (
                    false,
                    format!("reading the recovered image failed: {error:#}"),
                )
            }
        }
    }
    match oracle::verify_image(spec, points, image) {
        Ok(summary) => (true, format!("{summary:?}")),
        Err(problem) => (false, problem),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::cpr::{Op, Store, StoreConfig, Strategy};
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
        let spec = WorkloadSpec {
            keys: 2_000,
            read_percent: 50,
            delete_percent: 0,
            cycle: 0,
            zipfian: false,
            seed: 5,
        };
        let worker_ops = 5_000;
        let mut indices = HashMap::new();
        {
            let store = Store::open(config.clone()).unwrap();
            let mut loader = store.start_session();
            indices.insert(loader.id(), 0u32);
            let mut worker = store.start_session();
            indices.insert(worker.id(), 1u32);
            let mut value = Vec::new();
            for serial in 1..=spec.keys {
                if let Op::Upsert(key) = oracle::op_at(&spec, 0, serial) {
                    let value = oracle::encode_value(0, serial);
                    loader.upsert(&key.to_be_bytes(), &value).unwrap();
                }
            }
            for serial in 1..=worker_ops {
                match oracle::op_at(&spec, 1, serial) {
                    Op::Read(key) => {
                        worker.read(&key.to_be_bytes(), &mut value).unwrap();
                    }
                    Op::Upsert(key) => worker
                        .upsert(&key.to_be_bytes(), &oracle::encode_value(1, serial))
                        .unwrap(),
                    Op::Delete(_) => unreachable!(),
                }
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
                    acknowledged_before_request: spec.keys,
                    issued: spec.keys,
                },
                PointBounds {
                    session: 1,
                    acknowledged_before_request: worker_acknowledged,
                    issued: worker_ops + 1,
                },
            ]
        };
        let mut reader = recovered.start_session();
        let mut read = |key: &[u8]| -> Result<Option<Vec<u8>>> {
            let mut out = Vec::new();
            Ok(reader.read(key, &mut out)?.then_some(out))
        };
        let (ok, detail) = verify_recovery(&spec, &reported, &bounds(worker_ops), &mut read);
        assert!(ok, "{detail}");
        let (ok, detail) = verify_recovery(&spec, &reported, &bounds(worker_ops + 1), &mut read);
        assert!(!ok && detail.contains("acknowledged serial"), "{detail}");
        reader.delete(&7u64.to_be_bytes()).unwrap();
        let mut read = |key: &[u8]| -> Result<Option<Vec<u8>>> {
            let mut out = Vec::new();
            Ok(reader.read(key, &mut out)?.then_some(out))
        };
        let (ok, detail) = verify_recovery(&spec, &reported, &bounds(worker_ops), &mut read);
        assert!(!ok && detail.contains("missing key 7"), "{detail}");
    }
}
