//! The eviction loop (Redis's `performEvictions`): sample, rank, delete until memory fits.
//!
//! A round reads up to `maxmemory-samples` candidate keys (at most [`MAX_SAMPLE`]) from a random
//! index bucket on, through the store's sampler, which hands each key's access word without
//! touching it and wraps around the index at most once: a keyspace smaller than the sample is
//! seen whole, so with `maxmemory-samples` above the number of keys the choice is exact. The
//! volatile policies keep only keys with an expiry, read from each value's header; as the engine
//! has no separate index of expiring keys (Redis samples its `expires` dict), their round samples
//! [`MAX_SAMPLE`] keys and keeps the first `maxmemory-samples` with one. A round never walks
//! the index more than once: a keyspace smaller than the sample is seen whole, so with
//! `maxmemory-samples` above the number of keys the choice is exact.

use std::time::{Duration, Instant};

use prefixkv_store::{Sampled, StoreSession};

use super::access::{lru_clock, lru_idle_ms};
use super::pool::{Candidate, Pool};
use super::settings::{Rank, Settings};
use super::{used_memory, MAX_SAMPLE};
use crate::error::CommandError;
use crate::keyspace::{now_ms, split_key};
use crate::state::Server;
use crate::value;

/// Rounds in a row that may find no candidate before eviction gives up (a round that saw the
/// whole keyspace and found none gives up at once).
const MAX_EMPTY_ROUNDS: usize = 16;

/// What eviction before a command concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Memory is within maxmemory (or there is no limit).
    Fits,
    /// The time budget ran out after evicting: the command runs, the next write continues
    /// (Redis's `EVICT_RUNNING`).
    Evicting,
    /// Over maxmemory and nothing could be evicted (noeviction, or no eligible key): a command
    /// that may write is refused with OOM.
    Refused,
}

/// Redis's `evictionTimeLimitUs`: how long one command may evict, from
/// `maxmemory-eviction-tenacity` (`None`: no limit, at 100).
fn time_budget(tenacity: u32) -> Option<Duration> {
    if tenacity <= 10 {
        Some(Duration::from_micros(50 * u64::from(tenacity)))
    } else if tenacity < 100 {
        let micros = 500.0 * 1.15f64.powi(tenacity as i32 - 10);
        Some(Duration::from_micros(micros as u64))
    } else {
        None
    }
}

/// Whether a maxmemory is set and used memory is over it: the cheap test a write makes before
/// it takes the exec gate for [`evict_for_command`].
pub fn over_maxmemory(server: &Server) -> bool {
    let limit = server.settings.read().maxmemory_bytes;
    limit > 0 && used_memory(server) > limit
}

/// Evicts keys until used memory is within maxmemory, as the policy says, before a command that
/// may write. Runs under the exec gate (shared, or exclusive inside EXEC and scripts).
pub fn evict_for_command(
    server: &Server,
    session: &mut StoreSession,
) -> Result<Outcome, CommandError> {
    if !over_maxmemory(server) {
        return Ok(Outcome::Fits);
    }
    let (limit, settings) = {
        let config = server.settings.read();
        (config.maxmemory_bytes, config.eviction.clone())
    };
    let Some(rank) = settings.policy.rank() else {
        return Ok(Outcome::Refused);
    };
    // One evicting thread at a time; the others find memory freed when they get the lock.
    let mut pool = server.evictor.pool.lock();
    let started = Instant::now();
    let budget = time_budget(settings.tenacity);
    let mut freed = 0u64;
    let mut empty_rounds = 0;
    while used_memory(server) > limit {
        let (victim, whole) = if rank == Rank::Random {
            let (found, whole) = sample_round(session, &settings, 1)?;
            (found.into_iter().next().map(|c| (c.database, c.key)), whole)
        } else {
            let whole = fill_pool(server, session, &settings, rank, &mut pool)?;
            (pool.pop_best().map(|c| (c.database, c.key)), whole)
        };
        let Some((database, key)) = victim else {
            empty_rounds += 1;
            if whole || empty_rounds >= MAX_EMPTY_ROUNDS {
                return Ok(Outcome::Refused);
            }
            continue;
        };
        empty_rounds = 0;
        if evict_key(
            server,
            session,
            database,
            &key,
            settings.policy.volatile_only(),
        )? {
            freed += 1;
            // As Redis: the clock is read every 16 keys.
            if freed.is_multiple_of(16) && budget.is_some_and(|b| started.elapsed() > b) {
                return Ok(if used_memory(server) <= limit {
                    Outcome::Fits
                } else {
                    Outcome::Evicting
                });
            }
        }
    }
    Ok(Outcome::Fits)
}

/// One sampling round into the pool, each candidate scored by `rank`; whether the round saw
/// the whole keyspace.
fn fill_pool(
    server: &Server,
    session: &mut StoreSession,
    settings: &Settings,
    rank: Rank,
    pool: &mut Pool,
) -> Result<bool, CommandError> {
    let wanted = (settings.samples as usize).clamp(1, MAX_SAMPLE);
    let now = now_ms();
    let clock = lru_clock(now);
    let (found, whole) = sample_round(session, settings, wanted)?;
    for candidate in found {
        let score = match rank {
            Rank::Idle => lru_idle_ms(candidate.access, clock),
            Rank::Frequency => {
                255 - u64::from(server.keyspace.access.frequency(candidate.access, now))
            }
            Rank::Ttl => u64::MAX - candidate.expire_at_ms,
            Rank::Random => 0,
        };
        pool.offer(Candidate {
            score,
            database: candidate.database,
            key: candidate.key,
        });
    }
    Ok(whole)
}

/// A sampled key the policy may evict.
struct Sample {
    database: u8,
    key: Vec<u8>,
    access: u32,
    expire_at_ms: u64,
}

/// Up to `wanted` keys the policy may evict (user keys only; with an expiry under the volatile
/// policies) among one sample from a random index bucket on, and whether the sample saw the
/// whole keyspace (it held fewer keys than asked for).
fn sample_round(
    session: &mut StoreSession,
    settings: &Settings,
    wanted: usize,
) -> Result<(Vec<Sample>, bool), CommandError> {
    let volatile = settings.policy.volatile_only();
    let needs_expiry = volatile || settings.policy.rank() == Some(Rank::Ttl);
    // The volatile policies skip keys without an expiry: they read a whole sample's worth.
    let asked = if volatile { MAX_SAMPLE } else { wanted };
    let mut batch: Vec<Sampled> = Vec::new();
    session.sample(super::access::fast_random(), asked, &mut batch)?;
    let whole = batch.len() < asked;
    let mut found = Vec::new();
    let mut value = Vec::new();
    for sampled in &batch {
        let Some((database, key)) = split_key(&sampled.key) else {
            continue;
        };
        let mut expire_at_ms = 0;
        if needs_expiry {
            value.clear();
            if !session.read(&sampled.key, &mut value)? {
                continue;
            }
            expire_at_ms = value::decode_header(&value).map_or(0, |(_, e)| e);
            if expire_at_ms == 0 {
                continue;
            }
        }
        found.push(Sample {
            database,
            key: key.to_vec(),
            access: sampled.access,
            expire_at_ms,
        });
        if found.len() == wanted {
            break;
        }
    }
    Ok((found, whole))
}

/// Deletes `key` as DEL does if it still exists (with an expiry, under a volatile policy);
/// counts it and raises its `evicted` event. Whether it did.
fn evict_key(
    server: &Server,
    session: &mut StoreSession,
    database: u8,
    key: &[u8],
    volatile: bool,
) -> Result<bool, CommandError> {
    let keyspace = &server.keyspace;
    let mut txn = keyspace.begin(session, database, &[key]);
    let eligible = txn
        .get_quiet(database, key)?
        .is_some_and(|stored| !volatile || stored.expire_at_ms != 0);
    if !eligible {
        txn.commit()?;
        return Ok(false);
    }
    txn.delete(database, key)?;
    txn.commit()?;
    server
        .evictor
        .evicted_keys
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let notifier = &keyspace.notifier;
    if notifier.active() {
        // Not the command's write: an event of its own, as lazy expiry's.
        crate::notify::forget_last_touch(database, key);
        notifier.notify(crate::notify::EVICTED, "evicted", database, key);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_budget_follows_redis() {
        assert_eq!(time_budget(0), Some(Duration::ZERO));
        assert_eq!(time_budget(10), Some(Duration::from_micros(500)));
        assert_eq!(time_budget(11), Some(Duration::from_micros(575)));
        assert!(time_budget(99).unwrap() > Duration::from_secs(1));
        assert_eq!(time_budget(100), None);
    }
}
