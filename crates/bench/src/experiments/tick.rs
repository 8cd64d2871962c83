//! `prefixkv-bench tick`: the checkpointing algorithms of Cao et al. (SIGMOD 2011) on a synthetic
//! Zipf workload, as in §5.3 of the paper, on `prefixkv-tickstate`.
//!
//! Two parts:
//!
//! 1. **Synchronous overhead** (asynchronous writer and logging off, as the paper did). For each
//!    update rate and algorithm, a fresh state runs `ticks` ticks; each tick applies
//!    `rate × tick_ms / 1000` Zipf-distributed updates as fast as possible (no 33 ms of wall time
//!    is simulated: only mutator time counts) and then reaches its point of consistency, where a
//!    checkpoint starts (`prepare`). The tick's mutator time is `updates + prepare`. A baseline
//!    with no checkpointing (plain `Vec<u64>` stores) runs the same update sequence; the
//!    *overhead per checkpoint* is the algorithm's median `prepare` time plus its median update
//!    time per tick minus the baseline's (medians: robust to a tick preempted on a shared machine). Between
//!    ticks, outside the timed region, the writer's capture runs to completion into memory (so
//!    flags are cleared and Ping-Pong gets its base), and on every fourth tick the captured image
//!    is compared (CRC32C) with the state read at the point of consistency; at the end the state
//!    must equal the baseline's. Contenders alternate over `rounds` rounds.
//! 2. **End to end** (writer and logging on): each algorithm runs `e2e_ticks` ticks paced at
//!    `tick_ms` through [`prefixkv_tickstate::TickState`] in a temporary directory, logging one
//!    action per tick (the seed of its updates, a logical log of inputs); checkpoints start when
//!    the writer is idle and are deferred otherwise. Per-tick mutator time gives the latency
//!    distribution (spikes), then the directory is recovered and must equal the final state
//!    (recovery time is reported).

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Spread};
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::{huge_pages_status, Algorithm, AlgorithmKind, ImageBase, ImageStore};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use serde_json::Value;
use std::time::{Duration, Instant};

#[path = "tick_e2e.rs"]
mod e2e;
#[path = "tick_mmo.rs"]
mod mmo;

use e2e::{
    e2e_contenders, end_to_end_row, insert_percentiles, percentile, run_end_to_end, thread_cpu_ns,
    tick_series, EndToEnd,
};

/// Flags of the tick experiment.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// State size in MiB (default: 200, or 32 with --quick).
    #[arg(long)]
    pub state_mb: Option<usize>,
    /// Update rates (updates per second) to sweep (default: 1K..2.5M, fewer with --quick).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<u64>,
    /// Zipf exponent of the updated cells.
    #[arg(long, default_value_t = 0.8)]
    pub skew: f64,
    /// Tick length in milliseconds (sets updates per tick; paces the end-to-end run).
    #[arg(long, default_value_t = 33)]
    pub tick_ms: u64,
    /// Measured ticks per cell of the overhead sweep (default: 30, or 8 with --quick).
    #[arg(long)]
    pub ticks: Option<usize>,
    /// Ticks of the end-to-end run per algorithm (default: 150, or 30 with --quick).
    #[arg(long)]
    pub e2e_ticks: Option<usize>,
    /// Update rate of the end-to-end run.
    #[arg(long, default_value_t = 160_000)]
    pub e2e_rate: u64,
    /// Back the state with transparent huge pages (`madvise(MADV_HUGEPAGE)`).
    #[arg(long)]
    pub huge_pages: bool,
    /// Algorithms to run (default: all): NS, COU, BACOU, NZZ, BAZZ, NPP, IPP.
    #[arg(long, value_delimiter = ',')]
    pub algorithms: Vec<String>,
    /// Image store of the end-to-end runs: `double-backup` (two image files) or `wal`
    /// (changed pages as pagestore WAL frames, backfilled by its checkpoint). IPP also runs
    /// with the other store, for `merge_over_copy_write_bytes`.
    #[arg(long, default_value = "double-backup")]
    pub image_store: String,
    /// WAL store: backfill once this many frames are pending (0: one image's worth of pages).
    #[arg(long, default_value_t = 0)]
    pub wal_backfill_frames: u64,
    /// MMO world size in MiB (default: the state size, or 16 with --quick).
    #[arg(long)]
    pub mmo_mb: Option<usize>,
    /// MMO entities acting per tick.
    #[arg(long, default_value_t = 4096)]
    pub mmo_active: usize,
    /// Skip the MMO scenario.
    #[arg(long)]
    pub no_mmo: bool,
}

/// Ticks run before measuring, so that every array has been through a checkpoint.
const WARMUP_TICKS: usize = 2;

/// The update sequence of one tick: Zipf ranks scrambled over the cells.
fn tick_updates(zipf: &Zipf<f64>, words: usize, updates: usize, seed: u64) -> Vec<(u32, u64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..updates)
        .map(|j| {
            let rank = zipf.sample(&mut rng) as u64 - 1;
            let index = rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % words as u64;
            (index as u32, seed.wrapping_mul(31).wrapping_add(j as u64))
        })
        .collect()
}

fn image_crc(image: &[u64]) -> u32 {
    let mut crc = 0;
    for chunk in image.chunks(1 << 16) {
        // SAFETY: u64s viewed as bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts(chunk.as_ptr().cast::<u8>(), chunk.len() * 8) };
        crc = crc32c::crc32c_append(crc, bytes);
    }
    crc
}

/// What one overhead cell measured.
struct OverheadCell {
    tick_ns: Vec<f64>,
    prepare_ns: Vec<f64>,
    memory_bytes: usize,
    verified: bool,
}

impl OverheadCell {
    /// Overhead per checkpoint against the no-checkpoint baseline's tick times: median
    /// `prepare` + (median update time − the baseline's median), the difference floored at
    /// zero (at tens of updates per tick its sign is timer noise). Medians, so that a tick
    /// preempted by another process of the shared machine does not move the result.
    fn overhead_ns(&self, baseline_ns: &[f64]) -> f64 {
        let updates_ns: Vec<f64> = self
            .tick_ns
            .iter()
            .zip(&self.prepare_ns)
            .map(|(tick, prepare)| tick - prepare)
            .collect();
        median(&self.prepare_ns) + (median(&updates_ns) - median(baseline_ns)).max(0.0)
    }
}

/// Baseline: the same updates into a plain vector; returns per-tick ns and the final state.
fn run_baseline(words: usize, ticks: &[Vec<(u32, u64)>]) -> (Vec<f64>, Vec<u64>) {
    let mut state = vec![0u64; words];
    let mut times = Vec::new();
    for (number, updates) in ticks.iter().enumerate() {
        let started = Instant::now();
        for &(index, value) in updates {
            state[index as usize] = value;
        }
        std::hint::black_box(&mut state);
        if number >= WARMUP_TICKS {
            times.push(started.elapsed().as_nanos() as f64);
        }
    }
    (times, state)
}

fn run_overhead<A: Algorithm>(
    words: usize,
    huge_pages: bool,
    ticks: &[Vec<(u32, u64)>],
    expected: &[u64],
) -> Result<OverheadCell> {
    let algorithm = A::new(words, huge_pages).context("allocating the state")?;
    let mut image = vec![0u64; words];
    let mut cell = OverheadCell {
        tick_ns: Vec::new(),
        prepare_ns: Vec::new(),
        memory_bytes: algorithm.memory_bytes(),
        verified: true,
    };
    for (number, updates) in ticks.iter().enumerate() {
        let started = Instant::now();
        for &(index, value) in updates {
            algorithm.write(index as usize, value);
        }
        let updates_ns = started.elapsed().as_nanos() as f64;
        let check = number % 4 == 0 || number + 1 == ticks.len();
        let reference_crc = if check {
            let reference: Vec<u64> = (0..words).map(|i| algorithm.read(i)).collect();
            Some(image_crc(&reference))
        } else {
            None
        };
        let prepare_started = Instant::now();
        // SAFETY: this thread is the only mutator, and the previous capture finished below.
        unsafe { algorithm.prepare() };
        let prepare_ns = prepare_started.elapsed().as_nanos() as f64;
        if number >= WARMUP_TICKS {
            cell.tick_ns.push(updates_ns + prepare_ns);
            cell.prepare_ns.push(prepare_ns);
        }
        // The writer's work, untimed: capture into `image` (which holds the previous image,
        // the base Ping-Pong needs).
        for start in (0..words).step_by(1 << 16) {
            let end = (start + (1 << 16)).min(words);
            algorithm.capture(start, &mut image[start..end]);
        }
        if let Some(reference_crc) = reference_crc {
            cell.verified &= image_crc(&image) == reference_crc;
        }
    }
    cell.verified &= (0..words).all(|i| algorithm.read(i) == expected[i]);
    Ok(cell)
}

fn mmo_overhead<A: Algorithm>(
    world: &mmo::World,
    huge_pages: bool,
    total_ticks: usize,
    expected: &[u64],
) -> Result<OverheadCell> {
    mmo::run_overhead::<A>(world, huge_pages, total_ticks, expected)
}

#[allow(clippy::too_many_arguments)]
fn mmo_end_to_end<A: Algorithm>(
    world: &mmo::World,
    skew: f64,
    huge_pages: bool,
    ticks: usize,
    tick: Duration,
    image_base: ImageBase,
    image_store: ImageStore,
    reference: &[u64],
) -> Result<EndToEnd> {
    mmo::run_end_to_end::<A>(
        world,
        skew,
        huge_pages,
        ticks,
        tick,
        image_base,
        image_store,
        reference,
    )
}

macro_rules! dispatch {
    ($kind:expr, $function:ident ( $($argument:expr),* )) => {
        match $kind {
            AlgorithmKind::NaiveSnapshot => $function::<NaiveSnapshot>($($argument),*),
            AlgorithmKind::CopyOnUpdate => $function::<CopyOnUpdate>($($argument),*),
            AlgorithmKind::BitArrayCopyOnUpdate => $function::<BitArrayCopyOnUpdate>($($argument),*),
            AlgorithmKind::NaiveZigzag => $function::<NaiveZigzag>($($argument),*),
            AlgorithmKind::BitArrayZigzag => $function::<BitArrayZigzag>($($argument),*),
            AlgorithmKind::NaivePingPong => $function::<NaivePingPong>($($argument),*),
            AlgorithmKind::InterleavedPingPong => $function::<InterleavedPingPong>($($argument),*),
        }
    };
}

fn median(values: &[f64]) -> f64 {
    Spread::of(values).median
}

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let quick = common.quick;
    let state_mb = args.state_mb.unwrap_or(if quick { 32 } else { 200 });
    let words = state_mb * (1 << 20) / 8;
    if words == 0 || words > u32::MAX as usize {
        bail!("--state-mb {state_mb} gives {words} cells; use 1..=32768 MiB");
    }
    let rates: Vec<u64> = if !args.rates.is_empty() {
        args.rates.clone()
    } else if quick {
        vec![1_000, 2_500_000, 20_000_000]
    } else {
        // Past 2.5 M/s (the paper's range) up to 100 M/s: rates no single mutator can sustain
        // in a 33 ms tick here, swept to find where NS's constant copy beats IPP's per-update
        // cost (the overhead sweep does not pace ticks, so it can).
        vec![
            1_000,
            4_000,
            16_000,
            40_000,
            160_000,
            640_000,
            2_500_000,
            10_000_000,
            40_000_000,
            100_000_000,
        ]
    };
    let ticks = args.ticks.unwrap_or(if quick { 5 } else { 30 });
    let e2e_ticks = args.e2e_ticks.unwrap_or(if quick { 20 } else { 150 });
    let algorithms: Vec<AlgorithmKind> = if args.algorithms.is_empty() {
        AlgorithmKind::ALL.to_vec()
    } else {
        args.algorithms
            .iter()
            .map(|name| {
                AlgorithmKind::parse(name).with_context(|| format!("unknown algorithm {name}"))
            })
            .collect::<Result<_>>()?
    };
    if args.skew.is_nan() || args.skew <= 0.0 {
        bail!("--skew must be positive");
    }
    let zipf = Zipf::new(words as f64, args.skew).context("Zipf parameters")?;
    let wal_store = ImageStore::PageStoreWal {
        backfill_after_frames: args.wal_backfill_frames,
    };
    let main_store = match args.image_store.as_str() {
        "double-backup" => ImageStore::DoubleBackup,
        "wal" => wal_store,
        other => bail!("--image-store {other}: use double-backup or wal"),
    };
    let rounds = common.rounds();
    let mut report = Report::new("tick");
    report.config("state_mb", state_mb as u64);
    report.config("words", words as u64);
    report.config("cell_bytes", 8u64);
    report.config("rates_updates_per_s", Value::from(rates.clone()));
    report.config("skew", args.skew);
    report.config("tick_ms", args.tick_ms);
    report.config("ticks_per_cell", ticks as u64);
    report.config("warmup_ticks", WARMUP_TICKS as u64);
    report.config("e2e_ticks", e2e_ticks as u64);
    report.config("e2e_rate_updates_per_s", args.e2e_rate);
    report.config("huge_pages", args.huge_pages);
    report.config("image_store", args.image_store.as_str());
    report.config("wal_backfill_frames", args.wal_backfill_frames);
    report.config("rounds", rounds as u64);
    report.notes.push(
        "Overhead sweep: ticks run back to back (no 33 ms of wall time simulated); overhead per checkpoint = median prepare time + (median update time per tick minus the no-checkpoint baseline's) (the update-cost part floored at zero, since at tens of updates per tick its sign is timer noise), with the writer's capture run untimed between ticks and logging off, as the paper measured.".into(),
    );
    report.notes.push("Cells are 64-bit words. The overhead sweep does not write files (Copy vs Merge does not change mutator work); the end-to-end run adds IPP-Merge: the writer keeps the previous image in memory and overlays dirty words in place, instead of reading the previous image file (Copy). It writes full images like Copy; the difference is the base read (base_bytes_read) and |AS| of writer memory. IPP-WAL (or IPP-Copy when --image-store wal) is the WAL-backed store: only changed pages go to the pagestore WAL as frames of one commit per image, and the pagestore checkpoint backfills them into the image file; merge_over_copy_write_bytes = IPP-WAL's bytes written per checkpoint (WAL frames + backfill writes, counted as written) / IPP Copy's (full image + footers).".into());

    // overhead[algorithm][rate] = per-round overhead ns; plus tick times.
    let mut overhead: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); rates.len()]; algorithms.len()];
    let mut tick_times: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); rates.len()]; algorithms.len()];
    let mut prepare_times: Vec<Vec<Vec<f64>>> =
        vec![vec![Vec::new(); rates.len()]; algorithms.len()];
    let mut memory = vec![0usize; algorithms.len()];
    // Median baseline tick time per rate and round (what the updates alone cost).
    let mut baseline_tick_ns: Vec<Vec<f64>> = vec![Vec::new(); rates.len()];
    let sweep_started = Instant::now();
    for (rate_number, &rate) in rates.iter().enumerate() {
        let updates_per_tick = ((rate as f64) * args.tick_ms as f64 / 1000.0)
            .round()
            .max(1.0) as usize;
        let tick_updates_list: Vec<Vec<(u32, u64)>> = (0..WARMUP_TICKS + ticks)
            .map(|t| tick_updates(&zipf, words, updates_per_tick, (rate << 20) + t as u64))
            .collect();
        let mut baseline: Option<(usize, Vec<f64>, Vec<u64>)> = None;
        for (round, contender) in alternating_schedule(algorithms.len(), rounds) {
            let kind = algorithms[contender];
            if baseline
                .as_ref()
                .is_none_or(|(baseline_round, _, _)| *baseline_round != round)
            {
                let (times, state) = run_baseline(words, &tick_updates_list);
                baseline = Some((round, times, state));
            }
            let (_, baseline_ns, expected) = baseline.as_ref().expect("set above");
            let cell = dispatch!(
                kind,
                run_overhead(words, args.huge_pages, &tick_updates_list, expected)
            )?;
            if !cell.verified {
                eprintln!(
                    "tick: {} at {rate}/s round {round}: image or final state mismatch",
                    kind.short_name()
                );
            }
            report.record_verification(cell.verified);
            overhead[contender][rate_number].push(cell.overhead_ns(baseline_ns));
            if contender == 0 {
                baseline_tick_ns[rate_number].push(median(baseline_ns));
            }
            tick_times[contender][rate_number].extend_from_slice(&cell.tick_ns);
            prepare_times[contender][rate_number].push(median(&cell.prepare_ns));
            memory[contender] = cell.memory_bytes;
        }
        eprintln!(
            "tick: rate {rate}/s done ({:.1} s)",
            sweep_started.elapsed().as_secs_f64()
        );
    }
    let overhead_median =
        |algorithm: usize, rate: usize| Spread::of(&overhead[algorithm][rate]).median;
    for (contender, kind) in algorithms.iter().enumerate() {
        for (rate_number, &rate) in rates.iter().enumerate() {
            let mut line = row([
                ("part", Value::from("overhead")),
                ("algorithm", Value::from(kind.short_name())),
                ("updates_per_s", Value::from(rate)),
            ]);
            Spread::of(
                &overhead[contender][rate_number]
                    .iter()
                    .map(|ns| ns / 1e6)
                    .collect::<Vec<_>>(),
            )
            .insert_into(&mut line, "overhead_ms_per_checkpoint");
            Spread::of(
                &prepare_times[contender][rate_number]
                    .iter()
                    .map(|ns| ns / 1e6)
                    .collect::<Vec<_>>(),
            )
            .insert_into(&mut line, "prepare_ms");
            let ticks_ns = &tick_times[contender][rate_number];
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
            line.insert("memory_bytes".into(), Value::from(memory[contender] as u64));
            report.rows.push(line);
        }
    }

    // End to end: writer and logging on, paced ticks.
    let e2e_updates = ((args.e2e_rate as f64) * args.tick_ms as f64 / 1000.0)
        .round()
        .max(1.0) as usize;
    let contenders = e2e_contenders(&algorithms, main_store, wal_store);
    let mut e2e_series = Vec::new();
    let mut e2e_spike = vec![f64::NAN; algorithms.len()];
    let mut e2e_cpu_spike = vec![f64::NAN; algorithms.len()];
    // Image bytes written per checkpoint: IPP with double-backup Copy, and IPP with the WAL store.
    let mut ipp_bytes_per_checkpoint = [f64::NAN; 2];
    let mut anon_huge_bytes_max = 0u64;
    for contender in &contenders {
        let run = dispatch!(
            contender.kind,
            run_end_to_end(
                words,
                args.huge_pages,
                &zipf,
                e2e_updates,
                e2e_ticks,
                Duration::from_millis(args.tick_ms),
                contender.image_base,
                contender.image_store
            )
        )?;
        anon_huge_bytes_max = anon_huge_bytes_max.max(run.anon_huge_bytes);
        if let Some(slot) = contender.ipp_bytes_slot {
            ipp_bytes_per_checkpoint[slot] = ratio(run.image_bytes as f64, run.checkpoints as f64);
        }
        report.record_verification(run.verified);
        if contender.primary {
            e2e_spike[contender.index] = run.tick_max_over_p50();
            e2e_cpu_spike[contender.index] = run.tick_cpu_max_over_p50();
        }
        let extra_memory = contender.extra_memory_bytes(words);
        report.rows.push(end_to_end_row(
            "end_to_end",
            &contender.label,
            args.e2e_rate as f64,
            &run,
            memory[contender.index] as u64 + extra_memory,
        ));
        e2e_series.push(tick_series(&contender.label, &run));
        eprintln!(
            "tick: end-to-end {} done (verified: {})",
            contender.label, run.verified
        );
    }

    // The MMO world: overhead (writer off, ticks back to back) and end to end.
    let mut mmo_overhead_median = vec![f64::NAN; algorithms.len()];
    let mut mmo_spike = vec![f64::NAN; algorithms.len()];
    let mut mmo_updates_per_s = f64::NAN;
    if !args.no_mmo {
        // Quick: a 16 MiB world (262 K entities), to keep the run near a minute.
        let mmo_mb = args.mmo_mb.unwrap_or(if quick && args.state_mb.is_none() {
            16
        } else {
            state_mb
        });
        let entities = mmo_mb * (1 << 20) / 8 / mmo::ENTITY_WORDS;
        let world = mmo::World::new(entities, args.mmo_active, args.skew, 0x6A4E_5EED)?;
        report.config("mmo_mb", mmo_mb as u64);
        report.config("mmo_entities", entities as u64);
        report.config("mmo_active_per_tick", args.mmo_active as u64);
        let total_ticks = WARMUP_TICKS + ticks;
        let mut overheads: Vec<Vec<f64>> = vec![Vec::new(); algorithms.len()];
        let mut mmo_ticks: Vec<Vec<f64>> = vec![Vec::new(); algorithms.len()];
        let mut mmo_memory = vec![0usize; algorithms.len()];
        let mut baseline: Option<(usize, Vec<f64>, Vec<u64>)> = None;
        for (round, contender) in alternating_schedule(algorithms.len(), rounds) {
            if baseline.as_ref().is_none_or(|(r, _, _)| *r != round) {
                let (times, state, writes_per_tick) = mmo::run_baseline(&world, total_ticks);
                mmo_updates_per_s = writes_per_tick * 1000.0 / args.tick_ms as f64;
                baseline = Some((round, times, state));
            }
            let (_, baseline_ns, expected) = baseline.as_ref().expect("set above");
            let kind = algorithms[contender];
            let cell = dispatch!(
                kind,
                mmo_overhead(&world, args.huge_pages, total_ticks, expected)
            )?;
            if !cell.verified {
                eprintln!(
                    "tick: MMO {} round {round}: image or final state mismatch",
                    kind.short_name()
                );
            }
            report.record_verification(cell.verified);
            overheads[contender].push(cell.overhead_ns(baseline_ns));
            mmo_ticks[contender].extend_from_slice(&cell.tick_ns);
            mmo_memory[contender] = cell.memory_bytes;
        }
        for (contender, kind) in algorithms.iter().enumerate() {
            mmo_overhead_median[contender] = Spread::of(&overheads[contender]).median;
            let mut line = row([
                ("part", Value::from("mmo_overhead")),
                ("algorithm", Value::from(kind.short_name())),
                ("updates_per_s", Value::from(mmo_updates_per_s)),
            ]);
            Spread::of(
                &overheads[contender]
                    .iter()
                    .map(|ns| ns / 1e6)
                    .collect::<Vec<_>>(),
            )
            .insert_into(&mut line, "overhead_ms_per_checkpoint");
            insert_percentiles(&mut line, &mmo_ticks[contender]);
            line.insert(
                "memory_bytes".into(),
                Value::from(mmo_memory[contender] as u64),
            );
            report.rows.push(line);
        }
        eprintln!(
            "tick: MMO overhead done ({:.0} updates/s)",
            mmo_updates_per_s
        );
        let e2e_ticks_total = e2e_ticks;
        let (_, reference, _) = mmo::run_baseline(&world, e2e_ticks_total);
        let mut mmo_series = Vec::new();
        for contender in &contenders {
            let run = dispatch!(
                contender.kind,
                mmo_end_to_end(
                    &world,
                    args.skew,
                    args.huge_pages,
                    e2e_ticks_total,
                    Duration::from_millis(args.tick_ms),
                    contender.image_base,
                    contender.image_store,
                    &reference
                )
            )?;
            report.record_verification(run.verified);
            if contender.primary {
                mmo_spike[contender.index] = run.tick_max_over_p50();
            }
            report.rows.push(end_to_end_row(
                "mmo_end_to_end",
                &contender.label,
                mmo_updates_per_s,
                &run,
                mmo_memory[contender.index] as u64
                    + contender.extra_memory_bytes(entities * mmo::ENTITY_WORDS),
            ));
            mmo_series.push(tick_series(&contender.label, &run));
            eprintln!(
                "tick: MMO end-to-end {} done (verified: {})",
                contender.label, run.verified
            );
        }
        let chart = LineChart {
            title: format!("MMO: mutator time per tick ({entities} entities, {} acting per tick, writer and log on)", args.mmo_active),
            x_label: "tick".into(),
            y_label: "mutator time per tick (ms)".into(),
            series: mmo_series,
            markers: Vec::new(),
            log_x: false,
        };
        write_line_chart(&chart, &common.out, "tick_mmo_over_time")?;
    }
    let status = huge_pages_status();
    report.config("huge_pages_advised_bytes", status.advised_bytes);
    report.config("huge_pages_refusals", status.refusals);
    report.config(
        "huge_pages_kernel_mode",
        status.kernel_mode.clone().unwrap_or_default(),
    );
    report.config("anon_huge_bytes_max_seen", anon_huge_bytes_max);
    if args.huge_pages {
        report.notes.push(format!(
            "--huge-pages: madvise(MADV_HUGEPAGE) accepted for {} bytes, refused {} times (refusals are logged and the run continues with 4 KiB pages); kernel THP mode {:?}; at most {} bytes of the process were backed by huge pages when sampled at the end of each end-to-end run.",
            status.advised_bytes, status.refusals, status.kernel_mode, anon_huge_bytes_max
        ));
    }

    // Summary.
    let position = |kind: AlgorithmKind| algorithms.iter().position(|k| *k == kind);
    // Total overhead over the sweep, numerator over denominator: dominated by the rates where
    // the layouts' per-update costs differ, not by sub-microsecond prepare times at low rates
    // (whose ratio is timer noise).
    let sweep_ratio = |numerator: usize, denominator: usize| {
        let total = |algorithm: usize| {
            (0..rates.len())
                .map(|r| overhead_median(algorithm, r))
                .sum::<f64>()
        };
        ratio(total(numerator), total(denominator))
    };
    let ns = position(AlgorithmKind::NaiveSnapshot);
    let ipp = position(AlgorithmKind::InterleavedPingPong);
    if let (Some(ns), Some(ipp)) = (ns, ipp) {
        report.summary(
            "ipp_over_ns_overhead_low_rate",
            ratio(overhead_median(ns, 0), overhead_median(ipp, 0)),
        );
        // The lowest rate at which NS has lower overhead than IPP, interpolated on log(rate)
        // between the last rate where IPP wins and the first where NS wins.
        let mut crossover = f64::NAN;
        for r in 0..rates.len() {
            let difference = overhead_median(ns, r) - overhead_median(ipp, r);
            if difference < 0.0 {
                crossover = if r == 0 {
                    rates[0] as f64
                } else {
                    let previous = overhead_median(ns, r - 1) - overhead_median(ipp, r - 1);
                    let fraction = previous / (previous - difference);
                    let (low, high) = ((rates[r - 1] as f64).ln(), (rates[r] as f64).ln());
                    (low + fraction * (high - low)).exp()
                };
                break;
            }
        }
        report.summary("ns_ipp_crossover_updates_per_s", crossover);
        // Where the crossover would be if IPP's overhead kept growing linearly with the
        // updates from the highest swept rate (its cost is per update) while NS's copy stays
        // constant: rate × NS overhead / IPP overhead, at the highest rate.
        let top = rates.len() - 1;
        report.summary(
            "ns_ipp_crossover_extrapolated_updates_per_s",
            rates[top] as f64 * ratio(overhead_median(ns, top), overhead_median(ipp, top)),
        );
        report.summary(
            "ns_overhead_ms_highest_rate",
            overhead_median(ns, top) / 1e6,
        );
        report.summary(
            "ipp_overhead_ms_highest_rate",
            overhead_median(ipp, top) / 1e6,
        );
        report.summary(
            "ipp_overhead_ns_per_update_highest_rate",
            overhead_median(ipp, top) / (rates[top] as f64 * args.tick_ms as f64 / 1000.0),
        );
        report.summary("ipp_tick_max_over_p50", e2e_spike[ipp]);
        report.summary("ns_tick_max_over_p50", e2e_spike[ns]);
        report.summary("ipp_tick_cpu_max_over_p50", e2e_cpu_spike[ipp]);
        report.summary("ns_tick_cpu_max_over_p50", e2e_cpu_spike[ns]);
    }
    if let (Some(bazz), Some(nzz)) = (
        position(AlgorithmKind::BitArrayZigzag),
        position(AlgorithmKind::NaiveZigzag),
    ) {
        report.summary("bazz_over_nzz", sweep_ratio(bazz, nzz));
    }
    if let (Some(ipp), Some(npp)) = (ipp, position(AlgorithmKind::NaivePingPong)) {
        report.summary("ipp_over_npp", sweep_ratio(ipp, npp));
    }
    report.summary(
        "merge_over_copy_write_bytes",
        ratio(ipp_bytes_per_checkpoint[1], ipp_bytes_per_checkpoint[0]),
    );
    // The most updates per second one mutator applies here with no checkpointing at all (the
    // baseline at the highest swept rate): rates above it cannot run in real time.
    let top = rates.len() - 1;
    let top_updates_per_tick = rates[top] as f64 * args.tick_ms as f64 / 1000.0;
    report.summary(
        "baseline_max_updates_per_s",
        top_updates_per_tick / (Spread::of(&baseline_tick_ns[top]).median / 1e9),
    );
    if !args.no_mmo {
        report.summary("mmo_updates_per_s", mmo_updates_per_s);
        if let (Some(ns), Some(ipp)) = (
            position(AlgorithmKind::NaiveSnapshot),
            position(AlgorithmKind::InterleavedPingPong),
        ) {
            report.summary(
                "mmo_ipp_over_ns_overhead",
                ratio(mmo_overhead_median[ns], mmo_overhead_median[ipp]),
            );
            report.summary("mmo_ipp_tick_max_over_p50", mmo_spike[ipp]);
            report.summary("mmo_ns_tick_max_over_p50", mmo_spike[ns]);
        }
        if let Some(best) = (0..algorithms.len())
            .min_by(|a, b| mmo_overhead_median[*a].total_cmp(&mmo_overhead_median[*b]))
        {
            report.notes.push(format!(
                "MMO: lowest overhead per checkpoint: {} ({:.4} ms).",
                algorithms[best].short_name(),
                mmo_overhead_median[best] / 1e6
            ));
        }
    }
    report.notes.push("bazz_over_nzz and ipp_over_npp are ratios of the overheads per checkpoint summed over the swept rates (below 1: the packed / interleaved layout is cheaper).".into());
    report.notes.push("ns_ipp_crossover_updates_per_s is null when NS never has lower overhead than IPP in the sweep; *_tick_max_over_p50 come from the end-to-end run (writer and logging on), in wall time; *_tick_cpu_max_over_p50 use the mutator thread's CPU time, which excludes preemption by other processes on a shared machine.".into());

    let chart = LineChart {
        title: format!(
            "Synchronous overhead per checkpoint ({state_mb} MiB, Zipf {})",
            args.skew
        ),
        x_label: "updates per second".into(),
        y_label: "overhead per checkpoint (ms)".into(),
        series: algorithms
            .iter()
            .enumerate()
            .map(|(a, kind)| Series {
                label: kind.short_name().into(),
                points: rates
                    .iter()
                    .enumerate()
                    .map(|(r, rate)| (*rate as f64, overhead_median(a, r).max(0.0) / 1e6))
                    .collect(),
            })
            .collect(),
        markers: Vec::new(),
        log_x: true,
    };
    write_line_chart(&chart, &common.out, "tick_overhead")?;
    let chart = LineChart {
        title: format!(
            "Mutator time per tick, end to end ({} updates/s, writer and log on)",
            args.e2e_rate
        ),
        x_label: "tick".into(),
        y_label: "mutator time per tick (ms)".into(),
        series: e2e_series,
        markers: Vec::new(),
        log_x: false,
    };
    write_line_chart(&chart, &common.out, "tick_over_time")?;
    Ok(report)
}
