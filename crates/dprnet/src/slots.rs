//! Redis Cluster's key → hash slot map, exactly as Redis Cluster computes it (cluster spec,
//! "Keys distribution model"): `CRC16(key) mod 16384`, CRC16 being CRC-16/XMODEM (polynomial
//! 0x1021, initial value 0, no reflection, no final XOR), of the whole key, or, if the key holds a
//! `{` followed later by a `}` with at least one byte between them, of the bytes between the
//! first `{` and the first `}` after it (the *hash tag*). So `{user1000}.following` and
//! `{user1000}.followers` share a slot, and `foo{}{bar}` hashes whole.
//!
//! Slots are the cluster's virtual partitions: the launcher of a prefixkv cluster publishes which
//! worker owns which slot ranges in the metadata store (libDPR's `dpr_ownership` table), workers
//! refuse keys of slots they do not own (`-MOVED`), and clients route by slot.
//!
//! Invariant: [`key_slot`] is below [`SLOT_COUNT`] for every key.

/// Number of hash slots (Redis Cluster's 16384).
pub const SLOT_COUNT: u16 = 16384;

/// CRC-16/XMODEM, table-driven (the table is built at compile time).
pub fn crc16(bytes: &[u8]) -> u16 {
    const TABLE: [u16; 256] = {
        let mut table = [0u16; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = (i as u16) << 8;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };
    bytes.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// The part of `key` that is hashed: its hash tag if it has a non-empty one, else all of it.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(length) = key[open + 1..].iter().position(|&b| b == b'}') {
            if length > 0 {
                return &key[open + 1..open + 1 + length];
            }
        }
    }
    key
}

/// The hash slot of `key` (Redis Cluster's `CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & (SLOT_COUNT - 1)
}

/// An even split of the slots over `parts` owners: part `i` gets `[first, last]`, contiguous,
/// covering every slot once (sizes differ by at most one). `parts` must be in `1..=16384`.
pub fn even_split(parts: usize) -> Vec<(u16, u16)> {
    assert!(
        (1..=usize::from(SLOT_COUNT)).contains(&parts),
        "{parts} parts for {SLOT_COUNT} slots"
    );
    let slots = usize::from(SLOT_COUNT);
    (0..parts)
        .map(|i| {
            let first = i * slots / parts;
            let last = (i + 1) * slots / parts - 1;
            (first as u16, last as u16)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_vectors() {
        // The cluster spec's check value: CRC16("123456789") = 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"123456789"), 12739);
        // Answers of `CLUSTER KEYSLOT` (Redis's documentation and test suite).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"foo{hash_tag}"), 2515);
        assert_eq!(key_slot(b""), 0);
        // Checked against `CLUSTER KEYSLOT` of redis-server 7 in cluster mode.
        assert_eq!(key_slot(b"{user1000}.following"), 3443);
        assert_eq!(key_slot(b"user1000"), 3443);
        assert_eq!(key_slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(key_slot(b"foo{}{bar}"), 8363);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
    }

    #[test]
    fn hash_tags_follow_the_spec() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        // The first `{` and the first `}` after it.
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        // An empty tag, or no closing brace: the whole key.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"}foo{"), b"}foo{");
    }

    #[test]
    fn even_splits_cover_every_slot_once() {
        for parts in [1, 2, 3, 5, 7, 16384] {
            let split = even_split(parts);
            assert_eq!(split.len(), parts);
            assert_eq!(split[0].0, 0);
            assert_eq!(split[parts - 1].1, SLOT_COUNT - 1);
            for pair in split.windows(2) {
                assert_eq!(pair[0].1 + 1, pair[1].0);
            }
        }
        assert_eq!(
            even_split(3),
            vec![(0, 5460), (5461, 10921), (10922, 16383)]
        );
    }
}
