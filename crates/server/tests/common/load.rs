//! Writer connections under load, and the check, after a restart, that recovery kept what each
//! connection was acknowledged.
//!
//! Each writer is one connection with an identity `id`, unique for the whole test (across
//! restarts). Its write `i` is `SET ack:{id}:{i} {id}:{i}`: a key of its own and a value naming
//! the writer and the number, so after recovery a write is there with exactly that value, or not
//! there at all, and a value naming another write is corruption. Writers send pipelined batches
//! of random sizes and count the replies themselves; the counts and each reply's arrival time are
//! the reference ([`WriterLog`]). Every [`COMMITPOINT_EVERY`] acknowledged writes a writer also asks
//! `PREFIXKV.COMMITPOINT`; its durable count is the server's claim, checked against recovery, never
//! used as the reference.
//!
//! Invariants: every wait is bounded (30 s socket reads, deadlines on progress); a writer stops at
//! its first error or unexpected reply and records why and when, so a test can tell the kill it
//! caused from a failure before it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prefixkv_resp::Reply;
use prefixkv_testkit::acknowledged::{check_connection, Recovery};
use prefixkv_testkit::rng::Rng;

use super::{encode_request, Raw, Server};

/// A writer asks `PREFIXKV.COMMITPOINT` after every this many acknowledged writes.
pub const COMMITPOINT_EVERY: u64 = 50;
/// Largest pipelined batch.
const MAX_BATCH: u64 = 8;
/// Writes looked for past the last one sent (none may be there).
const PROBE_PAST_ISSUED: u64 = 2;
/// Keys per MGET when reading back.
const MGET_KEYS: usize = 500;

/// The key of write `write` of writer `id`.
pub fn key(id: u64, write: u64) -> String {
    format!("ack:{id}:{write}")
}

/// The value of write `write` of writer `id`.
pub fn value(id: u64, write: u64) -> String {
    format!("{id}:{write}")
}

/// What a writer's writes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Write `i` is `SET ack:{id}:{i} {id}:{i}`.
    Strings,
    /// Write `i` goes to one of five keys of the writer, by `i % 5`: the string above, `RPUSH
    /// list:{id}`, `SADD set:{id}`, `ZADD zset:{id} i` or `HSET hash:{id} f{i}`, each with the
    /// element `{id}:{i}`; so a crash must keep one prefix across every type.
    Mixed,
}

/// The command of write `write` of writer `id` in `shape`.
fn write_command(shape: Shape, id: u64, write: u64) -> Vec<Vec<u8>> {
    let element = value(id, write).into_bytes();
    let owned = |parts: &[&[u8]]| parts.iter().map(|p| p.to_vec()).collect::<Vec<_>>();
    match (shape, write % 5) {
        (Shape::Strings, _) | (Shape::Mixed, 0) => {
            owned(&[b"SET", key(id, write).as_bytes(), &element])
        }
        (_, 1) => owned(&[b"RPUSH", format!("list:{id}").as_bytes(), &element]),
        (_, 2) => owned(&[b"SADD", format!("set:{id}").as_bytes(), &element]),
        (_, 3) => owned(&[
            b"ZADD",
            format!("zset:{id}").as_bytes(),
            write.to_string().as_bytes(),
            &element,
        ]),
        _ => owned(&[
            b"HSET",
            format!("hash:{id}").as_bytes(),
            format!("f{write}").as_bytes(),
            &element,
        ]),
    }
}

/// Whether `reply` acknowledges a write of `shape`.
fn acknowledges(reply: &Reply) -> bool {
    match reply {
        Reply::SimpleString(text) => text.as_ref() == b"OK",
        Reply::Integer(n) => *n >= 1,
        _ => false,
    }
}

/// What one writer's client saw.
#[derive(Debug)]
pub struct WriterLog {
    /// The writer's identity.
    pub id: u64,
    /// What its writes are.
    pub shape: Shape,
    /// Writes sent (counted before each send, so an upper bound of what the server received).
    pub issued: u64,
    /// Writes whose `+OK` arrived; they were acknowledged in order `0..acknowledged`.
    pub acknowledged: u64,
    /// When the reply of each acknowledged write arrived (index = write number).
    pub acknowledged_at: Vec<Instant>,
    /// The newest `PREFIXKV.COMMITPOINT` durable count: the server's claim.
    pub durable_claim: u64,
    /// When and why the writer stopped on its own (a kill ends every writer this way).
    pub ended: Option<(Instant, String)>,
}

/// Writer threads running against one port.
pub struct Writers {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<Vec<AtomicU64>>,
    ended: Arc<Vec<AtomicBool>>,
    handles: Vec<JoinHandle<WriterLog>>,
}

impl Writers {
    /// Starts one writer per identity in `ids`, connected to `127.0.0.1:port`; batch sizes come
    /// from an [`Rng`] seeded with `seed` and the identity.
    pub fn start(port: u16, ids: std::ops::Range<u64>, seed: u64) -> Writers {
        Writers::start_shaped(port, ids, seed, Shape::Strings)
    }

    /// [`Writers::start`] with writes of `shape`.
    pub fn start_shaped(port: u16, ids: std::ops::Range<u64>, seed: u64, shape: Shape) -> Writers {
        let count = (ids.end - ids.start) as usize;
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged: Arc<Vec<AtomicU64>> =
            Arc::new((0..count).map(|_| AtomicU64::new(0)).collect());
        let ended: Arc<Vec<AtomicBool>> =
            Arc::new((0..count).map(|_| AtomicBool::new(false)).collect());
        let handles = ids
            .enumerate()
            .map(|(slot, id)| {
                let (stop, acknowledged, ended) =
                    (stop.clone(), acknowledged.clone(), ended.clone());
                let mut raw = Raw::connect(port).expect("writer connects");
                let rng = Rng::new(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                std::thread::spawn(move || {
                    let log = write_loop(&mut raw, id, shape, rng, &stop, &acknowledged[slot]);
                    ended[slot].store(true, Ordering::SeqCst);
                    log
                })
            })
            .collect();
        Writers {
            stop,
            acknowledged,
            ended,
            handles,
        }
    }

    /// Waits (at most 60 s) until every writer has `at_least` acknowledged writes; panics if one
    /// stopped first (the server failed it before any kill).
    pub fn wait_acknowledged(&self, at_least: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.ended.iter().any(|e| e.load(Ordering::SeqCst)) {
                panic!("a writer stopped before the kill (see its error when finished)");
            }
            if self
                .acknowledged
                .iter()
                .all(|a| a.load(Ordering::SeqCst) >= at_least)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "writers did not reach {at_least} acknowledged writes within 60 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Stops the writers (those still running finish their batch) and returns their logs.
    pub fn finish(self) -> Vec<WriterLog> {
        self.stop.store(true, Ordering::SeqCst);
        self.handles
            .into_iter()
            .map(|handle| handle.join().expect("writer thread"))
            .collect()
    }
}

fn write_loop(
    raw: &mut Raw,
    id: u64,
    shape: Shape,
    mut rng: Rng,
    stop: &AtomicBool,
    progress: &AtomicU64,
) -> WriterLog {
    let mut log = WriterLog {
        id,
        shape,
        issued: 0,
        acknowledged: 0,
        acknowledged_at: Vec::new(),
        durable_claim: 0,
        ended: None,
    };
    let mut request = Vec::new();
    let mut next_commitpoint = COMMITPOINT_EVERY;
    while !stop.load(Ordering::SeqCst) {
        let batch = rng.in_range(1..MAX_BATCH + 1);
        request.clear();
        for write in log.issued..log.issued + batch {
            let command = write_command(shape, id, write);
            let parts: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
            encode_request(&mut request, &parts);
        }
        // Counted before sending: part of a failed send may still have reached the server.
        log.issued += batch;
        if let Err(error) = raw.send_bytes(&request) {
            log.ended = Some((Instant::now(), format!("send failed: {error}")));
            return log;
        }
        for _ in 0..batch {
            match raw.read() {
                Some(reply) if acknowledges(&reply) => {
                    log.acknowledged += 1;
                    log.acknowledged_at.push(Instant::now());
                    progress.store(log.acknowledged, Ordering::SeqCst);
                }
                other => {
                    log.ended = Some((Instant::now(), format!("a write answered {other:?}")));
                    return log;
                }
            }
        }
        if log.acknowledged >= next_commitpoint {
            next_commitpoint += COMMITPOINT_EVERY;
            match raw
                .send_bytes(b"*1\r\n$20\r\nPREFIXKV.COMMITPOINT\r\n")
                .ok()
                .and_then(|()| raw.read())
            {
                Some(Reply::Array(items)) if items.len() == 2 => match items[1] {
                    Reply::Integer(durable) => log.durable_claim = durable as u64,
                    ref other => panic!("COMMITPOINT durable count {other:?}"),
                },
                other => {
                    log.ended = Some((Instant::now(), format!("COMMITPOINT answered {other:?}")));
                    return log;
                }
            }
        }
    }
    log
}

/// SIGKILLs `server` while `writers` keep writing, then collects their logs; panics if a writer
/// had stopped before the kill. Returns the logs and the instant just before the kill.
pub fn kill_under_load(server: &mut Server, writers: Writers) -> (Vec<WriterLog>, Instant) {
    let killed_at = Instant::now();
    server.kill();
    let logs = writers.finish();
    for log in &logs {
        if let Some((at, why)) = &log.ended {
            assert!(
                *at >= killed_at,
                "writer {} stopped before the kill: {why}",
                log.id
            );
        }
    }
    (logs, killed_at)
}

/// Reads back every write of every writer (and a few past the last sent) from the server at
/// `port` and checks each writer with the prefix oracle; also checks each writer's COMMITPOINT
/// claim. Errors name the writer and the key.
pub fn check_writers(port: u16, logs: &[WriterLog]) -> Result<Vec<Recovery>, String> {
    let mut raw = Raw::connect(port).map_err(|e| format!("connect for the check: {e}"))?;
    let mut recoveries = Vec::with_capacity(logs.len());
    for log in logs {
        let count = log.issued + PROBE_PAST_ISSUED;
        let mut visible = visible_writes(&mut raw, log.id, count)?;
        if log.shape == Shape::Mixed {
            visible_in_collections(&mut raw, log.id, &mut visible)?;
        }
        let recovery = check_connection(log.issued, log.acknowledged, &visible).map_err(|v| {
            let missing = match v {
                prefixkv_testkit::acknowledged::Violation::Hole { missing, .. } => {
                    format!(" (missing key {})", key(log.id, missing))
                }
                _ => String::new(),
            };
            format!("writer {}: {v}{missing}", log.id)
        })?;
        if !recovery.covers(log.durable_claim) {
            return Err(format!(
                "writer {}: PREFIXKV.COMMITPOINT claimed {} durable writes, {} recovered (key {} missing)",
                log.id,
                log.durable_claim,
                recovery.recovered,
                key(log.id, recovery.recovered)
            ));
        }
        recoveries.push(recovery);
    }
    Ok(recoveries)
}

/// Whether each of writes `0..count` of writer `id` is there with its own value.
fn visible_writes(raw: &mut Raw, id: u64, count: u64) -> Result<Vec<bool>, String> {
    let mut visible = Vec::with_capacity(count as usize);
    let writes: Vec<u64> = (0..count).collect();
    for chunk in writes.chunks(MGET_KEYS) {
        let keys: Vec<String> = chunk.iter().map(|&write| key(id, write)).collect();
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        raw.send(&args);
        let Some(Reply::Array(values)) = raw.read() else {
            return Err("MGET: no array reply".into());
        };
        if values.len() != chunk.len() {
            return Err(format!(
                "MGET of {} keys: {} values",
                chunk.len(),
                values.len()
            ));
        }
        for (&write, found) in chunk.iter().zip(values) {
            visible.push(match found {
                Reply::NullBulkString | Reply::Null => false,
                Reply::BulkString(bytes) if bytes.as_ref() == value(id, write).as_bytes() => true,
                other => {
                    return Err(format!(
                        "key {} holds {other:?}, not the value {} its write sent",
                        key(id, write),
                        value(id, write)
                    ))
                }
            });
        }
    }
    Ok(visible)
}

/// Marks in `visible` the writes of writer `id` that its list, set, sorted set and hash hold
/// (the strings were read already). Any element that is not exactly what its write sent is an
/// error, and so is a list whose elements are not in write order.
fn visible_in_collections(raw: &mut Raw, id: u64, visible: &mut [bool]) -> Result<(), String> {
    let bulk = |reply: &Reply| match reply {
        Reply::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        other => Err(format!("expected a bulk string, got {other:?}")),
    };
    // `{id}:{i}` of this writer, with `i % 5 == class`.
    let write_of = |element: &str, class: u64| -> Result<u64, String> {
        element
            .strip_prefix(&format!("{id}:"))
            .and_then(|i| i.parse::<u64>().ok())
            .filter(|i| i % 5 == class)
            .ok_or_else(|| {
                format!("writer {id}: element {element:?} is no write of this writer and key")
            })
    };
    let mark = |write: u64, visible: &mut [bool]| -> Result<(), String> {
        let slot = visible
            .get_mut(write as usize)
            .ok_or_else(|| format!("writer {id}: element of write {write}, never issued"))?;
        *slot = true;
        Ok(())
    };
    let list_key = format!("list:{id}");
    let Reply::Array(items) = raw.call(&["LRANGE", &list_key, "0", "-1"]) else {
        return Err(format!("LRANGE {list_key}: no array"));
    };
    let mut previous = None;
    for item in &items {
        let write = write_of(&bulk(item)?, 1)?;
        if previous.is_some_and(|p| p >= write) {
            return Err(format!(
                "{list_key}: write {write} after write {previous:?}"
            ));
        }
        previous = Some(write);
        mark(write, visible)?;
    }
    let set_key = format!("set:{id}");
    match raw.call(&["SMEMBERS", &set_key]) {
        Reply::Array(items) | Reply::Set(items) => {
            for item in &items {
                mark(write_of(&bulk(item)?, 2)?, visible)?;
            }
        }
        other => return Err(format!("SMEMBERS {set_key}: {other:?}")),
    }
    let zset_key = format!("zset:{id}");
    let Reply::Array(items) = raw.call(&["ZRANGE", &zset_key, "0", "-1", "WITHSCORES"]) else {
        return Err(format!("ZRANGE {zset_key}: no array"));
    };
    for pair in items.chunks(2) {
        let write = write_of(&bulk(&pair[0])?, 3)?;
        if bulk(&pair[1])? != write.to_string() {
            return Err(format!("{zset_key}: write {write} has score {:?}", pair[1]));
        }
        mark(write, visible)?;
    }
    let hash_key = format!("hash:{id}");
    match raw.call(&["HGETALL", &hash_key]) {
        Reply::Array(items) => {
            for pair in items.chunks(2) {
                let write = write_of(&bulk(&pair[1])?, 4)?;
                if bulk(&pair[0])? != format!("f{write}") {
                    return Err(format!(
                        "{hash_key}: write {write} under field {:?}",
                        pair[0]
                    ));
                }
                mark(write, visible)?;
            }
        }
        other => return Err(format!("HGETALL {hash_key}: {other:?}")),
    }
    Ok(())
}

/// Fails if any writer lost an acknowledged write (the promise of `always`, and of `everysec` on
/// a process crash), naming the first lost key.
pub fn require_no_loss(logs: &[WriterLog], recoveries: &[Recovery]) -> Result<(), String> {
    for (log, recovery) in logs.iter().zip(recoveries) {
        if let Some(first) = recovery.first_lost() {
            return Err(format!(
                "writer {}: {} acknowledged writes lost, the first is key {} (acknowledged {}, recovered {})",
                log.id,
                recovery.lost,
                key(log.id, first),
                log.acknowledged,
                recovery.recovered
            ));
        }
    }
    Ok(())
}

/// Acknowledged writes lost over all writers, and how long before `killed_at` the oldest of them
/// had been acknowledged (zero when nothing was lost).
pub fn loss_window(
    logs: &[WriterLog],
    recoveries: &[Recovery],
    killed_at: Instant,
) -> (u64, Duration) {
    let mut lost = 0;
    let mut window = Duration::ZERO;
    for (log, recovery) in logs.iter().zip(recoveries) {
        lost += recovery.lost;
        if let Some(first) = recovery.first_lost() {
            let at = log.acknowledged_at[first as usize];
            window = window.max(killed_at.saturating_duration_since(at));
        }
    }
    (lost, window)
}
