//! The recovery measurement of `dredis`: clients write unique keys to D-Redis, one
//! redis-server is SIGKILLed, and `recovery_ms` is the time from the kill until every client
//! completed a batch on the new world-line. Afterwards every key and value of every client is read
//! from every Redis and checked by `dpr`'s verifier oracle ([`Oracle`]), which classifies rollback
//! reports for both experiments. Invariant of that check: an operation inside the last commit
//! point told to a client must be present whatever the report says; only operations after it
//! that the report calls uncertain may go either way; no key outside the oracle may exist.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prefixkv_dprnet::client::ClientError;
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_dprnet::{ClientConfig, DprRedisClient};
use prefixkv_resp::Reply;

use super::{Args, Deployment};
use crate::experiments::dpr::track::Oracle;

/// What the recovery measurement found: the time until every client was back, and the read-back
/// compared with every client's oracle.
pub(super) struct Recovery {
    pub(super) recovery_ms: f64,
    /// Operations compared (every tag of every client).
    pub(super) operations: u64,
    pub(super) verified: bool,
    pub(super) notes: Vec<String>,
}

/// One recovery client: writes unique keys (`u<session>:<tag>` = `v<tag>`, as `dpr`'s verifiers)
/// until `stop`, drains, and returns its oracle (what it was acknowledged, told committed and
/// told by rollback reports) and when it first completed a batch after a rollback.
fn recovery_client(
    config: ClientConfig,
    session_id: u64,
    stop: &AtomicBool,
) -> Result<(Oracle, Option<Instant>)> {
    let mut session = DprRedisClient::new(config)?.session(session_id)?;
    let mut oracle = Oracle::new(session_id);
    let mut back_on_new_world_line: Option<Instant> = None;
    let mut rolled_back = false;
    let mut next_tag = 0u64;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let step: Result<(), ClientError> = (|| {
            if stopping {
                return session.drain();
            }
            for _ in 0..16 {
                // The session numbers pushes 0, 1, 2, ... (a failed send still uses one).
                let tag = next_tag;
                next_tag += 1;
                oracle.pushed(tag);
                session.push(&[b"SET", &Oracle::key(session_id, tag), &Oracle::value(tag)])?;
            }
            session.flush()?;
            // What the client is told committed: the oracle holds the read-back to it, whatever
            // a later rollback report says.
            oracle.committed(&session.commit_point()?);
            Ok(())
        })();
        let completed = session.take_completed();
        if rolled_back && back_on_new_world_line.is_none() && !completed.is_empty() {
            back_on_new_world_line = Some(Instant::now());
        }
        for c in completed {
            oracle.completed(c.tag);
        }
        match step {
            Ok(()) if stopping => break,
            Ok(()) => {}
            Err(ClientError::Rollback(report)) => {
                rolled_back = true;
                oracle.rolled_back(&report);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok((oracle, back_on_new_world_line))
}

/// Every key of `session_id` that the Redis servers at `redis` hold, as tag → value (keys whose
/// tag does not parse are returned as the count of strays).
fn read_back_client(
    redis: &[SocketAddr],
    session_id: u64,
) -> Result<(BTreeMap<u64, Vec<u8>>, usize)> {
    let prefix = Oracle::key_prefix(session_id);
    let (mut found, mut strays) = (BTreeMap::new(), 0);
    for address in redis {
        let mut connection = RedisConnection::connect(*address, Duration::from_secs(10))?;
        let keys = match connection.command(&[b"KEYS", format!("{prefix}*").as_bytes()])? {
            Reply::Array(keys) => keys,
            other => bail!("KEYS answered {other:?}"),
        };
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .filter_map(|key| match key {
                Reply::BulkString(key) => Some(key.to_vec()),
                _ => None,
            })
            .collect();
        for chunk in keys.chunks(512) {
            let mut command: Vec<&[u8]> = vec![b"MGET"];
            command.extend(chunk.iter().map(Vec::as_slice));
            let Reply::Array(values) = connection.command(&command)? else {
                bail!("MGET answered something other than an array");
            };
            for (key, value) in chunk.iter().zip(values) {
                let tag = std::str::from_utf8(key)
                    .ok()
                    .and_then(|key| key.strip_prefix(&prefix)?.parse::<u64>().ok());
                match (tag, value) {
                    (Some(tag), Reply::BulkString(value)) => {
                        found.insert(tag, value.to_vec());
                    }
                    _ => strays += 1,
                }
            }
        }
    }
    Ok((found, strays))
}

/// Runs the recovery measurement: clients write unique keys, one redis-server is killed, and
/// after the recovery every client's keys are read back and checked by its oracle.
pub(super) fn recovery(deployment: &Deployment, args: &Args) -> Result<Recovery> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for client in 0..args.clients as u64 {
        let config = deployment.client_config("dredis", args);
        let stop = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            recovery_client(config, 2_000_000 + client, &stop)
        }));
    }
    // Load for a while (including commits) before the kill.
    std::thread::sleep(Duration::from_millis(4 * args.commit_interval_ms + 300));
    let pid = deployment.cluster.redis_pids()[0].context("shard 0 has no redis")?;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let kill_time = Instant::now();
    let world_line = deployment.cluster.cluster_state()?.world_line;
    let deadline = kill_time + Duration::from_secs(60);
    loop {
        let state = deployment.cluster.cluster_state()?;
        let all_back = deployment
            .cluster
            .proxy_world_lines()
            .iter()
            .all(|&w| w == state.world_line);
        if state.world_line > world_line && !state.recovering && all_back {
            break;
        }
        if Instant::now() > deadline {
            bail!("the D-Redis cluster did not recover within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Let every client complete batches on the new world-line.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let mut result = Recovery {
        recovery_ms: 0.0,
        operations: 0,
        verified: true,
        notes: Vec::new(),
    };
    let redis = deployment.cluster.redis_addresses();
    for thread in threads {
        let (oracle, back) = thread.join().expect("client thread")?;
        let session_id = oracle.session;
        let Some(back) = back else {
            bail!("client {session_id} never completed a batch on the new world-line");
        };
        result.recovery_ms = result
            .recovery_ms
            .max(back.duration_since(kill_time).as_secs_f64() * 1000.0);
        let (found, strays) = read_back_client(&redis, session_id)?;
        let check = oracle.check(&found);
        result.operations += oracle.expected.len() as u64;
        let wrong = check.errors.len() + strays;
        // A client none of whose writes had to survive checked nothing that could fail.
        if wrong > 0 || check.present == 0 {
            result.verified = false;
        }
        result.notes.extend(check.errors.iter().take(5).cloned());
        result.notes.push(format!(
            "recovery client {session_id}: {} present, {} absent, {} uncertain (after the last \
             commit point told), {} rollbacks, {wrong} mismatches",
            check.present, check.absent, check.either, oracle.rollbacks
        ));
    }
    Ok(result)
}
