//! Checkpoint files and state-machine recovery, in process (real disk): format round trip, every
//! corruption detected, recovery falling back to the previous checkpoint (the catalog moves the
//! corrupt one aside), and refusal to start empty.

use std::collections::BTreeMap;
use std::path::Path;

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder};
use prefixkv_smr::checkpoint::{self, CheckpointHeader, Checkpoints};
use prefixkv_smr::state_machine::{StateMachine, StateMachineConfig};
use prefixkv_smr::store::pair_hash;
use prefixkv_smr::types::{Command, Entry, LogId, SnapshotMeta};
use prefixkv_smr::StateModel;
use prefixkv_storage::real_disk;
use proptest::prelude::*;

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn header(index: u64) -> CheckpointHeader {
    CheckpointHeader {
        meta: SnapshotMeta {
            last_log_id: Some(log_id(index)),
            last_membership: Default::default(),
            snapshot_id: format!("s{index}"),
        },
        model: "test".into(),
    }
}

fn write_checkpoint(
    dir: &Path,
    index: u64,
    pairs: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> std::path::PathBuf {
    let checkpoints = Checkpoints::open(real_disk(), dir).unwrap();
    let mut writer = checkpoints.begin(&header(index)).unwrap();
    for (key, value) in pairs {
        writer.push(key, value).unwrap();
    }
    writer.finish().unwrap().0
}

fn read(path: &Path, on_pair: impl FnMut(Vec<u8>, Vec<u8>)) -> CheckpointHeader {
    checkpoint::read(&*real_disk(), path, on_pair).unwrap()
}

/// Published checkpoints in `dir`, newest first: (log index, file).
fn published(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    Checkpoints::open(real_disk(), dir)
        .unwrap()
        .published()
        .unwrap()
        .into_iter()
        .map(|c| (c.header.index().unwrap(), c.path))
        .collect()
}

fn published_file(dir: &Path, index: u64) -> std::path::PathBuf {
    published(dir)
        .into_iter()
        .find(|(i, _)| *i == index)
        .unwrap_or_else(|| panic!("no checkpoint at index {index}"))
        .1
}

fn sample_pairs(count: usize, value_bytes: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..count)
        .map(|i| {
            (
                format!("key-{i}").into_bytes(),
                vec![(i % 251) as u8; value_bytes],
            )
        })
        .collect()
}

#[test]
fn checkpoint_round_trips_and_detects_every_byte_flip_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let pairs = sample_pairs(300, 37);
    let path = write_checkpoint(dir.path(), 42, &pairs);
    let bytes = std::fs::read(&path).unwrap();
    let mut read_back = BTreeMap::new();
    let got = read(&path, |k, v| {
        read_back.insert(k, v);
    });
    assert_eq!(got, header(42));
    assert_eq!(read_back, pairs);
    // Every single-byte corruption and every truncation is an error, never a panic or a
    // silently different state.
    for offset in 0..bytes.len() {
        let mut corrupted = bytes.clone();
        corrupted[offset] ^= 0x5a;
        let result = checkpoint::decode_bytes(&corrupted, Path::new("flip"), |_, _| {});
        assert!(
            result.is_err(),
            "flip at {offset} of {} went unnoticed",
            bytes.len()
        );
    }
    for length in 0..bytes.len() {
        let result = checkpoint::decode_bytes(&bytes[..length], Path::new("cut"), |_, _| {});
        assert!(result.is_err(), "truncation to {length} went unnoticed");
    }
    let message = checkpoint::decode_bytes(
        &bytes[..bytes.len() / 2],
        Path::new("some/file.ckp"),
        |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        message.contains("some/file.ckp") && message.contains("offset"),
        "{message}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn checkpoint_decoder_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = checkpoint::decode_bytes(&bytes, Path::new("garbage"), |_, _| {});
    }

    #[test]
    fn checkpoint_round_trips_any_pairs(
        pairs in proptest::collection::btree_map(
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(any::<u8>(), 0..3000),
            0..200,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = write_checkpoint(dir.path(), 7, &pairs);
        let mut read_back = BTreeMap::new();
        read(&path, |k, v| { read_back.insert(k, v); });
        prop_assert_eq!(read_back, pairs);
    }
}

fn set_entry(index: u64, key: u64, value: u64) -> Entry {
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(Command::Set {
            key: format!("k{key}").into_bytes(),
            value: format!("v{value}").into_bytes(),
        }),
    }
}

fn open(
    dir: &Path,
    model: StateModel,
    every: u64,
    allow_missing: bool,
) -> anyhow::Result<StateMachine> {
    let (requests, _) = tokio::sync::mpsc::unbounded_channel();
    let mut config = StateMachineConfig::new(model, every);
    config.allow_missing_checkpoint = allow_missing;
    StateMachine::open(dir, config, requests)
}

/// The oracle digest after applying commands 1..=upto of `commands`.
fn oracle_digest(commands: &[(u64, u64)], upto: usize) -> (u64, u64) {
    let mut map = BTreeMap::new();
    for (key, value) in &commands[..upto] {
        map.insert(
            format!("k{key}").into_bytes(),
            format!("v{value}").into_bytes(),
        );
    }
    let sum = map
        .iter()
        .fold(0u64, |sum, (k, v)| sum.wrapping_add(pair_hash(k, v)));
    (map.len() as u64, sum)
}

async fn recovery_falls_back_to_previous_checkpoint(model: StateModel) {
    let dir = tempfile::tempdir().unwrap();
    let commands: Vec<(u64, u64)> = (0..350u64).map(|i| ((i * 7919) % 97, i)).collect();
    {
        let mut state_machine = open(dir.path(), model, 100, false).unwrap();
        for (position, (key, value)) in commands.iter().enumerate() {
            state_machine
                .apply(vec![set_entry(position as u64 + 1, *key, *value)])
                .await
                .unwrap();
            // Let each checkpoint reach openraft (and so become durable) as the node would.
            if (position + 1) % 100 == 0 {
                let snapshot = state_machine
                    .get_snapshot_builder()
                    .await
                    .build_snapshot()
                    .await
                    .unwrap();
                assert_eq!(
                    snapshot.meta.last_log_id,
                    Some(log_id(position as u64 + 1)),
                    "checkpoint at the exact index"
                );
            }
        }
        let shared = state_machine.shared();
        let digest = shared.store.digest();
        assert_eq!((digest.keys, digest.sum), oracle_digest(&commands, 350));
    }
    // Two are kept: 200 and 300.
    let kept: Vec<u64> = published(dir.path())
        .into_iter()
        .map(|(index, _)| index)
        .collect();
    assert_eq!(kept, vec![300, 200]);

    // Intact: recovery loads 300.
    {
        let mut state_machine = open(dir.path(), model, 100, false).unwrap();
        let (applied, _) = state_machine.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(300)));
        let digest = state_machine.shared().store.digest();
        assert_eq!((digest.keys, digest.sum), oracle_digest(&commands, 300));
    }

    // Corrupt the newest in the middle: recovery loads 200 and quarantines 300.
    let newest = published_file(dir.path(), 300);
    let previous = published_file(dir.path(), 200);
    let mut bytes = std::fs::read(&newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&newest, &bytes).unwrap();
    {
        let mut state_machine = open(dir.path(), model, 100, false).unwrap();
        let (applied, _) = state_machine.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(200)));
        let digest = state_machine.shared().store.digest();
        assert_eq!((digest.keys, digest.sum), oracle_digest(&commands, 200));
        let current = state_machine
            .get_current_snapshot()
            .await
            .unwrap()
            .expect("a snapshot");
        assert_eq!(current.meta.last_log_id, Some(log_id(200)));
    }
    assert!(!newest.exists());
    let version_dir = newest.parent().unwrap();
    let mut quarantined = version_dir.as_os_str().to_owned();
    quarantined.push(".corrupt");
    assert!(
        Path::new(&quarantined).join(checkpoint::FILE_NAME).exists(),
        "kept for inspection"
    );

    // Corrupt the last one too: refuse to start empty, with a clear message, unless allowed.
    let length = std::fs::metadata(&previous).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&previous)
        .unwrap()
        .set_len(length - 5)
        .unwrap();
    let error = open(dir.path(), model, 100, false)
        .err()
        .expect("must refuse")
        .to_string();
    assert!(
        error.contains("none verifies") && error.contains("--allow-missing-checkpoint"),
        "{error}"
    );
    assert!(previous.exists(), "refusing must not touch the files");
    let mut state_machine = open(dir.path(), model, 100, true).unwrap();
    assert_eq!(state_machine.applied_state().await.unwrap().0, None);
    // Started empty, it still checkpoints (the unverifiable version does not block newer ones).
    for position in 0..100u64 {
        state_machine
            .apply(vec![set_entry(position + 1, position, position)])
            .await
            .unwrap();
    }
    let snapshot = state_machine
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(100)));
    drop(state_machine);
    let mut state_machine = open(dir.path(), model, 100, false).unwrap();
    assert_eq!(
        state_machine.applied_state().await.unwrap().0,
        Some(log_id(100))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_model_recovers_from_previous_checkpoint_when_newest_is_corrupt() {
    recovery_falls_back_to_previous_checkpoint(StateModel::Concurrent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_model_recovers_from_previous_checkpoint_when_newest_is_corrupt() {
    recovery_falls_back_to_previous_checkpoint(StateModel::Blocking).await;
}

/// The concurrent checkpoint holds the state at its exact index even though later commands are
/// applied while it is being written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checkpoint_is_exact_while_applying_continues() {
    let dir = tempfile::tempdir().unwrap();
    let mut state_machine = open(dir.path(), StateModel::Concurrent, 5000, false).unwrap();
    let commands: Vec<(u64, u64)> = (0..9000u64).map(|i| (i % 3001, i)).collect();
    let mut builder = None;
    for (position, (key, value)) in commands.iter().enumerate() {
        state_machine
            .apply(vec![set_entry(position as u64 + 1, *key, *value)])
            .await
            .unwrap();
        if position + 1 == 5000 {
            // Taken now (the snapshot was taken at 5000); finish writing it only later.
            builder = Some(state_machine.get_snapshot_builder().await);
        }
    }
    let snapshot = builder.unwrap().build_snapshot().await.unwrap();
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(5000)));
    let mut pairs = BTreeMap::new();
    read(&published_file(dir.path(), 5000), |k, v| {
        pairs.insert(k, v);
    });
    let sum = pairs
        .iter()
        .fold(0u64, |sum, (k, v)| sum.wrapping_add(pair_hash(k, v)));
    assert_eq!((pairs.len() as u64, sum), oracle_digest(&commands, 5000));
}
