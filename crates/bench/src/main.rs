//! The `prefixkv-bench` command line: one subcommand per experiment (see `docs/results/`).

use anyhow::Result;
use clap::{Parser, Subcommand};
use prefixkv_bench::report::Report;
use prefixkv_bench::{experiments, Common};

/// Reproduces the experiments of prefixkv's source documents on our code, side by side with the
/// baselines, and writes `results/<experiment>.json` plus PNG/SVG plots.
#[derive(Debug, Parser)]
#[command(name = "prefixkv-bench", version, about)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Debug, Subcommand)]
enum Experiment {
    /// The Persian paper's evaluation: checkpoint strategies under load, against dashmap and papaya.
    Cpr(experiments::cpr::Args),
    /// Crash stress: SIGKILL a loaded, checkpointing engine at random points; verify each recovery.
    Crash(experiments::crash::Args),
    /// Group commit vs fsync-per-append, io_uring vs pwritev (prefixkv_storage::log).
    Oplog(experiments::oplog::Args),
    /// Checkpoint algorithms for frequently-consistent applications (prefixkv-tickstate).
    Tick(experiments::tick::Args),
    /// CTrie vs dashmap/papaya (throughput) and concread/imbl (snapshot cost as the map grows).
    Ctrie(experiments::ctrie::Args),
    /// D-Redis (DPR over redis-server) vs a pass-through proxy vs Redis direct; commit latency, recovery.
    Dredis(experiments::dredis::Args),
    /// D-FASTER's evaluation on prefixkv-cluster workers: scale-out, latency, batch size,
    /// checkpoint interval, failures (verified) and recoverability levels.
    Dpr(experiments::dpr::Args),
    /// WAL-to-database checkpoint: naive backfill against the fast one (prefixkv-pagestore).
    Wal(experiments::wal::Args),
    /// prefixkv-server against redis-server: redis-benchmark at matched durability, BGSAVE under load.
    Server(experiments::server::Args),
    /// SMaRtTrie: Raft replicas with blocking (BTreeMap) vs concurrent (CTrie) checkpoints.
    Smr(experiments::smr::Args),
    /// The engine's hot path against dashmap, papaya and a sharded RwLock: FASTER's YCSB method.
    Ycsb(experiments::ycsb::Args),
    /// (Internal, started by `dpr`'s colocation part) a cluster worker hosting co-located client
    /// threads; writes its counts to a file and serves until killed.
    #[command(hide = true, name = "dpr-colocated-worker")]
    DprColocatedWorker(experiments::dpr::HostArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    let report = match &cli.experiment {
        Experiment::Cpr(args) => experiments::cpr::run(common, args)?,
        Experiment::Crash(args) => experiments::crash::run(common, args)?,
        Experiment::Oplog(args) => experiments::oplog::run(common, args)?,
        Experiment::Tick(args) => experiments::tick::run(common, args)?,
        Experiment::Ctrie(args) => experiments::ctrie::run(common, args)?,
        Experiment::Wal(args) => experiments::wal::run(common, args)?,
        Experiment::Server(args) => experiments::server::run(common, args)?,
        Experiment::Dredis(args) => experiments::dredis::run(common, args)?,
        Experiment::Dpr(args) => experiments::dpr::run(common, args)?,
        Experiment::Smr(args) => experiments::smr::run(common, args)?,
        Experiment::Ycsb(args) => experiments::ycsb::run(common, args)?,
        Experiment::DprColocatedWorker(args) => return experiments::dpr::host(args),
    };
    finish(common, &report)
}

/// Writes the report, prints where it went, its summary and its checks, and fails if a check
/// failed (a run with no check is not a failure: its `verified` is `null`).
fn finish(common: &Common, report: &Report) -> Result<()> {
    let path = report.write(&common.out)?;
    println!("{}: wrote {}", report.experiment, path.display());
    for (name, value) in &report.summary {
        println!("  {name} = {value}");
    }
    match report.verified {
        None => println!("  verified = null (no check ran)"),
        Some(verified) => println!(
            "  verified = {verified} ({} checks: {})",
            report.checks.len(),
            report
                .checks
                .iter()
                .map(|c| format!(
                    "{} n={} {}",
                    c.what,
                    c.n,
                    if c.passed { "ok" } else { "FAILED" }
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
    if report.failed() {
        anyhow::bail!(
            "{}: verification failed (see the notes in {})",
            report.experiment,
            path.display()
        );
    }
    Ok(())
}
