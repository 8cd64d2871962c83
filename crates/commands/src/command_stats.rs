//! Per-command statistics (`INFO commandstats`, `INFO latencystats`) and the slow log
//! (`SLOWLOG`), as Redis keeps them.
//!
//! Invariants:
//! - Memory is fixed at start: one counter set and one latency histogram per command of the
//!   command table, and a slow log of at most `slowlog-max-len` entries, each holding at most
//!   [`SLOWLOG_MAX_ARGS`] arguments of at most [`SLOWLOG_MAX_ARG_BYTES`] bytes (Redis's limits).
//! - Recording a command is lock-free (relaxed atomic adds); only a command slower than
//!   `slowlog-log-slower-than` takes the slow log's lock.
//! - A latency histogram bucket holds durations within 1/16 of each other (16 linear
//!   sub-buckets per power of two), so a reported percentile is within about 6 % of the true one
//!   (Redis's hdr histograms keep 2 significant digits).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Arguments of a slow log entry kept at most (the last one says how many more there were).
pub const SLOWLOG_MAX_ARGS: usize = 32;
/// Bytes of one slow log argument kept at most (the rest is summarised).
pub const SLOWLOG_MAX_ARG_BYTES: usize = 128;

const SUB_BUCKETS: usize = 16;
/// Powers of two covered: durations up to 2^40 µs (12 days); longer ones land in the last.
const EXPONENTS: usize = 41;
const BUCKETS: usize = SUB_BUCKETS * EXPONENTS;

/// A lock-free latency histogram in microseconds.
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS as u64 {
        return us as usize;
    }
    let exponent = 63 - us.leading_zeros() as usize; // >= 4
    let sub = ((us >> (exponent - 4)) & (SUB_BUCKETS as u64 - 1)) as usize;
    ((exponent - 3) * SUB_BUCKETS + sub).min(BUCKETS - 1)
}

/// The smallest duration a bucket holds.
fn bucket_floor(bucket: usize) -> u64 {
    if bucket < SUB_BUCKETS {
        return bucket as u64;
    }
    let exponent = bucket / SUB_BUCKETS + 3;
    let sub = (bucket % SUB_BUCKETS) as u64;
    (SUB_BUCKETS as u64 + sub) << (exponent - 4)
}

impl LatencyHistogram {
    /// Counts one duration.
    pub fn record(&self, us: u64) {
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The duration at percentile `percent` (0..=100) of what was recorded, as the floor of its
    /// bucket; `None` when nothing was.
    pub fn percentile(&self, percent: f64) -> Option<u64> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((percent / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_floor(bucket));
            }
        }
        Some(bucket_floor(BUCKETS - 1))
    }

    fn reset(&self) {
        for bucket in self.buckets.iter() {
            bucket.store(0, Ordering::Relaxed);
        }
    }
}

/// One command's counters.
#[derive(Default)]
pub struct CommandCounters {
    /// Executions (not counting rejected ones).
    pub calls: AtomicU64,
    /// Microseconds spent executing.
    pub usec: AtomicU64,
    /// Executions that answered an error.
    pub failed_calls: AtomicU64,
    /// Calls refused before executing (arity, authentication, OOM, subscribed context).
    pub rejected_calls: AtomicU64,
    /// Execution latencies.
    pub latency: LatencyHistogram,
}

/// One slow log entry.
#[derive(Clone, Debug)]
pub struct SlowEntry {
    /// Increasing id.
    pub id: u64,
    /// Unix time in seconds when the command ran.
    pub unix_seconds: u64,
    /// Its execution time.
    pub duration_us: u64,
    /// Its arguments, shortened as Redis does.
    pub args: Vec<Vec<u8>>,
    /// The client's address.
    pub client_addr: String,
    /// The client's name.
    pub client_name: String,
}

/// The per-command statistics and the slow log.
pub struct CommandStats {
    commands: Box<[CommandCounters]>,
    slow: Mutex<VecDeque<SlowEntry>>,
    next_slow_id: AtomicU64,
    /// `slowlog-log-slower-than` in µs (negative: off; 0: every command).
    pub slower_than_us: AtomicI64,
    /// `slowlog-max-len`.
    pub max_len: AtomicUsize,
}

impl CommandStats {
    /// Statistics for a table of `commands` commands.
    pub fn new(commands: usize, slower_than_us: i64, max_len: usize) -> CommandStats {
        CommandStats {
            commands: (0..commands).map(|_| CommandCounters::default()).collect(),
            slow: Mutex::new(VecDeque::new()),
            next_slow_id: AtomicU64::new(0),
            slower_than_us: AtomicI64::new(slower_than_us),
            max_len: AtomicUsize::new(max_len),
        }
    }

    /// The counters of command `index` (its place in the command table).
    pub fn command(&self, index: usize) -> &CommandCounters {
        &self.commands[index]
    }

    /// Records an execution of command `index` that took `duration_us`; `failed` when it
    /// answered an error. A slow one goes to the slow log, with its arguments made by `args`
    /// (called only then).
    pub fn record(
        &self,
        index: usize,
        duration_us: u64,
        failed: bool,
        entry: impl FnOnce() -> (Vec<Vec<u8>>, String, String),
    ) {
        let counters = &self.commands[index];
        counters.calls.fetch_add(1, Ordering::Relaxed);
        counters.usec.fetch_add(duration_us, Ordering::Relaxed);
        counters.latency.record(duration_us);
        if failed {
            counters.failed_calls.fetch_add(1, Ordering::Relaxed);
        }
        let threshold = self.slower_than_us.load(Ordering::Relaxed);
        if threshold >= 0 && duration_us >= threshold as u64 {
            let (args, client_addr, client_name) = entry();
            self.log_slow(duration_us, args, client_addr, client_name);
        }
    }

    fn log_slow(&self, duration_us: u64, args: Vec<Vec<u8>>, addr: String, name: String) {
        let max_len = self.max_len.load(Ordering::Relaxed);
        let entry = SlowEntry {
            id: self.next_slow_id.fetch_add(1, Ordering::Relaxed),
            unix_seconds: crate::keyspace::now_ms() / 1000,
            duration_us,
            args: shorten(args),
            client_addr: addr,
            client_name: name,
        };
        let mut slow = self.slow.lock();
        slow.push_front(entry);
        slow.truncate(max_len);
    }

    /// The newest `count` slow entries (all with `None`), newest first.
    pub fn slow_entries(&self, count: Option<usize>) -> Vec<SlowEntry> {
        let slow = self.slow.lock();
        slow.iter()
            .take(count.unwrap_or(usize::MAX))
            .cloned()
            .collect()
    }

    /// Entries in the slow log.
    pub fn slow_len(&self) -> usize {
        self.slow.lock().len()
    }

    /// Empties the slow log.
    pub fn slow_reset(&self) {
        self.slow.lock().clear();
    }

    /// Shrinks the slow log to a new `slowlog-max-len`.
    pub fn set_max_len(&self, max_len: usize) {
        self.max_len.store(max_len, Ordering::Relaxed);
        self.slow.lock().truncate(max_len);
    }

    /// CONFIG RESETSTAT: every counter and histogram back to zero (the slow log stays, as in
    /// Redis).
    pub fn reset(&self) {
        for counters in self.commands.iter() {
            for counter in [
                &counters.calls,
                &counters.usec,
                &counters.failed_calls,
                &counters.rejected_calls,
            ] {
                counter.store(0, Ordering::Relaxed);
            }
            counters.latency.reset();
        }
    }
}

/// Redis's slow log shortening: at most 32 arguments (the last says how many more there were),
/// each at most 128 bytes (the rest replaced by a note of how many bytes more).
fn shorten(mut args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if args.len() > SLOWLOG_MAX_ARGS {
        let more = args.len() - (SLOWLOG_MAX_ARGS - 1);
        args.truncate(SLOWLOG_MAX_ARGS - 1);
        args.push(format!("... ({more} more arguments)").into_bytes());
    }
    for arg in &mut args {
        if arg.len() > SLOWLOG_MAX_ARG_BYTES {
            let more = arg.len() - SLOWLOG_MAX_ARG_BYTES;
            arg.truncate(SLOWLOG_MAX_ARG_BYTES);
            arg.extend_from_slice(format!("... ({more} more bytes)").as_bytes());
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_within_a_sixteenth() {
        let mut previous = 0;
        for us in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            1_000,
            65_535,
            1 << 30,
            u64::MAX,
        ] {
            let bucket = bucket_of(us);
            assert!(bucket >= previous, "{us}");
            previous = bucket;
            let floor = bucket_floor(bucket);
            assert!(floor <= us, "{us}: floor {floor}");
            if us < 1 << 40 {
                assert!(us - floor <= us / 16, "{us}: floor {floor}");
            }
        }
    }

    #[test]
    fn percentiles_and_the_slow_log_follow_what_was_recorded() {
        let stats = CommandStats::new(2, 1_000, 3);
        for us in 1..=100 {
            stats.record(0, us, us % 10 == 0, || unreachable!("not slow"));
        }
        let counters = stats.command(0);
        assert_eq!(counters.calls.load(Ordering::Relaxed), 100);
        assert_eq!(counters.failed_calls.load(Ordering::Relaxed), 10);
        assert_eq!(counters.usec.load(Ordering::Relaxed), 5_050);
        let p50 = counters.latency.percentile(50.0).unwrap();
        assert!((47..=50).contains(&p50), "{p50}");
        assert!(stats.command(1).latency.percentile(50.0).is_none());
        for n in 0..5u64 {
            stats.record(1, 2_000 + n, false, || {
                (
                    vec![b"GET".to_vec(), vec![b'k'; 200]],
                    "addr".into(),
                    String::new(),
                )
            });
        }
        let entries = stats.slow_entries(None);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].duration_us, 2_004);
        assert_eq!(entries[0].args[1].len(), 128 + "... (72 more bytes)".len());
        stats.reset();
        assert_eq!(stats.command(0).calls.load(Ordering::Relaxed), 0);
        assert!(stats.command(0).latency.percentile(99.0).is_none());
        assert_eq!(stats.slow_len(), 3);
        let many: Vec<Vec<u8>> = (0..40).map(|i| vec![b'a' + (i % 26) as u8]).collect();
        let short = shorten(many);
        assert_eq!(short.len(), 32);
        assert_eq!(short[31], b"... (9 more arguments)".to_vec());
    }
}
