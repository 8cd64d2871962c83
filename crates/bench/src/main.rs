//! The `prefixkv-bench` command line: one subcommand per experiment (see `docs/results/`).

use anyhow::Result;
use clap::{Parser, Subcommand};
use prefixkv_bench::Common;

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
    /// Group commit vs fsync-per-append, io_uring vs pwritev (prefixkv-oplog).
    Oplog(prefixkv_bench::experiments::oplog::Args),
    /// Checkpoint algorithms for frequently-consistent applications (prefixkv-tickstate).
    Tick(prefixkv_bench::experiments::tick::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    let report = match &cli.experiment {
        Experiment::Oplog(args) => prefixkv_bench::experiments::oplog::run(common, args)?,
        Experiment::Tick(args) => prefixkv_bench::experiments::tick::run(common, args)?,
    };
    let path = report.write(&common.out)?;
    println!("{}", serde_json::to_string_pretty(&report.summary)?);
    println!("wrote {}", path.display());
    if !report.verified {
        anyhow::bail!("verification failed (see {})", path.display());
    }
    Ok(())
}
