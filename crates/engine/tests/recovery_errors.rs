//! Recovery fails closed: a damaged newest checkpoint falls back to the previous one (and says
//! so); if no checkpoint verifies, `Store::open` refuses with `EngineError::Corrupt`.

mod common;

use std::time::Duration;

use prefixkv_engine::{EngineError, Store, Strategy};

fn checkpoint_dirs(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("checkpoints"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    dirs.sort();
    dirs
}

fn damage_segments(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "MANIFEST" {
            let mut bytes = std::fs::read(&path).unwrap();
            if let Some(byte) = bytes.get_mut(20) {
                *byte ^= 0x55;
            } else {
                bytes.push(1);
            }
            std::fs::write(&path, bytes).unwrap();
        }
    }
}

#[test]
fn damaged_newest_checkpoint_falls_back_and_all_damaged_refuses() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(common::small_config(dir.path())).unwrap();
        let mut session = store.start_session();
        session.upsert(b"first", b"1").unwrap();
        session.suspend();
        let token = store.checkpoint(Strategy::Persian).unwrap();
        store
            .wait_for_commit(token, Duration::from_secs(60))
            .unwrap();
        session.upsert(b"second", b"2").unwrap();
        session.suspend();
        let token = store.checkpoint(Strategy::Snapshot).unwrap();
        store
            .wait_for_commit(token, Duration::from_secs(60))
            .unwrap();
    }
    let dirs = checkpoint_dirs(dir.path());
    assert_eq!(dirs.len(), 2);
    damage_segments(&dirs[1]);
    {
        let store = Store::open(common::small_config(dir.path())).unwrap();
        let info = store.recovery_info().unwrap();
        assert_eq!(info.version, 1);
        assert!(
            info.fell_back.as_deref().unwrap().contains("v2"),
            "{:?}",
            info.fell_back
        );
        let mut session = store.start_session();
        let mut out = Vec::new();
        assert!(session.read(b"first", &mut out).unwrap());
        assert!(!session.read(b"second", &mut out).unwrap());
    }
    // v2 is still damaged; damage v1 too (not v2 again: XOR twice would repair it).
    damage_segments(&dirs[0]);
    match Store::open(common::small_config(dir.path())) {
        Err(EngineError::Corrupt { .. }) => {}
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(_) => panic!("opened a store whose every checkpoint is damaged"),
    }
}
