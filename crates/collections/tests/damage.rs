//! Damaged records under the update paths that work on a record's bytes without decoding it into
//! entries (a list's pushes and pops at its ends, a hash's get, insert and remove): whatever the
//! damage, an operation succeeds or reports `Error::Corrupt`, never panics, and a damaged chunk
//! head that the bytes cannot hold is reported, not written over.

use std::ops::ControlFlow;

use prefixkv_collections::hash::Hash;
use prefixkv_collections::list::List;
use prefixkv_collections::{Error, MemRecords, Result};
use proptest::prelude::*;

/// A list of `n` entries pushed at both ends (several chunks of the default 128 entries).
fn list_of(n: u64) -> (List, MemRecords) {
    let mut records = MemRecords::default();
    let mut list = List::new(7);
    for i in 0..n {
        let rank = if i % 3 == 0 { 0 } else { list.len() };
        list.insert_at(&mut records, rank, format!("entry {i}").as_bytes())
            .unwrap();
    }
    (list, records)
}

/// Ok, or `Corrupt`; any other error fails the test.
fn corrupt_or_ok<T>(result: Result<T>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(Error::Corrupt(_)) => None,
        Err(other) => panic!("not a corruption: {other}"),
    }
}

/// Every end operation on a copy of (`list`, `records`), then a full read of what it left.
fn exercise_ends(list: &List, records: &MemRecords) {
    type Op = fn(&mut List, &mut MemRecords) -> Result<()>;
    let ops: [Op; 5] = [
        |l, r| l.insert_at(r, 0, b"front"),
        |l, r| l.insert_at(r, l.len(), b"back"),
        |l, r| l.insert_at(r, l.len(), &[b'x'; 9000]),
        |l, r| l.remove_at(r, 0).map(drop),
        |l, r| l.remove_at(r, l.len() - 1).map(drop),
    ];
    for op in ops {
        let (mut list, mut records) = (*list, records.clone());
        if corrupt_or_ok(op(&mut list, &mut records)).is_some() {
            let all = |_: u64, _: &[u8]| ControlFlow::Continue(());
            corrupt_or_ok(list.range(&mut records, 0, all));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random damage to one chunk (a byte changed, or the record cut): end operations never
    /// panic.
    #[test]
    fn damaged_chunks_under_end_operations(
        pick in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        value in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let (list, mut records) = list_of(400);
        let keys: Vec<Vec<u8>> = records.map.keys().cloned().collect();
        let record = records.map.get_mut(pick.get(&keys)).unwrap();
        let at = byte.index(record.len());
        if cut {
            record.truncate(at);
        } else {
            record[at] = value;
        }
        exercise_ends(&list, &records);
    }

    /// Random damage to one bucket: get, insert and remove never panic.
    #[test]
    fn damaged_buckets_under_updates(
        pick in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        value in any::<u8>(),
        cut in any::<bool>(),
        field in 0u32..200,
    ) {
        let mut records = MemRecords::default();
        let mut hash = Hash::new(9);
        for i in 0..100u32 {
            hash.insert(&mut records, format!("f{i}").as_bytes(), b"value").unwrap();
        }
        let keys: Vec<Vec<u8>> = records.map.keys().cloned().collect();
        let record = records.map.get_mut(pick.get(&keys)).unwrap();
        let at = byte.index(record.len());
        if cut {
            record.truncate(at);
        } else {
            record[at] = value;
        }
        let field = format!("f{field}").into_bytes();
        corrupt_or_ok(hash.get(&mut records.clone(), &field, &mut Vec::new()));
        corrupt_or_ok(Hash::clone(&hash).insert(&mut records.clone(), &field, b"other"));
        corrupt_or_ok(Hash::clone(&hash).insert(&mut records.clone(), &field, b"value"));
        corrupt_or_ok(Hash::clone(&hash).remove(&mut records.clone(), &field));
    }
}

/// An end chunk whose count promises more entries than its bytes can hold is not pushed onto
/// in place: the push reports the damage.
#[test]
fn an_end_chunk_counting_past_its_bytes_is_corrupt() {
    let (list, records) = list_of(400);
    for (link, front) in [(0..8, true), (8..16, false)] {
        let mut damaged = records.clone();
        let end = damaged
            .map
            .values_mut()
            .find(|chunk| chunk[link.clone()] == [0; 8])
            .expect("an end chunk");
        end[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut list = list;
        let rank = if front { 0 } else { list.len() };
        assert!(matches!(
            list.insert_at(&mut damaged, rank, b"new"),
            Err(Error::Corrupt(_))
        ));
        let rank = if front { 0 } else { list.len() - 1 };
        assert!(matches!(
            list.remove_at(&mut damaged, rank),
            Err(Error::Corrupt(_))
        ));
    }
}
