//! The crash tests' deterministic application inputs.

use rand::{RngExt, SeedableRng};

/// A skewed random-write workload: each tick's actions are the same in every process.
pub struct Inputs {
    /// Cells in the state.
    pub words: usize,
    /// Actions per tick.
    pub actions_per_tick: u64,
    /// Chance that an action hits the hot prefix of the state.
    pub hot_probability: f64,
    /// Cells in the hot prefix.
    pub hot_words: u64,
    /// Mixed with the tick to seed each tick's generator.
    pub seed: u64,
}

impl Inputs {
    /// The actions of `tick`: `[cell index u64 LE][value u64 LE]` each.
    pub fn actions(&self, tick: u64) -> Vec<[u8; 16]> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(tick.wrapping_mul(self.seed));
        (0..self.actions_per_tick)
            .map(|_| {
                let index: u64 = if rng.random_bool(self.hot_probability) {
                    rng.random_range(0..self.hot_words)
                } else {
                    rng.random_range(0..self.words as u64)
                };
                let value: u64 = rng.random();
                let mut action = [0u8; 16];
                action[..8].copy_from_slice(&index.to_le_bytes());
                action[8..].copy_from_slice(&value.to_le_bytes());
                action
            })
            .collect()
    }
}

/// An action's cell index and value.
pub fn decode(action: &[u8]) -> (usize, u64) {
    let index = u64::from_le_bytes(action[..8].try_into().unwrap()) as usize;
    let value = u64::from_le_bytes(action[8..16].try_into().unwrap());
    (index, value)
}
