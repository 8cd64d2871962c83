//! Ownership of virtual partitions: which worker serves which contiguous range of partitions,
//! and where clients reach it. A store-agnostic table (`dpr_ownership`); prefixkv's cluster uses
//! Redis Cluster's 16384 hash slots as the partitions.
//!
//! ```sql
//! dpr_ownership(first_partition BIGINT PRIMARY KEY, last_partition BIGINT, worker_id BIGINT, address TEXT)
//! ```
//!
//! Invariants (checked by [`validate`] before anything is written, so a reader never sees them
//! broken): ranges are inclusive, `first <= last`, sorted by `first` and disjoint; each address
//! is non-empty UTF-8 of at most [`MAX_ADDRESS_BYTES`] without control characters; one worker has
//! one address. The whole table is replaced in one transaction ([`super::MetadataStore::set_ownership`]),
//! so a reader sees the old assignment or the new one, never a mix. Moving partitions between
//! workers at checkpoint boundaries and leases on ownership are not implemented: the table is
//! written once, when a cluster starts.

use std::collections::BTreeMap;

use super::MetadataError;
use crate::WorkerId;

/// Longest address accepted, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 256;

/// Most ranges accepted in one table (bounds what a reader allocates).
pub const MAX_RANGES: usize = 1 << 16;

/// Partitions `first..=last` belong to `worker`, reachable at `address` (e.g. `127.0.0.1:7000`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRange {
    /// First partition of the range.
    pub first: u64,
    /// Last partition of the range (inclusive).
    pub last: u64,
    /// The owner.
    pub worker: WorkerId,
    /// Where clients reach the owner.
    pub address: String,
}

/// Checks the invariants of the module docs.
pub fn validate(ranges: &[PartitionRange]) -> Result<(), MetadataError> {
    let invalid = |text: String| Err(MetadataError::Invalid(format!("ownership: {text}")));
    if ranges.len() > MAX_RANGES {
        return invalid(format!("{} ranges (at most {MAX_RANGES})", ranges.len()));
    }
    let mut addresses: BTreeMap<WorkerId, &str> = BTreeMap::new();
    for (index, range) in ranges.iter().enumerate() {
        if range.first > range.last {
            return invalid(format!(
                "range {index} starts at {} after its end {}",
                range.first, range.last
            ));
        }
        if let Some(previous) = index.checked_sub(1).map(|i| &ranges[i]) {
            if range.first <= previous.last {
                return invalid(format!(
                    "range {index} ({}..={}) is not after range {} ({}..={}): ranges must be sorted and disjoint",
                    range.first, range.last, index - 1, previous.first, previous.last
                ));
            }
        }
        if range.address.is_empty()
            || range.address.len() > MAX_ADDRESS_BYTES
            || range.address.chars().any(char::is_control)
        {
            return invalid(format!(
                "range {index}: address {:?} must be 1..={MAX_ADDRESS_BYTES} bytes without control characters",
                range.address
            ));
        }
        if let Some(known) = addresses.insert(range.worker, &range.address) {
            if known != range.address {
                return invalid(format!(
                    "worker {} has two addresses, {known:?} and {:?}",
                    range.worker, range.address
                ));
            }
        }
    }
    Ok(())
}

/// The owner of `partition`, if any (`ranges` valid, hence sorted).
pub fn owner_of(ranges: &[PartitionRange], partition: u64) -> Option<&PartitionRange> {
    let index = ranges.partition_point(|range| range.last < partition);
    ranges.get(index).filter(|range| range.first <= partition)
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
    fn validation_and_lookup() {
        let ranges = vec![range(0, 9, 0), range(10, 19, 1), range(30, 39, 0)];
        validate(&ranges).unwrap();
        assert_eq!(owner_of(&ranges, 0).unwrap().worker, 0);
        assert_eq!(owner_of(&ranges, 19).unwrap().worker, 1);
        assert!(owner_of(&ranges, 25).is_none());
        assert_eq!(owner_of(&ranges, 39).unwrap().worker, 0);
        assert!(owner_of(&ranges, 40).is_none());
        assert!(validate(&[range(5, 4, 0)]).is_err());
        assert!(validate(&[range(0, 9, 0), range(9, 12, 1)]).is_err());
        assert!(validate(&[range(10, 19, 0), range(0, 9, 1)]).is_err());
        let mut bad = range(0, 1, 0);
        bad.address = "a\nb".into();
        assert!(validate(&[bad]).is_err());
        let mut other = range(20, 29, 0);
        other.address = "elsewhere:1".into();
        assert!(validate(&[range(0, 9, 0), other]).is_err());
    }
}
