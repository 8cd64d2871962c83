//! `Sequence`: a `List` and a `Tree` driven through the trait alone, by one generic driver, must
//! both behave as a `VecDeque` model: the same answers to every positional operation, the same
//! entries in both directions, and no record left after `clear`. The entries are large enough
//! that both structures span many records (list chunks, tree levels), so the walks across
//! record boundaries are exercised, not just a single record.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use prefixkv_collections::list::List;
use prefixkv_collections::tree::Tree;
use prefixkv_collections::{MemRecords, Sequence};

/// A small deterministic generator (xorshift64*): the same operations for both structures and
/// every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// Every entry from `rank` upwards, through `Sequence::range`.
fn forward<S: Sequence>(sequence: &S, records: &mut MemRecords, rank: u64) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    sequence
        .range(records, rank, |at, entry| {
            assert_eq!(
                at,
                rank + seen.len() as u64,
                "range reports consecutive ranks"
            );
            seen.push(entry.to_vec());
            ControlFlow::Continue(())
        })
        .expect("range");
    seen
}

/// Every entry from `rank` downwards, through `Sequence::range_rev`.
fn backward<S: Sequence>(sequence: &S, records: &mut MemRecords, rank: u64) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    sequence
        .range_rev(records, rank, |at, entry| {
            assert_eq!(
                at + seen.len() as u64,
                rank,
                "range_rev reports falling ranks"
            );
            seen.push(entry.to_vec());
            ControlFlow::Continue(())
        })
        .expect("range_rev");
    seen
}

/// Runs `steps` random positional operations on `sequence` (empty) and the model, checking each
/// answer; returns the most records the sequence held at once.
fn drive<S: Sequence>(sequence: &mut S, records: &mut MemRecords, seed: u64, steps: u32) -> usize {
    let mut model: VecDeque<Vec<u8>> = VecDeque::new();
    let mut rng = Rng(seed);
    let mut most_records = 0;
    let mut out = Vec::new();
    for step in 0..steps {
        let len = model.len() as u64;
        assert_eq!(sequence.len(), len, "step {step}: len");
        assert_eq!(sequence.is_empty(), len == 0, "step {step}: is_empty");
        // Grow while short, then mix: inserts win slightly so that the sequence keeps growing.
        let choice = if len < 8 { 0 } else { rng.below(10) };
        match choice {
            0..=4 => {
                let rank = rng.below(len + 1);
                let size = 100 + rng.below(200) as usize;
                let entry: Vec<u8> = format!("{step:08}").bytes().cycle().take(size).collect();
                sequence
                    .insert_at(records, rank, &entry)
                    .expect("insert_at");
                model.insert(rank as usize, entry);
            }
            5 | 6 => {
                let rank = rng.below(len);
                let removed = sequence.remove_at(records, rank).expect("remove_at");
                assert_eq!(
                    Some(removed),
                    model.remove(rank as usize),
                    "step {step}: removed"
                );
            }
            7 => {
                let rank = rng.below(len);
                let entry = format!("replaced at step {step}").into_bytes();
                sequence
                    .replace_at(records, rank, &entry)
                    .expect("replace_at");
                model[rank as usize] = entry;
            }
            _ => {
                let rank = rng.below(len + 2);
                let found = sequence.get(records, rank, &mut out).expect("get");
                match model.get(rank as usize) {
                    Some(expected) => assert!(found && out == *expected, "step {step}: get {rank}"),
                    None => assert!(!found, "step {step}: get past the end"),
                }
            }
        }
        most_records = most_records.max(records.map.len());
        if step % 256 == 0 && !model.is_empty() {
            let from = rng.below(model.len() as u64);
            let expected: Vec<Vec<u8>> = model.iter().skip(from as usize).cloned().collect();
            assert_eq!(
                forward(sequence, records, from),
                expected,
                "step {step}: range"
            );
            let expected: Vec<Vec<u8>> = model
                .iter()
                .take(from as usize + 1)
                .rev()
                .cloned()
                .collect();
            assert_eq!(
                backward(sequence, records, from),
                expected,
                "step {step}: range_rev"
            );
        }
    }
    let all: Vec<Vec<u8>> = model.iter().cloned().collect();
    assert_eq!(forward(sequence, records, 0), all, "final range");
    let last = sequence.len() - 1;
    let reversed: Vec<Vec<u8>> = model.iter().rev().cloned().collect();
    assert_eq!(
        backward(sequence, records, last),
        reversed,
        "final range_rev"
    );
    // Past the end: range visits nothing, get finds nothing.
    assert!(forward(sequence, records, sequence.len()).is_empty());
    assert!(!sequence
        .get(records, sequence.len(), &mut out)
        .expect("get"));
    // A visitor that breaks stops the walk.
    let mut visited = 0;
    sequence
        .range(records, 0, |_, _| {
            visited += 1;
            if visited == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .expect("range");
    assert_eq!(visited, 3, "range stops when the visitor breaks");
    sequence.clear(records).expect("clear");
    assert_eq!(sequence.len(), 0);
    assert!(sequence.is_empty());
    assert!(records.map.is_empty(), "clear leaves no record behind");
    most_records
}

#[test]
fn list_and_tree_behave_alike_through_the_trait() {
    const STEPS: u32 = 3000;
    let mut list_records = MemRecords::default();
    let list_peak = drive(&mut List::new(1), &mut list_records, 0x5EED, STEPS);
    let mut tree_records = MemRecords::default();
    let tree_peak = drive(&mut Tree::new(2), &mut tree_records, 0x5EED, STEPS);
    // Several records each (tens of list chunks, a tree of more than one level): the walks
    // crossed record boundaries.
    assert!(list_peak >= 10, "the list spanned only {list_peak} chunks");
    assert!(tree_peak >= 3, "the tree spanned only {tree_peak} nodes");
}

/// Copies every entry of one kind of sequence to the end of another, through the trait only:
/// what the server's COPY of a list does between two headers (read in batches, append).
fn copy_into<A: Sequence, B: Sequence>(from: &A, to: &mut B, records: &mut MemRecords) {
    let entries = forward(from, records, 0);
    for entry in entries {
        to.insert_at(records, to.len(), &entry).expect("append");
    }
}

#[test]
fn a_list_copies_into_a_tree_and_back() {
    let mut records = MemRecords::default();
    let mut list = List::new(10);
    for n in 0..500u32 {
        let entry = format!("entry {n:04}").repeat(20).into_bytes();
        Sequence::insert_at(&mut list, &mut records, u64::from(n / 2), &entry).expect("insert");
    }
    let mut tree = Tree::new(11);
    copy_into(&list, &mut tree, &mut records);
    let mut back = List::new(12);
    copy_into(&tree, &mut back, &mut records);
    let original = forward(&list, &mut records, 0);
    assert_eq!(original.len(), 500);
    assert_eq!(forward(&tree, &mut records, 0), original);
    assert_eq!(forward(&back, &mut records, 0), original);
}
