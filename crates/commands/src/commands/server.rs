//! Server and persistence commands: INFO, CONFIG, COMMAND, DBSIZE, FLUSHDB, FLUSHALL,
//! TIME, SHUTDOWN, SAVE, BGSAVE, LASTSAVE, BGREWRITEAOF, WAITAOF,
//! PREFIXKV.COMMITPOINT.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{lower, parse_int, table, AsyncOp, CommandError, CommandResult, Ctx, Flow};
use crate::keyspace::DATABASES;
use crate::settings::{parse_memory, parse_yes_no, Durability, Settings};

/// INFO [section].
pub(super) fn info(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let text = crate::info::render(ctx.server, args.get(1).map(|a| lower(a)).as_deref());
    ctx.w.verbatim(text.as_bytes());
    Ok(())
}

/// DBSIZE.
pub(super) fn dbsize(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    let size = ctx.server.keyspace.dbsize(ctx.db());
    ctx.w.int(size as i64);
    Ok(())
}

/// FLUSHDB [ASYNC|SYNC].
pub(super) fn flushdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    flush(ctx, args, db..db + 1)
}

/// FLUSHALL [ASYNC|SYNC].
pub(super) fn flushall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    flush(ctx, args, 0..DATABASES as u8)
}

/// FLUSHDB and FLUSHALL: empties `databases`.
fn flush(ctx: &mut Ctx<'_>, args: &[Bytes], databases: std::ops::Range<u8>) -> CommandResult {
    if args.len() > 2 || (args.len() == 2 && !matches!(lower(&args[1]).as_str(), "async" | "sync"))
    {
        return Err(CommandError::Syntax);
    }
    for db in databases {
        let mark = ctx.server.keyspace.flush_database(ctx.session, db)?;
        if mark.is_some() {
            ctx.client.note_write(mark);
        }
    }
    ctx.w.ok();
    Ok(())
}

/// TIME.
pub(super) fn time(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    ctx.w.array(2);
    ctx.w.bulk((micros / 1_000_000).to_string().as_bytes());
    ctx.w.bulk((micros % 1_000_000).to_string().as_bytes());
    Ok(())
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: the host's work, awaited by the connection.
pub(super) fn shutdown(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    let mut save = ctx.server.settings.read().durability == Durability::Checkpoint;
    for option in &args[1..] {
        match lower(option).as_str() {
            "save" => save = true,
            "nosave" => save = false,
            "now" | "force" => {}
            "abort" => return Err(CommandError::err("No shutdown in progress.")),
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(Flow::Async(AsyncOp::Shutdown { save }))
}

/// SAVE: the host's checkpoint, awaited by the connection.
pub(super) fn save(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult<Flow> {
    Ok(Flow::Async(AsyncOp::Save))
}

/// BGSAVE [SCHEDULE].
pub(super) fn bgsave(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args.len() > 2 || (args.len() == 2 && lower(&args[1]) != "schedule") {
        return Err(CommandError::Syntax);
    }
    if !ctx.server.host.start_background_save() {
        return Err(CommandError::err("Background save already in progress"));
    }
    ctx.w.simple("Background saving started");
    Ok(())
}

/// BGREWRITEAOF: a checkpoint too (the log needs no rewriting: checkpoints truncate it).
pub(super) fn bgrewriteaof(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args.len() > 1 {
        return Err(CommandError::Syntax);
    }
    if !ctx.server.host.start_background_save() {
        return Err(CommandError::err(
            "Background append only file rewriting already in progress",
        ));
    }
    ctx.w
        .simple("Background append only file rewriting started");
    Ok(())
}

/// LASTSAVE.
pub(super) fn lastsave(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    ctx.w.int(ctx.server.host.last_save_unix() as i64);
    Ok(())
}

/// WAITAOF numlocal numreplicas timeout: awaited by the connection.
pub(super) fn waitaof(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    let local = parse_int(&args[1])?;
    let replicas = parse_int(&args[2])?;
    let timeout = parse_int(&args[3])?;
    if timeout < 0 {
        return Err(CommandError::NegativeTimeout);
    }
    if local < 0 || replicas < 0 {
        return Err(CommandError::NotInteger);
    }
    if local > 0 && ctx.server.settings.read().durability == Durability::None {
        return Err(CommandError::err(
            "WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
        ));
    }
    if local > 1 {
        return Err(CommandError::err(
            "WAITAOF numlocal can only be 0 or 1 (one local store)",
        ));
    }
    Ok(Flow::Async(AsyncOp::WaitAof {
        timeout_ms: timeout as u64,
    }))
}

/// PREFIXKV.COMMITPOINT: this connection's writes and how many of them are durable.
pub(super) fn commitpoint(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    let (writes, durable) = ctx.client.commit_point(ctx.server, ctx.session);
    ctx.w.array(2);
    ctx.w.int(writes as i64);
    ctx.w.int(durable as i64);
    Ok(())
}

/// CONFIG GET's view: (name, value) for every parameter, the host's first.
fn parameters(config: &Settings, host: &dyn crate::host::Host) -> Vec<(&'static str, String)> {
    let own = vec![
        (
            "requirepass",
            config.requirepass.clone().unwrap_or_default(),
        ),
        ("maxclients", config.maxclients.to_string()),
        ("maxmemory", config.maxmemory_bytes.to_string()),
        (
            "notify-keyspace-events",
            crate::notify::format_flags(config.notify_keyspace_events),
        ),
        ("appendfsync", config.durability.name().into()),
        (
            "appendonly",
            if config.durability.uses_oplog() {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        ("save", String::new()),
        ("databases", DATABASES.to_string()),
        (
            "protected-mode",
            if config.protected_mode { "yes" } else { "no" }.into(),
        ),
        (
            "client-query-buffer-limit",
            config.client_query_buffer_limit_bytes.to_string(),
        ),
        (
            "client-output-buffer-limit",
            config.client_output_buffer_limit_bytes.to_string(),
        ),
        (
            "proto-max-bulk-len",
            config.proto_max_bulk_len_bytes.to_string(),
        ),
        (
            "slowlog-log-slower-than",
            config.slowlog_log_slower_than_us.to_string(),
        ),
        ("slowlog-max-len", config.slowlog_max_len.to_string()),
        (
            "busy-reply-threshold",
            config.busy_reply_threshold_ms.to_string(),
        ),
        ("lua-time-limit", config.busy_reply_threshold_ms.to_string()),
        (
            "lua-memory-limit",
            config.lua_memory_limit_bytes.to_string(),
        ),
    ];
    host.parameters()
        .into_iter()
        .chain(own)
        .chain(config.eviction.parameters())
        .chain(
            config
                .encoding_thresholds
                .iter()
                .map(|(name, value)| (*name, value.to_string())),
        )
        .collect()
}

/// SLOWLOG GET [count] | LEN | RESET | HELP.
pub(super) fn slowlog(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let stats = &ctx.server.command_stats;
    match (lower(&args[1]).as_str(), args.len()) {
        ("get", 2 | 3) => {
            let count = match args.get(2) {
                None => Some(10),
                Some(text) => match parse_int(text)? {
                    -1 => None,
                    n if n < 0 => {
                        return Err(CommandError::err(
                            "count should be greater than or equal to -1",
                        ))
                    }
                    n => Some(n as usize),
                },
            };
            let entries = stats.slow_entries(count);
            ctx.w.array(entries.len());
            for entry in &entries {
                ctx.w.array(6);
                ctx.w.int(entry.id as i64);
                ctx.w.int(entry.unix_seconds as i64);
                ctx.w.int(entry.duration_us as i64);
                ctx.w.array(entry.args.len());
                for arg in &entry.args {
                    ctx.w.bulk(arg);
                }
                ctx.w.bulk(entry.client_addr.as_bytes());
                ctx.w.bulk(entry.client_name.as_bytes());
            }
        }
        ("len", 2) => ctx.w.int(stats.slow_len() as i64),
        ("reset", 2) => {
            stats.slow_reset();
            ctx.w.ok();
        }
        ("help", 2) => {
            let lines = [
                "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
                "HELP",
                "    Print this help.",
            ];
            ctx.w.help(&lines);
        }
        (sub @ ("get" | "len" | "reset" | "help"), _) => {
            return Err(CommandError::arity(format!("slowlog|{sub}")))
        }
        _ => return Err(CommandError::unknown_subcommand("SLOWLOG", &args[1])),
    }
    Ok(())
}

pub(super) fn config(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    match sub.as_str() {
        "get" => {
            if args.len() < 3 {
                return Err(CommandError::arity("config|get"));
            }
            let all = parameters(&ctx.server.settings.read(), ctx.server.host.as_ref());
            let mut found: Vec<(&str, String)> = Vec::new();
            let mut alias_values: Vec<(String, String)> = Vec::new();
            for pattern in &args[2..] {
                // Redis's older `ziplist` names answer under the name asked for.
                let asked = String::from_utf8_lossy(pattern).to_ascii_lowercase();
                if let Some(canonical) = crate::settings::encoding_threshold_name(&asked) {
                    if canonical != asked {
                        let value = ctx.server.settings.read().encoding_threshold(canonical);
                        alias_values.push((asked, value.to_string()));
                    }
                }
                for (name, value) in &all {
                    if crate::glob::matches(pattern, name.as_bytes(), true)
                        && !found.iter().any(|(n, _)| n == name)
                    {
                        found.push((name, value.clone()));
                    }
                }
            }
            ctx.w.map(found.len() + alias_values.len());
            for (name, value) in found {
                ctx.w.bulk(name.as_bytes());
                ctx.w.bulk(value.as_bytes());
            }
            for (name, value) in alias_values {
                ctx.w.bulk(name.as_bytes());
                ctx.w.bulk(value.as_bytes());
            }
        }
        "set" => config_set(ctx, args)?,
        "resetstat" => {
            let stats = &ctx.server.stats;
            for counter in [
                &stats.commands,
                &stats.connections_received,
                &stats.rejected_connections,
                &stats.keyspace_hits,
                &stats.keyspace_misses,
                &stats.input_bytes,
                &stats.output_bytes,
            ] {
                counter.store(0, Ordering::Relaxed);
            }
            ctx.server.keyspace.expired_keys.store(0, Ordering::Relaxed);
            ctx.server.evictor.evicted_keys.store(0, Ordering::Relaxed);
            ctx.server.command_stats.reset();
            ctx.w.ok();
        }
        _ => return Err(CommandError::unknown_subcommand("CONFIG", &args[1])),
    }
    Ok(())
}

/// CONFIG SET name value [name value ...]: every pair is checked before any takes effect.
fn config_set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(CommandError::arity("config|set"));
    }
    let mut updated = ctx.server.settings.read().clone();
    let host_names: Vec<&str> = ctx
        .server
        .host
        .parameters()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for pair in args[2..].chunks(2) {
        let name = lower(&pair[0]);
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        let failed = |why: String| {
            CommandError::err(format!(
                "CONFIG SET failed (possibly related to argument '{name}') - {why}"
            ))
        };
        match name.as_str() {
            "requirepass" => updated.requirepass = (!value.is_empty()).then_some(value),
            "maxclients" => {
                updated.maxclients = value
                    .parse()
                    .map_err(|_| failed("argument couldn't be parsed into an integer".into()))?
            }
            "maxmemory" => {
                updated.maxmemory_bytes = parse_memory(&value).map_err(|e| failed(e.to_string()))?
            }
            "client-query-buffer-limit" => {
                updated.client_query_buffer_limit_bytes =
                    parse_memory(&value).map_err(|e| failed(e.to_string()))?
            }
            "client-output-buffer-limit" => {
                updated.client_output_buffer_limit_bytes =
                    parse_memory(&value).map_err(|e| failed(e.to_string()))?
            }
            "proto-max-bulk-len" => {
                updated.proto_max_bulk_len_bytes =
                    parse_memory(&value).map_err(|e| failed(e.to_string()))?
            }
            "protected-mode" => {
                updated.protected_mode = parse_yes_no(&value).map_err(|e| failed(e.to_string()))?
            }
            "slowlog-log-slower-than" => {
                updated.slowlog_log_slower_than_us = value
                    .parse()
                    .map_err(|_| failed("argument couldn't be parsed into an integer".into()))?
            }
            "slowlog-max-len" => {
                let len: u64 = value
                    .parse()
                    .map_err(|_| failed("argument couldn't be parsed into an integer".into()))?;
                if len > crate::settings::MAX_SLOWLOG_LEN {
                    return Err(failed(format!(
                        "argument must be between 0 and {}",
                        crate::settings::MAX_SLOWLOG_LEN
                    )));
                }
                updated.slowlog_max_len = len;
            }
            "busy-reply-threshold" | "lua-time-limit" => {
                updated.busy_reply_threshold_ms = value
                    .parse()
                    .map_err(|_| failed("argument couldn't be parsed into an integer".into()))?
            }
            "lua-memory-limit" => {
                let limit = parse_memory(&value).map_err(|e| failed(e.to_string()))?;
                if limit < crate::settings::MIN_LUA_MEMORY_LIMIT {
                    return Err(failed("argument must be at least 1mb".into()));
                }
                updated.lua_memory_limit_bytes = limit;
            }
            _ if crate::settings::encoding_threshold_name(&name).is_some() => {
                let canonical =
                    crate::settings::encoding_threshold_name(&name).expect("checked by the guard");
                let number: i64 = value
                    .parse()
                    .map_err(|_| failed("argument couldn't be parsed into an integer".into()))?;
                for (known, current) in &mut updated.encoding_thresholds {
                    if *known == canonical {
                        *current = number;
                    }
                }
            }
            "notify-keyspace-events" => {
                updated.notify_keyspace_events =
                    crate::notify::parse_flags(&value).ok_or_else(|| {
                        failed("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into())
                    })?
            }
            _ if crate::evict::settings::NAMES.contains(&name.as_str()) => {
                updated.eviction.set(&name, &value).map_err(failed)?
            }
            "save" | "appendonly" => {}
            "appendfsync" | "databases" => {
                return Err(failed("can't set immutable config".into()));
            }
            _ if host_names.contains(&name.as_str()) => {
                return Err(failed("can't set immutable config".into()));
            }
            _ => {
                return Err(CommandError::err(format!(
                    "Unknown option or number of arguments for CONFIG SET - '{}'",
                    String::from_utf8_lossy(&pair[0])
                )))
            }
        }
    }
    let stats = &ctx.server.command_stats;
    stats
        .slower_than_us
        .store(updated.slowlog_log_slower_than_us, Ordering::Relaxed);
    stats.set_max_len(updated.slowlog_max_len as usize);
    ctx.server
        .keyspace
        .notifier
        .set_flags(updated.notify_keyspace_events);
    crate::evict::apply_settings(ctx.server, &updated);
    *ctx.server.settings.write() = updated;
    ctx.w.ok();
    Ok(())
}

fn command_info(ctx: &mut Ctx<'_>, spec: &table::Spec) {
    ctx.w.array(10);
    ctx.w.bulk(spec.name.as_bytes());
    ctx.w.int(spec.arity);
    let flag = if spec.write { "write" } else { "readonly" };
    ctx.w.set(1);
    ctx.w.simple(flag);
    ctx.w.int(spec.first_key);
    ctx.w.int(spec.last_key);
    ctx.w.int(spec.step);
    ctx.w.set(0);
    ctx.w.set(0);
    ctx.w.array(0);
    ctx.w.array(0);
}

pub(super) fn command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = args.get(1).map(|a| lower(a));
    match sub.as_deref() {
        None => {
            ctx.w.array(table::COMMANDS.len());
            for spec in table::COMMANDS {
                command_info(ctx, spec);
            }
        }
        Some("count") => ctx.w.int(table::COMMANDS.len() as i64),
        Some("list") => {
            ctx.w.array(table::COMMANDS.len());
            for spec in table::COMMANDS {
                ctx.w.bulk(spec.name.as_bytes());
            }
        }
        Some("info") => {
            let specs: Vec<Option<&table::Spec>> = if args.len() == 2 {
                table::COMMANDS.iter().map(Some).collect()
            } else {
                args[2..].iter().map(|a| table::find(&lower(a))).collect()
            };
            ctx.w.array(specs.len());
            for spec in specs {
                match spec {
                    Some(spec) => command_info(ctx, spec),
                    None => ctx.w.null_array(),
                }
            }
        }
        Some("getkeys") => super::getkeys::command_getkeys(ctx, args)?,
        Some("docs") => {
            let specs: Vec<&table::Spec> = if args.len() == 2 {
                table::COMMANDS.iter().collect()
            } else {
                args[2..]
                    .iter()
                    .filter_map(|a| table::find(&lower(a)))
                    .collect()
            };
            ctx.w.map(specs.len());
            for spec in specs {
                ctx.w.bulk(spec.name.as_bytes());
                ctx.w.map(3);
                ctx.w.bulk(b"summary");
                ctx.w.bulk(spec.summary.as_bytes());
                ctx.w.bulk(b"since");
                ctx.w.bulk(b"1.0.0");
                ctx.w.bulk(b"group");
                ctx.w.bulk(spec.group.as_bytes());
            }
        }
        // The subcommand as lower-cased above (Redis echoes it as sent).
        Some(other) => {
            return Err(CommandError::unknown_subcommand(
                "COMMAND",
                other.as_bytes(),
            ));
        }
    }
    Ok(())
}
