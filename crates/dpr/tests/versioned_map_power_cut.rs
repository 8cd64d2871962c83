//! Power cuts on the simulated disk (`VersionedMap::open_on` with a `prefixkv_storage::SimDisk`),
//! checked against what the committer was told.
//!
//! Each seed commits versions (now and then restoring an older one, which discards the versions
//! above it) until a power cut armed at a random call kills the disk, crashes with seeded choices
//! (unsynced writes dropped, kept or torn; unsynced directory entries lost) and reopens. Every
//! version whose persist callback reported success (and that no completed restore discarded) must
//! be listed, every listed version must restore to exactly the state committed as that version
//! (never a torn or mixed snapshot), and no version a completed restore discarded may come back.
//!
//! `DPR_POWER_CUT_SEEDS` (default 300); `DPR_POWER_CUT_SEED=n` replays one seed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::mpsc;

use prefixkv_dpr::state_object::{MapOperation, StateObject, VersionedMap};
use prefixkv_dpr::Version;
use prefixkv_storage::{CrashMode, SimDisk};
use prefixkv_testkit::rng::{env_count, Rng};

const DIR: &str = "/data/map";

type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// What the committer knows: the state it sealed as each version, and what it was told.
#[derive(Default)]
struct Committer {
    sealed: BTreeMap<Version, State>,
    acknowledged: BTreeSet<Version>,
    /// Versions a restore that returned `Ok` discarded.
    discarded: BTreeSet<Version>,
}

fn run(map: &mut VersionedMap, committer: &mut Committer, rng: &mut Rng) {
    let (done, reports) = mpsc::channel();
    let mut state: State = map.entries().clone();
    let mut version = map
        .persisted_versions()
        .map_or(0, |v| v.last().copied().unwrap_or(0));
    for _ in 0..30 {
        version += 1;
        let operations: Vec<MapOperation> = (0..1 + rng.below(6))
            .map(|_| {
                let key = format!("k{}", rng.below(12)).into_bytes();
                let value = vec![version as u8; rng.below(300) as usize];
                MapOperation::Put(key, value)
            })
            .collect();
        if map.execute(version, &operations).is_err() {
            break;
        }
        for operation in &operations {
            if let MapOperation::Put(key, value) = operation {
                state.insert(key.clone(), value.clone());
            }
        }
        let done = done.clone();
        let callback = Box::new(move |result: Result<Version, _>| {
            let _ = done.send(result.is_ok().then_some(version));
        });
        if map.commit(version, Vec::new(), callback).is_err() {
            break;
        }
        committer.sealed.insert(version, state.clone());
        if rng.below(8) == 0 {
            let _ = map.flush();
            for report in reports.try_iter().flatten() {
                committer.acknowledged.insert(report);
            }
            let target = match committer.acknowledged.iter().next_back() {
                Some(&newest) => newest.saturating_sub(rng.below(3)),
                None => 0,
            };
            let above: Vec<Version> = committer
                .sealed
                .range(target + 1..)
                .map(|(&v, _)| v)
                .collect();
            // Announced before the call: a restore cut midway may have removed any of them.
            for version in &above {
                committer.acknowledged.remove(version);
            }
            if map.restore(target).is_err() {
                break;
            }
            for version in above {
                committer.discarded.insert(version);
                committer.sealed.remove(&version);
            }
            state = map.entries().clone();
        }
    }
    let _ = map.flush();
    for report in reports.try_iter().flatten() {
        committer.acknowledged.insert(report);
    }
}

fn check(disk: &SimDisk, committer: &Committer, seed: u64) {
    let mut map = VersionedMap::open_on(disk.as_disk(), DIR)
        .unwrap_or_else(|e| panic!("seed {seed} (DPR_POWER_CUT_SEED={seed}): reopen: {e}"));
    let listed = map.persisted_versions().unwrap();
    for version in &committer.acknowledged {
        assert!(
            listed.contains(version),
            "seed {seed} (DPR_POWER_CUT_SEED={seed}): acknowledged version {version} lost; listed {listed:?}"
        );
    }
    for version in &listed {
        assert!(
            !committer.discarded.contains(version),
            "seed {seed}: version {version}, discarded by a completed restore, came back"
        );
    }
    for &version in listed.iter().rev() {
        map.restore(version).unwrap_or_else(|e| {
            panic!("seed {seed}: listed version {version} does not restore: {e}")
        });
        assert_eq!(
            Some(map.entries()),
            committer.sealed.get(&version),
            "seed {seed}: version {version} restored to another state"
        );
    }
}

fn run_seed(seed: u64) {
    let disk = SimDisk::new(seed);
    let mut rng = Rng::new(seed);
    let mut committer = Committer::default();
    let mut map = VersionedMap::open_on(disk.as_disk(), DIR).unwrap();
    disk.cut_after(rng.below(120));
    run(&mut map, &mut committer, &mut rng);
    disk.kill();
    drop(map);
    disk.crash(CrashMode::Random);
    check(&disk, &committer, seed);
}

#[test]
fn power_cuts_keep_every_acknowledged_version_whole() {
    if let Some(seed) = std::env::var("DPR_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return run_seed(seed);
    }
    let seeds = env_count("DPR_POWER_CUT_SEEDS", 300);
    for seed in 0..seeds {
        run_seed(seed);
    }
    eprintln!("dpr versioned map power cuts: {seeds} seeds");
}

/// Runs seed 3's workload with no power cut; returns the disk after a crash, and the record.
fn uncut_run() -> (SimDisk, Committer) {
    let disk = SimDisk::new(3);
    let mut map = VersionedMap::open_on(disk.as_disk(), DIR).unwrap();
    let mut committer = Committer::default();
    run(&mut map, &mut committer, &mut Rng::new(3));
    drop(map);
    disk.crash(CrashMode::Random);
    (disk, committer)
}

/// The check is not vacuous: deleting the newest acknowledged snapshot behind the map's back
/// fails it (the check restores, so the untampered control runs on its own copy of the run).
#[test]
fn the_check_catches_a_lost_acknowledged_version() {
    let (disk, committer) = uncut_run();
    check(&disk, &committer, 3);
    let (disk, committer) = uncut_run();
    let newest = *committer.acknowledged.iter().next_back().unwrap();
    prefixkv_storage::Disk::remove_file(
        &*disk.as_disk(),
        &Path::new(DIR).join(format!("v{newest:020}.snap")),
    )
    .unwrap();
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&disk, &committer, 3)))
            .expect_err("a lost acknowledged version must fail the check");
    let message = caught.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("acknowledged version"), "{message}");
}
