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

    /// The name used on the command line and in rows.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Engine => "engine",
            Contender::EngineNoHints => "engine-no-hints",
            Contender::EnginePersian => "engine-persian",
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
            .find(|contender| contender.name() == name)
            .ok_or_else(|| {
                let mut names: Vec<&str> = Contender::ALL.iter().map(|c| c.name()).collect();
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
    /// The loader threads' engine sessions and the upserts each ran (engines only).
    pub loaders: Vec<(SessionId, u64)>,
    /// The version of the RocksDB library linked, as RocksDB reports it (`rocksdb` only).
    pub rocksdb_version: Option<String>,
}

/// Builds `contender` and loads keys `key(0..keys)` into it (with `threads` loader threads).
/// `dir` holds the engine's files (and RocksDB's, in `dir/rocksdb`, with a block cache of
/// `rocksdb_block_cache_bytes`). Returns the map and, for the checkpointing contender, the store
/// to drive checkpoints on.
#[cfg_attr(not(feature = "rocksdb"), allow(unused_variables))]
pub fn load(
    contender: Contender,
    keys: u64,
    threads: usize,
    dir: &std::path::Path,
    rocksdb_block_cache_bytes: u64,
) -> Result<LoadedMap> {
    let loaded: Box<dyn Loaded> = match contender {
        Contender::Engine | Contender::EngineNoHints | Contender::EnginePersian => {
            let store = Store::open(engine_config(keys, dir))?;
            let map = EngineMap {
                store: store.clone(),
                prefetch_ahead: if contender == Contender::EngineNoHints {
                    0
                } else {
                    PREFETCH_AHEAD
                },
            };
            let loaders = fill(&map, keys, threads);
            let store = (contender == Contender::EnginePersian).then_some(store);
            return Ok(LoadedMap {
                map: Box::new(map),
                store,
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
            let map =
                super::rocksdb::RocksDbMap::open(&dir.join(ROCKSDB), rocksdb_block_cache_bytes)?;
            fill(&map, keys, threads);
            let rocksdb_version = map.library_version.clone();
            return Ok(LoadedMap {
                map: Box::new(map),
                store: None,
                loaders: Vec::new(),
                rocksdb_version,
            });
        }
    };
    fill(&*loaded, keys, threads);
    Ok(LoadedMap {
        map: loaded,
        store: None,
        loaders: Vec::new(),
        rocksdb_version: None,
    })
}

/// The engine's configuration for `keys` 8-byte keys: at most 6 keys per bucket (3 to 6: the
/// bucket count is a power of two; docs/engine.md's advice, 13-22 bytes of index per key), and
/// a log budget of more than twice what the records need (40 bytes each), at least 64 MiB.
pub fn engine_config(keys: u64, dir: &std::path::Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = (keys as usize / 6).next_power_of_two().max(1 << 10);
    config.log_memory_bytes = (keys * 64 * 2).max(64 << 20);
    config.log_page_bytes = 4 << 20;
    config
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
    }
}
