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
use prefixkv_tickstate::{recover, Algorithm, AlgorithmKind, Config, ImageBase, TickState};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use serde_json::Value;
use std::time::{Duration, Instant};

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

/// What one end-to-end run measured.
struct EndToEnd {
    tick_ns: Vec<f64>,
    tick_cpu_ns: Vec<f64>,
    checkpoints: u64,
    deferred: u64,
    image_bytes: u64,
    base_bytes_read: u64,
    recovery_ms: f64,
    verified: bool,
}

fn e2e_apply(zipf: &Zipf<f64>, words: usize) -> impl FnMut(&mut [u64], u64, &[u8]) + '_ {
    move |state, _tick, action| {
        let seed = u64::from_le_bytes(action[0..8].try_into().expect("8-byte seed"));
        let updates = u64::from_le_bytes(action[8..16].try_into().expect("8-byte count")) as usize;
        for (index, value) in tick_updates(zipf, words, updates, seed) {
            state[index as usize] = value;
        }
    }
}

fn run_end_to_end<A: Algorithm>(
    words: usize,
    huge_pages: bool,
    zipf: &Zipf<f64>,
    updates_per_tick: usize,
    ticks: usize,
    tick: Duration,
    image_base: ImageBase,
) -> Result<EndToEnd> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let mut config = Config::new(words);
    config.huge_pages = huge_pages;
    config.image_base = image_base;
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
    state.close()?;
    let started = Instant::now();
    let (recovered, recovered_tick, _report) = recover(dir.path(), words, e2e_apply(zipf, words))?;
    let recovery_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(EndToEnd {
        tick_ns: times,
        tick_cpu_ns: cpu_times,
        checkpoints: stats.checkpoints_started,
        deferred: stats.checkpoints_deferred,
        image_bytes: stats.image_bytes_written,
        base_bytes_read: stats.base_bytes_read,
        recovery_ms,
        verified: recovered_tick == final_tick && recovered == final_state,
    })
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

/// CPU time of the calling thread in ns: the mutator's own work, without the time other processes
/// of the shared machine (or the writer thread) held the core.
fn thread_cpu_ns() -> f64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as f64 * 1e9 + time.tv_nsec as f64
}

fn percentile(values: &[f64], fraction: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
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
        vec![1_000, 30_000, 300_000, 2_500_000]
    } else {
        vec![
            1_000, 4_000, 16_000, 40_000, 160_000, 640_000, 1_200_000, 2_500_000,
        ]
    };
    let ticks = args.ticks.unwrap_or(if quick { 6 } else { 30 });
    let e2e_ticks = args.e2e_ticks.unwrap_or(if quick { 25 } else { 150 });
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
    report.config("rounds", rounds as u64);
    report.notes.push(
        "Overhead sweep: ticks run back to back (no 33 ms of wall time simulated); overhead per checkpoint = median prepare time + (median update time per tick minus the no-checkpoint baseline's) (the update-cost part floored at zero, since at tens of updates per tick its sign is timer noise), with the writer's capture run untimed between ticks and logging off, as the paper measured.".into(),
    );
    report.notes.push("Cells are 64-bit words. The overhead sweep does not write files (Copy vs Merge does not change mutator work); the end-to-end run adds IPP-Merge: the writer keeps the previous image in memory and overlays dirty words in place, instead of reading the previous image file (Copy). Both write full images, so merge_over_copy_write_bytes is 1 by construction; the difference is the base read (base_bytes_read) and |AS| of writer memory. The pagestore WAL-frame variant of Merge is not built.".into());

    // overhead[algorithm][rate] = per-round overhead ns; plus tick times.
    let mut overhead: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); rates.len()]; algorithms.len()];
    let mut tick_times: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); rates.len()]; algorithms.len()];
    let mut prepare_times: Vec<Vec<Vec<f64>>> =
        vec![vec![Vec::new(); rates.len()]; algorithms.len()];
    let mut memory = vec![0usize; algorithms.len()];
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
            // The update-cost difference is floored at zero: at tens of updates per tick it is
            // below timer resolution and its sign is noise.
            // Medians over the cell's ticks, so that a tick preempted by another process of the
            // shared machine does not move the result.
            let updates_ns: Vec<f64> = cell
                .tick_ns
                .iter()
                .zip(&cell.prepare_ns)
                .map(|(tick, prepare)| tick - prepare)
                .collect();
            let updates_difference = median(&updates_ns) - median(baseline_ns);
            overhead[contender][rate_number]
                .push(median(&cell.prepare_ns) + updates_difference.max(0.0));
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
    let mut e2e_series = Vec::new();
    let mut e2e_spike = vec![f64::NAN; algorithms.len()];
    let mut e2e_cpu_spike = vec![f64::NAN; algorithms.len()];
    let mut e2e_contenders: Vec<(usize, AlgorithmKind, ImageBase, String)> = algorithms
        .iter()
        .enumerate()
        .map(|(contender, kind)| {
            (
                contender,
                *kind,
                ImageBase::CopyFromFile,
                kind.short_name().to_string(),
            )
        })
        .collect();
    if let Some(ipp) = algorithms
        .iter()
        .position(|k| *k == AlgorithmKind::InterleavedPingPong)
    {
        e2e_contenders.push((
            ipp,
            AlgorithmKind::InterleavedPingPong,
            ImageBase::MergeInMemory,
            "IPP-Merge".into(),
        ));
    }
    // Image bytes written per checkpoint: IPP (Copy) and IPP-Merge.
    let mut ipp_bytes_per_checkpoint = [f64::NAN; 2];
    for (contender, kind, image_base, label) in e2e_contenders {
        let run = dispatch!(
            kind,
            run_end_to_end(
                words,
                args.huge_pages,
                &zipf,
                e2e_updates,
                e2e_ticks,
                Duration::from_millis(args.tick_ms),
                image_base
            )
        )?;
        let merge = image_base == ImageBase::MergeInMemory;
        if kind == AlgorithmKind::InterleavedPingPong {
            ipp_bytes_per_checkpoint[merge as usize] =
                ratio(run.image_bytes as f64, run.checkpoints as f64);
        }
        report.record_verification(run.verified);
        let p50 = percentile(&run.tick_ns, 0.5);
        let max = percentile(&run.tick_ns, 1.0);
        let cpu_p50 = percentile(&run.tick_cpu_ns, 0.5);
        let cpu_max = percentile(&run.tick_cpu_ns, 1.0);
        if !merge {
            e2e_spike[contender] = ratio(max, p50);
            e2e_cpu_spike[contender] = ratio(cpu_max, cpu_p50);
        }
        let mut line = row([
            ("part", Value::from("end_to_end")),
            ("algorithm", Value::from(label.as_str())),
            ("updates_per_s", Value::from(args.e2e_rate)),
        ]);
        line.insert("tick_p50_ms".into(), Value::from(p50 / 1e6));
        line.insert(
            "tick_p99_ms".into(),
            Value::from(percentile(&run.tick_ns, 0.99) / 1e6),
        );
        line.insert("tick_max_ms".into(), Value::from(max / 1e6));
        line.insert("tick_max_over_p50".into(), Value::from(ratio(max, p50)));
        line.insert("tick_cpu_p50_ms".into(), Value::from(cpu_p50 / 1e6));
        line.insert("tick_cpu_max_ms".into(), Value::from(cpu_max / 1e6));
        line.insert(
            "tick_cpu_max_over_p50".into(),
            Value::from(ratio(cpu_max, cpu_p50)),
        );
        line.insert("checkpoints".into(), Value::from(run.checkpoints));
        line.insert("checkpoints_deferred".into(), Value::from(run.deferred));
        line.insert("image_bytes_written".into(), Value::from(run.image_bytes));
        line.insert("base_bytes_read".into(), Value::from(run.base_bytes_read));
        // Merge keeps the previous image in the writer: |AS| more.
        let memory_bytes = memory[contender] as u64 + if merge { words as u64 * 8 } else { 0 };
        line.insert("memory_bytes".into(), Value::from(memory_bytes));
        line.insert("recovery_ms".into(), Value::from(run.recovery_ms));
        line.insert("verified".into(), Value::from(run.verified));
        report.rows.push(line);
        e2e_series.push(Series {
            label: label.clone(),
            points: run
                .tick_ns
                .iter()
                .enumerate()
                .map(|(number, ns)| (number as f64, ns / 1e6))
                .collect(),
        });
        eprintln!(
            "tick: end-to-end {} done (verified: {})",
            label, run.verified
        );
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
