//! Seals, and checkpoints of sealed versions: the version switch of a checkpoint taken apart
//! from its image, so that versions can be closed as often as a caller needs (DPR seals one
//! whenever a batch carries a larger version) while images are written one at a time behind
//! them, each either whole or a delta on top of the previous one.
//!
//! Invariants:
//! - A seal runs only from REST and holds `seal_lock` from its check of the phase to its REST of
//!   the next version; a classic checkpoint takes that lock to claim the state machine (and
//!   seals wait while `classic_running`), a rollback holds it across its THROW. So a seal's
//!   phases never interleave with another state machine's.
//! - When a seal returns, no session runs as the sealed version or below, and every session's
//!   CPR point in it is in `sealed`: recorded under `seal_lock`, before any session can move to
//!   a later version (only a later seal moves them).
//! - With `rollback_ready` (required), no operation changes a record of an older version in
//!   place, so the log keeps the final state of every sealed version until a checkpoint of it
//!   is written, whenever that is (compaction keeps what versions above its floor need).
//! - `sealed` holds only unpublished versions: publishing one forgets it and every older one (a
//!   checkpoint of an older sealed version can no longer be written: it would not be the newest
//!   on disk), and a rollback forgets them all (they are above its target).

use std::time::{Duration, Instant};

use super::{check_cookie, Store};
use crate::report::{CheckpointToken, Scope};
use crate::state::{Phase, SystemState};
use crate::EngineError;

impl Store {
    /// Closes the current version without writing anything: runs the CPR phases PREPARE(v),
    /// IN_PROGRESS(v+1), WAIT_PENDING(v+1) and returns in REST(v+1) with `v`, once no session
    /// runs as `v` any more. Write its checkpoint later with [`Store::checkpoint_sealed`]
    /// (versions may be sealed faster than they are written; each keeps its own state).
    ///
    /// Requires [`StoreConfig::rollback_ready`](crate::StoreConfig::rollback_ready). Waits,
    /// until `timeout`, while another state machine changes phases (a classic checkpoint's
    /// switch, a rollback's THROW and PURGE): then `CheckpointInProgress`. A checkpoint of a
    /// sealed version being written does not hold a seal up.
    ///
    /// Do not call it from a thread whose own session holds epoch protection (suspend it
    /// first): the switch waits for every protected session to refresh.
    pub fn seal(&self, timeout: Duration) -> Result<u64, EngineError> {
        let shared = &self.shared;
        if !shared.config.rollback_ready {
            return Err(EngineError::InvalidArgument(
                "seal needs StoreConfig::rollback_ready = true: without it a write may change a \
                 sealed version's record in place before its checkpoint reads it"
                    .into(),
            ));
        }
        let deadline = Instant::now() + timeout;
        loop {
            {
                let _seal = shared.machine.seal_lock();
                let state = shared.state.load();
                if state.phase == Phase::Rest && !shared.machine.classic_running() {
                    return self.switch_from(state);
                }
            }
            if Instant::now() >= deadline {
                return Err(EngineError::CheckpointInProgress);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The seal's phases from `state` (REST(v)), under `seal_lock`.
    fn switch_from(&self, state: SystemState) -> Result<u64, EngineError> {
        let shared = &self.shared;
        let version = state.version;
        if version + 1 >= u32::MAX as u64 {
            return Err(EngineError::InvalidArgument(
                "record versions are 32 bits and this store has used them all".into(),
            ));
        }
        // REST is stored only once every protected session saw WAIT_PENDING: no operation of
        // `version` is in flight, exactly as when a classic checkpoint enters WAIT_FLUSH.
        crate::checkpoint::switch_version(shared, version, Phase::Rest);
        let points = crate::checkpoint::session_points(shared, version);
        shared.machine.record_sealed(version, points);
        Ok(version)
    }

    /// Versions sealed and not yet published, ascending.
    pub fn sealed_versions(&self) -> Vec<u64> {
        self.shared.machine.sealed_versions()
    }

    /// Starts writing the checkpoint of sealed version `version` on a checkpoint thread and
    /// returns at once; [`Store::wait_for_commit`] reports it. `cookie` as for
    /// [`Store::checkpoint_with_cookie`]. One checkpoint is written at a time
    /// (`CheckpointInProgress` otherwise); seals go on meanwhile.
    ///
    /// Refused (`InvalidArgument`) for a version that is not sealed and unpublished, and for
    /// [`Scope::Since`] a base that is not a published checkpoint below `version` or a store that
    /// prunes checkpoints itself.
    pub fn checkpoint_sealed(
        &self,
        version: u64,
        scope: Scope,
        cookie: Vec<u8>,
    ) -> Result<CheckpointToken, EngineError> {
        let shared = &self.shared;
        check_cookie(&cookie)?;
        if let Scope::Since(base) = scope {
            if shared.config.keep_checkpoints != usize::MAX {
                return Err(EngineError::InvalidArgument(
                    "a delta checkpoint needs keep_checkpoints = usize::MAX: the store's own \
                     pruning could delete the base it is applied on"
                        .into(),
                ));
            }
            if base >= version || !shared.rollback.is_target(base) {
                return Err(EngineError::InvalidArgument(format!(
                    "a delta of v{version} needs a base below it that this store published and \
                     still holds; v{base} is not one"
                )));
            }
        }
        if !shared.machine.try_claim() {
            return Err(EngineError::CheckpointInProgress);
        }
        let Some(points) = shared.machine.sealed_points(version) else {
            // Given back with a notification: a rollback may be waiting for it.
            shared.release_state_machine();
            return Err(EngineError::InvalidArgument(format!(
                "v{version} is not a sealed, unpublished version (those are {:?})",
                self.sealed_versions()
            )));
        };
        self.spawn_checkpoint(version, move |shared, started| {
            crate::checkpoint::run_sealed(shared, version, scope, points, cookie, started)
        })
    }
}
