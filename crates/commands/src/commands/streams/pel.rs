//! A consumer group loaded for an update: its pending-entries list and its consumers' lists
//! changed together, so they keep holding the same ids (`object` module invariants).
//!
//! [`Loaded`] keeps the consumers it touched in memory; [`Loaded::save`] writes them and the
//! group back into the stream. Commands call it also after a failed step, so the headers written
//! describe the records the successful steps wrote.

use std::collections::BTreeMap;

use prefixkv_collections::Records;

use super::ids::StreamId;
use super::object::{mark, unmark, Consumer, Group, Nack, Stream};
use crate::error::{CommandError, CommandResult};
use crate::keyspace::Keyspace;

/// Ids moved per step when a consumer's list is walked whole (DELCONSUMER): bounds memory.
const BATCH: u64 = 512;

/// A group being updated (see the module docs).
pub struct Loaded<'k> {
    /// Its name.
    pub name: Vec<u8>,
    /// Its header.
    pub group: Group,
    /// Consumers read so far (and written back by [`Loaded::save`]).
    consumers: BTreeMap<Vec<u8>, Consumer>,
    keyspace: &'k Keyspace,
    /// The command's time.
    pub now_ms: u64,
}

impl<'k> Loaded<'k> {
    /// Group `name` of `stream`, if it exists.
    pub fn load(
        stream: &Stream,
        records: &mut impl Records,
        name: &[u8],
        keyspace: &'k Keyspace,
        now_ms: u64,
    ) -> CommandResult<Option<Loaded<'k>>> {
        Ok(stream.group(records, name)?.map(|group| Loaded {
            name: name.to_vec(),
            group,
            consumers: BTreeMap::new(),
            keyspace,
            now_ms,
        }))
    }

    /// Consumer `name`, read once.
    pub fn consumer(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
    ) -> CommandResult<Option<&mut Consumer>> {
        if !self.consumers.contains_key(name) {
            match self.group.consumer(records, name)? {
                Some(consumer) => {
                    self.consumers.insert(name.to_vec(), consumer);
                }
                None => return Ok(None),
            }
        }
        Ok(self.consumers.get_mut(name))
    }

    /// Consumer `name`, created when missing; its seen time becomes now. Whether it was created.
    pub fn touch_consumer(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
    ) -> CommandResult<bool> {
        let now = self.now_ms;
        if let Some(consumer) = self.consumer(records, name)? {
            consumer.seen_ms = now;
            return Ok(false);
        }
        self.add_consumer(records, name, now)?;
        Ok(true)
    }

    /// Adds consumer `name`: its record is written at once, before the command changes anything
    /// else, so a name too large for a record fails the command with nothing changed (its
    /// pending entries would otherwise name a consumer that is not there).
    fn add_consumer(&mut self, records: &mut impl Records, name: &[u8], now: u64) -> CommandResult {
        let consumer = Consumer::new(self.keyspace.new_object_id(), now);
        self.group.save_consumer(records, name, &consumer)?;
        mark(records, consumer.pel.id)?;
        self.consumers.insert(name.to_vec(), consumer);
        crate::notify::note_stream(crate::notify::CONSUMER_CREATED);
        Ok(())
    }

    /// Creates consumer `name` if missing (XGROUP CREATECONSUMER); whether it did.
    pub fn create_consumer(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
    ) -> CommandResult<bool> {
        if self.consumer(records, name)?.is_some() {
            return Ok(false);
        }
        self.add_consumer(records, name, self.now_ms)?;
        Ok(true)
    }

    fn owned_by(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
    ) -> CommandResult<&mut Consumer> {
        self.consumer(records, name)?.ok_or_else(|| {
            CommandError::damaged("a pending entry names a consumer that does not exist")
        })
    }

    fn give(&mut self, records: &mut impl Records, name: &[u8], id: StreamId) -> CommandResult {
        let consumer = self.owned_by(records, name)?;
        consumer.pel.insert_sorted(records, &id.key())?;
        Ok(())
    }

    fn take(&mut self, records: &mut impl Records, name: &[u8], id: StreamId) -> CommandResult {
        let consumer = self.owned_by(records, name)?;
        consumer.pel.remove_sorted(records, &id.key())?;
        Ok(())
    }

    /// Delivers `id` to consumer `to` (which exists) for the first time (XREADGROUP `>`): a new
    /// pending entry, or, when it is pending already (the group was set back), that entry moved
    /// to `to` with one delivery, as Redis does.
    pub fn deliver(
        &mut self,
        records: &mut impl Records,
        id: StreamId,
        to: &[u8],
    ) -> CommandResult {
        let nack = Nack {
            id,
            delivered_ms: self.now_ms,
            deliveries: 1,
            consumer: to.to_vec(),
        };
        match self.group.nack(records, id)? {
            Some((rank, old)) => {
                if old.consumer != to {
                    self.take(records, &old.consumer, id)?;
                    self.give(records, to, id)?;
                }
                self.group.pel.replace_at(records, rank, &nack.encode())?;
            }
            None => {
                self.group.pel.insert_sorted(records, &nack.encode())?;
                self.give(records, to, id)?;
            }
        }
        Ok(())
    }

    /// Rewrites pending entry `nack` (at `rank` of the PEL) as `updated`, moving it between
    /// consumers when the owner changed (which exists).
    pub fn update(
        &mut self,
        records: &mut impl Records,
        rank: u64,
        nack: &Nack,
        updated: &Nack,
    ) -> CommandResult {
        debug_assert_eq!(nack.id, updated.id);
        if nack.consumer != updated.consumer {
            self.take(records, &nack.consumer, nack.id)?;
            self.give(records, &updated.consumer, nack.id)?;
        }
        self.group
            .pel
            .replace_at(records, rank, &updated.encode())?;
        Ok(())
    }

    /// Adds a pending entry that is in no list yet (XCLAIM FORCE), owned by `nack.consumer`.
    pub fn insert(&mut self, records: &mut impl Records, nack: &Nack) -> CommandResult {
        self.group.pel.insert_sorted(records, &nack.encode())?;
        self.give(records, &nack.consumer, nack.id)
    }

    /// Acknowledges `id`: whether it was pending.
    pub fn ack(&mut self, records: &mut impl Records, id: StreamId) -> CommandResult<bool> {
        let Some((rank, nack)) = self.group.nack(records, id)? else {
            return Ok(false);
        };
        self.group.pel.remove_at(records, rank)?;
        self.take(records, &nack.consumer, id)?;
        Ok(true)
    }

    /// Deletes consumer `name` and its pending entries; how many it had (`None`: no such
    /// consumer).
    pub fn delete_consumer(
        &mut self,
        records: &mut impl Records,
        name: &[u8],
    ) -> CommandResult<Option<u64>> {
        let Some(consumer) = self.consumer(records, name)? else {
            return Ok(None);
        };
        let mut consumer = *consumer;
        let pending = consumer.pel.len();
        let mut start = StreamId::MIN;
        loop {
            let batch = consumer.pending_from(records, start, StreamId::MAX, BATCH)?;
            for id in &batch {
                if let Some((rank, _)) = self.group.nack(records, *id)? {
                    self.group.pel.remove_at(records, rank)?;
                }
            }
            match batch.last().and_then(|last| last.next()) {
                Some(next) if batch.len() as u64 == BATCH => start = next,
                _ => break,
            }
        }
        consumer.pel.clear(records)?;
        unmark(records, consumer.pel.id)?;
        self.consumers.remove(name);
        self.group.consumers.remove(records, name)?;
        Ok(Some(pending))
    }

    /// Writes the consumers read and the group back into `stream`.
    /// Every header is attempted even after one fails (a failed step changed nothing, and the
    /// others must still describe the records written): the first error is returned.
    pub fn save(&mut self, records: &mut impl Records, stream: &mut Stream) -> CommandResult {
        let mut first_error = Ok(());
        for (name, consumer) in &self.consumers {
            let saved = self.group.save_consumer(records, name, consumer);
            if first_error.is_ok() {
                first_error = saved;
            }
        }
        let saved = stream.save_group(records, &self.name, &self.group);
        first_error.and(saved)
    }
}
