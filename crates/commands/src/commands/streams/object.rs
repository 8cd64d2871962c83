//! A stream stored as records: its header in the key's value, its entries in a counted B+tree,
//! its consumer groups in a hash, each group's pending entries and consumers in structures of
//! their own.
//!
//! Layout (every structure is a `prefixkv-collections` one, all records owned by the stream's
//! key):
//! - Key value payload ([`Stream`]): `[entries Tree header][groups Hash header][last id 16]
//!   [entries added u64 LE][max deleted id 16]`. The entries tree and the groups hash share the
//!   stream's object id (different record parts), so `value::object_id` names the stream.
//! - Entry (a tree entry): `[id 16 BE][field count u32 LE]([len u32 LE][bytes])*`, field and
//!   value alternating. Ids are unique and every entry starts with its id, so byte order is id
//!   order and a bound is found by the id's 16 bytes alone (O(log n) records).
//! - Group ([`Group`], the groups hash's value under the group's name): `[last delivered id 16]
//!   [entries read i64 LE, -1 unknown][PEL Tree header][consumers Hash header]`, both under a
//!   fresh object id of the group.
//! - Pending entry ([`Nack`], an entry of the group's PEL tree): `[id 16][delivery time ms u64
//!   BE][delivery count u64 BE][consumer name]`, in id order.
//! - Consumer ([`Consumer`], the consumers hash's value under its name): `[seen time ms u64
//!   LE][PEL Tree header]`, its tree (a fresh object id) holding the 16-byte ids it owns.
//!
//! Object ids: the stream, each group and each consumer has its own id, and a structure
//! without entries has no records, yet its id is in a header. Recovery learns which ids are
//! taken from the record keys it meets (`keyspace::KeyCounts`), so every such id also has a
//! *marker* record ([`mark`]: node 0 of its tree, a node id trees never use), written with the
//! header that first names the id and deleted with the structure. Without it a restarted
//! server could give a new object the id of an empty consumer's list, and both would write the
//! same records.
//!
//! Invariants (after every command):
//! - `entries` holds ids strictly ascending, all at most `last_id`; `max_deleted` is the
//!   largest id XDEL removed (0-0 if none), at most `last_id`.
//! - A group's PEL and its consumers' PELs hold the same ids: every [`Nack`] names a consumer
//!   whose PEL holds its id, and every id of a consumer's PEL has a [`Nack`] naming it.
//! - Every structure's header is written back in the same keyspace transaction as the records
//!   it describes (consumers into their group, groups into the stream, the stream into the key),
//!   also after a failed step ([`crate::objects`] invariants), so a recovered PEL never holds an
//!   entry of a stream state the log did not keep.

use std::ops::ControlFlow;

use bytes::Bytes;
use prefixkv_collections::hash::Hash;
use prefixkv_collections::tree::Tree;
use prefixkv_collections::Records;

use super::ids::{StreamId, ID_BYTES};
use crate::error::{CommandError, CommandResult};

pub use super::pending::{Consumer, Group, Nack};

/// The unknown `entries-read` of a group (Redis's `SCG_INVALID_ENTRIES_READ`).
pub const UNKNOWN_READ: i64 = -1;

/// A stream's header (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    /// The entries, in id order.
    pub entries: Tree,
    /// Group name -> [`Group`].
    pub groups: Hash,
    /// The last id ever added (or set by XSETID).
    pub last_id: StreamId,
    /// Entries ever added (or set by XSETID).
    pub entries_added: u64,
    /// The largest id XDEL removed.
    pub max_deleted: StreamId,
}

/// A decoded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its id.
    pub id: StreamId,
    /// Field, value, field, value, ...
    pub fields: Vec<Vec<u8>>,
}

/// How to trim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Remove entries with ids below this one.
    MinId(StreamId),
}

/// The marker record of object `id` (see the module docs).
fn marker(id: u64) -> [u8; prefixkv_collections::RECORD_KEY_BYTES] {
    prefixkv_collections::record_key(id, prefixkv_collections::Part::TreeNode, 0)
}

/// Writes the marker of object `id`, so recovery knows the id is taken.
pub fn mark(records: &mut impl Records, id: u64) -> CommandResult {
    records.put(&marker(id), b"")?;
    Ok(())
}

/// Deletes the marker of object `id` (its structure is gone).
pub fn unmark(records: &mut impl Records, id: u64) -> CommandResult {
    records.delete(&marker(id))?;
    Ok(())
}

pub(super) fn damaged(what: &str) -> CommandError {
    CommandError::damaged(format!("stream {what}"))
}

pub(super) fn take_id(rest: &mut &[u8], what: &str) -> CommandResult<StreamId> {
    let id = StreamId::from_key(rest).ok_or_else(|| damaged(what))?;
    *rest = &rest[ID_BYTES..];
    Ok(id)
}

pub(super) fn take_u64_le(rest: &mut &[u8], what: &str) -> CommandResult<u64> {
    let (head, tail) = rest.split_first_chunk::<8>().ok_or_else(|| damaged(what))?;
    *rest = tail;
    Ok(u64::from_le_bytes(*head))
}

/// Encodes an entry (fields and values alternating).
pub fn encode_entry(id: StreamId, fields: &[Bytes]) -> Vec<u8> {
    let total: usize = fields.iter().map(|f| 4 + f.len()).sum();
    let mut out = Vec::with_capacity(ID_BYTES + 4 + total);
    out.extend_from_slice(&id.key());
    out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for field in fields {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field);
    }
    out
}

/// Decodes an entry, checking every length against the bytes present.
pub fn decode_entry(bytes: &[u8]) -> CommandResult<Entry> {
    let mut rest = bytes;
    let id = take_id(&mut rest, "entry id cut short")?;
    let (count, tail) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| damaged("entry field count cut short"))?;
    rest = tail;
    let count = u32::from_le_bytes(*count) as usize;
    // Each field takes at least 4 bytes: a count beyond that is damage, not an allocation.
    if count > rest.len() / 4 {
        return Err(damaged("entry field count beyond its bytes"));
    }
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let (length, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| damaged("entry field cut short"))?;
        let length = u32::from_le_bytes(*length) as usize;
        if tail.len() < length {
            return Err(damaged("entry field longer than the entry"));
        }
        fields.push(tail[..length].to_vec());
        rest = &tail[length..];
    }
    if !rest.is_empty() {
        return Err(damaged("entry has trailing bytes"));
    }
    Ok(Entry { id, fields })
}

impl Stream {
    /// An empty stream under object id `id`.
    pub fn new(id: u64) -> Stream {
        Stream {
            entries: Tree::new(id),
            groups: Hash::new(id),
            last_id: StreamId::MIN,
            entries_added: 0,
            max_deleted: StreamId::MIN,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.entries.len()
    }

    /// The header payload.
    pub fn encode(&self) -> Vec<u8> {
        // Sized once: the header is encoded twice per XADD (to tell whether it changed).
        let mut out = Vec::with_capacity(
            prefixkv_collections::tree::HEADER_BYTES
                + prefixkv_collections::hash::HEADER_BYTES
                + 2 * ID_BYTES
                + 8,
        );
        self.entries.encode(&mut out);
        self.groups.encode(&mut out);
        out.extend_from_slice(&self.last_id.key());
        out.extend_from_slice(&self.entries_added.to_le_bytes());
        out.extend_from_slice(&self.max_deleted.key());
        out
    }

    /// Decodes a header payload.
    pub fn decode(payload: &[u8]) -> CommandResult<Stream> {
        let mut rest = payload;
        let entries = Tree::decode(&mut rest)?;
        let groups = Hash::decode(&mut rest)?;
        let last_id = take_id(&mut rest, "header cut short")?;
        let entries_added = take_u64_le(&mut rest, "header cut short")?;
        let max_deleted = take_id(&mut rest, "header cut short")?;
        if entries.id != groups.id || !rest.is_empty() {
            return Err(damaged("headers disagree"));
        }
        Ok(Stream {
            entries,
            groups,
            last_id,
            entries_added,
            max_deleted,
        })
    }

    /// The entry at `rank`.
    fn entry_at(&self, records: &mut impl Records, rank: u64) -> CommandResult<Option<Entry>> {
        let mut out = Vec::new();
        if !self.entries.get(records, rank, &mut out)? {
            return Ok(None);
        }
        decode_entry(&out).map(Some)
    }

    /// The id of the entry at `rank`.
    fn id_at(&self, records: &mut impl Records, rank: u64) -> CommandResult<Option<StreamId>> {
        let mut out = Vec::new();
        if !self.entries.get(records, rank, &mut out)? {
            return Ok(None);
        }
        StreamId::from_key(&out)
            .map(Some)
            .ok_or_else(|| damaged("entry id cut short"))
    }

    /// The first entry's id, 0-0 when empty (Redis's `first_id`).
    pub fn first_id(&self, records: &mut impl Records) -> CommandResult<StreamId> {
        Ok(self.id_at(records, 0)?.unwrap_or(StreamId::MIN))
    }

    /// The last entry's id, `None` when empty.
    pub fn last_entry_id(&self, records: &mut impl Records) -> CommandResult<Option<StreamId>> {
        match self.len() {
            0 => Ok(None),
            len => self.id_at(records, len - 1),
        }
    }

    /// The first and last entries.
    pub fn edges(
        &self,
        records: &mut impl Records,
    ) -> CommandResult<(Option<Entry>, Option<Entry>)> {
        match self.len() {
            0 => Ok((None, None)),
            len => Ok((self.entry_at(records, 0)?, self.entry_at(records, len - 1)?)),
        }
    }

    /// The rank of the entry with `id`, if present.
    fn rank_of(&self, records: &mut impl Records, id: StreamId) -> CommandResult<Option<u64>> {
        let rank = self.entries.lower_bound(records, &id.key())?;
        Ok((self.id_at(records, rank)? == Some(id)).then_some(rank))
    }

    /// Whether an entry with `id` exists.
    pub fn contains(&self, records: &mut impl Records, id: StreamId) -> CommandResult<bool> {
        Ok(self.rank_of(records, id)?.is_some())
    }

    /// The entry with `id`, if present.
    pub fn get(&self, records: &mut impl Records, id: StreamId) -> CommandResult<Option<Entry>> {
        match self.rank_of(records, id)? {
            Some(rank) => self.entry_at(records, rank),
            None => Ok(None),
        }
    }

    /// Appends an entry with `id` (above `last_id`: the caller resolved it so).
    pub fn append(
        &mut self,
        records: &mut impl Records,
        id: StreamId,
        fields: &[Bytes],
    ) -> CommandResult {
        debug_assert!(id > self.last_id || (self.entries_added == 0 && id > StreamId::MIN));
        let entry = encode_entry(id, fields);
        self.entries.insert_at(records, self.len(), &entry)?;
        self.last_id = id;
        self.entries_added += 1;
        Ok(())
    }

    /// XDEL of one id: whether it was there. Keeps `max_deleted`.
    pub fn delete(&mut self, records: &mut impl Records, id: StreamId) -> CommandResult<bool> {
        let Some(rank) = self.rank_of(records, id)? else {
            return Ok(false);
        };
        self.entries.remove_at(records, rank)?;
        if id > self.max_deleted {
            self.max_deleted = id;
        }
        Ok(true)
    }

    /// Removes entries from the front as `trim` asks, at most `limit` of them (0 = no limit);
    /// how many it removed. Exactly, or with `approx` (`~`) in whole leaves of the entries tree,
    /// as Redis trims whole nodes: a leaf goes only when all of it is to be trimmed and it fits
    /// within `limit`, so a capped stream trims once per leaf, not once per XADD.
    pub fn trim(
        &mut self,
        records: &mut impl Records,
        trim: Trim,
        limit: u64,
        approx: bool,
    ) -> CommandResult<u64> {
        if approx {
            return self.trim_leaves(records, trim, limit);
        }
        let mut removed = 0;
        while limit == 0 || removed < limit {
            let more = match trim {
                Trim::MaxLen(max) => self.len() > max,
                Trim::MinId(min) => self.id_at(records, 0)?.is_some_and(|first| first < min),
            };
            if !more {
                break;
            }
            self.entries.remove_at(records, 0)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// [`Stream::trim`] with `~`: whole first leaves while each is entirely to be trimmed.
    fn trim_leaves(
        &mut self,
        records: &mut impl Records,
        trim: Trim,
        limit: u64,
    ) -> CommandResult<u64> {
        let mut removed = 0;
        let mut last = Vec::new();
        loop {
            if let Trim::MaxLen(max) = trim {
                // Nothing to trim: decided without reading a record (the usual XADD).
                if self.len() <= max {
                    break;
                }
            }
            // MAXLEN needs only the leaf's count (its parent holds it); MINID its last id.
            let first = match trim {
                Trim::MaxLen(_) => self.entries.first_leaf_len(records)?,
                Trim::MinId(_) => self.entries.first_leaf(records, &mut last)?,
            };
            let Some(count) = first else {
                break;
            };
            let whole = match trim {
                Trim::MaxLen(max) => self.len() - count >= max,
                Trim::MinId(min) => take_id(&mut last.as_slice(), "entry")? < min,
            };
            if !whole || (limit != 0 && removed + count > limit) {
                break;
            }
            self.entries.remove_first_leaf(records)?;
            removed += count;
        }
        Ok(removed)
    }

    /// Entries with ids in `start..=end`, ascending (or descending with `rev`), at most `count`
    /// of them (0 = all).
    pub fn range(
        &self,
        records: &mut impl Records,
        start: StreamId,
        end: StreamId,
        count: u64,
        rev: bool,
    ) -> CommandResult<Vec<Entry>> {
        let mut out = Vec::new();
        if start > end || self.len() == 0 {
            return Ok(out);
        }
        let mut failure = None;
        let mut visit = |_: u64, bytes: &[u8]| match decode_entry(bytes) {
            Ok(entry) => {
                let inside = if rev {
                    entry.id >= start
                } else {
                    entry.id <= end
                };
                if !inside {
                    return ControlFlow::Break(());
                }
                out.push(entry);
                if count != 0 && out.len() as u64 >= count {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
            Err(error) => {
                failure = Some(error);
                ControlFlow::Break(())
            }
        };
        if rev {
            let after = match end.next() {
                Some(next) => self.entries.lower_bound(records, &next.key())?,
                None => self.len(),
            };
            if after > 0 {
                self.entries.range_rev(records, after - 1, &mut visit)?;
            }
        } else {
            let from = self.entries.lower_bound(records, &start.key())?;
            self.entries.range(records, from, &mut visit)?;
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(out),
        }
    }

    /// Group `name`.
    pub fn group(&self, records: &mut impl Records, name: &[u8]) -> CommandResult<Option<Group>> {
        let mut out = Vec::new();
        if !self.groups.get(records, name, &mut out)? {
            return Ok(None);
        }
        Group::decode(&out).map(Some)
    }

    /// Writes group `name` back (or adds it).
    pub fn save_group(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
        group: &Group,
    ) -> CommandResult {
        self.groups.insert(records, name, &group.encode())?;
        Ok(())
    }

    /// Every group, by name (Redis lists them in name order).
    pub fn all_groups(&self, records: &mut impl Records) -> CommandResult<Vec<(Vec<u8>, Group)>> {
        let mut raw = Vec::new();
        self.groups.for_each(records, |name, value| {
            raw.push((name.to_vec(), value.to_vec()))
        })?;
        let mut groups = raw
            .into_iter()
            .map(|(name, value)| Group::decode(&value).map(|group| (name, group)))
            .collect::<CommandResult<Vec<_>>>()?;
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(groups)
    }

    /// Deletes every record of the stream (entries, groups, their PELs and consumers).
    pub fn clear(&mut self, records: &mut impl Records) -> CommandResult {
        for (_, mut group) in self.all_groups(records)? {
            group.clear(records)?;
        }
        self.groups.clear(records)?;
        self.entries.clear(records)?;
        unmark(records, self.entries.id)
    }

    /// Whether an XDEL tombstone may lie in `start..=MAX` (Redis's `streamRangeHasTombstones`
    /// with no end).
    pub fn has_tombstones_from(&self, first: StreamId, start: StreamId) -> bool {
        if self.len() == 0 || self.max_deleted.is_zero() || first > self.max_deleted {
            return false;
        }
        start <= self.max_deleted
    }

    /// The logical position (`entries-read`) of `id`, when it can be known (Redis's
    /// `streamEstimateDistanceFromFirstEverEntry`); `first` is [`Stream::first_id`].
    pub fn estimate_read(&self, first: StreamId, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.len() == 0 && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        if self.max_deleted.is_zero() || self.max_deleted < first {
            if id < first {
                return Some(self.entries_added - self.len());
            }
            if id == first {
                return Some(self.entries_added - self.len() + 1);
            }
        }
        None
    }

    /// A group's lag as XINFO reports it (`None`: unknown, a null). Negative when ENTRIESREAD
    /// claimed more reads than entries were added, as Redis reports it.
    pub fn lag(&self, first: StreamId, group: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if group.entries_read != UNKNOWN_READ && !self.has_tombstones_from(first, group.last_id) {
            return Some((self.entries_added as i64).wrapping_sub(group.entries_read));
        }
        self.estimate_read(first, group.last_id)
            .map(|read| (self.entries_added as i64).wrapping_sub(read as i64))
    }

    /// Moves `group`'s last-delivered id to `id` (delivered by XREADGROUP `>`), keeping its
    /// `entries-read` as Redis does.
    pub fn advance_group(&self, first: StreamId, group: &mut Group, id: StreamId) {
        if id <= group.last_id {
            return;
        }
        if group.entries_read != UNKNOWN_READ && !self.has_tombstones_from(first, id) {
            group.entries_read += 1;
        } else if self.entries_added != 0 {
            group.entries_read = self
                .estimate_read(first, id)
                .map_or(UNKNOWN_READ, |read| read as i64);
        }
        group.last_id = id;
    }
}

#[cfg(test)]
mod tests {
    use prefixkv_collections::MemRecords;

    use super::*;

    fn fields(items: &[&str]) -> Vec<Bytes> {
        items.iter().map(|s| Bytes::from(s.to_string())).collect()
    }

    #[test]
    fn entries_round_trip_and_ranges_follow_ids() {
        let mut records = MemRecords::default();
        let mut stream = Stream::new(1);
        mark(&mut records, 1).unwrap();
        for ms in 1..=300u64 {
            stream
                .append(&mut records, StreamId::new(ms, 0), &fields(&["f", "v"]))
                .unwrap();
        }
        let decoded = Stream::decode(&stream.encode()).unwrap();
        assert_eq!(decoded.len(), 300);
        assert_eq!(decoded.last_id, StreamId::new(300, 0));
        let got = stream
            .range(
                &mut records,
                StreamId::new(10, 1),
                StreamId::new(20, 0),
                0,
                false,
            )
            .unwrap();
        assert_eq!(got.len(), 10);
        assert_eq!(got[0].id, StreamId::new(11, 0));
        let got = stream
            .range(&mut records, StreamId::MIN, StreamId::new(20, 0), 3, true)
            .unwrap();
        let ids: Vec<u64> = got.iter().map(|e| e.id.ms).collect();
        assert_eq!(ids, [20, 19, 18]);
        assert!(stream.delete(&mut records, StreamId::new(5, 0)).unwrap());
        assert!(!stream.delete(&mut records, StreamId::new(5, 0)).unwrap());
        assert_eq!(stream.max_deleted, StreamId::new(5, 0));
        assert_eq!(
            stream
                .trim(&mut records, Trim::MinId(StreamId::new(8, 0)), 0, false)
                .unwrap(),
            6
        );
        assert_eq!(stream.first_id(&mut records).unwrap(), StreamId::new(8, 0));
        assert_eq!(
            stream
                .trim(&mut records, Trim::MaxLen(10), 5, false)
                .unwrap(),
            5
        );
        let before = stream.len();
        assert_eq!(
            stream
                .trim(&mut records, Trim::MaxLen(10), 0, false)
                .unwrap(),
            before - 10
        );
        assert_eq!(stream.len(), 10);
        stream.clear(&mut records).unwrap();
        assert!(records.map.is_empty());
        assert!(decode_entry(&[0; 20]).is_ok());
        assert!(decode_entry(&[0; 19]).is_err());
        let mut huge_count = vec![0; 16];
        huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_entry(&huge_count).is_err());
    }

    /// `~` trims whole leaves: never below the threshold, never a partial leaf, within LIMIT,
    /// and a capped stream fed one entry at a time stays within one leaf of its cap.
    #[test]
    fn approximate_trims_take_whole_leaves() {
        let mut records = MemRecords::default();
        let mut stream = Stream::new(1);
        mark(&mut records, 1).unwrap();
        let (cap, mut trimmed) = (1000, 0);
        for ms in 1..=5000u64 {
            let id = StreamId::new(ms, 0);
            stream
                .append(&mut records, id, &fields(&["f", "v"]))
                .unwrap();
            let removed = stream
                .trim(&mut records, Trim::MaxLen(cap), 0, true)
                .unwrap();
            trimmed += removed;
            assert!(stream.len() >= cap.min(ms), "never below the threshold");
            // Above the cap by less than the first leaf (at most 64 entries).
            assert!(stream.len() < cap + 64, "{} entries", stream.len());
            assert_eq!(stream.len() + trimmed, ms);
            assert_eq!(stream.first_id(&mut records).unwrap().ms, trimmed + 1);
        }
        // Trims happen per leaf, not per entry.
        let before = stream.len();
        assert_eq!(
            stream
                .trim(&mut records, Trim::MaxLen(cap), 0, true)
                .unwrap(),
            0
        );
        // A LIMIT smaller than a leaf trims nothing; MINID takes leaves wholly below it.
        assert_eq!(
            stream.trim(&mut records, Trim::MaxLen(0), 1, true).unwrap(),
            0
        );
        let first = stream.first_id(&mut records).unwrap().ms;
        let min = StreamId::new(first + 200, 0);
        let removed = stream
            .trim(&mut records, Trim::MinId(min), 0, true)
            .unwrap();
        assert!(removed > 0 && removed <= 200, "{removed}");
        let now_first = stream.first_id(&mut records).unwrap();
        assert_eq!(now_first.ms, first + removed);
        assert!(now_first <= min);
        assert_eq!(stream.len(), before - removed);
    }

    #[test]
    fn groups_and_consumers_round_trip() {
        let mut records = MemRecords::default();
        let mut stream = Stream::new(1);
        let mut group = Group::new(2, StreamId::new(3, 4), UNKNOWN_READ);
        let mut consumer = Consumer::new(3, 99);
        for id in 1..=3 {
            mark(&mut records, id).unwrap();
        }
        consumer
            .pel
            .insert_sorted(&mut records, &StreamId::new(1, 0).key())
            .unwrap();
        group
            .save_consumer(&mut records, b"alice", &consumer)
            .unwrap();
        let nack = Nack {
            id: StreamId::new(1, 0),
            delivered_ms: 7,
            deliveries: 2,
            consumer: b"alice".to_vec(),
        };
        group
            .pel
            .insert_sorted(&mut records, &nack.encode())
            .unwrap();
        stream.save_group(&mut records, b"g", &group).unwrap();
        let loaded = stream.group(&mut records, b"g").unwrap().unwrap();
        assert_eq!(loaded.last_id, StreamId::new(3, 4));
        assert_eq!(
            loaded.nack(&mut records, StreamId::new(1, 0)).unwrap(),
            Some((0, nack))
        );
        assert_eq!(
            loaded.nack(&mut records, StreamId::new(1, 1)).unwrap(),
            None
        );
        let consumers = loaded.all_consumers(&mut records).unwrap();
        assert_eq!(consumers.len(), 1);
        assert_eq!(consumers[0].1.seen_ms, 99);
        stream.clear(&mut records).unwrap();
        assert!(records.map.is_empty(), "{:?}", records.map.keys());
    }
}
