//! XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER, HELP), XACK and XPENDING.

use std::ops::ControlFlow;

use bytes::Bytes;

use super::ids::{parse_bound, parse_id, Missing, StreamId};
use super::object::{mark, Group, UNKNOWN_READ};
use super::pel::Loaded;
use super::{
    edit, no_group_for_key, no_key_or_group, parse_count, read, CommandError, CommandResult, Ctx,
};
use crate::commands::{lower, parse_int};

/// Redis's arity of each XGROUP subcommand (`xgroup|create` ...).
fn subcommand_arity(name: &str) -> Option<i64> {
    Some(match name {
        "create" | "setid" => -5,
        "destroy" => 4,
        "createconsumer" | "delconsumer" => 5,
        "help" => 2,
        _ => return None,
    })
}

/// Whether `len` arguments fit `arity` (Redis's convention).
pub(super) fn arity_fits(arity: i64, len: usize) -> bool {
    if arity >= 0 {
        len as i64 == arity
    } else {
        len as i64 >= -arity
    }
}

/// Redis's line for options a subcommand does not take.
pub(super) fn subcommand_syntax(command: &str, subcommand: &[u8]) -> CommandError {
    CommandError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(subcommand)
    ))
}

/// XGROUP subcommand ...
pub(in crate::commands) fn xgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    let Some(arity) = subcommand_arity(&sub) else {
        return Err(CommandError::unknown_subcommand("XGROUP", &args[1]));
    };
    if !arity_fits(arity, args.len()) {
        return Err(CommandError::arity(format!("xgroup|{sub}")));
    }
    if sub == "help" {
        ctx.w.help(&[
            "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
            "HELP",
            "    Prints this help.",
        ]);
        return Ok(());
    }
    let mut mkstream = false;
    let mut entries_read = UNKNOWN_READ;
    if sub == "create" || sub == "setid" {
        let mut i = 5;
        while i < args.len() {
            match lower(&args[i]).as_str() {
                "mkstream" if sub == "create" => {
                    mkstream = true;
                    i += 1;
                }
                "entriesread" if i + 1 < args.len() => {
                    entries_read = parse_int(&args[i + 1])?;
                    if entries_read < 0 && entries_read != UNKNOWN_READ {
                        return Err(CommandError::err(
                            "value for ENTRIESREAD must be positive or -1",
                        ));
                    }
                    i += 2;
                }
                _ => return Err(subcommand_syntax("XGROUP", &args[1])),
            }
        }
        if args.len() > 8 || (sub == "setid" && args.len() != 5 && args.len() != 7) {
            return Err(subcommand_syntax("XGROUP", &args[1]));
        }
    }
    let (key, group) = (&args[2], &args[3]);
    let keyspace = &ctx.server.keyspace;
    let db = ctx.db();
    let create = sub == "create" && mkstream;
    let done = edit(ctx, key, create, |edit, records| {
        let now = edit.now_ms;
        let stream = &mut edit.stream;
        let existing = Loaded::load(stream, records, group, keyspace, now)?;
        let needs_group = matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer");
        let Some(mut loaded) = existing else {
            if needs_group {
                return Err(no_group_for_key(key, group));
            }
            return match sub.as_str() {
                "create" => {
                    let id = match &args[4][..] {
                        b"$" => stream.last_id,
                        id => parse_id(id, Missing::SeqZero, true)?,
                    };
                    let new = Group::new(keyspace.new_object_id(), id, entries_read);
                    // The group first: a name too large for a record fails with nothing written.
                    stream.save_group(records, group, &new)?;
                    mark(records, new.pel.id)?;
                    Ok(Reply::Ok)
                }
                _ => Ok(Reply::Int(0)),
            };
        };
        let reply = match sub.as_str() {
            "create" => {
                // Redis parses the id before it looks for the group.
                if &args[4][..] != b"$" {
                    parse_id(&args[4], Missing::SeqZero, true)?;
                }
                return Err(CommandError::other(
                    "BUSYGROUP",
                    "Consumer Group name already exists",
                ));
            }
            "setid" => {
                let id = match &args[4][..] {
                    b"$" => stream.last_id,
                    id => parse_id(id, Missing::SeqZero, false)?,
                };
                loaded.group.last_id = id;
                loaded.group.entries_read = entries_read;
                Reply::Ok
            }
            "destroy" => {
                loaded.group.clear(records)?;
                stream.groups.remove(records, group)?;
                // Blocked XREADGROUP clients wake and answer NOGROUP, as in Redis.
                keyspace
                    .blocked
                    .ready_kind(db, key, crate::value::Kind::Stream);
                return Ok(Reply::Int(1));
            }
            "createconsumer" => {
                let created = loaded.create_consumer(records, &args[4]);
                return finish(
                    &mut loaded,
                    records,
                    edit,
                    created.map(|c| Reply::Int(c.into())),
                );
            }
            _ => {
                let deleted = loaded.delete_consumer(records, &args[4]);
                let reply = deleted.map(|pending| Reply::Int(pending.unwrap_or(0) as i64));
                return finish(&mut loaded, records, edit, reply);
            }
        };
        finish(&mut loaded, records, edit, Ok(reply))
    })?;
    match done {
        None => Err(CommandError::err(
            "The XGROUP subcommand requires the key to exist. Note that for CREATE you may \
             want to use the MKSTREAM option to create an empty stream automatically.",
        )),
        Some(Reply::Ok) => {
            ctx.w.ok();
            Ok(())
        }
        Some(Reply::Int(n)) => {
            ctx.w.int(n);
            Ok(())
        }
    }
}

enum Reply {
    Ok,
    Int(i64),
}

/// Writes a changed group back, also after a failed step (the `pel` module says why); the
/// step's error wins.
fn finish(
    loaded: &mut Loaded<'_>,
    records: &mut impl prefixkv_collections::Records,
    edit: &mut super::Edit,
    result: CommandResult<Reply>,
) -> CommandResult<Reply> {
    edit.dirty = true;
    let saved = loaded.save(records, &mut edit.stream);
    let reply = result?;
    saved?;
    Ok(reply)
}

/// XACK key group id [id ...]
pub(in crate::commands) fn xack(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let keyspace = &ctx.server.keyspace;
    let group = &args[2];
    let acked = edit(ctx, &args[1], false, |edit, records| {
        let Some(mut loaded) = Loaded::load(&edit.stream, records, group, keyspace, edit.now_ms)?
        else {
            return Ok(0);
        };
        // Redis checks the ids after the key and group, all before acknowledging any.
        let ids = args[3..]
            .iter()
            .map(|a| parse_id(a, Missing::SeqZero, true))
            .collect::<CommandResult<Vec<_>>>()?;
        let mut acked = 0;
        let mut result = Ok(());
        for id in &ids {
            match loaded.ack(records, *id) {
                Ok(true) => acked += 1,
                Ok(false) => {}
                Err(error) => {
                    result = Err(error);
                    break;
                }
            }
        }
        if acked > 0 || result.is_err() {
            edit.dirty = true;
            let saved = loaded.save(records, &mut edit.stream);
            result?;
            saved?;
        }
        Ok(acked)
    })?;
    ctx.w.int(acked.unwrap_or(0));
    Ok(())
}

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]
pub(in crate::commands) fn xpending(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return Err(CommandError::Syntax);
    }
    let (key, group) = (&args[1], &args[2]);
    let mut extended = None;
    if args.len() > 3 {
        let mut i = 3;
        let mut min_idle = 0u64;
        if lower(&args[3]) == "idle" {
            min_idle = parse_int(&args[4])?.max(0) as u64;
            i = 5;
            if args.len() < 8 {
                return Err(CommandError::Syntax);
            }
        }
        // Redis's order: the count, then the bounds.
        let count = parse_count(&args[i + 2])?;
        let start = parse_bound(&args[i], true)?;
        let end = parse_bound(&args[i + 1], false)?;
        let consumer = args.get(i + 3).cloned();
        extended = Some((min_idle, start, end, count, consumer));
    }
    let now = crate::keyspace::now_ms();
    let reply = read(ctx, key, |stream, records| {
        let Some(group) = stream.group(records, group)? else {
            return Ok(None);
        };
        let Some((min_idle, start, end, count, consumer)) = &extended else {
            return summary(&group, records).map(Pending::Summary).map(Some);
        };
        let mut rows = Vec::new();
        if *count == 0 || start > end {
            return Ok(Some(Pending::Rows(rows)));
        }
        let keep = |nack: super::object::Nack, rows: &mut Vec<_>| {
            if nack.id > *end {
                return ControlFlow::Break(());
            }
            let idle = now.saturating_sub(nack.delivered_ms);
            if idle >= *min_idle {
                rows.push((nack.id, nack.consumer, idle, nack.deliveries));
            }
            if rows.len() as u64 >= *count {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        match consumer {
            None => group.walk_pel(records, *start, |nack| keep(nack, &mut rows))?,
            Some(name) => {
                let Some(owner) = group.consumer(records, name)? else {
                    return Ok(Some(Pending::Rows(rows)));
                };
                // The consumer's own list, in bounded batches (the IDLE filter may skip many).
                let mut from = *start;
                'walk: loop {
                    let ids = owner.pending_from(records, from, *end, 256)?;
                    for id in &ids {
                        if let Some((_, nack)) = group.nack(records, *id)? {
                            if keep(nack, &mut rows).is_break() {
                                break 'walk;
                            }
                        }
                    }
                    match ids.last().and_then(|last| last.next()) {
                        Some(next) if ids.len() == 256 => from = next,
                        _ => break,
                    }
                }
            }
        }
        Ok(Some(Pending::Rows(rows)))
    })?;
    match reply.flatten() {
        None => return Err(no_key_or_group(key, group)),
        Some(Pending::Summary((count, edges, consumers))) => {
            ctx.w.array(4);
            ctx.w.int(count as i64);
            match edges {
                Some((first, last)) => {
                    ctx.w.stream_id(first);
                    ctx.w.stream_id(last);
                    ctx.w.array(consumers.len());
                    for (name, pending) in consumers {
                        ctx.w.array(2);
                        ctx.w.bulk(&name);
                        ctx.w.bulk(pending.to_string().as_bytes());
                    }
                }
                None => {
                    ctx.w.null();
                    ctx.w.null();
                    ctx.w.null_array();
                }
            }
        }
        Some(Pending::Rows(rows)) => {
            ctx.w.array(rows.len());
            for (id, consumer, idle, deliveries) in rows {
                ctx.w.array(4);
                ctx.w.stream_id(id);
                ctx.w.bulk(&consumer);
                ctx.w.int(idle as i64);
                ctx.w.int(deliveries as i64);
            }
        }
    }
    Ok(())
}

type Summary = (u64, Option<(StreamId, StreamId)>, Vec<(Vec<u8>, u64)>);

enum Pending {
    Summary(Summary),
    Rows(Vec<(StreamId, Vec<u8>, u64, u64)>),
}

/// XPENDING's summary: count, first and last ids, consumers with pending entries (by name).
fn summary(
    group: &Group,
    records: &mut impl prefixkv_collections::Records,
) -> CommandResult<Summary> {
    let edges = group.pel_edges(records)?;
    let consumers = group
        .all_consumers(records)?
        .into_iter()
        .filter(|(_, c)| !c.pel.is_empty())
        .map(|(name, c)| (name, c.pel.len()))
        .collect();
    Ok((group.pel.len(), edges, consumers))
}
