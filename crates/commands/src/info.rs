//! INFO text.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::keyspace::DATABASES;
use crate::settings::Durability;
use crate::state::Server;

/// Renders the INFO sections named by `section` (default/all/everything or one name).
pub fn render(server: &Server, section: Option<&str>) -> String {
    let wanted = section.unwrap_or("default");
    let all = matches!(wanted, "default" | "all" | "everything");
    let mut text = String::new();
    let settings = server.settings.read().clone();
    if all || wanted == "server" {
        let uptime = server.started.elapsed().as_secs();
        let _ = write!(
            text,
            "# Server\r\nredis_version:{}\r\nprefixkv_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\n\
             multiplexing_api:epoll\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\n\
             io_threads_active:{}\r\n\r\n",
            crate::REDIS_VERSION,
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::process::id(),
            server.host.port(),
            uptime / 86400,
            server.host.threads(),
        );
    }
    if all || wanted == "clients" {
        let _ = write!(
            text,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n\
             total_watched_keys:{}\r\n\r\n",
            server.stats.connected.load(Ordering::Relaxed),
            settings.maxclients,
            server.stats.blocked_clients.load(Ordering::Relaxed),
            server.keyspace.watches.registrations()
        );
    }
    if all || wanted == "memory" {
        write_memory(&mut text, server, &settings);
    }
    if all || wanted == "persistence" {
        let _ = write!(
            text,
            "# Persistence\r\nloading:0\r\ndurability:{}\r\ndurability_guarantee:{}\r\naof_enabled:{}\r\n",
            settings.durability.name(),
            settings.durability.statement(),
            settings.durability.uses_oplog() as u8,
        );
        // What was loaded and the checkpoints: the host's (it schedules them).
        server.host.info_persistence(&mut text);
        if let Some(log) = server.keyspace.store.log_status() {
            let _ = write!(
                text,
                "oplog_next_lsn:{}\r\noplog_durable_lsn:{}\r\noplog_oldest_lsn:{}\r\noplog_backend:{}\r\n",
                log.next_lsn,
                log.durable_lsn,
                log.oldest_lsn,
                log.backend.name()
            );
        }
        for mode in [
            Durability::None,
            Durability::Checkpoint,
            Durability::EverySec,
            Durability::Always,
        ] {
            let _ = write!(
                text,
                "durability_mode_{}:{}\r\n",
                mode.name(),
                mode.statement()
            );
        }
        text.push_str("\r\n");
    }
    if all || wanted == "stats" {
        let stats = &server.stats;
        let _ = write!(
            text,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\n\
             expired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\n\r\n",
            stats.connections_received.load(Ordering::Relaxed),
            stats.commands.load(Ordering::Relaxed),
            stats.rejected_connections.load(Ordering::Relaxed),
            server.keyspace.expired_keys.load(Ordering::Relaxed),
            server.evictor.evicted_keys.load(Ordering::Relaxed),
            stats.keyspace_hits.load(Ordering::Relaxed),
            stats.keyspace_misses.load(Ordering::Relaxed),
            stats.input_bytes.load(Ordering::Relaxed),
            stats.output_bytes.load(Ordering::Relaxed),
        );
    }
    if all || wanted == "keyspace" {
        text.push_str("# Keyspace\r\n");
        for db in 0..DATABASES as u8 {
            let keys = server.keyspace.dbsize(db);
            if keys > 0 {
                let expires = server.keyspace.expires_count(db);
                let _ = write!(text, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
            }
        }
        text.push_str("\r\n");
    }
    // As in Redis, these two are in `all` and `everything` but not in the default INFO.
    let every = matches!(wanted, "all" | "everything");
    if every || wanted == "commandstats" {
        write_commandstats(&mut text, server);
    }
    if every || wanted == "latencystats" {
        write_latencystats(&mut text, server);
    }
    text
}

/// The memory section: `crate::evict::memory`'s figures under Redis's names, and the engine's.
fn write_memory(text: &mut String, server: &Server, settings: &crate::settings::Settings) {
    use crate::evict::human;
    let memory = crate::evict::memory(server);
    let rss = crate::evict::rss_bytes();
    let fragmentation = if memory.used == 0 {
        0.0
    } else {
        rss as f64 / memory.used as f64
    };
    let _ = write!(
        text,
        "# Memory\r\nused_memory:{}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\n\
         used_memory_rss_human:{}\r\nused_memory_peak:{}\r\nused_memory_peak_human:{}\r\n\
         used_memory_overhead:{}\r\nused_memory_dataset:{}\r\nused_memory_lua:{}\r\n\
         number_of_cached_scripts:{}\r\nnumber_of_functions:{}\r\nnumber_of_libraries:{}\r\n\
         maxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\n\
         mem_fragmentation_ratio:{fragmentation:.2}\r\nengine_log_memory_budget:{}\r\n\
         engine_log_memory_in_use:{}\r\nengine_page_file_bytes:{}\r\n\r\n",
        memory.used,
        human(memory.used),
        human(rss),
        memory.peak,
        human(memory.peak),
        memory.overhead,
        memory.dataset,
        server.scripting.used_memory_lua(),
        server.scripting.cached_scripts(),
        server.scripting.function_counts().1,
        server.scripting.function_counts().0,
        settings.maxmemory_bytes,
        human(settings.maxmemory_bytes),
        settings.eviction.policy.name(),
        settings.engine_memory_bytes,
        memory.log_in_use,
        // Here, not in `evict::memory` (which every write checks against maxmemory): it lists
        // the page file's directory. 0 without the tier, or if the listing fails.
        server
            .keyspace
            .store
            .engine()
            .page_file_bytes()
            .unwrap_or(0),
    );
}

/// `cmdstat_<name>:calls=…,usec=…,usec_per_call=…,rejected_calls=…,failed_calls=…` for every
/// command that was called or rejected.
fn write_commandstats(text: &mut String, server: &Server) {
    text.push_str("# Commandstats\r\n");
    for (index, spec) in crate::commands::table::COMMANDS.iter().enumerate() {
        let counters = server.command_stats.command(index);
        let calls = counters.calls.load(Ordering::Relaxed);
        let rejected = counters.rejected_calls.load(Ordering::Relaxed);
        if calls == 0 && rejected == 0 {
            continue;
        }
        let usec = counters.usec.load(Ordering::Relaxed);
        let per_call = if calls == 0 {
            0.0
        } else {
            usec as f64 / calls as f64
        };
        let _ = write!(
            text,
            "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
             rejected_calls={rejected},failed_calls={}\r\n",
            spec.name,
            counters.failed_calls.load(Ordering::Relaxed)
        );
    }
    text.push_str("\r\n");
}

/// `latency_percentiles_usec_<name>:p50=…,p99=…,p99.9=…` for every command that ran.
fn write_latencystats(text: &mut String, server: &Server) {
    text.push_str("# Latencystats\r\n");
    for (index, spec) in crate::commands::table::COMMANDS.iter().enumerate() {
        let latency = &server.command_stats.command(index).latency;
        let (Some(p50), Some(p99), Some(p999)) = (
            latency.percentile(50.0),
            latency.percentile(99.0),
            latency.percentile(99.9),
        ) else {
            continue;
        };
        let _ = write!(
            text,
            "latency_percentiles_usec_{}:p50={p50}.000,p99={p99}.000,p99.9={p999}.000\r\n",
            spec.name
        );
    }
    text.push_str("\r\n");
}
