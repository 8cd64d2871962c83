//! The access word every engine record carries (32 bits, not logged, not checkpointed), read as
//! Redis reads its objects' 24-bit `lru` field:
//!
//! - LRU policies (and `noeviction`, where OBJECT IDLETIME still works): the low 24 bits are a
//!   clock in seconds ([`LRU_CLOCK_RESOLUTION_MS`]), wrapping at [`LRU_CLOCK_MAX`]; the idle time
//!   is the clock's distance from it, wrap included.
//! - LFU policies: bits 8..24 are the minute of the last decrement (16 bits, wrapping), bits 0..8
//!   a logarithmic counter that starts at [`LFU_INIT_VAL`], grows with probability
//!   `1 / ((counter - LFU_INIT_VAL) * lfu-log-factor + 1)` per access and loses one per
//!   `lfu-decay-time` minutes without access.
//!
//! The upper 8 bits are always zero. Switching between LRU and LFU policies reinterprets the
//! same bits, as Redis does: values mean nothing until the key is accessed again.
//!
//! Every function here is pure (the time and the random draw are arguments) so the arithmetic is
//! tested on its own; [`AccessClock`] holds the settings the touches read.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The LRU clock's largest value (24 bits), as Redis's `LRU_CLOCK_MAX`.
pub const LRU_CLOCK_MAX: u32 = (1 << 24) - 1;
/// Milliseconds per LRU clock tick, as Redis's `LRU_CLOCK_RESOLUTION`.
pub const LRU_CLOCK_RESOLUTION_MS: u64 = 1000;
/// A new key's LFU counter, as Redis's `LFU_INIT_VAL`.
pub const LFU_INIT_VAL: u32 = 5;

/// The LRU clock at `now_ms` (Unix milliseconds).
pub fn lru_clock(now_ms: u64) -> u32 {
    ((now_ms / LRU_CLOCK_RESOLUTION_MS) & u64::from(LRU_CLOCK_MAX)) as u32
}

/// Milliseconds since the access stamped `word` (an LRU word), at LRU clock `clock`, as Redis's
/// `estimateObjectIdleTime` (a clock that wrapped since counts from the wrap).
pub fn lru_idle_ms(word: u32, clock: u32) -> u64 {
    let word = word & LRU_CLOCK_MAX;
    let ticks = if clock >= word {
        clock - word
    } else {
        clock + (LRU_CLOCK_MAX - word)
    };
    u64::from(ticks) * LRU_CLOCK_RESOLUTION_MS
}

/// The LFU clock: Unix minutes modulo 2^16, as Redis's `LFUGetTimeInMinutes`.
pub fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xFFFF) as u32
}

/// The word of a key created at `now_ms` under an LFU policy: now, counter [`LFU_INIT_VAL`].
pub fn lfu_new(now_ms: u64) -> u32 {
    (lfu_minutes(now_ms) << 8) | LFU_INIT_VAL
}

/// The counter of LFU word `word` after the decay periods elapsed by `now_ms` (one per
/// `decay_minutes` minutes; none when it is 0), as Redis's `LFUDecrAndReturn`. OBJECT FREQ
/// answers this and eviction ranks by it; it does not change the word.
pub fn lfu_decayed(word: u32, now_ms: u64, decay_minutes: u32) -> u32 {
    let last = (word >> 8) & 0xFFFF;
    let counter = word & 0xFF;
    let now = lfu_minutes(now_ms);
    let elapsed = if now >= last {
        now - last
    } else {
        0xFFFF - last + now
    };
    let periods = elapsed.checked_div(decay_minutes).unwrap_or(0);
    counter.saturating_sub(periods)
}

/// One logarithmic increment of `counter` given a uniform draw `r` in [0, 1), as Redis's
/// `LFULogIncr`: saturates at 255.
pub fn lfu_log_incr(counter: u32, log_factor: u32, r: f64) -> u32 {
    if counter >= 255 {
        return 255;
    }
    let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
    let p = 1.0 / (base * f64::from(log_factor) + 1.0);
    if r < p {
        counter + 1
    } else {
        counter
    }
}

/// The LFU word after one access at `now_ms`: decay, then increment, stamped now (Redis's
/// `updateLFU`).
pub fn lfu_touch(word: u32, now_ms: u64, decay_minutes: u32, log_factor: u32, r: f64) -> u32 {
    let counter = lfu_log_incr(lfu_decayed(word, now_ms, decay_minutes), log_factor, r);
    (lfu_minutes(now_ms) << 8) | counter
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

/// A per-thread seed: the time and the address of a thread-local differ between threads.
fn seed() -> u64 {
    let local = 0u8;
    let address = &local as *const u8 as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ address.rotate_left(32)) | 1
}

/// A fast thread-local pseudo-random number (xorshift64*): LFU increments and the eviction
/// sample's start need speed, not quality.
pub fn fast_random() -> u64 {
    RNG.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A uniform draw in [0, 1).
fn unit_random() -> f64 {
    (fast_random() >> 11) as f64 / (1u64 << 53) as f64
}

/// The settings an access reads (kept as atomics so the read paths take no lock): whether the
/// policy is an LFU one, `lfu-log-factor`, `lfu-decay-time`. CONFIG SET stores them.
pub struct AccessClock {
    lfu: AtomicBool,
    log_factor: AtomicU32,
    decay_minutes: AtomicU32,
}

impl Default for AccessClock {
    fn default() -> Self {
        AccessClock {
            lfu: AtomicBool::new(false),
            log_factor: AtomicU32::new(10),
            decay_minutes: AtomicU32::new(1),
        }
    }
}

impl AccessClock {
    /// Takes the settings of `config`.
    pub fn configure(&self, lfu: bool, log_factor: u32, decay_minutes: u32) {
        self.lfu.store(lfu, Ordering::Relaxed);
        self.log_factor.store(log_factor, Ordering::Relaxed);
        self.decay_minutes.store(decay_minutes, Ordering::Relaxed);
    }

    /// Whether the words are LFU words.
    pub fn is_lfu(&self) -> bool {
        self.lfu.load(Ordering::Relaxed)
    }

    /// The word a key created at `now_ms` starts with (the store's access stamp).
    pub fn stamp(&self, now_ms: u64) -> u32 {
        if self.is_lfu() {
            lfu_new(now_ms)
        } else {
            lru_clock(now_ms)
        }
    }

    /// The word after an access at `now_ms`.
    pub fn touched(&self, word: u32, now_ms: u64) -> u32 {
        if self.is_lfu() {
            lfu_touch(
                word,
                now_ms,
                self.decay_minutes.load(Ordering::Relaxed),
                self.log_factor.load(Ordering::Relaxed),
                unit_random(),
            )
        } else {
            lru_clock(now_ms)
        }
    }

    /// The LFU counter of `word` decayed to `now_ms` (OBJECT FREQ; the LFU eviction rank).
    pub fn frequency(&self, word: u32, now_ms: u64) -> u32 {
        lfu_decayed(word, now_ms, self.decay_minutes.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_idle_time_wraps() {
        let now = 1_700_000_000_000u64;
        let clock = lru_clock(now);
        assert_eq!(lru_idle_ms(clock, clock), 0);
        assert_eq!(lru_idle_ms(lru_clock(now - 5_000), clock), 5_000);
        // A word stamped just before the clock wrapped.
        assert_eq!(lru_idle_ms(LRU_CLOCK_MAX - 2, 3), 5_000);
        // The upper byte is never part of the clock.
        assert_eq!(lru_clock(u64::MAX) & !LRU_CLOCK_MAX, 0);
    }

    #[test]
    fn lfu_decay_by_periods() {
        let now = 1_700_000_000_000u64;
        let word = (lfu_minutes(now) << 8) | 20;
        assert_eq!(lfu_decayed(word, now, 1), 20);
        assert_eq!(lfu_decayed(word, now + 3 * 60_000, 1), 17);
        assert_eq!(lfu_decayed(word, now + 3 * 60_000, 2), 19);
        assert_eq!(lfu_decayed(word, now + 3 * 60_000, 0), 20, "0: no decay");
        assert_eq!(lfu_decayed(word, now + 300 * 60_000, 1), 0, "never below 0");
        // The minute clock wraps at 2^16 as Redis's.
        let before_wrap = (0xFFFEu32 << 8) | 10;
        let after = (0x1_0000u64 + 2) * 60_000;
        assert_eq!(lfu_decayed(before_wrap, after, 1), 7);
        assert_eq!(lfu_new(now) & 0xFF, LFU_INIT_VAL);
    }

    #[test]
    fn lfu_increment_probability() {
        // At or below the initial value every access counts.
        assert_eq!(lfu_log_incr(0, 10, 0.999), 1);
        assert_eq!(lfu_log_incr(5, 10, 0.999), 6);
        // Above it, with probability 1 / ((c - 5) * factor + 1).
        assert_eq!(lfu_log_incr(6, 10, 0.05), 7);
        assert_eq!(lfu_log_incr(6, 10, 0.1), 6);
        assert_eq!(lfu_log_incr(255, 0, 0.0), 255, "saturates");
        assert_eq!(lfu_log_incr(100, 0, 0.999), 101, "factor 0: always");
        let now = 1_700_000_000_000u64;
        let touched = lfu_touch(lfu_new(now - 120_000), now, 1, 10, 0.0);
        assert_eq!(
            touched,
            (lfu_minutes(now) << 8) | 4,
            "decayed by 2, then +1"
        );
    }

    #[test]
    fn random_draws_stay_in_range() {
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..1000 {
            let r = unit_random();
            assert!((0.0..1.0).contains(&r));
            distinct.insert(fast_random());
        }
        assert!(distinct.len() > 990);
    }
}
