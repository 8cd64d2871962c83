//! The keyspace: 16 logical databases on one durable store (`prefixkv-store`: the engine and the
//! operation log), key counts, expiry, and the read and write paths the commands use.
//!
//! Engine key = `[db number u8] ++ user key`; engine value = [`crate::value`] encoding.
//!
//! Invariants:
//! - Every write goes through a [`Txn`], a `prefixkv_store::Txn` over the keys it may touch, so
//!   for every key the operation-log order of its writes is its engine order, and a crash
//!   recovers each connection's prefix (`docs/store.md`). The server keeps no index of its own:
//!   KEYS, SCAN, RANDOMKEY, FLUSHDB and active expiry scan the engine's index.
//! - `counts[db].keys` is exact: the store reports whether each put or delete found a live key,
//!   and recovery reports every key it loads and every operation it replays. It includes expired
//!   keys not yet removed, as Redis's DBSIZE does.
//! - `counts[db].expires` is what the last complete expiry sweep saw (the sweep visits every key
//!   once per cycle), plus what recovery loaded: an estimate for INFO, documented as such.
//! - Every write of a user key marks the clients that WATCH it (`crate::watch`), inside its
//!   transaction, so an EXEC (which holds the exec gate exclusively) sees every mark of every
//!   write that finished before it.
//! - Every put of a user key wakes the first client blocked on that key for that kind of value
//!   (`crate::blocking`), and, while keyspace notifications are on, records the key for the
//!   command's events (`crate::notify`); a delete that found the key records it too. Both cost
//!   one atomic load when nobody is blocked and notifications are off. A lazy-expiry delete is
//!   not the command's write: it queues `expired` instead.
//! - Active expiry ([`Keyspace::expire_sweep`]) is incremental: one step visits a bounded number
//!   of index buckets and deletes only the expired keys among them.
//! - MULTI/EXEC (and script) isolation: the body runs in `prefixkv_store::StoreSession::exclusive`
//!   (the exec gate held exclusively) and every other command runs whole inside
//!   `StoreSession::shared` (the gate held shared: `commands::run_command`), so no command, read
//!   or write, runs while a body is half done. Reads take no lock of their own, so a read may
//!   still see part of a plain multi-key write (an MSET), as documented.
//! - An exclusive body's writes are one oplog group: recovery applies all of them or none, and
//!   its writes are acknowledged with the body's mark (`commands::run_exclusive`).
//! - Every lookup a command makes (`Keyspace::read`, `Txn::get`) updates the key's access word
//!   in the engine (`crate::evict::access`: an LRU clock or an LFU counter); the lookups Redis
//!   makes with `LOOKUP_NOTOUCH` (OBJECT, TYPE, the TTL family, EXISTS, MEMORY USAGE, eviction's
//!   own checks, lazy expiry) use the `_quiet` forms. New keys start with the store's access
//!   stamp, which `refresh_access_stamp` keeps at "now".
//! - Engine keys outside the 16 databases are never user keys: collection records (first byte
//!   0xFF, `prefixkv_collections`) and the function libraries' record
//!   (`crate::scripting::FUNCTIONS_KEY`, first byte 0xF0); KEYS, SCAN, DBSIZE, FLUSHDB and the
//!   expiry sweep see only `[db] ++ key` keys.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prefixkv_engine::EngineError;
use prefixkv_store::{DurableStore, StoreSession};

use crate::error::CommandError;
use crate::value::{self, Kind, Stored};
use crate::watch::Watches;

pub use prefixkv_store::WriteMark;

/// Number of logical databases (SELECT 0..15).
pub const DATABASES: usize = 16;
/// Index buckets one SCAN step, FLUSHDB step or expiry step visits at most (bounds the memory a
/// step holds whatever COUNT a client sends).
pub const MAX_BUCKETS_PER_STEP: usize = 1 << 16;

/// Wall-clock Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

mod counts;
mod stack_key;
pub use counts::KeyCounts;
pub(crate) use stack_key::StackKey;

/// The shared keyspace.
pub struct Keyspace {
    /// The durable store.
    pub store: Arc<DurableStore>,
    counts: KeyCounts,
    /// Keys with an expiry counted by the sweep cycle in progress.
    sweeping_expires: [AtomicI64; DATABASES],
    expire_cursor: AtomicU64,
    /// A key with an expiry was written since the last sweep cycle began (a cycle that saw no
    /// expiring key and no such write skips the next one: an idle keyspace costs nothing).
    ttl_written: AtomicBool,
    /// Keys removed by active or lazy expiry.
    pub expired_keys: AtomicU64,
    /// Keyspace notifications: writes record the keys they touch while it is active.
    pub notifier: crate::notify::Notifier,
    /// WATCH registrations: every write below marks the clients watching its key.
    pub watches: Watches,
    /// How a command's lookup updates a key's access word (LRU clock or LFU counter,
    /// `crate::evict::access`).
    pub access: crate::evict::AccessClock,
    /// Blocked clients: a write that puts a list, sorted set or stream wakes the first one
    /// waiting for that kind; a stream's deletion or overwrite and XGROUP DESTROY wake its
    /// stream readers too.
    pub blocked: crate::blocking::Blocked,
    /// The next collection object id: above every id recovery met, so an id is never shared by
    /// two live objects. 1 until the first collection exists (see [`Keyspace::may_hold_records`]).
    next_object_id: AtomicU64,
}

/// Capacity of a thread's read buffer ([`Keyspace::read_payload`]) kept between reads.
const RETAINED_READ_BUFFER_BYTES: usize = 64 * 1024;

thread_local! {
    /// The buffer [`Keyspace::read_payload`] reads values into, reused across reads.
    static READ_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    static SESSION: RefCell<Option<StoreSession>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's store session (started on first use). Never call across an
/// `.await`: the session belongs to the thread.
pub fn with_session<R>(store: &Arc<DurableStore>, f: impl FnOnce(&mut StoreSession) -> R) -> R {
    SESSION.with(|cell| {
        let mut slot = cell.borrow_mut();
        let session = slot.get_or_insert_with(|| {
            store
                .session()
                .expect("more threads than the engine's session limit")
        });
        f(session)
    })
}

/// Suspends this thread's session (runtime threads call it before parking), so an idle thread
/// never holds up a checkpoint.
pub fn suspend_thread_session() {
    SESSION.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if let Some(session) = slot.as_mut() {
                session.suspend();
            }
        }
    });
}

/// Drops this thread's session (threads call it before exiting).
pub fn end_thread_session() {
    SESSION.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            slot.take();
        }
    });
}

/// An engine key built on the stack when short ([`engine_key_buf`]).
type EngineKeyBuf = smallvec::SmallVec<[u8; 64]>;

/// [`engine_key`] without a heap allocation for keys under 64 bytes.
fn engine_key_buf(database: u8, key: &[u8]) -> EngineKeyBuf {
    let mut out = EngineKeyBuf::with_capacity(1 + key.len());
    out.push(database);
    out.extend_from_slice(key);
    out
}

/// The engine key of `key` in `database`: `[database] ++ key`.
pub(crate) fn engine_key(database: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(database);
    out.extend_from_slice(key);
    out
}

/// The database and user key of an engine key, if it is one of ours.
pub(crate) fn split_key(engine_key: &[u8]) -> Option<(u8, &[u8])> {
    let (&database, key) = engine_key.split_first()?;
    ((database as usize) < DATABASES).then_some((database, key))
}

impl Keyspace {
    /// Counts to gather while the store recovers ([`KeyCounts::with_store`] makes the keyspace).
    pub fn counting() -> KeyCounts {
        KeyCounts::default()
    }

    /// The key counts and the next object id as bytes, for a checkpoint's cookie
    /// (`DurableStore::set_cookie_extra`: called with no write transaction running, so they
    /// describe the checkpoint's state exactly); [`KeyCounts::restore`] reads them back.
    pub fn cookie_counts(&self) -> Vec<u8> {
        // A sweep cycle in progress has reset `ttl_written` but not yet published what it saw.
        let expiry_unknown = self.ttl_written.load(Ordering::Relaxed)
            || self.expire_cursor.load(Ordering::Relaxed) != 0;
        self.counts
            .encode(self.next_object_id.load(Ordering::Relaxed), expiry_unknown)
    }

    /// A fresh collection object id (never used by a live object).
    pub fn new_object_id(&self) -> u64 {
        self.next_object_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether any collection stored as records may exist. False only while no object id was
    /// ever given out or recovered: then a write need not look at the value it replaces. A
    /// transaction that sees false holds the key's lock, and an object is only ever created under
    /// its root key's lock after its id was taken, so the lock orders the two.
    fn may_hold_records(&self) -> bool {
        self.next_object_id.load(Ordering::Relaxed) > 1
    }

    /// Committed write transactions since start (the periodic checkpointer skips idle periods).
    pub fn writes(&self) -> u64 {
        self.store.writes()
    }

    /// Reads a key for a command without locks, updating its access word (a lookup, as Redis's
    /// `lookupKey`); an expired value reads as absent and is removed (lazy expiry).
    pub fn read(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
    ) -> Result<Option<Stored>, CommandError> {
        self.read_with(session, database, key, true)
    }

    /// Reads a key without updating its access word (Redis's `LOOKUP_NOTOUCH`: OBJECT, TYPE, the
    /// TTL family, EXISTS, MEMORY USAGE), otherwise as [`Keyspace::read`].
    pub fn read_quiet(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
    ) -> Result<Option<Stored>, CommandError> {
        self.read_with(session, database, key, false)
    }

    fn read_with(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
        touch: bool,
    ) -> Result<Option<Stored>, CommandError> {
        let mut buffer = Vec::new();
        if self
            .read_into(session, database, key, touch, &mut buffer)?
            .is_none()
        {
            return Ok(None);
        }
        Ok(Some(value::decode(&buffer)?))
    }

    /// Reads a key as [`Keyspace::read`] does and hands `visit` its kind and payload, borrowed
    /// from this thread's read buffer: a GET writes its reply from there, with no copy of the
    /// value and no allocation once the buffer has grown to the values read.
    pub fn read_payload<R>(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
        visit: impl FnOnce(Option<(Kind, &[u8])>) -> R,
    ) -> Result<R, CommandError> {
        // Taken out of the thread's slot while in use, so a nested read (none today) would get
        // a fresh buffer instead of a borrow conflict.
        let mut buffer = READ_BUFFER.with(std::cell::Cell::take);
        buffer.clear();
        let result = self
            .read_into(session, database, key, true, &mut buffer)
            .map(|found| visit(found.map(|kind| (kind, &buffer[value::HEADER_BYTES..]))));
        // One huge value must not stay pinned in every thread that once read it.
        if buffer.capacity() <= RETAINED_READ_BUFFER_BYTES {
            READ_BUFFER.with(|slot| slot.set(buffer));
        }
        result
    }

    /// Reads the encoded value of `key` into `buffer` (cleared by the caller); its kind, or
    /// `None` when absent or expired (an expired key is removed: lazy expiry). The clock is
    /// read once for both the access word and the expiry check.
    fn read_into(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
        touch: bool,
        buffer: &mut Vec<u8>,
    ) -> Result<Option<Kind>, CommandError> {
        let engine_key = StackKey::new(database, key);
        let now = now_ms();
        let found = if touch {
            session.read_touch(&engine_key, buffer, |word| self.access.touched(word, now))?
        } else {
            session.read(&engine_key, buffer)?
        };
        if !found {
            return Ok(None);
        }
        let (kind, expire_at_ms) = value::decode_header(buffer)?;
        if expire_at_ms != 0 && expire_at_ms <= now {
            // Lazy expiry, as Redis: the first command that meets an expired key removes it,
            // so DBSIZE does not wait for the active sweep to come round.
            self.expire_key(session, database, key)?;
            return Ok(None);
        }
        Ok(Some(kind))
    }

    /// Updates the access word of `key` as a lookup does (TOUCH); whether the key exists
    /// (expired keys are removed and count as absent).
    pub fn touch(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
    ) -> Result<bool, CommandError> {
        Ok(self.read(session, database, key)?.is_some())
    }

    /// The access word of `key` (OBJECT IDLETIME / FREQ), without touching it.
    pub fn access_of(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
    ) -> Result<Option<u32>, CommandError> {
        Ok(session.access_of(&engine_key(database, key))?)
    }

    /// Stamps keys created from now on with the access word of "now" under the current policy
    /// (the periodic task calls it every tick; CONFIG SET after a policy change).
    pub fn refresh_access_stamp(&self) {
        self.store.set_access_stamp(self.access.stamp(now_ms()));
    }

    /// Deletes `key` if it is expired under its lock (a concurrent write may have renewed it);
    /// returns whether it did.
    fn expire_key(
        &self,
        session: &mut StoreSession,
        database: u8,
        key: &[u8],
    ) -> Result<bool, CommandError> {
        let mut txn = self.begin(session, database, &[key]);
        let removed = txn.get_quiet(database, key)?.is_none() && txn.expired_now;
        txn.commit()?;
        Ok(removed)
    }

    /// Starts a write transaction over `keys` of `database`.
    pub fn begin<'a>(
        &'a self,
        session: &'a mut StoreSession,
        database: u8,
        keys: &[&[u8]],
    ) -> Txn<'a> {
        // Built on the stack for the usual one or two short keys: begin runs once per command.
        if let [key] = keys {
            // One key (nearly every command): no key list to build.
            let engine_key = StackKey::new(database, key);
            return self.txn(session.begin(&[&engine_key]));
        }
        let engine_keys: smallvec::SmallVec<[EngineKeyBuf; 2]> = keys
            .iter()
            .map(|key| engine_key_buf(database, key))
            .collect();
        let refs: smallvec::SmallVec<[&[u8]; 2]> =
            engine_keys.iter().map(|key| key.as_slice()).collect();
        self.txn(session.begin(&refs))
    }

    fn txn<'a>(&'a self, inner: prefixkv_store::Txn<'a>) -> Txn<'a> {
        Txn {
            inner,
            keyspace: self,
            scratch: Vec::new(),
            expired_now: false,
            now_ms: now_ms(),
        }
    }

    /// Starts a write transaction over `(database, key)` pairs that may span databases (COPY
    /// with DB, MOVE).
    pub fn begin_across<'a>(
        &'a self,
        session: &'a mut StoreSession,
        keys: &[(u8, &[u8])],
    ) -> Txn<'a> {
        let engine_keys: Vec<Vec<u8>> = keys
            .iter()
            .map(|(database, key)| engine_key(*database, key))
            .collect();
        let refs: Vec<&[u8]> = engine_keys.iter().map(Vec::as_slice).collect();
        self.txn(session.begin(&refs))
    }

    /// Runs `body` (an EXEC's queued commands, a script) while no other command can run, its
    /// writes one oplog group. Returns `body`'s value and the group's mark, which acknowledges
    /// the writes inside (`commands::run_exclusive` does both). Must not nest.
    pub fn exclusive<R>(
        &self,
        session: &mut StoreSession,
        body: impl FnOnce(&mut StoreSession) -> R,
    ) -> (R, Result<Option<WriteMark>, CommandError>) {
        let (value, mark) = session.exclusive(body);
        (value, mark.map_err(CommandError::from))
    }

    /// Visits every key of `database` (user key, encoded value) from engine bucket `cursor`,
    /// `buckets` buckets (at most [`MAX_BUCKETS_PER_STEP`]); returns the next cursor, 0 at the
    /// end. Errors (a cursor past the index) are reply lines.
    fn scan_step(
        &self,
        session: &mut StoreSession,
        database: u8,
        cursor: u64,
        buckets: usize,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<u64, CommandError> {
        let buckets = buckets.clamp(1, MAX_BUCKETS_PER_STEP);
        session
            .scan(cursor, buckets, |engine_key, encoded| {
                if let Some((db, key)) = split_key(engine_key) {
                    if db == database {
                        visit(key, encoded);
                    }
                }
            })
            .map_err(|error| match error {
                EngineError::InvalidArgument(_) => CommandError::InvalidCursor,
                other => other.into(),
            })
    }

    /// Keys of `database` matching `pattern` (expired ones left out): a scan of the whole index.
    pub fn keys_matching(
        &self,
        session: &mut StoreSession,
        database: u8,
        pattern: &[u8],
    ) -> Result<Vec<Vec<u8>>, CommandError> {
        let now = now_ms();
        let all = pattern == b"*";
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            cursor = self.scan_step(
                session,
                database,
                cursor,
                MAX_BUCKETS_PER_STEP,
                |key, encoded| {
                    if live(encoded, now) && (all || crate::glob::matches(pattern, key, false)) {
                        out.push(key.to_vec());
                    }
                },
            )?;
            if cursor == 0 {
                return Ok(out);
            }
        }
    }

    /// One SCAN step: whole index buckets from `cursor` until at least `count` keys of
    /// `database` were seen (before MATCH filtering, as Redis counts) or
    /// [`MAX_BUCKETS_PER_STEP`] buckets were visited; returns the next cursor (0 when the
    /// iteration is complete). The index is sized for the engine's memory, not for the keys in
    /// it, so a step of `count` buckets would make a small keyspace take a million round
    /// trips. Every key present for the whole iteration is returned exactly once (buckets are
    /// never split between steps).
    pub fn scan(
        &self,
        session: &mut StoreSession,
        database: u8,
        mut cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
    ) -> Result<(u64, Vec<Vec<u8>>), CommandError> {
        let now = now_ms();
        let count = count.max(1);
        let chunk_buckets = count.clamp(64, MAX_BUCKETS_PER_STEP);
        let mut out = Vec::new();
        let (mut seen, mut visited) = (0usize, 0usize);
        loop {
            cursor = self.scan_step(session, database, cursor, chunk_buckets, |key, encoded| {
                seen += 1;
                if live(encoded, now) && pattern.is_none_or(|p| crate::glob::matches(p, key, false))
                {
                    out.push(key.to_vec());
                }
            })?;
            visited += chunk_buckets;
            if cursor == 0 || seen >= count || visited >= MAX_BUCKETS_PER_STEP {
                return Ok((cursor, out));
            }
        }
    }

    /// Number of keys in `database` (including expired keys not yet removed, as Redis).
    pub fn dbsize(&self, database: u8) -> u64 {
        self.counts.dbsize(database)
    }

    /// Keys with an expiry in `database`, as of the last complete expiry sweep (an estimate).
    pub fn expires_count(&self, database: u8) -> u64 {
        self.counts.expires(database)
    }

    /// A random live key of `database`: the first one found from a random bucket on.
    pub fn random_key(
        &self,
        session: &mut StoreSession,
        database: u8,
        seed: u64,
    ) -> Result<Option<Vec<u8>>, CommandError> {
        if self.dbsize(database) == 0 {
            return Ok(None);
        }
        let buckets = self.store.engine().index_buckets() as u64;
        let start = seed % buckets;
        let now = now_ms();
        let (mut cursor, mut wrapped) = (start, false);
        loop {
            let mut found = None;
            let next = self.scan_step(session, database, cursor, 1024, |key, encoded| {
                if found.is_none() && live(encoded, now) {
                    found = Some(key.to_vec());
                }
            })?;
            if found.is_some() {
                return Ok(found);
            }
            if next == 0 {
                if wrapped {
                    return Ok(None);
                }
                wrapped = true;
            }
            if wrapped && next >= start {
                return Ok(None);
            }
            cursor = next;
        }
    }

    /// Every key of `database`, expired ones included, up to `limit` of them (`None` past it).
    pub fn all_keys(
        &self,
        session: &mut StoreSession,
        database: u8,
        limit: usize,
    ) -> Result<Option<Vec<Vec<u8>>>, CommandError> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            cursor =
                self.scan_step(session, database, cursor, MAX_BUCKETS_PER_STEP, |key, _| {
                    out.push(key.to_vec())
                })?;
            if out.len() > limit {
                return Ok(None);
            }
            if cursor == 0 {
                return Ok(Some(out));
            }
        }
    }

    /// Deletes every key of `database`, a scan step at a time (not atomic with respect to
    /// concurrent writers, as documented). Returns the last write mark.
    pub fn flush_database(
        &self,
        session: &mut StoreSession,
        database: u8,
    ) -> Result<Option<WriteMark>, CommandError> {
        let mut last = None;
        let mut cursor = 0;
        loop {
            let mut keys = Vec::new();
            let next = self.scan_step(session, database, cursor, 4096, |key, _| {
                keys.push(key.to_vec())
            })?;
            if !keys.is_empty() {
                let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                let mut txn = self.begin(session, database, &refs);
                for key in &keys {
                    txn.delete(database, key)?;
                }
                if let Some(mark) = txn.commit()? {
                    last = Some(mark);
                }
            }
            if next == 0 {
                return Ok(last);
            }
            cursor = next;
        }
    }

    /// Active expiry: examines `buckets` index buckets (rotating over the whole index) in every
    /// database and deletes their expired keys. Returns how many were removed. Incremental and
    /// bounded: one call visits at most [`MAX_BUCKETS_PER_STEP`] buckets and deletes only the
    /// expired keys among them, each in its own small transaction. A new cycle starts only if
    /// the last one saw a key with an expiry or one was written since.
    pub fn expire_sweep(
        &self,
        session: &mut StoreSession,
        buckets: usize,
    ) -> Result<u64, CommandError> {
        let now = now_ms();
        let cursor = self.expire_cursor.load(Ordering::Relaxed);
        if cursor == 0 {
            let seen: i64 = (0..DATABASES)
                .map(|db| self.counts.counts[db].expires.load(Ordering::Relaxed))
                .sum();
            if !self.ttl_written.swap(false, Ordering::Relaxed) && seen <= 0 {
                return Ok(0);
            }
        }
        let mut expired: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut with_expiry = [0i64; DATABASES];
        let next = session.scan(
            cursor,
            buckets.clamp(1, MAX_BUCKETS_PER_STEP),
            |engine_key, encoded| {
                if let (Some((db, key)), Ok((_, expire))) =
                    (split_key(engine_key), value::decode_header(encoded))
                {
                    if expire != 0 {
                        with_expiry[db as usize] += 1;
                        if expire <= now {
                            expired.push((db, key.to_vec()));
                        }
                    }
                }
            },
        )?;
        self.expire_cursor.store(next, Ordering::Relaxed);
        for (db, count) in with_expiry.iter().enumerate() {
            self.sweeping_expires[db].fetch_add(*count, Ordering::Relaxed);
        }
        if next == 0 {
            // A whole cycle: publish what it saw.
            for db in 0..DATABASES {
                let seen = self.sweeping_expires[db].swap(0, Ordering::Relaxed);
                self.counts.counts[db]
                    .expires
                    .store(seen, Ordering::Relaxed);
            }
        }
        let mut removed = 0;
        for (database, key) in expired {
            // `Txn::get` counts the removal in `expired_keys`.
            if self.expire_key(session, database, &key)? {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Whether an encoded value is live at `now` (not expired; a damaged header counts as live, so
/// the key shows up and reading it reports the damage).
fn live(encoded: &[u8], now: u64) -> bool {
    value::decode_header(encoded).map_or(true, |(_, expire)| expire == 0 || expire > now)
}

/// A write transaction: holds the store's locks on its keys until `commit`.
pub struct Txn<'a> {
    inner: prefixkv_store::Txn<'a>,
    keyspace: &'a Keyspace,
    scratch: Vec<u8>,
    /// The last `get` found the key expired and deleted it.
    expired_now: bool,
    /// Time the transaction uses for expiry decisions.
    pub now_ms: u64,
}

impl Txn<'_> {
    /// Reads a key for the command, updating its access word (a lookup, as Redis's
    /// `lookupKeyWrite`); an expired value is deleted now (lazy expiry) and reads as absent.
    pub fn get(&mut self, database: u8, key: &[u8]) -> Result<Option<Stored>, CommandError> {
        self.get_with(database, key, true)
    }

    /// Reads a key without updating its access word (eviction's check of its candidate),
    /// otherwise as [`Txn::get`].
    pub fn get_quiet(&mut self, database: u8, key: &[u8]) -> Result<Option<Stored>, CommandError> {
        self.get_with(database, key, false)
    }

    /// Reads a key as stored, expired or not, without updating its access word or deleting
    /// anything (DUMP of a slot being migrated must not write to it).
    pub(crate) fn peek(
        &mut self,
        database: u8,
        key: &[u8],
    ) -> Result<Option<Stored>, CommandError> {
        self.scratch.clear();
        if !self
            .inner
            .get(&engine_key(database, key), &mut self.scratch)?
        {
            return Ok(None);
        }
        Ok(Some(value::decode(&self.scratch)?))
    }

    fn get_with(
        &mut self,
        database: u8,
        key: &[u8],
        touch: bool,
    ) -> Result<Option<Stored>, CommandError> {
        self.expired_now = false;
        self.scratch.clear();
        let engine_key = StackKey::new(database, key);
        let found = if touch {
            let (clock, now) = (&self.keyspace.access, self.now_ms);
            self.inner
                .get_touch(&engine_key, &mut self.scratch, |word| {
                    clock.touched(word, now)
                })?
        } else {
            self.inner.get(&engine_key, &mut self.scratch)?
        };
        if !found {
            return Ok(None);
        }
        let stored = value::decode(&self.scratch)?;
        if stored.expire_at_ms != 0 && stored.expire_at_ms <= self.now_ms {
            self.delete(database, key)?;
            self.keyspace.expired_keys.fetch_add(1, Ordering::Relaxed);
            let notifier = &self.keyspace.notifier;
            if notifier.active() {
                // Not the command's write: an event of its own.
                crate::notify::forget_last_touch(database, key);
                notifier.notify(crate::notify::EXPIRED, "expired", database, key);
            }
            self.expired_now = true;
            return Ok(None);
        }
        Ok(Some(stored))
    }

    /// Writes a key. A collection the key held before is deleted with its records, unless the
    /// new value is that same object (a changed expiry, a renamed key).
    pub fn put(
        &mut self,
        database: u8,
        key: &[u8],
        kind: Kind,
        expire_at_ms: u64,
        payload: &[u8],
    ) -> Result<(), CommandError> {
        if self.keyspace.may_hold_records() {
            let new_id = value::object_id(kind, payload);
            self.drop_records(database, key, |old_id| old_id != new_id)?;
        }
        self.put_object(database, key, kind, expire_at_ms, payload)
    }

    /// Writes a key whose old value the caller knows is nothing, or the same collection object
    /// (a collection command updating its header): nothing is looked at or deleted.
    pub fn put_object(
        &mut self,
        database: u8,
        key: &[u8],
        kind: Kind,
        expire_at_ms: u64,
        payload: &[u8],
    ) -> Result<(), CommandError> {
        if expire_at_ms != 0 && !self.keyspace.ttl_written.load(Ordering::Relaxed) {
            self.keyspace.ttl_written.store(true, Ordering::Relaxed);
        }
        // Encoded in the read buffer (a collection command read this key first, so it has the
        // room): no allocation for a header written back after every update.
        let mut encoded = std::mem::take(&mut self.scratch);
        value::encode(kind, expire_at_ms, payload, &mut encoded);
        let written = self.inner.put(&StackKey::new(database, key), &encoded);
        self.scratch = encoded;
        let existed = written?;
        self.keyspace.counts.count_write(database, true, existed);
        if self.keyspace.notifier.active() {
            crate::notify::record_touch(database, key, true, !existed);
        }
        self.keyspace.watches.touch(database, key);
        // Wakes the first client blocked on this key for this kind (one atomic load when
        // nobody is blocked).
        self.keyspace.blocked.ready_kind(database, key, kind);
        Ok(())
    }

    /// Deletes a key, and the records of a collection it holds; whether it existed.
    pub fn delete(&mut self, database: u8, key: &[u8]) -> Result<bool, CommandError> {
        if self.keyspace.may_hold_records() {
            self.drop_records(database, key, |_| true)?;
        }
        self.delete_keeping_records(database, key)
    }

    /// Deletes a key but not the records of the collection it holds: the caller has just put
    /// that object under another key (RENAME, MOVE), or the collection already deleted them (it
    /// became empty). Whether it existed.
    pub fn delete_keeping_records(
        &mut self,
        database: u8,
        key: &[u8],
    ) -> Result<bool, CommandError> {
        let existed = self.inner.delete(&StackKey::new(database, key))?;
        self.keyspace.counts.count_write(database, false, existed);
        if existed {
            self.keyspace.watches.touch(database, key);
            if self.keyspace.notifier.active() {
                crate::notify::record_touch(database, key, false, false);
            }
        }
        Ok(existed)
    }

    /// Deletes the records of the collection `key` holds (expired or not) when `doomed(its id)`.
    fn drop_records(
        &mut self,
        database: u8,
        key: &[u8],
        doomed: impl FnOnce(Option<u64>) -> bool,
    ) -> Result<(), CommandError> {
        let root = engine_key(database, key);
        let mut old = Vec::new();
        if !self.inner.get(&root, &mut old)? {
            return Ok(());
        }
        let stored = value::decode(&old)?;
        if stored.kind.in_records() && doomed(value::object_id(stored.kind, &stored.payload)) {
            if stored.kind == Kind::Stream {
                // Clients blocked in XREADGROUP on a stream that goes away wake and answer
                // UNBLOCKED, as in Redis.
                self.keyspace
                    .blocked
                    .ready_kind(database, key, Kind::Stream);
            }
            let mut records = prefixkv_collections::Owned {
                txn: &mut self.inner,
                owner: &root,
            };
            crate::headers::clear(&mut records, stored.kind, &stored.payload)?;
        }
        Ok(())
    }

    /// The records of the collection stored under `key` (locked by this transaction), for the
    /// collection commands: `body` runs with them.
    pub fn with_records<R>(
        &mut self,
        database: u8,
        key: &[u8],
        body: impl FnOnce(&mut prefixkv_collections::Owned<'_, '_>) -> R,
    ) -> R {
        let root = StackKey::new(database, key);
        let mut records = prefixkv_collections::Owned {
            txn: &mut self.inner,
            owner: &root,
        };
        body(&mut records)
    }

    /// The keyspace this transaction writes (for a fresh object id).
    pub fn keyspace(&self) -> &Keyspace {
        self.keyspace
    }

    /// Appends the oplog record (still under the locks) and releases them. `None` when nothing
    /// was written.
    pub fn commit(self) -> Result<Option<WriteMark>, CommandError> {
        self.inner.commit().map_err(CommandError::from)
    }
}
