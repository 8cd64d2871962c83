//! A chunked list kept in a real durable store the way the server keeps a list: the header in
//! the root key's value, the chunks as records under it, each update one transaction. Mostly
//! queue traffic (pushes and pops at both ends) with some inserts and removals in the middle, a
//! checkpoint midway, a restart that recovers the checkpoint plus the operation log after it;
//! then the list must hold exactly what the transactions wrote, and clearing it must leave no
//! record of the object behind.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;

use prefixkv_collections::list::List;
use prefixkv_collections::{object_of, Owned};
use prefixkv_store::{DurableStore, Txn};

mod common;
use common::options;

const ROOT: &[u8] = b"\x00myqueue";
const ID: u64 = 0x52;

/// The list whose header the root key holds (a new one when the key is absent).
fn header(txn: &mut Txn<'_>) -> List {
    common::read_header(txn, ROOT, List::decode, || List::new(ID))
}

fn store_header(txn: &mut Txn<'_>, list: &List) {
    common::write_header(txn, ROOT, list.is_empty(), |out| list.encode(out));
}

/// Runs operations `first..first + count`, eight per transaction: pushes at the head and the
/// tail, pops at both ends (fewer than pushes, so the list grows), and every eleventh step an
/// insert or removal in the middle.
fn run(store: &Arc<DurableStore>, model: &mut VecDeque<Vec<u8>>, first: u64, count: u64) {
    let mut session = store.session().unwrap();
    for batch in (first..first + count).step_by(8) {
        let mut txn = session.begin(&[ROOT]);
        let mut list = header(&mut txn);
        {
            let mut records = Owned {
                txn: &mut txn,
                owner: ROOT,
            };
            for n in batch..(batch + 8).min(first + count) {
                let entry = format!("element {n} {}", "x".repeat((n % 60) as usize)).into_bytes();
                let len = model.len() as u64;
                match n % 11 {
                    0 | 3 | 6 => {
                        list.insert_at(&mut records, len, &entry).unwrap();
                        model.push_back(entry);
                    }
                    1 | 4 | 8 => {
                        list.insert_at(&mut records, 0, &entry).unwrap();
                        model.push_front(entry);
                    }
                    2 | 7 if len > 0 => {
                        let removed = list.remove_at(&mut records, 0).unwrap();
                        assert_eq!(Some(removed), model.pop_front());
                    }
                    5 if len > 0 => {
                        let removed = list.remove_at(&mut records, len - 1).unwrap();
                        assert_eq!(Some(removed), model.pop_back());
                    }
                    9 if len > 0 => {
                        let rank = (n * 31) % len;
                        let removed = list.remove_at(&mut records, rank).unwrap();
                        assert_eq!(Some(removed), model.remove(rank as usize));
                    }
                    _ => {
                        let rank = (n * 17) % (len + 1);
                        list.insert_at(&mut records, rank, &entry).unwrap();
                        model.insert(rank as usize, entry);
                    }
                }
            }
        }
        store_header(&mut txn, &list);
        if let Some(mark) = txn.commit().unwrap() {
            mark.wait().unwrap();
        }
    }
}

/// The list's entries in order, read both ways.
fn contents(store: &Arc<DurableStore>) -> VecDeque<Vec<u8>> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin(&[ROOT]);
    let list = header(&mut txn);
    let mut records = Owned {
        txn: &mut txn,
        owner: ROOT,
    };
    let mut forward = VecDeque::new();
    list.range(&mut records, 0, |rank, entry| {
        assert_eq!(rank, forward.len() as u64);
        forward.push_back(entry.to_vec());
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(forward.len() as u64, list.len());
    let mut backward = VecDeque::new();
    if !list.is_empty() {
        list.range_rev(&mut records, list.len() - 1, |_, entry| {
            backward.push_front(entry.to_vec());
            ControlFlow::Continue(())
        })
        .unwrap();
    }
    assert_eq!(backward, forward);
    forward
}

/// Records of the object (its chunks) and whether the root key exists.
fn stored(store: &Arc<DurableStore>) -> (usize, bool) {
    let mut session = store.session().unwrap();
    let (mut chunks, mut root) = (0, false);
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 256, |key, _| {
                chunks += usize::from(object_of(key) == Some(ID));
                root |= key == ROOT;
            })
            .unwrap();
        if cursor == 0 {
            return (chunks, root);
        }
    }
}

#[test]
fn a_list_survives_checkpoint_and_log_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = VecDeque::new();
    {
        let (store, _) = DurableStore::open(options(dir.path())).unwrap();
        run(&store, &mut model, 0, 10_000);
        store.checkpoint().unwrap();
        run(&store, &mut model, 10_000, 10_000);
        assert_eq!(contents(&store), model);
        store.sync().unwrap();
    }
    let (store, recovered) = DurableStore::open(options(dir.path())).unwrap();
    assert!(recovered.checkpoint.is_some(), "{recovered}");
    assert!(recovered.operations_replayed > 0, "{recovered}");
    assert!(model.len() > 5_000, "{}", model.len());
    assert_eq!(contents(&store), model, "{recovered}");

    // One more update after recovery, then clearing removes every record of the object.
    run(&store, &mut model, 20_000, 100);
    assert_eq!(contents(&store), model);
    assert!(stored(&store).0 > 40);
    let mut session = store.session().unwrap();
    let mut txn = session.begin(&[ROOT]);
    let mut list = header(&mut txn);
    list.clear(&mut Owned {
        txn: &mut txn,
        owner: ROOT,
    })
    .unwrap();
    store_header(&mut txn, &list);
    txn.commit().unwrap();
    drop(session);
    assert_eq!(stored(&store), (0, false));
}
