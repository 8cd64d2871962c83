//! Unit tests of the tree: header and node formats, damaged records, and model tests (positional
//! against a `Vec`, ordered against a `BTreeSet`) that check every invariant of the module docs
//! and the per-update record I/O after each operation.

use std::collections::{BTreeSet, HashSet};
use std::ops::ControlFlow;

use proptest::prelude::*;

use super::node::{Child, Node, Separator};
use super::*;
use crate::{score_key, MemRecords};

/// Tiny nodes: deep trees from a few hundred entries; separators cut after 4 bytes.
pub(super) const TINY: Limits = Limits {
    max_items: 4,
    max_leaf_items: 4,
    max_node_bytes: 192,
    separator_bytes: 4,
};

/// Small nodes, some merging (underfull below 3 items).
pub(super) const SMALL: Limits = Limits {
    max_items: 12,
    max_leaf_items: 12,
    max_node_bytes: 512,
    separator_bytes: 16,
};

/// Walks the whole tree checking invariants 1-6 (and 7 when `ordered`), and that the records
/// are exactly the reachable nodes; returns the entries in rank order.
pub(super) fn check(tree: &Tree, records: &mut MemRecords, ordered: bool) -> Vec<Vec<u8>> {
    let mut entries = Vec::new();
    let mut seen = HashSet::new();
    if tree.is_empty() {
        assert_eq!((tree.root, tree.height), (0, 0), "{tree:?}");
    } else {
        assert!(tree.height >= 1 && tree.height <= MAX_HEIGHT);
        let root = (tree.root, tree.len, None);
        check_node(tree, records, root, 0, &mut entries, &mut seen);
    }
    assert_eq!(entries.len() as u64, tree.len);
    let keys: HashSet<Vec<u8>> = seen.iter().map(|&id| tree.key(id).to_vec()).collect();
    let stored: HashSet<Vec<u8>> = records.map.keys().cloned().collect();
    assert_eq!(stored, keys, "the records are exactly the reachable nodes");
    if ordered {
        assert!(entries.windows(2).all(|pair| pair[0] < pair[1]), "ordered");
    }
    let mut header = Vec::new();
    tree.encode(&mut header);
    let decoded = Tree::decode(&mut header.as_slice()).unwrap();
    assert_eq!(
        Tree {
            limits: tree.limits,
            ..decoded
        },
        *tree
    );
    entries
}

fn check_node(
    tree: &Tree,
    records: &mut MemRecords,
    (id, count, separator): (u64, u64, Option<Separator>),
    depth: usize,
    entries: &mut Vec<Vec<u8>>,
    seen: &mut HashSet<u64>,
) {
    assert!(seen.insert(id), "node {id} reached twice");
    let node = tree
        .read(records, id, depth, count, &mut Vec::new())
        .unwrap();
    assert!(
        tree.limits.fits(&node) || node.items() == 1,
        "node {id}: {} items, {} bytes",
        node.items(),
        node.encoded_len()
    );
    if let Some(separator) = separator {
        assert_eq!(
            separator,
            node.first(tree.limits.separator_bytes),
            "node {id}"
        );
    }
    match node {
        Node::Leaf(leaf) => entries.extend(leaf),
        Node::Internal(children) => {
            assert!(children.len() >= 2);
            for child in children {
                let link = (child.id, child.count, Some(child.first));
                check_node(tree, records, link, depth + 1, entries, seen);
            }
        }
    }
}

/// Runs `update`, checking it read and wrote O(height) records.
fn bounded<T>(
    tree: &mut Tree,
    records: &mut MemRecords,
    reads_per_level: u64,
    update: impl FnOnce(&mut Tree, &mut MemRecords) -> T,
) -> T {
    let (gets, writes, height) = (records.gets, records.writes, tree.height);
    let out = update(tree, records);
    let levels = u64::from(height.max(tree.height)) + 2;
    let (read, written) = (records.gets - gets, records.writes - writes);
    assert!(
        read <= reads_per_level * levels,
        "{read} reads at height {height}"
    );
    assert!(written <= 4 * levels, "{written} writes at height {height}");
    out
}

fn collect(tree: &Tree, records: &mut MemRecords, rank: u64, forward: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut expected = rank;
    let visit = |at: u64, entry: &[u8]| {
        assert_eq!(at, expected);
        expected = if forward { at + 1 } else { at.wrapping_sub(1) };
        out.push(entry.to_vec());
        ControlFlow::Continue(())
    };
    if forward {
        tree.range(records, rank, visit).unwrap();
    } else {
        tree.range_rev(records, rank, visit).unwrap();
    }
    out
}

/// A small deterministic generator for bulk operations.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

#[test]
fn header_round_trips() {
    let tree = Tree {
        id: 0x0102_0304_0506_0708,
        len: 1000,
        root: 41,
        next_node: 42,
        height: 3,
        limits: Limits::DEFAULT,
    };
    let mut bytes = Vec::new();
    tree.encode(&mut bytes);
    assert_eq!(bytes.len(), HEADER_BYTES);
    bytes.extend_from_slice(b"tail");
    let mut rest = bytes.as_slice();
    assert_eq!(Tree::decode(&mut rest).unwrap(), tree);
    assert_eq!(rest, b"tail");
    let mut empty = Vec::new();
    Tree::new(9).encode(&mut empty);
    assert_eq!(Tree::decode(&mut empty.as_slice()).unwrap(), Tree::new(9));
}

#[test]
fn damaged_headers_are_corrupt() {
    let good = Tree {
        id: 1,
        len: 5,
        root: 3,
        next_node: 4,
        height: 2,
        limits: Limits::DEFAULT,
    };
    let bad = [
        Tree { len: 0, ..good },
        Tree { root: 0, ..good },
        Tree { height: 0, ..good },
        Tree {
            height: MAX_HEIGHT + 1,
            ..good
        },
        Tree { root: 4, ..good },
        Tree {
            len: 0,
            root: 0,
            height: 0,
            next_node: 0,
            ..good
        },
    ];
    for tree in bad {
        let mut bytes = Vec::new();
        tree.encode(&mut bytes);
        let mut rest = bytes.as_slice();
        assert!(
            matches!(Tree::decode(&mut rest), Err(Error::Corrupt(_))),
            "{tree:?}"
        );
        assert_eq!(rest.len(), HEADER_BYTES, "a failed decode consumes nothing");
    }
    let mut bytes = Vec::new();
    good.encode(&mut bytes);
    for cut in 0..HEADER_BYTES {
        let mut rest = &bytes[..cut];
        assert!(matches!(Tree::decode(&mut rest), Err(Error::Corrupt(_))));
    }
}

fn leaf_bytes(entries: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    Node::Leaf(entries.iter().map(|entry| entry.to_vec()).collect()).encode(&mut out);
    out
}

fn internal_bytes(children: &[(u64, u64)]) -> Vec<u8> {
    let children = children
        .iter()
        .map(|&(id, count)| Child {
            id,
            count,
            first: Separator::of(b"sep", 8),
        })
        .collect();
    let mut out = Vec::new();
    Node::Internal(children).encode(&mut out);
    out
}

#[test]
fn damaged_nodes_are_corrupt() {
    let leaf = leaf_bytes(&[b"one", b"two"]);
    assert_eq!(
        Node::decode(&leaf).unwrap(),
        Node::Leaf(vec![b"one".to_vec(), b"two".to_vec()])
    );
    let internal = internal_bytes(&[(5, 2), (6, 3)]);
    assert_eq!(Node::decode(&internal).unwrap().count(), 5);
    let mut bad: Vec<Vec<u8>> = Vec::new();
    for cut in 0..leaf.len() {
        bad.push(leaf[..cut].to_vec());
    }
    for cut in 0..internal.len() {
        bad.push(internal[..cut].to_vec());
    }
    let mut counted = leaf.clone();
    counted[1..5].copy_from_slice(&1000u32.to_le_bytes());
    bad.push(counted);
    let mut huge = leaf.clone();
    huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
    bad.push(huge);
    let mut kind = leaf.clone();
    kind[0] = 7;
    bad.push(kind);
    let mut trailing = leaf.clone();
    trailing.push(0);
    bad.push(trailing);
    bad.push(leaf_bytes(&[]));
    bad.push(internal_bytes(&[(5, 2)]));
    bad.push(internal_bytes(&[(5, 0), (6, 1)]));
    bad.push(internal_bytes(&[(0, 1), (6, 1)]));
    bad.push(internal_bytes(&[(5, u64::MAX), (6, 1)]));
    let mut flag = internal.clone();
    flag[NODE_HEAD_BYTES + 16] = 2;
    bad.push(flag);
    for bytes in bad {
        assert!(
            matches!(Node::decode(&bytes), Err(Error::Corrupt(_))),
            "{bytes:?}"
        );
    }
}

/// A tree of height >= 3 over tiny nodes.
fn sample_tree() -> (Tree, MemRecords) {
    let mut records = MemRecords::default();
    let mut tree = Tree::with_limits(3, TINY);
    for n in 0..200u32 {
        let entry = format!("entry {n:05}").into_bytes();
        tree.insert_sorted(&mut records, &entry).unwrap();
    }
    assert!(tree.height >= 3);
    (tree, records)
}

/// Runs every read-only and updating operation on (a copy of) a tree whose records may be
/// damaged: each succeeds (`true`) or fails with `Corrupt` (`false`), never panics.
fn exercise(tree: &Tree, records: &MemRecords) -> Vec<bool> {
    let mut results = Vec::new();
    let len = tree.len;
    let mut run = |op: &dyn Fn(&mut Tree, &mut MemRecords) -> Result<()>| {
        let (mut tree, mut records) = (*tree, records.clone());
        results.push(match op(&mut tree, &mut records) {
            Ok(()) => true,
            Err(Error::Corrupt(_)) => false,
            Err(error) => panic!("damage is reported as Corrupt, not {error}"),
        });
    };
    for rank in [0, len / 3, len / 2, len - 1] {
        run(&|t, r| t.get(r, rank, &mut Vec::new()).map(drop));
        run(&|t, r| t.range(r, rank, |_, _| ControlFlow::Continue(())));
        run(&|t, r| t.range_rev(r, rank, |_, _| ControlFlow::Continue(())));
        run(&|t, r| t.insert_at(r, rank, b"new"));
        run(&|t, r| t.remove_at(r, rank).map(drop));
        run(&|t, r| t.replace_at(r, rank, b"x"));
    }
    for probe in [&b""[..], b"entry 00100", b"entry", b"zzz"] {
        run(&|t, r| t.lower_bound(r, probe).map(drop));
        run(&|t, r| t.upper_bound(r, probe).map(drop));
        run(&|t, r| t.remove_sorted(r, probe).map(drop));
    }
    run(&|t, r| {
        while !t.is_empty() {
            t.remove_at(r, t.len() / 2)?;
        }
        Ok(())
    });
    run(&|t, r| t.clear(r));
    results
}

#[test]
fn damaged_trees_are_corrupt_not_panics() {
    let (tree, records) = sample_tree();
    let keys: Vec<Vec<u8>> = records.map.keys().cloned().collect();
    let leaf_key = keys
        .iter()
        .find(|key| Node::decode(&records.map[*key]).unwrap().items() >= 2)
        .unwrap()
        .clone();
    let internal_key = keys
        .iter()
        .find(|key| records.map[*key][0] == 1 && **key != tree.key(tree.root).to_vec())
        .unwrap()
        .clone();
    let mut cases: Vec<MemRecords> = Vec::new();
    let mut damage = |key: &Vec<u8>, change: &dyn Fn(&mut Vec<u8>)| {
        let mut damaged = records.clone();
        change(damaged.map.get_mut(key).unwrap());
        cases.push(damaged);
    };
    for key in [&leaf_key, &internal_key] {
        damage(key, &|bytes| bytes.truncate(bytes.len() - 1));
        damage(key, &|bytes| bytes[0] = 9);
        damage(key, &|bytes| bytes[1] = bytes[1].wrapping_add(1));
        damage(key, &|bytes| bytes.push(0));
    }
    // A leaf with one entry fewer: its parent's count disagrees.
    damage(&leaf_key, &|bytes| {
        let mut node = Node::decode(bytes).unwrap();
        node.entries_mut().pop();
        bytes.clear();
        node.encode(bytes);
    });
    // A leaf where an internal node belongs, and a child id beyond next_node.
    let leaf = records.map[&leaf_key].clone();
    damage(&internal_key, &|bytes| *bytes = leaf.clone());
    damage(&internal_key, &|bytes| {
        bytes[NODE_HEAD_BYTES..NODE_HEAD_BYTES + 8].copy_from_slice(&u64::MAX.to_le_bytes())
    });
    let mut missing = records.clone();
    missing.map.remove(&internal_key);
    cases.push(missing);
    for damaged in &cases {
        let results = exercise(&tree, damaged);
        assert!(results.iter().any(|ok| !ok), "some operation notices");
    }
    assert!(exercise(&tree, &records).iter().all(|ok| *ok));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random byte damage to one node: whatever the operations do, they do not panic.
    #[test]
    fn random_damage_never_panics(
        which in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let (tree, mut records) = sample_tree();
        let key = which.get(&records.map.keys().cloned().collect::<Vec<_>>()).clone();
        let bytes = records.map.get_mut(&key).unwrap();
        let at = at.index(bytes.len());
        if cut {
            bytes.truncate(at);
        } else {
            bytes[at] = byte;
        }
        exercise(&tree, &records);
    }
}

#[test]
fn operations_check_their_ranks() {
    let (tree, records) = sample_tree();
    let len = tree.len;
    let panics = |op: &dyn Fn(&mut Tree, &mut MemRecords)| {
        let (mut tree, mut records) = (tree, records.clone());
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&mut tree, &mut records)))
            .is_err()
    };
    assert!(panics(&|t, r| t.insert_at(r, len + 1, b"x").unwrap()));
    assert!(panics(&|t, r| drop(t.remove_at(r, len).unwrap())));
    assert!(panics(&|t, r| t.replace_at(r, len, b"x").unwrap()));
    assert!(panics(&|t, r| t
        .range_rev(r, len, |_, _| ControlFlow::Continue(()))
        .unwrap()));
    let (mut tree, mut records) = (tree, records);
    assert!(!tree.get(&mut records, len, &mut Vec::new()).unwrap());
    tree.range(&mut records, len, |_, _| panic!("nothing past the end"))
        .unwrap();
    let empty = Tree::new(1);
    empty
        .range_rev(&mut records, 5, |_, _| panic!("nothing in an empty tree"))
        .unwrap();
    tree.clear(&mut records).unwrap();
    assert!(records.map.is_empty());
}

#[derive(Clone, Debug)]
enum ListOp {
    Insert(prop::sample::Index, Vec<u8>),
    Remove(prop::sample::Index),
    Replace(prop::sample::Index, Vec<u8>),
    Get(prop::sample::Index),
    Range(prop::sample::Index, u8),
    RangeRev(prop::sample::Index, u8),
    /// Inserts this many entries: at the front (0), the back (1) or anywhere.
    Grow(u16, u8, u64),
    /// Removes this many entries at random.
    Shrink(u16, u64),
}

fn entry() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..40)
}

fn list_op() -> impl Strategy<Value = ListOp> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        4 => (index(), entry()).prop_map(|(at, e)| ListOp::Insert(at, e)),
        3 => index().prop_map(ListOp::Remove),
        2 => (index(), entry()).prop_map(|(at, e)| ListOp::Replace(at, e)),
        1 => index().prop_map(ListOp::Get),
        1 => (index(), any::<u8>()).prop_map(|(at, n)| ListOp::Range(at, n)),
        1 => (index(), any::<u8>()).prop_map(|(at, n)| ListOp::RangeRev(at, n)),
        1 => (0..1500u16, 0..3u8, any::<u64>()).prop_map(|(n, how, seed)| ListOp::Grow(n, how, seed)),
        1 => (0..1500u16, any::<u64>()).prop_map(|(n, seed)| ListOp::Shrink(n, seed)),
    ]
}

/// Applies one positional operation to the tree and the model, checking results and I/O.
fn apply_list(tree: &mut Tree, records: &mut MemRecords, model: &mut Vec<Vec<u8>>, op: ListOp) {
    let len = model.len();
    match op {
        ListOp::Insert(at, entry) => {
            let rank = at.index(len + 1);
            bounded(tree, records, 4, |t, r| t.insert_at(r, rank as u64, &entry)).unwrap();
            model.insert(rank, entry);
        }
        ListOp::Remove(_) | ListOp::Replace(..) | ListOp::Get(_) if len == 0 => {}
        ListOp::Remove(at) => {
            let rank = at.index(len);
            let removed = bounded(tree, records, 4, |t, r| t.remove_at(r, rank as u64)).unwrap();
            assert_eq!(removed, model.remove(rank));
        }
        ListOp::Replace(at, entry) => {
            let rank = at.index(len);
            bounded(tree, records, 4, |t, r| {
                t.replace_at(r, rank as u64, &entry)
            })
            .unwrap();
            model[rank] = entry;
        }
        ListOp::Get(at) => {
            let rank = at.index(len);
            let mut out = Vec::new();
            assert!(tree.get(records, rank as u64, &mut out).unwrap());
            assert_eq!(out, model[rank]);
        }
        ListOp::Range(at, take) => {
            let rank = at.index(len + 1);
            let take = usize::from(take).max(1);
            let (gets, mut seen) = (records.gets, Vec::new());
            tree.range(records, rank as u64, |at, entry| {
                seen.push((at, entry.to_vec()));
                if seen.len() == take {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
            // The nodes a range of k entries meets: at most k leaves, and per level two partly
            // covered nodes plus whole ones, which have two children each.
            let read = records.gets - gets;
            assert!(
                read <= 2 * (u64::from(tree.height) + seen.len() as u64),
                "{read} reads"
            );
            let expected: Vec<_> = (rank..len.min(rank + take))
                .map(|at| (at as u64, model[at].clone()))
                .collect();
            assert_eq!(seen, expected);
        }
        ListOp::RangeRev(_, _) if len == 0 => {}
        ListOp::RangeRev(at, take) => {
            let rank = at.index(len);
            let take = usize::from(take).max(1);
            let mut seen = Vec::new();
            tree.range_rev(records, rank as u64, |at, entry| {
                seen.push((at, entry.to_vec()));
                if seen.len() == take {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
            let expected: Vec<_> = (rank.saturating_sub(take - 1)..=rank)
                .rev()
                .map(|at| (at as u64, model[at].clone()))
                .collect();
            assert_eq!(seen, expected);
        }
        ListOp::Grow(count, how, seed) => {
            let mut mix = Mix(seed | 1);
            for n in 0..count {
                let rank = match how {
                    0 => 0,
                    1 => model.len(),
                    _ => mix.below(model.len() as u64 + 1) as usize,
                };
                let entry = format!("{seed:x}.{n}").into_bytes();
                bounded(tree, records, 4, |t, r| t.insert_at(r, rank as u64, &entry)).unwrap();
                model.insert(rank, entry);
            }
        }
        ListOp::Shrink(count, seed) => {
            let mut mix = Mix(seed | 1);
            for _ in 0..usize::from(count).min(model.len()) {
                let rank = mix.below(model.len() as u64) as usize;
                let removed =
                    bounded(tree, records, 4, |t, r| t.remove_at(r, rank as u64)).unwrap();
                assert_eq!(removed, model.remove(rank));
            }
        }
    }
}

fn run_list(limits: Limits, ops: Vec<ListOp>) -> u8 {
    let mut records = MemRecords::default();
    let mut tree = Tree::with_limits(11, limits);
    let mut model = Vec::new();
    let mut tallest = 0;
    for op in ops {
        apply_list(&mut tree, &mut records, &mut model, op);
        tallest = tallest.max(tree.height);
        assert_eq!(check(&tree, &mut records, false), model);
        if !model.is_empty() {
            let at = model.len() / 3;
            assert_eq!(collect(&tree, &mut records, at as u64, true), model[at..]);
            let mut back = collect(&tree, &mut records, at as u64, false);
            back.reverse();
            assert_eq!(back, model[..=at]);
        }
    }
    let mut mix = Mix(0x9e37_79b9_7f4a_7c15);
    while !model.is_empty() {
        let rank = mix.below(model.len() as u64) as usize;
        let removed = bounded(&mut tree, &mut records, 4, |t, r| {
            t.remove_at(r, rank as u64)
        });
        assert_eq!(removed.unwrap(), model.remove(rank));
    }
    assert!(records.map.is_empty(), "an emptied tree leaves no record");
    assert_eq!((tree.len, tree.root, tree.height), (0, 0, 0));
    tallest
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn positional_model(
        tiny in any::<bool>(),
        ops in prop::collection::vec(list_op(), 1..40),
    ) {
        run_list(if tiny { TINY } else { SMALL }, ops);
    }
}

#[test]
fn lists_grow_deep_and_shrink_to_nothing() {
    let ops = vec![
        ListOp::Grow(1500, 1, 1),
        ListOp::Grow(1500, 0, 2),
        ListOp::Grow(1500, 2, 3),
        ListOp::Shrink(2000, 4),
        ListOp::Grow(500, 2, 5),
    ];
    assert!(run_list(TINY, ops.clone()) >= 6);
    assert!(run_list(SMALL, ops) >= 3);
}

#[derive(Clone, Debug)]
enum SetOp {
    Insert(Vec<u8>),
    Remove(Vec<u8>),
    RemovePresent(prop::sample::Index),
    RemoveAt(prop::sample::Index),
    Bounds(Vec<u8>),
    Range(prop::sample::Index, u8),
    Grow(u16, u64),
}

/// Sorted-set entries (a score key and a member) and short arbitrary strings: shared prefixes,
/// equal scores, and separators cut in the middle of a score.
fn set_entry() -> impl Strategy<Value = Vec<u8>> {
    let scores = prop::sample::select(vec![f64::NEG_INFINITY, -2.5, 0.0, 1.0, 1.5, 1e9]);
    let member = prop::collection::vec(prop::sample::select(b"abz\x00\xff".to_vec()), 0..6);
    prop_oneof![
        3 => (scores, member).prop_map(|(score, member)| {
            let mut entry = score_key(score).to_vec();
            entry.extend(member);
            entry
        }),
        1 => prop::collection::vec(any::<u8>(), 0..12),
    ]
}

fn set_op() -> impl Strategy<Value = SetOp> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        6 => set_entry().prop_map(SetOp::Insert),
        2 => set_entry().prop_map(SetOp::Remove),
        2 => index().prop_map(SetOp::RemovePresent),
        1 => index().prop_map(SetOp::RemoveAt),
        3 => set_entry().prop_map(SetOp::Bounds),
        1 => (index(), any::<u8>()).prop_map(|(at, n)| SetOp::Range(at, n)),
        1 => (0..1200u16, any::<u64>()).prop_map(|(n, seed)| SetOp::Grow(n, seed)),
    ]
}

/// The model's rank of `probe`: how many entries are below it.
fn rank_of(model: &BTreeSet<Vec<u8>>, probe: &[u8]) -> u64 {
    use std::ops::Bound;
    model
        .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(probe)))
        .count() as u64
}

fn apply_set(tree: &mut Tree, records: &mut MemRecords, model: &mut BTreeSet<Vec<u8>>, op: SetOp) {
    // Reads per level an ordered update may need: the descent, a sibling, and cut separators
    // resolved along a subtree's left edge at each step of a level's binary search (<= 4 steps
    // over at most 12 children).
    let ordered_reads = 2 + 4 * (u64::from(tree.height) + 1);
    match op {
        SetOp::Insert(entry) if model.contains(&entry) => {}
        SetOp::Insert(entry) => {
            let rank = bounded(tree, records, ordered_reads, |t, r| {
                t.insert_sorted(r, &entry)
            });
            assert_eq!(rank.unwrap(), rank_of(model, &entry));
            model.insert(entry);
        }
        SetOp::Remove(entry) => {
            let expected = model.contains(&entry).then(|| rank_of(model, &entry));
            let rank = bounded(tree, records, ordered_reads, |t, r| {
                t.remove_sorted(r, &entry)
            });
            assert_eq!(rank.unwrap(), expected);
            model.remove(&entry);
        }
        SetOp::RemovePresent(_) | SetOp::RemoveAt(_) if model.is_empty() => {}
        SetOp::RemovePresent(at) => {
            let entry = model.iter().nth(at.index(model.len())).unwrap().clone();
            let rank = bounded(tree, records, ordered_reads, |t, r| {
                t.remove_sorted(r, &entry)
            });
            assert_eq!(rank.unwrap(), Some(rank_of(model, &entry)));
            model.remove(&entry);
        }
        SetOp::RemoveAt(at) => {
            let rank = at.index(model.len());
            let removed = bounded(tree, records, 4, |t, r| t.remove_at(r, rank as u64)).unwrap();
            let entry = model.iter().nth(rank).unwrap().clone();
            assert_eq!(removed, entry);
            model.remove(&entry);
        }
        SetOp::Bounds(probe) => {
            let lower = tree.lower_bound(records, &probe).unwrap();
            assert_eq!(lower, rank_of(model, &probe));
            let upper = tree.upper_bound(records, &probe).unwrap();
            assert_eq!(upper, lower + u64::from(model.contains(&probe)));
        }
        SetOp::Range(at, take) => {
            let rank = at.index(model.len() + 1);
            let take = usize::from(take).max(1);
            let mut seen = Vec::new();
            tree.range(records, rank as u64, |_, entry| {
                seen.push(entry.to_vec());
                if seen.len() == take {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
            let expected: Vec<_> = model.iter().skip(rank).take(take).cloned().collect();
            assert_eq!(seen, expected);
        }
        SetOp::Grow(count, seed) => {
            let mut mix = Mix(seed | 1);
            for _ in 0..count {
                let mut entry = score_key((mix.below(8) as f64) - 3.0).to_vec();
                entry.extend_from_slice(&mix.next().to_be_bytes()[..mix.below(9) as usize]);
                if model.insert(entry.clone()) {
                    let rank = tree.insert_sorted(records, &entry).unwrap();
                    assert_eq!(rank, rank_of(model, &entry));
                }
            }
        }
    }
}

fn run_set(limits: Limits, ops: Vec<SetOp>) {
    let mut records = MemRecords::default();
    let mut tree = Tree::with_limits(12, limits);
    let mut model = BTreeSet::new();
    for op in ops {
        apply_set(&mut tree, &mut records, &mut model, op);
        let entries = check(&tree, &mut records, true);
        assert!(entries.iter().eq(model.iter()));
    }
    for entry in model.clone() {
        assert_eq!(tree.remove_sorted(&mut records, &entry).unwrap(), Some(0));
    }
    assert!(records.map.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn ordered_model(tiny in any::<bool>(), ops in prop::collection::vec(set_op(), 1..60)) {
        run_set(if tiny { TINY } else { SMALL }, ops);
    }
}

/// Entries from empty to 100 KiB with the real limits: byte-based splits, single-entry leaves,
/// and (ordered) separators cut at 128 bytes that the routing must resolve by reading.
#[test]
fn mixed_entry_sizes() {
    let mut mix = Mix(77);
    let sized = |mix: &mut Mix, tag: u64| {
        let len = match mix.below(10) {
            0..=4 => mix.below(40),
            5..=7 => 1000 + mix.below(4000),
            _ => (20 << 10) + mix.below(80 << 10),
        } as usize;
        let mut entry = vec![b'p'; len];
        // A distinct suffix keeps ordered entries unique behind long shared prefixes.
        entry.extend_from_slice(&tag.to_be_bytes());
        entry
    };
    let mut records = MemRecords::default();
    let mut list = Tree::new(20);
    let mut model: Vec<Vec<u8>> = Vec::new();
    for step in 0..400u64 {
        if step % 4 == 3 && !model.is_empty() {
            let rank = mix.below(model.len() as u64) as usize;
            assert_eq!(
                list.remove_at(&mut records, rank as u64).unwrap(),
                model.remove(rank)
            );
        } else if step % 7 == 5 && !model.is_empty() {
            let rank = mix.below(model.len() as u64) as usize;
            let entry = sized(&mut mix, step);
            list.replace_at(&mut records, rank as u64, &entry).unwrap();
            model[rank] = entry;
        } else {
            let rank = mix.below(model.len() as u64 + 1) as usize;
            let entry = sized(&mut mix, step);
            list.insert_at(&mut records, rank as u64, &entry).unwrap();
            model.insert(rank, entry);
        }
        if step % 20 == 0 {
            assert_eq!(check(&list, &mut records, false), model);
        }
    }
    assert_eq!(check(&list, &mut records, false), model);
    assert!(list.height >= 2);
    list.clear(&mut records).unwrap();
    assert!(records.map.is_empty());

    let mut set = Tree::new(21);
    let mut model = BTreeSet::new();
    for step in 0..300u64 {
        let tag = mix.below(150);
        let entry = sized(&mut mix, tag);
        if step % 3 == 2 {
            let expected = model.contains(&entry).then(|| rank_of(&model, &entry));
            assert_eq!(set.remove_sorted(&mut records, &entry).unwrap(), expected);
            model.remove(&entry);
        } else if model.insert(entry.clone()) {
            let rank = set.insert_sorted(&mut records, &entry).unwrap();
            assert_eq!(rank, rank_of(&model, &entry));
        }
        let tag = mix.below(150);
        let probe = sized(&mut mix, tag);
        let lower = set.lower_bound(&mut records, &probe).unwrap();
        assert_eq!(lower, rank_of(&model, &probe));
    }
    assert!(check(&set, &mut records, true).iter().eq(model.iter()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Puts refused above a size: a failed update leaves the header, the records and the
    /// content exactly as they were; later updates go on from there.
    #[test]
    fn failed_writes_leave_the_old_tree(
        limit in 60usize..200,
        ops in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, 0usize..45), 1..160),
    ) {
        let mut records = MemRecords::default();
        let mut tree = Tree::with_limits(13, TINY);
        let mut model: Vec<Vec<u8>> = Vec::new();
        for (step, (at, kind, size)) in ops.into_iter().enumerate() {
            // Fill freely at first, then refuse large writes.
            records.max_value_bytes = (step >= 60).then_some(limit);
            let entry = vec![step as u8; size];
            let (before, stored) = (tree, records.map.clone());
            let result = match kind {
                1 if !model.is_empty() => {
                    let rank = at.index(model.len());
                    tree.remove_at(&mut records, rank as u64).map(|removed| {
                        assert_eq!(removed, model.remove(rank));
                    })
                }
                2 if !model.is_empty() => {
                    let rank = at.index(model.len());
                    tree.replace_at(&mut records, rank as u64, &entry).map(|()| {
                        model[rank] = entry.clone();
                    })
                }
                _ => {
                    let rank = at.index(model.len() + 1);
                    tree.insert_at(&mut records, rank as u64, &entry).map(|()| {
                        model.insert(rank, entry.clone());
                    })
                }
            };
            if let Err(error) = result {
                prop_assert!(matches!(error, Error::Store(_)));
                prop_assert_eq!(tree, before);
                prop_assert_eq!(&records.map, &stored);
            }
            records.max_value_bytes = None;
            prop_assert_eq!(&check(&tree, &mut records, false), &model);
        }
    }
}
