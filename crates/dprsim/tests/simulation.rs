//! The simulator's own tests: every finder keeps the DPR guarantee under failures, a seed fixes
//! the trace, and the oracle catches a tampered state.
//!
//! Scale with `DPRSIM_SEEDS` (seeds per finder, default 2), `DPRSIM_WORKERS` (default 8) and
//! `DPRSIM_MS` (virtual milliseconds of load, default 200).

use std::time::Duration;

use prefixkv_dprsim::{run, CommitMode, Failure, FinderKind, SimConfig, SimReport, Tamper};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn small(finder: FinderKind, seed: u64) -> SimConfig {
    let mut config = SimConfig::new(env("DPRSIM_WORKERS", 8) as usize, finder, seed);
    config.duration = Duration::from_millis(env("DPRSIM_MS", 200));
    config.with_failure_midway()
}

fn summary(report: &SimReport) -> String {
    format!(
        "issued {} committed {} lost {} rejected {} uncertain {} world-line {} p50 {:.1} ms \
         cut {:.0} v/s metadata {:.0} ops/s graph max {} events {} violations {:?}",
        report.ops_issued,
        report.ops_committed,
        report.ops_lost,
        report.ops_rejected,
        report.ops_uncertain,
        report.world_line,
        report.commit_latency_quantile_ms(0.5),
        report.cut_progress_per_s(),
        report.metadata_ops_per_s(),
        report.finder_load.graph_nodes_max,
        report.events,
        report.violations
    )
}

fn check_finder(finder: FinderKind) {
    for seed in 0..env("DPRSIM_SEEDS", 2) {
        let report = run(small(finder, seed)).unwrap();
        eprintln!("{} seed {seed}: {}", finder.name(), summary(&report));
        assert!(
            report.verified,
            "{} seed {seed}: {}",
            finder.name(),
            summary(&report)
        );
        assert!(report.world_line >= 1, "the injected failure rolled back");
        assert!(report.ops_committed > 0 && report.session_rollbacks > 0);
    }
}

#[test]
fn exact_finder_keeps_the_guarantee_under_a_failure() {
    check_finder(FinderKind::Exact);
}

#[test]
fn approximate_finder_keeps_the_guarantee_under_a_failure() {
    check_finder(FinderKind::Approximate);
}

#[test]
fn hybrid_finder_keeps_the_guarantee_under_a_failure() {
    check_finder(FinderKind::Hybrid);
}

#[test]
fn two_failures_in_quick_succession_are_survived() {
    let mut config = small(FinderKind::Exact, 7);
    config.failures = vec![
        Failure {
            at: Duration::from_millis(60),
            worker: 1,
        },
        Failure {
            at: Duration::from_millis(64),
            worker: 5,
        },
        Failure {
            at: Duration::from_millis(130),
            worker: 1,
        },
    ];
    let report = run(config).unwrap();
    eprintln!("three failures: {}", summary(&report));
    assert!(report.verified, "{}", summary(&report));
    assert!(report.world_line >= 2);
}

#[test]
fn a_seed_fixes_the_trace() {
    let first = run(small(FinderKind::Hybrid, 3)).unwrap();
    let second = run(small(FinderKind::Hybrid, 3)).unwrap();
    assert_eq!(first.trace_digest, second.trace_digest);
    assert_eq!(first.events, second.events);
    assert_eq!(first.cut_timeline, second.cut_timeline);
    assert_eq!(first.commit_latency_ms, second.commit_latency_ms);
    assert_eq!(first.finder_load, second.finder_load);
    let other = run(small(FinderKind::Hybrid, 4)).unwrap();
    assert_ne!(first.trace_digest, other.trace_digest);
}

#[test]
fn the_oracle_catches_an_erased_committed_operation() {
    let mut config = small(FinderKind::Exact, 1);
    config.tamper = Some(Tamper::EraseCommittedOperation);
    let report = run(config).unwrap();
    assert!(report.tampered, "the tamper found nothing to erase");
    assert!(!report.verified, "the oracle missed the erased operation");
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("reported committed but is gone") || v.contains("absent")),
        "{:?}",
        report.violations
    );
}

/// Random schedules: 1-4 crashes at random times (some while a recovery is under way), long
/// network tails, every commit mode, relabelling on or off (exact finder), every finder. `DPRSIM_CHAOS_SEEDS` sets
/// the number of seeds (default 6).
#[test]
fn random_failure_schedules_keep_the_guarantee() {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    let finders = [
        FinderKind::Exact,
        FinderKind::Approximate,
        FinderKind::Hybrid,
    ];
    for seed in 0..env("DPRSIM_CHAOS_SEEDS", 6) {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let finder = finders[(seed % 3) as usize];
        let mut config = SimConfig::new(rng.random_range(3..=8), finder, seed);
        config.duration = Duration::from_millis(env("DPRSIM_MS", 200));
        config.network = prefixkv_dprsim::Delay::Exponential {
            min: Duration::from_micros(50),
            mean_extra: Duration::from_micros(rng.random_range(100..3000)),
        };
        config.commit_mode = [
            CommitMode::Plain,
            CommitMode::CatchUp,
            CommitMode::AlignedSlots,
        ][rng.random_range(0..3)];
        // Relabelling is for the exact finder only (see `FastForward::Relabel`).
        config.relabel = rng.random_bool(0.5) && finder == FinderKind::Exact;
        config.window = rng.random_range(1..=8);
        for _ in 0..rng.random_range(1..=4) {
            config.failures.push(Failure {
                at: Duration::from_micros(
                    rng.random_range(10_000..config.duration.as_micros() as u64),
                ),
                worker: rng.random_range(0..config.workers),
            });
        }
        let report = run(config.clone()).unwrap();
        eprintln!(
            "chaos seed {seed} ({} workers, {}): {}",
            config.workers,
            finder.name(),
            summary(&report)
        );
        assert!(
            report.verified,
            "chaos seed {seed} {config:?}: {}",
            summary(&report)
        );
    }
}

/// The oracle sees a broken prefix the state alone cannot show: with `FastForward::Relabel` the
/// approximate cut can hold a version without the one it depends on (relabelling moves operations
/// into a larger version), and after the rollback a session keeps batches issued after a batch it
/// lost. This is why `Relabel` is documented as exact-finder only; the same schedule with the
/// exact finder verifies.
#[test]
fn the_oracle_catches_a_broken_prefix_from_relabelling_under_the_approximate_cut() {
    let mut config = SimConfig::new(8, FinderKind::Approximate, 22);
    config.window = 5;
    config.duration = Duration::from_millis(200);
    config.network = prefixkv_dprsim::Delay::Exponential {
        min: Duration::from_micros(50),
        mean_extra: Duration::from_micros(487),
    };
    config.relabel = true;
    config.failures = vec![Failure {
        at: Duration::from_micros(61_324),
        worker: 5,
    }];
    let report = run(config.clone()).unwrap();
    assert!(!report.verified, "{}", summary(&report));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("issued after a lost batch completed")),
        "{:?}",
        report.violations
    );
    config.finder = FinderKind::Exact;
    let exact = run(config).unwrap();
    assert!(exact.verified, "{}", summary(&exact));
}
