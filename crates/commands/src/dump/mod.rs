//! One key's whole value as bytes and back: [`dump`] serializes a key (its type, elements and
//! expiry; for a stream its entries, last id, consumer groups with their pending lists and
//! consumers) and [`restore`] writes such bytes under a key through a keyspace transaction.
//! The cluster's slot migration moves keys with them (a collection's records are keyed by its
//! object id, not by the key, so copying engine records cannot move it); the format is our
//! own (`form`'s docs), versioned and checksummed, not Redis's RDB.
//!
//! Invariants:
//! - Bounded: [`dump`] stops with an error as soon as the form would exceed the caller's limit
//!   (it reads the records as it writes, holding no more than the form); [`restore`] decodes
//!   and checks the whole input before it writes anything (`form`'s invariants), so an input
//!   that does not decode writes nothing.
//! - [`dump`] only reads: an expired key reads as absent but is not deleted, and no access word
//!   changes, so dumping a frozen slot writes nothing to it.
//! - [`restore`] writes the key and all its records in the caller's transaction, under fresh
//!   object ids (the source's ids mean nothing here), marking every stream structure's id as
//!   `streams::object` requires. If a write fails part way, what it wrote is cleared (best
//!   effort, as `objects::copy`) and the key is not written.

mod form;

use std::ops::ControlFlow;

use prefixkv_collections::hash::Hash;
use prefixkv_collections::list::List;
use prefixkv_collections::Sequence;

use crate::commands::streams::ids::ID_BYTES;
use crate::commands::streams::object::{mark, Consumer, Group, Stream};
use crate::error::{CommandError, CommandResult};
use crate::headers::{split_entry, ZSet};
use crate::keyspace::Txn;
use crate::value::{self, Kind};
use form::{Body, Writer};

pub use form::VERSION;

/// The serialized form of `key`'s value in `database`, or None if it has none (or it expired).
/// Errors if the form would exceed `limit` bytes, or the value's records are damaged.
pub fn dump(
    txn: &mut Txn<'_>,
    database: u8,
    key: &[u8],
    limit: usize,
) -> CommandResult<Option<Vec<u8>>> {
    let Some(stored) = txn.peek(database, key)? else {
        return Ok(None);
    };
    if stored.expire_at_ms != 0 && stored.expire_at_ms <= txn.now_ms {
        return Ok(None);
    }
    let mut w = Writer::new(stored.kind, stored.expire_at_ms, limit);
    let payload = &stored.payload[..];
    match stored.kind {
        Kind::String => w.blob(payload)?,
        Kind::Hash => {
            let pairs = value::decode_hash(payload)?;
            w.u64(pairs.len() as u64)?;
            for (field, value) in &pairs {
                w.blob(field)?;
                w.blob(value)?;
            }
        }
        Kind::List => {
            let list = List::decode(&mut &payload[..])?;
            w.u64(list.len())?;
            txn.with_records(database, key, |r| {
                write_sequence(r, &list, &mut w, |w, e| w.blob(e))
            })?;
        }
        Kind::Set | Kind::HashTable => {
            let hash = Hash::decode(&mut &payload[..])?;
            w.u64(hash.len())?;
            let with_values = stored.kind == Kind::HashTable;
            let mut written = 0u64;
            let mut failed = Ok(());
            txn.with_records(database, key, |r| {
                hash.for_each(r, |field, value| {
                    if failed.is_ok() {
                        failed = w.blob(field).and_then(|()| {
                            if with_values {
                                w.blob(value)
                            } else {
                                Ok(())
                            }
                        });
                        written += 1;
                    }
                })
            })?;
            failed?;
            if written != hash.len() {
                return Err(CommandError::damaged(
                    "a hash's records disagree with its length",
                ));
            }
        }
        Kind::ZSet => {
            let zset = ZSet::decode(payload)?;
            w.u64(zset.len())?;
            txn.with_records(database, key, |r| {
                write_sequence(r, &zset.order, &mut w, |w, entry| {
                    let (score, member) = split_entry(entry)?;
                    w.blob(member)?;
                    w.raw(&score.to_le_bytes())
                })
            })?;
        }
        Kind::Stream => {
            let stream = Stream::decode(payload)?;
            txn.with_records(database, key, |r| dump_stream(r, &stream, &mut w))?;
        }
    }
    Ok(Some(w.finish()))
}

/// Writes every entry of `sequence` with `write`, checking the count the caller wrote before.
fn write_sequence<S: Sequence>(
    records: &mut prefixkv_collections::Owned<'_, '_>,
    sequence: &S,
    w: &mut Writer,
    mut write: impl FnMut(&mut Writer, &[u8]) -> CommandResult,
) -> CommandResult {
    let mut failed = Ok(());
    let mut written = 0u64;
    sequence.range(records, 0, |_, entry| {
        failed = write(w, entry);
        written += 1;
        if failed.is_err() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    failed?;
    if written != sequence.len() {
        return Err(CommandError::damaged(
            "a sequence's records disagree with its length",
        ));
    }
    Ok(())
}

fn dump_stream(
    records: &mut prefixkv_collections::Owned<'_, '_>,
    stream: &Stream,
    w: &mut Writer,
) -> CommandResult {
    w.raw(&stream.last_id.key())?;
    w.u64(stream.entries_added)?;
    w.raw(&stream.max_deleted.key())?;
    w.u64(stream.entries.len())?;
    write_sequence(records, &stream.entries, w, |w, e| w.blob(e))?;
    let groups = stream.all_groups(records)?;
    w.u64(groups.len() as u64)?;
    for (name, group) in groups {
        w.blob(&name)?;
        w.raw(&group.last_id.key())?;
        w.raw(&group.entries_read.to_le_bytes())?;
        w.u64(group.pel.len())?;
        write_sequence(records, &group.pel, w, |w, e| w.blob(e))?;
        let consumers = group.all_consumers(records)?;
        w.u64(consumers.len() as u64)?;
        for (name, consumer) in consumers {
            w.blob(&name)?;
            w.u64(consumer.seen_ms)?;
            w.u64(consumer.pel.len())?;
            write_sequence(records, &consumer.pel, w, |w, id| {
                if id.len() != ID_BYTES {
                    return Err(CommandError::damaged(
                        "a consumer's pending id is not 16 bytes",
                    ));
                }
                w.raw(id)
            })?;
        }
    }
    Ok(())
}

/// Writes the value serialized in `bytes` (by [`dump`]) under `key` in `database`, keeping the
/// form's expiry. An existing key is replaced if `replace`, else the answer is Redis's
/// `BUSYKEY` error. A form whose expiry has passed writes nothing (and, with `replace`,
/// deletes the key). Whether the key was written.
pub fn restore(
    txn: &mut Txn<'_>,
    database: u8,
    key: &[u8],
    bytes: &[u8],
    replace: bool,
) -> CommandResult<bool> {
    let form = form::decode(bytes)?;
    let exists = txn.get_quiet(database, key)?.is_some();
    if exists && !replace {
        return Err(CommandError::other(
            "BUSYKEY",
            "Target key name already exists.",
        ));
    }
    if exists {
        txn.delete(database, key)?;
    }
    let expire = form.expire_at_ms;
    if expire != 0 && expire <= txn.now_ms {
        return Ok(false);
    }
    let target = (database, key);
    match form.body {
        Body::String(bytes) => txn.put_object(database, key, Kind::String, expire, bytes)?,
        Body::Hash(pairs) => {
            let owned: Vec<(Vec<u8>, Vec<u8>)> = pairs
                .iter()
                .map(|(f, v)| (f.to_vec(), v.to_vec()))
                .collect();
            txn.put_object(
                database,
                key,
                Kind::Hash,
                expire,
                &value::encode_hash(&owned),
            )?;
        }
        Body::List(items) => {
            let mut list = List::new(txn.keyspace().new_object_id());
            let built = txn.with_records(database, key, |r| {
                items
                    .iter()
                    .try_for_each(|item| list.insert_at(r, list.len(), item))
            });
            discard_on_error(txn, target, built.map_err(CommandError::from), |r| {
                list.clear(r).map_err(CommandError::from)
            })?;
            let mut header = Vec::new();
            list.encode(&mut header);
            txn.put_object(database, key, Kind::List, expire, &header)?;
        }
        Body::Set(members) => {
            let pairs: Vec<(&[u8], &[u8])> = members.iter().map(|m| (*m, &b""[..])).collect();
            restore_hash(txn, target, Kind::Set, expire, &pairs)?;
        }
        Body::HashTable(pairs) => restore_hash(txn, target, Kind::HashTable, expire, &pairs)?,
        Body::ZSet(members) => {
            let mut zset = ZSet::new(txn.keyspace().new_object_id());
            let built = txn.with_records(database, key, |r| {
                members
                    .iter()
                    .try_for_each(|(member, score)| zset.set(r, member, None, *score))
            });
            discard_on_error(txn, target, built, |r| zset.clear(r))?;
            txn.put_object(database, key, Kind::ZSet, expire, &zset.encode())?;
        }
        Body::Stream(form) => {
            let mut stream = Stream {
                last_id: form.last_id,
                entries_added: form.entries_added,
                max_deleted: form.max_deleted,
                ..Stream::new(txn.keyspace().new_object_id())
            };
            let built = restore_stream(txn, target, &form, &mut stream);
            discard_on_error(txn, target, built, |r| stream.clear(r))?;
            txn.put_object(database, key, Kind::Stream, expire, &stream.encode())?;
        }
    }
    Ok(true)
}

fn restore_hash(
    txn: &mut Txn<'_>,
    (database, key): (u8, &[u8]),
    kind: Kind,
    expire: u64,
    pairs: &[(&[u8], &[u8])],
) -> CommandResult {
    let mut hash = Hash::new(txn.keyspace().new_object_id());
    let built = txn.with_records(database, key, |r| {
        pairs
            .iter()
            .try_for_each(|(field, value)| hash.insert(r, field, value).map(|_| ()))
    });
    discard_on_error(
        txn,
        (database, key),
        built.map_err(CommandError::from),
        |r| hash.clear(r).map_err(CommandError::from),
    )?;
    let mut header = Vec::new();
    hash.encode(&mut header);
    txn.put_object(database, key, kind, expire, &header)
}

/// Writes a stream's entries, groups, pending lists and consumers into `stream` (empty, under
/// a fresh id), each group and consumer structure under a fresh id of its own, all marked.
fn restore_stream(
    txn: &mut Txn<'_>,
    (database, key): (u8, &[u8]),
    form: &form::StreamForm<'_>,
    stream: &mut Stream,
) -> CommandResult {
    txn.with_records(database, key, |r| {
        mark(r, stream.entries.id)?;
        for entry in &form.entries {
            stream.entries.insert_at(r, stream.entries.len(), entry)?;
        }
        Ok::<_, CommandError>(())
    })?;
    for group_form in &form.groups {
        let mut group = Group::new(
            txn.keyspace().new_object_id(),
            group_form.last_id,
            group_form.entries_read,
        );
        let consumer_ids: Vec<u64> = group_form
            .consumers
            .iter()
            .map(|_| txn.keyspace().new_object_id())
            .collect();
        txn.with_records(database, key, |r| {
            mark(r, group.pel.id)?;
            for nack in &group_form.pending {
                group.pel.insert_at(r, group.pel.len(), nack)?;
            }
            for (consumer_form, id) in group_form.consumers.iter().zip(consumer_ids) {
                let mut consumer = Consumer::new(id, consumer_form.seen_ms);
                mark(r, id)?;
                for pending in &consumer_form.ids {
                    consumer
                        .pel
                        .insert_at(r, consumer.pel.len(), &pending.key())?;
                }
                group.save_consumer(r, consumer_form.name, &consumer)?;
            }
            stream.save_group(r, group_form.name, &group)
        })?;
    }
    Ok(())
}

/// After a failed restore, deletes what it wrote (best effort: the header is never written, so
/// what remains is unreachable space) and returns the error.
fn discard_on_error(
    txn: &mut Txn<'_>,
    (database, key): (u8, &[u8]),
    built: CommandResult,
    clear: impl FnOnce(&mut prefixkv_collections::Owned<'_, '_>) -> CommandResult,
) -> CommandResult {
    if built.is_err() {
        let _ = txn.with_records(database, key, clear);
    }
    built
}
