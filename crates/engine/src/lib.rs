//! prefixkv-engine: a FASTER-style embedded key-value store (epoch protection, latch-free hash
//! index, hybrid log) with non-blocking CPR checkpoints and prefix recovery.
//!
//! Durability statement: an acknowledged operation is durable once its session's commit point
//! (`Session::committed_serial`) covers its serial number; after a crash the store recovers, for
//! every session, exactly the operations up to its commit point in the newest valid checkpoint.
//!
//! See `docs/engine.md` for the phases, the five checkpoint strategies and the memory bound.
//!
//! Module dependency order (who imports whom; no module imports one listed above it, so there
//! is no import circle; `docs/engine.md`, "Module map"):
//! - `rollback` (and `rollback::purge`) → `store` (it adds `Store::rollback` and its kin),
//!   `shared`, `state`, `log`, `report`;
//! - `store` (`store::{recovery, sealed}`) → `session`, `checkpoint`, `compaction`, `tier`,
//!   `shared`, `report`, `state`, `log`, `index`, `cpr_points`, `checkpoint_files`;
//! - `session` → `shared`, `state`, `log`, `index`, `latch`, `cpr_points`;
//!   `checkpoint` → `shared`, `state`, `log`, `report`, `scan_progress`, `checkpoint_files`;
//!   `compaction` (with `compaction::cold`, a tiered store's eviction loop and page-file
//!   compaction) → `tier`, `shared`, `state`, `log`, `index` (none of these three imports
//!   another); `tier` (eviction into the page file) → `shared`, `log`;
//! - `shared` (the state they share, split by owner: `machine`, `sessions`, `rollback`,
//!   `maintenance`) → `epoch`, `state`, `log`, `index`, `latch`, `accounting`, `cpr_points`,
//!   `scan_progress`, `checkpoint_files`, `report`;
//! - the floor: `report` (tokens and reports), `state` (the state word, `InvalidVersions`),
//!   `epoch` (`LightEpoch`, `bump_and_wait`), `log`, `index`, `latch`, `accounting`,
//!   `cpr_points`, `scan_progress`, `checkpoint_files`, `memory`, `config`, `error`, `sync`.

#![warn(missing_docs)]

mod accounting;
mod checkpoint;
pub mod checkpoint_files;
mod checkpoint_priority;
mod compaction;
mod config;
mod cpr_points;
mod epoch;
pub mod error;
mod index;
mod latch;
mod log;
mod memory;
mod report;
mod rollback;
mod scan_progress;
mod session;
mod shared;
mod state;
mod store;
mod sync;
mod tier;

pub use checkpoint_files::segment::WriteTimes;
pub use config::{
    CheckpointPriority, SessionId, StoreConfig, Strategy,
    DEFAULT_CHECKPOINT_IDLE_FLOOR_BYTES_PER_S, DEFAULT_CHECKPOINT_THREAD_NICE, MAX_FLUSHER_THREADS,
    MIN_PAGES_FOR_DEAD_TRIGGER,
};
pub use error::EngineError;
pub use report::{CheckpointBreakdown, CheckpointReport, CheckpointToken, PurgeReport, Scope};
pub use rollback::{RollbackReport, ROLLBACK_WAIT_LIMIT};
pub use session::{
    CommitWatch, Finished, Sampled, Session, Started, MAX_SAMPLE_KEYS, PENDING_DEPTH,
    PENDING_READ_BYTES,
};
pub use shared::MAX_OPEN_SESSIONS;
pub use state::Phase;
pub use store::{RecoveryInfo, Store};
