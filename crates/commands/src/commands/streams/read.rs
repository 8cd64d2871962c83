//! XREAD and XREADGROUP, blocking or not.
//!
//! Two passes, as Redis's checks come before any reply: the first looks at every key (its type,
//! the group, what `$` stands for) and fails before anything is served; the second serves each
//! key in its own transaction. When nothing was served and BLOCK was given, the command returns
//! [`AsyncOp::Block`](crate::commands::AsyncOp) with itself to run again when an XADD wakes it,
//! its `$` ids replaced by the ids they stood for now (Redis: `$` is the last id when the client
//! blocked, not when it wakes).

use bytes::Bytes;
use prefixkv_resp::Protocol;

use super::ids::{parse_id, Missing, StreamId};
use super::object::Entry;
use super::pel::Loaded;
use super::{
    block, edit, no_group_readgroup, parse_count, read, CommandError, CommandResult, Ctx, Flow,
};
use crate::commands::{lower, parse_int};

/// What a key is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    /// Entries after this id.
    After(StreamId),
    /// XREADGROUP `>`: entries never delivered to the group.
    New,
}

/// One served stream: its key and items (an entry, or a pending id whose entry was deleted).
type Served = (Bytes, Items);

/// Served items: an entry, or a pending id whose entry was deleted.
type Items = Vec<(StreamId, Option<Entry>)>;

/// Parsed options.
struct Options {
    count: u64,
    block_ms: Option<u64>,
    group: Option<(Bytes, Bytes)>,
    noack: bool,
    streams_at: usize,
}

fn parse_options(args: &[Bytes], group_mode: bool) -> CommandResult<Options> {
    let mut options = Options {
        count: 0,
        block_ms: None,
        group: None,
        noack: false,
        streams_at: 0,
    };
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        match lower(&args[i]).as_str() {
            "block" if more > 0 => {
                let ms = parse_int(&args[i + 1])
                    .map_err(|_| CommandError::err("timeout is not an integer or out of range"))?;
                if ms < 0 {
                    return Err(CommandError::NegativeTimeout);
                }
                options.block_ms = Some(ms as u64);
                i += 2;
            }
            "count" if more > 0 => {
                options.count = parse_count(&args[i + 1])?;
                i += 2;
            }
            "streams" if more > 0 => {
                options.streams_at = i + 1;
                break;
            }
            "group" if more >= 2 => {
                if !group_mode {
                    return Err(CommandError::err(
                        "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                    ));
                }
                options.group = Some((args[i + 1].clone(), args[i + 2].clone()));
                i += 3;
            }
            "noack" if group_mode => {
                options.noack = true;
                i += 1;
            }
            _ => return Err(CommandError::Syntax),
        }
    }
    if options.streams_at == 0 {
        return Err(CommandError::Syntax);
    }
    if !(args.len() - options.streams_at).is_multiple_of(2) {
        let name = if group_mode { "xreadgroup" } else { "xread" };
        return Err(CommandError::err(format!(
            "Unbalanced '{name}' list of streams: for each stream key an ID or '$' must be specified."
        )));
    }
    if group_mode && options.group.is_none() {
        return Err(CommandError::err("Missing GROUP option for XREADGROUP"));
    }
    Ok(options)
}

/// XREAD [COUNT count] [BLOCK ms] STREAMS key ... id ..., and XREADGROUP GROUP group consumer
/// [COUNT count] [BLOCK ms] [NOACK] STREAMS key ... id ...
pub(super) fn xread(ctx: &mut Ctx<'_>, args: &[Bytes], group_mode: bool) -> CommandResult<Flow> {
    let options = parse_options(args, group_mode)?;
    let half = (args.len() - options.streams_at) / 2;
    let keys = &args[options.streams_at..options.streams_at + half];
    let id_args = &args[options.streams_at + half..];
    let group_name = options.group.as_ref().map(|(g, _)| g.clone());
    // First pass: types, groups and ids, before anything is served.
    let mut from = Vec::with_capacity(keys.len());
    for (key, id_arg) in keys.iter().zip(id_args) {
        let group = group_name.clone();
        let last = read(ctx, key, |stream, records| match &group {
            Some(name) => Ok(stream.group(records, name)?.map(|_| stream.last_id)),
            None => Ok(Some(stream.last_id)),
        });
        // Woken because the stream was overwritten by another type: a group reader answers
        // UNBLOCKED, a plain reader waits on, as in Redis.
        let last = match last {
            Err(CommandError::WrongType) if ctx.client.unblocking => None,
            other => other?,
        };
        let last = match (&group_name, last) {
            (Some(_), None) if ctx.client.unblocking => {
                return Err(CommandError::other(
                    "UNBLOCKED",
                    "the stream key no longer exists",
                ))
            }
            (Some(_), Some(None)) if ctx.client.unblocking => {
                return Err(CommandError::other(
                    "NOGROUP",
                    "the consumer group this client was blocked on no longer exists",
                ))
            }
            (Some(name), None | Some(None)) => return Err(no_group_readgroup(key, name)),
            (_, last) => last.flatten(),
        };
        from.push(match &id_arg[..] {
            b"$" if group_mode => {
                return Err(CommandError::err(
                    "The $ ID is meaningless in the context of XREADGROUP: you want to read the \
                     history of this consumer by specifying a proper ID, or use the > ID to get \
                     new messages. The $ ID would just return an empty result set.",
                ))
            }
            b"$" => From::After(last.unwrap_or(StreamId::MIN)),
            b">" if !group_mode => {
                return Err(CommandError::err(
                    "The > ID can be specified only when calling XREADGROUP using the GROUP \
                     <group> <consumer> option.",
                ))
            }
            b">" => From::New,
            id => From::After(parse_id(id, Missing::SeqZero, true)?),
        });
    }
    // Second pass: serve.
    let mut served: Vec<Served> = Vec::new();
    for (key, from) in keys.iter().zip(&from) {
        let items = match &options.group {
            None => serve_read(ctx, key, *from, options.count)?,
            Some((group, consumer)) => serve_group(
                ctx,
                key,
                group,
                consumer,
                *from,
                options.count,
                options.noack,
            )?,
        };
        if let Some(items) = items {
            served.push((key.clone(), items));
        }
    }
    if served.is_empty() {
        if let (Some(timeout_ms), false) = (options.block_ms, ctx.client.in_exec) {
            let mut rerun = args.to_vec();
            for (slot, from) in rerun[options.streams_at + half..].iter_mut().zip(&from) {
                if let From::After(id) = from {
                    *slot = Bytes::from(id.to_string());
                }
            }
            return Ok(block(ctx.db(), keys.to_vec(), timeout_ms, rerun));
        }
        ctx.w.null_array();
        return Ok(Flow::Continue);
    }
    let resp3 = ctx.client.protocol == Protocol::Resp3;
    if resp3 {
        ctx.w.map(served.len());
    } else {
        ctx.w.array(served.len());
    }
    for (key, items) in &served {
        if !resp3 {
            ctx.w.array(2);
        }
        ctx.w.bulk(key);
        ctx.w.array(items.len());
        for (id, entry) in items {
            match entry {
                Some(entry) => ctx.w.stream_entry(entry),
                None => {
                    ctx.w.array(2);
                    ctx.w.stream_id(*id);
                    ctx.w.null_array();
                }
            }
        }
    }
    Ok(Flow::Continue)
}

/// XREAD of one key: the entries after `from`, when there are some.
fn serve_read(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    from: From,
    count: u64,
) -> CommandResult<Option<Items>> {
    let From::After(after) = from else {
        unreachable!("XREAD never reads with >: the first pass refused it")
    };
    let entries = read(ctx, key, |stream, records| {
        match (stream.last_entry_id(records)?, after.next()) {
            (Some(last), Some(start)) if last > after => stream
                .range(records, start, StreamId::MAX, count, false)
                .map(Some),
            _ => Ok(None),
        }
    });
    let entries = match entries {
        // The first pass let a woken reader wait on a key of another type.
        Err(CommandError::WrongType) if ctx.client.unblocking => None,
        other => other?,
    };
    Ok(entries
        .flatten()
        .map(|entries| entries.into_iter().map(|e| (e.id, Some(e))).collect()))
}

/// XREADGROUP of one key: new entries (`>`), delivered and made pending, or the consumer's
/// pending entries after an id, delivered again.
fn serve_group(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    group: &[u8],
    consumer: &[u8],
    from: From,
    count: u64,
    noack: bool,
) -> CommandResult<Option<Items>> {
    let keyspace = &ctx.server.keyspace;
    let served = edit(ctx, key, false, |edit, records| {
        let now = edit.now_ms;
        let Some(mut loaded) = Loaded::load(&edit.stream, records, group, keyspace, now)? else {
            return Err(no_group_readgroup(key, group));
        };
        // `>` serves only when an entry after the group's last id is there (Redis compares the
        // last entry present, not the last id ever added).
        if from == From::New {
            let last = edit.stream.last_entry_id(records)?;
            if last.is_none_or(|last| last <= loaded.group.last_id) {
                return Ok(None);
            }
        }
        let result = deliver(edit, records, &mut loaded, consumer, from, count, noack);
        let saved = loaded.save(records, &mut edit.stream);
        edit.dirty = true;
        let items = result?;
        saved?;
        Ok(Some(items))
    })?;
    match served {
        Some(items) => Ok(items),
        // The key went away between the passes.
        None => Err(no_group_readgroup(key, group)),
    }
}

fn deliver(
    edit: &mut super::Edit,
    records: &mut prefixkv_collections::Owned<'_, '_>,
    loaded: &mut Loaded<'_>,
    consumer: &[u8],
    from: From,
    count: u64,
    noack: bool,
) -> CommandResult<Items> {
    loaded.touch_consumer(records, consumer)?;
    let stream = &edit.stream;
    match from {
        From::New => {
            let Some(start) = loaded.group.last_id.next() else {
                return Ok(Vec::new());
            };
            let entries = stream.range(records, start, StreamId::MAX, count, false)?;
            let first = stream.first_id(records)?;
            let mut items = Vec::with_capacity(entries.len());
            for entry in entries {
                stream.advance_group(first, &mut loaded.group, entry.id);
                if !noack {
                    loaded.deliver(records, entry.id, consumer)?;
                }
                items.push((entry.id, Some(entry)));
            }
            Ok(items)
        }
        From::After(after) => {
            let Some(start) = after.next() else {
                return Ok(Vec::new());
            };
            let owner = loaded
                .consumer(records, consumer)?
                .copied()
                .expect("touch_consumer made it");
            let ids = owner.pending_from(records, start, StreamId::MAX, count)?;
            let mut items = Vec::with_capacity(ids.len());
            for id in ids {
                let entry = stream.get(records, id)?;
                if entry.is_some() {
                    if let Some((rank, nack)) = loaded.group.nack(records, id)? {
                        let mut updated = nack.clone();
                        updated.delivered_ms = loaded.now_ms;
                        updated.deliveries += 1;
                        loaded.update(records, rank, &nack, &updated)?;
                    }
                }
                items.push((id, entry));
            }
            Ok(items)
        }
    }
}
