//! `engine-index-buckets`: the engine's hash index size (`StoreConfig::index_buckets`), fixed at
//! start: the index does not grow, so its size bounds how many keys (and collection records) the
//! server can hold, and all of it counts in `used_memory`.
//!
//! Invariant: the resolved value is a power of two in `[MIN_BUCKETS, MAX_BUCKETS]`.
//!
//! Sizing: a bucket is 64 bytes with 7 entries, and the overflow pool has as many buckets again,
//! so `b` buckets hold about `14 b` keys. Without `maxmemory` the default is 2^20 buckets (64 MiB,
//! about 14M keys). With `maxmemory` the index takes at most an eighth of it: the largest power
//! of two `<= maxmemory / 512`. That holds `maxmemory / 36` keys or more, and no record is smaller
//! than 40 bytes, so the data reaches `maxmemory` (and eviction starts) before the index fills,
//! while a small cache does not give a 64 MiB index most of its limit.

use anyhow::bail;

/// Fewest buckets accepted (64 KiB of index).
pub const MIN_BUCKETS: u64 = 1 << 10;
/// Most buckets accepted (256 GiB of index: the engine's own bound is 2^32).
pub const MAX_BUCKETS: u64 = 1 << 32;
/// The default without `maxmemory`.
pub const DEFAULT_BUCKETS: u64 = 1 << 20;
/// Bytes of `maxmemory` per bucket of the default index under `maxmemory` (an eighth of it).
const MAXMEMORY_BYTES_PER_BUCKET: u64 = 512;

/// The bucket count from the flag, else the file, else the default for this `maxmemory`.
pub(super) fn index_buckets(
    flag: Option<u64>,
    file: Option<u64>,
    maxmemory_bytes: u64,
) -> anyhow::Result<u64> {
    let buckets = match flag.or(file) {
        Some(buckets) => buckets,
        None if maxmemory_bytes > 0 => {
            let most = (maxmemory_bytes / MAXMEMORY_BYTES_PER_BUCKET).max(MIN_BUCKETS);
            // The largest power of two not above `most`.
            1 << (63 - most.leading_zeros())
        }
        None => DEFAULT_BUCKETS,
    };
    if !buckets.is_power_of_two() || !(MIN_BUCKETS..=MAX_BUCKETS).contains(&buckets) {
        bail!(
            "engine-index-buckets {buckets} must be a power of two between {MIN_BUCKETS} and \
             {MAX_BUCKETS} (64 bytes each; about 14 keys per bucket fit)"
        );
    }
    Ok(buckets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_maxmemory() {
        assert_eq!(index_buckets(None, None, 0).unwrap(), DEFAULT_BUCKETS);
        // 256 MiB / 512 = 2^19 buckets: 32 MiB, an eighth.
        assert_eq!(index_buckets(None, None, 256 << 20).unwrap(), 1 << 19);
        // 300 MB / 512 = 585,937: rounded down to 2^19.
        assert_eq!(index_buckets(None, None, 300_000_000).unwrap(), 1 << 19);
        // Tiny limits get the minimum.
        assert_eq!(index_buckets(None, None, 1 << 20).unwrap(), 1 << 11);
        assert_eq!(index_buckets(None, None, 256 << 10).unwrap(), MIN_BUCKETS);
    }

    #[test]
    fn explicit_values_win_and_are_checked() {
        assert_eq!(
            index_buckets(Some(1 << 12), Some(1 << 14), 0).unwrap(),
            1 << 12
        );
        assert_eq!(
            index_buckets(None, Some(1 << 14), 256 << 20).unwrap(),
            1 << 14
        );
        for bad in [0, 1000, 1 << 9, (1 << 20) + 1, 1 << 33] {
            let error = index_buckets(Some(bad), None, 0).unwrap_err();
            assert!(
                format!("{error:#}").contains("engine-index-buckets"),
                "{error:#}"
            );
        }
    }
}
