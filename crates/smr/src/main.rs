//! `prefixkv-smr`: run a replica, talk to a cluster, or load it with closed-loop clients.
//!
//! ```text
//! prefixkv-smr replica --id 1 --peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103 \
//!     --dir /tmp/smr1 --client-port 7001
//! prefixkv-smr cli --cluster 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 SET k v
//! prefixkv-smr bench --cluster 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 --seconds 10
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use prefixkv_resp::Reply;
use prefixkv_smr::client::{parse_address_map, ClusterClient};
use prefixkv_smr::log_store::LogSync;
use prefixkv_smr::{Node, NodeConfig, StateModel};

#[derive(Parser, Debug)]
#[command(
    name = "prefixkv-smr",
    about = "A replicated key-value store on Raft with CTrie checkpoints"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Run one replica until SIGINT/SIGTERM.
    Replica(ReplicaArgs),
    /// Send one command (SET k v, GET k, DEL k, PING, SMR.STATUS) to the cluster (its leader).
    Cli {
        /// Client addresses: `1=127.0.0.1:7001,2=...`.
        #[arg(long)]
        cluster: String,
        /// The command and its arguments.
        #[arg(required = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Closed-loop update-only load on random keys; prints throughput each second.
    Bench {
        /// Client addresses: `1=127.0.0.1:7001,2=...`.
        #[arg(long)]
        cluster: String,
        /// Concurrent closed-loop clients.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Duration.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Key space.
        #[arg(long, default_value_t = 100_000)]
        keys: u64,
        /// Value size.
        #[arg(long, default_value_t = 100)]
        value_bytes: usize,
    },
}

#[derive(clap::Args, Debug)]
struct ReplicaArgs {
    /// This replica's id.
    #[arg(long)]
    id: u64,
    /// Raft addresses of every replica, this one included: `1=127.0.0.1:7101,2=...`.
    #[arg(long)]
    peers: String,
    /// Data directory (Raft log and checkpoints).
    #[arg(long)]
    dir: PathBuf,
    /// Port for RESP clients (on 127.0.0.1 unless --client-host is given).
    #[arg(long)]
    client_port: u16,
    /// Address to bind the client port on.
    #[arg(long, default_value = "127.0.0.1")]
    client_host: String,
    /// State model.
    #[arg(long, value_enum, default_value_t = StateModel::Concurrent)]
    model: StateModel,
    /// Checkpoint every this many applied commands (Δ).
    #[arg(long, default_value_t = 100_000)]
    checkpoint_every: u64,
    /// Start with an empty state even if checkpoint files exist and none verifies.
    #[arg(long)]
    allow_missing_checkpoint: bool,
    /// The longest one client command may take here (waiting for a leader, forwarding,
    /// committing) before the client gets `-CLUSTERDOWN` or `-TIMEOUT`.
    #[arg(long, default_value_t = 5_000)]
    request_timeout_ms: u64,
    /// `on`: fdatasync the Raft log before an entry counts as durable. `off` (the paper's
    /// "logging disabled"): written to the page cache only; a process crash loses nothing
    /// acknowledged, a power cut or kernel crash may lose the log's unsynced suffix.
    #[arg(long, value_enum, default_value_t = LogSync::On)]
    log_sync: LogSync,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.mode {
            Mode::Replica(args) => run_replica(args).await,
            Mode::Cli { cluster, command } => run_cli(&cluster, &command).await,
            Mode::Bench {
                cluster,
                clients,
                seconds,
                keys,
                value_bytes,
            } => run_bench(&cluster, clients, seconds, keys, value_bytes).await,
        }
    })
}

async fn run_replica(args: ReplicaArgs) -> anyhow::Result<()> {
    let peers = parse_address_map(&args.peers).context("--peers")?;
    let client_address: SocketAddr = format!("{}:{}", args.client_host, args.client_port)
        .parse()
        .context("--client-host/--client-port")?;
    let mut config = NodeConfig::new(args.id, peers, args.dir);
    config.model = args.model;
    config.checkpoint_every_commands = args.checkpoint_every;
    config.allow_missing_checkpoint = args.allow_missing_checkpoint;
    config.request_timeout_ms = args.request_timeout_ms;
    config.log_sync = args.log_sync;
    let node = Node::start(config, client_address).await?;
    // Tests and scripts wait for this line before connecting.
    println!("READY id={} client={}", args.id, node.client_address);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    node.shutdown().await
}

fn render(reply: &Reply) -> String {
    match reply {
        Reply::SimpleString(text) => String::from_utf8_lossy(text).into_owned(),
        Reply::Error(text) => format!("(error) {}", String::from_utf8_lossy(text)),
        Reply::Integer(value) => format!("(integer) {value}"),
        Reply::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Reply::NullBulkString | Reply::Null | Reply::NullArray => "(nil)".to_string(),
        other => format!("{other:?}"),
    }
}

async fn run_cli(cluster: &str, command: &[String]) -> anyhow::Result<()> {
    let mut client = ClusterClient::new(parse_address_map(cluster).context("--cluster")?);
    let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
    let reply = client.call(&args).await?;
    println!("{}", render(&reply));
    if matches!(reply, Reply::Error(_)) {
        std::process::exit(1);
    }
    Ok(())
}

async fn run_bench(
    cluster: &str,
    clients: usize,
    seconds: u64,
    keys: u64,
    value_bytes: usize,
) -> anyhow::Result<()> {
    let addresses = parse_address_map(cluster).context("--cluster")?;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (done, stop, addresses) = (done.clone(), stop.clone(), addresses.clone());
        handles.push(tokio::spawn(async move {
            let mut client = ClusterClient::new(addresses);
            let value = vec![b'v'; value_bytes];
            while !stop.load(Ordering::Relaxed) {
                let key = format!("key:{}", rand::random_range(0..keys));
                match client.call(&[b"SET", key.as_bytes(), &value]).await? {
                    Reply::SimpleString(_) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    other => anyhow::bail!("SET failed: {other:?}"),
                }
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    let mut previous = 0;
    for second in 1..=seconds {
        tokio::time::sleep_until((start + Duration::from_secs(second)).into()).await;
        let now = done.load(Ordering::Relaxed);
        println!("t={second}s ops_per_s={}", now - previous);
        previous = now;
    }
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    let total = done.load(Ordering::Relaxed);
    println!(
        "total_ops={total} mean_ops_per_s={:.0} clients={clients} (client and replicas share this machine's cores)",
        total as f64 / start.elapsed().as_secs_f64()
    );
    Ok(())
}
