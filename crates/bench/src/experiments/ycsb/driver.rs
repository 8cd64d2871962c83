//! The timed run of `ycsb`, FASTER's way (the shared pieces are in
//! [`crate::workload::operations`]): worker threads, pinned to cores and made before the clock
//! starts, take chunks from one shared cursor until a fixed duration has passed; the run counts
//! whole chunks.
//!
//! Invariant: the timed loop does nothing but take a chunk and hand it to the contender.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::workload::maps::Worker;
use crate::workload::operations::{pin_to_core, Cursor, Operations};

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

    /// Its operation mix.
    pub fn mix(self) -> crate::workload::operations::OperationMix {
        use crate::workload::operations::{Kind, OperationMix};
        let (read_percent, write) = match self {
            Workload::A => (50, Kind::Upsert),
            Workload::B => (95, Kind::Upsert),
            Workload::C => (100, Kind::Upsert),
            Workload::F => (50, Kind::Rmw),
        };
        OperationMix {
            read_percent,
            write,
        }
    }
}

/// Runs `threads` workers made by `make_worker(thread)` over `operations` for `duration`;
/// returns operations per second. Workers are made (and pinned) before the clock starts; worker
/// `thread` stamps its writes as session `thread + 1`.
pub fn run<'a>(
    threads: usize,
    duration: Duration,
    operations: &Operations,
    make_worker: &(dyn Fn(usize) -> Box<dyn Worker + 'a> + Sync),
) -> f64 {
    let cursor = Cursor::new(operations);
    let done = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let ready = AtomicU64::new(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
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
                    let chunk = cursor.take(thread as u32 + 1, count + 1);
                    worker.run(&chunk);
                    count += chunk.len();
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
