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

/// What one worker of a run did: its session index, last serial, chunk log (positions in the
/// order it ran them), and its engine session, if it ran on one.
pub struct WorkerEnd {
    /// The session index its stamps carry.
    pub session: u32,
    /// Its last serial (operations it ran).
    pub serial: u64,
    /// The position of every chunk it ran, in order.
    pub chunks: Vec<u64>,
    /// The engine session it ran on (engine contenders only).
    pub engine_session: Option<prefixkv_engine::SessionId>,
}

/// Runs `threads` workers made by `make_worker(thread)` over `operations` for `duration`;
/// returns operations per second and what each worker did. Workers are made (and pinned) before
/// the clock starts; worker `thread` stamps its writes as session `first_session + thread` and
/// stores its last serial in `acknowledged[thread]` after every chunk (every contender pays that
/// one store per 3,200 operations, and the chunk log's push, alike).
pub fn run<'a>(
    threads: usize,
    duration: Duration,
    operations: &Operations,
    make_worker: &(dyn Fn(usize) -> Box<dyn Worker + 'a> + Sync),
    first_session: u32,
    acknowledged: &[std::sync::Arc<AtomicU64>],
) -> (f64, Vec<WorkerEnd>) {
    assert_eq!(acknowledged.len(), threads, "one counter per worker");
    let cursor = Cursor::new(operations);
    let done = AtomicBool::new(false);
    let ready = AtomicU64::new(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (elapsed, ends) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (cursor, done, ready) = (&cursor, &done, &ready);
                let counter = &*acknowledged[thread];
                scope.spawn(move || {
                    pin_to_core(thread % cores);
                    let session = first_session + thread as u32;
                    let mut worker = make_worker(thread);
                    let engine_session = worker.engine_session();
                    let mut chunks = Vec::new();
                    ready.fetch_add(1, Ordering::SeqCst);
                    while ready.load(Ordering::SeqCst) < threads as u64 + 1 {
                        std::hint::spin_loop();
                    }
                    let mut count = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        let chunk = cursor.take(session, count + 1);
                        worker.run(&chunk);
                        count += chunk.len();
                        chunks.push(chunk.position);
                        counter.store(count, Ordering::SeqCst);
                    }
                    WorkerEnd {
                        session,
                        serial: count,
                        chunks,
                        engine_session,
                    }
                })
            })
            .collect();
        while ready.load(Ordering::SeqCst) < threads as u64 {
            std::thread::yield_now();
        }
        let started = Instant::now();
        ready.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(duration); // the measured interval itself, not a wait for a condition
        done.store(true, Ordering::Relaxed);
        // Each worker finishes the chunk it is in (at most 3,200 operations more): negligible.
        let elapsed = started.elapsed();
        let ends: Vec<WorkerEnd> = handles
            .into_iter()
            .map(|handle| handle.join().expect("a ycsb worker panicked"))
            .collect();
        (elapsed, ends)
    });
    let total: u64 = ends.iter().map(|end| end.serial).sum();
    (total as f64 / elapsed.as_secs_f64(), ends)
}
