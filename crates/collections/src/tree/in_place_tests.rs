//! Tests of in-place updates: which records an update writes, allocates and deletes, that a
//! node keeps its id while it lives, and that a refused update (ordered use, too) leaves the old
//! tree readable.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::tests::{check, SMALL, TINY};
use super::*;
use crate::{score_key, MemRecords};

/// The node ids present (`TreeNode` records of the tree).
fn node_ids(records: &MemRecords) -> BTreeSet<u64> {
    records
        .map
        .keys()
        .map(|key| u64::from_be_bytes(key[10..18].try_into().unwrap()))
        .collect()
}

#[test]
fn appends_and_replaces_write_only_changed_nodes() {
    let mut records = MemRecords::default();
    let mut tree = Tree::new(5);
    let entry = [7u8; 24];
    for n in 0..20_000u64 {
        let (writes, ids) = (records.writes, node_ids(&records));
        tree.insert_at(&mut records, n, &entry).unwrap();
        let after = node_ids(&records);
        if after == ids {
            // No split: the leaf and its ancestors, each in place.
            assert_eq!(
                records.writes - writes,
                u64::from(tree.height),
                "append {n}"
            );
        }
        // Fresh ids only for new nodes; no node is replaced by a copy.
        assert!(ids.is_subset(&after), "append {n} deleted a node");
    }
    // 16-entry leaves packed full by appends (`Split::Append`), halved 16-child parents.
    assert_eq!(tree.height, 5);
    // ~20k appends: the nodes that exist plus few moves of records that outgrew their capacity.
    let nodes = node_ids(&records).len() as u64;
    assert!(
        records.allocations < nodes * 8,
        "{} allocations for {nodes} nodes",
        records.allocations
    );
    // A same-sized replace of an entry that is not a leaf's first: the leaf alone, in place.
    let (writes, allocations) = (records.writes, records.allocations);
    tree.replace_at(&mut records, 1001, &[9u8; 24]).unwrap();
    assert_eq!(records.writes - writes, 1);
    assert_eq!(records.allocations, allocations);
    let mut out = Vec::new();
    assert!(tree.get(&mut records, 1001, &mut out).unwrap());
    assert_eq!(out, [9u8; 24]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any positional update: surviving nodes keep their ids, new nodes get ids from
    /// `next_node` (never a deleted one's), and an update that neither splits nor merges writes
    /// at most one record per level (two where it balanced a node against a sibling) and
    /// deletes none.
    #[test]
    fn updates_keep_ids_and_rewrite_in_place(
        tiny in any::<bool>(),
        ops in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, 0usize..30), 1..300),
    ) {
        let mut records = MemRecords::default();
        let mut tree = Tree::with_limits(3, if tiny { TINY } else { SMALL });
        let mut model: Vec<Vec<u8>> = Vec::new();
        let mut ever = BTreeSet::new();
        for (step, (at, kind, size)) in ops.into_iter().enumerate() {
            let entry = vec![step as u8; size];
            let (before, ids) = (tree, node_ids(&records));
            let (writes, gets) = (records.writes, records.gets);
            match kind {
                1 if !model.is_empty() => {
                    let rank = at.index(model.len());
                    prop_assert_eq!(tree.remove_at(&mut records, rank as u64).unwrap(), model.remove(rank));
                }
                2 if !model.is_empty() => {
                    let rank = at.index(model.len());
                    tree.replace_at(&mut records, rank as u64, &entry).unwrap();
                    model[rank] = entry;
                }
                _ => {
                    let rank = at.index(model.len() + 1);
                    tree.insert_at(&mut records, rank as u64, &entry).unwrap();
                    model.insert(rank, entry);
                }
            }
            let after = node_ids(&records);
            for id in after.difference(&ids) {
                prop_assert!(*id >= before.next_node, "node {} reused or renamed", id);
                prop_assert!(!ever.contains(id));
            }
            let (written, read) = (records.writes - writes, records.gets - gets);
            if after == ids {
                // In place: one record per level, two where a sibling was balanced against.
                prop_assert!(written <= 2 * u64::from(tree.height.max(1)));
                if read <= u64::from(before.height) {
                    // The path alone was read: no sibling was touched.
                    prop_assert!(written <= u64::from(tree.height.max(1)));
                }
            }
            ever.extend(after.iter().copied());
            prop_assert_eq!(&check(&tree, &mut records, false), &model);
        }
    }

    /// Ordered use with refused large writes: a failed insert or removal leaves the header and
    /// the records as they were, and the old content readable.
    #[test]
    fn refused_ordered_updates_leave_the_old_tree(
        limit in 40usize..200,
        ops in prop::collection::vec((any::<bool>(), 0u16..400, 0usize..40), 1..200),
    ) {
        let mut records = MemRecords::default();
        let mut tree = Tree::with_limits(9, TINY);
        let mut model = BTreeMap::new();
        for (step, (insert, score, size)) in ops.into_iter().enumerate() {
            records.max_value_bytes = (step >= 80).then_some(limit);
            let mut entry = score_key(f64::from(score)).to_vec();
            entry.extend(std::iter::repeat_n(b'm', size));
            let (before, stored) = (tree, records.map.clone());
            let result = if insert && !model.contains_key(&entry) {
                tree.insert_sorted(&mut records, &entry).map(|_| {
                    model.insert(entry.clone(), ());
                })
            } else {
                tree.remove_sorted(&mut records, &entry).map(|rank| {
                    prop_assert_eq!(rank.is_some(), model.remove(&entry).is_some());
                    Ok(())
                }).and_then(|checked| checked.map_err(|error| panic!("{error}")))
            };
            if let Err(error) = result {
                prop_assert!(matches!(error, Error::Store(_)));
                prop_assert_eq!(tree, before);
                prop_assert_eq!(&records.map, &stored);
            }
            records.max_value_bytes = None;
            let content = check(&tree, &mut records, true);
            prop_assert!(content.iter().eq(model.keys()));
        }
    }
}

/// Removing whole first leaves: each removal takes exactly the entries `first_leaf` counted,
/// deletes that leaf's record, and the rest of the tree stays intact to the last entry.
#[test]
fn whole_first_leaves_come_off() {
    for limits in [TINY, SMALL, Limits::DEFAULT] {
        let mut records = MemRecords::default();
        let mut tree = Tree::with_limits(4, limits);
        let mut model: Vec<Vec<u8>> = Vec::new();
        for n in 0..3000u32 {
            let entry = n.to_be_bytes().to_vec();
            tree.insert_at(&mut records, u64::from(n), &entry).unwrap();
            model.push(entry);
        }
        let mut last = Vec::new();
        let mut removed = 0;
        while let Some(count) = tree.first_leaf(&mut records, &mut last).unwrap() {
            assert_eq!(last, model[removed + count as usize - 1]);
            // The count alone, from the leaf's parent (or the header for a lone leaf).
            assert_eq!(tree.first_leaf_len(&mut records).unwrap(), Some(count));
            let nodes = records.map.len();
            assert_eq!(tree.remove_first_leaf(&mut records).unwrap(), count);
            assert!(records.map.len() < nodes, "the leaf's record is deleted");
            removed += count as usize;
            assert_eq!(check(&tree, &mut records, false), model[removed..]);
            if removed > 2500 {
                break;
            }
        }
        assert_eq!(tree.len(), (model.len() - removed) as u64);
    }
    let (mut tree, mut records) = (Tree::new(1), MemRecords::default());
    assert_eq!(
        tree.first_leaf(&mut records, &mut Vec::new()).unwrap(),
        None
    );
    assert_eq!(tree.remove_first_leaf(&mut records).unwrap(), 0);
    assert_eq!(tree.first_leaf_len(&mut records).unwrap(), None);
    for n in 0..3u8 {
        tree.insert_at(&mut records, u64::from(n), &[n]).unwrap();
    }
    assert_eq!(tree.first_leaf_len(&mut records).unwrap(), Some(3));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The fast path's check of a node record accepts exactly what decoding accepts (a damaged
    /// node is `Error::Corrupt` on both paths, never a panic), and finds the same items.
    #[test]
    fn scanning_agrees_with_decoding(
        node in prop_oneof![
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..6)
                .prop_map(Node::Leaf),
            prop::collection::vec((0u64..4, 0u64..4, any::<bool>(), prop::collection::vec(any::<u8>(), 0..6)), 0..5)
                .prop_map(|children| Node::Internal(children.into_iter().map(|(id, count, truncated, bytes)| {
                    super::node::Child { id, count, first: super::node::Separator { bytes, truncated } }
                }).collect())),
        ],
        cut in any::<prop::sample::Index>(),
        flip in any::<Option<(prop::sample::Index, u8)>>(),
    ) {
        let mut bytes = Vec::new();
        node.encode(&mut bytes);
        if let Some((at, value)) = flip {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        let whole = bytes.clone();
        bytes.truncate(cut.index(bytes.len() + 1));
        for bytes in [&whole, &bytes] {
            let mut items = Vec::new();
            match (Node::decode(bytes), super::node::scan(bytes, &mut items)) {
                (Ok(decoded), Ok((leaf, count))) => {
                    prop_assert_eq!(decoded.is_leaf(), leaf);
                    prop_assert_eq!(decoded.count(), count);
                    prop_assert_eq!(decoded.items(), items.len());
                    if let Node::Leaf(entries) = &decoded {
                        for (entry, &(start, end)) in entries.iter().zip(&items) {
                            prop_assert_eq!(entry.as_slice(), &bytes[start..end]);
                        }
                    }
                }
                (Err(Error::Corrupt(_)), Err(Error::Corrupt(_))) => {}
                (decoded, scanned) => prop_assert!(false, "{:?} vs {:?}", decoded, scanned.map(|_| ())),
            }
        }
    }
}

/// Sorted-set inserts at random places (DEFAULT limits, 50k members of the shape ZADD stores):
/// on average little more than one write per level, no deletes, and rarely a new record.
#[test]
fn ordered_inserts_write_about_one_record_per_level() {
    let mut records = MemRecords::default();
    let mut tree = Tree::new(6);
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let (mut writes, mut allocations, mut inserts) = (0, 0, 0u64);
    for n in 0..50_000u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut entry = score_key((seed % 1_000_000) as f64).to_vec();
        entry.extend_from_slice(format!("element:{n:06}").as_bytes());
        let (w, a) = (records.writes, records.allocations);
        tree.insert_sorted(&mut records, &entry).unwrap();
        if n >= 40_000 {
            (writes, allocations, inserts) = (
                writes + records.writes - w,
                allocations + records.allocations - a,
                inserts + 1,
            );
        }
    }
    assert_eq!(tree.height, 5);
    let per_insert = writes as f64 / inserts as f64;
    eprintln!(
        "ordered inserts at 40k-50k entries: {per_insert:.2} writes, {:.3} allocations each",
        allocations as f64 / inserts as f64
    );
    assert!(
        per_insert < f64::from(tree.height) + 0.3,
        "{per_insert} writes per insert at height {}",
        tree.height
    );
    assert!(
        allocations * 4 < inserts,
        "{allocations} allocations for {inserts} inserts"
    );
}
