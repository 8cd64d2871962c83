//! A counted B+tree kept in a real durable store the way the server keeps a list: the header in
//! the root key's value, the nodes as records under it, each update one transaction. Pushes at
//! both ends and in the middle (and some removals), a checkpoint midway, a restart that recovers
//! the checkpoint plus the operation log after it; then the tree must hold exactly what the
//! transactions wrote, and clearing it must leave no record of the object behind.

use std::ops::ControlFlow;
use std::sync::Arc;

use prefixkv_collections::tree::Tree;
use prefixkv_collections::{object_of, Owned};
use prefixkv_store::{DurableStore, Txn};

mod common;
use common::options;

const ROOT: &[u8] = b"\x00mylist";
const ID: u64 = 0x51;

/// The tree whose header the root key holds (a new one when the key is absent).
fn header(txn: &mut Txn<'_>) -> Tree {
    common::read_header(txn, ROOT, Tree::decode, || Tree::new(ID))
}

fn store_header(txn: &mut Txn<'_>, tree: &Tree) {
    common::write_header(txn, ROOT, tree.is_empty(), |out| tree.encode(out));
}

/// Writes `count` elements from number `first`, eight per transaction: at the head, the tail
/// and the middle in turn, and every seventh step a removal instead.
fn push(store: &Arc<DurableStore>, model: &mut Vec<Vec<u8>>, first: u64, count: u64) {
    let mut session = store.session().unwrap();
    for batch in (first..first + count).step_by(8) {
        let mut txn = session.begin(&[ROOT]);
        let mut tree = header(&mut txn);
        {
            let mut records = Owned {
                txn: &mut txn,
                owner: ROOT,
            };
            for n in batch..(batch + 8).min(first + count) {
                if n % 7 == 6 && !model.is_empty() {
                    let rank = (n * 31) % model.len() as u64;
                    let removed = tree.remove_at(&mut records, rank).unwrap();
                    assert_eq!(removed, model.remove(rank as usize));
                    continue;
                }
                let rank = match n % 3 {
                    0 => 0,
                    1 => model.len(),
                    _ => model.len() / 2,
                };
                let entry = format!("element {n} {}", "x".repeat((n % 50) as usize));
                tree.insert_at(&mut records, rank as u64, entry.as_bytes())
                    .unwrap();
                model.insert(rank, entry.into_bytes());
            }
        }
        store_header(&mut txn, &tree);
        if let Some(mark) = txn.commit().unwrap() {
            mark.wait().unwrap();
        }
    }
}

/// The tree's entries in order, read both ways.
fn contents(store: &Arc<DurableStore>) -> Vec<Vec<u8>> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin(&[ROOT]);
    let tree = header(&mut txn);
    let mut records = Owned {
        txn: &mut txn,
        owner: ROOT,
    };
    let mut forward = Vec::new();
    tree.range(&mut records, 0, |rank, entry| {
        assert_eq!(rank, forward.len() as u64);
        forward.push(entry.to_vec());
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(forward.len() as u64, tree.len());
    let mut backward = Vec::new();
    if !tree.is_empty() {
        tree.range_rev(&mut records, tree.len() - 1, |_, entry| {
            backward.push(entry.to_vec());
            ControlFlow::Continue(())
        })
        .unwrap();
    }
    backward.reverse();
    assert_eq!(backward, forward);
    forward
}

/// Records of the object (its nodes) and whether the root key exists.
fn stored(store: &Arc<DurableStore>) -> (usize, bool) {
    let mut session = store.session().unwrap();
    let (mut nodes, mut root) = (0, false);
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 256, |key, _| {
                nodes += usize::from(object_of(key) == Some(ID));
                root |= key == ROOT;
            })
            .unwrap();
        if cursor == 0 {
            return (nodes, root);
        }
    }
}

#[test]
fn a_tree_survives_checkpoint_and_log_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Vec::new();
    {
        let (store, _) = DurableStore::open(options(dir.path())).unwrap();
        push(&store, &mut model, 0, 10_000);
        store.checkpoint().unwrap();
        push(&store, &mut model, 10_000, 10_000);
        assert_eq!(contents(&store), model);
        store.sync().unwrap();
    }
    let (store, recovered) = DurableStore::open(options(dir.path())).unwrap();
    assert!(recovered.checkpoint.is_some(), "{recovered}");
    assert!(recovered.operations_replayed > 0, "{recovered}");
    assert!(model.len() > 14_000);
    assert_eq!(contents(&store), model, "{recovered}");

    // One more update after recovery, then clearing removes every record of the object.
    push(&store, &mut model, 20_000, 100);
    assert_eq!(contents(&store), model);
    assert!(stored(&store).0 > 100);
    let mut session = store.session().unwrap();
    let mut txn = session.begin(&[ROOT]);
    let mut tree = header(&mut txn);
    tree.clear(&mut Owned {
        txn: &mut txn,
        owner: ROOT,
    })
    .unwrap();
    store_header(&mut txn, &tree);
    txn.commit().unwrap();
    drop(session);
    assert_eq!(stored(&store), (0, false));
}
