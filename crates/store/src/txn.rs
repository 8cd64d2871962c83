//! Sessions and write transactions: the only way to write, so that the engine order and the log
//! order of every key's writes are the same.
//!
//! Invariants:
//! - A [`Txn`] locks the stripes of every key it may write, in ascending stripe order (two
//!   transactions never deadlock), before its first engine write, and holds them until its log
//!   record is appended; so for every key, log order = engine order.
//! - Every write transaction first holds the exec gate shared, before any stripe (order: gate,
//!   then stripes); [`StoreSession::exclusive`] holds it exclusively, so no other session's write
//!   runs between the writes of an exclusive body (MULTI/EXEC). The thread running an exclusive
//!   body skips the gate.
//! - A checkpoint is requested only while the exec gate is held exclusively, until the engine's
//!   version switched (`store` module docs, step 0): a transaction never straddles a checkpoint's
//!   version, so a recovered checkpoint holds each transaction whole or not at all.
//! - A session about to block on a contended lock suspends its engine session first: the holder
//!   may be waiting inside the engine for every protected session to refresh (an epoch bump, a
//!   checkpoint phase), which a blocked thread would never do.
//! - A transaction dropped by an error still appends the record of the writes it made, so the log
//!   never misses an engine write.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLockReadGuard;
use parking_lot::MutexGuard;
use prefixkv_engine::{EngineError, Session};
use prefixkv_oplog::AppendTicket;

use crate::record::{encode_operation, Operation};
use crate::store::STRIPES;
use crate::{DurableStore, StoreError};

/// A transaction's log record is cut into several once its payload passes this size.
pub const RECORD_SPLIT_BYTES: usize = 8 << 20;

thread_local! {
    /// This thread holds the exec gate exclusively (it runs an exclusive body).
    static RUNNING_EXCLUSIVE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread runs an exclusive body (holds the exec gate exclusively).
pub(crate) fn running_exclusive() -> bool {
    RUNNING_EXCLUSIVE.with(Cell::get)
}

fn stripe_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) as usize) & (STRIPES - 1)
}

/// One thread's session on a [`DurableStore`]: `Send`, not `Sync`, like the engine session in it.
pub struct StoreSession {
    store: Arc<DurableStore>,
    session: Session,
}

impl StoreSession {
    pub(crate) fn new(store: Arc<DurableStore>, session: Session) -> StoreSession {
        StoreSession { store, session }
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

    /// The serial the newest durable checkpoint holds (every write at or below it survives a
    /// crash in every mode).
    pub fn committed_serial(&self) -> u64 {
        self.session.committed_serial()
    }

    /// Reads `key` into `out`; whether it was found. Takes no lock.
    pub fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, EngineError> {
        self.session.read(key, out)
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

    /// Releases epoch protection while idle (a thread about to park calls it).
    pub fn suspend(&mut self) {
        self.session.suspend();
    }

    /// Starts a write transaction over `keys` (every key it may write: writing another panics).
    pub fn begin(&mut self, keys: &[&[u8]]) -> Txn<'_> {
        let mut stripes: Vec<usize> = keys.iter().map(|key| stripe_of(key)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let StoreSession { store, session } = self;
        let store: &DurableStore = store;
        let gate = if RUNNING_EXCLUSIVE.with(Cell::get) {
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
        let guards = stripes
            .iter()
            .map(|&index| match store.stripes[index].try_lock() {
                Some(guard) => guard,
                None => {
                    session.suspend();
                    store.stripes[index].lock()
                }
            })
            .collect();
        Txn {
            _guards: guards,
            _gate: gate,
            stripes,
            store,
            session,
            record: Vec::new(),
            last_serial: 0,
            last_lsn: None,
            ticket: None,
        }
    }

    /// Runs `body` while no other session's write can run (MULTI/EXEC). Must not nest.
    pub fn exclusive<R>(&mut self, body: impl FnOnce(&mut StoreSession) -> R) -> R {
        assert!(
            !RUNNING_EXCLUSIVE.with(Cell::get),
            "exclusive bodies do not nest"
        );
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
        /// Clears the flag however `body` ends (a panic unwinds through here).
        struct Running;
        impl Drop for Running {
            fn drop(&mut self) {
                RUNNING_EXCLUSIVE.with(|running| running.set(false));
            }
        }
        RUNNING_EXCLUSIVE.with(|running| running.set(true));
        let _running = Running;
        body(self)
    }
}

/// Where a committed transaction landed.
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
    // Fields drop in declaration order: the stripes are released before the gate, the reverse of
    // the order they were taken in.
    _guards: Vec<MutexGuard<'a, ()>>,
    _gate: Option<ShardedLockReadGuard<'a, ()>>,
    stripes: Vec<usize>,
    store: &'a DurableStore,
    session: &'a mut Session,
    record: Vec<u8>,
    last_serial: u64,
    last_lsn: Option<u64>,
    ticket: Option<AppendTicket>,
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
        self.check_locked(owner);
        self.store.check_writable()?;
        let existed = self.session.upsert_existed(key, value)?;
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
        if !self.store.logs() {
            return Ok(());
        }
        let operation = Operation {
            serial: self.last_serial,
            key,
            value,
        };
        encode_operation(&mut self.record, self.session.id().0, operation);
        if self.record.len() >= RECORD_SPLIT_BYTES {
            self.append_record()?;
        }
        Ok(())
    }

    fn append_record(&mut self) -> Result<(), StoreError> {
        if self.store.logs() && !self.record.is_empty() {
            let ticket = self.store.append(&self.record)?;
            self.last_lsn = Some(ticket.lsn());
            self.ticket = Some(ticket);
            self.record.clear();
        }
        Ok(())
    }

    /// Appends the log record (still under the stripes) and releases the locks. `None` when the
    /// transaction wrote nothing. Call [`WriteMark::wait`] before acknowledging.
    pub fn commit(mut self) -> Result<Option<WriteMark>, StoreError> {
        self.append_record()?;
        if self.last_serial == 0 {
            return Ok(None);
        }
        self.store.writes.fetch_add(1, Ordering::Relaxed);
        Ok(Some(WriteMark {
            serial: self.last_serial,
            lsn: self.last_lsn,
            ticket: self.ticket.take(),
            acknowledge_after_sync: self.store.durability().acknowledge_after_sync(),
        }))
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if !self.record.is_empty() {
            if let Err(error) = self.append_record() {
                tracing::error!("a dropped transaction could not log its writes: {error}");
            }
        }
    }
}
