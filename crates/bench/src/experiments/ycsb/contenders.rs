//! The contenders `ycsb` compares: which map each is, how it is built and loaded, and the
//! checkpoint driver beside the checkpointed engine. The maps themselves (and their
//! [`Worker`](crate::workload::maps::Worker)s) are shared with `cpr` in [`crate::workload::maps`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use prefixkv_engine::{SessionId, Store, StoreConfig, Strategy};

use super::ledger::Ledger;

use crate::workload::maps::{
    fill, DashMapMap, EngineMap, Loaded, PapayaMap, RwLockMap, PREFETCH_AHEAD,
};

/// One contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// The engine, no checkpoints.
    Engine,
    /// The engine, no checkpoints, without its batch hints (prefetches): the other maps have
    /// no such API, so this is the like-for-like row.
    EngineNoHints,
    /// The engine with a Persian checkpoint every `--checkpoint-interval-ms`.
    EnginePersian,
    /// The engine with its storage tier (`StoreConfig::storage_tier`) and a log budget of
    /// `--log-memory-bytes`: the oldest log pages go to a page file in the round's directory.
    /// It runs as `engine-no-hints` does (no prefetch hints: RocksDB, its peer, has no such
    /// API), so `engine-no-hints` is what it is compared with to show what the tier costs. Not
    /// in the default `--variants` (ask for it by name).
    EngineTiered,
    /// `dashmap` with the standard library's SipHash.
    DashMapSipHash,
    /// `dashmap` with `foldhash`.
    DashMapFoldHash,
    /// `papaya` (its default hasher).
    Papaya,
    /// 64 `RwLock<HashMap>` shards (SipHash): the floor any concurrent map should beat.
    ShardedRwLock,
    /// RocksDB (WAL off, an LRU block cache of `--rocksdb-block-cache-bytes`): issue 33's
    /// larger-than-memory peer. Only with the cargo feature `rocksdb`; never in the default
    /// `--variants` (ask for it by name).
    #[cfg(feature = "rocksdb")]
    RocksDb,
}

/// The name of the RocksDB contender (parsed in every build, so that a build without the feature
/// can say why it cannot run it).
pub const ROCKSDB: &str = "rocksdb";

impl Contender {
    /// The default contenders, in report order (every one but `rocksdb`).
    pub const ALL: [Contender; 7] = [
        Contender::Engine,
        Contender::EngineNoHints,
        Contender::EnginePersian,
        Contender::DashMapSipHash,
        Contender::DashMapFoldHash,
        Contender::Papaya,
        Contender::ShardedRwLock,
    ];

    /// Contenders run only when named in `--variants` (besides `rocksdb`, which needs its
    /// feature).
    pub const BY_NAME: [Contender; 1] = [Contender::EngineTiered];

    /// The name used on the command line and in rows.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Engine => "engine",
            Contender::EngineNoHints => "engine-no-hints",
            Contender::EnginePersian => "engine-persian",
            Contender::EngineTiered => "engine-tiered",
            Contender::DashMapSipHash => "dashmap-siphash",
            Contender::DashMapFoldHash => "dashmap-foldhash",
            Contender::Papaya => "papaya",
            Contender::ShardedRwLock => "rwlock-sharded",
            #[cfg(feature = "rocksdb")]
            Contender::RocksDb => ROCKSDB,
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Result<Contender> {
        if name == ROCKSDB {
            #[cfg(feature = "rocksdb")]
            return Ok(Contender::RocksDb);
            #[cfg(not(feature = "rocksdb"))]
            anyhow::bail!(
                "contender {ROCKSDB:?}: built without the `rocksdb` feature; see docs/benchmarks.md"
            );
        }
        Contender::ALL
            .into_iter()
            .chain(Contender::BY_NAME)
            .find(|contender| contender.name() == name)
            .ok_or_else(|| {
                let mut names: Vec<&str> = Contender::ALL
                    .iter()
                    .chain(&Contender::BY_NAME)
                    .map(|c| c.name())
                    .collect();
                names.push(ROCKSDB);
                anyhow::anyhow!("unknown contender {name:?}: expected one of {names:?}")
            })
    }
}

/// A loaded contender.
pub struct LoadedMap {
    /// The map, ready to hand out workers.
    pub map: Box<dyn Loaded>,
    /// The engine store a checkpoint driver runs on (checkpointed engine only).
    pub store: Option<Arc<Store>>,
    /// The store of every engine contender (for its memory figures and the tier's evidence).
    pub engine: Option<Arc<Store>>,
    /// The loader threads' engine sessions and the upserts each ran (engines only).
    pub loaders: Vec<(SessionId, u64)>,
    /// The version of the RocksDB library linked, as RocksDB reports it (`rocksdb` only).
    pub rocksdb_version: Option<String>,
}

/// The sizes (and I/O mode) a contender is built with.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Distinct keys loaded.
    pub keys: u64,
    /// Bytes of every value the engine contenders and `rocksdb` write (`--value-bytes`).
    pub value_bytes: usize,
    /// `engine-tiered`'s log memory budget (`--log-memory-bytes`).
    pub tiered_log_memory_bytes: u64,
    /// The `rocksdb` contender's block cache.
    pub rocksdb_block_cache_bytes: u64,
    /// Direct I/O (`O_DIRECT`) for `rocksdb`'s files and `engine-tiered`'s page-file writes, so
    /// that the kernel's page cache is no second cache beyond the budget (the page file's reads
    /// are still buffered: see `docs/benchmarks.md`); `false` (`--buffered-io`): both through the
    /// page cache.
    pub direct_io: bool,
}

/// Builds `contender` and loads keys `key(0..sizes.keys)` into it (with `threads` loader
/// threads). `dir` holds the engine's files (and RocksDB's, in `dir/rocksdb`). Returns the map
/// and, for the checkpointing contender, the store to drive checkpoints on.
pub fn load(
    contender: Contender,
    sizes: &Sizes,
    threads: usize,
    dir: &std::path::Path,
) -> Result<LoadedMap> {
    let keys = sizes.keys;
    let loaded: Box<dyn Loaded> = match contender {
        Contender::Engine
        | Contender::EngineNoHints
        | Contender::EnginePersian
        | Contender::EngineTiered => {
            let config = if contender == Contender::EngineTiered {
                tiered_engine_config(
                    keys,
                    sizes.value_bytes,
                    sizes.tiered_log_memory_bytes,
                    sizes.direct_io,
                    dir,
                )
            } else {
                engine_config(keys, sizes.value_bytes, dir)
            };
            let store = Store::open(config)?;
            let engine_record = store.record_bytes(8, sizes.value_bytes) as u64;
            if engine_record != record_bytes(sizes.value_bytes) {
                anyhow::bail!(
                    "the engine's record of an 8-byte key and a {}-byte value is {engine_record} \
                     bytes, ycsb assumed {} (update contenders::record_bytes)",
                    sizes.value_bytes,
                    record_bytes(sizes.value_bytes)
                );
            }
            let map = EngineMap {
                store: store.clone(),
                prefetch_ahead: if matches!(
                    contender,
                    Contender::EngineNoHints | Contender::EngineTiered
                ) {
                    0
                } else {
                    PREFETCH_AHEAD
                },
                value_bytes: sizes.value_bytes,
                pending: contender == Contender::EngineTiered,
            };
            let loaders = fill(&map, keys, threads);
            return Ok(LoadedMap {
                map: Box::new(map),
                store: (contender == Contender::EnginePersian).then(|| store.clone()),
                engine: Some(store),
                loaders,
                rocksdb_version: None,
            });
        }
        Contender::DashMapSipHash => {
            Box::new(DashMapMap(dashmap::DashMap::with_capacity_and_hasher(
                keys as usize,
                std::hash::RandomState::new(),
            )))
        }
        Contender::DashMapFoldHash => {
            Box::new(DashMapMap(dashmap::DashMap::with_capacity_and_hasher(
                keys as usize,
                foldhash::fast::RandomState::default(),
            )))
        }
        Contender::Papaya => Box::new(PapayaMap(papaya::HashMap::with_capacity(keys as usize))),
        Contender::ShardedRwLock => Box::new(RwLockMap::with_capacity(keys)),
        #[cfg(feature = "rocksdb")]
        Contender::RocksDb => {
            let map = super::rocksdb::RocksDbMap::open(
                &dir.join(ROCKSDB),
                sizes.rocksdb_block_cache_bytes,
                sizes.value_bytes,
                sizes.direct_io,
            )?;
            fill(&map, keys, threads);
            let rocksdb_version = map.library_version.clone();
            return Ok(LoadedMap {
                map: Box::new(map),
                store: None,
                engine: None,
                loaders: Vec::new(),
                rocksdb_version,
            });
        }
    };
    fill(&*loaded, keys, threads);
    Ok(LoadedMap {
        map: loaded,
        store: None,
        engine: None,
        loaders: Vec::new(),
        rocksdb_version: None,
    })
}

/// Bytes the engine's log takes for one record of an 8-byte key and a `value_bytes` value: a
/// 24-byte header, the key's word and the value's words (docs/engine.md "Record layout"; no
/// stable-copy word, as no contender makes `cpr-copy` its strategy). [`load`] checks it against
/// `Store::record_bytes` before it loads an engine.
pub fn record_bytes(value_bytes: usize) -> u64 {
    24 + 8 + value_bytes.div_ceil(8) as u64 * 8
}

/// The engine's configuration for `keys` 8-byte keys with `value_bytes` values, all in memory:
/// at most 6 keys per bucket (3 to 6: the bucket count is a power of two; docs/engine.md's
/// advice, 13-22 bytes of index per key), and a log budget of twice the larger of 64 bytes and
/// the record ([`record_bytes`]; 40 bytes for 8-byte values, so 128 bytes a key as before
/// `--value-bytes` existed) per key, at least 64 MiB: room for every key and for the copies
/// updates make before compaction frees pages.
pub fn engine_config(keys: u64, value_bytes: usize, dir: &std::path::Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = (keys as usize / 6).next_power_of_two().max(1 << 10);
    config.log_memory_bytes = (keys * record_bytes(value_bytes).max(64) * 2).max(64 << 20);
    config.log_page_bytes = 4 << 20;
    config
}

/// The smallest `--log-memory-bytes` `engine-tiered` accepts: 16 pages of the smallest page it
/// configures ([`TIERED_MIN_PAGE_BYTES`]).
pub const TIERED_MIN_LOG_MEMORY_BYTES: u64 = 16 * TIERED_MIN_PAGE_BYTES as u64;

/// The smallest log page `engine-tiered` configures: a record of the largest value
/// (`MAX_VALUE_BYTES`) fits it 15 times.
pub const TIERED_MIN_PAGE_BYTES: usize = 64 << 10;

// The largest record (24-byte header, key word, the largest value) fits the smallest page many
// times over.
const _: () =
    assert!(24 + 8 + crate::workload::operations::MAX_VALUE_BYTES < TIERED_MIN_PAGE_BYTES / 8);

/// `engine-tiered`'s configuration: [`engine_config`]'s index, a storage tier, and a log budget of
/// `log_memory_bytes`; its page file with direct I/O or through the page cache (`direct_io`,
/// the engine's `checkpoint_direct_io`, which the page file follows). Its pages are the in-memory engine's 4 MiB while the budget holds at least
/// 64 of them; below that, the largest power of two that gives 64 pages (at least
/// [`TIERED_MIN_PAGE_BYTES`]), so that eviction (a chunk is an eighth of the writers' budget)
/// moves a small share of the budget at a time however small the budget is.
pub fn tiered_engine_config(
    keys: u64,
    value_bytes: usize,
    log_memory_bytes: u64,
    direct_io: bool,
    dir: &std::path::Path,
) -> StoreConfig {
    let mut config = engine_config(keys, value_bytes, dir);
    config.storage_tier = true;
    config.checkpoint_direct_io = direct_io;
    config.log_memory_bytes = log_memory_bytes;
    config.log_page_bytes = tiered_page_bytes(log_memory_bytes);
    config
}

/// The log page size of `engine-tiered` for a budget of `log_memory_bytes` (see
/// [`tiered_engine_config`]).
pub fn tiered_page_bytes(log_memory_bytes: u64) -> usize {
    let per_page = (log_memory_bytes / 64).max(1);
    let largest = 1u64 << (63 - per_page.leading_zeros());
    largest.clamp(TIERED_MIN_PAGE_BYTES as u64, 4 << 20) as usize
}

/// Checkpoints the driver started and finished so far.
#[derive(Debug, Default)]
pub struct CheckpointCounts {
    /// Checkpoints requested.
    pub started: std::sync::atomic::AtomicU64,
    /// Checkpoints committed.
    pub completed: std::sync::atomic::AtomicU64,
}

/// Takes a Persian checkpoint every `interval` until `stop`, counting started and finished
/// ones in `counts`, and noting in `ledger`, before each request, what every session had been
/// acknowledged. It runs for a whole round of the checkpointed contender (not per run), so the
/// cadence is the system's, whatever the length of one run: a run of 3 s under a 5 s interval
/// meets a checkpoint in the share of runs that the interval implies.
pub fn checkpoint_driver(
    store: &Store,
    interval: Duration,
    stop: &std::sync::atomic::AtomicBool,
    counts: &CheckpointCounts,
    ledger: &Ledger,
) -> Result<()> {
    let mut next = std::time::Instant::now() + interval;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if std::time::Instant::now() < next {
            std::thread::sleep(Duration::from_millis(5)); // polling the stop flag, bounded
            continue;
        }
        counts
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Read before the request: a lower bound of what each session was acknowledged.
        let acknowledged = ledger.acknowledged_now();
        let token = store.checkpoint(Strategy::Persian)?;
        ledger.requested(token.version, acknowledged);
        store.wait_for_commit(token, Duration::from_secs(600))?;
        counts
            .completed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        next = std::time::Instant::now() + interval;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::operations::MAX_VALUE_BYTES;

    /// `rocksdb` is a name in every build: with the feature it is the contender, without it a
    /// clear error that says where to look.
    #[test]
    fn rocksdb_parses_or_says_why_not() {
        let parsed = Contender::parse(ROCKSDB);
        #[cfg(feature = "rocksdb")]
        assert_eq!(parsed.unwrap().name(), ROCKSDB);
        #[cfg(not(feature = "rocksdb"))]
        {
            let error = parsed.unwrap_err().to_string();
            assert!(
                error.contains("built without the `rocksdb` feature; see docs/benchmarks.md"),
                "{error}"
            );
        }
        assert!(!Contender::ALL.iter().any(|c| c.name() == ROCKSDB));
        let unknown = Contender::parse("nope").unwrap_err().to_string();
        assert!(unknown.contains("\"rocksdb\""), "{unknown}");
        assert!(unknown.contains("\"engine-tiered\""), "{unknown}");
        assert_eq!(
            Contender::parse("engine-tiered").unwrap(),
            Contender::EngineTiered
        );
        assert!(!Contender::ALL.contains(&Contender::EngineTiered));
    }

    /// The record size the config section reports is the engine's own, for the values
    /// `--value-bytes` allows (the engine's answer depends on nothing but the sizes here).
    #[test]
    fn record_bytes_are_the_engines() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(tiered_engine_config(1000, 8, 1 << 20, true, dir.path())).unwrap();
        for value_bytes in [8, 9, 16, 100, 1000, MAX_VALUE_BYTES] {
            assert_eq!(
                store.record_bytes(8, value_bytes) as u64,
                record_bytes(value_bytes),
                "{value_bytes}-byte values"
            );
        }
        assert_eq!(record_bytes(8), 40);
        assert_eq!(record_bytes(100), 136);
    }

    /// The tiered engine's pages: 4 MiB from a 256 MiB budget up, at least 64 pages below it,
    /// never under 64 KiB; every budget from the smallest accepted opens a store.
    #[test]
    fn tiered_pages_fit_the_budget() {
        assert_eq!(tiered_page_bytes(256 << 20), 4 << 20);
        assert_eq!(tiered_page_bytes(340_000_000), 4 << 20);
        assert_eq!(tiered_page_bytes(6_800_000), 64 << 10);
        assert_eq!(tiered_page_bytes(64 << 20), 1 << 20);
        assert_eq!(tiered_page_bytes(TIERED_MIN_LOG_MEMORY_BYTES), 64 << 10);
        let dir = tempfile::tempdir().unwrap();
        let config =
            tiered_engine_config(1000, 100, TIERED_MIN_LOG_MEMORY_BYTES, false, dir.path());
        assert!(config.storage_tier && !config.checkpoint_direct_io);
        Store::open(config).unwrap();
    }
}
