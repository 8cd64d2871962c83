//! Model test: random operation sequences against a BTreeMap, including checkpoint + reopen with
//! every strategy (the recovered store must equal the model, and serials must resume).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use prefixkv_engine::{Store, Strategy as CheckpointStrategy};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Action {
    Upsert(u8, Vec<u8>),
    Delete(u8),
    Append(u8, u8),
    Read(u8),
    CheckpointAndReopen(usize),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0u8..24, proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(key, value)| Action::Upsert(key, value)),
        2 => (0u8..24).prop_map(Action::Delete),
        2 => (0u8..24, any::<u8>()).prop_map(|(key, byte)| Action::Append(key, byte)),
        2 => (0u8..24).prop_map(Action::Read),
        1 => (0usize..5).prop_map(Action::CheckpointAndReopen),
    ]
}

fn key_bytes(key: u8) -> Vec<u8> {
    // Variable-length keys, some sharing prefixes.
    vec![b'k'; 1 + key as usize % 11]
        .into_iter()
        .chain([key])
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::env_count("PREFIXKV_MODEL_CASES", 48) as u32,
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_btreemap_across_checkpoints(actions in proptest::collection::vec(action(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(common::small_config(dir.path())).unwrap();
        let mut session = store.start_session();
        let mut model: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
        let mut out = Vec::new();
        for action in actions {
            match action {
                Action::Upsert(key, value) => {
                    session.upsert(&key_bytes(key), &value).unwrap();
                    model.insert(key, value);
                }
                Action::Delete(key) => {
                    let existed = session.delete(&key_bytes(key)).unwrap();
                    prop_assert_eq!(existed, model.remove(&key).is_some());
                }
                Action::Append(key, byte) => {
                    session.rmw(&key_bytes(key), |old, new| {
                        new.extend_from_slice(old.unwrap_or(&[]));
                        new.push(byte);
                    }).unwrap();
                    model.entry(key).or_default().push(byte);
                }
                Action::Read(key) => {
                    let found = session.read(&key_bytes(key), &mut out).unwrap();
                    prop_assert_eq!(found.then(|| out.clone()), model.get(&key).cloned());
                }
                Action::CheckpointAndReopen(strategy) => {
                    let strategy = CheckpointStrategy::ALL[strategy];
                    let id = session.id();
                    let serial = session.serial();
                    session.suspend();
                    let token = store.checkpoint(strategy).unwrap();
                    let report = store.wait_for_commit(token, Duration::from_secs(60)).unwrap();
                    prop_assert_eq!(report.session_points[&id], serial);
                    drop(session);
                    drop(store);
                    store = Store::open(common::small_config(dir.path())).unwrap();
                    let (resumed, recovered_serial) = store.resume_session(id).unwrap();
                    prop_assert_eq!(recovered_serial, serial);
                    session = resumed;
                    for key in 0u8..24 {
                        let found = session.read(&key_bytes(key), &mut out).unwrap();
                        prop_assert_eq!(found.then(|| out.clone()), model.get(&key).cloned(), "strategy {} key {}", strategy, key);
                    }
                }
            }
        }
    }
}
