//! The reference StateObject: commit/restore/prune, corruption detection, and a crash test (a
//! child process committing versions is SIGKILLed at random points; every surviving snapshot must
//! restore to exactly the oracle state of its version).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use prefixkv_dpr::state_object::{MapOperation, StateObject, StateObjectError, VersionedMap};
use prefixkv_dpr::Version;
use rand::RngExt;

fn key(index: u64) -> Vec<u8> {
    format!("key-{index}").into_bytes()
}

/// Operations of version `v` in the crash workload: deterministic, so the oracle is a function of v.
fn operations_of(version: Version) -> Vec<MapOperation> {
    let mut operations = vec![MapOperation::Put(
        key(version % 7),
        version.to_le_bytes().to_vec(),
    )];
    if version.is_multiple_of(5) {
        operations.push(MapOperation::Delete(key((version / 5) % 7)));
    }
    operations
}

fn oracle(version: Version) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut map = BTreeMap::new();
    for v in 1..=version {
        for operation in operations_of(v) {
            match operation {
                MapOperation::Put(k, value) => {
                    map.insert(k, value);
                }
                MapOperation::Delete(k) => {
                    map.remove(&k);
                }
                MapOperation::Get(_) => {}
            }
        }
    }
    map
}

fn commit_and_wait(map: &mut VersionedMap, version: Version, metadata: Vec<u8>) {
    let (done, wait) = mpsc::channel();
    map.commit(
        version,
        metadata,
        Box::new(move |result| done.send(result.map_err(|e| e.to_string())).unwrap()),
    )
    .unwrap();
    assert_eq!(
        wait.recv_timeout(Duration::from_secs(30)).unwrap(),
        Ok(version)
    );
}

#[test]
fn commit_restore_prune() {
    let directory = tempfile::tempdir().unwrap();
    let mut map = VersionedMap::open(directory.path()).unwrap();
    for version in 1..=6 {
        map.execute(version, &operations_of(version)).unwrap();
        commit_and_wait(&mut map, version, format!("meta-{version}").into_bytes());
    }
    map.execute(7, &operations_of(7)).unwrap();
    assert_eq!(map.persisted_versions().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(map.restore(4).unwrap(), b"meta-4".to_vec());
    assert_eq!(map.entries(), &oracle(4));
    // Versions above the restored one are gone (lost world-line).
    assert_eq!(map.persisted_versions().unwrap(), vec![1, 2, 3, 4]);
    map.prune(3).unwrap();
    assert_eq!(map.persisted_versions().unwrap(), vec![3, 4]);
    assert!(matches!(
        map.restore(2),
        Err(StateObjectError::NoSuchVersion { .. })
    ));
    assert!(matches!(
        map.commit(4, vec![], Box::new(|_| {})),
        Err(StateObjectError::VersionNotIncreasing { .. })
    ));
    map.restore(0).unwrap();
    assert!(map.entries().is_empty());
}

#[test]
fn corrupt_snapshot_is_reported_and_left_in_place() {
    let directory = tempfile::tempdir().unwrap();
    let mut map = VersionedMap::open(directory.path()).unwrap();
    map.execute(1, &operations_of(1)).unwrap();
    commit_and_wait(&mut map, 1, vec![]);
    let path = directory.path().join(format!("v{:020}.snap", 1));
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let error = map.restore(1).unwrap_err();
    assert!(matches!(error, StateObjectError::Corrupt { .. }), "{error}");
    assert!(error.to_string().contains("v00000000000000000001.snap"));
    assert!(path.exists());
}

const CHILD_ENV: &str = "DPR_VERSIONED_MAP_CRASH_CHILD";

/// Child mode: restore the newest snapshot, then commit versions forever, printing each persisted one.
#[test]
fn crash_child() {
    let Ok(directory) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut map = VersionedMap::open(&directory).unwrap();
    let mut version = map
        .persisted_versions()
        .unwrap()
        .last()
        .copied()
        .unwrap_or(0);
    map.restore(version).unwrap();
    loop {
        version += 1;
        map.execute(version, &operations_of(version)).unwrap();
        map.commit(
            version,
            version.to_le_bytes().to_vec(),
            Box::new(|result| {
                println!("persisted {}", result.unwrap());
            }),
        )
        .unwrap();
        if version.is_multiple_of(8) {
            map.flush().unwrap();
        }
    }
}

#[test]
fn crash_recovery_matches_oracle() {
    let rounds: usize = std::env::var("DPR_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let directory = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut last_persisted = 0;
    for _ in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, directory.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let wanted = rng.random_range(1..40);
        let mut seen = 0;
        let reader = BufReader::new(child.stdout.take().unwrap());
        for line in reader.lines() {
            let line = line.unwrap();
            if let Some(version) = line.strip_prefix("persisted ") {
                last_persisted = version.trim().parse().unwrap();
                seen += 1;
                if seen >= wanted {
                    break;
                }
            }
        }
        assert!(seen >= wanted, "child exited early");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Every version reported persisted must be on disk and restore to its oracle state.
        let mut map = VersionedMap::open(directory.path()).unwrap();
        let versions = map.persisted_versions().unwrap();
        assert!(
            versions.contains(&last_persisted),
            "{last_persisted} missing from {versions:?}"
        );
        for &version in versions.iter().rev().take(3) {
            let metadata = map.restore(version).unwrap();
            assert_eq!(metadata, version.to_le_bytes().to_vec());
            assert_eq!(map.entries(), &oracle(version), "version {version}");
        }
        assert!(!std::fs::read_dir(directory.path()).unwrap().any(|e| e
            .unwrap()
            .path()
            .extension()
            .is_some_and(|x| x == "tmp")));
    }
}
