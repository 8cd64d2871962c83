//! The linear-hashing map against a `std` model: content and length after every step, the
//! records an update reads and writes (a small constant however large the map), no record left
//! behind, the scan guarantee while the table splits and merges under it, and what a failed
//! write leaves (the header the caller ends up with always describes the records exactly).

use std::collections::{BTreeSet, HashMap};

use prefixkv_collections::hash::{Hash, MIN_LOAD};
use prefixkv_collections::{object_of, Error, MemRecords, Records, Result, RECORD_KEY_BYTES};
use proptest::prelude::*;

/// Records an insert or a removal may read plus write (module docs of `hash`).
const MAX_RECORD_OPS: u64 = 6;

type Model = HashMap<Vec<u8>, Vec<u8>>;

fn rng(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn bucket_index(key: &[u8]) -> u64 {
    assert_eq!(key.len(), RECORD_KEY_BYTES);
    u64::from_be_bytes(key[10..].try_into().unwrap())
}

/// Every entry `for_each` visits, failing on a field visited twice.
fn content(hash: &Hash, records: &mut impl Records) -> Model {
    let mut seen = Model::new();
    hash.for_each(records, |field, value| {
        assert!(
            seen.insert(field.to_vec(), value.to_vec()).is_none(),
            "{field:?} visited twice"
        );
    })
    .unwrap();
    seen
}

/// `hash` over `records` is exactly `model`: content and length. Reading a bucket checks that
/// each of its entries hashes to it, so this is also what `get` finds. Records beyond the table
/// (leftovers of a failed step) are allowed only when `leftovers` is set.
fn assert_exact(hash: &Hash, records: &mut MemRecords, model: &Model, leftovers: bool) {
    assert_eq!(hash.len(), model.len() as u64);
    assert_eq!(&content(hash, records), model);
    for key in records.map.keys() {
        assert_eq!(object_of(key), Some(hash.id));
        assert!(
            leftovers || bucket_index(key) < hash.bucket_count(),
            "record {} beyond {} buckets",
            bucket_index(key),
            hash.bucket_count()
        );
    }
}

/// Every field of `model` reads back with its value.
fn assert_lookups(hash: &Hash, records: &mut MemRecords, model: &Model) {
    let mut value = Vec::new();
    for (field, expected) in model {
        assert!(hash.get(records, field, &mut value).unwrap(), "{field:?}");
        assert_eq!(&value, expected);
    }
}

/// A map under test next to its model, checking each step.
struct Checked {
    hash: Hash,
    records: MemRecords,
    model: Model,
    peak_buckets: u64,
    /// The most records one update read plus wrote.
    max_cost: u64,
}

impl Checked {
    fn new() -> Checked {
        Checked {
            hash: Hash::new(42),
            records: MemRecords::default(),
            model: Model::new(),
            peak_buckets: 1,
            max_cost: 0,
        }
    }

    fn cost(&self) -> u64 {
        self.records.gets + self.records.writes
    }

    fn after_update(&mut self, field: &[u8], cost: u64) {
        assert!(
            cost <= MAX_RECORD_OPS,
            "{cost} records for one update at {} entries",
            self.model.len()
        );
        assert_eq!(self.hash.len(), self.model.len() as u64);
        // No empty bucket keeps a record and nothing lies beyond the table.
        assert!(self.records.map.len() as u64 <= self.hash.bucket_count());
        self.peak_buckets = self.peak_buckets.max(self.hash.bucket_count());
        self.max_cost = self.max_cost.max(cost);
        self.check_get(field);
    }

    fn check_get(&mut self, field: &[u8]) {
        let mut value = Vec::new();
        let found = self.hash.get(&mut self.records, field, &mut value).unwrap();
        assert_eq!(found.then_some(&value), self.model.get(field));
    }

    fn insert(&mut self, field: &[u8], value: &[u8]) {
        let before = self.cost();
        let new = self.hash.insert(&mut self.records, field, value).unwrap();
        assert_eq!(
            new,
            self.model.insert(field.to_vec(), value.to_vec()).is_none()
        );
        self.after_update(field, self.cost() - before);
    }

    fn remove(&mut self, field: &[u8]) {
        let before = self.cost();
        let existed = self.hash.remove(&mut self.records, field).unwrap();
        assert_eq!(existed, self.model.remove(field).is_some());
        self.after_update(field, self.cost() - before);
    }

    fn check_all(&mut self) {
        assert_exact(&self.hash, &mut self.records, &self.model, false);
        assert_lookups(&self.hash, &mut self.records, &self.model);
    }

    fn remove_all(&mut self, seed: &mut u64) {
        let mut fields: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        fields.sort();
        while !fields.is_empty() {
            let field = fields.swap_remove((rng(seed) % fields.len() as u64) as usize);
            self.remove(&field);
        }
        assert!(self.records.map.is_empty(), "{:?}", self.records.map.keys());
        assert_eq!(self.hash, Hash::new(42));
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u8),
    Remove(u8),
    Get(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..16u8, any::<u8>()).prop_map(|(f, v)| Op::Insert(f, v)),
        2 => (0..16u8).prop_map(Op::Remove),
        1 => (0..16u8).prop_map(Op::Get),
    ]
}

fn small_field(f: u8) -> Vec<u8> {
    format!("field{f}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_small_alphabet_matches_the_model(ops in proptest::collection::vec(op(), 1..300)) {
        let mut map = Checked::new();
        for op in ops {
            match op {
                Op::Insert(f, v) => map.insert(&small_field(f), &vec![v; v as usize % 7]),
                Op::Remove(f) => map.remove(&small_field(f)),
                Op::Get(f) => map.check_get(&small_field(f)),
            }
        }
        map.check_all();
        map.remove_all(&mut 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Grows to hundreds of buckets and back to nothing, with removals, updates and lookups mixed
    /// in on the way up and insertions on the way down.
    #[test]
    fn many_fields_grow_and_shrink_the_table(seed in any::<u64>(), n in 2000u64..3000) {
        let mut state = seed;
        let mut map = Checked::new();
        let mut next = 0u64;
        while next < n {
            let roll = rng(&mut state) % 10;
            let present: Option<Vec<u8>> = (!map.model.is_empty() && roll < 4).then(|| {
                let pick = format!("k{}", rng(&mut state) % next).into_bytes();
                pick
            });
            match (roll, present) {
                (0..=1, Some(field)) => map.remove(&field),
                (2, Some(field)) => map.insert(&field, b"updated"),
                (3, Some(field)) => map.check_get(&field),
                _ => {
                    let field = format!("k{next}").into_bytes();
                    map.insert(&field, &next.to_le_bytes());
                    next += 1;
                }
            }
            if next.is_multiple_of(500) {
                map.check_all();
            }
        }
        map.check_all();
        prop_assert!(map.peak_buckets >= 150, "peak {} buckets", map.peak_buckets);
        // Down, with a few insertions of fresh fields.
        while map.model.len() > 10 {
            let mut fields: Vec<&Vec<u8>> = map.model.keys().collect();
            fields.sort();
            let field = fields[(rng(&mut state) % fields.len() as u64) as usize].clone();
            map.remove(&field);
            if rng(&mut state).is_multiple_of(8) {
                map.insert(format!("late{}", rng(&mut state)).as_bytes(), b"late");
            }
        }
        map.check_all();
        prop_assert!(map.hash.bucket_count() <= 10, "{} buckets", map.hash.bucket_count());
        map.remove_all(&mut state);
    }
}

/// Runs a scan to the end, applying `between` after every step; returns every field visited.
fn scan_while(
    hash: &mut Hash,
    records: &mut MemRecords,
    mut between: impl FnMut(&mut Hash, &mut MemRecords),
) -> BTreeSet<Vec<u8>> {
    let mut visited = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..1_000_000 {
        let gets = records.gets;
        cursor = hash
            .scan(records, cursor, |field, _| {
                visited.insert(field.to_vec());
            })
            .unwrap();
        assert_eq!(records.gets, gets + 1, "a scan step reads one bucket");
        if cursor == 0 {
            return visited;
        }
        between(hash, records);
    }
    panic!("the scan did not end");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Fields present for the whole scan are all visited, however the table grows and shrinks
    /// between steps (bursts of up to 60 insertions or removals of other fields).
    #[test]
    fn a_scan_visits_every_entry_present_throughout(
        stable in 0u64..300,
        volatile in 0u64..600,
        bursts in proptest::collection::vec((any::<bool>(), 0u64..60), 1..40),
        seed in any::<u64>(),
    ) {
        let mut hash = Hash::new(5);
        let mut records = MemRecords::default();
        let mut coming_and_going: Vec<Vec<u8>> = Vec::new();
        for i in 0..stable {
            hash.insert(&mut records, format!("stable{i}").as_bytes(), b"s").unwrap();
        }
        for i in 0..volatile {
            let field = format!("volatile{i}").into_bytes();
            hash.insert(&mut records, &field, b"v").unwrap();
            coming_and_going.push(field);
        }
        let (mut state, mut step, mut next) = (seed, 0, volatile);
        let visited = scan_while(&mut hash, &mut records, |hash, records| {
            let (grow, size) = bursts[step % bursts.len()];
            step += 1;
            for _ in 0..size {
                // Capped so that the scan ends: a table growing without bound at every step would
                // keep refining the cursor's intervals faster than the scan covers them.
                let grow = (grow && coming_and_going.len() < 1000) || coming_and_going.is_empty();
                if grow {
                    let field = format!("volatile{next}").into_bytes();
                    next += 1;
                    hash.insert(records, &field, b"v").unwrap();
                    coming_and_going.push(field);
                } else {
                    let at = (rng(&mut state) % coming_and_going.len() as u64) as usize;
                    let field = coming_and_going.swap_remove(at);
                    assert!(hash.remove(records, &field).unwrap());
                }
            }
            // Stable entries may change value: they stay present.
            if stable > 0 {
                let field = format!("stable{}", rng(&mut state) % stable);
                hash.insert(records, field.as_bytes(), b"t").unwrap();
            }
        });
        for i in 0..stable {
            prop_assert!(visited.contains(format!("stable{i}").as_bytes()), "stable{i} missed");
        }
        for field in &visited {
            prop_assert!(field.starts_with(b"stable") || field.starts_with(b"volatile"));
        }
    }
}

/// One long scan across a table growing from 100 to about 5000 entries and back: hundreds of
/// splits and merges between steps.
#[test]
fn a_scan_survives_growing_and_shrinking_by_far() {
    let mut hash = Hash::new(6);
    let mut records = MemRecords::default();
    for i in 0..100 {
        hash.insert(&mut records, format!("stable{i}").as_bytes(), b"s")
            .unwrap();
    }
    let (mut step, mut shapes) = (0u64, Vec::new());
    let visited = scan_while(&mut hash, &mut records, |hash, records| {
        // 60 steps up by 80 entries each, 60 steps down, and again.
        let phase = (step / 60) % 2;
        for i in 0..80 {
            let field = format!("volatile{}", (step % 60) * 80 + i);
            if phase == 0 {
                hash.insert(records, field.as_bytes(), b"v").unwrap();
            } else {
                hash.remove(records, field.as_bytes()).unwrap();
            }
        }
        shapes.push(hash.bucket_count());
        step += 1;
    });
    for i in 0..100 {
        assert!(
            visited.contains(format!("stable{i}").as_bytes()),
            "stable{i}"
        );
    }
    let (low, high) = (shapes.iter().min().unwrap(), shapes.iter().max().unwrap());
    assert!(
        *high > 500 && *low < 100,
        "buckets went from {low} to {high}"
    );
}

/// Records that fail the `fail_at`-th write (put or delete, counting from 0) without applying
/// it: a store refusing a write (too large, out of memory, not writable).
struct Faulty<'r> {
    inner: &'r mut MemRecords,
    writes: u64,
    fail_at: u64,
}

impl Faulty<'_> {
    fn write(&mut self) -> Result<()> {
        self.writes += 1;
        if self.writes - 1 == self.fail_at {
            return Err(Error::Store(prefixkv_store::StoreError::Storage(
                "injected failure".into(),
            )));
        }
        Ok(())
    }

    fn failed(&self) -> bool {
        self.writes > self.fail_at
    }
}

impl Records for Faulty<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.inner.get(key, out)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write()?;
        self.inner.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.write()?;
        self.inner.delete(key)
    }
}

#[derive(Clone, Copy, Debug)]
enum Update {
    Insert(u64),
    Remove(u64),
    Clear,
}

fn apply(
    update: Update,
    hash: &mut Hash,
    records: &mut impl Records,
    model: &mut Model,
) -> Result<()> {
    match update {
        Update::Insert(n) => {
            let field = format!("f{n}").into_bytes();
            let value = format!("value of {n} at {}", model.len()).into_bytes();
            let new = hash.insert(records, &field, &value)?;
            assert_eq!(new, model.insert(field, value).is_none());
        }
        Update::Remove(n) => {
            let field = format!("f{n}").into_bytes();
            let existed = hash.remove(records, &field)?;
            assert_eq!(existed, model.remove(&field).is_some());
        }
        Update::Clear => {
            hash.clear(records)?;
            model.clear();
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Every write of every update fails in turn. An `Err` leaves the records exactly as they
    /// were (the caller keeps the old header, which must still be exact); an `Ok` despite the
    /// failure (a split or merge put off) leaves a header that is exact for the new content. The
    /// run then goes on from one of the failed outcomes, so later updates meet the leftovers.
    #[test]
    fn a_failed_write_leaves_a_header_that_describes_the_records(
        seed in any::<u64>(),
        peak in 50u64..400,
    ) {
        let (mut hash, mut records, mut model) = (Hash::new(9), MemRecords::default(), Model::new());
        let mut state = seed;
        let mut updates: Vec<Update> = (0..peak).map(Update::Insert).collect();
        for _ in 0..peak / 2 {
            updates.push(Update::Remove(rng(&mut state) % peak));
            updates.push(Update::Insert(peak + rng(&mut state) % peak));
        }
        updates.extend((0..2 * peak).map(Update::Remove));
        updates.push(Update::Insert(1));
        updates.push(Update::Insert(2));
        updates.push(Update::Clear);
        let mut deferred = 0;
        for update in updates {
            let mut outcomes = Vec::new();
            for fail_at in 0.. {
                let (mut h, mut r, mut m) = (hash, records.clone(), model.clone());
                let mut faulty = Faulty { inner: &mut r, writes: 0, fail_at };
                let result = apply(update, &mut h, &mut faulty, &mut m);
                let failed = faulty.failed();
                match result {
                    Err(_) => {
                        prop_assert!(failed);
                        prop_assert_eq!(h, hash, "an Err leaves the header alone");
                        prop_assert_eq!(&r.map, &records.map, "an Err writes nothing");
                    }
                    Ok(()) => {
                        assert_exact(&h, &mut r, &m, true);
                        if !failed {
                            outcomes.push((h, r, m));
                            break;
                        }
                        deferred += 1;
                        outcomes.push((h, r, m));
                    }
                }
            }
            let pick = (rng(&mut state) % outcomes.len() as u64) as usize;
            (hash, records, model) = outcomes.swap_remove(pick);
        }
        prop_assert!(deferred > 0);
        prop_assert!(model.is_empty());
        prop_assert_eq!(hash, Hash::new(9));
    }
}

/// The store refuses the record an insert would write (too large): the update fails, and the
/// header the caller keeps still reads every entry of the old content.
#[test]
fn a_refused_insert_keeps_the_old_content() {
    let mut records = MemRecords::default();
    let mut hash = Hash::new(11);
    let mut model = Model::new();
    for i in 0..500u32 {
        let (field, value) = (
            format!("f{i}").into_bytes(),
            vec![b'x'; 20 + i as usize % 50],
        );
        hash.insert(&mut records, &field, &value).unwrap();
        model.insert(field, value);
    }
    let largest = records.map.values().map(Vec::len).max().unwrap();
    records.max_value_bytes = Some(largest + 100);
    let (old_hash, old_records) = (hash, records.map.clone());
    // A new field and a new value for an existing field, each too large for the bucket record.
    for field in [&b"new field"[..], b"f7"] {
        let result = hash.insert(&mut records, field, &vec![b'y'; largest + 200]);
        assert!(matches!(result, Err(Error::Store(_))), "{result:?}");
        assert_eq!(hash, old_hash);
        assert_eq!(records.map, old_records);
        assert_exact(&hash, &mut records, &model, false);
        assert_lookups(&hash, &mut records, &model);
    }
    // Values that fit still go in, and the map stays exact.
    hash.insert(&mut records, b"f7", b"small").unwrap();
    model.insert(b"f7".to_vec(), b"small".to_vec());
    assert_exact(&hash, &mut records, &model, false);
}

/// The union of two buckets is too large for one record: the merge is put off (every time),
/// the removals still succeed, the table just stays larger, and removing everything still
/// leaves no record.
#[test]
fn a_merge_too_large_for_one_record_is_put_off() {
    let mut records = MemRecords::default();
    let mut hash = Hash::new(12);
    let mut model = Model::new();
    for i in 0..200u32 {
        let (field, value) = (format!("f{i}").into_bytes(), vec![b'x'; 1000]);
        hash.insert(&mut records, &field, &value).unwrap();
        model.insert(field, value);
    }
    let mut put_off = 0;
    let mut fields: Vec<Vec<u8>> = model.keys().cloned().collect();
    fields.sort();
    for field in fields {
        // No record may grow past the largest present: a removal still fits (it shrinks a
        // bucket), a merge into a record larger than all of them does not.
        records.max_value_bytes = records.map.values().map(Vec::len).max();
        assert!(hash.remove(&mut records, &field).unwrap());
        model.remove(&field);
        let count = hash.bucket_count();
        if count > 1 && hash.len() < MIN_LOAD * count - 1 {
            put_off += 1;
        }
        assert_exact(&hash, &mut records, &model, false);
    }
    assert!(put_off > 0, "no merge was refused");
    assert!(records.map.is_empty());
    assert_eq!(hash, Hash::new(12));
}

/// The cost bound on a map far larger than the property tests build, all the way up and down.
#[test]
fn updates_of_a_large_map_touch_a_few_records() {
    let mut map = Checked::new();
    for i in 0..20_000u32 {
        map.insert(format!("{i}").as_bytes(), b"v");
    }
    assert!(map.hash.bucket_count() > 2000);
    for i in 0..20_000u32 {
        map.remove(format!("{i}").as_bytes());
    }
    assert!(map.max_cost <= MAX_RECORD_OPS);
    assert!(map.records.map.is_empty());
}
