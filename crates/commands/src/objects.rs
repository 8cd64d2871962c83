//! Collections stored as records (lists, sets, sorted sets, large hashes, streams): reading their headers
//! out of a key's value, writing them back, deleting and copying a whole object.
//!
//! A collection key's value holds only headers (`value` module docs); its elements live in
//! `prefixkv-collections` records keyed by the object id. Invariants:
//! - Every object has one owner key, and every access to its records happens in a keyspace
//!   transaction that locked that key, so the key's stripe guards the object as it guards a
//!   string.
//! - A header is written back (or the key deleted, when the collection became empty) in the same
//!   transaction as the records the update wrote, so the log and every checkpoint hold both or
//!   neither.
//! - A command writes its headers back even when a step failed: a structure whose update
//!   returned an error still describes its records exactly (`prefixkv-collections`: a failed
//!   step changed nothing), so the header written back holds the steps that succeeded (an
//!   RPUSH of three elements whose third is refused keeps the first two, and answers the
//!   error). Not writing it would leave the old header, which may no longer describe the
//!   records the earlier steps rewrote.
//! - An empty collection does not exist: the command that removes the last element deletes the
//!   key (its structure has already deleted its records), as Redis does.

use std::ops::ControlFlow;

use prefixkv_collections::hash::Hash;
use prefixkv_collections::list::List;
use prefixkv_collections::tree::Tree;
use prefixkv_collections::Sequence;

use crate::commands::streams::object::{mark, Consumer, Group, Stream};
use crate::error::{CommandError, CommandResult};
pub use crate::headers::{clear, entry, list_of, set_of, split_entry, zset_of, ZSet};
use crate::keyspace::Txn;
use crate::value::Kind;

/// Elements moved per batch when a whole object is copied (bounds the memory a COPY holds).
const COPY_BATCH: usize = 512;

/// Writes a list's header back, or deletes the key when the list became empty.
pub fn save_list(txn: &mut Txn<'_>, db: u8, key: &[u8], list: &List, expire: u64) -> CommandResult {
    if list.is_empty() {
        txn.delete_keeping_records(db, key)?;
        return Ok(());
    }
    txn.put_object(db, key, Kind::List, expire, &list.to_bytes())
}

/// Writes a set's (or a large hash's, `kind`) header back, or deletes the key when empty.
pub fn save_hash(
    txn: &mut Txn<'_>,
    db: u8,
    key: &[u8],
    kind: Kind,
    hash: &Hash,
    expire: u64,
) -> CommandResult {
    debug_assert!(matches!(kind, Kind::Set | Kind::HashTable));
    if hash.is_empty() {
        txn.delete_keeping_records(db, key)?;
        return Ok(());
    }
    txn.put_object(db, key, kind, expire, &hash.to_bytes())
}

/// Writes a sorted set's headers back, or deletes the key when empty.
pub fn save_zset(txn: &mut Txn<'_>, db: u8, key: &[u8], zset: &ZSet, expire: u64) -> CommandResult {
    if zset.is_empty() {
        txn.delete_keeping_records(db, key)?;
        return Ok(());
    }
    txn.put_object(db, key, Kind::ZSet, expire, &zset.encode())
}

/// Copies the object of a `kind` value with `payload` (owned by `source`) to a new object
/// `new_id` owned by `target` (both locked by `txn`); returns the new value's payload. Moves
/// [`COPY_BATCH`] elements at a time, so it holds little memory whatever the size.
pub fn copy(
    txn: &mut Txn<'_>,
    source: (u8, &[u8]),
    target: (u8, &[u8]),
    kind: Kind,
    payload: &[u8],
    new_id: u64,
) -> CommandResult<Vec<u8>> {
    let mut rest = payload;
    let mut out = Vec::new();
    match kind {
        Kind::List => {
            let list = List::decode(&mut rest)?;
            let mut copy = List::new(new_id);
            let copied = copy_sequence(txn, source, target, &list, &mut copy);
            discard_on_error(txn, target, copied, |r| {
                copy.clear(r).map_err(CommandError::from)
            })?;
            copy.encode(&mut out);
        }
        Kind::Set | Kind::HashTable => {
            let hash = Hash::decode(&mut rest)?;
            let mut copy = Hash::new(new_id);
            let copied = copy_hash(txn, source, target, &hash, &mut copy);
            discard_on_error(txn, target, copied, |r| {
                copy.clear(r).map_err(CommandError::from)
            })?;
            copy.encode(&mut out);
        }
        Kind::ZSet => {
            let zset = ZSet::decode(payload)?;
            let mut copy = ZSet::new(new_id);
            let copied = copy_hash(txn, source, target, &zset.members, &mut copy.members)
                .and_then(|()| copy_sequence(txn, source, target, &zset.order, &mut copy.order));
            discard_on_error(txn, target, copied, |r| copy.clear(r))?;
            out = copy.encode();
        }
        Kind::Stream => {
            let stream = Stream::decode(payload)?;
            let mut copy = Stream {
                entries: Tree::new(new_id),
                groups: Hash::new(new_id),
                ..stream
            };
            let copied = copy_stream(txn, source, target, &stream, &mut copy);
            discard_on_error(txn, target, copied, |r| copy.clear(r))?;
            out = copy.encode();
        }
        Kind::String | Kind::Hash => out.extend_from_slice(payload),
    }
    Ok(out)
}

/// After a failed copy, deletes what it wrote (best effort: the copy's header is never written,
/// so what remains is unreachable space) and returns the error.
fn discard_on_error(
    txn: &mut Txn<'_>,
    target: (u8, &[u8]),
    copied: CommandResult,
    clear: impl FnOnce(&mut prefixkv_collections::Owned<'_, '_>) -> CommandResult,
) -> CommandResult {
    if copied.is_err() {
        let _ = txn.with_records(target.0, target.1, clear);
    }
    copied
}

/// Copies a list, or a sorted set's order, element by element in order (through the
/// collections' `Sequence` trait, which both structures implement).
fn copy_sequence<S: Sequence>(
    txn: &mut Txn<'_>,
    source: (u8, &[u8]),
    target: (u8, &[u8]),
    sequence: &S,
    copy: &mut S,
) -> CommandResult {
    let mut rank = 0;
    while rank < sequence.len() {
        let mut batch = Vec::new();
        txn.with_records(source.0, source.1, |records| {
            sequence.range(records, rank, |_, entry| {
                batch.push(entry.to_vec());
                if batch.len() == COPY_BATCH {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
        })?;
        rank += batch.len() as u64;
        txn.with_records(target.0, target.1, |records| {
            batch
                .iter()
                .try_for_each(|entry| copy.insert_at(records, copy.len(), entry))
        })?;
    }
    Ok(())
}

/// Copies a stream's entries, groups, pending lists and consumers into `copy` (empty, under its
/// new id), each group and consumer structure under a fresh object id.
fn copy_stream(
    txn: &mut Txn<'_>,
    source: (u8, &[u8]),
    target: (u8, &[u8]),
    stream: &Stream,
    copy: &mut Stream,
) -> CommandResult {
    txn.with_records(target.0, target.1, |r| mark(r, copy.entries.id))?;
    copy_sequence(txn, source, target, &stream.entries, &mut copy.entries)?;
    let groups = txn.with_records(source.0, source.1, |r| stream.all_groups(r))?;
    for (name, group) in groups {
        let group_id = txn.keyspace().new_object_id();
        let mut new_group = Group::new(group_id, group.last_id, group.entries_read);
        txn.with_records(target.0, target.1, |r| mark(r, group_id))?;
        copy_sequence(txn, source, target, &group.pel, &mut new_group.pel)?;
        let consumers = txn.with_records(source.0, source.1, |r| group.all_consumers(r))?;
        for (consumer_name, consumer) in consumers {
            let mut new_consumer = Consumer::new(txn.keyspace().new_object_id(), consumer.seen_ms);
            let consumer_id = new_consumer.pel.id;
            txn.with_records(target.0, target.1, |r| mark(r, consumer_id))?;
            copy_sequence(txn, source, target, &consumer.pel, &mut new_consumer.pel)?;
            txn.with_records(target.0, target.1, |r| {
                new_group.save_consumer(r, &consumer_name, &new_consumer)
            })?;
        }
        txn.with_records(target.0, target.1, |r| {
            copy.save_group(r, &name, &new_group)
        })?;
    }
    Ok(())
}

fn copy_hash(
    txn: &mut Txn<'_>,
    source: (u8, &[u8]),
    target: (u8, &[u8]),
    hash: &Hash,
    copy: &mut Hash,
) -> CommandResult {
    let mut cursor = 0;
    loop {
        let mut batch = Vec::new();
        cursor = txn.with_records(source.0, source.1, |records| {
            hash.scan(records, cursor, |field, value| {
                batch.push((field.to_vec(), value.to_vec()))
            })
        })?;
        txn.with_records(target.0, target.1, |records| {
            batch
                .iter()
                .try_for_each(|(field, value)| copy.insert(records, field, value).map(|_| ()))
        })?;
        if cursor == 0 {
            break;
        }
    }
    if copy.len() != hash.len() {
        return Err(CommandError::damaged(format!(
            "copied {} of {} entries",
            copy.len(),
            hash.len()
        )));
    }
    Ok(())
}
