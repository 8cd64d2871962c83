//! Summaries over rounds (median with min and max) and the A-B-A-B round schedule.

use serde_json::{Map, Value};

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
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
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
    fn ratio_of_zero_denominator_is_nan() {
        assert!(ratio(1.0, 0.0).is_nan());
        assert_eq!(ratio(3.0, 2.0), 1.5);
    }
}
