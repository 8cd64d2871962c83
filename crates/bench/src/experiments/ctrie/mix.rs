//! The get/insert mix of the `ctrie` experiment (part 1, concurrent; part 3, one thread) and the
//! model its maps are checked against afterwards.
//!
//! Invariants that make the model exact without recording anything in the timed loop:
//! - every operation of a mix worker is a pure function of its generator (seeded per run and
//!   thread) and its operation number ([`next_op`], used by the workers and by the replay alike);
//! - a worker writes only keys it owns (`key % threads == thread`), so no two threads write the
//!   same key and each key's final value is its owner's last write, whatever the interleaving;
//! - every written value is unique (`thread << 48 | operation number`), so a lost or reordered
//!   update leaves a value the model does not hold.
//!
//! After the runs the model replays, per run, each thread's operations up to the count the
//! thread reported; the map must then hold exactly the model: every key with the model's value,
//! and no other key (its length equals the model's).

use super::{value_of, Contender};
use crate::report::Report;
use crate::workload::{KeyDistribution, KeyGenerator};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One operation of a mix worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// Read this key.
    Get(u64),
    /// Write this (owned) key with this (unique) value.
    Insert(u64, u64),
}

/// What a mix worker needs to know to draw its operations.
#[derive(Debug, Clone, Copy)]
pub(super) struct Worker {
    pub(super) thread: usize,
    pub(super) threads: usize,
    pub(super) keys: u64,
    pub(super) read_percent: u32,
}

impl Worker {
    /// The generator of this worker in the run seeded `seed`.
    pub(super) fn generator(&self, seed: u64) -> KeyGenerator {
        KeyGenerator::new(
            KeyDistribution::Uniform,
            self.keys,
            seed * 64 + self.thread as u64,
        )
    }

    /// The worker's `operation`-th operation (counted from 0), drawn from `generator`: a uniform
    /// key, then the mix's choice; a write goes to the nearest key this worker owns.
    #[inline]
    pub(super) fn next_op(&self, generator: &mut KeyGenerator, operation: u64) -> Op {
        let key = generator.next_key();
        if generator.percent() < self.read_percent {
            return Op::Get(key);
        }
        let threads = self.threads as u64;
        let owned = key - key % threads + self.thread as u64;
        // Past the last key: the same residue one stride down (keys >= threads, so it exists).
        let owned = if owned < self.keys {
            owned
        } else {
            owned - threads
        };
        Op::Insert(owned, (self.thread as u64) << 48 | operation)
    }
}

/// One run of the mix: its seed and how many operations each thread completed.
#[derive(Debug, Clone)]
pub(super) struct MixRun {
    pub(super) seed: u64,
    pub(super) operations: Vec<u64>,
}

/// The expected contents of a map of `keys` keys loaded with [`value_of`], after `runs` (in
/// order) of a mix of `read_percent` % reads by `runs[i].operations.len()` threads. `model` is
/// reused (resized and refilled) so that a caller checking several maps allocates it once.
pub(super) fn replay(model: &mut Vec<u64>, keys: u64, read_percent: u32, runs: &[MixRun]) {
    model.clear();
    model.extend((0..keys).map(value_of));
    for run in runs {
        let threads = run.operations.len();
        for (thread, &operations) in run.operations.iter().enumerate() {
            let worker = Worker {
                thread,
                threads,
                keys,
                read_percent,
            };
            let mut generator = worker.generator(run.seed);
            for operation in 0..operations {
                if let Op::Insert(key, value) = worker.next_op(&mut generator, operation) {
                    model[key as usize] = value;
                }
            }
        }
    }
}

/// What comparing a map with its model found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Comparison {
    /// Entries compared (the model's keys).
    pub(super) compared: u64,
    /// The first key whose value differs (or that is missing).
    pub(super) first_wrong: Option<u64>,
    /// Whether the map holds as many keys as the model (no key beyond it).
    pub(super) length_matches: bool,
}

impl Comparison {
    /// Every entry equal and no extra key.
    pub(super) fn passed(&self) -> bool {
        self.first_wrong.is_none() && self.length_matches
    }
}

/// Compares every entry of `map` with `model` (key `k` must hold `model[k]`), and its length.
pub(super) fn compare(map: &dyn Contender, model: &[u64]) -> Comparison {
    let first_wrong = model
        .iter()
        .enumerate()
        .find(|&(key, &value)| map.get(key as u64) != Some(value))
        .map(|(key, _)| key as u64);
    Comparison {
        compared: model.len() as u64,
        first_wrong,
        length_matches: map.len() == model.len(),
    }
}

/// Runs the mix on `map` for `duration` (every worker runs at least one batch); returns
/// operations per second and the operations each thread completed (what [`replay`]
/// needs to rebuild the writes). Writes follow [`Worker::next_op`]: each thread writes only its
/// own keys, with values unique per write.
pub(super) fn run_mix(
    map: &dyn Contender,
    threads: usize,
    keys: u64,
    read_percent: u32,
    duration: Duration,
    seed: u64,
) -> (f64, Vec<u64>) {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let operations: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let stop = &stop;
                let worker = Worker {
                    thread,
                    threads,
                    keys,
                    read_percent,
                };
                scope.spawn(move || {
                    let mut generator = worker.generator(seed);
                    let mut operations = 0u64;
                    let mut checksum = 0u64;
                    loop {
                        for _ in 0..256 {
                            match worker.next_op(&mut generator, operations) {
                                Op::Get(key) => {
                                    checksum = checksum.wrapping_add(map.get(key).unwrap_or(0));
                                }
                                Op::Insert(key, value) => map.insert(key, value),
                            }
                            operations += 1;
                        }
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    std::hint::black_box(checksum);
                    operations
                })
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|worker| worker.join().expect("worker panicked"))
            .collect()
    });
    let total: u64 = operations.iter().sum();
    (total as f64 / start.elapsed().as_secs_f64(), operations)
}

/// Compares each map with the model of its contents after its `runs` of the mix (entry by
/// entry, and the length), records the check, and notes the first failure of each map.
pub(super) fn check_with_models(
    report: &mut Report,
    (what, against): (&str, &str),
    maps: &[(&str, &dyn Contender)],
    keys: u64,
    read_percent: u32,
    runs: &[Vec<MixRun>],
) {
    // One model buffer for every map: it is rebuilt from the loaded values for each.
    let mut expected = Vec::new();
    for ((name, map), runs) in maps.iter().zip(runs) {
        replay(&mut expected, keys, read_percent, runs);
        let comparison = compare(*map, &expected);
        report.check(what, against, comparison.compared, comparison.passed());
        if !comparison.passed() {
            report.notes.push(format!(
                "{what}: {name} differs from its model (first wrong key {:?}, length {} against \
                 {keys})",
                comparison.first_wrong,
                map.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_ctrie::CTrie;

    fn loaded(keys: u64) -> CTrie<u64, u64> {
        let map = CTrie::new();
        for key in 0..keys {
            map.insert(key, value_of(key));
        }
        map
    }

    #[test]
    fn writes_stay_on_the_threads_own_keys() {
        let mut generator = KeyGenerator::new(KeyDistribution::Uniform, 10, 1);
        for thread in 0..3 {
            let worker = Worker {
                thread,
                threads: 3,
                keys: 10,
                read_percent: 0,
            };
            for operation in 0..200 {
                let Op::Insert(key, value) = worker.next_op(&mut generator, operation) else {
                    panic!("0 % reads")
                };
                assert!(key < 10 && key % 3 == thread as u64, "key {key}");
                assert_eq!(value, (thread as u64) << 48 | operation);
            }
        }
    }

    #[test]
    fn a_ctrie_after_concurrent_updates_matches_its_model_and_a_dropped_entry_fails() {
        let keys = 2_000;
        let map = loaded(keys);
        let mut runs = Vec::new();
        for seed in 0..2 {
            let (_, operations) = run_mix(&map, 2, keys, 50, Duration::from_millis(5), seed);
            assert!(operations.iter().all(|&n| n >= 256), "{operations:?}");
            runs.push(MixRun { seed, operations });
        }
        let mut model = Vec::new();
        replay(&mut model, keys, 50, &runs);
        // A key thread 1 wrote last (its value is no loaded value).
        let written = (0..keys)
            .find(|&key| model[key as usize] >> 48 == 1 && model[key as usize] != value_of(key))
            .expect("thread 1 wrote");
        let intact = compare(&map, &model);
        assert!(intact.passed(), "{intact:?}");
        assert_eq!(intact.compared, keys);

        // Tampered: one written entry reverted to an earlier value (a lost update).
        map.insert(written, value_of(written));
        assert_eq!(compare(&map, &model).first_wrong, Some(written));
        map.insert(written, model[written as usize]);
        assert!(compare(&map, &model).passed());
        // Tampered: an entry dropped from the CTrie.
        map.remove(&77);
        let dropped = compare(&map, &model);
        assert_eq!(
            (dropped.first_wrong, dropped.length_matches),
            (Some(77), false)
        );
    }
}
