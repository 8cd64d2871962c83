//! Randomised end-to-end check of the DPR guarantee: sessions with windows issue batches to
//! workers, deliveries are reordered (relaxed DPR), workers commit at random (some with `Vmax`
//! catch-up), finders refresh at random, then a worker crashes and the cluster rolls back.
//!
//! Oracle: every operation writes a unique key, so a worker's state is exactly the set of
//! operations it kept. After the rollback we check, for every session:
//! - everything a commit point ever reported committed (and not excluded) survived;
//! - every operation the session reports as survived is in its worker's state, every one
//!   reported lost is not, and nothing else is there except uncertain (pending) operations;
//! - the survivors below `until_sequence` are the whole prefix except uncertain operations.
//!
//! `DPR_SIMULATION_SEEDS` sets the number of seeds (default 6).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::sqlite_opener;
use prefixkv_dpr::finder::{ApproximateFinder, DprFinder, ExactFinder, HybridFinder};
use prefixkv_dpr::header::DprHeader;
use prefixkv_dpr::session::{BatchTicket, Completion};
use prefixkv_dpr::state_object::{MapOperation, VersionedMap};
use prefixkv_dpr::worker::BatchOutcome;
use prefixkv_dpr::{DprSession, DprWorker};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const WORKERS: u64 = 3;
const SESSIONS: u64 = 3;

fn key(session: u64, sequence: u64) -> Vec<u8> {
    format!("s{session}-{sequence}").into_bytes()
}

struct InFlight {
    session: usize,
    worker: usize,
    header: DprHeader,
    ticket: BatchTicket,
    operations: Vec<MapOperation>,
}

fn simulate(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (_metadata, open) = sqlite_opener();
    let data = tempfile::tempdir().unwrap();
    let store = open();
    let finder: Arc<dyn DprFinder> = match seed % 3 {
        0 => Arc::new(ExactFinder::new(Arc::clone(&store)).unwrap()),
        1 => Arc::new(ApproximateFinder::new(Arc::clone(&store))),
        _ => Arc::new(HybridFinder::new(Arc::clone(&store)).unwrap()),
    };
    let open_worker = |id: u64| {
        let map = VersionedMap::open(data.path().join(format!("w{id}"))).unwrap();
        DprWorker::start(id, map, Arc::clone(&finder), 64, 0).unwrap()
    };
    let mut workers: Vec<Option<DprWorker<VersionedMap>>> =
        (0..WORKERS).map(|id| Some(open_worker(id))).collect();
    let mut sessions: Vec<DprSession> = (0..SESSIONS).map(|id| DprSession::new(id, 0, 3)).collect();
    // Per session: sequence -> worker, for every issued operation.
    let mut placed: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); SESSIONS as usize];
    // Per session: operations some commit point reported committed.
    let mut reported: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); SESSIONS as usize];
    let mut in_flight: Vec<InFlight> = Vec::new();

    let steps = rng.random_range(60..160);
    for _ in 0..steps {
        match rng.random_range(0..10) {
            0..=3 => {
                let session = rng.random_range(0..SESSIONS) as usize;
                let worker = rng.random_range(0..WORKERS) as usize;
                let count = rng.random_range(1..4);
                if let Ok((header, ticket)) = sessions[session].issue_batch(worker as u64, count) {
                    let operations = (ticket.sequences.start..ticket.sequences.end)
                        .map(|sequence| {
                            placed[session].insert(sequence, worker as u64);
                            MapOperation::Put(key(session as u64, sequence), vec![1])
                        })
                        .collect();
                    in_flight.push(InFlight {
                        session,
                        worker,
                        header,
                        ticket,
                        operations,
                    });
                }
            }
            4..=6 if !in_flight.is_empty() => {
                let batch = in_flight.swap_remove(rng.random_range(0..in_flight.len()));
                let worker = workers[batch.worker].as_mut().unwrap();
                let response = match worker
                    .process_batch(&batch.header, &batch.operations)
                    .unwrap()
                {
                    BatchOutcome::Executed { response, .. }
                    | BatchOutcome::Rejected { response } => response,
                };
                assert!(matches!(
                    sessions[batch.session]
                        .complete_batch(batch.ticket, &response)
                        .unwrap(),
                    Completion::Executed { .. }
                ));
            }
            7 => {
                let worker = workers[rng.random_range(0..WORKERS) as usize]
                    .as_mut()
                    .unwrap();
                let sealed = if rng.random_bool(0.3) {
                    worker.commit_with_catch_up().unwrap()
                } else {
                    worker.commit().unwrap()
                };
                assert!(worker.wait_persisted(sealed, Duration::from_secs(30)));
            }
            8 => {
                let state = finder.refresh().unwrap();
                for (index, session) in sessions.iter_mut().enumerate() {
                    let point = session.commit_point(&state).unwrap();
                    let excluded: BTreeSet<u64> =
                        point.excluded.iter().flat_map(|r| r.start..r.end).collect();
                    for sequence in 0..point.until_sequence {
                        if !excluded.contains(&sequence) {
                            reported[index].insert(sequence);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    // Crash a worker (its unsent batches are lost in the network), roll everyone back.
    let crashed = rng.random_range(0..WORKERS) as usize;
    workers[crashed] = None;
    in_flight.clear();
    let before = store.cluster_state().unwrap();
    let state = store.advance_world_line(before.world_line).unwrap();
    assert_eq!(state.cut, before.cut);
    workers[crashed] = Some(open_worker(crashed as u64));
    for worker in workers.iter_mut().flatten() {
        worker.restore_to(&state).unwrap();
    }
    assert!(store.finish_recovery(state.world_line).unwrap());

    let contents: Vec<BTreeSet<Vec<u8>>> = workers
        .iter()
        .map(|w| {
            w.as_ref()
                .unwrap()
                .state_object()
                .entries()
                .keys()
                .cloned()
                .collect()
        })
        .collect();
    for (index, session) in sessions.iter_mut().enumerate() {
        let prefix = session.handle_rollback(&state).unwrap();
        let present = |sequence: u64| {
            let worker = placed[index][&sequence] as usize;
            contents[worker].contains(&key(index as u64, sequence))
        };
        let uncertain: BTreeSet<u64> = prefix
            .uncertain
            .iter()
            .flat_map(|r| r.start..r.end)
            .collect();
        for &sequence in &reported[index] {
            assert!(
                present(sequence),
                "seed {seed}: session {index} op {sequence} was reported committed but is gone"
            );
        }
        for range in &prefix.survived {
            for sequence in range.start..range.end {
                assert!(
                    present(sequence),
                    "seed {seed}: session {index} op {sequence} reported survived but absent"
                );
            }
        }
        for range in &prefix.lost {
            for sequence in range.start..range.end {
                assert!(
                    !present(sequence),
                    "seed {seed}: session {index} op {sequence} reported lost but present"
                );
            }
        }
        for sequence in 0..prefix.until_sequence {
            if !uncertain.contains(&sequence) {
                assert!(
                    present(sequence),
                    "seed {seed}: session {index} prefix op {sequence} absent"
                );
            }
        }
        for &sequence in placed[index].keys() {
            if present(sequence) {
                let accounted = sequence < prefix.until_sequence
                    || uncertain.contains(&sequence)
                    || prefix
                        .survived
                        .iter()
                        .any(|r| (r.start..r.end).contains(&sequence));
                assert!(
                    accounted,
                    "seed {seed}: session {index} op {sequence} present but unaccounted for"
                );
            }
        }
    }
}

#[test]
fn random_schedules_keep_the_dpr_guarantee() {
    let seeds: u64 = std::env::var("DPR_SIMULATION_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    for seed in 0..seeds {
        simulate(seed);
    }
}
