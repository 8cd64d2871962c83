//! The Prometheus endpoint (`--metrics-port`): `GET /metrics` answers the text exposition format
//! (version 0.0.4) with the server's counters: commands, errors and latency quantiles per
//! command, checkpoints, the operation log's syncs and how far it is behind, memory, clients and
//! the keyspace.
//!
//! Invariants: one plain thread serves scrapes one at a time, so a scrape never takes a request
//! thread; every connection is bounded (a request head of at most [`MAX_REQUEST_BYTES`], read
//! and write timeouts of [`IO_TIMEOUT`]) and closed after one response, so a client that never
//! finishes its request delays the next scrape by at most the timeout and holds no memory
//! beyond that. Rendering reads counters only (atomics, and the locks INFO takes).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::persistence::Persistence;
use prefixkv_commands::commands::table::COMMANDS;
use prefixkv_commands::keyspace::DATABASES;
use prefixkv_commands::state::Server;

/// Largest request head read (request line and headers).
pub const MAX_REQUEST_BYTES: usize = 8 << 10;
/// Read and write timeout of one scrape connection.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `GET /metrics` on `listener` until the process ends.
pub fn serve(
    server: Arc<Server>,
    persistence: Arc<Persistence>,
    listener: TcpListener,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("prefixkv-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(error) = answer(&server, &persistence, stream) {
                            tracing::debug!("metrics scrape ended early: {error}");
                        }
                    }
                    Err(error) => tracing::warn!("metrics endpoint: accept failed: {error}"),
                }
            }
        })?;
    Ok(())
}

fn answer(
    server: &Server,
    persistence: &Persistence,
    mut stream: TcpStream,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_BYTES {
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..read]);
    }
    let request_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = request_line.split(|&b| b == b' ');
    let (method, path) = (words.next(), words.next());
    let (status, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => ("200 OK", render(server, persistence)),
        (Some(b"GET"), _) => (
            "404 Not Found",
            "only /metrics is served here\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "only GET is served here\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}

/// Reads one counter of a command.
type ReadCounter = fn(&prefixkv_commands::command_stats::CommandCounters) -> u64;

/// One metric family's header.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

/// A metric family with one unlabelled sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// The whole exposition.
pub fn render(server: &Server, persistence: &Persistence) -> String {
    let mut out = String::new();
    render_commands(&mut out, server);
    render_persistence(&mut out, persistence);
    render_server(&mut out, server);
    out
}

fn render_commands(out: &mut String, server: &Server) {
    let stats = &server.command_stats;
    let ran: Vec<usize> = (0..COMMANDS.len())
        .filter(|&i| {
            let c = stats.command(i);
            c.calls.load(Ordering::Relaxed) + c.rejected_calls.load(Ordering::Relaxed) > 0
        })
        .collect();
    let counters: [(&str, &str, ReadCounter); 3] = [
        (
            "prefixkv_commands_total",
            "Commands executed, by command.",
            |c| c.calls.load(Ordering::Relaxed),
        ),
        (
            "prefixkv_command_failed_total",
            "Commands that answered an error, by command.",
            |c| c.failed_calls.load(Ordering::Relaxed),
        ),
        (
            "prefixkv_command_rejected_total",
            "Commands refused before running (arity, authentication, OOM), by command.",
            |c| c.rejected_calls.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, read) in counters {
        family(out, name, "counter", help);
        for &i in &ran {
            let _ = writeln!(
                out,
                "{name}{{cmd=\"{}\"}} {}",
                COMMANDS[i].name,
                read(stats.command(i))
            );
        }
    }
    let name = "prefixkv_command_latency_seconds";
    family(out, name, "summary", "Command execution time, by command.");
    for &i in &ran {
        let counters = stats.command(i);
        let command = COMMANDS[i].name;
        for (quantile, percent) in [("0.5", 50.0), ("0.99", 99.0), ("0.999", 99.9)] {
            if let Some(us) = counters.latency.percentile(percent) {
                let _ = writeln!(
                    out,
                    "{name}{{cmd=\"{command}\",quantile=\"{quantile}\"}} {}",
                    us as f64 / 1e6
                );
            }
        }
        let usec = counters.usec.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_sum{{cmd=\"{command}\"}} {}", usec as f64 / 1e6);
        let calls = counters.calls.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_count{{cmd=\"{command}\"}} {calls}");
    }
}

fn render_persistence(out: &mut String, persistence: &Persistence) {
    let last = persistence.last_checkpoint.lock().clone();
    let now_s = prefixkv_commands::keyspace::now_ms() as f64 / 1000.0;
    let last_save_s = persistence.last_save_unix.load(Ordering::Relaxed) as f64;
    let rows: [(&str, &str, &str, f64); 7] = [
        ("prefixkv_checkpoints_total", "counter", "Checkpoints completed since start.",
            persistence.checkpoints_done.load(Ordering::Relaxed) as f64),
        ("prefixkv_checkpoint_in_progress", "gauge", "1 while a checkpoint runs.",
            f64::from(u8::from(persistence.checkpoint_running()))),
        ("prefixkv_last_checkpoint_failed", "gauge", "1 if the last checkpoint failed (INFO persistence names the error).",
            f64::from(u8::from(persistence.last_error.lock().is_some()))),
        ("prefixkv_last_checkpoint_duration_seconds", "gauge", "Duration of the last completed checkpoint.",
            last.as_ref().map_or(0.0, |c| c.duration_ms as f64 / 1000.0)),
        ("prefixkv_last_checkpoint_bytes", "gauge", "Bytes the last completed checkpoint wrote.",
            last.as_ref().map_or(0.0, |c| c.bytes as f64)),
        ("prefixkv_last_checkpoint_success_timestamp_seconds", "gauge", "Unix time of the last completed checkpoint (or of the start).",
            last_save_s),
        ("prefixkv_seconds_since_last_checkpoint", "gauge", "How old the newest checkpoint is: in the checkpoint mode, at most this much acknowledged writing can be lost.",
            (now_s - last_save_s).max(0.0)),
    ];
    for (name, kind, help, value) in rows {
        single(out, name, kind, help, value);
    }
    if let Some(log) = persistence.keyspace.store.log_status() {
        let stats = log.stats;
        let appended = log.next_lsn.saturating_sub(1);
        let rows: [(&str, &str, &str, f64); 4] = [
            ("prefixkv_oplog_records_written_total", "counter", "Operation-log records written.",
                stats.records_written as f64),
            ("prefixkv_oplog_syncs_total", "counter", "Operation-log data syncs.", stats.syncs as f64),
            ("prefixkv_oplog_sync_seconds_total", "counter", "Time in the calls that made operation-log data durable; over syncs_total, the mean sync latency.",
                stats.sync_time.as_secs_f64()),
            ("prefixkv_oplog_unsynced_records", "gauge", "Records appended but not yet durable (commit lag of the log).",
                appended.saturating_sub(log.durable_lsn) as f64),
        ];
        for (name, kind, help, value) in rows {
            single(out, name, kind, help, value);
        }
    }
}

fn render_server(out: &mut String, server: &Server) {
    let stats = &server.stats;
    let settings = server.settings.read().clone();
    let rows: [(&str, &str, &str, f64); 9] = [
        (
            "prefixkv_memory_used_bytes",
            "gauge",
            "Memory counted against maxmemory (INFO used_memory: live records, index, scripts).",
            prefixkv_commands::evict::used_memory(server) as f64,
        ),
        (
            "prefixkv_maxmemory_bytes",
            "gauge",
            "The maxmemory setting (0: none).",
            settings.maxmemory_bytes as f64,
        ),
        (
            "prefixkv_connected_clients",
            "gauge",
            "Open client connections.",
            stats.connected.load(Ordering::Relaxed) as f64,
        ),
        (
            "prefixkv_keyspace_hits_total",
            "counter",
            "Reads that found their key.",
            stats.keyspace_hits.load(Ordering::Relaxed) as f64,
        ),
        (
            "prefixkv_keyspace_misses_total",
            "counter",
            "Reads that found nothing.",
            stats.keyspace_misses.load(Ordering::Relaxed) as f64,
        ),
        (
            "prefixkv_expired_keys_total",
            "counter",
            "Keys removed by expiry.",
            server.keyspace.expired_keys.load(Ordering::Relaxed) as f64,
        ),
        (
            "prefixkv_evicted_keys_total",
            "counter",
            "Keys removed by the maxmemory policy (INFO evicted_keys).",
            server.evictor.evicted_keys.load(Ordering::Relaxed) as f64,
        ),
        (
            "prefixkv_net_input_bytes_total",
            "counter",
            "Bytes read from clients.",
            stats.input_bytes.load(Ordering::Relaxed) as f64,
        ),
        (
            "prefixkv_net_output_bytes_total",
            "counter",
            "Bytes written to clients.",
            stats.output_bytes.load(Ordering::Relaxed) as f64,
        ),
    ];
    for (name, kind, help, value) in rows {
        single(out, name, kind, help, value);
    }
    family(
        out,
        "prefixkv_keyspace_keys",
        "gauge",
        "Keys per database (expired ones not yet removed included, as DBSIZE).",
    );
    for db in 0..DATABASES as u8 {
        let keys = server.keyspace.dbsize(db);
        if keys > 0 {
            let _ = writeln!(out, "prefixkv_keyspace_keys{{db=\"{db}\"}} {keys}");
        }
    }
}
