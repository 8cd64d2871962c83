//! Capacity hints (`prefixkv_collections::capacity_hint`): inserts into one hash and pushes onto
//! one list allocate far fewer records than they write, because a bucket or chunk is created
//! with room to grow and then rewritten in place. Counted by `MemRecords`, which follows the
//! engine's capacity rule; the slack the records hold stays a bounded fraction of their bytes.
//! The numbers these tests print are what the crate docs' choice of size classes rests on.

use prefixkv_collections::hash::Hash;
use prefixkv_collections::list::List;
use prefixkv_collections::{capacity_hint, MemRecords, CAPACITY_FLOOR};

mod common;

/// Allocation figures of a load of `n` elements into `records`.
fn report(what: &str, n: u64, records: &MemRecords) -> (f64, f64, f64) {
    let value_bytes: u64 = records.map.values().map(|value| value.len() as u64).sum();
    let held = records.capacity_bytes();
    let per_write = records.allocations as f64 / records.writes as f64;
    let slack = held as f64 / value_bytes as f64;
    let dead = (records.allocated_bytes - held) as f64 / n as f64;
    println!(
        "{what}: {n} elements, {} writes, {} allocations ({per_write:.3} per write), \
         value bytes/element {:.1}, capacity bytes/element {:.1} (x{slack:.3}), \
         dead bytes/element {dead:.1}",
        records.writes,
        records.allocations,
        value_bytes as f64 / n as f64,
        held as f64 / n as f64,
    );
    (per_write, slack, dead)
}

#[test]
fn hash_inserts_grow_buckets_in_place() {
    for (what, value) in [("set", &b""[..]), ("hash", &b"v:00000000"[..])] {
        let mut records = MemRecords::default();
        let mut hash = Hash::new(1);
        let n = 200_000u64;
        for i in 0..n {
            let field = format!("m:{i:010}");
            assert!(hash.insert(&mut records, field.as_bytes(), value).unwrap());
        }
        let (per_write, slack, dead) = report(what, n, &records);
        // Without hints every bucket write allocates (per_write 1.0).
        assert!(per_write < 0.3, "{what}: {per_write} allocations per write");
        // A bucket that splits keeps its capacity (it regrows into it): up to twice its bytes.
        assert!(slack < 1.75, "{what}: capacity x{slack} of the values");
        assert!(dead < 60.0, "{what}: {dead} dead bytes per element");
    }
}

#[test]
fn list_pushes_fill_chunks_in_place() {
    let mut records = MemRecords::default();
    let mut list = List::new(2);
    let n = 100_000u64;
    for i in 0..n {
        let entry = format!("e:{i:010}");
        // LPUSH and RPUSH alternately: both ends grow.
        let rank = if i % 2 == 0 { 0 } else { list.len() };
        list.insert_at(&mut records, rank, entry.as_bytes())
            .unwrap();
    }
    let (per_write, slack, _) = report("list", n, &records);
    assert!(per_write < 0.1, "{per_write} allocations per write");
    assert!(slack < 1.35, "capacity x{slack} of the chunks");
}

#[test]
fn size_classes_are_words_growing_geometrically_and_capped() {
    assert_eq!(capacity_hint(0, 1 << 20), CAPACITY_FLOOR);
    assert_eq!(capacity_hint(CAPACITY_FLOOR, 1 << 20), CAPACITY_FLOOR);
    let mut previous = CAPACITY_FLOOR;
    for len in CAPACITY_FLOOR + 1..20_000 {
        let class = capacity_hint(len, 1 << 20);
        assert!(class >= len && class.is_multiple_of(8), "{len} -> {class}");
        // Never more than the growth factor (plus a word) above the value.
        assert!(class * 2 <= len * 3 + 16, "{len} -> {class}");
        assert!(class >= previous);
        previous = class;
    }
    // Capped at the structure's largest record; beyond it, exact.
    assert_eq!(capacity_hint(8000, 8192), 8192);
    assert_eq!(capacity_hint(9000, 8192), 9000);
}

/// On the real store: 20,000 set members added to one hash, one transaction each as the server
/// does, grow the engine's log by little more than the live records (hinted buckets grow in
/// place); without hints every insert leaves its bucket's old record dead, several times the
/// live bytes. The budget is large enough that compaction never starts, so the log's growth is
/// every byte the inserts allocated.
#[test]
fn a_store_hash_allocates_little_more_than_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::options(dir.path());
    options.engine.log_memory_bytes = 256 << 20;
    let (store, _) = prefixkv_store::DurableStore::open(options).unwrap();
    let engine = store.engine().clone();
    let root: &[u8] = b"\x00set";
    let mut session = store.session().unwrap();
    let (pages_before, live_before) =
        (engine.log_memory_in_use_bytes(), engine.live_record_bytes());
    let n = 20_000u64;
    for i in 0..n {
        let mut txn = session.begin(&[root]);
        let mut hash = common::read_header(&mut txn, root, Hash::decode, || Hash::new(5));
        let member = format!("m:{i:010}");
        let mut records = prefixkv_collections::Owned {
            txn: &mut txn,
            owner: root,
        };
        assert!(hash.insert(&mut records, member.as_bytes(), b"").unwrap());
        let mut header = Vec::new();
        hash.encode(&mut header);
        txn.put(root, &header).unwrap();
        txn.commit().unwrap();
    }
    let grown = (engine.log_memory_in_use_bytes() - pages_before) as f64;
    let live = (engine.live_record_bytes() - live_before) as f64;
    assert_eq!(
        engine.recount_live_record_bytes(),
        engine.live_record_bytes()
    );
    println!(
        "store set: live {:.1} B/element, log grew {:.1} B/element (x{:.2})",
        live / n as f64,
        grown / n as f64,
        grown / live
    );
    assert!(
        grown < 2.5 * live,
        "log grew x{:.2} the live bytes",
        grown / live
    );
}
