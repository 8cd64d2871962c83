//! One client session of a `dpr` run, on a thread of the bench process: a
//! [`prefixkv_dprnet::DprRedisSession`] (batches of `b` commands per worker, a window of `w`
//! batches) driven until a stop flag, then drained.
//!
//! Two kinds of work: YCSB-A (50% GET, 50% blind SET of 8-byte keys and values over the preloaded
//! key space, uniform or zipfian from [`crate::workload`]), and a verifier writing unique keys
//! (`SET u<session>:<tag> v<tag>`, paced, every round a round trip) whose [`Oracle`] is checked
//! at the end of the failure run.
//!
//! Per completed operation: push → completion (operation latency; completions are observed when
//! the session receives a batch's response, so this includes the batching, as the paper's), and,
//! at DPR levels, completion → the session's commit point covering it, read every `commit_poll`
//! (commit latency, of one operation in `commit_sample`; the client's watcher reads the published cut every 10 ms, so this is
//! over-estimated by up to about 10 ms + `commit_poll`). After the stop the session waits
//! (bounded) for its tail to commit, so slow commits are not dropped from the distribution.
//! A rollback is handled as the client reports it: the tracker and oracle resolve every
//! operation, and the session continues on the new world-line.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use prefixkv_dpr::WorldLine;
use prefixkv_dprnet::client::ClientError;
use prefixkv_dprnet::{DprRedisClient, DprRedisSession};
use prefixkv_resp::Reply;

use super::track::{Buckets, CommitTracker, Count, Oracle, Resolved};
use crate::stats::Latencies;
use crate::workload::operations::{encode_key, key};
use crate::workload::{KeyDistribution, KeyGenerator};

/// What a session does.
#[derive(Clone, Copy, Debug)]
pub(super) enum Work {
    /// YCSB-A over `0..keys`.
    Ycsb {
        distribution: KeyDistribution,
        keys: u64,
        seed: u64,
    },
    /// Unique keys at most `ops_per_s`, checked by an [`Oracle`].
    Unique { ops_per_s: u64 },
}

/// How to run one session.
#[derive(Clone, Copy, Debug)]
pub(super) struct SessionPlan {
    /// Session id, unique in the cluster.
    pub id: u64,
    /// Its work.
    pub work: Work,
    /// Pushes per loop turn (then completions are harvested).
    pub turn: usize,
    /// Track commit points (the DPR levels; the others never commit).
    pub track_commits: bool,
    /// Track the commit of one operation in this many (by sequence number): 1 for exact
    /// committed counts (the failure run), more in throughput cells so that the tracking's cost
    /// (a map insert and remove per tracked operation) does not weigh on the dpr levels' client
    /// threads, which the none and eventual levels do not pay (the paper samples 0.1%).
    pub commit_sample: u64,
    /// How often to read the commit point.
    pub commit_poll: Duration,
    /// After draining, how long at most to wait for the tail to commit.
    pub commit_wait: Duration,
    /// Origin and width of the time buckets.
    pub origin: Instant,
    pub bucket: Duration,
}

/// What one session measured.
pub(super) struct SessionOutcome {
    /// Operations completed (acknowledged).
    pub completed: u64,
    /// From the first push to the end of the drain.
    pub elapsed: Duration,
    /// Push → completion.
    pub op_latency: Latencies,
    /// Completion → commit observed (DPR levels).
    pub commit_latency: Latencies,
    /// Completed / committed / lost per bucket.
    pub buckets: Buckets,
    /// Rollbacks seen.
    pub rollbacks: u64,
    /// What rollbacks resolved, summed.
    pub resolved: Resolved,
    /// After each rollback, the world-line and instant of the first completed operation.
    pub back: Vec<(WorldLine, Instant)>,
    /// Operations still not known committed when the commit wait ended.
    pub uncommitted: usize,
    /// The world-line the session ended on.
    pub world_line: WorldLine,
    /// The verifier's oracle (unique-key work only).
    pub oracle: Option<Oracle>,
}

struct Driver<'a> {
    plan: SessionPlan,
    session: DprRedisSession,
    generator: Option<KeyGenerator>,
    /// Push instants of tags `first_tag..`.
    pushed_at: VecDeque<Instant>,
    first_tag: u64,
    next_tag: u64,
    counter: u64,
    tracker: CommitTracker,
    last_poll: Instant,
    awaiting_back: bool,
    out: SessionOutcome,
    stop: &'a AtomicBool,
}

/// Runs one session until `stop`, drains it and waits (bounded) for its tail to commit.
pub(super) fn run_session(
    client: &DprRedisClient,
    plan: SessionPlan,
    stop: &AtomicBool,
) -> Result<SessionOutcome> {
    let session = client.session(plan.id)?;
    let (generator, oracle) = match plan.work {
        Work::Ycsb {
            distribution,
            keys,
            seed,
        } => (Some(KeyGenerator::new(distribution, keys, seed)), None),
        Work::Unique { .. } => (None, Some(Oracle::new(plan.id))),
    };
    let now = Instant::now();
    let mut driver = Driver {
        plan,
        session,
        generator,
        pushed_at: VecDeque::new(),
        first_tag: 0,
        next_tag: 0,
        counter: plan.id << 40,
        tracker: CommitTracker::default(),
        last_poll: now,
        awaiting_back: false,
        out: SessionOutcome {
            completed: 0,
            elapsed: Duration::ZERO,
            op_latency: Latencies::new(),
            commit_latency: Latencies::new(),
            buckets: Buckets::new(plan.origin, plan.bucket),
            rollbacks: 0,
            resolved: Resolved::default(),
            back: Vec::new(),
            uncommitted: 0,
            world_line: 0,
            oracle,
        },
        stop,
    };
    driver.run()?;
    driver.out.world_line = driver.session.world_line();
    let mut out = driver.out;
    out.uncommitted = driver.tracker.pending();
    out.commit_latency = driver.tracker.latency;
    Ok(out)
}

impl Driver<'_> {
    fn run(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            let stopping = self.stop.load(Ordering::SeqCst);
            let step = if stopping {
                self.session.drain()
            } else {
                self.turn(started)
            };
            let step = step.and_then(|()| self.poll_commit(false));
            self.harvest()?;
            match step {
                Ok(()) if stopping => break,
                Ok(()) => {}
                Err(error) => self.failed(error)?,
            }
        }
        self.out.elapsed = started.elapsed();
        if self.plan.track_commits {
            let deadline = Instant::now() + self.plan.commit_wait;
            while self.tracker.pending() > 0 && Instant::now() < deadline {
                std::thread::sleep(self.plan.commit_poll);
                if let Err(error) = self.poll_commit(true) {
                    self.failed(error)?;
                }
            }
        }
        Ok(())
    }

    /// One turn of pushes.
    fn turn(&mut self, started: Instant) -> Result<(), ClientError> {
        match self.plan.work {
            Work::Ycsb { .. } => {
                for _ in 0..self.plan.turn {
                    self.push_ycsb()?;
                }
                Ok(())
            }
            Work::Unique { ops_per_s } => {
                let allowed = (started.elapsed().as_secs_f64() * ops_per_s as f64) as u64;
                if self.next_tag >= allowed {
                    std::thread::sleep(Duration::from_millis(1));
                    return Ok(());
                }
                for _ in 0..self.plan.turn {
                    let tag = self.next_tag;
                    self.next_tag += 1;
                    if let Some(oracle) = self.out.oracle.as_mut() {
                        oracle.pushed(tag);
                    }
                    self.pushed_at.push_back(Instant::now());
                    let key = Oracle::key(self.plan.id, tag);
                    self.session.push(&[b"SET", &key, &Oracle::value(tag)])?;
                }
                // A round trip per turn: completions (and a rollback) are seen at once.
                self.session.drain()
            }
        }
    }

    fn push_ycsb(&mut self) -> Result<(), ClientError> {
        let generator = self.generator.as_mut().expect("ycsb work has a generator");
        let key = encode_key(key(generator.next_key()));
        let read = generator.percent() < 50;
        self.next_tag += 1;
        self.pushed_at.push_back(Instant::now());
        if read {
            self.session.push(&[b"GET", &key])?;
        } else {
            self.counter += 1;
            self.session
                .push(&[b"SET", &key, &self.counter.to_le_bytes()])?;
        }
        Ok(())
    }

    /// Reads the commit point if due (or `now`), committing what it covers.
    fn poll_commit(&mut self, now: bool) -> Result<(), ClientError> {
        if !self.plan.track_commits {
            return Ok(());
        }
        let at = Instant::now();
        if !now && at.duration_since(self.last_poll) < self.plan.commit_poll {
            return Ok(());
        }
        self.last_poll = at;
        let point = self.session.commit_point()?;
        let newly = self.tracker.committed(&point, at);
        self.out.buckets.add(Count::Committed, at, newly);
        if let Some(oracle) = self.out.oracle.as_mut() {
            oracle.committed(&point);
        }
        Ok(())
    }

    /// Records what completed since the last harvest.
    fn harvest(&mut self) -> Result<()> {
        let completed = self.session.take_completed();
        if completed.is_empty() {
            return Ok(());
        }
        let at = Instant::now();
        if self.awaiting_back {
            self.awaiting_back = false;
            self.out.back.push((self.session.world_line(), at));
        }
        for operation in &completed {
            if let Reply::Error(text) = &operation.reply {
                bail!(
                    "session {}: worker {} answered an error: {}",
                    self.plan.id,
                    operation.shard,
                    String::from_utf8_lossy(text)
                );
            }
            if let Some(pushed) = operation
                .tag
                .checked_sub(self.first_tag)
                .and_then(|i| self.pushed_at.get(i as usize))
            {
                self.out.op_latency.record(at.duration_since(*pushed));
            }
            if self.plan.track_commits && operation.sequence % self.plan.commit_sample == 0 {
                self.tracker.completed(operation.sequence, at);
            }
            if let Some(oracle) = self.out.oracle.as_mut() {
                oracle.completed(operation.tag);
            }
        }
        self.out.completed += completed.len() as u64;
        self.out
            .buckets
            .add(Count::Completed, at, completed.len() as u64);
        // Completions lag pushes by at most the window; keep a generous margin.
        while self.pushed_at.len() > 1 << 16 {
            self.pushed_at.pop_front();
            self.first_tag += 1;
        }
        Ok(())
    }

    /// A failed step: a rollback is resolved and the session goes on; anything else ends it.
    fn failed(&mut self, error: ClientError) -> Result<()> {
        let ClientError::Rollback(report) = error else {
            bail!("session {}: {error}", self.plan.id);
        };
        let at = Instant::now();
        self.out.rollbacks += 1;
        self.awaiting_back = true;
        let resolved = self.tracker.rolled_back(&report, at);
        self.out
            .buckets
            .add(Count::Committed, at, resolved.survived);
        self.out.buckets.add(Count::Lost, at, resolved.lost);
        self.out.resolved.survived += resolved.survived;
        self.out.resolved.lost += resolved.lost;
        self.out.resolved.uncertain += resolved.uncertain;
        if let Some(oracle) = self.out.oracle.as_mut() {
            oracle.rolled_back(&report);
        }
        Ok(())
    }
}
