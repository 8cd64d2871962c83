//! Per-session CPR bookkeeping shared between a session and the checkpoint driver.
//!
//! Invariant: `version` only grows; `last_point` is the session's CPR point for `version - 1` and is
//! written exactly once per version, either by the session when it adopts the new version (its last
//! serial executed in the old one) or by the driver on behalf of a session that was idle
//! (`idle_serial`), both under the same mutex, so the two can never record different points.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use crate::{EngineError, SessionId};

/// CPR bookkeeping of one session, shared with the checkpoint driver.
pub(crate) struct SessionShared {
    pub(crate) id: SessionId,
    pub(crate) points: Mutex<SessionPoints>,
    /// Serial covered by the newest durable checkpoint.
    pub(crate) committed: AtomicU64,
}

pub(crate) struct SessionPoints {
    /// The version the session runs as (possibly adopted on its behalf while it was idle).
    pub(crate) version: u64,
    /// CPR point for version `version - 1`.
    pub(crate) last_point: u64,
    /// `Some(last completed serial)` while the session holds no epoch protection.
    pub(crate) idle_serial: Option<u64>,
    /// A `Session` object exists for this id.
    pub(crate) active: bool,
    /// The last `Session` object for this id was dropped in this process (not merely suspended):
    /// once a checkpoint covers its final serial, the store forgets the id.
    pub(crate) ended: bool,
    /// The session's CPR point in the checkpoint the last rollback returned to (0 if none): the
    /// serial a session resets to when it adopts the new world-line.
    pub(crate) surviving: u64,
    /// The world-line these points count in: a session whose own world-line is older has not
    /// adopted the last rollback yet, and its serial counter still runs in the old numbering.
    pub(crate) world_line: u64,
}

impl SessionShared {
    pub(crate) fn new(id: SessionId, version: u64, serial: u64, world_line: u64) -> Self {
        SessionShared {
            id,
            points: Mutex::new(SessionPoints {
                version,
                last_point: serial,
                idle_serial: Some(serial),
                active: true,
                ended: false,
                surviving: 0,
                world_line,
            }),
            committed: AtomicU64::new(0),
        }
    }

    pub(crate) fn recovered(id: SessionId, version: u64, point: u64) -> Self {
        let shared = SessionShared::new(id, version, point, 0);
        shared.points.lock().active = false;
        shared.committed.store(point, Ordering::SeqCst);
        shared
    }

    /// Marks a recovered session active again; returns its serial.
    pub(crate) fn claim(&self) -> Result<u64, EngineError> {
        let mut points = self.points.lock();
        if points.active {
            return Err(EngineError::InvalidArgument(format!(
                "session {} is already active; drop the other Session first",
                self.id
            )));
        }
        points.active = true;
        points.ended = false;
        Ok(points.idle_serial.expect("inactive sessions are idle"))
    }

    /// Whether the store may forget this session once checkpoint points `recorded_point` for it:
    /// it ended, and that point covers its final serial, so nothing of it is left to commit.
    pub(crate) fn finished_by(&self, recorded_point: u64) -> bool {
        let points = self.points.lock();
        points.ended
            && !points.active
            && points
                .idle_serial
                .is_some_and(|final_serial| final_serial <= recorded_point)
    }

    /// A rollback to a checkpoint where this session's CPR point is `surviving` (0 if it had
    /// none): its operations after `surviving` are gone and it runs as `next_version` from now
    /// on, so its CPR point for `next_version - 1` (what the first checkpoint after the rollback
    /// records, if the session does nothing) is `surviving`; so is its commit point. Called under
    /// the registry lock before the new world-line is published.
    pub(crate) fn roll_back(&self, next_version: u64, surviving: u64, world_line: u64) {
        let mut points = self.points.lock();
        points.world_line = world_line;
        points.version = points.version.max(next_version);
        points.last_point = surviving;
        if points.idle_serial.is_some() {
            points.idle_serial = Some(surviving);
        }
        points.surviving = surviving;
        self.committed.store(surviving, Ordering::SeqCst);
    }

    /// The last serial a session completed, as idle serial: `serial` if the session counts in the
    /// current world-line (`session_world_line`), else its surviving serial (its serial counter
    /// still runs in the numbering a rollback discarded). Caller holds `points`.
    pub(crate) fn idle_serial_of(
        points: &SessionPoints,
        session_world_line: u64,
        serial: u64,
    ) -> u64 {
        if points.world_line == session_world_line {
            serial
        } else {
            points.surviving
        }
    }

    /// The session's CPR point for checkpoint `checkpoint_version`, called by the driver in
    /// WAIT_FLUSH. A session that never adopted v+1 is idle (every protected session adopted it
    /// before WAIT_PENDING), so its point is its last completed serial, adopted on its behalf.
    pub(crate) fn point_for(&self, checkpoint_version: u64) -> u64 {
        let mut points = self.points.lock();
        if points.version <= checkpoint_version {
            let idle = points
                .idle_serial
                .expect("a session that did not adopt v+1 by WAIT_FLUSH must be idle");
            points.version = checkpoint_version + 1;
            points.last_point = idle;
        }
        debug_assert_eq!(points.version, checkpoint_version + 1);
        points.last_point
    }
}
