//! A worker's side of hash slot ownership while it runs: the current view (re-read from the
//! metadata store, guarded by a lease), slots *frozen* for a migration, slots being *imported*,
//! and the `PREFIXKV.SLOTS …` commands the migration driver (`crate::migrate`) sends.
//!
//! Invariants:
//! - **Ownership is static within a version.** A freeze takes effect only at a commit's version
//!   switch, under the exclusive latch (`Core::commit_to`), so every batch that touched the
//!   slots ran in a version at or below the sealed version the freeze reports, and none runs
//!   after it: once that version is in the DPR cut, the slots' committed state is final, and
//!   exporting it copies exactly what a rollback to any later cut would leave.
//! - Commands on frozen slots get `-TRYAGAIN` (cluster clients retry); frozen slots are never
//!   unfrozen except by `UNFREEZE` (an abandoned migration) or by the table giving them away.
//! - Imports are accepted only for slots marked importing and not owned: they can never mix
//!   with client writes of the same slots.
//! - **Lease.** With an ownership table published, a worker serves keyed commands only while
//!   its last successful read of the table is younger than the ownership lease; past it, keyed
//!   commands get `-CLUSTERDOWN` (a worker cut off from the metadata store must not go on
//!   serving slots that may have moved).
//! - Every engine access here holds the worker's latch shared, like a batch, so a restore
//!   (exclusive) never meets a lent session.
//! - Keys move and go whole: `EXPORT` serializes each user key of the slots through the command
//!   layer (a collection with all its records; only reads, so a frozen slot sees no write),
//!   `IMPORT` rebuilds it through a keyspace transaction, and `IMPORTING`/`FORGET` delete through
//!   the command layer's delete, so no collection record outlives its key here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Condvar, Mutex, RwLock};
use prefixkv_dpr::Version;
use prefixkv_dprnet::slots::{key_slot, SLOT_COUNT};
use prefixkv_resp::{Encoder, Protocol};
use prefixkv_store::StoreSession;

use super::{Core, Recoverability};
use crate::topology::Topology;

/// Index buckets one `EXPORT` call (and one step of a slot sweep) visits at most. An `EXPORT`
/// also stops once its reply passes a frame's worth of bytes (see `export`).
pub const EXPORT_BUCKETS: usize = 1024;

/// Index buckets an `EXPORT` call scans between two looks at its reply's size.
const EXPORT_GROUP_BUCKETS: usize = 16;

/// Room an `IMPORT` request needs besides one value (its words, the slots, the key): a value's
/// serialized form may take the rest of a frame.
const IMPORT_HEADROOM: usize = 64 * 1024;

/// How long `FREEZE` waits for a commit boundary.
const FREEZE_WAIT: Duration = Duration::from_secs(30);

/// An inclusive range of hash slots.
pub type SlotRange = (u16, u16);

/// Ownership state of a running worker.
pub(super) struct Slots {
    /// The current view: the table as last read, with the frozen slots applied.
    view: RwLock<Arc<Topology>>,
    /// Everything that changes the view, under one lock.
    state: Mutex<SlotState>,
    /// Signalled when a pending freeze took effect.
    frozen_signal: Condvar,
    /// How long a successful read of the table stays good.
    lease: Duration,
    /// When the table was last read successfully, in ms after `started` (read on every batch:
    /// an atomic, not `state`'s lock).
    read_at_ms: AtomicU64,
    started: Instant,
}

struct SlotState {
    /// The table as last read (no frozen slots).
    table: Topology,
    frozen: Vec<SlotRange>,
    importing: Vec<SlotRange>,
    /// Freezes waiting for the next commit boundary: (ticket, range).
    pending: Vec<(u64, SlotRange)>,
    /// Freezes that took effect: ticket → the version sealed at that boundary.
    applied: Vec<(u64, Version)>,
    next_ticket: u64,
}

/// Whether engine key `key` is a user key (`worker/shard.rs`) of a slot in `range`.
fn in_range(range: SlotRange, key: &[u8]) -> bool {
    super::shard::user_key(key).is_some_and(|user| (range.0..=range.1).contains(&key_slot(user)))
}

fn overlaps(a: SlotRange, b: SlotRange) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

impl Slots {
    pub(super) fn new(table: Topology, lease: Duration) -> Self {
        Self {
            view: RwLock::new(Arc::new(table.clone())),
            read_at_ms: AtomicU64::new(0),
            started: Instant::now(),
            state: Mutex::new(SlotState {
                table,
                frozen: Vec::new(),
                importing: Vec::new(),
                pending: Vec::new(),
                applied: Vec::new(),
                next_ticket: 0,
            }),
            frozen_signal: Condvar::new(),
            lease,
        }
    }

    /// The view a batch checks its commands against.
    pub(super) fn view(&self) -> SlotView {
        let topology = Arc::clone(&self.view.read());
        let read_at = Duration::from_millis(self.read_at_ms.load(Ordering::Acquire));
        // With no table published there is no lease to keep.
        let lease_expired =
            topology.published() && self.started.elapsed().saturating_sub(read_at) > self.lease;
        SlotView {
            topology,
            lease_expired_ms: lease_expired.then_some(self.lease.as_millis() as u64),
        }
    }

    fn publish(&self, state: &SlotState) {
        *self.view.write() = Arc::new(state.table.with_frozen(&state.frozen));
    }

    /// Installs a freshly read table: frozen and importing marks the table made moot are
    /// dropped (given away: no longer frozen; now owned: no longer importing).
    pub(super) fn install(&self, table: Topology) {
        let mut state = self.state.lock();
        state
            .frozen
            .retain(|&(first, last)| table.owns_all(first, last));
        state
            .importing
            .retain(|&(first, last)| !table.owns_any(first, last));
        state.table = table;
        self.read_at_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Release);
        self.publish(&state);
    }

    /// Applies the pending freezes; called at a commit's version switch (exclusive latch held)
    /// with the version that commit sealed.
    pub(super) fn at_commit_boundary(&self, sealed: Version) {
        let mut state = self.state.lock();
        if state.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut state.pending);
        for (ticket, range) in pending {
            state.frozen.push(range);
            state.applied.push((ticket, sealed));
        }
        self.publish(&state);
        drop(state);
        self.frozen_signal.notify_all();
    }
}

/// One batch's view of ownership.
pub(super) struct SlotView {
    /// The table with the frozen slots.
    pub(super) topology: Arc<Topology>,
    /// The lease, if it expired.
    lease_expired_ms: Option<u64>,
}

impl SlotView {
    /// Why `args` may not run here (`-MOVED`, `-CROSSSLOT`, `-TRYAGAIN`, `-CLUSTERDOWN`), as a
    /// RESP error reply; None if it may.
    pub(super) fn refusal(&self, args: &[Bytes]) -> Option<Vec<u8>> {
        self.topology.redirect(args).or_else(|| {
            let lease_ms = self.lease_expired_ms?;
            crate::topology::keys_of(args)
                .is_some_and(|keys| !keys.is_empty())
                .then(|| {
                    format!(
                        "-CLUSTERDOWN This worker could not confirm its hash slot ownership \
                         within the {lease_ms} ms ownership lease\r\n"
                    )
                    .into_bytes()
                })
        })
    }
}

/// An error reply.
fn error(text: impl AsRef<str>) -> Vec<u8> {
    let mut out = BytesMut::new();
    Encoder::new(Protocol::Resp2).error(&mut out, text.as_ref().as_bytes());
    out.to_vec()
}

fn integer(value: i64) -> Vec<u8> {
    format!(":{value}\r\n").into_bytes()
}

fn ok() -> Vec<u8> {
    b"+OK\r\n".to_vec()
}

/// Parses `first last` at `args[2..4]`.
fn parse_range(args: &[Bytes]) -> Result<SlotRange, Vec<u8>> {
    let slot = |arg: &Bytes| -> Result<u16, Vec<u8>> {
        std::str::from_utf8(arg)
            .ok()
            .and_then(|text| text.parse::<u16>().ok())
            .filter(|&slot| slot < SLOT_COUNT)
            .ok_or_else(|| error(format!("ERR invalid hash slot (0..={})", SLOT_COUNT - 1)))
    };
    let (first, last) = (slot(&args[2])?, slot(&args[3])?);
    if first > last {
        return Err(error("ERR the first slot is after the last"));
    }
    Ok((first, last))
}

impl Core {
    /// Answers `PREFIXKV.SLOTS <sub> …` (None for any other command).
    pub(super) fn slots_command(&self, args: &[Bytes]) -> Option<Vec<u8>> {
        if !args
            .first()
            .is_some_and(|name| name.eq_ignore_ascii_case(b"PREFIXKV.SLOTS"))
        {
            return None;
        }
        let sub = args
            .get(1)
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default();
        let arity_ok = match &sub[..] {
            b"VERSION" | b"REFRESH" | b"RECORDS" => args.len() == 2,
            b"FREEZE" | b"UNFREEZE" | b"IMPORTING" | b"FORGET" => args.len() == 4,
            b"EXPORT" => args.len() == 5,
            b"IMPORT" => args.len() >= 4 && args.len().is_multiple_of(2),
            _ => false,
        };
        if !arity_ok {
            return Some(error(
                "ERR usage: PREFIXKV.SLOTS VERSION | REFRESH | RECORDS | FREEZE first last | \
                 UNFREEZE first last | EXPORT first last cursor | IMPORTING first last | IMPORT \
                 first last [key value ...] | FORGET first last",
            ));
        }
        let reply = match &sub[..] {
            b"VERSION" => Ok(integer(self.worker.lock().version() as i64)),
            b"REFRESH" => self.refresh_ownership().map(|()| ok()).map_err(error),
            b"RECORDS" => self.other_records().map(integer).map_err(error),
            _ => parse_range(args).and_then(|range| match &sub[..] {
                b"FREEZE" => self.freeze(range),
                b"UNFREEZE" => Ok(self.unfreeze(range)),
                b"EXPORT" => self.export(range, &args[4]),
                b"IMPORTING" => self.begin_import(range),
                b"IMPORT" => self.import(range, &args[4..]),
                _ => self.forget(range),
            }),
        };
        Some(reply.unwrap_or_else(|e| e))
    }

    /// Re-reads the ownership table.
    pub(super) fn refresh_ownership(&self) -> Result<(), String> {
        let address = self.address.clone();
        let table = Topology::load(self.finder.store().as_ref(), self.id, &address)
            .map_err(|e| format!("ERR reading the ownership table: {e}"))?;
        self.slots.install(table);
        Ok(())
    }

    /// Renounces `range` at the next commit boundary; replies with the version sealed there.
    fn freeze(&self, range: SlotRange) -> Result<Vec<u8>, Vec<u8>> {
        if !matches!(
            self.recoverability,
            Recoverability::Dpr | Recoverability::Synchronous
        ) {
            return Err(error(
                "ERR slot migration needs DPR commits (recoverability dpr or synchronous)",
            ));
        }
        let mut state = self.slots.state.lock();
        if !state.table.owns_all(range.0, range.1) {
            return Err(error(format!(
                "ERR worker {} does not own every slot of {}..={}",
                self.id, range.0, range.1
            )));
        }
        if state
            .frozen
            .iter()
            .chain(state.pending.iter().map(|(_, r)| r))
            .any(|&r| overlaps(r, range))
        {
            return Err(error("ERR these slots are already being migrated"));
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.pending.push((ticket, range));
        let deadline = Instant::now() + FREEZE_WAIT;
        loop {
            if let Some(i) = state.applied.iter().position(|&(t, _)| t == ticket) {
                let (_, sealed) = state.applied.swap_remove(i);
                return Ok(integer(sealed as i64));
            }
            if self
                .slots
                .frozen_signal
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                state.pending.retain(|&(t, _)| t != ticket);
                return Err(error(format!(
                    "ERR no commit boundary within {} s (are checkpoints failing?)",
                    FREEZE_WAIT.as_secs()
                )));
            }
        }
    }

    fn unfreeze(&self, range: SlotRange) -> Vec<u8> {
        let mut state = self.slots.state.lock();
        let before = state.frozen.len();
        state.frozen.retain(|&r| r != range);
        let removed = before - state.frozen.len();
        self.slots.publish(&state);
        integer(removed as i64)
    }

    /// One step of an export: the user keys of `range` in `EXPORT_BUCKETS` index buckets from
    /// `cursor`, each with its whole value serialized by the command layer (a collection's
    /// records, keyed by its object id and not by the key, travel inside it), as `[next cursor,
    /// key, value, …]` (next cursor 0: done). Only reads: the frozen slots see no write.
    fn export(&self, range: SlotRange, cursor: &Bytes) -> Result<Vec<u8>, Vec<u8>> {
        let cursor: u64 = std::str::from_utf8(cursor)
            .ok()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| error("ERR invalid cursor"))?;
        if !self.slots.state.lock().frozen.contains(&range) {
            return Err(error(
                "ERR export needs the slots frozen first (PREFIXKV.SLOTS FREEZE)",
            ));
        }
        // One value must fit in an IMPORT request at the new owner (same frame limits).
        let limit = self.limits.max_frame_bytes.saturating_sub(IMPORT_HEADROOM);
        // The reply stops growing at the bucket group in which it passed a frame's worth of
        // bytes: at most that plus one group's values, whatever the slots hold.
        let budget = self.limits.max_frame_bytes;
        let (next, pairs) = self
            .with_shard(|shard, session| {
                let mut pairs = Vec::new();
                let (mut next, mut buckets, mut bytes) = (cursor, 0, 0);
                loop {
                    let (after, keys) = keys_step(session, range, next, EXPORT_GROUP_BUCKETS)?;
                    for key in keys {
                        let form = shard.dump_key(session, &key, limit).map_err(|e| {
                            format!("ERR exporting key {:?}: {e}", String::from_utf8_lossy(&key))
                        })?;
                        if let Some(form) = form {
                            bytes += key.len() + form.len();
                            pairs.push((key, form));
                        }
                    }
                    next = after;
                    buckets += EXPORT_GROUP_BUCKETS;
                    if next == 0 || buckets >= EXPORT_BUCKETS || bytes >= budget {
                        return Ok((next, pairs));
                    }
                }
            })
            .map_err(error)?;
        let encoder = Encoder::new(Protocol::Resp2);
        let mut out = BytesMut::new();
        encoder.array_header(&mut out, 1 + 2 * pairs.len());
        encoder.bulk_string(&mut out, next.to_string().as_bytes());
        for (key, value) in &pairs {
            encoder.bulk_string(&mut out, key);
            encoder.bulk_string(&mut out, value);
        }
        Ok(out.to_vec())
    }

    /// Marks `range` importing and deletes whatever keys of it this worker still holds (from an
    /// earlier ownership or an abandoned import).
    fn begin_import(&self, range: SlotRange) -> Result<Vec<u8>, Vec<u8>> {
        {
            let mut state = self.slots.state.lock();
            if state.table.owns_any(range.0, range.1) {
                return Err(error(format!(
                    "ERR worker {} already owns slots of {}..={}",
                    self.id, range.0, range.1
                )));
            }
            if !state.importing.contains(&range) {
                state.importing.push(range);
            }
        }
        self.delete_slots(range).map(integer).map_err(error)
    }

    fn import(&self, range: SlotRange, pairs: &[Bytes]) -> Result<Vec<u8>, Vec<u8>> {
        if !self.slots.state.lock().importing.contains(&range) {
            return Err(error(
                "ERR these slots are not being imported (PREFIXKV.SLOTS IMPORTING first)",
            ));
        }
        if let Some(stray) = pairs.chunks(2).find(|pair| !in_range(range, &pair[0])) {
            return Err(error(format!(
                "ERR key {:?} is not in slots {}..={}",
                String::from_utf8_lossy(&stray[0]),
                range.0,
                range.1
            )));
        }
        // Through the command layer: each value is rebuilt under fresh object ids, the key
        // counts stay exact, and a key already here (a retried import) is replaced whole.
        self.with_shard(|shard, session| {
            for pair in pairs.chunks(2) {
                shard.restore_key(session, &pair[0], &pair[1])?;
            }
            Ok(())
        })
        .map(|()| integer((pairs.len() / 2) as i64))
        .map_err(|e| {
            error(format!(
                "ERR the import failed (run the migration again): {e}"
            ))
        })
    }

    /// Deletes this worker's keys of `range`, which it must not own (after a migration gave
    /// them away, or before an import).
    fn forget(&self, range: SlotRange) -> Result<Vec<u8>, Vec<u8>> {
        if self.slots.state.lock().table.owns_all(range.0, range.1) {
            return Err(error(format!(
                "ERR worker {} still owns slots {}..={}",
                self.id, range.0, range.1
            )));
        }
        let deleted = self.delete_slots(range).map_err(error)?;
        let mut state = self.slots.state.lock();
        state.importing.retain(|&r| r != range);
        Ok(integer(deleted))
    }

    /// Deletes every key of `range` (a whole sweep of the index) through the command layer's
    /// delete, so a collection's records go with its key.
    fn delete_slots(&self, range: SlotRange) -> Result<i64, String> {
        let mut deleted = 0;
        let mut cursor = 0;
        loop {
            cursor = self.with_shard(|shard, session| {
                let (next, keys) = keys_step(session, range, cursor, EXPORT_BUCKETS)?;
                for key in keys {
                    deleted += i64::from(
                        shard
                            .delete_key(session, &key)
                            .map_err(|e| format!("ERR deleting the slots' keys failed: {e}"))?,
                    );
                }
                Ok(next)
            })?;
            if cursor == 0 {
                return Ok(deleted);
            }
        }
    }

    /// How many engine records are no user key (collections' element records, markers, the
    /// function libraries): a whole sweep of the index, one step at a time. Lets a test or an
    /// operator see that a migration left no collection records behind at the old owner.
    fn other_records(&self) -> Result<i64, String> {
        let (mut count, mut cursor) = (0i64, 0u64);
        loop {
            cursor = self.with_shard(|_, session| {
                session
                    .scan(cursor, EXPORT_BUCKETS, |key, _| {
                        count += i64::from(super::shard::user_key(key).is_none());
                    })
                    .map_err(|e| format!("ERR scanning the engine failed: {e}"))
            })?;
            if cursor == 0 {
                return Ok(count);
            }
        }
    }

    /// Runs `body` with the command layer and a lent session, the latch held shared as a
    /// batch holds it.
    fn with_shard<R>(
        &self,
        body: impl FnOnce(&super::shard::Shard, &mut StoreSession) -> Result<R, String>,
    ) -> Result<R, String> {
        let _shared = self.latch.read();
        let mut lent = self.engine.lend().map_err(|e| format!("ERR {e}"))?;
        let result = self
            .shards
            .get(lent.session.store())
            .map_err(|e| format!("ERR {e}"))
            .and_then(|shard| body(&shard, &mut lent.session));
        self.engine.give_back(lent);
        result
    }
}

/// The user keys of `range` in `buckets` index buckets from `cursor`, and the next cursor.
fn keys_step(
    session: &mut StoreSession,
    range: SlotRange,
    cursor: u64,
    buckets: usize,
) -> Result<(u64, Vec<Vec<u8>>), String> {
    let mut keys = Vec::new();
    let next = session
        .scan(cursor, buckets, |key, _| {
            if in_range(range, key) {
                keys.push(key.to_vec());
            }
        })
        .map_err(|e| format!("ERR scanning the engine failed: {e}"))?;
    Ok((next, keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_dpr::metadata::PartitionRange;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn an_expired_lease_refuses_keyed_commands_only() {
        // "foo" is slot 12182, worker 2's.
        let fresh = Slots::new(crate::topology::three_workers(2), Duration::from_secs(3600));
        assert_eq!(fresh.view().refusal(&args(&["GET", "foo"])), None);
        let expired = Slots::new(crate::topology::three_workers(2), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        let refusal = expired
            .view()
            .refusal(&args(&["GET", "foo"]))
            .expect("refused");
        assert!(refusal.starts_with(b"-CLUSTERDOWN "), "{refusal:?}");
        assert_eq!(expired.view().refusal(&args(&["PING"])), None);
        // Foreign keys are still redirected first.
        let moved = expired
            .view()
            .refusal(&args(&["GET", "{user1000}.a"]))
            .unwrap();
        assert!(moved.starts_with(b"-MOVED 3443 "));
        // With no table published there is no lease to keep.
        let alone = Slots::new(
            Topology::from_ranges(Vec::new(), 0, "127.0.0.1:1").unwrap(),
            Duration::ZERO,
        );
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(alone.view().refusal(&args(&["GET", "foo"])), None);
    }

    #[test]
    fn freezes_wait_for_a_commit_boundary_and_tables_release_them() {
        let slots = Slots::new(crate::topology::three_workers(2), Duration::from_secs(3600));
        slots.state.lock().pending.push((7, (12000, 12200)));
        // Not yet: ownership is static within a version.
        assert_eq!(slots.view().refusal(&args(&["GET", "foo"])), None);
        slots.at_commit_boundary(41);
        assert_eq!(slots.state.lock().applied, vec![(7, 41)]);
        assert!(slots
            .view()
            .refusal(&args(&["GET", "foo"]))
            .unwrap()
            .starts_with(b"-TRYAGAIN "));
        // A table that still gives worker 2 the slots keeps them frozen ...
        slots.install(crate::topology::three_workers(2));
        assert!(slots
            .view()
            .refusal(&args(&["GET", "foo"]))
            .unwrap()
            .starts_with(b"-TRYAGAIN "));
        // ... one that gave them away drops the freeze (they are -MOVED now).
        let moved = Topology::from_ranges(
            vec![PartitionRange {
                first: 0,
                last: 16383,
                worker: 1,
                address: "127.0.0.1:7001".into(),
            }],
            2,
            "unused",
        )
        .unwrap();
        slots.install(moved);
        assert!(slots.state.lock().frozen.is_empty());
        assert!(slots
            .view()
            .refusal(&args(&["GET", "foo"]))
            .unwrap()
            .starts_with(b"-MOVED "));
    }
}
