//! prefixkv-engine: a concurrent in-memory key-value store with non-blocking CPR checkpoints and
//! prefix recovery.
//!
//! This branch holds the checkpoint file layer ([`checkpoint_files`]), the verification oracle
//! ([`oracle`]) and the shared error type ([`error`]).
#![warn(missing_docs)]

pub mod checkpoint_files;
pub mod error;
pub mod oracle;
