//! prefixkv-server: a Redis-compatible server on the prefixkv engine.
//!
//! Startup: resolve the configuration, recover (checkpoint + oplog replay; the port opens only
//! when recovery is complete, so no client ever sees a partly loaded keyspace), bind, print
//! how to connect, serve. See `docs/server.md`.

use prefixkv_commands::state::Server;
use prefixkv_server::host::ServerHost;
use prefixkv_server::{config, metrics, net, persistence, signals};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

fn main() {
    if let Err(error) = run() {
        eprintln!("prefixkv-server: {error:#}");
        std::process::exit(1);
    }
}

/// Logs go to standard error at `loglevel`, or as PREFIXKV_LOG's filter says when it is set.
fn init_logging(level: config::LogLevel) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PREFIXKV_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.filter().to_string()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn run() -> anyhow::Result<()> {
    let config = config::Config::resolve(config::Flags::parse())?;
    init_logging(config.loglevel);
    signals::install()?;
    let (keyspace, loaded) = persistence::recover(&config)?;
    tracing::info!("loaded {loaded}");
    let listener = net::bind(&config.bind, config.port, config.port_explicit)?;
    let port = listener.local_addr()?.port();
    let keyspace = Arc::new(keyspace);
    let persistence = Arc::new(persistence::Persistence::new(
        keyspace.clone(),
        &config,
        loaded,
    ));
    persistence.start_periodic(config.checkpoint_interval_ms)?;
    signals::arm(persistence.clone());
    let threads = config.threads;
    let host = Arc::new(ServerHost {
        persistence: persistence.clone(),
        config: config.clone(),
        port,
    });
    let server = Server::new(config.settings.clone(), keyspace, host);
    let libraries = server.scripting.restore(
        &server.keyspace.store,
        config.settings.lua_memory_limit_bytes,
    )?;
    if libraries > 0 {
        tracing::info!("loaded {libraries} function libraries");
    }
    if config.metrics_port != 0 {
        let address = (config.bind.as_str(), config.metrics_port);
        let metrics_listener = std::net::TcpListener::bind(address).with_context(|| {
            format!(
                "binding the metrics endpoint on {}:{} (--metrics-port)",
                config.bind, config.metrics_port
            )
        })?;
        metrics::serve(server.clone(), persistence, metrics_listener)?;
        println!(
            "prefixkv-server: Prometheus metrics on http://{}:{}/metrics",
            config.bind, config.metrics_port
        );
    }
    if port != config.port && config.port != 0 {
        println!(
            "prefixkv-server: port {} is taken; using {port}",
            config.port
        );
    }
    println!(
        "prefixkv-server ready on {}:{port} (dir {}, appendfsync {}, {threads} threads). Connect with: redis-cli -p {port}",
        config.bind,
        config.dir.display(),
        config.settings.durability.name()
    );
    println!("PORT {port}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    net::run(server, listener, threads)
}
