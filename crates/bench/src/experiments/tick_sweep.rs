//! The synchronous-overhead sweep of the `tick` experiment (writer and logging off, as the paper
//! measured), its state-size scaling, and the cycle timer both use.
//!
//! For each update rate and algorithm, a fresh state runs warm-up plus measured ticks; each tick
//! applies its updates as fast as possible and reaches its point of consistency (`prepare`). Both
//! parts of a tick are timed with [`CycleTimer`] (the TSC with the timer's own cost subtracted),
//! so a `prepare` of a few nanoseconds (Ping-Pong's index swap) is measured, not floored at the
//! ~30 ns cost of reading a clock. A no-checkpoint baseline (plain `Vec<u64>` stores of the same
//! updates) gives the updates' own cost; the overhead per checkpoint is the median `prepare` plus
//! the median update time minus the baseline's (floored at zero). The writer's capture runs
//! untimed between ticks. Contenders alternate over rounds.
//!
//! Verification never asks the algorithm under test what its state should be: every checkpoint
//! image is compared, cell for cell, with an [`ImageReplay`] — a plain `Vec<u64>` brought to the
//! image's tick by the same deterministic updates — and the live state after the last tick with
//! the no-checkpoint baseline's plain vector.

use super::{tick_updates, WARMUP_TICKS};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, Spread};
use anyhow::{Context, Result};
use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::{Algorithm, AlgorithmKind};
use rand_distr::Zipf;
use serde_json::Value;
use std::time::Instant;

/// A cycle counter read as nanoseconds: the TSC on x86-64 (serialised with `lfence`, used only
/// when the CPU says it is constant and non-stop), else `Instant`. The median cost of one reading
/// pair is measured once and subtracted from every interval.
pub(super) struct CycleTimer {
    tsc: bool,
    ns_per_tick: f64,
    overhead: u64,
    origin: Instant,
}

impl CycleTimer {
    /// Calibrate: the TSC's rate against `Instant` over 20 ms, and the cost of a reading pair.
    pub(super) fn calibrate() -> CycleTimer {
        let tsc = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/proc/cpuinfo")
                .is_ok_and(|text| text.contains(" constant_tsc") && text.contains(" nonstop_tsc"));
        let mut timer = CycleTimer {
            tsc,
            ns_per_tick: 1.0,
            overhead: 0,
            origin: Instant::now(),
        };
        if tsc {
            let (wall, start) = (Instant::now(), timer.now());
            while wall.elapsed().as_millis() < 20 {
                std::hint::spin_loop();
            }
            let ticks = timer.now() - start;
            timer.ns_per_tick = wall.elapsed().as_nanos() as f64 / ticks.max(1) as f64;
        }
        // An odd count, so the median is one of the readings.
        let pairs: Vec<f64> = (0..2001)
            .map(|_| {
                let start = timer.now();
                (timer.now() - start) as f64
            })
            .collect();
        timer.overhead = median(&pairs) as u64;
        timer
    }

    /// A reading (TSC ticks, or ns since calibration).
    #[inline]
    pub(super) fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: lfence and rdtsc are available on every x86-64 CPU; the fences keep the
            // reading from moving across the measured code.
            unsafe {
                core::arch::x86_64::_mm_lfence();
                let ticks = core::arch::x86_64::_rdtsc();
                core::arch::x86_64::_mm_lfence();
                return ticks;
            }
        }
        self.origin.elapsed().as_nanos() as u64
    }

    /// Nanoseconds between two readings, the timer's own cost subtracted.
    #[inline]
    pub(super) fn elapsed_ns(&self, start: u64, end: u64) -> f64 {
        (end.saturating_sub(start).saturating_sub(self.overhead)) as f64 * self.ns_per_tick
    }

    /// The subtracted cost of a reading pair, in ns.
    pub(super) fn overhead_ns(&self) -> f64 {
        self.overhead as f64 * self.ns_per_tick
    }

    /// Whether the TSC is used.
    pub(super) fn is_tsc(&self) -> bool {
        self.tsc
    }
}

/// The independent oracle of checkpoint images: a plain `Vec<u64>` brought forward by the same
/// deterministic updates as the algorithm under test (`step(state, tick)` applies tick `tick`,
/// numbered from 1), never by that algorithm. Images are offered in increasing tick order (the
/// writer captures them so), so the replay runs forward once and holds one state, not one per
/// tick.
pub(super) struct ImageReplay<S: FnMut(&mut [u64], u64)> {
    state: Vec<u64>,
    step: S,
    /// Ticks applied to `state`.
    tick: u64,
    /// Images compared.
    images: u64,
    /// The first image that differed from the replay: (its tick, the first differing cell).
    first_mismatch: Option<(u64, usize)>,
}

impl<S: FnMut(&mut [u64], u64)> ImageReplay<S> {
    /// A replay of `words` zeroed cells (every state starts zeroed) advanced by `step`.
    pub(super) fn new(words: usize, step: S) -> Self {
        ImageReplay {
            state: vec![0; words],
            step,
            tick: 0,
            images: 0,
            first_mismatch: None,
        }
    }

    /// Compares `image`, captured at the point of consistency of `tick`, cell for cell with the
    /// replay after `tick` ticks; returns whether they are equal. Ticks must not go backwards.
    pub(super) fn check(&mut self, tick: u64, image: &[u64]) -> bool {
        assert!(tick >= self.tick, "images come in tick order");
        while self.tick < tick {
            self.tick += 1;
            (self.step)(&mut self.state, self.tick);
        }
        self.images += 1;
        // A whole-slice comparison (a memcmp); the position only when it fails.
        if image == self.state.as_slice() {
            return true;
        }
        let cell = image
            .iter()
            .zip(&self.state)
            .position(|(a, b)| a != b)
            .unwrap_or(image.len().min(self.state.len()));
        self.first_mismatch.get_or_insert((tick, cell));
        false
    }

    /// Images compared so far.
    pub(super) fn images(&self) -> u64 {
        self.images
    }

    /// The first image that differed: (tick, cell).
    pub(super) fn first_mismatch(&self) -> Option<(u64, usize)> {
        self.first_mismatch
    }
}

/// What one overhead cell measured, and what its checks found.
pub(super) struct OverheadCell {
    pub(super) tick_ns: Vec<f64>,
    pub(super) prepare_ns: Vec<f64>,
    pub(super) memory_bytes: usize,
    /// Checkpoint images compared with the independent replay.
    pub(super) images_compared: u64,
    /// The first image that differed from the replay: (tick, cell).
    pub(super) image_mismatch: Option<(u64, usize)>,
    /// Whether the live state after the last tick equals the baseline's plain vector.
    pub(super) final_state_matches: bool,
}

impl OverheadCell {
    /// A cell of an algorithm whose arrays take `memory_bytes`.
    pub(super) fn new(memory_bytes: usize) -> OverheadCell {
        OverheadCell {
            tick_ns: Vec::new(),
            prepare_ns: Vec::new(),
            memory_bytes,
            images_compared: 0,
            image_mismatch: None,
            final_state_matches: false,
        }
    }

    /// Takes the replay's verdict on the images.
    pub(super) fn record_images<S: FnMut(&mut [u64], u64)>(&mut self, replay: &ImageReplay<S>) {
        self.images_compared = replay.images();
        self.image_mismatch = replay.first_mismatch();
    }

    /// Records this cell's two checks in `report` (the image check under `what` / `against`, so
    /// each workload says what it replayed), and a note naming what differed when one failed.
    pub(super) fn report_checks(
        &self,
        report: &mut Report,
        (what, against): (&str, &str),
        words: usize,
        label: &str,
    ) {
        report.check(
            what,
            against,
            self.images_compared,
            self.image_mismatch.is_none(),
        );
        report.check(
            "the live state after the last tick, cell by cell",
            "the no-checkpoint baseline's plain vector after the same updates",
            words as u64,
            self.final_state_matches,
        );
        if let Some((tick, cell)) = self.image_mismatch {
            report.notes.push(format!(
                "tick {label}: the image of tick {tick} differs from the replay at cell {cell}"
            ));
        }
        if !self.final_state_matches {
            report.notes.push(format!(
                "tick {label}: the final state differs from the baseline's"
            ));
        }
        if self.image_mismatch.is_some() || !self.final_state_matches {
            eprintln!("tick {label}: a check failed (see the report's notes)");
        }
    }

    /// Overhead per checkpoint against the no-checkpoint baseline's tick times: median
    /// `prepare` + (median update time − the baseline's median), the difference floored at
    /// zero. Medians, so that a tick preempted by another process does not move the result.
    pub(super) fn overhead_ns(&self, baseline_ns: &[f64]) -> f64 {
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
fn run_baseline(
    words: usize,
    ticks: &[Vec<(u32, u64)>],
    timer: &CycleTimer,
) -> (Vec<f64>, Vec<u64>) {
    let mut state = vec![0u64; words];
    let mut times = Vec::new();
    for (number, updates) in ticks.iter().enumerate() {
        let started = timer.now();
        apply_updates(&mut state, updates);
        std::hint::black_box(&mut state);
        let ended = timer.now();
        if number >= WARMUP_TICKS {
            times.push(timer.elapsed_ns(started, ended));
        }
    }
    (times, state)
}

/// The writer's work, untimed: capture the checkpoint into `image` (which holds the previous
/// image, the base Ping-Pong needs).
pub(super) fn capture_all<A: Algorithm>(algorithm: &A, image: &mut [u64]) {
    let words = image.len();
    for start in (0..words).step_by(1 << 16) {
        let end = (start + (1 << 16)).min(words);
        algorithm.capture(start, &mut image[start..end]);
    }
}

fn run_overhead<A: Algorithm>(
    words: usize,
    huge_pages: bool,
    ticks: &[Vec<(u32, u64)>],
    expected: &[u64],
    timer: &CycleTimer,
) -> Result<OverheadCell> {
    let algorithm = A::new(words, huge_pages).context("allocating the state")?;
    let mut image = vec![0u64; words];
    let mut cell = OverheadCell::new(algorithm.memory_bytes());
    let mut replay = ImageReplay::new(words, |state: &mut [u64], tick: u64| {
        apply_updates(state, &ticks[tick as usize - 1]);
    });
    for (number, updates) in ticks.iter().enumerate() {
        let started = timer.now();
        for &(index, value) in updates {
            algorithm.write(index as usize, value);
        }
        let updated = timer.now();
        let prepare_started = timer.now();
        // SAFETY: this thread is the only mutator, and the previous capture finished below.
        unsafe { algorithm.prepare() };
        let prepared = timer.now();
        let prepare_ns = timer.elapsed_ns(prepare_started, prepared);
        if number >= WARMUP_TICKS {
            cell.tick_ns
                .push(timer.elapsed_ns(started, updated) + prepare_ns);
            cell.prepare_ns.push(prepare_ns);
        }
        capture_all(&algorithm, &mut image);
        // The image of tick `number + 1` (ticks counted from 1), against the replay's.
        replay.check(number as u64 + 1, &image);
    }
    cell.record_images(&replay);
    cell.final_state_matches = (0..words).all(|i| algorithm.read(i) == expected[i]);
    Ok(cell)
}

/// One tick's updates applied to a plain vector (the baseline's and the replay's step).
fn apply_updates(state: &mut [u64], updates: &[(u32, u64)]) {
    for &(index, value) in updates {
        state[index as usize] = value;
    }
}

/// What to sweep.
pub(super) struct SweepPlan<'a> {
    pub(super) words: usize,
    pub(super) rates: &'a [u64],
    pub(super) algorithms: &'a [AlgorithmKind],
    pub(super) ticks: usize,
    pub(super) rounds: usize,
    pub(super) huge_pages: bool,
    pub(super) tick_ms: u64,
    pub(super) zipf: &'a Zipf<f64>,
    pub(super) timer: &'a CycleTimer,
}

/// What a sweep measured, per algorithm and rate.
pub(super) struct Sweep {
    /// Overhead per checkpoint (ns), one per round.
    pub(super) overhead: Vec<Vec<Vec<f64>>>,
    /// Every measured tick's mutator time (ns).
    pub(super) tick_times: Vec<Vec<Vec<f64>>>,
    /// Median prepare time (ns), one per round.
    pub(super) prepare_times: Vec<Vec<Vec<f64>>>,
    /// Bytes of the algorithm's arrays.
    pub(super) memory: Vec<usize>,
    /// Median baseline tick time per rate and round.
    pub(super) baseline_tick_ns: Vec<Vec<f64>>,
}

impl Sweep {
    /// Median overhead (ns) of `algorithm` at rate number `rate`.
    pub(super) fn overhead_median(&self, algorithm: usize, rate: usize) -> f64 {
        median(&self.overhead[algorithm][rate])
    }
}

/// Run the sweep of `plan`; every verification goes into `report`.
pub(super) fn run_sweep(plan: &SweepPlan, report: &mut Report, label: &str) -> Result<Sweep> {
    let (algorithms, rates) = (plan.algorithms.len(), plan.rates.len());
    let mut sweep = Sweep {
        overhead: vec![vec![Vec::new(); rates]; algorithms],
        tick_times: vec![vec![Vec::new(); rates]; algorithms],
        prepare_times: vec![vec![Vec::new(); rates]; algorithms],
        memory: vec![0; algorithms],
        baseline_tick_ns: vec![Vec::new(); rates],
    };
    let started = Instant::now();
    for (rate_number, &rate) in plan.rates.iter().enumerate() {
        let updates_per_tick = ((rate as f64) * plan.tick_ms as f64 / 1000.0)
            .round()
            .max(1.0) as usize;
        let tick_updates_list: Vec<Vec<(u32, u64)>> = (0..WARMUP_TICKS + plan.ticks)
            .map(|t| {
                tick_updates(
                    plan.zipf,
                    plan.words,
                    updates_per_tick,
                    (rate << 20) + t as u64,
                )
            })
            .collect();
        let mut baseline: Option<(usize, Vec<f64>, Vec<u64>)> = None;
        for (round, contender) in alternating_schedule(algorithms, plan.rounds) {
            let kind = plan.algorithms[contender];
            if baseline.as_ref().is_none_or(|(r, _, _)| *r != round) {
                let (times, state) = run_baseline(plan.words, &tick_updates_list, plan.timer);
                sweep.baseline_tick_ns[rate_number].push(median(&times));
                baseline = Some((round, times, state));
            }
            let (_, baseline_ns, expected) = baseline.as_ref().expect("set above");
            let cell = dispatch!(
                kind,
                run_overhead(
                    plan.words,
                    plan.huge_pages,
                    &tick_updates_list,
                    expected,
                    plan.timer
                )
            )?;
            cell.report_checks(
                report,
                (
                    "checkpoint images, tick by tick",
                    "an independent plain-vector replay of the same updates",
                ),
                plan.words,
                &format!("{label}: {} at {rate}/s round {round}", kind.short_name()),
            );
            sweep.overhead[contender][rate_number].push(cell.overhead_ns(baseline_ns));
            sweep.tick_times[contender][rate_number].extend_from_slice(&cell.tick_ns);
            sweep.prepare_times[contender][rate_number].push(median(&cell.prepare_ns));
            sweep.memory[contender] = cell.memory_bytes;
        }
        eprintln!(
            "tick {label}: rate {rate}/s done ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(sweep)
}

/// The report rows of a sweep (`part` = "overhead" or "scaling").
pub(super) fn sweep_rows(
    report: &mut Report,
    part: &str,
    state_mb: usize,
    plan: &SweepPlan,
    sweep: &Sweep,
) {
    for (contender, kind) in plan.algorithms.iter().enumerate() {
        for (rate_number, &rate) in plan.rates.iter().enumerate() {
            let mut line = row([
                ("part", Value::from(part)),
                ("state_mb", Value::from(state_mb as u64)),
                ("algorithm", Value::from(kind.short_name())),
                ("updates_per_s", Value::from(rate)),
            ]);
            let ms = |values: &[f64]| values.iter().map(|ns| ns / 1e6).collect::<Vec<_>>();
            Spread::of(&ms(&sweep.overhead[contender][rate_number]))
                .insert_into(&mut line, "overhead_ms_per_checkpoint");
            Spread::of(&ms(&sweep.prepare_times[contender][rate_number]))
                .insert_into(&mut line, "prepare_ms");
            super::e2e::insert_percentiles(&mut line, &sweep.tick_times[contender][rate_number]);
            line.insert(
                "memory_bytes".into(),
                Value::from(sweep.memory[contender] as u64),
            );
            report.rows.push(line);
        }
    }
}

/// Memory a sweep cell of `kind` needs for `words` cells: the algorithm's arrays, the writer's
/// image, the baseline's state and the image replay's.
fn cell_bytes(kind: AlgorithmKind, words: usize) -> u64 {
    let state = words as u64 * 8;
    let arrays = match kind {
        AlgorithmKind::NaiveSnapshot => 2 * state,
        AlgorithmKind::CopyOnUpdate => 2 * state + state / 8,
        AlgorithmKind::BitArrayCopyOnUpdate => 2 * state + state / 32,
        AlgorithmKind::NaiveZigzag | AlgorithmKind::InterleavedZigzag => 2 * state + state / 4,
        AlgorithmKind::PackedZigzag => 2 * state + state / 8,
        AlgorithmKind::BitArrayZigzag => 2 * state + state / 256,
        AlgorithmKind::NaivePingPong => 3 * state + state / 4,
        AlgorithmKind::InterleavedPingPong => 4 * state,
    };
    arrays + 3 * state
}

/// State-size scaling (§5.3): the sweep at each size in `sizes_mb`, with the algorithms whose
/// cells fit in 80 % of the memory available now (the others are skipped and named in a note).
/// Returns the largest size that ran.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_scaling(
    report: &mut Report,
    sizes_mb: &[usize],
    rates: &[u64],
    algorithms: &[AlgorithmKind],
    ticks: usize,
    rounds: usize,
    huge_pages: bool,
    skew: f64,
    tick_ms: u64,
    timer: &CycleTimer,
) -> Result<Option<usize>> {
    let mut largest = None;
    for &state_mb in sizes_mb {
        let words = state_mb * (1 << 20) / 8;
        let available =
            crate::memory::read_proc_kib("/proc/meminfo", "MemAvailable:") * 1024 * 8 / 10;
        let (fits, skipped): (Vec<AlgorithmKind>, Vec<AlgorithmKind>) = algorithms
            .iter()
            .partition(|kind| cell_bytes(**kind, words) <= available);
        if !skipped.is_empty() {
            report.notes.push(format!(
                "Scaling at {state_mb} MiB: skipped {} (a cell needs more than 80 % of the {} MiB available).",
                skipped.iter().map(|kind| kind.short_name()).collect::<Vec<_>>().join(", "),
                (available * 10 / 8) >> 20
            ));
        }
        if fits.is_empty() {
            continue;
        }
        let zipf = Zipf::new(words as f64, skew).context("Zipf parameters")?;
        let plan = SweepPlan {
            words,
            rates,
            algorithms: &fits,
            ticks,
            rounds,
            huge_pages,
            tick_ms,
            zipf: &zipf,
            timer,
        };
        let sweep = run_sweep(&plan, report, &format!("scaling {state_mb} MiB"))?;
        sweep_rows(report, "scaling", state_mb, &plan, &sweep);
        largest = Some(state_mb);
    }
    Ok(largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small Zipf update stream: `ticks` ticks of `per_tick` updates over `words` cells.
    fn small_stream(words: usize, ticks: usize, per_tick: usize) -> Vec<Vec<(u32, u64)>> {
        let zipf = Zipf::new(words as f64, 0.8).unwrap();
        (0..ticks as u64)
            .map(|t| tick_updates(&zipf, words, per_tick, 0xC0DE + t))
            .collect()
    }

    /// The images `A` captures, one per tick (as the sweep takes them), for `stream`.
    fn images_of<A: Algorithm>(words: usize, stream: &[Vec<(u32, u64)>]) -> Vec<Vec<u64>> {
        let algorithm = A::new(words, false).unwrap();
        let mut image = vec![0u64; words];
        let mut images = Vec::new();
        for updates in stream {
            for &(index, value) in updates {
                algorithm.write(index as usize, value);
            }
            // SAFETY: this thread is the only mutator; the previous capture has finished.
            unsafe { algorithm.prepare() };
            capture_all(&algorithm, &mut image);
            images.push(image.clone());
        }
        images
    }

    fn replay_of(
        words: usize,
        stream: &[Vec<(u32, u64)>],
    ) -> ImageReplay<impl FnMut(&mut [u64], u64) + '_> {
        ImageReplay::new(words, move |state: &mut [u64], tick: u64| {
            apply_updates(state, &stream[tick as usize - 1]);
        })
    }

    #[test]
    fn every_algorithms_images_match_the_replay_tick_by_tick() {
        let (words, stream) = (4096, small_stream(4096, 9, 300));
        for kind in AlgorithmKind::ALL {
            let images = dispatch!(kind, images_of(words, &stream));
            let mut replay = replay_of(words, &stream);
            for (number, image) in images.iter().enumerate() {
                assert!(
                    replay.check(number as u64 + 1, image),
                    "{} tick {}",
                    kind.short_name(),
                    number + 1
                );
            }
            assert_eq!(replay.images(), 9);
            assert_eq!(replay.first_mismatch(), None);
        }
    }

    #[test]
    fn the_replay_catches_one_changed_cell_and_an_image_from_the_wrong_tick() {
        let (words, stream) = (4096, small_stream(4096, 6, 300));
        let images = images_of::<InterleavedPingPong>(words, &stream);
        // Tampered: one cell of the image of tick 4 changed; only that image fails.
        let mut replay = replay_of(words, &stream);
        let mut verdicts = Vec::new();
        for (number, image) in images.iter().enumerate() {
            let mut image = image.clone();
            if number + 1 == 4 {
                image[1234] ^= 1;
            }
            verdicts.push(replay.check(number as u64 + 1, &image));
        }
        assert_eq!(verdicts, [true, true, true, false, true, true]);
        assert_eq!(replay.first_mismatch(), Some((4, 1234)));
        // An image one tick stale (tick 2's offered as tick 3's) differs from the replay.
        let mut replay = replay_of(words, &stream);
        assert!(replay.check(1, &images[0]));
        assert!(!replay.check(3, &images[1]));
    }

    #[test]
    fn an_overhead_cell_checks_every_image_and_the_final_state() {
        let (words, stream) = (4096, small_stream(4096, 6, 300));
        let mut baseline = vec![0u64; words];
        for updates in &stream {
            apply_updates(&mut baseline, updates);
        }
        let timer = CycleTimer::calibrate();
        let cell = run_overhead::<NaiveSnapshot>(words, false, &stream, &baseline, &timer).unwrap();
        assert_eq!((cell.images_compared, cell.image_mismatch), (6, None));
        assert!(cell.final_state_matches);
        // A baseline with one cell changed fails the final-state check.
        baseline[17] ^= 1;
        let cell = run_overhead::<NaiveSnapshot>(words, false, &stream, &baseline, &timer).unwrap();
        assert!(!cell.final_state_matches);
    }
}
