//! Seeded randomness for tests: one small generator, a seed that can be replayed.
//!
//! Tests that draw random kill points, keys or fault choices print their seed, and take it from
//! an environment variable when set, so a failing run is reproduced by running it again with that
//! variable. `rand` is for experiments; tests need only this.

/// A splitmix64 generator: tiny, fast, and every seed (including 0) gives a full-period stream.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// A generator seeded from environment variable `name` if it holds a number, else from the
    /// clock; prints the seed and how to replay it to stderr.
    pub fn from_env(name: &str) -> Rng {
        let seed = std::env::var(name)
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |elapsed| elapsed.as_nanos() as u64)
            });
        eprintln!("seed {seed} ({name}={seed} replays this run)");
        Rng::new(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0) has no value");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A number in `range` (inclusive start, exclusive end; not empty).
    pub fn in_range(&mut self, range: std::ops::Range<u64>) -> u64 {
        assert!(range.start < range.end, "empty range {range:?}");
        range.start + self.below(range.end - range.start)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }
}

/// A count from environment variable `name`, or `default` when it is unset or not a number.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_repeatable_and_bounded() {
        let first: Vec<u64> = {
            let mut rng = Rng::new(7);
            (0..100).map(|_| rng.below(10)).collect()
        };
        let mut rng = Rng::new(7);
        assert_eq!(first, (0..100).map(|_| rng.below(10)).collect::<Vec<_>>());
        assert!(first.iter().all(|&x| x < 10));
        assert!((0..10).all(|x| first.contains(&x)));
        let mut rng = Rng::new(0);
        assert!((0..1000).all(|_| (5..9).contains(&rng.in_range(5..9))));
    }
}
