//! The prefix oracle, grown from `crates/dpr/tests/simulation.rs`. It trusts only what sessions
//! were told (commit points and surviving prefixes) and compares it with the workers' real state.
//!
//! Every operation writes a unique key (`s{session}-{sequence}`), so a worker's state is exactly
//! the set of operations it kept. Checks, per session and rollback:
//! - every operation ever reported committed (commit point, or survived a rollback) is present;
//! - every operation reported survived is present, every one reported lost or refused is absent;
//! - below `until_sequence` everything but the uncertain operations is present;
//! - nothing of the judged range is present unless the report accounts for it;
//! - no survivor was issued after a lost batch completed (it would depend on the lost batch:
//!   a broken prefix that the state alone cannot show, since the report and the state agree).
//!
//! A rollback check is deferred until every worker is up and in the rollback's world-line (a
//! crashed worker's state cannot be read, and one not yet restored still holds lost operations).
//! Deferring is sound: afterwards a worker only adds keys with new sequence numbers, and further
//! rollbacks only remove operations that were never reported committed.

use std::collections::{BTreeMap, BTreeSet};

use prefixkv_dpr::session::{CommitPoint, SequenceRange, SurvivingPrefix};
use prefixkv_dpr::WorldLine;

/// The key operation `sequence` of `session` writes.
pub fn key(session: usize, sequence: u64) -> Vec<u8> {
    format!("s{session}-{sequence}").into_bytes()
}

fn expand(ranges: &[SequenceRange]) -> impl Iterator<Item = u64> + '_ {
    ranges.iter().flat_map(|r| r.start..r.end)
}

/// What one session was told, plus where its operations went.
#[derive(Default)]
pub struct SessionOracle {
    /// Worker of each issued operation, indexed by sequence number (sequences are dense).
    placed: Vec<u32>,
    /// Per sequence: reported committed (or survived).
    durable: Vec<bool>,
    /// Operations below this were judged by a rollback already.
    judged_below: u64,
    /// Commit points covered everything below this except `excluded`.
    committed_below: u64,
    /// Operations a commit point skipped over as pending; committed once no longer listed.
    excluded: BTreeSet<u64>,
    /// Issued batches not yet reported committed: first sequence -> (end, virtual issue time).
    open_batches: BTreeMap<u64, (u64, u64)>,
    /// Batches not yet judged by a rollback: first sequence -> (issue step, completion step).
    /// A batch issued after another completed depends on it (the session carries the
    /// dependency), so it may not survive a rollback that loses the other.
    steps: BTreeMap<u64, (u64, Option<u64>)>,
}

/// A rollback report waiting for the workers to be checkable.
pub struct PendingCheck {
    /// The session.
    pub session: usize,
    /// The world-line the session moved to.
    pub world_line: WorldLine,
    judged_below: u64,
    issued_below: u64,
    prefix: SurvivingPrefix,
    steps: BTreeMap<u64, (u64, Option<u64>)>,
}

impl SessionOracle {
    /// Records an issued batch.
    pub fn issued(&mut self, sequences: &SequenceRange, worker: usize, now: u64, step: u64) {
        self.steps.insert(sequences.start, (step, None));
        debug_assert_eq!(self.placed.len() as u64, sequences.start);
        for _ in sequences.start..sequences.end {
            self.placed.push(worker as u32);
            self.durable.push(false);
        }
        self.open_batches
            .insert(sequences.start, (sequences.end, now));
    }

    /// Records that the batch starting at `start` completed (ran) at event `step`.
    pub fn completed(&mut self, start: u64, step: u64) {
        if let Some(entry) = self.steps.get_mut(&start) {
            entry.1 = Some(step);
        }
    }

    /// The worker operation `sequence` went to.
    pub fn worker_of(&self, sequence: u64) -> usize {
        self.placed[sequence as usize] as usize
    }

    fn mark(&mut self, sequence: u64) {
        self.durable[sequence as usize] = true;
    }

    /// Records a commit point; returns the virtual issue times of batches it newly commits.
    pub fn commit_point(&mut self, point: &CommitPoint) -> Vec<u64> {
        let excluded: BTreeSet<u64> = expand(&point.excluded).collect();
        let from = self.committed_below.max(self.judged_below);
        for sequence in from..point.until_sequence {
            if excluded.contains(&sequence) {
                self.excluded.insert(sequence);
            } else {
                self.mark(sequence);
            }
        }
        let now_committed: Vec<u64> = self
            .excluded
            .iter()
            .copied()
            .filter(|s| *s < point.until_sequence && !excluded.contains(s))
            .collect();
        for sequence in now_committed {
            self.excluded.remove(&sequence);
            self.mark(sequence);
        }
        self.committed_below = self.committed_below.max(point.until_sequence);
        let done: Vec<u64> = self
            .open_batches
            .iter()
            .filter(|(&start, &(end, _))| {
                end <= point.until_sequence && !(start..end).any(|s| excluded.contains(&s))
            })
            .map(|(&start, _)| start)
            .collect();
        done.iter()
            .map(|start| self.open_batches.remove(start).expect("listed").1)
            .collect()
    }

    /// Records what a rollback report says and returns the check to run against the workers.
    pub fn rollback(
        &mut self,
        session: usize,
        issued_below: u64,
        prefix: SurvivingPrefix,
    ) -> PendingCheck {
        let uncertain: BTreeSet<u64> = expand(&prefix.uncertain).collect();
        let judged_below = self.judged_below;
        for sequence in expand(&prefix.survived).collect::<Vec<_>>() {
            self.mark(sequence);
        }
        for sequence in judged_below..prefix.until_sequence {
            if !uncertain.contains(&sequence) {
                self.mark(sequence);
            }
        }
        self.judged_below = issued_below;
        self.committed_below = self.committed_below.max(issued_below);
        self.excluded.clear();
        self.open_batches.clear();
        let steps = std::mem::take(&mut self.steps);
        PendingCheck {
            session,
            world_line: prefix.world_line,
            judged_below,
            issued_below,
            prefix,
            steps,
        }
    }

    /// The smallest operation reported committed, if any (the tamper test erases it).
    pub fn first_committed(&self) -> Option<u64> {
        self.durable.iter().position(|d| *d).map(|s| s as u64)
    }

    /// Operations reported committed so far.
    pub fn committed(&self) -> u64 {
        self.durable.iter().filter(|d| **d).count() as u64
    }

    /// Every operation reported committed must be present; returns violations.
    pub fn check_durable(&self, session: usize, present: &dyn Fn(u64) -> bool) -> Vec<String> {
        (0..self.durable.len() as u64)
            .filter(|&s| self.durable[s as usize] && !present(s))
            .map(|s| format!("session {session} op {s} was reported committed but is gone"))
            .take(5)
            .collect()
    }
}

impl PendingCheck {
    /// Runs the rollback report's checks; returns violations.
    pub fn run(&self, present: &dyn Fn(u64) -> bool) -> Vec<String> {
        let session = self.session;
        let prefix = &self.prefix;
        let uncertain: BTreeSet<u64> = expand(&prefix.uncertain).collect();
        let survived: BTreeSet<u64> = expand(&prefix.survived).collect();
        let mut violations = Vec::new();
        let mut fail = |message: String| {
            if violations.len() < 5 {
                violations.push(format!("world-line {}: {message}", self.world_line));
            }
        };
        for &sequence in &survived {
            if !present(sequence) {
                fail(format!(
                    "session {session} op {sequence} reported survived but absent"
                ));
            }
        }
        for sequence in expand(&prefix.lost).chain(expand(&prefix.rejected)) {
            if present(sequence) {
                fail(format!(
                    "session {session} op {sequence} reported lost/refused but present"
                ));
            }
        }
        // A survivor must not depend on a lost batch: none may be issued after one completed.
        let lost_completed = prefix
            .lost
            .iter()
            .filter_map(|r| self.steps.get(&r.start).and_then(|s| s.1))
            .min();
        if let Some(lost_step) = lost_completed {
            for range in &prefix.survived {
                if self
                    .steps
                    .get(&range.start)
                    .is_some_and(|s| s.0 > lost_step)
                {
                    fail(format!(
                        "session {session} ops {}..{} survived but were issued after a lost \
                         batch completed (they depend on it)",
                        range.start, range.end
                    ));
                }
            }
        }
        for sequence in self.judged_below..prefix.until_sequence {
            if !uncertain.contains(&sequence) && !present(sequence) {
                fail(format!("session {session} prefix op {sequence} absent"));
            }
        }
        for sequence in self.judged_below..self.issued_below {
            let accounted = sequence < prefix.until_sequence
                || uncertain.contains(&sequence)
                || survived.contains(&sequence);
            if !accounted && present(sequence) {
                fail(format!(
                    "session {session} op {sequence} present but unaccounted for"
                ));
            }
        }
        violations
    }
}
