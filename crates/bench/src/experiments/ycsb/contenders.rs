//! The maps `ycsb` compares, each behind the same [`Worker`] interface: 8-byte keys and values
//! (the key's little-endian bytes), a read copies the value out, an upsert writes the key's
//! bytes, a read-modify-write adds 1 to the stored counter.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use parking_lot::RwLock;
use prefixkv_engine::{Session, Store, StoreConfig, Strategy};

use super::driver::{key, Kind, Worker};

/// One contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// The engine, no checkpoints.
    Engine,
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
}

impl Contender {
    /// Every contender, in report order.
    pub const ALL: [Contender; 6] = [
        Contender::Engine,
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
            Contender::EnginePersian => "engine-persian",
            Contender::DashMapSipHash => "dashmap-siphash",
            Contender::DashMapFoldHash => "dashmap-foldhash",
            Contender::Papaya => "papaya",
            Contender::ShardedRwLock => "rwlock-sharded",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Result<Contender> {
        Contender::ALL
            .into_iter()
            .find(|contender| contender.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Contender::ALL.iter().map(|c| c.name()).collect();
                anyhow::anyhow!("unknown contender {name:?}: expected one of {names:?}")
            })
    }
}

/// A loaded map, ready to hand out workers.
pub trait Loaded: Sync {
    /// A worker for one thread.
    fn worker(&self) -> Box<dyn Worker + '_>;
}

/// A loaded contender, and the engine store a checkpoint driver runs on (checkpointed engine only).
pub type LoadedMap = (Box<dyn Loaded>, Option<Arc<Store>>);

/// Builds `contender` and loads keys `key(0..keys)` into it (with `threads` loader threads).
/// `dir` holds the engine's files. Returns the map and, for the checkpointing contender, the
/// store to drive checkpoints on.
pub fn load(
    contender: Contender,
    keys: u64,
    threads: usize,
    dir: &std::path::Path,
) -> Result<LoadedMap> {
    let loaded: Box<dyn Loaded> = match contender {
        Contender::Engine | Contender::EnginePersian => {
            let store = Store::open(engine_config(keys, dir))?;
            let map = EngineMap {
                store: store.clone(),
            };
            fill(&map, keys, threads);
            let driver = (contender == Contender::EnginePersian).then_some(store);
            return Ok((Box::new(map), driver));
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
        Contender::ShardedRwLock => Box::new(RwLockMap(
            (0..SHARDS)
                .map(|_| RwLock::new(HashMap::with_capacity(keys as usize / SHARDS)))
                .collect(),
        )),
    };
    fill(&*loaded, keys, threads);
    Ok((loaded, None))
}

/// The engine's configuration for `keys` 8-byte keys: about 2 keys per bucket, and a log budget
/// of twice what the records need (64 bytes each), at least 64 MiB.
pub fn engine_config(keys: u64, dir: &std::path::Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = (keys as usize / 2).next_power_of_two().max(1 << 10);
    config.log_memory_bytes = (keys * 64 * 2).max(64 << 20);
    config.log_page_bytes = 4 << 20;
    config
}

/// Upserts every key once, split over `threads` loader threads.
fn fill(map: &dyn Loaded, keys: u64, threads: usize) {
    let threads = threads.max(1) as u64;
    std::thread::scope(|scope| {
        for thread in 0..threads {
            scope.spawn(move || {
                let mut worker = map.worker();
                let mut batch = Vec::with_capacity(4096);
                let mut index = thread;
                while index < keys {
                    batch.push(key(index));
                    if batch.len() == 4096 {
                        worker.run(&batch, &[Kind::Upsert; 4096]);
                        batch.clear();
                    }
                    index += threads;
                }
                let kinds = vec![Kind::Upsert; batch.len()];
                worker.run(&batch, &kinds);
            });
        }
    });
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
/// ones in `counts`. It runs for a whole round of the checkpointed contender (not per run), so the
/// cadence is the system's, whatever the length of one run: a run of 3 s under a 5 s interval
/// meets a checkpoint in the share of runs that the interval implies.
pub fn checkpoint_driver(
    store: &Store,
    interval: Duration,
    stop: &std::sync::atomic::AtomicBool,
    counts: &CheckpointCounts,
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
        let token = store.checkpoint(Strategy::Persian)?;
        store.wait_for_commit(token, Duration::from_secs(600))?;
        counts
            .completed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        next = std::time::Instant::now() + interval;
    }
    Ok(())
}

struct EngineMap {
    store: Arc<Store>,
}

struct EngineWorker {
    session: Session,
    value: Vec<u8>,
}

impl Loaded for EngineMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(EngineWorker {
            session: self.store.start_session(),
            value: Vec::with_capacity(8),
        })
    }
}

/// How far ahead the engine worker prefetches index buckets, and records (half as far).
const PREFETCH_AHEAD: usize = 16;

impl Worker for EngineWorker {
    fn run(&mut self, keys: &[u64], kinds: &[Kind]) {
        // The engine's batch hints (`Session::prefetch_index` / `prefetch_record`): the loads of
        // later operations overlap this one's instead of waiting one after another.
        for &key in keys.iter().take(PREFETCH_AHEAD) {
            self.session.prefetch_index(&key.to_le_bytes());
        }
        for &key in keys.iter().take(PREFETCH_AHEAD / 2) {
            self.session.prefetch_record(&key.to_le_bytes());
        }
        for (position, (&key, &kind)) in keys.iter().zip(kinds).enumerate() {
            if let Some(ahead) = keys.get(position + PREFETCH_AHEAD) {
                self.session.prefetch_index(&ahead.to_le_bytes());
            }
            if let Some(ahead) = keys.get(position + PREFETCH_AHEAD / 2) {
                self.session.prefetch_record(&ahead.to_le_bytes());
            }
            let bytes = key.to_le_bytes();
            let result = match kind {
                Kind::Read => self.session.read(&bytes, &mut self.value).map(|_| ()),
                Kind::Upsert => self.session.upsert(&bytes, &bytes),
                Kind::Rmw => self.session.rmw(&bytes, |old, new| {
                    let count = old.map_or(0, |old| {
                        u64::from_le_bytes(old.try_into().expect("8-byte values"))
                    });
                    new.extend_from_slice(&count.wrapping_add(1).to_le_bytes());
                }),
            };
            result.expect("the engine refused an operation of the benchmark");
        }
        std::hint::black_box(&self.value);
    }

    fn contains(&mut self, key: u64) -> bool {
        self.session
            .read(&key.to_le_bytes(), &mut self.value)
            .expect("the engine refused a read")
    }
}

impl Drop for EngineWorker {
    fn drop(&mut self) {
        self.session.suspend();
    }
}

struct DashMapMap<S>(dashmap::DashMap<u64, u64, S>);

impl<S: BuildHasher + Clone + Send + Sync> Loaded for DashMapMap<S> {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(DashMapWorker(&self.0))
    }
}

struct DashMapWorker<'a, S>(&'a dashmap::DashMap<u64, u64, S>);

impl<S: BuildHasher + Clone> Worker for DashMapWorker<'_, S> {
    fn run(&mut self, keys: &[u64], kinds: &[Kind]) {
        let mut found = 0u64;
        for (&key, &kind) in keys.iter().zip(kinds) {
            match kind {
                Kind::Read => found += self.0.get(&key).map_or(0, |value| *value),
                Kind::Upsert => {
                    self.0.insert(key, key);
                }
                Kind::Rmw => *self.0.entry(key).or_insert(0) += 1,
            }
        }
        std::hint::black_box(found);
    }

    fn contains(&mut self, key: u64) -> bool {
        self.0.contains_key(&key)
    }
}

struct PapayaMap(papaya::HashMap<u64, u64>);

impl Loaded for PapayaMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(PapayaWorker(&self.0))
    }
}

struct PapayaWorker<'a>(&'a papaya::HashMap<u64, u64>);

impl Worker for PapayaWorker<'_> {
    fn run(&mut self, keys: &[u64], kinds: &[Kind]) {
        let map = self.0.pin();
        let mut found = 0u64;
        for (&key, &kind) in keys.iter().zip(kinds) {
            match kind {
                Kind::Read => found += map.get(&key).copied().unwrap_or(0),
                Kind::Upsert => {
                    map.insert(key, key);
                }
                Kind::Rmw => {
                    map.update_or_insert(key, |count| count + 1, 1);
                }
            }
        }
        std::hint::black_box(found);
    }

    fn contains(&mut self, key: u64) -> bool {
        self.0.pin().contains_key(&key)
    }
}

const SHARDS: usize = 64;

struct RwLockMap(Vec<RwLock<HashMap<u64, u64>>>);

impl Loaded for RwLockMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(RwLockWorker(&self.0))
    }
}

struct RwLockWorker<'a>(&'a [RwLock<HashMap<u64, u64>>]);

impl Worker for RwLockWorker<'_> {
    fn run(&mut self, keys: &[u64], kinds: &[Kind]) {
        let mut found = 0u64;
        for (&key, &kind) in keys.iter().zip(kinds) {
            // The keys are already hashes: their top bits pick the shard.
            let shard = &self.0[(key >> 58) as usize % SHARDS];
            match kind {
                Kind::Read => found += shard.read().get(&key).copied().unwrap_or(0),
                Kind::Upsert => {
                    shard.write().insert(key, key);
                }
                Kind::Rmw => *shard.write().entry(key).or_insert(0) += 1,
            }
        }
        std::hint::black_box(found);
    }

    fn contains(&mut self, key: u64) -> bool {
        self.0[(key >> 58) as usize % SHARDS]
            .read()
            .contains_key(&key)
    }
}
