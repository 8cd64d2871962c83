//! `prefixkv-bench wal`: the Turso checkpoint experiment ("Making checkpointing fast").
//!
//! A write-heavy load (random page updates over a database of `--pages` pages, commits of 1–16
//! pages, a passive checkpoint whenever `--checkpoint-frames` frames are not backfilled — the
//! auto-checkpoint rule, run by this loop so each checkpoint can be timed) is run once per round
//! with each backfill: `naive` (one synchronous `pread` + `pwrite` per page in frame order, no
//! cache) and `fast` (io_uring reads and `writev`s in flight together, page-cache reuse,
//! page-sorted batches flushed by the run-length heuristic), alternating over the rounds on the
//! same seeded load.
//!
//! The setting makes the naive path pay for its reads, as in the Turso document's write
//! benchmark under memory pressure: each checkpoint's WAL (`--checkpoint-frames`, default 8192
//! frames) is four times the store's page cache (`--cache-pages`, default 2048 pages), so the
//! fast path cannot take every page from its cache and reads most of them from the WAL too; and
//! in the `cold` state the WAL's pages are dropped from the OS page cache
//! (`posix_fadvise(DONTNEED)`, after the pre-copy WAL fsync, for both variants) so every WAL read
//! goes to the device. The `warm` state leaves the WAL in the OS cache as the commits left it.
//!
//! Both variants are measured the same way: a fresh store per run on the same filesystem, the
//! same page-cache capacity, every checkpoint timed from lock to publish (WAL fsync + copy +
//! database truncation check + database fsync). Verification is independent of the store's read
//! path: after a final Truncate checkpoint and a reopen (which must replay no frame), the
//! database file itself is read with `std::fs` and compared page by page, and by length, with
//! the model of every page's last writer; a mismatch fails the run (non-zero exit).

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, percentile, quantile_points, ratio, Spread};
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_pagestore::{BackfillStrategy, CheckpointMode, Options, PageStore, SyncPolicy};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Flags of the `wal` experiment.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Database size in pages (default 65536; 32768 with --quick).
    #[arg(long)]
    pub pages: Option<u32>,
    /// Commits per run (default 12000; 4000 with --quick).
    #[arg(long)]
    pub commits: Option<u32>,
    /// Page size in bytes.
    #[arg(long, default_value_t = 4096)]
    pub page_size_bytes: u32,
    /// Page cache capacity in pages (the store's default); keep it below
    /// `--checkpoint-frames` so the fast path must read from the WAL.
    #[arg(long, default_value_t = 2048)]
    pub cache_pages: usize,
    /// Frames not yet backfilled that trigger a passive checkpoint.
    #[arg(long, default_value_t = 8192)]
    pub checkpoint_frames: u64,
    /// WAL sync policy for commits: `full` (fsync per commit) or `normal` (fsync at checkpoint).
    #[arg(long, default_value = "normal")]
    pub sync: String,
    /// Which OS-cache states of the WAL to measure: `warm` (as left by the commits), `cold`
    /// (evicted with posix_fadvise(DONTNEED) after the pre-copy WAL fsync, for both variants),
    /// or `both`.
    #[arg(long, default_value = "both")]
    pub wal_os_cache: String,
}

/// The contenders: the naive loop, the fast backfill on io_uring (reads and writes), and the fast
/// backfill's fallback engine (reader threads, `pwritev` writes) for comparison.
const VARIANTS: [(&str, BackfillStrategy); 3] = [
    ("naive", BackfillStrategy::Naive),
    ("fast", BackfillStrategy::Fast),
    ("fast_pool", BackfillStrategy::FastThreadPool),
];

#[derive(Default)]
struct RunResult {
    checkpoint_ms: Vec<f64>,
    copy_ms: Vec<f64>,
    wal_sync_ms: Vec<f64>,
    db_sync_ms: Vec<f64>,
    cache_hits: u64,
    wal_reads: u64,
    wal_read_calls: u64,
    pages_written: u64,
    write_calls: u64,
    commits_per_s: f64,
    verified: bool,
    reader: &'static str,
}

fn flatten(runs: &[RunResult], field: impl Fn(&RunResult) -> &Vec<f64>) -> Vec<f64> {
    runs.iter().flat_map(|r| field(r).iter().copied()).collect()
}

/// Sizes and settings after applying `--quick` defaults.
struct Plan {
    pages: u32,
    commits: u32,
    sync: SyncPolicy,
    /// OS-cache states of the WAL to measure: (name, evict the WAL before each backfill).
    caches: Vec<(&'static str, bool)>,
    rounds: usize,
}

/// Every run of one OS-cache state: per variant (in [`VARIANTS`] order), one result per round.
type CacheResults = [Vec<RunResult>; VARIANTS.len()];

/// The median checkpoint and copy times and the cache hit ratio of each variant, for the summary.
#[derive(Default)]
struct VariantFigures {
    checkpoint_ms_p50: f64,
    copy_ms_p50: f64,
    cache_hit_ratio: f64,
}

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let plan = plan(common, args)?;
    let mut report = Report::new("wal");
    write_config(&mut report, common, args, &plan);
    let results = run_rounds(&mut report, args, &plan)?;
    let mut series = Vec::new();
    for (&(cache_name, cold), results) in plan.caches.iter().zip(&results) {
        let mut figures: [VariantFigures; VARIANTS.len()] = Default::default();
        for (variant, (name, _)) in VARIANTS.iter().enumerate() {
            let runs = &results[variant];
            let (row, variant_figures) = variant_row(name, cache_name, runs);
            report.rows.push(row);
            figures[variant] = variant_figures;
            series.push(Series {
                label: format!("{name} backfill, WAL {cache_name} in OS cache"),
                points: quantile_points(&flatten(runs, |r| &r.checkpoint_ms)),
            });
        }
        write_cache_summary(&mut report, cold, &figures);
    }
    report
        .summary
        .insert("verified".into(), report.verified_json());
    write_notes(&mut report);
    write_chart(common, &plan, series)?;
    Ok(report)
}

fn plan(common: &Common, args: &Args) -> Result<Plan> {
    let sync = match args.sync.as_str() {
        "full" => SyncPolicy::Full,
        "normal" => SyncPolicy::Normal,
        other => bail!("--sync must be `full` or `normal`, not `{other}`"),
    };
    let caches = match args.wal_os_cache.as_str() {
        "warm" => vec![("warm", false)],
        "cold" => vec![("cold", true)],
        "both" => vec![("warm", false), ("cold", true)],
        other => bail!("--wal-os-cache must be `warm`, `cold` or `both`, not `{other}`"),
    };
    Ok(Plan {
        pages: args
            .pages
            .unwrap_or(if common.quick { 32_768 } else { 65_536 }),
        commits: args
            .commits
            .unwrap_or(if common.quick { 4000 } else { 12_000 }),
        sync,
        caches,
        rounds: common.rounds(),
    })
}

fn write_config(report: &mut Report, common: &Common, args: &Args, plan: &Plan) {
    report.config("quick", common.quick);
    report.config("db_pages", plan.pages);
    report.config("commits_per_run", plan.commits);
    report.config("pages_per_commit", "uniform 1..=16, uniform random pages");
    report.config("page_size_bytes", args.page_size_bytes);
    report.config("cache_capacity_pages", args.cache_pages as u64);
    report.config("checkpoint_every_frames", args.checkpoint_frames);
    report.config(
        "wal_frames_per_checkpoint_over_cache_pages",
        ratio(args.checkpoint_frames as f64, args.cache_pages as f64),
    );
    report.config(
        "checkpoint_mode",
        "passive (auto-checkpoint rule, triggered by the bench loop)",
    );
    report.config("sync", args.sync.clone());
    report.config("wal_os_cache", args.wal_os_cache.clone());
    report.config("rounds", plan.rounds as u64);
    report.config("filesystem_dir", std::env::temp_dir().display().to_string());
}

/// Every (cache state, variant) pair is one contender of the alternating schedule, so machine
/// drift (other jobs on the shared cores) spreads over all of them alike. Returns the runs per
/// cache state.
fn run_rounds(report: &mut Report, args: &Args, plan: &Plan) -> Result<Vec<CacheResults>> {
    let contenders = VARIANTS.len() * plan.caches.len();
    let bar = crate::progress::bar((plan.rounds * contenders) as u64, "wal runs");
    let mut results: Vec<CacheResults> = plan
        .caches
        .iter()
        .map(|_| std::array::from_fn(|_| Vec::new()))
        .collect();
    for (round, contender) in alternating_schedule(contenders, plan.rounds) {
        let (cache_index, variant) = (contender / VARIANTS.len(), contender % VARIANTS.len());
        let (cache_name, cold) = plan.caches[cache_index];
        let (name, strategy) = VARIANTS[variant];
        let result = run_once(args, plan, strategy, cold, 0xC0FFEE + round as u64)
            .with_context(|| format!("round {round}, variant {name}, WAL {cache_name}"))?;
        report.check(
            "database files after a truncating checkpoint and a reopen (one per run)",
            "the page images the benchmark's own commits wrote",
            1,
            result.verified,
        );
        results[cache_index][variant].push(result);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(results)
}

/// The row of one variant in one cache state (every checkpoint of every round pooled), and the
/// figures the summary compares.
fn variant_row(
    name: &str,
    cache_name: &str,
    runs: &[RunResult],
) -> (serde_json::Map<String, Value>, VariantFigures) {
    let all = flatten(runs, |r| &r.checkpoint_ms);
    let copies = flatten(runs, |r| &r.copy_ms);
    let wal_syncs = flatten(runs, |r| &r.wal_sync_ms);
    let db_syncs = flatten(runs, |r| &r.db_sync_ms);
    let per_round_p50: Vec<f64> = runs
        .iter()
        .map(|r| percentile(&r.checkpoint_ms, 0.5))
        .collect();
    let throughput: Vec<f64> = runs.iter().map(|r| r.commits_per_s).collect();
    let total = |field: fn(&RunResult) -> u64| runs.iter().map(field).sum::<u64>() as f64;
    let (hits, reads) = (total(|r| r.cache_hits), total(|r| r.wal_reads));
    let checkpoints = all.len() as f64;
    let figures = VariantFigures {
        checkpoint_ms_p50: percentile(&all, 0.5),
        copy_ms_p50: percentile(&copies, 0.5),
        cache_hit_ratio: ratio(hits, hits + reads),
    };
    let mut fields = row([
        ("variant", Value::from(name)),
        ("wal_os_cache", Value::from(cache_name)),
        ("checkpoints", Value::from(all.len() as u64)),
        ("checkpoint_ms_p50", Value::from(figures.checkpoint_ms_p50)),
        ("checkpoint_ms_p99", Value::from(percentile(&all, 0.99))),
        ("checkpoint_ms_min", Value::from(percentile(&all, 0.0))),
        ("checkpoint_ms_max", Value::from(percentile(&all, 1.0))),
        ("copy_ms_p50", Value::from(figures.copy_ms_p50)),
        ("copy_ms_p99", Value::from(percentile(&copies, 0.99))),
        ("wal_fsync_ms_p50", Value::from(percentile(&wal_syncs, 0.5))),
        ("db_fsync_ms_p50", Value::from(percentile(&db_syncs, 0.5))),
        ("cache_hit_ratio", Value::from(figures.cache_hit_ratio)),
        (
            "pages_per_checkpoint",
            Value::from(ratio(total(|r| r.pages_written), checkpoints)),
        ),
        (
            "wal_read_calls_per_checkpoint",
            Value::from(ratio(total(|r| r.wal_read_calls), checkpoints)),
        ),
        (
            "write_calls_per_checkpoint",
            Value::from(ratio(total(|r| r.write_calls), checkpoints)),
        ),
        ("verified", Value::from(runs.iter().all(|r| r.verified))),
    ]);
    Spread::of(&per_round_p50).insert_into(&mut fields, "checkpoint_ms_p50_per_round");
    Spread::of(&throughput).insert_into(&mut fields, "commits_per_s");
    fields.insert(
        "backfill_reader".into(),
        Value::from(runs.first().map_or("none", |r| r.reader)),
    );
    (fields, figures)
}

/// The summary ratios of one cache state: naive over fast (and over the fast path's thread
/// pool), `figures` in [`VARIANTS`] order.
fn write_cache_summary(report: &mut Report, cold: bool, figures: &[VariantFigures]) {
    let suffix = if cold { "_cold" } else { "_warm" };
    let (naive, fast, pool) = (&figures[0], &figures[1], &figures[2]);
    let mut summary = |name: &str, value: f64| report.summary(&format!("{name}{suffix}"), value);
    summary(
        "backfill_speedup",
        ratio(naive.checkpoint_ms_p50, fast.checkpoint_ms_p50),
    );
    summary("copy_speedup", ratio(naive.copy_ms_p50, fast.copy_ms_p50));
    summary("cache_hit_ratio", fast.cache_hit_ratio);
    summary("checkpoint_ms_p50_fast", fast.checkpoint_ms_p50);
    summary("checkpoint_ms_p50_naive", naive.checkpoint_ms_p50);
    summary(
        "backfill_speedup_pool",
        ratio(naive.checkpoint_ms_p50, pool.checkpoint_ms_p50),
    );
    summary(
        "copy_speedup_pool",
        ratio(naive.copy_ms_p50, pool.copy_ms_p50),
    );
}

fn write_notes(report: &mut Report) {
    report.notes.push(
        "The OS page cache cannot be dropped globally here. Both variants are measured identically: fresh \
         store per run, same seeded load, same page-cache capacity, the populate pass checkpointed with the \
         same (naive) backfill, checkpoint time from lock to publish including the WAL and database fsyncs. \
         Each checkpoint's WAL is larger than the store's page cache, so the fast variant reads most pages \
         from the WAL too. `warm`: the WAL stays in the OS cache as the commits left it, so naive reads are \
         memory copies. `cold`: after the pre-copy WAL fsync, the WAL's clean pages are evicted with \
         posix_fadvise(DONTNEED) for both variants, so every WAL read goes to the device."
            .into(),
    );
    report.notes.push(
        "backfill_speedup_{warm,cold} = median naive checkpoint time / median fast checkpoint time over \
         every checkpoint of every round, per OS-cache state of the WAL; copy_speedup_{warm,cold} is the \
         same ratio for the copy phase alone (reads and writes, no fsyncs). The `_pool` fields compare \
         the fast backfill's fallback engine (2 reader threads, pwritev writes) with naive the same way."
            .into(),
    );
}

/// The distribution of checkpoint durations, one line per (variant, cache state).
fn write_chart(common: &Common, plan: &Plan, series: Vec<Series>) -> Result<()> {
    let chart = LineChart {
        title: format!(
            "Distribution of passive checkpoint durations, {} pages, {} rounds: naive vs fast backfill",
            plan.pages, plan.rounds
        ),
        x_label: "checkpoints at or below this duration (%)".into(),
        y_label: "checkpoint duration (ms)".into(),
        series,
        markers: Vec::new(),
        log_x: false,
    };
    write_line_chart(&chart, &common.out, "wal")
}

/// One run: populate, the write load with its passive checkpoints (each timed), then the
/// independent verification of the database file.
fn run_once(
    args: &Args,
    plan: &Plan,
    strategy: BackfillStrategy,
    cold_wal: bool,
    seed: u64,
) -> Result<RunResult> {
    let (pages, commits, sync) = (plan.pages, plan.commits, plan.sync);
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let path = dir.path().join("db");
    let page_size = args.page_size_bytes as usize;
    let options = Options {
        page_size_bytes: args.page_size_bytes,
        sync,
        auto_checkpoint_frames: 0,
        cache_capacity_pages: args.cache_pages,
        busy_timeout: Duration::from_secs(10),
        backfill: strategy,
        evict_wal_from_os_cache_before_backfill: cold_wal,
    };
    let (store, _) = PageStore::open(&path, options.clone())?;
    // Populate every page (commit 0), then checkpoint it out of the WAL; not measured.
    let mut versions = vec![0u32; pages as usize];
    let mut image = vec![0u8; page_size];
    for chunk_start in (1..=pages).step_by(256) {
        let mut txn = store.begin_write()?;
        for page in chunk_start..(chunk_start + 256).min(pages + 1) {
            fill(&mut image, page, 0);
            txn.write_page(page, &image)?;
        }
        txn.commit()?;
    }
    // The same backfill for both variants here: the populate pass decides how the kernel lays
    // out the database file's page cache (long page-sorted `pwritev` runs create large folios,
    // which make later 4 KiB writes and their writeback costlier), and that must not differ.
    store.checkpoint_with(CheckpointMode::Truncate, BackfillStrategy::Naive)?;

    let mut rng = SmallRng::seed_from_u64(seed);
    let mut result = RunResult::default();
    let started = Instant::now();
    for commit in 1..=commits {
        let count = rng.random_range(1..=16u32);
        let mut txn = store.begin_write()?;
        for _ in 0..count {
            let page = rng.random_range(1..=pages);
            fill(&mut image, page, commit);
            txn.write_page(page, &image)?;
            versions[page as usize - 1] = commit;
        }
        txn.commit()?;
        let state = store.wal_state();
        if state.max_frame - state.backfilled_frames >= args.checkpoint_frames {
            let outcome = store.checkpoint_with(CheckpointMode::Passive, strategy)?;
            result
                .checkpoint_ms
                .push(outcome.duration.as_secs_f64() * 1e3);
            result
                .copy_ms
                .push(outcome.copy_duration.as_secs_f64() * 1e3);
            result
                .wal_sync_ms
                .push(outcome.wal_sync_duration.as_secs_f64() * 1e3);
            result
                .db_sync_ms
                .push(outcome.db_sync_duration.as_secs_f64() * 1e3);
            result.cache_hits += outcome.cache_hits;
            result.wal_reads += outcome.wal_reads;
            result.wal_read_calls += outcome.wal_read_calls;
            result.pages_written += outcome.pages_written;
            result.write_calls += outcome.write_calls;
        }
    }
    result.commits_per_s = commits as f64 / started.elapsed().as_secs_f64();
    result.reader = match strategy {
        BackfillStrategy::Naive => "none (synchronous pread)",
        BackfillStrategy::FastThreadPool => "thread pool (forced)",
        BackfillStrategy::Fast => store.backfill_reader(),
    };
    store.checkpoint(CheckpointMode::Truncate)?;
    drop(store);

    // Verify the database file itself, read without the store, after a reopen that must find
    // the WAL empty (Truncate) and so replay nothing.
    let (store, recovery) = PageStore::open(&path, options)?;
    drop(store);
    let file = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut verified = recovery.frames_replayed == 0 && file.len() == pages as usize * page_size;
    for (index, bytes) in file.chunks(page_size).enumerate() {
        fill(
            &mut image,
            index as u32 + 1,
            versions[index.min(versions.len() - 1)],
        );
        verified &= index < versions.len() && bytes == &image[..];
    }
    result.verified = verified;
    Ok(result)
}

/// The image of `page` written by `commit`: identifying header, then a cheap pattern.
fn fill(image: &mut [u8], page: u32, commit: u32) {
    image[0..4].copy_from_slice(&page.to_le_bytes());
    image[4..8].copy_from_slice(&commit.to_le_bytes());
    let byte = (page.wrapping_mul(31) ^ commit.wrapping_mul(17)) as u8;
    image[8..].fill(byte);
}
