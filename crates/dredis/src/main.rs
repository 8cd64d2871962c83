//! `prefixkv-dredis`: run a local D-Redis cluster, or one proxy.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use prefixkv_dprnet::block_termination_signals;
use prefixkv_dprnet::options::{FinderKind, MetadataLocation};
use prefixkv_dprnet::wire::FrameLimits;
use prefixkv_dredis::redis::RedisServerConfig;
use prefixkv_dredis::state_object::RedisStateConfig;
use prefixkv_dredis::{LocalCluster, LocalClusterConfig, Proxy, ProxyConfig};

#[derive(Parser, Debug)]
#[command(about = "D-Redis: prefix recoverability for an unmodified redis-server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start N redis-servers, N proxies, the DPR finder and the cluster manager.
    Cluster {
        /// Number of shards.
        #[arg(long, default_value_t = 2)]
        shards: usize,
        /// Cluster directory (metadata.sqlite, shard-<i>/redis, shard-<i>/versions).
        #[arg(long)]
        dir: PathBuf,
        /// The redis-server executable.
        #[arg(long, default_value = "redis-server")]
        redis_server: PathBuf,
        /// First proxy port (0: free ports).
        #[arg(long, default_value_t = 0)]
        proxy_port: u16,
        /// First Redis port (0: free ports).
        #[arg(long, default_value_t = 0)]
        redis_port: u16,
        /// Commit (BGSAVE) interval.
        #[arg(long, default_value_t = 100)]
        commit_interval_ms: u64,
        /// Lease: a shard silent this long has failed (a Redis that exits is reported at once;
        /// the lease catches hung ones).
        #[arg(long, default_value_t = 1000)]
        lease_ms: u64,
        /// DPR finder: exact, approximate or hybrid.
        #[arg(long, default_value_t = FinderKind::Exact)]
        finder: FinderKind,
        /// Metadata store: a PostgreSQL `postgres://…` URL or `host=… port=…` conninfo, or a
        /// SQLite file path (default: metadata.sqlite in --dir).
        #[arg(long)]
        metadata_url: Option<String>,
    },
    /// Run one proxy (and its redis-server) as DPR worker `--worker-id`. Needs a cluster
    /// manager on the same metadata store (e.g. a `cluster` process) to recover from failures.
    Proxy {
        /// DPR worker id of this shard.
        #[arg(long)]
        worker_id: u64,
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:7400")]
        listen: SocketAddr,
        /// Redis port.
        #[arg(long)]
        redis_port: u16,
        /// Shard directory (redis/ and versions/ below it).
        #[arg(long)]
        dir: PathBuf,
        /// SQLite metadata store shared by the cluster (or use --metadata-url).
        #[arg(long, required_unless_present = "metadata_url")]
        metadata: Option<PathBuf>,
        /// Metadata store as a PostgreSQL URL or conninfo (or a SQLite path); overrides
        /// --metadata.
        #[arg(long)]
        metadata_url: Option<String>,
        /// DPR finder: exact, approximate or hybrid (as the cluster's manager uses).
        #[arg(long, default_value_t = FinderKind::Exact)]
        finder: FinderKind,
        /// The redis-server executable.
        #[arg(long, default_value = "redis-server")]
        redis_server: PathBuf,
        /// Commit (BGSAVE) interval.
        #[arg(long, default_value_t = 100)]
        commit_interval_ms: u64,
    },
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
        Command::Cluster {
            shards,
            dir,
            redis_server,
            proxy_port,
            redis_port,
            commit_interval_ms,
            lease_ms,
            finder,
            metadata_url,
        } => {
            let mut config = LocalClusterConfig::new(shards, dir);
            config.redis_server = redis_server;
            config.first_proxy_port = proxy_port;
            config.first_redis_port = redis_port;
            config.commit_interval_ms = commit_interval_ms;
            config.lease_ms = lease_ms;
            config.finder = finder;
            config.metadata_url = metadata_url;
            let cluster = LocalCluster::start(config).context("starting the cluster")?;
            println!("metadata {}", cluster.metadata_location());
            println!("finder {finder}");
            for (shard, ((proxy, redis), pid)) in cluster
                .proxy_addresses()
                .into_iter()
                .zip(cluster.redis_addresses())
                .zip(cluster.redis_pids())
                .enumerate()
            {
                println!(
                    "shard {shard} proxy {proxy} redis {redis} redis_pid {}",
                    pid.map_or("-".to_string(), |p| p.to_string())
                );
            }
            println!("ready (Ctrl-C to stop)");
            let signal = wait_for_signal();
            eprintln!("signal {signal}: stopping proxies and redis-servers");
            cluster.shutdown();
        }
        Command::Proxy {
            worker_id,
            listen,
            redis_port,
            dir,
            metadata,
            metadata_url,
            finder: finder_kind,
            redis_server,
            commit_interval_ms,
        } => {
            let location = match (metadata_url, metadata) {
                (Some(url), _) => MetadataLocation::parse(&url),
                (None, Some(path)) => MetadataLocation::Sqlite(path),
                (None, None) => anyhow::bail!("give --metadata or --metadata-url"),
            };
            let store = location
                .open()
                .with_context(|| format!("opening the metadata store {location}"))?;
            let finder = finder_kind.open(store).context("starting the finder")?;
            let proxy = Proxy::start(
                ProxyConfig {
                    worker_id,
                    listen,
                    limits: FrameLimits::default(),
                    commit_interval_ms,
                    tick_ms: 10,
                    heartbeat_interval_ms: 60,
                    redis: RedisStateConfig {
                        server: RedisServerConfig {
                            executable: redis_server,
                            port: redis_port,
                            directory: dir.join("redis"),
                            start_timeout_ms: 10_000,
                        },
                        versions_directory: dir.join("versions"),
                        save_timeout_ms: 30_000,
                    },
                    commit_catch_up: finder_kind.commits_with_catch_up(),
                    recovery_wait_ms: 30_000,
                },
                finder,
            )
            .context("starting the proxy")?;
            println!(
                "worker {worker_id} proxy {} redis {} redis_pid {}",
                proxy.local_address(),
                proxy.redis_address(),
                proxy.redis_pid().map_or("-".to_string(), |p| p.to_string())
            );
            println!("ready (Ctrl-C to stop)");
            let signal = wait_for_signal();
            eprintln!("signal {signal}: stopping");
            proxy.shutdown();
        }
    }
    Ok(())
}
