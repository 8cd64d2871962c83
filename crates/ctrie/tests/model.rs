//! Model-based property tests: a family of tries (the live one and its writable snapshots) and
//! read-only snapshots against `HashMap` models, under hashers that force collisions and deep
//! tries. After a snapshot, changes to either side must be invisible to the other.

use prefixkv_ctrie::{CTrie, ReadOnlySnapshot};
use proptest::prelude::*;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Hash of a `u64` key = `(key * multiplier) & mask`.
#[derive(Clone, Copy, Debug)]
struct Shaped {
    multiplier: u64,
    mask: u64,
}

struct ShapedHasher(Shaped, u64);

impl Hasher for ShapedHasher {
    fn finish(&self) -> u64 {
        self.1.wrapping_mul(self.0.multiplier) & self.0.mask
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.1 = self.1.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.1 = value;
    }
}

impl BuildHasher for Shaped {
    type Hasher = ShapedHasher;
    fn build_hasher(&self) -> ShapedHasher {
        ShapedHasher(*self, 0)
    }
}

#[derive(Clone, Debug)]
enum Step {
    Insert(usize, u64, u32),
    Remove(usize, u64),
    PutIfAbsent(usize, u64, u32),
    Replace(usize, u64, u32),
    CompareAndReplace(usize, u64, u32, u32),
    RemoveIf(usize, u64, u32),
    Get(usize, u64),
    Snapshot(usize),
    ReadOnlySnapshot(usize),
    Clear(usize),
}

fn step(keys: u64) -> impl Strategy<Value = Step> {
    let trie = 0usize..4;
    let key = 0..keys;
    let value = 0u32..4;
    prop_oneof![
        6 => (trie.clone(), key.clone(), value.clone()).prop_map(|(t, k, v)| Step::Insert(t, k, v)),
        4 => (trie.clone(), key.clone()).prop_map(|(t, k)| Step::Remove(t, k)),
        1 => (trie.clone(), key.clone(), value.clone()).prop_map(|(t, k, v)| Step::PutIfAbsent(t, k, v)),
        1 => (trie.clone(), key.clone(), value.clone()).prop_map(|(t, k, v)| Step::Replace(t, k, v)),
        1 => (trie.clone(), key.clone(), value.clone(), value.clone())
            .prop_map(|(t, k, a, b)| Step::CompareAndReplace(t, k, a, b)),
        1 => (trie.clone(), key.clone(), value.clone()).prop_map(|(t, k, v)| Step::RemoveIf(t, k, v)),
        2 => (trie.clone(), key).prop_map(|(t, k)| Step::Get(t, k)),
        1 => trie.clone().prop_map(Step::Snapshot),
        1 => trie.clone().prop_map(Step::ReadOnlySnapshot),
        1 => trie.prop_map(Step::Clear),
    ]
}

fn shapes() -> impl Strategy<Value = Shaped> {
    prop_oneof![
        Just(Shaped {
            multiplier: 0x9E37_79B9_7F4A_7C15,
            mask: u64::MAX
        }), // spread out
        Just(Shaped {
            multiplier: 1 << 50,
            mask: u64::MAX
        }), // deep chains
        Just(Shaped {
            multiplier: 1,
            mask: 3
        }), // LNodes
        Just(Shaped {
            multiplier: 0x9E37_79B9_7F4A_7C15,
            mask: 0xF0F0
        }), // mixed
    ]
}

type Live = (CTrie<u64, u32, Shaped>, HashMap<u64, u32>);
type Frozen = (ReadOnlySnapshot<u64, u32, Shaped>, HashMap<u64, u32>);

fn assert_same<V: Eq + std::fmt::Debug>(
    trie_entries: impl Iterator<Item = (u64, V)>,
    len: usize,
    model: &HashMap<u64, V>,
) {
    let entries: HashMap<u64, V> = trie_entries.collect();
    assert_eq!(&entries, model);
    assert_eq!(len, model.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn tries_and_snapshots_match_their_models(shape in shapes(), steps in prop::collection::vec(step(40), 1..300)) {
        let mut tries: Vec<Live> = vec![(CTrie::with_hasher(shape), HashMap::new())];
        let mut frozen: Vec<Frozen> = Vec::new();
        for step in steps {
            let count = tries.len();
            let pick = |index: usize| index % count;
            match step {
                Step::Insert(t, k, v) => {
                    let (trie, model) = &mut tries[pick(t)];
                    prop_assert_eq!(trie.insert(k, v), model.insert(k, v));
                }
                Step::Remove(t, k) => {
                    let (trie, model) = &mut tries[pick(t)];
                    prop_assert_eq!(trie.remove(&k), model.remove(&k));
                }
                Step::PutIfAbsent(t, k, v) => {
                    let (trie, model) = &mut tries[pick(t)];
                    let existing = model.get(&k).copied();
                    if existing.is_none() {
                        model.insert(k, v);
                    }
                    prop_assert_eq!(trie.put_if_absent(k, v), existing);
                }
                Step::Replace(t, k, v) => {
                    let (trie, model) = &mut tries[pick(t)];
                    let existing = model.get(&k).copied();
                    if existing.is_some() {
                        model.insert(k, v);
                    }
                    prop_assert_eq!(trie.replace(k, v), existing);
                }
                Step::CompareAndReplace(t, k, expected, new) => {
                    let (trie, model) = &mut tries[pick(t)];
                    let applies = model.get(&k) == Some(&expected);
                    if applies {
                        model.insert(k, new);
                    }
                    prop_assert_eq!(trie.compare_and_replace(k, &expected, new), applies);
                }
                Step::RemoveIf(t, k, expected) => {
                    let (trie, model) = &mut tries[pick(t)];
                    let applies = model.get(&k) == Some(&expected);
                    if applies {
                        model.remove(&k);
                    }
                    prop_assert_eq!(trie.remove_if(&k, &expected), applies);
                }
                Step::Get(t, k) => {
                    let (trie, model) = &tries[pick(t)];
                    prop_assert_eq!(trie.get(&k), model.get(&k).copied());
                }
                Step::Snapshot(t) => {
                    let (trie, model) = &tries[pick(t)];
                    let copy = (trie.snapshot(), model.clone());
                    if tries.len() < 4 {
                        tries.push(copy);
                    } else {
                        tries[pick(t + 1)] = copy;
                    }
                }
                Step::ReadOnlySnapshot(t) => {
                    let (trie, model) = &tries[pick(t)];
                    frozen.push((trie.read_only_snapshot(), model.clone()));
                }
                Step::Clear(t) => {
                    let (trie, model) = &mut tries[pick(t)];
                    trie.clear();
                    model.clear();
                }
            }
        }
        for (trie, model) in &tries {
            assert_same(trie.iter(), trie.len(), model);
            for key in 0..40 {
                prop_assert_eq!(trie.get(&key), model.get(&key).copied());
            }
        }
        for (snapshot, model) in &frozen {
            assert_same(snapshot.iter(), snapshot.len(), model);
            for key in 0..40 {
                prop_assert_eq!(snapshot.get(&key), model.get(&key).copied());
            }
        }
    }
}

#[test]
fn default_hasher_large_map_matches_model() {
    let trie: CTrie<u64, u64> = CTrie::new();
    let mut model = HashMap::new();
    for key in 0..100_000u64 {
        trie.insert(key, key ^ 0xABCD);
        model.insert(key, key ^ 0xABCD);
    }
    let frozen = trie.read_only_snapshot();
    for key in (0..100_000u64).step_by(3) {
        assert_eq!(trie.remove(&key), Some(key ^ 0xABCD));
    }
    assert_eq!(frozen.len(), 100_000);
    assert_same(frozen.iter(), frozen.len(), &model);
    model.retain(|key, _| key % 3 != 0);
    assert_same(trie.iter(), trie.len(), &model);
}
