//! FASTER's benchmark method, shared by every contender of `ycsb`: keys and operations are
//! generated into arrays before anything is timed; worker threads, pinned to cores, take chunks
//! of 3,200 operations from one shared cursor (wrapping around the array) and check the stop flag
//! once per chunk; the run lasts a fixed time and counts whole chunks.
//!
//! Invariant: the timed loop does nothing but index the arrays and call the contender, so every
//! contender pays the same harness cost, and a ratio between two contenders is a ratio between
//! their maps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Operations a worker takes from the cursor at a time (FASTER's `kRefreshInterval * 50`).
pub const CHUNK_OPS: u64 = 3200;

/// One operation kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Read the key.
    Read = 0,
    /// Blind write of a new value.
    Upsert = 1,
    /// Read-modify-write: add to the stored counter.
    Rmw = 2,
}

/// A YCSB workload: the share of each kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// YCSB-A: 50 % reads, 50 % upserts.
    A,
    /// YCSB-B: 95 % reads, 5 % upserts.
    B,
    /// YCSB-C: reads only.
    C,
    /// YCSB-F-style: 50 % reads, 50 % read-modify-writes.
    F,
}

impl Workload {
    /// The name used in rows.
    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::F => "f",
        }
    }

    fn kind(self, percent: u64) -> Kind {
        let (reads, other) = match self {
            Workload::A => (50, Kind::Upsert),
            Workload::B => (95, Kind::Upsert),
            Workload::C => (100, Kind::Upsert),
            Workload::F => (50, Kind::Rmw),
        };
        if percent < reads {
            Kind::Read
        } else {
            other
        }
    }
}

/// The splitmix64 finaliser: a bijection of `u64`, so `key(i)` for `i < n` are `n` distinct keys.
#[inline]
pub fn key(index: u64) -> u64 {
    let mut z = index.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The pre-generated run: `keys[i]` and `kinds[i]` are operation `i` (the cursor wraps).
pub struct Operations {
    /// The key of each operation.
    pub keys: Vec<u64>,
    /// The kind of each operation.
    pub kinds: Vec<Kind>,
}

impl Operations {
    /// `count` operations of `workload` over `key(0..keys)`, uniform or zipfian (YCSB's scrambled
    /// zipfian, θ = 0.99), deterministic from `seed`.
    pub fn generate(
        workload: Workload,
        distribution: crate::workload::KeyDistribution,
        keys: u64,
        count: u64,
        seed: u64,
    ) -> Operations {
        let mut generator = crate::workload::KeyGenerator::new(distribution, keys, seed);
        let mut out = Operations {
            keys: Vec::with_capacity(count as usize),
            kinds: Vec::with_capacity(count as usize),
        };
        for _ in 0..count {
            out.keys.push(key(generator.next_key()));
            out.kinds.push(workload.kind(generator.percent() as u64));
        }
        out
    }

    fn len(&self) -> u64 {
        self.keys.len() as u64
    }
}

/// One thread's handle on a contender: runs the operations it is given.
pub trait Worker {
    /// Runs `keys[i]` / `kinds[i]` for every `i` (one chunk).
    fn run(&mut self, keys: &[u64], kinds: &[Kind]);
    /// Whether the map holds `key` (for verification, not timed).
    fn contains(&mut self, key: u64) -> bool;
}

/// Pins the calling thread to `core` (best effort: an error leaves it unpinned).
pub fn pin_to_core(core: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; the calls only touch it and this thread's affinity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Runs `threads` workers made by `make_worker(thread)` over `operations` for `duration`;
/// returns operations per second. Workers are made (and pinned) before the clock starts.
pub fn run<'a>(
    threads: usize,
    duration: Duration,
    operations: &Operations,
    make_worker: &(dyn Fn(usize) -> Box<dyn Worker + 'a> + Sync),
) -> f64 {
    let cursor = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let ready = AtomicU64::new(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let len = operations.len();
    let elapsed = std::thread::scope(|scope| {
        for thread in 0..threads {
            let (cursor, done, total, ready) = (&cursor, &done, &total, &ready);
            scope.spawn(move || {
                pin_to_core(thread % cores);
                let mut worker = make_worker(thread);
                ready.fetch_add(1, Ordering::SeqCst);
                while ready.load(Ordering::SeqCst) < threads as u64 + 1 {
                    std::hint::spin_loop();
                }
                let mut count = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let start = cursor.fetch_add(CHUNK_OPS, Ordering::Relaxed) % len;
                    let end = (start + CHUNK_OPS).min(len);
                    let range = start as usize..end as usize;
                    worker.run(&operations.keys[range.clone()], &operations.kinds[range]);
                    count += end - start;
                }
                total.fetch_add(count, Ordering::Relaxed);
            });
        }
        while ready.load(Ordering::SeqCst) < threads as u64 {
            std::thread::yield_now();
        }
        let started = Instant::now();
        ready.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(duration); // the measured interval itself, not a wait for a condition
        done.store(true, Ordering::Relaxed);
        // Each worker finishes the chunk it is in (at most 3,200 operations more): negligible.
        started.elapsed()
    });
    total.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}
