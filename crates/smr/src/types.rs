//! The Raft type configuration and the replicated commands.
//!
//! A command is what a client asks the replicated state machine to do; it travels inside an
//! openraft log entry (serialized with postcard in the disk log and on the wire) and is applied by
//! every replica in log order. Keys and values are byte strings with bounded sizes
//! ([`MAX_KEY_BYTES`], [`MAX_VALUE_BYTES`]) so that no frame, log record or checkpoint entry can
//! grow without limit.

use serde::{Deserialize, Serialize};

/// Identifier of a replica (`--id`).
pub type NodeId = u64;

/// The largest key a client may write, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The largest value a client may write, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The largest number of pairs in one [`Command::SetMany`] (bulk load).
pub const MAX_BATCH_PAIRS: usize = 4096;

/// A state-machine command, replicated through the Raft log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
    },
    /// Remove `key`.
    Del {
        /// The key.
        key: Vec<u8>,
    },
    /// Set many pairs in one log entry (the bench's load phase). It counts as one command for
    /// the checkpoint interval, because it is one log entry.
    SetMany {
        /// The pairs, applied in order.
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

impl Command {
    /// Checks the size limits; a command that fails is refused before it reaches the log.
    pub fn validate(&self) -> Result<(), String> {
        let check = |key: &[u8], value: Option<&[u8]>| -> Result<(), String> {
            if key.len() > MAX_KEY_BYTES {
                return Err(format!(
                    "key of {} bytes exceeds the {MAX_KEY_BYTES}-byte limit",
                    key.len()
                ));
            }
            if let Some(value) = value {
                if value.len() > MAX_VALUE_BYTES {
                    return Err(format!(
                        "value of {} bytes exceeds the {MAX_VALUE_BYTES}-byte limit",
                        value.len()
                    ));
                }
            }
            Ok(())
        };
        match self {
            Command::Set { key, value } => check(key, Some(value)),
            Command::Del { key } => check(key, None),
            Command::SetMany { pairs } => {
                if pairs.len() > MAX_BATCH_PAIRS {
                    return Err(format!(
                        "batch of {} pairs exceeds the {MAX_BATCH_PAIRS}-pair limit",
                        pairs.len()
                    ));
                }
                pairs
                    .iter()
                    .try_for_each(|(key, value)| check(key, Some(value)))
            }
        }
    }
}

/// What applying a [`Command`] returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum CommandResponse {
    /// A blank or membership entry (no client command), or a SET/SETMANY.
    #[default]
    Done,
    /// A DEL: whether the key existed.
    Removed(bool),
}

openraft::declare_raft_types!(
    /// The openraft type configuration of the replicated key-value store.
    pub TypeConfig:
        D = Command,
        R = CommandResponse,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The openraft handle of one replica.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<NodeId>;
/// Storage errors as openraft wants them.
pub type StorageError = openraft::StorageError<NodeId>;
/// Snapshot metadata (last included log id, membership, id).
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
/// The membership as of some log id.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
