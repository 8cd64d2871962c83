//! The pure bookkeeping of `dpr` sessions, with no sockets and no clocks of its own (every
//! function takes the instant it is told about), so that it can be unit-tested:
//! - [`Buckets`]: completed, committed and lost operations per fixed-width time bucket (the
//!   paper's Fig. 16 counts them every 250 ms);
//! - [`CommitTracker`]: each completed operation's completion instant until a commit point covers
//!   it (commit latency = commit observed − completion), resolved by rollback reports;
//! - [`Oracle`]: what a verifier session, writing unique keys, was acknowledged and told, and the
//!   check of what the cluster holds at the end against it (as `crates/cluster/tests/kill.rs`).
//!   Shared by `dpr` and `dredis`, so rollback reports are classified in one place.
//!
//! Invariants: an operation is counted committed at most once and only after it completed; after
//! a rollback every operation the tracker held is resolved (committed, lost or uncertain), since
//! the report names every operation the session still tracked and the unnamed ones were committed
//! before the failure. The oracle trusts commit points over reports: an operation inside the last
//! commit point told to a session must be present whatever a rollback report says of it; only
//! operations after that point may be accepted either way.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prefixkv_dpr::session::CommitPoint;
use prefixkv_dprnet::client::{Fate, RollbackReport};

use crate::stats::Latencies;

/// Whether `sequence` is covered by `point` (below it and not excluded).
pub(crate) fn covered(point: &CommitPoint, sequence: u64) -> bool {
    sequence < point.until_sequence
        && !point
            .excluded
            .iter()
            .any(|r| r.start <= sequence && sequence < r.end)
}

/// Counts per time bucket of `width` since `origin`.
#[derive(Debug, Clone)]
pub(super) struct Buckets {
    origin: Instant,
    width: Duration,
    /// Operations completed (acknowledged) in each bucket.
    pub completed: Vec<u64>,
    /// Operations whose commit was observed in each bucket.
    pub committed: Vec<u64>,
    /// Completed operations a rollback reported lost, by the bucket of the report.
    pub lost: Vec<u64>,
}

/// Which count of a bucket.
#[derive(Debug, Clone, Copy)]
pub(super) enum Count {
    Completed,
    Committed,
    Lost,
}

impl Buckets {
    /// Empty buckets of `width` starting at `origin`.
    pub fn new(origin: Instant, width: Duration) -> Buckets {
        assert!(!width.is_zero(), "a bucket has a width");
        Buckets {
            origin,
            width,
            completed: Vec::new(),
            committed: Vec::new(),
            lost: Vec::new(),
        }
    }

    /// The bucket `at` falls into (instants before the origin fall into the first).
    pub fn index(&self, at: Instant) -> usize {
        let since = at.saturating_duration_since(self.origin);
        (since.as_nanos() / self.width.as_nanos()) as usize
    }

    /// Adds `n` to `count` in the bucket of `at`.
    pub fn add(&mut self, count: Count, at: Instant, n: u64) {
        if n == 0 {
            return;
        }
        let index = self.index(at);
        let counts = match count {
            Count::Completed => &mut self.completed,
            Count::Committed => &mut self.committed,
            Count::Lost => &mut self.lost,
        };
        if counts.len() <= index {
            counts.resize(index + 1, 0);
        }
        counts[index] += n;
    }

    /// Adds every count of `other` (same origin and width: per-session buckets into one).
    pub fn merge(&mut self, other: &Buckets) {
        debug_assert_eq!((self.origin, self.width), (other.origin, other.width));
        for (into, from) in [
            (&mut self.completed, &other.completed),
            (&mut self.committed, &other.committed),
            (&mut self.lost, &other.lost),
        ] {
            if into.len() < from.len() {
                into.resize(from.len(), 0);
            }
            for (a, b) in into.iter_mut().zip(from) {
                *a += b;
            }
        }
    }

    /// Number of buckets with any count.
    pub fn len(&self) -> usize {
        self.completed
            .len()
            .max(self.committed.len())
            .max(self.lost.len())
    }

    /// Bucket `index` as (start in seconds since the origin, completed, committed, lost).
    pub fn bucket(&self, index: usize) -> (f64, u64, u64, u64) {
        let at = |v: &Vec<u64>| v.get(index).copied().unwrap_or(0);
        (
            index as f64 * self.width.as_secs_f64(),
            at(&self.completed),
            at(&self.committed),
            at(&self.lost),
        )
    }

    /// The bucket width in seconds.
    pub fn width_s(&self) -> f64 {
        self.width.as_secs_f64()
    }
}

/// What a rollback did to the operations a [`CommitTracker`] held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resolved {
    /// In the restored state (so committed).
    pub survived: u64,
    /// Completed but not in the restored state.
    pub lost: u64,
    /// In flight at the failure: never known.
    pub uncertain: u64,
}

/// Completed operations awaiting a commit point: sequence → completion instant.
#[derive(Debug, Default)]
pub(super) struct CommitTracker {
    pending: BTreeMap<u64, Instant>,
    /// Completion → commit observed, per committed operation.
    pub latency: Latencies,
}

impl CommitTracker {
    /// Operation `sequence` completed at `at`.
    pub fn completed(&mut self, sequence: u64, at: Instant) {
        self.pending.insert(sequence, at);
    }

    /// Operations still awaiting their commit.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// `point` was observed at `at`: every pending operation it covers is committed now.
    /// Returns how many.
    pub fn committed(&mut self, point: &CommitPoint, at: Instant) -> u64 {
        let mut newly = Vec::new();
        for (&sequence, &completed_at) in self.pending.range(..point.until_sequence) {
            if covered(point, sequence) {
                newly.push(sequence);
                self.latency
                    .record(at.saturating_duration_since(completed_at));
            }
        }
        for sequence in &newly {
            self.pending.remove(sequence);
        }
        newly.len() as u64
    }

    /// A rollback reported at `at`: operations it names survived, were lost or are uncertain;
    /// every other pending one was committed before the failure (the report omits those).
    pub fn rolled_back(&mut self, report: &RollbackReport, at: Instant) -> Resolved {
        let mut resolved = Resolved::default();
        for operation in &report.operations {
            let Some(sequence) = operation.sequence else {
                continue;
            };
            let completed_at = self.pending.remove(&sequence);
            match operation.fate {
                Fate::Survived => {
                    if let Some(completed_at) = completed_at {
                        self.latency
                            .record(at.saturating_duration_since(completed_at));
                        resolved.survived += 1;
                    }
                }
                Fate::Lost if completed_at.is_some() => resolved.lost += 1,
                Fate::Uncertain => resolved.uncertain += 1,
                _ => {}
            }
        }
        for (_, completed_at) in std::mem::take(&mut self.pending) {
            self.latency
                .record(at.saturating_duration_since(completed_at));
            resolved.survived += 1;
        }
        resolved
    }
}

/// What the oracle knows of one operation of a verifier session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expected {
    /// Pushed, no outcome yet.
    Pushed,
    /// Must be in the final state.
    Present,
    /// Must not be.
    Absent,
    /// May or may not be: the report called it uncertain (in flight at a failure) and it lies
    /// outside the last commit point told to the session.
    Either,
}

/// A verifier session's writes (`SET u<session>:<tag> v<tag>`, every key written once) and what
/// it was acknowledged and told about them.
#[derive(Debug, Clone)]
pub(crate) struct Oracle {
    /// The session id.
    pub(crate) session: u64,
    /// Per tag.
    pub(crate) expected: BTreeMap<u64, Expected>,
    /// The last commit point the session was told of.
    committed: CommitPoint,
    /// Guarantees broken while the session ran (a committed operation reported lost).
    pub(crate) violations: Vec<String>,
    /// Rollbacks seen.
    pub(crate) rollbacks: u64,
}

/// What [`Oracle::check`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct OracleCheck {
    pub(crate) present: usize,
    pub(crate) absent: usize,
    pub(crate) either: usize,
    /// Every disagreement, in words.
    pub(crate) errors: Vec<String>,
}

impl Oracle {
    /// An oracle for session `session`.
    pub(crate) fn new(session: u64) -> Oracle {
        Oracle {
            session,
            expected: BTreeMap::new(),
            committed: CommitPoint::default(),
            violations: Vec::new(),
            rollbacks: 0,
        }
    }

    /// The key of operation `tag` of `session`.
    pub(crate) fn key(session: u64, tag: u64) -> Vec<u8> {
        format!("{}{tag}", Oracle::key_prefix(session)).into_bytes()
    }

    /// What every key of `session` starts with (the tag follows).
    pub(crate) fn key_prefix(session: u64) -> String {
        format!("u{session}:")
    }

    /// The value operation `tag` writes.
    pub(crate) fn value(tag: u64) -> Vec<u8> {
        format!("v{tag}").into_bytes()
    }

    /// Operation `tag` was pushed (before it is sent: a failed push still has its tag).
    pub(crate) fn pushed(&mut self, tag: u64) {
        self.expected.insert(tag, Expected::Pushed);
    }

    /// Operation `tag` was acknowledged.
    pub(crate) fn completed(&mut self, tag: u64) {
        if let Some(entry) = self.expected.get_mut(&tag) {
            if *entry == Expected::Pushed {
                *entry = Expected::Present;
            }
        }
    }

    /// The session was told `point`.
    pub(crate) fn committed(&mut self, point: &CommitPoint) {
        self.committed = point.clone();
    }

    /// A rollback report. An operation inside the last commit point told to the session must be
    /// present whatever the report says of it (the commit point is the guarantee the client
    /// holds; the report is the system's claim about itself), and a report calling such an
    /// operation lost or rejected is a violation in itself. Only operations outside that commit
    /// point take the report's fate: survived present, lost / rejected / not sent absent,
    /// uncertain either way.
    pub(crate) fn rolled_back(&mut self, report: &RollbackReport) {
        self.rollbacks += 1;
        for operation in &report.operations {
            let inside = operation
                .sequence
                .is_some_and(|sequence| covered(&self.committed, sequence));
            let expected = match operation.fate {
                _ if inside => Expected::Present,
                Fate::Survived => Expected::Present,
                Fate::Lost | Fate::Rejected | Fate::NotSent => Expected::Absent,
                Fate::Uncertain => Expected::Either,
            };
            if inside && matches!(operation.fate, Fate::Lost | Fate::Rejected) {
                self.violations.push(format!(
                    "session {}: operation {} was inside the commit point told (until {}) but a \
                     rollback reported it {:?}",
                    self.session,
                    operation.sequence.unwrap_or_default(),
                    self.committed.until_sequence,
                    operation.fate
                ));
            }
            self.expected.insert(operation.tag, expected);
        }
        self.committed = CommitPoint {
            until_sequence: report
                .prefix
                .until_sequence
                .min(self.committed.until_sequence),
            excluded: Vec::new(),
        };
    }

    /// Compares what the cluster holds for this session (`found`: tag → value, absent keys
    /// omitted) with every operation's expected fate; also reports operations left without an
    /// outcome and the violations seen while running.
    pub(crate) fn check(&self, found: &BTreeMap<u64, Vec<u8>>) -> OracleCheck {
        let mut check = OracleCheck {
            errors: self.violations.clone(),
            ..OracleCheck::default()
        };
        let session = self.session;
        for (&tag, &expected) in &self.expected {
            let value = found.get(&tag);
            match expected {
                Expected::Present => {
                    check.present += 1;
                    if value != Some(&Oracle::value(tag)) {
                        check.errors.push(format!(
                            "session {session}: operation {tag} was acknowledged and not reported \
                             lost, but the cluster holds {:?}",
                            value.map(|v| String::from_utf8_lossy(v).into_owned())
                        ));
                    }
                }
                Expected::Absent => {
                    check.absent += 1;
                    if value.is_some() {
                        check.errors.push(format!(
                            "session {session}: operation {tag} was reported lost, but is present"
                        ));
                    }
                }
                Expected::Either => check.either += 1,
                Expected::Pushed => check.errors.push(format!(
                    "session {session}: operation {tag} has no outcome after draining"
                )),
            }
        }
        for tag in found.keys().filter(|t| !self.expected.contains_key(t)) {
            check.errors.push(format!(
                "session {session}: key of tag {tag} was never written"
            ));
        }
        check
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_dpr::session::{SequenceRange, SurvivingPrefix};
    use prefixkv_dprnet::client::OperationFate;

    #[test]
    fn buckets_count_by_250_ms_and_merge() {
        let origin = Instant::now();
        let width = Duration::from_millis(250);
        let mut first = Buckets::new(origin, width);
        first.add(Count::Completed, origin, 3);
        first.add(Count::Completed, origin + Duration::from_millis(249), 1);
        first.add(Count::Completed, origin + Duration::from_millis(250), 5);
        first.add(Count::Committed, origin + Duration::from_millis(1010), 7);
        first.add(Count::Lost, origin + Duration::from_millis(600), 0); // nothing to add
        assert_eq!(first.completed, vec![4, 5]);
        assert_eq!(first.committed, vec![0, 0, 0, 0, 7]);
        assert!(first.lost.is_empty());
        let mut second = Buckets::new(origin, width);
        second.add(Count::Completed, origin + Duration::from_millis(760), 2);
        second.add(Count::Lost, origin + Duration::from_millis(500), 9);
        first.merge(&second);
        assert_eq!(first.completed, vec![4, 5, 0, 2]);
        assert_eq!(first.lost, vec![0, 0, 9]);
        assert_eq!(first.len(), 5);
        assert_eq!(first.bucket(2), (0.5, 0, 0, 9));
        assert_eq!(first.bucket(4), (1.0, 0, 7, 0));
    }

    fn report(operations: Vec<(u64, Option<u64>, Fate)>) -> RollbackReport {
        RollbackReport {
            prefix: SurvivingPrefix {
                world_line: 2,
                until_sequence: 4,
                ..SurvivingPrefix::default()
            },
            operations: operations
                .into_iter()
                .map(|(tag, sequence, fate)| OperationFate {
                    tag,
                    sequence,
                    fate,
                })
                .collect(),
        }
    }

    #[test]
    fn commit_tracker_commits_once_and_resolves_everything_on_rollback() {
        let start = Instant::now();
        let mut tracker = CommitTracker::default();
        for sequence in 0..8 {
            tracker.completed(sequence, start);
        }
        let point = CommitPoint {
            until_sequence: 4,
            excluded: vec![SequenceRange { start: 1, end: 2 }],
        };
        assert_eq!(
            tracker.committed(&point, start + Duration::from_millis(10)),
            3
        );
        assert_eq!(
            tracker.committed(&point, start + Duration::from_millis(20)),
            0
        );
        assert_eq!(tracker.pending(), 5); // 1 (excluded) and 4..8
        let resolved = tracker.rolled_back(
            &report(vec![
                (4, Some(4), Fate::Lost),
                (5, Some(5), Fate::Uncertain),
                (6, Some(6), Fate::Survived),
                (9, None, Fate::NotSent),
            ]),
            start + Duration::from_millis(30),
        );
        // 1 and 7 were not named: committed before the failure.
        assert_eq!(
            resolved,
            Resolved {
                survived: 3,
                lost: 1,
                uncertain: 1
            }
        );
        assert_eq!(tracker.pending(), 0);
        assert_eq!(tracker.latency.count(), 6);
    }

    fn acknowledged_oracle(tags: u64) -> (Oracle, BTreeMap<u64, Vec<u8>>) {
        let mut oracle = Oracle::new(7);
        let mut found = BTreeMap::new();
        for tag in 0..tags {
            oracle.pushed(tag);
            oracle.completed(tag);
            found.insert(tag, Oracle::value(tag));
        }
        (oracle, found)
    }

    #[test]
    fn the_oracle_passes_an_intact_state_and_catches_tampering() {
        let (oracle, found) = acknowledged_oracle(10);
        let check = oracle.check(&found);
        assert!(check.errors.is_empty(), "{:?}", check.errors);
        assert_eq!(check.present, 10);

        // A tampered expectation (an acknowledged write claimed lost) is caught.
        let mut tampered = oracle.clone();
        tampered.expected.insert(3, Expected::Absent);
        assert_eq!(tampered.check(&found).errors.len(), 1);
        // A dropped write, a wrong value and a key never written are caught.
        let mut damaged = found.clone();
        damaged.remove(&4);
        damaged.insert(5, b"v6".to_vec());
        damaged.insert(99, b"v99".to_vec());
        assert_eq!(oracle.check(&damaged).errors.len(), 3);
    }

    #[test]
    fn the_oracle_follows_rollback_reports_and_flags_a_lost_committed_operation() {
        let (mut oracle, mut found) = acknowledged_oracle(6);
        oracle.committed(&CommitPoint {
            until_sequence: 3,
            excluded: Vec::new(),
        });
        oracle.pushed(6);
        oracle.rolled_back(&report(vec![
            (3, Some(3), Fate::Lost),
            (4, Some(4), Fate::Survived),
            (5, Some(5), Fate::Uncertain),
            (6, None, Fate::NotSent),
        ]));
        found.remove(&3);
        found.remove(&5);
        let check = oracle.check(&found);
        assert!(check.errors.is_empty(), "{:?}", check.errors);
        assert_eq!((check.present, check.absent, check.either), (4, 2, 1));
        // A report that loses an operation inside the commit point told is a violation.
        oracle.rolled_back(&report(vec![(1, Some(1), Fate::Lost)]));
        assert_eq!(oracle.violations.len(), 1);
        assert_eq!(oracle.rollbacks, 2);
    }

    #[test]
    fn an_uncertain_operation_inside_the_commit_point_told_must_be_present() {
        let (mut oracle, mut found) = acknowledged_oracle(6);
        oracle.committed(&CommitPoint {
            until_sequence: 4,
            excluded: Vec::new(),
        });
        // The report calls 2 (inside the point told) and 5 (after it) uncertain.
        oracle.rolled_back(&report(vec![
            (2, Some(2), Fate::Uncertain),
            (5, Some(5), Fate::Uncertain),
        ]));
        assert_eq!(oracle.expected[&2], Expected::Present);
        assert_eq!(oracle.expected[&5], Expected::Either);
        // Untampered: both present passes, and so does 5 missing (it may go either way).
        let check = oracle.check(&found);
        assert!(check.errors.is_empty(), "{:?}", check.errors);
        assert_eq!((check.present, check.either), (5, 1));
        found.remove(&5);
        assert!(oracle.check(&found).errors.is_empty());
        // Tampered: the read-back lacks the committed operation the report called uncertain.
        found.remove(&2);
        let errors = oracle.check(&found).errors;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("operation 2"), "{errors:?}");
    }
}
