//! State shared by every connection: settings, the keyspace, persistence, client list, stats.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::command_stats::CommandStats;
use crate::config::Config;
use crate::keyspace::Keyspace;
use crate::persistence::Persistence;
use crate::pubsub::PubSub;

/// What CLIENT LIST shows about a connection.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    /// Peer address.
    pub addr: String,
    /// CLIENT SETNAME name.
    pub name: String,
    /// Selected database.
    pub database: u8,
    /// Connection start.
    pub created: Instant,
    /// CLIENT SETINFO lib-name.
    pub lib_name: String,
    /// CLIENT SETINFO lib-ver.
    pub lib_ver: String,
    /// The connection's last command: its index in `commands::table::COMMANDS` (`usize::MAX`
    /// before the first), written by the connection without taking the clients lock.
    pub last_command: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// RESP version.
    pub resp: u8,
}

/// Counters for INFO stats.
#[derive(Default)]
pub struct Stats {
    /// Commands processed.
    pub commands: AtomicU64,
    /// Connections accepted.
    pub connections_received: AtomicU64,
    /// Connections refused by maxclients.
    pub rejected_connections: AtomicU64,
    /// Reads that found a key.
    pub keyspace_hits: AtomicU64,
    /// Reads that found nothing.
    pub keyspace_misses: AtomicU64,
    /// Bytes read from clients.
    pub input_bytes: AtomicU64,
    /// Bytes written to clients.
    pub output_bytes: AtomicU64,
    /// Currently connected clients.
    pub connected: AtomicU64,
    /// Clients waiting in a blocking list command (INFO `blocked_clients`).
    pub blocked_clients: AtomicU64,
}

/// The server.
pub struct Server {
    /// Settings (CONFIG SET changes some of them).
    pub settings: RwLock<Config>,
    /// Keys and values.
    pub keyspace: Arc<Keyspace>,
    /// Checkpoints.
    pub persistence: Arc<Persistence>,
    /// Connected clients by id.
    pub clients: Mutex<BTreeMap<u64, ClientInfo>>,
    /// Next client id.
    pub next_client_id: AtomicU64,
    /// Counters.
    pub stats: Stats,
    /// Pub/Sub channels and patterns.
    pub pubsub: PubSub,
    /// Per-command counters, latency histograms and the slow log.
    pub command_stats: CommandStats,
    /// Start time.
    pub started: Instant,
    /// The port actually bound.
    pub port: u16,
    /// Scripts and functions.
    pub scripting: crate::scripting::Scripting,
    /// Eviction's pool and counters (`crate::evict`).
    pub evictor: crate::evict::Evictor,
}
