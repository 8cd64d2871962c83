//! Random write / point-of-consistency traces against every algorithm, with a real concurrent
//! writer thread: each image the writer captures must equal a reference copy of the state taken
//! at the point of consistency, however the mutator's writes interleave with the capture.
//! `TICKSTATE_TRACE_STEPS` scales the traces (default 20 000 steps per seed).

use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::Algorithm;
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn steps() -> usize {
    std::env::var("TICKSTATE_TRACE_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

fn run_trace<A: Algorithm>(seed: u64, words: usize, initial: bool) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut algorithm = A::new(words, seed.is_multiple_of(2)).unwrap();
    let mut model: Vec<u64> = vec![0; words];
    if initial {
        model = (0..words).map(|_| rng.random()).collect();
        algorithm.load(&model);
    }
    let algorithm = Arc::new(algorithm);
    let completed = Arc::new(AtomicU64::new(0));
    let (jobs, job_receiver) = mpsc::channel::<(u64, Vec<u64>)>();
    let writer = {
        let algorithm = Arc::clone(&algorithm);
        let completed = Arc::clone(&completed);
        std::thread::spawn(move || {
            let mut chunk_rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
            let mut previous: Option<Vec<u64>> = None;
            for (number, reference) in job_receiver {
                let mut image = if algorithm.needs_base() {
                    previous
                        .clone()
                        .expect("a base is needed only after a first image")
                } else {
                    vec![0xdead_beef; words]
                };
                let mut start = 0;
                while start < words {
                    let length = chunk_rng.random_range(1..=words - start);
                    algorithm.capture(start, &mut image[start..start + length]);
                    start += length;
                }
                assert!(image == reference, "{:?} checkpoint {number}: image differs from the state at its point of consistency", A::KIND);
                previous = Some(image);
                completed.store(number, Ordering::Release);
            }
            previous.is_some()
        })
    };
    let mut started = 0u64;
    for _ in 0..steps() {
        match rng.random_range(0..100) {
            0..=79 => {
                // Skewed indices so that words are rewritten within a period.
                let index = if rng.random_bool(0.5) {
                    rng.random_range(0..words.min(8))
                } else {
                    rng.random_range(0..words)
                };
                let value = rng.random();
                algorithm.write(index, value);
                model[index] = value;
            }
            80..=94 => {
                let index = rng.random_range(0..words);
                assert_eq!(
                    algorithm.read(index),
                    model[index],
                    "{:?} read({index})",
                    A::KIND
                );
            }
            _ => {
                if rng.random_bool(0.3) {
                    // Sometimes let the writer finish, so that many checkpoints happen.
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while completed.load(Ordering::Acquire) != started {
                        assert!(Instant::now() < deadline, "writer did not finish in 30 s");
                        std::thread::yield_now();
                    }
                }
                if completed.load(Ordering::Acquire) == started {
                    // SAFETY: single mutator; the writer finished every job (Acquire above).
                    unsafe { algorithm.prepare() };
                    started += 1;
                    jobs.send((started, model.clone())).unwrap();
                }
            }
        }
    }
    drop(jobs);
    writer
        .join()
        .expect("writer thread panicked (image mismatch?)");
    assert_eq!(completed.load(Ordering::Acquire), started);
    assert!(started > 3, "{:?}: only {started} checkpoints", A::KIND);
}

fn run_all<A: Algorithm>() {
    for seed in 0..4u64 {
        let words = [1, 7, 64, 1000][seed as usize];
        run_trace::<A>(seed, words, !seed.is_multiple_of(2));
    }
    run_trace::<A>(99, 100_003, false);
}

#[test]
fn naive_snapshot_traces() {
    run_all::<NaiveSnapshot>();
}

#[test]
fn copy_on_update_traces() {
    run_all::<CopyOnUpdate>();
}

#[test]
fn bit_array_copy_on_update_traces() {
    run_all::<BitArrayCopyOnUpdate>();
}

#[test]
fn naive_zigzag_traces() {
    run_all::<NaiveZigzag>();
}

#[test]
fn interleaved_zigzag_traces() {
    run_all::<InterleavedZigzag>();
}

#[test]
fn packed_zigzag_traces() {
    run_all::<PackedZigzag>();
}

#[test]
fn bit_array_zigzag_traces() {
    run_all::<BitArrayZigzag>();
}

#[test]
fn naive_ping_pong_traces() {
    run_all::<NaivePingPong>();
}

#[test]
fn interleaved_ping_pong_traces() {
    run_all::<InterleavedPingPong>();
}
