//! End-to-end runs of the `tick` experiment: a `TickState` with the asynchronous writer and the
//! logical log on, ticks paced at the tick length, then recovery checked against the final
//! state; the contenders (algorithm × image store), the report rows and the tick-time helpers.

use super::tick_updates;
use crate::plot::Series;
use crate::report::row;
use crate::stats::ratio;
use anyhow::{bail, Context, Result};
use prefixkv_tickstate::{
    huge_pages_status, recover, Algorithm, AlgorithmKind, Config, ImageBase, ImageStore, TickState,
};
use rand_distr::Zipf;
use serde_json::Value;
use std::time::{Duration, Instant};

/// What one end-to-end run measured.
pub(super) struct EndToEnd {
    pub(super) tick_ns: Vec<f64>,
    pub(super) tick_cpu_ns: Vec<f64>,
    pub(super) checkpoints: u64,
    pub(super) deferred: u64,
    pub(super) image_bytes: u64,
    pub(super) base_bytes_read: u64,
    pub(super) wal_frame_bytes: u64,
    pub(super) backfill_bytes: u64,
    /// `AnonHugePages` of the process at the end of the run (0 if unknown).
    pub(super) anon_huge_bytes: u64,
    pub(super) recovery_ms: f64,
    pub(super) verified: bool,
}

impl EndToEnd {
    /// One run's figures: the writer's counters from `stats`, the per-tick times, and what the
    /// recovery after the run found.
    pub(super) fn from_run(
        stats: &prefixkv_tickstate::Stats,
        anon_huge_bytes: u64,
        tick_ns: Vec<f64>,
        tick_cpu_ns: Vec<f64>,
        recovery_ms: f64,
        verified: bool,
    ) -> EndToEnd {
        EndToEnd {
            tick_ns,
            tick_cpu_ns,
            checkpoints: stats.checkpoints_started,
            deferred: stats.checkpoints_deferred,
            image_bytes: stats.image_bytes_written,
            base_bytes_read: stats.base_bytes_read,
            wal_frame_bytes: stats.wal_frame_bytes_written,
            backfill_bytes: stats.backfill_bytes_written,
            anon_huge_bytes,
            recovery_ms,
            verified,
        }
    }

    pub(super) fn tick_max_over_p50(&self) -> f64 {
        ratio(
            percentile(&self.tick_ns, 1.0),
            percentile(&self.tick_ns, 0.5),
        )
    }

    pub(super) fn tick_cpu_max_over_p50(&self) -> f64 {
        ratio(
            percentile(&self.tick_cpu_ns, 1.0),
            percentile(&self.tick_cpu_ns, 0.5),
        )
    }
}

/// One end-to-end configuration: an algorithm with an image store.
pub(super) struct Contender {
    /// Index into the algorithm list (its overhead-sweep memory is reused).
    pub(super) index: usize,
    pub(super) kind: AlgorithmKind,
    pub(super) image_base: ImageBase,
    pub(super) image_store: ImageStore,
    pub(super) label: String,
    /// The algorithm's main run (spike summaries come from it).
    pub(super) primary: bool,
    /// For IPP: 0 = double-backup Copy, 1 = WAL store (merge_over_copy_write_bytes).
    pub(super) ipp_bytes_slot: Option<usize>,
}

impl Contender {
    /// Writer memory beyond the algorithm's arrays: Merge in memory keeps one image; the WAL
    /// store's page cache keeps the newest image's pages (plus 1/1024 of checksums).
    pub(super) fn extra_memory_bytes(&self, words: usize) -> u64 {
        match self.image_store {
            ImageStore::DoubleBackup if self.image_base == ImageBase::MergeInMemory => {
                words as u64 * 8
            }
            ImageStore::DoubleBackup => 0,
            ImageStore::PageStoreWal { .. } => words as u64 * 8 + words as u64 * 8 / 1024,
        }
    }
}

/// Every algorithm with the main store, then IPP with Merge in memory and with the other store.
pub(super) fn e2e_contenders(
    algorithms: &[AlgorithmKind],
    main_store: ImageStore,
    wal_store: ImageStore,
) -> Vec<Contender> {
    let main_is_wal = main_store != ImageStore::DoubleBackup;
    let mut contenders: Vec<Contender> = algorithms
        .iter()
        .enumerate()
        .map(|(index, kind)| Contender {
            index,
            kind: *kind,
            image_base: ImageBase::CopyFromFile,
            image_store: main_store,
            label: if main_is_wal {
                format!("{}-WAL", kind.short_name())
            } else {
                kind.short_name().to_string()
            },
            primary: true,
            ipp_bytes_slot: (*kind == AlgorithmKind::InterleavedPingPong)
                .then_some(main_is_wal as usize),
        })
        .collect();
    if let Some(ipp) = algorithms
        .iter()
        .position(|k| *k == AlgorithmKind::InterleavedPingPong)
    {
        let extra = |image_base, image_store, label: &str, slot| Contender {
            index: ipp,
            kind: AlgorithmKind::InterleavedPingPong,
            image_base,
            image_store,
            label: label.into(),
            primary: false,
            ipp_bytes_slot: slot,
        };
        contenders.push(extra(
            ImageBase::MergeInMemory,
            ImageStore::DoubleBackup,
            "IPP-MergeMem",
            None,
        ));
        contenders.push(if main_is_wal {
            extra(
                ImageBase::CopyFromFile,
                ImageStore::DoubleBackup,
                "IPP-Copy",
                Some(0),
            )
        } else {
            extra(ImageBase::CopyFromFile, wal_store, "IPP-WAL", Some(1))
        });
    }
    contenders
}

/// Tick p50 / p99 / max (ms) of `ticks_ns` into `line`.
pub(super) fn insert_percentiles(line: &mut serde_json::Map<String, Value>, ticks_ns: &[f64]) {
    line.insert(
        "tick_p50_ms".into(),
        Value::from(percentile(ticks_ns, 0.5) / 1e6),
    );
    line.insert(
        "tick_p99_ms".into(),
        Value::from(percentile(ticks_ns, 0.99) / 1e6),
    );
    line.insert(
        "tick_max_ms".into(),
        Value::from(percentile(ticks_ns, 1.0) / 1e6),
    );
}

/// The report row of one end-to-end run.
pub(super) fn end_to_end_row(
    part: &str,
    label: &str,
    updates_per_s: f64,
    run: &EndToEnd,
    memory_bytes: u64,
) -> serde_json::Map<String, Value> {
    let mut line = row([
        ("part", Value::from(part)),
        ("algorithm", Value::from(label)),
        ("updates_per_s", Value::from(updates_per_s)),
    ]);
    insert_percentiles(&mut line, &run.tick_ns);
    line.insert(
        "tick_max_over_p50".into(),
        Value::from(run.tick_max_over_p50()),
    );
    line.insert(
        "tick_cpu_p50_ms".into(),
        Value::from(percentile(&run.tick_cpu_ns, 0.5) / 1e6),
    );
    line.insert(
        "tick_cpu_max_ms".into(),
        Value::from(percentile(&run.tick_cpu_ns, 1.0) / 1e6),
    );
    line.insert(
        "tick_cpu_max_over_p50".into(),
        Value::from(run.tick_cpu_max_over_p50()),
    );
    line.insert("checkpoints".into(), Value::from(run.checkpoints));
    line.insert("checkpoints_deferred".into(), Value::from(run.deferred));
    line.insert("image_bytes_written".into(), Value::from(run.image_bytes));
    line.insert(
        "image_bytes_per_checkpoint".into(),
        Value::from(ratio(run.image_bytes as f64, run.checkpoints as f64)),
    );
    line.insert(
        "wal_frame_bytes_written".into(),
        Value::from(run.wal_frame_bytes),
    );
    line.insert(
        "backfill_bytes_written".into(),
        Value::from(run.backfill_bytes),
    );
    line.insert("base_bytes_read".into(), Value::from(run.base_bytes_read));
    line.insert("memory_bytes".into(), Value::from(memory_bytes));
    line.insert("recovery_ms".into(), Value::from(run.recovery_ms));
    line.insert("verified".into(), Value::from(run.verified));
    line
}

/// Mutator time of every tick of a run, for the over-time chart.
pub(super) fn tick_series(label: &str, run: &EndToEnd) -> Series {
    Series {
        label: label.into(),
        points: run
            .tick_ns
            .iter()
            .enumerate()
            .map(|(number, ns)| (number as f64, ns / 1e6))
            .collect(),
    }
}

pub(super) fn e2e_apply(zipf: &Zipf<f64>, words: usize) -> impl FnMut(&mut [u64], u64, &[u8]) + '_ {
    move |state, _tick, action| {
        let seed = u64::from_le_bytes(action[0..8].try_into().expect("8-byte seed"));
        let updates = u64::from_le_bytes(action[8..16].try_into().expect("8-byte count")) as usize;
        for (index, value) in tick_updates(zipf, words, updates, seed) {
            state[index as usize] = value;
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_end_to_end<A: Algorithm>(
    words: usize,
    huge_pages: bool,
    zipf: &Zipf<f64>,
    updates_per_tick: usize,
    ticks: usize,
    tick: Duration,
    image_base: ImageBase,
    image_store: ImageStore,
) -> Result<EndToEnd> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let mut config = Config::new(words);
    config.huge_pages = huge_pages;
    config.image_base = image_base;
    config.image_store = image_store;
    let (mut state, _) = TickState::<A>::open(dir.path(), config, e2e_apply(zipf, words))?;
    let mut times = Vec::with_capacity(ticks);
    let mut cpu_times = Vec::with_capacity(ticks);
    let mut next_deadline = Instant::now() + tick;
    for number in 0..ticks {
        let seed = 0xE2E0_0000 + number as u64;
        let updates = tick_updates(zipf, words, updates_per_tick, seed);
        let mut action = seed.to_le_bytes().to_vec();
        action.extend_from_slice(&(updates_per_tick as u64).to_le_bytes());
        let started = Instant::now();
        let cpu_started = thread_cpu_ns();
        state.log_action(&action)?;
        for (index, value) in updates {
            state.write(index as usize, value);
        }
        let next_tick = state.tick() + 1;
        state.point_of_consistency(next_tick)?;
        times.push(started.elapsed().as_nanos() as f64);
        cpu_times.push(thread_cpu_ns() - cpu_started);
        // Pacing the game loop (the benchmark's stand-in for a frame budget), not a wait for a
        // condition.
        let now = Instant::now();
        if next_deadline > now {
            std::thread::sleep(next_deadline - now);
        }
        next_deadline += tick;
    }
    state.wait_durable()?;
    if !state.wait_writer_idle(Duration::from_secs(120))? {
        bail!("the image writer did not finish within 120 s");
    }
    let final_state: Vec<u64> = (0..words).map(|i| state.read(i)).collect();
    let final_tick = state.tick();
    let stats = state.stats();
    let anon_huge_bytes = huge_pages_status().anon_huge_bytes.unwrap_or(0);
    state.close()?;
    let started = Instant::now();
    let (recovered, recovered_tick, _report) = recover(dir.path(), words, e2e_apply(zipf, words))?;
    let recovery_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(EndToEnd::from_run(
        &stats,
        anon_huge_bytes,
        times,
        cpu_times,
        recovery_ms,
        recovered_tick == final_tick && recovered == final_state,
    ))
}

/// CPU time of the calling thread in ns: the mutator's own work, without the time other processes
/// of the shared machine (or the writer thread) held the core.
pub(super) fn thread_cpu_ns() -> f64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as f64 * 1e9 + time.tv_nsec as f64
}

pub(super) fn percentile(values: &[f64], fraction: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}
