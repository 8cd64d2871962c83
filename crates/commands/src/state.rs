//! State shared by every connection: settings, the keyspace, the host, client list, stats.
//!
//! Invariant: a `Server` is built only by [`Server::new`], which makes the settings' durability
//! the store's and hands the slow log and eviction their settings, so no part starts out of
//! step with `settings`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::command_stats::CommandStats;
use crate::host::Host;
use crate::keyspace::Keyspace;
use crate::pubsub::PubSub;
use crate::settings::Settings;

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
    pub settings: RwLock<Settings>,
    /// Keys and values.
    pub keyspace: Arc<Keyspace>,
    /// The embedding process: saves, shutdown, the settings only it knows (`crate::host`).
    pub host: Arc<dyn Host>,
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
    /// Scripts and functions.
    pub scripting: crate::scripting::Scripting,
    /// Eviction's pool and counters (`crate::evict`).
    pub evictor: crate::evict::Evictor,
}

impl Server {
    /// A server over `keyspace` (whose store is already recovered) for `host`. `settings`'
    /// durability is replaced by the store's; the slow log and eviction take theirs from
    /// `settings`. Functions stored in the keyspace are not loaded here: call
    /// `server.scripting.restore` next if the host wants them.
    pub fn new(
        mut settings: Settings,
        keyspace: Arc<Keyspace>,
        host: Arc<dyn Host>,
    ) -> Arc<Server> {
        settings.durability = keyspace.store.durability();
        keyspace.notifier.set_flags(settings.notify_keyspace_events);
        let server = Arc::new(Server {
            command_stats: CommandStats::new(
                crate::commands::table::COMMANDS.len(),
                settings.slowlog_log_slower_than_us,
                settings.slowlog_max_len as usize,
            ),
            keyspace,
            host,
            clients: Mutex::new(BTreeMap::new()),
            next_client_id: AtomicU64::new(1),
            stats: Stats::default(),
            pubsub: PubSub::default(),
            started: Instant::now(),
            scripting: Default::default(),
            evictor: Default::default(),
            settings: RwLock::new(settings.clone()),
        });
        crate::evict::apply_settings(&server, &settings);
        server
    }
}
