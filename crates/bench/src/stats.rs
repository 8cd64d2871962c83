//! The statistics every experiment uses: one implementation of each, so that a median or a
//! percentile means the same thing in every report.
//!
//! Which to use when:
//! - **Figures per round, per checkpoint or per tick** (a handful to a few hundred values, kept
//!   anyway for charts or rows): exact, over the values themselves. [`Spread`] (median, min and
//!   max over rounds, the shape of a result row), [`median`], [`percentile`] (nearest rank) and
//!   [`quantile_points`] (a distribution as chart points). The unit is the caller's: the values
//!   come back in the unit they went in, and the field they go to names it.
//! - **Per-operation latencies** (requests, appends, transactions, snapshot calls: thousands of
//!   samples, or an unbounded number): [`Latencies`], an HDR histogram of nanoseconds with three
//!   significant digits (a quantile is within 0.1 % of the exact one), from 1 ns to an hour,
//!   bounded in memory and mergeable across threads. It is read back in a named unit only
//!   (`quantile_us`, `quantile_ms`, ...), so a field's unit suffix and its value cannot disagree.
//!
//! Invariants: an empty input gives NaN (which a report stores as null), never 0 or a panic;
//! percentiles are fractions in `0.0..=1.0` (0.5 is the median, 1.0 the maximum).
//!
//! Also here: [`ratio`] (NaN rather than infinity on a zero denominator) and
//! [`alternating_schedule`] (the A-B, B-A round order).

use hdrhistogram::Histogram;
use serde_json::{Map, Value};
use std::time::Duration;

/// Median, minimum and maximum of one metric over rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median (mean of the middle two for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// Summarises `values`; an empty slice gives all-NaN, which the report stores as null.
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        let sorted = sorted(values);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        }
    }

    /// Adds `name`, `name_min` and `name_max` to a result row.
    pub fn insert_into(&self, row: &mut Map<String, Value>, name: &str) {
        for (key, value) in [
            (name.to_string(), self.median),
            (format!("{name}_min"), self.min),
            (format!("{name}_max"), self.max),
        ] {
            let value = if value.is_finite() {
                Value::from(value)
            } else {
                Value::Null
            };
            row.insert(key, value);
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    Spread::of(values).median
}

/// The nearest-rank percentile of a small sample: the sorted value at rank
/// `round((n - 1) * fraction)`, so 0.0 is the minimum, 1.0 the maximum and, for an odd count,
/// 0.5 the median. NaN when empty.
pub fn percentile(values: &[f64], fraction: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let sorted = sorted(values);
    let rank = ((sorted.len() - 1) as f64 * fraction.clamp(0.0, 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// A small sample's whole distribution as chart points: (percent of values at or below, value),
/// one point per value, sorted.
pub fn quantile_points(values: &[f64]) -> Vec<(f64, f64)> {
    let sorted = sorted(values);
    let last = sorted.len().saturating_sub(1).max(1) as f64;
    sorted
        .into_iter()
        .enumerate()
        .map(|(rank, value)| (rank as f64 * 100.0 / last, value))
        .collect()
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// Largest latency a [`Latencies`] tells apart (an hour); longer ones count as an hour.
const LATENCY_MAX_NS: u64 = 3_600_000_000_000;

/// A distribution of per-operation latencies: an HDR histogram of nanoseconds, 1 ns to an hour,
/// three significant digits. Record from any unit; read back only through a method that names
/// its unit.
#[derive(Debug, Clone)]
pub struct Latencies {
    histogram_ns: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies::new()
    }
}

impl Latencies {
    /// An empty distribution (about 270 KB of counters).
    pub fn new() -> Latencies {
        Latencies {
            histogram_ns: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("constant, valid histogram bounds"),
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, latency: Duration) {
        self.record_ns(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records one latency given in nanoseconds (0 counts as 1 ns, beyond an hour as an hour).
    #[inline]
    pub fn record_ns(&mut self, latency_ns: u64) {
        self.histogram_ns
            .saturating_record(latency_ns.clamp(1, LATENCY_MAX_NS));
    }

    /// Adds every latency of `other` (per-thread distributions into one).
    pub fn merge(&mut self, other: &Latencies) {
        self.histogram_ns
            .add(&other.histogram_ns)
            .expect("histograms with the same bounds always add");
    }

    /// How many latencies were recorded.
    pub fn count(&self) -> u64 {
        self.histogram_ns.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.histogram_ns.is_empty()
    }

    /// The latency at `quantile` (0.5 = median, 0.99 = p99, 1.0 = maximum) in nanoseconds;
    /// NaN when empty.
    pub fn quantile_ns(&self, quantile: f64) -> f64 {
        if self.is_empty() {
            return f64::NAN;
        }
        self.histogram_ns.value_at_quantile(quantile) as f64
    }

    /// [`Latencies::quantile_ns`] in microseconds.
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        self.quantile_ns(quantile) / 1e3
    }

    /// [`Latencies::quantile_ns`] in milliseconds.
    pub fn quantile_ms(&self, quantile: f64) -> f64 {
        self.quantile_ns(quantile) / 1e6
    }

    /// The mean latency in milliseconds; NaN when empty.
    pub fn mean_ms(&self) -> f64 {
        if self.is_empty() {
            return f64::NAN;
        }
        self.histogram_ns.mean() / 1e6
    }
}

/// Ratio that is NaN (stored as null) rather than infinite when the denominator is zero.
pub fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator == 0.0 {
        f64::NAN
    } else {
        numerator / denominator
    }
}

/// The order in which to run `contenders` over `rounds` rounds: every round runs each contender
/// once, and odd rounds reverse the order (A B, B A, A B, ...) so that warm-up and drift do not
/// always favour the same side.
pub fn alternating_schedule(contenders: usize, rounds: usize) -> Vec<(usize, usize)> {
    let mut schedule = Vec::with_capacity(contenders * rounds);
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..contenders).collect()
        } else {
            (0..contenders).rev().collect()
        };
        schedule.extend(order.into_iter().map(|contender| (round, contender)));
    }
    schedule
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_odd_and_even_counts() {
        assert_eq!(
            Spread::of(&[3.0, 1.0, 2.0]),
            Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn schedule_alternates_and_covers_every_pair() {
        let schedule = alternating_schedule(2, 3);
        assert_eq!(
            schedule,
            vec![(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]
        );
    }

    #[test]
    fn percentile_is_nearest_rank_and_quantile_points_cover_0_to_100() {
        let values = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&values, 0.0), 1.0);
        assert_eq!(percentile(&values, 0.5), 3.0);
        assert_eq!(percentile(&values, 1.0), 5.0);
        // Rank round(3 * 0.5) = 2 of [1, 2, 3, 4]: the upper middle, not the mean.
        assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 0.5), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        let points = quantile_points(&[3.0, 1.0, 2.0]);
        assert_eq!(points, vec![(0.0, 1.0), (50.0, 2.0), (100.0, 3.0)]);
    }

    #[test]
    fn latencies_read_back_in_named_units_within_a_tenth_of_a_percent() {
        let mut first = Latencies::new();
        let mut second = Latencies::new();
        for micros in 1..=1000u64 {
            let into = if micros % 2 == 0 {
                &mut first
            } else {
                &mut second
            };
            into.record(Duration::from_micros(micros));
        }
        first.merge(&second);
        assert_eq!(first.count(), 1000);
        let p50_us = first.quantile_us(0.5);
        assert!((p50_us - 500.0).abs() <= 0.5, "p50 {p50_us} us");
        let p99_ms = first.quantile_ms(0.99);
        assert!((p99_ms - 0.990).abs() <= 0.001, "p99 {p99_ms} ms");
        assert!((first.mean_ms() - 0.5005).abs() <= 0.001);
        let empty = Latencies::new();
        assert!(empty.quantile_us(0.5).is_nan() && empty.mean_ms().is_nan());
    }

    #[test]
    fn ratio_of_zero_denominator_is_nan() {
        assert!(ratio(1.0, 0.0).is_nan());
        assert_eq!(ratio(3.0, 2.0), 1.5);
    }
}
