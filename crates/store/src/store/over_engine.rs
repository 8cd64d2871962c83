//! A store over an engine that its owner opened and keeps durable itself: a cluster worker's
//! engine, which the DPR state object checkpoints (one checkpoint per DPR version) and restores.
//!
//! Invariants: such a store has no operation log (mode [`Durability::None`]), takes no directory
//! lock (the owner holds the engine's directory) and ran no recovery (the owner did). Writes keep
//! the store's rules for atomicity (a transaction holds its keys' stripe locks; an exclusive body
//! holds the exec gate), so the command layer runs on it unchanged. Checkpoints are the owner's:
//! [`DurableStore::checkpoint`] on such a store would write an engine checkpoint without the
//! owner's bookkeeping, so its owner must not offer it to clients.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLock;
use parking_lot::Mutex;
use prefixkv_engine::{Store as Engine, Strategy};

use super::{DurableStore, STRIPES};
use crate::{Durability, RECORD_SPLIT_BYTES};

impl DurableStore {
    /// Wraps `engine`, opened, recovered and checkpointed by its owner (see the module docs):
    /// mode [`Durability::None`], no log, no directory lock, no recovery. Build a new wrapper
    /// whenever the owner replaces or rolls back the engine's contents, so that nothing the
    /// application derived from the old contents (key counts) outlives them.
    pub fn over_engine(engine: Arc<Engine>) -> Arc<DurableStore> {
        Arc::new(DurableStore {
            engine,
            oplog: None,
            durability: Durability::None,
            strategy: Strategy::Persian,
            keep_checkpoints: usize::MAX,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            exec_gate: ShardedLock::new(()),
            record_split_bytes: RECORD_SPLIT_BYTES,
            kept_covered: Mutex::new(VecDeque::new()),
            checkpoint_lock: Mutex::new(()),
            writes: AtomicU64::new(0),
            cookie_extra: Mutex::new(None),
            _lock: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_over_an_engine_writes_to_it_and_reports_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = prefixkv_engine::StoreConfig::new(dir.path());
        config.index_buckets = 1 << 10;
        config.log_memory_bytes = 16 << 20;
        config.rollback_ready = true;
        let engine = Engine::open(config).unwrap();
        let store = DurableStore::over_engine(Arc::clone(&engine));
        assert_eq!(store.durability(), Durability::None);
        let mut session = store.session().unwrap();
        let mut txn = session.begin(&[b"k"]);
        assert!(!txn.put(b"k", b"v").unwrap());
        assert!(txn.commit().unwrap().is_some());
        let version = session.engine_version();
        assert_eq!(version, engine.version());
        let mut out = Vec::new();
        assert!(engine.start_session().read(b"k", &mut out).unwrap());
        assert_eq!(out, b"v");
        // The engine's owner seals; the store's sessions follow the engine's version.
        session.suspend();
        engine.seal(std::time::Duration::from_secs(5)).unwrap();
        let mut txn = session.begin(&[b"k"]);
        txn.put(b"k", b"w").unwrap();
        txn.commit().unwrap();
        assert_eq!(session.engine_version(), version + 1);
    }
}
