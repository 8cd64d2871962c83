//! The `prefixkv-bench` command line: one subcommand per experiment (see `docs/results/`).

use anyhow::Result;
use clap::{Parser, Subcommand};
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
    /// CTrie vs dashmap/papaya (throughput) and concread/imbl (snapshot cost as the map grows).
    Ctrie(experiments::ctrie::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    match &cli.experiment {
        Experiment::Ctrie(args) => finish(common, &experiments::ctrie::run(common, args)?),
    }
}

/// Writes the report, prints its summary, and fails the process if verification failed.
fn finish(common: &Common, report: &prefixkv_bench::report::Report) -> Result<()> {
    let path = report.write(&common.out)?;
    println!(
        "{}: {}",
        report.experiment,
        serde_json::to_string_pretty(&report.summary)?
    );
    println!(
        "verified: {} (results in {})",
        report.verified,
        path.display()
    );
    if !report.verified {
        anyhow::bail!("{}: verification failed", report.experiment);
    }
    Ok(())
}
