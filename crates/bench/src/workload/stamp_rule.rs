//! The stamp rule, shared by `cpr` and `ycsb`: an image of the store (recovered from a checkpoint,
//! or live) is checked against what the benchmark's own sessions ran, never against what the
//! store reports about itself.
//!
//! Every upsert writes a [`stamp`](super::operations::stamp) naming its session and serial; a
//! read-modify-write adds 1 to the stored value. Worker sessions run chunks of shared
//! pre-generated [`Operations`], so a session's serials are not a function of the session alone:
//! each worker's chunk log (the positions of the chunks it ran, in order) maps its serial `n`
//! back to one operation. A [`History`] is a sequence of runs, one after another (a later run's
//! sessions start after every session of an earlier run has ended); the sessions of one run are
//! concurrent. Session indices are unique over the whole history; index 0 is the loader, which
//! upserted `key(i)` at serial `i + 1` before any run.
//!
//! Given each session's CPR point (known to the client side, or checked against client-side
//! bounds first, see `prefixkv_testkit::oracle::check_points`), the rules, for workloads without
//! deletes, are:
//! - every loaded key is present;
//! - for each key, let `U` be the last run in which some session upserted it within its point
//!   (or the loader if none did), and `r` the number of read-modify-writes of it within points in
//!   the runs after `U`: the value minus `r` is a stamp of a session of `U` (the loader's
//!   `i + 1` if `U` is the loader), within that session's point, naming an upsert of this key,
//!   and no later upsert of the key by that session lies within its point.
//!
//! Sessions of one run are concurrent, so when two of them last wrote a key within their points
//! either write may be the one the image holds; the rule accepts exactly those states. A run
//! whose operations mix upserts and read-modify-writes has no such order and is refused (no
//! workload here has one).
//!
//! Memory: three dense arrays over the loaded keys (a run index, a count and a stamp, 16 bytes a
//! key) plus each session's chunk offsets; nothing grows with the number of operations replayed.

use std::collections::HashMap;

use anyhow::Result;
use prefixkv_testkit::oracle::{self, LOADER_SESSION};

use super::operations::{encode_key, key, Kind, Operations};

/// One run: worker sessions over one array of operations, concurrently.
pub struct RunLog<'a> {
    /// The pre-generated operations the run's workers took chunks of.
    pub operations: &'a Operations,
    /// (session index, chunk positions in the order it ran them) per worker session.
    pub chunk_logs: &'a [(u32, Vec<u64>)],
}

/// What the benchmark's clients did, from their side: the loaded keys and the runs, in order.
pub struct History<'a> {
    /// Keys loaded: `key(0..keys)` by the loader (session 0) at serials `1..=keys`.
    pub keys: u64,
    /// The runs, in the order they ran.
    pub runs: Vec<RunLog<'a>>,
}

/// Reads one key of an image: `Ok(None)` when absent.
pub type ReadKey<'a> = dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>> + 'a;

/// Reads the keys of an engine's image (live or recovered) through `session`.
pub fn engine_reader(
    session: &mut prefixkv_engine::Session,
) -> impl FnMut(&[u8]) -> Result<Option<Vec<u8>>> + '_ {
    move |key| {
        let mut value = Vec::new();
        Ok(session.read(key, &mut value)?.then_some(value))
    }
}

/// Checks the image read through `read` against `history`, with `points` (session index, CPR
/// point) for the sessions (a worker missing from `points` has point 0). Returns whether it
/// passed and what was checked or the first problem found.
pub fn verify(
    history: &History<'_>,
    points: &[(u32, u64)],
    read: &mut ReadKey<'_>,
) -> (bool, String) {
    match check(history, points, read) {
        Ok(detail) => (true, detail),
        Err(problem) => (false, problem),
    }
}

fn check(
    history: &History<'_>,
    points: &[(u32, u64)],
    read: &mut ReadKey<'_>,
) -> Result<String, String> {
    let points: HashMap<u32, u64> = points.iter().copied().collect();
    let sessions = Sessions::index(history, &points)?;
    let replay = Replay::run(history, &sessions)?;
    let image = replay.read_image(history, &sessions, &points, read)?;
    replay.check_last_writes(history, &sessions, &image)?;
    Ok(format!(
        "{} keys checked, {} operations replayed over {} runs",
        history.keys,
        sessions.replayed(),
        history.runs.len()
    ))
}

/// One worker session: its run, its chunks (position and first serial), its point.
struct SessionLog<'a> {
    session: u32,
    run: usize,
    positions: &'a [u64],
    /// The serial of each chunk's first operation.
    starts: Vec<u64>,
    point: u64,
}

impl SessionLog<'_> {
    /// Calls `f(serial, key, kind)` for every operation with serial `1..=point`, in order.
    fn each_within(
        &self,
        operations: &Operations,
        f: &mut dyn FnMut(u64, u64, Kind) -> Result<(), String>,
    ) -> Result<(), String> {
        for (&position, &start) in self.positions.iter().zip(&self.starts) {
            if start > self.point {
                break;
            }
            let chunk = operations.chunk_at(position, self.session, start);
            let within = (self.point + 1 - start).min(chunk.len()) as usize;
            for (offset, (&key, &kind)) in
                chunk.keys.iter().zip(chunk.kinds).take(within).enumerate()
            {
                f(start + offset as u64, key, kind)?;
            }
        }
        Ok(())
    }

    /// The operation (key, kind) the session ran at `serial` (1-based, within what it ran).
    fn operation(&self, operations: &Operations, serial: u64) -> Option<(u64, Kind)> {
        let chunk = self
            .starts
            .partition_point(|&start| start <= serial)
            .checked_sub(1)?;
        let offset = serial - self.starts[chunk];
        let position = self.positions[chunk] + offset;
        let end = operations
            .chunk_at(self.positions[chunk], self.session, 1)
            .len();
        (offset < end).then(|| {
            (
                operations.keys[position as usize],
                operations.kinds[position as usize],
            )
        })
    }
}

/// Every worker session of the history, by index.
struct Sessions<'a>(HashMap<u32, SessionLog<'a>>);

impl<'a> Sessions<'a> {
    fn index(history: &History<'a>, points: &HashMap<u32, u64>) -> Result<Sessions<'a>, String> {
        let mut sessions = HashMap::new();
        for (run, log) in history.runs.iter().enumerate() {
            let kinds = &log.operations.kinds;
            if kinds.contains(&Kind::Upsert) && kinds.contains(&Kind::Rmw) {
                return Err(format!(
                    "run {run} mixes upserts and read-modify-writes: no order to check it by"
                ));
            }
            for (session, positions) in log.chunk_logs {
                let mut starts = Vec::with_capacity(positions.len());
                let mut next = 1u64;
                for &position in positions {
                    starts.push(next);
                    next += log.operations.chunk_at(position, *session, next).len();
                }
                let ran = next - 1;
                let point = points.get(session).copied().unwrap_or(0);
                if point > ran {
                    return Err(format!(
                        "session {session}: CPR point {point} is past the {ran} operations it ran"
                    ));
                }
                let entry = SessionLog {
                    session: *session,
                    run,
                    positions,
                    starts,
                    point,
                };
                if *session == LOADER_SESSION || sessions.insert(*session, entry).is_some() {
                    return Err(format!(
                        "session index {session} is used twice in the history"
                    ));
                }
            }
        }
        if let Some((session, point)) = points
            .iter()
            .find(|(s, p)| **s != LOADER_SESSION && **p > 0 && !sessions.contains_key(s))
        {
            return Err(format!(
                "session {session} has point {point} but ran no chunks"
            ));
        }
        Ok(Sessions(sessions))
    }

    fn of_run(&self, run: usize) -> impl Iterator<Item = &SessionLog<'a>> {
        let mut of_run: Vec<&SessionLog<'a>> = self.0.values().filter(|s| s.run == run).collect();
        of_run.sort_by_key(|s| s.session);
        of_run.into_iter()
    }

    fn replayed(&self) -> u64 {
        self.0.values().map(|s| s.point).sum()
    }
}

/// What the replay of every session up to its point says about each key (by index).
struct Replay {
    /// 1 + the last run that upserted the key within points; 0: only the loader did.
    last_run: Vec<u32>,
    /// Read-modify-writes of the key within points after that run's upserts.
    rmw: Vec<u32>,
}

impl Replay {
    fn run(history: &History<'_>, sessions: &Sessions<'_>) -> Result<Replay, String> {
        let keys = history.keys;
        let mut replay = Replay {
            last_run: vec![0; keys as usize],
            rmw: vec![0; keys as usize],
        };
        for (run, log) in history.runs.iter().enumerate() {
            let tag = u32::try_from(run + 1).map_err(|_| "too many runs".to_string())?;
            for session in sessions.of_run(run) {
                session.each_within(log.operations, &mut |_, key, kind| {
                    let index = index_of(key, keys)?;
                    match kind {
                        Kind::Read => {}
                        Kind::Upsert => {
                            if replay.last_run[index] != tag {
                                replay.last_run[index] = tag;
                                replay.rmw[index] = 0;
                            }
                        }
                        Kind::Rmw => replay.rmw[index] += 1,
                    }
                    Ok(())
                })?;
            }
        }
        Ok(replay)
    }

    /// Reads every loaded key and checks its value's stamp; returns the stamps by key index.
    fn read_image(
        &self,
        history: &History<'_>,
        sessions: &Sessions<'_>,
        points: &HashMap<u32, u64>,
        read: &mut ReadKey<'_>,
    ) -> Result<Vec<u64>, String> {
        let mut image = vec![0u64; history.keys as usize];
        for index in 0..history.keys {
            let i = index as usize;
            let value = read(&encode_key(key(index)))
                .map_err(|error| format!("reading the image failed: {error:#}"))?;
            let Some(bytes) = value else {
                return Err(match self.last_run[i] {
                    0 => format!(
                        "missing key {index}: the loader (session 0) upserted it at serial {}, \
                         but the image does not hold it",
                        index + 1
                    ),
                    run => format!(
                        "missing key {index}: a session of run {} upserted it within its CPR \
                         point, but the image does not hold it",
                        run - 1
                    ),
                });
            };
            let value = <[u8; 8]>::try_from(bytes.as_slice())
                .map(u64::from_be_bytes)
                .map_err(|_| format!("key {index}: value {bytes:02x?} is not an 8-byte value"))?;
            let stamp = value.wrapping_sub(u64::from(self.rmw[i]));
            self.check_stamp(history, sessions, points, index, stamp)?;
            image[i] = stamp;
        }
        Ok(image)
    }

    /// Checks one key's stamp (its value less the read-modify-writes after the last upsert).
    fn check_stamp(
        &self,
        history: &History<'_>,
        sessions: &Sessions<'_>,
        points: &HashMap<u32, u64>,
        index: u64,
        stamp: u64,
    ) -> Result<(), String> {
        let i = index as usize;
        let rmw = self.rmw[i];
        let (session, serial) = oracle::decode_value(&stamp.to_be_bytes())
            .ok_or_else(|| format!("key {index}: {stamp:#x} is not a stamp"))?;
        let named = format!("session {session} serial {serial} (after {rmw} read-modify-writes)");
        if self.last_run[i] == 0 {
            return if (session, serial) == (LOADER_SESSION, index + 1) {
                Ok(())
            } else {
                Err(format!(
                    "key {index}: the image holds {named}, but no session upserted the key within \
                     its CPR point, so it must hold the loader's serial {} (a wrong value)",
                    index + 1
                ))
            };
        }
        let run = self.last_run[i] as usize - 1;
        if session == LOADER_SESSION {
            return Err(format!(
                "key {index}: lost write: the image holds the loader's value, but a session of \
                 run {run} upserted the key within its CPR point"
            ));
        }
        let Some(&point) = points.get(&session) else {
            return Err(format!(
                "key {index}: the image holds {named}, but session {session} is not among the \
                 recovered sessions (a value from a wrong session)"
            ));
        };
        if serial == 0 || serial > point {
            return Err(format!(
                "key {index}: the image holds {named}, after its CPR point {point} (an operation \
                 outside the recovered prefix)"
            ));
        }
        let Some(log) = sessions.0.get(&session) else {
            return Err(format!(
                "key {index}: the image holds {named}, a session that never ran"
            ));
        };
        if log.run != run {
            return Err(format!(
                "key {index}: lost write: the image holds {named} of run {}, but a session of the \
                 later run {run} upserted the key within its CPR point",
                log.run
            ));
        }
        match log.operation(history.runs[run].operations, serial) {
            Some((k, Kind::Upsert)) if k == key(index) => Ok(()),
            _ => Err(format!(
                "key {index}: the image holds {named}, but that operation was not an upsert of \
                 this key (a value from a wrong session or for a wrong key)"
            )),
        }
    }

    /// Replays again: no session upserted a key within its point after the write the image holds.
    fn check_last_writes(
        &self,
        history: &History<'_>,
        sessions: &Sessions<'_>,
        image: &[u64],
    ) -> Result<(), String> {
        for (run, log) in history.runs.iter().enumerate() {
            let tag = run as u32 + 1;
            for session in sessions.of_run(run) {
                session.each_within(log.operations, &mut |serial, key, kind| {
                    if kind != Kind::Upsert {
                        return Ok(());
                    }
                    let index = index_of(key, history.keys)?;
                    let held = oracle::decode_value(&image[index].to_be_bytes());
                    match held {
                        Some((s, n))
                            if self.last_run[index] == tag
                                && s == session.session
                                && serial > n =>
                        {
                            Err(format!(
                                "key {index}: lost write: the image holds session {s} serial {n} \
                                 but the session upserted the key again at serial {serial} <= its \
                                 CPR point {}",
                                session.point
                            ))
                        }
                        _ => Ok(()),
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// The index `i < keys` with `key(i) == hashed`: [`key`] is a bijection, inverted step by step.
fn index_of(hashed: u64, keys: u64) -> Result<usize, String> {
    fn unshift(y: u64, shift: u32) -> u64 {
        let mut x = y;
        for _ in 0..64 / shift + 1 {
            x = y ^ (x >> shift);
        }
        x
    }
    fn inverse(odd: u64) -> u64 {
        // Newton's iteration: each step doubles the correct low bits (3, 6, ..., 96 >= 64).
        let mut inverse = odd;
        for _ in 0..5 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inverse)));
        }
        inverse
    }
    let mut z = unshift(hashed, 31);
    z = unshift(z.wrapping_mul(inverse(0x94D0_49BB_1331_11EB)), 27);
    z = unshift(z.wrapping_mul(inverse(0xBF58_476D_1CE4_E5B9)), 30);
    let index = z.wrapping_sub(0x9E37_79B9_7F4A_7C15);
    debug_assert_eq!(key(index), hashed);
    if index < keys {
        Ok(index as usize)
    } else {
        Err(format!(
            "an operation on key {hashed:#x}, which was never loaded"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::operations::{stamp, OperationMix};
    use crate::workload::KeyDistribution;

    fn operations(read_percent: u64, write: Kind, keys: u64, count: u64, seed: u64) -> Operations {
        let mix = OperationMix {
            read_percent,
            write,
        };
        Operations::generate(mix, KeyDistribution::Uniform, keys, count, seed)
    }

    /// The image a store holds if the history ran one session after another (a valid order of
    /// concurrent sessions), each up to its point: key index -> 8-byte value.
    fn serial_image(history: &History<'_>, points: &HashMap<u32, u64>) -> HashMap<u64, u64> {
        let mut image: HashMap<u64, u64> =
            (0..history.keys).map(|i| (i, stamp(0, i + 1))).collect();
        let sessions = Sessions::index(history, points).unwrap();
        for (run, log) in history.runs.iter().enumerate() {
            for session in sessions.of_run(run) {
                session
                    .each_within(log.operations, &mut |serial, key, kind| {
                        let index = index_of(key, history.keys).unwrap() as u64;
                        match kind {
                            Kind::Read => {}
                            Kind::Upsert => {
                                image.insert(index, stamp(session.session, serial));
                            }
                            Kind::Rmw => *image.get_mut(&index).unwrap() += 1,
                        }
                        Ok(())
                    })
                    .unwrap();
            }
        }
        image
    }

    fn check_image(
        history: &History<'_>,
        points: &HashMap<u32, u64>,
        image: &HashMap<u64, u64>,
    ) -> (bool, String) {
        let points: Vec<(u32, u64)> = points.iter().map(|(&s, &p)| (s, p)).collect();
        let mut read = |bytes: &[u8]| -> Result<Option<Vec<u8>>> {
            let hashed = u64::from_le_bytes(bytes.try_into().unwrap());
            let index = index_of(hashed, history.keys).unwrap() as u64;
            Ok(image.get(&index).map(|value| value.to_be_bytes().to_vec()))
        };
        verify(history, &points, &mut read)
    }

    #[test]
    fn index_of_inverts_key() {
        for index in [0, 1, 7, 999_999, u64::MAX / 3] {
            assert_eq!(index_of(key(index), u64::MAX).unwrap() as u64, index);
        }
        assert!(index_of(key(10), 10).is_err());
    }

    /// Two concurrent upsert sessions then a run of read-modify-writes, with points inside the
    /// chunks: the serial image passes; a stale value, the loader's value under a worker's
    /// write, a dropped read-modify-write, a deleted key, a value past a point and an earlier
    /// run's value under a later run's write each fail.
    #[test]
    fn stamp_rule_passes_a_replayed_image_and_catches_each_tampering() {
        let keys = 4_096;
        let upserts = operations(50, Kind::Upsert, keys, 3_200 * 2, 3);
        let rmws = operations(50, Kind::Rmw, keys, 3_200, 4);
        let upsert_logs = [(1u32, vec![0u64, 3_200]), (2u32, vec![3_200])];
        let rmw_logs = [(3u32, vec![0u64])];
        let history = History {
            keys,
            runs: vec![
                RunLog {
                    operations: &upserts,
                    chunk_logs: &upsert_logs,
                },
                RunLog {
                    operations: &rmws,
                    chunk_logs: &rmw_logs,
                },
            ],
        };
        let points: HashMap<u32, u64> = [(0, keys), (1, 5_000), (2, 3_200), (3, 1_000)].into();
        let image = serial_image(&history, &points);
        let (ok, detail) = check_image(&history, &points, &image);
        assert!(ok, "{detail}");

        // A key session 1 upserted at least twice within its point, and not touched by run 1.
        let sessions = Sessions::index(&history, &points).unwrap();
        let replay = Replay::run(&history, &sessions).unwrap();
        let mut serials: HashMap<u64, Vec<u64>> = HashMap::new();
        sessions.0[&1]
            .each_within(&upserts, &mut |serial, key, kind| {
                if kind == Kind::Upsert {
                    serials.entry(key).or_default().push(serial);
                }
                Ok(())
            })
            .unwrap();
        let (&hashed, written) = serials
            .iter()
            .find(|(k, s)| {
                let i = index_of(**k, keys).unwrap();
                s.len() >= 2
                    && replay.rmw[i] == 0
                    && image[&(i as u64)] == stamp(1, *s.last().unwrap())
            })
            .expect("a key session 1 wrote twice and holds");
        let index = index_of(hashed, keys).unwrap() as u64;
        let tampered = |value: Option<u64>| {
            let mut image = image.clone();
            match value {
                Some(value) => image.insert(index, value),
                None => image.remove(&index),
            };
            check_image(&history, &points, &image)
        };
        let (ok, detail) = tampered(Some(stamp(1, written[0])));
        assert!(!ok && detail.contains("lost write"), "{detail}");
        let (ok, detail) = tampered(Some(stamp(0, index + 1)));
        assert!(!ok && detail.contains("lost write"), "{detail}");
        let (ok, detail) = tampered(None);
        assert!(
            !ok && detail.contains(&format!("missing key {index}")),
            "{detail}"
        );
        let (ok, detail) = tampered(Some(stamp(1, 5_001)));
        assert!(!ok && detail.contains("after its CPR point"), "{detail}");

        // A key read-modify-written within the point: one increment dropped is caught.
        let rmw_index = (0..keys as usize).find(|&i| replay.rmw[i] > 0).unwrap() as u64;
        let mut dropped = image.clone();
        *dropped.get_mut(&rmw_index).unwrap() -= 1;
        let (ok, detail) = check_image(&history, &points, &dropped);
        assert!(!ok, "a dropped read-modify-write passed: {detail}");

        // An image where run 1 had not run at all fails against points that include it.
        let mut before = points.clone();
        before.insert(3, 0);
        let earlier = serial_image(&history, &before);
        let (ok, _) = check_image(&history, &points, &earlier);
        assert!(
            !ok,
            "an image missing acknowledged read-modify-writes passed"
        );
        assert!(check_image(&history, &before, &earlier).0);
    }

    /// A session of a later run overwrote a key: the earlier run's value is a lost write.
    #[test]
    fn a_later_runs_upsert_shadows_an_earlier_runs() {
        let keys = 16;
        let first = operations(0, Kind::Upsert, keys, 3_200, 7);
        let second = operations(0, Kind::Upsert, keys, 3_200, 8);
        let (logs_1, logs_2) = ([(1u32, vec![0u64])], [(2u32, vec![0u64])]);
        let history = History {
            keys,
            runs: vec![
                RunLog {
                    operations: &first,
                    chunk_logs: &logs_1,
                },
                RunLog {
                    operations: &second,
                    chunk_logs: &logs_2,
                },
            ],
        };
        let points: HashMap<u32, u64> = [(0, keys), (1, 3_200), (2, 3_200)].into();
        let image = serial_image(&history, &points);
        assert!(check_image(&history, &points, &image).0);
        let only_first: HashMap<u32, u64> = [(0, keys), (1, 3_200), (2, 0)].into();
        let stale = serial_image(&history, &only_first);
        let (ok, detail) = check_image(&history, &points, &stale);
        assert!(!ok && detail.contains("later run"), "{detail}");
    }
}
