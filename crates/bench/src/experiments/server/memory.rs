//! The memory phase's footprint rows: how many bytes each server holds per small string and per
//! collection element, measured as the growth of the server's resident set while a known dataset
//! is loaded.
//!
//! Datasets ([`Dataset`]): `N` small strings (`SET key:NNNNNNNNNNNN val:NNNNNNNNNNNN`, 16-byte
//! keys and 16-byte values), and one hash (`HSET h f:NNNNNNNNNN v:NNNNNNNN`), one set
//! (`SADD s m:NNNNNNNNNN`) and one sorted set (`ZADD z <i> m:NNNNNNNNNN`) of `M` elements each.
//! No value, field or member is a decimal number, so Redis cannot store them as integers (its
//! `int` string encoding or an intset): both servers hold the same bytes.
//!
//! Method, per (dataset, server):
//! - a fresh server (free loopback port, fresh data directory, persistence off: Redis
//!   `--appendonly no --save ""`, ours `--appendfsync none`), killed by PID afterwards;
//! - one client connection opened first (its buffers count in "before"), then `VmRSS` of
//!   `/proc/<pid>/status` and `INFO memory`'s `used_memory`;
//! - the dataset loaded in pipelined batches of [`Plan::batch`] commands, one element per command
//!   (never MSET or multi-field HSET: the per-command path is what is measured), every reply
//!   checked (`OK`, or `:1` for a new element), then the element count checked with DBSIZE /
//!   HLEN / SCARD / ZCARD;
//! - `VmRSS` and `used_memory` again. Bytes per element = RSS growth / elements. `used_memory`
//!   is informational: Redis's excludes allocator fragmentation, ours counts the engine log.
//!
//! Invariants: a failure on one server (a start that fails, an error reply such as OOM, a count
//! that does not match) becomes that side's `error` in the row and the phase goes on with the next
//! cell; the row's ratio and `target_met` are then `null`, never a number from a partial load.

use super::client::{reply_text, Client};
use super::processes::{Binaries, Durability, Kind, Launch, ServerProcess};
use crate::report::{row, Report};
use crate::stats::ratio;
use anyhow::{anyhow, bail, Context, Result};
use prefixkv_resp::Reply;
use serde_json::{Map, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The servers of every row: ours first (the `prefixkv_` side), then Redis.
const SERVERS: [Kind; 2] = [Kind::Prefixkv, Kind::Redis];

/// Largest element count of a collection: the `v:NNNNNNNN` values have 8 digits.
pub const MAX_ELEMENTS: u64 = 100_000_000;
/// Largest small-string count: the keys have 12 digits.
pub const MAX_STRINGS: u64 = 1_000_000_000_000;

/// Sizes of the footprint rows.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Small strings loaded (full 10M, `--quick` 200k).
    pub strings: u64,
    /// Elements of each collection (full 1M, `--quick` 50k).
    pub elements: u64,
    /// Commands per pipelined batch.
    pub batch: usize,
    /// Extra arguments for our server.
    pub prefixkv_args: Vec<String>,
}

impl Plan {
    /// Our server's engine log budget: room for 512 bytes per element at least (the pages are
    /// allocated as the log fills, so the unused budget costs no resident memory).
    pub fn engine_memory_bytes(&self) -> u64 {
        (self.strings.max(self.elements) * 512).max(1 << 30)
    }

    /// Refuses sizes the element formats cannot express at their fixed lengths.
    pub fn validate(&self) -> Result<()> {
        if self.strings == 0 || self.strings > MAX_STRINGS {
            bail!("--memory-strings must be in 1..={MAX_STRINGS}");
        }
        if self.elements == 0 || self.elements > MAX_ELEMENTS {
            bail!("--memory-elements must be in 1..={MAX_ELEMENTS}");
        }
        if !(1..=100_000).contains(&self.batch) {
            bail!("the memory phase's batch must be in 1..=100000");
        }
        Ok(())
    }
}

/// One footprint row's dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dataset {
    /// `SET key:NNNNNNNNNNNN val:NNNNNNNNNNNN`.
    SmallStrings,
    /// `HSET h f:NNNNNNNNNN v:NNNNNNNN`.
    Hash,
    /// `SADD s m:NNNNNNNNNN`.
    Set,
    /// `ZADD z <i> m:NNNNNNNNNN`.
    SortedSet,
}

impl Dataset {
    /// Every dataset, in row order.
    pub const ALL: [Dataset; 4] = [
        Dataset::SmallStrings,
        Dataset::Hash,
        Dataset::Set,
        Dataset::SortedSet,
    ];

    /// The row's `test` name.
    pub fn row_name(self) -> &'static str {
        match self {
            Dataset::SmallStrings => "memory_small_strings",
            Dataset::Hash => "memory_hash",
            Dataset::Set => "memory_set",
            Dataset::SortedSet => "memory_zset",
        }
    }

    /// The target for our bytes per element over Redis's (at most this).
    pub fn target(self) -> f64 {
        match self {
            Dataset::SmallStrings => 0.8,
            _ => 1.0,
        }
    }

    /// Elements loaded under `plan`.
    pub fn count(self, plan: &Plan) -> u64 {
        match self {
            Dataset::SmallStrings => plan.strings,
            _ => plan.elements,
        }
    }

    /// What one element is, in words for the row.
    fn describe(self) -> &'static str {
        match self {
            Dataset::SmallStrings => {
                "SET key:NNNNNNNNNNNN val:NNNNNNNNNNNN (16-byte key and value)"
            }
            Dataset::Hash => "HSET h f:NNNNNNNNNN v:NNNNNNNN (one hash)",
            Dataset::Set => "SADD s m:NNNNNNNNNN (one set)",
            Dataset::SortedSet => "ZADD z <i> m:NNNNNNNNNN (one sorted set, score = i)",
        }
    }

    /// The command that adds element `index`.
    pub fn command(self, index: u64) -> Vec<Vec<u8>> {
        let text = |s: &str| s.as_bytes().to_vec();
        match self {
            Dataset::SmallStrings => vec![
                text("SET"),
                padded("key:", index, 12),
                padded("val:", index, 12),
            ],
            Dataset::Hash => vec![
                text("HSET"),
                text("h"),
                padded("f:", index, 10),
                padded("v:", index, 8),
            ],
            Dataset::Set => vec![text("SADD"), text("s"), padded("m:", index, 10)],
            Dataset::SortedSet => vec![
                text("ZADD"),
                text("z"),
                index.to_string().into_bytes(),
                padded("m:", index, 10),
            ],
        }
    }

    /// Whether `reply` acknowledges a new element.
    fn acknowledged(self, reply: &Reply) -> bool {
        match self {
            Dataset::SmallStrings => matches!(reply, Reply::SimpleString(t) if &t[..] == b"OK"),
            _ => matches!(reply, Reply::Integer(1)),
        }
    }

    /// The command that counts what was loaded.
    fn count_command(self) -> &'static [&'static str] {
        match self {
            Dataset::SmallStrings => &["DBSIZE"],
            Dataset::Hash => &["HLEN", "h"],
            Dataset::Set => &["SCARD", "s"],
            Dataset::SortedSet => &["ZCARD", "z"],
        }
    }
}

/// `prefix` then `index` zero-padded to `width` digits.
pub fn padded(prefix: &str, index: u64, width: usize) -> Vec<u8> {
    format!("{prefix}{index:0width$}").into_bytes()
}

/// One server's footprint for one dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    /// Elements loaded (and counted back).
    pub elements: u64,
    /// `VmRSS` before loading.
    pub rss_before_bytes: u64,
    /// `VmRSS` after loading.
    pub rss_after_bytes: u64,
    /// `used_memory` before loading, if the server reports it.
    pub used_before_bytes: Option<u64>,
    /// `used_memory` after loading.
    pub used_after_bytes: Option<u64>,
    /// Seconds the load took.
    pub load_seconds: f64,
}

impl Footprint {
    /// RSS growth per element (0 if RSS shrank: the server returned more than it took).
    pub fn bytes_per_element(&self) -> f64 {
        self.rss_after_bytes.saturating_sub(self.rss_before_bytes) as f64 / self.elements as f64
    }

    /// `used_memory` growth per element, if both samples exist.
    pub fn used_memory_per_element(&self) -> Option<f64> {
        Some(
            self.used_after_bytes?
                .saturating_sub(self.used_before_bytes?) as f64
                / self.elements as f64,
        )
    }
}

/// `INFO memory`'s `used_memory`, or `None` if the server does not report it.
pub fn used_memory(client: &mut Client) -> Result<Option<u64>> {
    Ok(client
        .info("memory")?
        .into_iter()
        .find(|(name, _)| name == "used_memory")
        .and_then(|(_, value)| value.parse().ok()))
}

/// How the phase starts `kind` in `dir`: persistence off on both sides.
pub(super) fn launch(kind: Kind, engine_memory_bytes: u64, extra: &[String], dir: &Path) -> Launch {
    Launch {
        kind,
        durability: Durability::None,
        dir: dir.to_path_buf(),
        prefixkv_extra: ["--engine-memory".into(), engine_memory_bytes.to_string()]
            .into_iter()
            .chain(extra.iter().cloned())
            .collect(),
    }
}

/// Measures one dataset on a fresh `kind` server in `dir`, and kills the server.
pub fn measure(
    binaries: &Binaries,
    kind: Kind,
    dataset: Dataset,
    plan: &Plan,
    dir: &Path,
) -> Result<Footprint> {
    let launch = launch(kind, plan.engine_memory_bytes(), &plan.prefixkv_args, dir);
    let mut server = ServerProcess::start(binaries, &launch, Duration::from_secs(60))?;
    let pid = server.pid().ok_or_else(|| anyhow!("server has no PID"))?;
    let rss = || crate::memory::rss_bytes_of(pid).context("reading the server's VmRSS");
    let mut client = Client::connect(server.port)?;
    let used_before_bytes = used_memory(&mut client)?;
    let rss_before_bytes = rss()?;
    let count = dataset.count(plan);
    let started = Instant::now();
    load(&mut client, dataset, count, plan.batch)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let rss_after_bytes = rss()?;
    let used_after_bytes = used_memory(&mut client)?;
    let counted = client.call(dataset.count_command())?;
    if !matches!(counted, Reply::Integer(n) if n as u64 == count) {
        bail!(
            "{} answered {} after {count} elements were acknowledged",
            dataset.count_command().join(" "),
            reply_text(&counted)
        );
    }
    server.kill();
    Ok(Footprint {
        elements: count,
        rss_before_bytes,
        rss_after_bytes,
        used_before_bytes,
        used_after_bytes,
        load_seconds,
    })
}

/// Adds elements `0..count` in pipelined batches, failing on the first reply that does not
/// acknowledge a new element (an OOM, a wrong type, an existing element).
fn load(client: &mut Client, dataset: Dataset, count: u64, batch: usize) -> Result<()> {
    let mut next = 0;
    while next < count {
        let end = (next + batch as u64).min(count);
        for index in next..end {
            let command = dataset.command(index);
            let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
            client.queue(&args);
        }
        client.flush()?;
        for index in next..end {
            let reply = client.read()?;
            if !dataset.acknowledged(&reply) {
                bail!(
                    "element {index} of {}: answered {}",
                    dataset.row_name(),
                    reply_text(&reply)
                );
            }
        }
        next = end;
    }
    Ok(())
}

/// Runs every footprint row and then every cache row, each (row, server) on a fresh server in
/// its own directory under `temp` (removed afterwards), and adds the config, rows, summary
/// ratios and notes to `report`. A failing side is recorded in its row and the phase goes on.
pub fn run_phase(
    binaries: &Binaries,
    plan: &Plan,
    cache: &super::cache::Plan,
    temp: &Path,
    report: &mut Report,
) -> Result<()> {
    record_config(plan, cache, report);
    let cells = (Dataset::ALL.len() + cache.policies.len()) * SERVERS.len();
    let bar = crate::progress::bar(cells as u64, "server: memory");
    for dataset in Dataset::ALL {
        let sides: Vec<_> = SERVERS
            .map(|kind| {
                run_cell(&bar, temp, dataset.row_name(), kind, |dir| {
                    measure(binaries, kind, dataset, plan, dir)
                })
            })
            .into();
        report.summary(
            &format!("{}_prefixkv_over_redis", dataset.row_name()),
            over_redis(&sides[0], &sides[1]).unwrap_or(f64::NAN),
        );
        report
            .rows
            .push(row_of(dataset, dataset.count(plan), &sides[0], &sides[1]));
    }
    for policy in &cache.policies {
        let name = super::cache::row_name(policy);
        let sides: Vec<_> = SERVERS
            .map(|kind| {
                run_cell(&bar, temp, &name, kind, |dir| {
                    super::cache::run_one(binaries, kind, policy, cache, dir)
                })
            })
            .into();
        report.summary(
            &format!("{name}_hit_ratio_over_redis"),
            super::cache::hit_ratio_over_redis(&sides[0], &sides[1]).unwrap_or(f64::NAN),
        );
        report.summary(
            &format!("{name}_used_over_max_max"),
            sides[0].as_ref().map_or(f64::NAN, |o| o.usage.max),
        );
        report
            .rows
            .push(super::cache::row_of(policy, cache, &sides[0], &sides[1]));
    }
    bar.finish_and_clear();
    Ok(())
}

/// Runs one (row, server) cell in `temp/<name>-<server>`, removed afterwards; an error becomes
/// its text (with its causes) for the row.
fn run_cell<T>(
    bar: &indicatif::ProgressBar,
    temp: &Path,
    name: &str,
    kind: Kind,
    work: impl FnOnce(&Path) -> Result<T>,
) -> Result<T, String> {
    bar.set_message(format!("{name} on {}", kind.name()));
    let dir = temp.join(format!("{name}-{}", kind.name()));
    let outcome = work(&dir).map_err(|error| format!("{error:#}"));
    // One server's data is gone before the next server loads its own.
    let _ = std::fs::remove_dir_all(&dir);
    bar.inc(1);
    outcome
}

/// The phase's sizes and method, in the report's config and notes.
fn record_config(plan: &Plan, cache: &super::cache::Plan, report: &mut Report) {
    report.config("memory_strings", plan.strings);
    report.config("memory_elements", plan.elements);
    report.config("memory_batch", plan.batch as u64);
    report.config("memory_engine_memory_bytes", plan.engine_memory_bytes());
    report.config(
        "memory_method",
        "per row and server: a fresh server (redis --appendonly no --save \"\"; prefixkv \
         --appendfsync none), one pipelined connection, one element per command, VmRSS growth \
         over the load / elements; INFO used_memory before and after is informational",
    );
    report.config("cache_maxmemory_bytes", cache.maxmemory_bytes);
    report.config("cache_value_bytes", cache.value_bytes as u64);
    report.config("cache_key_space", cache.key_space);
    report.config("cache_warmup_requests", cache.warmup);
    report.config("cache_requests", cache.requests);
    report.config("cache_pipeline", cache.pipeline as u64);
    report.config("cache_sample_every_requests", cache.sample_every);
    report.config("cache_policies", cache.policies.clone());
    report.config("cache_engine_memory_bytes", cache.engine_memory_bytes());
    report.config(
        "cache_method",
        "per policy and server: a fresh server, CONFIG SET maxmemory-policy then maxmemory \
         (maxmemory-samples default); zipfian (theta 0.99, scrambled, same seed on both) GETs \
         pipelined, a SET of the fixed-size value after each nil; key space = 4 x maxmemory of \
         key + value bytes; warm-up of one key space of requests, then hit ratio = hits / GETs",
    );
    report.config(
        "memory_targets",
        serde_json::json!({
            "memory_small_strings_prefixkv_over_redis": "<= 0.8",
            "memory_hash_prefixkv_over_redis": "<= 1.0",
            "memory_set_prefixkv_over_redis": "<= 1.0",
            "memory_zset_prefixkv_over_redis": "<= 1.0",
            "cache_hit_ratio_over_redis": ">= 1.0",
            "cache_used_over_max_max": "<= 1.05",
        }),
    );
    report.notes.push(
        "memory phase: one measurement per row and server (memory and hit ratios do not depend \
         on the machine's load the way throughput does); Redis's used_memory excludes allocator \
         fragmentation, so the cache rows' rss_end_bytes is where fragmentation shows"
            .into(),
    );
}

/// One side's fields of a row, prefixed with the server's name.
fn insert_side(cell: &mut Map<String, Value>, kind: Kind, side: &Result<Footprint, String>) {
    let prefix = kind.name();
    let optional = |value: Option<u64>| value.map_or(Value::Null, Value::from);
    let fields: Vec<(&str, Value)> = match side {
        Ok(f) => vec![
            ("bytes_per_element", Value::from(f.bytes_per_element())),
            ("rss_before_bytes", Value::from(f.rss_before_bytes)),
            ("rss_after_bytes", Value::from(f.rss_after_bytes)),
            ("used_memory_before_bytes", optional(f.used_before_bytes)),
            ("used_memory_after_bytes", optional(f.used_after_bytes)),
            (
                "used_memory_per_element_bytes",
                f.used_memory_per_element().map_or(Value::Null, Value::from),
            ),
            ("load_s", Value::from(f.load_seconds)),
            ("error", Value::Null),
        ],
        Err(error) => vec![
            ("bytes_per_element", Value::Null),
            ("error", Value::from(error.as_str())),
        ],
    };
    for (name, value) in fields {
        cell.insert(format!("{prefix}_{name}"), value);
    }
}

/// Our bytes per element over Redis's, if both sides loaded everything.
pub fn over_redis(
    ours: &Result<Footprint, String>,
    redis: &Result<Footprint, String>,
) -> Option<f64> {
    let value = ratio(
        ours.as_ref().ok()?.bytes_per_element(),
        redis.as_ref().ok()?.bytes_per_element(),
    );
    value.is_finite().then_some(value)
}

/// The row of one dataset, with both servers' figures, the ratio and the target.
pub fn row_of(
    dataset: Dataset,
    elements: u64,
    ours: &Result<Footprint, String>,
    redis: &Result<Footprint, String>,
) -> Map<String, Value> {
    let over = over_redis(ours, redis);
    let mut cell = row([
        ("phase", Value::from("memory")),
        ("test", Value::from(dataset.row_name())),
        ("elements", Value::from(elements)),
        ("element", Value::from(dataset.describe())),
    ]);
    insert_side(&mut cell, Kind::Prefixkv, ours);
    insert_side(&mut cell, Kind::Redis, redis);
    cell.insert(
        "prefixkv_over_redis".into(),
        over.map_or(Value::Null, Value::from),
    );
    cell.insert(
        "target_prefixkv_over_redis".into(),
        Value::from(format!("<= {}", dataset.target())),
    );
    cell.insert(
        "target_met".into(),
        over.map_or(Value::Null, |r| Value::from(r <= dataset.target())),
    );
    cell
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_strings_are_sixteen_byte_keys_and_values_that_are_not_numbers() {
        for index in [0, 7, 123_456_789, MAX_STRINGS - 1] {
            let command = Dataset::SmallStrings.command(index);
            assert_eq!(command[1].len(), 16);
            assert_eq!(command[2].len(), 16);
            assert!(std::str::from_utf8(&command[2])
                .unwrap()
                .parse::<i64>()
                .is_err());
        }
        assert_eq!(
            Dataset::SmallStrings.command(42)[1],
            b"key:000000000042".to_vec()
        );
    }

    #[test]
    fn collection_elements_have_fixed_lengths_and_distinct_members() {
        let hash = Dataset::Hash.command(MAX_ELEMENTS - 1);
        assert_eq!((hash[2].len(), hash[3].len()), (12, 10));
        assert_ne!(Dataset::Set.command(1)[2], Dataset::Set.command(2)[2]);
        let zset = Dataset::SortedSet.command(5);
        assert_eq!(zset[2], b"5".to_vec());
        assert_eq!(zset[3], b"m:0000000005".to_vec());
    }

    #[test]
    fn plans_beyond_the_formats_are_refused() {
        let plan = |strings, elements| Plan {
            strings,
            elements,
            batch: 1000,
            prefixkv_args: Vec::new(),
        };
        assert!(plan(10, 10).validate().is_ok());
        assert!(plan(0, 10).validate().is_err());
        assert!(plan(10, MAX_ELEMENTS + 1).validate().is_err());
        assert_eq!(plan(10, 10).engine_memory_bytes(), 1 << 30);
        assert_eq!(plan(10_000_000, 10).engine_memory_bytes(), 5_120_000_000);
    }

    fn footprint(before: u64, after: u64) -> Footprint {
        Footprint {
            elements: 100,
            rss_before_bytes: before,
            rss_after_bytes: after,
            used_before_bytes: Some(10),
            used_after_bytes: None,
            load_seconds: 1.0,
        }
    }

    #[test]
    fn rows_carry_the_ratio_and_the_target_only_when_both_sides_loaded() {
        let ours = Ok(footprint(1000, 8000)); // 70 bytes per element
        let redis = Ok(footprint(1000, 11_000)); // 100
        let cell = row_of(Dataset::SmallStrings, 100, &ours, &redis);
        assert_eq!(cell["prefixkv_bytes_per_element"], 70.0);
        assert_eq!(cell["redis_bytes_per_element"], 100.0);
        assert_eq!(cell["prefixkv_over_redis"], 0.7);
        assert_eq!(cell["target_met"], true);
        assert!(cell["prefixkv_used_memory_per_element_bytes"].is_null());

        let cell = row_of(Dataset::Hash, 100, &Ok(footprint(0, 20_000)), &redis);
        assert_eq!(cell["target_met"], false);

        let failed = Err("OOM command not allowed".to_string());
        let cell = row_of(Dataset::Set, 100, &failed, &redis);
        assert!(cell["prefixkv_over_redis"].is_null());
        assert!(cell["target_met"].is_null());
        assert_eq!(cell["prefixkv_error"], "OOM command not allowed");
    }

    #[test]
    fn a_shrinking_rss_counts_as_no_growth() {
        assert_eq!(footprint(5000, 4000).bytes_per_element(), 0.0);
    }
}
