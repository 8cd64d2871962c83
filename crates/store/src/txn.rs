//! Sessions and write transactions: the only way to write, so that the engine order and the log
//! order of every key's writes are the same.
//!
//! Invariants:
//! - A [`Txn`] locks the stripes of every key it may write, in ascending stripe order (two
//!   transactions never deadlock), before its first engine write, and holds them until its log
//!   record is appended; so for every key, log order = engine order.
//! - Stripes kept across a batch ([`StoreSession::batch`]): inside a batch (the exec gate held
//!   shared for up to [`BATCH_MAX_COMMANDS`] commands of one connection) a committed transaction
//!   leaves its stripes locked with the session, and the next [`StoreSession::begin`] reuses them
//!   when it needs exactly the same stripes; otherwise it first releases every kept stripe and
//!   then locks its own in ascending order. Deadlock freedom: a thread waits for a stripe only
//!   inside `begin`, holding nothing but lower stripes of the same `begin` (kept ones were
//!   released first), so the ascending-order argument holds; between transactions the kept
//!   stripes are held only while the thread runs without waiting on the store (reads, engine
//!   operations, leaf locks that no one holds while waiting for a stripe), and they are released
//!   at the batch's end, by [`StoreSession::suspend`] (called before anything that may wait) and
//!   before an exclusive body (which cannot start inside a batch anyway). A kept stripe never
//!   meets an exclusive holder: kept stripes exist only under the shared gate. Log order =
//!   engine order still holds: a record is appended at commit, under the stripes (holding them
//!   longer changes nothing). A checkpoint request (exclusive gate) waits for at most one batch,
//!   and the engine session still refreshes on every operation.
//! - Every write transaction first holds the exec gate shared, before any stripe (order: gate,
//!   then stripes); [`StoreSession::exclusive`] holds it exclusively, so no other session's write
//!   runs between the writes of an exclusive body (MULTI/EXEC, a script). The thread running an
//!   exclusive body skips the gate, and so does a thread inside [`StoreSession::shared`], which
//!   holds it shared around a whole command so that its reads, too, never see part of an
//!   exclusive body. A thread holding the gate never asks for it again (a recursive read could
//!   deadlock behind a waiting writer): two thread-local flags say which side it holds.
//! - Log groups (`record` module docs): a transaction's writes are one group of log records,
//!   and so are all the writes of an exclusive body: its transactions add their operations to the
//!   session's group, which the body's end appends (split into parts above the split size), under
//!   the gate. Recovery applies a group whole or not at all. A write inside a body is acknowledged
//!   with the body's [`WriteMark`] (returned by [`StoreSession::exclusive`]), never with its own.
//! - A checkpoint is requested only while the exec gate is held exclusively, until the engine's
//!   version switched (`store` module docs, step 0): a transaction never straddles a checkpoint's
//!   version, so a recovered checkpoint holds each transaction whole or not at all.
//! - A session about to block on a contended lock suspends its engine session first: the holder
//!   may be waiting inside the engine for every protected session to refresh (an epoch bump, a
//!   checkpoint phase), which a blocked thread would never do.
//! - A transaction dropped by an error still appends the record of the writes it made, and an
//!   exclusive body that panics still appends its group, so the log never misses an engine write.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLockReadGuard;
use prefixkv_engine::{EngineError, Session};
use prefixkv_storage::log::AppendTicket;
use smallvec::SmallVec;

use crate::record::{encode_operation, set_part, start_record, Operation, Part};
use crate::store::STRIPES;
use crate::{DurableStore, StoreError};

/// The most commands one [`StoreSession::batch`] may run (the caller counts them): bounds how long
/// a checkpoint request or an exclusive body (EXEC, a script) waits for a batch, and how long a
/// hot key's stripe stays with one thread before the other gets its turn.
pub const BATCH_MAX_COMMANDS: usize = 64;

/// Sorted, deduplicated stripe indexes; one or two keys (the usual command) stay inline.
type Stripes = SmallVec<[usize; 4]>;

/// A log group (a transaction, an exclusive body) is cut into several records once its pending
/// payload passes this size (the default of [`crate::Options::record_split_bytes`]).
pub const RECORD_SPLIT_BYTES: usize = 8 << 20;

thread_local! {
    /// This thread holds the exec gate exclusively (it runs an exclusive body).
    static RUNNING_EXCLUSIVE: Cell<bool> = const { Cell::new(false) };
    /// This thread holds the exec gate shared for a whole command ([`StoreSession::shared`]).
    static HOLDING_SHARED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread runs an exclusive body (holds the exec gate exclusively).
pub(crate) fn running_exclusive() -> bool {
    RUNNING_EXCLUSIVE.with(Cell::get)
}

/// Whether this thread holds the exec gate shared through [`StoreSession::shared`].
pub(crate) fn holding_shared() -> bool {
    HOLDING_SHARED.with(Cell::get)
}

/// Resets a thread-local flag however the scope that set it ends (a panic unwinds through here).
struct FlagGuard(&'static std::thread::LocalKey<Cell<bool>>);

impl FlagGuard {
    fn set(flag: &'static std::thread::LocalKey<Cell<bool>>) -> FlagGuard {
        flag.with(|cell| cell.set(true));
        FlagGuard(flag)
    }
}

impl Drop for FlagGuard {
    fn drop(&mut self) {
        self.0.with(|cell| cell.set(false));
    }
}

/// The log group being written by a session: the operations of one transaction, or of every
/// transaction of an exclusive body (`record` module docs). Parts already appended are
/// `First`/`Middle`; closing appends the rest as the `Last` part (or as a `Whole` record when
/// nothing was appended before).
#[derive(Default)]
struct Group {
    /// The pending part: header and operations, empty when nothing is pending.
    record: Vec<u8>,
    /// An earlier part of this group is in the log (the next part continues it).
    parts_appended: bool,
    /// The session serial of the group's last write (0: none yet).
    last_serial: u64,
    /// The LSN and completion of the group's last appended part.
    last_lsn: Option<u64>,
    ticket: Option<AppendTicket>,
}

impl Group {
    /// Adds one operation (the caller checked that the store logs), appending the pending part
    /// first when it reached the split size.
    fn add(
        &mut self,
        store: &DurableStore,
        session_id: u64,
        operation: Operation<'_>,
    ) -> Result<(), StoreError> {
        if self.record.len() >= store.record_split_bytes {
            self.append(store, session_id, true)?;
        }
        encode_operation(&mut self.record, session_id, operation);
        Ok(())
    }

    /// Appends the pending part; `more_follow` when the group goes on after it.
    fn append(
        &mut self,
        store: &DurableStore,
        session_id: u64,
        more_follow: bool,
    ) -> Result<(), StoreError> {
        if self.record.is_empty() {
            if !self.parts_appended || more_follow {
                return Ok(());
            }
            // Earlier parts are in the log: close the group with an empty last part.
            start_record(&mut self.record, session_id);
        }
        set_part(&mut self.record, Part::of(self.parts_appended, more_follow));
        let appended = store.append(&self.record);
        // Cleared whatever the outcome: a failed append fails the log for good, so retrying
        // would only fail again.
        self.record.clear();
        let ticket = appended?;
        self.parts_appended = more_follow;
        self.last_lsn = Some(ticket.lsn());
        self.ticket = Some(ticket);
        Ok(())
    }

    /// Appends the rest of the group and starts a new one; the group's mark (`None` when it
    /// wrote nothing).
    fn close(
        &mut self,
        store: &DurableStore,
        session_id: u64,
    ) -> Result<Option<WriteMark>, StoreError> {
        let appended = if store.logs() {
            self.append(store, session_id, false)
        } else {
            Ok(())
        };
        let Group {
            last_serial,
            last_lsn,
            ticket,
            ..
        } = std::mem::take(self);
        appended?;
        Ok((last_serial != 0).then(|| WriteMark {
            serial: last_serial,
            lsn: last_lsn,
            ticket,
            acknowledge_after_sync: store.durability().acknowledge_after_sync(),
        }))
    }

    /// Whether the group holds anything: a write (logged or not: a mode without a log still
    /// tracks the serial, which must not leak into the next transaction's mark), or parts.
    fn is_pending(&self) -> bool {
        self.last_serial != 0 || !self.record.is_empty() || self.parts_appended
    }
}

fn stripe_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) as usize) & (STRIPES - 1)
}

/// One thread's session on a [`DurableStore`]: `Send`, not `Sync`, like the engine session in it.
pub struct StoreSession {
    store: Arc<DurableStore>,
    session: Session,
    /// The log group being written (pending only inside a transaction or an exclusive body).
    group: Group,
    /// An exclusive body runs on this session: its transactions add to `group`.
    in_body: bool,
    /// A batch runs ([`StoreSession::batch`]): a committed transaction keeps its stripes here.
    batching: bool,
    /// Stripes locked by an earlier transaction of the batch and not released yet (their guards
    /// were forgotten; [`StoreSession::release_kept`] unlocks them).
    kept: Stripes,
}

impl StoreSession {
    pub(crate) fn new(store: Arc<DurableStore>, session: Session) -> StoreSession {
        StoreSession {
            store,
            session,
            group: Group::default(),
            in_body: false,
            batching: false,
            kept: Stripes::new(),
        }
    }

    /// Unlocks the stripes an earlier transaction of the batch kept.
    fn release_kept(&mut self) {
        unlock_stripes(&self.store, &mut self.kept);
    }

    /// The store.
    pub fn store(&self) -> &Arc<DurableStore> {
        &self.store
    }

    /// The engine session's id.
    pub fn id(&self) -> prefixkv_engine::SessionId {
        self.session.id()
    }

    /// The serial of this session's last operation.
    pub fn serial(&self) -> u64 {
        self.session.serial()
    }

    /// A handle reading [`StoreSession::committed_serial`] from another thread (see
    /// `prefixkv_engine::Session::commit_watch`).
    pub fn commit_watch(&self) -> prefixkv_engine::CommitWatch {
        self.session.commit_watch()
    }

    /// The serial the newest durable checkpoint holds (every write at or below it survives a
    /// crash in every mode).
    pub fn committed_serial(&self) -> u64 {
        self.session.committed_serial()
    }

    /// Reads `key` into `out`; whether it was found. Takes no lock.
    pub fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, EngineError> {
        self.session.read(key, out)
    }

    /// [`StoreSession::read`], and if the key is live, stores `touch(old)` in its record's access
    /// word (see `prefixkv_engine::Session::read_touch`). Takes no lock; not logged.
    pub fn read_touch(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.session.read_touch(key, out, touch)
    }

    /// Only the touch of [`StoreSession::read_touch`]; `false` if `key` is absent. Not logged.
    pub fn touch(
        &mut self,
        key: &[u8],
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.session.touch(key, touch)
    }

    /// The access word of `key` (`None` if absent), unchanged.
    pub fn access_of(&mut self, key: &[u8]) -> Result<Option<u32>, EngineError> {
        self.session.access_of(key)
    }

    /// Up to `max_keys` live keys with their access words, from consecutive index buckets
    /// starting at `start` (see `prefixkv_engine::Session::sample`). Takes no lock.
    pub fn sample(
        &mut self,
        start: u64,
        max_keys: usize,
        out: &mut Vec<prefixkv_engine::Sampled>,
    ) -> Result<(), EngineError> {
        self.session.sample(start, max_keys, out)
    }

    /// One step of a scan over every key (see `prefixkv_engine::Session::scan`). Takes no lock.
    pub fn scan(
        &mut self,
        cursor: u64,
        buckets: usize,
        visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<u64, EngineError> {
        self.session.scan(cursor, buckets, visit)
    }

    /// Releases epoch protection while idle (a thread about to park calls it), and the stripes a
    /// batch kept: whoever suspends may be about to wait.
    pub fn suspend(&mut self) {
        self.release_kept();
        self.session.suspend();
    }

    /// A hint for a batch: starts loading the index bucket of `key` (see
    /// `prefixkv_engine::Session::prefetch_index`). Changes nothing but timing.
    #[inline]
    pub fn prefetch_index(&self, key: &[u8]) {
        self.session.prefetch_index(key);
    }

    /// A hint for a batch: starts loading the record of `key` (see
    /// `prefixkv_engine::Session::prefetch_record`). Changes nothing but timing.
    #[inline]
    pub fn prefetch_record(&self, key: &[u8]) {
        self.session.prefetch_record(key);
    }

    /// Starts a write transaction over `keys` (every key it may write: writing another panics).
    pub fn begin(&mut self, keys: &[&[u8]]) -> Txn<'_> {
        let mut stripes: Stripes = keys.iter().map(|key| stripe_of(key)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        // The batch's earlier transaction kept exactly these: reuse them (no lock taken).
        // Otherwise release them all before locking anything (module docs: deadlock freedom).
        let reuse = !self.kept.is_empty() && self.kept == stripes;
        if reuse {
            self.kept.clear();
        } else {
            self.release_kept();
        }
        let StoreSession {
            store,
            session,
            group,
            in_body,
            batching,
            kept,
        } = self;
        let store: &DurableStore = store;
        let gate = if running_exclusive() || holding_shared() {
            None
        } else {
            Some(match store.exec_gate.try_read() {
                Ok(guard) => guard,
                Err(_) => {
                    session.suspend();
                    store
                        .exec_gate
                        .read()
                        .expect("the exec gate is never poisoned")
                }
            })
        };
        if !reuse {
            for &index in &stripes {
                let guard = match store.stripes[index].try_lock() {
                    Some(guard) => guard,
                    None => {
                        session.suspend();
                        store.stripes[index].lock()
                    }
                };
                // Unlocked by `unlock_stripes` (the transaction's drop, or the batch's release).
                std::mem::forget(guard);
            }
        }
        Txn {
            _gate: gate,
            // Kept only under the batch's shared gate (never with a gate of its own).
            keep: *batching && !*in_body,
            stripes,
            kept,
            store,
            session,
            group,
            in_body: *in_body,
            last_serial: 0,
        }
    }

    /// Runs `body` (a batch of one connection's commands, at most [`BATCH_MAX_COMMANDS`]: the
    /// caller counts) holding the exec gate shared as [`StoreSession::shared_unless`] does, and
    /// lets its transactions keep their stripes for the next one (module docs). Everything kept
    /// is released when `body` ends, however it ends. `None` (body not run) when `give_up` says
    /// so while the gate is held exclusively. Inside an exclusive body or a shared hold it is
    /// [`StoreSession::shared_unless`] (nothing kept).
    pub fn batch<R>(
        &mut self,
        give_up: impl Fn() -> bool,
        body: impl FnOnce(&mut StoreSession) -> R,
    ) -> Option<R> {
        if running_exclusive() || holding_shared() {
            return Some(body(self));
        }
        self.shared_unless(give_up, |session| {
            session.batching = true;
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(session)));
            session.batching = false;
            session.release_kept();
            match outcome {
                Ok(value) => value,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// How many stripes this session keeps locked between transactions of a batch (tests).
    pub fn kept_stripes(&self) -> usize {
        self.kept.len()
    }

    /// Runs `body` (one command) holding the exec gate shared, so that nothing it reads or writes
    /// can see part of an exclusive body: a body runs entirely before or entirely after it. Its
    /// transactions skip the gate. Inside an exclusive body, or nested, it just runs `body`.
    /// `body` must not call [`StoreSession::exclusive`] or request a checkpoint (both wait for
    /// every shared holder, this one included).
    pub fn shared<R>(&mut self, body: impl FnOnce(&mut StoreSession) -> R) -> R {
        self.shared_unless(|| false, body)
            .expect("a wait that never gives up ends with the gate")
    }

    /// [`StoreSession::shared`], but while the gate is held exclusively it gives up (`None`,
    /// `body` not run) as soon as `give_up()` says so, instead of waiting: the server gives up
    /// when a script holds the gate, so a request thread never sleeps through a script (its
    /// other clients must be able to send SCRIPT KILL). An exclusive holder that is not a
    /// script (EXEC, a checkpoint request) is short: the wait polls, backing off to 50 µs naps.
    pub fn shared_unless<R>(
        &mut self,
        give_up: impl Fn() -> bool,
        body: impl FnOnce(&mut StoreSession) -> R,
    ) -> Option<R> {
        if running_exclusive() || holding_shared() {
            return Some(body(self));
        }
        let store = self.store.clone();
        let mut attempts = 0u32;
        let _gate = loop {
            if let Ok(guard) = store.exec_gate.try_read() {
                break guard;
            }
            if give_up() {
                return None;
            }
            // Suspended while waiting: the holder may wait for every session to refresh.
            self.session.suspend();
            attempts += 1;
            if attempts < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        };
        let _holding = FlagGuard::set(&HOLDING_SHARED);
        Some(body(self))
    }

    /// Runs `body` while no other session's command can run (MULTI/EXEC, a script), with its
    /// writes as one log group: recovery brings back all of them or none. Returns `body`'s value
    /// and the body's [`WriteMark`] (`Ok(None)` when it wrote nothing): the writes inside are
    /// acknowledged with it (in `always`, once it is synced), since the marks their own commits
    /// return carry no log position. An `Err` says the group could not be appended (the log
    /// failed): the writes were applied but their outcome is uncertain. Must not nest, nor run
    /// inside [`StoreSession::shared`].
    pub fn exclusive<R>(
        &mut self,
        body: impl FnOnce(&mut StoreSession) -> R,
    ) -> (R, Result<Option<WriteMark>, StoreError>) {
        assert!(!running_exclusive(), "exclusive bodies do not nest");
        assert!(
            !holding_shared(),
            "an exclusive body cannot start inside a shared one (it would wait for itself)"
        );
        self.release_kept();
        let store = self.store.clone();
        let _gate = match store.exec_gate.try_write() {
            Ok(guard) => guard,
            Err(_) => {
                self.session.suspend();
                store
                    .exec_gate
                    .write()
                    .expect("the exec gate is never poisoned")
            }
        };
        let _running = FlagGuard::set(&RUNNING_EXCLUSIVE);
        self.in_body = true;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(self)));
        self.in_body = false;
        // Appended under the gate, whatever `body` did: the log never misses an engine write, and
        // no other record comes between the group's parts.
        let mark = self.group.close(&store, self.session.id().0);
        match outcome {
            Ok(value) => (value, mark),
            Err(panic) => {
                if let Err(error) = mark {
                    tracing::error!(
                        "an exclusive body panicked and its writes could not be logged: {error}"
                    );
                }
                std::panic::resume_unwind(panic)
            }
        }
    }
}

/// Where a committed transaction (or an exclusive body) landed. A transaction inside an exclusive
/// body has no log position of its own (`lsn` and `ticket` are `None`): the body's mark has them.
#[derive(Debug)]
pub struct WriteMark {
    /// The session serial of its last write.
    pub serial: u64,
    /// The LSN of its last log record, in the logging modes.
    pub lsn: Option<u64>,
    /// The completion of its last log record, in the logging modes (an asynchronous caller
    /// awaits it before acknowledging when [`WriteMark::acknowledge_after_sync`] says so).
    pub ticket: Option<AppendTicket>,
    /// Whether the mode acknowledges a write only once its record is synced (`always`).
    pub acknowledge_after_sync: bool,
}

impl WriteMark {
    /// Waits until the transaction may be acknowledged under the store's durability mode: in
    /// `always`, until its log record is synced; otherwise at once.
    pub fn wait(self) -> Result<(), StoreError> {
        if let (true, Some(ticket)) = (self.acknowledge_after_sync, self.ticket) {
            ticket.wait()?;
        }
        Ok(())
    }
}

/// A write transaction: holds the stripes of its keys until [`Txn::commit`].
pub struct Txn<'a> {
    // The stripes are released in `drop` (or kept), before the gate field drops: the reverse of
    // the order they were taken in.
    _gate: Option<ShardedLockReadGuard<'a, ()>>,
    /// Leave the stripes with the session at the end (a batch runs) instead of unlocking them.
    keep: bool,
    /// The stripes it locked (their guards forgotten), sorted.
    stripes: Stripes,
    /// The session's kept stripes (empty while a transaction runs).
    kept: &'a mut Stripes,
    store: &'a DurableStore,
    session: &'a mut Session,
    /// The session's log group: this transaction's alone, or its exclusive body's.
    group: &'a mut Group,
    /// It runs inside an exclusive body: the body's end appends the group.
    in_body: bool,
    /// The session serial of this transaction's last write (0: none).
    last_serial: u64,
}

impl Txn<'_> {
    fn check_locked(&self, key: &[u8]) {
        assert!(
            self.stripes.binary_search(&stripe_of(key)).is_ok(),
            "a transaction writes only keys it named in begin()"
        );
    }

    /// Reads `key` (no lock beyond the transaction's).
    pub fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, EngineError> {
        self.session.read(key, out)
    }

    /// [`Txn::get`], touching the key's access word when it is live (see
    /// [`StoreSession::read_touch`]). Not logged.
    pub fn get_touch(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.session.read_touch(key, out, touch)
    }

    /// The largest value that fits one record with a key of `key_bytes` bytes (the engine's
    /// `Store::max_value_bytes`), or `None` when the key alone is too large: lets a structure
    /// that rewrites several records check all of them before its first write.
    pub fn max_value_bytes(&self, key_bytes: usize) -> Option<usize> {
        self.store.engine().max_value_bytes(key_bytes)
    }

    /// Writes `key`; whether it held a live value before.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<bool, StoreError> {
        self.put_under(key, key, value)
    }

    /// Deletes `key`; whether it existed (nothing is logged when it did not).
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.delete_under(key, key)
    }

    /// Writes `key`, a record that belongs to `owner` (a key this transaction named in `begin`):
    /// the parts of a collection stored under its own keys. Whoever reads or writes them first
    /// locks `owner`, so `owner`'s stripe guards them. Whether `key` existed before.
    pub fn put_under(
        &mut self,
        owner: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, StoreError> {
        self.put_under_with_capacity(owner, key, value, 0)
    }

    /// [`Txn::put_under`] with a capacity hint: a record this write creates gets room for a value
    /// of `capacity_bytes`, so that later writes of `key` up to that size go in place instead of
    /// leaving a dead record in the engine's log (`prefixkv_engine::Session::upsert_existed_with_capacity`:
    /// cut to the store's largest value, never below `value`). For records that grow a little at
    /// a time (a collection's buckets and nodes). The hint is engine memory only: the operation
    /// log and checkpoints hold the value, and a recovered record has no slack.
    pub fn put_under_with_capacity(
        &mut self,
        owner: &[u8],
        key: &[u8],
        value: &[u8],
        capacity_bytes: usize,
    ) -> Result<bool, StoreError> {
        self.check_locked(owner);
        self.store.check_writable()?;
        let existed = self
            .session
            .upsert_existed_with_capacity(key, value, capacity_bytes)?;
        self.log(key, Some(value))?;
        Ok(existed)
    }

    /// Deletes `key`, a record that belongs to `owner` (see [`Txn::put_under`]); whether it
    /// existed.
    pub fn delete_under(&mut self, owner: &[u8], key: &[u8]) -> Result<bool, StoreError> {
        self.check_locked(owner);
        self.store.check_writable()?;
        let existed = self.session.delete(key)?;
        if existed {
            self.log(key, None)?;
        }
        Ok(existed)
    }

    fn log(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        self.last_serial = self.session.serial();
        self.group.last_serial = self.last_serial;
        if !self.store.logs() {
            return Ok(());
        }
        let operation = Operation {
            serial: self.last_serial,
            key,
            value,
        };
        self.group.add(self.store, self.session.id().0, operation)
    }

    /// Appends the log record (still under the stripes) and releases the locks. `None` when the
    /// transaction wrote nothing. Call [`WriteMark::wait`] before acknowledging. Inside an
    /// exclusive body nothing is appended yet and the mark has no log position: acknowledge with
    /// the body's mark.
    pub fn commit(self) -> Result<Option<WriteMark>, StoreError> {
        if self.in_body {
            if self.last_serial == 0 {
                return Ok(None);
            }
            self.store.writes.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(WriteMark {
                serial: self.last_serial,
                lsn: None,
                ticket: None,
                acknowledge_after_sync: self.store.durability().acknowledge_after_sync(),
            }));
        }
        let mark = self.group.close(self.store, self.session.id().0)?;
        if mark.is_some() {
            self.store.writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(mark)
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if !self.in_body && self.group.is_pending() {
            if let Err(error) = self.group.close(self.store, self.session.id().0) {
                tracing::error!("a dropped transaction could not log its writes: {error}");
            }
        }
        // After the log record: log order = engine order (module docs).
        if self.keep {
            debug_assert!(self.kept.is_empty());
            std::mem::swap(self.kept, &mut self.stripes);
        } else {
            unlock_stripes(self.store, &mut self.stripes);
        }
    }
}

/// Unlocks `stripes` (locked by this thread with their guards forgotten) and empties it.
fn unlock_stripes(store: &DurableStore, stripes: &mut Stripes) {
    for index in stripes.drain(..).rev() {
        // SAFETY: `begin` locked this stripe on this session's behalf and forgot the guard; the
        // index left the set it was in, so it is unlocked exactly once.
        unsafe { store.stripes[index].force_unlock() };
    }
}

impl StoreSession {
    /// The engine version this session's last operation ran in (a cluster worker checks that a
    /// DPR batch ran wholly in one version; see `prefixkv_engine::Session::version`).
    pub fn engine_version(&self) -> u64 {
        self.session.version()
    }
}
