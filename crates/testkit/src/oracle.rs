//! The prefix oracle: deterministic per-session workloads, a check of the CPR points a recovered
//! checkpoint reports against what its clients were acknowledged ([`check_points`]), and a check
//! that a recovered image is exactly the state those points name ([`verify_image`]): every
//! session's operations up to its point, none after.
//!
//! # Trust only what clients were told
//!
//! A checkpoint's own report (its CPR points, counts, digests) is a claim, never the reference.
//! [`check_points`] compares each reported point with two facts the client side recorded itself:
//! the last serial the session had been acknowledged *before the checkpoint was requested* (a
//! point below it would drop acknowledged work the checkpoint promised to hold) and the last serial
//! the session ever *issued* (a point above it names operations that never ran). Only points that
//! pass are used to rebuild the expected image, so a store that loses writes and under-reports its
//! points to match is caught by the first check, and one that reports honest points but loses a
//! write is caught by the second.
//!
//! # Workloads without an operation log
//!
//! The operation of session `s` at serial `n` is a pure function [`op_at`]`(spec, s, n)`: a
//! splitmix64-style hash of `(seed, s, n)` picks read or upsert and the key, so neither the
//! workload driver nor the checker stores anything per operation, and the checker can replay any
//! session's prefix at a few nanoseconds per operation. A value written by an upsert is
//! [`encode_value`]`(s, n)`: the image itself says which session wrote it and when.
//!
//! Session index 0 is the loader: its serial `n` in `1..=keys` upserts key `n - 1` (every key once,
//! in order); beyond `keys` it only reads. The loader is assumed to finish before any worker
//! (index >= 1) starts, which is how preloading is done; the checker uses that order (a loader
//! value is stale if a worker upserted the same key within its prefix).
//!
//! # Zipfian keys without tables
//!
//! Skewed keys use the continuous approximation of Zipf's law with exponent θ = 0.99 (YCSB's
//! default): with `u` uniform in [0, 1) and `N = keys`, the rank is
//! `floor((1 + u·((N+1)^(1-θ) − 1))^(1/(1-θ))) − 1`, which inverts the integral of `x^-θ` over
//! `[1, N+1)`. It needs one `powf` and one `powi(100)` per operation and no per-spec table; it
//! slightly under-weights the very first ranks compared with the discrete law, which does not matter
//! for a workload. Ranks are scrambled to keys by a hash so that hot keys spread over the index; two
//! ranks may land on the same key, merging their weight, also harmless here.
//!
//! # What `verify_image` checks, for every key
//!
//! Workers may also delete keys (`WorkloadSpec::delete_percent`). Sessions run concurrently, so
//! when two sessions last wrote a key within their prefixes, either write may be the final one;
//! the check accepts exactly the states some interleaving could produce:
//! (a) a value `(s, n)` in the image has `1 <= n <= cpr(s)` and session `s`'s op `n` upserted that
//!     key; (b) `n` is `s`'s last write (upsert or delete) of the key within its prefix, and if `s`
//!     is the loader, no worker wrote the key within its prefix; (c) a key is present if the loader
//!     wrote it and no worker did, or if every worker that wrote it last upserted it; (d) no other
//!     key is present. Errors name the key, the session and the serials.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The loader's session index.
pub const LOADER_SESSION: u32 = 0;
/// Largest serial a value can encode (48 bits).
pub const MAX_SERIAL: u64 = (1 << 48) - 1;
/// Exponent of the zipfian distribution.
pub const ZIPF_THETA: f64 = 0.99;

/// A deterministic workload shared by all sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadSpec {
    /// Size of the key space `0..keys` (at least 1).
    pub keys: u64,
    /// Percentage of worker operations that are reads (0..=100).
    pub read_percent: u32,
    /// Percentage of worker operations that are deletes (`read_percent + delete_percent <= 100`;
    /// the rest are upserts).
    pub delete_percent: u32,
    /// Zipfian (θ = 0.99, scrambled) instead of uniform keys for workers.
    pub zipfian: bool,
    /// When not 0, worker operations repeat every `cycle` serials: operation `n` reads, writes
    /// or deletes the key operation `(n - 1) % cycle + 1` does (its value still encodes `n`), so
    /// that a benchmark can generate `cycle` operations per session before it starts timing and
    /// its loop only indexes arrays, as FASTER's benchmark does. 0: no repetition.
    pub cycle: u64,
    /// Seed; different seeds give unrelated workloads.
    pub seed: u64,
}

/// One operation of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read the key.
    Read(u64),
    /// Upsert the key with `encode_value(session, serial)`.
    Upsert(u64),
    /// Delete the key.
    Delete(u64),
}

impl Op {
    /// The key the operation touches.
    pub fn key(self) -> u64 {
        match self {
            Op::Read(key) | Op::Upsert(key) | Op::Delete(key) => key,
        }
    }

    /// The key as stored: 8 bytes, big-endian.
    pub fn key_bytes(self) -> [u8; 8] {
        encode_key(self.key())
    }
}

/// A key as stored: 8 bytes, big-endian (so byte order is numeric order).
pub fn encode_key(key: u64) -> [u8; 8] {
    key.to_be_bytes()
}

/// The inverse of [`encode_key`]; `None` unless `bytes` is 8 bytes long.
pub fn decode_key(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// The value written by session `session_index` at `serial`: session in the top 16 bits, serial in
/// the low 48, big-endian.
pub fn encode_value(session_index: u32, serial: u64) -> [u8; 8] {
    assert!(
        session_index <= u32::from(u16::MAX),
        "session index {session_index} exceeds 16 bits"
    );
    assert!(serial <= MAX_SERIAL, "serial {serial} exceeds 48 bits");
    ((u64::from(session_index) << 48) | serial).to_be_bytes()
}

/// The inverse of [`encode_value`]: `(session_index, serial)`, `None` unless 8 bytes long.
pub fn decode_value(bytes: &[u8]) -> Option<(u32, u64)> {
    let word = u64::from_be_bytes(bytes.try_into().ok()?);
    Some(((word >> 48) as u32, word & MAX_SERIAL))
}

/// The splitmix64 finaliser: a fast bijective mixer of 64 bits.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// `x * range / 2^64`: maps a uniform 64-bit value to `0..range` without division.
#[inline]
fn scale(x: u64, range: u64) -> u64 {
    ((u128::from(x) * u128::from(range)) >> 64) as u64
}

#[inline]
fn zipf_rank(uniform_bits: u64, keys: u64) -> u64 {
    let unit = (uniform_bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    let exponent = 1.0 - ZIPF_THETA;
    let span = ((keys as f64) + 1.0).powf(exponent) - 1.0;
    let x = (1.0 + unit * span).powi((1.0 / exponent).round() as i32);
    // Float rounding can land a hair outside [1, keys + 1).
    (x as u64).saturating_sub(1).min(keys - 1)
}

/// The operation of session `session_index` at `serial` (>= 1). Pure and cheap.
#[inline]
pub fn op_at(spec: &WorkloadSpec, session_index: u32, serial: u64) -> Op {
    assert!(spec.keys >= 1, "a workload needs at least one key");
    assert!(
        spec.read_percent + spec.delete_percent <= 100,
        "read_percent + delete_percent must be at most 100"
    );
    assert!(serial >= 1, "serials start at 1");
    if session_index == LOADER_SESSION {
        return if serial <= spec.keys {
            Op::Upsert(serial - 1)
        } else {
            Op::Read((serial - 1) % spec.keys)
        };
    }
    let seed_word = mix64(spec.seed.wrapping_add(GOLDEN_GAMMA));
    let position = if spec.cycle == 0 {
        serial
    } else {
        (serial - 1) % spec.cycle + 1
    };
    let hash = mix64(seed_word ^ ((u64::from(session_index) << 48) ^ position));
    let percentile = scale(hash, 100);
    let key_bits = mix64(hash.wrapping_add(GOLDEN_GAMMA));
    let key = if spec.zipfian {
        let rank = zipf_rank(key_bits, spec.keys);
        scale(mix64(rank ^ seed_word), spec.keys)
    } else {
        scale(key_bits, spec.keys)
    };
    if percentile < u64::from(spec.read_percent) {
        Op::Read(key)
    } else if percentile < u64::from(spec.read_percent + spec.delete_percent) {
        Op::Delete(key)
    } else {
        Op::Upsert(key)
    }
}

/// What [`verify_image`] looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifySummary {
    /// Keys in the image (each checked).
    pub keys_checked: u64,
    /// Operations replayed over all sessions.
    pub ops_replayed: u64,
}

/// A hasher for small integer keys: the map holds tens of millions of `(key, session)` pairs.
#[derive(Default)]
struct IntegerHasher(u64);

impl Hasher for IntegerHasher {
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3);
        }
    }
    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = mix64(self.0 ^ value).wrapping_add(GOLDEN_GAMMA);
    }
}

/// A session's last write of a key within its prefix: the serial, and whether it was a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LastWrite {
    serial: u64,
    delete: bool,
}

type KeyToSerial = HashMap<u64, LastWrite, BuildHasherDefault<IntegerHasher>>;

/// For every worker session, its last write (upsert or delete) of each key within its prefix.
struct WorkerPrefixes {
    sessions: Vec<(u32, KeyToSerial)>,
}

impl WorkerPrefixes {
    /// Replays the worker sessions of `cpr_points`, several sessions at a time on different threads.
    fn replay(spec: &WorkloadSpec, cpr_points: &HashMap<u32, u64>) -> WorkerPrefixes {
        let workers: Vec<(u32, u64)> = cpr_points
            .iter()
            .filter(|(&session, _)| session != LOADER_SESSION)
            .map(|(&session, &cpr_point)| (session, cpr_point))
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |threads| threads.get())
            .clamp(1, workers.len().max(1));
        let replay_one = |session: u32, cpr_point: u64| {
            let mut last = KeyToSerial::default();
            for serial in 1..=cpr_point {
                match op_at(spec, session, serial) {
                    Op::Upsert(key) => last.insert(
                        key,
                        LastWrite {
                            serial,
                            delete: false,
                        },
                    ),
                    Op::Delete(key) => last.insert(
                        key,
                        LastWrite {
                            serial,
                            delete: true,
                        },
                    ),
                    Op::Read(_) => None,
                };
            }
            (session, last)
        };
        let mut sessions: Vec<(u32, KeyToSerial)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let workers = &workers;
                    let replay_one = &replay_one;
                    scope.spawn(move || {
                        workers
                            .iter()
                            .skip(thread)
                            .step_by(threads)
                            .map(|&(session, cpr_point)| replay_one(session, cpr_point))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|handle| handle.join().expect("replay thread panicked"))
                .collect()
        });
        sessions.sort_unstable_by_key(|(session, _)| *session);
        WorkerPrefixes { sessions }
    }

    fn last(&self, key: u64, session: u32) -> Option<LastWrite> {
        let position = self
            .sessions
            .binary_search_by_key(&session, |(s, _)| *s)
            .ok()?;
        self.sessions[position].1.get(&key).copied()
    }

    /// Some worker that wrote `key` within its prefix, and its last write of it.
    fn any_writer(&self, key: u64) -> Option<(u32, LastWrite)> {
        self.sessions
            .iter()
            .find_map(|(session, last)| last.get(&key).map(|&write| (*session, write)))
    }
}

/// A set of keys in `0..keys`.
struct KeyBits(Vec<u64>);

impl KeyBits {
    fn new(keys: u64) -> KeyBits {
        KeyBits(vec![0; keys.div_ceil(64) as usize])
    }
    fn insert(&mut self, key: u64) -> bool {
        let (word, bit) = ((key / 64) as usize, 1u64 << (key % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }
    fn contains(&self, key: u64) -> bool {
        self.0[(key / 64) as usize] & (1u64 << (key % 64)) != 0
    }
    fn count(&self) -> u64 {
        self.0.iter().map(|word| u64::from(word.count_ones())).sum()
    }
}

/// What the client side knows about one session, recorded by the test or experiment itself
/// (never read from the store): the reference [`check_points`] holds a checkpoint's claims to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointBounds {
    /// The session index its values encode.
    pub session: u32,
    /// The last serial the session had been acknowledged before the checkpoint was requested:
    /// the checkpoint must hold at least this much (0 if nothing was acknowledged yet).
    pub acknowledged_before_request: u64,
    /// The last serial the session ever issued: no checkpoint can hold more.
    pub issued: u64,
}

/// Checks the CPR points a recovered checkpoint reports (`(session index, point)`) against what
/// the clients recorded: every session of `bounds` must have a point with
/// `acknowledged_before_request <= point <= issued` (a session missing from `reported` counts as
/// point 0), and every reported session must be one the clients know (or have point 0: a session
/// can be registered before it runs anything). On success returns the points to verify the image
/// against, one per session of `bounds`.
pub fn check_points(
    reported: &[(u32, u64)],
    bounds: &[PointBounds],
) -> Result<Vec<(u32, u64)>, String> {
    let mut claimed: HashMap<u32, u64> = HashMap::new();
    for &(session, point) in reported {
        if claimed.insert(session, point).is_some() {
            return Err(format!("the checkpoint lists session {session} twice"));
        }
    }
    let mut points = Vec::with_capacity(bounds.len());
    for bound in bounds {
        let point = claimed.remove(&bound.session).unwrap_or(0);
        if bound.acknowledged_before_request > bound.issued {
            return Err(format!(
                "bounds of session {} are inconsistent: acknowledged {} but issued only {}",
                bound.session, bound.acknowledged_before_request, bound.issued
            ));
        }
        if point < bound.acknowledged_before_request {
            return Err(format!(
                "session {}: the checkpoint's CPR point is {point}, but the session had been \
                 acknowledged serial {} before the checkpoint was requested (acknowledged work \
                 missing from the checkpoint)",
                bound.session, bound.acknowledged_before_request
            ));
        }
        if point > bound.issued {
            return Err(format!(
                "session {}: the checkpoint's CPR point is {point}, but the session only ever \
                 issued serials up to {} (a point past anything that ran)",
                bound.session, bound.issued
            ));
        }
        points.push((bound.session, point));
    }
    if let Some((&session, &point)) = claimed.iter().find(|(_, &point)| point > 0) {
        return Err(format!(
            "the checkpoint lists session {session} at point {point}, a session the clients never ran"
        ));
    }
    Ok(points)
}

/// [`check_points`], then [`verify_image`] with the checked points: the whole recovery check.
pub fn verify_recovery<I>(
    spec: &WorkloadSpec,
    reported: &[(u32, u64)],
    bounds: &[PointBounds],
    image: I,
) -> Result<VerifySummary, String>
where
    I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
{
    let points = check_points(reported, bounds)?;
    verify_image(spec, &points, image).map_err(|problem| format!("{problem}; points {points:?}"))
}

/// Checks that `image` (every (key, value) pair of a recovered store) is exactly a state after
/// each session in `sessions` (`(session_index, cpr_point)`) ran its operations `1..=cpr_point`.
/// See the module docs for the rules; the error names the key, session and serials involved.
/// The points must come from [`check_points`] (or be known exactly), never from the store alone.
pub fn verify_image<I>(
    spec: &WorkloadSpec,
    sessions: &[(u32, u64)],
    image: I,
) -> Result<VerifySummary, String>
where
    I: IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
{
    if spec.keys == 0 {
        return Err("the workload has no keys (spec.keys = 0)".into());
    }
    let mut cpr_points: HashMap<u32, u64> = HashMap::new();
    for &(session, cpr_point) in sessions {
        if session > u32::from(u16::MAX) || cpr_point > MAX_SERIAL {
            return Err(format!(
                "session {session} with CPR point {cpr_point} does not fit a value"
            ));
        }
        if cpr_points.insert(session, cpr_point).is_some() {
            return Err(format!("session {session} is listed twice"));
        }
    }
    let mut summary = VerifySummary::default();
    // Keys that must be present: loaded and not written by any worker, or written by workers
    // whose last writes were all upserts.
    let mut required = KeyBits::new(spec.keys);
    // The loader's prefix needs no replay: it upserted keys 0..loaded, key k at serial k + 1.
    let loaded_keys = cpr_points
        .get(&LOADER_SESSION)
        .map_or(0, |&cpr| cpr.min(spec.keys));
    summary.ops_replayed += cpr_points.get(&LOADER_SESSION).copied().unwrap_or(0);
    let workers = WorkerPrefixes::replay(spec, &cpr_points);
    let mut worker_written = KeyBits::new(spec.keys);
    let mut worker_deleted = KeyBits::new(spec.keys);
    for (session, last) in &workers.sessions {
        for (&key, write) in last {
            worker_written.insert(key);
            if write.delete {
                worker_deleted.insert(key);
            }
        }
        summary.ops_replayed += cpr_points[session];
    }
    for key in 0..spec.keys {
        let loaded = key < loaded_keys && !worker_written.contains(key);
        let upserted = worker_written.contains(key) && !worker_deleted.contains(key);
        if loaded || upserted {
            required.insert(key);
        }
    }

    let mut seen = KeyBits::new(spec.keys);
    let mut seen_required = 0u64;
    for (key_bytes, value_bytes) in image {
        summary.keys_checked += 1;
        let key = decode_key(&key_bytes)
            .ok_or_else(|| format!("key {key_bytes:02x?} is not an 8-byte workload key"))?;
        if key >= spec.keys {
            return Err(format!(
                "extra key {key}: outside the key space 0..{}",
                spec.keys
            ));
        }
        if !seen.insert(key) {
            return Err(format!("key {key} appears twice in the image"));
        }
        if key >= loaded_keys && !worker_written.contains(key) {
            return Err(format!(
                "extra key {key}: no session upserted it within its prefix (value {value_bytes:02x?})"
            ));
        }
        seen_required += u64::from(required.contains(key));
        let (session, serial) = decode_value(&value_bytes).ok_or_else(|| {
            format!("key {key}: value {value_bytes:02x?} is not an 8-byte workload value")
        })?;
        let Some(&cpr_point) = cpr_points.get(&session) else {
            return Err(format!(
                "key {key}: value says session {session} serial {serial}, but session {session} \
                 is not among the recovered sessions (value from a wrong session)"
            ));
        };
        if serial == 0 || serial > cpr_point {
            return Err(format!(
                "key {key}: value from session {session} serial {serial} is after its CPR point \
                 {cpr_point} (an operation outside the recovered prefix)"
            ));
        }
        let op = op_at(spec, session, serial);
        if op != Op::Upsert(key) {
            return Err(format!(
                "key {key}: value says session {session} serial {serial}, but that operation was \
                 {op:?} (value from a wrong session or for a wrong key)"
            ));
        }
        if session == LOADER_SESSION {
            if let Some((writer, write)) = workers.any_writer(key) {
                return Err(format!(
                    "key {key}: lost write: the image holds the loader's value (serial {serial}) \
                     but session {writer} {} it at serial {} <= its CPR point",
                    if write.delete { "deleted" } else { "upserted" },
                    write.serial
                ));
            }
        } else {
            let last = workers
                .last(key, session)
                .expect("a valid upsert within the prefix is recorded");
            if last.serial != serial {
                return Err(format!(
                    "key {key}: lost write: the image holds session {session} serial {serial} but \
                     the session {} the key again at serial {} <= its CPR point {cpr_point}",
                    if last.delete { "deleted" } else { "upserted" },
                    last.serial
                ));
            }
        }
    }
    if seen_required != required.count() {
        let missing = (0..spec.keys)
            .find(|&key| required.contains(key) && !seen.contains(key))
            .expect("a count mismatch means some required key is unseen");
        let writer = match workers.any_writer(missing) {
            None => format!(
                "the loader (session 0) upserted it at serial {}",
                missing + 1
            ),
            Some((session, write)) => format!(
                "session {session} upserted it at serial {} <= its CPR point (and no session's \
                 last write of it is a delete)",
                write.serial
            ),
        };
        return Err(format!(
            "missing key {missing}: {writer}, but the image does not hold it"
        ));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests;
