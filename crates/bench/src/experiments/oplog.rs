//! `prefixkv-bench oplog`: group commit against a naive fsync-per-append log, and io_uring against
//! pwritev, for 100-byte appends under the `always` policy from 1 to 64 concurrent appenders.
//!
//! Contenders, run in the same process, alternated over rounds (A B C, C B A, ...):
//! - `group_commit_io_uring`: `prefixkv_storage::log`, policy `always`, io_uring backend;
//! - `group_commit_pwritev`: the same, `pwritev` + `fdatasync` backend;
//! - `naive_fsync_per_append`: the same framing in one segment file, a mutex around
//!   `pwrite` + `fdatasync` for every append (each append durable before it returns, as in
//!   `always`).
//!
//! Every cell starts from an empty directory. After each cell the log is reopened and
//! replayed: every acknowledged LSN must be there with its exact payload
//! (this is what `verified` means).

use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Latencies, Spread};
use crate::Common;
use anyhow::{anyhow, bail, Context, Result};
use prefixkv_storage::log::format::{encode_frame, encode_segment_header, segment_file_name};
use prefixkv_storage::log::{BackendChoice, Log, LogConfig, LogError, SyncPolicy};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Flags of the oplog experiment.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Concurrent appender threads, one cell per value.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub appenders: Vec<usize>,
    /// Payload bytes per record.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// Seconds each cell runs (default: 0.4 with --quick, 3 otherwise).
    #[arg(long)]
    pub seconds_per_cell: Option<f64>,
    /// Directory for the log files (default: a fresh directory under the system temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Variant {
    GroupCommitIoUring,
    GroupCommitPwritev,
    Naive,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::GroupCommitIoUring => "group_commit_io_uring",
            Variant::GroupCommitPwritev => "group_commit_pwritev",
            Variant::Naive => "naive_fsync_per_append",
        }
    }
}

/// One appender thread's latencies and acknowledged (LSN, seq) pairs.
type AppenderResult = (Latencies, Vec<(u64, u64)>);

/// What one cell measured.
struct Cell {
    appends_per_s: f64,
    appends_per_fsync: f64,
    p50_us: f64,
    p99_us: f64,
    verified: bool,
}

/// The payload of (thread, seq): identifiable and checkable after replay.
fn payload(thread: usize, seq: u64, bytes: usize) -> Vec<u8> {
    let mut out = format!("{thread}:{seq}:").into_bytes();
    let mut i = 0u64;
    while out.len() < bytes {
        out.push(((thread as u64 * 131 + seq * 7 + i) % 251) as u8);
        i += 1;
    }
    out.truncate(bytes.max(1));
    out
}

/// The baseline: one file, a mutex, `pwrite` + `fdatasync` per append, same frame format.
struct NaiveLog {
    inner: Mutex<NaiveInner>,
}

struct NaiveInner {
    file: File,
    offset: u64,
    next_lsn: u64,
    frame: Vec<u8>,
    /// `fdatasync` calls made, counted (not assumed) for `appends_per_fsync`.
    syncs: u64,
}

impl NaiveLog {
    fn create(dir: &Path) -> Result<NaiveLog> {
        let path = dir.join(segment_file_name(1));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        let header = encode_segment_header(1);
        file.write_all_at(&header, 0)?;
        file.sync_all()?;
        File::open(dir)?.sync_all()?;
        Ok(NaiveLog {
            inner: Mutex::new(NaiveInner {
                file,
                offset: header.len() as u64,
                next_lsn: 1,
                frame: Vec::new(),
                syncs: 0,
            }),
        })
    }

    fn append(&self, payload: &[u8]) -> Result<u64> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| anyhow!("naive log mutex poisoned"))?;
        let inner = &mut *inner;
        let lsn = inner.next_lsn;
        inner.frame.clear();
        encode_frame(lsn, payload, &mut inner.frame);
        inner.file.write_all_at(&inner.frame, inner.offset)?;
        inner.file.sync_data()?;
        inner.syncs += 1;
        inner.offset += inner.frame.len() as u64;
        inner.next_lsn += 1;
        Ok(lsn)
    }
}

enum Contender {
    Group(Log),
    Naive(NaiveLog),
}

impl Contender {
    fn append(&self, payload: &[u8]) -> Result<u64> {
        match self {
            Contender::Group(log) => Ok(log.append(payload)?.wait()?),
            Contender::Naive(log) => log.append(payload),
        }
    }
}

fn group_config(backend: BackendChoice) -> LogConfig {
    LogConfig {
        policy: SyncPolicy::Always,
        backend,
        segment_bytes: 256 << 20,
        ..LogConfig::default()
    }
}

fn run_cell(
    variant: Variant,
    appenders: usize,
    record_bytes: usize,
    duration: Duration,
    dir: &Path,
) -> Result<Cell> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)?;
    let contender = match variant {
        Variant::GroupCommitIoUring => {
            Contender::Group(Log::open(dir, group_config(BackendChoice::IoUring))?.0)
        }
        Variant::GroupCommitPwritev => {
            Contender::Group(Log::open(dir, group_config(BackendChoice::Pwritev))?.0)
        }
        Variant::Naive => Contender::Naive(NaiveLog::create(dir)?),
    };
    let start = Instant::now();
    let deadline = start + duration;
    let results: Vec<Result<AppenderResult>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..appenders)
            .map(|thread| {
                let contender = &contender;
                scope.spawn(move || -> Result<AppenderResult> {
                    let mut latency = Latencies::new();
                    let mut acknowledged = Vec::new();
                    let mut seq = 0u64;
                    while Instant::now() < deadline {
                        let body = payload(thread, seq, record_bytes);
                        let begin = Instant::now();
                        let lsn = contender.append(&body)?;
                        latency.record(begin.elapsed());
                        acknowledged.push((lsn, seq));
                        seq += 1;
                    }
                    Ok((latency, acknowledged))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("appender panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut latency = Latencies::new();
    let mut acknowledged: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
    for (thread, result) in results.into_iter().enumerate() {
        let (histogram, acks) = result?;
        latency.merge(&histogram);
        for (lsn, seq) in acks {
            if acknowledged.insert(lsn, (thread, seq)).is_some() {
                bail!("{}: LSN {lsn} acknowledged twice", variant.name());
            }
        }
    }
    let total = acknowledged.len() as f64;
    let appends_per_fsync = match &contender {
        Contender::Group(log) => {
            let stats = log.stats();
            ratio(stats.records_written as f64, stats.syncs as f64)
        }
        Contender::Naive(log) => {
            let inner = log
                .inner
                .lock()
                .map_err(|_| anyhow!("naive log mutex poisoned"))?;
            ratio((inner.next_lsn - 1) as f64, inner.syncs as f64)
        }
    };
    drop(contender);
    let verified = verify(dir, &acknowledged, record_bytes)?;
    Ok(Cell {
        appends_per_s: total / elapsed,
        appends_per_fsync,
        p50_us: latency.quantile_us(0.50),
        p99_us: latency.quantile_us(0.99),
        verified,
    })
}

/// Reopens the directory with the log and checks every acknowledged record.
fn verify(
    dir: &Path,
    acknowledged: &BTreeMap<u64, (usize, u64)>,
    record_bytes: usize,
) -> Result<bool> {
    let (log, report) = Log::open(dir, group_config(BackendChoice::Pwritev))?;
    if report.torn_tail.is_some() || report.repair.is_some() {
        eprintln!("oplog verify: unexpected torn tail or repair after a clean run: {report:?}");
        return Ok(false);
    }
    let mut found = 0usize;
    let mut pending = acknowledged.iter().peekable();
    for record in log.replay(1)? {
        let (lsn, bytes) = record.map_err(|e: LogError| anyhow!(e))?;
        if let Some(&(&acked_lsn, &(thread, seq))) = pending.peek() {
            if acked_lsn == lsn {
                if bytes != payload(thread, seq, record_bytes) {
                    eprintln!("oplog verify: LSN {lsn} has the wrong payload");
                    return Ok(false);
                }
                found += 1;
                pending.next();
            }
        }
    }
    if found != acknowledged.len() {
        eprintln!(
            "oplog verify: {} of {} acknowledged records missing",
            acknowledged.len() - found,
            acknowledged.len()
        );
        return Ok(false);
    }
    log.close()?;
    Ok(true)
}

/// Sizes after applying `--quick` defaults, and the variants this machine can run.
struct Plan {
    rounds: usize,
    seconds: f64,
    base_dir: PathBuf,
    variants: Vec<Variant>,
}

/// (variant index, appenders) → one cell per round.
type Cells = BTreeMap<(usize, usize), Vec<Cell>>;

/// (variant, appenders) → (median appends/s, median appends per fsync).
type Medians = BTreeMap<(Variant, usize), (f64, f64)>;

/// Runs the experiment.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    let mut report = Report::new("oplog");
    let plan = plan(common, args, &mut report)?;
    write_config(&mut report, common, args, &plan);
    let cells = run_cells(&mut report, args, &plan)?;
    let _ = std::fs::remove_dir_all(&plan.base_dir);
    let (medians, series) = write_rows(&mut report, args, &plan, &cells);
    write_summary(&mut report, args, &plan, &medians);
    write_chart(common, args, series)?;
    Ok(report)
}

/// The flags with `--quick` defaults applied; io_uring is probed, and its variant dropped (with
/// a note) where it is unavailable.
fn plan(common: &Common, args: &Args, report: &mut Report) -> Result<Plan> {
    let base_dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("prefixkv-bench-oplog-{}", std::process::id()))
    });
    let mut variants = vec![
        Variant::GroupCommitIoUring,
        Variant::GroupCommitPwritev,
        Variant::Naive,
    ];
    let probe_dir = base_dir.join("probe");
    std::fs::create_dir_all(&probe_dir)?;
    match Log::open(&probe_dir, group_config(BackendChoice::IoUring)) {
        Ok((log, _)) => log.close()?,
        Err(e) => {
            report.notes.push(format!(
                "io_uring unavailable, its variant was skipped: {e}"
            ));
            variants.retain(|v| *v != Variant::GroupCommitIoUring);
        }
    }
    std::fs::remove_dir_all(&probe_dir)?;
    Ok(Plan {
        rounds: common.rounds(),
        seconds: args
            .seconds_per_cell
            .unwrap_or(if common.quick { 0.4 } else { 3.0 }),
        base_dir,
        variants,
    })
}

fn write_config(report: &mut Report, common: &Common, args: &Args, plan: &Plan) {
    report.config("quick", common.quick);
    report.config("rounds", plan.rounds as u64);
    report.config(
        "appenders",
        Value::from(args.appenders.iter().map(|&n| n as u64).collect::<Vec<_>>()),
    );
    report.config("record_bytes", args.record_bytes as u64);
    report.config("seconds_per_cell", plan.seconds);
    report.config(
        "policy",
        "always (every append acknowledged only after its data sync)",
    );
    report.config(
        "naive_fsync_per_append",
        "same frame format, one file, a mutex around pwrite + fdatasync per append",
    );
    report.config(
        "group_commit",
        "prefixkv_storage::log: one vectored write + one data sync per group, one I/O thread",
    );
    report.config("dir", plan.base_dir.display().to_string());
    report.config(
        "variants",
        Value::from(plan.variants.iter().map(|v| v.name()).collect::<Vec<_>>()),
    );
}

/// Every variant at every appender count, alternated over the rounds.
fn run_cells(report: &mut Report, args: &Args, plan: &Plan) -> Result<Cells> {
    let duration = Duration::from_secs_f64(plan.seconds);
    let schedule = alternating_schedule(plan.variants.len(), plan.rounds);
    let bar = crate::progress::bar((schedule.len() * args.appenders.len()) as u64, "oplog");
    let mut cells = Cells::new();
    for &appenders in &args.appenders {
        for &(_, contender) in &schedule {
            let variant = plan.variants[contender];
            bar.set_message(format!("{} x{appenders}", variant.name()));
            let dir = plan.base_dir.join(variant.name());
            let cell = run_cell(variant, appenders, args.record_bytes, duration, &dir)
                .with_context(|| format!("{} with {appenders} appenders", variant.name()))?;
            report.check(
                "log records read back after each cell",
                "the records the appenders were acknowledged",
                1,
                cell.verified,
            );
            cells.entry((contender, appenders)).or_default().push(cell);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(cells)
}

/// One row per (variant, appenders), medians over rounds; returns the medians the summary needs
/// and the chart's series.
fn write_rows(
    report: &mut Report,
    args: &Args,
    plan: &Plan,
    cells: &Cells,
) -> (Medians, Vec<Series>) {
    let mut medians = Medians::new();
    let mut series = Vec::new();
    for (index, variant) in plan.variants.iter().enumerate() {
        let mut points = Vec::new();
        for &appenders in &args.appenders {
            let runs = &cells[&(index, appenders)];
            let over_rounds =
                |figure: fn(&Cell) -> f64| Spread::of(&runs.iter().map(figure).collect::<Vec<_>>());
            let throughput = over_rounds(|c| c.appends_per_s);
            let per_fsync = over_rounds(|c| c.appends_per_fsync);
            let mut fields = row([
                ("variant", Value::from(variant.name())),
                ("appenders", Value::from(appenders as u64)),
                ("appends_per_fsync", Value::from(per_fsync.median)),
                (
                    "p50_append_latency_us",
                    Value::from(over_rounds(|c| c.p50_us).median),
                ),
                (
                    "p99_append_latency_us",
                    Value::from(over_rounds(|c| c.p99_us).median),
                ),
                ("verified", Value::from(runs.iter().all(|c| c.verified))),
            ]);
            throughput.insert_into(&mut fields, "appends_per_s");
            report.rows.push(fields);
            medians.insert((*variant, appenders), (throughput.median, per_fsync.median));
            points.push((appenders as f64, throughput.median));
        }
        series.push(Series {
            label: variant.name().to_string(),
            points,
        });
    }
    (medians, series)
}

/// Group commit (as deployed: io_uring where available, what `BackendChoice::Auto` picks)
/// against the naive log at the largest appender count, and io_uring against pwritev.
fn write_summary(report: &mut Report, args: &Args, plan: &Plan, medians: &Medians) {
    let has_io_uring = plan.variants.contains(&Variant::GroupCommitIoUring);
    let group = if has_io_uring {
        Variant::GroupCommitIoUring
    } else {
        Variant::GroupCommitPwritev
    };
    let top = args.appenders.iter().copied().max().unwrap_or(1);
    let at = |variant: Variant, n: usize| {
        medians
            .get(&(variant, n))
            .copied()
            .unwrap_or((f64::NAN, f64::NAN))
    };
    report.summary(
        &format!("group_commit_over_naive_at_{top}"),
        ratio(at(group, top).0, at(Variant::Naive, top).0),
    );
    report.summary(&format!("appends_per_fsync_at_{top}"), at(group, top).1);
    if has_io_uring {
        let io_uring_over_pwritev = |n: usize| {
            ratio(
                at(Variant::GroupCommitIoUring, n).0,
                at(Variant::GroupCommitPwritev, n).0,
            )
        };
        report.summary("io_uring_over_pwritev", io_uring_over_pwritev(top));
        for &n in &args.appenders {
            report.summary(
                &format!("io_uring_over_pwritev_at_{n}"),
                io_uring_over_pwritev(n),
            );
        }
    }
    report.notes.push(format!(
        "group_commit_over_naive and appends_per_fsync use {}; io_uring_over_pwritev is at {top} appenders",
        group.name()
    ));
    report.notes.push(format!(
        "{} cores: appender threads, the I/O thread and the fsyncs share them",
        report.host.cpus
    ));
}

fn write_chart(common: &Common, args: &Args, series: Vec<Series>) -> Result<()> {
    write_line_chart(
        &LineChart {
            title: format!(
                "oplog: {}-byte appends under `always`, throughput vs appenders",
                args.record_bytes
            ),
            x_label: "concurrent appenders (log scale)".into(),
            y_label: "appends/s (median over rounds)".into(),
            series,
            markers: Vec::new(),
            log_x: true,
        },
        &common.out,
        "oplog",
    )
}
