//! The simulation: real libDPR objects (workers over [`SimObject`], sessions, a finder, the
//! cluster manager, a SQLite metadata file) driven by one seeded event loop in virtual time.
//!
//! Invariants:
//! - Only this thread touches libDPR objects, in event order; the only other threads are the
//!   maps' persisters, whose results are consumed at a virtual time ([`SimObject::complete`]).
//! - Every random choice comes from one `StdRng` seeded by the config, drawn in event order, and
//!   every collection iterated is ordered (no hash maps): a seed fixes the whole trace.
//! - A worker's timers carry its incarnation; a crash bumps it, so a dead worker's timers (and
//!   its un-persisted commits) never fire into its successor.
//! - Messages to a crashed worker are dropped (the connection reset); the sender learns of the
//!   failure from the world-line, as a real session does.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use prefixkv_dpr::cluster::{
    CheckOutcome, ClusterManager, ManualClock, RestoreCommand, WorkerControl,
};
use prefixkv_dpr::finder::{ApproximateFinder, DprFinder, ExactFinder, HybridFinder};
use prefixkv_dpr::header::DprHeader;
use prefixkv_dpr::metadata::{MetadataStore, SqliteMetadataStore};
use prefixkv_dpr::session::{BatchTicket, Completion, SessionError};
use prefixkv_dpr::state_object::MapOperation;
use prefixkv_dpr::worker::{BatchOutcome, FastForward};
use prefixkv_dpr::{ClusterState, Cut, DprSession, DprWorker, WorkerId};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::config::{CommitMode, FinderKind, SimConfig};
use crate::object::SimObject;
use crate::oracle::{key, PendingCheck, SessionOracle};
use crate::queue::{EventQueue, Micros};
use crate::report::{CutSample, SimReport};
use crate::store::CountingStore;
use crate::SimError;

pub(crate) struct Request {
    session: usize,
    worker: usize,
    header: DprHeader,
    ticket: BatchTicket,
    operations: Vec<MapOperation>,
}

pub(crate) enum Event {
    Issue(usize),
    Deliver(Box<Request>),
    Respond(usize, BatchTicket, DprHeader),
    Commit(usize, u64),
    Persisted(usize, u64, u64),
    Refresh,
    Poll(usize),
    Heartbeat(usize, u64),
    ManagerCheck,
    Fail(usize),
    Restore(usize, RestoreCommand),
    Restart(usize),
}

type Commands = Arc<Mutex<Vec<(usize, RestoreCommand)>>>;

/// The manager's way to a worker: the command becomes a message event.
struct Control {
    worker: usize,
    sink: Commands,
}

impl WorkerControl for Control {
    fn restore(&self, command: RestoreCommand) {
        self.sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.worker, command));
    }
}

struct Node {
    worker: Option<DprWorker<SimObject>>,
    incarnation: u64,
    /// Virtual time the last scheduled persistence completes (completions stay in commit order).
    persist_tail: Micros,
    restart_pending: bool,
    /// This worker's clock offset (aligned-slot commits).
    skew: Micros,
    directory: PathBuf,
}

pub(crate) struct Sim {
    pub(crate) config: SimConfig,
    pub(crate) rng: StdRng,
    pub(crate) queue: EventQueue<Event>,
    raw_store: Arc<dyn MetadataStore>,
    pub(crate) store: Arc<CountingStore>,
    finder: Arc<dyn DprFinder>,
    hybrid: Option<Arc<HybridFinder>>,
    manager: ClusterManager,
    clock: Arc<ManualClock>,
    commands: Commands,
    nodes: Vec<Node>,
    sessions: Vec<DprSession>,
    oracles: Vec<SessionOracle>,
    checks: Vec<PendingCheck>,
    pub(crate) report: SimReport,
    graph_sums: (f64, f64),
    last_cut: Option<(u64, Cut)>,
    _directory: tempfile::TempDir,
}

fn us(duration: std::time::Duration) -> Micros {
    duration.as_micros() as Micros
}

impl Sim {
    pub(crate) fn new(config: SimConfig) -> Result<Self, SimError> {
        let parent = config.data_dir.clone().unwrap_or_else(|| {
            let shm = PathBuf::from("/dev/shm");
            if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            }
        });
        let directory = tempfile::Builder::new()
            .prefix("dprsim-")
            .tempdir_in(parent)?;
        let raw_store: Arc<dyn MetadataStore> = Arc::new(SqliteMetadataStore::open(
            directory.path().join("metadata.sqlite"),
        )?);
        let store = Arc::new(CountingStore::new(Arc::clone(&raw_store)));
        let shared: Arc<dyn MetadataStore> = store.clone();
        let mut hybrid = None;
        let finder: Arc<dyn DprFinder> = match config.finder {
            FinderKind::Exact => Arc::new(ExactFinder::new(shared.clone())?),
            FinderKind::Approximate => Arc::new(ApproximateFinder::new(shared.clone())),
            FinderKind::Hybrid => {
                let finder = Arc::new(HybridFinder::new(shared.clone())?);
                hybrid = Some(Arc::clone(&finder));
                finder
            }
        };
        let clock = Arc::new(ManualClock::default());
        let manager = ClusterManager::new(shared, clock.clone(), us(config.lease) / 1000);
        let commands: Commands = Arc::default();
        let mut rng = StdRng::seed_from_u64(config.seed);
        let nodes = (0..config.workers)
            .map(|w| Node {
                skew: rng.random_range(0..=us(config.commit_jitter)),
                worker: None,
                incarnation: 0,
                persist_tail: 0,
                restart_pending: false,
                directory: directory.path().join(format!("w{w}")),
            })
            .collect();
        let sessions = (0..config.sessions)
            .map(|s| DprSession::new(s as u64, 0, config.window.max(1)))
            .collect();
        let oracles = (0..config.sessions)
            .map(|_| SessionOracle::default())
            .collect();
        let mut sim = Self {
            config,
            rng,
            queue: EventQueue::default(),
            raw_store,
            store,
            finder,
            hybrid,
            manager,
            clock,
            commands,
            nodes,
            sessions,
            oracles,
            checks: Vec::new(),
            report: SimReport::default(),
            graph_sums: (0.0, 0.0),
            last_cut: None,
            _directory: directory,
        };
        for w in 0..sim.config.workers {
            let control = Arc::new(Control {
                worker: w,
                sink: Arc::clone(&sim.commands),
            });
            sim.manager.attach(w as WorkerId, control);
            sim.start_worker(w)?;
        }
        sim.schedule_initial();
        Ok(sim)
    }

    fn schedule_initial(&mut self) {
        let c = &self.config;
        let (think, poll) = (us(c.think).max(1), us(c.poll_interval).max(1));
        for s in 0..c.sessions {
            let first_issue = self.rng.random_range(0..think);
            let first_poll = self.rng.random_range(0..poll);
            self.queue.at(first_issue, Event::Issue(s));
            self.queue.at(first_poll, Event::Poll(s));
        }
        self.queue.at(us(c.refresh_interval), Event::Refresh);
        self.queue.at(us(c.manager_interval), Event::ManagerCheck);
        for failure in c.failures.clone() {
            self.queue.at(us(failure.at), Event::Fail(failure.worker));
        }
    }

    /// (Re)starts worker `w` from its directory and starts its timers.
    fn start_worker(&mut self, w: usize) -> Result<(), SimError> {
        let now_ms = self.queue.now() / 1000;
        let object = SimObject::open(&self.nodes[w].directory)?;
        let max_dependencies = self.config.workers as u32 + 1;
        let mut worker = DprWorker::start(
            w as WorkerId,
            object,
            Arc::clone(&self.finder),
            max_dependencies,
            now_ms,
        )?;
        if self.config.relabel {
            worker.set_fast_forward(FastForward::Relabel);
        }
        self.queue.record(worker.version());
        let node = &mut self.nodes[w];
        node.incarnation += 1;
        node.worker = Some(worker);
        node.restart_pending = false;
        let incarnation = node.incarnation;
        let commit = self
            .rng
            .random_range(0..us(self.config.commit_interval).max(1));
        let heartbeat = self
            .rng
            .random_range(0..us(self.config.heartbeat_interval).max(1));
        self.queue.after(commit, Event::Commit(w, incarnation));
        self.queue
            .after(heartbeat, Event::Heartbeat(w, incarnation));
        Ok(())
    }

    fn crash(&mut self, w: usize) {
        let node = &mut self.nodes[w];
        // Dropping the map joins its persister; un-reported commits are simply never reported.
        node.worker = None;
        node.incarnation += 1;
    }

    fn net(&mut self) -> Micros {
        self.config.network.sample(&mut self.rng)
    }

    /// Schedules the completion of the commits worker `w` made since the last call.
    fn schedule_persistence(&mut self, w: usize) {
        let Some(worker) = self.nodes[w].worker.as_mut() else {
            return;
        };
        let fresh = worker.state_object_mut().take_fresh_commits();
        for id in fresh {
            let at = (self.queue.now() + self.config.persist.sample(&mut self.rng))
                .max(self.nodes[w].persist_tail);
            self.nodes[w].persist_tail = at;
            self.queue
                .at(at, Event::Persisted(w, self.nodes[w].incarnation, id));
        }
    }

    fn live(&mut self, w: usize, incarnation: u64) -> Option<&mut DprWorker<SimObject>> {
        let node = &mut self.nodes[w];
        if node.incarnation == incarnation {
            node.worker.as_mut()
        } else {
            None
        }
    }

    pub(crate) fn handle(&mut self, event: Event) -> Result<(), SimError> {
        match event {
            Event::Issue(s) => self.issue(s)?,
            Event::Deliver(request) => self.deliver(*request)?,
            Event::Respond(s, ticket, response) => {
                self.queue.record(1);
                let start = ticket.sequences.start;
                match self.sessions[s].complete_batch(ticket, &response)? {
                    Completion::Executed { version } => {
                        self.queue.record(version);
                        self.oracles[s].completed(start, self.queue.executed());
                    }
                    Completion::Ignored => {}
                    Completion::RollbackRequired { .. } => self.handle_rollback(s)?,
                }
            }
            Event::Commit(w, incarnation) => self.commit(w, incarnation)?,
            Event::Persisted(w, incarnation, id) => {
                if let Some(worker) = self.live(w, incarnation) {
                    let done = worker.state_object_mut().complete(id)?;
                    let errors = worker.persist_errors();
                    if let Some(error) = errors.first() {
                        return Err(SimError::Persist(error.clone()));
                    }
                    self.queue.record(u64::from(done));
                }
            }
            Event::Refresh => self.refresh()?,
            Event::Poll(s) => {
                self.poll(s)?;
                self.queue
                    .after(us(self.config.poll_interval).max(1), Event::Poll(s));
            }
            Event::Heartbeat(w, incarnation) => {
                if self.live(w, incarnation).is_some() {
                    self.manager.heartbeat(w as WorkerId)?;
                    let next = us(self.config.heartbeat_interval).max(1);
                    self.queue.after(next, Event::Heartbeat(w, incarnation));
                }
            }
            Event::ManagerCheck => self.manager_check()?,
            Event::Fail(w) => {
                self.queue.record(w as u64);
                self.crash(w);
            }
            Event::Restore(w, command) => self.restore(w, command)?,
            Event::Restart(w) => {
                if self.nodes[w].worker.is_none() {
                    self.start_worker(w)?;
                }
                self.run_checks();
            }
        }
        Ok(())
    }

    /// A worker's commit timer (see [`CommitMode`]).
    fn commit(&mut self, w: usize, incarnation: u64) -> Result<(), SimError> {
        let mode = self.config.commit_mode;
        let interval = us(self.config.commit_interval).max(1);
        let skew = self.nodes[w].skew;
        let now = self.queue.now();
        let Some(worker) = self.live(w, incarnation) else {
            return Ok(());
        };
        let sealed = match mode {
            CommitMode::Plain => Some(worker.commit()?),
            CommitMode::CatchUp => Some(worker.commit_with_catch_up()?),
            CommitMode::AlignedSlots => {
                let slot = (now + skew) / interval;
                if worker.version() < slot {
                    Some(worker.commit_to(slot)?)
                } else {
                    None
                }
            }
        };
        self.queue.record(sealed.unwrap_or(0));
        self.schedule_persistence(w);
        let next = match mode {
            CommitMode::AlignedSlots => interval - (now + skew) % interval,
            _ => interval + self.rng.random_range(0..=us(self.config.commit_jitter)),
        };
        self.queue.after(next, Event::Commit(w, incarnation));
        Ok(())
    }

    fn issue(&mut self, s: usize) -> Result<(), SimError> {
        let now = self.queue.now();
        if now >= us(self.config.duration) {
            return Ok(());
        }
        let think = us(self.config.think).max(1);
        let next = think / 2 + self.rng.random_range(0..think);
        self.queue.after(next, Event::Issue(s));
        let w = self.rng.random_range(0..self.config.workers);
        let count = self.config.batch.max(1);
        let (header, ticket) = match self.sessions[s].issue_batch(w as WorkerId, count as u64) {
            Ok(issued) => issued,
            Err(SessionError::WindowFull { .. }) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        self.oracles[s].issued(&ticket.sequences, w, now, self.queue.executed());
        self.report.ops_issued += count as u64;
        let operations = (ticket.sequences.start..ticket.sequences.end)
            .map(|sequence| MapOperation::Put(key(s, sequence), vec![1]))
            .collect();
        self.queue.record(ticket.sequences.start);
        let delay = self.net();
        let request = Request {
            session: s,
            worker: w,
            header,
            ticket,
            operations,
        };
        self.queue.after(delay, Event::Deliver(Box::new(request)));
        Ok(())
    }

    fn deliver(&mut self, request: Request) -> Result<(), SimError> {
        let Some(worker) = self.nodes[request.worker].worker.as_mut() else {
            self.queue.record(0);
            return Ok(());
        };
        let response = match worker.process_batch(&request.header, &request.operations)? {
            BatchOutcome::Executed { response, .. } | BatchOutcome::Rejected { response } => {
                response
            }
        };
        self.schedule_persistence(request.worker);
        self.queue.record(response.version);
        self.queue.record(response.world_line);
        let delay = self.net();
        self.queue.after(
            delay,
            Event::Respond(request.session, request.ticket, response),
        );
        Ok(())
    }

    fn refresh(&mut self) -> Result<(), SimError> {
        let state = self.finder.refresh()?;
        self.queue
            .after(us(self.config.refresh_interval).max(1), Event::Refresh);
        let load = &mut self.report.finder_load;
        load.refreshes += 1;
        let (mut nodes, edges) = self.store.last_graph();
        if let Some(hybrid) = &self.hybrid {
            nodes = hybrid.graph_vertex_count() as u64;
        }
        load.graph_nodes_max = load.graph_nodes_max.max(nodes);
        load.graph_edges_max = load.graph_edges_max.max(edges);
        self.graph_sums.0 += nodes as f64;
        self.graph_sums.1 += edges as f64;
        let changed = self
            .last_cut
            .as_ref()
            .is_none_or(|(wl, cut)| *wl != state.world_line || *cut != state.cut);
        if changed {
            let versions = (0..self.config.workers).map(|w| state.cut_version(w as WorkerId));
            let (min, max) = versions.fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));
            self.queue.record(min);
            self.report.cut_timeline.push(CutSample {
                at_us: self.queue.now(),
                world_line: state.world_line,
                min,
                max,
            });
            self.last_cut = Some((state.world_line, state.cut.clone()));
            for node in &mut self.nodes {
                if let Some(worker) = node.worker.as_mut() {
                    worker.prune(&state)?;
                }
            }
        }
        Ok(())
    }

    /// One commit-point poll of session `s`.
    pub(crate) fn poll(&mut self, s: usize) -> Result<(), SimError> {
        let state = self.finder.cluster_state()?;
        match self.sessions[s].commit_point(&state) {
            Ok(point) => {
                self.queue.record(point.until_sequence);
                let now = self.queue.now();
                for issued_at in self.oracles[s].commit_point(&point) {
                    self.report
                        .commit_latency_ms
                        .push((now - issued_at) as f64 / 1000.0);
                }
            }
            Err(SessionError::RollbackPending { .. }) => self.handle_rollback(s)?,
            Err(error) => return Err(error.into()),
        }
        Ok(())
    }

    fn manager_check(&mut self) -> Result<(), SimError> {
        self.clock.set_ms(self.queue.now() / 1000);
        let outcome = self.manager.check()?;
        self.queue.record(match &outcome {
            CheckOutcome::Healthy => 1,
            CheckOutcome::RollbackStarted { world_line, .. } => 100 + world_line,
            CheckOutcome::Recovering { waiting_for } => 1000 + waiting_for.len() as u64,
            CheckOutcome::RecoveryFinished { world_line } => 10_000 + world_line,
        });
        let commands =
            std::mem::take(&mut *self.commands.lock().unwrap_or_else(|e| e.into_inner()));
        for (w, command) in commands {
            let delay = self.net();
            self.queue.after(delay, Event::Restore(w, command));
        }
        self.queue
            .after(us(self.config.manager_interval).max(1), Event::ManagerCheck);
        Ok(())
    }

    fn restore(&mut self, w: usize, command: RestoreCommand) -> Result<(), SimError> {
        if command.failed {
            // The manager failed it (its lease expired): whatever its state, it restarts.
            if self.nodes[w].worker.is_some() {
                self.crash(w);
            }
            if !self.nodes[w].restart_pending {
                self.nodes[w].restart_pending = true;
                self.queue
                    .after(us(self.config.restart_delay), Event::Restart(w));
            }
            return Ok(());
        }
        if let Some(worker) = self.nodes[w].worker.as_mut() {
            worker.restore_to(&ClusterState {
                world_line: command.world_line,
                cut: command.cut,
                recovering: true,
            })?;
            self.queue.record(worker.version());
        }
        self.run_checks();
        Ok(())
    }

    /// Session `s` learned that the world-line moved: take its surviving prefix.
    pub(crate) fn handle_rollback(&mut self, s: usize) -> Result<(), SimError> {
        let from = self.sessions[s].world_line();
        let target = self.finder.rollback_target(from)?;
        if target.world_line <= from {
            return Ok(());
        }
        let issued_below = self.sessions[s].next_sequence();
        let prefix = self.sessions[s].handle_rollback(&target)?;
        let count = |ranges: &[prefixkv_dpr::session::SequenceRange]| {
            ranges.iter().map(|r| r.end - r.start).sum::<u64>()
        };
        self.report.ops_lost += count(&prefix.lost);
        self.report.ops_rejected += count(&prefix.rejected);
        self.report.ops_uncertain += count(&prefix.uncertain);
        self.report.session_rollbacks += 1;
        self.queue.record(prefix.until_sequence);
        let check = self.oracles[s].rollback(s, issued_below, prefix);
        self.checks.push(check);
        self.run_checks();
        Ok(())
    }

    /// Whether every worker is up and not behind `world_line`.
    fn checkable(&self, world_line: u64) -> bool {
        self.nodes.iter().all(|n| {
            n.worker
                .as_ref()
                .is_some_and(|w| w.world_line() >= world_line)
        })
    }

    fn present(&self, s: usize, sequence: u64) -> bool {
        let w = self.oracles[s].worker_of(sequence);
        self.nodes[w]
            .worker
            .as_ref()
            .expect("checked only when every worker is up")
            .state_object()
            .map()
            .entries()
            .contains_key(&key(s, sequence))
    }

    /// Runs every deferred rollback check whose workers are ready.
    pub(crate) fn run_checks(&mut self) {
        let checks = std::mem::take(&mut self.checks);
        for check in checks {
            if !self.checkable(check.world_line) {
                self.checks.push(check);
                continue;
            }
            if self.config.tamper.is_some() && !self.report.tampered {
                self.tamper(check.session);
            }
            let s = check.session;
            let present = |sequence| self.present(s, sequence);
            let mut violations = check.run(&present);
            violations.extend(self.oracles[s].check_durable(s, &present));
            self.report.violations.extend(violations);
        }
    }

    /// [`crate::Tamper::EraseCommittedOperation`]: deletes session `s`'s first committed operation.
    fn tamper(&mut self, s: usize) {
        let Some(sequence) = self.oracles[s].first_committed() else {
            return;
        };
        let w = self.oracles[s].worker_of(sequence);
        let worker = self.nodes[w].worker.as_mut().expect("checkable");
        let version = worker.version();
        use prefixkv_dpr::StateObject;
        let erased = worker
            .state_object_mut()
            .map_mut()
            .execute(version, &[MapOperation::Delete(key(s, sequence))]);
        self.report.tampered = matches!(erased.as_deref(), Ok([Some(_)]));
    }

    /// Whether the load stopped mattering: every worker up and no recovery under way.
    pub(crate) fn settled(&self) -> Result<bool, SimError> {
        Ok(self.nodes.iter().all(|n| n.worker.is_some())
            && !self.raw_store.cluster_state()?.recovering)
    }

    /// After the loop: every session learns of the last rollback and reads a last commit point;
    /// every deferred check runs; every committed operation must be present.
    pub(crate) fn finish(mut self) -> Result<SimReport, SimError> {
        self.refresh()?;
        for s in 0..self.sessions.len() {
            self.handle_rollback(s)?;
            self.poll(s)?;
        }
        self.run_checks();
        if !self.checks.is_empty() {
            self.report
                .violations
                .push(format!("{} rollback checks never ran", self.checks.len()));
        }
        if self.nodes.iter().all(|n| n.worker.is_some()) {
            for s in 0..self.sessions.len() {
                let present = |sequence| self.present(s, sequence);
                let violations = self.oracles[s].check_durable(s, &present);
                self.report.violations.extend(violations);
            }
        } else {
            self.report
                .violations
                .push("a worker is still down at the end".into());
        }
        let mut report = std::mem::take(&mut self.report);
        report.ops_committed = self.oracles.iter().map(SessionOracle::committed).sum();
        report.world_line = self.raw_store.cluster_state()?.world_line;
        let load = &mut report.finder_load;
        let refreshes = load.refreshes.max(1) as f64;
        load.graph_nodes_mean = self.graph_sums.0 / refreshes;
        load.graph_edges_mean = self.graph_sums.1 / refreshes;
        load.per_method = self.store.counts();
        (load.metadata_reads, load.metadata_writes) = self.store.reads_writes();
        report.commit_latency_ms.sort_by(f64::total_cmp);
        report.events = self.queue.executed();
        report.trace_digest = self.queue.digest();
        report.virtual_seconds = self.config.duration.as_secs_f64();
        report.virtual_seconds_total = self.queue.now() as f64 / 1e6;
        report.verified = report.violations.is_empty();
        Ok(report)
    }
}
