//! `prefixkv-cluster`: run one cluster worker, a cluster manager, or a whole local cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use prefixkv_cluster::launcher::{LocalCluster, LocalClusterConfig};
use prefixkv_cluster::migrate::{migrate_slots, MigrationPlan};
use prefixkv_cluster::worker::Recoverability;
use prefixkv_cluster::{EngineConfig, Worker, WorkerConfig};
use prefixkv_dpr::cluster::{ClusterManager, SystemClock};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::metadata::MetadataStore;
use prefixkv_dprnet::block_termination_signals;
use prefixkv_dprnet::options::{FinderKind, MetadataLocation};
use prefixkv_engine::StoreConfig;

#[derive(Parser, Debug)]
#[command(about = "prefixkv-cluster: a sharded cluster of prefixkv engines under DPR")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start N worker processes and the cluster manager on loopback; restart workers that exit.
    Local {
        /// Number of workers.
        #[arg(long, default_value_t = 3)]
        workers: usize,
        /// Cluster directory (metadata.sqlite, worker-<i>/, worker-<i>.log).
        #[arg(long, default_value = "prefixkv-cluster-data")]
        dir: PathBuf,
        /// Metadata store instead of metadata.sqlite in --dir: a `postgres://…` URL, a
        /// `host=… port=…` conninfo, or a SQLite path.
        #[arg(long)]
        metadata: Option<String>,
        /// Commit (CPR checkpoint) interval of every worker.
        #[arg(long, default_value_t = 100)]
        checkpoint_interval_ms: u64,
        /// A worker silent this long has failed (a worker process's exit is noticed at once).
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// What acknowledged batches are guaranteed: none, eventual, dpr, synchronous (dpr plus
        /// an fdatasync of every batch: measures that cost; recovery does not replay the log).
        #[arg(long, default_value = "dpr")]
        recoverability: Recoverability,
        /// Engine index buckets per worker (power of two).
        #[arg(long, default_value_t = 1 << 16)]
        index_buckets: usize,
        /// Engine log memory per worker, in bytes.
        #[arg(long, default_value_t = 256 << 20)]
        log_memory_bytes: u64,
    },
    /// Run one worker (an engine behind a DPR worker) against a shared metadata store.
    Worker {
        /// DPR worker id (unique in the cluster).
        #[arg(long)]
        id: u64,
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:7500")]
        listen: SocketAddr,
        /// Worker directory (engine checkpoints, INCARNATION).
        #[arg(long)]
        dir: PathBuf,
        /// Metadata store shared by the cluster: a SQLite path, a `postgres://…` URL or a
        /// `host=… port=…` conninfo.
        #[arg(long, value_parser = parse_metadata)]
        metadata: MetadataLocation,
        /// Commit (CPR checkpoint) interval.
        #[arg(long, default_value_t = 100)]
        checkpoint_interval_ms: u64,
        /// What acknowledged batches are guaranteed: none, eventual, dpr, synchronous (dpr plus
        /// an fdatasync of every batch: measures that cost; recovery does not replay the log).
        #[arg(long, default_value = "dpr")]
        recoverability: Recoverability,
        /// Lease renewal interval (keep it well below the manager's lease).
        #[arg(long, default_value_t = 200)]
        heartbeat_interval_ms: u64,
        /// Engine index buckets (power of two).
        #[arg(long, default_value_t = 1 << 16)]
        index_buckets: usize,
        /// Engine log memory, in bytes.
        #[arg(long, default_value_t = 256 << 20)]
        log_memory_bytes: u64,
    },
    /// Publish hash slot ownership (an even split over the given worker addresses, worker i at
    /// the i-th) in a metadata store; run it before starting the workers, which read it at start.
    Ownership {
        /// Metadata store shared by the cluster: a SQLite path, a `postgres://…` URL or a
        /// `host=… port=…` conninfo.
        #[arg(long, value_parser = parse_metadata)]
        metadata: MetadataLocation,
        /// Worker addresses in worker-id order, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        workers: Vec<SocketAddr>,
    },
    /// Move hash slots to another worker of a running cluster, at checkpoint boundaries: the
    /// old owner stops serving them at a version switch, their committed data is copied, and the
    /// new table is published once both sides are in the DPR cut (clients get -TRYAGAIN
    /// meanwhile, -MOVED after). Abandoned cleanly, and safe to rerun, if a failure intervenes.
    Migrate {
        /// Metadata store shared by the cluster: a SQLite path, a `postgres://…` URL or a
        /// `host=… port=…` conninfo.
        #[arg(long, value_parser = parse_metadata)]
        metadata: MetadataLocation,
        /// Slots to move: `first-last` (inclusive) or one slot.
        #[arg(long)]
        slots: String,
        /// The worker id of the new owner.
        #[arg(long)]
        to: u64,
        /// The new owner's address, if it owns no slots yet (else read from the table).
        #[arg(long)]
        to_address: Option<String>,
        /// Bound on each wait (a commit boundary, the cut reaching a version).
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Run the cluster manager (finder refresh, lease checks, rollbacks) for a metadata store.
    Manager {
        /// Metadata store shared by the cluster: a SQLite path, a `postgres://…` URL or a
        /// `host=… port=…` conninfo.
        #[arg(long, value_parser = parse_metadata)]
        metadata: MetadataLocation,
        /// A worker silent this long has failed (a standalone manager learns of failures only
        /// this way).
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// How often to refresh the finder and check leases.
        #[arg(long, default_value_t = 20)]
        check_interval_ms: u64,
    },
}

/// `first-last` or `slot` → an inclusive slot range.
fn parse_slots(text: &str) -> anyhow::Result<(u16, u16)> {
    let parse = |part: &str| {
        part.trim()
            .parse::<u16>()
            .map_err(|e| anyhow::anyhow!("--slots {text:?}: {e}"))
    };
    match text.split_once('-') {
        Some((first, last)) => Ok((parse(first)?, parse(last)?)),
        None => parse(text).map(|slot| (slot, slot)),
    }
}

/// `--metadata`: a SQLite path or a PostgreSQL URL/conninfo ([`MetadataLocation::parse`]).
fn parse_metadata(text: &str) -> Result<MetadataLocation, String> {
    if text.is_empty() {
        return Err("an empty metadata location".into());
    }
    Ok(MetadataLocation::parse(text))
}

/// Opens (connects to) the cluster's metadata store.
fn open_store(metadata: &MetadataLocation) -> anyhow::Result<Arc<dyn MetadataStore>> {
    metadata
        .open()
        .with_context(|| format!("opening the metadata store {metadata}"))
}

/// The cluster's metadata store and its exact DPR finder.
fn exact_finder(metadata: &MetadataLocation) -> anyhow::Result<Arc<dyn DprFinder>> {
    Ok(FinderKind::Exact.open(open_store(metadata)?)?)
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let wait_for_signal = block_termination_signals();
    match cli.command {
        Command::Local {
            workers,
            dir,
            metadata,
            checkpoint_interval_ms,
            lease_ms,
            recoverability,
            index_buckets,
            log_memory_bytes,
        } => {
            let executable = std::env::current_exe().context("finding this executable")?;
            let mut config = LocalClusterConfig::new(executable, workers, dir);
            config.metadata_url = metadata;
            config.checkpoint_interval_ms = checkpoint_interval_ms;
            config.lease_ms = lease_ms;
            config.recoverability = recoverability;
            config.index_buckets = index_buckets;
            config.log_memory_bytes = log_memory_bytes;
            let cluster = LocalCluster::start(config).context("starting the cluster")?;
            println!("metadata {}", cluster.metadata_location());
            for (id, (address, pid)) in cluster
                .addresses()
                .into_iter()
                .zip(cluster.pids())
                .enumerate()
            {
                println!(
                    "worker {id} listen {address} pid {}",
                    pid.map_or("-".to_string(), |p| p.to_string())
                );
            }
            println!("ready (Ctrl-C to stop)");
            let signal = wait_for_signal();
            eprintln!("signal {signal}: stopping the workers");
            cluster.shutdown();
        }
        Command::Worker {
            id,
            listen,
            dir,
            metadata,
            checkpoint_interval_ms,
            recoverability,
            heartbeat_interval_ms,
            index_buckets,
            log_memory_bytes,
        } => {
            let mut store = StoreConfig::new(dir);
            store.index_buckets = index_buckets;
            store.log_memory_bytes = log_memory_bytes;
            let mut config = WorkerConfig::new(id, listen, EngineConfig { store });
            config.checkpoint_interval_ms = checkpoint_interval_ms;
            config.recoverability = recoverability;
            config.heartbeat_interval_ms = heartbeat_interval_ms;
            let worker =
                Worker::start(config, exact_finder(&metadata)?).context("starting the worker")?;
            println!("worker {id} listen {}", worker.local_address());
            let signal = wait_for_signal();
            eprintln!("signal {signal}: stopping worker {id}");
            worker.shutdown();
        }
        Command::Ownership { metadata, workers } => {
            let store = open_store(&metadata)?;
            prefixkv_cluster::launcher::publish_ownership(store.as_ref(), &workers)
                .context("publishing hash slot ownership")?;
            for range in store.ownership()? {
                println!(
                    "slots {}-{} worker {} {}",
                    range.first, range.last, range.worker, range.address
                );
            }
        }
        Command::Migrate {
            metadata,
            slots,
            to,
            to_address,
            timeout_ms,
        } => {
            let (first, last) = parse_slots(&slots)?;
            let store = open_store(&metadata)?;
            let plan = MigrationPlan {
                to_address,
                timeout: Duration::from_millis(timeout_ms.max(1)),
                ..MigrationPlan::new(first, last, to)
            };
            let report = migrate_slots(store.as_ref(), &plan).context("migrating slots")?;
            println!(
                "slots {first}-{last} moved from worker {} to worker {}: {} keys, old owner \
                 sealed version {}, copy committed by version {}, world-line {}, {} ms",
                report.from,
                report.to,
                report.keys,
                report.sealed_version,
                report.imported_version,
                report.world_line,
                report.elapsed.as_millis()
            );
            match report.forgotten {
                Ok(deleted) => println!("the old owner deleted its {deleted} copies"),
                Err(error) => eprintln!(
                    "warning: the old owner did not delete its copies ({error}); they are never \
                     served, and `PREFIXKV.SLOTS FORGET {first} {last}` on it deletes them"
                ),
            }
        }
        Command::Manager {
            metadata,
            lease_ms,
            check_interval_ms,
        } => {
            let finder = exact_finder(&metadata)?;
            let manager =
                ClusterManager::new(Arc::clone(finder.store()), Arc::new(SystemClock), lease_ms);
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let thread = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    prefixkv_cluster::launcher::run_manager(
                        &manager,
                        finder.as_ref(),
                        &stop,
                        Duration::from_millis(check_interval_ms.max(1)),
                    )
                })
            };
            println!("manager ready (Ctrl-C to stop)");
            let signal = wait_for_signal();
            eprintln!("signal {signal}: stopping the manager");
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = thread.join();
        }
    }
    Ok(())
}
