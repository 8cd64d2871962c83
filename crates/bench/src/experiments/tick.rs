//! `prefixkv-bench tick`: the checkpointing algorithms of Cao et al. (SIGMOD 2011) on
//! `prefixkv-tickstate`, as the paper's §5 evaluates them.
//!
//! Parts, each in its own module:
//!
//! 1. **Synchronous overhead** (`tick_sweep.rs`; writer and logging off, as the paper measured):
//!    overhead per checkpoint against the update rate of a Zipf workload, for every algorithm and
//!    layout (NS, COU, BACOU, NZZ, IZZ, PZZ, BAZZ, NPP, IPP), alternated over rounds; timed with
//!    the TSC so that nanosecond `prepare`s are measured, not the timer.
//! 2. **State-size scaling** (§5.3, `tick_sweep.rs`): the same sweep at larger states (200 MiB,
//!    1 GiB, 4 GiB by default), where memory allows.
//! 3. **End to end** (`tick_e2e.rs`; writer and logging on, ticks paced): every algorithm through
//!    `TickState`, plus IPP with Merge in memory and with the other image store, alternated over
//!    rounds; each run recovered and checked by an oracle that compares with the inputs applied to
//!    a plain vector.
//! 4. **MMO** (§5.4, `tick_mmo.rs`): a game world; overhead and end to end as above.
//! 5. **TPC-C** (§5.5, `tick_tpcc.rs`): an in-memory TPC-C as the mutator, with logical logging
//!    in batches of 500 transactions, checkpointed by NS, IPP-Copy and IPP-Merge, against an
//!    ARIES baseline and a no-checkpoint one; each recovered and checked against an independent
//!    replay.
//!
//! `verified` in the report is true only if every check of every part passed: in the sweeps and
//! the MMO overhead part, every checkpoint image against an independent plain-vector replay of
//! the same updates at the image's tick (never the algorithm's own `read()`) and the final state
//! against the no-checkpoint baseline; end-to-end and MMO recoveries against the reference
//! states; TPC-C recoveries against the independent replay.

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::Report;
use crate::stats::ratio;
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_tickstate::{huge_pages_status, AlgorithmKind, ImageStore};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use std::time::Duration;

/// `dispatch!(kind, function(arguments))` calls `function::<the algorithm type of kind>`.
macro_rules! dispatch {
    ($kind:expr, $function:ident ( $($argument:expr),* )) => {
        match $kind {
            AlgorithmKind::NaiveSnapshot => $function::<NaiveSnapshot>($($argument),*),
            AlgorithmKind::CopyOnUpdate => $function::<CopyOnUpdate>($($argument),*),
            AlgorithmKind::BitArrayCopyOnUpdate => $function::<BitArrayCopyOnUpdate>($($argument),*),
            AlgorithmKind::NaiveZigzag => $function::<NaiveZigzag>($($argument),*),
            AlgorithmKind::InterleavedZigzag => $function::<InterleavedZigzag>($($argument),*),
            AlgorithmKind::PackedZigzag => $function::<PackedZigzag>($($argument),*),
            AlgorithmKind::BitArrayZigzag => $function::<BitArrayZigzag>($($argument),*),
            AlgorithmKind::NaivePingPong => $function::<NaivePingPong>($($argument),*),
            AlgorithmKind::InterleavedPingPong => $function::<InterleavedPingPong>($($argument),*),
        }
    };
}

#[path = "tick_e2e.rs"]
mod e2e;
#[path = "tick_mmo.rs"]
mod mmo;
#[path = "tick_sweep.rs"]
mod sweep;
#[path = "tick_tpcc.rs"]
mod tpcc;

use e2e::e2e_contenders;
use sweep::{run_scaling, run_sweep, sweep_rows, CycleTimer, SweepPlan};

/// Flags of the tick experiment.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// State size in MiB (default: 200, or 32 with --quick).
    #[arg(long)]
    pub state_mb: Option<usize>,
    /// Update rates (updates per second) to sweep (default: 1K..100M, fewer with --quick).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<u64>,
    /// Zipf exponent of the updated cells.
    #[arg(long, default_value_t = 0.8)]
    pub skew: f64,
    /// Tick length in milliseconds (sets updates per tick; paces the end-to-end run).
    #[arg(long, default_value_t = 33)]
    pub tick_ms: u64,
    /// Measured ticks per cell of the overhead sweep (default: 30, or 5 with --quick).
    #[arg(long)]
    pub ticks: Option<usize>,
    /// Ticks of an end-to-end run (default: 150, or 12 with --quick).
    #[arg(long)]
    pub e2e_ticks: Option<usize>,
    /// Update rate of the end-to-end run.
    #[arg(long, default_value_t = 160_000)]
    pub e2e_rate: u64,
    /// Back the state with transparent huge pages (`madvise(MADV_HUGEPAGE)`).
    #[arg(long)]
    pub huge_pages: bool,
    /// Algorithms to run (default: all): NS, COU, BACOU, NZZ, IZZ, PZZ, BAZZ, NPP, IPP.
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
    /// State sizes (MiB) of the scaling sweep (default: 200,1024,4096, or 8,32 with --quick);
    /// sizes or algorithms that do not fit in memory are skipped and noted.
    #[arg(long, value_delimiter = ',')]
    pub scale_mb: Vec<usize>,
    /// Update rates of the scaling sweep (default: 1000,160000,2500000, or 2500000 with --quick,
    /// where it also runs one round unless --rounds is given).
    #[arg(long, value_delimiter = ',')]
    pub scale_rates: Vec<u64>,
    /// Skip the scaling sweep.
    #[arg(long)]
    pub no_scaling: bool,
    /// MMO world size in MiB (default: the state size, or 16 with --quick).
    #[arg(long)]
    pub mmo_mb: Option<usize>,
    /// MMO entities acting per tick.
    #[arg(long, default_value_t = 4096)]
    pub mmo_active: usize,
    /// Skip the MMO scenario.
    #[arg(long)]
    pub no_mmo: bool,
    #[command(flatten)]
    pub tpcc: tpcc::TpccArgs,
}

/// Ticks run before measuring, so that every array has been through a checkpoint.
const WARMUP_TICKS: usize = 2;

/// The run's parameters, parsed and validated from the flags.
struct Setup {
    quick: bool,
    state_mb: usize,
    words: usize,
    rates: Vec<u64>,
    skew: f64,
    zipf: Zipf<f64>,
    tick: Duration,
    ticks: usize,
    e2e_ticks: usize,
    e2e_rate: u64,
    huge_pages: bool,
    algorithms: Vec<AlgorithmKind>,
    main_store: ImageStore,
    wal_store: ImageStore,
    /// Rounds of the overhead sweeps.
    rounds: usize,
    /// Rounds of the end-to-end runs (Zipf, MMO) and of TPC-C: `--rounds`, or 2 with --quick.
    e2e_rounds: usize,
    mmo_mb: usize,
    mmo_active: usize,
    timer: CycleTimer,
}

impl Setup {
    fn new(common: &Common, args: &Args) -> Result<Setup> {
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
            // Past 2.5 M/s (the paper's range) up to 100 M/s: rates no single mutator can
            // sustain in a 33 ms tick here, swept to find where NS's constant copy beats IPP's
            // per-update cost (the overhead sweep does not pace ticks, so it can).
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
        if rates.contains(&0) {
            bail!("--rates: every rate must be positive");
        }
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
        if args.tick_ms == 0 {
            bail!("--tick-ms must be positive");
        }
        let wal_store = ImageStore::PageStoreWal {
            backfill_after_frames: args.wal_backfill_frames,
        };
        let main_store = match args.image_store.as_str() {
            "double-backup" => ImageStore::DoubleBackup,
            "wal" => wal_store,
            other => bail!("--image-store {other}: use double-backup or wal"),
        };
        let e2e_ticks = args.e2e_ticks.unwrap_or(if quick { 12 } else { 150 });
        if e2e_ticks == 0 {
            bail!("--e2e-ticks must be positive");
        }
        Ok(Setup {
            quick,
            state_mb,
            words,
            skew: args.skew,
            zipf: Zipf::new(words as f64, args.skew).context("Zipf parameters")?,
            tick: Duration::from_millis(args.tick_ms),
            ticks: args.ticks.unwrap_or(if quick { 5 } else { 30 }),
            e2e_ticks,
            e2e_rate: args.e2e_rate,
            huge_pages: args.huge_pages,
            algorithms,
            main_store,
            wal_store,
            rounds: common.rounds(),
            e2e_rounds: common
                .rounds
                .map_or(if quick { 2 } else { 3 }, |rounds| rounds.max(1)),
            // Quick: a 16 MiB world (262 K entities), to keep the run near a minute.
            mmo_mb: args.mmo_mb.unwrap_or(if quick && args.state_mb.is_none() {
                16
            } else {
                state_mb
            }),
            mmo_active: args.mmo_active,
            rates,
            timer: CycleTimer::calibrate(),
        })
    }

    fn record_config(&self, report: &mut Report, args: &Args) {
        report.config("state_mb", self.state_mb as u64);
        report.config("words", self.words as u64);
        report.config("cell_bytes", 8u64);
        report.config("rates_updates_per_s", self.rates.clone());
        report.config("skew", self.skew);
        report.config("tick_ms", self.tick.as_millis() as u64);
        report.config("ticks_per_cell", self.ticks as u64);
        report.config("warmup_ticks", WARMUP_TICKS as u64);
        report.config("e2e_ticks", self.e2e_ticks as u64);
        report.config("e2e_rate_updates_per_s", self.e2e_rate);
        report.config("huge_pages", self.huge_pages);
        report.config("image_store", args.image_store.as_str());
        report.config("wal_backfill_frames", args.wal_backfill_frames);
        report.config("rounds", self.rounds as u64);
        report.config("e2e_rounds", self.e2e_rounds as u64);
        report.config("timer_tsc", self.timer.is_tsc());
        report.config("timer_overhead_ns_subtracted", self.timer.overhead_ns());
    }
}

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

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let setup = Setup::new(common, args)?;
    let mut report = Report::new("tick");
    setup.record_config(&mut report, args);
    report.notes.push(
        "verified = every check passed: in the overhead sweeps and the MMO overhead part, every checkpoint image, cell for cell, against an independent plain-vector replay of the same updates brought to the image's tick (the algorithm under test is never asked), and the final state against the no-checkpoint baseline's; in the Zipf and MMO end-to-end runs, the recovered state against the reference (the inputs applied to a plain vector, at exactly the number of ticks the bench ran and was told were durable); in TPC-C, every recovered database against an independent replay of the same inputs on a plain vector.".into(),
    );
    report.notes.push(format!(
        "Overhead sweeps: ticks run back to back (no 33 ms of wall time simulated); overhead per checkpoint = median prepare time + (median update time per tick minus the no-checkpoint baseline's, floored at zero), with the writer's capture run untimed between ticks and logging off, as the paper measured. Timed with {} minus the {:.1} ns a reading pair costs, so that nanosecond prepares are measured rather than the timer.",
        if setup.timer.is_tsc() { "the TSC (lfence; rdtsc)" } else { "Instant" },
        setup.timer.overhead_ns()
    ));
    report.notes.push("Cells are 64-bit words. The overhead sweep does not write files (Copy vs Merge does not change mutator work); the end-to-end run adds IPP-MergeMem: the writer keeps the previous image in memory and overlays dirty words in place, instead of reading the previous image file (Copy). It writes full images like Copy; the difference is the base read (base_bytes_read) and |AS| of writer memory. IPP-WAL (or IPP-Copy when --image-store wal) is the WAL-backed store: only changed pages go to the pagestore WAL as frames of one commit per image, and the pagestore checkpoint backfills them into the image file; merge_over_copy_write_bytes = IPP-WAL's bytes written per checkpoint (WAL frames + backfill writes, counted as written) / IPP Copy's (full image + footers).".into());

    // 1. The overhead sweep.
    let plan = SweepPlan {
        words: setup.words,
        rates: &setup.rates,
        algorithms: &setup.algorithms,
        ticks: setup.ticks,
        rounds: setup.rounds,
        huge_pages: setup.huge_pages,
        tick_ms: setup.tick.as_millis() as u64,
        zipf: &setup.zipf,
        timer: &setup.timer,
    };
    let sweep = run_sweep(&plan, &mut report, "sweep")?;
    sweep_rows(&mut report, "overhead", setup.state_mb, &plan, &sweep);

    // 2. State-size scaling.
    if !args.no_scaling {
        let sizes: Vec<usize> = if !args.scale_mb.is_empty() {
            args.scale_mb.clone()
        } else if setup.quick {
            vec![8, 32]
        } else {
            vec![200, 1024, 4096]
        };
        let rates: Vec<u64> = if !args.scale_rates.is_empty() {
            args.scale_rates.clone()
        } else if setup.quick {
            vec![2_500_000]
        } else {
            vec![1_000, 160_000, 2_500_000]
        };
        if sizes
            .iter()
            .any(|mb| *mb == 0 || mb * (1 << 17) > u32::MAX as usize)
            || rates.contains(&0)
        {
            bail!("--scale-mb: sizes in 1..=32767 MiB; --scale-rates: positive rates");
        }
        report.config("scale_mb", sizes.clone());
        report.config("scale_rates_updates_per_s", rates.clone());
        // Quick: one round (the scaling part only has to run; its numbers need a full run).
        let scale_rounds = if setup.quick && common.rounds.is_none() {
            1
        } else {
            setup.rounds
        };
        report.config("scale_rounds", scale_rounds as u64);
        let largest = run_scaling(
            &mut report,
            &sizes,
            &rates,
            &setup.algorithms,
            setup.ticks,
            scale_rounds,
            setup.huge_pages,
            setup.skew,
            setup.tick.as_millis() as u64,
            &setup.timer,
        )?;
        report.summary(
            "scaling_largest_state_mb",
            largest.map_or(f64::NAN, |mb| mb as f64),
        );
    }

    // 3. End to end, Zipf.
    let contenders = e2e_contenders(&setup.algorithms, setup.main_store, setup.wal_store);
    let zipf_part = e2e::run_part(&setup, &contenders, &sweep.memory, &mut report, &common.out)?;

    // 4. MMO.
    let mmo_part = if args.no_mmo {
        None
    } else {
        Some(mmo::run_part(
            &setup,
            &contenders,
            &mut report,
            &common.out,
        )?)
    };

    // 5. TPC-C.
    if !args.tpcc.no_tpcc {
        tpcc::run_part(&setup, &args.tpcc, &mut report, &common.out)?;
    }

    let status = huge_pages_status();
    report.config("huge_pages_advised_bytes", status.advised_bytes);
    report.config("huge_pages_refusals", status.refusals);
    report.config(
        "huge_pages_kernel_mode",
        status.kernel_mode.clone().unwrap_or_default(),
    );
    report.config("anon_huge_bytes_max_seen", zipf_part.anon_huge_bytes_max);
    if setup.huge_pages {
        report.notes.push(format!(
            "--huge-pages: madvise(MADV_HUGEPAGE) accepted for {} bytes, refused {} times (refusals are logged and the run continues with 4 KiB pages); kernel THP mode {:?}; at most {} bytes of the process were backed by huge pages when sampled at the end of each end-to-end run.",
            status.advised_bytes, status.refusals, status.kernel_mode, zipf_part.anon_huge_bytes_max
        ));
    }
    summarise(&setup, &sweep, &zipf_part, mmo_part.as_ref(), &mut report);
    overhead_chart(&setup, &sweep, &common.out)?;
    Ok(report)
}

/// The summary ratios of the sweep, the end-to-end runs and the MMO part.
fn summarise(
    setup: &Setup,
    sweep: &sweep::Sweep,
    zipf: &e2e::ZipfPart,
    mmo: Option<&mmo::MmoPart>,
    report: &mut Report,
) {
    let rates = &setup.rates;
    let algorithms = &setup.algorithms;
    let overhead = |algorithm: usize, rate: usize| sweep.overhead_median(algorithm, rate);
    let position = |kind: AlgorithmKind| algorithms.iter().position(|k| *k == kind);
    // Total overhead over the sweep, numerator over denominator: dominated by the rates where
    // the layouts' per-update costs differ.
    let sweep_ratio = |numerator: usize, denominator: usize| {
        let total = |algorithm: usize| {
            (0..rates.len())
                .map(|r| overhead(algorithm, r))
                .sum::<f64>()
        };
        ratio(total(numerator), total(denominator))
    };
    let top = rates.len() - 1;
    let ns = position(AlgorithmKind::NaiveSnapshot);
    let ipp = position(AlgorithmKind::InterleavedPingPong);
    if let (Some(ns), Some(ipp)) = (ns, ipp) {
        // NS's overhead over IPP's at the lowest rate (despite the name, kept for continuity).
        report.summary(
            "ipp_over_ns_overhead_low_rate",
            ratio(overhead(ns, 0), overhead(ipp, 0)),
        );
        report.summary("ipp_overhead_ns_low_rate", overhead(ipp, 0));
        // The lowest rate at which NS has lower overhead than IPP, interpolated on log(rate)
        // between the last rate where IPP wins and the first where NS wins.
        let mut crossover = f64::NAN;
        for r in 0..rates.len() {
            let difference = overhead(ns, r) - overhead(ipp, r);
            if difference < 0.0 {
                crossover = if r == 0 {
                    rates[0] as f64
                } else {
                    let previous = overhead(ns, r - 1) - overhead(ipp, r - 1);
                    let fraction = previous / (previous - difference);
                    let (low, high) = ((rates[r - 1] as f64).ln(), (rates[r] as f64).ln());
                    (low + fraction * (high - low)).exp()
                };
                break;
            }
        }
        report.summary("ns_ipp_crossover_updates_per_s", crossover);
        // Where the crossover would be if IPP's overhead kept growing linearly with the
        // updates from the highest swept rate while NS's copy stays constant.
        report.summary(
            "ns_ipp_crossover_extrapolated_updates_per_s",
            rates[top] as f64 * ratio(overhead(ns, top), overhead(ipp, top)),
        );
        report.summary("ns_overhead_ms_highest_rate", overhead(ns, top) / 1e6);
        report.summary("ipp_overhead_ms_highest_rate", overhead(ipp, top) / 1e6);
        report.summary(
            "ipp_overhead_ns_per_update_highest_rate",
            overhead(ipp, top) / (rates[top] as f64 * setup.tick.as_millis() as f64 / 1000.0),
        );
        report.summary("ipp_tick_max_over_p50", zipf.spike[ipp]);
        report.summary("ns_tick_max_over_p50", zipf.spike[ns]);
        report.summary("ipp_tick_cpu_max_over_p50", zipf.cpu_spike[ipp]);
        report.summary("ns_tick_cpu_max_over_p50", zipf.cpu_spike[ns]);
    }
    for (name, numerator, denominator) in [
        (
            "bazz_over_nzz",
            AlgorithmKind::BitArrayZigzag,
            AlgorithmKind::NaiveZigzag,
        ),
        (
            "izz_over_nzz",
            AlgorithmKind::InterleavedZigzag,
            AlgorithmKind::NaiveZigzag,
        ),
        (
            "pzz_over_nzz",
            AlgorithmKind::PackedZigzag,
            AlgorithmKind::NaiveZigzag,
        ),
        (
            "bazz_over_pzz",
            AlgorithmKind::BitArrayZigzag,
            AlgorithmKind::PackedZigzag,
        ),
        (
            "ipp_over_npp",
            AlgorithmKind::InterleavedPingPong,
            AlgorithmKind::NaivePingPong,
        ),
    ] {
        if let (Some(numerator), Some(denominator)) = (position(numerator), position(denominator)) {
            report.summary(name, sweep_ratio(numerator, denominator));
        }
    }
    report.summary(
        "merge_over_copy_write_bytes",
        ratio(
            zipf.ipp_bytes_per_checkpoint[1],
            zipf.ipp_bytes_per_checkpoint[0],
        ),
    );
    // The most updates per second one mutator applies here with no checkpointing at all (the
    // baseline at the highest swept rate): rates above it cannot run in real time.
    let top_updates_per_tick = rates[top] as f64 * setup.tick.as_millis() as f64 / 1000.0;
    report.summary(
        "baseline_max_updates_per_s",
        top_updates_per_tick / (crate::stats::median(&sweep.baseline_tick_ns[top]) / 1e9),
    );
    if let Some(mmo) = mmo {
        report.summary("mmo_updates_per_s", mmo.updates_per_s);
        if let (Some(ns), Some(ipp)) = (ns, ipp) {
            report.summary(
                "mmo_ipp_over_ns_overhead",
                ratio(mmo.overhead_median[ns], mmo.overhead_median[ipp]),
            );
            report.summary("mmo_ipp_tick_max_over_p50", mmo.spike[ipp]);
            report.summary("mmo_ns_tick_max_over_p50", mmo.spike[ns]);
        }
    }
    report.notes.push("bazz_over_nzz, izz_over_nzz, pzz_over_nzz, bazz_over_pzz and ipp_over_npp are ratios of the overheads per checkpoint summed over the swept rates (below 1: the numerator's layout is cheaper). ipp_over_ns_overhead_low_rate is NS's overhead over IPP's at the lowest rate.".into());
    report.notes.push("ns_ipp_crossover_updates_per_s is null when NS never has lower overhead than IPP in the sweep; *_tick_max_over_p50 come from the end-to-end runs (writer and logging on; median over rounds), in wall time; *_tick_cpu_max_over_p50 use the mutator thread's CPU time, which excludes preemption by other processes on a shared machine.".into());
}

fn overhead_chart(setup: &Setup, sweep: &sweep::Sweep, out: &std::path::Path) -> Result<()> {
    let chart = LineChart {
        title: format!(
            "Synchronous overhead per checkpoint ({} MiB, Zipf {})",
            setup.state_mb, setup.skew
        ),
        x_label: "updates per second".into(),
        y_label: "overhead per checkpoint (ms)".into(),
        series: setup
            .algorithms
            .iter()
            .enumerate()
            .map(|(a, kind)| Series {
                label: kind.short_name().into(),
                points: setup
                    .rates
                    .iter()
                    .enumerate()
                    .map(|(r, rate)| (*rate as f64, sweep.overhead_median(a, r).max(0.0) / 1e6))
                    .collect(),
            })
            .collect(),
        markers: Vec::new(),
        log_x: true,
    };
    write_line_chart(&chart, out, "tick_overhead")
}
