//! Single-threaded tests of the trie's shape: collisions, contraction, compression, renewal,
//! and the structural invariants of a quiescent trie.

use crate::node::{locate, Branch, INode, Kind, BITS_PER_LEVEL};
use crate::protocol::Core;
use crate::sync::pin;
use crate::{CTrie, ReadOnlySnapshot};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A hasher whose hash of a `u64` key is `(key * multiplier) & mask`: a small mask forces
/// full-hash collisions (LNodes), a multiplier of `1 << 54` with a wide mask forces deep tries.
#[derive(Clone, Copy)]
pub(crate) struct ShapedHash {
    pub(crate) multiplier: u64,
    pub(crate) mask: u64,
}

pub(crate) struct ShapedHasher {
    shape: ShapedHash,
    value: u64,
}

impl Hasher for ShapedHasher {
    fn finish(&self) -> u64 {
        self.value.wrapping_mul(self.shape.multiplier) & self.shape.mask
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.value = self.value.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.value = value;
    }
}

impl BuildHasher for ShapedHash {
    type Hasher = ShapedHasher;
    fn build_hasher(&self) -> ShapedHasher {
        ShapedHasher {
            shape: *self,
            value: 0,
        }
    }
}

/// Counts of what a quiescent walk found.
#[derive(Default, Debug)]
struct Shape {
    leaves: usize,
    lists: usize,
    tombs: usize,
    max_level: u32,
}

/// Walks a quiescent trie and asserts its invariants.
fn check<K, V, S>(core: &Core<K, V, S>) -> Shape
where
    K: Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn walk<K, V, S>(
        core: &Core<K, V, S>,
        inode: &INode<K, V>,
        level: u32,
        prefix: u64,
        shape: &mut Shape,
    ) where
        K: Eq + Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let guard = pin();
        let main = core.gcas_read(inode, &guard);
        assert!(
            main.prev
                .load(std::sync::atomic::Ordering::SeqCst)
                .is_null(),
            "quiescent: all GCAS decided"
        );
        shape.max_level = shape.max_level.max(level);
        let prefix_mask = if level >= 64 {
            u64::MAX
        } else {
            (1u64 << level) - 1
        };
        match &main.kind {
            Kind::Branches(cnode) => {
                assert_eq!(cnode.bitmap.count_ones() as usize, cnode.branches.len());
                if level > 0 {
                    let lone_leaf =
                        cnode.branches.len() == 1 && matches!(cnode.branches[0], Branch::Single(_));
                    assert!(
                        !lone_leaf,
                        "a non-root CNode with one SNode must have been contracted"
                    );
                    assert!(
                        !cnode.branches.is_empty(),
                        "a non-root CNode is never empty"
                    );
                }
                for bit in 0..64u64 {
                    if cnode.bitmap & (1 << bit) == 0 {
                        continue;
                    }
                    let hash_here = prefix | (bit << level);
                    let (_, position) = locate(cnode.bitmap, hash_here, level);
                    match &cnode.branches[position] {
                        Branch::Single(leaf) => {
                            assert_eq!(
                                leaf.hash & (prefix_mask | (63 << level)),
                                hash_here & (prefix_mask | (63 << level))
                            );
                            shape.leaves += 1;
                        }
                        Branch::Indirect(child) => {
                            walk(core, child, level + BITS_PER_LEVEL, hash_here, shape)
                        }
                    }
                }
            }
            Kind::Tomb(leaf) => {
                assert_eq!(leaf.hash & prefix_mask, prefix);
                shape.tombs += 1;
                shape.leaves += 1;
            }
            Kind::List(list) => {
                assert!(list.entries.len() >= 2);
                assert!(list
                    .entries
                    .iter()
                    .all(|leaf| leaf.hash == list.entries[0].hash));
                shape.lists += 1;
                shape.leaves += list.entries.len();
            }
            Kind::Failed(_) => panic!("FailedNode reachable from an INode"),
        }
    }
    let guard = pin();
    let root = core.read_root(false, &guard);
    let mut shape = Shape::default();
    walk(core, root, 0, 0, &mut shape);
    shape
}

fn shaped(multiplier: u64, mask: u64) -> CTrie<u64, u64, ShapedHash> {
    CTrie::with_hasher(ShapedHash { multiplier, mask })
}

impl<K, V, S> CTrie<K, V, S> {
    fn core(&self) -> &Core<K, V, S> {
        &self.core
    }
}

impl<K, V, S> ReadOnlySnapshot<K, V, S> {
    fn core(&self) -> &Core<K, V, S> {
        &self.core
    }
}

#[test]
fn basic_operations() {
    let trie: CTrie<u64, u64> = CTrie::new();
    assert!(trie.is_empty());
    assert_eq!(trie.insert(1, 10), None);
    assert_eq!(trie.insert(1, 11), Some(10));
    assert_eq!(trie.get(&1), Some(11));
    assert_eq!(trie.put_if_absent(1, 12), Some(11));
    assert_eq!(trie.put_if_absent(2, 20), None);
    assert_eq!(trie.replace(3, 30), None);
    assert_eq!(trie.get(&3), None);
    assert_eq!(trie.replace(2, 21), Some(20));
    assert!(!trie.compare_and_replace(2, &99, 22));
    assert!(trie.compare_and_replace(2, &21, 22));
    assert!(!trie.remove_if(&2, &21));
    assert!(trie.remove_if(&2, &22));
    assert_eq!(trie.remove(&1), Some(11));
    assert_eq!(trie.remove(&1), None);
    assert!(trie.is_empty());
}

#[test]
fn full_hash_collisions_use_list_nodes_and_shrink_back() {
    // Four distinct hashes for 200 keys: long LNodes under a 11-deep chain of CNodes.
    let trie = shaped(1, 3);
    for key in 0..200 {
        assert_eq!(trie.insert(key, key * 2), None);
    }
    let shape = check(trie.core());
    assert_eq!(shape.leaves, 200);
    assert_eq!(shape.lists, 4);
    assert!(shape.max_level > 60, "LNodes sit past the last hash level");
    for key in 0..200 {
        assert_eq!(trie.get(&key), Some(key * 2));
    }
    for key in 0..199 {
        assert_eq!(trie.remove(&key), Some(key * 2), "key {key}");
        assert_eq!(trie.get(&key), None);
    }
    let shape = check(trie.core());
    assert_eq!(
        (shape.leaves, shape.lists, shape.tombs),
        (1, 0, 0),
        "{shape:?}"
    );
    assert_eq!(
        shape.max_level, 0,
        "everything contracted back into the root"
    );
    assert_eq!(trie.get(&199), Some(398));
}

#[test]
fn deep_tries_contract_and_compress_on_remove() {
    // Keys differ only in bits 54.., so the trie is ten levels deep before keys part.
    let trie = shaped(1 << 54, u64::MAX);
    for key in 0..1024 {
        trie.insert(key, key);
    }
    let shape = check(trie.core());
    assert_eq!(shape.leaves, 1024);
    assert!(shape.max_level >= 60);
    for key in (0..1024).rev() {
        assert_eq!(trie.remove(&key), Some(key));
        // A remove cleans only its parent; a TNode it leaves one level up stays until an
        // operation passes it. A lookup down the shared chain cleans them all, level by level.
        if key > 0 {
            assert_eq!(trie.get(&0), Some(0));
        }
        let shape = check(trie.core());
        assert_eq!(shape.leaves, key as usize);
        assert_eq!(shape.tombs, 0, "lookups clean every TNode on their path");
    }
    assert_eq!(check(trie.core()).max_level, 0);
}

#[test]
fn snapshots_share_then_diverge() {
    let trie = shaped(1 << 50, u64::MAX);
    let mut model = HashMap::new();
    for key in 0..500u64 {
        trie.insert(key, key);
        model.insert(key, key);
    }
    let frozen = trie.read_only_snapshot();
    let copy = trie.snapshot();
    for key in 0..250u64 {
        trie.remove(&key);
        copy.insert(key, key + 1000);
    }
    for key in 500..600u64 {
        trie.insert(key, key);
    }
    assert_eq!(frozen.len(), 500);
    let frozen_entries: HashMap<u64, u64> = frozen.iter().collect();
    assert_eq!(frozen_entries, model);
    assert_eq!(trie.len(), 350);
    assert_eq!(copy.len(), 500);
    assert_eq!(copy.get(&3), Some(1003));
    assert_eq!(trie.get(&3), None);
    assert_eq!(frozen.get(&3), Some(3));
    let shape = check(frozen.core());
    assert_eq!(shape.leaves, 500);
    check(trie.core());
    check(copy.core());
}

#[test]
fn snapshot_of_snapshot_and_clear() {
    let trie: CTrie<u64, String> = CTrie::new();
    trie.clear(); // on a fresh trie: must not spin (romix port issue #2)
    assert!(trie.is_empty());
    for key in 0..100 {
        trie.insert(key, key.to_string());
    }
    let first = trie.snapshot();
    let second = first.snapshot();
    trie.clear();
    assert!(trie.is_empty());
    first.remove(&5);
    assert_eq!(first.len(), 99);
    assert_eq!(second.len(), 100);
    assert_eq!(second.get(&5).as_deref(), Some("5"));
    let frozen = second.read_only_snapshot();
    second.clear();
    assert_eq!(frozen.len(), 100);
    assert_eq!(second.len(), 0);
}

#[test]
fn iteration_yields_tomb_entries_of_a_frozen_trie() {
    let trie = shaped(1 << 54, u64::MAX);
    trie.insert(0, 0);
    trie.insert(1, 1);
    trie.insert(2, 2);
    // Removing 1 and 2 leaves key 0 alone deep in a chain: its CNode contracts into a TNode,
    // the remove cleans one parent, and TNodes further up stay until an operation passes them.
    trie.remove(&1);
    trie.remove(&2);
    let frozen = trie.read_only_snapshot();
    assert!(
        check(frozen.core()).tombs > 0,
        "the frozen trie still has a TNode"
    );
    assert_eq!(frozen.iter().collect::<Vec<_>>(), vec![(0, 0)]);
    assert_eq!(frozen.len(), 1);
    assert_eq!(frozen.get(&0), Some(0));
}

#[test]
fn string_keys_borrow_as_str() {
    let trie: CTrie<String, u32> = CTrie::new();
    trie.insert("alpha".to_string(), 1);
    assert_eq!(trie.get("alpha"), Some(1));
    assert_eq!(trie.remove("alpha"), Some(1));
    assert!(!trie.contains_key("alpha"));
}
