//! prefixkv-server as a library: the socket loop, configuration and persistence around the
//! command layer (`prefixkv-commands`), public so that tests and tools can reach them. See
//! `docs/server.md`.
//!
//! The command layer's modules are re-exported under their old paths
//! (`prefixkv_server::commands`, `::state`, ...), so code written against them keeps building.
#![warn(missing_docs)]

pub mod config;
pub mod connection;
pub mod host;
pub mod metrics;
pub mod net;
pub mod persistence;
pub mod signals;

pub use prefixkv_commands::{
    blocking, command_stats, commands, error, evict, glob, info, keyspace, notify, objects, pubsub,
    scripting, settings, state, value, watch, REDIS_VERSION,
};
