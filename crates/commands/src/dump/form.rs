//! The serialized form of one key's whole value, as bytes, and its checked decoder.
//!
//! Layout (integers little-endian unless said otherwise; a *blob* is `[length u32][bytes]`, a
//! *count* is a u64):
//!
//! | Field | Bytes |
//! |---|---|
//! | format version ([`VERSION`]) | 1 |
//! | type tag: 1 string, 2 small hash, 3 list, 4 set, 5 sorted set, 6 large hash, 7 stream | 1 |
//! | absolute expiry, Unix ms (0 = none) | 8 |
//! | body (below) | n |
//! | CRC-32C of everything before it | 4 |
//!
//! Bodies: a string is one blob; a hash (either encoding) a count then field and value blobs; a
//! list or a set a count then element blobs (a list in order); a sorted set a count then
//! (member blob, score f64) in score order; a stream its last id (16 bytes, the stored id form),
//! entries added (u64), max deleted id (16), a count of entries then each entry's stored form
//! as a blob (`streams::object::encode_entry`), then a count of groups, each: name blob, last
//! delivered id (16), entries read (i64), a count of pending entries then each one's stored
//! form as a blob (`streams::pending::Nack`), a count of consumers, each: name blob, seen time
//! (u64), a count of ids then each id (16).
//!
//! Invariants:
//! - The decoder never trusts a length: every count is checked against the bytes left (each
//!   item takes at least its fixed bytes) before anything is pushed, every blob against the
//!   bytes present, so a truncated or corrupted input is an error, never a panic or an
//!   allocation sized by the input's numbers; the CRC catches damage before any of it.
//! - A decoded [`Form`] describes a value the command layer could have written: no empty
//!   collection, unique hash fields, set and sorted-set members, no NaN score; a stream's ids
//!   strictly ascending and at most its last id, each group's pending entries in id order, and
//!   its consumers' ids exactly the pending entries that name them. Restoring it can therefore
//!   not break the invariants of `crate::objects` and `streams::object`.
//! - The writer ([`Writer`]) refuses to grow past its limit: a value whose form would exceed it
//!   is an error naming the limit, found while it is written, never after.

use std::collections::{HashMap, HashSet};

use crate::commands::streams::ids::{StreamId, ID_BYTES};
use crate::commands::streams::object::{decode_entry, Nack};
use crate::error::{CommandError, CommandResult};
use crate::value::Kind;

/// The format version this build writes and reads.
pub const VERSION: u8 = 1;

/// Bytes of the version, type tag and expiry.
const HEAD_BYTES: usize = 10;
/// Bytes of the trailing checksum.
const CRC_BYTES: usize = 4;

/// A decoded form, borrowing its bytes from the input.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Form<'a> {
    /// Absolute expiry, Unix ms, 0 = none.
    pub expire_at_ms: u64,
    /// The value.
    pub body: Body<'a>,
}

/// A value by type (see the module docs for what each holds).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Body<'a> {
    String(&'a [u8]),
    /// A small hash, stored whole in the key's value.
    Hash(Vec<(&'a [u8], &'a [u8])>),
    /// A large hash, stored as records.
    HashTable(Vec<(&'a [u8], &'a [u8])>),
    List(Vec<&'a [u8]>),
    Set(Vec<&'a [u8]>),
    ZSet(Vec<(&'a [u8], f64)>),
    Stream(StreamForm<'a>),
}

/// A stream's whole state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StreamForm<'a> {
    pub last_id: StreamId,
    pub entries_added: u64,
    pub max_deleted: StreamId,
    /// Stored entries (`encode_entry`), in id order.
    pub entries: Vec<&'a [u8]>,
    pub groups: Vec<GroupForm<'a>>,
}

/// A consumer group.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GroupForm<'a> {
    pub name: &'a [u8],
    pub last_id: StreamId,
    pub entries_read: i64,
    /// Stored pending entries (`Nack::encode`), in id order.
    pub pending: Vec<&'a [u8]>,
    pub consumers: Vec<ConsumerForm<'a>>,
}

/// A consumer of a group.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConsumerForm<'a> {
    pub name: &'a [u8],
    pub seen_ms: u64,
    /// The ids it owns, in order.
    pub ids: Vec<StreamId>,
}

pub(crate) fn tag(kind: Kind) -> u8 {
    match kind {
        Kind::String => 1,
        Kind::Hash => 2,
        Kind::List => 3,
        Kind::Set => 4,
        Kind::ZSet => 5,
        Kind::HashTable => 6,
        Kind::Stream => 7,
    }
}

fn bad(what: &str) -> CommandError {
    CommandError::err(format!("DUMP payload is not valid: {what}"))
}

/// Writes a form, refusing to grow past a limit.
pub(crate) struct Writer {
    out: Vec<u8>,
    limit: usize,
}

impl Writer {
    /// A form of a `kind` value expiring at `expire_at_ms`, at most `limit` bytes in all.
    pub(crate) fn new(kind: Kind, expire_at_ms: u64, limit: usize) -> Writer {
        let mut out = Vec::with_capacity(64);
        out.push(VERSION);
        out.push(tag(kind));
        out.extend_from_slice(&expire_at_ms.to_le_bytes());
        Writer { out, limit }
    }

    fn room(&mut self, bytes: usize) -> CommandResult {
        if self.out.len() + bytes + CRC_BYTES > self.limit {
            return Err(CommandError::err(format!(
                "the value's serialized form is larger than the limit of {} bytes",
                self.limit
            )));
        }
        Ok(())
    }

    /// Appends fixed bytes.
    pub(crate) fn raw(&mut self, bytes: &[u8]) -> CommandResult {
        self.room(bytes.len())?;
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    /// Appends a u64.
    pub(crate) fn u64(&mut self, value: u64) -> CommandResult {
        self.raw(&value.to_le_bytes())
    }

    /// Appends a blob.
    pub(crate) fn blob(&mut self, bytes: &[u8]) -> CommandResult {
        let length = u32::try_from(bytes.len())
            .map_err(|_| CommandError::err("an element longer than 4 GiB cannot be serialized"))?;
        self.room(4 + bytes.len())?;
        self.out.extend_from_slice(&length.to_le_bytes());
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    /// The finished form, with its checksum.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let crc = crc32c::crc32c(&self.out);
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.out
    }
}

/// Encodes a form (the inverse of [`decode`]; dumping a key writes the same bytes straight from
/// its records).
#[cfg(test)]
pub(crate) fn encode(form: &Form<'_>, limit: usize) -> CommandResult<Vec<u8>> {
    let kind = match &form.body {
        Body::String(_) => Kind::String,
        Body::Hash(_) => Kind::Hash,
        Body::HashTable(_) => Kind::HashTable,
        Body::List(_) => Kind::List,
        Body::Set(_) => Kind::Set,
        Body::ZSet(_) => Kind::ZSet,
        Body::Stream(_) => Kind::Stream,
    };
    let mut w = Writer::new(kind, form.expire_at_ms, limit);
    match &form.body {
        Body::String(bytes) => w.blob(bytes)?,
        Body::Hash(pairs) | Body::HashTable(pairs) => {
            w.u64(pairs.len() as u64)?;
            for (field, value) in pairs {
                w.blob(field)?;
                w.blob(value)?;
            }
        }
        Body::List(items) | Body::Set(items) => {
            w.u64(items.len() as u64)?;
            for item in items {
                w.blob(item)?;
            }
        }
        Body::ZSet(members) => {
            w.u64(members.len() as u64)?;
            for (member, score) in members {
                w.blob(member)?;
                w.raw(&score.to_le_bytes())?;
            }
        }
        Body::Stream(stream) => {
            w.raw(&stream.last_id.key())?;
            w.u64(stream.entries_added)?;
            w.raw(&stream.max_deleted.key())?;
            w.u64(stream.entries.len() as u64)?;
            for entry in &stream.entries {
                w.blob(entry)?;
            }
            w.u64(stream.groups.len() as u64)?;
            for group in &stream.groups {
                w.blob(group.name)?;
                w.raw(&group.last_id.key())?;
                w.raw(&group.entries_read.to_le_bytes())?;
                w.u64(group.pending.len() as u64)?;
                for nack in &group.pending {
                    w.blob(nack)?;
                }
                w.u64(group.consumers.len() as u64)?;
                for consumer in &group.consumers {
                    w.blob(consumer.name)?;
                    w.u64(consumer.seen_ms)?;
                    w.u64(consumer.ids.len() as u64)?;
                    for id in &consumer.ids {
                        w.raw(&id.key())?;
                    }
                }
            }
        }
    }
    Ok(w.finish())
}

/// Reads a body, every length checked against the bytes left.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> CommandResult<&'a [u8]> {
        if self.rest.len() < n {
            return Err(bad(&format!("{what} cut short")));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u64(&mut self, what: &str) -> CommandResult<u64> {
        let bytes = self.take(8, what)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    fn id(&mut self, what: &str) -> CommandResult<StreamId> {
        let bytes = self.take(ID_BYTES, what)?;
        Ok(StreamId::from_key(bytes).expect("16 bytes"))
    }

    fn blob(&mut self, what: &str) -> CommandResult<&'a [u8]> {
        let length = self.take(4, what)?;
        let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
        self.take(length, what)
    }

    /// A count of items of at least `min_bytes` each: more than the bytes left can hold is
    /// damage, so the count never sizes anything it was not checked against.
    fn count(&mut self, min_bytes: usize, what: &str) -> CommandResult<usize> {
        let count = self.u64(what)?;
        if count > (self.rest.len() / min_bytes) as u64 {
            return Err(bad(&format!("{what} count beyond the payload")));
        }
        Ok(count as usize)
    }

    fn nonempty_count(&mut self, min_bytes: usize, what: &str) -> CommandResult<usize> {
        let count = self.count(min_bytes, what)?;
        if count == 0 {
            return Err(bad(&format!("an empty {what}")));
        }
        Ok(count)
    }
}

fn unique<'a>(seen: &mut HashSet<&'a [u8]>, item: &'a [u8], what: &str) -> CommandResult {
    if !seen.insert(item) {
        return Err(bad(&format!("a repeated {what}")));
    }
    Ok(())
}

/// Decodes and checks a form (see the module docs).
pub(crate) fn decode(bytes: &[u8]) -> CommandResult<Form<'_>> {
    if bytes.len() < HEAD_BYTES + CRC_BYTES {
        return Err(bad("shorter than its header"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC_BYTES);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(bad("the checksum does not match"));
    }
    if body[0] != VERSION {
        return Err(bad(&format!(
            "format version {} (this build reads {VERSION})",
            body[0]
        )));
    }
    let expire_at_ms = u64::from_le_bytes(body[2..HEAD_BYTES].try_into().expect("8 bytes"));
    let mut r = Reader {
        rest: &body[HEAD_BYTES..],
    };
    let body = match body[1] {
        1 => Body::String(r.blob("string")?),
        2 => Body::Hash(pairs(&mut r)?),
        6 => Body::HashTable(pairs(&mut r)?),
        3 => {
            let count = r.nonempty_count(4, "list")?;
            let mut items = Vec::new();
            for _ in 0..count {
                items.push(r.blob("list element")?);
            }
            Body::List(items)
        }
        4 => {
            let count = r.nonempty_count(4, "set")?;
            let (mut items, mut seen) = (Vec::new(), HashSet::new());
            for _ in 0..count {
                let member = r.blob("set member")?;
                unique(&mut seen, member, "set member")?;
                items.push(member);
            }
            Body::Set(items)
        }
        5 => {
            let count = r.nonempty_count(12, "sorted set")?;
            let (mut members, mut seen) = (Vec::new(), HashSet::new());
            for _ in 0..count {
                let member = r.blob("sorted set member")?;
                unique(&mut seen, member, "sorted set member")?;
                let score = f64::from_le_bytes(r.take(8, "score")?.try_into().expect("8 bytes"));
                if score.is_nan() {
                    return Err(bad("a NaN score"));
                }
                members.push((member, score));
            }
            Body::ZSet(members)
        }
        7 => Body::Stream(stream(&mut r)?),
        other => return Err(bad(&format!("unknown type tag {other}"))),
    };
    if !r.rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(Form { expire_at_ms, body })
}

type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;

fn pairs<'a>(r: &mut Reader<'a>) -> CommandResult<Pairs<'a>> {
    let count = r.nonempty_count(8, "hash")?;
    let (mut pairs, mut seen) = (Vec::new(), HashSet::new());
    for _ in 0..count {
        let field = r.blob("hash field")?;
        unique(&mut seen, field, "hash field")?;
        pairs.push((field, r.blob("hash value")?));
    }
    Ok(pairs)
}

fn stream<'a>(r: &mut Reader<'a>) -> CommandResult<StreamForm<'a>> {
    let last_id = r.id("stream last id")?;
    let entries_added = r.u64("stream entries added")?;
    let max_deleted = r.id("stream max deleted id")?;
    if max_deleted > last_id {
        return Err(bad("a deleted id after the stream's last id"));
    }
    let count = r.count(4, "stream entries")?;
    let mut entries = Vec::new();
    let mut previous: Option<StreamId> = None;
    for _ in 0..count {
        let entry = r.blob("stream entry")?;
        let id = decode_entry(entry)
            .map_err(|_| bad("a damaged stream entry"))?
            .id;
        if previous.is_some_and(|p| p >= id) || id > last_id {
            return Err(bad("stream entry ids out of order"));
        }
        previous = Some(id);
        entries.push(entry);
    }
    let count = r.count(4 + ID_BYTES + 8 + 16, "consumer groups")?;
    let (mut groups, mut names) = (Vec::new(), HashSet::new());
    for _ in 0..count {
        let group = group(r)?;
        unique(&mut names, group.name, "group name")?;
        groups.push(group);
    }
    Ok(StreamForm {
        last_id,
        entries_added,
        max_deleted,
        entries,
        groups,
    })
}

fn group<'a>(r: &mut Reader<'a>) -> CommandResult<GroupForm<'a>> {
    let name = r.blob("group name")?;
    let last_id = r.id("group last id")?;
    let entries_read = r.u64("group entries read")? as i64;
    let count = r.count(4, "pending entries")?;
    let mut pending = Vec::new();
    // (id -> consumer) of every pending entry, to check the consumers' lists against.
    let mut owners: HashMap<StreamId, Vec<u8>> = HashMap::new();
    let mut previous: Option<StreamId> = None;
    for _ in 0..count {
        let bytes = r.blob("pending entry")?;
        let nack = Nack::decode(bytes).map_err(|_| bad("a damaged pending entry"))?;
        if previous.is_some_and(|p| p >= nack.id) {
            return Err(bad("pending entries out of order"));
        }
        previous = Some(nack.id);
        owners.insert(nack.id, nack.consumer);
        pending.push(bytes);
    }
    let count = r.count(4 + 16, "consumers")?;
    let (mut consumers, mut names) = (Vec::new(), HashSet::new());
    let mut owned = 0usize;
    for _ in 0..count {
        let name = r.blob("consumer name")?;
        unique(&mut names, name, "consumer name")?;
        let seen_ms = r.u64("consumer seen time")?;
        let ids_count = r.count(ID_BYTES, "consumer ids")?;
        let mut ids = Vec::new();
        for _ in 0..ids_count {
            let id = r.id("consumer id")?;
            if ids.last().is_some_and(|&p: &StreamId| p >= id) {
                return Err(bad("a consumer's ids out of order"));
            }
            if owners.get(&id).map(Vec::as_slice) != Some(name) {
                return Err(bad(
                    "a consumer owns an id its group's pending list does not give it",
                ));
            }
            ids.push(id);
        }
        owned += ids.len();
        consumers.push(ConsumerForm { name, seen_ms, ids });
    }
    if owned != pending.len() {
        return Err(bad("a pending entry names no consumer that owns it"));
    }
    Ok(GroupForm {
        name,
        last_id,
        entries_read,
        pending,
        consumers,
    })
}

#[cfg(test)]
#[path = "form_tests.rs"]
mod tests;
