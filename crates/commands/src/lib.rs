//! prefixkv-commands: the Redis command layer over the prefixkv store, with no sockets.
//!
//! Its job is what a command means: the command table (`commands::table`: each command's name,
//! arity, flags, key positions and handler, written once), every data type, MULTI/EXEC and
//! WATCH, Lua scripts and functions, blocking commands, the Pub/Sub registry, keyspace
//! notifications, eviction and command statistics. A host process (prefixkv-server, a cluster
//! worker) reads requests from its own sockets, runs them with [`commands::execute`] over a
//! [`state::Server`] built by [`state::Server::new`], writes the replies, and awaits the
//! [`commands::AsyncOp`]s it is handed; what only the host can do (save, shut down, its own
//! settings) it provides through [`host::Host`].
//!
//! Invariants:
//! - One table: a command is named once, in `commands::table::COMMANDS`, with its handler;
//!   dispatch is a lookup in it.
//! - No sockets, no process control: nothing here opens a connection, binds a port or exits;
//!   the host does, through `host::Host` and `commands::AsyncOp`.
//! - Every write goes through the store's transaction (`prefixkv_store::Txn`, reached through
//!   `keyspace`), so the store's durability rule covers every command.
#![warn(missing_docs)]

pub mod blocking;
pub mod command_stats;
pub mod commands;
pub mod dump;
pub mod error;
pub mod evict;
pub mod glob;
pub mod headers;
pub mod host;
pub mod info;
pub mod keyspace;
pub mod notify;
pub mod objects;
pub mod pubsub;
pub mod scripting;
pub mod settings;
pub mod state;
pub mod value;
pub mod watch;

/// The Redis version we report (clients gate features on it).
pub const REDIS_VERSION: &str = "7.2.0";
