//! prefixkv-server as a library: the modules behind the `prefixkv-server` binary, public so
//! that fuzz targets and tools can reach the decoders. See `docs/server.md`.
#![warn(missing_docs)]

pub mod blocking;
pub mod command_stats;
pub mod commands;
pub mod config;
pub mod connection;
pub mod error;
pub mod evict;
pub mod glob;
pub mod info;
pub mod keyspace;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod objects;
pub mod persistence;
pub mod pubsub;
pub mod scripting;
pub mod signals;
pub mod state;
pub mod value;
pub mod watch;

/// The Redis version we report (clients gate features on it).
pub const REDIS_VERSION: &str = "7.2.0";
