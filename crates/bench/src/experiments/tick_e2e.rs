//! End-to-end runs of the `tick` experiment: a `TickState` with the asynchronous writer and the
//! logical log on, ticks paced at the tick length, then recovery checked by the oracle; the
//! contenders (algorithm × image store), the report rows and the tick-time helpers.
//!
//! The oracle ([`check_recovery`]) trusts only what the bench itself knows: the inputs it generated
//! and logged, and that it ran `ticks` ticks, each acknowledged durable by `wait_durable` before
//! the run ended. Its reference state is those inputs applied to a plain vector
//! ([`ZipfInputs::reference`], no tickstate code involved); the recovered state must equal it at
//! exactly tick `ticks`. Nothing the system reports about itself (its tick, image ticks, counts)
//! enters the verdict.

use super::tick_updates;
use super::Setup;
use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, percentile, ratio, Spread};
use anyhow::{bail, Context, Result};
use prefixkv_tickstate::algo::*;
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
    /// What the oracle found wrong, if anything.
    pub(super) failure: Option<String>,
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
        check: Result<(), String>,
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
            verified: check.is_ok(),
            failure: check.err(),
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

/// Run every contender `rounds` times, in the alternating order of
/// [`alternating_schedule`] (A B C, C B A, …), with `run`; every run's verdict goes into
/// `report` (with the oracle's message as a note when it failed). Returns the runs per contender.
pub(super) fn alternate_runs(
    report: &mut Report,
    part: &str,
    contenders: &[Contender],
    rounds: usize,
    mut run: impl FnMut(&Contender) -> Result<EndToEnd>,
) -> Result<Vec<Vec<EndToEnd>>> {
    let mut runs: Vec<Vec<EndToEnd>> = contenders.iter().map(|_| Vec::new()).collect();
    for (round, number) in alternating_schedule(contenders.len(), rounds) {
        let contender = &contenders[number];
        let outcome = run(contender)?;
        report.check(
            &format!("{part}: recovered images"),
            "the end-to-end oracle of the run's own transactions",
            1,
            outcome.verified,
        );
        if let Some(failure) = &outcome.failure {
            let message = format!("{part} {} round {round}: {failure}", contender.label);
            eprintln!("tick: {message}");
            report.notes.push(message);
        }
        eprintln!(
            "tick: {part} {} round {round} done (verified: {})",
            contender.label, outcome.verified
        );
        runs[number].push(outcome);
    }
    Ok(runs)
}

/// The report row of a contender's end-to-end runs (all rounds): tick-time percentiles over every
/// tick of every round; spike ratios, checkpoint counts and recovery times as median, min and max
/// over rounds; bytes per checkpoint over all rounds; other counters as means per run.
pub(super) fn end_to_end_row(
    part: &str,
    label: &str,
    updates_per_s: f64,
    runs: &[EndToEnd],
    memory_bytes: u64,
) -> serde_json::Map<String, Value> {
    let mut line = row([
        ("part", Value::from(part)),
        ("algorithm", Value::from(label)),
        ("updates_per_s", Value::from(updates_per_s)),
        ("rounds", Value::from(runs.len() as u64)),
    ]);
    let all = |field: fn(&EndToEnd) -> &Vec<f64>| -> Vec<f64> {
        runs.iter()
            .flat_map(|run| field(run).iter().copied())
            .collect()
    };
    let per_run = |value: fn(&EndToEnd) -> f64| -> Spread {
        Spread::of(&runs.iter().map(value).collect::<Vec<_>>())
    };
    let mean = |value: fn(&EndToEnd) -> u64| -> f64 {
        runs.iter().map(value).sum::<u64>() as f64 / runs.len().max(1) as f64
    };
    let ticks = all(|run| &run.tick_ns);
    let cpu = all(|run| &run.tick_cpu_ns);
    insert_percentiles(&mut line, &ticks);
    per_run(EndToEnd::tick_max_over_p50).insert_into(&mut line, "tick_max_over_p50");
    line.insert(
        "tick_cpu_p50_ms".into(),
        Value::from(percentile(&cpu, 0.5) / 1e6),
    );
    line.insert(
        "tick_cpu_max_ms".into(),
        Value::from(percentile(&cpu, 1.0) / 1e6),
    );
    per_run(EndToEnd::tick_cpu_max_over_p50).insert_into(&mut line, "tick_cpu_max_over_p50");
    per_run(|run| run.checkpoints as f64).insert_into(&mut line, "checkpoints");
    line.insert(
        "checkpoints_deferred".into(),
        Value::from(mean(|run| run.deferred)),
    );
    let bytes: u64 = runs.iter().map(|run| run.image_bytes).sum();
    let checkpoints: u64 = runs.iter().map(|run| run.checkpoints).sum();
    line.insert(
        "image_bytes_written".into(),
        Value::from(mean(|run| run.image_bytes)),
    );
    line.insert(
        "image_bytes_per_checkpoint".into(),
        Value::from(ratio(bytes as f64, checkpoints as f64)),
    );
    line.insert(
        "wal_frame_bytes_written".into(),
        Value::from(mean(|run| run.wal_frame_bytes)),
    );
    line.insert(
        "backfill_bytes_written".into(),
        Value::from(mean(|run| run.backfill_bytes)),
    );
    line.insert(
        "base_bytes_read".into(),
        Value::from(mean(|run| run.base_bytes_read)),
    );
    line.insert("memory_bytes".into(), Value::from(memory_bytes));
    per_run(|run| run.recovery_ms).insert_into(&mut line, "recovery_ms");
    line.insert(
        "verified".into(),
        Value::from(runs.iter().all(|run| run.verified)),
    );
    line
}

/// Median over rounds of a per-run figure.
pub(super) fn median_over(runs: &[EndToEnd], value: fn(&EndToEnd) -> f64) -> f64 {
    median(&runs.iter().map(value).collect::<Vec<_>>())
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

/// The inputs of the Zipf end-to-end run: tick `t` applies the updates [`tick_updates`] generates
/// from seed `ZIPF_E2E_SEED + t`; its logged action is that seed and the number of updates.
pub(super) struct ZipfInputs<'a> {
    pub(super) zipf: &'a Zipf<f64>,
    pub(super) words: usize,
    pub(super) updates_per_tick: usize,
}

/// Base of the per-tick seeds of the Zipf end-to-end run.
const ZIPF_E2E_SEED: u64 = 0xE2E0_0000;

impl ZipfInputs<'_> {
    /// The updates of `tick` (cell index, new value).
    pub(super) fn updates(&self, tick: u64) -> Vec<(u32, u64)> {
        tick_updates(
            self.zipf,
            self.words,
            self.updates_per_tick,
            ZIPF_E2E_SEED + tick,
        )
    }

    /// The logged action of `tick`: its seed and its number of updates.
    pub(super) fn action(&self, tick: u64) -> [u8; 16] {
        let mut action = [0u8; 16];
        action[..8].copy_from_slice(&(ZIPF_E2E_SEED + tick).to_le_bytes());
        action[8..].copy_from_slice(&(self.updates_per_tick as u64).to_le_bytes());
        action
    }

    /// The reference state after ticks `1..=ticks`: the inputs applied to a plain vector.
    pub(super) fn reference(&self, ticks: u64) -> Vec<u64> {
        let mut state = vec![0u64; self.words];
        for tick in 1..=ticks {
            for (index, value) in self.updates(tick) {
                state[index as usize] = value;
            }
        }
        state
    }
}

/// Recovery's replay of a logged Zipf action (the inverse of [`ZipfInputs::action`]).
pub(super) fn e2e_apply(zipf: &Zipf<f64>, words: usize) -> impl FnMut(&mut [u64], u64, &[u8]) + '_ {
    move |state, _tick, action| {
        let seed = u64::from_le_bytes(action[0..8].try_into().expect("8-byte seed"));
        let updates = u64::from_le_bytes(action[8..16].try_into().expect("8-byte count")) as usize;
        for (index, value) in tick_updates(zipf, words, updates, seed) {
            state[index as usize] = value;
        }
    }
}

/// The end-to-end oracle. The bench ran `ticks` ticks and was told every one of them was durable,
/// so a recovery must be at exactly tick `ticks` and hold `reference`, the state the bench computed
/// from its own inputs. Returns what differs (the first differing cell and how many differ).
pub(super) fn check_recovery(
    recovered: &[u64],
    recovered_tick: u64,
    ticks: u64,
    reference: &[u64],
) -> Result<(), String> {
    if recovered_tick != ticks {
        return Err(format!(
            "recovered tick {recovered_tick}, but the run acknowledged {ticks} ticks as durable"
        ));
    }
    if recovered.len() != reference.len() {
        return Err(format!(
            "recovered {} cells, the reference has {}",
            recovered.len(),
            reference.len()
        ));
    }
    let mut differing = recovered
        .iter()
        .zip(reference)
        .enumerate()
        .filter(|(_, (got, want))| got != want);
    if let Some((index, (got, want))) = differing.next() {
        return Err(format!(
            "recovered state differs from the reference (the inputs applied to a plain vector) at \
             tick {ticks}: cell {index} is {got:#x}, the reference has {want:#x} ({} cells differ)",
            1 + differing.count()
        ));
    }
    Ok(())
}

/// One Zipf end-to-end run: `inputs.updates_per_tick` updates per tick, `ticks` ticks paced at
/// `tick`, through a `TickState<A>` in a temporary directory; then the directory is recovered and
/// checked against `reference` (the inputs of `ticks` ticks applied to a plain vector).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_end_to_end<A: Algorithm>(
    inputs: &ZipfInputs,
    huge_pages: bool,
    ticks: usize,
    tick: Duration,
    image_base: ImageBase,
    image_store: ImageStore,
    reference: &[u64],
) -> Result<EndToEnd> {
    let words = inputs.words;
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let mut config = Config::new(words);
    config.huge_pages = huge_pages;
    config.image_base = image_base;
    config.image_store = image_store;
    let (mut state, _) = TickState::<A>::open(dir.path(), config, e2e_apply(inputs.zipf, words))?;
    let mut times = Vec::with_capacity(ticks);
    let mut cpu_times = Vec::with_capacity(ticks);
    let mut next_deadline = Instant::now() + tick;
    for number in 1..=ticks as u64 {
        let updates = inputs.updates(number);
        let started = Instant::now();
        let cpu_started = thread_cpu_ns();
        state.log_action(&inputs.action(number))?;
        for (index, value) in updates {
            state.write(index as usize, value);
        }
        state.point_of_consistency(number)?;
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
    let stats = state.stats();
    let anon_huge_bytes = huge_pages_status().anon_huge_bytes.unwrap_or(0);
    state.close()?;
    let started = Instant::now();
    let (recovered, recovered_tick, _report) =
        recover(dir.path(), words, e2e_apply(inputs.zipf, words))?;
    let recovery_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(EndToEnd::from_run(
        &stats,
        anon_huge_bytes,
        times,
        cpu_times,
        recovery_ms,
        check_recovery(&recovered, recovered_tick, ticks as u64, reference),
    ))
}

/// What the Zipf end-to-end part measured, for the summary.
pub(super) struct ZipfPart {
    /// Median over rounds of max/p50 wall tick time per algorithm (its main contender).
    pub(super) spike: Vec<f64>,
    /// The same in mutator CPU time.
    pub(super) cpu_spike: Vec<f64>,
    /// Image bytes per checkpoint over all rounds: IPP with double-backup Copy, and with the WAL
    /// store.
    pub(super) ipp_bytes_per_checkpoint: [f64; 2],
    /// Largest `AnonHugePages` seen at the end of a run.
    pub(super) anon_huge_bytes_max: u64,
}

/// The Zipf end-to-end part: every contender alternated over `setup.e2e_rounds` rounds, each run
/// recovered and checked by the oracle against the inputs applied to a plain vector.
pub(super) fn run_part(
    setup: &Setup,
    contenders: &[Contender],
    memory: &[usize],
    report: &mut Report,
    out: &std::path::Path,
) -> Result<ZipfPart> {
    let inputs = ZipfInputs {
        zipf: &setup.zipf,
        words: setup.words,
        updates_per_tick: ((setup.e2e_rate as f64) * setup.tick.as_millis() as f64 / 1000.0)
            .round()
            .max(1.0) as usize,
    };
    let reference = inputs.reference(setup.e2e_ticks as u64);
    let runs = alternate_runs(
        report,
        "end_to_end",
        contenders,
        setup.e2e_rounds,
        |contender| {
            dispatch!(
                contender.kind,
                run_end_to_end(
                    &inputs,
                    setup.huge_pages,
                    setup.e2e_ticks,
                    setup.tick,
                    contender.image_base,
                    contender.image_store,
                    &reference
                )
            )
        },
    )?;
    let mut part = ZipfPart {
        spike: vec![f64::NAN; setup.algorithms.len()],
        cpu_spike: vec![f64::NAN; setup.algorithms.len()],
        ipp_bytes_per_checkpoint: [f64::NAN; 2],
        anon_huge_bytes_max: 0,
    };
    let mut series = Vec::new();
    for (contender, runs) in contenders.iter().zip(&runs) {
        for run in runs {
            part.anon_huge_bytes_max = part.anon_huge_bytes_max.max(run.anon_huge_bytes);
        }
        if let Some(slot) = contender.ipp_bytes_slot {
            let bytes: u64 = runs.iter().map(|run| run.image_bytes).sum();
            let checkpoints: u64 = runs.iter().map(|run| run.checkpoints).sum();
            part.ipp_bytes_per_checkpoint[slot] = ratio(bytes as f64, checkpoints as f64);
        }
        if contender.primary {
            part.spike[contender.index] = median_over(runs, EndToEnd::tick_max_over_p50);
            part.cpu_spike[contender.index] = median_over(runs, EndToEnd::tick_cpu_max_over_p50);
        }
        report.rows.push(end_to_end_row(
            "end_to_end",
            &contender.label,
            setup.e2e_rate as f64,
            runs,
            memory[contender.index] as u64 + contender.extra_memory_bytes(setup.words),
        ));
        series.push(tick_series(&contender.label, &runs[0]));
    }
    let chart = LineChart {
        title: format!(
            "Mutator time per tick, end to end ({} updates/s, writer and log on; round 1)",
            setup.e2e_rate
        ),
        x_label: "tick".into(),
        y_label: "mutator time per tick (ms)".into(),
        series,
        markers: Vec::new(),
        log_x: false,
    };
    write_line_chart(&chart, out, "tick_over_time")?;
    Ok(part)
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

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_tickstate::algo::InterleavedPingPong;

    fn inputs(zipf: &Zipf<f64>) -> ZipfInputs<'_> {
        ZipfInputs {
            zipf,
            words: 4096,
            updates_per_tick: 64,
        }
    }

    #[test]
    fn a_clean_run_passes_the_oracle() {
        let zipf = Zipf::new(4096.0, 0.8).unwrap();
        let inputs = inputs(&zipf);
        let reference = inputs.reference(6);
        let run = run_end_to_end::<InterleavedPingPong>(
            &inputs,
            false,
            6,
            Duration::from_millis(1),
            ImageBase::CopyFromFile,
            ImageStore::DoubleBackup,
            &reference,
        )
        .unwrap();
        assert_eq!(run.failure, None);
        assert!(run.verified);
    }

    /// The oracle on a recovered image with one word altered: it must name the cell.
    #[test]
    fn the_oracle_reports_one_altered_word_of_a_recovered_image() {
        let zipf = Zipf::new(4096.0, 0.8).unwrap();
        let inputs = inputs(&zipf);
        let ticks = 5;
        let dir = tempfile::tempdir().unwrap();
        let (mut state, _) = TickState::<InterleavedPingPong>::open(
            dir.path(),
            Config::new(inputs.words),
            e2e_apply(&zipf, inputs.words),
        )
        .unwrap();
        for tick in 1..=ticks {
            state.log_action(&inputs.action(tick)).unwrap();
            for (index, value) in inputs.updates(tick) {
                state.write(index as usize, value);
            }
            state.point_of_consistency(tick).unwrap();
        }
        state.close().unwrap();
        let (mut recovered, tick, _) =
            recover(dir.path(), inputs.words, e2e_apply(&zipf, inputs.words)).unwrap();
        let reference = inputs.reference(ticks);
        assert_eq!(check_recovery(&recovered, tick, ticks, &reference), Ok(()));
        let (index, _) = inputs.updates(3)[0];
        recovered[index as usize] ^= 1 << 17;
        let error = check_recovery(&recovered, tick, ticks, &reference).unwrap_err();
        assert!(
            error.contains(&format!("cell {index} ")) && error.contains("1 cells differ"),
            "{error}"
        );
    }

    /// A test-only wrapper between the bench and the system drops tick 4's action (neither logged
    /// nor applied): the oracle, whose reference has it, must report the difference.
    #[test]
    fn the_oracle_reports_a_dropped_logged_action() {
        let zipf = Zipf::new(4096.0, 0.8).unwrap();
        let inputs = inputs(&zipf);
        let ticks = 6;
        let dir = tempfile::tempdir().unwrap();
        // Images are taken too: they hold the state without tick 4's updates, as the log does.
        let (mut state, _) = TickState::<InterleavedPingPong>::open(
            dir.path(),
            Config::new(inputs.words),
            e2e_apply(&zipf, inputs.words),
        )
        .unwrap();
        for tick in 1..=ticks {
            if tick != 4 {
                state.log_action(&inputs.action(tick)).unwrap();
                for (index, value) in inputs.updates(tick) {
                    state.write(index as usize, value);
                }
            }
            state.point_of_consistency(tick).unwrap();
        }
        state.close().unwrap();
        let (recovered, tick, _) =
            recover(dir.path(), inputs.words, e2e_apply(&zipf, inputs.words)).unwrap();
        let error = check_recovery(&recovered, tick, ticks, &inputs.reference(ticks)).unwrap_err();
        assert!(error.contains("differs from the reference"), "{error}");
    }

    #[test]
    fn the_oracle_reports_a_short_recovery() {
        let reference = vec![1u64, 2, 3];
        let error = check_recovery(&reference, 9, 10, &reference).unwrap_err();
        assert!(error.contains("recovered tick 9"), "{error}");
    }
}
