//! `prefixkv-pagestore`: a database file of fixed-size pages plus a SQLite-shaped write-ahead
//! log, with concurrent snapshot readers (five read marks), one writer, and a fast checkpoint
//! after Turso's ("Making checkpointing fast"): frame-ordered reads and page-sorted vectored
//! writes in flight together on io_uring, page-cache reuse validated by `(frame, epoch)` tags,
//! batches flushed by a run-length heuristic. The database can shrink
//! ([`WriteTransaction::truncate`]); a checkpoint that backfills every frame cuts the file.
//!
//! Files: `<db>` (page `n` at byte `(n-1)·page_size`) and `<db>-wal` (see [`mod@format`] for the byte
//! layout). Recovery on [`PageStore::open`] rebuilds the frame index from the WAL and stops at
//! the first frame whose salts or checksum chain break; frames after the last commit are
//! ignored. The fsync ordering and why it is safe are in [`checkpoint`]'s module comment and in
//! `docs/pagestore.md`.
#![warn(missing_docs)]

mod backfill;
pub mod cache;
pub mod checkpoint;
mod error;
pub mod fail_point;
pub mod format;
pub mod marks;
mod store;
mod wal;
mod write;

pub use checkpoint::{CheckpointMode, CheckpointOutcome};
pub use error::{Error, Result};
pub use store::{
    BackfillStrategy, CommitInfo, Options, PageStore, ReadTransaction, SyncPolicy, WalState,
    WriteTransaction, MAX_PAGE_NUMBER,
};
pub use wal::RecoveryReport;
