//! The durability policy: every per-mode decision of the store in one type.
//!
//! A mode answers four questions, and nothing else in prefixkv asks "which mode is this?":
//! does a write go to the operation log ([`Durability::uses_oplog`]), with which sync policy
//! ([`Durability::log_policy`]); is a write acknowledged only after its log record is synced
//! ([`Durability::acknowledge_after_sync`]); are checkpoints taken periodically
//! ([`Durability::checkpoints_periodically`]); is a final checkpoint taken at a clean shutdown
//! ([`Durability::checkpoint_at_shutdown`]). [`Durability::statement`] says, in one sentence,
//! which acknowledged writes a crash can lose.

use std::fmt;
use std::str::FromStr;

use prefixkv_storage::log::SyncPolicy;

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
