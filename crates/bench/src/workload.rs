//! Workloads shared by the experiments: key generators, uniform and zipfian over `0..keys`
//! ([`KeyGenerator`]); FASTER's pre-generated operations and shared chunk cursor
//! ([`operations`]); the maps that `ycsb` and `cpr` both measure ([`maps`]); and the rule both
//! check an engine's image with ([`stamp_rule`]).
//!
//! Zipfian keys are scrambled (multiplied by an odd constant modulo the key count's power of two
//! and folded back) so the hot keys are spread over the hash index rather than clustered, as
//! YCSB's "scrambled zipfian" does.

pub mod maps;
pub mod operations;
pub mod stamp_rule;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDistribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent 0.99 (YCSB's default), scrambled.
    Zipfian,
}

/// A per-thread key generator.
pub struct KeyGenerator {
    rng: SmallRng,
    keys: u64,
    zipf: Option<Zipf<f64>>,
}

impl KeyGenerator {
    /// A generator over `0..keys` (keys ≥ 1), seeded so runs are repeatable per thread.
    pub fn new(distribution: KeyDistribution, keys: u64, seed: u64) -> KeyGenerator {
        assert!(keys >= 1, "a key space needs at least one key");
        let zipf = match distribution {
            KeyDistribution::Uniform => None,
            KeyDistribution::Zipfian => {
                Some(Zipf::new(keys as f64, 0.99).expect("valid zipf parameters"))
            }
        };
        KeyGenerator {
            rng: SmallRng::seed_from_u64(seed),
            keys,
            zipf,
        }
    }

    /// The next key.
    #[inline]
    pub fn next_key(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.random_range(0..self.keys),
            Some(zipf) => {
                let rank = zipf.sample(&mut self.rng) as u64 - 1; // Zipf samples 1..=n
                rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.keys
            }
        }
    }

    /// A uniform number in `0..100`, for choosing the operation of a mix.
    #[inline]
    pub fn percent(&mut self) -> u32 {
        self.rng.random_range(0..100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_in_range_and_zipf_is_skewed() {
        for distribution in [KeyDistribution::Uniform, KeyDistribution::Zipfian] {
            let mut generator = KeyGenerator::new(distribution, 1000, 7);
            let mut counts = vec![0u32; 1000];
            for _ in 0..100_000 {
                counts[generator.next_key() as usize] += 1;
            }
            let hottest = *counts.iter().max().unwrap();
            match distribution {
                KeyDistribution::Uniform => assert!(hottest < 300, "uniform hottest {hottest}"),
                KeyDistribution::Zipfian => assert!(hottest > 5000, "zipf hottest {hottest}"),
            }
        }
    }
}
