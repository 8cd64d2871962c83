//! The durability policy and the durability rule: every per-mode decision of the store, and the
//! one answer to "is this acknowledged write durable yet?".
//!
//! A mode answers four questions, and nothing else in prefixkv asks "which mode is this?":
//! does a write go to the operation log ([`Durability::uses_oplog`]), with which sync policy
//! ([`Durability::log_policy`]); is a write acknowledged only after its log record is synced
//! ([`Durability::acknowledge_after_sync`]); are checkpoints taken periodically
//! ([`Durability::checkpoints_periodically`]); is a final checkpoint taken at a clean shutdown
//! ([`Durability::checkpoint_at_shutdown`]). [`Durability::statement`] says, in one sentence,
//! which acknowledged writes a crash can lose.
//!
//! The rule ([`DurableStore::is_durable`]; [`DurableStore::wait_durable`] makes it true): a
//! write, known by its [`WritePosition`] and the engine session that made it, is durable once
//! - its log record (its group's last, which recovery applies with the rest of the group) is
//!   synced: the log's durable LSN reached it; or
//! - a durable checkpoint holds it: the making session's commit point (its committed serial,
//!   read through a [`CommitWatch`]) reached its serial.
//!
//! Invariants: either condition implies that recovery brings the write back (`store` module
//! docs, steps 2 and 3: a covered record is in the checkpoint, a synced one is replayed); the
//! committed serial read is always the making session's (a script thread's writes carry that
//! thread's serials, so a caller passes that thread's watch, never its own session's); and no
//! other code judges a write durable, so that a new mode changes this file alone. Waiting syncs
//! through [`DurableStore::sync`], the one path that makes the log durable on demand.

use std::fmt;
use std::str::FromStr;

use prefixkv_engine::CommitWatch;
use prefixkv_storage::log::{BackendKind, Stats, SyncPolicy};

use crate::{DurableStore, StoreError, WriteMark};

/// How many checkpoints [`DurableStore::wait_durable`] takes, in the modes without a log, before
/// it reports that they do not cover the write (one normally does: a checkpoint requested after
/// the write holds it; the bound keeps a session whose commit point cannot move from looping).
const CHECKPOINTS_TO_COVER: usize = 3;

/// How writes are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Nothing on disk unless asked (an explicit checkpoint still writes one).
    None,
    /// Periodic checkpoints only.
    Checkpoint,
    /// The operation log, synced about once a second, plus periodic checkpoints.
    #[default]
    EverySec,
    /// The operation log with group commit: a write is acknowledged once its record is synced.
    Always,
}

impl Durability {
    /// Every mode, weakest first.
    pub const ALL: [Durability; 4] = [
        Durability::None,
        Durability::Checkpoint,
        Durability::EverySec,
        Durability::Always,
    ];

    /// The configuration name (Redis's `appendfsync` values plus `none` and `checkpoint`).
    pub fn name(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Checkpoint => "checkpoint",
            Durability::EverySec => "everysec",
            Durability::Always => "always",
        }
    }

    /// Whether writes are appended to the operation log.
    pub fn uses_oplog(self) -> bool {
        self.log_policy().is_some()
    }

    /// The log's sync policy, when the mode logs.
    pub fn log_policy(self) -> Option<SyncPolicy> {
        match self {
            Durability::None | Durability::Checkpoint => None,
            Durability::EverySec => Some(SyncPolicy::EverySec),
            Durability::Always => Some(SyncPolicy::Always),
        }
    }

    /// Whether a write may be acknowledged only once its log record is synced.
    pub fn acknowledge_after_sync(self) -> bool {
        self == Durability::Always
    }

    /// Whether checkpoints run periodically.
    pub fn checkpoints_periodically(self) -> bool {
        self != Durability::None
    }

    /// Whether a clean shutdown takes a final checkpoint (the modes without a log would
    /// otherwise lose what the last periodic checkpoint missed; the logging modes sync the log).
    pub fn checkpoint_at_shutdown(self) -> bool {
        self == Durability::Checkpoint
    }

    /// The one-sentence loss bound, for `INFO persistence` and the docs.
    pub fn statement(self) -> &'static str {
        match self {
            Durability::None => "none: nothing is written to disk; a crash or restart loses every write since the last explicit SAVE.",
            Durability::Checkpoint => "checkpoint: a crash loses at most the writes after the last durable checkpoint (taken every checkpoint-interval), and every connection recovers a prefix of its writes.",
            Durability::EverySec => "everysec: the oplog is fsynced at least once a second besides periodic checkpoints; a process crash loses no acknowledged write and a power loss at most about one second of them.",
            Durability::Always => "always: a write is acknowledged only after the oplog batch holding it is fsynced (group commit), so a crash loses no acknowledged write.",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for Durability {
    type Err = String;

    /// Parses a mode name, case-insensitively; `no` is accepted for `none` (Redis's
    /// `appendonly no`).
    fn from_str(text: &str) -> Result<Durability, String> {
        match text.to_ascii_lowercase().as_str() {
            "none" | "no" => Ok(Durability::None),
            "checkpoint" => Ok(Durability::Checkpoint),
            "everysec" => Ok(Durability::EverySec),
            "always" => Ok(Durability::Always),
            other => Err(format!(
                "unknown durability mode '{other}': use none, checkpoint, everysec or always"
            )),
        }
    }
}

/// Where an acknowledged write stands, for the durability rule (module docs): `Copy`, so that a
/// connection can keep one per write it acknowledged and has not yet seen durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritePosition {
    /// The write's serial in the engine session that made it.
    pub serial: u64,
    /// The LSN of its log record (its group's last), in the logging modes.
    pub lsn: Option<u64>,
}

impl WriteMark {
    /// Where this write stands, for [`DurableStore::is_durable`] and
    /// [`DurableStore::wait_durable`].
    pub fn position(&self) -> WritePosition {
        WritePosition {
            serial: self.serial,
            lsn: self.lsn,
        }
    }
}

/// The operation log's positions and counters, for reports (INFO, metrics): what
/// [`DurableStore::log_status`] reads.
#[derive(Clone, Copy, Debug)]
pub struct LogStatus {
    /// The LSN the next append gets.
    pub next_lsn: u64,
    /// Every record at or below it is synced.
    pub durable_lsn: u64,
    /// The oldest LSN the log still holds (truncation removes what checkpoints cover).
    pub oldest_lsn: u64,
    /// The I/O backend in use.
    pub backend: BackendKind,
    /// Counters since open (records written, syncs, time in syncs).
    pub stats: Stats,
}

impl DurableStore {
    /// Whether the write at `at` is durable now (module docs): its log record is synced, or a
    /// durable checkpoint holds it by the commit point of the session that made it, which
    /// `made_by` watches ([`crate::StoreSession::commit_watch`]; for a write made on someone's
    /// behalf, the making thread's session). Cheap: two atomic loads.
    pub fn is_durable(&self, at: WritePosition, made_by: &CommitWatch) -> bool {
        if at.serial <= made_by.committed_serial() {
            return true;
        }
        match (at.lsn, self.oplog()) {
            (Some(lsn), Some(log)) => lsn <= log.durable_lsn(),
            _ => false,
        }
    }

    /// Returns once the write at `at` (made by the session `made_by` watches) is durable,
    /// making it so. A logged write: syncs the log ([`DurableStore::sync`]), which makes every
    /// appended record durable. A write without a log position (the modes without a log, or a
    /// log being replaced after a failure): calls `checkpoint` (the caller's way to take one,
    /// e.g. [`DurableStore::checkpoint`] plus its own bookkeeping) until the session's commit
    /// point covers the write, at most three times. Blocking: call from a plain thread.
    pub fn wait_durable(
        &self,
        at: WritePosition,
        made_by: &CommitWatch,
        mut checkpoint: impl FnMut() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if self.is_durable(at, made_by) {
            return Ok(());
        }
        if at.lsn.is_some() && self.oplog().is_some() {
            return self.sync();
        }
        for _ in 0..CHECKPOINTS_TO_COVER {
            checkpoint()?;
            if self.is_durable(at, made_by) {
                return Ok(());
            }
        }
        Err(StoreError::Storage(format!(
            "the write (serial {}) is not covered by a checkpoint after {CHECKPOINTS_TO_COVER} \
             attempts",
            at.serial
        )))
    }

    /// The operation log's positions and counters; `None` when the mode does not log (or while
    /// a failed log is being replaced: `store` module docs, step 6).
    pub fn log_status(&self) -> Option<LogStatus> {
        self.oplog().map(|log| LogStatus {
            next_lsn: log.next_lsn(),
            durable_lsn: log.durable_lsn(),
            oldest_lsn: log.oldest_lsn(),
            backend: log.backend(),
            stats: log.stats(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_decisions_are_consistent() {
        for mode in Durability::ALL {
            assert_eq!(mode.name().parse::<Durability>().unwrap(), mode);
            assert_eq!(mode.uses_oplog(), mode.log_policy().is_some());
            assert!(!mode.acknowledge_after_sync() || mode.uses_oplog());
            assert!(mode.statement().starts_with(mode.name()));
        }
        assert_eq!("NO".parse::<Durability>().unwrap(), Durability::None);
        assert!("sometimes".parse::<Durability>().is_err());
    }
}
