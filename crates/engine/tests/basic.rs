//! Basic operations, checkpoint and recovery with every strategy.

use std::time::Duration;

use prefixkv_engine::{Store, StoreConfig, Strategy};

fn small_config(dir: &std::path::Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = 1 << 10;
    config.log_memory_bytes = 8 << 20;
    config.log_page_bytes = 64 << 10;
    config.flusher_threads = 3;
    config
}

#[test]
fn read_upsert_rmw_delete() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut out = Vec::new();
    assert!(!session.read(b"a", &mut out).unwrap());
    session.upsert(b"a", b"1").unwrap();
    assert!(session.read(b"a", &mut out).unwrap());
    assert_eq!(out, b"1");
    session
        .upsert(b"a", b"a much longer value that does not fit in place")
        .unwrap();
    assert!(session.read(b"a", &mut out).unwrap());
    assert_eq!(out, b"a much longer value that does not fit in place");
    session
        .rmw(b"counter", |old, new| {
            assert!(old.is_none());
            new.extend_from_slice(&1u64.to_le_bytes());
        })
        .unwrap();
    for _ in 0..10 {
        session
            .rmw(b"counter", |old, new| {
                let value = u64::from_le_bytes(old.unwrap().try_into().unwrap());
                new.extend_from_slice(&(value + 1).to_le_bytes());
            })
            .unwrap();
    }
    assert!(session.read(b"counter", &mut out).unwrap());
    assert_eq!(out, 11u64.to_le_bytes());
    assert!(session.delete(b"a").unwrap());
    assert!(!session.delete(b"a").unwrap());
    assert!(!session.read(b"a", &mut out).unwrap());
    session.upsert(b"a", b"back").unwrap();
    assert!(session.read(b"a", &mut out).unwrap());
    assert_eq!(out, b"back");
    assert_eq!(session.serial(), 22);
}

#[test]
fn checkpoint_and_recover_every_strategy() {
    for strategy in Strategy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let id;
        {
            let store = Store::open(small_config(dir.path())).unwrap();
            let mut session = store.start_session();
            id = session.id();
            for index in 0..1000u64 {
                session
                    .upsert(&index.to_be_bytes(), &(index * 2).to_le_bytes())
                    .unwrap();
            }
            for index in 0..100u64 {
                session.delete(&index.to_be_bytes()).unwrap();
            }
            session.suspend();
            let token = store.checkpoint(strategy).unwrap();
            let report = store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
            assert_eq!(report.version, 1);
            assert_eq!(report.session_points[&id], 1100, "{strategy}");
            assert_eq!(session.committed_serial(), 1100);
            // After the checkpoint: not durable.
            session.upsert(&5000u64.to_be_bytes(), b"late").unwrap();
        }
        let store = Store::open(small_config(dir.path())).unwrap();
        let info = store.recovery_info().unwrap();
        assert_eq!(info.version, 1);
        assert_eq!(info.session_commit_points[&id], 1100);
        assert_eq!(store.version(), 2);
        let (mut session, serial) = store.resume_session(id).unwrap();
        assert_eq!(serial, 1100);
        let mut out = Vec::new();
        for index in 0..1000u64 {
            let found = session.read(&index.to_be_bytes(), &mut out).unwrap();
            assert_eq!(found, index >= 100, "{strategy} key {index}");
            if found {
                assert_eq!(out, (index * 2).to_le_bytes());
            }
        }
        assert!(!session.read(&5000u64.to_be_bytes(), &mut out).unwrap());
        assert_eq!(session.serial(), 2101);
    }
}

#[test]
fn protected_idle_session_holds_the_checkpoint_until_it_suspends() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    session.upsert(b"k", b"v").unwrap(); // now protected, and not operating
    let token = store.checkpoint(Strategy::Persian).unwrap();
    // The first checkpoint cannot pass PREPARE while the session neither refreshes nor suspends.
    assert!(matches!(
        store.checkpoint(Strategy::Blocking),
        Err(prefixkv_engine::EngineError::CheckpointInProgress)
    ));
    assert!(matches!(
        store.wait_for_commit(token, Duration::from_millis(50)),
        Err(prefixkv_engine::EngineError::Timeout)
    ));
    session.suspend();
    let report = store
        .wait_for_commit(token, Duration::from_secs(60))
        .unwrap();
    assert_eq!(report.session_points[&session.id()], 1);
    assert_eq!(session.committed_serial(), 1);
    // The next operation resumes the session in the new version.
    session.upsert(b"k", b"w").unwrap();
    assert_eq!(store.version(), 2);
}

#[test]
fn session_limit_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let mut sessions: Vec<_> = (0..prefixkv_engine::MAX_OPEN_SESSIONS)
        .map(|_| store.try_start_session().unwrap())
        .collect();
    match store.try_start_session() {
        Err(prefixkv_engine::EngineError::TooManySessions { limit }) => {
            assert_eq!(limit, prefixkv_engine::MAX_OPEN_SESSIONS)
        }
        Err(other) => panic!("expected TooManySessions, got {other}"),
        Ok(_) => panic!("expected TooManySessions, got a session"),
    }
    // A freed slot is usable again, and the sessions still work.
    sessions.pop();
    let mut again = store.try_start_session().unwrap();
    again.upsert(b"k", b"v").unwrap();
    sessions[0].upsert(b"k2", b"v2").unwrap();
}

#[test]
fn paced_checkpoints_complete_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path());
    config.checkpoint_write_bytes_per_s = Some(1 << 20);
    let values = 2_000u64;
    let value = [7u8; 512];
    {
        let store = Store::open(config.clone()).unwrap();
        let mut session = store.start_session();
        for index in 0..values {
            session.upsert(&index.to_be_bytes(), &value).unwrap();
        }
        session.suspend();
        let started = std::time::Instant::now();
        let token = store.checkpoint(Strategy::Persian).unwrap();
        let report = store
            .wait_for_commit(token, Duration::from_secs(60))
            .unwrap();
        // The pacer sleeps after each write until the bytes so far fit the rate, so the
        // checkpoint cannot publish before its entry bytes alone (a lower bound on what it wrote)
        // took at 1 MiB/s. A lower bound only, which sleeping guarantees on any machine.
        let entry_bytes = values * value.len() as u64;
        assert!(report.bytes >= entry_bytes, "{report:?}");
        let floor = Duration::from_secs_f64(entry_bytes as f64 / f64::from(1u32 << 20));
        assert!(
            started.elapsed() >= floor,
            "{} bytes in {:?}, floor {floor:?}",
            report.bytes,
            started.elapsed()
        );
    }
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    let mut out = Vec::new();
    for index in 0..values {
        assert!(session.read(&index.to_be_bytes(), &mut out).unwrap());
        assert_eq!(out, value);
    }
}

#[test]
fn a_write_rate_below_the_minimum_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path());
    config.checkpoint_write_bytes_per_s = Some(1000);
    let error = Store::open(config).err().expect("a tiny rate is refused");
    assert!(
        error.to_string().contains("checkpoint_write_bytes_per_s"),
        "{error}"
    );
}

#[test]
fn the_largest_value_fits_and_one_byte_more_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let key = b"big";
    let max_value_bytes = store.max_value_bytes(key.len()).unwrap();
    assert!(max_value_bytes > 0);
    let value = vec![5u8; max_value_bytes];
    session.upsert(key, &value).unwrap();
    let mut out = Vec::new();
    assert!(session.read(key, &mut out).unwrap());
    assert_eq!(out, value);
    let error = session
        .upsert(key, &vec![5u8; max_value_bytes + 1])
        .unwrap_err();
    assert!(
        matches!(error, prefixkv_engine::EngineError::RecordTooLarge { max_value_bytes: m, .. } if m == max_value_bytes),
        "{error}"
    );
    // The failed write changed nothing.
    assert!(session.read(key, &mut out).unwrap());
    assert_eq!(out, value);
    assert!(store.max_value_bytes(usize::MAX).is_none());
}

#[test]
fn ended_sessions_leave_the_manifests_once_a_checkpoint_holds_their_operations() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let checkpoint = |store: &std::sync::Arc<Store>| {
        let token = store.checkpoint(Strategy::Persian).unwrap();
        store
            .wait_for_commit(token, Duration::from_secs(60))
            .unwrap()
    };
    let mut kept = store.start_session();
    let kept_id = kept.id();
    kept.upsert(b"kept", b"1").unwrap();
    kept.suspend();
    let ended_id = {
        let mut ended = store.start_session();
        ended.upsert(b"ended", b"1").unwrap();
        ended.upsert(b"ended", b"2").unwrap();
        ended.id()
    };
    // The first checkpoint after the drop records the ended session's final point...
    let first = checkpoint(&store);
    assert_eq!(first.session_points.get(&ended_id), Some(&2));
    assert_eq!(first.session_points.get(&kept_id), Some(&1));
    // ...and then the store forgets it; the suspended session stays.
    assert!(matches!(
        store.resume_session(ended_id),
        Err(prefixkv_engine::EngineError::UnknownSession(_))
    ));
    let second = checkpoint(&store);
    assert!(!second.session_points.contains_key(&ended_id));
    assert_eq!(second.session_points.get(&kept_id), Some(&1));
    drop(kept);
    drop(store);

    // After a restart the suspended-then-dropped session is recovered from the manifest; an
    // application that will never resume it forgets it explicitly.
    let store = Store::open(small_config(dir.path())).unwrap();
    assert!(store
        .recovery_info()
        .unwrap()
        .session_commit_points
        .contains_key(&kept_id));
    store.forget_session(kept_id).unwrap();
    let third = checkpoint(&store);
    assert!(third.session_points.is_empty(), "{third:?}");
    let mut session = store.start_session();
    let mut out = Vec::new();
    assert!(session.read(b"ended", &mut out).unwrap());
    assert_eq!(out, b"2");
    // An active session cannot be forgotten.
    let id = session.id();
    assert!(store.forget_session(id).is_err());
}

#[test]
fn a_log_full_of_live_data_fails_writes_after_the_memory_wait_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path());
    // The smallest budget (8 pages of 64 KiB) and a short wait: distinct keys are all live, so
    // compaction can free nothing and the writer must get a clear error, not hang.
    config.log_memory_bytes = 8 * (64 << 10);
    config.memory_wait_limit = Duration::from_millis(200);
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    let started = std::time::Instant::now();
    let mut written = 0u64;
    let error = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no OutOfMemory after {written} distinct keys"
        );
        match session.upsert(&written.to_be_bytes(), &[7u8; 100]) {
            Ok(()) => written += 1,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(error, prefixkv_engine::EngineError::OutOfMemory { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("memory_wait_limit"), "{error}");
    // What was acknowledged is still there.
    let mut out = Vec::new();
    assert!(session.read(&0u64.to_be_bytes(), &mut out).unwrap());
    assert!(session
        .read(&(written - 1).to_be_bytes(), &mut out)
        .unwrap());

    let mut bad = small_config(dir.path());
    bad.memory_wait_limit = Duration::ZERO;
    let refused = Store::open(bad)
        .err()
        .expect("a zero wait limit is refused");
    assert!(
        refused.to_string().contains("memory_wait_limit"),
        "{refused}"
    );
}
