//! prefixkv-engine: a FASTER-style embedded key-value store (epoch protection, latch-free hash
//! index, hybrid log) with non-blocking CPR checkpoints and prefix recovery.
//!
//! Durability statement: an acknowledged operation is durable once its session's commit point
//! (`Session::committed_serial`) covers its serial number; after a crash the store recovers, for
//! every session, exactly the operations up to its commit point in the newest valid checkpoint.
//!
//! See `docs/engine.md` for the phases, the five checkpoint strategies and the memory bound.

#![warn(missing_docs)]

mod accounting;
mod checkpoint;
pub mod checkpoint_files;
mod compaction;
mod config;
mod cpr_points;
mod epoch;
pub mod error;
mod index;
mod latch;
mod log;
mod memory;
mod rollback;
mod scan_progress;
mod session;
mod state;
mod store;
mod sync;

pub use checkpoint::CheckpointBreakdown;
pub use checkpoint_files::segment::WriteTimes;
pub use config::{
    SessionId, StoreConfig, Strategy, DEFAULT_CHECKPOINT_THREAD_NICE, MIN_PAGES_FOR_DEAD_TRIGGER,
};
pub use error::EngineError;
pub use rollback::{PurgeReport, RollbackReport, ROLLBACK_WAIT_LIMIT};
pub use session::{CommitWatch, Sampled, Session, MAX_SAMPLE_KEYS};
pub use state::Phase;
pub use store::{CheckpointReport, CheckpointToken, RecoveryInfo, Scope, Store, MAX_OPEN_SESSIONS};
