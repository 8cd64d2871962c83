//! The settings the commands read, and CONFIG GET/SET change at run time: limits, eviction,
//! keyspace notifications, scripting, the slow log, Redis's encoding thresholds.
//!
//! Invariants: a `Settings` is always valid as a whole (CONFIG SET checks every pair before any
//! takes effect, and the host's flag/file parsing uses the same parsers and bounds); every
//! client-controlled size it bounds (`proto-max-bulk-len`, the buffer limits, `slowlog-max-len`,
//! `lua-memory-limit`) has a finite default. What only the embedding process knows (port, data
//! directory, checkpoint schedule, threads) is not here: the host answers for it
//! (`crate::host::Host`).

use anyhow::{bail, Context};

/// What is durable when, one setting for the whole server: `prefixkv_store::Durability`, the
/// store's one policy type (every per-mode decision and the loss statement live there).
pub use prefixkv_store::Durability;

/// Redis's encoding thresholds: (name, Redis's default, what it means here). Client libraries and
/// tools read and set them; the hash ones decide what OBJECT ENCODING reports for a hash, the
/// others are kept and shown but change nothing, since this server stores those types its own
/// way or not at all.
pub const ENCODING_THRESHOLDS: &[(&str, i64, &str)] = &[
    (
        "hash-max-listpack-entries",
        512,
        "a hash past it moves into records",
    ),
    (
        "hash-max-listpack-value",
        64,
        "a hash with a longer field or value moves into records",
    ),
    ("list-max-listpack-size", -2, "accepted, no effect"),
    ("list-compress-depth", 0, "accepted, no effect"),
    ("set-max-intset-entries", 512, "accepted, no effect"),
    ("set-max-listpack-entries", 128, "accepted, no effect"),
    ("set-max-listpack-value", 64, "accepted, no effect"),
    ("zset-max-listpack-entries", 128, "accepted, no effect"),
    ("zset-max-listpack-value", 64, "accepted, no effect"),
    ("stream-node-max-bytes", 4096, "accepted, no effect"),
    ("stream-node-max-entries", 100, "accepted, no effect"),
    ("hll-sparse-max-bytes", 3000, "accepted, no effect"),
];

/// The canonical name of an encoding threshold, accepting Redis's older `ziplist` aliases.
pub fn encoding_threshold_name(name: &str) -> Option<&'static str> {
    let canonical = name.replace("ziplist", "listpack");
    ENCODING_THRESHOLDS
        .iter()
        .map(|(known, _, _)| *known)
        .find(|known| *known == canonical)
}

/// The largest `slowlog-max-len` accepted: the slow log's memory stays bounded (an entry holds at
/// most 32 arguments of 128 bytes).
pub const MAX_SLOWLOG_LEN: u64 = 100_000;

/// The smallest `lua-memory-limit` accepted.
pub const MIN_LUA_MEMORY_LIMIT: u64 = 1 << 20;

/// The settings of the command layer. `Default` is Redis's defaults (and ours where Redis has
/// no such setting): what a host that takes no configuration uses.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Password, if any.
    pub requirepass: Option<String>,
    /// Client limit (the host's listener enforces it; INFO and CONFIG show it).
    pub maxclients: u64,
    /// Memory limit in bytes (0 = none).
    pub maxmemory_bytes: u64,
    /// `maxmemory-policy` and the settings of eviction (`crate::evict`).
    pub eviction: crate::evict::Settings,
    /// Durability mode: the store's (`Server::new` takes it from the store, so the two agree).
    pub durability: Durability,
    /// Protected mode (the host checks it when it binds; CONFIG shows and sets it).
    pub protected_mode: bool,
    /// Per-client query buffer cap.
    pub client_query_buffer_limit_bytes: u64,
    /// Per-client output cap.
    pub client_output_buffer_limit_bytes: u64,
    /// Largest request bulk string.
    pub proto_max_bulk_len_bytes: u64,
    /// `slowlog-log-slower-than` in µs (negative: off).
    pub slowlog_log_slower_than_us: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: u64,
    /// Redis's encoding thresholds, by name ([`ENCODING_THRESHOLDS`]), as CONFIG SET left them.
    pub encoding_thresholds: Vec<(&'static str, i64)>,
    /// The engine's in-memory log budget, for MEMORY STATS (the host sizes the store with it).
    pub engine_memory_bytes: u64,
    /// `notify-keyspace-events` flags (`crate::notify`; 0 = off, the default; CONFIG SET only).
    pub notify_keyspace_events: u32,
    /// Milliseconds a script runs before other clients get BUSY (`busy-reply-threshold`).
    pub busy_reply_threshold_ms: u64,
    /// Heap limit of each Lua VM and bound of the script cache (`lua-memory-limit`).
    pub lua_memory_limit_bytes: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            requirepass: None,
            maxclients: 10_000,
            maxmemory_bytes: 0,
            eviction: crate::evict::Settings::default(),
            durability: Durability::EverySec,
            protected_mode: true,
            client_query_buffer_limit_bytes: 1 << 30,
            client_output_buffer_limit_bytes: 1 << 30,
            proto_max_bulk_len_bytes: 512 << 20,
            slowlog_log_slower_than_us: 10_000,
            slowlog_max_len: 128,
            encoding_thresholds: ENCODING_THRESHOLDS
                .iter()
                .map(|(name, default, _)| (*name, *default))
                .collect(),
            engine_memory_bytes: 1 << 30,
            notify_keyspace_events: 0,
            busy_reply_threshold_ms: 5000,
            lua_memory_limit_bytes: 128 << 20,
        }
    }
}

impl Settings {
    /// The current value of encoding threshold `name` (canonical).
    pub fn encoding_threshold(&self, name: &str) -> i64 {
        self.encoding_thresholds
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, value)| *value)
            .expect("every threshold has a value")
    }
}

/// Parses `100`, `100b`, `64kb`, `64k`, `100mb`, `2gb` (Redis's memory units: `k` = 1000,
/// `kb` = 1024).
pub fn parse_memory(text: &str) -> anyhow::Result<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let number: u64 = digits
        .parse()
        .with_context(|| format!("'{text}' is not a memory size (examples: 100mb, 2gb)"))?;
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => bail!("'{text}' has an unknown unit (use b, k, kb, m, mb, g, gb)"),
    };
    number
        .checked_mul(multiplier)
        .with_context(|| format!("'{text}' is too large"))
}

/// Parses `yes`/`no`.
pub fn parse_yes_no(text: &str) -> anyhow::Result<bool> {
    match text.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => bail!("expected yes or no, got '{text}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("100").unwrap(), 100);
        assert_eq!(parse_memory("1kb").unwrap(), 1024);
        assert_eq!(parse_memory("2GB").unwrap(), 2 << 30);
        assert!(parse_memory("1tb").is_err());
        assert!(parse_memory("x").is_err());
    }

    #[test]
    fn encoding_threshold_aliases() {
        assert_eq!(
            encoding_threshold_name("hash-max-ziplist-entries"),
            Some("hash-max-listpack-entries")
        );
        assert_eq!(encoding_threshold_name("no-such-threshold"), None);
        let settings = Settings::default();
        assert_eq!(
            settings.encoding_threshold("hash-max-listpack-entries"),
            512
        );
    }
}
