//! The report of `cpr`: one row per (point, contender) with medians over rounds, the summary
//! ratios at the headline point, and the two plots (throughput against threads; throughput over
//! time with checkpoint markers).

use anyhow::Result;
use serde_json::{Map, Value};

use super::measure::{Cell, CheckpointWindow};
use super::{Cells, Contender, Mix, Plan, Point};
use crate::plot::{write_line_chart, LineChart, Marker, Series};
use crate::report::{row, Report};
use crate::stats::{median, ratio, Spread};
use crate::workload::KeyDistribution;
use crate::Common;

/// The point the summary and the timeline speak for: r90w10 uniform at the largest thread count
/// (or the last point if that was not run).
pub(super) fn headline(plan: &Plan, points: &[Point]) -> usize {
    let largest = *plan.threads.iter().max().expect("threads is not empty");
    points
        .iter()
        .position(|&(m, d, t)| m == Mix::R90w10 && d == KeyDistribution::Uniform && t == largest)
        .unwrap_or(points.len() - 1)
}

fn null_if_nan(x: f64) -> Value {
    if x.is_finite() {
        Value::from(x)
    } else {
        Value::Null
    }
}

fn distribution_name(distribution: KeyDistribution) -> String {
    format!("{distribution:?}").to_lowercase()
}

/// One row per (point, contender): medians over rounds.
pub(super) fn write_rows(report: &mut Report, plan: &Plan, points: &[Point], cells: &Cells) {
    for (&(point_index, contender_index), runs) in cells {
        let (mix, distribution, threads) = points[point_index];
        let contender = plan.contenders[contender_index];
        let mut r = row([
            ("variant", Value::from(contender.name())),
            ("threads", Value::from(threads)),
            ("mix", Value::from(mix.name())),
            ("distribution", Value::from(distribution_name(distribution))),
        ]);
        let throughput: Vec<f64> = runs.iter().map(|c| c.throughput_ops_per_s).collect();
        Spread::of(&throughput).insert_into(&mut r, "throughput_ops_per_s");
        insert_checkpoint_figures(&mut r, runs, report.host.cpu_mhz);
        insert_memory_figures(&mut r, runs);
        let verified = runs
            .iter()
            .map(|c| c.verified)
            .try_fold(true, |acc, v| v.map(|ok| acc && ok));
        r.insert("verified".into(), verified.map_or(Value::Null, Value::from));
        if let Some(ok) = verified {
            let checked = runs.iter().filter(|c| c.verified.is_some()).count() as u64;
            let what = match contender {
                Contender::Engine(Some(_)) => {
                    "every key of the recovered final checkpoint (taken after the workers stopped)"
                }
                _ => "every key of the live store after the workers stopped",
            };
            report.check(
                what,
                "a replay of each session's operations up to its CPR point, the points held to \
                 the serials the sessions were acknowledged",
                checked * plan.keys,
                ok,
            );
        }
        record_under_load(report, plan, &mut r, runs, contender);
        report.rows.push(r);
    }
}

/// The checkpoints taken under load (one per cell, recovered from a copy): the row's
/// `under_load_verified`, the report's check, and a note for a checkpointing cell that had none.
fn record_under_load(
    report: &mut Report,
    plan: &Plan,
    r: &mut Map<String, Value>,
    runs: &[Cell],
    contender: Contender,
) {
    let checked: Vec<bool> = runs.iter().filter_map(|c| c.under_load_verified).collect();
    let ok = (!checked.is_empty()).then(|| checked.iter().all(|&ok| ok));
    r.insert(
        "under_load_verified".into(),
        ok.map_or(Value::Null, Value::from),
    );
    if let Some(ok) = ok {
        report.check(
            "every key of a checkpoint taken while the workers ran (recovered from a copy)",
            "a replay of each session's operations up to its CPR point, the points held to what \
             the sessions had been acknowledged when the checkpoint was requested",
            checked.len() as u64 * plan.keys,
            ok,
        );
    }
    if matches!(contender, Contender::Engine(Some(_))) && checked.len() < runs.len() {
        report.notes.push(format!(
            "{}: {} of {} cells published no checkpoint under load to recover (the run was \
             shorter than a checkpoint)",
            contender.name(),
            runs.len() - checked.len(),
            runs.len()
        ));
    }
    for cell in runs.iter().filter(|c| c.under_load_verified == Some(false)) {
        report.notes.push(format!(
            "{}: checkpoint under load FAILED: {}",
            contender.name(),
            cell.under_load_detail
        ));
    }
}

/// Throughput during and outside checkpoints, and the checkpoints' medians and costs.
fn insert_checkpoint_figures(r: &mut Map<String, Value>, runs: &[Cell], cpu_mhz: f64) {
    let during: Vec<f64> = runs.iter().filter_map(|c| c.during_ops_per_s).collect();
    let outside: Vec<f64> = runs.iter().map(|c| c.outside_ops_per_s).collect();
    let windows: Vec<&CheckpointWindow> = runs.iter().flat_map(|c| c.checkpoints.iter()).collect();
    let durations: Vec<f64> = windows.iter().map(|w| w.duration_ms).collect();
    let bytes: Vec<f64> = windows.iter().map(|w| w.bytes as f64).collect();
    r.insert(
        "throughput_during_checkpoint_ops_per_s".into(),
        null_if_nan(median(&during)),
    );
    r.insert(
        "throughput_outside_checkpoint_ops_per_s".into(),
        null_if_nan(median(&outside)),
    );
    r.insert("checkpoints".into(), Value::from(windows.len()));
    r.insert(
        "checkpoint_duration_ms".into(),
        null_if_nan(median(&durations)),
    );
    r.insert("checkpoint_bytes".into(), null_if_nan(median(&bytes)));
    let costs: Vec<_> = windows.iter().map(|w| (w.breakdown, w.bytes)).collect();
    if !costs.is_empty() {
        crate::cost::insert_into(r, &costs, cpu_mhz);
    }
}

/// RSS growth during checkpoints, peak RSS, peak log memory and its budget.
fn insert_memory_figures(r: &mut Map<String, Value>, runs: &[Cell]) {
    let growth: Vec<f64> = runs
        .iter()
        .flat_map(|c| c.checkpoints.iter())
        .map(|w| w.rss_peak_bytes.saturating_sub(w.rss_before_bytes) as f64)
        .collect();
    r.insert(
        "checkpoint_rss_growth_bytes".into(),
        null_if_nan(median(&growth)),
    );
    r.insert(
        "peak_rss_bytes".into(),
        Value::from(runs.iter().map(|c| c.peak_rss_bytes).max().unwrap_or(0)),
    );
    let peak_log = runs.iter().filter_map(|c| c.peak_log_memory_bytes).max();
    r.insert(
        "peak_log_memory_bytes".into(),
        peak_log.map_or(Value::Null, Value::from),
    );
    let budget = runs.iter().find_map(|c| c.log_memory_budget_bytes);
    r.insert(
        "log_memory_budget_bytes".into(),
        budget.map_or(Value::Null, Value::from),
    );
}

/// The median of a per-cell metric (`None` where a cell has no such figure) over the rounds of
/// one contender (by name) at the headline point.
type MedianOf<'a> = dyn Fn(&str, &dyn Fn(&Cell) -> Option<f64>) -> f64 + 'a;

/// The summary ratios at the headline point.
pub(super) fn write_summary(
    report: &mut Report,
    plan: &Plan,
    cells: &Cells,
    headline: usize,
) -> Result<()> {
    let median_of = |name: &str, metric: &dyn Fn(&Cell) -> Option<f64>| -> f64 {
        let Some(index) = plan.contenders.iter().position(|c| c.name() == name) else {
            return f64::NAN;
        };
        let values: Vec<f64> = cells
            .get(&(headline, index))
            .map(|runs| runs.iter().filter_map(metric).collect())
            .unwrap_or_default();
        median(&values)
    };
    write_throughput_ratios(report, &median_of);
    let dataset_bytes = (plan.keys * 16) as f64;
    let growth = |c: &Cell| {
        let g: Vec<f64> = c
            .checkpoints
            .iter()
            .map(|w| w.rss_peak_bytes.saturating_sub(w.rss_before_bytes) as f64)
            .collect();
        (!g.is_empty()).then(|| median(&g))
    };
    report.summary(
        "persian_memory_overhead",
        median_of("persian", &growth) / dataset_bytes,
    );
    report.summary(
        "cpr_copy_memory_overhead",
        median_of("cpr-copy", &growth) / dataset_bytes,
    );
    summarise_costs(plan, report, &median_of)
}

/// Throughput ratios between contenders, and during over outside checkpoints.
fn write_throughput_ratios(report: &mut Report, median_of: &MedianOf<'_>) {
    let total = |c: &Cell| Some(c.throughput_ops_per_s);
    let during = |c: &Cell| c.during_ops_per_s;
    let outside = |c: &Cell| Some(c.outside_ops_per_s);
    type Metric<'a> = &'a dyn Fn(&Cell) -> Option<f64>;
    // (summary field, numerator variant and metric, denominator variant and metric)
    let ratios: [(&str, &str, Metric, &str, Metric); 10] = [
        (
            "persian_over_cpr_copy",
            "persian",
            &total,
            "cpr-copy",
            &total,
        ),
        ("persian_over_none", "persian", &total, "none", &total),
        (
            "persian_during_over_outside",
            "persian",
            &during,
            "persian",
            &outside,
        ),
        (
            "blocking_during_over_outside",
            "blocking",
            &during,
            "blocking",
            &outside,
        ),
        (
            "cpr_copy_during_over_outside",
            "cpr-copy",
            &during,
            "cpr-copy",
            &outside,
        ),
        // Like for like: the engine one operation at a time, as the maps run.
        (
            "engine_over_dashmap",
            "none-no-hints",
            &total,
            "dashmap",
            &total,
        ),
        (
            "engine_over_papaya",
            "none-no-hints",
            &total,
            "papaya",
            &total,
        ),
        // The engine with its batch hints (prefetches 16 operations ahead), which no map has.
        (
            "engine_batched_over_dashmap",
            "none",
            &total,
            "dashmap",
            &total,
        ),
        (
            "engine_batched_over_papaya",
            "none",
            &total,
            "papaya",
            &total,
        ),
        (
            "hints_over_no_hints",
            "none",
            &total,
            "none-no-hints",
            &total,
        ),
    ];
    for (field, top, top_metric, bottom, bottom_metric) in ratios {
        report.summary(
            field,
            ratio(median_of(top, top_metric), median_of(bottom, bottom_metric)),
        );
    }
}

/// Persian's cost figures at the headline point (the median over rounds of each round's median
/// over its checkpoints), against the raw write rate of the data directory (pacing is off in
/// `cpr`).
fn summarise_costs(plan: &Plan, report: &mut Report, median_of: &MedianOf<'_>) -> Result<()> {
    crate::cost::summarise(report, &plan.data_dir, &|figure| {
        median_of("persian", &|c| {
            let values: Vec<f64> = c
                .checkpoints
                .iter()
                .map(|w| figure(&(w.breakdown, w.bytes)))
                .collect();
            (!values.is_empty()).then(|| median(&values))
        })
    })
}

/// Figure 2 of the paper (throughput against threads) and the headline point's timeline.
pub(super) fn write_plots(
    common: &Common,
    plan: &Plan,
    points: &[Point],
    cells: &Cells,
    headline: usize,
) -> Result<()> {
    write_line_chart(
        &throughput_chart(plan, points, cells, headline),
        &common.out,
        "cpr",
    )?;
    write_line_chart(
        &timeline_chart(plan, cells, headline),
        &common.out,
        "cpr-timeline",
    )
}

/// Throughput against threads at the headline mix and distribution, one line per contender.
fn throughput_chart(plan: &Plan, points: &[Point], cells: &Cells, headline: usize) -> LineChart {
    let (headline_mix, headline_distribution, _) = points[headline];
    let mut series = Vec::new();
    for (contender_index, contender) in plan.contenders.iter().enumerate() {
        let mut line = Vec::new();
        for (point_index, &(mix, distribution, threads)) in points.iter().enumerate() {
            if mix != headline_mix || distribution != headline_distribution {
                continue;
            }
            if let Some(runs) = cells.get(&(point_index, contender_index)) {
                let values: Vec<f64> = runs.iter().map(|c| c.throughput_ops_per_s).collect();
                line.push((threads as f64, median(&values) / 1e6));
            }
        }
        series.push(Series {
            label: contender.name(),
            points: line,
        });
    }
    LineChart {
        title: format!(
            "Throughput vs threads ({}, {:?} keys)",
            headline_mix.name(),
            headline_distribution
        ),
        x_label: "worker threads".into(),
        y_label: "throughput (M ops/s)".into(),
        series,
        markers: Vec::new(),
        log_x: false,
    }
}

/// Throughput over time, first round at the headline point, with checkpoint markers.
fn timeline_chart(plan: &Plan, cells: &Cells, headline: usize) -> LineChart {
    let mut series = Vec::new();
    let mut markers = Vec::new();
    for (contender_index, contender) in plan.contenders.iter().enumerate() {
        let Some(first) = cells
            .get(&(headline, contender_index))
            .and_then(|runs| runs.first())
        else {
            continue;
        };
        let index = series.len();
        series.push(Series {
            label: contender.name(),
            points: first
                .timeline
                .iter()
                .map(|&(t, ops)| (t, ops / 1e6))
                .collect(),
        });
        for w in &first.checkpoints {
            for (x, end) in [(w.start_s, false), (w.end_s, true)] {
                markers.push(Marker {
                    x,
                    series: Some(index),
                    end,
                });
            }
        }
    }
    LineChart {
        title: "Throughput over time (checkpoint start: solid, end: light)".into(),
        x_label: "time (s)".into(),
        y_label: "throughput (M ops/s per 100 ms)".into(),
        series,
        markers,
        log_x: false,
    }
}
