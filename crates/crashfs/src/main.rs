//! `prefixkv-crashfs --backing DIR --mountpoint DIR`: mount the crash filesystem (foreground;
//! unmount with `fusermount3 -u DIR` to end it). See the crate doc for the fault model.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use fuser::{Config, MountOption};

#[derive(Parser)]
#[command(
    about = "FUSE passthrough filesystem that loses unsynced data on `echo crash > MNT/.crashfs-control`"
)]
struct Args {
    /// Directory holding the synced state.
    #[arg(long)]
    backing: PathBuf,
    /// Where to mount.
    #[arg(long)]
    mountpoint: PathBuf,
    /// Most unsynced bytes held in memory; writes beyond fail with ENOSPC.
    #[arg(long, default_value_t = 512 << 20)]
    max_unsynced: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.backing.is_dir() {
        bail!(
            "backing directory {} does not exist",
            args.backing.display()
        );
    }
    let backing = args.backing.canonicalize().context("resolving --backing")?;
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("crashfs".into()), MountOption::RW];
    eprintln!(
        "crashfs: mounting {} over {} (max unsynced {} bytes)",
        args.mountpoint.display(),
        backing.display(),
        args.max_unsynced
    );
    let fs = prefixkv_crashfs::fs::CrashFs::new(backing, args.max_unsynced);
    fuser::mount(fs, &args.mountpoint, &config)
        .with_context(|| format!("mounting crashfs on {}", args.mountpoint.display()))?;
    eprintln!("crashfs: unmounted");
    Ok(())
}
