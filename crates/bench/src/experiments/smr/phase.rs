//! One measured phase of closed-loop clients against a replica group, and the verification that
//! follows it.
//!
//! Invariants of the oracle: every SET carries a value unique to (phase, client, sequence); in a
//! phase client `c` of `n` writes only keys congruent to `c` mod `n`, and phases never overlap,
//! so the last acknowledged value of a key (in phase order) is the only value a correct replica
//! may hold at the end. Verification SIGKILLs a replica (a follower, or the only replica),
//! restarts it from its directory, and reads every key back from it through the client port —
//! it never trusts a replica's own report of its state.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Result};
use prefixkv_resp::Reply;
use prefixkv_smr::client::{ClusterClient, MAX_LOAD_PAIRS};
use prefixkv_smr::types::NodeId;

use super::cluster::{call, Cluster, WAIT};
use crate::stats::Latencies;

/// Width of a throughput bucket.
pub const BUCKET_SECONDS: f64 = 0.1;

/// What a phase does.
pub struct PhasePlan {
    /// Distinguishes this phase's values from every other phase's.
    pub phase: u64,
    /// Closed-loop clients.
    pub clients: usize,
    /// Keys `0..keys` are loaded and written.
    pub keys: u64,
    /// Value size.
    pub value_bytes: usize,
    /// Warm-up before measuring.
    pub warmup_seconds: f64,
    /// Measured time.
    pub seconds: f64,
    /// Δ; `None`: from the warm-up's throughput, so that `checkpoints_wanted` fall in the phase.
    pub delta: Option<u64>,
    /// Checkpoints wanted when Δ is chosen.
    pub checkpoints_wanted: u64,
}

/// What a phase measured.
pub struct PhaseResult {
    /// Acknowledged SETs per bucket.
    pub buckets: Vec<f64>,
    /// Leader checkpoints (start, end) in seconds from the measurement's start.
    pub checkpoints: Vec<(f64, f64)>,
    /// Δ boundaries the leader skipped (previous checkpoint still writing).
    pub skipped: u64,
    /// Δ used.
    pub delta: u64,
    /// Acknowledged SETs in the measured time.
    pub operations: u64,
    /// Measured time.
    pub elapsed: f64,
    /// Latency of every acknowledged SET in the measured time.
    pub latency: Latencies,
    /// Each written key's last acknowledged value.
    pub acknowledged: BTreeMap<u64, Vec<u8>>,
}

/// Runs one phase against the leader.
pub async fn run_phase(cluster: &Cluster, leader: NodeId, plan: &PhasePlan) -> Result<PhaseResult> {
    let acknowledged = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for client_number in 0..plan.clients {
        let (acknowledged, measuring, stop) =
            (acknowledged.clone(), measuring.clone(), stop.clone());
        let addresses = cluster.clients.clone();
        let (keys, value_bytes, clients_count, phase) =
            (plan.keys, plan.value_bytes, plan.clients, plan.phase);
        clients.push(tokio::spawn(async move {
            let mut client = ClusterClient::new(addresses);
            // A blocking checkpoint of GBs stalls every commit for its whole duration.
            client.retry_for = WAIT;
            client.reply_timeout = WAIT;
            let mut latency = Latencies::new();
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (client_number as u64 + 1);
            let mut last_acknowledged: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            let owned = client_keys(keys, clients_count, client_number);
            let mut sequence = 0u64;
            while !stop.load(Ordering::Relaxed) && owned > 0 {
                // xorshift: cheap, independent per client.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let key = (state % owned) * clients_count as u64 + client_number as u64;
                sequence += 1;
                let value = unique_value(phase, client_number, sequence, value_bytes);
                let sent = Instant::now();
                match client.call(&[b"SET", &key_bytes(key), &value]).await? {
                    Reply::SimpleString(_) => {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                        if measuring.load(Ordering::Relaxed) {
                            latency.record(sent.elapsed());
                        }
                        last_acknowledged.insert(key, value);
                    }
                    other => anyhow::bail!("SET answered {other:?}"),
                }
            }
            anyhow::Ok((last_acknowledged, latency))
        }));
    }
    let warmup_start = acknowledged.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(plan.warmup_seconds)).await;
    let warmup_rate =
        (acknowledged.load(Ordering::Relaxed) - warmup_start) as f64 / plan.warmup_seconds;
    let delta = plan.delta.unwrap_or_else(|| {
        ((warmup_rate * plan.seconds / plan.checkpoints_wanted.max(1) as f64) as u64).max(100)
    });
    cluster.set_checkpoint_every(delta).await?;
    let events_before = cluster.checkpoint_count(leader).await?;
    let skipped_before = cluster.status_number(leader, "checkpoints_skipped").await?;

    // Measure: sample the acknowledgement counter every bucket.
    let origin = SystemTime::now();
    let start = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    let mut buckets = Vec::new();
    let first = acknowledged.load(Ordering::Relaxed);
    let mut previous = first;
    let bucket_count = (plan.seconds / BUCKET_SECONDS).round().max(1.0) as u64;
    let mut interval = tokio::time::interval_at(
        tokio::time::Instant::from_std(start) + Duration::from_secs_f64(BUCKET_SECONDS),
        Duration::from_secs_f64(BUCKET_SECONDS),
    );
    for _ in 0..bucket_count {
        interval.tick().await;
        let now = acknowledged.load(Ordering::Relaxed);
        buckets.push((now - previous) as f64 / BUCKET_SECONDS);
        previous = now;
    }
    let elapsed = start.elapsed().as_secs_f64();
    measuring.store(false, Ordering::Relaxed);
    let operations = previous - first;
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged_values = BTreeMap::new();
    let mut all_latency = Latencies::new();
    for client in clients {
        let (values, latency) = client.await??;
        acknowledged_values.extend(values);
        all_latency.merge(&latency);
    }
    cluster.set_checkpoint_every(0).await?;
    let checkpoints = cluster
        .checkpoint_events(leader, events_before, origin)
        .await?
        .into_iter()
        .filter(|event| event.started < elapsed)
        .map(|event| {
            let finished = event.finished.unwrap_or(elapsed).min(elapsed);
            (event.started.max(0.0), finished)
        })
        .collect();
    let skipped = cluster.status_number(leader, "checkpoints_skipped").await? - skipped_before;
    Ok(PhaseResult {
        buckets,
        checkpoints,
        skipped,
        delta,
        operations,
        elapsed,
        latency: all_latency,
        acknowledged: acknowledged_values,
    })
}

/// What clients were told: the loaded keys and each written key's last acknowledged value.
pub struct Expected {
    /// Keys `0..keys` were loaded.
    pub keys: u64,
    /// The loaded value.
    pub loaded: Vec<u8>,
    /// Each written key's last acknowledged value, over every phase in order.
    pub acknowledged: BTreeMap<u64, Vec<u8>>,
}

/// SIGKILLs a replica (a follower if there is one, else the only replica), restarts it from
/// its directory, waits until it applied what the leader had, and reads every key back from it
/// with `MGET`. Returns (verified, what was checked).
pub async fn verify(
    cluster: &mut Cluster,
    leader: NodeId,
    expected: &Expected,
) -> Result<(bool, String)> {
    let victim = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .unwrap_or(leader);
    let leader_applied = cluster.status_number(leader, "applied_index").await?;
    cluster.kill(victim);
    cluster.spawn(victim)?;
    let recovered_at = cluster.status_number(victim, "checkpoint_index").await?;
    cluster.wait_for_leader().await?;
    cluster.wait_applied(victim, leader_applied).await?;
    let mut connection = cluster.connect(victim).await?;
    let mut wrong = Vec::new();
    let mut first = 0u64;
    while first < expected.keys {
        let last = (first + MAX_LOAD_PAIRS as u64).min(expected.keys);
        let names: Vec<Vec<u8>> = (first..last).map(key_bytes).collect();
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(names.iter().map(Vec::as_slice));
        let Reply::Array(values) = call(&mut connection, &args).await? else {
            bail!("MGET on the restarted replica did not answer an array");
        };
        let values: Vec<Option<&[u8]>> = values
            .iter()
            .map(|value| match value {
                Reply::BulkString(bytes) => Some(&bytes[..]),
                _ => None,
            })
            .collect();
        wrong.extend(wrong_keys(expected, first, &values));
        first = last;
    }
    let verified = wrong.is_empty() && recovered_at > 0;
    Ok((
        verified,
        format!(
            "replica {victim} SIGKILLed and restarted from checkpoint {recovered_at} + log, caught \
             up to index {leader_applied}: {} acknowledged writes and {} keys read back with MGET, \
             {} wrong{}",
            expected.acknowledged.len(),
            expected.keys,
            wrong.len(),
            wrong
                .first()
                .map_or(String::new(), |k| format!(" (first: key {k})"))
        ),
    ))
}

/// Keys `first..first + read.len()` whose value read back is not what the clients were told.
pub fn wrong_keys(expected: &Expected, first: u64, read: &[Option<&[u8]>]) -> Vec<u64> {
    read.iter()
        .zip(first..)
        .filter(|(value, key)| {
            let want = expected
                .acknowledged
                .get(key)
                .map_or(expected.loaded.as_slice(), Vec::as_slice);
            **value != Some(want)
        })
        .map(|(_, key)| key)
        .collect()
}

/// How many keys client `client` of `clients` owns (keys congruent to it).
pub fn client_keys(keys: u64, clients: usize, client: usize) -> u64 {
    let (clients, client) = (clients as u64, client as u64);
    keys / clients + u64::from(client < keys % clients)
}

/// A value unique to (phase, client, sequence), `value_bytes` long (longer if the tag needs
/// it), so a lost or reordered write changes what is read back.
pub fn unique_value(phase: u64, client: usize, sequence: u64, value_bytes: usize) -> Vec<u8> {
    let mut value = format!("p{phase}c{client}s{sequence}:").into_bytes();
    value.resize(value.len().max(value_bytes), b'v');
    value
}

/// The name of key `key`.
pub fn key_bytes(key: u64) -> Vec<u8> {
    format!("user{key:012}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_keep_values_past_two_milliseconds() {
        let mut latency = Latencies::new();
        for value_us in [1_500u64, 2_500, 3_500, 1_000_000] {
            latency.record(Duration::from_micros(value_us));
        }
        // Three significant digits: the median is 2.5 ms within 0.1 %.
        let median_ms = latency.quantile_ms(0.5);
        assert!(
            (2.497..=2.503).contains(&median_ms),
            "median {median_ms} ms"
        );
        let max_ms = latency.quantile_ms(1.0);
        assert!(max_ms >= 999.0, "max {max_ms} ms");
    }

    fn expected() -> Expected {
        let mut acknowledged = BTreeMap::new();
        acknowledged.insert(3, unique_value(0, 0, 7, 16));
        acknowledged.insert(5, unique_value(0, 1, 2, 16));
        Expected {
            keys: 8,
            loaded: b"loaded".to_vec(),
            acknowledged,
        }
    }

    fn image(expected: &Expected) -> Vec<Option<Vec<u8>>> {
        (0..expected.keys)
            .map(|k| {
                Some(
                    expected
                        .acknowledged
                        .get(&k)
                        .unwrap_or(&expected.loaded)
                        .clone(),
                )
            })
            .collect()
    }

    fn check(expected: &Expected, replica: &[Option<Vec<u8>>]) -> Vec<u64> {
        let read: Vec<Option<&[u8]>> = replica.iter().map(|v| v.as_deref()).collect();
        // In two batches, as verification reads them.
        let mut wrong = wrong_keys(expected, 0, &read[..5]);
        wrong.extend(wrong_keys(expected, 5, &read[5..]));
        wrong
    }

    #[test]
    fn the_oracle_passes_an_intact_replica_and_catches_a_dropped_or_stale_write() {
        let expected = expected();
        let mut replica = image(&expected);
        assert!(check(&expected, &replica).is_empty());
        replica[3] = Some(unique_value(0, 0, 6, 16)); // an older write of the same client
        assert_eq!(check(&expected, &replica), vec![3]);
        replica[3] = Some(expected.acknowledged[&3].clone());
        replica[5] = None; // an acknowledged key lost
        assert_eq!(check(&expected, &replica), vec![5]);
    }

    #[test]
    fn clients_own_every_key_once_and_values_are_unique_per_phase() {
        let (keys, clients) = (10u64, 3usize);
        let owned: u64 = (0..clients).map(|c| client_keys(keys, clients, c)).sum();
        assert_eq!(owned, keys);
        assert_ne!(unique_value(0, 0, 1, 4), unique_value(0, 1, 1, 4));
        assert_ne!(unique_value(0, 0, 1, 4), unique_value(1, 0, 1, 4));
    }
}
