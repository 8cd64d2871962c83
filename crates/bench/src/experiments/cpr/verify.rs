//! Verification of a `cpr` cell: the recovered (or live) image against what the bench's own
//! sessions were acknowledged, never against what the store reports about itself.
//!
//! The workers ran chunks of the shared pre-generated operations (`crate::workload::operations`),
//! so a session's serials are not a function of the session alone: each worker's chunk log (the
//! positions of the chunks it ran, in order) maps its serial `n` back to one operation. With that
//! mapping the rules are `prefixkv_testkit::oracle`'s, for workloads without deletes:
//! - the CPR points a checkpoint reports lie between what each session had been acknowledged
//!   before the checkpoint was requested and what it issued (`oracle::check_points`);
//! - every key is present (the loader, session 0, upserted `key(i)` at serial `i + 1` before any
//!   worker ran, and nothing deletes);
//! - a key's value names a session and serial within that session's point, and that operation is
//!   the session's last upsert of the key within its point; the loader's value only if no worker
//!   upserted the key within its point.
//!
//! Sessions run concurrently, so when two sessions last wrote a key within their points either
//! write may be the one the image holds; the check accepts exactly those states.

use std::collections::HashMap;

use anyhow::Result;
use prefixkv_testkit::oracle::{self, PointBounds, LOADER_SESSION};

use super::measure::Measured;
use crate::workload::operations::{encode_key, key, Kind, Operations};

/// What a run did, from the client side: the operations and which chunks each worker ran.
pub(super) struct History<'a> {
    /// The pre-generated operations the workers took chunks of.
    pub(super) operations: &'a Operations,
    /// Keys loaded: `key(0..keys)`.
    pub(super) keys: u64,
    /// (session index, chunk positions in the order it ran them) per worker session.
    pub(super) chunk_logs: &'a [(u32, Vec<u64>)],
}

/// The client-side bounds of every session's CPR point in the recovered checkpoint `version`:
/// the loader was acknowledged every key before any checkpoint; a worker was acknowledged at
/// least what its counter said when `version` was requested, and issued exactly its final serial.
pub(super) fn recovery_bounds(
    keys: u64,
    measured: &Measured,
    version: u64,
) -> std::result::Result<Vec<PointBounds>, String> {
    let acknowledged = measured
        .acknowledged_at_request
        .get(&version)
        .ok_or_else(|| format!("recovered checkpoint v{version}, which was never requested"))?;
    let mut bounds = vec![PointBounds {
        session: LOADER_SESSION,
        acknowledged_before_request: keys,
        issued: keys,
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

/// Reads one key of an image: `Ok(None)` when absent.
pub(super) type ReadKey<'a> = dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>> + 'a;

/// Checks the image against the history by reading every loaded key. The points must be known
/// to the client side (final serials) or checked against it ([`verify_recovery`]).
pub(super) fn verify(
    history: &History<'_>,
    points: &[(u32, u64)],
    read: &mut ReadKey<'_>,
) -> (bool, String) {
    let points: HashMap<u32, u64> = points.iter().copied().collect();
    let prefixes = match Prefixes::replay(history, &points) {
        Ok(prefixes) => prefixes,
        Err(problem) => return (false, problem),
    };
    for index in 0..history.keys {
        let value = match read(&encode_key(key(index))) {
            Ok(value) => value,
            Err(error) => {
                return (
                    false,
                    format!("reading the recovered image failed: {error:#}"),
                )
            }
        };
        if let Err(problem) = prefixes.check_key(index, value.as_deref(), &points) {
            return (false, problem);
        }
    }
    (
        true,
        format!(
            "{} keys checked, {} operations replayed",
            history.keys, prefixes.replayed
        ),
    )
}

/// A map from keys that are already hashes.
type KeyToSerial = HashMap<u64, u64, foldhash::fast::RandomState>;

/// Every worker session's last upsert of each key within its point.
struct Prefixes {
    sessions: Vec<(u32, KeyToSerial)>,
    replayed: u64,
}

impl Prefixes {
    /// Replays each worker's chunk log up to its point.
    fn replay(history: &History<'_>, points: &HashMap<u32, u64>) -> Result<Prefixes, String> {
        let mut prefixes = Prefixes {
            sessions: Vec::new(),
            replayed: 0,
        };
        for (&session, &point) in points {
            if session == LOADER_SESSION {
                continue;
            }
            let Some((_, log)) = history.chunk_logs.iter().find(|(s, _)| *s == session) else {
                return Err(format!("session {session} has a point but ran no chunks"));
            };
            let last = replay_session(history.operations, session, log, point)?;
            prefixes.sessions.push((session, last));
            prefixes.replayed += point;
        }
        Ok(prefixes)
    }

    fn last(&self, session: u32, key: u64) -> Option<u64> {
        let (_, last) = self.sessions.iter().find(|(s, _)| *s == session)?;
        last.get(&key).copied()
    }

    /// Some worker that upserted `key` within its point, and the serial of its last upsert.
    fn any_writer(&self, key: u64) -> Option<(u32, u64)> {
        self.sessions
            .iter()
            .find_map(|(session, last)| last.get(&key).map(|&serial| (*session, serial)))
    }

    /// Checks key `key(index)`'s `value` in the image (`None`: absent).
    fn check_key(
        &self,
        index: u64,
        value: Option<&[u8]>,
        points: &HashMap<u32, u64>,
    ) -> Result<(), String> {
        let key = key(index);
        let Some(bytes) = value else {
            return Err(match self.any_writer(key) {
                None => format!(
                    "missing key {index}: the loader (session 0) upserted it at serial {}, but \
                     the image does not hold it",
                    index + 1
                ),
                Some((session, serial)) => format!(
                    "missing key {index}: session {session} upserted it at serial {serial} <= \
                     its CPR point, but the image does not hold it"
                ),
            });
        };
        let (session, serial) = oracle::decode_value(bytes).ok_or_else(|| {
            format!("key {index}: value {bytes:02x?} is not an 8-byte workload value")
        })?;
        let Some(&point) = points.get(&session) else {
            return Err(format!(
                "key {index}: value says session {session} serial {serial}, but session \
                 {session} is not among the recovered sessions (value from a wrong session)"
            ));
        };
        if serial == 0 || serial > point {
            return Err(format!(
                "key {index}: value from session {session} serial {serial} is after its CPR \
                 point {point} (an operation outside the recovered prefix)"
            ));
        }
        if session == LOADER_SESSION {
            return self.check_loader_value(index, serial);
        }
        match self.last(session, key) {
            Some(last) if last == serial => Ok(()),
            Some(last) => Err(format!(
                "key {index}: lost write: the image holds session {session} serial {serial} but \
                 the session upserted the key again at serial {last} <= its CPR point {point}"
            )),
            None => Err(format!(
                "key {index}: value says session {session} serial {serial}, but that operation \
                 was not an upsert of this key (value from a wrong session or for a wrong key)"
            )),
        }
    }

    fn check_loader_value(&self, index: u64, serial: u64) -> Result<(), String> {
        if serial != index + 1 {
            return Err(format!(
                "key {index}: value says the loader's serial {serial}, but the loader wrote this \
                 key at serial {}",
                index + 1
            ));
        }
        match self.any_writer(key(index)) {
            None => Ok(()),
            Some((writer, last)) => Err(format!(
                "key {index}: lost write: the image holds the loader's value but session {writer} \
                 upserted it at serial {last} <= its CPR point"
            )),
        }
    }
}

/// One worker's last upsert of each key among its serials `1..=point`.
fn replay_session(
    operations: &Operations,
    session: u32,
    log: &[u64],
    point: u64,
) -> Result<KeyToSerial, String> {
    let mut last = KeyToSerial::default();
    let mut serial = 0u64;
    for &position in log {
        if serial >= point {
            break;
        }
        let chunk = operations.chunk_at(position, session, serial + 1);
        let within = (point - serial).min(chunk.len()) as usize;
        for (offset, (&key, &kind)) in chunk.keys.iter().zip(chunk.kinds).take(within).enumerate() {
            match kind {
                Kind::Read => {}
                Kind::Upsert => {
                    last.insert(key, serial + 1 + offset as u64);
                }
                Kind::Rmw => return Err("cpr workloads have no read-modify-writes".into()),
            }
        }
        serial += chunk.len();
    }
    if serial < point {
        return Err(format!(
            "session {session}: CPR point {point} is past the {serial} operations it ran"
        ));
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::cpr::cell::load_engine;
    use crate::workload::maps::{run_engine_chunk, PREFETCH_AHEAD};
    use crate::workload::operations::{Cursor, OperationMix};
    use crate::workload::KeyDistribution;
    use prefixkv_engine::{Store, StoreConfig, Strategy};
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
            operations: &operations,
            keys,
            chunk_logs: &chunk_logs,
        };
        let mut reader = recovered.start_session();
        let mut read = |key: &[u8]| -> Result<Option<Vec<u8>>> {
            let mut out = Vec::new();
            Ok(reader.read(key, &mut out)?.then_some(out))
        };
        let (ok, detail) = verify_recovery(&history, &reported, &bounds(worker_ops), &mut read);
        assert!(ok, "{detail}");
        let (ok, detail) = verify_recovery(&history, &reported, &bounds(worker_ops + 1), &mut read);
        assert!(!ok && detail.contains("acknowledged serial"), "{detail}");
        reader.delete(&encode_key(key(7))).unwrap();
        let mut read = |key: &[u8]| -> Result<Option<Vec<u8>>> {
            let mut out = Vec::new();
            Ok(reader.read(key, &mut out)?.then_some(out))
        };
        let (ok, detail) = verify_recovery(&history, &reported, &bounds(worker_ops), &mut read);
        assert!(!ok && detail.contains("missing key 7"), "{detail}");
    }

    /// A stale value (an earlier upsert of the same session) and the loader's value under a
    /// worker's write are both caught, on a replay alone (no store).
    #[test]
    fn stale_and_shadowed_values_are_lost_writes() {
        let mix = OperationMix {
            read_percent: 0,
            write: Kind::Upsert,
        };
        // Four keys, so every key is upserted many times in a chunk.
        let operations = Operations::generate(mix, KeyDistribution::Uniform, 4, 3_200, 9);
        let chunk_logs = [(1u32, vec![0u64])];
        let history = History {
            operations: &operations,
            keys: 4,
            chunk_logs: &chunk_logs,
        };
        let points: HashMap<u32, u64> = [(0, 4), (1, 3_200)].into_iter().collect();
        let prefixes = Prefixes::replay(&history, &points).unwrap();
        let hashed = key(0);
        let last = prefixes.last(1, hashed).expect("key 0 is written");
        let first = 1 + operations.keys.iter().position(|&k| k == hashed).unwrap() as u64;
        assert!(first < last);
        let value = |session, serial| oracle::encode_value(session, serial).to_vec();
        assert!(prefixes
            .check_key(0, Some(&value(1, last)), &points)
            .is_ok());
        let stale = prefixes.check_key(0, Some(&value(1, first)), &points);
        assert!(stale.unwrap_err().contains("lost write"));
        let shadowed = prefixes.check_key(0, Some(&value(0, 1)), &points);
        assert!(shadowed.unwrap_err().contains("lost write"));
    }
}
