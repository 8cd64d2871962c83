//! What the clients of one `ycsb` round recorded, and the check of the checkpointed engine's
//! recovered checkpoint against it with the stamp rule ([`crate::workload::stamp_rule`], shared
//! with `cpr`).
//!
//! A round runs every (point, threads) one after another on one loaded contender; each run's
//! workers are new sessions, numbered from 1 across the whole round so that a stamp names one
//! session. The ledger keeps, per run, each worker's chunk log and last serial; per session, an
//! acknowledgement counter the worker stores after every chunk; and, per checkpoint the driver
//! requested, what those counters said just before the request.
//!
//! Invariants: a counter only ever holds a serial whose operations have all returned, so a
//! snapshot taken before a request is a lower bound of what each session had been acknowledged;
//! a session is registered (counter 0) before its run starts, so a session missing from a
//! snapshot had run nothing when it was taken.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use prefixkv_engine::{RecoveryInfo, SessionId};
use prefixkv_testkit::oracle::{self, PointBounds, LOADER_SESSION};

use super::driver::WorkerEnd;
use crate::workload::operations::Operations;
use crate::workload::stamp_rule::{self, History, ReadKey, RunLog};

/// One run of the round: which point's operations, and what each worker did.
struct RunRecord {
    point: usize,
    chunk_logs: Vec<(u32, Vec<u64>)>,
    final_serials: Vec<(u32, u64)>,
}

/// The round's client-side record.
#[derive(Default)]
pub struct Ledger {
    /// Every worker session registered so far, with its acknowledgement counter.
    counters: Mutex<Vec<(u32, Arc<AtomicU64>)>>,
    /// Per requested checkpoint version: (session, acknowledged serial) before the request.
    at_request: Mutex<BTreeMap<u64, Vec<(u32, u64)>>>,
    runs: Mutex<Vec<RunRecord>>,
    /// Worker sessions' engine ids, to map a checkpoint's CPR points back to session indices.
    engine_ids: Mutex<HashMap<SessionId, u32>>,
}

impl Ledger {
    /// Registers `threads` new sessions for the next run; returns the first index and their
    /// counters (the stamp's 16 session bits allow 65,535 sessions a round).
    pub fn start_run(&self, threads: usize) -> Result<(u32, Vec<Arc<AtomicU64>>)> {
        let mut counters = self.counters.lock().expect("ledger lock");
        let first = counters.len() as u64 + 1;
        if first + threads as u64 > u64::from(u16::MAX) {
            bail!("a round of more than 65,535 worker sessions cannot be stamped");
        }
        let new: Vec<Arc<AtomicU64>> = (0..threads).map(|_| Arc::default()).collect();
        for (offset, counter) in new.iter().enumerate() {
            counters.push((first as u32 + offset as u32, counter.clone()));
        }
        Ok((first as u32, new))
    }

    /// Records a finished run over the operations of `point`.
    pub fn finish_run(&self, point: usize, ends: Vec<WorkerEnd>) {
        let mut ids = self.engine_ids.lock().expect("ledger lock");
        let mut run = RunRecord {
            point,
            chunk_logs: Vec::with_capacity(ends.len()),
            final_serials: Vec::with_capacity(ends.len()),
        };
        for end in ends {
            if let Some(id) = end.engine_session {
                ids.insert(id, end.session);
            }
            run.final_serials.push((end.session, end.serial));
            run.chunk_logs.push((end.session, end.chunks));
        }
        self.runs.lock().expect("ledger lock").push(run);
    }

    /// What every registered session had been acknowledged, now.
    pub fn acknowledged_now(&self) -> Vec<(u32, u64)> {
        let counters = self.counters.lock().expect("ledger lock");
        counters
            .iter()
            .map(|(session, counter)| (*session, counter.load(Ordering::SeqCst)))
            .collect()
    }

    /// Notes the snapshot taken just before checkpoint `version` was requested.
    pub fn requested(&self, version: u64, acknowledged: Vec<(u32, u64)>) {
        let mut at_request = self.at_request.lock().expect("ledger lock");
        at_request.insert(version, acknowledged);
    }

    /// Checks a recovered checkpoint (`info`, its image read through `read`) of a store loaded
    /// with `keys` keys by the `loaders` sessions: its CPR points against the acknowledgements
    /// noted at its request, then every key with the stamp rule. `operations[point]` are each
    /// point's operations. Returns whether it passed and what was checked or the problem.
    pub fn check_recovered(
        &self,
        keys: u64,
        loaders: &[(SessionId, u64)],
        operations: &[Operations],
        info: &RecoveryInfo,
        read: &mut ReadKey<'_>,
    ) -> (bool, String) {
        let runs = self.runs.lock().expect("ledger lock");
        let points = match self.points(keys, loaders, &runs, info) {
            Ok(points) => points,
            Err(problem) => return (false, problem),
        };
        let history = History {
            keys,
            runs: runs
                .iter()
                .map(|run| RunLog {
                    operations: &operations[run.point],
                    chunk_logs: &run.chunk_logs,
                })
                .collect(),
        };
        let (ok, detail) = stamp_rule::verify(&history, &points, read);
        (ok, format!("checkpoint v{}: {detail}", info.version))
    }

    /// The recovered CPR points, checked against the client-side bounds of `info.version`.
    fn points(
        &self,
        keys: u64,
        loaders: &[(SessionId, u64)],
        runs: &[RunRecord],
        info: &RecoveryInfo,
    ) -> Result<Vec<(u32, u64)>, String> {
        let ids = self.engine_ids.lock().expect("ledger lock");
        let at_request = self.at_request.lock().expect("ledger lock");
        let acknowledged: HashMap<u32, u64> = at_request
            .get(&info.version)
            .ok_or_else(|| format!("recovered checkpoint v{}, never requested", info.version))?
            .iter()
            .copied()
            .collect();
        // The loader threads finished before any checkpoint was requested: a loader session
        // the checkpoint still lists must be at its last upsert. Together they are session 0.
        let mut reported = vec![(LOADER_SESSION, keys)];
        for (id, &point) in &info.session_commit_points {
            if let Some(&(_, upserts)) = loaders.iter().find(|(loader, _)| loader == id) {
                if point != upserts {
                    return Err(format!(
                        "loader session {id}: CPR point {point}, but it ran {upserts} upserts, \
                         all acknowledged before any checkpoint"
                    ));
                }
                continue;
            }
            match ids.get(id) {
                Some(&index) => reported.push((index, point)),
                None if point == 0 => {}
                None => return Err(format!("the checkpoint lists unknown session {id}")),
            }
        }
        let mut bounds = vec![PointBounds {
            session: LOADER_SESSION,
            acknowledged_before_request: keys,
            issued: keys,
        }];
        for &(session, issued) in runs.iter().flat_map(|run| &run.final_serials) {
            let acknowledged_before_request = acknowledged.get(&session).copied().unwrap_or(0);
            // A session that had ended before the request (acknowledged all it issued) is left
            // out of the manifest once an earlier checkpoint held all its operations (the
            // engine forgets dropped sessions then): its point is what it issued.
            let listed = reported.iter().any(|&(s, _)| s == session);
            if !listed && issued > 0 && acknowledged_before_request == issued {
                reported.push((session, issued));
            }
            bounds.push(PointBounds {
                session,
                acknowledged_before_request,
                issued,
            });
        }
        oracle::check_points(&reported, &bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::ycsb::contenders::{self, Contender};
    use crate::workload::operations::{encode_key, key, stamp, Cursor, Kind, OperationMix};
    use crate::workload::KeyDistribution;
    use prefixkv_engine::{Store, Strategy};
    use std::collections::HashSet;
    use std::time::Duration;

    /// Runs `chunks` chunks of `operations` on a new worker of `map` as the next session of
    /// `ledger`, then records the run (the worker, and its engine session, end with it).
    fn run(
        ledger: &Ledger,
        map: &dyn crate::workload::maps::Loaded,
        point: usize,
        ops: &Operations,
        chunks: usize,
    ) {
        let (session, counters) = ledger.start_run(1).unwrap();
        let cursor = Cursor::new(ops);
        let mut worker = map.worker();
        let mut end = WorkerEnd {
            session,
            serial: 0,
            chunks: Vec::new(),
            engine_session: worker.engine_session(),
        };
        for _ in 0..chunks {
            let chunk = cursor.take(session, end.serial + 1);
            worker.run(&chunk);
            end.serial += chunk.len();
            end.chunks.push(chunk.position);
            counters[0].store(end.serial, Ordering::SeqCst);
        }
        drop(worker);
        ledger.finish_run(point, vec![end]);
    }

    fn checkpoint(store: &Store, ledger: &Ledger) -> u64 {
        let acknowledged = ledger.acknowledged_now();
        let token = store.checkpoint(Strategy::Persian).unwrap();
        ledger.requested(token.version, acknowledged);
        store
            .wait_for_commit(token, Duration::from_secs(60))
            .unwrap();
        token.version
    }

    /// The checkpointed engine's recovered checkpoint, after a run of upserts and a run of
    /// read-modify-writes, passes the stamp rule; it fails once a key holds an older stamp, once
    /// a key is deleted, and once the ledger says a session had been acknowledged more than the
    /// checkpoint's point when it was requested.
    #[test]
    fn the_recovered_checkpoint_is_held_to_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let keys = 3_000;
        let mix = |read_percent, write| OperationMix {
            read_percent,
            write,
        };
        let operations = [
            Operations::generate(
                mix(50, Kind::Upsert),
                KeyDistribution::Uniform,
                keys,
                6_400,
                1,
            ),
            Operations::generate(mix(50, Kind::Rmw), KeyDistribution::Uniform, keys, 3_200, 2),
        ];
        let ledger = Ledger::default();
        let sizes = contenders::Sizes {
            keys,
            value_bytes: 8,
            tiered_log_memory_bytes: 0,
            rocksdb_block_cache_bytes: 0,
            direct_io: true,
        };
        let loaded = contenders::load(Contender::EnginePersian, &sizes, 2, dir.path()).unwrap();
        let store = loaded.store.clone().unwrap();
        run(&ledger, &*loaded.map, 0, &operations[0], 2);
        checkpoint(&store, &ledger);
        run(&ledger, &*loaded.map, 1, &operations[1], 1);
        let version = checkpoint(&store, &ledger);
        drop((store, loaded.map, loaded.store));

        let recovered = Store::open(contenders::engine_config(keys, 8, dir.path())).unwrap();
        let info = recovered.recovery_info().unwrap().clone();
        assert_eq!(info.version, version);
        let mut session = recovered.start_session();
        let check = |session: &mut prefixkv_engine::Session, ledger: &Ledger| {
            let mut read = stamp_rule::engine_reader(session);
            ledger.check_recovered(keys, &loaded.loaders, &operations, &info, &mut read)
        };
        let (ok, detail) = check(&mut session, &ledger);
        assert!(ok, "{detail}");

        // A key session 1 upserted and no read-modify-write touched: give it the loader's stamp.
        let rmw_keys: HashSet<u64> = operations[1].keys.iter().copied().collect();
        let position = (0..6_400)
            .find(|&p| {
                operations[0].kinds[p] == Kind::Upsert && !rmw_keys.contains(&operations[0].keys[p])
            })
            .unwrap();
        let hashed = operations[0].keys[position];
        let index = (0..keys).find(|&i| key(i) == hashed).unwrap();
        let mut original = Vec::new();
        assert!(session.read(&encode_key(hashed), &mut original).unwrap());
        session
            .upsert(
                &encode_key(hashed),
                &stamp(LOADER_SESSION, index + 1).to_be_bytes(),
            )
            .unwrap();
        let (ok, detail) = check(&mut session, &ledger);
        assert!(!ok && detail.contains("lost write"), "{detail}");
        session.delete(&encode_key(hashed)).unwrap();
        let (ok, detail) = check(&mut session, &ledger);
        assert!(
            !ok && detail.contains(&format!("missing key {index}")),
            "{detail}"
        );
        session.upsert(&encode_key(hashed), &original).unwrap();
        assert!(check(&mut session, &ledger).0);

        // A manifest that puts session 2 (the read-modify-writes, all acknowledged before the
        // request) at a point below what it had been acknowledged.
        let mut short = info.clone();
        let id = ledger
            .engine_ids
            .lock()
            .unwrap()
            .iter()
            .find(|(_, &s)| s == 2)
            .map(|(id, _)| *id);
        short.session_commit_points.insert(id.unwrap(), 100);
        let mut read = stamp_rule::engine_reader(&mut session);
        let (ok, detail) =
            ledger.check_recovered(keys, &loaded.loaders, &operations, &short, &mut read);
        assert!(!ok && detail.contains("acknowledged serial"), "{detail}");
    }
}
