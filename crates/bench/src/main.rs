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
    /// WAL checkpoint: naive vs fast (Turso-style) backfill under a write-heavy load.
    Wal(experiments::wal::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    let report = match &cli.experiment {
        Experiment::Wal(args) => experiments::wal::run(common, args)?,
    };
    let path = report.write(&common.out)?;
    println!(
        "{}: {}",
        path.display(),
        serde_json::to_string_pretty(&report.summary)?
    );
    if !report.verified {
        anyhow::bail!("verification failed; see {}", path.display());
    }
    Ok(())
}
