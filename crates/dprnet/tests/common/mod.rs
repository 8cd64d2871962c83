//! The session oracle that the real-process tests of every DPR cluster share (D-Redis's in
//! `crates/dredis/tests`, prefixkv-cluster's in `crates/cluster/tests`, which include this file
//! by path): session threads writing unique keys through [`DprRedisClient`] with an oracle of
//! every operation's fate, built only from what each session was acknowledged and told, and the
//! final check of what the cluster holds (read through a client, or from each Redis directly)
//! against that oracle. Every wait is bounded by [`WAIT`].
//!
//! A session may also write a list, a set, a hash, a sorted set and a stream of its own
//! ([`Progress::collections`], [`spawn_sessions_with`]); `collections.rs` holds that workload
//! and its check. Tags of collection operations are in [`SessionRecord::elements`]; the string
//! checks ([`read_back`], [`verify_found`]) skip them.

#![allow(dead_code)]

pub mod collections;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prefixkv_dprnet::client::{ClientError, Fate};
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_dprnet::DprRedisClient;
use prefixkv_resp::Reply;

use collections::{CollectionWriter, Element, OPERATIONS_PER_BATCH};

/// Bound on every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(60);

/// Waits until `condition` holds, panicking with `what` after [`WAIT`].
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What the oracle knows of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Pushed, no outcome yet.
    Pushed,
    /// Must be in the final state.
    Present,
    /// Must not be.
    Absent,
    /// May or may not be.
    Either,
    /// A cluster worker refused it (`-TRYAGAIN`, `-MOVED`) without running it: must not be,
    /// whatever a later rollback reports of its batch (the refusal is what survives or not).
    Refused,
}

/// A session's writes and what it learned about them.
pub struct SessionRecord {
    /// Session id.
    pub id: u64,
    /// Per tag (key `s<id>:<tag>`, value `v<tag>`, unless the tag is in `elements`).
    pub expected: BTreeMap<u64, Expected>,
    /// Tags of collection writes: what each wrote (empty unless [`Progress::collections`]).
    pub elements: BTreeMap<u64, Element>,
    /// The hash tag of the session's collection keys, if it wrote collections.
    pub collection_tag: Option<String>,
    /// Rollbacks seen.
    pub rollbacks: u64,
}

/// Counters a running session publishes.
#[derive(Default)]
pub struct Progress {
    /// Largest commit point seen.
    pub committed_until: AtomicU64,
    /// Rollbacks seen.
    pub rollbacks: AtomicU64,
    /// Commit points seen after the latest rollback.
    pub committed_since_rollback: AtomicU64,
    /// Commands a cluster worker refused (`-TRYAGAIN`, `-MOVED`): they did not run.
    pub refused: AtomicU64,
    /// Set by the test: microseconds to sleep after each batch of 32 writes (0: none), which
    /// bounds how many keys a long test writes.
    pub pause_us: AtomicU64,
    /// Set by the test before the session starts: after each batch of string writes, also
    /// write [`OPERATIONS_PER_BATCH`] elements to each of the session's collections.
    pub collections: AtomicBool,
}

fn key(session: u64, tag: u64) -> Vec<u8> {
    format!("s{session}:{tag}").into_bytes()
}

fn apply(record: &mut SessionRecord, error: ClientError, committed: &mut (u64, Vec<(u64, u64)>)) {
    match error {
        ClientError::Rollback(report) => {
            record.rollbacks += 1;
            for operation in &report.operations {
                // Inside the last commit point the session was told: it must be present whatever
                // the report says (only later operations may be uncertain either way).
                let inside = operation.sequence.is_some_and(|sequence| {
                    sequence < committed.0
                        && !committed
                            .1
                            .iter()
                            .any(|&(s, e)| s <= sequence && sequence < e)
                });
                let expected = match operation.fate {
                    _ if inside => Expected::Present,
                    Fate::Survived => Expected::Present,
                    Fate::Lost | Fate::Rejected | Fate::NotSent => Expected::Absent,
                    Fate::Uncertain => Expected::Either,
                };
                if matches!(operation.fate, Fate::Lost | Fate::Rejected) {
                    let sequence = operation.sequence.expect("sent operations have sequences");
                    assert!(
                        !inside,
                        "session {}: operation {sequence} was reported committed (until {}) but was {:?}",
                        record.id,
                        committed.0,
                        operation.fate
                    );
                }
                if record.expected.get(&operation.tag) == Some(&Expected::Refused) {
                    continue;
                }
                record.expected.insert(operation.tag, expected);
            }
            committed.0 = report.prefix.until_sequence.min(committed.0);
            committed.1.clear();
        }
        other => panic!("session {}: unexpected error {other}", record.id),
    }
}

/// Runs a session writing unique keys (and its collections if [`Progress::collections`] is set
/// when it starts) until `stop`, then drains it. Returns its record.
pub fn spawn_session(
    client: Arc<DprRedisClient>,
    id: u64,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> JoinHandle<SessionRecord> {
    std::thread::spawn(move || {
        let mut session = client.session(id).expect("session");
        let mut writer = progress
            .collections
            .load(Ordering::SeqCst)
            .then(|| CollectionWriter::new(&session, id).expect("a hash tag"));
        let mut record = SessionRecord {
            id,
            expected: BTreeMap::new(),
            elements: BTreeMap::new(),
            collection_tag: writer.as_ref().map(|w| w.tag.clone()),
            rollbacks: 0,
        };
        // (committed until, excluded ranges) as last reported.
        let mut committed = (0u64, Vec::new());
        let mut next_tag_expected = 0u64;
        let mut round = 0u64;
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            let step: Result<(), ClientError> = (|| {
                if !stopping {
                    for _ in 0..32 {
                        let tag = next_tag_expected;
                        let pushed =
                            session.push(&[b"SET", &key(id, tag), format!("v{tag}").as_bytes()]);
                        // A push gets its tag even if sending the batch fails.
                        next_tag_expected += 1;
                        record.expected.insert(tag, Expected::Pushed);
                        pushed?;
                    }
                    for _ in 0..writer.as_ref().map_or(0, |_| OPERATIONS_PER_BATCH) {
                        let operation = writer.as_mut().expect("writing collections");
                        for (element, command) in operation.next_operation() {
                            let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
                            let pushed = session.push(&args);
                            let tag = next_tag_expected;
                            next_tag_expected += 1;
                            record.expected.insert(tag, Expected::Pushed);
                            record.elements.insert(tag, element);
                            pushed?;
                        }
                    }
                    session.flush()?;
                    let pause_us = progress.pause_us.load(Ordering::SeqCst);
                    if pause_us > 0 {
                        std::thread::sleep(std::time::Duration::from_micros(pause_us));
                    }
                } else {
                    session.drain()?;
                }
                round += 1;
                if round.is_multiple_of(4) || stopping {
                    let point = session.commit_point()?;
                    committed = (
                        point.until_sequence,
                        point.excluded.iter().map(|r| (r.start, r.end)).collect(),
                    );
                    progress
                        .committed_until
                        .fetch_max(point.until_sequence, Ordering::SeqCst);
                    progress
                        .committed_since_rollback
                        .fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            })();
            for completed in session.take_completed() {
                let element = record.elements.get(&completed.tag);
                let entry = record.expected.get_mut(&completed.tag).expect("known tag");
                match &completed.reply {
                    Reply::SimpleString(ok) if element.is_none() && &ok[..] == b"OK" => {
                        if *entry == Expected::Pushed {
                            *entry = Expected::Present;
                        }
                    }
                    // A cluster worker refused the command without running it: its slot is
                    // being migrated or has moved (`prefixkv-cluster`; never from D-Redis).
                    Reply::Error(text)
                        if text.starts_with(b"TRYAGAIN ") || text.starts_with(b"MOVED ") =>
                    {
                        *entry = Expected::Refused;
                        progress.refused.fetch_add(1, Ordering::SeqCst);
                    }
                    reply if element.is_some() => {
                        let element = element.expect("matched");
                        if let Err(error) =
                            element.collection.check_write_reply(element.number, reply)
                        {
                            panic!("session {id}: {error}");
                        }
                        if *entry == Expected::Pushed {
                            *entry = Expected::Present;
                        }
                    }
                    other => panic!("session {id}: SET answered {other:?}"),
                }
            }
            if let Err(error) = step {
                apply(&mut record, error, &mut committed);
                // What the rollback left of this generation's collections is a prefix of its
                // operations; later ones start the next generation's keys.
                if let Some(writer) = writer.as_mut() {
                    writer.next_generation();
                }
                progress.rollbacks.fetch_add(1, Ordering::SeqCst);
                progress.committed_since_rollback.store(0, Ordering::SeqCst);
                continue;
            }
            if stopping {
                break;
            }
        }
        assert!(
            record.expected.values().all(|e| *e != Expected::Pushed),
            "session {id}: operations without an outcome after draining"
        );
        record
    })
}

/// Whether every Redis answers PING now (a killed one stays down until a restore restarts it).
pub fn every_redis_answers(redis: &[SocketAddr]) -> bool {
    redis.iter().all(|address| {
        RedisConnection::connect(*address, Duration::from_millis(500))
            .and_then(|mut connection| connection.command(&[b"PING"]))
            .is_ok()
    })
}

/// Reads every key of session `id` from every Redis. A Redis that a late restore restarts
/// while it is read (its connection reset) is read again, every shard whole, once all answer:
/// reads change nothing, and whatever a restore brings back goes through the same oracle.
/// Bounded: a few attempts, each after every Redis answered again.
pub fn read_session_keys(redis: &[SocketAddr], id: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    const ATTEMPTS: usize = 4;
    let mut failures = Vec::new();
    for _ in 0..ATTEMPTS {
        match try_read_session_keys(redis, id) {
            Ok(found) => return found,
            Err(error) => {
                failures.push(error.to_string());
                wait_until("every redis to answer again", || every_redis_answers(redis));
            }
        }
    }
    panic!("session {id}: reading its keys failed {ATTEMPTS} times: {failures:?}")
}

fn try_read_session_keys(
    redis: &[SocketAddr],
    id: u64,
) -> std::io::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut found = BTreeMap::new();
    let pattern = format!("s{id}:*");
    for address in redis {
        let mut connection = RedisConnection::connect(*address, Duration::from_secs(10))?;
        let Reply::Array(keys) = connection.command(&[b"KEYS", pattern.as_bytes()])? else {
            panic!("KEYS did not return an array")
        };
        for key in keys {
            let Reply::BulkString(key) = key else {
                panic!("key is not a bulk string")
            };
            let Reply::BulkString(value) = connection.command(&[b"GET", &key])? else {
                panic!("GET of an existing key did not return a value")
            };
            found.insert(key.to_vec(), value.to_vec());
        }
    }
    Ok(found)
}

/// Checks the state of every Redis against the session's oracle.
pub fn verify_session(redis: &[SocketAddr], record: &SessionRecord) -> (usize, usize, usize) {
    let mut by_tag = BTreeMap::new();
    for (key, value) in read_session_keys(redis, record.id) {
        let text = String::from_utf8_lossy(&key);
        let tag: u64 = text
            .split_once(':')
            .and_then(|(_, t)| t.parse().ok())
            .expect("well-formed key");
        assert!(
            record.expected.contains_key(&tag),
            "session {}: key {text} was never written",
            record.id
        );
        by_tag.insert(tag, value);
    }
    verify_found(&by_tag, record)
}

/// Checks a session's keys as read back (`found`: tag → value, absent keys omitted) against its
/// oracle, panicking on the first disagreement; returns (present, absent, either).
pub fn verify_found(
    found: &BTreeMap<u64, Vec<u8>>,
    record: &SessionRecord,
) -> (usize, usize, usize) {
    let (mut present, mut absent, mut either) = (0, 0, 0);
    for (&tag, &expected) in &record.expected {
        if record.elements.contains_key(&tag) {
            continue;
        }
        let value = found.get(&tag);
        match expected {
            Expected::Present => {
                present += 1;
                assert_eq!(
                    value.map(Vec::as_slice),
                    Some(format!("v{tag}").as_bytes()),
                    "session {}: operation {tag} was acknowledged and reported surviving, but is gone",
                    record.id
                );
            }
            Expected::Absent | Expected::Refused => {
                absent += 1;
                assert!(
                    value.is_none(),
                    "session {}: operation {tag} was reported lost, but is present",
                    record.id
                );
            }
            Expected::Either => either += 1,
            Expected::Pushed => unreachable!("checked when the session ended"),
        }
    }
    (present, absent, either)
}

/// SIGKILLs a process.
pub fn kill(pid: u32) {
    assert!(
        try_kill(pid),
        "kill {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// SIGKILLs a process; false if it no longer exists.
pub fn try_kill(pid: u32) -> bool {
    // SAFETY: sending a signal to a child process id we own.
    let result = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    result == 0
}

/// Running session threads with their published progress.
pub type Sessions = Vec<(Arc<Progress>, JoinHandle<SessionRecord>)>;

/// Starts sessions `ids` ([`spawn_session`]), each on the client `client_for(id)` gives, pausing
/// `pause_us` after each batch of writes (0: none).
pub fn spawn_sessions(
    ids: std::ops::Range<u64>,
    client_for: impl Fn(u64) -> Arc<DprRedisClient>,
    stop: &Arc<AtomicBool>,
    pause_us: u64,
) -> Sessions {
    spawn_sessions_with(ids, client_for, stop, pause_us, false)
}

/// [`spawn_sessions`], each session also writing collections if `collections`
/// ([`Progress::collections`]).
pub fn spawn_sessions_with(
    ids: std::ops::Range<u64>,
    client_for: impl Fn(u64) -> Arc<DprRedisClient>,
    stop: &Arc<AtomicBool>,
    pause_us: u64,
    collections: bool,
) -> Sessions {
    ids.map(|id| {
        let progress = Arc::new(Progress::default());
        progress.pause_us.store(pause_us, Ordering::SeqCst);
        progress.collections.store(collections, Ordering::SeqCst);
        let handle = spawn_session(client_for(id), id, Arc::clone(stop), Arc::clone(&progress));
        (progress, handle)
    })
    .collect()
}

/// Waits until every session saw a commit point of at least `at_least` operations.
pub fn wait_committed(sessions: &Sessions, at_least: u64) {
    wait_until("sessions to commit", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_until.load(Ordering::SeqCst) >= at_least)
    });
}

/// Reads every key the record names through `client` (a reader session of its own): tag →
/// value, absent keys omitted.
pub fn read_back(client: &DprRedisClient, record: &SessionRecord) -> BTreeMap<u64, Vec<u8>> {
    // Session ids only need to be unique among live sessions.
    let mut reader = client
        .session(1_000_000 + record.id)
        .expect("reader session");
    let tags: Vec<u64> = record
        .expected
        .keys()
        .copied()
        .filter(|tag| !record.elements.contains_key(tag))
        .collect();
    for &tag in &tags {
        reader.push(&[b"GET", &key(record.id, tag)]).expect("GET");
    }
    reader.drain().expect("drain the reads");
    let mut found = BTreeMap::new();
    for completed in reader.take_completed() {
        let tag = tags[completed.tag as usize];
        match completed.reply {
            Reply::BulkString(value) => {
                found.insert(tag, value.to_vec());
            }
            Reply::Null | Reply::NullBulkString => {}
            other => panic!("GET s{}:{tag} answered {other:?}", record.id),
        }
    }
    found
}

/// Shows [`verify_found`] failing once on tampered input: one operation that must be present
/// (the first whose tag `pick` accepts) claimed lost.
pub fn assert_oracle_catches_tampering(
    found: &BTreeMap<u64, Vec<u8>>,
    record: &SessionRecord,
    pick: impl Fn(u64) -> bool,
) {
    let (&tag, _) = record
        .expected
        .iter()
        .find(|(&tag, &e)| {
            e == Expected::Present && !record.elements.contains_key(&tag) && pick(tag)
        })
        .expect("a present operation to tamper with");
    let mut tampered = SessionRecord {
        id: record.id,
        expected: record.expected.clone(),
        elements: record.elements.clone(),
        collection_tag: record.collection_tag.clone(),
        rollbacks: record.rollbacks,
    };
    tampered.expected.insert(tag, Expected::Absent);
    let caught = std::panic::catch_unwind(|| verify_found(found, &tampered)).is_err();
    assert!(caught, "the oracle missed a tampered expectation");
}

/// Waits until every session saw at least one rollback.
pub fn wait_rolled_back(sessions: &Sessions) {
    wait_until("every session to see the rollback", || {
        sessions
            .iter()
            .all(|(p, _)| p.rollbacks.load(Ordering::SeqCst) >= 1)
    });
}

/// Waits until every session saw `points` commit points since its latest rollback.
pub fn wait_committed_since_rollback(sessions: &Sessions, points: u64) {
    wait_until("sessions to commit on the new world-line", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_since_rollback.load(Ordering::SeqCst) >= points)
    });
}

/// Joins the session threads (set their `stop` first): their records.
pub fn join_sessions(sessions: Sessions) -> Vec<SessionRecord> {
    sessions
        .into_iter()
        .map(|(_, handle)| handle.join().expect("session thread"))
        .collect()
}
