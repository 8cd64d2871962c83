//! A consumer group's records: its header ([`Group`], a value of the stream's groups hash), its
//! pending entries ([`Nack`], entries of its PEL tree) and its consumers ([`Consumer`], values of
//! its consumers hash, each with a tree of the ids it owns). Layouts and invariants are in the
//! `object` module docs.

use std::ops::ControlFlow;

use prefixkv_collections::hash::Hash;
use prefixkv_collections::tree::Tree;
use prefixkv_collections::Records;

use super::ids::{StreamId, ID_BYTES};
use super::object::{damaged, take_id, take_u64_le, unmark};
use crate::error::CommandResult;

/// A consumer group's header.
#[derive(Clone, Copy, Debug)]
pub struct Group {
    /// The last id delivered by `>`.
    pub last_id: StreamId,
    /// Entries read, [`UNKNOWN_READ`] when unknown.
    pub entries_read: i64,
    /// The pending entries ([`Nack`]s), in id order.
    pub pel: Tree,
    /// Consumer name -> [`Consumer`].
    pub consumers: Hash,
}

/// Bytes of an encoded [`Group`].
const GROUP_BYTES: usize = ID_BYTES
    + 8
    + prefixkv_collections::tree::HEADER_BYTES
    + prefixkv_collections::hash::HEADER_BYTES;

/// A pending entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// The entry's id.
    pub id: StreamId,
    /// Last delivery, Unix ms.
    pub delivered_ms: u64,
    /// Deliveries so far.
    pub deliveries: u64,
    /// The consumer that owns it.
    pub consumer: Vec<u8>,
}

impl Nack {
    /// Its PEL tree entry.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ID_BYTES + 16 + self.consumer.len());
        out.extend_from_slice(&self.id.key());
        out.extend_from_slice(&self.delivered_ms.to_be_bytes());
        out.extend_from_slice(&self.deliveries.to_be_bytes());
        out.extend_from_slice(&self.consumer);
        out
    }

    /// Decodes a PEL tree entry.
    pub fn decode(bytes: &[u8]) -> CommandResult<Nack> {
        let mut rest = bytes;
        let id = take_id(&mut rest, "pending entry cut short")?;
        let (time, tail) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| damaged("pending entry cut short"))?;
        let (count, name) = tail
            .split_first_chunk::<8>()
            .ok_or_else(|| damaged("pending entry cut short"))?;
        Ok(Nack {
            id,
            delivered_ms: u64::from_be_bytes(*time),
            deliveries: u64::from_be_bytes(*count),
            consumer: name.to_vec(),
        })
    }
}

/// A consumer's header.
#[derive(Clone, Copy, Debug)]
pub struct Consumer {
    /// Last interaction, Unix ms.
    pub seen_ms: u64,
    /// The ids it owns (16 bytes each), in order.
    pub pel: Tree,
}

impl Consumer {
    /// A consumer without pending entries, its PEL under object id `id`.
    pub fn new(id: u64, now_ms: u64) -> Consumer {
        Consumer {
            seen_ms: now_ms,
            pel: Tree::new(id),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + prefixkv_collections::tree::HEADER_BYTES);
        out.extend_from_slice(&self.seen_ms.to_le_bytes());
        self.pel.encode(&mut out);
        out
    }

    fn decode(bytes: &[u8]) -> CommandResult<Consumer> {
        let mut rest = bytes;
        let seen_ms = take_u64_le(&mut rest, "consumer cut short")?;
        let pel = Tree::decode(&mut rest)?;
        if !rest.is_empty() {
            return Err(damaged("consumer has trailing bytes"));
        }
        Ok(Consumer { seen_ms, pel })
    }

    /// Ids it owns from `start` on (at most `count`, 0 = all).
    pub fn pending_from(
        &self,
        records: &mut impl Records,
        start: StreamId,
        end: StreamId,
        count: u64,
    ) -> CommandResult<Vec<StreamId>> {
        let mut out = Vec::new();
        if start > end {
            return Ok(out);
        }
        let from = self.pel.lower_bound(records, &start.key())?;
        self.pel.range(records, from, |_, bytes| {
            match StreamId::from_key(bytes) {
                Some(id) if id <= end => out.push(id),
                _ => return ControlFlow::Break(()),
            }
            if count != 0 && out.len() as u64 >= count {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(out)
    }
}

impl Group {
    /// A group with no pending entries and no consumers, under object id `id`.
    pub fn new(id: u64, last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pel: Tree::new(id),
            consumers: Hash::new(id),
        }
    }

    /// Its value in the groups hash.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(GROUP_BYTES);
        out.extend_from_slice(&self.last_id.key());
        out.extend_from_slice(&self.entries_read.to_le_bytes());
        self.pel.encode(&mut out);
        self.consumers.encode(&mut out);
        out
    }

    /// Decodes its value.
    pub fn decode(bytes: &[u8]) -> CommandResult<Group> {
        let mut rest = bytes;
        let last_id = take_id(&mut rest, "group cut short")?;
        let entries_read = take_u64_le(&mut rest, "group cut short")? as i64;
        let pel = Tree::decode(&mut rest)?;
        let consumers = Hash::decode(&mut rest)?;
        if pel.id != consumers.id || !rest.is_empty() {
            return Err(damaged("group headers disagree"));
        }
        Ok(Group {
            last_id,
            entries_read,
            pel,
            consumers,
        })
    }

    /// The pending entry of `id` and its rank in the PEL.
    pub fn nack(
        &self,
        records: &mut impl Records,
        id: StreamId,
    ) -> CommandResult<Option<(u64, Nack)>> {
        let rank = self.pel.lower_bound(records, &id.key())?;
        let mut out = Vec::new();
        if !self.pel.get(records, rank, &mut out)? || StreamId::from_key(&out) != Some(id) {
            return Ok(None);
        }
        Ok(Some((rank, Nack::decode(&out)?)))
    }

    /// Pending entries with ids in `start..=end`, from the first on, while `keep` says so
    /// (it sees each in turn and breaks the walk).
    pub fn walk_pel(
        &self,
        records: &mut impl Records,
        start: StreamId,
        mut keep: impl FnMut(Nack) -> ControlFlow<()>,
    ) -> CommandResult {
        let from = self.pel.lower_bound(records, &start.key())?;
        let mut failure = None;
        self.pel
            .range(records, from, |_, bytes| match Nack::decode(bytes) {
                Ok(nack) => keep(nack),
                Err(error) => {
                    failure = Some(error);
                    ControlFlow::Break(())
                }
            })?;
        failure.map_or(Ok(()), Err)
    }

    /// The first and last pending ids.
    pub fn pel_edges(
        &self,
        records: &mut impl Records,
    ) -> CommandResult<Option<(StreamId, StreamId)>> {
        let len = self.pel.len();
        if len == 0 {
            return Ok(None);
        }
        let mut out = Vec::new();
        let mut id_at = |rank| -> CommandResult<StreamId> {
            self.pel.get(records, rank, &mut out)?;
            StreamId::from_key(&out).ok_or_else(|| damaged("pending entry cut short"))
        };
        Ok(Some((id_at(0)?, id_at(len - 1)?)))
    }

    /// Consumer `name`.
    pub fn consumer(
        &self,
        records: &mut impl Records,
        name: &[u8],
    ) -> CommandResult<Option<Consumer>> {
        let mut out = Vec::new();
        if !self.consumers.get(records, name, &mut out)? {
            return Ok(None);
        }
        Consumer::decode(&out).map(Some)
    }

    /// Writes consumer `name` back (or adds it).
    pub fn save_consumer(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
        consumer: &Consumer,
    ) -> CommandResult {
        self.consumers.insert(records, name, &consumer.encode())?;
        Ok(())
    }

    /// Every consumer, by name.
    pub fn all_consumers(
        &self,
        records: &mut impl Records,
    ) -> CommandResult<Vec<(Vec<u8>, Consumer)>> {
        let mut raw = Vec::new();
        self.consumers.for_each(records, |name, value| {
            raw.push((name.to_vec(), value.to_vec()))
        })?;
        let mut consumers = raw
            .into_iter()
            .map(|(name, value)| Consumer::decode(&value).map(|c| (name, c)))
            .collect::<CommandResult<Vec<_>>>()?;
        consumers.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(consumers)
    }

    /// Deletes every record of the group (its PEL, its consumers and theirs).
    pub fn clear(&mut self, records: &mut impl Records) -> CommandResult {
        for (_, mut consumer) in self.all_consumers(records)? {
            consumer.pel.clear(records)?;
            unmark(records, consumer.pel.id)?;
        }
        self.consumers.clear(records)?;
        self.pel.clear(records)?;
        unmark(records, self.pel.id)
    }
}
