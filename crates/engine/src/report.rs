//! What a checkpoint request names and what the state machines report back: the token of a
//! requested checkpoint, the report of a published one (with where its time went), the scope of
//! a sealed version's checkpoint, and the report of a rollback's PURGE. Plain data, shared by the
//! store (which hands them out), the checkpoint driver and the rollback (which fill them in) and
//! `shared` (which keeps the results for `wait_for_commit`), so none of those imports another
//! for them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::checkpoint_files::WriteTimes;
use crate::{SessionId, Strategy};

/// Returned by [`Store::checkpoint`](crate::Store::checkpoint); pass to [`Store::wait_for_commit`](crate::Store::wait_for_commit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointToken {
    /// The version this checkpoint makes durable.
    pub version: u64,
}

/// What a published checkpoint contains.
#[derive(Clone, Debug)]
pub struct CheckpointReport {
    /// Checkpoint version.
    pub version: u64,
    /// Strategy used.
    pub strategy: Strategy,
    /// From the request to the durable manifest.
    pub duration: Duration,
    /// Bytes written: the segment files, or for an incremental checkpoint its index copy and the
    /// log pages it wrote to the page file.
    pub bytes: u64,
    /// Entries written.
    pub records: u64,
    /// CPR point (last serial included) per session.
    pub session_points: BTreeMap<SessionId, u64>,
    /// The published checkpoint directory.
    pub dir: PathBuf,
    /// Where the checkpoint's time went.
    pub breakdown: CheckpointBreakdown,
}

/// Where one checkpoint's time went, for measuring (`prefixkv-bench cpr` reports it). Thread
/// times are sums over the checkpoint's segment threads, so with `threads` > 1 they exceed
/// [`image`](Self::image). Measured with one clock read per chunk of 4,096 index buckets and per
/// megabyte written: the measuring itself costs nothing visible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointBreakdown {
    /// From the request to the start of the image: the CPR phase changes, each of which waits
    /// until every session has refreshed its epoch.
    pub phases: Duration,
    /// Writing the image: from spawning the segment threads until the last segment is fsynced.
    pub image: Duration,
    /// Publishing: MANIFEST written and synced, directory renamed and synced, old checkpoints
    /// pruned.
    pub publish: Duration,
    /// Segment threads (one segment file each).
    pub threads: u32,
    /// CPU time the segment threads used (`CLOCK_THREAD_CPUTIME_ID`), summed.
    pub thread_cpu: Duration,
    /// Wall time of the segment threads, summed.
    pub thread_wall: Duration,
    /// Reading the hash index for chain heads (zero for the log-order strategies).
    pub index_scan: Duration,
    /// Walking chains or log pages and copying records into the write buffer: the threads' wall
    /// time minus the index scan and the segment writers' time.
    pub records: Duration,
    /// The segment writers' CRC, write, pacing and sync time, summed.
    pub writes: WriteTimes,
    /// With the idle checkpoint priority (`StoreConfig::checkpoint_thread_priority`): how long
    /// after the image started its threads were raised from `SCHED_IDLE` to the fixed niceness
    /// because the checkpoint fell behind its floor rate; `None` if they never were.
    pub priority_raised_after: Option<Duration>,
}

impl CheckpointBreakdown {
    /// The name of each timed part, in the order of [`parts`](Self::parts): what reports (the
    /// server's `INFO persistence`, the bench's JSON) call them.
    pub const PART_NAMES: [&'static str; 11] = [
        "phases",
        "image",
        "publish",
        "thread_cpu",
        "thread_wall",
        "index_scan",
        "records",
        "crc",
        "write_calls",
        "pacing",
        "sync",
    ];

    /// Every timed part, in the order of [`PART_NAMES`](Self::PART_NAMES).
    pub fn parts(&self) -> [Duration; 11] {
        [
            self.phases,
            self.image,
            self.publish,
            self.thread_cpu,
            self.thread_wall,
            self.index_scan,
            self.records,
            self.writes.crc,
            self.writes.write,
            self.writes.pacing,
            self.writes.sync,
        ]
    }

    /// The breakdown of `threads` segment threads whose [`parts`](Self::parts) are `parts`.
    pub fn from_parts(threads: u32, parts: [Duration; 11]) -> CheckpointBreakdown {
        let [phases, image, publish, thread_cpu, thread_wall, index_scan, records, crc, write, pacing, sync] =
            parts;
        CheckpointBreakdown {
            phases,
            image,
            publish,
            threads,
            thread_cpu,
            thread_wall,
            index_scan,
            records,
            writes: WriteTimes {
                crc,
                write,
                pacing,
                sync,
            },
            priority_raised_after: None,
        }
    }
}

/// What the checkpoint of a sealed version writes ([`Store::checkpoint_sealed`](crate::Store::checkpoint_sealed)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The whole image of the version: every record of it and older versions in the log, in
    /// address order (as the fold-over strategy writes it).
    Full,
    /// Only the records of versions above `base`, a checkpoint this store published (or
    /// recovered) and still holds; recovery applies them on top of `base`'s image. The caller
    /// must keep `base` (and its own base, down to a full image) as long as it keeps this one:
    /// the store's own pruning is then off (`keep_checkpoints` must be `usize::MAX`).
    Since(u64),
}

/// What a rollback's PURGE did ([`Store::wait_for_purge`](crate::Store::wait_for_purge)).
#[derive(Clone, Debug, PartialEq)]
pub struct PurgeReport {
    /// The world-line whose PURGE this was.
    pub world_line: u64,
    /// From the start of PURGE (THROW adopted by every session) to REST.
    pub duration: Duration,
    /// Records of the discarded versions that were flagged invalid.
    pub records_invalidated: u64,
    /// Index entries re-pointed past invalid records, plus records re-linked past them.
    pub links_repaired: u64,
    /// The versions purged, first and last (inclusive). A rollback that started while an earlier
    /// PURGE ran purges the union of both ranges (and the earlier PURGE stops without a report).
    pub versions: (u64, u64),
    /// Where the log pass started: the begin address, or, if higher, the tail when the store first
    /// let a session run a version of the range (no record of those versions lies below it).
    pub scanned_from: u64,
    /// Where the log pass ended (the tail once THROW was adopted).
    pub scanned_until: u64,
    /// Records the log pass visited (`[scanned_from, scanned_until)`).
    pub records_scanned: u64,
    /// Time of the log pass (flagging), for profiling.
    pub log_pass: Duration,
    /// Time of the index pass (re-linking), for profiling.
    pub index_pass: Duration,
}

#[cfg(test)]
mod tests {
    use super::CheckpointBreakdown;
    use std::time::Duration;

    #[test]
    fn a_breakdown_round_trips_through_its_parts() {
        let parts: [Duration; 11] = std::array::from_fn(|i| Duration::from_micros(i as u64 + 1));
        let breakdown = CheckpointBreakdown::from_parts(3, parts);
        assert_eq!(breakdown.parts(), parts);
        assert_eq!(breakdown.threads, 3);
        assert_eq!(
            breakdown.writes.write,
            Duration::from_micros(9),
            "write_calls is part 8"
        );
    }
}
