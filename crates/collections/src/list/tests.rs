//! Unit tests of the list: header and chunk formats, damaged records, a model test against a
//! `VecDeque` that checks every invariant of the module docs and the record I/O of the end
//! operations, mixed entry sizes, and failed writes at every step of an update.

use std::collections::{HashSet, VecDeque};
use std::ops::ControlFlow;

use proptest::prelude::*;

use super::*;
use crate::MemRecords;

/// Small chunks: many chunks from a few hundred entries, splits and merges everywhere.
const SMALL: Limits = Limits {
    max_entries: 8,
    max_bytes: 256,
};

/// Walks the whole chain checking invariants 1-4, and that the records are exactly the
/// chunks; returns the entries in order.
fn check(list: &List, records: &MemRecords) -> Vec<Vec<u8>> {
    assert!(list.consistent(), "{list:?}");
    let mut entries = Vec::new();
    let mut seen = HashSet::new();
    let (mut id, mut from) = (list.head, 0);
    while id != 0 {
        assert!(seen.insert(id), "chunk {id} reached twice");
        assert!(id < list.next_chunk);
        let record = records
            .map
            .get(list.key(id).as_slice())
            .expect("chunk exists");
        let chunk = Chunk::decode(record).unwrap();
        assert_eq!(chunk.prev, from, "chunk {id}");
        assert!(
            list.limits.fits(&chunk.entries),
            "chunk {id} over the limits"
        );
        entries.extend(chunk.entries);
        (from, id) = (id, chunk.next);
    }
    assert_eq!(from, list.tail);
    assert_eq!(seen.len() as u64, list.chunks);
    assert_eq!(entries.len() as u64, list.len);
    let keys: HashSet<Vec<u8>> = seen.iter().map(|&id| list.key(id).to_vec()).collect();
    let stored: HashSet<Vec<u8>> = records.map.keys().cloned().collect();
    assert_eq!(stored, keys, "the records are exactly the chunks");
    let mut header = Vec::new();
    list.encode(&mut header);
    let decoded = List::decode(&mut header.as_slice()).unwrap();
    assert_eq!(
        List {
            limits: list.limits,
            ..decoded
        },
        *list
    );
    entries
}

/// Runs an end operation, checking it read at most 3 records and wrote at most 2 (the in-place
/// path reads the end chunk; when the chunk is full or would empty, the general path reads it
/// again, and a pop that empties it reads the neighbour).
fn at_end<T>(
    list: &mut List,
    records: &mut MemRecords,
    op: impl FnOnce(&mut List, &mut MemRecords) -> T,
) -> T {
    let (gets, writes) = (records.gets, records.writes);
    let out = op(list, records);
    let (read, written) = (records.gets - gets, records.writes - writes);
    assert!(read <= 3 && written <= 2, "{read} reads, {written} writes");
    out
}

/// Up to `most` entries from `rank` on, forwards or backwards, checking the ranks visited.
fn collect(
    list: &List,
    records: &mut MemRecords,
    rank: u64,
    forward: bool,
    most: usize,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut expected = rank;
    let visit = |at: u64, entry: &[u8]| {
        assert_eq!(at, expected);
        expected = if forward { at + 1 } else { at.wrapping_sub(1) };
        out.push(entry.to_vec());
        if out.len() >= most {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    if forward {
        list.range(records, rank, visit).unwrap();
    } else {
        list.range_rev(records, rank, visit).unwrap();
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
    let list = List {
        id: 0x0102_0304_0506_0708,
        len: 1000,
        head: 7,
        tail: 40,
        next_chunk: 42,
        chunks: 9,
        limits: Limits::DEFAULT,
    };
    let mut bytes = Vec::new();
    list.encode(&mut bytes);
    assert_eq!(bytes.len(), HEADER_BYTES);
    bytes.extend_from_slice(b"tail");
    let mut rest = bytes.as_slice();
    assert_eq!(List::decode(&mut rest).unwrap(), list);
    assert_eq!(rest, b"tail");
    let mut empty = Vec::new();
    List::new(9).encode(&mut empty);
    assert_eq!(List::decode(&mut empty.as_slice()).unwrap(), List::new(9));
}

#[test]
fn damaged_headers_are_corrupt() {
    let good = List {
        id: 1,
        len: 5,
        head: 3,
        tail: 4,
        next_chunk: 5,
        chunks: 2,
        limits: Limits::DEFAULT,
    };
    let bad = [
        List { len: 0, ..good },
        List { head: 0, ..good },
        List { tail: 0, ..good },
        List { chunks: 0, ..good },
        List { chunks: 6, ..good },
        List { head: 5, ..good },
        List { tail: 5, ..good },
        List { head: 4, ..good },
        List { chunks: 1, ..good },
        List {
            next_chunk: 3,
            ..good
        },
        List {
            len: 0,
            head: 0,
            tail: 0,
            chunks: 0,
            next_chunk: 0,
            ..good
        },
    ];
    for list in bad {
        let mut bytes = Vec::new();
        list.encode(&mut bytes);
        let mut rest = bytes.as_slice();
        assert!(
            matches!(List::decode(&mut rest), Err(Error::Corrupt(_))),
            "{list:?}"
        );
        assert_eq!(rest.len(), HEADER_BYTES, "a failed decode consumes nothing");
    }
    let mut bytes = Vec::new();
    good.encode(&mut bytes);
    for cut in 0..HEADER_BYTES {
        let mut rest = &bytes[..cut];
        assert!(matches!(List::decode(&mut rest), Err(Error::Corrupt(_))));
        assert_eq!(rest.len(), cut);
    }
}

#[test]
fn damaged_chunks_are_corrupt() {
    let chunk = Chunk {
        prev: 3,
        next: 9,
        entries: vec![b"one".to_vec(), Vec::new(), b"three".to_vec()],
    };
    let mut bytes = Vec::new();
    chunk.encode(&mut bytes);
    assert_eq!(bytes.len(), chunk.encoded_len());
    assert_eq!(Chunk::decode(&bytes).unwrap(), chunk);
    let mut bad: Vec<Vec<u8>> = (0..bytes.len()).map(|cut| bytes[..cut].to_vec()).collect();
    for count in [0, 2, 4, 1000, u32::MAX] {
        let mut counted = bytes.clone();
        counted[16..20].copy_from_slice(&count.to_le_bytes());
        bad.push(counted);
    }
    let mut huge = bytes.clone();
    huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    bad.push(huge);
    let mut trailing = bytes.clone();
    trailing.push(0);
    bad.push(trailing);
    for bytes in bad {
        assert!(
            matches!(Chunk::decode(&bytes), Err(Error::Corrupt(_))),
            "{bytes:?}"
        );
    }
}

/// A list of 200 entries in about 40 small chunks.
fn sample_list() -> (List, MemRecords) {
    let mut records = MemRecords::default();
    let mut list = List::with_limits(3, SMALL);
    for n in 0..200u64 {
        let rank = if n % 3 == 0 { 0 } else { list.len() };
        let entry = format!("entry {n:05}").into_bytes();
        list.insert_at(&mut records, rank, &entry).unwrap();
    }
    assert!(list.chunks > 20);
    (list, records)
}

/// Runs every operation on (a copy of) a list whose records or header may be damaged: each
/// succeeds or fails with `Corrupt`, never panics; returns how many failed.
fn exercise(list: &List, records: &MemRecords) -> usize {
    let len = list.len;
    let mut failed = 0;
    let mut run = |op: &dyn Fn(&mut List, &mut MemRecords) -> Result<()>| {
        let (mut list, mut records) = (*list, records.clone());
        match op(&mut list, &mut records) {
            Ok(()) => {}
            Err(Error::Corrupt(_)) => failed += 1,
            Err(other) => panic!("not a corruption: {other}"),
        }
    };
    let all = |_: u64, _: &[u8]| ControlFlow::Continue(());
    for rank in [0, 1, len / 3, len / 2, len - 2, len - 1] {
        run(&|l, r| l.get(r, rank, &mut Vec::new()).map(drop));
        run(&|l, r| l.insert_at(r, rank, b"new"));
        run(&|l, r| l.insert_at(r, rank, &[b'x'; 300]));
        run(&|l, r| l.remove_at(r, rank).map(drop));
        run(&|l, r| l.replace_at(r, rank, &[b'y'; 200]));
        run(&|l, r| l.range(r, rank, all));
        run(&|l, r| l.range_rev(r, rank, all));
    }
    run(&|l, r| l.insert_at(r, len, b"new"));
    run(&|l, r| l.clear(r));
    failed
}

#[test]
fn damaged_lists_are_corrupt_not_panics() {
    let (list, records) = sample_list();
    assert_eq!(exercise(&list, &records), 0);
    let keys: Vec<Vec<u8>> = records.map.keys().cloned().collect();
    let mut cases = Vec::new();
    for (at, key) in keys.iter().enumerate().step_by(3) {
        let mut missing = records.clone();
        missing.map.remove(key);
        cases.push((list, missing));
        let mut cut = records.clone();
        cut.map.get_mut(key).unwrap().truncate(20 + at % 9);
        cases.push((list, cut));
        // Links pointing elsewhere: a cycle, a self-link, the header's ends, past next_chunk.
        for (field, value) in [
            (0, list.head),
            (8, list.head),
            (8, list.tail),
            (0, 0),
            (8, 0),
        ] {
            let mut relinked = records.clone();
            relinked.map.get_mut(key).unwrap()[field..field + 8]
                .copy_from_slice(&value.to_le_bytes());
            cases.push((list, relinked));
        }
        let mut counted = records.clone();
        counted.map.get_mut(key).unwrap()[16] ^= 1;
        cases.push((list, counted));
    }
    // Headers that decode but disagree with the chain.
    for bad in [
        List {
            chunks: list.chunks / 2,
            ..list
        },
        List { len: 150, ..list },
        List {
            len: list.len + 50,
            ..list
        },
        List {
            head: list.tail,
            tail: list.head,
            ..list
        },
        List {
            next_chunk: list.head.max(list.tail) + 1,
            ..list
        },
    ] {
        let mut bytes = Vec::new();
        bad.encode(&mut bytes);
        let decoded = List::decode(&mut bytes.as_slice()).unwrap();
        cases.push((
            List {
                limits: SMALL,
                ..decoded
            },
            records.clone(),
        ));
    }
    let mut detected = 0;
    for (list, records) in &cases {
        detected += usize::from(exercise(list, records) > 0);
    }
    assert!(
        detected * 10 >= cases.len() * 9,
        "{detected} of {}",
        cases.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random damage to one record: every operation succeeds or reports `Corrupt`.
    #[test]
    fn random_damage_never_panics(
        pick in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        value in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let (list, mut records) = sample_list();
        let key = pick.get(&records.map.keys().cloned().collect::<Vec<_>>()).clone();
        let record = records.map.get_mut(&key).unwrap();
        let at = byte.index(record.len());
        if cut {
            record.truncate(at);
        } else {
            record[at] = value;
        }
        exercise(&list, &records);
    }
}

#[test]
fn operations_check_their_ranks() {
    let (list, records) = sample_list();
    let len = list.len;
    let panics = |op: &dyn Fn(&mut List, &mut MemRecords)| {
        let (mut list, mut records) = (list, records.clone());
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&mut list, &mut records)))
            .is_err()
    };
    assert!(panics(&|l, r| l.insert_at(r, len + 1, b"x").unwrap()));
    assert!(panics(&|l, r| drop(l.remove_at(r, len).unwrap())));
    assert!(panics(&|l, r| l.replace_at(r, len, b"x").unwrap()));
    assert!(panics(&|l, r| l
        .range_rev(r, len, |_, _| ControlFlow::Continue(()))
        .unwrap()));
    let (mut list, mut records) = (list, records);
    assert!(!list.get(&mut records, len, &mut Vec::new()).unwrap());
    list.range(&mut records, len, |_, _| panic!("nothing past the end"))
        .unwrap();
    let mut empty = List::new(1);
    empty
        .range_rev(&mut records, 5, |_, _| panic!("nothing in an empty list"))
        .unwrap();
    assert!(!empty.get(&mut records, 0, &mut Vec::new()).unwrap());
    list.clear(&mut records).unwrap();
    assert!(records.map.is_empty());
    assert!(list.is_empty());
    empty.clear(&mut records).unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Push(bool, Vec<u8>),
    Pop(bool),
    Insert(prop::sample::Index, Vec<u8>),
    Remove(prop::sample::Index),
    Replace(prop::sample::Index, Vec<u8>),
    Get(prop::sample::Index),
    Range(prop::sample::Index, u8),
    RangeRev(prop::sample::Index, u8),
    /// Inserts this many entries: at the front (0), the back (1) or anywhere.
    Grow(u16, u8, u64),
    /// Removes this many entries: at the front (0), the back (1) or anywhere.
    Shrink(u16, u8, u64),
}

fn entry() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..40),
        1 => prop::collection::vec(any::<u8>(), 0..400),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        3 => (any::<bool>(), entry()).prop_map(|(front, e)| Op::Push(front, e)),
        3 => any::<bool>().prop_map(Op::Pop),
        3 => (index(), entry()).prop_map(|(at, e)| Op::Insert(at, e)),
        3 => index().prop_map(Op::Remove),
        2 => (index(), entry()).prop_map(|(at, e)| Op::Replace(at, e)),
        1 => index().prop_map(Op::Get),
        1 => (index(), any::<u8>()).prop_map(|(at, n)| Op::Range(at, n)),
        1 => (index(), any::<u8>()).prop_map(|(at, n)| Op::RangeRev(at, n)),
        1 => (0..3000u16, 0..3u8, any::<u64>()).prop_map(|(n, how, seed)| Op::Grow(n, how, seed)),
        1 => (0..3000u16, 0..3u8, any::<u64>()).prop_map(|(n, how, seed)| Op::Shrink(n, how, seed)),
    ]
}

/// Applies one operation to the list and the model, checking results and end-operation I/O.
fn apply(list: &mut List, records: &mut MemRecords, model: &mut VecDeque<Vec<u8>>, op: Op) {
    let len = model.len();
    match op {
        Op::Push(front, entry) => {
            let rank = if front { 0 } else { len as u64 };
            at_end(list, records, |l, r| l.insert_at(r, rank, &entry)).unwrap();
            if front {
                model.push_front(entry);
            } else {
                model.push_back(entry);
            }
        }
        Op::Pop(front) => {
            if len == 0 {
                return;
            }
            let rank = if front { 0 } else { len as u64 - 1 };
            let removed = at_end(list, records, |l, r| l.remove_at(r, rank)).unwrap();
            let expected = if front {
                model.pop_front()
            } else {
                model.pop_back()
            };
            assert_eq!(Some(removed), expected);
        }
        Op::Insert(at, entry) => {
            let rank = at.index(len + 1);
            list.insert_at(records, rank as u64, &entry).unwrap();
            model.insert(rank, entry);
        }
        Op::Remove(_) | Op::Replace(..) | Op::Get(_) | Op::RangeRev(..) if len == 0 => {}
        Op::Remove(at) => {
            let rank = at.index(len);
            let removed = list.remove_at(records, rank as u64).unwrap();
            assert_eq!(Some(removed), model.remove(rank));
        }
        Op::Replace(at, entry) => {
            let rank = at.index(len);
            list.replace_at(records, rank as u64, &entry).unwrap();
            model[rank] = entry;
        }
        Op::Get(at) => {
            let rank = at.index(len);
            let mut out = Vec::new();
            assert!(list.get(records, rank as u64, &mut out).unwrap());
            assert_eq!(out, model[rank]);
        }
        Op::Range(at, most) => {
            let rank = at.index(len + 1);
            let got = collect(list, records, rank as u64, true, most as usize + 1);
            let want: Vec<_> = model
                .iter()
                .skip(rank)
                .take(most as usize + 1)
                .cloned()
                .collect();
            assert_eq!(got, want);
        }
        Op::RangeRev(at, most) => {
            let rank = at.index(len);
            let got = collect(list, records, rank as u64, false, most as usize + 1);
            let want: Vec<_> = model
                .range(..=rank)
                .rev()
                .take(most as usize + 1)
                .cloned()
                .collect();
            assert_eq!(got, want);
        }
        Op::Grow(count, how, seed) => {
            let mut mix = Mix(seed | 1);
            for n in 0..count {
                let entry = format!("grown {seed} {n}").into_bytes();
                let op = match how {
                    0 => Op::Push(true, entry),
                    1 => Op::Push(false, entry),
                    _ => {
                        let rank = mix.below(model.len() as u64 + 1) as usize;
                        list.insert_at(records, rank as u64, &entry).unwrap();
                        model.insert(rank, entry);
                        continue;
                    }
                };
                apply(list, records, model, op);
            }
        }
        Op::Shrink(count, how, seed) => {
            let mut mix = Mix(seed | 1);
            for _ in 0..count.min(model.len() as u16) {
                match how {
                    0 | 1 => apply(list, records, model, Op::Pop(how == 0)),
                    _ => {
                        let rank = mix.below(model.len() as u64) as usize;
                        let removed = list.remove_at(records, rank as u64).unwrap();
                        assert_eq!(Some(removed), model.remove(rank));
                    }
                }
            }
        }
    }
}

fn run(limits: Limits, ops: Vec<Op>) {
    let mut records = MemRecords::default();
    let mut list = List::with_limits(7, limits);
    let mut model = VecDeque::new();
    for op in ops {
        apply(&mut list, &mut records, &mut model, op);
        assert_eq!(VecDeque::from(check(&list, &records)), model);
    }
    // Drain to empty from both ends: no record is left.
    while !model.is_empty() {
        let front = model.len() % 2 == 0;
        apply(&mut list, &mut records, &mut model, Op::Pop(front));
    }
    assert_eq!(VecDeque::from(check(&list, &records)), model);
    assert!(records.map.is_empty(), "{} records left", records.map.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn positional_model(small in any::<bool>(), ops in prop::collection::vec(op(), 1..50)) {
        run(if small { SMALL } else { Limits::DEFAULT }, ops);
    }
}

/// A queue of several thousand entries: pushes and pops at both ends cost at most 2 reads and
/// 2 writes at any length, and draining it leaves no record.
#[test]
fn queues_grow_and_drain_at_constant_cost() {
    for limits in [Limits::DEFAULT, SMALL] {
        let mut mix = Mix(5);
        let ops = (0..4)
            .flat_map(|round| {
                [
                    Op::Grow(3000, round % 2, mix.next()),
                    Op::Shrink(1000, 1 - round % 2, mix.next()),
                    Op::Shrink(200, 2, mix.next()),
                    Op::Grow(200, 2, mix.next()),
                ]
            })
            .collect();
        run(limits, ops);
    }
}

/// Entries from 0 bytes to 100 KiB: big entries get chunks of their own, splits by bytes.
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
        entry.extend_from_slice(&tag.to_be_bytes());
        entry
    };
    let mut records = MemRecords::default();
    let mut list = List::new(20);
    let mut model: VecDeque<Vec<u8>> = VecDeque::new();
    for step in 0..500u64 {
        let entry = sized(&mut mix, step);
        let len = model.len();
        let rank = mix.below(len as u64 + 1) as usize;
        match step % 8 {
            0 | 1 => apply(
                &mut list,
                &mut records,
                &mut model,
                Op::Push(step % 2 == 0, entry),
            ),
            2 => apply(&mut list, &mut records, &mut model, Op::Pop(step % 16 == 2)),
            _ if len == 0 || step % 8 < 5 => {
                list.insert_at(&mut records, rank as u64, &entry).unwrap();
                model.insert(rank, entry);
            }
            5 => {
                let removed = list.remove_at(&mut records, (rank % len) as u64).unwrap();
                assert_eq!(Some(removed), model.remove(rank % len));
            }
            6 => {
                list.replace_at(&mut records, (rank % len) as u64, &entry)
                    .unwrap();
                model[rank % len] = entry;
            }
            _ => {
                let got = collect(&list, &mut records, (rank % len) as u64, true, 20);
                let want: Vec<_> = model.iter().skip(rank % len).take(20).cloned().collect();
                assert_eq!(got, want);
            }
        }
        if step % 25 == 0 {
            assert_eq!(VecDeque::from(check(&list, &records)), model);
        }
    }
    assert_eq!(VecDeque::from(check(&list, &records)), model);
    assert!(list.chunks >= 10);
    list.clear(&mut records).unwrap();
    assert!(records.map.is_empty());
    assert!(list.is_empty());
}

/// One update of the failure tests, on the list and the model.
fn update(
    list: &mut List,
    records: &mut impl Records,
    model: &mut Vec<Vec<u8>>,
    (at, kind, entry): (u64, u8, &[u8]),
) -> Result<()> {
    let len = model.len();
    match kind {
        1 if len > 0 => {
            let rank = [0, len - 1, at as usize % len][at as usize % 3];
            let removed = list.remove_at(records, rank as u64)?;
            assert_eq!(removed, model.remove(rank));
        }
        2 if len > 0 => {
            let rank = at as usize % len;
            list.replace_at(records, rank as u64, entry)?;
            model[rank] = entry.to_vec();
        }
        _ => {
            let rank = [0, len, at as usize % (len + 1)][at as usize % 3];
            list.insert_at(records, rank as u64, entry)?;
            model.insert(rank, entry.to_vec());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Puts refused above a size: a failed update leaves the header, the records and the
    /// content exactly as they were; later updates go on from there.
    #[test]
    fn refused_puts_leave_the_old_list(
        limit in 40usize..300,
        ops in prop::collection::vec((any::<u64>(), 0..3u8, 0usize..120), 1..200),
    ) {
        let mut records = MemRecords::default();
        let mut list = List::with_limits(13, SMALL);
        let mut model: Vec<Vec<u8>> = Vec::new();
        for (step, (at, kind, size)) in ops.into_iter().enumerate() {
            // Fill freely at first, then refuse large writes.
            records.max_value_bytes = (step >= 60).then_some(limit);
            let entry = vec![step as u8; size];
            let (before, stored, content) = (list, records.map.clone(), model.clone());
            if let Err(error) = update(&mut list, &mut records, &mut model, (at, kind, &entry)) {
                prop_assert!(matches!(error, Error::Store(_)));
                prop_assert_eq!(list, before);
                prop_assert_eq!(&records.map, &stored);
                prop_assert_eq!(&model, &content);
            }
            records.max_value_bytes = None;
            prop_assert_eq!(&check(&list, &records), &model);
        }
    }
}

/// Records whose `n`-th write from now (put or delete) fails once: a store failure at any step
/// of an update, after which the store works again (so the undo can be checked).
struct Flaky {
    inner: MemRecords,
    countdown: Option<u64>,
}

impl Flaky {
    fn refuse(&mut self) -> Result<()> {
        match self.countdown {
            Some(0) => {
                self.countdown = None;
                Err(Error::Store(prefixkv_store::StoreError::Storage(
                    "refused".into(),
                )))
            }
            Some(n) => {
                self.countdown = Some(n - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Records for Flaky {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.inner.get(key, out)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.refuse()?;
        self.inner.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.refuse()?;
        self.inner.delete(key)
    }
}

/// Every update, failed at each of its writes in turn (on a copy, until it makes fewer writes): the list and its records are
/// restored exactly, except that a refused merge still removes (without merging); then the
/// update runs through.
#[test]
fn a_failure_at_any_write_is_undone() {
    // Chunks of up to 16 entries: "small" is under 4 entries, so middle removals merge often.
    let limits = Limits {
        max_entries: 16,
        max_bytes: 1024,
    };
    let mut mix = Mix(31);
    let mut records = MemRecords::default();
    let mut list = List::with_limits(17, limits);
    let mut model: Vec<Vec<u8>> = Vec::new();
    let (mut failures, mut fallbacks) = (0, 0);
    for step in 0..1500u64 {
        let kind = match step {
            0..=599 => [0, 0, 1, 2][mix.below(4) as usize],
            _ => [0, 1, 1, 2][mix.below(4) as usize],
        };
        let entry = vec![step as u8; mix.below(100) as usize];
        let at = mix.next();
        let op = (at, kind, entry.as_slice());
        for fail_at in 0.. {
            let mut flaky = Flaky {
                inner: records.clone(),
                countdown: Some(fail_at),
            };
            let (mut trial, mut content) = (list, model.clone());
            let result = update(&mut trial, &mut flaky, &mut content, op);
            if flaky.countdown.is_some() {
                // The update made fewer writes than `fail_at`: every step was tried.
                break;
            }
            match result {
                Ok(()) => {
                    // Only a removal's merge may be refused and still succeed (without merging).
                    assert_eq!(kind, 1, "step {step}");
                    assert_eq!(check(&trial, &flaky.inner), content);
                    fallbacks += 1;
                }
                Err(error) => {
                    assert!(matches!(error, Error::Store(_)));
                    assert_eq!(trial, list);
                    assert_eq!(flaky.inner.map, records.map);
                    assert_eq!(content, model);
                    failures += 1;
                }
            }
        }
        update(&mut list, &mut records, &mut model, op).unwrap();
        if step % 50 == 0 {
            assert_eq!(check(&list, &records), model);
        }
    }
    assert_eq!(check(&list, &records), model);
    assert!(
        failures > 1500 && fallbacks > 0,
        "{failures} failures, {fallbacks} fallbacks"
    );
}
