//! How a session picks the shard of a key.
//!
//! If the cluster publishes hash slot ownership (libDPR's `dpr_ownership` table; a prefixkv
//! cluster's launcher does, D-Redis does not), a key goes to the worker that owns its Redis
//! Cluster hash slot ([`crate::slots::key_slot`]); else to `CRC32C(key) % shards`
//! ([`super::shard_for_key`], D-Redis's routing). The table is read when the client starts and
//! again whenever a reply is a `-MOVED` redirection (the caller gets that reply and may resend).
//!
//! Invariants: shard `i` is DPR worker `i`, so every worker the table names must be below the
//! number of shard addresses the client was given (checked when the table is read); a slot the
//! table leaves unowned is an error for the keys that hash to it, never a guess.

use std::sync::Arc;

use parking_lot::RwLock;
use prefixkv_dpr::metadata::{MetadataStore, PartitionRange};

use super::{shard_for_key, ClientError};
use crate::slots::{key_slot, SLOT_COUNT};

/// Marks a slot no worker owns.
const UNOWNED: u16 = u16::MAX;

/// Routes keys to shards; shared by a client and its sessions.
pub(super) struct Router {
    shards: usize,
    store: Arc<dyn MetadataStore>,
    /// Slot → shard, if ownership is published.
    slots: RwLock<Option<Arc<[u16]>>>,
}

impl Router {
    /// Reads the ownership table (if any) for a client of `shards` shards.
    pub(super) fn new(store: Arc<dyn MetadataStore>, shards: usize) -> Result<Self, ClientError> {
        let router = Self {
            shards,
            store,
            slots: RwLock::new(None),
        };
        router.refresh()?;
        Ok(router)
    }

    /// Reads the ownership table again.
    pub(super) fn refresh(&self) -> Result<(), ClientError> {
        let table = slot_table(&self.store.ownership()?, self.shards)?;
        *self.slots.write() = table;
        Ok(())
    }

    /// Whether keys are routed by hash slot (ownership is published).
    pub(super) fn by_slot(&self) -> bool {
        self.slots.read().is_some()
    }

    /// The shard of `key`.
    pub(super) fn shard_for(&self, key: &[u8]) -> Result<usize, ClientError> {
        let Some(slots) = self.slots.read().clone() else {
            return Ok(shard_for_key(key, self.shards));
        };
        let slot = key_slot(key);
        match slots[usize::from(slot)] {
            UNOWNED => Err(ClientError::Protocol(format!(
                "hash slot {slot} has no owner in the cluster's ownership table"
            ))),
            shard => Ok(usize::from(shard)),
        }
    }
}

/// Slot → shard from the ownership ranges; None if there are none.
fn slot_table(ranges: &[PartitionRange], shards: usize) -> Result<Option<Arc<[u16]>>, ClientError> {
    if ranges.is_empty() {
        return Ok(None);
    }
    let mut table = vec![UNOWNED; usize::from(SLOT_COUNT)];
    for range in ranges {
        if range.last >= u64::from(SLOT_COUNT) {
            return Err(ClientError::Protocol(format!(
                "the ownership table names slots {}..={}, past the last hash slot {}",
                range.first,
                range.last,
                SLOT_COUNT - 1
            )));
        }
        let shard = usize::try_from(range.worker)
            .ok()
            .filter(|&worker| worker < shards)
            .ok_or_else(|| {
                ClientError::Protocol(format!(
                    "the ownership table gives slots {}..={} to worker {} ({}), but the client \
                     knows {shards} shards (shard i is worker i)",
                    range.first, range.last, range.worker, range.address
                ))
            })?;
        table[range.first as usize..=range.last as usize].fill(shard as u16);
    }
    Ok(Some(table.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u64, last: u64, worker: u64) -> PartitionRange {
        PartitionRange {
            first,
            last,
            worker,
            address: format!("127.0.0.1:{}", 7000 + worker),
        }
    }

    #[test]
    fn slot_tables() {
        assert!(slot_table(&[], 3).unwrap().is_none());
        let table = slot_table(&[range(0, 9999, 1), range(10000, 16383, 0)], 2)
            .unwrap()
            .unwrap();
        assert_eq!(table[0], 1);
        assert_eq!(table[12182], 0, "slot of foo");
        assert!(slot_table(&[range(0, 16383, 2)], 2).is_err());
        assert!(slot_table(&[range(0, 16384, 0)], 2).is_err());
        let partial = slot_table(&[range(0, 99, 0)], 1).unwrap().unwrap();
        assert_eq!(partial[100], UNOWNED);
    }
}
