//! `prefixkv-bench ycsb`: the engine's hot path against the maps people use, measured the way
//! FASTER measures itself (see [`driver`] and [`crate::workload::operations`]): pre-generated
//! keys and operations, pinned threads taking 3,200-operation chunks from a shared cursor, a
//! fixed duration per run. `cpr` measures its engine and maps with the same pieces.
//!
//! Contenders (alternated over rounds, docs/benchmarks.md rule 1): the engine without checkpoints,
//! without its batch prefetch hints (`engine-no-hints`, one operation at a time as every map
//! runs) and with them (`engine`), and with a Persian checkpoint every `--checkpoint-interval-ms`
//! (`engine-persian`, with hints); `dashmap` with SipHash and with `foldhash`, `papaya`, and 64
//! sharded `RwLock<HashMap>`s as a floor. Workloads YCSB-A/B/C and an F-style
//! read-modify-write mix, uniform or zipfian, over 8-byte keys and values.
//!
//! Headlines are like for like: `engine_over_<map>` is `engine-no-hints` over the map;
//! `engine_batched_over_<map>` is the hinted engine over the same map, which has no lookahead
//! (no prefetching map contender exists, see [`BATCHED_NOTE`]); `checkpointed_over_plain` is
//! `engine-persian` over `engine`, both hinted. The default `--variants` run all of them.
//!
//! Each contender is loaded once per round (keys `key(0..n)`, a bijective hash, so `n` distinct
//! keys), then runs every (workload, distribution, threads) point. Memory per key is measured in a
//! child process per contender (RSS after loading over the key count), so one contender's freed
//! memory never counts against another.
//!
//! Checks: after its runs, every loaded key is still present in every map (the workloads never
//! delete: a presence check only); and the checkpointed engine's newest checkpoint, recovered
//! after the round, is held to the stamp rule ([`crate::workload::stamp_rule`], as `cpr`): every
//! upsert stamps its session and serial, workers are numbered across the round and keep chunk
//! logs and acknowledgement counters ([`ledger`]), the checkpoint's CPR points must lie between
//! what each session had been acknowledged before that checkpoint was requested and what it
//! issued, and each key must hold a session's last write within its point.

mod contenders;
mod counters;
mod driver;
mod ledger;
#[cfg(feature = "rocksdb")]
mod rocksdb;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, ratio, Spread};
use crate::workload::maps::Loaded;
use crate::workload::operations::{self, Operations};
use crate::workload::KeyDistribution;
use crate::Common;
use contenders::Contender;
use driver::Workload;

/// Flags of `prefixkv-bench ycsb`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Distinct keys loaded (8-byte keys and values). Default 10,000,000 (quick: 1,000,000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Pre-generated operations per point (the cursor wraps around them). Default 32,000,000
    /// (quick: 4,000,000).
    #[arg(long)]
    pub operations: Option<u64>,
    /// Measured seconds per run. Default 10 (quick: 1).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Thread counts (comma separated). Default: 1 and the number of cores.
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Workloads: a, b, c, f. Default all (quick: a).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Option<Vec<Workload>>,
    /// Key distributions: uniform, zipfian. Default both (quick: uniform).
    #[arg(long, value_delimiter = ',')]
    pub distributions: Option<Vec<KeyDistribution>>,
    /// Contenders (comma separated): engine, engine-no-hints (no prefetch hints), engine-persian,
    /// dashmap-siphash, dashmap-foldhash, papaya, rwlock-sharded. Default all of those; also
    /// rocksdb, by name only, in a build with the cargo feature `rocksdb` (docs/benchmarks.md).
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// The `rocksdb` contender's LRU block cache, bytes. Default: the engine's log memory budget
    /// for `--keys` (the same byte budget; see `engine_config`).
    #[arg(long)]
    pub rocksdb_block_cache_bytes: Option<u64>,
    /// Milliseconds between the checkpointed engine's checkpoints. Default 5000 (quick: 1000).
    #[arg(long)]
    pub checkpoint_interval_ms: Option<u64>,
    /// Directory for the engine's checkpoints. Default: the system temp directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Internal: load one contender and print its memory use (run in a child process).
    #[arg(long, hide = true)]
    pub memory_child: Option<String>,
}

/// What `engine_batched_over_*` is and is not (also in `cpr`'s notes).
pub(crate) const BATCHED_NOTE: &str = "engine_over_* compare the engine without its prefetch \
    hints (engine-no-hints), one operation at a time as every map runs: the like-for-like \
    figures. engine_batched_over_* use the engine with its hints (index and record prefetches 16 \
    and 8 operations ahead) against the same maps without any lookahead; no prefetching map \
    contender was built (dashmap's raw shard API would reach a bucket ahead only at the price of \
    a second SipHash and a shard read lock per operation), so the batched ratios are not like for \
    like";

struct Plan {
    keys: u64,
    operations: u64,
    duration: Duration,
    threads: Vec<usize>,
    points: Vec<(Workload, KeyDistribution)>,
    contenders: Vec<Contender>,
    checkpoint_interval: Duration,
    data_dir: PathBuf,
    rocksdb_block_cache_bytes: u64,
}

/// What one run (contender, point, threads, round) measured.
#[derive(Clone, Copy, Debug)]
struct Run {
    ops_per_s: f64,
    instructions_per_op: Option<f64>,
    cache_misses_per_op: Option<f64>,
    checkpoints: u64,
}

/// Runs the experiment (or, with `--memory-child`, one contender's memory measurement).
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let plan = plan(common, args)?;
    if let Some(name) = &args.memory_child {
        memory_child(&plan, Contender::parse(name)?)?;
        std::process::exit(0);
    }
    let mut report = Report::new("ycsb");
    write_config(&mut report, common, &plan);
    let operations: Vec<Operations> = plan
        .points
        .iter()
        .enumerate()
        .map(|(index, &(workload, distribution))| {
            Operations::generate(
                workload.mix(),
                distribution,
                plan.keys,
                plan.operations,
                0x5EED_0000 + index as u64,
            )
        })
        .collect();
    // runs[(contender, point, threads)] = one Run per round.
    let mut runs: BTreeMap<(usize, usize, usize), Vec<Run>> = BTreeMap::new();
    let schedule = alternating_schedule(plan.contenders.len(), common.rounds());
    let progress = crate::progress::bar(schedule.len() as u64, "ycsb");
    for &(round, index) in &schedule {
        progress.set_message(format!("{} round {round}", plan.contenders[index].name()));
        run_round(&mut report, &plan, &operations, (round, index), &mut runs)?;
        progress.inc(1);
    }
    progress.finish_and_clear();

    let memory = measure_memory(&plan)?;
    write_rows(&mut report, &plan, &runs, &memory);
    write_summary(&mut report, &plan, &runs, &memory);
    write_plot(common, &plan, &runs)?;
    Ok(report)
}

fn write_config(report: &mut Report, common: &Common, plan: &Plan) {
    report.config("quick", common.quick);
    report.config("keys", plan.keys);
    report.config("key_bytes", 8);
    report.config("value_bytes", 8);
    report.config("operations_per_point", plan.operations);
    report.config("seconds_per_run", plan.duration.as_secs_f64());
    report.config("threads", plan.threads.clone());
    report.config("chunk_operations", operations::CHUNK_OPS);
    report.config(
        "checkpoint_interval_ms",
        plan.checkpoint_interval.as_millis() as u64,
    );
    report.config("rounds", common.rounds());
    report.config(
        "variants",
        plan.contenders.iter().map(|c| c.name()).collect::<Vec<_>>(),
    );
    report.config(
        "durability",
        "engine-persian writes fsynced checkpoints; rocksdb (if run) writes SST files without a \
         write-ahead log and never fsyncs; the other contenders keep nothing on disk",
    );
    #[cfg(feature = "rocksdb")]
    if plan.contenders.contains(&Contender::RocksDb) {
        // rocksdb_library_version (from RocksDB's OPTIONS file) is added when it is loaded.
        report.config("rocksdb_crate_version", rocksdb::CRATE_VERSION);
        report.config("rocksdb_block_cache_bytes", plan.rocksdb_block_cache_bytes);
        report.config(
            "rocksdb_options",
            "one DB for all threads; WAL off (WriteOptions::disable_wal); LRU block cache of \
             rocksdb_block_cache_bytes; compression none; reads get_pinned; RMW get_pinned + put; \
             other options RocksDB's defaults",
        );
    }
    report.notes.push(
        "hardware counters (instructions, cache misses per operation) are null where the machine \
         offers none"
            .into(),
    );
    report.notes.push(BATCHED_NOTE.into());
}

/// One round of one contender: load it, run every (point, threads), then check that every key
/// is still there (and, for the checkpointed engine, its newest checkpoint with the stamp rule).
fn run_round(
    report: &mut Report,
    plan: &Plan,
    operations: &[Operations],
    (round, index): (usize, usize),
    runs: &mut BTreeMap<(usize, usize, usize), Vec<Run>>,
) -> Result<()> {
    let contender = plan.contenders[index];
    let (dir, loaded) = load_in_temp_dir(plan, contender, "prefixkv-bench-ycsb-")?;
    if let Some(version) = &loaded.rocksdb_version {
        report.config("rocksdb_library_version", version.as_str());
    }
    let (map, store) = (loaded.map, loaded.store);
    let ledger = ledger::Ledger::default();
    for (key, measured) in measure_round(plan, &*map, store.as_deref(), operations, &ledger)
        .with_context(|| format!("{} round {round}", contender.name()))?
    {
        runs.entry((index, key.0, key.1))
            .or_default()
            .push(measured);
    }
    let present = count_present(&*map, plan.keys);
    report.check(
        "loaded keys present after the runs (presence only)",
        "the keys the load phase inserted",
        plan.keys,
        present == plan.keys,
    );
    if present != plan.keys {
        report.notes.push(format!(
            "{} round {round}: {} of {} keys present after the runs",
            contender.name(),
            present,
            plan.keys
        ));
    }
    drop(map);
    if let Some(store) = store {
        drop(store);
        let (ok, detail) =
            verify_checkpoint(plan, dir.path(), &ledger, &loaded.loaders, operations)?;
        report.check(
            "every key of the checkpointed engine's newest checkpoint, recovered after its round \
             (each value names the session and serial that wrote it)",
            "a replay of each session's operations up to its CPR point, the points held to what \
             the sessions had been acknowledged when that checkpoint was requested",
            plan.keys,
            ok,
        );
        if !ok {
            eprintln!("ycsb: engine-persian round {round}: verification FAILED: {detail}");
            report
                .notes
                .push(format!("engine-persian round {round}: {detail}"));
        }
    }
    Ok(())
}

/// Sizes after applying `--quick` defaults.
fn plan(common: &Common, args: &Args) -> Result<Plan> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let contenders = match &args.variants {
        Some(names) => names
            .iter()
            .map(|name| Contender::parse(name))
            .collect::<Result<Vec<_>>>()?,
        None => Contender::ALL.to_vec(),
    };
    let workloads = args.workloads.clone().unwrap_or_else(|| {
        if common.quick {
            vec![Workload::A]
        } else {
            vec![Workload::A, Workload::B, Workload::C, Workload::F]
        }
    });
    let distributions = args.distributions.clone().unwrap_or_else(|| {
        if common.quick {
            vec![KeyDistribution::Uniform]
        } else {
            vec![KeyDistribution::Uniform, KeyDistribution::Zipfian]
        }
    });
    let mut points = Vec::new();
    for &workload in &workloads {
        for &distribution in &distributions {
            points.push((workload, distribution));
        }
    }
    let mut threads = args.threads.clone().unwrap_or_else(|| vec![1, cores]);
    threads.sort_unstable();
    threads.dedup();
    if threads.is_empty() || threads.contains(&0) {
        bail!("--threads needs one or more positive counts");
    }
    let keys = args
        .keys
        .unwrap_or(if common.quick { 1_000_000 } else { 10_000_000 });
    let operations = args
        .operations
        .unwrap_or(if common.quick { 4_000_000 } else { 32_000_000 });
    if keys == 0 || operations == 0 || contenders.is_empty() || points.is_empty() {
        bail!("nothing to run: give keys, operations, contenders and workloads");
    }
    Ok(Plan {
        keys,
        operations,
        duration: Duration::from_secs_f64(args.seconds.unwrap_or(if common.quick {
            1.0
        } else {
            10.0
        })),
        threads,
        points,
        contenders,
        checkpoint_interval: Duration::from_millis(
            args.checkpoint_interval_ms
                .unwrap_or(if common.quick { 1000 } else { 5000 }),
        ),
        data_dir: args.data_dir.clone().unwrap_or_else(std::env::temp_dir),
        rocksdb_block_cache_bytes: args.rocksdb_block_cache_bytes.unwrap_or_else(|| {
            contenders::engine_config(keys, std::path::Path::new("")).log_memory_bytes
        }),
    })
}

/// Every (point, threads) run of one loaded contender, in order. For the checkpointed engine a
/// checkpoint driver runs beside the whole round, so checkpoints keep their cadence across runs.
fn measure_round(
    plan: &Plan,
    map: &dyn Loaded,
    store: Option<&prefixkv_engine::Store>,
    operations: &[Operations],
    ledger: &ledger::Ledger,
) -> Result<Vec<((usize, usize), Run)>> {
    let stop = AtomicBool::new(false);
    let counts = contenders::CheckpointCounts::default();
    std::thread::scope(|scope| -> Result<Vec<((usize, usize), Run)>> {
        let driver = store.map(|store| {
            let (stop, counts) = (&stop, &counts);
            scope.spawn(move || {
                contenders::checkpoint_driver(store, plan.checkpoint_interval, stop, counts, ledger)
            })
        });
        let mut measured = Vec::new();
        let mut failure = None;
        'points: for (point, ops) in operations.iter().enumerate() {
            for &threads in &plan.threads {
                match measure(plan, map, &counts, (point, ops), threads, ledger) {
                    Ok(run) => measured.push(((point, threads), run)),
                    Err(error) => {
                        failure = Some(error.context(format!("at {threads} threads")));
                        break 'points;
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(handle) = driver {
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("the checkpoint driver panicked"))??;
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(measured),
        }
    })
}

/// One run; its `checkpoints` are those of the round's driver that overlapped it (in progress
/// at some point of the run; 0 without a driver).
fn measure(
    plan: &Plan,
    map: &dyn Loaded,
    counts: &contenders::CheckpointCounts,
    (point, operations): (usize, &Operations),
    threads: usize,
    ledger: &ledger::Ledger,
) -> Result<Run> {
    let completed_before = counts.completed.load(Ordering::Relaxed);
    let (first_session, acknowledged) = ledger.start_run(threads)?;
    let counters = counters::Counters::start();
    let (ops_per_s, ends) = driver::run(
        threads,
        plan.duration,
        operations,
        &|_| map.worker(),
        first_session,
        &acknowledged,
    );
    ledger.finish_run(point, ends);
    let hardware = counters.and_then(counters::Counters::read);
    let total_ops = ops_per_s * plan.duration.as_secs_f64();
    Ok(Run {
        ops_per_s,
        instructions_per_op: hardware.map(|c| c.instructions as f64 / total_ops),
        cache_misses_per_op: hardware.map(|c| c.cache_misses as f64 / total_ops),
        checkpoints: counts.started.load(Ordering::Relaxed) - completed_before,
    })
}

/// How many of the loaded keys a map still holds.
fn count_present(map: &dyn Loaded, keys: u64) -> u64 {
    let mut worker = map.worker();
    (0..keys)
        .filter(|&index| worker.contains(operations::key(index)))
        .count() as u64
}

/// Reopens the checkpointed engine's directory and checks its newest checkpoint with the stamp
/// rule against the round's `ledger` ([`ledger::Ledger::check_recovered`]).
fn verify_checkpoint(
    plan: &Plan,
    dir: &std::path::Path,
    ledger: &ledger::Ledger,
    loaders: &[(prefixkv_engine::SessionId, u64)],
    operations: &[Operations],
) -> Result<(bool, String)> {
    let store = prefixkv_engine::Store::open(contenders::engine_config(plan.keys, dir))?;
    let Some(info) = store.recovery_info().cloned() else {
        return Ok((false, "no checkpoint was published to recover".into()));
    };
    let mut session = store.start_session();
    let mut read = crate::workload::stamp_rule::engine_reader(&mut session);
    Ok(ledger.check_recovered(plan.keys, loaders, operations, &info, &mut read))
}

/// Bytes of RSS per key after loading, per contender, each in its own child process.
fn measure_memory(plan: &Plan) -> Result<BTreeMap<&'static str, f64>> {
    let exe = std::env::current_exe().context("locating this binary to measure memory")?;
    let mut out = BTreeMap::new();
    for contender in &plan.contenders {
        let output = Command::new(&exe)
            .args(["ycsb", "--memory-child", contender.name(), "--keys"])
            .arg(plan.keys.to_string())
            .arg("--data-dir")
            .arg(&plan.data_dir)
            .arg("--rocksdb-block-cache-bytes")
            .arg(plan.rocksdb_block_cache_bytes.to_string())
            .output()
            .context("running the memory child")?;
        let text = String::from_utf8_lossy(&output.stdout);
        let bytes: Option<f64> = text
            .lines()
            .find_map(|line| line.strip_prefix("rss_growth_bytes "))
            .and_then(|value| value.trim().parse().ok());
        match bytes {
            Some(bytes) if output.status.success() => {
                out.insert(contender.name(), bytes / plan.keys as f64);
            }
            _ => bail!(
                "the memory child for {} failed: {}",
                contender.name(),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }
    Ok(out)
}

/// The child: load one contender, print how much resident memory that added.
fn memory_child(plan: &Plan, contender: Contender) -> Result<()> {
    let before = crate::memory::current_rss_bytes();
    let (_dir, loaded) = load_in_temp_dir(plan, contender, "prefixkv-bench-ycsb-memory-")?;
    let after = crate::memory::current_rss_bytes();
    println!("rss_growth_bytes {}", after.saturating_sub(before));
    drop(loaded);
    Ok(())
}

/// Loads `contender` with every core into a fresh temporary directory under the plan's data
/// directory (named with `prefix`). The directory is returned to be dropped after the map: the
/// map may hold files in it.
fn load_in_temp_dir(
    plan: &Plan,
    contender: Contender,
    prefix: &str,
) -> Result<(tempfile::TempDir, contenders::LoadedMap)> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&plan.data_dir)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let loaded = contenders::load(
        contender,
        plan.keys,
        cores,
        dir.path(),
        plan.rocksdb_block_cache_bytes,
    )?;
    Ok((dir, loaded))
}

fn write_rows(
    report: &mut Report,
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
    memory: &BTreeMap<&'static str, f64>,
) {
    for (&(contender, point, threads), rounds) in runs {
        let name = plan.contenders[contender].name();
        let (workload, distribution) = plan.points[point];
        let mut r = row([
            ("variant", Value::from(name)),
            ("workload", Value::from(workload.name())),
            (
                "distribution",
                Value::from(format!("{distribution:?}").to_lowercase()),
            ),
            ("threads", Value::from(threads)),
        ]);
        let throughput: Vec<f64> = rounds.iter().map(|run| run.ops_per_s).collect();
        Spread::of(&throughput).insert_into(&mut r, "throughput_ops_per_s");
        let median_of = |values: Vec<f64>| (!values.is_empty()).then(|| median(&values));
        for (field, values) in [
            (
                "instructions_per_op",
                rounds
                    .iter()
                    .filter_map(|run| run.instructions_per_op)
                    .collect(),
            ),
            (
                "cache_misses_per_op",
                rounds
                    .iter()
                    .filter_map(|run| run.cache_misses_per_op)
                    .collect(),
            ),
        ] {
            r.insert(
                field.into(),
                median_of(values).map_or(Value::Null, Value::from),
            );
        }
        r.insert(
            "checkpoints".into(),
            Value::from(rounds.iter().map(|run| run.checkpoints).sum::<u64>()),
        );
        r.insert(
            "bytes_per_key".into(),
            memory.get(name).map_or(Value::Null, |&b| Value::from(b)),
        );
        report.rows.push(r);
    }
}

/// The median over rounds of `contender`'s throughput at YCSB-A uniform and `threads` (NaN if
/// that point was not run).
fn median_throughput(
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
    contender: Contender,
    threads: usize,
) -> f64 {
    let headline = plan
        .points
        .iter()
        .position(|&p| p == (Workload::A, KeyDistribution::Uniform));
    let (Some(point), Some(index)) = (
        headline,
        plan.contenders.iter().position(|&c| c == contender),
    ) else {
        return f64::NAN;
    };
    runs.get(&(index, point, threads))
        .map_or(f64::NAN, |rounds| {
            median(&rounds.iter().map(|run| run.ops_per_s).collect::<Vec<_>>())
        })
}

fn write_summary(
    report: &mut Report,
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
    memory: &BTreeMap<&'static str, f64>,
) {
    let largest = *plan.threads.last().expect("threads is not empty");
    for (suffix, threads) in [
        ("", Some(largest)),
        ("_1t", plan.threads.contains(&1).then_some(1)),
    ] {
        let Some(threads) = threads else { continue };
        let at = |contender| median_throughput(plan, runs, contender, threads);
        let (hinted, plain) = (at(Contender::Engine), at(Contender::EngineNoHints));
        // Like for like: the engine one operation at a time, as every map runs. The hinted
        // engine (batch prefetches 16 operations ahead, an API no map here has) is published as
        // `engine_batched_over_*`, never under the plain name.
        for (name, other) in [
            ("dashmap_siphash", Contender::DashMapSipHash),
            ("dashmap_foldhash", Contender::DashMapFoldHash),
            ("papaya", Contender::Papaya),
            ("rwlock_sharded", Contender::ShardedRwLock),
        ] {
            let map = at(other);
            report.summary(&format!("engine_over_{name}{suffix}"), ratio(plain, map));
            report.summary(
                &format!("engine_batched_over_{name}{suffix}"),
                ratio(hinted, map),
            );
        }
        #[cfg(feature = "rocksdb")]
        if plan.contenders.contains(&Contender::RocksDb) {
            let rocks = at(Contender::RocksDb);
            report.summary(&format!("engine_over_rocksdb{suffix}"), ratio(plain, rocks));
            report.summary(
                &format!("engine_batched_over_rocksdb{suffix}"),
                ratio(hinted, rocks),
            );
        }
        report.summary(
            &format!("hints_over_no_hints{suffix}"),
            ratio(hinted, plain),
        );
        let checkpointed = median_throughput(plan, runs, Contender::EnginePersian, threads);
        // The checkpointed engine runs with hints, so it is compared with the hinted engine.
        report.summary(
            &format!("checkpointed_over_plain{suffix}"),
            ratio(checkpointed, hinted),
        );
    }
    let engine_bytes = memory.get("engine").copied().unwrap_or(f64::NAN);
    report.summary("bytes_per_key", engine_bytes);
    report.summary(
        "dashmap_siphash_bytes_per_key",
        memory.get("dashmap-siphash").copied().unwrap_or(f64::NAN),
    );
}

fn write_plot(
    common: &Common,
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
) -> Result<()> {
    let series = plan
        .contenders
        .iter()
        .map(|&contender| Series {
            label: contender.name().into(),
            points: plan
                .threads
                .iter()
                .map(|&threads| {
                    (
                        threads as f64,
                        median_throughput(plan, runs, contender, threads) / 1e6,
                    )
                })
                .filter(|(_, y)| y.is_finite())
                .collect(),
        })
        .collect();
    write_line_chart(
        &LineChart {
            title: format!(
                "YCSB-A uniform, {} keys: throughput against threads",
                plan.keys
            ),
            x_label: "threads".into(),
            y_label: "M ops/s".into(),
            series,
            markers: Vec::new(),
            log_x: false,
        },
        &common.out,
        "ycsb",
    )
}
