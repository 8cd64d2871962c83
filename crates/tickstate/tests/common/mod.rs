//! The crash tests' deterministic application inputs and the update rule they share.

use prefixkv_testkit::rng::Rng;

/// A skewed random-write workload: each tick's actions are the same in every process.
pub struct Inputs {
    /// Cells in the state.
    pub words: usize,
    /// Actions per tick.
    pub actions_per_tick: u64,
    /// Chance, in percent, that an action hits the hot prefix of the state.
    pub hot_percent: u64,
    /// Cells in the hot prefix.
    pub hot_words: u64,
    /// Mixed with the tick to seed each tick's generator.
    pub seed: u64,
}

impl Inputs {
    /// The actions of `tick`: `[cell index u64 LE][value u64 LE]` each.
    pub fn actions(&self, tick: u64) -> Vec<[u8; 16]> {
        let mut rng = Rng::new(tick.wrapping_mul(self.seed));
        (0..self.actions_per_tick)
            .map(|_| {
                let index = if rng.chance(self.hot_percent, 100) {
                    rng.below(self.hot_words)
                } else {
                    rng.below(self.words as u64)
                };
                let value = rng.next_u64();
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

/// The update rule of the crash and power-cut tests: cell `index` becomes [`step`] of its old
/// value and the action's value.
#[allow(dead_code)] // Not every test binary uses this rule (`wal_crash` has its own).
pub fn apply(state: &mut [u64], _tick: u64, action: &[u8]) {
    let (index, value) = decode(action);
    state[index] = step(state[index], value);
}

/// One cell's new value (order-dependent, so a reordered or duplicated replay shows).
#[allow(dead_code)] // As `apply`.
pub fn step(old: u64, value: u64) -> u64 {
    old.wrapping_mul(31).wrapping_add(value)
}

/// The reference state of a crash test: the inputs of ticks `1..=tick` applied to a plain vector,
/// advanced as recoveries report newer ticks (it never goes back).
pub struct Reference {
    /// The reference cells.
    pub state: Vec<u64>,
    /// The tick they are at.
    pub tick: u64,
}

impl Reference {
    /// A state of `words` zero cells at tick 0.
    pub fn new(words: usize) -> Reference {
        Reference {
            state: vec![0; words],
            tick: 0,
        }
    }

    /// Applies ticks up to `tick` with `apply`; panics if `tick` is older than the reference (a
    /// recovery went back in time).
    pub fn advance_to(
        &mut self,
        tick: u64,
        actions: impl Fn(u64) -> Vec<[u8; 16]>,
        apply: impl Fn(&mut [u64], u64, &[u8]),
    ) {
        assert!(
            tick >= self.tick,
            "recovered tick {tick} is older than an earlier recovery ({})",
            self.tick
        );
        while self.tick < tick {
            self.tick += 1;
            for action in actions(self.tick) {
                apply(&mut self.state, self.tick, &action);
            }
        }
    }
}

/// The durable tick a child reported in `line` (`durable <tick>`); panics on anything else.
#[allow(dead_code)] // Used by the tests with child processes, not by every test binary.
pub fn durable_tick(line: &str) -> u64 {
    line.strip_prefix("durable ")
        .and_then(|tick| tick.parse().ok())
        .unwrap_or_else(|| panic!("unexpected line from the child: {line:?}"))
}
