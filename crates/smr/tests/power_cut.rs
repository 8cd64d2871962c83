//! Power cuts and disk faults for the Raft log and the checkpoints of a replica, on the simulated
//! disk (`prefixkv_storage::SimDisk`), checked against what the client side (openraft's side)
//! recorded: what each call returned and which append callbacks fired, never what the store
//! reports about itself.
//!
//! The log (`LogStore` on `SimDisk`): each seed runs three generations. A generation opens the
//! store, checks it (after the first), arms a power cut at a seeded random call, then appends
//! batches (several in flight before the test waits for their callbacks), truncates a suffix
//! (Raft's conflicting entries; a new term follows), purges a prefix (sometimes beyond the last
//! entry, as a snapshot install does), saves votes and commit hints, until the disk dies; the
//! crash then keeps, drops or tears unsynced writes and loses unsynced directory entries (seeded).
//! After reopening:
//! - every recovered entry is exactly the newest one issued at its index (nothing invented past
//!   the last append, no mixture), and the entries are dense from the purge point on;
//! - every entry whose callback fired is there, unless an acknowledged purge or truncation removed
//!   it (or the one call cut short was a purge or truncation that may have);
//! - the purge point is the last acknowledged one, or the one cut short;
//! - the vote is the last acknowledged one, or the one cut short;
//! - the commit hint is absent or names a recovered entry (or the purge point).
//!
//! Checkpoints (`Checkpoints` on `SimDisk`, recovered by `StateMachine::open`): each seed publishes
//! a few checkpoints of a changing state, then arms a cut and writes more until the disk dies
//! (usually in the middle of one); two generations. Recovery must load the newest acknowledged
//! checkpoint (`finish` returned `Ok`) or a newer one that was being published, and the recovered
//! state must equal exactly what the client wrote for that index.
//!
//! `SMR_POWER_CUT_SEEDS` (default 200) sets the seeds of each of the two; `SMR_POWER_CUT_SEED=n`
//! replays one seed of both. Fault tests: `ENOSPC` in the middle of a checkpoint, `EIO` from a
//! log sync (fail-stop). Tamper tests show both checks fail when an acknowledged entry or the
//! newest acknowledged checkpoint is lost.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder, Vote};
use prefixkv_smr::checkpoint::{CheckpointHeader, Checkpoints};
use prefixkv_smr::log_store::{LogStore, LogStoreConfig, LogSync};
use prefixkv_smr::state_machine::{StateMachine, StateMachineConfig};
use prefixkv_smr::types::{Command, Entry, LogId, NodeId, SnapshotMeta};
use prefixkv_smr::StateModel;
use prefixkv_storage::{CrashMode, Fault, FaultError, FaultOp, SimDisk};
use prefixkv_testkit::rng::{env_count, Rng};

const LOG_DIR: &str = "/replica/log";
const CHECKPOINT_DIR: &str = "/replica/checkpoints";
/// The longest the test waits for an append callback (it fires within milliseconds).
const WAIT: Duration = Duration::from_secs(30);

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// Runs `run_seed` for the seeds `SMR_POWER_CUT_SEEDS` asks for (or the one of
/// `SMR_POWER_CUT_SEED`), naming a failing seed.
fn for_each_seed(what: &str, run_seed: impl Fn(u64)) {
    if let Some(seed) = std::env::var("SMR_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return run_seed(seed);
    }
    let seeds = env_count("SMR_POWER_CUT_SEEDS", 200);
    for seed in 0..seeds {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed)));
        if let Err(panic) = outcome {
            eprintln!("{what}: seed {seed} failed (SMR_POWER_CUT_SEED={seed} replays it)");
            std::panic::resume_unwind(panic);
        }
    }
    eprintln!("{what}: {seeds} seeds");
}

// ---------------------------------------------------------------------------------------------
// The Raft log.

fn open_log(disk: &SimDisk) -> anyhow::Result<LogStore> {
    LogStore::open_with(
        Path::new(LOG_DIR),
        LogStoreConfig {
            disk: disk.as_disk(),
            segment_bytes: 4096,
            ..LogStoreConfig::default()
        },
    )
}

fn entry(rng: &mut Rng, term: u64, index: u64) -> Entry {
    let length = rng.below(300) as usize;
    let value = (0..length).map(|i| (i as u64 * 31 + index) as u8).collect();
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Command::Set {
            key: format!("k{index}").into_bytes(),
            value,
        }),
    }
}

/// What openraft's side knows about the log.
#[derive(Default)]
struct LogClient {
    /// The newest entry issued at each index: the only one a correct log may hold there.
    issued: BTreeMap<u64, Entry>,
    /// Entries whose callback fired `Ok`, minus those an acknowledged truncation or purge removed.
    acked: BTreeMap<u64, Entry>,
    /// An unacknowledged truncation (cut short) from this index may have removed entries.
    maybe_truncated_from: Option<u64>,
    purged: Option<LogId>,
    /// A purge that was cut short.
    purge_attempted: Option<LogId>,
    vote: Option<Vote<NodeId>>,
    /// A vote whose save was cut short.
    vote_attempted: Option<Vote<NodeId>>,
    term: u64,
    next_index: u64,
}

impl LogClient {
    /// Appends 1..=3 batches, then waits for their callbacks. `false` once the log failed.
    fn append_batches(&mut self, store: &mut LogStore, rng: &mut Rng) -> bool {
        let (sender, receiver) = mpsc::channel();
        let mut batches = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let count = 1 + rng.below(4);
            let entries: Vec<Entry> = (0..count)
                .map(|i| entry(rng, self.term, self.next_index + i))
                .collect();
            self.next_index += count;
            for entry in &entries {
                self.issued.insert(entry.log_id.index, entry.clone());
            }
            let sender = sender.clone();
            let batch = batches.len();
            let queued = store.append_entries(
                entries.clone(),
                Box::new(move |outcome| {
                    let _ = sender.send((batch, outcome.is_ok()));
                }),
            );
            if queued.is_err() {
                return false;
            }
            batches.push(entries);
        }
        let mut all_ok = true;
        for _ in 0..batches.len() {
            let (batch, ok) = receiver
                .recv_timeout(WAIT)
                .expect("an append callback did not fire in time");
            if ok {
                for entry in &batches[batch] {
                    self.acked.insert(entry.log_id.index, entry.clone());
                }
            } else {
                all_ok = false;
            }
        }
        all_ok
    }

    fn truncate(&mut self, store: &mut LogStore, rng: &mut Rng) -> bool {
        let Some((&last, _)) = self.issued.last_key_value() else {
            return true;
        };
        let low = self.purged.map_or(0, |p| p.index + 1);
        if last < low {
            return true;
        }
        let since = low + rng.below(last - low + 1);
        if store.truncate_since(since).is_err() {
            self.maybe_truncated_from = Some(since);
            return false;
        }
        self.issued.split_off(&since);
        self.acked.split_off(&since);
        // The entries that replace them come from a newer leader.
        self.term += 1;
        self.next_index = since;
        true
    }

    fn purge(&mut self, store: &mut LogStore, rng: &mut Rng) -> bool {
        let upto = if rng.chance(1, 4) || self.acked.is_empty() {
            // Beyond the end: a snapshot installed ahead of the log.
            let index = self.next_index + rng.below(4);
            log_id(self.term, index)
        } else {
            let indexes: Vec<u64> = self.acked.keys().copied().collect();
            let index = indexes[rng.below(indexes.len() as u64) as usize];
            self.acked[&index].log_id
        };
        if self.purged.is_some_and(|p| p.index >= upto.index) {
            return true;
        }
        if store.purge_upto(upto).is_err() {
            self.purge_attempted = Some(upto);
            return false;
        }
        self.purged = Some(upto);
        self.issued = self.issued.split_off(&(upto.index + 1));
        self.acked = self.acked.split_off(&(upto.index + 1));
        self.next_index = self.next_index.max(upto.index + 1);
        true
    }

    fn save_vote(&mut self, store: &mut LogStore) -> bool {
        let term = self.vote.map_or(1, |v| v.leader_id.term + 1);
        let vote = Vote::new(term, 1);
        if store.write_vote(&vote).is_err() {
            self.vote_attempted = Some(vote);
            return false;
        }
        self.vote = Some(vote);
        true
    }

    /// One generation: operations until the disk dies (or `steps` ran).
    fn run(&mut self, store: &mut LogStore, rng: &mut Rng, steps: u64) {
        for _ in 0..steps {
            let alive = match rng.below(20) {
                0..=11 => self.append_batches(store, rng),
                12 | 13 => self.truncate(store, rng),
                14 | 15 => self.purge(store, rng),
                16 | 17 => self.save_vote(store),
                _ => {
                    if let Some((_, entry)) = self.acked.last_key_value() {
                        store.write_committed(Some(entry.log_id));
                    }
                    true
                }
            };
            if !alive {
                return;
            }
        }
    }

    /// Checks the reopened store against what this side was told, then takes what it holds as
    /// the starting point of the next generation.
    fn check_and_rebase(&mut self, store: &LogStore, seed: u64) {
        let state = store.log_state();
        let purged = state.last_purged_log_id;
        let purge_ok = purged == self.purged
            || (purged == self.purge_attempted && self.purge_attempted.is_some());
        assert!(
            purge_ok,
            "seed {seed}: purge point {purged:?}, but the acknowledged one is {:?} (and {:?} was \
             cut short)",
            self.purged, self.purge_attempted
        );
        let entries = store.entries(..);
        let mut expected_index = purged.map_or(0, |p| p.index + 1);
        for entry in &entries {
            let index = entry.log_id.index;
            assert_eq!(index, expected_index, "seed {seed}: the log is not dense");
            expected_index += 1;
            assert_eq!(
                self.issued.get(&index),
                Some(entry),
                "seed {seed}: index {index} holds an entry that was never the newest appended there"
            );
        }
        let recovered: BTreeMap<u64, &Entry> =
            entries.iter().map(|e| (e.log_id.index, e)).collect();
        for (index, entry) in &self.acked {
            let purged_away = purged.is_some_and(|p| *index <= p.index);
            let truncated_away = self.maybe_truncated_from.is_some_and(|t| *index >= t);
            if purged_away || truncated_away {
                continue;
            }
            assert_eq!(
                recovered.get(index),
                Some(&entry),
                "seed {seed}: acknowledged entry {} is lost",
                entry.log_id
            );
        }
        let vote = store.vote();
        assert!(
            vote == self.vote || (vote == self.vote_attempted && vote.is_some()),
            "seed {seed}: vote {vote:?}, but the last acknowledged one is {:?} (and {:?} was cut short)",
            self.vote,
            self.vote_attempted
        );
        if let Some(hint) = store.committed() {
            assert!(
                Some(hint) == purged || recovered.get(&hint.index).map(|e| e.log_id) == Some(hint),
                "seed {seed}: the commit hint {hint} names no recovered entry"
            );
        }
        // What survived is durable now: the next generation starts from it.
        self.issued = entries
            .iter()
            .map(|e| (e.log_id.index, e.clone()))
            .collect();
        self.acked = self.issued.clone();
        self.maybe_truncated_from = None;
        self.purged = purged;
        self.purge_attempted = None;
        self.vote = vote;
        self.vote_attempted = None;
        let last_term = entries.last().map_or(0, |e| e.log_id.leader_id.term);
        self.term = self.term.max(last_term) + 1;
        self.next_index = expected_index;
    }
}

fn run_log_seed(seed: u64) {
    let disk = SimDisk::new(seed);
    let mut rng = Rng::new(seed);
    let mut client = LogClient {
        term: 1,
        ..LogClient::default()
    };
    for generation in 0..3 {
        let mut store = open_log(&disk).unwrap_or_else(|e| {
            panic!("seed {seed} generation {generation}: reopen failed: {e:#}")
        });
        if generation > 0 {
            client.check_and_rebase(&store, seed);
        }
        disk.cut_after(rng.below(400));
        client.run(&mut store, &mut rng, 150);
        disk.kill();
        drop(store);
        disk.crash(CrashMode::Random);
    }
}

#[test]
fn log_power_cuts_lose_only_unacknowledged_writes() {
    for_each_seed("smr log power cuts", run_log_seed);
}

/// `EIO` from the sync of an append: its callback reports the error, the store refuses every
/// later write (append, vote, truncation, purge) instead of carrying on, and after a crash the
/// acknowledged entries are there and nothing after the failed one.
#[test]
fn eio_from_a_log_sync_is_fail_stop() {
    let disk = SimDisk::new(21);
    let mut rng = Rng::new(21);
    let mut client = LogClient {
        term: 1,
        ..LogClient::default()
    };
    let mut store = open_log(&disk).unwrap();
    while client.next_index < 20 {
        assert!(client.append_batches(&mut store, &mut rng));
    }
    let acknowledged = client.acked.clone();
    disk.inject(Fault::once(FaultOp::SyncFile, ".oplog", FaultError::Io));
    let (sender, receiver) = mpsc::channel();
    let failed = entry(&mut rng, 1, client.next_index);
    store
        .append_entries(
            vec![failed.clone()],
            Box::new(move |outcome| {
                let _ = sender.send(outcome);
            }),
        )
        .unwrap();
    let error = receiver.recv_timeout(WAIT).unwrap().unwrap_err();
    assert!(error.to_string().contains("Input/output error"), "{error}");
    assert_eq!(disk.faults_hit(), 1);
    let next = entry(&mut rng, 1, client.next_index + 1);
    let refused = store
        .append_entries(vec![next], Box::new(|_| {}))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("accepts no more"), "{refused}");
    assert!(store.write_vote(&Vote::new(9, 1)).is_err());
    assert!(store.truncate_since(5).is_err());
    assert!(store.purge_upto(log_id(1, 3)).is_err());
    drop(store);
    disk.crash(CrashMode::Random);
    let store = open_log(&disk).unwrap();
    let recovered = store.entries(..);
    let expected: Vec<Entry> = acknowledged.values().cloned().collect();
    assert_eq!(&recovered[..expected.len()], &expected[..]);
    assert!(
        recovered.len() == expected.len()
            || (recovered.len() == expected.len() + 1 && recovered.last() == Some(&failed)),
        "nothing after the failed entry"
    );
    assert_eq!(store.vote(), None, "the refused vote was never written");
}

/// The log check is not vacuous: an entry whose callback fired and that a test-only tamper then
/// removes from the disk (its frame's CRC overwritten, so the reopened log drops it as a torn
/// tail) fails the check.
#[test]
fn the_log_check_catches_a_lost_acknowledged_entry() {
    let disk = SimDisk::new(23);
    let mut rng = Rng::new(23);
    let mut client = LogClient {
        term: 1,
        ..LogClient::default()
    };
    let mut store = open_log(&disk).unwrap();
    client.run(&mut store, &mut rng, 40);
    assert!(client.append_batches(&mut store, &mut rng));
    let (_, last) = client.acked.last_key_value().unwrap();
    let frame = 16 + postcard::to_allocvec(last).unwrap().len();
    let segment = store.segment_paths().pop().unwrap();
    drop(store);
    disk.crash(CrashMode::KeepAll);
    let bytes = disk.read_file(&segment).unwrap();
    disk.corrupt(&segment, (bytes.len() - frame) as u64 + 4, &[0xFF; 4])
        .unwrap();
    let store = open_log(&disk).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        client.check_and_rebase(&store, 23)
    }));
    assert!(
        caught.is_err(),
        "a lost acknowledged entry must fail the check"
    );
}

/// Appends `count` single-entry batches from `next_index` on, each waited for; returns whether
/// every callback reported success.
fn append_acknowledged(store: &mut LogStore, rng: &mut Rng, next_index: u64, count: u64) -> bool {
    let (sender, receiver) = mpsc::channel();
    for index in next_index..next_index + count {
        let sender = sender.clone();
        store
            .append_entries(
                vec![entry(rng, 1, index)],
                Box::new(move |outcome| {
                    let _ = sender.send(outcome.is_ok());
                }),
            )
            .unwrap();
    }
    (0..count).all(|_| receiver.recv_timeout(WAIT).unwrap())
}

/// The last index a reopened log holds.
fn last_index(store: &LogStore) -> Option<u64> {
    store.log_state().last_log_id.map(|id| id.index)
}

/// `--log-sync off` is honoured: entries are reported durable without a sync, so a process
/// crash keeps them but a power cut that keeps only synced data loses them. `on` (the default)
/// loses none of them to the same cut.
#[test]
fn log_sync_off_acknowledges_before_syncing_and_on_does_not() {
    for sync in [LogSync::Off, LogSync::On] {
        let disk = SimDisk::new(31);
        let mut rng = Rng::new(31);
        let open = || {
            LogStore::open_with(
                Path::new(LOG_DIR),
                LogStoreConfig {
                    disk: disk.as_disk(),
                    segment_bytes: 1 << 20, // no segment roll (a roll syncs)
                    sync,
                },
            )
            .unwrap()
        };
        let mut store = open();
        assert!(append_acknowledged(&mut store, &mut rng, 0, 20));
        drop(store);
        // A process crash: the page cache survives, every acknowledged entry is there.
        disk.crash(CrashMode::KeepAll);
        let mut store = open();
        assert_eq!(last_index(&store), Some(19), "{sync:?}: process crash");
        assert!(append_acknowledged(&mut store, &mut rng, 20, 20));
        disk.kill();
        drop(store);
        // A power cut: only synced bytes survive.
        disk.crash(CrashMode::DropAll);
        let store = open();
        match sync {
            LogSync::On => assert_eq!(last_index(&store), Some(39), "on: power cut"),
            LogSync::Off => assert_eq!(
                last_index(&store),
                Some(19),
                "off: the 20 entries acknowledged since the last sync are lost to a power cut"
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn header(index: u64) -> CheckpointHeader {
    CheckpointHeader {
        meta: SnapshotMeta {
            last_log_id: Some(log_id(1, index)),
            last_membership: Default::default(),
            snapshot_id: format!("s{index}"),
        },
        model: StateModel::Blocking.name().into(),
    }
}

/// Applies a few random commands to `state`; returns how many (the log index advances by that).
fn mutate(state: &mut State, rng: &mut Rng) -> u64 {
    let commands = 1 + rng.below(40);
    for _ in 0..commands {
        let key = format!("key-{}", rng.below(150)).into_bytes();
        if rng.chance(1, 6) {
            state.remove(&key);
        } else {
            let length = rng.below(120) as usize;
            let byte = rng.below(256) as u8;
            state.insert(key, vec![byte; length]);
        }
    }
    commands
}

/// Writes `state` as the checkpoint at `index`, as the state machine does (then keeps two).
/// `Ok` means `finish` returned `Ok`: the checkpoint is acknowledged.
fn write_checkpoint(checkpoints: &Checkpoints, index: u64, state: &State) -> std::io::Result<()> {
    let mut writer = checkpoints.begin(&header(index))?;
    for (key, value) in state {
        writer.push(key, value)?;
    }
    writer.finish()?;
    Ok(())
}

fn state_machine_config(disk: &SimDisk) -> StateMachineConfig {
    let mut config = StateMachineConfig::new(StateModel::Blocking, 0);
    config.disk = disk.as_disk();
    config
}

/// Opens the state machine (its recovery); returns the index it loaded, its state as the
/// workload's keys read it, and its number of keys (which makes the comparison exact).
fn recover(disk: &SimDisk) -> anyhow::Result<(Option<u64>, State, usize)> {
    let (requests, _) = tokio::sync::mpsc::unbounded_channel();
    let mut state_machine = StateMachine::open(
        Path::new(CHECKPOINT_DIR),
        state_machine_config(disk),
        requests,
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let (applied, _) = runtime.block_on(state_machine.applied_state())?;
    let shared = state_machine.shared();
    let state = (0..150)
        .filter_map(|k| {
            let key = format!("key-{k}").into_bytes();
            shared.store.get(&key).map(|value| (key, value.to_vec()))
        })
        .collect();
    Ok((applied.map(|id| id.index), state, shared.store.len()))
}

/// What the client wrote: the state at each index it asked to checkpoint.
#[derive(Default)]
struct CheckpointClient {
    written: BTreeMap<u64, State>,
    /// The newest checkpoint whose `finish` returned `Ok`.
    newest_acked: Option<u64>,
}

impl CheckpointClient {
    fn check(&self, recovered: &(Option<u64>, State, usize), seed: u64) {
        let (index, state, len) = recovered;
        if let Some(acked) = self.newest_acked {
            assert!(
                index.is_some_and(|i| i >= acked),
                "seed {seed}: recovered checkpoint {index:?}, but {acked} was acknowledged"
            );
        }
        let Some(index) = index else {
            assert_eq!(*len, 0, "seed {seed}: no checkpoint, yet a state");
            return;
        };
        let written = self.written.get(index).unwrap_or_else(|| {
            panic!("seed {seed}: recovered checkpoint {index}, which was never written")
        });
        assert!(
            state == written && *len == written.len(),
            "seed {seed}: the state recovered from checkpoint {index} is not the one written there"
        );
    }
}

fn run_checkpoint_seed(seed: u64) {
    let disk = SimDisk::new(seed);
    let mut rng = Rng::new(seed);
    let mut client = CheckpointClient::default();
    let mut state = State::new();
    let mut index = 0;
    for generation in 0..2 {
        if generation > 0 {
            let recovered = recover(&disk).unwrap_or_else(|e| {
                panic!("seed {seed} generation {generation}: recovery failed: {e:#}")
            });
            client.check(&recovered, seed);
            state = recovered.1;
            client.newest_acked = recovered.0;
        }
        let checkpoints = Checkpoints::open(disk.as_disk(), Path::new(CHECKPOINT_DIR))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // A few acknowledged checkpoints, then a cut somewhere in the next ones.
        let before_cut = 1 + rng.below(3);
        for written in 0.. {
            if written == before_cut {
                disk.cut_after(rng.below(25));
            }
            index += mutate(&mut state, &mut rng);
            client.written.insert(index, state.clone());
            let published = write_checkpoint(&checkpoints, index, &state)
                .and_then(|()| {
                    client.newest_acked = Some(index);
                    checkpoints.retain(2)
                })
                .is_ok();
            if !published || written > before_cut + 5 {
                break;
            }
        }
        disk.kill();
        drop(checkpoints);
        disk.crash(CrashMode::Random);
    }
    let recovered =
        recover(&disk).unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e:#}"));
    client.check(&recovered, seed);
}

#[test]
fn checkpoint_power_cuts_recover_the_newest_acknowledged_or_newer_never_a_mixture() {
    for_each_seed("smr checkpoint power cuts", run_checkpoint_seed);
}

/// `ENOSPC` in the middle of a checkpoint: a clear error (from the writer, and from the state
/// machine's snapshot builder, which is what openraft sees), the unfinished version is gone, the
/// previous checkpoint loads intact, and once space returns the next checkpoint succeeds.
#[test]
fn no_space_mid_checkpoint_is_a_clear_error_and_keeps_the_previous_one() {
    let disk = SimDisk::new(31);
    let mut rng = Rng::new(31);
    let checkpoints = Checkpoints::open(disk.as_disk(), Path::new(CHECKPOINT_DIR)).unwrap();
    let mut state = State::new();
    mutate(&mut state, &mut rng);
    write_checkpoint(&checkpoints, 100, &state).unwrap();
    let previous = state.clone();
    // Big enough for several chunks: the fault lets the header and the first chunk through.
    let mut big = state.clone();
    for i in 0..3000u32 {
        big.insert(format!("bulk-{i}").into_bytes(), vec![i as u8; 1000]);
    }
    disk.inject(Fault {
        op: FaultOp::Write,
        path_contains: ".tmp/checkpoint".into(),
        skip: 2,
        times: None,
        error: FaultError::NoSpace,
    });
    let error = write_checkpoint(&checkpoints, 200, &big).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::StorageFull, "{error}");
    assert!(
        error.to_string().contains("No space left on device"),
        "{error}"
    );
    assert!(disk.faults_hit() >= 1);
    let published: Vec<u64> = checkpoints
        .published()
        .unwrap()
        .iter()
        .map(|c| c.header.index().unwrap())
        .collect();
    assert_eq!(
        published,
        vec![100],
        "the unfinished checkpoint is not published"
    );
    drop(checkpoints);
    let recovered = recover(&disk).unwrap();
    assert_eq!(recovered.0, Some(100));
    assert_eq!(recovered.1, previous);

    // Through the state machine (blocking model): the failed checkpoint reaches openraft as an
    // error that says why.
    let (requests, _) = tokio::sync::mpsc::unbounded_channel();
    let mut config = state_machine_config(&disk);
    config.checkpoint_every_commands = 50;
    let mut state_machine =
        StateMachine::open(Path::new(CHECKPOINT_DIR), config, requests).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let message = runtime.block_on(async {
        for index in 101..=150 {
            let entry = Entry {
                log_id: log_id(1, index),
                payload: EntryPayload::Normal(Command::Set {
                    key: format!("bulk-{index}").into_bytes(),
                    value: vec![7; 30_000],
                }),
            };
            state_machine.apply(vec![entry]).await.unwrap();
        }
        let mut builder = state_machine.get_snapshot_builder().await;
        builder.build_snapshot().await.unwrap_err().to_string()
    });
    assert!(message.contains("No space left on device"), "{message}");
    drop(state_machine);
    let recovered = recover(&disk).unwrap();
    assert_eq!(
        recovered.0,
        Some(100),
        "the previous checkpoint is still the one"
    );

    disk.clear_faults();
    let checkpoints = Checkpoints::open(disk.as_disk(), Path::new(CHECKPOINT_DIR)).unwrap();
    write_checkpoint(&checkpoints, 200, &big).unwrap();
    drop(checkpoints);
    assert_eq!(recover(&disk).unwrap().0, Some(200));
}

/// The checkpoint check is not vacuous: deleting the newest acknowledged checkpoint (a test-only
/// tamper) makes recovery load the older one, and the check fails.
#[test]
fn the_checkpoint_check_catches_a_lost_acknowledged_checkpoint() {
    let disk = SimDisk::new(33);
    let mut rng = Rng::new(33);
    let mut client = CheckpointClient::default();
    let checkpoints = Checkpoints::open(disk.as_disk(), Path::new(CHECKPOINT_DIR)).unwrap();
    let mut state = State::new();
    let mut index = 0;
    for _ in 0..3 {
        index += mutate(&mut state, &mut rng);
        client.written.insert(index, state.clone());
        write_checkpoint(&checkpoints, index, &state).unwrap();
        client.newest_acked = Some(index);
        checkpoints.retain(2).unwrap();
    }
    client.check(&recover(&disk).unwrap(), 33);
    let newest = checkpoints.published().unwrap().remove(0);
    assert_eq!(newest.header.index(), Some(index));
    prefixkv_storage::durable::remove_dir_all_durably(
        &*disk.as_disk(),
        newest.path.parent().unwrap(),
    )
    .unwrap();
    drop(checkpoints);
    let recovered = recover(&disk).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        client.check(&recovered, 33)
    }));
    assert!(
        caught.is_err(),
        "a lost acknowledged checkpoint must fail the check"
    );
}
