//! `prefixkv-bench dpr --only simulation`: libDPR at 8–64 workers under `prefixkv-dprsim`'s
//! deterministic network simulation (issue 14, "Scale past this machine").
//!
//! Every cell runs the real `DprWorker` (over the in-memory `VersionedMap`), `DprSession`s, one
//! finder and the `ClusterManager` over a SQLite file, in virtual time, with one worker crashed
//! at half the run. Times in the rows are virtual (what the cluster would see), loads are counts
//! (metadata store calls, precedence-graph vertices), so the numbers do not depend on this
//! machine's speed; only `wall_seconds` does. Each cell's seeds are averaged; every seed's oracle
//! must pass (`verified`).
//!
//! Rows: `simulation` (one per workers × finder) and `simulation-timeline` (the published cut's
//! smallest version every 50 virtual ms, largest worker count, first seed). Plots:
//! `dpr-sim-latency`, `dpr-sim-graph`, `dpr-sim-edges`, `dpr-sim-metadata`, `dpr-sim-cut`.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use prefixkv_dprsim::{run as simulate, CommitMode, FinderKind, SimConfig, SimReport};
use serde_json::Value;

use crate::plot::Series;
use crate::report::{row, Report};
use crate::Common;

use super::sweeps::chart;

/// The simulation part's sizes (from flags and `--quick`).
pub(super) struct SimPlan {
    pub workers: Vec<usize>,
    pub finders: Vec<FinderKind>,
    pub seeds: u64,
    pub virtual_run: Duration,
    pub commit_mode: CommitMode,
    pub relabel: bool,
}

pub(super) fn parse_finder(name: &str) -> Result<FinderKind> {
    Ok(match name {
        "exact" => FinderKind::Exact,
        "approximate" => FinderKind::Approximate,
        "hybrid" => FinderKind::Hybrid,
        other => bail!("unknown finder {other:?} (exact, approximate, hybrid)"),
    })
}

pub(super) fn parse_commit_mode(name: &str) -> Result<CommitMode> {
    Ok(match name {
        "plain" => CommitMode::Plain,
        "catch-up" => CommitMode::CatchUp,
        "aligned-slots" => CommitMode::AlignedSlots,
        other => bail!("unknown commit mode {other:?} (plain, catch-up, aligned-slots)"),
    })
}

pub(super) fn mode_name(mode: CommitMode) -> &'static str {
    match mode {
        CommitMode::Plain => "plain",
        CommitMode::CatchUp => "catch-up",
        CommitMode::AlignedSlots => "aligned-slots",
    }
}

/// One cell: the reports of every seed.
struct Cell {
    workers: usize,
    finder: FinderKind,
    reports: Vec<SimReport>,
    wall_seconds: f64,
}

impl Cell {
    fn mean(&self, metric: impl Fn(&SimReport) -> f64) -> f64 {
        self.reports.iter().map(metric).sum::<f64>() / self.reports.len().max(1) as f64
    }
    fn verified(&self) -> bool {
        self.reports.iter().all(|r| r.verified)
    }
}

fn config(plan: &SimPlan, workers: usize, finder: FinderKind, seed: u64) -> SimConfig {
    let mut config = SimConfig::new(workers, finder, seed);
    config.duration = plan.virtual_run;
    config.commit_mode = plan.commit_mode;
    config.relabel = plan.relabel;
    config.with_failure_midway()
}

fn run_cell(plan: &SimPlan, workers: usize, finder: FinderKind) -> Result<Cell> {
    let started = Instant::now();
    let mut reports = Vec::new();
    for seed in 0..plan.seeds {
        let report = simulate(config(plan, workers, finder, seed))?;
        if !report.verified {
            eprintln!(
                "dpr simulation: {workers} workers, {} finder, seed {seed}: NOT VERIFIED \
                 ({} violations; first: {:?})",
                finder.name(),
                report.violations.len(),
                report.violations.iter().take(2).collect::<Vec<_>>()
            );
        }
        reports.push(report);
    }
    Ok(Cell {
        workers,
        finder,
        reports,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

fn cell_row(plan: &SimPlan, cell: &Cell) -> serde_json::Map<String, Value> {
    let interval_ms = SimConfig::new(1, cell.finder, 0)
        .commit_interval
        .as_secs_f64()
        * 1e3;
    let p50 = cell.mean(|r| r.commit_latency_quantile_ms(0.5));
    let p99 = cell.mean(|r| r.commit_latency_quantile_ms(0.99));
    let per_s = |count: fn(&SimReport) -> u64| {
        cell.mean(|r| count(r) as f64 / r.virtual_seconds_total.max(1e-9))
    };
    let mut r = row([
        ("figure", Value::from("simulation")),
        ("workers", cell.workers.into()),
        ("finder", cell.finder.name().into()),
        ("seeds", cell.reports.len().into()),
        ("commit_mode", mode_name(plan.commit_mode).into()),
        ("relabel", plan.relabel.into()),
        ("commit_interval_ms", interval_ms.into()),
        ("virtual_seconds", plan.virtual_run.as_secs_f64().into()),
        ("failures", 1.into()),
    ]);
    let numbers = [
        (
            "cut_progress_versions_per_s",
            cell.mean(SimReport::cut_progress_per_s),
        ),
        ("commit_latency_p50_ms", p50),
        ("commit_latency_p99_ms", p99),
        ("commit_latency_p50_intervals", p50 / interval_ms),
        ("commit_latency_p99_intervals", p99 / interval_ms),
        (
            "metadata_ops_per_s",
            cell.mean(SimReport::metadata_ops_per_s),
        ),
        (
            "metadata_reads_per_s",
            per_s(|r| r.finder_load.metadata_reads),
        ),
        (
            "metadata_writes_per_s",
            per_s(|r| r.finder_load.metadata_writes),
        ),
        ("reports_per_s", cell.mean(SimReport::reports_per_s)),
        ("refreshes_per_s", per_s(|r| r.finder_load.refreshes)),
        (
            "graph_nodes_max",
            cell.mean(|r| r.finder_load.graph_nodes_max as f64),
        ),
        (
            "graph_nodes_mean",
            cell.mean(|r| r.finder_load.graph_nodes_mean),
        ),
        (
            "graph_edges_max",
            cell.mean(|r| r.finder_load.graph_edges_max as f64),
        ),
        (
            "graph_edges_mean",
            cell.mean(|r| r.finder_load.graph_edges_mean),
        ),
        ("ops_issued", cell.mean(|r| r.ops_issued as f64)),
        ("ops_committed", cell.mean(|r| r.ops_committed as f64)),
        ("ops_lost", cell.mean(|r| r.ops_lost as f64)),
        ("ops_rejected", cell.mean(|r| r.ops_rejected as f64)),
        ("ops_uncertain", cell.mean(|r| r.ops_uncertain as f64)),
        ("events", cell.mean(|r| r.events as f64)),
        ("wall_seconds", cell.wall_seconds),
    ];
    for (key, value) in numbers {
        r.insert(key.into(), Value::from(value));
    }
    // Calls per virtual second by store method: which part of the load is the finder's
    // (add_persisted_version, persisted_versions, publish_cut, max_version) and which the
    // sessions' polls (cluster_state) and the leases' (heartbeat).
    let mut methods = serde_json::Map::new();
    for method in cell.reports[0].finder_load.per_method.keys() {
        let rate = cell.mean(|r| {
            r.finder_load.per_method.get(method).copied().unwrap_or(0) as f64
                / r.virtual_seconds_total.max(1e-9)
        });
        methods.insert(method.clone(), rate.into());
    }
    r.insert("metadata_calls_per_s".into(), methods.into());
    let digests: Vec<String> = cell
        .reports
        .iter()
        .map(|r| format!("{:016x}", r.trace_digest))
        .collect();
    r.insert("trace_digests".into(), digests.into());
    r.insert("verified".into(), cell.verified().into());
    r
}

/// Runs the part: every workers × finder cell, rows, plots and summary fields.
pub(super) fn run(common: &Common, plan: &SimPlan, report: &mut Report) -> Result<()> {
    let mut cells = Vec::new();
    for &workers in &plan.workers {
        for &finder in &plan.finders {
            let cell = run_cell(plan, workers, finder)?;
            let row = cell_row(plan, &cell);
            eprintln!(
                "dpr simulation: {workers:>3} workers {:<11} commit p50 {:>6.1} ms p99 {:>6.1} ms, \
                 cut {:>5.0} v/s, metadata {:>7.0} ops/s, graph max {:>5}, verified {} ({:.1} s)",
                finder.name(),
                row["commit_latency_p50_ms"].as_f64().unwrap_or(f64::NAN),
                row["commit_latency_p99_ms"].as_f64().unwrap_or(f64::NAN),
                row["cut_progress_versions_per_s"].as_f64().unwrap_or(f64::NAN),
                row["metadata_ops_per_s"].as_f64().unwrap_or(f64::NAN),
                row["graph_nodes_max"].as_f64().unwrap_or(f64::NAN),
                cell.verified(),
                cell.wall_seconds
            );
            report.check(
                "simulated runs (one per seed): each session's recovered operations",
                "the simulation's record of what each session was told committed",
                cell.reports.len() as u64,
                cell.verified(),
            );
            report.rows.push(row);
            cells.push(cell);
        }
    }
    timeline_rows(plan, &cells, report);
    plots(common, plan, &cells)?;
    summary(plan, &cells, report);
    Ok(())
}

fn timeline_rows(plan: &SimPlan, cells: &[Cell], report: &mut Report) {
    let largest = plan.workers.iter().copied().max().unwrap_or(0);
    for cell in cells.iter().filter(|c| c.workers == largest) {
        for (t_ms, min) in cut_steps(&cell.reports[0], 50) {
            report.rows.push(row([
                ("figure", Value::from("simulation-timeline")),
                ("workers", cell.workers.into()),
                ("finder", cell.finder.name().into()),
                ("t_ms", t_ms.into()),
                ("cut_min_version", min.into()),
            ]));
        }
    }
}

/// The cut's smallest version at every `step_ms` of virtual time (the last sample at or before).
fn cut_steps(report: &SimReport, step_ms: u64) -> Vec<(f64, f64)> {
    let end_us = (report.virtual_seconds_total * 1e6) as u64;
    let mut points = Vec::new();
    let mut at_us = 0;
    while at_us <= end_us {
        let min = report
            .cut_timeline
            .iter()
            .take_while(|s| s.at_us <= at_us)
            .last()
            .map_or(0, |s| s.min);
        points.push((at_us as f64 / 1e3, min as f64));
        at_us += step_ms * 1000;
    }
    points
}

fn per_finder(
    plan: &SimPlan,
    cells: &[Cell],
    label: &str,
    metric: impl Fn(&Cell) -> f64,
) -> Vec<Series> {
    plan.finders
        .iter()
        .map(|&finder| Series {
            label: format!("{} {label}", finder.name()),
            points: cells
                .iter()
                .filter(|c| c.finder == finder)
                .map(|c| (c.workers as f64, metric(c)))
                .collect(),
        })
        .collect()
}

fn plots(common: &Common, plan: &SimPlan, cells: &[Cell]) -> Result<()> {
    let mut latency = per_finder(plan, cells, "p50", |c| {
        c.mean(|r| r.commit_latency_quantile_ms(0.5))
    });
    latency.extend(per_finder(plan, cells, "p99", |c| {
        c.mean(|r| r.commit_latency_quantile_ms(0.99))
    }));
    chart(
        common,
        "dpr-sim-latency",
        "Simulated commit latency vs workers (virtual ms, one failure mid-run)",
        ("workers (log)", "commit latency (virtual ms)"),
        latency,
        true,
    )?;
    chart(
        common,
        "dpr-sim-graph",
        "Precedence graph above the cut (max vertices per refresh) vs workers",
        ("workers (log)", "vertices"),
        per_finder(plan, cells, "max", |c| {
            c.mean(|r| r.finder_load.graph_nodes_max as f64)
        }),
        true,
    )?;
    // Only the exact finder stores dependency entries; without it there is nothing to draw.
    let edges: Vec<Series> = per_finder(plan, cells, "mean", |c| {
        c.mean(|r| r.finder_load.graph_edges_mean)
    })
    .into_iter()
    .filter(|s| s.points.iter().any(|&(_, y)| y > 0.0))
    .collect();
    if !edges.is_empty() {
        chart(
            common,
            "dpr-sim-edges",
            "Dependency entries above the cut (exact finder's stored edges; mean per refresh)",
            ("workers (log)", "dependency entries"),
            edges,
            true,
        )?;
    }
    chart(
        common,
        "dpr-sim-metadata",
        "Metadata store calls per virtual second vs workers",
        ("workers (log)", "calls per virtual s"),
        per_finder(plan, cells, "", |c| c.mean(SimReport::metadata_ops_per_s)),
        true,
    )?;
    let largest = plan.workers.iter().copied().max().unwrap_or(0);
    let cut: Vec<Series> = cells
        .iter()
        .filter(|c| c.workers == largest)
        .map(|c| Series {
            label: format!("{} ({largest} workers)", c.finder.name()),
            points: cut_steps(&c.reports[0], 10),
        })
        .collect();
    chart(
        common,
        "dpr-sim-cut",
        "Published cut (smallest version) over virtual time, failure at half the run",
        ("virtual ms", "cut min version"),
        cut,
        false,
    )
}

fn summary(plan: &SimPlan, cells: &[Cell], report: &mut Report) {
    let largest = plan.workers.iter().copied().max().unwrap_or(0);
    let interval_ms = SimConfig::new(1, FinderKind::Exact, 0)
        .commit_interval
        .as_secs_f64()
        * 1e3;
    for cell in cells.iter().filter(|c| c.workers == largest) {
        let p50 = cell.mean(|r| r.commit_latency_quantile_ms(0.5)) / interval_ms;
        let name = cell.finder.name();
        report.summary(
            &format!("sim_commit_latency_p50_intervals_{largest}w_{name}"),
            p50,
        );
        report.summary(
            &format!("sim_graph_nodes_max_{largest}w_{name}"),
            cell.mean(|r| r.finder_load.graph_nodes_max as f64),
        );
        report.summary(
            &format!("sim_metadata_ops_per_s_{largest}w_{name}"),
            cell.mean(SimReport::metadata_ops_per_s),
        );
        if cell.finder == FinderKind::Exact || !plan.finders.contains(&FinderKind::Exact) {
            report.summary(&format!("sim_commit_latency_p50_intervals_{largest}w"), p50);
        }
    }
    let verified = cells.iter().all(Cell::verified);
    report
        .summary
        .insert("sim_verified".into(), verified.into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_dprsim::CutSample;

    #[test]
    fn cut_steps_hold_the_last_sample_at_or_before_each_step() {
        let report = SimReport {
            virtual_seconds_total: 0.1,
            cut_timeline: vec![
                CutSample {
                    at_us: 20_000,
                    world_line: 0,
                    min: 2,
                    max: 3,
                },
                CutSample {
                    at_us: 50_000,
                    world_line: 1,
                    min: 7,
                    max: 9,
                },
            ],
            ..SimReport::default()
        };
        assert_eq!(
            cut_steps(&report, 50),
            vec![(0.0, 0.0), (50.0, 7.0), (100.0, 7.0)]
        );
    }

    #[test]
    fn finder_and_commit_mode_names_round_trip() {
        for finder in [
            FinderKind::Exact,
            FinderKind::Approximate,
            FinderKind::Hybrid,
        ] {
            assert_eq!(parse_finder(finder.name()).unwrap(), finder);
        }
        for mode in [
            CommitMode::Plain,
            CommitMode::CatchUp,
            CommitMode::AlignedSlots,
        ] {
            assert_eq!(parse_commit_mode(mode_name(mode)).unwrap(), mode);
        }
        assert!(parse_finder("graph").is_err());
    }
}
