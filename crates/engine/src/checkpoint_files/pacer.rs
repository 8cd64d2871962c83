//! Paces checkpoint writes to a byte rate, so that a checkpoint's segment writers never take all
//! of the disk (and, through the page cache and writeback, the CPU) from request threads.
//!
//! One pacer is shared by every segment writer of one checkpoint: the rate is for the checkpoint
//! as a whole, not per writer. Invariant: after `pace(n)` returns, the bytes paced so far were
//! not written faster than `bytes_per_s` measured from the pacer's creation (a burst of one write
//! buffer may run ahead; the next call then sleeps it off). Only writer threads sleep here, never
//! a session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The slowest rate a store accepts: below it a 1 GiB checkpoint would take over four hours.
pub const MIN_WRITE_BYTES_PER_S: u64 = 64 << 10;

/// A shared byte-rate limit over the writes of one checkpoint.
#[derive(Debug)]
pub struct WritePacer {
    bytes_per_s: u64,
    start: Instant,
    paced_bytes: AtomicU64,
}

impl WritePacer {
    /// A pacer that lets `bytes_per_s` through, counted from now.
    pub fn new(bytes_per_s: u64) -> WritePacer {
        assert!(bytes_per_s >= 1, "a write rate must be positive");
        WritePacer {
            bytes_per_s,
            start: Instant::now(),
            paced_bytes: AtomicU64::new(0),
        }
    }

    /// The configured rate.
    pub fn bytes_per_s(&self) -> u64 {
        self.bytes_per_s
    }

    /// Accounts for `bytes` just written and sleeps until the total is within the rate.
    pub fn pace(&self, bytes: u64) {
        let total_bytes = self.paced_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let due = Duration::from_secs_f64(total_bytes as f64 / self.bytes_per_s as f64);
        let elapsed = self.start.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_held_to_the_rate_from_several_threads() {
        // 4 threads pace 256 KiB each at 4 MiB/s: the whole must take at least 1/4 s. Only a lower
        // bound, which sleeping guarantees; nothing here depends on how fast the machine is.
        let pacer = WritePacer::new(4 << 20);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..16 {
                        pacer.pace(16 << 10);
                    }
                });
            }
        });
        assert!(pacer.start.elapsed() >= Duration::from_millis(250));
        assert_eq!(pacer.paced_bytes.load(Ordering::Relaxed), 1 << 20);
    }
}
