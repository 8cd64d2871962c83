//! `prefixkv-store`: the engine and the operation log as one durable store.
//!
//! The engine (`prefixkv-engine`) keeps the data in memory and makes it durable with CPR
//! checkpoints; the operation log (`prefixkv_storage::log`) makes each write durable between
//! checkpoints. This crate is the one place that combines them; it serves the server, whose
//! persistence it is. A cluster worker runs the command layer over
//! [`DurableStore::over_engine`] (mode `none`: its engine is checkpointed and restored by DPR,
//! `docs/cluster.md`), so it uses the transactions and the exec gate but not the durability rule;
//! its `synchronous` baseline log is its own and is not replayed.
//! - writes go through [`Txn`], which keeps each key's log order equal to its engine order;
//! - [`DurableStore::checkpoint`] records in the checkpoint the log position it covers (the
//!   engine's commit cookie) and truncates the log behind the oldest checkpoint kept;
//! - [`DurableStore::open`] recovers the newest checkpoint that verifies and replays the log
//!   suffix after it, telling the application every key it loads ([`Observers`]) so that nothing
//!   needs a second pass;
//! - [`Durability`] holds every decision that depends on the durability mode, and
//!   [`DurableStore::is_durable`] / [`DurableStore::wait_durable`] the one rule for when an
//!   acknowledged write is durable (`durability` module docs): an application never reads the
//!   log's positions or commit points to decide it.
//!
//! The crash-safety argument is in the `store` module's documentation and `docs/store.md`.

#![warn(missing_docs)]

mod durability;
pub mod record;
mod store;
mod txn;

pub use durability::{Durability, LogStatus, WritePosition};
pub use prefixkv_engine::{CommitWatch, EngineError, Sampled};
/// The completion of a write's log record ([`WriteMark::ticket`]): `wait` or `.await` it.
pub use prefixkv_storage::log::AppendTicket;
pub use store::{
    CheckpointDone, CookieExtra, CookieSuffices, DurableStore, Observers, Options, Recovered,
    ReplayObserver, MAX_COOKIE_EXTRA_BYTES,
};
pub use txn::{StoreSession, Txn, WriteMark, BATCH_MAX_COMMANDS, RECORD_SPLIT_BYTES};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The engine refused (out of memory, a record too large, a failed checkpoint, ...).
    #[error(transparent)]
    Engine(#[from] prefixkv_engine::EngineError),
    /// The operation log failed (a failed sync fails it for good: restart to recover).
    #[error("operation log: {0}")]
    Oplog(#[from] prefixkv_storage::log::LogError),
    /// A file or directory operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The directory is in use, or another storage-level refusal.
    #[error("{0}")]
    Storage(String),
    /// Recovery found something it cannot use; nothing was changed on disk.
    #[error("{context}: {detail}")]
    Recovery {
        /// Where.
        context: String,
        /// What.
        detail: String,
    },
}

impl StoreError {
    pub(crate) fn io(context: String, source: std::io::Error) -> StoreError {
        StoreError::Io { context, source }
    }
}
