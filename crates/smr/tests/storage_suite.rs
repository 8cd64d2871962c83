//! openraft's own conformance suite for log stores and state machines, run against our disk log
//! store and both state models.

use openraft::testing::{StoreBuilder, Suite};
use prefixkv_smr::log_store::LogStore;
use prefixkv_smr::state_machine::{StateMachine, StateMachineConfig};
use prefixkv_smr::types::{StorageError, TypeConfig};
use prefixkv_smr::StateModel;

struct Builder {
    model: StateModel,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = LogStore::open(&dir.path().join("log")).expect("open log");
        let (requests, _) = tokio::sync::mpsc::unbounded_channel();
        let config = StateMachineConfig::new(self.model, 3);
        let state_machine = StateMachine::open(&dir.path().join("checkpoints"), config, requests)
            .expect("open state machine");
        Ok((dir, log, state_machine))
    }
}

#[test]
fn openraft_suite_concurrent_model() {
    Suite::test_all(Builder {
        model: StateModel::Concurrent,
    })
    .expect("suite");
}

#[test]
fn openraft_suite_blocking_model() {
    Suite::test_all(Builder {
        model: StateModel::Blocking,
    })
    .expect("suite");
}
