//! The keyspace: 16 logical databases on one engine store, the key registry, and the write
//! path that keeps the engine, the registry and the oplog in the same order.
//!
//! Engine key = `[db number u8] ++ user key`; engine value = [`crate::value`] encoding.
//!
//! Invariants:
//! - Every write goes through a [`Txn`], which first locks the registry stripes of all keys it
//!   may touch (sorted stripe order, so two transactions never deadlock). Under those locks it
//!   writes the engine, updates the registry and appends one oplog record. Hence, for every key,
//!   the oplog order of writes equals the engine order, which makes replaying a log suffix in LSN
//!   order reproduce the engine's final state.
//! - The registry (`Stripe::databases`) holds exactly the keys present in the engine, with their
//!   absolute expiry; it exists because the engine has no scan API, and is rebuilt on startup
//!   from the recovered checkpoint plus the oplog replay.
//! - Oplog records carry absolute values (the encoded engine value, or a delete), never
//!   increments, so applying a record twice is harmless; each operation carries the engine serial
//!   of its session, so replay skips operations the checkpoint already holds (serial <= the
//!   session's commit point).
//!
//! - MULTI/EXEC isolation: every write transaction holds a read guard of the exec gate (taken
//!   before any stripe, so the order is always gate → stripes); EXEC holds the gate exclusively
//!   while it runs its queued commands, whose own transactions then skip the gate
//!   ([`Keyspace::exclusive`]). So no other client's write interleaves with an EXEC. Reads take
//!   no locks, so a concurrent read may see part of an EXEC, as it may see part of an MSET.
//!
//! Oplog record payload: `[session id u64]` then operations
//! `[serial u64][kind u8: 1 put, 2 delete][key length u32][engine key][value length u32][value]`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard};
use parking_lot::{Mutex, MutexGuard};
use prefixkv_engine::{EngineError, Session, Store};
use prefixkv_oplog::{AppendTicket, Oplog};

use crate::value::{self, Kind, Stored};

/// Number of logical databases (SELECT 0..15).
pub const DATABASES: usize = 16;
const STRIPES: usize = 1024;
/// An oplog record is cut into several once its payload passes this size.
const RECORD_SPLIT_BYTES: usize = 8 << 20;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// The Redis error line for maxmemory.
pub const OOM_ERROR: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// The Redis error line for a type mismatch.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Wall-clock Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One registry stripe: per database, user key -> absolute expiry in ms (0 = none).
struct Stripe {
    databases: Vec<HashMap<Box<[u8]>, u64>>,
}

/// The shared keyspace.
pub struct Keyspace {
    /// The engine store.
    pub store: Arc<Store>,
    stripes: Box<[Mutex<Stripe>]>,
    /// Shared by write transactions, exclusive for an EXEC (see the module invariants). Sharded:
    /// a read guard touches only this thread's shard, so writers do not share a cache line.
    exec_gate: ShardedLock<()>,
    oplog: Option<Oplog>,
    expire_cursor: AtomicU64,
    /// Keys removed by active or lazy expiry.
    pub expired_keys: AtomicU64,
    /// Committed write transactions (the checkpoint loop skips idle periods).
    pub writes: AtomicU64,
}

thread_local! {
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
    /// This thread holds the exec gate exclusively (it is running an EXEC).
    static RUNNING_EXEC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's engine session (started on first use). Never call across an
/// `.await`: the session belongs to the thread.
pub fn with_session<R>(store: &Arc<Store>, f: impl FnOnce(&mut Session) -> R) -> R {
    SESSION.with(|cell| {
        let mut slot = cell.borrow_mut();
        let session = slot.get_or_insert_with(|| store.start_session());
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

/// Maps an engine error to a reply line.
pub fn engine_error(error: EngineError) -> String {
    match error {
        EngineError::OutOfMemory { .. } => OOM_ERROR.to_string(),
        EngineError::RecordTooLarge {
            value_bytes,
            max_value_bytes,
            ..
        } => format!(
            "ERR value too large: {value_bytes} bytes stored for this key, at most \
             {max_value_bytes} fit; split the value across several keys"
        ),
        EngineError::InvalidArgument(text) => format!("ERR {}", text.replace(['\r', '\n'], " ")),
        other => format!(
            "ERR engine failure: {}",
            other.to_string().replace(['\r', '\n'], " ")
        ),
    }
}

fn engine_key(database: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(database);
    out.extend_from_slice(key);
    out
}

fn stripe_of(database: u8, key: &[u8]) -> usize {
    let hash = crc32c::crc32c_append(crc32c::crc32c(&[database]), key);
    hash as usize % STRIPES
}

/// Where a committed write landed: engine serial and, with an oplog, its LSN and ticket.
pub struct WriteMark {
    /// Session serial of the transaction's last write.
    pub serial: u64,
    /// LSN of the transaction's last oplog record.
    pub lsn: Option<u64>,
    /// Completion of that record (awaited before replying under `always`).
    pub ticket: Option<AppendTicket>,
}

impl Keyspace {
    /// Wraps a store and an optional oplog; the registry starts empty.
    pub fn new(store: Arc<Store>, oplog: Option<Oplog>) -> Keyspace {
        let stripes = (0..STRIPES)
            .map(|_| {
                Mutex::new(Stripe {
                    databases: (0..DATABASES).map(|_| HashMap::new()).collect(),
                })
            })
            .collect();
        Keyspace {
            store,
            stripes,
            exec_gate: ShardedLock::new(()),
            oplog,
            expire_cursor: AtomicU64::new(0),
            expired_keys: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// Installs the oplog after replay (startup only).
    pub fn set_oplog(&mut self, oplog: Option<Oplog>) {
        self.oplog = oplog;
    }

    /// Removes the oplog handle (startup, when the mode does not log).
    pub fn take_oplog(&mut self) -> Option<Oplog> {
        self.oplog.take()
    }

    /// The oplog, when the durability mode uses one.
    pub fn oplog(&self) -> Option<&Oplog> {
        self.oplog.as_ref()
    }

    /// Memory counted against maxmemory: the engine's in-memory log.
    pub fn used_memory_bytes(&self) -> u64 {
        self.store.log_memory_in_use_bytes()
    }

    /// Reads a key without locks; an expired value reads as absent (lazy expiry: active expiry
    /// or the next write removes it).
    pub fn read(
        &self,
        session: &mut Session,
        database: u8,
        key: &[u8],
    ) -> Result<Option<Stored>, String> {
        let mut buffer = Vec::new();
        let found = session
            .read(&engine_key(database, key), &mut buffer)
            .map_err(engine_error)?;
        if !found {
            return Ok(None);
        }
        let stored =
            value::decode(&buffer).map_err(|m| format!("ERR stored value is damaged: {}", m.0))?;
        if stored.expire_at_ms != 0 && stored.expire_at_ms <= now_ms() {
            return Ok(None);
        }
        Ok(Some(stored))
    }

    /// Starts a write transaction over `keys` of `database`.
    pub fn begin<'a>(&'a self, session: &'a mut Session, database: u8, keys: &[&[u8]]) -> Txn<'a> {
        let mut indexes: Vec<usize> = keys.iter().map(|key| stripe_of(database, key)).collect();
        indexes.sort_unstable();
        indexes.dedup();
        let gate = self.enter_gate(session);
        let guards = indexes
            .iter()
            .map(|&i| (i, self.lock_stripe(session, i)))
            .collect();
        Txn::new(self, session, gate, guards)
    }

    /// A shared hold on the exec gate for one write transaction, or `None` on the thread that
    /// runs an EXEC (it holds the gate exclusively already). Suspends the session before
    /// blocking, for the same reason as [`Self::lock_stripe`].
    fn enter_gate(&self, session: &mut Session) -> Option<ShardedLockReadGuard<'_, ()>> {
        if RUNNING_EXEC.with(|running| running.get()) {
            return None;
        }
        if let Ok(guard) = self.exec_gate.try_read() {
            return Some(guard);
        }
        session.suspend();
        Some(
            self.exec_gate
                .read()
                .expect("the exec gate is never poisoned"),
        )
    }

    /// Runs `body` (an EXEC's queued commands) while no other write can run. Must not nest.
    pub fn exclusive<R>(&self, session: &mut Session, body: impl FnOnce(&mut Session) -> R) -> R {
        assert!(
            !RUNNING_EXEC.with(|running| running.get()),
            "EXEC does not nest"
        );
        let _gate = match self.exec_gate.try_write() {
            Ok(guard) => guard,
            Err(_) => {
                session.suspend();
                self.exec_gate
                    .write()
                    .expect("the exec gate is never poisoned")
            }
        };
        /// Clears the flag however `body` ends (a panic unwinds through here).
        struct Running;
        impl Drop for Running {
            fn drop(&mut self) {
                RUNNING_EXEC.with(|running| running.set(false));
            }
        }
        RUNNING_EXEC.with(|running| running.set(true));
        let _running = Running;
        body(session)
    }

    /// Locks a stripe. If it is contended, the session is suspended first: the holder may be
    /// waiting inside the engine for every protected session to refresh (an epoch bump, a
    /// checkpoint phase), which a thread blocked on this mutex would never do.
    fn lock_stripe(&self, session: &mut Session, index: usize) -> MutexGuard<'_, Stripe> {
        if let Some(guard) = self.stripes[index].try_lock() {
            return guard;
        }
        session.suspend();
        self.stripes[index].lock()
    }

    /// Keys of `database` matching `pattern` (expired ones left out).
    pub fn keys_matching(&self, database: u8, pattern: &[u8]) -> Vec<Vec<u8>> {
        let now = now_ms();
        let all = pattern == b"*";
        let mut out = Vec::new();
        for stripe in self.stripes.iter() {
            let stripe = stripe.lock();
            for (key, &expire) in &stripe.databases[database as usize] {
                if (expire == 0 || expire > now)
                    && (all || crate::glob::matches(pattern, key, false))
                {
                    out.push(key.to_vec());
                }
            }
        }
        out
    }

    /// One SCAN step: the keys of stripes from `cursor` on until `count` keys were collected;
    /// returns the next cursor (0 when the iteration is complete). Every key present for the
    /// whole iteration is returned at least once.
    pub fn scan(
        &self,
        database: u8,
        cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
    ) -> (u64, Vec<Vec<u8>>) {
        let now = now_ms();
        let mut out = Vec::new();
        let mut index = cursor as usize;
        while index < STRIPES && out.len() < count.max(1) {
            let stripe = self.stripes[index].lock();
            for (key, &expire) in &stripe.databases[database as usize] {
                if (expire == 0 || expire > now)
                    && pattern.is_none_or(|p| crate::glob::matches(p, key, false))
                {
                    out.push(key.to_vec());
                }
            }
            index += 1;
        }
        let next = if index >= STRIPES { 0 } else { index as u64 };
        (next, out)
    }

    /// Number of keys in `database` (including expired keys not yet removed, as Redis).
    pub fn dbsize(&self, database: u8) -> u64 {
        self.stripes
            .iter()
            .map(|stripe| stripe.lock().databases[database as usize].len() as u64)
            .sum()
    }

    /// Keys with an expiry in `database`.
    pub fn expires_count(&self, database: u8) -> u64 {
        self.stripes
            .iter()
            .map(|stripe| {
                stripe.lock().databases[database as usize]
                    .values()
                    .filter(|&&e| e != 0)
                    .count() as u64
            })
            .sum()
    }

    /// A random live key of `database`.
    pub fn random_key(&self, database: u8, seed: u64) -> Option<Vec<u8>> {
        let now = now_ms();
        let start = (seed as usize) % STRIPES;
        for offset in 0..STRIPES {
            let stripe = self.stripes[(start + offset) % STRIPES].lock();
            let map = &stripe.databases[database as usize];
            let live: Vec<&Box<[u8]>> = map
                .iter()
                .filter(|(_, &e)| e == 0 || e > now)
                .map(|(k, _)| k)
                .collect();
            if !live.is_empty() {
                return Some(live[(seed as usize / STRIPES) % live.len()].to_vec());
            }
        }
        None
    }

    /// Deletes every key of `database` (stripe by stripe: not atomic with respect to
    /// concurrent writers, as documented). Returns the last write mark.
    pub fn flush_database(
        &self,
        session: &mut Session,
        database: u8,
    ) -> Result<Option<WriteMark>, String> {
        let mut last = None;
        for index in 0..STRIPES {
            let gate = self.enter_gate(session);
            let guard = self.lock_stripe(session, index);
            if guard.databases[database as usize].is_empty() {
                continue;
            }
            let keys: Vec<Box<[u8]>> = guard.databases[database as usize].keys().cloned().collect();
            let mut txn = Txn::new(self, session, gate, vec![(index, guard)]);
            for key in keys {
                txn.delete(database, &key)?;
            }
            if let Some(mark) = txn.commit()? {
                last = Some(mark);
            }
        }
        Ok(last)
    }

    /// Active expiry: examines `stripes` registry stripes (rotating) and deletes their expired
    /// keys. Returns how many were removed.
    pub fn expire_sweep(&self, session: &mut Session, stripes: usize) -> Result<u64, String> {
        let now = now_ms();
        let mut removed = 0;
        for _ in 0..stripes.min(STRIPES) {
            let index = (self.expire_cursor.fetch_add(1, Ordering::Relaxed) as usize) % STRIPES;
            let gate = self.enter_gate(session);
            let guard = self.lock_stripe(session, index);
            let expired: Vec<(u8, Box<[u8]>)> = guard
                .databases
                .iter()
                .enumerate()
                .flat_map(|(db, map)| {
                    map.iter()
                        .filter(|(_, &e)| e != 0 && e <= now)
                        .map(move |(k, _)| (db as u8, k.clone()))
                })
                .collect();
            if expired.is_empty() {
                continue;
            }
            let mut txn = Txn::new(self, session, gate, vec![(index, guard)]);
            for (database, key) in expired {
                if txn.delete(database, &key)? {
                    removed += 1;
                }
            }
            txn.commit()?;
        }
        self.expired_keys.fetch_add(removed, Ordering::Relaxed);
        Ok(removed)
    }

    /// Registers a key found while loading a checkpoint (startup only).
    pub fn register_loaded(&self, engine_key: &[u8], encoded: &[u8]) -> Result<(), String> {
        let (&database, key) = engine_key
            .split_first()
            .ok_or("empty engine key in checkpoint")?;
        if database as usize >= DATABASES {
            return Err(format!("engine key with database {database} in checkpoint"));
        }
        let (_, expire) = value::decode_header(encoded).map_err(|m| m.0.to_string())?;
        self.stripes[stripe_of(database, key)].lock().databases[database as usize]
            .insert(key.into(), expire);
        Ok(())
    }

    /// Forgets a key (a tombstone while loading a log-ordered checkpoint).
    pub fn unregister_loaded(&self, engine_key: &[u8]) {
        if let Some((&database, key)) = engine_key.split_first() {
            if (database as usize) < DATABASES {
                self.stripes[stripe_of(database, key)].lock().databases[database as usize]
                    .remove(key);
            }
        }
    }

    /// Applies one decoded oplog record during replay: each operation whose serial is above
    /// `commit_point(session id)` is written to the engine and the registry. Returns the number
    /// of operations applied. Errors name the problem; the caller adds the LSN.
    pub fn replay_record(
        &self,
        session: &mut Session,
        payload: &[u8],
        commit_point: impl Fn(u64) -> u64,
    ) -> Result<u64, String> {
        let (session_id, operations) = decode_record(payload)?;
        let point = commit_point(session_id);
        let mut applied = 0;
        for operation in operations.iter().filter(|op| op.serial > point) {
            let (database, user_key) = (operation.key[0], &operation.key[1..]);
            let mut stripe = self.lock_stripe(session, stripe_of(database, user_key));
            match operation.expire_at_ms {
                Some(expire) => {
                    session
                        .upsert(operation.key, operation.value)
                        .map_err(engine_error)?;
                    stripe.databases[database as usize].insert(user_key.into(), expire);
                }
                None => {
                    session.delete(operation.key).map_err(engine_error)?;
                    stripe.databases[database as usize].remove(user_key);
                }
            }
            applied += 1;
        }
        Ok(applied)
    }
}

/// One decoded operation of an oplog record.
#[derive(Debug, PartialEq)]
pub struct RecordOperation<'a> {
    /// Engine serial of the operation in its session.
    pub serial: u64,
    /// Engine key (`[db] ++ key`, db < 16, checked).
    pub key: &'a [u8],
    /// Encoded value for a put (header checked); empty for a delete.
    pub value: &'a [u8],
    /// `Some(expiry)` for a put, `None` for a delete.
    pub expire_at_ms: Option<u64>,
}

/// Appends one operation to a record payload (starting it with `session_id` when empty).
pub fn encode_operation(
    record: &mut Vec<u8>,
    session_id: u64,
    serial: u64,
    put: bool,
    key: &[u8],
    value: &[u8],
) {
    if record.is_empty() {
        record.extend_from_slice(&session_id.to_le_bytes());
    }
    record.extend_from_slice(&serial.to_le_bytes());
    record.push(if put { OP_PUT } else { OP_DELETE });
    record.extend_from_slice(&(key.len() as u32).to_le_bytes());
    record.extend_from_slice(key);
    record.extend_from_slice(&(value.len() as u32).to_le_bytes());
    record.extend_from_slice(value);
}

/// Decodes and validates a whole record payload before anything is applied, so a damaged
/// record is rejected without a partial effect. Every length is checked against the bytes
/// present; nothing is allocated from a length field.
pub fn decode_record(payload: &[u8]) -> Result<(u64, Vec<RecordOperation<'_>>), String> {
    let mut rest = payload;
    let session_id = take_u64(&mut rest)?;
    let mut operations = Vec::new();
    while !rest.is_empty() {
        let serial = take_u64(&mut rest)?;
        let kind = *rest.first().ok_or("operation kind missing")?;
        rest = &rest[1..];
        let key = take_bytes(&mut rest)?;
        let value = take_bytes(&mut rest)?;
        let &database = key.first().ok_or("empty key in oplog record")?;
        if database as usize >= DATABASES {
            return Err(format!("database {database} out of range in oplog record"));
        }
        let expire_at_ms = match kind {
            OP_PUT => Some(value::decode_header(value).map_err(|m| m.0.to_string())?.1),
            OP_DELETE => None,
            other => return Err(format!("unknown operation kind {other} in oplog record")),
        };
        operations.push(RecordOperation {
            serial,
            key,
            value,
            expire_at_ms,
        });
    }
    Ok((session_id, operations))
}

fn take_u64(rest: &mut &[u8]) -> Result<u64, String> {
    if rest.len() < 8 {
        return Err("oplog record cut short".into());
    }
    let value = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
    *rest = &rest[8..];
    Ok(value)
}

fn take_bytes<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], String> {
    if rest.len() < 4 {
        return Err("oplog record cut short".into());
    }
    let length = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    if rest.len() - 4 < length {
        return Err("oplog record field longer than the record".into());
    }
    let bytes = &rest[4..4 + length];
    *rest = &rest[4 + length..];
    Ok(bytes)
}

/// A write transaction: holds the registry stripe locks of its keys until `commit`.
pub struct Txn<'a> {
    keyspace: &'a Keyspace,
    session: &'a mut Session,
    /// Fields drop in declaration order: the stripes are released before the gate, the reverse
    /// of the order they were taken in.
    guards: Vec<(usize, MutexGuard<'a, Stripe>)>,
    _gate: Option<ShardedLockReadGuard<'a, ()>>,
    record: Vec<u8>,
    operations: usize,
    scratch: Vec<u8>,
    last_serial: u64,
    last_lsn: Option<u64>,
    ticket: Option<AppendTicket>,
    /// Time the transaction uses for expiry decisions.
    pub now_ms: u64,
}

impl<'a> Txn<'a> {
    fn new(
        keyspace: &'a Keyspace,
        session: &'a mut Session,
        gate: Option<ShardedLockReadGuard<'a, ()>>,
        guards: Vec<(usize, MutexGuard<'a, Stripe>)>,
    ) -> Txn<'a> {
        Txn {
            keyspace,
            session,
            guards,
            _gate: gate,
            record: Vec::new(),
            operations: 0,
            scratch: Vec::new(),
            last_serial: 0,
            last_lsn: None,
            ticket: None,
            now_ms: now_ms(),
        }
    }

    fn stripe(&mut self, database: u8, key: &[u8]) -> &mut Stripe {
        let index = stripe_of(database, key);
        let position = self
            .guards
            .iter()
            .position(|(i, _)| *i == index)
            .expect("a transaction only touches keys it locked");
        &mut self.guards[position].1
    }

    /// Reads a key; an expired value is deleted now (lazy expiry) and reads as absent.
    pub fn get(&mut self, database: u8, key: &[u8]) -> Result<Option<Stored>, String> {
        self.scratch.clear();
        let found = self
            .session
            .read(&engine_key(database, key), &mut self.scratch)
            .map_err(engine_error)?;
        if !found {
            return Ok(None);
        }
        let stored = value::decode(&self.scratch)
            .map_err(|m| format!("ERR stored value is damaged: {}", m.0))?;
        if stored.expire_at_ms != 0 && stored.expire_at_ms <= self.now_ms {
            self.delete(database, key)?;
            self.keyspace.expired_keys.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        Ok(Some(stored))
    }

    /// Writes a key.
    pub fn put(
        &mut self,
        database: u8,
        key: &[u8],
        kind: Kind,
        expire_at_ms: u64,
        payload: &[u8],
    ) -> Result<(), String> {
        let mut encoded = Vec::new();
        value::encode(kind, expire_at_ms, payload, &mut encoded);
        let full_key = engine_key(database, key);
        self.session
            .upsert(&full_key, &encoded)
            .map_err(engine_error)?;
        self.stripe(database, key).databases[database as usize].insert(key.into(), expire_at_ms);
        self.log(OP_PUT, &full_key, &encoded)
    }

    /// Deletes a key; whether it existed.
    pub fn delete(&mut self, database: u8, key: &[u8]) -> Result<bool, String> {
        let full_key = engine_key(database, key);
        let existed = self.session.delete(&full_key).map_err(engine_error)?;
        self.stripe(database, key).databases[database as usize].remove(key);
        if existed {
            self.log(OP_DELETE, &full_key, &[])?;
        }
        Ok(existed)
    }

    fn log(&mut self, kind: u8, key: &[u8], encoded: &[u8]) -> Result<(), String> {
        self.last_serial = self.session.serial();
        if self.keyspace.oplog.is_none() {
            return Ok(());
        }
        encode_operation(
            &mut self.record,
            self.session.id().0,
            self.last_serial,
            kind == OP_PUT,
            key,
            encoded,
        );
        self.operations += 1;
        if self.record.len() >= RECORD_SPLIT_BYTES {
            self.append_record()?;
        }
        Ok(())
    }

    fn append_record(&mut self) -> Result<(), String> {
        if let (Some(oplog), false) = (&self.keyspace.oplog, self.record.is_empty()) {
            let ticket = oplog.append(&self.record).map_err(|e| {
                format!(
                    "ERR oplog append failed: {}",
                    e.to_string().replace(['\r', '\n'], " ")
                )
            })?;
            self.last_lsn = Some(ticket.lsn());
            self.ticket = Some(ticket);
            self.record.clear();
            self.operations = 0;
        }
        Ok(())
    }

    /// Appends the oplog record (still under the stripe locks) and releases the locks.
    /// `None` when nothing was written.
    pub fn commit(mut self) -> Result<Option<WriteMark>, String> {
        self.append_record()?;
        debug_assert_eq!(self.operations, 0);
        if self.last_serial == 0 {
            return Ok(None);
        }
        self.keyspace.writes.fetch_add(1, Ordering::Relaxed);
        Ok(Some(WriteMark {
            serial: self.last_serial,
            lsn: self.last_lsn,
            ticket: self.ticket.take(),
        }))
    }
}

impl Drop for Txn<'_> {
    /// A transaction abandoned by an error still logs the writes it made to the engine, so the
    /// oplog never misses an engine write.
    fn drop(&mut self) {
        if !self.record.is_empty() {
            if let Err(error) = self.append_record() {
                eprintln!("prefixkv-server: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn records_round_trip(
            session_id in any::<u64>(),
            operations in proptest::collection::vec(
                (any::<u64>(), any::<bool>(), 0u8..16, proptest::collection::vec(any::<u8>(), 0..20),
                 proptest::collection::vec(any::<u8>(), 0..40), any::<u64>()),
                1..8,
            ),
        ) {
            let mut record = Vec::new();
            let mut expected = Vec::new();
            for (serial, put, database, key, payload, expire) in &operations {
                let mut full_key = vec![*database];
                full_key.extend_from_slice(key);
                let mut encoded = Vec::new();
                if *put {
                    value::encode(value::Kind::String, *expire, payload, &mut encoded);
                }
                encode_operation(&mut record, session_id, *serial, *put, &full_key, &encoded);
                expected.push((*serial, full_key, encoded, put.then_some(*expire)));
            }
            let (decoded_session, decoded) = decode_record(&record).unwrap();
            prop_assert_eq!(decoded_session, session_id);
            prop_assert_eq!(decoded.len(), expected.len());
            for (operation, (serial, key, encoded, expire)) in decoded.iter().zip(&expected) {
                prop_assert_eq!(operation.serial, *serial);
                prop_assert_eq!(operation.key, &key[..]);
                prop_assert_eq!(operation.value, &encoded[..]);
                prop_assert_eq!(operation.expire_at_ms, *expire);
            }
            // Every strict prefix that cuts an operation is rejected, never misread.
            for cut in 8..record.len() {
                if let Ok((_, partial)) = decode_record(&record[..cut]) {
                    prop_assert!(partial.len() < expected.len());
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_record(&bytes);
            let _ = value::decode(&bytes);
            let _ = value::decode_hash(&bytes);
        }
    }
}
