//! What a collection key's value says: the headers of lists, sets, sorted sets, large hashes
//! and streams decoded from a stored value (`list_of`, `set_of`, `zset_of`), the sorted set's
//! header type, and clearing every record of an object (`clear`, which the keyspace calls when
//! it deletes a key).
//!
//! Invariant: this module reads values and records only; it knows no keyspace transaction, so
//! `crate::keyspace` can use it and `crate::objects` (writing headers back, copying objects under
//! a transaction) builds on both. The invariants of objects and their headers are in
//! `crate::objects`.

use prefixkv_collections::hash::Hash;
use prefixkv_collections::list::List;
use prefixkv_collections::tree::Tree;
use prefixkv_collections::{score_key, score_of_key, Records};

use crate::commands::streams::object::Stream;
use crate::error::{CommandError, CommandResult};
use crate::value::{Kind, Stored};

/// A sorted set: member -> score in a hash, `[score key][member]` in a tree, one object id.
#[derive(Clone, Copy, Debug)]
pub struct ZSet {
    /// Member -> score (8 bytes, f64 little-endian).
    pub members: Hash,
    /// Entries in (score, member) order.
    pub order: Tree,
}

impl ZSet {
    /// An empty sorted set under object id `id`.
    pub fn new(id: u64) -> ZSet {
        ZSet {
            members: Hash::new(id),
            order: Tree::new(id),
        }
    }

    /// Number of members.
    pub fn len(&self) -> u64 {
        self.members.len()
    }

    /// Whether it has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The header payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.members.encode(&mut out);
        self.order.encode(&mut out);
        out
    }

    /// Reads a header written by [`ZSet::encode`].
    pub(crate) fn decode(payload: &[u8]) -> CommandResult<ZSet> {
        let mut rest = payload;
        let members = Hash::decode(&mut rest)?;
        let order = Tree::decode(&mut rest)?;
        if members.id != order.id || members.len() != order.len() || !rest.is_empty() {
            return Err(CommandError::damaged("sorted set headers disagree"));
        }
        Ok(ZSet { members, order })
    }

    /// `member`'s score.
    pub fn score(&self, records: &mut impl Records, member: &[u8]) -> CommandResult<Option<f64>> {
        let mut out = Vec::new();
        if !self.members.get(records, member, &mut out)? {
            return Ok(None);
        }
        let bytes: [u8; 8] = out
            .as_slice()
            .try_into()
            .map_err(|_| CommandError::damaged("a score is not 8 bytes"))?;
        Ok(Some(f64::from_le_bytes(bytes)))
    }

    /// Sets `member`'s score, given its current one (`old`, as [`ZSet::score`] just read it under
    /// the same lock; `None` for a new member), so the caller's read is not repeated. On an error
    /// the sorted set is as before: a step that failed changed nothing (`prefixkv-collections`),
    /// and the steps before it are undone (the undo can fail only if the store refuses every
    /// write, which it reports on its own).
    pub fn set(
        &mut self,
        records: &mut impl Records,
        member: &[u8],
        old: Option<f64>,
        score: f64,
    ) -> CommandResult {
        if old == Some(score) {
            return Ok(());
        }
        let old_entry = old.map(|old| entry(old, member));
        let new_entry = entry(score, member);
        if let Some(old_entry) = &old_entry {
            self.order.remove_sorted(records, old_entry)?;
        }
        if let Err(failure) = self.order.insert_sorted(records, &new_entry) {
            if let Some(old_entry) = &old_entry {
                let _ = self.order.insert_sorted(records, old_entry);
            }
            return Err(failure.into());
        }
        if let Err(failure) = self.members.insert(records, member, &score.to_le_bytes()) {
            let _ = self.order.remove_sorted(records, &new_entry);
            if let Some(old_entry) = &old_entry {
                let _ = self.order.insert_sorted(records, old_entry);
            }
            return Err(failure.into());
        }
        Ok(())
    }

    /// Removes `member`; its score, if it was there. On an error the sorted set is as before
    /// (see [`ZSet::insert`]).
    pub fn remove(
        &mut self,
        records: &mut impl Records,
        member: &[u8],
    ) -> CommandResult<Option<f64>> {
        let Some(score) = self.score(records, member)? else {
            return Ok(None);
        };
        let old_entry = entry(score, member);
        self.order.remove_sorted(records, &old_entry)?;
        if let Err(failure) = self.members.remove(records, member) {
            let _ = self.order.insert_sorted(records, &old_entry);
            return Err(failure.into());
        }
        Ok(Some(score))
    }

    /// `member`'s rank (0 = lowest score), if it is a member.
    pub fn rank(&self, records: &mut impl Records, member: &[u8]) -> CommandResult<Option<u64>> {
        let Some(score) = self.score(records, member)? else {
            return Ok(None);
        };
        let rank = self.order.lower_bound(records, &entry(score, member))?;
        Ok(Some(rank))
    }

    /// Deletes every record.
    pub fn clear(&mut self, records: &mut impl Records) -> CommandResult {
        self.members.clear(records)?;
        self.order.clear(records).map_err(CommandError::from)
    }
}

/// The tree entry of (score, member).
pub fn entry(score: f64, member: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + member.len());
    out.extend_from_slice(&score_key(score));
    out.extend_from_slice(member);
    out
}

/// Splits a tree entry into (score, member).
pub fn split_entry(entry: &[u8]) -> CommandResult<(f64, &[u8])> {
    let (score, member) = entry
        .split_first_chunk::<8>()
        .ok_or_else(|| CommandError::damaged("a sorted-set entry is too short"))?;
    Ok((score_of_key(*score), member))
}

/// The list in a key's value: `None` when the key does not exist, WRONGTYPE for another type.
pub fn list_of(stored: Option<Stored>) -> CommandResult<Option<(List, u64)>> {
    match stored {
        None => Ok(None),
        Some(s) if s.kind == Kind::List => {
            let mut rest = &s.payload[..];
            let list = List::decode(&mut rest)?;
            Ok(Some((list, s.expire_at_ms)))
        }
        Some(_) => Err(CommandError::WrongType),
    }
}

/// The set in a key's value (see [`list_of`]).
pub fn set_of(stored: Option<Stored>) -> CommandResult<Option<(Hash, u64)>> {
    match stored {
        None => Ok(None),
        Some(s) if s.kind == Kind::Set => {
            let mut rest = &s.payload[..];
            let hash = Hash::decode(&mut rest)?;
            Ok(Some((hash, s.expire_at_ms)))
        }
        Some(_) => Err(CommandError::WrongType),
    }
}

/// The sorted set in a key's value (see [`list_of`]).
pub fn zset_of(stored: Option<Stored>) -> CommandResult<Option<(ZSet, u64)>> {
    match stored {
        None => Ok(None),
        Some(s) if s.kind == Kind::ZSet => Ok(Some((ZSet::decode(&s.payload)?, s.expire_at_ms))),
        Some(_) => Err(CommandError::WrongType),
    }
}

/// Deletes every record of the object a `kind` value with `payload` describes.
pub fn clear(records: &mut impl Records, kind: Kind, payload: &[u8]) -> CommandResult {
    let mut rest = payload;
    match kind {
        Kind::List => List::decode(&mut rest)
            .and_then(|mut l| l.clear(records))
            .map_err(CommandError::from),
        Kind::Set | Kind::HashTable => Hash::decode(&mut rest)
            .and_then(|mut h| h.clear(records))
            .map_err(CommandError::from),
        Kind::ZSet => ZSet::decode(payload)?.clear(records),
        Kind::Stream => Stream::decode(payload)?.clear(records),
        Kind::String | Kind::Hash => Ok(()),
    }
}
