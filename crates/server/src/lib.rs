//! prefixkv-server as a library: the socket loop, configuration and persistence around the
//! command layer (`prefixkv-commands`), public so that tests and tools can reach them. See
//! `docs/server.md`.
#![warn(missing_docs)]

pub mod config;
pub mod connection;
pub mod host;
pub mod metrics;
pub mod net;
pub mod persistence;
pub mod signals;
