//! The memory phase's cache rows: each server as a cache under `maxmemory` with an eviction
//! policy (`allkeys-lru`, `allkeys-lfu`), driven by the traffic of a read-through cache.
//!
//! Method, per (policy, server):
//! - a fresh server (persistence off, as in [`super::memory`]); `CONFIG SET maxmemory-policy P`
//!   then `CONFIG SET maxmemory M` on a control connection (`maxmemory-samples` left at its
//!   default). A refusal of either is that side's failure in the row (our server refused
//!   every policy but `noeviction` before eviction existed), and the phase goes on;
//! - the key space is fixed by the data size, not by what fits: `K` keys `key:NNNNNNNNNNNN`
//!   (16 bytes) whose values of `V` bytes add up to about 4 × M ([`key_space`]), the same `K` for
//!   both servers, so each server's own overhead per key decides how much of it stays cached;
//! - traffic on one connection, pipelined `depth` deep: `depth` GETs of zipfian (θ 0.99,
//!   scrambled) keys, then a SET of a `V`-byte value for every GET that answered nil (a miss).
//!   The generator is seeded identically for both servers, so both see the same GET sequence.
//!   A warm-up of `warmup` requests (one key space's worth by default) runs first; then the
//!   counters ([`Tally`]) start from zero for `requests` GETs: hit ratio = hits / GETs;
//! - every `sample_every` requests (and at the start and end of the measurement) the control
//!   connection reads `INFO memory`'s `used_memory`: the row reports the minimum and maximum of
//!   `used_memory / maxmemory` ([`Usage`]), the target being a maximum ≤ 1.05;
//! - at the end, the server's `VmRSS` and `INFO stats`'s `evicted_keys` (informational: Redis's
//!   `used_memory` excludes allocator fragmentation, so RSS is where it shows).
//!
//! A SET refused (OOM) is counted, with the first error's text, not fatal: a cache that cannot
//! make room shows up as set errors and a lower hit ratio. A GET that answers an error, or any
//! reply of the wrong type, fails that side of the row.

use super::client::{reply_text, Client};
use super::finite;
use super::memory::{launch, padded, used_memory};
use super::processes::{Binaries, Kind, ServerProcess};
use crate::report::row;
use crate::stats::ratio;
use crate::workload::{KeyDistribution, KeyGenerator};
use anyhow::{anyhow, bail, Context, Result};
use prefixkv_resp::Reply;
use serde_json::{Map, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes of a key (`key:` and 12 digits).
pub const KEY_BYTES: u64 = 16;
/// Largest value size the flags accept.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Deepest pipeline the flags accept.
pub const MAX_PIPELINE: usize = 10_000;
/// The targets.
pub const TARGET_HIT_RATIO_OVER_REDIS: f64 = 1.0;
/// Largest `used_memory / maxmemory` the target allows.
pub const TARGET_USED_OVER_MAX: f64 = 1.05;
/// Seed of the key generator, the same for every server and policy.
const SEED: u64 = 31;

/// Sizes of the cache rows.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `maxmemory` of both servers.
    pub maxmemory_bytes: u64,
    /// Bytes of every value.
    pub value_bytes: usize,
    /// Keys the traffic draws from ([`key_space`]).
    pub key_space: u64,
    /// Requests before the counters start.
    pub warmup: u64,
    /// Measured GETs.
    pub requests: u64,
    /// GETs per pipelined batch.
    pub pipeline: usize,
    /// `used_memory` is sampled every this many requests.
    pub sample_every: u64,
    /// Policies, one row each.
    pub policies: Vec<String>,
    /// Extra arguments for our server.
    pub prefixkv_args: Vec<String>,
}

impl Plan {
    /// A plan whose key space holds about 4 × `maxmemory_bytes` of keys and values, warmed up by
    /// one key space's worth of requests, sampling `used_memory` about 500 times.
    pub fn new(
        maxmemory_bytes: u64,
        value_bytes: usize,
        requests: u64,
        pipeline: usize,
        policies: Vec<String>,
        prefixkv_args: Vec<String>,
    ) -> Result<Plan> {
        if maxmemory_bytes < 1 << 20 {
            bail!("--cache-maxmemory must be at least 1 MiB");
        }
        if !(1..=MAX_VALUE_BYTES).contains(&value_bytes) {
            bail!("--cache-value-bytes must be in 1..={MAX_VALUE_BYTES}");
        }
        if !(1..=MAX_PIPELINE).contains(&pipeline) {
            bail!("--cache-pipeline must be in 1..={MAX_PIPELINE}");
        }
        if requests == 0 {
            bail!("--cache-requests must be at least 1");
        }
        for policy in &policies {
            if !matches!(
                policy.as_str(),
                "allkeys-lru" | "allkeys-lfu" | "allkeys-random"
            ) {
                bail!(
                    "cache policy {policy:?}: expected allkeys-lru, allkeys-lfu or allkeys-random"
                );
            }
        }
        let key_space = key_space(maxmemory_bytes, value_bytes);
        if key_space > super::memory::MAX_STRINGS {
            bail!("the cache's key space ({key_space} keys) exceeds 12-digit keys");
        }
        Ok(Plan {
            maxmemory_bytes,
            value_bytes,
            key_space,
            warmup: key_space,
            requests,
            pipeline,
            sample_every: (requests / 500).max(1000),
            policies,
            prefixkv_args,
        })
    }

    /// Our server's engine log budget: four times `maxmemory`, at least 1 GiB, so the server's
    /// eviction (not the engine's log limit) is what holds memory down.
    pub fn engine_memory_bytes(&self) -> u64 {
        (self.maxmemory_bytes * 4).max(1 << 30)
    }
}

/// Keys whose keys and values add up to about 4 × `maxmemory_bytes` (rounded up).
pub fn key_space(maxmemory_bytes: u64, value_bytes: usize) -> u64 {
    (4 * maxmemory_bytes)
        .div_ceil(KEY_BYTES + value_bytes as u64)
        .max(1)
}

/// The row name of a policy: `cache_allkeys_lru`.
pub fn row_name(policy: &str) -> String {
    format!("cache_{}", policy.replace('-', "_"))
}

/// What the traffic saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// GETs answered.
    pub gets: u64,
    /// GETs answered with a value.
    pub hits: u64,
    /// SETs sent after a miss and answered.
    pub sets: u64,
    /// SETs answered with an error (OOM: the server could not make room).
    pub set_errors: u64,
    /// The first SET error's text.
    pub first_set_error: Option<String>,
}

impl Tally {
    /// Counts one GET reply: `Ok(true)` for a hit, `Ok(false)` for a miss (nil), an error for
    /// anything else (a cache's GET does not fail).
    pub fn get(&mut self, reply: &Reply) -> Result<bool> {
        let hit = match reply {
            Reply::BulkString(_) => true,
            Reply::NullBulkString | Reply::Null => false,
            other => bail!("GET answered {}", reply_text(other)),
        };
        self.gets += 1;
        self.hits += u64::from(hit);
        Ok(hit)
    }

    /// Counts one SET reply: `OK`, or an error reply counted as a set error.
    pub fn set(&mut self, reply: &Reply) -> Result<()> {
        match reply {
            Reply::SimpleString(text) if &text[..] == b"OK" => {}
            Reply::Error(text) => {
                self.set_errors += 1;
                self.first_set_error
                    .get_or_insert_with(|| String::from_utf8_lossy(text).into_owned());
            }
            other => bail!("SET answered {}", reply_text(other)),
        }
        self.sets += 1;
        Ok(())
    }

    /// Hits over GETs (NaN before any GET).
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits as f64, self.gets as f64)
    }
}

/// The range of `used_memory / maxmemory` over the samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Smallest ratio seen.
    pub min: f64,
    /// Largest ratio seen.
    pub max: f64,
    /// Samples taken.
    pub samples: u64,
}

impl Default for Usage {
    fn default() -> Usage {
        Usage {
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            samples: 0,
        }
    }
}

impl Usage {
    /// Adds one sample.
    pub fn record(&mut self, used_bytes: u64, maxmemory_bytes: u64) {
        let value = used_bytes as f64 / maxmemory_bytes as f64;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.samples += 1;
    }
}

/// One server's cache run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The measured requests' counters.
    pub tally: Tally,
    /// `used_memory / maxmemory` over the measurement.
    pub usage: Usage,
    /// `VmRSS` at the end.
    pub rss_end_bytes: u64,
    /// `used_memory` at the end.
    pub used_end_bytes: u64,
    /// `INFO stats`'s `evicted_keys` at the end, if reported.
    pub evicted_keys: Option<u64>,
    /// Seconds the measured requests took.
    pub seconds: f64,
}

/// Sets the policy, then `maxmemory`; the first refusal is the error.
fn configure(control: &mut Client, policy: &str, maxmemory_bytes: u64) -> Result<()> {
    let limit = maxmemory_bytes.to_string();
    for (name, value) in [("maxmemory-policy", policy), ("maxmemory", limit.as_str())] {
        let reply = control.call(&["CONFIG", "SET", name, value])?;
        if !matches!(&reply, Reply::SimpleString(text) if &text[..] == b"OK") {
            bail!("CONFIG SET {name} {value}: {}", reply_text(&reply));
        }
    }
    Ok(())
}

/// Runs one policy on a fresh `kind` server in `dir`, and kills the server.
pub fn run_one(
    binaries: &Binaries,
    kind: Kind,
    policy: &str,
    plan: &Plan,
    dir: &Path,
) -> Result<Outcome> {
    let launch = launch(kind, plan.engine_memory_bytes(), &plan.prefixkv_args, dir);
    let mut server = ServerProcess::start(binaries, &launch, Duration::from_secs(60))?;
    let pid = server.pid().ok_or_else(|| anyhow!("server has no PID"))?;
    let mut control = Client::connect(server.port)?;
    configure(&mut control, policy, plan.maxmemory_bytes)?;
    let mut traffic = Traffic {
        client: Client::connect(server.port)?,
        keys: KeyGenerator::new(KeyDistribution::Zipfian, plan.key_space, SEED),
        value: vec![b'v'; plan.value_bytes],
        pipeline: plan.pipeline,
    };
    traffic.run(plan.warmup, &mut Tally::default(), &mut |_| Ok(()))?;

    let mut usage = Usage::default();
    let mut sample = |control: &mut Client| -> Result<()> {
        let used = used_memory(control)?.context("INFO memory has no used_memory")?;
        usage.record(used, plan.maxmemory_bytes);
        Ok(())
    };
    sample(&mut control)?;
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut next_sample = plan.sample_every;
    traffic.run(plan.requests, &mut tally, &mut |done| {
        if done >= next_sample {
            next_sample = done + plan.sample_every;
            sample(&mut control)?;
        }
        Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    sample(&mut control)?;
    let used_end_bytes = used_memory(&mut control)?.unwrap_or(0);
    let evicted_keys = control
        .info("stats")?
        .into_iter()
        .find(|(name, _)| name == "evicted_keys")
        .and_then(|(_, value)| value.parse().ok());
    let rss_end_bytes = crate::memory::rss_bytes_of(pid).context("reading the server's VmRSS")?;
    server.kill();
    Ok(Outcome {
        tally,
        usage,
        rss_end_bytes,
        used_end_bytes,
        evicted_keys,
        seconds,
    })
}

/// The read-through cache client.
struct Traffic {
    client: Client,
    keys: KeyGenerator,
    value: Vec<u8>,
    pipeline: usize,
}

impl Traffic {
    /// Sends `requests` GETs (and a SET after each miss) into `tally`, calling `after` with the
    /// GETs done so far after each batch.
    fn run(
        &mut self,
        requests: u64,
        tally: &mut Tally,
        after: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        let mut done = 0;
        let mut batch = Vec::with_capacity(self.pipeline);
        let mut misses = Vec::with_capacity(self.pipeline);
        while done < requests {
            batch.clear();
            misses.clear();
            let size = (requests - done).min(self.pipeline as u64);
            for _ in 0..size {
                let key = padded("key:", self.keys.next_key(), 12);
                self.client.queue(&[b"GET", &key]);
                batch.push(key);
            }
            self.client.flush()?;
            for key in batch.drain(..) {
                if !tally.get(&self.client.read()?)? {
                    misses.push(key);
                }
            }
            if !misses.is_empty() {
                for key in &misses {
                    self.client.queue(&[b"SET", key, &self.value]);
                }
                self.client.flush()?;
                for _ in 0..misses.len() {
                    tally.set(&self.client.read()?)?;
                }
            }
            done += size;
            after(done)?;
        }
        Ok(())
    }
}

/// One side's fields of a row, prefixed with the server's name.
fn insert_side(cell: &mut Map<String, Value>, kind: Kind, side: &Result<Outcome, String>) {
    let prefix = kind.name();
    let fields: Vec<(&str, Value)> = match side {
        Ok(o) => vec![
            ("hit_ratio", finite(o.tally.hit_ratio())),
            ("gets", Value::from(o.tally.gets)),
            ("hits", Value::from(o.tally.hits)),
            ("sets", Value::from(o.tally.sets)),
            ("set_errors", Value::from(o.tally.set_errors)),
            (
                "first_set_error",
                o.tally
                    .first_set_error
                    .as_deref()
                    .map_or(Value::Null, Value::from),
            ),
            ("used_over_max_min", finite(o.usage.min)),
            ("used_over_max_max", finite(o.usage.max)),
            ("used_memory_samples", Value::from(o.usage.samples)),
            ("used_memory_end_bytes", Value::from(o.used_end_bytes)),
            ("rss_end_bytes", Value::from(o.rss_end_bytes)),
            (
                "evicted_keys",
                o.evicted_keys.map_or(Value::Null, Value::from),
            ),
            (
                "throughput_ops_per_s",
                finite(o.tally.gets as f64 / o.seconds),
            ),
            ("error", Value::Null),
        ],
        Err(error) => vec![
            ("hit_ratio", Value::Null),
            ("error", Value::from(error.as_str())),
        ],
    };
    for (name, value) in fields {
        cell.insert(format!("{prefix}_{name}"), value);
    }
}

/// Our hit ratio over Redis's, if both sides ran.
pub fn hit_ratio_over_redis(
    ours: &Result<Outcome, String>,
    redis: &Result<Outcome, String>,
) -> Option<f64> {
    let value = ratio(
        ours.as_ref().ok()?.tally.hit_ratio(),
        redis.as_ref().ok()?.tally.hit_ratio(),
    );
    value.is_finite().then_some(value)
}

/// The row of one policy, with both servers' figures, the ratio and the targets.
pub fn row_of(
    policy: &str,
    plan: &Plan,
    ours: &Result<Outcome, String>,
    redis: &Result<Outcome, String>,
) -> Map<String, Value> {
    let over = hit_ratio_over_redis(ours, redis);
    let ours_max = ours.as_ref().ok().map(|o| o.usage.max);
    let mut cell = row([
        ("phase", Value::from("cache")),
        ("test", Value::from(row_name(policy))),
        ("policy", Value::from(policy)),
        ("maxmemory_bytes", Value::from(plan.maxmemory_bytes)),
        ("key_space", Value::from(plan.key_space)),
        ("key_bytes", Value::from(KEY_BYTES)),
        ("value_bytes", Value::from(plan.value_bytes as u64)),
        ("warmup_requests", Value::from(plan.warmup)),
        ("requests", Value::from(plan.requests)),
        ("pipeline", Value::from(plan.pipeline as u64)),
    ]);
    insert_side(&mut cell, Kind::Prefixkv, ours);
    insert_side(&mut cell, Kind::Redis, redis);
    let targets = [
        (
            "hit_ratio_over_redis",
            over.map_or(Value::Null, Value::from),
        ),
        (
            "target_hit_ratio_over_redis",
            Value::from(format!(">= {TARGET_HIT_RATIO_OVER_REDIS}")),
        ),
        (
            "hit_ratio_target_met",
            over.map_or(Value::Null, |r| {
                Value::from(r >= TARGET_HIT_RATIO_OVER_REDIS)
            }),
        ),
        (
            "target_used_over_max_max",
            Value::from(format!("<= {TARGET_USED_OVER_MAX}")),
        ),
        (
            "used_memory_target_met",
            ours_max
                .filter(|m| m.is_finite())
                .map_or(Value::Null, |m| Value::from(m <= TARGET_USED_OVER_MAX)),
        ),
    ];
    for (name, value) in targets {
        cell.insert(name.into(), value);
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn the_key_space_holds_four_times_maxmemory() {
        assert_eq!(key_space(256 << 20, 240), 4 << 20);
        // Rounded up: never less data than 4 × maxmemory.
        let keys = key_space(1 << 20, 100);
        assert!(keys * 116 >= 4 << 20 && (keys - 1) * 116 < 4 << 20);
        let plan = Plan::new(
            16 << 20,
            240,
            200_000,
            16,
            vec!["allkeys-lru".into()],
            vec![],
        )
        .unwrap();
        assert_eq!(plan.key_space, 262_144);
        assert_eq!(plan.warmup, plan.key_space);
        assert_eq!(plan.sample_every, 1000);
        assert_eq!(plan.engine_memory_bytes(), 1 << 30);
    }

    #[test]
    fn plans_outside_the_bounds_are_refused() {
        let plan = |max, value, pipeline, policy: &str| {
            Plan::new(max, value, 1000, pipeline, vec![policy.into()], vec![])
        };
        assert!(plan(1 << 20, 100, 16, "allkeys-lfu").is_ok());
        assert!(plan(1000, 100, 16, "allkeys-lru").is_err());
        assert!(plan(1 << 20, 0, 16, "allkeys-lru").is_err());
        assert!(plan(1 << 20, MAX_VALUE_BYTES + 1, 16, "allkeys-lru").is_err());
        assert!(plan(1 << 20, 100, MAX_PIPELINE + 1, "allkeys-lru").is_err());
        assert!(plan(1 << 20, 100, 16, "volatile-lru").is_err());
    }

    #[test]
    fn hits_misses_and_set_errors_are_counted() {
        let mut tally = Tally::default();
        assert!(tally
            .get(&Reply::BulkString(Bytes::from_static(b"v")))
            .unwrap());
        assert!(!tally.get(&Reply::NullBulkString).unwrap());
        assert!(!tally.get(&Reply::Null).unwrap());
        assert!(tally
            .get(&Reply::Error(Bytes::from_static(b"ERR x")))
            .is_err());
        tally
            .set(&Reply::SimpleString(Bytes::from_static(b"OK")))
            .unwrap();
        tally
            .set(&Reply::Error(Bytes::from_static(b"OOM first")))
            .unwrap();
        tally
            .set(&Reply::Error(Bytes::from_static(b"OOM second")))
            .unwrap();
        assert!(tally.set(&Reply::Integer(1)).is_err());
        assert_eq!(
            tally,
            Tally {
                gets: 3,
                hits: 1,
                sets: 3,
                set_errors: 2,
                first_set_error: Some("OOM first".into()),
            }
        );
        assert!((tally.hit_ratio() - 1.0 / 3.0).abs() < 1e-12);
        assert!(Tally::default().hit_ratio().is_nan());
    }

    #[test]
    fn usage_keeps_the_range() {
        let mut usage = Usage::default();
        for used in [90, 104, 97] {
            usage.record(used, 100);
        }
        assert_eq!((usage.min, usage.max, usage.samples), (0.9, 1.04, 3));
    }

    fn outcome(hits: u64, max: f64) -> Outcome {
        Outcome {
            tally: Tally {
                gets: 100,
                hits,
                ..Tally::default()
            },
            usage: Usage {
                min: 0.9,
                max,
                samples: 2,
            },
            rss_end_bytes: 1,
            used_end_bytes: 1,
            evicted_keys: None,
            seconds: 1.0,
        }
    }

    #[test]
    fn rows_judge_both_targets_and_a_refused_policy_is_a_failure_not_a_number() {
        let plan = Plan::new(1 << 20, 100, 1000, 16, vec!["allkeys-lru".into()], vec![]).unwrap();
        let cell = row_of(
            "allkeys-lru",
            &plan,
            &Ok(outcome(60, 1.02)),
            &Ok(outcome(50, 1.0)),
        );
        assert_eq!(cell["test"], "cache_allkeys_lru");
        assert_eq!(cell["hit_ratio_over_redis"], 1.2);
        assert_eq!(cell["hit_ratio_target_met"], true);
        assert_eq!(cell["used_memory_target_met"], true);

        let cell = row_of(
            "allkeys-lru",
            &plan,
            &Ok(outcome(40, 1.2)),
            &Ok(outcome(50, 1.0)),
        );
        assert_eq!(cell["hit_ratio_target_met"], false);
        assert_eq!(cell["used_memory_target_met"], false);

        let refused = Err("CONFIG SET maxmemory-policy allkeys-lru: ERR ...".to_string());
        let cell = row_of("allkeys-lru", &plan, &refused, &Ok(outcome(50, 1.0)));
        assert!(cell["hit_ratio_over_redis"].is_null());
        assert!(cell["hit_ratio_target_met"].is_null());
        assert!(cell["used_memory_target_met"].is_null());
        assert_eq!(cell["redis_hit_ratio"], 0.5);
        assert!(cell["prefixkv_error"]
            .as_str()
            .unwrap()
            .contains("maxmemory-policy"));
    }
}
