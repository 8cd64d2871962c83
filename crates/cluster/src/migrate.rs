//! Moving hash slots from one worker to another, at checkpoint boundaries, under DPR.
//!
//! The DPR paper defers ownership transfer to checkpoint boundaries "such that ownership is
//! static within versions", with the old owner renouncing before the metadata store changes and
//! clients retrying meanwhile. The driver here ([`migrate_slots`]) does that with data:
//!
//! 1. **Prepare the new owner** (`IMPORTING`): it marks the slots importing and deletes any keys
//!    of them it still holds.
//! 2. **Freeze at the old owner** (`FREEZE`): at its next commit's version switch it renounces
//!    the slots (their commands get `-TRYAGAIN`) and reports the version `v` it sealed there;
//!    every write to the slots ran in a version `<= v`.
//! 3. **Wait until `v` is in the DPR cut**, in the world-line the migration started in. From
//!    then on the slots' state at the old owner is committed and final: no rollback can change
//!    it (the cut never goes back, and no write to the slots happens after `v`).
//! 4. **Copy** (`EXPORT` / `IMPORT`, one index chunk at a time): whole keys, each value
//!    serialized by the command layer (`prefixkv_commands::dump`), since a collection's records
//!    are keyed by its object id and do not hash to the key's slot; rebuilt at the new owner under
//!    fresh object ids.
//! 5. **Wait until the new owner's current version `u` is in the cut**: the copy is committed.
//! 6. **Publish** the new ownership table, conditionally on the world-line still being the one
//!    of step 3 and no recovery running (`MetadataStore::set_ownership_in`, one transaction).
//!    This is the migration's single commit point.
//! 7. Both workers re-read the table (`REFRESH`: the new owner serves, the old one answers
//!    `-MOVED`), and the old owner deletes its copies (`FORGET`).
//!
//! **Why a rollback cannot lose or resurrect data.** Before step 6 the table is unchanged, so
//! after any failure the old owner still owns the slots: if it was restarted its freeze is gone
//! and it serves them again from its checkpoint in the cut (a restart always advances the
//! world-line first, see the worker's restart rule, so step 6 then refuses); if it survived, it
//! stays frozen until the driver aborts (`UNFREEZE`). Either way step 6 can only succeed if no
//! rollback happened since step 3, i.e. both `v` and `u` are in the cut the cluster would
//! return to. Any error aborts: the old owner is unfrozen and the new owner forgets what it
//! imported; the migration can simply be run again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use prefixkv_dpr::metadata::{MetadataError, MetadataStore, PartitionRange};
use prefixkv_dpr::{Version, WorkerId, WorldLine};
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_dprnet::slots::SLOT_COUNT;
use prefixkv_resp::Reply;

/// Key/value pairs per `IMPORT` command at most.
const IMPORT_PAIRS: usize = 512;
/// Bytes of keys and values per `IMPORT` command, at most, unless one pair is larger alone (a
/// value's form is at most what the workers' frame limit allows, `worker/slots.rs`).
const IMPORT_BYTES: usize = 4 << 20;

/// Splits `[key, value, …]` into `IMPORT` commands' worth of pairs (see the bounds above).
fn import_chunks(values: &[bytes::Bytes]) -> Vec<&[bytes::Bytes]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, pair) in values.chunks(2).enumerate() {
        let size: usize = pair.iter().map(|b| b.len()).sum();
        let at = 2 * index;
        if at > start && (at - start == 2 * IMPORT_PAIRS || bytes + size > IMPORT_BYTES) {
            chunks.push(&values[start..at]);
            (start, bytes) = (at, 0);
        }
        bytes += size;
    }
    if start < values.len() {
        chunks.push(&values[start..]);
    }
    chunks
}

/// Called at a step boundary with the step's name (`"frozen"`: the old owner renounced the slots
/// and that version is in the cut; `"copied"`: the data is at the new owner, not yet committed
/// there): tests inject failures here.
pub type StepHook = std::sync::Arc<dyn Fn(&'static str) + Send + Sync>;

/// What to move.
#[derive(Clone)]
pub struct MigrationPlan {
    /// First slot (inclusive).
    pub first: u16,
    /// Last slot (inclusive).
    pub last: u16,
    /// The new owner.
    pub to: WorkerId,
    /// The new owner's address; needed only if the table names none (it owns no slots yet).
    pub to_address: Option<String>,
    /// How long each wait (for a commit boundary, for the cut) may take.
    pub timeout: Duration,
    /// Fault injection (None in normal use).
    pub hook: Option<StepHook>,
}

impl MigrationPlan {
    /// Moves `first..=last` to `to` (address from the table), 30 s bound per wait, no hook.
    pub fn new(first: u16, last: u16, to: WorkerId) -> Self {
        Self {
            first,
            last,
            to,
            to_address: None,
            timeout: Duration::from_secs(30),
            hook: None,
        }
    }
}

/// What a migration did.
#[derive(Clone, Debug)]
pub struct MigrationReport {
    /// The old owner.
    pub from: WorkerId,
    /// The new owner.
    pub to: WorkerId,
    /// The world-line it ran in.
    pub world_line: WorldLine,
    /// The version the old owner sealed when it renounced the slots.
    pub sealed_version: Version,
    /// The new owner's version the copy was committed in (at most).
    pub imported_version: Version,
    /// Keys copied.
    pub keys: u64,
    /// Keys the old owner deleted afterwards, or why it could not (the slots are moved either
    /// way; stale copies at a worker that does not own them are never served).
    pub forgotten: Result<u64, String>,
    /// From the start to the publication of the new table.
    pub elapsed: Duration,
}

/// Why a migration did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The plan cannot be carried out on this table.
    #[error("{0}")]
    Plan(String),
    /// The metadata store failed.
    #[error("metadata store: {0}")]
    Metadata(#[from] MetadataError),
    /// A worker refused a step or could not be reached; the migration was abandoned (the old
    /// owner unfrozen, the new one's partial copy forgotten). Run it again.
    #[error("migration abandoned at {step}: {reason}")]
    Aborted {
        /// The step.
        step: &'static str,
        /// Why.
        reason: String,
    },
}

/// A plain RESP connection to a worker.
struct WorkerLink {
    address: String,
    connection: RedisConnection,
}

impl WorkerLink {
    fn open(address: &str, timeout: Duration) -> Result<Self, String> {
        let socket: SocketAddr = address
            .parse()
            .map_err(|e| format!("worker address {address:?}: {e}"))?;
        let connection = RedisConnection::connect(socket, timeout)
            .map_err(|e| format!("connecting to {address}: {e}"))?;
        Ok(Self {
            address: address.to_string(),
            connection,
        })
    }

    /// Sends `PREFIXKV.SLOTS args…`; an error reply is an error.
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut command: Vec<&[u8]> = vec![b"PREFIXKV.SLOTS"];
        command.extend_from_slice(args);
        match self.connection.command(&command) {
            Ok(Reply::Error(text)) => Err(format!(
                "{} answered {}",
                self.address,
                String::from_utf8_lossy(&text)
            )),
            Ok(reply) => Ok(reply),
            Err(e) => Err(format!("{}: {e}", self.address)),
        }
    }

    fn call_integer(&mut self, args: &[&[u8]]) -> Result<u64, String> {
        match self.call(args)? {
            Reply::Integer(n) if n >= 0 => Ok(n as u64),
            other => Err(format!("{} answered {other:?}", self.address)),
        }
    }
}

/// The table with `first..=last` given to `to` at `address` (adjacent ranges of one worker
/// merged).
pub fn reassign(
    ranges: &[PartitionRange],
    first: u16,
    last: u16,
    to: WorkerId,
    address: &str,
) -> Vec<PartitionRange> {
    let (first, last) = (u64::from(first), u64::from(last));
    let mut out: Vec<PartitionRange> = Vec::with_capacity(ranges.len() + 2);
    for range in ranges {
        if range.last < first || range.first > last {
            out.push(range.clone());
            continue;
        }
        if range.first < first {
            out.push(PartitionRange {
                last: first - 1,
                ..range.clone()
            });
        }
        if range.last > last {
            out.push(PartitionRange {
                first: last + 1,
                ..range.clone()
            });
        }
    }
    out.push(PartitionRange {
        first,
        last,
        worker: to,
        address: address.to_string(),
    });
    out.sort_by_key(|r| r.first);
    let mut merged: Vec<PartitionRange> = Vec::with_capacity(out.len());
    for range in out {
        match merged.last_mut() {
            Some(previous)
                if previous.worker == range.worker && previous.last + 1 == range.first =>
            {
                previous.last = range.last;
            }
            _ => merged.push(range),
        }
    }
    merged
}

/// Moves `plan`'s slots to `plan.to` (see the module docs). Blocks until the new table is
/// published or the migration was abandoned.
pub fn migrate_slots(
    store: &dyn MetadataStore,
    plan: &MigrationPlan,
) -> Result<MigrationReport, MigrateError> {
    let started = Instant::now();
    let (first, last) = (plan.first, plan.last);
    if first > last || last >= SLOT_COUNT {
        return Err(MigrateError::Plan(format!(
            "slots {first}..={last}: need first <= last <= {}",
            SLOT_COUNT - 1
        )));
    }
    let state = store.cluster_state()?;
    if state.recovering {
        return Err(MigrateError::Plan(
            "the cluster is recovering from a failure; try again once it finished".into(),
        ));
    }
    let world_line = state.world_line;
    let table = store.ownership()?;
    let owner = |slot: u16| prefixkv_dpr::metadata::ownership::owner_of(&table, u64::from(slot));
    let from = owner(first)
        .ok_or_else(|| MigrateError::Plan("no ownership table is published".into()))?
        .clone();
    if let Some(other) = (first..=last).find(|&s| owner(s).is_none_or(|r| r.worker != from.worker))
    {
        return Err(MigrateError::Plan(format!(
            "slots {first}..={last} do not all belong to worker {} (slot {other} does not)",
            from.worker
        )));
    }
    if from.worker == plan.to {
        return Err(MigrateError::Plan(format!(
            "worker {} already owns slots {first}..={last}",
            plan.to
        )));
    }
    let to_address = match (&plan.to_address, table.iter().find(|r| r.worker == plan.to)) {
        (Some(address), _) => address.clone(),
        (None, Some(range)) => range.address.clone(),
        (None, None) => {
            return Err(MigrateError::Plan(format!(
                "worker {} owns no slots, so the table names no address for it: give one",
                plan.to
            )))
        }
    };
    let mut source =
        WorkerLink::open(&from.address, plan.timeout).map_err(|reason| MigrateError::Aborted {
            step: "connect",
            reason,
        })?;
    let mut target =
        WorkerLink::open(&to_address, plan.timeout).map_err(|reason| MigrateError::Aborted {
            step: "connect",
            reason,
        })?;
    let range_args = [first.to_string(), last.to_string()];
    let range_args = [range_args[0].as_bytes(), range_args[1].as_bytes()];
    let mut run = Run {
        store,
        world_line,
        timeout: plan.timeout,
        range: range_args,
        hook: plan.hook.clone(),
        source: &mut source,
        target: &mut target,
    };
    let moved = run.copy(from.worker, plan.to);
    let (sealed_version, imported_version, keys) = match moved {
        Ok(done) => done,
        Err((step, reason)) => {
            run.abort();
            return Err(MigrateError::Aborted { step, reason });
        }
    };
    let new_table = reassign(&table, first, last, plan.to, &to_address);
    match store.set_ownership_in(world_line, &new_table) {
        Ok(true) => {}
        Ok(false) => {
            run.abort();
            return Err(MigrateError::Aborted {
                step: "publish",
                reason: format!(
                    "the cluster left world-line {world_line} (a failure) before the new table \
                     was published"
                ),
            });
        }
        Err(error) => {
            run.abort();
            return Err(error.into());
        }
    }
    let elapsed = started.elapsed();
    // Published: the migration happened. What follows only hurries the workers' periodic
    // re-read and cleans up; failures are reported, not undone.
    let _ = run.target.call(&[b"REFRESH"]);
    let forgotten = run.source.call(&[b"REFRESH"]).and_then(|_| {
        run.source
            .call_integer(&[b"FORGET", run.range[0], run.range[1]])
    });
    Ok(MigrationReport {
        from: from.worker,
        to: plan.to,
        world_line,
        sealed_version,
        imported_version,
        keys,
        forgotten,
        elapsed,
    })
}

/// One migration's connections and bounds.
struct Run<'a> {
    store: &'a dyn MetadataStore,
    world_line: WorldLine,
    timeout: Duration,
    range: [&'a [u8]; 2],
    hook: Option<StepHook>,
    source: &'a mut WorkerLink,
    target: &'a mut WorkerLink,
}

type StepResult<T> = Result<T, (&'static str, String)>;

impl Run<'_> {
    /// Steps 1–5: (sealed version, imported version, keys copied).
    fn copy(&mut self, from: WorkerId, to: WorkerId) -> StepResult<(Version, Version, u64)> {
        let [first, last] = self.range;
        self.target
            .call(&[b"IMPORTING", first, last])
            .map_err(|e| ("importing", e))?;
        let sealed = self
            .source
            .call_integer(&[b"FREEZE", first, last])
            .map_err(|e| ("freeze", e))?;
        self.wait_for_cut(from, sealed)
            .map_err(|e| ("waiting for the frozen version to commit", e))?;
        self.step("frozen");
        let keys = self.transfer().map_err(|e| ("copy", e))?;
        self.step("copied");
        let imported = self
            .target
            .call_integer(&[b"VERSION"])
            .map_err(|e| ("version", e))?;
        self.wait_for_cut(to, imported)
            .map_err(|e| ("waiting for the copy to commit", e))?;
        Ok((sealed, imported, keys))
    }

    fn step(&self, name: &'static str) {
        if let Some(hook) = &self.hook {
            hook(name);
        }
    }

    /// Copies every key of the range, one export chunk at a time.
    fn transfer(&mut self) -> Result<u64, String> {
        let [first, last] = self.range;
        let mut cursor = 0u64;
        let mut keys = 0u64;
        loop {
            let cursor_text = cursor.to_string();
            let reply = self
                .source
                .call(&[b"EXPORT", first, last, cursor_text.as_bytes()])?;
            let Reply::Array(items) = reply else {
                return Err(format!("EXPORT answered {reply:?}"));
            };
            let mut items = items.into_iter();
            cursor = match items.next() {
                Some(Reply::BulkString(next)) => std::str::from_utf8(&next)
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .ok_or("EXPORT answered a bad cursor")?,
                other => return Err(format!("EXPORT answered {other:?} as its cursor")),
            };
            let values: Vec<bytes::Bytes> = items
                .map(|item| match item {
                    Reply::BulkString(bytes) => Ok(bytes),
                    other => Err(format!("EXPORT answered {other:?} as a key or value")),
                })
                .collect::<Result<_, _>>()?;
            if !values.len().is_multiple_of(2) {
                return Err("EXPORT answered an odd number of keys and values".into());
            }
            for chunk in import_chunks(&values) {
                let mut args: Vec<&[u8]> = vec![b"IMPORT", first, last];
                args.extend(chunk.iter().map(|b| &b[..]));
                keys += self.target.call_integer(&args)?;
            }
            if cursor == 0 {
                return Ok(keys);
            }
        }
    }

    /// Waits until `worker`'s entry in the cut reaches `version`, in this run's world-line.
    fn wait_for_cut(&self, worker: WorkerId, version: Version) -> Result<(), String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let state = self.store.cluster_state().map_err(|e| e.to_string())?;
            if state.world_line != self.world_line {
                return Err(format!(
                    "the cluster moved from world-line {} to {} (a failure)",
                    self.world_line, state.world_line
                ));
            }
            if state.cut_version(worker) >= version {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "worker {worker}'s version {version} did not reach the DPR cut within {} ms \
                     (it is at {})",
                    self.timeout.as_millis(),
                    state.cut_version(worker)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Undoes what can be undone: the old owner serves the slots again, the new one forgets its
    /// partial copy (best effort: a worker that restarted has neither mark anyway).
    fn abort(&mut self) {
        let [first, last] = self.range;
        if let Err(error) = self.source.call(&[b"UNFREEZE", first, last]) {
            tracing::warn!(%error, "unfreezing the slots after an abandoned migration failed");
        }
        if let Err(error) = self.target.call(&[b"FORGET", first, last]) {
            tracing::warn!(%error, "forgetting a partial copy after an abandoned migration failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u64, last: u64, worker: WorkerId) -> PartitionRange {
        PartitionRange {
            first,
            last,
            worker,
            address: format!("127.0.0.1:{}", 7000 + worker),
        }
    }

    #[test]
    fn imports_are_chunked_by_pairs_and_bytes() {
        let pair = |size: usize| {
            [
                bytes::Bytes::from_static(b"k"),
                bytes::Bytes::from(vec![0u8; size]),
            ]
        };
        let small: Vec<bytes::Bytes> = (0..1200).flat_map(|_| pair(1)).collect();
        let sizes: Vec<usize> = import_chunks(&small).iter().map(|c| c.len() / 2).collect();
        assert_eq!(sizes, vec![512, 512, 176]);
        let big: Vec<bytes::Bytes> = [pair(10), pair(IMPORT_BYTES), pair(3 << 20), pair(2 << 20)]
            .into_iter()
            .flatten()
            .collect();
        let sizes: Vec<usize> = import_chunks(&big).iter().map(|c| c.len() / 2).collect();
        // A pair larger than the byte bound goes alone; the rest fill up to it.
        assert_eq!(sizes, vec![1, 1, 1, 1]);
        assert!(import_chunks(&[]).is_empty());
    }

    #[test]
    fn reassign_splits_and_merges() {
        let table = vec![
            range(0, 5460, 0),
            range(5461, 10921, 1),
            range(10922, 16383, 2),
        ];
        // A middle piece of worker 0 to worker 1.
        assert_eq!(
            reassign(&table, 100, 199, 1, "127.0.0.1:7001"),
            vec![
                range(0, 99, 0),
                range(100, 199, 1),
                range(200, 5460, 0),
                range(5461, 10921, 1),
                range(10922, 16383, 2)
            ]
        );
        // The tail of worker 0 to worker 1: merged with worker 1's range.
        assert_eq!(
            reassign(&table, 5000, 5460, 1, "127.0.0.1:7001"),
            vec![
                range(0, 4999, 0),
                range(5000, 10921, 1),
                range(10922, 16383, 2)
            ]
        );
        // Everything of worker 2 to a new worker 3.
        assert_eq!(
            reassign(&table, 10922, 16383, 3, "127.0.0.1:7003"),
            vec![
                range(0, 5460, 0),
                range(5461, 10921, 1),
                range(10922, 16383, 3)
            ]
        );
        prefixkv_dpr::metadata::ownership::validate(&reassign(
            &table,
            1,
            16000,
            2,
            "127.0.0.1:7002",
        ))
        .unwrap();
    }
}
