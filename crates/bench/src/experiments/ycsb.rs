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
//! read-modify-write mix, uniform or zipfian, over 8-byte keys and, for the engines and RocksDB,
//! values of `--value-bytes` (8 by default; the maps always hold a `u64`).
//!
//! Issue 33 (data larger than memory): by name, `engine-tiered` is the engine with its storage
//! tier and a log budget of `--log-memory-bytes` (run like `engine-no-hints`, without hints), and
//! `rocksdb` (cargo feature `rocksdb`) gets a block cache of the same bytes by default. The
//! in-memory engines keep a budget that holds every key, so `engine_tiered_over_engine`
//! (`engine-tiered` over `engine-no-hints`) is what the tier costs; `engine_tiered_over_rocksdb`
//! is given for every (workload, distribution, threads).
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
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, ratio, Spread};
use crate::workload::maps::Loaded;
use crate::workload::operations::{self, has_filler, Operations, MAX_VALUE_BYTES, MIN_VALUE_BYTES};
use crate::workload::KeyDistribution;
use crate::Common;
use contenders::Contender;
use driver::Workload;

/// Flags of `prefixkv-bench ycsb`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Distinct keys loaded (8-byte keys). Default 10,000,000 (quick: 1,000,000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Bytes of every value the engine contenders and `rocksdb` write, at load and on every
    /// update: the 8-byte stamp (or counter) and then a fixed filler. 8 to 4096; default 8. The
    /// in-memory maps (dashmap, papaya, rwlock-sharded) always hold 8-byte values.
    #[arg(long, default_value_t = 8)]
    pub value_bytes: usize,
    /// `engine-tiered`'s log memory budget, bytes: the log keeps at most this much in memory and
    /// evicts its oldest pages to a page file under `--data-dir` (the index stays in memory, on
    /// top of it). At least 1 MiB. Also the `rocksdb` block cache unless
    /// `--rocksdb-block-cache-bytes` is given. The in-memory engines (engine, engine-no-hints,
    /// engine-persian) keep a budget that holds every key whatever this says. Default: that
    /// in-memory budget (twice the larger of 64 bytes and the record, per key, at least 64 MiB),
    /// so without it the tiered engine evicts nothing.
    #[arg(long)]
    pub log_memory_bytes: Option<u64>,
    /// Read and write `engine-tiered`'s page file and `rocksdb`'s files through the kernel's page
    /// cache. Default: direct I/O for both (`O_DIRECT`; RocksDB's `use_direct_reads` and
    /// `use_direct_io_for_flush_and_compaction`), so that neither gets the page cache as a second
    /// cache beyond its budget (which would make a dataset that fits the machine's RAM look as
    /// if it fitted the budget). RocksDB needs a `--data-dir` whose file system has direct I/O
    /// (it fails to open otherwise, saying so); the engine falls back to buffered I/O by itself
    /// where there is none.
    #[arg(long)]
    pub buffered_io: bool,
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
    /// dashmap-siphash, dashmap-foldhash, papaya, rwlock-sharded. Default all of those. By name
    /// only: engine-tiered (the engine with its storage tier, a log of `--log-memory-bytes`, no
    /// hints) and rocksdb, in a build with the cargo feature `rocksdb` (docs/benchmarks.md).
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// The `rocksdb` contender's LRU block cache, bytes. Default: `--log-memory-bytes` if given,
    /// else the in-memory engine's log memory budget for `--keys` (the same byte budget; see
    /// `engine_config`).
    #[arg(long)]
    pub rocksdb_block_cache_bytes: Option<u64>,
    /// Milliseconds between the checkpointed engine's checkpoints. Default 5000 (quick: 1000).
    #[arg(long)]
    pub checkpoint_interval_ms: Option<u64>,
    /// Directory for the engine's files: checkpoints, `engine-tiered`'s page file and RocksDB's
    /// database, each in a temporary directory removed after its round. Put it on the disk
    /// meant to be measured (not a tmpfs, or the tier's "disk" is memory). Default: the system
    /// temp directory.
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
    /// Value size, the tiered engine's budget and RocksDB's cache (`sizes.keys` is `keys`).
    sizes: contenders::Sizes,
    /// Whether `--log-memory-bytes` was given (else the tiered budget is the in-memory one).
    log_memory_given: bool,
    operations: u64,
    duration: Duration,
    threads: Vec<usize>,
    points: Vec<(Workload, KeyDistribution)>,
    contenders: Vec<Contender>,
    checkpoint_interval: Duration,
    data_dir: PathBuf,
}

/// What one run (contender, point, threads, round) measured.
#[derive(Clone, Copy, Debug)]
struct Run {
    ops_per_s: f64,
    instructions_per_op: Option<f64>,
    cache_misses_per_op: Option<f64>,
    checkpoints: u64,
}

/// What one round of `engine-tiered` shows about its tier.
#[derive(Clone, Copy, Debug, Default)]
struct TierEvidence {
    /// Bytes of page-file data (`dir/log/*.pages`) at the end of the round, before removal.
    page_file_bytes: u64,
    /// The largest `Store::log_memory_in_use_bytes` seen: after the load and every 10 ms of the
    /// round's runs.
    log_memory_peak_bytes: u64,
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
    let mut tier = Vec::new();
    let schedule = alternating_schedule(plan.contenders.len(), common.rounds());
    let progress = crate::progress::bar(schedule.len() as u64, "ycsb");
    for &(round, index) in &schedule {
        progress.set_message(format!("{} round {round}", plan.contenders[index].name()));
        if let Some(evidence) =
            run_round(&mut report, &plan, &operations, (round, index), &mut runs)?
        {
            tier.push(evidence);
        }
        progress.inc(1);
    }
    progress.finish_and_clear();

    let memory = measure_memory(&plan)?;
    write_rows(&mut report, &plan, &runs, &memory);
    write_summary(&mut report, &plan, &runs, &memory);
    write_tier_summary(&mut report, &plan, &runs, &tier);
    write_plot(common, &plan, &runs)?;
    Ok(report)
}

fn write_config(report: &mut Report, common: &Common, plan: &Plan) {
    report.config("quick", common.quick);
    report.config("keys", plan.keys);
    report.config("key_bytes", 8);
    report.config("value_bytes", plan.sizes.value_bytes);
    report.config("map_value_bytes", 8);
    let record_bytes = contenders::record_bytes(plan.sizes.value_bytes);
    let dataset_bytes = plan.keys * record_bytes;
    let log_memory_bytes = plan.sizes.tiered_log_memory_bytes;
    report.config("record_bytes", record_bytes);
    report.config("dataset_bytes", dataset_bytes);
    report.config("log_memory_bytes", log_memory_bytes);
    report.config("log_memory_bytes_given", plan.log_memory_given);
    report.config(
        "disk_io",
        if plan.sizes.direct_io {
            "direct: rocksdb's reads and writes and engine-tiered's page-file reads and writes \
             (where the file system has O_DIRECT) bypass the kernel's page cache"
        } else {
            "buffered: engine-tiered's page file and rocksdb's files go through the kernel's page \
             cache (--buffered-io), which caches them beyond log_memory_bytes and the block cache"
        },
    );
    report.config(
        "dataset_over_memory",
        dataset_bytes as f64 / log_memory_bytes as f64,
    );
    report.config(
        "engine_log_memory_bytes",
        contenders::engine_config(plan.keys, plan.sizes.value_bytes, Path::new(""))
            .log_memory_bytes,
    );
    if plan.contenders.contains(&Contender::EngineTiered) {
        report.config(
            "engine_tiered_log_page_bytes",
            contenders::tiered_page_bytes(log_memory_bytes) as u64,
        );
    }
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
        "engine-persian writes fsynced checkpoints; engine-tiered writes evicted log pages to \
         its page file (synced as it evicts, for memory, not durability: no checkpoint, nothing \
         recoverable); rocksdb (if run) writes SST files without a write-ahead log and never \
         fsyncs; the other contenders keep nothing on disk",
    );
    #[cfg(feature = "rocksdb")]
    if plan.contenders.contains(&Contender::RocksDb) {
        // rocksdb_library_version (from RocksDB's OPTIONS file) is added when it is loaded.
        report.config("rocksdb_crate_version", rocksdb::CRATE_VERSION);
        report.config(
            "rocksdb_block_cache_bytes",
            plan.sizes.rocksdb_block_cache_bytes,
        );
        report.config(
            "rocksdb_options",
            "one DB for all threads; WAL off (WriteOptions::disable_wal); LRU block cache of \
             rocksdb_block_cache_bytes; compression none; use_direct_reads and \
             use_direct_io_for_flush_and_compaction as disk_io says; reads get_pinned; RMW \
             get_pinned + put; other options RocksDB's defaults",
        );
    }
    report.notes.push(
        "hardware counters (instructions, cache misses per operation) are null where the machine \
         offers none"
            .into(),
    );
    report.notes.push(BATCHED_NOTE.into());
    report.notes.push(format!(
        "values: the engine contenders and rocksdb write {} bytes (the 8-byte stamp or counter, \
         then a fixed filler) at load and on every update; dashmap, papaya and rwlock-sharded \
         hold an 8-byte u64 whatever --value-bytes says (map_value_bytes), so with larger values \
         their rows are not like for like with the engines'",
        plan.sizes.value_bytes
    ));
    if plan.contenders.contains(&Contender::EngineTiered) {
        report.notes.push(
            "engine-tiered runs without prefetch hints, as engine-no-hints, and on the engine's \
             pending path (Session::start_read/start_upsert/complete_pending: a worker keeps up to \
             32 operations parked on page-file reads, io_uring, and goes on with the next; \
             RocksDB's contender issues one get or put at a time per thread), with cold reads \
             copied to the tail (copy_cold_reads_to_tail, the default): \
             engine_tiered_over_engine is engine-tiered over engine-no-hints (null unless \
             both ran). log_memory_bytes bounds the \
             tiered log only: its index (engine_config's buckets) is in memory on top, as are \
             RocksDB's memtables and index blocks on top of its block cache"
                .into(),
        );
        if dataset_bytes <= log_memory_bytes {
            report.notes.push(format!(
                "dataset_bytes ({dataset_bytes}) fit log_memory_bytes ({log_memory_bytes}): \
                 engine-tiered held everything in memory and evicted nothing; give \
                 --log-memory-bytes below the dataset to measure the tier"
            ));
        }
    }
}

/// One round of one contender: load it, run every (point, threads), then check that every key
/// is still there (and, for the checkpointed engine, its newest checkpoint with the stamp rule;
/// for the tiered engine, that it evicted, whose evidence it returns).
fn run_round(
    report: &mut Report,
    plan: &Plan,
    operations: &[Operations],
    (round, index): (usize, usize),
    runs: &mut BTreeMap<(usize, usize, usize), Vec<Run>>,
) -> Result<Option<TierEvidence>> {
    let contender = plan.contenders[index];
    let (dir, loaded) = load_in_temp_dir(plan, contender, "prefixkv-bench-ycsb-")?;
    if let Some(version) = &loaded.rocksdb_version {
        report.config("rocksdb_library_version", version.as_str());
    }
    let (map, store) = (loaded.map, loaded.store);
    let tiered = (contender == Contender::EngineTiered)
        .then_some(loaded.engine)
        .flatten();
    let peak = AtomicU64::new(tiered.as_ref().map_or(0, |s| s.log_memory_in_use_bytes()));
    let ledger = ledger::Ledger::default();
    let sampled = tiered.as_deref().map(|store| (store, &peak));
    for (key, measured) in
        measure_round(plan, &*map, store.as_deref(), sampled, operations, &ledger)
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
    let evidence = match tiered {
        Some(tiered) => {
            drop(tiered);
            let evidence = TierEvidence {
                page_file_bytes: page_file_bytes(&dir.path().join("log"))?,
                log_memory_peak_bytes: peak.load(Ordering::Relaxed),
            };
            check_tier(report, plan, round, &evidence);
            Some(evidence)
        }
        None => None,
    };
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
    Ok(evidence)
}

/// Bytes of page-file data in a tiered store's `dir/log` (the checksum sidecars not counted).
fn page_file_bytes(dir: &Path) -> Result<u64> {
    prefixkv_storage::pagefile::data_bytes(&*prefixkv_storage::real_disk(), dir)
        .with_context(|| format!("listing the tiered engine's page file in {}", dir.display()))
}

/// Holds one round's evidence to the tier's promise: the log's memory never went above its
/// budget, and, when the dataset is larger than the budget, pages were evicted to the file.
fn check_tier(report: &mut Report, plan: &Plan, round: usize, evidence: &TierEvidence) {
    let budget = plan.sizes.tiered_log_memory_bytes;
    let dataset = plan.keys * contenders::record_bytes(plan.sizes.value_bytes);
    let within = evidence.log_memory_peak_bytes <= budget;
    report.check(
        "engine-tiered's log memory in use (Store::log_memory_in_use_bytes after the load and \
         every 10 ms of the runs)",
        "log_memory_bytes",
        1,
        within,
    );
    let evicted = dataset <= budget || evidence.page_file_bytes > 0;
    report.check(
        "engine-tiered's page file holds evicted pages when the dataset exceeds log_memory_bytes \
         (bytes of dir/log/*.pages before the round's directory is removed)",
        "non-empty",
        1,
        evicted,
    );
    if !within || !evicted {
        report.notes.push(format!(
            "engine-tiered round {round}: log memory peak {} bytes against a budget of {budget}, \
             page file {} bytes for a dataset of {dataset}",
            evidence.log_memory_peak_bytes, evidence.page_file_bytes
        ));
    }
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
    let value_bytes = args.value_bytes;
    if !(MIN_VALUE_BYTES..=MAX_VALUE_BYTES).contains(&value_bytes) {
        bail!(
            "--value-bytes {value_bytes}: must be {MIN_VALUE_BYTES} to {MAX_VALUE_BYTES} (every \
             value starts with the 8-byte stamp or counter the checks read)"
        );
    }
    if let Some(bytes) = args.log_memory_bytes {
        if bytes < contenders::TIERED_MIN_LOG_MEMORY_BYTES {
            bail!(
                "--log-memory-bytes {bytes}: must be at least {} (1 MiB: 16 pages of the \
                 tiered engine's smallest page, 64 KiB)",
                contenders::TIERED_MIN_LOG_MEMORY_BYTES
            );
        }
    }
    if args.rocksdb_block_cache_bytes == Some(0) {
        bail!("--rocksdb-block-cache-bytes must be positive");
    }
    let in_memory = contenders::engine_config(keys, value_bytes, Path::new("")).log_memory_bytes;
    let tiered_log_memory_bytes = args.log_memory_bytes.unwrap_or(in_memory);
    Ok(Plan {
        keys,
        sizes: contenders::Sizes {
            keys,
            value_bytes,
            tiered_log_memory_bytes,
            rocksdb_block_cache_bytes: args
                .rocksdb_block_cache_bytes
                .unwrap_or(tiered_log_memory_bytes),
            direct_io: !args.buffered_io,
        },
        log_memory_given: args.log_memory_bytes.is_some(),
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
    })
}

/// Every (point, threads) run of one loaded contender, in order. For the checkpointed engine a
/// checkpoint driver runs beside the whole round, so checkpoints keep their cadence across runs;
/// for the tiered engine (`sampled`: its store and a peak) a thread samples the log's memory in
/// use every 10 ms and keeps the largest figure in the peak (one atomic load per sample: it
/// takes nothing from the workers that a 2-core machine would notice).
fn measure_round(
    plan: &Plan,
    map: &dyn Loaded,
    store: Option<&prefixkv_engine::Store>,
    sampled: Option<(&prefixkv_engine::Store, &AtomicU64)>,
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
        if let Some((store, peak)) = sampled {
            let stop = &stop;
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(store.log_memory_in_use_bytes(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10)); // the sampling period
                }
                peak.fetch_max(store.log_memory_in_use_bytes(), Ordering::Relaxed);
            });
        }
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
    let value_bytes = plan.sizes.value_bytes;
    let store =
        prefixkv_engine::Store::open(contenders::engine_config(plan.keys, value_bytes, dir))?;
    let Some(info) = store.recovery_info().cloned() else {
        return Ok((false, "no checkpoint was published to recover".into()));
    };
    let mut session = store.start_session();
    let mut engine_read = crate::workload::stamp_rule::engine_reader(&mut session);
    // The stamp rule reads 8-byte stamps: hand it each value's leading word, once the value is
    // checked to have the size and filler every write gave it.
    let mut read = |key: &[u8]| -> Result<Option<Vec<u8>>> {
        match engine_read(key)? {
            Some(value) if has_filler(&value, value_bytes) => Ok(Some(value[..8].to_vec())),
            Some(value) => bail!(
                "key {key:?}: a recovered value of {} bytes without the {value_bytes}-byte \
                 filler layout every write used",
                value.len()
            ),
            None => Ok(None),
        }
    };
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
            .arg("--value-bytes")
            .arg(plan.sizes.value_bytes.to_string())
            .arg("--log-memory-bytes")
            .arg(plan.sizes.tiered_log_memory_bytes.to_string())
            .arg("--rocksdb-block-cache-bytes")
            .arg(plan.sizes.rocksdb_block_cache_bytes.to_string())
            .args((!plan.sizes.direct_io).then_some("--buffered-io"))
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
    let loaded = contenders::load(contender, &plan.sizes, cores, dir.path())?;
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
            ("distribution", Value::from(distribution_name(distribution))),
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
    headline.map_or(f64::NAN, |point| {
        median_at(plan, runs, contender, point, threads)
    })
}

/// The median over rounds of `contender`'s throughput at `point` and `threads` (NaN if that was
/// not run).
fn median_at(
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
    contender: Contender,
    point: usize,
    threads: usize,
) -> f64 {
    let Some(index) = plan.contenders.iter().position(|&c| c == contender) else {
        return f64::NAN;
    };
    runs.get(&(index, point, threads))
        .map_or(f64::NAN, |rounds| {
            median(&rounds.iter().map(|run| run.ops_per_s).collect::<Vec<_>>())
        })
}

/// [`median_at`] for `rocksdb`: NaN in a build without its feature.
fn rocksdb_median_at(
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
    point: usize,
    threads: usize,
) -> f64 {
    #[cfg(feature = "rocksdb")]
    return median_at(plan, runs, Contender::RocksDb, point, threads);
    #[cfg(not(feature = "rocksdb"))]
    {
        let _ = (plan, runs, point, threads);
        f64::NAN
    }
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

/// Issue 33's figures, when `engine-tiered` ran: `engine_tiered_over_rocksdb` and
/// `engine_tiered_over_engine` (over `engine-no-hints`, the in-memory engine on the same driver)
/// at YCSB-A uniform with the most threads (and `_1t`), as the other headlines, and for every
/// point as `<name>_<workload>_<distribution>_<threads>t`; null where a side did not run (rocksdb
/// needs its feature). Then the tier's evidence over rounds: the smallest page file and the
/// largest log memory in use.
fn write_tier_summary(
    report: &mut Report,
    plan: &Plan,
    runs: &BTreeMap<(usize, usize, usize), Vec<Run>>,
    tier: &[TierEvidence],
) {
    if !plan.contenders.contains(&Contender::EngineTiered) {
        return;
    }
    const NAMES: [&str; 2] = ["engine_tiered_over_rocksdb", "engine_tiered_over_engine"];
    let ratios = |point: usize, threads: usize| {
        let tiered = median_at(plan, runs, Contender::EngineTiered, point, threads);
        let in_memory = median_at(plan, runs, Contender::EngineNoHints, point, threads);
        [
            ratio(tiered, rocksdb_median_at(plan, runs, point, threads)),
            ratio(tiered, in_memory),
        ]
    };
    let headline = plan
        .points
        .iter()
        .position(|&p| p == (Workload::A, KeyDistribution::Uniform));
    let largest = *plan.threads.last().expect("threads is not empty");
    for (suffix, threads) in [
        ("", Some(largest)),
        ("_1t", plan.threads.contains(&1).then_some(1)),
    ] {
        let Some(threads) = threads else { continue };
        let values = headline.map_or([f64::NAN; 2], |point| ratios(point, threads));
        for (name, value) in NAMES.into_iter().zip(values) {
            report.summary(&format!("{name}{suffix}"), value);
        }
    }
    for (point, &(workload, distribution)) in plan.points.iter().enumerate() {
        for &threads in &plan.threads {
            for (name, value) in NAMES.into_iter().zip(ratios(point, threads)) {
                report.summary(
                    &format!(
                        "{name}_{}_{}_{threads}t",
                        workload.name(),
                        distribution_name(distribution)
                    ),
                    value,
                );
            }
        }
    }
    report.summary(
        "engine_tiered_page_file_bytes",
        tier.iter()
            .map(|e| e.page_file_bytes as f64)
            .fold(f64::NAN, f64::min),
    );
    report.summary(
        "engine_tiered_log_memory_peak_bytes",
        tier.iter()
            .map(|e| e.log_memory_peak_bytes as f64)
            .fold(f64::NAN, f64::max),
    );
}

/// A distribution's name in rows and summary fields.
fn distribution_name(distribution: KeyDistribution) -> String {
    format!("{distribution:?}").to_lowercase()
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
                "YCSB-A uniform, {} keys, {}-byte values: throughput against threads",
                plan.keys, plan.sizes.value_bytes
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
