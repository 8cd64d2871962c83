//! Stream commands: XADD, XRANGE, XREVRANGE, XLEN, XDEL, XTRIM, XSETID, XREAD (`entries`,
//! `read`), XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM (`groups`, `claim`,
//! `read`) and XINFO (`info`), with Redis 7.0's replies and error lines.
//!
//! A stream is stored as records (`object`): an append, a delete, a lookup by id and each
//! pending-entry update cost O(log n) records; a range costs O(log n + entries returned).
//!
//! Invariants:
//! - Every command reads and writes one stream under its key's lock ([`edit`], [`read`]), and
//!   writes back every header it changed in that transaction, also when a later step failed
//!   (`object` module docs), so the log and checkpoints hold each command whole.
//! - An empty stream is a key, as in Redis (XDEL and XTRIM never delete it).
//! - XADD wakes the clients blocked on the key (`crate::blocking`), inside its transaction.

pub(crate) mod ids;
pub(crate) mod object;
mod pending;

mod claim;
mod entries;
mod groups;
mod info;
mod pel;
mod read;

use bytes::Bytes;
use prefixkv_collections::Owned;

use super::{AsyncOp, CommandError, CommandResult, Ctx, Flow, Writer};
use crate::value::{Kind, Stored};
use ids::StreamId;
use object::{Entry, Stream};

pub(super) use claim::{xautoclaim, xclaim};
pub(super) use entries::{xadd, xdel, xlen, xsetid, xtrim};
pub(super) use groups::{xack, xgroup, xpending};
pub(super) use info::xinfo;

/// XRANGE.
pub(super) fn xrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    entries::xrange(ctx, args, false)
}

/// XREVRANGE.
pub(super) fn xrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    entries::xrange(ctx, args, true)
}

/// XREAD.
pub(super) fn xread(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    read::xread(ctx, args, false)
}

/// XREADGROUP.
pub(super) fn xreadgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    read::xread(ctx, args, true)
}

/// Stream commands Redis runs over `maxmemory` (they lack its `denyoom` flag): they acknowledge,
/// claim, deliver to a group or remove, so consumers keep working when memory is short.
pub(super) fn allowed_over_maxmemory(name: &str, args: &[Bytes]) -> bool {
    // The stream commands that free memory are flagged `table::MAY_FREE`; XGROUP only by
    // subcommand.
    name == "xgroup"
        && args.get(1).is_some_and(|sub| {
            matches!(
                super::lower(sub).as_str(),
                "destroy" | "delconsumer" | "setid"
            )
        })
}

/// The stream in a key's value: `None` for no key, WRONGTYPE for another type.
pub fn stream_of(stored: Option<Stored>) -> CommandResult<Option<(Stream, u64)>> {
    match stored {
        None => Ok(None),
        Some(s) if s.kind == Kind::Stream => {
            Ok(Some((Stream::decode(&s.payload)?, s.expire_at_ms)))
        }
        Some(_) => Err(CommandError::WrongType),
    }
}

/// A stream being changed by a command ([`edit`]).
pub struct Edit {
    /// The stream.
    pub stream: Stream,
    /// Set by a step that wrote records without changing the header (a group or consumer
    /// update): the key is still written, so WATCH sees the change.
    pub dirty: bool,
    /// Unix ms the command runs at.
    pub now_ms: u64,
}

/// Runs `body` on the stream at `key` under its lock (`None` when there is no key and `create`
/// is false; with `create` a missing key starts as an empty stream, written only if `body`
/// succeeds), then writes the header back if anything changed, also after a failed step.
pub fn edit<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    create: bool,
    body: impl FnOnce(&mut Edit, &mut Owned<'_, '_>) -> CommandResult<R>,
) -> CommandResult<Option<R>> {
    let db = ctx.db();
    let server = ctx.server;
    let mut txn = server.keyspace.begin(ctx.session, db, &[key]);
    let (stream, expire, created) = match stream_of(txn.get(db, key)?)? {
        Some((stream, expire)) => (stream, expire, false),
        None if create => (Stream::new(server.keyspace.new_object_id()), 0, true),
        None => {
            let mark = txn.commit()?;
            ctx.client.note_write(mark);
            return Ok(None);
        }
    };
    let original = stream.encode();
    let mut edit = Edit {
        stream,
        dirty: false,
        now_ms: txn.now_ms,
    };
    let result = txn.with_records(db, key, |records| {
        if created {
            object::mark(records, edit.stream.entries.id)?;
        }
        let result = body(&mut edit, records);
        if created && result.is_err() {
            // Best effort: a new stream whose command failed leaves nothing behind.
            let _ = edit.stream.clear(records);
        }
        result
    });
    let header = edit.stream.encode();
    let changed = edit.dirty || header != original;
    if changed && !(created && result.is_err()) {
        txn.put_object(db, key, Kind::Stream, expire, &header)?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    result.map(Some)
}

/// Runs `body` on the stream at `key` without changing it; `None` when there is no key.
pub fn read<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    body: impl FnOnce(&Stream, &mut Owned<'_, '_>) -> CommandResult<R>,
) -> CommandResult<Option<R>> {
    super::read_collection(ctx, stream_of, key, body)
}

impl Writer<'_> {
    /// An id as a bulk string.
    pub fn stream_id(&mut self, id: StreamId) {
        let mut buf = [0u8; ids::ID_TEXT_BYTES];
        self.bulk(id.text(&mut buf));
    }

    /// An entry: `[id, [field, value, ...]]`.
    pub fn stream_entry(&mut self, entry: &Entry) {
        self.array(2);
        self.stream_id(entry.id);
        self.array(entry.fields.len());
        for field in &entry.fields {
            self.bulk(field);
        }
    }

    /// Entries as an array.
    pub fn stream_entries(&mut self, entries: &[Entry]) {
        self.array(entries.len());
        for entry in entries {
            self.stream_entry(entry);
        }
    }
}

/// Parses a COUNT-like argument: an integer, negative taken as 0 (Redis's XRANGE, XREAD,
/// XPENDING).
fn parse_count(argument: &[u8]) -> CommandResult<u64> {
    Ok(super::parse_int(argument)?.max(0) as u64)
}

/// `NOGROUP` for a missing key or group, in XREADGROUP's words.
fn no_group_readgroup(key: &[u8], group: &[u8]) -> CommandError {
    CommandError::other(
        "NOGROUP",
        format!(
            "No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(group)
        ),
    )
}

/// `NOGROUP` for a missing key or group (XPENDING, XCLAIM, XAUTOCLAIM).
fn no_key_or_group(key: &[u8], group: &[u8]) -> CommandError {
    CommandError::other(
        "NOGROUP",
        format!(
            "No such key '{}' or consumer group '{}'",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(group)
        ),
    )
}

/// `NOGROUP` for a missing group of an existing key (XGROUP, XINFO CONSUMERS).
fn no_group_for_key(key: &[u8], group: &[u8]) -> CommandError {
    CommandError::other(
        "NOGROUP",
        format!(
            "No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(group),
            String::from_utf8_lossy(key)
        ),
    )
}

/// What a blocked XREAD/XREADGROUP runs again when woken.
fn block(database: u8, keys: Vec<Bytes>, timeout_ms: u64, rerun: Vec<Bytes>) -> Flow {
    Flow::Async(AsyncOp::Block {
        database,
        keys,
        timeout_ms,
        kind: crate::value::Kind::Stream,
        rerun: Some(rerun),
    })
}
