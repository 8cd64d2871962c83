//! How far each Persian scanner has emitted the checkpoint image, so that a v+1 write to a key the
//! image already holds updates in place instead of copying the record (read-copy-update). Without
//! it, every key first written during a Persian checkpoint is copied to the tail, whether or not
//! the scanner has passed it: the log grows by up to the whole dataset during one checkpoint.
//!
//! The argument. Scanner `i` owns buckets `[i * per_thread, (i + 1) * per_thread)` and walks them
//! in increasing order, in chunks; it stores `cursors[i] = end` (Release) only after every chain
//! of every bucket below `end` in its range was walked and the values it emits were copied into
//! its segment writer's buffer. A writer that loads `cursors[i]` (Acquire) and finds it above its
//! key's bucket therefore writes after the scanner's read of that key's v value, which is already
//! in the image: changing the record in place can no longer change what the image holds.
//!
//! Invariants:
//! - Only the checkpoint thread ([`ScanProgress::begin`]) and the scanners
//!   ([`ScanProgress::advance`]) store; sessions only load.
//! - `begin` stores the range size and resets every cursor to its range's start before it
//!   publishes the version (Release), so a session that loads the new version (Acquire) sees the
//!   reset cursors or later values, never an older checkpoint's.
//! - A session asks only about the checkpoint of `version` = its own version minus one, and only
//!   when it acts as v+1 on a record of version <= v. It compares versions first: the
//!   published version names the scan that the cursors describe. A stale answer about an older
//!   scan cannot arise: `begin(v)` runs in WAIT_FLUSH(v+1), after every session adopted v+1, so
//!   no session still acting as v (which would ask about v-1) exists by then.
//! - Cursors only grow between two `begin`s.
//!
//! Model check of the publication (a scanner's read before a writer's in-place write):
//! `RUSTFLAGS="--cfg loom" cargo test -p prefixkv-engine --release --lib loom`.

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Published when no scan has begun: no session version is `NONE + 1`.
const NONE: u64 = u64::MAX;

/// The emitted prefix of each scanner's bucket range for the newest Persian scan.
#[derive(Debug)]
pub(crate) struct ScanProgress {
    /// Checkpoint version whose scan the cursors describe, or [`NONE`].
    version: AtomicU64,
    /// Buckets per scanner range (the last range may be shorter).
    per_thread: AtomicUsize,
    /// First bucket not yet emitted, per scanner.
    cursors: Box<[AtomicUsize]>,
}

impl ScanProgress {
    /// Room for `max_threads` scanners.
    pub(crate) fn new(max_threads: usize) -> ScanProgress {
        assert!(max_threads >= 1, "at least one scanner");
        ScanProgress {
            version: AtomicU64::new(NONE),
            per_thread: AtomicUsize::new(usize::MAX),
            cursors: (0..max_threads).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Starts describing the scan of checkpoint `version` over `threads` ranges of `per_thread`
    /// buckets. Called by the checkpoint thread before any scanner starts.
    pub(crate) fn begin(&self, version: u64, threads: usize, per_thread: usize) {
        assert!(
            threads <= self.cursors.len(),
            "{threads} scanners, room for {}",
            self.cursors.len()
        );
        assert!(per_thread >= 1 && version != NONE);
        // Hide the old description while the new one is written.
        self.version.store(NONE, Ordering::Release);
        self.per_thread.store(per_thread, Ordering::Relaxed);
        for (index, cursor) in self.cursors.iter().enumerate() {
            cursor.store(index.saturating_mul(per_thread), Ordering::Relaxed);
        }
        self.version.store(version, Ordering::Release);
    }

    /// Scanner `thread` has emitted every bucket of its range below `end`.
    pub(crate) fn advance(&self, thread: usize, end: usize) {
        let previous = self.cursors[thread].swap(end, Ordering::Release);
        debug_assert!(
            previous <= end,
            "cursor {thread} moved back from {previous} to {end}"
        );
    }

    /// Whether the image of checkpoint `version` already holds what `bucket` held at the
    /// checkpoint, so that a write acting as `version + 1` may change it in place.
    #[inline]
    pub(crate) fn emitted(&self, version: u64, bucket: usize) -> bool {
        if self.version.load(Ordering::Acquire) != version {
            return false;
        }
        let per_thread = self.per_thread.load(Ordering::Relaxed);
        let Some(cursor) = self.cursors.get(bucket / per_thread) else {
            return false;
        };
        cursor.load(Ordering::Acquire) > bucket
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::ScanProgress;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// The record's value, written in place without atomics (as a record's bytes are): loom
    /// reports any access pair that the cursor does not order as a data race.
    struct Value(UnsafeCell<u64>);
    // SAFETY: the test is the claim that the protocol orders every access.
    unsafe impl Sync for Value {}

    /// A scanner emits a key's value and publishes its chunk; a v+1 writer that finds the bucket
    /// emitted writes the key in place. Every interleaving must order the scanner's read before
    /// the write, so the image holds the value from before it.
    #[test]
    fn loom_an_in_place_write_after_emitted_never_reaches_the_image() {
        loom::model(|| {
            let progress = Arc::new(ScanProgress::new(1));
            progress.begin(3, 1, 8);
            let value = Arc::new(Value(UnsafeCell::new(1)));
            let scanner = {
                let (progress, value) = (progress.clone(), value.clone());
                loom::thread::spawn(move || {
                    // SAFETY: checked by loom.
                    let image = value.0.with(|v| unsafe { *v });
                    progress.advance(0, 8);
                    image
                })
            };
            if progress.emitted(3, 5) {
                // SAFETY: checked by loom.
                value.0.with_mut(|v| unsafe { *v = 2 });
            }
            assert_eq!(scanner.join().unwrap(), 1);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::ScanProgress;

    #[test]
    fn only_the_emitted_prefix_of_each_range_of_the_named_version() {
        let progress = ScanProgress::new(4);
        assert!(!progress.emitted(0, 0), "nothing before a scan begins");
        progress.begin(7, 2, 100);
        assert!(!progress.emitted(7, 0));
        progress.advance(0, 50);
        progress.advance(1, 120);
        assert!(progress.emitted(7, 49));
        assert!(!progress.emitted(7, 50));
        assert!(progress.emitted(7, 119));
        assert!(!progress.emitted(7, 120));
        assert!(!progress.emitted(6, 10), "another checkpoint's scan");
        progress.begin(8, 2, 100);
        assert!(!progress.emitted(8, 10), "a new scan starts from nothing");
        assert!(!progress.emitted(7, 10));
    }
}
