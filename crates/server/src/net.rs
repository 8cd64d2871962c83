//! Listening and threads: one accept thread hands connections round-robin to N request
//! threads, each running its own current-thread tokio runtime and owning one engine session
//! (thread-local, suspended whenever the runtime parks, so idle threads never hold up a
//! checkpoint). Thread 0 also runs active expiry.
//!
//! A single listener (no SO_REUSEPORT) makes "port taken" detection exact: a second server
//! cannot silently share the port.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use socket2::{Domain, Socket, Type};
use tokio::sync::mpsc;

use prefixkv_commands::keyspace;
use prefixkv_commands::state::Server;

/// Binds `bind:port`; when the port is taken and was not given explicitly, tries the next 100.
pub fn bind(bind: &str, port: u16, explicit: bool) -> anyhow::Result<TcpListener> {
    let host = if bind == "localhost" {
        "127.0.0.1"
    } else {
        bind
    };
    let mut candidate = port;
    loop {
        let address: SocketAddr = format!("{host}:{candidate}")
            .parse()
            .or_else(|_| format!("[{host}]:{candidate}").parse())
            .with_context(|| format!("'{bind}' is not an IP address"))?;
        let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        match socket.bind(&address.into()) {
            Ok(()) => {
                socket.listen(1024)?;
                return Ok(socket.into());
            }
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && !explicit
                    && port != 0
                    && candidate < port.saturating_add(100) =>
            {
                candidate += 1;
            }
            Err(error) => bail!("cannot listen on {address}: {error}"),
        }
    }
}

/// Starts the request threads and runs the accept loop (never returns normally).
pub fn run(server: Arc<Server>, listener: TcpListener, threads: usize) -> anyhow::Result<()> {
    let mut senders = Vec::with_capacity(threads);
    for index in 0..threads {
        let (sender, receiver) = mpsc::unbounded_channel::<(TcpStream, SocketAddr)>();
        senders.push(sender);
        let server = server.clone();
        std::thread::Builder::new()
            .name(format!("prefixkv-worker-{index}"))
            .spawn(move || worker(server, receiver, index == 0))
            .context("spawning a request thread")?;
    }
    let mut next = 0;
    for accepted in listener.incoming() {
        let stream = match accepted {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!("accept failed: {error}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        server
            .stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        let limit = server.settings.read().maxclients;
        if server.stats.connected.load(Ordering::Relaxed) >= limit {
            server
                .stats
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
            continue;
        }
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        server.stats.connected.fetch_add(1, Ordering::Relaxed);
        if senders[next % threads].send((stream, peer)).is_err() {
            bail!("request thread {} stopped", next % threads);
        }
        next += 1;
    }
    Ok(())
}

fn worker(
    server: Arc<Server>,
    mut receiver: mpsc::UnboundedReceiver<(TcpStream, SocketAddr)>,
    expiry: bool,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(keyspace::suspend_thread_session)
        .build()
        .expect("building a tokio runtime");
    runtime.block_on(async move {
        if expiry {
            let server = server.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                // A twentieth of the index per tick (at most `MAX_BUCKETS_PER_STEP`): every key
                // is looked at about every 2 s, as Redis's active expiry finds most expired keys
                // within that (expired keys are also removed when a command touches them). A
                // keyspace without expiring keys skips whole cycles (`expire_sweep`).
                let buckets = (server.keyspace.store.engine().index_buckets() / 20).max(1024);
                loop {
                    tick.tick().await;
                    // Keys created until the next tick start as accessed now (LRU: a clock in
                    // seconds; LFU: minutes), so a tick of 100 ms is precise enough.
                    server.keyspace.refresh_access_stamp();
                    let result = keyspace::with_session(&server.keyspace.store, |session| {
                        server.keyspace.expire_sweep(session, buckets)
                    });
                    if let Err(error) = result {
                        tracing::warn!("active expiry: {error}");
                    }
                    server.keyspace.notifier.flush(&server.pubsub);
                }
            });
        }
        while let Some((stream, peer)) = receiver.recv().await {
            if stream.set_nonblocking(true).is_err() {
                server.stats.connected.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => {
                    tokio::spawn(crate::connection::serve(
                        server.clone(),
                        stream,
                        peer.to_string(),
                    ));
                }
                Err(_) => {
                    server.stats.connected.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    });
    keyspace::end_thread_session();
}
