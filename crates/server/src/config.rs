//! Configuration: command-line flags, an optional TOML file (`--config`), and the runtime
//! values `CONFIG GET`/`CONFIG SET` read and change.
//!
//! Precedence: built-in default < TOML file < flag. Names follow Redis where Redis has the
//! setting (`port`, `bind`, `dir`, `requirepass`, `maxclients`, `maxmemory`, the eviction
//! settings `maxmemory-policy`, `maxmemory-samples`, `maxmemory-eviction-tenacity`,
//! `lfu-log-factor`, `lfu-decay-time` (`prefixkv_commands::evict::settings`), `appendfsync`,
//! `protected-mode`, `client-query-buffer-limit`, `proto-max-bulk-len`, `slowlog-log-slower-than`,
//! `slowlog-max-len`, `busy-reply-threshold` and its older name `lua-time-limit`), and the TOML
//! keys are
//! exactly those names.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use prefixkv_engine::CheckpointPriority;
use serde::Deserialize;

mod compaction;
mod index;
pub use compaction::{COMPACT_DEAD_FRACTION, COMPACT_DEAD_FRACTION_CACHE};

/// The command layer's settings, parsers and bounds, which this file fills from flags and file.
pub use prefixkv_commands::settings::{
    encoding_threshold_name, parse_memory, parse_yes_no, Durability, Settings, ENCODING_THRESHOLDS,
    MAX_SLOWLOG_LEN, MIN_LUA_MEMORY_LIMIT,
};

/// Command-line flags. Every flag can also be set in the TOML file under the same name.
#[derive(Parser, Debug, Default)]
#[command(
    name = "prefixkv-server",
    version,
    about = "A Redis-compatible server on the prefixkv engine"
)]
pub struct Flags {
    /// TOML configuration file (keys named as the flags, e.g. `port = 6380`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// TCP port [default: 6379; if taken, the next free port]. 0 picks any free port.
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    pub bind: Option<String>,
    /// Data directory [default: ./data].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Password clients must give with AUTH or HELLO AUTH [default: none].
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Most simultaneous clients [default: 10000].
    #[arg(long)]
    pub maxclients: Option<u64>,
    /// Refuse writes when used memory is above this many bytes; accepts 100mb, 2gb [default: 0 = no limit].
    #[arg(long)]
    pub maxmemory: Option<String>,
    /// What to do over maxmemory: noeviction, allkeys-lru, allkeys-lfu, allkeys-random,
    /// volatile-lru, volatile-lfu, volatile-random, volatile-ttl [default: noeviction].
    #[arg(long = "maxmemory-policy")]
    pub maxmemory_policy: Option<String>,
    /// Keys sampled per eviction round [default: 5].
    #[arg(long = "maxmemory-samples")]
    pub maxmemory_samples: Option<String>,
    /// How long one command may spend evicting, 0..=100 (Redis's scale) [default: 10].
    #[arg(long = "maxmemory-eviction-tenacity")]
    pub maxmemory_eviction_tenacity: Option<String>,
    /// LFU counter's logarithm factor [default: 10].
    #[arg(long = "lfu-log-factor")]
    pub lfu_log_factor: Option<String>,
    /// Minutes per LFU counter decrement without access, 0 = never [default: 1].
    #[arg(long = "lfu-decay-time")]
    pub lfu_decay_time: Option<String>,
    /// Durability: none, checkpoint, everysec, always [default: everysec].
    #[arg(long)]
    pub appendfsync: Option<String>,
    /// Milliseconds between periodic checkpoints [default: 1000].
    #[arg(long = "checkpoint-interval")]
    pub checkpoint_interval: Option<u64>,
    /// `yes` refuses a non-loopback bind without requirepass [default: yes].
    #[arg(long = "protected-mode")]
    pub protected_mode: Option<String>,
    /// Largest buffered query of one client; accepts 1gb [default: 1gb].
    #[arg(long = "client-query-buffer-limit")]
    pub client_query_buffer_limit: Option<String>,
    /// Largest pending reply of one client before it is disconnected; accepts 1gb [default: 1gb].
    #[arg(long = "client-output-buffer-limit")]
    pub client_output_buffer_limit: Option<String>,
    /// Largest bulk string of a request; accepts 512mb [default: 512mb].
    #[arg(long = "proto-max-bulk-len")]
    pub proto_max_bulk_len: Option<String>,
    /// Commands taking at least this many microseconds go to the slow log; negative turns it
    /// off, 0 logs every command [default: 10000].
    #[arg(long = "slowlog-log-slower-than", allow_hyphen_values = true)]
    pub slowlog_log_slower_than: Option<i64>,
    /// Entries the slow log keeps (the oldest go first) [default: 128].
    #[arg(long = "slowlog-max-len")]
    pub slowlog_max_len: Option<u64>,
    /// Port of the Prometheus endpoint (`GET /metrics` on the `bind` address); 0 = none
    /// [default: 0].
    #[arg(long = "metrics-port")]
    pub metrics_port: Option<u16>,
    /// Log verbosity, Redis's names: `debug`, `verbose`, `notice`, `warning`, `nothing`
    /// [default: notice]. The environment variable PREFIXKV_LOG (tracing's filter syntax, e.g.
    /// `prefixkv_server=debug`) overrides it.
    #[arg(long)]
    pub loglevel: Option<String>,
    /// Request-handling threads, each with its own runtime [default: number of cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Engine in-memory log budget; accepts 1gb, at least 32mb (8 log pages) [default: 1gb].
    /// Without `storage-tier` the data must fit in it.
    #[arg(long = "engine-memory")]
    pub engine_memory: Option<String>,
    /// Checkpoint pacing: bytes per second one checkpoint may write; accepts 100mb, at least
    /// 64kb [default: 0 = as fast as the disk allows].
    #[arg(long = "checkpoint-rate")]
    pub checkpoint_rate: Option<String>,
    /// Scheduling niceness of checkpoint threads, 0..=19: higher yields more of the CPU to
    /// requests and makes saves longer [default: 10].
    #[arg(long = "checkpoint-nice")]
    pub checkpoint_nice: Option<i32>,
    /// Scheduling of checkpoint threads: `idle` (Linux SCHED_IDLE while the save writes at least
    /// `checkpoint-idle-floor`, then `checkpoint-nice`) or `nice` (`checkpoint-nice` throughout)
    /// [default: idle].
    #[arg(long = "checkpoint-priority")]
    pub checkpoint_priority: Option<String>,
    /// The idle priority's floor rate: a save writing less per second (averaged since it
    /// started) is raised to `checkpoint-nice`; accepts 16mb, at least 64kb [default: 16mb].
    #[arg(long = "checkpoint-idle-floor")]
    pub checkpoint_idle_floor: Option<String>,
    /// Compaction also starts when more than this fraction of the engine's log pages in use is
    /// dead records, in [0, 1); 0 compacts only at half the `engine-memory` budget [default:
    /// 0.25 with maxmemory, else 0.5].
    #[arg(long = "engine-compact-dead-fraction")]
    pub engine_compact_dead_fraction: Option<f64>,
    /// Buckets of the engine's hash index, a power of two (64 bytes each, about 14 keys per
    /// bucket fit; the index does not grow) [default: 2^20, or with maxmemory the largest power
    /// of two <= maxmemory/512].
    #[arg(long = "engine-index-buckets")]
    pub engine_index_buckets: Option<u64>,
    /// Write checkpoints with direct I/O, bypassing the page cache: yes or no [default: yes].
    #[arg(long = "checkpoint-direct-io")]
    pub checkpoint_direct_io: Option<String>,
    /// A storage tier for data larger than `engine-memory`: when the engine's log reaches that
    /// budget, its oldest pages are written to a page file in `<dir>/log` and leave memory (the
    /// index stays in memory, reads of those records go to the file); yes or no [default: no].
    /// Not with a non-zero `engine-compact-dead-fraction`.
    #[arg(long = "storage-tier")]
    pub storage_tier: Option<String>,
    /// Milliseconds a script may run before other clients get BUSY (Redis's
    /// `busy-reply-threshold`, alias `lua-time-limit`) [default: 5000].
    #[arg(long = "busy-reply-threshold", alias = "lua-time-limit")]
    pub busy_reply_threshold: Option<u64>,
    /// Heap limit of each Lua VM, and bound of the script cache's bodies; accepts 64mb
    /// [default: 128mb].
    #[arg(long = "lua-memory-limit")]
    pub lua_memory_limit: Option<String>,
}

/// The TOML file: the same names as the flags.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    port: Option<u16>,
    bind: Option<String>,
    dir: Option<PathBuf>,
    requirepass: Option<String>,
    maxclients: Option<u64>,
    maxmemory: Option<toml::Value>,
    maxmemory_policy: Option<toml::Value>,
    maxmemory_samples: Option<toml::Value>,
    maxmemory_eviction_tenacity: Option<toml::Value>,
    lfu_log_factor: Option<toml::Value>,
    lfu_decay_time: Option<toml::Value>,
    appendfsync: Option<String>,
    checkpoint_interval: Option<u64>,
    protected_mode: Option<toml::Value>,
    client_query_buffer_limit: Option<toml::Value>,
    client_output_buffer_limit: Option<toml::Value>,
    proto_max_bulk_len: Option<toml::Value>,
    slowlog_log_slower_than: Option<i64>,
    slowlog_max_len: Option<u64>,
    metrics_port: Option<u16>,
    loglevel: Option<String>,
    threads: Option<usize>,
    engine_memory: Option<toml::Value>,
    checkpoint_rate: Option<toml::Value>,
    checkpoint_nice: Option<i32>,
    checkpoint_priority: Option<String>,
    checkpoint_idle_floor: Option<toml::Value>,
    checkpoint_direct_io: Option<toml::Value>,
    storage_tier: Option<toml::Value>,
    engine_compact_dead_fraction: Option<toml::Value>,
    engine_index_buckets: Option<u64>,
    busy_reply_threshold: Option<u64>,
    lua_time_limit: Option<u64>,
    lua_memory_limit: Option<toml::Value>,
}

/// Log verbosity under Redis's names, and the tracing level each stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Everything (tracing `TRACE`).
    Debug,
    /// Per-connection events too (`DEBUG`).
    Verbose,
    /// Startup, shutdown, checkpoints' failures, clients closed for a limit (`INFO`).
    Notice,
    /// Only what went wrong (`WARN`).
    Warning,
    /// Nothing.
    Nothing,
}

impl LogLevel {
    /// The name CONFIG GET shows.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Verbose => "verbose",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Nothing => "nothing",
        }
    }

    /// The tracing filter it stands for.
    pub fn filter(self) -> tracing_subscriber::filter::LevelFilter {
        use tracing_subscriber::filter::LevelFilter;
        match self {
            LogLevel::Debug => LevelFilter::TRACE,
            LogLevel::Verbose => LevelFilter::DEBUG,
            LogLevel::Notice => LevelFilter::INFO,
            LogLevel::Warning => LevelFilter::WARN,
            LogLevel::Nothing => LevelFilter::OFF,
        }
    }
}

impl std::str::FromStr for LogLevel {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<LogLevel> {
        Ok(match text.to_ascii_lowercase().as_str() {
            "debug" => LogLevel::Debug,
            "verbose" => LogLevel::Verbose,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "nothing" => LogLevel::Nothing,
            _ => bail!("loglevel: '{text}' is not one of debug, verbose, notice, warning, nothing"),
        })
    }
}

/// The resolved configuration: what this process needs to listen, store and checkpoint, and
/// the command layer's settings (`settings`, which `prefixkv_commands::state::Server::new`
/// takes).
#[derive(Clone, Debug)]
pub struct Config {
    /// Port asked for (0 = any).
    pub port: u16,
    /// Whether the port was chosen explicitly (then a taken port is an error).
    pub port_explicit: bool,
    /// Listen address.
    pub bind: String,
    /// Data directory.
    pub dir: PathBuf,
    /// Checkpoint period.
    pub checkpoint_interval_ms: u64,
    /// Port of the Prometheus endpoint (0: none).
    pub metrics_port: u16,
    /// `loglevel` (Redis's name for it).
    pub loglevel: LogLevel,
    /// Request threads.
    pub threads: usize,
    /// Checkpoint write rate in bytes per second (0 = unlimited).
    pub checkpoint_rate_bytes_per_s: u64,
    /// Niceness of checkpoint threads (`StoreConfig::checkpoint_thread_nice`).
    pub checkpoint_nice: i32,
    /// Scheduling of checkpoint threads (`StoreConfig::checkpoint_thread_priority`).
    pub checkpoint_priority: CheckpointPriority,
    /// The idle priority's floor (`StoreConfig::checkpoint_idle_floor_bytes_per_s`).
    pub checkpoint_idle_floor_bytes_per_s: u64,
    /// Checkpoint segments bypass the page cache (`StoreConfig::checkpoint_direct_io`).
    pub checkpoint_direct_io: bool,
    /// `storage-tier`: the engine evicts its log's oldest pages to a page file in `dir/log`
    /// instead of holding all data in `engine-memory` (`StoreConfig::storage_tier`).
    pub storage_tier: bool,
    /// `engine-compact-dead-fraction`: the dead share of the log's pages in use that also starts
    /// a compaction (`StoreConfig::compact_dead_fraction`); 0 = only the page-budget trigger
    /// (always 0 with `storage_tier`).
    pub engine_compact_dead_fraction: f64,
    /// `engine-index-buckets`: the engine's index size (`StoreConfig::index_buckets`).
    pub engine_index_buckets: u64,
    /// The command layer's settings: limits, eviction, durability, scripting, the slow log.
    pub settings: Settings,
}

fn memory_value(value: &toml::Value, key: &str) -> anyhow::Result<u64> {
    match value {
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        toml::Value::String(text) => {
            parse_memory(text).with_context(|| format!("config key {key}"))
        }
        _ => bail!("config key {key}: expected a size such as 100mb"),
    }
}

impl Config {
    /// Merges defaults, the TOML file named by `--config`, and the flags.
    pub fn resolve(flags: Flags) -> anyhow::Result<Config> {
        let file = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("parsing config file {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let memory = |flag: &Option<String>,
                      file: &Option<toml::Value>,
                      key: &str,
                      default: u64|
         -> anyhow::Result<u64> {
            if let Some(text) = flag {
                return parse_memory(text).with_context(|| format!("--{key}"));
            }
            match file {
                Some(value) => memory_value(value, key),
                None => Ok(default),
            }
        };
        let port = flags.port.or(file.port);
        let yes_no = |key: &str, flag: &Option<String>, file: &Option<toml::Value>| {
            Ok::<_, anyhow::Error>(match (flag, file) {
                (Some(text), _) => Some(parse_yes_no(text).with_context(|| format!("--{key}"))?),
                (None, Some(toml::Value::Boolean(b))) => Some(*b),
                (None, Some(toml::Value::String(text))) => {
                    Some(parse_yes_no(text).with_context(|| format!("config key {key}"))?)
                }
                (None, Some(_)) => bail!("config key {key}: expected yes or no"),
                (None, None) => None,
            })
        };
        let protected_mode = yes_no(
            "protected-mode",
            &flags.protected_mode,
            &file.protected_mode,
        )?
        .unwrap_or(true);
        let checkpoint_direct_io = yes_no(
            "checkpoint-direct-io",
            &flags.checkpoint_direct_io,
            &file.checkpoint_direct_io,
        )?
        .unwrap_or(true);
        let storage_tier =
            yes_no("storage-tier", &flags.storage_tier, &file.storage_tier)?.unwrap_or(false);
        let threads = flags
            .threads
            .or(file.threads)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        let eviction = eviction_settings(&flags, &file)?;
        let maxmemory_bytes = memory(&flags.maxmemory, &file.maxmemory, "maxmemory", 0)?;
        let engine_compact_dead_fraction = compaction::dead_fraction(
            flags.engine_compact_dead_fraction,
            &file.engine_compact_dead_fraction,
            maxmemory_bytes,
            storage_tier,
        )?;
        let engine_index_buckets = index::index_buckets(
            flags.engine_index_buckets,
            file.engine_index_buckets,
            maxmemory_bytes,
        )?;
        let config = Config {
            port: port.unwrap_or(6379),
            port_explicit: port.is_some(),
            bind: flags
                .bind
                .or(file.bind)
                .unwrap_or_else(|| "127.0.0.1".into()),
            dir: flags
                .dir
                .or(file.dir)
                .unwrap_or_else(|| PathBuf::from("./data")),
            checkpoint_interval_ms: flags
                .checkpoint_interval
                .or(file.checkpoint_interval)
                .unwrap_or(1000)
                .max(10),
            metrics_port: flags.metrics_port.or(file.metrics_port).unwrap_or(0),
            loglevel: match flags.loglevel.or(file.loglevel) {
                Some(name) => name.parse()?,
                None => LogLevel::Notice,
            },
            threads,
            checkpoint_rate_bytes_per_s: memory(
                &flags.checkpoint_rate,
                &file.checkpoint_rate,
                "checkpoint-rate",
                0,
            )?,
            checkpoint_nice: flags
                .checkpoint_nice
                .or(file.checkpoint_nice)
                .unwrap_or(prefixkv_engine::DEFAULT_CHECKPOINT_THREAD_NICE),
            checkpoint_priority: match flags.checkpoint_priority.or(file.checkpoint_priority) {
                Some(name) => name
                    .parse()
                    .map_err(|error: String| anyhow::anyhow!("checkpoint-priority: {error}"))?,
                // `idle` by measurement: docs/results/server.md, "Issue 32's runs" (writes kept
                // 0.75-0.85 of their rate during saves against 0.67-0.70 with `nice`).
                None => CheckpointPriority::Idle,
            },
            checkpoint_idle_floor_bytes_per_s: memory(
                &flags.checkpoint_idle_floor,
                &file.checkpoint_idle_floor,
                "checkpoint-idle-floor",
                prefixkv_engine::DEFAULT_CHECKPOINT_IDLE_FLOOR_BYTES_PER_S,
            )?,
            checkpoint_direct_io,
            storage_tier,
            engine_compact_dead_fraction,
            engine_index_buckets,
            settings: Settings {
                requirepass: flags
                    .requirepass
                    .or(file.requirepass)
                    .filter(|p| !p.is_empty()),
                maxclients: flags.maxclients.or(file.maxclients).unwrap_or(10_000),
                maxmemory_bytes,
                eviction,
                durability: flags
                    .appendfsync
                    .as_deref()
                    .or(file.appendfsync.as_deref())
                    .unwrap_or("everysec")
                    .parse::<Durability>()
                    .map_err(|error| anyhow::anyhow!("appendfsync: {error}"))?,
                protected_mode,
                client_query_buffer_limit_bytes: memory(
                    &flags.client_query_buffer_limit,
                    &file.client_query_buffer_limit,
                    "client-query-buffer-limit",
                    1 << 30,
                )?,
                client_output_buffer_limit_bytes: memory(
                    &flags.client_output_buffer_limit,
                    &file.client_output_buffer_limit,
                    "client-output-buffer-limit",
                    1 << 30,
                )?,
                proto_max_bulk_len_bytes: memory(
                    &flags.proto_max_bulk_len,
                    &file.proto_max_bulk_len,
                    "proto-max-bulk-len",
                    512 << 20,
                )?,
                slowlog_log_slower_than_us: flags
                    .slowlog_log_slower_than
                    .or(file.slowlog_log_slower_than)
                    .unwrap_or(10_000),
                slowlog_max_len: flags
                    .slowlog_max_len
                    .or(file.slowlog_max_len)
                    .unwrap_or(128)
                    .min(MAX_SLOWLOG_LEN),
                encoding_thresholds: ENCODING_THRESHOLDS
                    .iter()
                    .map(|(name, default, _)| (*name, *default))
                    .collect(),
                engine_memory_bytes: memory(
                    &flags.engine_memory,
                    &file.engine_memory,
                    "engine-memory",
                    1 << 30,
                )?,
                notify_keyspace_events: 0,
                busy_reply_threshold_ms: flags
                    .busy_reply_threshold
                    .or(file.busy_reply_threshold)
                    .or(file.lua_time_limit)
                    .unwrap_or(5000),
                lua_memory_limit_bytes: memory(
                    &flags.lua_memory_limit,
                    &file.lua_memory_limit,
                    "lua-memory-limit",
                    128 << 20,
                )?,
            },
        };
        if config.settings.lua_memory_limit_bytes < MIN_LUA_MEMORY_LIMIT {
            bail!(
                "lua-memory-limit {} is below the minimum of 1mb (a Lua VM with Redis's \
                 libraries needs about 200kb)",
                config.settings.lua_memory_limit_bytes
            );
        }
        let minimum_engine_memory = crate::persistence::MIN_ENGINE_MEMORY_BYTES;
        if config.settings.engine_memory_bytes < minimum_engine_memory {
            bail!(
                "engine-memory {} is below the minimum of 32mb (the engine's log needs at least 8 \
                 of the server's 4 MiB pages)",
                config.settings.engine_memory_bytes
            );
        }
        if !(0..=19).contains(&config.checkpoint_nice) {
            bail!(
                "checkpoint-nice {} is outside 0..=19 (0 runs checkpoints like requests, 19 yields the most)",
                config.checkpoint_nice
            );
        }
        let minimum_rate = prefixkv_engine::checkpoint_files::pacer::MIN_WRITE_BYTES_PER_S;
        if config.checkpoint_rate_bytes_per_s != 0
            && config.checkpoint_rate_bytes_per_s < minimum_rate
        {
            bail!(
                "checkpoint-rate {} is below the minimum of 64kb per second; use 0 for no limit",
                config.checkpoint_rate_bytes_per_s
            );
        }
        if config.checkpoint_idle_floor_bytes_per_s < minimum_rate {
            bail!(
                "checkpoint-idle-floor {} is below the minimum of 64kb per second",
                config.checkpoint_idle_floor_bytes_per_s
            );
        }
        if config.settings.protected_mode
            && config.settings.requirepass.is_none()
            && !is_loopback(&config.bind)
        {
            bail!(
                "refusing to listen on non-loopback address {} without a password: set requirepass, \
                 or protected-mode no if the network is trusted",
                config.bind
            );
        }
        Ok(config)
    }
}

/// The eviction settings from the flags, else the file, else Redis's defaults.
fn eviction_settings(
    flags: &Flags,
    file: &FileConfig,
) -> anyhow::Result<prefixkv_commands::evict::Settings> {
    let mut settings = prefixkv_commands::evict::Settings::default();
    let given = [
        (&flags.maxmemory_policy, &file.maxmemory_policy),
        (&flags.maxmemory_samples, &file.maxmemory_samples),
        (
            &flags.maxmemory_eviction_tenacity,
            &file.maxmemory_eviction_tenacity,
        ),
        (&flags.lfu_log_factor, &file.lfu_log_factor),
        (&flags.lfu_decay_time, &file.lfu_decay_time),
    ];
    for (name, (flag, file)) in prefixkv_commands::evict::settings::NAMES.iter().zip(given) {
        let text = match (flag, file) {
            (Some(text), _) => text.clone(),
            (None, Some(toml::Value::String(text))) => text.clone(),
            (None, Some(toml::Value::Integer(number))) => number.to_string(),
            (None, Some(_)) => bail!("config key {name}: expected a string or an integer"),
            (None, None) => continue,
        };
        settings
            .set(name, &text)
            .map_err(|why| anyhow::anyhow!("{name} '{text}': {why}"))?;
    }
    Ok(settings)
}

/// Whether a bind address is loopback only.
pub fn is_loopback(bind: &str) -> bool {
    match bind.parse::<std::net::IpAddr>() {
        Ok(address) => address.is_loopback(),
        Err(_) => bind == "localhost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prefixkv.toml");
        std::fs::write(
            &path,
            "port = 7001\nappendfsync = \"always\"\nmaxmemory = \"100mb\"\nprotected-mode = \"yes\"\n\
             client-query-buffer-limit = 1048576\ncheckpoint-interval = 250\n\
             checkpoint-rate = \"50mb\"\ncheckpoint-nice = 19\ncheckpoint-direct-io = \"no\"\n\
             checkpoint-priority = \"nice\"\ncheckpoint-idle-floor = \"1mb\"\n",
        )
        .unwrap();
        let flags = Flags {
            config: Some(path.clone()),
            appendfsync: Some("checkpoint".into()),
            ..Flags::default()
        };
        let config = Config::resolve(flags).unwrap();
        assert_eq!(config.port, 7001);
        assert!(config.port_explicit);
        assert_eq!(
            config.settings.durability,
            Durability::Checkpoint,
            "a flag beats the file"
        );
        assert_eq!(config.settings.maxmemory_bytes, 100 << 20);
        assert_eq!(config.settings.client_query_buffer_limit_bytes, 1 << 20);
        assert_eq!(config.checkpoint_interval_ms, 250);
        assert_eq!(config.checkpoint_rate_bytes_per_s, 50 << 20);
        assert_eq!(config.checkpoint_nice, 19);
        assert_eq!(config.checkpoint_priority, CheckpointPriority::Nice);
        assert_eq!(config.checkpoint_idle_floor_bytes_per_s, 1 << 20);
        assert!(!config.checkpoint_direct_io);
        for (flags, key) in [
            (
                Flags {
                    checkpoint_priority: Some("realtime".into()),
                    ..Flags::default()
                },
                "checkpoint-priority",
            ),
            (
                Flags {
                    checkpoint_idle_floor: Some("1kb".into()),
                    ..Flags::default()
                },
                "checkpoint-idle-floor",
            ),
        ] {
            let error = Config::resolve(flags).unwrap_err();
            assert!(format!("{error:#}").contains(key), "{error:#}");
        }
        let error = Config::resolve(Flags {
            engine_memory: Some("31mb".into()),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(format!("{error:#}").contains("engine-memory"), "{error:#}");
        let smallest = Config::resolve(Flags {
            engine_memory: Some("32mb".into()),
            ..Flags::default()
        })
        .unwrap();
        assert_eq!(smallest.settings.engine_memory_bytes, 32 << 20);
        let error = Config::resolve(Flags {
            checkpoint_nice: Some(20),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("checkpoint-nice"),
            "{error:#}"
        );
        let error = Config::resolve(Flags {
            checkpoint_rate: Some("1kb".into()),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("checkpoint-rate"),
            "{error:#}"
        );
        std::fs::write(&path, "no-such-key = 1\n").unwrap();
        let error = Config::resolve(Flags {
            config: Some(path),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(format!("{error:#}").contains("no-such-key"), "{error:#}");
    }

    #[test]
    fn defaults() {
        let config = Config::resolve(Flags::default()).unwrap();
        assert_eq!((config.port, config.port_explicit), (6379, false));
        assert_eq!(config.bind, "127.0.0.1");
        assert_eq!(config.dir, PathBuf::from("./data"));
        assert_eq!(config.settings.durability, Durability::EverySec);
        assert_eq!(config.settings.client_query_buffer_limit_bytes, 1 << 30);
        assert_eq!(
            config.checkpoint_nice,
            prefixkv_engine::DEFAULT_CHECKPOINT_THREAD_NICE
        );
        assert_eq!(config.checkpoint_priority, CheckpointPriority::Idle);
        assert_eq!(
            config.checkpoint_idle_floor_bytes_per_s,
            prefixkv_engine::DEFAULT_CHECKPOINT_IDLE_FLOOR_BYTES_PER_S
        );
        assert!(config.checkpoint_direct_io);
        assert!(!config.storage_tier);
        assert_eq!(config.settings.busy_reply_threshold_ms, 5000);
        assert_eq!(config.settings.lua_memory_limit_bytes, 128 << 20);
        assert_eq!(
            config.settings.eviction,
            prefixkv_commands::evict::Settings::default()
        );
    }

    #[test]
    fn eviction_settings_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prefixkv.toml");
        std::fs::write(
            &path,
            "maxmemory-policy = \"volatile-ttl\"\nmaxmemory-samples = 10\nlfu-decay-time = 0\n",
        )
        .unwrap();
        let config = Config::resolve(Flags {
            config: Some(path),
            maxmemory_policy: Some("allkeys-lfu".into()),
            lfu_log_factor: Some("3".into()),
            ..Flags::default()
        })
        .unwrap();
        let eviction = &config.settings.eviction;
        assert_eq!(
            eviction.policy,
            prefixkv_commands::evict::Policy::AllKeysLfu,
            "a flag beats the file"
        );
        assert_eq!((eviction.samples, eviction.lfu_decay_time), (10, 0));
        assert_eq!((eviction.lfu_log_factor, eviction.tenacity), (3, 10));
        let error = Config::resolve(Flags {
            maxmemory_samples: Some("0".into()),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("maxmemory-samples"),
            "{error:#}"
        );
    }

    #[test]
    fn scripting_settings() {
        let config = Config::resolve(Flags {
            busy_reply_threshold: Some(250),
            lua_memory_limit: Some("8mb".into()),
            ..Flags::default()
        })
        .unwrap();
        assert_eq!(config.settings.busy_reply_threshold_ms, 250);
        assert_eq!(config.settings.lua_memory_limit_bytes, 8 << 20);
        let error = Config::resolve(Flags {
            lua_memory_limit: Some("100kb".into()),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("lua-memory-limit"),
            "{error:#}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prefixkv.toml");
        std::fs::write(&path, "lua-time-limit = 300\n").unwrap();
        let config = Config::resolve(Flags {
            config: Some(path),
            ..Flags::default()
        })
        .unwrap();
        assert_eq!(
            config.settings.busy_reply_threshold_ms, 300,
            "Redis's older name"
        );
    }

    #[test]
    fn non_loopback_needs_password() {
        let flags = Flags {
            bind: Some("0.0.0.0".into()),
            ..Flags::default()
        };
        assert!(Config::resolve(flags).is_err());
        let flags = Flags {
            bind: Some("0.0.0.0".into()),
            protected_mode: Some("no".into()),
            ..Flags::default()
        };
        assert!(Config::resolve(flags).is_ok());
    }
}
