//! The maps `ycsb` and `cpr` compare, each behind the same [`Worker`] interface over
//! [`Chunk`]s of pre-generated operations: 8-byte keys and values, a read copies the value out,
//! an upsert writes the operation's [`stamp`](super::operations::stamp), a read-modify-write adds 1
//! to the stored counter. The engine ([`EngineMap::value_bytes`]) and `ycsb`'s RocksDB also write
//! larger values (`ycsb --value-bytes`): the stamp or counter, then a fixed filler
//! ([`value_buffer`]); the in-memory maps always hold one `u64`.
//!
//! Invariant: one implementation per map, used by every experiment that measures it, so that
//! `ycsb`'s `dashmap-siphash` and `cpr`'s `dashmap` (and the two engines) run the same code and
//! their ratios can be compared.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::RwLock;
use prefixkv_engine::{EngineError, Session, SessionId, Started, Store};

use super::operations::{encode_key, key, leading_word, value_buffer, Chunk, Kind};

/// One thread's handle on a contender: runs the operations it is given.
pub trait Worker {
    /// Runs every operation of `chunk`.
    fn run(&mut self, chunk: &Chunk<'_>);
    /// Whether the map holds `key` (for verification, not timed).
    fn contains(&mut self, key: u64) -> bool;
    /// The engine session this worker runs on (engine workers only), so that a recovered
    /// checkpoint's CPR points can be mapped back to the bench's session indices.
    fn engine_session(&self) -> Option<SessionId> {
        None
    }
}

/// A loaded map, ready to hand out workers.
pub trait Loaded: Sync {
    /// A worker for one thread.
    fn worker(&self) -> Box<dyn Worker + '_>;
}

/// Upserts `key(0..keys)` once each, split into contiguous blocks over `threads` loader threads;
/// key `key(i)` gets `stamp(0, i + 1)`, as if one loader session (index 0) wrote them in order.
/// Returns, for an engine, each loader thread's engine session and how many upserts it ran.
pub fn fill(map: &dyn Loaded, keys: u64, threads: usize) -> Vec<(SessionId, u64)> {
    let threads = threads.max(1) as u64;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || {
                    let mut worker = map.worker();
                    let block = keys * thread / threads..keys * (thread + 1) / threads;
                    let upserts = block.end - block.start;
                    let loaded = load_range(0, block, &mut |chunk| {
                        worker.run(chunk);
                        Ok::<(), std::convert::Infallible>(())
                    });
                    let Ok(()) = loaded;
                    worker.engine_session().map(|id| (id, upserts))
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| handle.join().expect("a loader thread panicked"))
            .collect()
    })
}

/// Upserts `key(i)` for every `i` in `indices`, in order and in chunks, as `session` writing
/// `key(i)` at serial `i + 1` (so a loader that runs `0..keys` alone numbers its serials from 1).
pub fn load_range<E>(
    session: u32,
    indices: std::ops::Range<u64>,
    run: &mut dyn FnMut(&Chunk<'_>) -> Result<(), E>,
) -> Result<(), E> {
    const BATCH: u64 = 4096;
    let kinds = [Kind::Upsert; BATCH as usize];
    let mut keys = Vec::with_capacity(BATCH as usize);
    let mut first = indices.start;
    while first < indices.end {
        let end = (first + BATCH).min(indices.end);
        keys.clear();
        keys.extend((first..end).map(key));
        run(&Chunk {
            position: 0,
            keys: &keys,
            kinds: &kinds[..keys.len()],
            session,
            first_serial: first + 1,
        })?;
        first = end;
    }
    Ok(())
}

/// How far ahead the engine prefetches index buckets, and records (half as far).
pub const PREFETCH_AHEAD: usize = 16;

/// Runs `chunk` on an engine session, with the engine's batch hints
/// (`Session::prefetch_index` / `prefetch_record`) `prefetch_ahead` operations ahead (records
/// half as far; 0: no hints): the loads of later operations overlap this one's instead of waiting
/// one after another. `value` is scratch space for reads. Values are 8 bytes (`cpr`'s, and
/// `ycsb`'s default); [`run_engine_chunk_sized`] writes larger ones.
pub fn run_engine_chunk(
    session: &mut Session,
    value: &mut Vec<u8>,
    chunk: &Chunk<'_>,
    prefetch_ahead: usize,
) -> Result<(), EngineError> {
    run_engine_chunk_sized(session, value, &mut [0; 8], chunk, prefetch_ahead)
}

/// [`run_engine_chunk`] with values of `written.len()` bytes (at least 8): `written` is a
/// [`value_buffer`](super::operations::value_buffer) whose leading word each upsert overwrites
/// with its stamp; a read-modify-write writes the old value's leading word plus 1, then the same
/// filler.
pub fn run_engine_chunk_sized(
    session: &mut Session,
    value: &mut Vec<u8>,
    written: &mut [u8],
    chunk: &Chunk<'_>,
    prefetch_ahead: usize,
) -> Result<(), EngineError> {
    let keys = chunk.keys;
    for &key in keys.iter().take(prefetch_ahead) {
        session.prefetch_index(&encode_key(key));
    }
    for &key in keys.iter().take(prefetch_ahead / 2) {
        session.prefetch_record(&encode_key(key));
    }
    for (position, (&key, &kind)) in keys.iter().zip(chunk.kinds).enumerate() {
        if prefetch_ahead > 0 {
            if let Some(&ahead) = keys.get(position + prefetch_ahead) {
                session.prefetch_index(&encode_key(ahead));
            }
            if let Some(&ahead) = keys.get(position + prefetch_ahead / 2) {
                session.prefetch_record(&encode_key(ahead));
            }
        }
        let bytes = encode_key(key);
        match kind {
            Kind::Read => {
                session.read(&bytes, value)?;
            }
            Kind::Upsert => {
                written[..8].copy_from_slice(&chunk.value(position).to_be_bytes());
                session.upsert(&bytes, written)?;
            }
            Kind::Rmw => increment(session, &bytes, &written[8..])?,
        }
    }
    std::hint::black_box(&value);
    Ok(())
}

/// The benchmark's read-modify-write: the old value's leading word plus 1 (0 for a new key),
/// then `filler`.
fn increment(session: &mut Session, key: &[u8], filler: &[u8]) -> Result<(), EngineError> {
    session.rmw(key, |old, new| {
        let count = old.map_or(0, |old| {
            leading_word(old).expect("values of at least 8 bytes")
        });
        new.extend_from_slice(&count.wrapping_add(1).to_be_bytes());
        new.extend_from_slice(filler);
    })
}

/// Operations a worker keeps parked on the pending path before it waits for some to finish:
/// half the engine's table, so a start rarely finds it full (a full table runs synchronously).
pub const PENDING_IN_FLIGHT: usize = prefixkv_engine::PENDING_DEPTH / 2;

/// [`run_engine_chunk_sized`] on the engine's pending path (`Session::start_read`,
/// `start_upsert`, `complete_pending`): an operation whose key's record left memory parks while
/// its page-file read is in flight, and the worker goes on with the next ones, keeping up to
/// [`PENDING_IN_FLIGHT`] parked; the chunk ends with all of them finished. Read-modify-writes
/// run synchronously after the parked operations finished (the engine parks only reads and
/// upserts), so each key still sees its operations in order.
pub fn run_engine_chunk_pending(
    session: &mut Session,
    value: &mut Vec<u8>,
    written: &mut [u8],
    chunk: &Chunk<'_>,
) -> Result<(), EngineError> {
    let mut failure = None;
    let mut finish = |session: &mut Session, wait: bool| -> Result<(), EngineError> {
        session.complete_pending(wait, |finished| {
            if let Err((_, error)) = finished {
                failure.get_or_insert(error);
            }
        })?;
        Ok(())
    };
    for (position, (&key, &kind)) in chunk.keys.iter().zip(chunk.kinds).enumerate() {
        let bytes = encode_key(key);
        let started = match kind {
            Kind::Read => session.start_read(&bytes, value, position as u64)?,
            Kind::Upsert => {
                written[..8].copy_from_slice(&chunk.value(position).to_be_bytes());
                session.start_upsert(&bytes, written, position as u64)?
            }
            Kind::Rmw => {
                while session.pending() > 0 {
                    finish(session, true)?;
                }
                increment(session, &bytes, &written[8..])?;
                continue;
            }
        };
        if started == Started::Pending {
            let wait = session.pending() >= PENDING_IN_FLIGHT;
            finish(session, wait)?;
        }
    }
    while session.pending() > 0 {
        finish(session, true)?;
    }
    std::hint::black_box(&value);
    failure.map_or(Ok(()), Err)
}

/// The engine as a [`Loaded`] map: every worker is a new session.
pub struct EngineMap {
    /// The store the sessions run on.
    pub store: Arc<Store>,
    /// Batch hints this many operations ahead ([`PREFETCH_AHEAD`]; 0: none, as the other maps,
    /// which have no such API).
    pub prefetch_ahead: usize,
    /// Bytes of every value its workers write (8 or more: the stamp or counter, then filler).
    pub value_bytes: usize,
    /// Run chunks on the pending path ([`run_engine_chunk_pending`]; the tiered engine).
    pub pending: bool,
}

struct EngineWorker {
    session: Session,
    value: Vec<u8>,
    written: Vec<u8>,
    prefetch_ahead: usize,
    pending: bool,
}

impl Loaded for EngineMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(EngineWorker {
            session: self.store.start_session(),
            value: Vec::with_capacity(self.value_bytes),
            written: value_buffer(self.value_bytes),
            prefetch_ahead: self.prefetch_ahead,
            pending: self.pending,
        })
    }
}

impl Worker for EngineWorker {
    fn run(&mut self, chunk: &Chunk<'_>) {
        if self.pending {
            run_engine_chunk_pending(&mut self.session, &mut self.value, &mut self.written, chunk)
        } else {
            run_engine_chunk_sized(
                &mut self.session,
                &mut self.value,
                &mut self.written,
                chunk,
                self.prefetch_ahead,
            )
        }
        .expect("the engine refused an operation of the benchmark");
    }

    fn contains(&mut self, key: u64) -> bool {
        self.session
            .read(&encode_key(key), &mut self.value)
            .expect("the engine refused a read")
    }

    fn engine_session(&self) -> Option<SessionId> {
        Some(self.session.id())
    }
}

impl Drop for EngineWorker {
    fn drop(&mut self) {
        // Idle before it goes, so a checkpoint in flight never waits for this session.
        self.session.suspend();
    }
}

/// `dashmap` with the hasher `S`.
pub struct DashMapMap<S>(
    /// The map.
    pub dashmap::DashMap<u64, u64, S>,
);

impl<S: BuildHasher + Clone + Send + Sync> Loaded for DashMapMap<S> {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(DashMapWorker(&self.0))
    }
}

struct DashMapWorker<'a, S>(&'a dashmap::DashMap<u64, u64, S>);

impl<S: BuildHasher + Clone> Worker for DashMapWorker<'_, S> {
    fn run(&mut self, chunk: &Chunk<'_>) {
        let mut found = 0u64;
        for (position, (&key, &kind)) in chunk.keys.iter().zip(chunk.kinds).enumerate() {
            match kind {
                Kind::Read => found += self.0.get(&key).map_or(0, |value| *value),
                Kind::Upsert => {
                    self.0.insert(key, chunk.value(position));
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

/// `papaya` with its default hasher.
pub struct PapayaMap(
    /// The map.
    pub papaya::HashMap<u64, u64>,
);

impl Loaded for PapayaMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(PapayaWorker(&self.0))
    }
}

struct PapayaWorker<'a>(&'a papaya::HashMap<u64, u64>);

impl Worker for PapayaWorker<'_> {
    fn run(&mut self, chunk: &Chunk<'_>) {
        let map = self.0.pin();
        let mut found = 0u64;
        for (position, (&key, &kind)) in chunk.keys.iter().zip(chunk.kinds).enumerate() {
            match kind {
                Kind::Read => found += map.get(&key).copied().unwrap_or(0),
                Kind::Upsert => {
                    map.insert(key, chunk.value(position));
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

/// Shards of [`RwLockMap`].
pub const SHARDS: usize = 64;

/// [`SHARDS`] `RwLock<HashMap>`s (SipHash): the floor any concurrent map should beat.
pub struct RwLockMap(
    /// The shards.
    pub Vec<RwLock<HashMap<u64, u64>>>,
);

impl RwLockMap {
    /// Empty shards with room for `keys` keys in all.
    pub fn with_capacity(keys: u64) -> RwLockMap {
        RwLockMap(
            (0..SHARDS)
                .map(|_| RwLock::new(HashMap::with_capacity(keys as usize / SHARDS)))
                .collect(),
        )
    }
}

impl Loaded for RwLockMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(RwLockWorker(&self.0))
    }
}

struct RwLockWorker<'a>(&'a [RwLock<HashMap<u64, u64>>]);

/// The shard of `key`: the keys are already hashes, so their top bits pick it.
fn shard_of(key: u64) -> usize {
    (key >> 58) as usize % SHARDS
}

impl Worker for RwLockWorker<'_> {
    fn run(&mut self, chunk: &Chunk<'_>) {
        let mut found = 0u64;
        for (position, (&key, &kind)) in chunk.keys.iter().zip(chunk.kinds).enumerate() {
            let shard = &self.0[shard_of(key)];
            match kind {
                Kind::Read => found += shard.read().get(&key).copied().unwrap_or(0),
                Kind::Upsert => {
                    shard.write().insert(key, chunk.value(position));
                }
                Kind::Rmw => *shard.write().entry(key).or_insert(0) += 1,
            }
        }
        std::hint::black_box(found);
    }

    fn contains(&mut self, key: u64) -> bool {
        self.0[shard_of(key)].read().contains_key(&key)
    }
}
