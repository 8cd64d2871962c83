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
enum Experiment {}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let _ = &cli.common;
    match cli.experiment {}
}
