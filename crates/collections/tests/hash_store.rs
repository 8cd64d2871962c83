//! The map on the real store across a restart: each update's records and the header in its root
//! record are written in one transaction, a checkpoint is taken midway, and recovery (the
//! checkpoint plus the replayed log suffix) must bring back a header that finds every
//! acknowledged field with its value, and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;

use prefixkv_collections::hash::Hash;
use prefixkv_collections::Owned;
use prefixkv_store::DurableStore;

mod common;
use common::options;

/// The user key whose value holds the header.
const ROOT: &[u8] = b"\x00big hash";
const ID: u64 = 77;

fn field(i: u64) -> Vec<u8> {
    format!("field:{i}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value of {i}")
        .repeat(1 + i as usize % 3)
        .into_bytes()
}

#[derive(Clone, Copy)]
enum Step {
    Insert(u64),
    Remove(u64),
}

/// Applies `steps` in transactions of `per_txn`, as the server does: read the header from the
/// root, update, write the header back, commit; `model` gets what was acknowledged.
fn run(
    store: &Arc<DurableStore>,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    steps: &[Step],
    per_txn: usize,
) {
    let mut session = store.session().unwrap();
    let mut bytes = Vec::new();
    for chunk in steps.chunks(per_txn) {
        let mut txn = session.begin(&[ROOT]);
        let mut hash = if txn.get(ROOT, &mut bytes).unwrap() {
            Hash::decode(&mut &bytes[..]).unwrap()
        } else {
            Hash::new(ID)
        };
        let mut applied = Vec::new();
        {
            let mut records = Owned {
                txn: &mut txn,
                owner: ROOT,
            };
            for &step in chunk {
                match step {
                    Step::Insert(i) => {
                        hash.insert(&mut records, &field(i), &value(i)).unwrap();
                        applied.push((field(i), Some(value(i))));
                    }
                    Step::Remove(i) => {
                        hash.remove(&mut records, &field(i)).unwrap();
                        applied.push((field(i), None));
                    }
                }
            }
        }
        bytes.clear();
        hash.encode(&mut bytes);
        txn.put(ROOT, &bytes).unwrap();
        if let Some(mark) = txn.commit().unwrap() {
            mark.wait().unwrap();
        }
        // Acknowledged: the model takes it.
        for (field, value) in applied {
            match value {
                Some(value) => model.insert(field, value),
                None => model.remove(&field),
            };
        }
    }
}

/// Inserts of `range`, each fifth followed by the removal of a field inserted 1000 earlier.
fn inserts(range: std::ops::Range<u64>) -> Vec<Step> {
    let mut steps = Vec::new();
    for i in range {
        steps.push(Step::Insert(i));
        if i.is_multiple_of(5) && i >= 1000 {
            steps.push(Step::Remove(i - 1000));
        }
    }
    steps
}

#[test]
fn a_recovered_header_finds_every_acknowledged_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let buckets_at_peak;
    {
        let (store, _) = DurableStore::open(options(dir.path())).unwrap();
        run(&store, &mut model, &inserts(0..10_000), 4);
        store.checkpoint().unwrap();
        run(&store, &mut model, &inserts(10_000..20_000), 3);
        // Back down far enough that the log suffix holds merges too.
        let removals: Vec<Step> = (0..19_000).map(Step::Remove).collect();
        let peak = read_header(&store).bucket_count();
        run(&store, &mut model, &removals, 8);
        buckets_at_peak = peak;
        store.sync().unwrap();
    }
    let (store, recovered) = DurableStore::open(options(dir.path())).unwrap();
    assert!(recovered.checkpoint.is_some(), "{recovered}");
    assert!(recovered.records_replayed > 0, "{recovered}");
    let hash = read_header(&store);
    assert!(buckets_at_peak > 1000 && hash.bucket_count() < buckets_at_peak / 2);
    assert_eq!(hash.len(), model.len() as u64);

    let mut session = store.session().unwrap();
    let mut txn = session.begin(&[ROOT]);
    let mut records = Owned {
        txn: &mut txn,
        owner: ROOT,
    };
    let mut found = BTreeMap::new();
    hash.for_each(&mut records, |field, value| {
        assert!(found.insert(field.to_vec(), value.to_vec()).is_none());
    })
    .unwrap();
    assert!(
        found == model,
        "{} found, {} expected",
        found.len(),
        model.len()
    );
    let mut value = Vec::new();
    for (field, expected) in &model {
        assert!(hash.get(&mut records, field, &mut value).unwrap());
        assert_eq!(&value, expected);
    }
    for i in 0..19_000 {
        assert!(!hash.get(&mut records, &field(i), &mut value).unwrap());
    }
}

fn read_header(store: &Arc<DurableStore>) -> Hash {
    let mut session = store.session().unwrap();
    let mut bytes = Vec::new();
    assert!(session.read(ROOT, &mut bytes).unwrap());
    let mut rest = &bytes[..];
    let hash = Hash::decode(&mut rest).unwrap();
    assert!(rest.is_empty());
    hash
}
