//! Unit tests of the linear-hashing map: header and bucket decoding, damage, scan cursors.

use super::*;
use crate::MemRecords;

fn header(len: u64, level: u8, split: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Hash {
        id: 7,
        len,
        level,
        split,
    }
    .encode(&mut out);
    out
}

fn is_corrupt<T: std::fmt::Debug>(result: Result<T>) -> bool {
    matches!(result, Err(Error::Corrupt(_)))
}

/// A map of `n` entries `f{i}` -> `v{i}` in fresh records.
fn filled(n: u32) -> (Hash, MemRecords) {
    let mut records = MemRecords::default();
    let mut hash = Hash::new(3);
    for i in 0..n {
        let new = hash
            .insert(
                &mut records,
                format!("f{i}").as_bytes(),
                format!("v{i}").as_bytes(),
            )
            .unwrap();
        assert!(new);
    }
    (hash, records)
}

#[test]
fn header_round_trips_and_leaves_what_follows() {
    for (len, level, split) in [(0, 0, 0), (1, 0, 0), (100, 3, 5), (u64::MAX, 62, 7)] {
        let mut bytes = header(len, level, split);
        assert_eq!(bytes.len(), HEADER_BYTES);
        bytes.extend_from_slice(b"tail");
        let mut rest = &bytes[..];
        let hash = Hash::decode(&mut rest).unwrap();
        assert_eq!(rest, b"tail");
        assert_eq!(
            (hash.id, hash.len, hash.level, hash.split),
            (7, len, level, split)
        );
    }
    let (hash, _) = filled(100);
    let mut bytes = Vec::new();
    hash.encode(&mut bytes);
    assert_eq!(Hash::decode(&mut &bytes[..]).unwrap(), hash);
}

#[test]
fn inconsistent_or_cut_headers_are_corrupt() {
    let good = header(5, 2, 1);
    for cut in 0..HEADER_BYTES {
        let mut rest = &good[..cut];
        assert!(is_corrupt(Hash::decode(&mut rest)), "cut at {cut}");
        assert_eq!(rest.len(), cut, "an error leaves rest unchanged");
    }
    // Level above 62, split not below 2^level (twice), empty with two buckets.
    for bad in [
        header(5, 63, 0),
        header(5, 2, 4),
        header(5, 0, 1),
        header(0, 1, 0),
    ] {
        assert!(is_corrupt(Hash::decode(&mut &bad[..])), "{bad:?}");
    }
}

/// Replaces the record of the bucket holding `f0` and reads `f0` back.
fn get_with_record(bytes: Vec<u8>) -> Result<bool> {
    let (hash, mut records) = filled(3);
    let key = hash.bucket_key(hash.bucket_of(xxh3_64(b"f0")));
    records.map.insert(key.to_vec(), bytes);
    hash.get(&mut records, b"f0", &mut Vec::new())
}

#[test]
fn damaged_bucket_records_are_corrupt() {
    let (hash, mut records) = filled(3);
    assert_eq!(hash.bucket_count(), 1);
    let good = records.map.values().next().unwrap().clone();
    assert!(get_with_record(good.clone()).unwrap());
    for cut in 0..good.len() {
        assert!(
            is_corrupt(get_with_record(good[..cut].to_vec())),
            "cut at {cut}"
        );
    }
    // A count above the entries present, a huge count (must not allocate by it), none.
    for count in [4u32, u32::MAX, 0] {
        let mut bad = good.clone();
        bad[..4].copy_from_slice(&count.to_le_bytes());
        assert!(is_corrupt(get_with_record(bad)), "count {count}");
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(is_corrupt(get_with_record(trailing)));
    // A field length running past the end.
    let mut long = good.clone();
    long[4..8].copy_from_slice(&1000u32.to_le_bytes());
    assert!(is_corrupt(get_with_record(long)));
    // The other operations report it too.
    let key = records.map.keys().next().unwrap().clone();
    records.map.insert(key, good[..good.len() - 1].to_vec());
    let mut hash = hash;
    assert!(is_corrupt(hash.insert(&mut records, b"x", b"y")));
    assert!(is_corrupt(hash.remove(&mut records, b"f1")));
    assert!(is_corrupt(hash.for_each(&mut records, |_, _| {})));
    assert!(is_corrupt(hash.scan(&mut records, 0, |_, _| {})));
    assert!(is_corrupt(hash.random(&mut records, 1)));
}

#[test]
fn an_entry_in_the_wrong_bucket_is_corrupt() {
    let (hash, mut records) = filled(200);
    assert!(hash.bucket_count() > 2);
    // Swap two buckets' records: every entry is then in a bucket it does not hash to.
    let keys: Vec<Vec<u8>> = records.map.keys().take(2).cloned().collect();
    let first = records.map[&keys[0]].clone();
    let second = records.map.insert(keys[1].clone(), first).unwrap();
    records.map.insert(keys[0].clone(), second);
    assert!(is_corrupt(hash.for_each(&mut records, |_, _| {})));
}

#[test]
fn a_header_that_disagrees_with_the_records_is_corrupt_not_a_panic() {
    let (hash, mut records) = filled(1);
    let mut empty = Hash { len: 0, ..hash };
    assert!(is_corrupt(empty.remove(&mut records, b"f0")));
    let mut bytes = Vec::new();
    let mut overfull = Hash {
        len: u64::MAX,
        ..hash
    };
    assert!(is_corrupt(overfull.insert(&mut records, b"new", b"v")));
    let (hash, mut records) = filled(2);
    let mut short = Hash { len: 1, ..hash };
    assert!(is_corrupt(short.remove(&mut records, b"f0")));
    let lying = Hash {
        len: 5,
        ..Hash::new(99)
    };
    assert!(is_corrupt(lying.random(&mut records, 0)));
    assert!(!lying.get(&mut records, b"f0", &mut bytes).unwrap());
}

#[test]
fn a_scan_of_an_unchanging_table_visits_each_entry_once_one_bucket_a_step() {
    for n in [0, 1, 9, 100, 777] {
        let (hash, mut records) = filled(n);
        let mut seen = std::collections::BTreeMap::new();
        let (mut cursor, mut steps) = (0, 0);
        loop {
            let gets = records.gets;
            cursor = hash
                .scan(&mut records, cursor, |field, value| {
                    assert!(seen.insert(field.to_vec(), value.to_vec()).is_none());
                })
                .unwrap();
            assert_eq!(records.gets, gets + 1);
            steps += 1;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(steps, hash.bucket_count());
        assert_eq!(seen.len() as u64, n as u64);
    }
}

#[test]
fn cursors_count_in_reverse_binary() {
    // Mask 0b11: 0 -> 2 -> 1 -> 3 -> 0.
    assert_eq!(next_cursor(0, 3), 2);
    assert_eq!(next_cursor(2, 3), 1);
    assert_eq!(next_cursor(1, 3), 3);
    assert_eq!(next_cursor(3, 3), 0);
    // One bucket: the first step ends the scan; bits above the mask are ignored.
    assert_eq!(next_cursor(0, 0), 0);
    assert_eq!(next_cursor(0b100, 3), 2);
}

#[test]
fn random_finds_entries_and_none_when_empty() {
    let (hash, mut records) = filled(0);
    assert_eq!(hash.random(&mut records, 5).unwrap(), None);
    let (hash, mut records) = filled(300);
    let mut fields = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let (field, value) = hash.random(&mut records, seed).unwrap().unwrap();
        assert_eq!(&field[1..], &value[1..]);
        fields.insert(field);
    }
    assert!(fields.len() > 50, "{} distinct of 200 draws", fields.len());
}

#[test]
fn clear_deletes_every_record() {
    let (mut hash, mut records) = filled(500);
    hash.clear(&mut records).unwrap();
    assert!(records.map.is_empty());
    assert_eq!(hash, Hash::new(3));
}
